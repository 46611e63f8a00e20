//! The engine state every thread shares, and the reservation: the one
//! short critical section every append goes through.
//!
//! The public handle (`wal`), the tickets and the ring thread all import
//! this module; it imports none of them, so the write path has no import
//! circle.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::time::Instant;

use ringwal_platform::{AlignedBuf, Notifier};

use crate::at_rest::codec;
use crate::at_rest::crypt::Cipher;
use crate::at_rest::format::{self, Batching, Codec, Kind, RecordHead, SegmentHeader};
use crate::at_rest::packing::{Cursor, Placed};
use crate::at_rest::payload;
use crate::config::{Config, Level, SyncMethod, WhenFull};
use crate::error::{Error, Lsn, Poison, Result};
use crate::obs::latency::Latencies;
use crate::segment::index::{self, SparseIndex};
use crate::segment::lifecycle::{self, RecyclePool, LARGE_WRITE_BYTES};
use crate::segment::manifest;
use crate::segment::set::{self as segments, Live, LogDir, SegmentFile, SegmentSet};
use crate::sync::lock_order::{Rank, Ranked, RankedGuard};
use crate::sync::wakers::WakerSet;
use crate::write::acks::Acks;
use crate::write::claim::Claim;

// Batches are padded to the format's blocks and written with O_DIRECT
// from buffers aligned to the platform's: the two must be one size.
const _: () = assert!(format::BLOCK == ringwal_platform::BLOCK);

/// A batch of frames bound for one write: whole blocks once closed. Its
/// first [`format::VOUCH_LEN`] bytes are kept for the vouch frame the ring
/// writes there when it submits the batch (the durable LSN is known only
/// then).
pub(crate) struct Batch {
    pub buf: AlignedBuf,
    pub len: usize,
    /// Segment (by base LSN) and offset the batch is written to.
    pub seg_base: Lsn,
    /// Which segment of this log's life: bumped at every roll. The base
    /// alone cannot tell segments apart when an empty one is replaced.
    pub seg_id: u64,
    pub salt: u64,
    /// The key the segment's data payloads are sealed with (its header
    /// names it); `None` for plaintext.
    pub cipher: Option<Arc<Cipher>>,
    pub offset: u64,
    /// LSN of the last record in the batch (0: padding only).
    pub last_lsn: Lsn,
    /// The highest LSN this write completes: its last record that is not
    /// followed, in a later write, by more of its atomic batch (0: none).
    /// The ledger's watermarks advance to this, so they never stop inside
    /// a batch.
    pub ack_lsn: Lsn,
}

/// State guarded by the reservation lock.
pub(crate) struct Reservation {
    /// The segment new frames go to, its salt, and where its next batch starts.
    pub seg_base: Lsn,
    pub seg_id: u64,
    pub salt: u64,
    /// The key the current segment's data payloads are sealed with,
    /// chosen (from the key provider's current one) when it was started.
    pub cipher: Option<Arc<Cipher>>,
    pub batch_start: u64,
    /// Size of the segment frames go to: its header's, which after a
    /// reopen with another configured size differs from the config's.
    pub seg_bytes: u64,
    pub active: Option<Batch>,
    pub ready: VecDeque<Batch>,
    pub free: Vec<AlignedBuf>,
    /// Staging buffers allocated at open: those in `free`, `active` and
    /// `ready` plus those the ring holds or has in flight, always.
    pub buffers: usize,
    pub waiting_for_space: usize,
    /// An atomic batch is being copied in and waits, with the lock
    /// released, for a free buffer: no other record may be sequenced
    /// until it is complete, or its LSNs would not be consecutive.
    pub batch_open: bool,
    /// The offset in the current segment from which the next record that
    /// may start a walk becomes a point of the sparse index.
    pub index_due: u64,
    /// Bytes of the log's segment files from the oldest kept to the one
    /// frames go to, as [`SegmentSet::bytes`] measures them, with rolls
    /// counted when decided and checkpoints when done: what the hard size
    /// limit is held against.
    pub live_bytes: u64,
    /// Bytes of the file of the segment frames go to: what a roll that
    /// replaces it (it holds no record) takes off `live_bytes`.
    pub seg_file_bytes: u64,
}

impl Reservation {
    /// Where the next frame would go.
    pub fn cursor(&self) -> Cursor {
        match &self.active {
            Some(b) => Cursor {
                end: b.offset + b.len as u64,
                fill: Some(b.len),
            },
            None => Cursor::at(self.batch_start),
        }
    }

    /// Open a batch in a free staging buffer where the next frame goes;
    /// false when none is free. Cost: none (the buffers are allocated
    /// once, at open).
    pub fn open_active(&mut self) -> bool {
        debug_assert!(self.active.is_none(), "one batch is filled at a time");
        debug_assert!(
            self.batch_start.is_multiple_of(format::BLOCK as u64)
                && self.batch_start >= format::HEADER_BYTES as u64,
            "batches open on a block boundary after the header"
        );
        let Some(buf) = self.free.pop() else {
            return false;
        };
        debug_assert!(buf.settled(), "a free buffer has no claim being filled");
        self.active = Some(Batch {
            buf,
            len: format::VOUCH_LEN,
            seg_base: self.seg_base,
            seg_id: self.seg_id,
            salt: self.salt,
            cipher: self.cipher.clone(),
            offset: self.batch_start,
            last_lsn: 0,
            ack_lsn: 0,
        });
        true
    }

