//! The engine state every thread shares: a struct of owned parts, each
//! in its own file with private fields, reached through the methods here.
//!
//! - [`Staging`]: the reservation lock and the staging buffers under it;
//!   where producers place frames and the ring takes batches, once per
//!   loop turn ([`Staging::exchange`]).
//! - [`Admission`]: the close, the one count of LSNs, the waits for space.
//! - [`Doorbell`]: how the ring sleeps and who wakes it.
//! - [`Acks`]: the watermarks, their waiters and the poison.
//! - [`LogFiles`]: the segment set, the sparse index, the recycled spares
//!   and the manifest.
//! - [`Retention`]: whose turn it is to remove segments, and what the
//!   size limit dropped.
//! - [`Device`]: what open found the disk to be.
//!
//! The public handle (`wal`), the tickets and the ring thread import
//! this module; it imports none of them, so the write path has no import
//! circle.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

#[cfg(test)]
use crate::segment::lifecycle;
use ringwal_platform::file::FileSystem;
#[cfg(test)]
use ringwal_platform::file::FsKind;
use ringwal_platform::{AlignedBuf, Notifier};

use crate::at_rest::crypt::Cipher;
use crate::at_rest::format::{self, SegmentHeader};
use crate::config::{Config, Level, SyncMethod};
use crate::error::{Error, Lsn, Poison};
use crate::obs::latency::Latencies;
use crate::segment::index::{self, SparseIndex};
use crate::segment::manifest;
use crate::segment::set::{Live, LogDir, SegmentFile, SegmentSet};
use crate::sync::lock_order::RankedGuard;
use crate::write::acks::Acks;
use crate::write::admission::Admission;
use crate::write::doorbell::{Doorbell, RingSleep};
use crate::write::log_files::LogFiles;
use crate::write::retention::Retention;
use crate::write::staging::{Reservation, Staging};

// Batches are padded to the format's blocks and written with O_DIRECT
// from buffers aligned to the platform's: the two must be one size.
const _: () = assert!(format::BLOCK == ringwal_platform::BLOCK);

/// Counters for observability; relaxed atomics, read with `Wal::stats`.
#[derive(Default)]
pub(crate) struct Counters {
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub syncs: AtomicU64,
    pub rolls: AtomicU64,
    /// Times a producer waited for a free staging buffer.
    pub backpressure_waits: AtomicU64,
    /// Writes submitted and not yet complete (a gauge the ring sets).
    pub writes_in_flight: AtomicU64,
    pub write_latency: Latencies,
    pub sync_latency: Latencies,
    /// LSNs dropped by `WhenFull::DropOldest`.
    pub dropped_records: AtomicU64,
}

/// Where a log resumes after recovery.
pub(crate) struct Resume<'a> {
    /// The LSN the next append gets.
    pub next_lsn: Lsn,
    /// The header of the segment appends continue in.
    pub header: &'a SegmentHeader,
    /// Where that segment's next batch goes.
    pub write_at: u64,
    /// The log's segments on disk, oldest first.
    pub segments: Vec<Live>,
    /// Seek points of the records on disk.
    pub index: SparseIndex,
    /// Whether this open created that segment (it has held no frame of
    /// an earlier process).
    pub fresh: bool,
    /// The key new segments are sealed with now (the provider's current).
    pub cipher: Option<Arc<Cipher>>,
}

/// What open found the log's disk to be, fixed before the ring starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Device {
    /// How durable-mode writes are made durable: the configured method,
    /// unless the log's file system does not honour `RWF_DSYNC`; then
    /// `WriteThenFdatasync`. The ring reads this, never `cfg.sync_method`.
    pub sync_method: SyncMethod,
    /// Whether the log's segments are written with O_DIRECT: the policy's
    /// answer for the active segment at open (`DirectIo::Auto` falls back
    /// where the file system refuses it).
    pub direct_io: bool,
    /// What the active segment's file system was found to be at open.
    pub file_system: FileSystem,
}

