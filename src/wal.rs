//! The public log handle: open, append, sync, checkpoint, close. The
//! state it shares with the ring thread and the tickets, and the
//! reservation every append takes, live in `write::reserve`.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ringwal_platform::file::{FileSystem, FsKind};
use ringwal_platform::Notifier;

use crate::at_rest::format::{Kind, Manifest, SegmentHeader};
use crate::config::{Backend, Config, Level, SyncMethod};
use crate::error::{Error, Lsn, Poison, Result};
use crate::obs::latency::LatencySummary;
use crate::read::follow::Follower;
use crate::read::reader::{Reader, Record};
use crate::recovery::{self, CheckpointMarker, RecoveryReport};
use crate::scan;
use crate::segment::lifecycle::{self, create_segment};
use crate::segment::manifest;
use crate::segment::set::{self as segments, Live, LogDir, SegmentFile};
use crate::write::reserve::OnFull;
use crate::write::retention::{self, Recycle};
use crate::write::ring::{self, RingStart};
use crate::write::shared::{Device, Resume, Shared};
use crate::write::ticket::{AppendFuture, Ticket, TicketFuture};
use crate::write::transaction::Transaction;

/// A snapshot of the log's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Next LSN to be handed out.
    pub next_lsn: Lsn,
    /// Highest LSN whose write completed (contiguous prefix).
    pub written_lsn: Lsn,
    /// Highest LSN on stable storage.
    pub durable_lsn: Lsn,
    /// Writes submitted to the device.
    pub writes: u64,
    /// Bytes in those writes (frames plus padding).
    pub write_bytes: u64,
    /// `fdatasync`s the ring thread issued: on their own (written mode,
    /// `Grouped`, before a roll) and linked to a write (`WriteThenFdatasync`,
    /// the durable write where `RWF_DSYNC` is not trusted), each a flush of
    /// the device. An `RWF_DSYNC` write counts as a write only.
    pub syncs: u64,
    /// Segments rolled to.
    pub rolls: u64,
    /// How durable-mode writes are made durable here: the configured
    /// [`SyncMethod`], except that `Dsync` becomes `WriteThenFdatasync`
    /// on a file system not known to honour `RWF_DSYNC` (FUSE, NFS,
    /// anything but ext4, XFS, btrfs, tmpfs, ramfs and an overlay on one
    /// of them not mounted `volatile`), where a DSYNC write can complete
    /// without being durable. Decided once at open, from the file system
    /// the active segment is on.
    pub sync_method: SyncMethod,
    /// Points in the sparse LSN → offset index that lets reads start
    /// inside a segment: 16 bytes each, at most one per 64 KiB of log kept
    /// (256 KiB of memory per GiB of log, less where writes are larger).
    pub index_points: usize,
    /// Segment files of the log on disk (checkpoints remove them).
    pub segments: usize,
    /// Bytes those files take: their sizes, preallocation included (each
    /// is preallocated to its header's segment size). The same measure
    /// the size limits and the soft limit's observer call use.
    pub disk_bytes: u64,
    /// The oldest LSN kept (1 until a checkpoint removes a segment).
    pub oldest_lsn: Lsn,
    /// The I/O backend the ring thread runs: `Uring` or `Threaded`, the
    /// configured `Backend::Auto` resolved.
    pub backend: Backend,
    /// Whether segment writes really bypass the page cache: O_DIRECT is
    /// asked for and the file system does it. False with `DirectIo::Off`,
    /// where the file system refuses O_DIRECT (`DirectIo::Auto` falls back
    /// to buffered writes: ramfs, tmpfs before Linux 6.6) and where it
    /// takes the flag but buffers anyway (btrfs, for a file with data
    /// checksums, its default; a NOCOW directory avoids it). Decided once
    /// at open, from the active segment.
    pub direct_io: bool,
    /// What the active segment's file system was found to be at open
    /// (`FsKind::Other` if the look failed or outside Linux). Its
    /// [`survives_power_loss`](FileSystem::survives_power_loss) is false
    /// on memory (tmpfs, ramfs) and a `volatile` overlay: there `Durable`
    /// only means written.
    pub file_system: FileSystem,
    /// Writes submitted to the device and not yet complete.
    pub writes_in_flight: u64,
    /// Times an append waited for a free staging buffer, parked or (in
    /// [`Wal::append_async`]) awaiting: the device fell behind the
    /// producers.
    pub backpressure_waits: u64,
    /// Whether the log is poisoned ([`Wal::poison_cause`] says why).
    pub poisoned: bool,
    /// Whether `disk_bytes` is over the configured soft limit
    /// ([`ConfigBuilder::soft_log_bytes`](crate::ConfigBuilder::soft_log_bytes)):
    /// time to snapshot and checkpoint.
    pub over_soft_limit: bool,
    /// LSNs dropped so far because the log was over its hard limit
    /// ([`WhenFull::DropOldest`](crate::WhenFull::DropOldest)), since open.
    pub dropped_records: u64,
    /// The last LSN range dropped that way (`first..=last`), if any.
    pub last_dropped: Option<(Lsn, Lsn)>,
    /// The log's archive point as last read (at open, and by each
    /// checkpoint or drop): every segment at or below it is archived.
    /// `None` when the log had no archive then.
    pub archived_lsn: Option<Lsn>,
    /// Bytes of sealed segments above [`archived_lsn`](Self::archived_lsn):
    /// what the archive keeps on disk that a checkpoint could otherwise
    /// release ([`ConfigBuilder::release_unarchived`](crate::ConfigBuilder::release_unarchived)).
    /// 0 without an archive.
    pub archive_held_bytes: u64,
    /// Time from submitting a write to its completion (in durable mode,
    /// durable), since open.
    pub write_latency: LatencySummary,
    /// Time from issuing an `fdatasync` of its own to its completion, since
    /// open. One linked to a write is timed with the write, in
    /// `write_latency`.
    pub sync_latency: LatencySummary,
}

/// A write-ahead log: many producers, one ring thread, one directory and
/// node. `Send + Sync`: share it by reference or in an `Arc`.
///
/// Appends from any thread are sequenced under one short lock, copied into
/// a staging buffer and acknowledged at three levels (see [`Level`]). The
/// ring thread turns them into few large block-aligned writes (group
/// commit), several in flight, and acknowledges only the contiguous prefix
/// of completed writes.
pub struct Wal {
    shared: Arc<Shared>,
    ring: Mutex<Option<JoinHandle<()>>>,
    /// The newest checkpoint marker known: recovery's, then the newest
    /// (highest LSN) one appended through this handle.
    marker: Mutex<Option<CheckpointMarker>>,
    /// The backend the ring thread runs (`Backend::Auto` resolved).
    backend: Backend,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir().path())
            .field("node", &self.shared.cfg().node)
            .finish()
    }
}