    /// Close the active batch with padding to a block boundary and queue it
    /// for the ring. An empty batch returns its buffer to the pool.
    pub fn close_active(&mut self) {
        let Some(mut b) = self.active.take() else {
            return;
        };
        if b.last_lsn == 0 {
            self.free.push(b.buf);
            return;
        }
        let end = b.offset + b.len as u64;
        let pad = format::padding_len(end);
        if pad > 0 {
            format::encode_padding(&mut b.buf.tail_mut(b.len)[..pad], b.salt, pad);
            b.len += pad;
        }
        self.batch_start = b.offset + b.len as u64;
        debug_assert!(
            self.batch_start.is_multiple_of(format::BLOCK as u64) && b.len <= b.buf.capacity(),
            "a closed batch is whole blocks inside its buffer"
        );
        debug_assert!(
            b.ack_lsn <= b.last_lsn,
            "a write acknowledges only what it holds"
        );
        self.ready.push_back(b);
    }

    /// The next batch for the ring: a closed one, else the active one if it
    /// holds anything and `take_partial` allows it or it is large already
    /// (group commit takes whatever has accumulated).
    pub fn take_batch(&mut self, take_partial: bool) -> Option<Batch> {
        // A batch waiting for buffers has closed its last one; the ring
        // never sees it open (it holds the lock while it copies).
        debug_assert!(!self.batch_open || self.active.is_none());
        if self.ready.is_empty() && self.active_takeable(take_partial) {
            self.close_active();
        }
        // A batch goes out whole: not before every claim in it is filled.
        if !self.ready.front()?.buf.settled() {
            return None;
        }
        let b = self.ready.pop_front()?;
        debug_assert!(
            b.offset.is_multiple_of(format::BLOCK as u64) && b.len.is_multiple_of(format::BLOCK),
            "the ring writes whole blocks at block offsets"
        );
        debug_assert!(b.last_lsn > 0, "a batch handed to the ring holds a record");
        Some(b)
    }

    /// Whether the batch [`take_batch`](Self::take_batch) would take next
    /// exists but still has a claim being filled outside the lock: the
    /// ring then asks the last filler to wake it
    /// ([`Shared::await_fills`]).
    pub fn waits_for_fills(&self, take_partial: bool) -> bool {
        let next = match self.ready.front() {
            Some(b) => Some(b),
            None => self
                .active
                .as_ref()
                .filter(|_| self.active_takeable(take_partial)),
        };
        next.is_some_and(|b| !b.buf.settled())
    }

    /// Whether the active batch may go to the ring before it is full: it
    /// holds a record, and either the ring takes partial batches now or
    /// this one is as large as a bandwidth-bound write already
    /// ([`LARGE_WRITE_BYTES`]). Waiting for more records only pays while a
    /// write's flush costs more than its transfer: with 1 MiB records from
    /// 4 producers, the partial batch held behind the writes in flight
    /// left two or three writes in flight where the device takes four.
    fn active_takeable(&self, take_partial: bool) -> bool {
        self.active
            .as_ref()
            .is_some_and(|b| b.last_lsn > 0 && (take_partial || b.len as u64 >= LARGE_WRITE_BYTES))
    }

    /// Bytes of frames waiting for the ring: closed batches and the one
    /// being filled. Cost: a walk over the closed ones (a few at most).
    pub fn waiting_bytes(&self) -> usize {
        self.ready.iter().map(|b| b.len).sum::<usize>() + self.active.as_ref().map_or(0, |b| b.len)
    }

    /// What `live_bytes` becomes when the current segment rolls to a new
    /// one of `new_bytes`: one more segment, or, when the current one
    /// holds no record, the same count ([`segments::roll_replaces`]).
    pub fn live_bytes_after_roll(&self, next_lsn: Lsn, new_bytes: u64) -> u64 {
        let kept = if segments::roll_replaces(self.seg_base, next_lsn) {
            self.live_bytes
                .checked_sub(self.seg_file_bytes)
                .expect("the segment frames go to is counted in live_bytes")
        } else {
            self.live_bytes
        };
        kept.saturating_add(new_bytes)
    }

    /// Whether [`take_batch`](Self::take_batch) would return a batch.
    pub fn has_batch(&self, take_partial: bool) -> bool {
        self.batch_staged(take_partial) && !self.waits_for_fills(take_partial)
    }

    /// Whether a batch the ring may take is staged, its claims filled or
    /// not: what a producer tells the ring once its own fill is done.
    pub fn batch_staged(&self, take_partial: bool) -> bool {
        !self.ready.is_empty() || self.active_takeable(take_partial)
    }

    /// Whether frames are staged that the ring has still to write (filled
    /// or not): what a closing ring drains before it finishes.
    pub fn holds_frames(&self) -> bool {
        !self.ready.is_empty() || self.active.as_ref().is_some_and(|b| b.last_lsn > 0)
    }
}

/// Records as they are stored: each payload packed when that makes it
/// smaller, decided once, before the reservation lock.
struct Stored<'r> {
    records: &'r [(u16, &'r [u8])],
    /// Per record, the packed bytes when compression won.
    packed: Option<Vec<Option<Vec<u8>>>>,
    codec: Codec,
}

impl<'r> Stored<'r> {
    /// Validate `records` (at least one, none over the record limit) and
    /// pack them when compression applies. Cost: the codec, per record.
    fn of(cfg: &Config, records: &'r [(u16, &'r [u8])], kind: Kind) -> Result<Stored<'r>> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let max = cfg.max_record_bytes;
        if let Some((_, p)) = records.iter().find(|(_, p)| p.len() > max) {
            return Err(Error::TooLarge { len: p.len(), max });
        }
        let codec = cfg.compression.codec;
        let packed = (kind == Kind::Data && codec != Codec::None).then(|| {
            records
                .iter()
                .map(|(_, p)| codec::pack(&cfg.compression, p))
                .collect()
        });
        Ok(Stored {
            records,
            packed,
            codec,
        })
    }

    /// Record `i` as stored: its codec and its bytes.
    fn get(&self, i: usize) -> (Codec, &[u8]) {
        match self.packed.as_ref().and_then(|v| v[i].as_deref()) {
            Some(bytes) => (self.codec, bytes),
            None => (Codec::None, self.records[i].1),
        }
    }
}