impl Device {
    /// The configuration's own answers, for a log whose disk was not
    /// looked at (unit tests).
    #[cfg(test)]
    pub fn as_configured(cfg: &Config) -> Device {
        Device {
            sync_method: cfg.sync_method,
            direct_io: false,
            file_system: FileSystem::of(FsKind::Other),
        }
    }
}

/// Where the next point of the sparse index is due in the segment
/// appends continue in: points already in it space the next one out from
/// the last.
fn index_due_in(header: &SegmentHeader, points: &SparseIndex) -> u64 {
    index::due_after(
        points
            .last()
            .filter(|p| p.lsn >= header.base_lsn)
            .map(|p| p.offset),
    )
}

/// The bytes of the segment of `header` appends may fill: all of it, or
/// nothing past `write_at` (so the first append rolls) for a segment whose
/// header records a narrower torn window than this writer's (every
/// segment's header bounds its own tail), one of an older format version
/// (new writes go to a segment of the current one), or one not keyed as
/// this writer seals (`same_keying`).
fn writable_bytes(cfg: &Config, header: &SegmentHeader, write_at: u64, same_keying: bool) -> u64 {
    assert!(
        write_at.is_multiple_of(format::BLOCK as u64) && write_at <= header.segment_bytes,
        "appends resume at {write_at}: block-aligned and inside the segment"
    );
    if header.torn_window >= cfg.torn_window()
        && header.version == format::FORMAT_VERSION
        && same_keying
    {
        header.segment_bytes
    } else {
        write_at
    }
}

/// Every staging buffer the log will ever use, allocated once: one per
/// write in flight, one being filled and one closed waiting for the ring;
/// side by side in one region of huge pages (`AlignedBuf::many`), so that
/// each write is one request to the disk.
fn staging_buffers(cfg: &Config) -> Vec<AlignedBuf> {
    let n = cfg.max_inflight + 2;
    // Fewer and the ring could stall with every buffer waiting for another.
    assert!(n >= 3, "{n} staging buffers, at least 3 needed");
    AlignedBuf::many(n, cfg.buffer_bytes())
}

/// `spin`, unless this process may run on one CPU only (or cannot tell).
/// Cost: one `sched_getaffinity`.
fn spin_where_cpus_allow(spin: std::time::Duration) -> std::time::Duration {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 1 => spin,
        _ => std::time::Duration::ZERO,
    }
}

/// Whether appends may continue in the segment of `header` as far as
/// sealing goes: only when this writer seals its payloads with the key
/// that segment's header names (or none, in plaintext, as it says), and
/// for a key, only in a segment of version 4 or one made by this open
/// (`fresh`). In version 4 every write's vouch carries the writer's own
/// nonce salt, drawn at open, so the LSNs an earlier writer of the
/// segment may have sealed (a torn tail cut and handed out again) never
/// meet the same nonce; in an older segment the nonce salt is the
/// header's, shared with every earlier writer of it (ARCHITECTURE.md,
/// "Encryption").
fn same_keying(header: &SegmentHeader, fresh: bool, cipher: Option<&Cipher>) -> bool {
    let key_id = cipher.map_or(0, |c| c.id());
    assert!(
        !fresh || header.key_id == key_id,
        "a segment created by this open is sealed with the current key"
    );
    fresh || (header.key_id == key_id && (key_id == 0 || header.version >= 4))
}

/// Everything the handle, the tickets and the ring thread share: owned
/// parts, each with private fields (see the module docs).
pub(crate) struct Shared {
    cfg: Config,
    dir: LogDir,
    /// The random id of this log, in every segment header it writes.
    log_id: u64,
    /// This writer's nonce salt (docs/format.md §3.5): 64 random bits
    /// drawn at open, in every vouch it writes and in the nonce of every
    /// payload it seals.
    nonce_salt: u64,
    device: Device,
    /// How long a lone blocking wait spins before it parks
    /// (`Config::wait_spin`): none where this process may run on one CPU
    /// only, since the spin would hold back the ring thread it waits for.
    wait_spin: std::time::Duration,
    staging: Staging,
    admission: Admission,
    doorbell: Doorbell,
    acks: Acks,
    files: LogFiles,
    retention: Retention,
    counters: Counters,
}