impl Wal {
    /// Open or create the log for `cfg.node()` in `dir` (created if
    /// missing, unless [`create_if_missing`] is off: then
    /// [`Error::NoLog`]), running recovery first.
    ///
    /// [`create_if_missing`]: crate::ConfigBuilder::create_if_missing
    ///
    /// Takes an exclusive advisory lock (`Locked` if another writer holds
    /// it), scans every segment of the node, fails with `Corrupt` or `Gap`
    /// on damage that is not a torn tail, cuts a torn tail durably, discards
    /// an incomplete newest file, and resumes LSNs past everything on disk.
    /// Then starts the ring thread and the segment preparer thread.
    ///
    /// Cost: reads every segment once; on an empty directory, creates and
    /// zero-writes the first segment. Blocking.
    ///
    /// ```
    /// use ringwal::{Config, Level, Wal};
    ///
    /// # let tmp = tempfile::tempdir()?;
    /// # let dir = tmp.path().join("wal");
    /// let (wal, report) = Wal::open(&dir, Config::default())?;
    /// assert!(report.created);
    /// wal.append(0, b"kept")?.wait(Level::Durable)?;
    /// wal.close()?;
    ///
    /// // Reopening recovers what is on disk and resumes the LSNs after it.
    /// let (wal, report) = Wal::open(&dir, Config::default())?;
    /// assert_eq!((report.records, wal.next_lsn()), (1, 2));
    ///
    /// // One writer per directory and node.
    /// let second = Wal::open(&dir, Config::default());
    /// assert!(matches!(second, Err(ringwal::Error::Locked { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Async callers: `Wal::open_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// A failed open never touches an acknowledged record; the damage
    /// errors (`Corrupt`, `Gap`, `Lost`) leave the directory as it was.
    ///
    /// - [`Error::InvalidConfig`]: a configuration value out of range
    ///   (including a ring CPU the process may not use).
    /// - [`Error::NoLog`]: no log of the node in `dir`, and
    ///   [`create_if_missing`] is off.
    /// - [`Error::Locked`]: another writer holds the directory and node.
    /// - [`Error::Corrupt`], [`Error::Gap`], [`Error::Lost`]: damage that is
    ///   not a torn tail, a missing segment, or acknowledged records
    ///   missing from the disk (strict recovery; see
    ///   [`RecoveryMode`](crate::RecoveryMode)).
    /// - [`Error::NoSpace`]: the filesystem is full while creating a
    ///   segment or the manifest.
    /// - [`Error::Io`]: any other I/O failure, naming the path.
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<(Wal, RecoveryReport)> {
        cfg.validate()?;
        let (dir, lock) = claim_dir(dir.as_ref(), &cfg)?;
        let mut rec = recovery::recover(&dir, &cfg)?;
        let log_id = rec.log_id.unwrap_or_else(lifecycle::new_salt);
        // The key new segments are sealed with: a provider naming a key
        // it does not have fails the open, not a later roll.
        let cipher = cfg.keys.current(dir.path())?;
        let fresh = rec.active.is_none();
        let (active, header, write_at) =
            active_segment(&dir, &cfg, &mut rec, log_id, cipher.as_deref())?;
        assert!(
            active.base <= rec.next_lsn,
            "the active segment starts at or below the next LSN"
        );
        assert!(
            rec.segments
                .last()
                .is_some_and(|s| s.file.path == active.path),
            "the active segment is the newest listed"
        );
        let (file, direct_io) = segments::open_file(&*cfg.vfs, &active.path, None, cfg.direct_io)?;
        let keeper = opening_manifest(&dir, &cfg, &rec, log_id, active.base)?;
        let notifier = Arc::new(Notifier::new().map_err(|e| Error::io(dir.path(), e))?);
        let at = Resume {
            next_lsn: rec.next_lsn,
            header: &header,
            write_at,
            segments: rec.segments,
            index: rec.index,
            fresh,
            cipher,
        };
        // Looked at once: unknown if the look fails, which trusts nothing
        // (the sync method falls back to the explicit sync).
        let file_system = file.file_system().unwrap_or(FileSystem::of(FsKind::Other));
        let sync_method = lifecycle::sync_method_for(cfg.sync_method, &file_system);
        if !file_system.survives_power_loss() {
            crate::obs::trace::event!(
                warn,
                file_system = %file_system,
                "the log is on memory: nothing survives a power loss, Durable means Written"
            );
        }
        let device = Device {
            sync_method,
            direct_io,
            file_system,
        };
        let shared = Arc::new(Shared::new(cfg, dir, notifier, at, keeper, device));
        // For `Stats` until the first checkpoint reads it again; one that
        // cannot be read holds everything.
        let point = crate::segment::archived::held_at(&*shared.cfg().vfs, shared.dir());
        shared.retention().saw_archived(point.unwrap_or(Some(0)));
        let (ring, backend) = ring::spawn(RingStart {
            shared: shared.clone(),
            file,
            header,
            write_at,
            lock,
        })?;
        rec.report.backend = backend;
        rec.report.direct_io = direct_io;
        Ok((
            Wal {
                shared,
                ring: Mutex::new(Some(ring)),
                marker: Mutex::new(rec.report.last_checkpoint),
                backend,
            },
            rec.report,
        ))
    }

    /// Append one record to `stream`. See [`append_then`](Self::append_then)
    /// for what it guarantees and costs.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let ticket = wal.append(3, b"payload")?;
    /// assert_eq!(ticket.lsn(), 1); // LSNs start at 1
    /// ticket.wait(Level::Durable)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Nothing is appended on error.
    ///
    /// - [`Error::TooLarge`]: `payload` exceeds
    ///   [`max_record_bytes`](crate::ConfigBuilder::max_record_bytes).
    /// - [`Error::Poisoned`] or [`Error::NoSpace`]: an earlier write or sync
    ///   failed (see [`poison_cause`](Self::poison_cause)).
    /// - [`Error::Closed`]: the log is shutting down.
    /// - [`Error::LsnExhausted`]: the LSN space is used up.
    pub fn append(&self, stream: u16, payload: &[u8]) -> Result<Ticket> {
        self.append_then(stream, payload, |_| {})
    }