/// The admission decision: what a reservation does next with the records
/// it holds ([`Shared::decide`]).
#[derive(Debug)]
enum Admit {
    /// Sequence them now: a buffer for the first frame is secured.
    Proceed,
    /// Fail the append (poisoned, closed, LSNs exhausted).
    Refuse(Error),
    /// No buffer for the first frame, or another atomic batch is being
    /// copied: wait for the ring to free space, handing it the full
    /// active buffer first when `hand_over`.
    WaitForSpace { hand_over: bool },
    /// They do not fit the segment: open the next one for them.
    Roll { after_roll: u64 },
    /// The next segment would pass the hard size limit `max` and the log
    /// blocks when full: wait for a checkpoint, up to `timeout`.
    WaitForLimit {
        max: u64,
        timeout: std::time::Duration,
    },
}

/// What a reservation does when every staging buffer is full.
#[derive(Debug)]
pub(crate) enum OnFull<'w> {
    /// Park until the ring frees one (backpressure on the caller).
    Wait,
    /// Return [`Error::Full`] at once: for a caller that must not block
    /// (an async executor's thread).
    Refuse,
    /// As `Refuse`, with `waker` registered in [`Shared::space_waiters`]
    /// (by the entry `key`) under the lock that decided the refusal, so
    /// the next freeing of space wakes it: no wake-up falls between.
    Register {
        key: &'w mut Option<u64>,
        waker: &'w Waker,
    },
}

impl OnFull<'_> {
    fn waits(&self) -> bool {
        matches!(self, OnFull::Wait)
    }
}

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

/// How the ring thread sleeps, so that producers wake it only when it can
/// act: what a staged record has to be for the wake-up to be worth a
/// context switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RingSleep {
    /// Running, or about to look for work: nobody needs to wake it.
    Awake = 0,
    /// Idle with nothing in flight: any staged record is work.
    ForRecords = 1,
    /// A partial write is in flight, so only a closed batch (or one large
    /// enough to go at once) is work; its completion wakes the ring for
    /// the rest.
    ForBatches = 2,
}

