//! Streams for collectors: pending sets, block watermarks, replay that
//! converges, and truncation of what published blocks cover.
//!
//! A collector appends export bodies to the log, hands each body to a
//! flusher shard, and the shards batch bodies into *blocks* that they
//! publish durably somewhere else (a directory, an object store). Each
//! block names an exclusive *watermark*: every LSN of its stream below it
//! is inside some published block. After a crash the collector reads the
//! watermarks back from the published block names and replays every frame
//! at or above its stream's watermark; once the shards publish the replayed
//! frames, the log can drop whole segments below the smallest watermark.
//!
//! The hard part is choosing a watermark when several shards of one stream
//! publish out of LSN order. [`Collector`] keeps, per tracked stream, the
//! set of LSNs handed out and not yet published (the *pending* set). A
//! block's watermark is the oldest pending LSN that the block does not
//! hold, or, when the block holds the last pending ones, one past
//! everything handed out. It can be too low (a shard holding an old frame
//! pins its siblings; a replay re-ingests a frame a block already has),
//! never too high (which would lose a frame).
//!
//! Invariants, and where they are kept:
//!
//! 1. **The pending set is as ordered as LSN assignment.** LSNs are
//!    inserted by the `append_then` hook, which runs under the engine's
//!    reservation lock. Lock order: reservation, then one stream's pending
//!    lock; nothing here calls the log while holding a pending lock.
//! 2. **"Everything handed out" is never overstated.** The hook stores the
//!    LSN it inserted in an atomic *after* releasing the pending lock, so a
//!    reader holding a pending lock that sees `handed = h` also sees every
//!    tracked LSN up to `h` in its set (hooks run one at a time, in LSN
//!    order). The log's own next LSN would be wrong here: it moves before
//!    the hook runs.
//! 3. **A replay in progress caps every watermark** at the first frame it
//!    has not yet put back among the pending ([`Collector::replay`]), so a
//!    block sealed during the replay cannot claim a frame the replay has not
//!    reached. Until the replay finishes the cap stays, and watermarks stay
//!    low: a collector that never replays pins truncation, it does not lose.
//! 4. **LSNs never run below a published watermark.** A shard may publish a
//!    frame that never reached the disk (it is handed over at `Accepted`);
//!    after a crash the log would give that LSN to a new record, which a
//!    watermark already claims. [`Collector::open`] therefore burns LSNs up
//!    to the highest watermark with empty records on [`FILLER_STREAM`].
//! 5. **Truncation is clamped** to the live coverage ([`Collector::covered`]),
//!    so no argument to [`Collector::truncate`] can delete a tracked frame
//!    that is still pending.
//!
//! # Durability as a collector needs it
//!
//! Acknowledge at `Written` and let the log sync in the background:
//! `Config::builder().durability(Durability::Deferred { sync_interval: Some(d) })`.
//! A `Written` record survives a process crash (its write has completed });
//! a power loss can take what was written since the last sync, so `d`
//! bounds the exposure. The ring thread syncs on that interval only when
//! something was written since its last sync (a quiet collector syncs
//! nothing), and syncs a segment it rolls away from itself before the
//! next segment gets its first write: only the newest segment may be torn
//! by a power loss, which is what lets recovery tell a torn tail from
//! damage. So the records appended right after a roll wait for that one
//! sync (measured with 4 MiB segments and one producer: p50 0.66-0.79 ms
//! and p99 9-11 ms against 0.15 ms and 2 ms for the rest); every other
//! acknowledgement at `Written` waits for no sync. Larger segments make
//! rolls, and so these waits, rarer.
//!
//! What one sync costs, measured with `ringwal bench` (release build, one
//! producer, 1 KiB records, three 3 s runs, on the 2-core development VM
//! with a virtio disk and ext4, shared with other work, hence the ranges):
//! each record acknowledged at `Durable` (one `RWF_DSYNC` write each) took
//! 0.5–1.0 ms on average (p50 0.1 ms, p99 4–5 ms), with write + `fdatasync`
//! 0.7–1.0 ms (p99 8 ms), against 0.1 ms at `Written` (p50 0.05 ms, p99
//! 0.7–1.9 ms). So one sync costs about 0.4–0.9 ms on average, with a tail
//! of 4–8 ms: paid once per interval in the background instead of once per
//! acknowledgement.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use ringwal_platform::{RealFs, Vfs};