impl Shared {
    /// The state of a log resuming where `at` says, under `manifest`, on
    /// the disk `device` describes. Allocates every staging buffer the
    /// log will ever use.
    pub fn new(
        cfg: Config,
        dir: LogDir,
        notifier: Arc<Notifier>,
        at: Resume<'_>,
        manifest: manifest::Keeper,
        device: Device,
    ) -> Shared {
        let Resume {
            next_lsn,
            header,
            write_at,
            segments,
            index: points,
            fresh,
            cipher,
        } = at;
        let same_keying = same_keying(header, fresh, cipher.as_deref());
        let index_due = index_due_in(header, &points);
        let segments = SegmentSet::new(segments);
        let free = staging_buffers(&cfg);
        let buffers = free.len();
        let reservation = Reservation {
            seg_base: header.base_lsn,
            seg_id: 0,
            salt: header.salt,
            cipher,
            batch_start: write_at,
            seg_bytes: writable_bytes(&cfg, header, write_at, same_keying),
            active: None,
            ready: VecDeque::new(),
            free,
            buffers,
            waiting_for_space: 0,
            batch_open: false,
            index_due,
            live_bytes: segments.bytes(),
            seg_file_bytes: header.segment_bytes,
        };
        Shared {
            log_id: manifest.get().log_id,
            nonce_salt: crate::segment::lifecycle::new_salt(),
            staging: Staging::new(reservation),
            admission: Admission::new(next_lsn),
            doorbell: Doorbell::new(notifier),
            acks: Acks::new(next_lsn - 1),
            files: LogFiles::new(segments, points, manifest),
            retention: Retention::default(),
            counters: Counters::default(),
            wait_spin: spin_where_cpus_allow(cfg.wait_spin),
            device,
            dir,
            cfg,
        }
    }

    /// The log's configuration. Cost: none.
    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// The log's directory and node. Cost: none.
    pub fn dir(&self) -> &LogDir {
        &self.dir
    }

    /// The random id of this log. Cost: none.
    pub fn log_id(&self) -> u64 {
        self.log_id
    }

    /// This writer's nonce salt, drawn at open. Cost: none.
    pub fn nonce_salt(&self) -> u64 {
        self.nonce_salt
    }

    /// How durable-mode writes are made durable on this log's disk.
    pub fn sync_method(&self) -> SyncMethod {
        self.device.sync_method
    }

    /// Whether the log's segments are written with O_DIRECT.
    pub fn direct_io(&self) -> bool {
        self.device.direct_io
    }

    /// What the active segment's file system was found to be at open.
    pub fn file_system(&self) -> FileSystem {
        self.device.file_system
    }

    /// How long a lone blocking wait spins before it parks.
    pub fn wait_spin(&self) -> std::time::Duration {
        self.wait_spin
    }

    /// The watermarks, their waiters and the poison.
    pub fn acks(&self) -> &Acks {
        &self.acks
    }

    /// The counters `Wal::stats` reads.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The staging buffers and the reservation lock.
    pub fn staging(&self) -> &Staging {
        &self.staging
    }

    /// The close, the LSN count and the waits for space.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The ring's sleep state and wake-ups.
    pub fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    /// The segment set, the index, the recycled spares, the manifest.
    pub fn files(&self) -> &LogFiles {
        &self.files
    }