    /// Append one record to `stream` and run `then(lsn)` before the
    /// reservation lock is released.
    ///
    /// LSNs are handed out in lock order, so anything `then` does with the
    /// LSN (say, push it onto a per-shard queue) happens in LSN order across
    /// all producers: lists built this way stay ascending. `then` must not
    /// block, must not await, and must not call into this log (that
    /// deadlocks); it holds up every other producer while it runs.
    ///
    /// Returns once the record is copied into the staging buffer (level
    /// `Accepted`). Cost: one lock, held for the reservation and `then`;
    /// after it, one copy of the payload and one CRC; no syscall (at most one eventfd write to wake a sleeping ring thread)
    /// and no allocation. Blocks only when every staging buffer is full
    /// (backpressure from the device).
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// // One queue per consumer, filled in LSN order whatever the thread.
    /// let queue = std::sync::Mutex::new(Vec::new());
    /// std::thread::scope(|s| {
    ///     for t in 0..4u16 {
    ///         let (wal, queue) = (&wal, &queue);
    ///         s.spawn(move || {
    ///             for _ in 0..100 {
    ///                 let ticket = wal.append_then(t, b"x", |lsn| queue.lock().unwrap().push(lsn))?;
    ///                 drop(ticket); // the level does not matter here
    ///             }
    ///             Ok::<(), ringwal::Error>(())
    ///         });
    ///     }
    /// });
    /// let queue = queue.into_inner().unwrap();
    /// assert!(queue.windows(2).all(|w| w[0] < w[1]));
    /// assert_eq!(queue.len(), 400);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); `then` is not called when the append
    /// fails.
    ///
    /// # Panics
    ///
    /// A panic in `then` unwinds out of this call once the record is
    /// copied: it is sequenced by then, so it is still written; only its
    /// ticket is lost.
    pub fn append_then(
        &self,
        stream: u16,
        payload: &[u8],
        then: impl FnOnce(Lsn),
    ) -> Result<Ticket> {
        Ticket::issue(
            &self.shared,
            &[(stream, payload)],
            Kind::Data,
            OnFull::Wait,
            then,
        )
    }

    /// Append one record of exactly `len` bytes that `write` serializes
    /// straight into the log's staging buffer: no intermediate buffer and
    /// no copy, as a zero-copy claim (Aeron's `tryClaim`) gives. The
    /// record's place is claimed under the reservation lock; `write`, the
    /// CRC and the cipher run after it is released, so other producers
    /// reserve meanwhile.
    ///
    /// `write` gets the `len` bytes zeroed; it must not block or call into
    /// this log, and should be short: the ring waits for it before it
    /// writes the batch the record is in.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let (id, amount) = (7u32, 1250u64);
    /// let ticket = wal.append_with(0, 12, |slot| {
    ///     slot[..4].copy_from_slice(&id.to_le_bytes());
    ///     slot[4..].copy_from_slice(&amount.to_le_bytes());
    /// })?;
    /// ticket.wait(Level::Durable)?;
    /// assert_eq!(wal.read(ticket.lsn())?.payload[..4], id.to_le_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Cost: one lock held for the reservation only, one memset of `len`
    /// bytes, `write`, one CRC; no allocation, no syscall but the wake-up
    /// of a sleeping ring. With compression configured, `write` fills a
    /// temporary buffer (one allocation) that is packed and copied as
    /// [`append`](Self::append) does. Blocks when every staging buffer is
    /// full, as `append` does.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), with `len` in place of the payload's
    /// length; `write` is not called when the append fails.
    ///
    /// # Panics
    ///
    /// A panic in `write` unwinds out of this call and poisons the log:
    /// the record was given its LSN and its place, and a frame that was
    /// never filled is never written. Later appends fail with
    /// [`Error::Poisoned`].
    pub fn append_with(
        &self,
        stream: u16,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<Ticket> {
        Ticket::issue_with(&self.shared, stream, len, OnFull::Wait, write)
    }

    /// [`append`](Self::append) for a caller that must not block: when
    /// every staging buffer is full (the device is behind the producers),
    /// return [`Error::Full`] at once instead of waiting for the ring to
    /// free one. An async task can then yield (or await an earlier
    /// ticket) and retry.
    ///
    /// # Errors
    ///
    /// `Full` as above (nothing appended, no LSN taken); otherwise as
    /// `append`.
    ///
    /// Cost: as `append`; never parks the thread.
    pub fn try_append(&self, stream: u16, payload: &[u8]) -> Result<Ticket> {
        Ticket::issue(
            &self.shared,
            &[(stream, payload)],
            Kind::Data,
            OnFull::Refuse,
            |_| {},
        )
    }

    /// [`append`](Self::append) for async callers: waits for staging space
    /// by awaiting, never by parking the thread. Resolves to the ticket
    /// once the record is copied into a staging buffer (level `Accepted`);
    /// await [`Ticket::reached`] after it for `Written` or `Durable`.
    ///
    /// While every staging buffer is full (the device is behind the
    /// producers) the task is parked as a waker in the log, and the ring
    /// thread wakes it when it frees a buffer: the executor's thread runs
    /// other tasks meanwhile. No LSN is taken until the record is copied,
    /// so records appended by tasks that waited keep the order in which
    /// their appends succeeded. See [`AppendFuture`] for what a poll costs;
    /// a poll that finds space costs what [`append`](Self::append) costs,
    /// with no allocation and no extra lock.
    ///
    /// Works on any executor; here tokio's single-threaded one:
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// rt.block_on(async {
    ///     let ticket = wal.append_async(0, b"body").await?;
    ///     ticket.reached(Level::Durable).await
    /// })?;
    /// assert_eq!(wal.read(1)?.payload, b"body");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), except that at the hard size limit
    /// ([`WhenFull::Block`](crate::WhenFull::Block)) the future fails at
    /// once with [`Error::LogFull`], as [`try_append`](Self::try_append)
    /// does, rather than wait the configured timeout for a checkpoint (a
    /// future that works on any executor has no timer): checkpoint, or
    /// shed load, then append again. Nothing is appended on error.
    pub fn append_async<'a>(&'a self, stream: u16, payload: &'a [u8]) -> AppendFuture<'a, fn(Lsn)> {
        AppendFuture::new(&self.shared, stream, payload, |_| {})
    }

    /// [`append_then`](Self::append_then) for async callers: as
    /// [`append_async`](Self::append_async), and `then(lsn)` runs under
    /// the reservation lock on the poll that appends the record, exactly
    /// once (never for an append that fails or a future dropped before).
    /// The same rules hold for `then`: it must not block, await or call
    /// into this log.
    ///
    /// # Errors
    ///
    /// As [`append_async`](Self::append_async); `then` is not called when
    /// the append fails.
    pub fn append_then_async<'a, F: FnOnce(Lsn) + 'a>(
        &'a self,
        stream: u16,
        payload: &'a [u8],
        then: F,
    ) -> AppendFuture<'a, F> {
        AppendFuture::new(&self.shared, stream, payload, then)
    }