impl RingSleep {
    fn from_u8(v: u8) -> RingSleep {
        match v {
            0 => RingSleep::Awake,
            1 => RingSleep::ForRecords,
            2 => RingSleep::ForBatches,
            other => unreachable!("ring sleep state {other}"),
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
/// write in flight, one being filled and one closed waiting for the ring.
fn staging_buffers(cfg: &Config) -> Vec<AlignedBuf> {
    let n = cfg.max_inflight + 2;
    // Fewer and the ring could stall with every buffer waiting for another.
    assert!(n >= 3, "{n} staging buffers, at least 3 needed");
    (0..n)
        .map(|_| AlignedBuf::new(cfg.buffer_bytes()))
        .collect()
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
/// sealing goes: only when this writer seals its
/// payloads exactly as that segment's header says, in plaintext (or the
/// segment is `fresh`, made by this open). An encrypting writer never
/// adds frames to a segment an earlier process wrote, whose salt may
/// have sealed the LSNs it would hand out next (ARCHITECTURE.md,
/// "Encryption").
fn same_keying(header: &SegmentHeader, fresh: bool, cipher: Option<&Cipher>) -> bool {
    assert!(
        !fresh || header.key_id == cipher.map_or(0, |c| c.id()),
        "a segment created by this open is sealed with the current key"
    );
    fresh || (header.key_id == 0 && cipher.is_none())
}

/// Everything the handle, the tickets and the ring thread share.
pub(crate) struct Shared {
    pub cfg: Config,
    pub dir: LogDir,
    res: Ranked<Reservation>,
    /// Producers parked for staging space (`OnFull::Wait`).
    pub space: Condvar,
    /// Tasks refused for staging space (`OnFull::Register`), woken with
    /// the parked producers ([`space_freed`](Self::space_freed)).
    /// Registered under the reservation lock, after it when both are held.
    pub space_waiters: WakerSet,
    pub acks: Acks,
    pub notifier: Arc<Notifier>,
    /// How the ring thread sleeps ([`RingSleep`] as a `u8`).
    ring_sleep: AtomicU8,
    /// Set by the ring when the batch it would take next still has a
    /// claim being filled; the filler that settles a buffer clears it and
    /// wakes the ring ([`filled`](Self::filled)).
    fills_awaited: AtomicBool,
    /// Set once by close ([`begin_close`](Self::begin_close)), under the
    /// reservation lock so that no append decided after it proceeds; the
    /// ring reads it every loop without the lock. The one "closed" flag
    /// of the write path (`Acks` keeps whether the ring is gone).
    closing: AtomicBool,
    pub sync_wanted: AtomicU64,
    /// The LSN the next record gets: the one count of LSNs handed out,
    /// written only under the reservation lock ([`hand_out`]), read
    /// without it by anyone.
    ///
    /// [`hand_out`]: Self::hand_out
    next_lsn: AtomicU64,
    /// Taken after the checkpoint lock and before the reservation lock
    /// when held with either (see [`segment_set`](Self::segment_set)).
    segments: Ranked<SegmentSet>,
    /// Where reads of an LSN may start inside its segment. Taken after the
    /// reservation lock when both are held (a producer adding a point),
    /// never the other way round.
    index: Ranked<SparseIndex>,
    /// Checkpointed segments waiting for the preparer to reuse them; see
    /// `Wal::checkpoint`.
    pub recycled: Arc<RecyclePool>,
    pub counters: Counters,
    /// The random id of this log, in every segment header it writes.
    pub log_id: u64,
    /// The manifest, raised at rolls, checkpoints and close.
    pub manifest: Arc<manifest::Keeper>,
    /// The last LSN range `WhenFull::DropOldest` dropped.
    pub last_dropped: Mutex<Option<(Lsn, Lsn)>>,
    /// Whose turn it is to remove segments (one checkpoint at a time).
    pub retention: crate::write::retention::Retention,
    /// How durable-mode writes are made durable: the configured method,
    /// unless the log's file system does not honour `RWF_DSYNC`; then
    /// `WriteThenFdatasync`, which `Wal::open` sets before the ring
    /// starts. The ring reads this, never `cfg.sync_method`.
    pub sync_method: SyncMethod,
    /// How long a lone blocking wait spins before it parks
    /// (`Config::wait_spin`): none where this process may run on one CPU
    /// only, since the spin would hold back the ring thread it waits for.
    pub wait_spin: std::time::Duration,
    /// Whether the log's segments are written with O_DIRECT: the policy's
    /// answer for the active segment at open (`DirectIo::Auto` falls back
    /// where the file system refuses it), set by `Wal::open`.
    pub direct_io: bool,
    /// What the active segment's file system was found to be at open,
    /// set by `Wal::open`.
    pub file_system: ringwal_platform::file::FileSystem,
}

impl Shared {
    /// The state of a log resuming where `at` says, under `manifest`.
    /// Allocates every staging buffer the log will ever use.
    pub fn new(
        cfg: Config,
        dir: LogDir,
        notifier: Arc<Notifier>,
        at: Resume<'_>,
        manifest: manifest::Keeper,
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
        Shared {
            res: Ranked::new(
                Rank::Reservation,
                Reservation {
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
                },
            ),
            space: Condvar::new(),
            space_waiters: WakerSet::default(),
            acks: Acks::new(next_lsn - 1),
            notifier,
            ring_sleep: AtomicU8::new(RingSleep::Awake as u8),
            fills_awaited: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            sync_wanted: AtomicU64::new(0),
            next_lsn: AtomicU64::new(next_lsn),
            segments: Ranked::new(Rank::SegmentSet, segments),
            index: Ranked::new(Rank::Index, points),
            recycled: Arc::default(),
            counters: Counters::default(),
            log_id: manifest.get().log_id,
            manifest: Arc::new(manifest),
            last_dropped: Mutex::new(None),
            retention: Default::default(),
            sync_method: cfg.sync_method,
            wait_spin: spin_where_cpus_allow(cfg.wait_spin),
            direct_io: false,
            file_system: ringwal_platform::file::FileSystem::of(
                ringwal_platform::file::FsKind::Other,
            ),
            dir,
            cfg,
        }
    }

    pub fn lock(&self) -> RankedGuard<'_, Reservation> {
        // Every critical section is a copy and counter updates that are
        // complete before any call that could panic (the `then` hook runs
        // last), so a poisoned mutex carries no information.
        self.res.lock()
    }

    /// A copy of the log's segment list as it is now, oldest first. Cost:
    /// one uncontended lock and a copy of the list.
    pub fn segment_list(&self) -> Vec<SegmentFile> {
        self.segment_set().files()
    }

    /// The log's segment set. Held only for list updates and copies,
    /// never across I/O, so the ring's roll never waits for a checkpoint's
    /// syscalls.
    pub fn segment_set(&self) -> RankedGuard<'_, SegmentSet> {
        // Every update is one push, pop or remove that cannot panic half
        // way: a poisoned mutex carries no information.
        self.segments.lock()
    }

    /// The sparse index. Taken after the reservation lock when both are
    /// held, never the other way round.
    pub fn index(&self) -> RankedGuard<'_, SparseIndex> {
        // Every update is one push or one pruning loop that cannot panic
        // half-way: a poisoned mutex carries no information.
        self.index.lock()
    }

    /// Whether a batch write is durable when it completes, with the sync
    /// method this log resolved ([`Config::write_is_durable_alone`]).
    /// Cost: none.
    pub fn writes_durable_alone(&self) -> bool {
        self.cfg.write_is_durable_alone(self.sync_method)
    }

    /// Wake the ring thread if it sleeps, whatever it sleeps for. Cost:
    /// one syscall only when it actually sleeps; an atomic load otherwise.
    pub fn kick(&self, held: &Reservation) {
        if self.ring_sleep() != RingSleep::Awake {
            self.wake_ring(Some(held));
        }
    }

    /// A record was staged: wake the ring thread if it sleeps waiting for
    /// one, or for a batch it may take now and `takeable` says there is
    /// one. A ring with a partial write in flight cannot take another
    /// partial batch; waking it for each record only to sleep again cost
    /// the io_uring backend one context switch per record (the threaded
    /// backend, blocked in its write, never saw them). Cost: an atomic
    /// load, plus one syscall when the ring is woken.
    pub fn staged(&self, takeable: bool) {
        match self.ring_sleep() {
            RingSleep::Awake => {}
            RingSleep::ForRecords => self.wake_ring(None),
            RingSleep::ForBatches if takeable => self.wake_ring(None),
            RingSleep::ForBatches => {}
        }
    }

    /// The LSN the next record gets. Cost: one atomic load.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn.load(Ordering::Acquire)
    }

    /// Hand out `n` consecutive LSNs, under the reservation lock (`held`
    /// proves it): the only place LSNs are given, so none is given twice.
    pub(super) fn hand_out(&self, held: &Reservation, n: u64) -> Lsn {
        let first = self.next_lsn.load(Ordering::Relaxed);
        debug_assert!(
            held.seg_base <= first,
            "the segment frames go to is named at or below the next LSN"
        );
        debug_assert!(
            n >= 1
                && first
                    .checked_add(n)
                    .is_some_and(|e| e - 1 <= format::MAX_LSN)
        );
        self.next_lsn.store(first + n, Ordering::Release);
        first
    }

