//! [`LogStore`]: openraft's log storage over a ringwal [`Wal`].

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError,
    StorageIOError, Vote,
};
use ringwal::{Config, Level, Lsn, Record, Ticket, Wal};

use crate::meta::{Meta, MetaFile};

/// The stream raft log entries are appended to.
pub const ENTRY_STREAM: u16 = 1;
/// The stream truncation records are appended to.
pub const TRUNCATE_STREAM: u16 = 2;
/// The stream committed log ids are appended to: the log id as JSON, in
/// the batch of the first append after `save_committed`. The last one in
/// the log is the committed log id recovered.
pub const COMMIT_STREAM: u16 = 3;
/// Name of the log's directory inside the store's directory.
pub const LOG_DIR: &str = "log";

type NodeIdOf<C> = <C as RaftTypeConfig>::NodeId;
type Result<T, C> = std::result::Result<T, StorageError<NodeIdOf<C>>>;

/// Why [`LogStore::try_open`] failed. The ringwal log's own error stays
/// typed, so that a caller can act on it: wait for another process's
/// store to close (`ringwal::Error::Locked`), or report damage with its
/// file and offset (`Corrupt`, `Gap`).
#[derive(Debug, thiserror::Error)]
pub enum OpenError<NID: openraft::NodeId> {
    /// Opening (and recovering) the ringwal log in `dir/log` failed.
    #[error("opening the raft log: {0}")]
    Wal(#[source] ringwal::Error),
    /// The store around the log: its directory, its metadata file, the
    /// replay, the completion thread.
    #[error(transparent)]
    Storage(#[from] StorageError<NID>),
}

impl<NID: openraft::NodeId> From<StorageIOError<NID>> for OpenError<NID> {
    fn from(e: StorageIOError<NID>) -> Self {
        OpenError::Storage(e.into())
    }
}

/// The in-memory view of the raft log: which LSN holds each raft index.
#[derive(Debug)]
struct Index<C: RaftTypeConfig> {
    /// Raft index -> LSN of the record holding that entry. Contiguous
    /// indexes, ascending LSNs.
    lsns: BTreeMap<u64, Lsn>,
    /// The log id of the entry at the highest index in `lsns`.
    last_log_id: Option<LogId<C::NodeId>>,
    /// The newest purge, as the metadata file holds it.
    last_purged: Option<LogId<C::NodeId>>,
    /// The record payloads of the newest entries appended since open
    /// (raft index -> payload): always a suffix of `lsns`, so that the
    /// replication and apply reads of recent entries decode them from
    /// memory instead of reading the log. At most `CACHE_ENTRIES` entries
    /// and `CACHE_BYTES` bytes.
    cache: BTreeMap<u64, Vec<u8>>,
    /// The bytes in `cache`.
    cache_bytes: usize,
}

/// The most entries the read cache holds.
const CACHE_ENTRIES: usize = 4096;
/// The most payload bytes the read cache holds.
const CACHE_BYTES: usize = 16 << 20;

impl<C: RaftTypeConfig> Index<C> {
    /// Forget every entry at `since` or above (a truncation, or an entry
    /// appended over them).
    fn cut_from(&mut self, since: u64) {
        self.lsns.split_off(&since);
        let cut = self.cache.split_off(&since);
        self.cache_bytes = self
            .cache_bytes
            .checked_sub(cut.values().map(Vec::len).sum::<usize>())
            .expect("the read cache held fewer bytes than its entries");
    }

    /// The index after the last entry, or after the last purged one when
    /// no entry is left: where openraft appends next. `None` for a store
    /// with neither, which takes any first index (openraft's own starts
    /// at 0; its conformance suite at 1).
    fn next_index(&self) -> Option<u64> {
        let last = self.lsns.last_key_value().map(|(&i, _)| i);
        let purged = self.last_purged.as_ref().map(|p| p.index);
        last.max(purged).map(|i| i + 1)
    }

    /// Assert, before anything of it is written, that an append of the
    /// entries `ids` leaves no hole: their indexes are consecutive, and
    /// the first is at most [`next_index`](Self::next_index). An append
    /// over entries the map holds is allowed (it replaces them); openraft
    /// truncates them first, so its own appends start exactly there.
    /// Cost: one compare per entry.
    fn check_append(&self, ids: &[LogId<C::NodeId>]) {
        let first = ids[0].index;
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(
                Some(id.index),
                first.checked_add(n as u64),
                "entry {n} of an append starting at index {first} is at index {}",
                id.index
            );
        }
        if let Some(next) = self.next_index() {
            assert!(
                first <= next,
                "an append at index {first} leaves a hole after index {}",
                next - 1
            );
        }
    }

    /// Map the entries `ids`, checked by [`check_append`](Self::check_append),
    /// to the LSNs from `first_lsn` on, replacing every entry at or above
    /// the first; keep their `payloads` in the read cache.
    fn append(&mut self, ids: &[LogId<C::NodeId>], first_lsn: Lsn, payloads: Vec<Vec<u8>>) {
        let first = ids[0].index;
        self.cut_from(first);
        if let Some((&i, &lsn)) = self.lsns.last_key_value() {
            assert!(
                lsn < first_lsn,
                "entry {first} at LSN {first_lsn}, not after entry {i} at LSN {lsn}"
            );
        }
        for (n, (id, payload)) in ids.iter().zip(payloads).enumerate() {
            self.lsns.insert(id.index, first_lsn + n as u64);
            self.cache(id.index, payload);
        }
        self.last_log_id = ids.last().cloned();
        self.check();
    }

    /// Whether the indexes above the last purged are dense (each from
    /// the lowest to the highest once). Entries at or below it are left
    /// out: openraft's engine never appends one, but its conformance
    /// suite does (below a purge its start-up helper made past the end
    /// of the log), and the store keeps what it is given. Cost: two
    /// lookups, and one step per such entry.
    fn dense(&self) -> bool {
        let (above, stale) = match &self.last_purged {
            Some(p) => (
                self.lsns
                    .range((Bound::Excluded(p.index), Bound::Unbounded)),
                self.lsns.range(..=p.index).count(),
            ),
            None => (self.lsns.range(..), 0),
        };
        let mut above = above.map(|(&i, _)| i);
        match (above.next(), above.next_back()) {
            (Some(first), Some(last)) => last - first + 1 == (self.lsns.len() - stale) as u64,
            _ => true,
        }
    }

    /// Assert what readers and the next append rely on: dense indexes
    /// ([`dense`](Self::dense)), the last log id that of the last entry
    /// (none without one), and the read cache a suffix of the map within
    /// its bounds. LSNs ascending with the indexes is kept by
    /// [`append`](Self::append), the only insert after the replay. Cost:
    /// a few lookups at the ends of the maps (and, in debug builds, a walk
    /// over the cache).
    fn check(&self) {
        assert!(
            self.dense(),
            "raft indexes not dense: {} entries from {:?} to {:?}, last purged {:?}",
            self.lsns.len(),
            self.lsns.first_key_value(),
            self.lsns.last_key_value(),
            self.last_purged.as_ref().map(|p| p.index)
        );
        let first = self.lsns.first_key_value().map(|(&i, _)| i);
        let last = self.lsns.last_key_value().map(|(&i, _)| i);
        assert_eq!(
            self.last_log_id.as_ref().map(|l| l.index),
            last,
            "the last log id is not the last entry's"
        );
        if let (Some((&cf, _)), Some((&cl, _))) =
            (self.cache.first_key_value(), self.cache.last_key_value())
        {
            assert!(
                first.is_some_and(|f| f <= cf) && last == Some(cl),
                "the read cache ({cf}..={cl}) is not a suffix of the log ({first:?}..={last:?})"
            );
            debug_assert!(
                self.cache.keys().eq(self.lsns.range(cf..).map(|(i, _)| i)),
                "the read cache misses an entry of the log after {cf}"
            );
        }
        assert!(
            self.cache.len() <= CACHE_ENTRIES && self.cache_bytes <= CACHE_BYTES,
            "the read cache over its bounds: {} entries, {} bytes",
            self.cache.len(),
            self.cache_bytes
        );
        debug_assert_eq!(
            self.cache_bytes,
            self.cache.values().map(Vec::len).sum::<usize>(),
            "the read cache's byte count"
        );
    }

    /// Keep `payload`, the entry at `index` just appended (the newest), in
    /// the read cache; drop the oldest beyond the bounds.
    fn cache(&mut self, index: u64, payload: Vec<u8>) {
        self.cache_bytes += payload.len();
        self.cache.insert(index, payload);
        while self.cache.len() > CACHE_ENTRIES || self.cache_bytes > CACHE_BYTES {
            match self.cache.pop_first() {
                Some((_, p)) => self.cache_bytes -= p.len(),
                None => break,
            }
        }
    }

    /// Forget every entry at `upto` or below (a purge).
    fn purge_to(&mut self, upto: u64) {
        self.lsns = match upto.checked_add(1) {
            Some(keep) => self.lsns.split_off(&keep),
            None => BTreeMap::new(),
        };
        let kept = match upto.checked_add(1) {
            Some(keep) => self.cache.split_off(&keep),
            None => BTreeMap::new(),
        };
        self.cache = kept;
        self.cache_bytes = self.cache.values().map(Vec::len).sum();
        if self.lsns.is_empty() {
            self.last_log_id = None;
        }
    }
}

/// What the store and its readers share: the log and the index.
struct Shared<C: RaftTypeConfig> {
    wal: Wal,
    index: Mutex<Index<C>>,
}

impl<C: RaftTypeConfig> Shared<C> {
    fn index(&self) -> MutexGuard<'_, Index<C>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entries whose index is in `range`, read from the log.
    async fn entries<RB: RangeBounds<u64>>(&self, range: RB) -> Result<Vec<C::Entry>, C> {
        let wanted: Vec<(u64, Lsn)> = {
            let index = self.index();
            let wanted: Vec<(u64, Lsn)> = match clamp(&range) {
                Some(r) => index.lsns.range(r).map(|(&i, &l)| (i, l)).collect(),
                None => Vec::new(),
            };
            // Recent entries: decoded from the cache, no read. (The cache
            // is a suffix of the index: if it has the first, it has all.)
            if wanted.iter().all(|(i, _)| index.cache.contains_key(i)) {
                return wanted
                    .iter()
                    .map(|&(i, lsn)| decode_payload::<C>(i, lsn, &index.cache[&i]))
                    .collect();
            }
            wanted
        };
        let Some(&(_, last)) = wanted.last() else {
            return Ok(Vec::new());
        };
        // An append returns before its records are written; a read of them
        // waits until they are (readable, not necessarily durable).
        if last > self.wal.written_lsn() {
            self.wal
                .wait_for(last, Level::Written)
                .await
                .map_err(|e| StorageIOError::read_logs(&e))?;
        }
        let mut out = Vec::with_capacity(wanted.len());
        if let [(i, lsn)] = wanted[..] {
            let rec = self
                .wal
                .read(lsn)
                .map_err(|e| StorageIOError::read_log_at_index(i, &e))?;
            out.push(decode_entry::<C>(i, &rec)?);
            return Ok(out);
        }
        // Several: one sequential reader from the first, skipping the
        // records in between that are not wanted (truncated entries,
        // truncation records).
        let (first_index, first) = wanted[0];
        let reader = self
            .wal
            .reader_from(first)
            .map_err(|e| StorageIOError::read_log_at_index(first_index, &e))?;
        let mut want = wanted.iter().peekable();
        for rec in reader {
            let Some(&&(i, lsn)) = want.peek() else { break };
            let rec = rec.map_err(|e| StorageIOError::read_log_at_index(i, &e))?;
            if rec.lsn < lsn {
                continue;
            }
            if rec.lsn > lsn {
                break;
            }
            out.push(decode_entry::<C>(i, &rec)?);
            want.next();
        }
        if let Some(&(i, lsn)) = want.next() {
            let msg = format!("raft log entry {i} (LSN {lsn}) is not in the log");
            return Err(
                StorageIOError::read_log_at_index(i, openraft::AnyError::error(msg)).into(),
            );
        }
        Ok(out)
    }
}

/// The part of `range` that can hold an index, as bounds a `BTreeMap`
/// accepts (it panics on an inverted range); `None` if it is empty.
fn clamp<RB: RangeBounds<u64>>(range: &RB) -> Option<(Bound<u64>, Bound<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e,
        Bound::Excluded(&e) => e.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (start <= end).then_some((Bound::Included(start), Bound::Included(end)))
}

/// An entry's record payload: its raft index (8 bytes, little-endian),
/// then the entry as JSON.
fn encode_entry<C: RaftTypeConfig>(entry: &C::Entry) -> Result<Vec<u8>, C> {
    let index = entry.get_log_id().index;
    let mut buf = index.to_le_bytes().to_vec();
    serde_json::to_writer(&mut buf, entry)
        .map_err(|e| StorageIOError::write_log_entry(entry.get_log_id().clone(), &e))?;
    Ok(buf)
}

/// The raft index of an entry record, without decoding the entry.
fn entry_index(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?))
}