    /// Append `records` (stream, payload) as one atomic batch: consecutive
    /// LSNs, in one segment (the log rolls first if they do not fit the
    /// current one), acknowledged only as a whole. After any crash,
    /// recovery keeps all of them or none (a batch cut off by the crash
    /// was never acknowledged), and no reader ever yields part of one.
    ///
    /// The ticket is the last record's LSN; the first is
    /// `ticket.lsn() + 1 - records.len()`. Returns at level `Accepted`.
    /// `EmptyBatch` for no records; `TooLarge` for a record above
    /// `Config::max_record_bytes` or a batch that does not fit one segment;
    /// either way nothing is appended.
    ///
    /// Cost: one lock for the whole batch, and one copy and CRC per record
    /// (the cipher too, when sealed) after it is released, on this
    /// thread; one allocation, of the members' claims. Other producers
    /// wait only while the places are taken; a batch larger than the free
    /// staging buffers fills what it has claimed and waits, holding the
    /// others back, until the ring thread writes enough to free more.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let last = wal.append_batch(&[(1, b"debit".as_slice()), (2, b"credit".as_slice())])?;
    /// assert_eq!(last.lsn(), 2); // the first record is LSN 1
    /// last.wait(Level::Durable)?; // both are durable, or neither is
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Nothing is appended on error.
    ///
    /// - [`Error::EmptyBatch`]: `records` is empty.
    /// - [`Error::TooLarge`]: a record exceeds
    ///   [`max_record_bytes`](crate::ConfigBuilder::max_record_bytes), or the
    ///   batch does not fit one fresh segment (with a key provider, both
    ///   sealed and plain: a segment is sealed only while the provider
    ///   names a current key at its roll).
    /// - [`Error::Poisoned`], [`Error::NoSpace`], [`Error::Closed`],
    ///   [`Error::LsnExhausted`]: as for [`append`](Self::append).
    pub fn append_batch(&self, records: &[(u16, &[u8])]) -> Result<Ticket> {
        Ticket::issue(&self.shared, records, Kind::Data, OnFull::Wait, |_| {})
    }