use crate::at_rest::format::Kind;
use crate::config::{Config, Level};
use crate::error::{Error, Lsn, Result};
use crate::read::reader::Reader;
use crate::segment::set::LogDir;
use crate::wal::Wal;
use crate::write::ticket::{AppendFuture, Ticket};

/// The stream [`Collector::open`] writes its LSN fillers to (empty
/// payloads). It cannot be tracked, and both replays skip it.
pub const FILLER_STREAM: u16 = u16::MAX;

/// "No replay in progress": the cap that caps nothing.
const NO_CAP: Lsn = Lsn::MAX;

/// The per-stream exclusive watermarks a collector reads back from its
/// published blocks: every LSN of a stream below its watermark is inside
/// some published block.
///
/// A stream with no entry has watermark 0: nothing of it is covered.
/// Several blocks of one stream keep the highest watermark, which is sound
/// because each block's watermark holds on its own once that block is
/// published. Cost: a small ordered map, one entry per stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    map: BTreeMap<u16, Lsn>,
}

impl Watermarks {
    /// No stream covered.
    pub fn new() -> Watermarks {
        Watermarks::default()
    }

    /// Record that a published block of `stream` claims `watermark`;
    /// keeps the highest claim per stream.
    pub fn observe(&mut self, stream: u16, watermark: Lsn) {
        let w = self.map.entry(stream).or_insert(0);
        *w = (*w).max(watermark);
    }

    /// The watermark of `stream`: 0 if no block of it was observed.
    pub fn get(&self, stream: u16) -> Lsn {
        self.map.get(&stream).copied().unwrap_or(0)
    }

    /// The smallest watermark over `streams` (0 if any has none, or if
    /// `streams` is empty): what every one of them covers, the value to
    /// pass to [`Collector::truncate`].
    pub fn min_over(&self, streams: &[u16]) -> Lsn {
        streams.iter().map(|&s| self.get(s)).min().unwrap_or(0)
    }

    /// The highest watermark of any stream (0 if none).
    pub fn max(&self) -> Lsn {
        self.map.values().copied().max().unwrap_or(0)
    }

    /// Every `(stream, watermark)` observed, ascending by stream.
    pub fn iter(&self) -> impl Iterator<Item = (u16, Lsn)> + '_ {
        self.map.iter().map(|(&s, &w)| (s, w))
    }

    /// Build from the file names in `dir`: `parse` turns a block's name
    /// into `(stream, watermark)` and returns `None` for anything else
    /// (temporary files, other files). A missing `dir` yields no entries.
    ///
    /// Cost: one `readdir` of `dir`; reads no file.
    ///
    /// ```
    /// use ringwal::Watermarks;
    ///
    /// # let blocks = tempfile::tempdir()?;
    /// // Blocks named "<stream>-<watermark>.block" by the shards.
    /// for name in ["1-40.block", "1-75.block", "2-12.block", "2-90.tmp"] {
    ///     std::fs::write(blocks.path().join(name), b"")?;
    /// }
    /// let marks = Watermarks::from_dir(blocks.path(), |name| {
    ///     let (stream, rest) = name.strip_suffix(".block")?.split_once('-')?;
    ///     Some((stream.parse().ok()?, rest.parse().ok()?))
    /// })?;
    /// assert_eq!((marks.get(1), marks.get(2)), (75, 12));
    /// assert_eq!(marks.min_over(&[1, 2]), 12);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if `dir` exists but cannot be listed.
    pub fn from_dir(dir: &Path, parse: impl Fn(&str) -> Option<(u16, Lsn)>) -> Result<Watermarks> {
        let names = match RealFs.list(dir) {
            Ok(names) => names,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Watermarks::new()),
            Err(e) => return Err(Error::io(dir, e)),
        };
        Ok(names.iter().filter_map(|n| parse(n)).collect())
    }
}