fn decode_entry<C: RaftTypeConfig>(index: u64, rec: &Record) -> Result<C::Entry, C> {
    if rec.stream != ENTRY_STREAM {
        let msg = format!(
            "LSN {} holds no raft log entry {index} (stream {})",
            rec.lsn, rec.stream
        );
        return Err(
            StorageIOError::read_log_at_index(index, openraft::AnyError::error(msg)).into(),
        );
    }
    decode_payload::<C>(index, rec.lsn, &rec.payload)
}

/// The entry at `index` from its record payload (at `lsn`).
fn decode_payload<C: RaftTypeConfig>(index: u64, lsn: Lsn, payload: &[u8]) -> Result<C::Entry, C> {
    let bad = |msg: String| -> StorageError<C::NodeId> {
        StorageIOError::read_log_at_index(index, openraft::AnyError::error(msg)).into()
    };
    if entry_index(payload) != Some(index) {
        return Err(bad(format!("LSN {lsn} holds no raft log entry {index}")));
    }
    let entry: C::Entry = serde_json::from_slice(&payload[8..])
        .map_err(|e| bad(format!("LSN {lsn}: undecodable entry: {e}")))?;
    if entry.get_log_id().index != index {
        return Err(bad(format!("LSN {lsn} holds a different entry")));
    }
    Ok(entry)
}