    /// Start a transaction: records staged in the returned handle and
    /// written as one atomic batch at its commit (see [`Transaction`]).
    ///
    /// Cost: one `Arc` reference; no lock, no I/O, no LSN.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let mut tx = wal.begin();
    /// tx.append(1, b"a")?;
    /// tx.append(2, b"b")?;
    /// assert_eq!(wal.next_lsn(), 1); // nothing sequenced yet
    /// tx.commit()?.wait(Level::Durable)?;
    /// assert_eq!(wal.next_lsn(), 3);
    ///
    /// let mut dropped = wal.begin();
    /// dropped.append(1, b"never written")?;
    /// dropped.abort(); // as dropping it: nothing written, no LSN taken
    /// assert_eq!(wal.next_lsn(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin(&self) -> Transaction {
        Transaction::new(self.shared.clone())
    }

    /// Make every record appended so far durable, and wait for it.
    ///
    /// In durable mode this waits for the writes in flight; in written
    /// mode it asks for one fdatasync (shared with concurrent callers).
    /// Never retried on failure: a failed sync poisons the log.
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`] or [`Error::NoSpace`] if a write or sync failed,
    /// this one or an earlier one: records may then be on disk or not,
    /// and none after the failure is reported durable.
    pub fn sync(&self) -> Result<()> {
        let last = self.next_lsn() - 1;
        if last == 0 {
            return self.check_poison();
        }
        Ticket {
            lsn: last,
            shared: self.shared.clone(),
        }
        .wait(Level::Durable)
    }

    /// [`sync`](Self::sync) without blocking a thread: a future that
    /// resolves once every record appended before this call is durable
    /// (in written mode it asks the ring for the fdatasync at once, when
    /// called, not when first polled).
    ///
    /// # Errors
    ///
    /// The poison (`Poisoned` or `NoSpace`) if a write or sync fails
    /// first; `Closed` if the log closes before.
    ///
    /// Cost: as [`wait_for`](Self::wait_for).
    pub fn sync_async(&self) -> impl Future<Output = Result<()>> + Send + Unpin + 'static + use<> {
        let last = self.next_lsn() - 1;
        self.shared.want(last, Level::Durable);
        TicketFuture::new(self.shared.clone(), last, Level::Durable)
    }

    /// A future that resolves once the watermark of `level` reaches `lsn`:
    /// every LSN up to `lsn` is then written (`Written`) or on stable
    /// storage (`Durable`). It fails with the poison (`Poisoned`, or
    /// `NoSpace`) if a write or sync fails first, and with `Closed` if the
    /// log closes before then.
    ///
    /// `lsn` need not have been handed out yet: a follower may wait for
    /// records still to come, and the future resolves when they are
    /// appended and reach `level` (or fails with `Closed` if the log closes
    /// first). `Accepted` resolves at once for an LSN already handed out;
    /// for a later one it resolves when that record is written, since the
    /// log wakes no one at acceptance (that would cost every append).
    /// `Durable` in written mode asks the ring for a sync (as
    /// [`Ticket::wait`] does); for an LSN ahead of the log the ring then
    /// syncs as records up to it are written, so a follower far ahead in
    /// written mode makes the log sync after its writes until it is served.
    ///
    /// The future is the one [`Ticket::reached`] returns, with the same
    /// costs: it holds at most one waker in the log however often it is
    /// polled, and dropping it removes that waker. Creating it takes no
    /// lock and allocates nothing but an `Arc` reference; it does nothing
    /// until polled.
    ///
    /// Any executor will do; here tokio's single-threaded one:
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// // LSN 2 is not handed out yet: the wait resolves once it is durable.
    /// let waiting = wal.wait_for(2, Level::Durable);
    /// for _ in 0..2 {
    ///     drop(wal.append(0, b"x")?); // the tickets are not needed
    /// }
    /// rt.block_on(waiting)?;
    /// assert!(wal.durable_lsn() >= 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The future resolves to [`Error::Poisoned`] or [`Error::NoSpace`] if
    /// a write or sync fails before `lsn` reaches `level`, and to
    /// [`Error::Closed`] if the log closes first (only possible for an LSN
    /// not handed out yet: a close writes every record first).
    pub fn wait_for(
        &self,
        lsn: Lsn,
        level: Level,
    ) -> impl Future<Output = Result<()>> + Send + Unpin + 'static + use<> {
        let level = if level == Level::Accepted && lsn >= self.next_lsn() {
            Level::Written
        } else {
            level
        };
        TicketFuture::new(self.shared.clone(), lsn, level)
    }

    /// Why the log is poisoned, or `None` while it is healthy: a health
    /// or readiness probe's question. Once a write, sync or other
    /// write-path operation fails, the log keeps the first cause for good;
    /// every append, wait and sync fails with [`Poison::error`] from then
    /// on, and only a reopen (which recovers) clears it. No lock, no
    /// syscall, never blocks: one atomic load, plus one clone of the
    /// cause's message or path when there is one.
    pub fn poison_cause(&self) -> Option<Poison> {
        self.shared.acks().poison_cause().cloned()
    }

    fn check_poison(&self) -> Result<()> {
        match self.shared.acks().poison_cause() {
            Some(p) => Err(p.error()),
            None => Ok(()),
        }
    }

    /// Highest LSN on stable storage (every LSN at or below it is durable).
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.acks().durable()
    }

    /// Highest LSN whose write completed, contiguous from the start.
    pub fn written_lsn(&self) -> Lsn {
        self.shared.acks().written()
    }

    /// The LSN the next append will get; the last one handed out is
    /// `next_lsn() - 1` (0 before the first append of a new log). Handed
    /// out is not written: wait for it with [`wait_for`](Self::wait_for).
    /// Cost: one atomic load.
    pub fn next_lsn(&self) -> Lsn {
        self.shared.next_lsn()
    }

    /// The oldest LSN still on disk: the base LSN of the oldest segment
    /// kept (the LSN of its first record, as its file name says), which
    /// is also that segment's id. Checkpoints move it forward. Cost: one
    /// uncontended lock.
    pub fn oldest_lsn(&self) -> Lsn {
        self.shared.segment_set().oldest_base().unwrap_or(1)
    }

    /// The segment new records go to, by its id: its base LSN. A roll
    /// decided by an append moves it at once, before the ring installs
    /// the file. Cost: the reservation lock, briefly.
    pub fn active_segment(&self) -> Lsn {
        self.shared.lock().seg_base
    }

    /// The engine state, for the crate's own tests, the async façade
    /// (`pool`) and an archiver attached to the log.
    #[cfg(any(test, feature = "tokio", feature = "archive"))]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The log's configuration.
    pub fn config(&self) -> &Config {
        self.shared.cfg()
    }

    /// The directory the log lives in.
    ///
    /// Resolved once at [`open`](Self::open): absolute, without symlinks,
    /// whatever the working directory was then or is now.
    pub fn dir(&self) -> &Path {
        self.shared.dir().path()
    }

    /// Counters, watermarks, what the log holds on disk and how long its
    /// writes and syncs take: what a dashboard shows.
    ///
    /// Cost: atomic loads, two uncontended locks to copy the latency
    /// quantiles out (the ring thread records into them) and a walk over
    /// the segment list; no syscall. Meant for a monitoring interval, not
    /// a hot path.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters();
        let sh = &self.shared;
        let archived_lsn = sh.retention().archived_lsn();
        let (segments, disk_bytes, oldest_lsn, archive_held_bytes) = {
            let set = sh.segment_set();
            let held = archived_lsn.map_or(0, |a| set.held_by_archive(a));
            (set.len(), set.bytes(), set.oldest_base().unwrap_or(1), held)
        };
        Stats {
            segments,
            disk_bytes,
            oldest_lsn,
            backend: self.backend,
            direct_io: sh.direct_io(),
            file_system: sh.file_system(),
            writes_in_flight: c.writes_in_flight.load(Ordering::Relaxed),
            backpressure_waits: c.backpressure_waits.load(Ordering::Relaxed),
            poisoned: sh.acks().poison_cause().is_some(),
            over_soft_limit: sh.cfg().soft_log_bytes.is_some_and(|l| disk_bytes > l),
            dropped_records: c.dropped_records.load(Ordering::Relaxed),
            last_dropped: sh.retention().last_dropped(),
            archived_lsn,
            archive_held_bytes,
            write_latency: c.write_latency.summary(),
            sync_latency: c.sync_latency.summary(),
            next_lsn: self.next_lsn(),
            written_lsn: self.written_lsn(),
            durable_lsn: self.durable_lsn(),
            writes: c.writes.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            rolls: c.rolls.load(Ordering::Relaxed),
            sync_method: self.shared.sync_method(),
            index_points: sh.index().len(),
        }
    }

    /// The record at `lsn`, once it is written.
    ///
    /// `NotWritten` if `lsn` is above the written watermark (wait with
    /// [`wait_for`](Self::wait_for), then read); `Released` if it was
    /// checkpointed away; `GivenUp` if recovery gave it up.
    ///
    /// Cost: the segment holding `lsn` is found from the in-memory segment
    /// list and the walk starts at the nearest point of the sparse index
    /// at or below `lsn` (see [`Stats::index_points`]), so it reads and
    /// CRC-checks at most 64 KiB of frames plus the record's own, through
    /// the page cache (one 1 MiB read); one allocation for the payload.
    /// For many reads in order, use one [`reader_from`](Self::reader_from).
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let ticket = wal.append(0, b"hello")?;
    /// ticket.wait(Level::Written)?; // readable once written
    /// let rec = wal.read(ticket.lsn())?;
    /// assert_eq!((rec.stream, rec.payload.as_slice()), (0, b"hello".as_slice()));
    /// assert!(matches!(wal.read(2), Err(ringwal::Error::NotWritten { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Async callers: `read_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// - [`Error::NotWritten`]: `lsn` is 0 or above the written watermark.
    /// - [`Error::Released`]: `lsn` was checkpointed away.
    /// - [`Error::Gap`]: the segment that should hold `lsn` is missing.
    /// - [`Error::GivenUp`]: recovery gave `lsn` up (a point-in-time
    ///   recovery, or an open after a failed writer): no record has it.
    /// - [`Error::Corrupt`] or [`Error::Io`]: the segment could not be read
    ///   or holds damage where the record should be.
    pub fn read(&self, lsn: Lsn) -> Result<Record> {
        read(&self.shared, lsn)
    }

    /// Every record from `from` (0: the oldest kept) on, waiting at the end
    /// of the written data for more, across rolls, until the log closes
    /// (see [`Follower`]). `Released` at once if `from` was checkpointed away.
    ///
    /// Cost: as [`reader_from`](Self::reader_from). The follower does not
    /// keep the log open: closing or dropping the `Wal` ends it (`None`).
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let wal = std::sync::Arc::new(wal);
    /// let mut follower = wal.follow(1)?;
    /// let writer = {
    ///     let wal = wal.clone();
    ///     std::thread::spawn(move || -> ringwal::Result<()> {
    ///         for i in 0..3u8 {
    ///             wal.append(0, &[i])?.wait(Level::Written)?;
    ///         }
    ///         Ok(())
    ///     })
    /// };
    /// // Blocks at the end of the written data until the writer adds more.
    /// for i in 0..3u8 {
    ///     let rec = follower.next().expect("the log is open")?;
    ///     assert_eq!(rec.payload, [i]);
    /// }
    /// writer.join().unwrap()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Released`] if `from` is below the oldest LSN kept,
    /// [`Error::Io`] if its segment cannot be opened. The follower itself
    /// then yields `Released`, [`Error::Corrupt`], [`Error::Poisoned`] or
    /// [`Error::NoSpace`] once, and ends (see [`Follower`]).
    pub fn follow(&self, from: Lsn) -> Result<Follower> {
        Ok(Follower::new(self.reader_from(from)?, self.shared.clone()))
    }

    /// Iterate over records from `from` (0 or 1: the oldest kept) up to the
    /// written watermark at the time of this call, across segments.
    ///
    /// `from` below the oldest LSN kept is `Released`: the records were
    /// checkpointed away, and skipping them silently would hide it.
    ///
    /// The reader starts at the sparse index's nearest point at or below
    /// `from`, not at the front of its segment; frames before that point
    /// are not read (`verify` reads everything).
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let last = wal.append_batch(&[(0, b"a".as_slice()), (0, b"b"), (0, b"c")])?;
    /// last.wait(Level::Written)?;
    /// let from_two: Vec<Vec<u8>> = wal
    ///     .reader_from(2)?
    ///     .map(|r| r.map(|r| r.payload))
    ///     .collect::<ringwal::Result<_>>()?;
    /// assert_eq!(from_two, [b"b".to_vec(), b"c".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Released`] if `from` is below the oldest LSN kept;
    /// [`Error::Io`] if a segment cannot be opened. The iterator yields
    /// [`Error::Corrupt`], [`Error::Gap`], [`Error::Released`] or
    /// [`Error::Io`] items for damage, a missing segment, a segment
    /// checkpointed away under it, or a failed read.
    pub fn reader_from(&self, from: Lsn) -> Result<Reader> {
        reader_from(&self.shared, from)
    }

    /// Delete whole sealed segments whose every record is at or below
    /// `up_to`, oldest first, then fsync the directory. The active segment
    /// is never deleted. Returns how many segments were removed.
    ///
    /// Up to four removed segments are renamed to spare names
    /// instead of unlinked, and the next rolls reuse them: their blocks are
    /// already written, so a new segment costs neither zero-writing nor
    /// unwritten extents. A recycled file holds its previous life's frames
    /// under another salt, which never validate; recovery treats them as
    /// it treats any bytes past the end of the data.
    ///
    /// Pass only an LSN your own snapshot covers: the log cannot know what
    /// you still need. An `up_to` past the last LSN handed out is refused
    /// with [`Error::PastEnd`] and removes nothing: no snapshot covers
    /// records not appended yet, so such an LSN is a mistake (one digit
    /// too many), and taken at its word it would release every sealed
    /// segment. To release all of them, pass
    /// [`next_lsn`](Self::next_lsn)` - 1`. Cost: one unlink or rename per
    /// segment plus one directory sync.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// // Small segments, so that a few records fill some.
    /// let cfg = Config::builder().segment_bytes(64 << 10).max_record_bytes(4 << 10).build();
    /// let (wal, _) = Wal::open(dir.path(), cfg)?;
    /// let mut last = None;
    /// for _ in 0..100 {
    ///     last = Some(wal.append(0, &[7; 2048])?);
    /// }
    /// last.unwrap().wait(Level::Durable)?;
    /// // Say a snapshot now covers the first 60 records.
    /// let removed = wal.checkpoint(60)?;
    /// assert!(removed > 0);
    /// assert!(wal.oldest_lsn() <= 61); // nothing the snapshot lacks is gone
    /// assert!(matches!(wal.read(1), Err(ringwal::Error::Released { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Async callers: `checkpoint_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// - [`Error::Poisoned`] or [`Error::NoSpace`]: the log is poisoned, or
    ///   writing the manifest or syncing the directory failed (which
    ///   poisons it: a failed sync is never retried).
    /// - [`Error::PastEnd`]: `up_to` is past the last LSN handed out
    ///   (`what` is `"up_to"`); nothing was removed.
    /// - [`Error::Io`]: removing a segment failed; the segments removed
    ///   before it stay removed, and the rest stay listed.
    pub fn checkpoint(&self, up_to: Lsn) -> Result<usize> {
        let last = self.next_lsn() - 1;
        if up_to > last {
            return Err(Error::PastEnd {
                what: "up_to",
                lsn: up_to,
                last,
            });
        }
        retention::checkpoint(&self.shared, up_to, Recycle::Yes)
    }

    /// Append a checkpoint marker: one record of kind
    /// [`Kind::Checkpoint`] on stream 0 whose payload is `snapshot_lsn` as
    /// 8 little-endian bytes. It says "the caller's snapshot covers every
    /// record up to `snapshot_lsn`"; it deletes nothing (see
    /// [`checkpoint_to_marker`](Self::checkpoint_to_marker) for that).
    ///
    /// `snapshot_lsn` must be below [`next_lsn`](Self::next_lsn): a
    /// snapshot cannot cover records not yet appended. A larger one is
    /// refused with [`Error::PastEnd`] (`lsn` is `snapshot_lsn`, `last`
    /// the last LSN handed out) and nothing is appended.
    /// 0 is accepted (a snapshot that covers nothing). The marker's own LSN
    /// is therefore always above `snapshot_lsn`.
    ///
    /// Guarantees: the marker takes the same reservation as
    /// [`append`](Self::append), so it is ordered with every other record,
    /// and the ticket says when it is written or durable. Once durable, it
    /// survives any crash, and the next [`open`](Self::open) reports it as
    /// [`RecoveryReport::last_checkpoint`] (unless a newer one is kept);
    /// a marker in a torn tail that recovery cuts was never durable and is
    /// not reported. [`last_checkpoint_marker`](Self::last_checkpoint_marker)
    /// returns it at once, durable or not.
    ///
    /// Readers see the marker like any record, with `kind ==
    /// Kind::Checkpoint`; a consumer restoring from the snapshot resumes
    /// with `reader_from(marker.snapshot_lsn + 1)` (and meets the marker
    /// itself on the way, to skip).
    ///
    /// Cost: that of an `append` of 8 bytes, plus one uncontended lock.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// drop(wal.append(0, b"state change")?);
    /// // The caller's snapshot now covers LSN 1.
    /// let marker = wal.checkpoint_marker(1)?;
    /// marker.wait(Level::Durable)?;
    /// let m = wal.last_checkpoint_marker().unwrap();
    /// assert_eq!((m.lsn, m.snapshot_lsn), (marker.lsn(), 1));
    /// wal.close()?;
    ///
    /// // The next open reports it.
    /// let (_wal, report) = Wal::open(dir.path(), Config::default())?;
    /// assert_eq!(report.last_checkpoint.map(|m| m.snapshot_lsn), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::PastEnd`] if `snapshot_lsn` is past the last LSN handed
    /// out, [`next_lsn`](Self::next_lsn)` - 1` (no snapshot can cover a
    /// record not handed out yet); otherwise as [`append`](Self::append).
    /// Nothing is appended on error.
    pub fn checkpoint_marker(&self, snapshot_lsn: Lsn) -> Result<Ticket> {
        let last = self.next_lsn() - 1;
        if snapshot_lsn > last {
            return Err(Error::PastEnd {
                what: "snapshot_lsn",
                lsn: snapshot_lsn,
                last,
            });
        }
        let bytes = snapshot_lsn.to_le_bytes();
        let ticket = Ticket::issue(
            &self.shared,
            &[(0, &bytes)],
            Kind::Checkpoint,
            OnFull::Wait,
            |_| {},
        )?;
        let lsn = ticket.lsn;
        assert!(
            lsn > snapshot_lsn,
            "a marker's LSN is above the snapshot it vouches for"
        );
        let marker = CheckpointMarker { lsn, snapshot_lsn };
        let mut newest = self.marker.lock().unwrap_or_else(|p| p.into_inner());
        // Concurrent callers may get here out of LSN order: keep the newest.
        if newest.is_none_or(|m| m.lsn < lsn) {
            *newest = Some(marker);
        }
        Ok(ticket)
    }

    /// The newest checkpoint marker known to this handle: the one recovery
    /// found at [`open`](Self::open), or the newest appended since through
    /// [`checkpoint_marker`](Self::checkpoint_marker), whether durable yet
    /// or not. `None` if there is none. Cost: one uncontended lock.
    pub fn last_checkpoint_marker(&self) -> Option<CheckpointMarker> {
        *self.marker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`checkpoint`](Self::checkpoint) up to the snapshot LSN of the
    /// newest checkpoint marker, once that marker is durable: segments
    /// wholly at or below `snapshot_lsn` are removed. `Ok(0)` when there is
    /// no marker.
    ///
    /// If the newest marker is not durable yet, this first waits for it
    /// (as [`Ticket::wait`] at [`Level::Durable`] would, asking for a sync
    /// in written mode): deleting records the marker vouches for before
    /// the marker itself is on disk would leave, after a crash, a log that
    /// neither holds them nor says a snapshot covers them.
    ///
    /// Cost: possibly one sync wait, then that of `checkpoint`.
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`] or [`Error::NoSpace`] if waiting for the marker
    /// fails; otherwise as [`checkpoint`](Self::checkpoint).
    pub fn checkpoint_to_marker(&self) -> Result<usize> {
        let Some(marker) = self.last_checkpoint_marker() else {
            return Ok(0);
        };
        if marker.lsn > self.durable_lsn() {
            Ticket {
                lsn: marker.lsn,
                shared: self.shared.clone(),
            }
            .wait(Level::Durable)?;
        }
        assert!(
            self.durable_lsn() >= marker.lsn,
            "segments are removed only behind a durable marker"
        );
        self.checkpoint(marker.snapshot_lsn)
    }

    /// Age-based retention: delete, as [`checkpoint`](Self::checkpoint)
    /// does, every whole segment all of whose records are older than
    /// `age`, judged by the creation time in the header of the segment
    /// after it (every record of a segment was written before the next
    /// one was created). The active segment is never deleted. Returns how
    /// many segments were removed.
    ///
    /// Unlike `checkpoint`, this drops records whatever the caller's
    /// snapshots cover: for logs that keep recent data only (a collector's
    /// buffer), where old records are worth less than the disk they hold.
    /// Segments written by a version-1 writer carry no creation time and
    /// stop the scan (kept).
    ///
    /// # Errors
    ///
    /// As [`checkpoint`](Self::checkpoint); `Io` if a segment header
    /// cannot be read.
    ///
    /// Cost: one `open` and one 8 KiB header read per segment examined,
    /// then what `checkpoint` costs.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = ringwal::Wal::open(dir.path(), ringwal::Config::default())?;
    /// // Keep about a day of records.
    /// let removed = wal.checkpoint_older_than(std::time::Duration::from_secs(24 * 3600))?;
    /// assert_eq!(removed, 0, "nothing is that old yet");
    /// # wal.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn checkpoint_older_than(&self, age: std::time::Duration) -> Result<usize> {
        let cutoff = lifecycle::now_unix_ms().saturating_sub(age.as_millis() as u64);
        let sh = &self.shared;
        let segs = sh.segment_list();
        let mut up_to = None;
        for pair in segs.windows(2) {
            let next = &pair[1];
            let created = match scan::open(&*sh.cfg().vfs, next, sh.cfg().node, Some(sh.log_id()))?
            {
                Ok(w) => w.header().created_unix_ms,
                Err(p) => return Err(p.error(next, sh.cfg().node)),
            };
            if created == 0 || created > cutoff {
                break;
            }
            up_to = Some(next.base - 1);
        }
        match up_to {
            Some(lsn) => self.checkpoint(lsn),
            None => Ok(0),
        }
    }

    /// Drain every appended record to disk, sync, stop the ring thread and
    /// release the lock. Returns the first failure, if any (a poisoned log
    /// reports it here too). Dropping the log does the same and discards
    /// the result.
    ///
    /// Blocks until the ring thread is done, except on the ring thread
    /// itself (a waker it runs may own the last handle): there the drain is
    /// started and finished by that thread after this returns, which can
    /// then not report the drain's outcome. Either way every record is
    /// written and every waiter answered, and the lock is held until the
    /// last write is done.
    ///
    /// Async callers: `close_async` runs this on tokio's blocking pool
    /// (needs the `tokio` feature).
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`] or [`Error::NoSpace`]: a write or sync failed,
    /// during the drain or before it. Records acknowledged before the
    /// failure are safe; reopen to recover.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        let handle = self.ring.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(handle) = handle else {
            return self.check_poison();
        };
        self.shared.begin_close();
        self.shared.wake_space_ending();
        self.shared.alert_ring();
        if handle.thread().id() == std::thread::current().id() {
            // The last handle went away on the ring thread itself: a waker
            // it ran (an executor polling inline) dropped it. The thread
            // cannot wait for itself; once this returns it goes back to
            // its loop, sees the log closing, and finishes the drain on its
            // own (it holds the writer lock until it is done). Waiters are
            // answered as the drain proceeds.
            return self.check_poison();
        }
        let _ = handle.join();
        self.check_poison()
    }
}