impl FromIterator<(u16, Lsn)> for Watermarks {
    fn from_iter<I: IntoIterator<Item = (u16, Lsn)>>(iter: I) -> Watermarks {
        let mut w = Watermarks::new();
        for (s, wm) in iter {
            w.observe(s, wm);
        }
        w
    }
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replayed {
    /// Frames handed to the callback.
    pub replayed: u64,
    /// Frames passed over: below their stream's watermark, fillers, not
    /// data (checkpoint markers), or (for [`Collector::replay`]) of streams
    /// the collector does not track.
    pub skipped: u64,
    /// Segment files read.
    pub segments: usize,
    /// The newest segment and the offset where its complete data ends, if
    /// the replay ended at a torn tail there (normal after a crash, until
    /// recovery cuts it); nothing after that point is replayed. At most
    /// one entry: damage anywhere else is an error, as recovery reports it.
    pub ended_early: Vec<(PathBuf, u64)>,
}

/// Replay `cfg.node()`'s log in `dir`: every data frame whose LSN is at or
/// above its own stream's watermark, oldest first, handed to `f(stream,
/// lsn, payload)` with its original LSN. Pass the writer's configuration:
/// its keys decrypt an encrypted log, its torn window judges the newest
/// segment's end (`Config::builder().node(n).build()` judges as the
/// default writer would).
///
/// The original LSN is what makes replay converge: a block that stores the
/// replayed frame under its old LSN covers it, and the next replay skips
/// it. (Re-appending would give it a new LSN above every watermark, and the
/// old one would be replayed again on every boot.)
///
/// Read-only: takes no lock and writes nothing, so it runs beside a live
/// writer or before [`Wal::open`]. The segments are read as [`Reader`]
/// reads them, so the replay ends where recovery finds the end of the
/// data: a newest file a crash left never written is passed over, as
/// recovery discards it, and a torn tail of the newest segment ends the
/// replay (recorded in [`Replayed::ended_early`]). Other nodes' segments
/// in a shared directory are never read; frames on [`FILLER_STREAM`] are
/// skipped, and so are LSNs recovery gave up. An error
/// from `f` stops the replay and is returned.
///
/// To rebuild a collector's pending sets after a restart, use
/// [`Collector::replay`], which also puts each frame back among the pending.
///
/// Cost: reads every segment of the node once through the page cache, one
/// directory listing; allocates one `Vec` per frame. A missing `dir`
/// replays nothing.
///
/// # Errors
///
/// The first error `f` returns, which stops the replay; otherwise what the
/// reader reports, after which nothing more is replayed: [`Error::Corrupt`]
/// for damage that is no torn tail of the newest segment (recovery refuses
/// to open such a log), [`Error::Gap`] for a segment missing between two
/// others (or checkpointed away by a live writer while the replay ran),
/// [`Error::Key`] for an encrypted segment whose key `cfg` does not have,
/// and
/// [`Error::Io`] if the directory or a segment cannot be read.
pub fn replay(
    dir: &Path,
    cfg: &Config,
    watermarks: &Watermarks,
    mut f: impl FnMut(u16, Lsn, &[u8]) -> Result<()>,
) -> Result<Replayed> {
    let records = match Reader::open_dir(cfg, LogDir::new(dir, cfg.node()), 0) {
        Ok(records) => records,
        // No log yet (a crash before the first open finished): nothing to replay.
        Err(Error::NoLog { .. }) => return Ok(Replayed::default()),
        Err(e) => return Err(e),
    };
    replay_records(records, Lsn::MAX, |stream, lsn, p| {
        if stream == FILLER_STREAM || lsn < watermarks.get(stream) {
            return Ok(false);
        }
        f(stream, lsn, p)?;
        Ok(true)
    })
}

/// Hand every data frame `records` yields with an LSN at most `upto` to
/// `visit`, oldest first, which says whether it replayed the frame or
/// skipped it. LSNs recovery gave up are passed over, as every reader
/// passes them (nothing was ever written under them); any error of the
/// reader ends the replay with it.
fn replay_records(
    mut records: Reader,
    upto: Lsn,
    mut visit: impl FnMut(u16, Lsn, &[u8]) -> Result<bool>,
) -> Result<Replayed> {
    let mut out = Replayed::default();
    let mut prev: Lsn = 0;
    let mut last: Option<PathBuf> = None;
    let mut count = |seg: Option<&Path>, n: &mut usize| {
        if seg.is_some() && seg != last.as_deref() {
            last = seg.map(Path::to_path_buf);
            *n += 1;
        }
    };
    while let Some(rec) = records.next() {
        let rec = rec?;
        debug_assert!(rec.lsn > prev, "a replay visits each LSN once, in order");
        prev = rec.lsn;
        if rec.lsn > upto {
            return Ok(out);
        }
        count(records.segment(), &mut out.segments);
        if rec.kind == Kind::Data && visit(rec.stream, rec.lsn, &rec.payload)? {
            out.replayed += 1;
        } else {
            out.skipped += 1;
        }
    }
    count(records.segment(), &mut out.segments);
    if let Some((path, at)) = records.torn_tail() {
        out.ended_early.push((path.to_path_buf(), at));
    }
    Ok(out)
}

/// One tracked stream's pending LSNs: handed out, not yet published.
#[derive(Default)]
struct Stream {
    pending: BTreeSet<Lsn>,
}

/// A log with per-stream tracking of what published blocks cover: the
/// collector's side of the write-ahead log. `Send + Sync`; share it in an
/// `Arc`.
///
/// Tracking is opt-in per stream, chosen at [`open`](Self::open). An
/// append to an untracked stream is exactly [`Wal::append_then`]: no lock,
/// no set, nothing to pay. Every record of a tracked stream must be
/// appended through the collector (not through [`wal`](Self::wal)), or it
/// is invisible to the watermarks.
///
/// The life of a tracked record: [`append_then`](Self::append_then) hands
/// its LSN to a shard and makes it pending; the shard seals a block and
/// names it with [`watermark_for`](Self::watermark_for); after a durable
/// publish it calls [`published`](Self::published); a failed publish calls
/// nothing and the LSNs stay pending. After a restart,
/// [`replay`](Self::replay) hands the shards every frame not yet covered,
/// and [`truncate`](Self::truncate) drops segments everything covers.
///
/// ```
/// use ringwal::{Collector, Config, Level, Wal, Watermarks};
///
/// # let dir = tempfile::tempdir()?;
/// let (wal, _) = Wal::open(dir.path(), Config::default())?;
/// // Track stream 1; no block published yet, so nothing to replay.
/// let collector = Collector::open(wal, &[1], &Watermarks::new())?;
/// assert_eq!(collector.replay(|_, _, _| Ok(()))?.replayed, 0);
///
/// // One shard's list, filled in LSN order under the reservation lock.
/// let mut shard = Vec::new();
/// for body in [b"a", b"b", b"c"] {
///     collector.append_then(1, body, |lsn| shard.push(lsn))?.wait(Level::Written)?;
/// }
/// // The shard seals a block: its watermark goes into the block's name.
/// let watermark = collector.watermark_for(1, &shard);
/// assert_eq!(watermark, 4); // the block holds everything handed out
/// // ... publish the block durably, and only then:
/// collector.published(1, &shard);
/// collector.truncate(watermark)?; // whole segments only: none here
///
/// // One more body, not published when the process stops.
/// collector.append(1, b"d")?.wait(Level::Written)?;
/// collector.close()?;
///
/// // On restart: the watermarks come back from the block names, and the
/// // replay hands out exactly what no block covers, with its old LSN.
/// let marks: Watermarks = [(1, watermark)].into_iter().collect();
/// let (wal, _) = Wal::open(dir.path(), Config::default())?;
/// let collector = Collector::open(wal, &[1], &marks)?;
/// let mut again = Vec::new();
/// collector.replay(|_stream, lsn, body| {
///     again.push((lsn, body.to_vec()));
///     Ok(())
/// })?;
/// assert_eq!(again, [(4, b"d".to_vec())]);
/// assert_eq!(collector.pending(1), 1); // pending until a block holds it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Collector {
    wal: Wal,
    /// Tracked streams, ascending; `state[i]` belongs to `streams[i]`.
    streams: Vec<u16>,
    state: Vec<Mutex<Stream>>,
    /// Highest LSN a tracked hook has inserted (invariant 2).
    handed: AtomicU64,
    /// While a replay is due or running: the first LSN it has not yet put
    /// back among the pending (invariant 3). `NO_CAP` once done.
    replay_cap: AtomicU64,
    /// The log's next LSN when the collector opened (after the fillers):
    /// replay reads only below it.
    start_next: Lsn,
    /// The watermarks the collector opened with; replay skips below them.
    start_marks: Watermarks,
    fillers: u64,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("wal", &self.wal)
            .field("streams", &self.streams)
            .field("start_next", &self.start_next)
            .finish_non_exhaustive()
    }
}