/// One pending append: the ticket of its batch (`None` for an empty
/// append) and openraft's callback to fire once it is durable.
type Pending<C> = (Option<Ticket>, LogFlushed<C>);

/// The completion thread: fires the callbacks in append order, each once
/// its batch is durable. Ends when the store (the only sender) is gone.
fn flush_loop<C: RaftTypeConfig>(rx: Receiver<Pending<C>>) {
    for (ticket, callback) in rx {
        let done = match ticket {
            Some(t) => t.wait(Level::Durable).map_err(std::io::Error::other),
            None => Ok(()),
        };
        callback.log_io_completed(done);
    }
}

/// openraft's log storage ([`RaftLogStorage`]) over a ringwal [`Wal`].
///
/// Layout of its directory: the log in `log/` (a ringwal log, node and
/// segment size as configured: entries, truncations and committed log ids
/// on three streams), and the metadata file `raft-meta` (vote and last
/// purged log id; JSON in a CRC-framed checkpoint file replaced
/// atomically).
///
/// Guarantees:
///
/// - An append of several entries is one atomic ringwal batch: after any
///   crash all of them are in the log or none is. Its callback fires only
///   once the whole batch is durable, and callbacks fire in append order.
/// - The log is never rewritten. A truncation is a record of its own on
///   [`TRUNCATE_STREAM`], made durable before `truncate` returns; the
///   in-memory map raft index -> LSN is rebuilt on open by replaying the
///   log, to the same map (see the crate documentation for why that is
///   crash-safe).
/// - The committed log id is a record on [`COMMIT_STREAM`], written in the
///   batch of the next append after `save_committed` (which does no I/O).
///   After a crash the committed log id recovered may lag the one last
///   saved, never the log: its record comes after its entry.
/// - Vote and last purged log id are durable when
///   `save_vote` and `purge` return; `save_vote` first
///   waits for every earlier append to be durable, so the vote never gets
///   ahead of the log on disk.
///
/// Costs: one background thread (the completion thread, named
/// `ringwal-raft-flush`) besides ringwal's own; memory of two `u64` per
/// live entry plus `BTreeMap` overhead for the index.
pub struct LogStore<C: RaftTypeConfig> {
    shared: Arc<Shared<C>>,
    meta: MetaFile<C::NodeId>,
    /// The committed log id last saved (or recovered).
    committed: Option<LogId<C::NodeId>>,
    /// `committed` is newer than the last commit record appended: the
    /// next append carries it.
    commit_unwritten: bool,
    flush: Option<Sender<Pending<C>>>,
    flusher: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("wal", &self.shared.wal)
            .finish_non_exhaustive()
    }
}