/// [`Wal::read`] of the log `sh`.
pub(crate) fn read(sh: &Shared, lsn: Lsn) -> Result<Record> {
    let written = sh.acks().written();
    if lsn == 0 || lsn > written {
        return Err(Error::NotWritten { lsn, written });
    }
    let mut reader = reader_from(sh, lsn)?;
    let first = reader.next();
    // A reader steps over LSNs recovery gave up: one it stepped over to
    // get here is the answer, whatever follows it.
    if let Some(given_up) = reader.given_up(lsn) {
        return Err(given_up);
    }
    match first {
        Some(Ok(r)) if r.lsn == lsn => Ok(r),
        Some(Err(e)) => Err(e),
        Some(Ok(r)) => {
            assert!(
                r.lsn > lsn,
                "a reader from {lsn} yielded {} below it",
                r.lsn
            );
            Err(Error::Gap {
                file: sh.dir().path().to_path_buf(),
                expected: lsn,
                found: r.lsn,
            })
        }
        None => Err(Error::NotWritten { lsn, written }),
    }
}

/// [`Wal::reader_from`] of the log `sh`.
fn reader_from(sh: &Shared, from: Lsn) -> Result<Reader> {
    // The watermark first: a segment is listed before anything in it
    // can be written, so every record up to it is in the list below.
    let upto = sh.acks().written();
    let segs = sh.segment_list();
    Reader::new(
        sh.cfg(),
        sh.dir().clone(),
        segs,
        from,
        upto,
        Some(sh.log_id()),
    )
    .map(|r| r.seek_with(&sh.index()))
}