    /// Refuse every append from now on and let the ring drain: the one
    /// way a log starts to close. Cost: the reservation lock, briefly.
    pub fn begin_close(&self) {
        let _held = self.lock();
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether close has begun. Cost: one atomic load.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
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

    /// A claim was filled, settling its buffer when `last`: wake the ring
    /// if it waits for that. Cost: an atomic load, plus a swap and one
    /// syscall when the ring waits.
    pub fn settled(&self, last: bool) {
        if last
            && self.fills_awaited.load(Ordering::SeqCst)
            && self.fills_awaited.swap(false, Ordering::SeqCst)
        {
            self.wake_ring(None);
        }
    }

    /// The ring's look for work before it sleeps (its sleep announced):
    /// whether a batch is takeable. When the next one waits for a fill,
    /// asks its filler for a wake-up first and looks again, so the fill
    /// that lands between the look and the ask is not missed (the ask and
    /// the filler's release are both sequentially consistent). Cost: the
    /// reservation lock, briefly.
    pub fn lock_for_work(&self, take_partial: bool) -> bool {
        let r = self.lock();
        if r.has_batch(take_partial) {
            return true;
        }
        if !r.waits_for_fills(take_partial) {
            return false;
        }
        self.fills_awaited.store(true, Ordering::SeqCst);
        r.has_batch(take_partial)
    }

    /// Announce how the ring thread is about to sleep (or that it is
    /// awake). Only the ring thread calls this with a sleeping state.
    pub fn set_ring_sleep(&self, how: RingSleep) {
        self.ring_sleep.store(how as u8, Ordering::SeqCst);
    }

    fn ring_sleep(&self) -> RingSleep {
        RingSleep::from_u8(self.ring_sleep.load(Ordering::SeqCst))
    }

    /// Wake the ring thread whether or not it announced a sleep: it may
    /// be waiting on a timer or a completion with a decision to revisit
    /// (a sync request, the close). Cost: one syscall.
    pub fn alert_ring(&self) {
        self.set_ring_sleep(RingSleep::Awake);
        self.notify_ring(None);
    }

    /// Mark the ring awake and, if it slept, send the one wake-up. `held`
    /// is the reservation when the caller holds its lock.
    fn wake_ring(&self, held: Option<&Reservation>) {
        if self
            .ring_sleep
            .swap(RingSleep::Awake as u8, Ordering::SeqCst)
            != RingSleep::Awake as u8
        {
            self.notify_ring(held);
        }
    }

    /// Send the ring its wake-up. One the kernel refuses would strand
    /// every waiter behind the ring's sleep, so it poisons the log with
    /// its cause: waiters and later appends fail instead of hanging, and
    /// the ring, whose sleeps are bounded ([`RING_RECHECK`]), finds the
    /// poison on its own.
    ///
    /// [`RING_RECHECK`]: crate::write::ring::RING_RECHECK
    fn notify_ring(&self, held: Option<&Reservation>) {
        let Err(e) = self.notifier.notify() else {
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
        if level == Level::Durable
            && !self.cfg.durable
            && self.sync_wanted.fetch_max(lsn, Ordering::AcqRel) < lsn
        {
            self.alert_ring();
        }
    }

    /// Poison the log: every waiter fails with `cause`, and so does every
    /// later append; the manifest is written no more.
    ///
    /// `Acks` keeps the one cause and sets it before it wakes anyone; the
    /// reservation reads it there, so a waiter woken by the poison finds
    /// every later append refused. Producers parked on `space` are woken
    /// too, after taking the reservation lock once: one that read no
    /// poison holds that lock until it parks, so the notification cannot
    /// fall between its check and its wait.
    pub fn poison(&self, cause: Poison) {
        self.set_poison(cause);
        drop(self.lock());
        // Every producer that saw no poison has left the lock: the LSNs
        // handed out are final (invariant 1).
        crate::segment::manifest::failed_writer(self.log_id, self.next_lsn() - 1);
        self.wake_space_ending();
    }

    /// The poison's one cause, kept where everything reads it.
    fn set_poison(&self, cause: Poison) {
        crate::obs::trace::event!(error, dir = %self.dir.path().display(), cause = %cause, "log poisoned");
        self.manifest.stop();
        self.acks.poison(cause);
    }

    /// [`poison`](Self::poison) by a caller holding the reservation lock:
    /// no producer can be between its poison check and its wait, so the
    /// notification needs no pass through the lock.
    pub(super) fn poison_held(&self, cause: Poison) {
        self.set_poison(cause);
        // The lock is held: no LSN is handed out after this one.
        crate::segment::manifest::failed_writer(self.log_id, self.next_lsn() - 1);
        self.wake_space_ending();
    }

    /// Wake every producer waiting for space once the log is poisoned or
    /// closing: each finds that and fails. A waker that panics changes
    /// nothing more (and must not unwind out of a close).
    pub fn wake_space_ending(&self) {
        self.space.notify_all();
        let _ = self.space_waiters.wake_all();
    }

    /// Staging space may be free again (a buffer came back, an atomic
    /// batch let go of the reservation, a checkpoint made room): wake the
    /// producers waiting for it, the parked ones when `parked` says some
    /// may be, and every registered task. Call after the change, with the
    /// reservation lock released: a task registers under that lock, so it
    /// either saw the change or is woken here.
    ///
    /// Cost: one atomic load when no task waits, plus the condvar's
    /// notification when `parked`.
    ///
    /// # Panics
    ///
    /// Resumes the first panic of a task's waker, once all are woken.
    pub fn space_freed(&self, parked: bool) {
        if parked {
            self.space.notify_all();
        }
        if let Err(panic) = self.space_waiters.wake_all() {
            std::panic::resume_unwind(panic);
        }
    }

    /// Refuse a record for lack of space: `Full`, with the caller's waker
    /// registered first when it asked for that (a wait for space, counted
    /// as a parked producer's is). The reservation is held, so the
    /// registration and the refusal are one decision.
    fn refuse(&self, _held: &Reservation, on_full: &mut OnFull<'_>) -> Error {
        if let OnFull::Register { key, waker } = on_full {
            self.space_waiters.register(key, waker);
            self.counters
                .backpressure_waits
                .fetch_add(1, Ordering::Relaxed);
        }
        Error::Full
    }

    /// Sequence `records` (all of kind `kind`) under one reservation: they
    /// get consecutive LSNs, land in one segment (a roll comes first if
    /// they do not fit the current one) and, when there are several, form
    /// one atomic batch that the ledger acknowledges only as a whole.
    /// Runs `then(first)` under the lock once every place is decided, and
    /// returns the first LSN.
    ///
    /// Cost: compression (if configured) before the lock; one pass over
    /// the lengths to plan under it. Every record is copied, checksummed
    /// and sealed after the lock is released ([`claim_one`], and
    /// [`reserve_batch`] for a batch); a batch larger than the free staging
    /// buffers fills what it claimed and waits (lock released, everyone
    /// else held back) for the ring to free more.
    ///
    /// [`claim_one`]: Self::claim_one
    /// [`reserve_batch`]: Self::reserve_batch
    pub fn reserve_all(
        &self,
        records: &[(u16, &[u8])],
        kind: Kind,
        mut on_full: OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Lsn> {
        let stored = Stored::of(&self.cfg, records, kind)?;
        if let [(stream, _)] = records {
            let (codec, bytes) = stored.get(0);
            let claim = self.claim_one(*stream, kind, codec, bytes.len(), on_full, then)?;
            return Ok(claim.fill(|p| p.copy_from_slice(bytes)));
        }
        self.reserve_batch(&stored, kind, &mut on_full, then)
    }

    /// [`reserve_all`](Self::reserve_all) for an atomic batch of two or
    /// more records: every member's frame claimed under the lock (none of
    /// another producer's frames may come between), then filled after it,
    /// as a lone record's is. The hook runs under the lock once every
    /// place is decided; a panic in it is resumed once the members are
    /// filled, since they are sequenced and are written all the same.
    fn reserve_batch(
        &self,
        stored: &Stored<'_>,
        kind: Kind,
        on_full: &mut OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Lsn> {
        let n = stored.records.len();
        debug_assert!(n >= 2, "a lone record is claimed, not batched");
        // Frame lengths, in a segment whose payloads are sealed or not.
        let flen_of = |i: usize, sealed: bool| {
            format::frame_len(payload::stored_len(stored.get(i).1.len(), sealed))
        };
        let flens = move |sealed: bool| (0..n).map(move |i| flen_of(i, sealed));
        self.cfg
            .fit_fresh((0..n).map(|i| stored.get(i).1.len()), kind)?;
        let mut r = self.admit(n as u64, kind, flens, on_full)?;
        let first = self.hand_out(&r, n as u64);
        r.batch_open = true;
        // Declared after the guard, so dropped before it on an unwind:
        // claims abandoned under the lock poison without taking it.
        let mut claims = Vec::with_capacity(n);
        for i in 0..n {
            r = self.claim_member(r, stored, kind, first, i, &mut claims)?;
        }
        debug_assert!(
            r.active
                .as_ref()
                .is_some_and(|b| b.last_lsn == first + n as u64 - 1 && b.ack_lsn == b.last_lsn),
            "a batch's last member closes it and is what its write acknowledges"
        );
        let hook_panic = catch_unwind(AssertUnwindSafe(|| then(first))).err();
        // Read under the lock: the ring announces how it sleeps before it
        // takes the lock to look for work, so either it sees this record
        // or this producer sees the announcement (`staged`).
        let takeable = r.batch_staged(false);
        r.batch_open = false;
        drop(r);
        fill_members(stored, &mut claims);
        self.space_freed(true);
        self.staged(takeable);
        if let Some(panic) = hook_panic {
            resume_unwind(panic);
        }
        Ok(first)
    }

    /// Plan and claim member `i` of the batch that starts at `first`,
    /// pushing its claim to `claims`. When it needs a buffer and none is
    /// free, the members claimed so far are filled first (lock released,
    /// `batch_open` holding everyone else back): the ring writes, and so
    /// frees, only filled buffers. On the poison the batch is given up:
    /// nothing of it was acknowledged.
    fn claim_member<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
        stored: &Stored<'_>,
        kind: Kind,
        first: Lsn,
        i: usize,
        claims: &mut Vec<(usize, Claim<'a>)>,
    ) -> Result<RankedGuard<'a, Reservation>> {
        let last = i + 1 == stored.records.len();
        let lsn = first + i as u64;
        let (codec, bytes) = stored.get(i);
        let framed = self.place_frame(&mut r, lsn, kind, bytes.len(), i == 0);
        if r.active.is_none() && !r.open_active() {
            drop(r);
            fill_members(stored, claims);
            r = self.lock();
        }
        while r.active.is_none() && !r.open_active() {
            r = self.wait_for_space(r);
            if let Some(p) = self.acks.poison_cause() {
                r.batch_open = false;
                drop(r);
                self.space_freed(true);
                return Err(p.error());
            }
        }
        let batching = if last {
            Batching::Last
        } else {
            Batching::Member
        };
        let head = RecordHead {
            lsn,
            stream: stored.records[i].0,
            kind,
            flags: batching.flags() | codec.flags(),
        };
        let claim = self.member_claim(&mut r, &framed, head, bytes.len(), last);
        claims.push((i, claim));
        Ok(r)
    }

    /// Hold the reservation until records of `n` frames (`flens`: their
    /// lengths in a segment sealed or not) may be sequenced: roll, wait
    /// for space or for the size limit, or refuse, as [`decide`] says.
    /// Returns the guard with a buffer for the first frame secured.
    ///
    /// [`decide`]: Self::decide
    pub(super) fn admit<I: Iterator<Item = usize>>(
        &self,
        n: u64,
        kind: Kind,
        flens: impl Fn(bool) -> I,
        on_full: &mut OnFull<'_>,
    ) -> Result<RankedGuard<'_, Reservation>> {
        // When a roll waits for the size limit: until when.
        let mut limit_deadline = None;
        let mut r = self.lock();
        loop {
            match self.decide(&r, n, kind, &flens) {
                Admit::Proceed => return Ok(r),
                Admit::Refuse(e) => return Err(e),
                Admit::WaitForSpace { hand_over } => {
                    // Handing the full buffer to the ring frees one.
                    if hand_over {
                        r.close_active();
                    }
                    if !on_full.waits() {
                        // Registered before the kick: a kick that fails
                        // poisons the log, and the poison wakes what is
                        // registered by then.
                        let full = self.refuse(&r, on_full);
                        if hand_over {
                            self.kick(&r);
                        }
                        return Err(full);
                    }
                    r = self.wait_for_space(r);
                }
                Admit::Roll { after_roll } => self.roll_reservation(&mut r, after_roll)?,
                Admit::WaitForLimit { max, timeout } => {
                    let deadline = *limit_deadline.get_or_insert_with(|| Instant::now() + timeout);
                    r = self.wait_for_limit(r, max, timeout, deadline, on_full)?;
                }
            }
        }
    }

    /// What the reservation does next with records of `n` frames: the
    /// admission decision, from the reservation's state alone. Cost: one
    /// pass over the frame lengths.
    fn decide<I: Iterator<Item = usize>>(
        &self,
        r: &Reservation,
        n: u64,
        kind: Kind,
        flens: &impl Fn(bool) -> I,
    ) -> Admit {
        let cfg = &self.cfg;
        if let Some(p) = self.acks.poison_cause() {
            return Admit::Refuse(p.error());
        }
        if self.is_closing() {
            return Admit::Refuse(Error::Closed);
        }
        let next = self.next_lsn();
        if next > format::MAX_LSN - (n - 1) {
            return Admit::Refuse(Error::LsnExhausted { next });
        }
        if r.batch_open {
            return Admit::WaitForSpace { hand_over: false };
        }
        let cap = cfg.buffer_bytes();
        let sealed = r.cipher.is_some() && payload::seals(kind);
        let mut lens = flens(sealed);
        let Some(first_len) = lens.next() else {
            return Admit::Refuse(Error::EmptyBatch);
        };
        let (first_at, first_how) = r.cursor().place(first_len, cap);
        if !Cursor::fits(first_at.place_all(lens, cap), r.seg_bytes) {
            // Roll: the records open the next segment, named by the first
            // one's LSN. They fit a fresh segment (the caller checked).
            assert!(
                r.cursor() != Cursor::at(format::HEADER_BYTES as u64)
                    || r.seg_bytes < cfg.segment_bytes,
                "records that fit a fresh segment never roll one away"
            );
            // The hard size limit: a new segment must fit under it.
            let after_roll = r.live_bytes_after_roll(next, cfg.segment_bytes);
            let over = cfg.max_log_bytes.filter(|&max| after_roll > max);
            return match (over, cfg.when_full) {
                (Some(max), WhenFull::Block { timeout }) => Admit::WaitForLimit { max, timeout },
                _ => Admit::Roll { after_roll },
            };
        }
        // The first frame's buffer is secured before any LSN is given: a
        // lone record then never waits holding an LSN (others would
        // overtake it), and a batch waits mid-way only while `batch_open`
        // holds everyone else back.
        let opens = r.active.is_none() || first_how == Placed::AfterClose;
        if opens && r.free.is_empty() {
            return Admit::WaitForSpace { hand_over: true };
        }
        Admit::Proceed
    }

    /// Start the next segment in the reservation: frames go there from
    /// now on, named by the next LSN. Keys rotate here: the new segment
    /// takes the provider's current key, asked before anything changes,
    /// so a missing key fails this append and nothing else.
    fn roll_reservation(&self, r: &mut Reservation, after_roll: u64) -> Result<()> {
        let cfg = &self.cfg;
        let cipher = cfg.keys.current(self.dir.path())?;
        r.close_active();
        let old_base = r.seg_base;
        r.seg_base = self.next_lsn();
        assert!(
            r.seg_base >= old_base,
            "a new segment is named above the one it follows"
        );
        r.seg_id += 1;
        r.salt = lifecycle::new_salt();
        r.cipher = cipher;
        r.live_bytes = after_roll;
        r.seg_file_bytes = cfg.segment_bytes;
        r.batch_start = format::HEADER_BYTES as u64;
        r.seg_bytes = cfg.segment_bytes;
        r.index_due = index::due_after(None);
        Ok(())
    }

    /// The next segment would pass the hard size limit `max`: hand over
    /// what is staged (it needs no new segment) and wait, lock released,
    /// until `deadline` for a checkpoint to make room. `LogFull` once the
    /// deadline passes or for a caller that must not wait.
    fn wait_for_limit<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
        max: u64,
        timeout: std::time::Duration,
        deadline: Instant,
        on_full: &OnFull<'_>,
    ) -> Result<RankedGuard<'a, Reservation>> {
        r.close_active();
        self.kick(&r);
        if self.acks.is_poisoned() {
            // Decided again: the poison refuses.
            return Ok(r);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if !on_full.waits() || left.is_zero() {
            return Err(Error::LogFull {
                dir: self.dir.path().to_path_buf(),
                limit: max,
                waited: timeout.min(timeout - left),
            });
        }
        Ok(r.wait_timeout(&self.space, left))
    }

    /// Park on `space` until a buffer is freed, a batch completes, or the
    /// log is poisoned or closed; the ring is kicked so it frees buffers.
    fn wait_for_space<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
    ) -> RankedGuard<'a, Reservation> {
        r.waiting_for_space += 1;
        self.counters
            .backpressure_waits
            .fetch_add(1, Ordering::Relaxed);
        self.kick(&r);
        if self.acks.is_poisoned() {
            // The kick itself may have poisoned (and notified) already:
            // waiting now would miss that notification.
            r.waiting_for_space -= 1;
            return r;
        }
        let mut r = r.wait(&self.space);
        r.waiting_for_space -= 1;
        r
    }
}