impl Collector {
    /// Wrap an open log, tracking `streams`, with the watermarks read back
    /// from the published blocks (`Watermarks::new()` on a first start).
    ///
    /// If a watermark lies beyond the log's next LSN (a shard published
    /// frames that a crash then took from the log before they were
    /// written), appends empty records on [`FILLER_STREAM`] up to it and
    /// waits for them to be written, so no LSN a block claims is ever
    /// given to a new record. That costs one small frame per LSN, bounded
    /// by what was in flight at the crash; usually nothing.
    ///
    /// Until [`replay`](Self::replay) has run, every watermark is capped at
    /// the oldest frame on disk that the blocks do not cover: call it once,
    /// before or while the shards start sealing.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidConfig`]: `streams` contains [`FILLER_STREAM`].
    /// - As [`Wal::append`] and [`Ticket::wait`] while it appends and
    ///   waits for fillers: [`Error::Poisoned`], [`Error::NoSpace`],
    ///   [`Error::Closed`], [`Error::LsnExhausted`]. The log is dropped
    ///   (closed) with the error.
    pub fn open(wal: Wal, streams: &[u16], watermarks: &Watermarks) -> Result<Collector> {
        let mut streams = streams.to_vec();
        streams.sort_unstable();
        streams.dedup();
        if streams.contains(&FILLER_STREAM) {
            return Err(Error::InvalidConfig(format!(
                "stream {FILLER_STREAM} is reserved for the collector's LSN fillers"
            )));
        }
        let target = watermarks.max();
        let mut fillers = 0;
        let mut last = None;
        while wal.next_lsn() < target {
            last = Some(wal.append(FILLER_STREAM, &[])?);
            fillers += 1;
        }
        if let Some(t) = last {
            t.wait(Level::Written)?;
        }
        let start_next = wal.next_lsn();
        let first_uncovered = wal.oldest_lsn().max(watermarks.min_over(&streams));
        let cap = if first_uncovered < start_next {
            first_uncovered
        } else {
            NO_CAP
        };
        Ok(Collector {
            state: streams.iter().map(|_| Mutex::default()).collect(),
            streams,
            handed: AtomicU64::new(start_next - 1),
            replay_cap: AtomicU64::new(cap),
            start_next,
            start_marks: watermarks.clone(),
            fillers,
            wal,
        })
    }