impl Drop for Wal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// `mkdir -p dir`, and make every directory it created durable in its
/// parent: a log whose directory entry a power loss could take away is no
/// log. Cost: one listing, plus a directory fsync per created level.
/// The log directory of `cfg.node()` in `given`, created durably if
/// missing (unless `create_if_missing` is off: then `Error::NoLog`), and
/// the writer's lock on it (`Error::Locked` if another writer holds it).
fn claim_dir(given: &Path, cfg: &Config) -> Result<(LogDir, ringwal_platform::VFile)> {
    let vfs = &*cfg.vfs;
    if !cfg.create_if_missing {
        LogDir::new(given, cfg.node).list_log(vfs, false)?;
    }
    create_dir_durably(vfs, given, cfg.dir_mode)?;
    let dir = LogDir::resolve(vfs, given, cfg.node)?.with_file_mode(cfg.file_mode);
    let lock = segments::lock_writer(vfs, &dir)?;
    Ok((dir, lock))
}

/// The segment appends continue in, its header and where its next write
/// goes: the one recovery left active, else a new one (added to
/// `rec.segments`): the first of an empty log, or, in point-in-time
/// recovery when the segment kept is full, one opened by the skip of the
/// LSNs that will never be handed out.
fn active_segment(
    dir: &LogDir,
    cfg: &Config,
    rec: &mut recovery::Recovered,
    log_id: u64,
    cipher: Option<&crate::at_rest::crypt::Cipher>,
) -> Result<(SegmentFile, SegmentHeader, u64)> {
    let (seg, header, write_at) = match (rec.active.take(), rec.skip_in_new_segment) {
        (Some(a), _) => return Ok(a),
        (None, None) => {
            let (seg, header) = create_segment(dir, cfg, rec.next_lsn, log_id, cipher)?;
            rec.report.created = true;
            let at = header.frames_start();
            (seg, header, at)
        }
        (None, Some((first, count))) => {
            let (seg, header) = create_segment(dir, cfg, first, log_id, cipher)?;
            let at = recovery::write_skip(
                &*cfg.vfs,
                &seg.path,
                &header,
                header.frames_start(),
                first,
                count,
            )?
            .expect("a new segment has room for a skip");
            (seg, header, at)
        }
    };
    assert!(
        rec.segments.last().is_none_or(|s| s.file.base < seg.base),
        "a new segment's base is above every kept one"
    );
    rec.segments.push(Live {
        file: seg.clone(),
        bytes: header.segment_bytes,
    });
    Ok((seg, header, write_at))
}