/// Fill the claims of an atomic batch's members (`i`: which record of
/// `stored`), in order, with the reservation lock released.
fn fill_members(stored: &Stored<'_>, claims: &mut Vec<(usize, Claim<'_>)>) {
    for (_, c) in claims.iter_mut() {
        c.lock_released();
    }
    for (i, c) in claims.drain(..) {
        c.fill_member(stored.get(i).1);
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
    let sh = Shared::new(cfg, dir, Arc::new(Notifier::new().unwrap()), at, keeper);
    {
        let mut r = sh.lock();
        r.free.truncate(buffers);
        r.buffers = r.free.len();
    }
    Arc::new(sh)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn poisoned(r: Result<Lsn>) -> bool {
        matches!(r, Err(Error::Poisoned { .. }))
    }

    /// Append one record of `len` bytes, as `Ticket::issue` would.
    fn append_bytes(sh: &Shared, len: usize) -> Lsn {
        sh.reserve_all(&[(0, &vec![7u8; len])], Kind::Data, OnFull::Wait, |_| {})
            .unwrap()
    }

    /// A partial batch waits for more records while the ring says so,
    /// unless it is as large as a bandwidth-bound write already.
    #[test]
    fn a_large_partial_batch_goes_out_without_waiting_for_more() {
        let sh = test_shared(4);
        let append = |len: usize| append_bytes(&sh, len);
        append(1000);
        let mut r = sh.lock();
        assert!(!r.has_batch(false) && r.take_batch(false).is_none());
        assert!(r.has_batch(true));
        drop(r);
        // The record that makes the batch large: its write is bound by
        // the transfer, and waiting would only hold a write back.
        append(LARGE_WRITE_BYTES as usize);
        let mut r = sh.lock();
        assert!(r.has_batch(false));
        let b = r.take_batch(false).expect("the large batch");
        assert_eq!((b.last_lsn, r.active.is_none()), (2, true));
        assert!(b.len as u64 >= LARGE_WRITE_BYTES);
    }

    /// A ring sleeping with a partial write in flight is woken only by a
    /// batch it may take; an idle one by any record.
    #[test]
    fn records_wake_the_ring_only_when_it_can_act_on_them() {
        let sh = test_shared(4);
        let append = |len: usize| append_bytes(&sh, len);
        sh.set_ring_sleep(RingSleep::ForBatches);
        append(100);
        append(100);
        assert_eq!(
            sh.ring_sleep(),
            RingSleep::ForBatches,
            "partial: still asleep"
        );
        sh.want(2, Level::Durable);
        assert_eq!(
            sh.ring_sleep(),
            RingSleep::ForBatches,
            "a waiter adds no work"
        );
        append(LARGE_WRITE_BYTES as usize);
        assert_eq!(
            sh.ring_sleep(),
            RingSleep::Awake,
            "a takeable batch wakes it"
        );

        sh.set_ring_sleep(RingSleep::ForRecords);
        append(100);
        assert_eq!(
            sh.ring_sleep(),
            RingSleep::Awake,
            "idle: any record wakes it"
        );
    }

    /// A wake-up the kernel refuses poisons the log with its cause, from
    /// a producer outside the lock (a staged record) and inside it (a
    /// full pool's kick), and nothing is left parked.
    #[test]
    fn a_failed_wake_up_poisons_with_its_cause() {
        let sh = test_shared(4);
        let lsn = append_bytes(&sh, 100);
        sh.notifier.fail_from_now();
        sh.set_ring_sleep(RingSleep::ForRecords);
        append_bytes(&sh, 100);
        let cause = sh.acks.poison_cause().expect("the failed wake-up poisoned");
        assert!(cause.to_string().contains("waking the ring"), "{cause}");
        assert!(cause.io_error().is_some(), "the OS error is kept");
        assert!(matches!(
            sh.acks.check(lsn, Level::Written),
            Some(Err(Error::Poisoned { .. }))
        ));

        let full = test_shared(0);
        full.notifier.fail_from_now();
        full.set_ring_sleep(RingSleep::ForBatches);
        let parked = {
            let full = full.clone();
            std::thread::spawn(move || {
                full.reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            })
        };
        assert!(poisoned(parked.join().unwrap()), "refused, never parked");
        assert!(full.acks.poison_cause().is_some());
    }

    #[test]
    fn after_the_poison_appends_are_refused_and_waiters_fail() {
        let sh = test_shared(1);
        let lsn = sh
            .reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            .unwrap();
        sh.poison(Poison::failed("test"));
        assert!(matches!(
            sh.acks.check(lsn, Level::Written),
            Some(Err(Error::Poisoned { .. }))
        ));
        assert!(poisoned(sh.reserve_all(
            &[(0, b"y")],
            Kind::Data,
            OnFull::Wait,
            |_| {}
        )));
    }

    /// Once poisoned, the log tries no manifest write (the poison may be
    /// a failed directory fsync, and the write would end in another).
    /// Had it tried, this one would fail with `Io`: the log's directory
    /// does not exist.
    #[test]
    fn after_the_poison_the_manifest_is_written_no_more() {
        let sh = test_shared(1);
        sh.poison(Poison::failed("test"));
        let before = sh.manifest.get();
        let raised = format::Manifest {
            newest_base: 5,
            ..before
        };
        match sh.manifest.raise(raised) {
            Err(Error::Poisoned { cause }) => assert!(cause.to_string().contains("manifest")),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(sh.manifest.get(), before);
    }

    #[test]
    fn a_producer_parked_for_space_is_woken_by_the_poison() {
        let sh = test_shared(0);
        let producer = {
            let sh = sh.clone();
            std::thread::spawn(move || {
                sh.reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            })
        };
        // Let it park if it will; refused either way, never left parked.
        for _ in 0..1000 {
            if sh.lock().waiting_for_space > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        sh.poison(Poison::failed("test"));
        assert!(poisoned(producer.join().unwrap()));
    }
}