    /// The log underneath, for waits, stats, `sync` and reads. Appending
    /// to a tracked stream through it bypasses tracking: don't.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// The tracked streams, ascending.
    pub fn streams(&self) -> &[u16] {
        &self.streams
    }

    /// Whether `stream` is tracked.
    pub fn is_tracked(&self, stream: u16) -> bool {
        self.index(stream).is_some()
    }

    /// How many filler records [`open`](Self::open) appended.
    pub fn fillers(&self) -> u64 {
        self.fillers
    }

    fn index(&self, stream: u16) -> Option<usize> {
        debug_assert!(
            self.streams.is_sorted_by(|a, b| a < b),
            "tracked streams are sorted and unique for the search"
        );
        self.streams.binary_search(&stream).ok()
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Stream> {
        // Every critical section is one set operation; a panic cannot leave
        // a set half-changed in a way that matters.
        self.state[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append one record to `stream`. See [`append_then`](Self::append_then).
    ///
    /// # Errors
    ///
    /// As [`Wal::append`]; nothing is appended or made pending on error.
    pub fn append(&self, stream: u16, payload: &[u8]) -> Result<Ticket> {
        self.append_then(stream, payload, |_| {})
    }

    /// Append one record to `stream` and run `then(lsn)` under the log's
    /// reservation lock, so that lists built by `then` (one per shard,
    /// say) stay ascending across all producers; a tracked stream's LSN
    /// becomes pending first, under the same lock.
    ///
    /// `then` must not block, must not await and must not call into this
    /// collector or its log (re-entering the log deadlocks); it holds up
    /// every producer while it runs. Pushing onto an unbounded channel is
    /// the intended use.
    ///
    /// Returns once the record is accepted (in the log's memory); wait on
    /// the ticket for `Written` before acknowledging it to a client. Cost
    /// over [`Wal::append_then`]: for a tracked stream one uncontended
    /// lock and a set insert; for an untracked one, nothing.
    ///
    /// # Errors
    ///
    /// As [`Wal::append`]; nothing is appended or made pending, and `then`
    /// is not called.
    ///
    /// # Panics
    ///
    /// A panic in `then` unwinds out of this call, as in
    /// [`Wal::append_then`]: the record is still written, and a tracked
    /// one stays pending (it pins the watermark, it is not lost).
    pub fn append_then(
        &self,
        stream: u16,
        payload: &[u8],
        then: impl FnOnce(Lsn),
    ) -> Result<Ticket> {
        self.wal
            .append_then(stream, payload, self.tracking(stream, then))
    }

    /// [`append`](Self::append) for async callers: waits for staging space
    /// by awaiting, as [`Wal::append_async`] does; a tracked stream's LSN
    /// becomes pending on the poll that appends it.
    ///
    /// # Errors
    ///
    /// As [`Wal::append_async`]; nothing is appended or made pending on
    /// error.
    pub fn append_async<'a>(
        &'a self,
        stream: u16,
        payload: &'a [u8],
    ) -> AppendFuture<'a, impl FnOnce(Lsn) + 'a> {
        self.append_then_async(stream, payload, |_| {})
    }

    /// [`append_then`](Self::append_then) for async callers, as
    /// [`Wal::append_then_async`]: `then` runs under the reservation lock,
    /// once, on the poll that appends the record.
    ///
    /// # Errors
    ///
    /// As [`Wal::append_async`]; nothing is appended or made pending, and
    /// `then` is not called.
    pub fn append_then_async<'a>(
        &'a self,
        stream: u16,
        payload: &'a [u8],
        then: impl FnOnce(Lsn) + 'a,
    ) -> AppendFuture<'a, impl FnOnce(Lsn) + 'a> {
        self.wal
            .append_then_async(stream, payload, self.tracking(stream, then))
    }

    /// The hook every append of `stream` runs under the reservation lock:
    /// a tracked stream's LSN becomes pending, then `then` runs.
    fn tracking<'a>(&'a self, stream: u16, then: impl FnOnce(Lsn) + 'a) -> impl FnOnce(Lsn) + 'a {
        let tracked = self.index(stream);
        move |lsn| {
            if let Some(i) = tracked {
                // Invariant 1: hooks run one at a time, in LSN order.
                debug_assert!(
                    lsn > self.handed.load(Ordering::Relaxed),
                    "LSN {lsn} handed out after a higher one"
                );
                let fresh = self.lock(i).pending.insert(lsn);
                debug_assert!(fresh, "LSN {lsn} handed out twice");
                // After the unlock: whoever sees `handed = lsn` under a
                // pending lock also sees the insert (invariant 2).
                self.handed.store(lsn, Ordering::Release);
            }
            then(lsn);
        }
    }

    /// "One past everything handed out" as far as tracked streams are
    /// concerned, capped by a replay in progress. Read under a pending lock.
    fn everything(&self) -> Lsn {
        let handed = self.handed.load(Ordering::Acquire);
        (handed + 1).min(self.replay_cap.load(Ordering::Acquire))
    }

    /// The watermark a block of `stream` holding `lsns` may claim: the
    /// oldest pending LSN of `stream` not in `lsns`, or, when `lsns` holds
    /// every pending one, one past everything handed out. With `lsns`
    /// empty: what `stream` covers right now.
    ///
    /// Call it before the publish (the answer goes in the block's name);
    /// the block's LSNs stay pending until [`published`](Self::published),
    /// so two shards sealing at once each count the other's frames against
    /// their own watermark and neither claims the other's. Never too high;
    /// it can be too low (a shard holding an old frame pins its siblings
    /// until it seals), which costs a re-ingest after a crash, not a loss.
    ///
    /// `lsns` should be ascending, as `append_then` lists are; unsorted
    /// input can only make the answer lower, never higher. An untracked
    /// stream gets 0 (claims nothing). Cost: one lock, a walk of the
    /// pending set up to the answer merged with `lsns`.
    pub fn watermark_for(&self, stream: u16, lsns: &[Lsn]) -> Lsn {
        let Some(i) = self.index(stream) else {
            return 0;
        };
        let st = self.lock(i);
        let everything = self.everything();
        let mut j = 0;
        for &p in &st.pending {
            while j < lsns.len() && lsns[j] < p {
                j += 1;
            }
            if j < lsns.len() && lsns[j] == p {
                continue;
            }
            return p.min(everything);
        }
        everything
    }

    /// The smallest watermark over the tracked streams, each stream's
    /// [`watermark_for`](Self::watermark_for)`(stream, &[])` (what it
    /// covers right now: its oldest pending LSN, or one past everything
    /// handed out): every tracked frame below it is in a published block.
    /// Unlike the block names, it follows idle streams forward. 0 with no
    /// tracked stream.
    pub fn covered(&self) -> Lsn {
        self.streams
            .iter()
            .map(|&s| self.watermark_for(s, &[]))
            .min()
            .unwrap_or(0)
    }

    /// Retire `lsns` of `stream`: a block holding them is durably
    /// published. Only after success: a block that failed to land must
    /// leave its LSNs pending, which is what keeps later watermarks from
    /// stepping over them. LSNs not pending are ignored. Cost: one lock,
    /// one set removal per LSN.
    pub fn published(&self, stream: u16, lsns: &[Lsn]) {
        if let Some(i) = self.index(stream) {
            let mut st = self.lock(i);
            for l in lsns {
                st.pending.remove(l);
            }
        }
    }

    /// Put `lsn` of `stream`, read back from the log rather than appended,
    /// among the pending again. [`replay`](Self::replay) does this for
    /// every frame it hands out; call it yourself only for frames you
    /// replay by other means, before handing them to a shard.
    pub fn reframed(&self, stream: u16, lsn: Lsn) {
        if let Some(i) = self.index(stream) {
            self.lock(i).pending.insert(lsn);
        }
    }

    /// How many LSNs of `stream` are pending (0 for an untracked stream).
    pub fn pending(&self, stream: u16) -> usize {
        self.index(stream).map_or(0, |i| self.lock(i).pending.len())
    }

    /// Replay what the blocks do not cover: every frame of a tracked
    /// stream at or above its watermark (the ones given to
    /// [`open`](Self::open)) and older than this collector, oldest first,
    /// with its original LSN; each is put back among the pending *before*
    /// `f(stream, lsn, payload)` sees it, so `f` can hand it straight to a
    /// shard, and shards may seal while the replay runs.
    ///
    /// While it runs, watermarks are capped at the first frame not yet
    /// handed out, and the cap lifts when it returns `Ok`. If `f` fails the
    /// error is returned and the cap stays; records appended meanwhile are
    /// tracked normally. Frames of untracked streams and fillers are
    /// skipped. The log's own segments are read through
    /// [`Wal::reader_from`], which recovery has checked. Call it once.
    /// Cost: one read of the log up to where this collector started,
    /// through the page cache; one `Vec` per frame.
    ///
    /// # Errors
    ///
    /// The first error `f` returns, as it is, which stops the replay; or
    /// what the log's reader reports: [`Error::Corrupt`] for damage found
    /// since the open, [`Error::Released`] if a checkpoint released frames
    /// before the replay reached them, [`Error::Key`], [`Error::Io`]. The
    /// cap stays on after an error.
    pub fn replay(&self, mut f: impl FnMut(u16, Lsn, &[u8]) -> Result<()>) -> Result<Replayed> {
        let records = self.wal.reader_from(0)?;
        let out = replay_records(records, self.start_next - 1, |stream, lsn, payload| {
            let take = self
                .index(stream)
                .filter(|_| lsn >= self.start_marks.get(stream));
            if let Some(i) = take {
                self.lock(i).pending.insert(lsn);
            }
            self.raise_cap(lsn + 1);
            if take.is_some() {
                f(stream, lsn, payload)?;
            }
            Ok(take.is_some())
        })?;
        self.replay_cap.store(NO_CAP, Ordering::Release);
        Ok(out)
    }

    /// Move the replay cap forward to `to` (never back, never past done).
    fn raise_cap(&self, to: Lsn) {
        let _ = self
            .replay_cap
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c != NO_CAP && c < to).then_some(to)
            });
    }

    /// Delete whole segments whose every frame is below `covered`, oldest
    /// first, then sync the directory; never the segment being written.
    /// Returns how many were removed.
    ///
    /// `covered` is the smallest watermark over the tracked streams
    /// ([`Watermarks::min_over`] of the published names, or
    /// [`covered`](Self::covered)). It is clamped to
    /// [`covered`](Self::covered), so no value deletes a tracked frame that
    /// is still pending. Frames of untracked streams get no such
    /// protection: the collector cannot know who still needs them.
    ///
    /// Deletion is per segment because an append-only log never rewrites
    /// its middle. Cost: one unlink per segment plus one directory sync.
    ///
    /// Async callers: `truncate_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// As [`Wal::checkpoint`].
    pub fn truncate(&self, covered: Lsn) -> Result<usize> {
        match self.truncation_point(covered) {
            Some(up_to) => self.wal.checkpoint(up_to),
            None => Ok(0),
        }
    }

    /// What [`truncate`](Self::truncate) checkpoints up to for `covered`,
    /// clamped to live coverage; `None` when that is nothing.
    pub(crate) fn truncation_point(&self, covered: Lsn) -> Option<Lsn> {
        let covered = covered.min(self.covered());
        assert!(
            covered <= self.handed.load(Ordering::Acquire) + 1,
            "a truncation never passes the LSNs handed out"
        );
        (covered > 1).then(|| covered - 1)
    }

    /// Close the log underneath ([`Wal::close`]): drain, sync, join.
    ///
    /// Async callers: `close_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// As [`Wal::close`].
    pub fn close(self) -> Result<()> {
        self.wal.close()
    }
}