    /// Whose turn it is to remove segments.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// The reservation lock, for producers. See [`Staging::lock`].
    pub fn lock(&self) -> RankedGuard<'_, Reservation> {
        self.staging.lock()
    }

    /// A copy of the log's segment list as it is now, oldest first. Cost:
    /// one uncontended lock and a copy of the list.
    pub fn segment_list(&self) -> Vec<SegmentFile> {
        self.segment_set().files()
    }

    /// The log's segment set. See [`LogFiles::set`].
    pub fn segment_set(&self) -> RankedGuard<'_, SegmentSet> {
        self.files.set()
    }

    /// The sparse index. See [`LogFiles::index`].
    pub fn index(&self) -> RankedGuard<'_, SparseIndex> {
        self.files.index()
    }

    /// The manifest keeper.
    pub fn manifest(&self) -> &Arc<manifest::Keeper> {
        self.files.manifest()
    }

    /// Whether a batch write is durable when it completes, with the sync
    /// method this log resolved ([`Config::write_is_durable_alone`]).
    /// Cost: none.
    pub fn writes_durable_alone(&self) -> bool {
        self.cfg.write_is_durable_alone(self.device.sync_method)
    }

    /// The LSN the next record gets. Cost: one atomic load.
    pub fn next_lsn(&self) -> Lsn {
        self.admission.next_lsn()
    }

    /// Refuse every append from now on and let the ring drain: the one
    /// way a log starts to close. Cost: the reservation lock, briefly.
    pub fn begin_close(&self) {
        let held = self.lock();
        self.admission.close(&held);
    }

    /// Whether close has begun. Cost: one atomic load.
    pub fn is_closing(&self) -> bool {
        self.admission.is_closing()
    }

    /// Wake the ring thread if it sleeps, whatever it sleeps for. Cost:
    /// one syscall only when it actually sleeps; an atomic load otherwise.
    pub fn kick(&self, held: &Reservation) {
        if self.doorbell.sleep() != RingSleep::Awake {
            let woke = self.doorbell.wake();
            self.rang(woke, Some(held));
        }
    }

    /// A record was staged ([`Doorbell::staged`]); a refused wake-up
    /// poisons.
    pub fn staged(&self, takeable: bool) {
        let woke = self.doorbell.staged(takeable);
        self.rang(woke, None);
    }

    /// A producer filled its claim outside the lock: `last` when that
    /// settled its buffer, `takeable` what the reservation saw staged.
    /// Wakes the ring if it waits for this fill or sleeps for what was
    /// staged. Cost: an atomic load or two, plus one syscall when the ring
    /// is woken.
    pub fn filled(&self, last: bool, takeable: bool) {
        self.settled(last);
        self.staged(takeable);
    }

    /// A claim was filled, settling its buffer when `last`
    /// ([`Doorbell::settled`]); a refused wake-up poisons.
    pub fn settled(&self, last: bool) {
        let woke = self.doorbell.settled(last);
        self.rang(woke, None);
    }

    /// Wake the ring thread whether or not it announced a sleep
    /// ([`Doorbell::alert`]); a refused wake-up poisons.
    pub fn alert_ring(&self) {
        let woke = self.doorbell.alert();
        self.rang(woke, None);
    }

    /// A wake-up the kernel refused would strand every waiter behind the
    /// ring's sleep, so it poisons the log with its cause: waiters and
    /// later appends fail instead of hanging, and the ring, whose sleeps
    /// are bounded ([`RING_RECHECK`]), finds the poison on its own.
    /// `held` is the reservation when the caller holds its lock.
    ///
    /// [`RING_RECHECK`]: crate::write::ring::RING_RECHECK
    fn rang(&self, woke: std::io::Result<()>, held: Option<&Reservation>) {
        let Err(e) = woke else {
            return;
        };
        let cause = Poison::from_error(
            "waking the ring thread failed",
            Error::io(self.dir.path(), e),
        );
        match held {
            Some(_) => self.poison_held(cause),
            None => self.poison(cause),
        }
    }

    /// A waiter wants `lsn` at `level`: in written mode, durability needs
    /// an explicit sync, so record the request and wake the ring. Every
    /// other wait needs nothing from the ring that the record's append
    /// did not already ask for (`staged`). Cost: an atomic load, plus one
    /// atomic update and one syscall for a new sync request.
    pub fn want(&self, lsn: Lsn, level: Level) {
        if level == Level::Durable && !self.cfg.durable && self.doorbell.want_sync(lsn) {
            self.alert_ring();
        }
    }

    /// Poison the log: every waiter fails with `cause`, and so does every
    /// later append; the manifest is written no more.
    ///
    /// `Acks` keeps the one cause and sets it before it wakes anyone; the
    /// reservation reads it there, so a waiter woken by the poison finds
    /// every later append refused. Producers parked for space are woken
    /// too, after taking the reservation lock once: one that read no
    /// poison holds that lock until it parks, so the notification cannot
    /// fall between its check and its wait.
    pub fn poison(&self, cause: Poison) {
        self.set_poison(cause);
        drop(self.lock());
        // Every producer that saw no poison has left the lock: the LSNs
        // handed out are final (invariant 1).
        manifest::failed_writer(self.log_id, self.next_lsn() - 1);
        self.admission.wake_ending();
    }

    /// The poison's one cause, kept where everything reads it.
    fn set_poison(&self, cause: Poison) {
        crate::obs::trace::event!(error, dir = %self.dir.path().display(), cause = %cause, "log poisoned");
        self.files.manifest().stop();
        self.acks.poison(cause);
    }

    /// [`poison`](Self::poison) by a caller holding the reservation lock:
    /// no producer can be between its poison check and its wait, so the
    /// notification needs no pass through the lock.
    pub(super) fn poison_held(&self, cause: Poison) {
        self.set_poison(cause);
        // The lock is held: no LSN is handed out after this one.
        manifest::failed_writer(self.log_id, self.next_lsn() - 1);
        self.admission.wake_ending();
    }

    /// Wake every producer waiting for space once the log is poisoned or
    /// closing ([`Admission::wake_ending`]).
    pub fn wake_space_ending(&self) {
        self.admission.wake_ending();
    }

    /// Staging space may be free again ([`Admission::space_freed`]).
    ///
    /// # Panics
    ///
    /// Resumes the first panic of a task's waker, once all are woken.
    pub fn space_freed(&self, parked: bool) {
        if let Err(panic) = self.admission.space_freed(parked) {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The state of a new log whose ring never runs, with `buffers`
/// staging buffers left free: for unit tests of what producers and
/// waiters do without a ring thread.
#[cfg(test)]
pub(crate) fn test_shared(buffers: usize) -> Arc<Shared> {
    let cfg = Config::default();
    let header = lifecycle::new_header(&cfg, 1, 7, 9, None);
    let dir = LogDir::new(std::path::Path::new("/nonexistent"), 1);
    let manifest = format::Manifest {
        node: 1,
        log_id: 9,
        newest_base: 1,
        durable_lsn: 0,
        handed_out: 0,
        oldest_lsn: 1,
    };
    let keeper = manifest::Keeper::new(cfg.vfs.clone(), dir.clone(), manifest);
    let at = Resume {
        next_lsn: 1,
        header: &header,
        write_at: format::HEADER_BYTES as u64,
        segments: vec![Live {
            file: dir.segment(1),
            bytes: header.segment_bytes,
        }],
        index: SparseIndex::default(),
        fresh: true,
        cipher: None,
    };
    let device = Device::as_configured(&cfg);
    let sh = Shared::new(
        cfg,
        dir,
        Arc::new(Notifier::new().unwrap()),
        at,
        keeper,
        device,
    );
    {
        let mut r = sh.lock();
        r.free.truncate(buffers);
        r.buffers = r.free.len();
    }
    Arc::new(sh)
}