impl<C: RaftTypeConfig> LogStore<C> {
    /// Open or create the store in `dir` (created if missing, and its
    /// entry in its parent directory made durable): open the
    /// ringwal log in `dir/log` with `cfg` (which recovers it), load the
    /// metadata file, and rebuild the index by replaying the log.
    ///
    /// Cost: ringwal's open (reads every segment once), then one more
    /// sequential read of the whole log to replay it (each entry's index is
    /// read from its first 8 bytes; no entry is decoded but the last); one
    /// point read of the last entry; starts the completion thread.
    /// Blocking.
    ///
    /// # Errors
    ///
    /// `StorageError` (a read error) if the log cannot be opened or holds
    /// damage recovery refuses, or the metadata file is damaged. The same
    /// failures, with ringwal's error kept typed: [`try_open`](Self::try_open).
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<Self, C> {
        Self::try_open(dir, cfg).map_err(|e| match e {
            OpenError::Wal(e) => StorageIOError::read(&e).into(),
            OpenError::Storage(e) => e,
        })
    }

    /// As [`open`](Self::open), but a failure of the ringwal log itself is
    /// [`OpenError::Wal`] with ringwal's typed error (e.g.
    /// `ringwal::Error::Locked` while another process holds the store).
    /// Cost: as `open`.
    pub fn try_open(
        dir: impl AsRef<Path>,
        cfg: Config,
    ) -> std::result::Result<Self, OpenError<NodeIdOf<C>>> {
        let dir = dir.as_ref();
        if !dir.exists() {
            // Durably: a store whose directory entry a power loss can take
            // away is no store. (ringwal makes `log/` durable in `dir`, and
            // the metadata file syncs `dir` for itself.)
            std::fs::create_dir_all(dir).map_err(|e| StorageIOError::write(&e))?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                ringwal::files::fsync_dir(parent).map_err(|e| StorageIOError::write(&e))?;
            }
        }
        let meta = MetaFile::<C::NodeId>::load(dir)?;
        let (wal, _report) = Wal::open(dir.join(LOG_DIR), cfg).map_err(OpenError::Wal)?;
        let (index, logged) = replay::<C>(&wal, meta.get().last_purged.clone())?;
        // Stores written before COMMIT_STREAM kept it in the metadata
        // file; it only ever grows, so the larger of the two.
        let committed = logged.max(meta.get().committed.clone());
        let shared = Arc::new(Shared {
            wal,
            index: Mutex::new(index),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let flusher = std::thread::Builder::new()
            .name("ringwal-raft-flush".into())
            .spawn(move || flush_loop::<C>(rx))
            .map_err(|e| StorageIOError::read(&e))?;
        Ok(LogStore {
            shared,
            meta,
            committed,
            commit_unwritten: false,
            flush: Some(tx),
            flusher: Some(flusher),
        })
    }

    /// The underlying log: for its statistics ([`Wal::stats`]) and health
    /// ([`Wal::poison_cause`]). Appending to it directly on the streams this
    /// store uses would corrupt the raft log. Cost: none.
    pub fn wal(&self) -> &Wal {
        &self.shared.wal
    }

    /// A reader sharing this store's log and index. Cost: one `Arc` clone.
    pub fn reader(&self) -> LogReader<C> {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    fn save_meta(&mut self, change: impl FnOnce(&mut Meta<C::NodeId>)) -> Result<(), C> {
        let mut next = self.meta.get().clone();
        change(&mut next);
        self.meta.store(next)
    }

    /// The commit record to carry in the next batch, if `committed` is
    /// newer than the last one appended.
    fn unwritten_commit(&self) -> Result<Option<Vec<u8>>, C> {
        match &self.committed {
            Some(c) if self.commit_unwritten => {
                let bytes = serde_json::to_vec(c).map_err(|e| StorageIOError::write(&e))?;
                Ok(Some(bytes))
            }
            _ => Ok(None),
        }
    }

    fn pending(&self, item: Pending<C>) {
        // The thread only ends once the sender is dropped (in `drop`), so
        // the send cannot fail while the store lives.
        if let Some(tx) = &self.flush {
            let _ = tx.send(item);
        }
    }
}

impl<C: RaftTypeConfig> Drop for LogStore<C> {
    /// Appends the committed log id if no batch carried it yet (the log
    /// writes it as it closes), lets the completion thread fire the
    /// callbacks still pending (each once its batch is durable, or with
    /// the error that poisoned the log), then joins it. Blocks for at most
    /// the writes in flight.
    fn drop(&mut self) {
        // A failure here loses nothing a caller counted on: the record is
        // optional (see `save_committed`).
        if let Ok(Some(bytes)) = self.unwritten_commit() {
            let _ = self.shared.wal.append(COMMIT_STREAM, &bytes);
        }
        drop(self.flush.take());
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
    }
}

/// The index the log holds: replay every record from the oldest kept, in
/// LSN order, applying each entry record (which also drops any entry at
/// or above its index) and each truncation record, then drop what
/// `last_purged` covers. Also the committed log id of the last commit
/// record, if any.
#[allow(clippy::type_complexity)]
fn replay<C: RaftTypeConfig>(
    wal: &Wal,
    last_purged: Option<LogId<C::NodeId>>,
) -> Result<(Index<C>, Option<LogId<C::NodeId>>), C> {
    let mut index = Index::<C> {
        cache: BTreeMap::new(),
        cache_bytes: 0,
        lsns: BTreeMap::new(),
        last_log_id: None,
        last_purged,
    };
    let read =
        |e: &ringwal::Error| -> StorageError<C::NodeId> { StorageIOError::read_logs(e).into() };
    let mut last_commit: Option<Record> = None;
    for rec in wal.reader_from(0).map_err(|e| read(&e))? {
        let rec = rec.map_err(|e| read(&e))?;
        if rec.kind != ringwal::Kind::Data {
            continue;
        }
        let index_of = |rec: &Record| -> Result<u64, C> {
            entry_index(&rec.payload).ok_or_else(|| {
                let msg = format!("LSN {}: record too short for a raft index", rec.lsn);
                StorageIOError::read_logs(openraft::AnyError::error(msg)).into()
            })
        };
        match rec.stream {
            ENTRY_STREAM => {
                let i = index_of(&rec)?;
                index.cut_from(i);
                index.lsns.insert(i, rec.lsn);
            }
            TRUNCATE_STREAM => {
                index.cut_from(index_of(&rec)?);
            }
            // Decoded once, the last: committed only grows.
            COMMIT_STREAM => last_commit = Some(rec),
            _ => {}
        }
    }
    if let Some(p) = index.last_purged.as_ref().map(|p| p.index) {
        index.purge_to(p);
    }
    // Each entry record cut what was at or above it before it went in,
    // so the LSNs ascend with the indexes. Density is what this store's
    // appends kept (see `Index::check_append`); a log without it was not
    // written by them, and is refused rather than served with a hole.
    if !index.dense() {
        let msg = format!(
            "the raft log replays to {} entries from {:?} to {:?}: a hole",
            index.lsns.len(),
            index.lsns.first_key_value().map(|(&i, _)| i),
            index.lsns.last_key_value().map(|(&i, _)| i)
        );
        return Err(StorageIOError::read_logs(openraft::AnyError::error(msg)).into());
    }
    if let Some((&i, &lsn)) = index.lsns.last_key_value() {
        let rec = wal
            .read(lsn)
            .map_err(|e| StorageIOError::read_log_at_index(i, &e))?;
        index.last_log_id = Some(decode_entry::<C>(i, &rec)?.get_log_id().clone());
    }
    index.check();
    let committed = match last_commit {
        None => None,
        Some(rec) => Some(serde_json::from_slice(&rec.payload).map_err(|e| {
            let msg = format!("LSN {}: undecodable committed log id: {e}", rec.lsn);
            StorageError::from(StorageIOError::read_logs(openraft::AnyError::error(msg)))
        })?),
    };
    Ok((index, committed))
}

/// A reader of the raft log ([`RaftLogReader`]), for openraft's
/// replication tasks: shares the store's log and index. `Clone`, `Send`,
/// `Sync`; reads run concurrently with the store's writes.
///
/// A read of entries purged meanwhile fails (ringwal's `Released`) rather than
/// returning them.
pub struct LogReader<C: RaftTypeConfig> {
    shared: Arc<Shared<C>>,
}

impl<C: RaftTypeConfig> Clone for LogReader<C> {
    fn clone(&self) -> Self {
        LogReader {
            shared: self.shared.clone(),
        }
    }
}

impl<C: RaftTypeConfig> Debug for LogReader<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("wal", &self.shared.wal)
            .finish_non_exhaustive()
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogReader<C> {
    /// The entries whose index is in `range` (missing ones are left out).
    ///
    /// Cost: one short lock to look the LSNs up. Entries all in the read
    /// cache (the newest appended since open, up to 4096 entries and
    /// 16 MiB): one JSON decode each under that lock, no I/O. Otherwise, if
    /// the newest is not yet written, an await until it is; then one point
    /// read ([`Wal::read`]) for a single entry, or one sequential reader
    /// from the first LSN for several: blocking file reads on the calling
    /// task, one allocation and one JSON decode per entry.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, C> {
        self.shared.entries(range).await
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogStore<C> {
    /// As [`LogReader`]'s.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, C> {
        self.shared.entries(range).await
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C> {
    type LogReader = LogReader<C>;

    /// The last purged log id and the last log id (the last entry's, or
    /// the last purged one when no entry is left). Cost: one short lock;
    /// no I/O.
    async fn get_log_state(&mut self) -> Result<LogState<C>, C> {
        let index = self.shared.index();
        Ok(LogState {
            last_purged_log_id: index.last_purged.clone(),
            last_log_id: index
                .last_log_id
                .clone()
                .or_else(|| index.last_purged.clone()),
        })
    }

    /// A [`LogReader`] sharing this store. Cost: one `Arc` clone.
    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    /// Wait until every entry appended so far is durable, then write the
    /// vote to the metadata file, durably. Cost: that wait (nothing when
    /// no write is in flight), then a rewrite of the metadata file (a
    /// create, a write, an fdatasync, a rename and a directory fsync).
    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), C> {
        self.shared
            .wal
            .sync_async()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        let vote = vote.clone();
        self.save_meta(|m| m.vote = Some(vote))
    }

    /// The vote last saved. Cost: none (it is kept in memory).
    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, C> {
        Ok(self.meta.get().vote.clone())
    }

    /// Keep the committed log id in memory; the next [`append`] writes it
    /// as a record on [`COMMIT_STREAM`] in its own batch (and dropping the
    /// store writes it if no append came). openraft documents the saved
    /// committed log id as optional: one that lags after a crash only
    /// means more entries re-applied at startup. It never gets ahead of
    /// the log: the record follows, in LSN order, every entry appended
    /// before this call, and ringwal makes a prefix durable.
    ///
    /// Cost: none (no I/O, no allocation).
    ///
    /// [`append`]: RaftLogStorage::append
    async fn save_committed(&mut self, committed: Option<LogId<C::NodeId>>) -> Result<(), C> {
        if self.committed != committed {
            self.commit_unwritten = committed.is_some();
            self.committed = committed;
        }
        Ok(())
    }

    /// The committed log id last saved (recovered on open from the last
    /// record on [`COMMIT_STREAM`]). Cost: none (kept in memory).
    async fn read_committed(&mut self) -> Result<Option<LogId<C::NodeId>>, C> {
        Ok(self.committed.clone())
    }

    /// Append `entries` as one atomic ringwal batch on [`ENTRY_STREAM`]
    /// and return at once; `callback` fires on the completion thread once
    /// the batch is durable (callbacks in append order). The batch starts
    /// with the committed log id's record when `save_committed` changed it
    /// since the last one. The entries are
    /// readable when this returns (from the read cache, which keeps the
    /// newest entries' payloads; past it, a read waits for their write).
    ///
    /// An entry at an index the log already holds replaces it and every
    /// entry after it (as a truncation would; openraft truncates first).
    ///
    /// Cost: one JSON encode and one allocation per entry (the encoded
    /// payload, kept in the read cache), and one for the commit record if
    /// any; one `append_batch` (one lock, one
    /// copy per entry; blocks only under backpressure from the device), one
    /// short lock on the index and one channel send. No syscall of its own.
    ///
    /// # Errors
    ///
    /// A write error if an entry cannot be encoded, or the batch is
    /// refused (`TooLarge`: more than one segment's worth; the log is
    /// poisoned). Nothing is appended then.
    ///
    /// # Panics
    ///
    /// If the entries' indexes are not consecutive, or the first is past
    /// the index after the last entry (or after the last purged one when
    /// none is left): a hole, which openraft never asks for.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut ids = Vec::new();
        let mut payloads = Vec::new();
        for entry in entries {
            payloads.push(encode_entry::<C>(&entry)?);
            ids.push(entry.get_log_id().clone());
        }
        if ids.is_empty() {
            // Nothing to write; still fired after every earlier append.
            self.pending((None, callback));
            return Ok(());
        }
        // Before the batch is written: a replay would rebuild whatever
        // it holds.
        self.shared.index().check_append(&ids);
        let commit = self.unwritten_commit()?;
        let records: Vec<(u16, &[u8])> = commit
            .iter()
            .map(|c| (COMMIT_STREAM, c.as_slice()))
            .chain(payloads.iter().map(|p| (ENTRY_STREAM, p.as_slice())))
            .collect();
        let ticket = self
            .shared
            .wal
            .append_batch(&records)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.commit_unwritten = false;
        {
            // The entries are the batch's last records (a commit record,
            // if any, comes first); the first record of a log is LSN 1.
            let first_lsn = (ticket.lsn() + 1)
                .checked_sub(ids.len() as u64)
                .filter(|&l| l > u64::from(commit.is_some()))
                .expect("a batch's last LSN counts all of its records");
            drop(records);
            self.shared.index().append(&ids, first_lsn, payloads);
        }
        self.pending((Some(ticket), callback));
        Ok(())
    }

    /// Remove the entries at `log_id.index` and above: append a
    /// truncation record on [`TRUNCATE_STREAM`], drop them from the index,
    /// and wait for the record to be durable. Nothing is written when no
    /// entry is at or above the index.
    ///
    /// Cost: one 8-byte append and a wait for it to be durable; one point
    /// read (the new last entry, for its log id).
    ///
    /// # Panics
    ///
    /// If `log_id.index` is at or below the last purged index: openraft
    /// truncates only uncommitted entries, and purges only committed ones.
    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), C> {
        let since = log_id.index;
        {
            let index = self.shared.index();
            // openraft truncates only entries after the committed one,
            // and purges only committed ones.
            if let Some(p) = &index.last_purged {
                assert!(
                    since > p.index,
                    "a truncation at index {since} reaches purged entries (last purged {})",
                    p.index
                );
            }
            if index.lsns.range(since..).next().is_none() {
                return Ok(());
            }
        }
        let ticket = self
            .shared
            .wal
            .append(TRUNCATE_STREAM, &since.to_le_bytes())
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let last = {
            let mut index = self.shared.index();
            index.cut_from(since);
            index.lsns.last_key_value().map(|(&i, &l)| (i, l))
        };
        ticket
            .reached(Level::Durable)
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let last_log_id = match last {
            None => None,
            Some((i, _)) => {
                let entry = self.shared.entries(i..=i).await?;
                entry.first().map(|e| e.get_log_id().clone())
            }
        };
        let mut index = self.shared.index();
        index.last_log_id = last_log_id;
        assert!(
            index.lsns.range(since..).next().is_none(),
            "entries at or above {since} survived their truncation"
        );
        index.check();
        Ok(())
    }

    /// Purge the entries up to `log_id.index`: record `log_id` as the last
    /// purged in the metadata file (durably), drop them from the index,
    /// then let ringwal remove the segments whose every record is at or
    /// below the LSN of the last purged entry ([`Wal::checkpoint`]: whole
    /// segments only, so some purged entries may stay on disk, unread).
    ///
    /// Cost: a rewrite of the metadata file; one unlink or rename per
    /// removed segment and a directory fsync. Nothing for a purge no newer
    /// than the last.
    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), C> {
        if self.meta.get().last_purged >= Some(log_id.clone()) {
            return Ok(());
        }
        let purged = log_id.clone();
        self.save_meta(|m| m.last_purged = Some(purged))?;
        // The purge may pass the last entry: openraft purges across it
        // when it installs a snapshot newer than the log.
        let cut = {
            let mut index = self.shared.index();
            let cut = index
                .lsns
                .range(..=log_id.index)
                .next_back()
                .map(|(_, &l)| l);
            index.purge_to(log_id.index);
            index.last_purged = Some(log_id);
            // The checkpoint removes every segment whose records are all
            // at or below `cut`: no entry kept may be among them.
            if let (Some(cut), Some((&i, &lsn))) = (cut, index.lsns.first_key_value()) {
                assert!(
                    cut < lsn,
                    "the purge's checkpoint at LSN {cut} would remove entry {i} at LSN {lsn}"
                );
            }
            index.check();
            cut
        };
        if let Some(lsn) = cut {
            self.shared
                .wal
                .checkpoint(lsn)
                .map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KvConfig;
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, Entry, EntryPayload};

    fn config() -> Config {
        Config::builder()
            .segment_bytes(1 << 20)
            .max_record_bytes(64 << 10)
            .write_bytes(64 << 10)
            .build()
    }

    fn entry(index: u64) -> Entry<KvConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// An append past the next index would leave a hole readers and
    /// openraft take for a log that ends before it: refused before the
    /// batch reaches the log.
    #[test]
    #[should_panic(expected = "leaves a hole after index 2")]
    fn an_append_past_the_next_index_panics() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::<KvConfig>::open(dir.path(), config()).unwrap();
        block_on(async {
            store.blocking_append((0..3).map(entry)).await.unwrap();
            store.blocking_append([entry(4)]).await.unwrap();
        });
    }

    /// A log whose entries replay with a hole was not written by this
    /// store's appends: open refuses it rather than serve the hole.
    #[test]
    fn a_log_that_replays_with_a_hole_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (wal, _) = Wal::open(dir.path().join(LOG_DIR), config()).unwrap();
            for i in [0, 1, 3] {
                let payload = encode_entry::<KvConfig>(&entry(i)).unwrap();
                let ticket = wal.append(ENTRY_STREAM, &payload).unwrap();
                ticket.wait(Level::Durable).unwrap();
            }
        }
        let err = LogStore::<KvConfig>::open(dir.path(), config()).unwrap_err();
        assert!(format!("{err:?}").contains("a hole"), "{err:?}");
    }
}