/// Write the manifest every later open holds the log to: what it holds
/// now, all of it durable (recovery synced what it found), with `active`
/// the newest segment's base. Written afresh, not raised: a point-in-time
/// recovery may have set the newest segments aside.
fn opening_manifest(
    dir: &LogDir,
    cfg: &Config,
    rec: &recovery::Recovered,
    log_id: u64,
    active: Lsn,
) -> Result<manifest::Keeper> {
    let manifest = Manifest {
        node: cfg.node,
        log_id,
        newest_base: active,
        durable_lsn: rec.next_lsn - 1,
        handed_out: rec
            .manifest
            .map_or(0, |m| m.handed_out)
            .max(rec.next_lsn - 1),
        oldest_lsn: rec.segments.first().map_or(active, |s| s.file.base),
    };
    assert!(
        manifest.oldest_lsn <= manifest.newest_base,
        "the oldest segment kept is not above the newest"
    );
    manifest::write(&*cfg.vfs, dir, &manifest)?;
    Ok(manifest::Keeper::new(
        cfg.vfs.clone(),
        dir.clone(),
        manifest,
    ))
}

fn create_dir_durably(vfs: &dyn ringwal_platform::Vfs, dir: &Path, mode: u32) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
        match vfs.list(d) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(d),
            Err(e) => return Err(Error::io(d, e)),
        }
        at = d.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    vfs.create_dir_all(dir, mode)
        .map_err(|e| Error::io(dir, e))?;
    for d in missing {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        vfs.sync_dir(parent).map_err(|e| Error::io(parent, e))?;
    }
    Ok(())
}
