//! The ring thread: turns staged batches into aligned writes, keeps several
//! in flight, issues syncs, rolls segments, and acknowledges the contiguous
//! prefix of completed work (kept by the `ledger`).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use ringwal_platform::{
    new_queue, AlignedBuf, Completion, IoQueue, Op, QueueKind, VFile, Wait, WriteSync,
};

use crate::at_rest::format::{self, Manifest, SegmentHeader};
use crate::config::Backend;
use crate::error::{Error, Lsn, Poison, Result};
use crate::obs::latency::Started;
use crate::obs::observer::DurabilityObserver;
use crate::segment::lifecycle::{self, ActiveSegment, Preparer, Spare};
use crate::segment::set::{Live, SegmentFile};
use crate::write::doorbell::RingSleep;
use crate::write::ledger::{Ledger, OpKind};
use crate::write::placement::{Placement, Way};
use crate::write::shared::Shared;
use crate::write::staging::{Ask, Batch, Exchange, Found};
use crate::write::sync_budget::{Demand, SyncBudget};

/// The longest an idle ring sleeps without looking at the log's state.
/// Producers wake it for work and the close wakes it too; only a wake-up
/// the kernel refused (which poisons the log) needs this, so that a
/// close still ends the ring within this long. Cost: one wake-up per
/// second of idleness, nothing under load.
pub(crate) const RING_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
// Zero would spin an idle ring; much more and a close after a refused
// wake-up would seem to hang.
const _: () = assert!(RING_RECHECK.as_millis() >= 10 && RING_RECHECK.as_secs() <= 5);

/// What the ring thread starts from: the active segment after recovery.
pub(crate) struct RingStart {
    pub shared: Arc<Shared>,
    pub file: VFile,
    pub header: SegmentHeader,
    /// Where the next write to that segment goes.
    pub write_at: u64,
    /// The writer's lock, held by the ring thread until its last write
    /// and sync are done: however the log is closed (even by a `Drop` on
    /// this very thread, which cannot wait for itself), no second writer
    /// gets in while this one still writes.
    pub lock: VFile,
}

struct Ring {
    sh: Arc<Shared>,
    q: Box<dyn IoQueue>,
    seg: ActiveSegment,
    dir: VFile,
    ledger: Ledger,
    /// What this thread brings to and takes from the producers: freed
    /// staging buffers on their way back, and batches taken, not yet
    /// written (the first one held while a roll drains the segment).
    ex: Exchange,
    /// Bytes the last exchange left staged, and the bytes filled by then
    /// (`Staging::filled_bytes`): with what was filled since, an estimate
    /// of what waits now, taken without the lock.
    waiting: usize,
    filled_seen: u64,
    /// This turn's exchange was its look before sleeping (the sleep was
    /// announced first) and found nothing: the ring may sleep on it.
    idle_seen: bool,
    /// The spare a pending roll goes to, and the header whose durable
    /// write was queued while the current segment's writes drained (see
    /// `roll`): the header is durable once the ledger is empty.
    staged: Option<(Spare, SegmentHeader)>,
    /// The watermarks as last handed to `Acks` (see `run` for why they
    /// can lag the ledger's for a moment).
    published: (Lsn, Lsn),
    budget: SyncBudget,
    preparer: Preparer,
    /// Told of every advance `publish` makes (`Config::observer`).
    observer: Option<Arc<dyn DurabilityObserver>>,
    /// When each operation in flight was submitted, for `Stats`.
    started: Started,
    /// Records the last advance of the watermarks answered: one is the
    /// sign of a lone producer (see `lone`).
    last_advance: u64,
    /// Where durable writes go: in place or through the queue (see
    /// `write/placement.rs`); the ways of the writes pushed since the
    /// queue last ran (`(any through the ring, any in place)`), and the
    /// way the queue was last told, which operations it left queued keep.
    placement: Placement,
    pushed: (bool, bool),
    told_in_place: bool,
}

/// Partly filled batches allowed in flight at once (full ones are limited
/// only by `max_inflight`). One: on the virtio disk measured here every
/// durable write costs a cache flush and flushes do not overlap, so a second
/// small write in flight bought nothing but smaller batches; with 64
/// producers, limits of 1, 2 and 8 gave about 55, 28 and 12 records per
/// write and the best p99 at 1 (see docs/benchmarks.md, "What the
/// measurements showed").
const PARTIAL_IN_FLIGHT: usize = 1;
// Zero would never let a partly filled batch out: a lone record would
// wait forever.
const _: () = assert!(PARTIAL_IN_FLIGHT >= 1);

/// With io_uring, the bytes waiting to be written from which the next
/// write is submitted before the last one's waiters are woken (below
/// them, the wake-ups go first). Measured on the virtio disk of
/// docs/benchmarks-history.md, five alternating rounds: waking first raised
/// 1 KiB records from 8 producers from 33k to 44k records/s (4.0 to 5.9
/// records per write) and cut the 64-producer p99 from 915 to 657 µs,
/// while 64 KiB records from 8 producers (about 256 KiB waiting) lost
/// 40% of their rate unless their write went first. 128 KiB takes about
/// 40 µs to transfer at this disk's 3 GB/s, as long as a few wake-ups.
const SUBMIT_FIRST_BYTES: usize = 128 << 10;
// Writes are whole blocks: a threshold between two block counts would
// only round up.
const _: () = assert!(SUBMIT_FIRST_BYTES.is_multiple_of(format::BLOCK));

/// Start the ring thread (and its segment preparer) and say which backend
/// it runs. The io_uring is created on the ring thread itself (single
/// issuer); with `Backend::Auto` a refusal falls back to the threaded
/// queue, with `Backend::Uring` it is returned here.
pub(crate) fn spawn(start: RingStart) -> Result<(JoinHandle<()>, Backend)> {
    let sh = start.shared.clone();
    let dir_path = sh.dir().path().to_path_buf();
    let dir = sh
        .cfg()
        .vfs
        .open_dir(&dir_path)
        .map_err(|e| Error::io(&dir_path, e))?;
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<std::io::Result<QueueKind>>(1);
    let handle = std::thread::Builder::new()
        .name(format!("ringwal-ring-{}", sh.cfg().node))
        .spawn(move || ring_thread(start, dir, ready_tx))
        .map_err(|e| Error::io(&dir_path, e))?;
    match ready_rx.recv() {
        Ok(Ok(QueueKind::Uring)) => Ok((handle, Backend::Uring)),
        Ok(Ok(QueueKind::Threaded)) => Ok((handle, Backend::Threaded)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(match sh.cfg().backend {
                Backend::Uring => Error::BackendUnavailable { source: e },
                _ => Error::io(&dir_path, e),
            })
        }
        Err(_) => {
            let _ = handle.join();
            Err(Error::io(
                &dir_path,
                std::io::Error::other("ring thread died at start"),
            ))
        }
    }
}

/// The ring thread's whole life: pin, make the queue (telling `spawn`
/// which, or why none), run until closed or failed, then answer every
/// waiter still open.
fn ring_thread(
    start: RingStart,
    dir: VFile,
    ready_tx: crossbeam_channel::Sender<std::io::Result<QueueKind>>,
) {
    let _lock = start.lock;
    if let Some(cpu) = start.shared.cfg().ring_cpu {
        // Checked against the process's CPUs at open; the kernel
        // can still refuse (a cpuset changed since), and an
        // unpinned ring thread is slower, not wrong.
        let _ = ringwal_platform::cpu::pin_current(cpu);
    }
    let depth = start.shared.cfg().max_inflight + 4;
    let (mut q, kind) = match make_queue(&start.shared, depth) {
        Ok(made) => made,
        Err(e) => {
            let _ = ready_tx.send(Err(e));
            return;
        }
    };
    register_staging(&start.shared, &mut *q, kind);
    let _ = ready_tx.send(Ok(kind));
    let seg = ActiveSegment::resumed(&start.header, start.file, start.write_at);
    let mut ring = Ring::new(start.shared, q, seg, dir, depth);
    run_guarded(&mut ring);
    // Every advance this ring will make is published (`publish`
    // does nothing after a failure); a wait still open now is for
    // an LSN never handed out, and is answered `Closed`.
    ring.publish();
    ring.sh.acks().close();
}

/// The queue the configured backend asks for, of `depth` entries: with
/// `Backend::Auto`, io_uring where it can work (Linux, the real file
/// system), the threaded queue if the kernel refuses it.
fn make_queue(sh: &Shared, depth: usize) -> std::io::Result<(Box<dyn IoQueue>, QueueKind)> {
    let cfg = &sh.cfg();
    let (kind, fall_back) = match cfg.backend {
        Backend::Uring => (QueueKind::Uring, false),
        Backend::Threaded => (QueueKind::Threaded, false),
        Backend::Auto if cfg!(target_os = "linux") && cfg.vfs.is_real() => (QueueKind::Uring, true),
        Backend::Auto => (QueueKind::Threaded, false),
    };
    let notifier = sh.doorbell().notifier().clone();
    match new_queue(kind, depth, notifier.clone()) {
        Err(e) if fall_back => {
            let _ = &e;
            crate::obs::trace::event!(warn, error = %e, "io_uring refused: running the threaded backend");
            new_queue(QueueKind::Threaded, depth, notifier).map(|q| (q, QueueKind::Threaded))
        }
        made => made.map(|q| (q, kind)),
    }
}

/// Every staging buffer is in the pool now (nothing can append before
/// `open` returns): register them all, so no write pins its pages (with
/// 1 MiB writes that pinning was a tenth of the ring thread's time). Best
/// effort; plain writes otherwise.
fn register_staging(sh: &Shared, q: &mut dyn IoQueue, kind: QueueKind) {
    let r = sh.lock();
    assert_eq!(
        r.free.len(),
        r.buffers,
        "every staging buffer is free before the first append"
    );
    let bufs: Vec<&AlignedBuf> = r.free.iter().collect();
    let registered = q.register_buffers(&bufs);
    if kind == QueueKind::Uring && !registered {
        crate::obs::trace::event!(
            warn,
            "io_uring refused the staging buffers' registration: each write pins its pages"
        );
    }
}

/// Run the ring, turning a panic in it (a bug, or a waker of the caller's
/// run on this thread) into a poison: waiters must not hang and `close`
/// must not report success. Then the queue, dropped with the ring, waits
/// for the kernel's outstanding operations before their buffers go.
fn run_guarded(ring: &mut Ring) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.run()));
    if let Err(panic) = ran {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        ring.fail(Poison::failed(format!("the ring thread panicked: {why}")));
        ring.preparer.stop();
    }
}

impl Ring {
    /// The ring over `seg`, the segment recovery left active, with its
    /// segment preparer started and every watermark at what recovery
    /// found written.
    fn new(
        sh: Arc<Shared>,
        q: Box<dyn IoQueue>,
        seg: ActiveSegment,
        dir: VFile,
        depth: usize,
    ) -> Ring {
        let poison_on = sh.clone();
        let preparer = Preparer::spawn(
            sh.cfg(),
            sh.dir(),
            sh.files().recycled().clone(),
            sh.manifest().clone(),
            Box::new(move |e| {
                poison_on.poison(Poison::from_error("writing the manifest failed", e))
            }),
            sh.sync_method(),
        );
        let last = sh.acks().written();
        let budget = SyncBudget::new(sh.cfg(), sh.sync_method(), last);
        let observer = sh.cfg().observer.0.clone();
        Ring {
            sh,
            q,
            seg,
            dir,
            ledger: Ledger::new(last, depth),
            ex: Exchange::default(),
            waiting: 0,
            filled_seen: 0,
            idle_seen: false,
            staged: None,
            published: (last, last),
            budget,
            preparer,
            observer,
            started: Started::new(depth),
            last_advance: 0,
            placement: Placement::default(),
            pushed: (false, false),
            told_in_place: false,
        }
    }

    fn push(&mut self, kind: OpKind, op: Op) {
        // A write linked to its fdatasync (`WriteThenFdatasync`, or any
        // durable write where RWF_DSYNC is not trusted) costs the device
        // the same flush as a sync of its own: `Stats::syncs` counts both.
        if matches!(
            op,
            Op::Write {
                sync: WriteSync::ThenSync,
                ..
            }
        ) {
            self.sh.counters().syncs.fetch_add(1, Ordering::Relaxed);
        }
        let id = self.ledger.push(kind);
        self.started.begin(id);
        self.q.push(id, op);
        self.sh
            .counters()
            .writes_in_flight
            .store(self.ledger.writes() as u64, Ordering::Relaxed);
    }

    fn run(&mut self) {
        let uring = self.q.kind() == QueueKind::Uring;
        loop {
            let mut progress = self.reap();
            self.advance();
            // After a completion, what goes first: the next write, or the
            // wake-ups of the producers the completion answered? The
            // threaded queue performs its I/O inside `run`, so it always
            // wakes first. With io_uring, a write large enough that its
            // transfer time counts goes to the device first, so the device
            // never idles while this thread makes syscalls; a small one
            // waits for the wake-ups, so that the producers they release
            // join it instead of the write after it (see
            // SUBMIT_FIRST_BYTES).
            let submit_first = uring && self.unpublished() && self.big_batch_waiting();
            if !submit_first {
                self.publish();
            }
            self.trade();
            let mut started = false;
            if !self.failed() {
                started |= self.submit_writes();
                started |= self.maybe_sync();
            }
            progress |= started;
            if submit_first && self.unpublished() {
                // Only new work needs the extra enter; a lone completion
                // (one producer waiting) wakes its waiter at once.
                if started && let Err(e) = self.q.run(Wait::NoWait) {
                    self.fail(Poison::from_error(
                        "io_uring_enter failed",
                        Error::io(self.sh.dir().path(), e),
                    ));
                    break;
                }
                self.publish();
            }
            let closed = self.sh.is_closing();
            if (closed || self.failed()) && self.finished() {
                self.close_out();
                break;
            }
            let wait = self.next_wait(progress);
            let in_place = self.in_place();
            self.q.set_lone(self.lone() || in_place);
            if let Err(e) = self.q.run(wait) {
                self.fail(Poison::from_error(
                    "io_uring_enter failed",
                    Error::io(self.sh.dir().path(), e),
                ));
                // The queue itself is broken; nothing more can complete.
                break;
            }
            self.sh.doorbell().announce(RingSleep::Awake);
        }
        // A roll the log failed or closed before finishing: the spare keeps
        // its spare name (recovery would discard it); nothing is in flight
        // on it once the loop is done.
        if let Some((spare, _)) = self.staged.take() {
            let _ = self.sh.cfg().vfs.remove_file(&spare.path);
        }
        self.preparer.stop();
    }

    /// On a clean close: a last vouch for everything durable (so the
    /// closed log has no ambiguous tail), the manifest raised to it, and
    /// a clean end behind it (see `ActiveSegment::clear_torn_window`). A
    /// failure poisons, as any failed write does, and `close` reports it;
    /// no record is at risk, since everything before the end is already
    /// durable.
    fn close_out(&mut self) {
        if self.failed() {
            return;
        }
        self.give_back();
        let durable = self.ledger.durable();
        if let Err(e) = self
            .seg
            .close_vouch(durable, self.sh.nonce_salt(), self.sh.sync_method())
        {
            let err = Error::io(self.seg_path(), e);
            return self.fail(Poison::from_error("the closing vouch failed", err));
        }
        let m = Manifest {
            durable_lsn: durable,
            handed_out: durable,
            ..self.sh.manifest().get()
        };
        if let Err(e) = self.sh.manifest().raise(m) {
            return self.fail(Poison::from_error(
                "writing the manifest at close failed",
                e,
            ));
        }
        if let Err(e) = self
            .seg
            .clear_torn_window(self.sh.cfg().torn_window(), self.sh.sync_method())
        {
            let err = Error::io(self.seg_path(), e);
            self.fail(Poison::from_error("zeroing the tail at close failed", err));
        }
    }

    /// True once nothing is left to write or wait for.
    fn finished(&self) -> bool {
        if self.failed() {
            // A held batch will never be written; only the kernel's
            // outstanding operations must finish before buffers go away.
            return self.ledger.is_empty();
        }
        if !self.ledger.is_empty() || !self.ex.taken.is_empty() {
            return false;
        }
        let r = self.sh.staging().ring_lock();
        // A batch waiting for buffers needs the ring to write the ones
        // it filled, even once the log is closing.
        if r.holds_frames() || r.batch_open {
            return false;
        }
        drop(r);
        // Close drains to durable: in written mode and with grouped syncs
        // one last sync, unless the last one already covered everything.
        self.sh.writes_durable_alone()
            || !self.seg.dirty
            || !self.budget.useful(self.ledger.written())
    }

    /// Decide how to sleep. Unless this turn's exchange was already the
    /// look before sleeping: announce the sleep so producers wake us, then
    /// exchange again, taking what arrived before the announcement was
    /// visible. `trade` looks whenever it has room, so this second look
    /// is a guard for a turn that gained room after its exchange.
    fn idle_wait(&mut self) -> Wait {
        if !self.idle_seen && self.room() > 0 {
            self.sh.doorbell().announce(self.sleep_kind());
            let found = self.exchange(true);
            // Closing is not work by itself: with operations in flight the
            // ring must block for their completions (spinning would never
            // reap them under DEFER_TASKRUN), and `run` exits when done.
            if found.took > 0 || self.sync_target().is_some() {
                self.sh.doorbell().announce(RingSleep::Awake);
                return Wait::NoWait;
            }
        }
        match self.budget.wake_after(self.demand()) {
            Some(left) => Wait::Timeout(left),
            // Bounded even with nothing to wait for: a ring whose wake-up
            // failed (which poisons the log) must still see the poison or
            // the close and finish.
            None => Wait::Timeout(RING_RECHECK),
        }
    }

    /// The turn's one meeting with the producers ([`Staging::exchange`]):
    /// give back the buffers completions freed, take the batches there is
    /// room for. With room, the ring announces its sleep first, so that
    /// the exchange is also its look for work: when it takes every batch
    /// there is (fewer than its room), the ring may sleep after this
    /// turn's writes with no second look. A lone record then costs the
    /// ring about two takes of the lock (the turn that takes it, and the
    /// one that gives its buffer back) where it cost five or six.
    ///
    /// [`Staging::exchange`]: crate::write::staging::Staging::exchange
    fn trade(&mut self) {
        self.idle_seen = false;
        let room = self.room();
        if room == 0 {
            if !self.ex.freed.is_empty() {
                self.exchange(false);
            }
            return;
        }
        self.sh.doorbell().announce(self.sleep_kind());
        let found = self.exchange(true);
        if found.took < room {
            self.idle_seen = true;
        } else {
            self.sh.doorbell().announce(RingSleep::Awake);
        }
    }

    /// How this turn ends. After a turn whose exchange was a complete
    /// look (`idle_seen`), the ring sleeps: the completions it reaped are
    /// published, the batches there were are written, and the sleep it
    /// announced is narrowed to what may wake it now (a partial batch no
    /// longer, once a write is in flight). Narrowing is safe: a producer
    /// that staged before the narrower announcement read the wider one
    /// and woke the ring. Otherwise, any progress means another turn.
    fn next_wait(&mut self, progress: bool) -> Wait {
        if self.idle_seen {
            self.sh.doorbell().announce(self.sleep_kind());
            return self.idle_wait();
        }
        if progress {
            return Wait::NoWait;
        }
        self.idle_wait()
    }

    /// One exchange ([`trade`](Self::trade), [`idle_wait`](Self::idle_wait),
    /// the close), then the freed space announced to the producers.
    fn exchange(&mut self, look: bool) -> Found {
        let room = self.room();
        let ask = Ask {
            room,
            partial: PARTIAL_IN_FLIGHT
                .saturating_sub(self.ledger.writes() + self.ex.taken.len())
                .min(room),
            look,
        };
        let freed = !self.ex.freed.is_empty();
        let sh: &Shared = &self.sh;
        let filled = sh.staging().filled_bytes();
        let found = sh
            .staging()
            .exchange(&mut self.ex, ask, || sh.doorbell().await_fills());
        self.waiting = found.waiting;
        self.filled_seen = filled;
        self.check_buffers(&found);
        if freed {
            self.sh.space_freed(found.parked);
        }
        found
    }

    /// How many more batches the ring may take now: none while one it took
    /// waits (a roll draining the segment), failed, or over the sync
    /// budget; else its room in flight.
    fn room(&self) -> usize {
        if self.failed() || !self.ex.taken.is_empty() || self.budget.over_budget() {
            return 0;
        }
        // A probe of writing in place waits for the writes in flight, so
        // that its write runs alone, as in place means.
        if self.placement.drain_for_probe() && self.ledger.writes() > 0 {
            return 0;
        }
        self.sh
            .cfg()
            .max_inflight
            .saturating_sub(self.ledger.writes())
    }

    /// How the ring sleeps when it may take a batch: for any record when
    /// it may take a partial one, else for a closed batch.
    fn sleep_kind(&self) -> RingSleep {
        if self.partial_ok() {
            RingSleep::ForRecords
        } else {
            RingSleep::ForBatches
        }
    }

    /// Whether the load is one producer, one record at a time: the last
    /// advance answered one record and at most one thread waits. The
    /// queue may then write in place, blocking this thread
    /// (`IoQueue::set_lone`); sixteen producers just released by a write
    /// also leave none blocked, which is why the advance counts too.
    /// Cost: one atomic load.
    fn lone(&self) -> bool {
        self.last_advance <= 1 && self.sh.acks().blocked_waiters() <= 1
    }

    /// Whether the operations now queued are done in place, one at a
    /// time, blocking this thread (`IoQueue::set_lone`), when nothing else
    /// is in the kernel: as a lone record's is, and as `Placement` says for
    /// durable writes (a flush-bound one always; large ones while the
    /// queue's completions are measured stalled, or for a probe). Why:
    /// through io_uring, a durable direct write on a disk without FUA
    /// completes on a kernel worker bound to the interrupt's CPU, and when
    /// another process keeps that CPU busy the worker waits for the
    /// scheduler's next tick. `ringwal bench --busy-neighbour`, 1 KiB
    /// records from 16 producers: 4,307 and 4,385 records/s through the
    /// ring (every write 4 ms), 105,480 and 103,805 in place; on a quiet
    /// machine level or better (112,215-117,580 against 115,257-122,429,
    /// alternating rounds). Cost: none.
    ///
    /// A write pushed for the ring takes every operation queued with it
    /// there (one done in place would hold the others back); writes pushed
    /// only for in place are done so; with none pushed, what the queue
    /// still holds keeps the way it was queued for.
    fn in_place(&mut self) -> bool {
        let told = match self.pushed {
            (true, _) => false,
            (false, true) => true,
            (false, false) => self.told_in_place,
        };
        self.pushed = (false, false);
        self.told_in_place = told;
        told
    }

    fn reap(&mut self) -> bool {
        let mut any = false;
        while let Some(c) = self.q.pop() {
            any = true;
            self.complete(c);
        }
        any
    }

    fn complete(&mut self, c: Completion) {
        let kind = self.ledger.complete(c.id);
        let counters = &self.sh.counters();
        if let Some(since) = self.started.end(c.id) {
            let took = since.elapsed();
            match (kind, &c.op) {
                (OpKind::Write { durable, .. }, Op::Write { len, .. }) => {
                    counters.write_latency.record(took);
                    if durable {
                        // In flight with it: those still out, and itself.
                        let depth = self.ledger.writes() + 1;
                        self.placement.completed(*len, c.in_place, took, depth);
                    }
                }
                (OpKind::Write { .. }, _) => counters.write_latency.record(took),
                (OpKind::Sync { .. }, _) => counters.sync_latency.record(took),
                (OpKind::Barrier, _) => {}
            }
        }
        counters
            .writes_in_flight
            .store(self.ledger.writes() as u64, Ordering::Relaxed);
        let what = match kind {
            OpKind::Write { .. } => "write",
            OpKind::Sync { .. } => {
                self.budget.sync_done(c.result.is_ok());
                "sync"
            }
            OpKind::Barrier => "segment install",
        };
        // Only batch writes carry staging buffers; barrier writes (header,
        // seal) bring their own one-block buffers, dropped here.
        if let (OpKind::Write { .. }, Op::Write { buf, len, .. }) = (kind, c.op) {
            self.budget.write_done(len);
            self.recycle(buf);
        }
        if let Err(e) = c.result {
            let err = Error::io(self.seg_path(), e);
            self.fail(Poison::from_error(&format!("{what} failed"), err));
        }
    }

    fn seg_path(&self) -> std::path::PathBuf {
        self.sh.dir().segment(self.seg.base).path
    }

    /// A completed write's staging buffer, given back at the next exchange.
    fn recycle(&mut self, buf: AlignedBuf) {
        self.ex.freed.push(buf);
    }

    /// Give back the freed buffers now (the close).
    fn give_back(&mut self) {
        self.exchange(false);
    }

    /// Staging buffers are conserved: every one allocated at open is free,
    /// being filled, closed and waiting, held here, or in a write in
    /// flight (each batch write carries one; completed ones have been
    /// recycled). Cost, in debug builds only: a few additions.
    fn check_buffers(&self, found: &Found) {
        debug_assert_eq!(
            found.staged_buffers + self.ex.freed.len() + self.ex.taken.len() + self.ledger.writes(),
            found.buffers,
            "staging buffers lost or duplicated"
        );
    }

    fn fail(&mut self, cause: Poison) {
        if !self.failed() {
            self.sh.poison(cause);
        }
    }

    /// Whether the log is poisoned: read from `Acks`, the poison's one
    /// owner, at the cost of an atomic load.
    fn failed(&self) -> bool {
        self.sh.acks().is_poisoned()
    }

    /// Retire finished operations and move the watermarks (the ledger's
    /// copy; `publish` hands them to the waiters).
    fn advance(&mut self) {
        if self.failed() {
            // Keep draining so buffers return, but acknowledge nothing more.
            self.ledger.drain_done();
        } else {
            self.ledger.advance();
        }
    }

    /// The watermarks as the finished prefix proves them.
    fn watermarks(&self) -> (Lsn, Lsn) {
        (self.ledger.written(), self.ledger.durable())
    }

    /// Whether the watermarks moved further than the waiters were told.
    fn unpublished(&self) -> bool {
        self.watermarks() != self.published
    }

    /// Tell the waiters how far the watermarks moved, then the observer,
    /// if any: after `Acks` holds them, so it never runs ahead of what a
    /// ticket reports, and in ledger order, which never goes back.
    /// Nothing is published after a failure: the poison has already
    /// answered every waiter.
    fn publish(&mut self) {
        if self.failed() || !self.unpublished() {
            return;
        }
        let before = self.published;
        self.published = self.watermarks();
        let (written, durable) = self.published;
        self.last_advance = written
            .saturating_sub(before.0)
            .max(durable.saturating_sub(before.1));
        let parked = self.sh.acks().advance(written, durable);
        if !parked.0.is_empty() {
            self.q.wake(parked.0);
        }
        if let Some(observer) = &self.observer {
            observer.advanced(written, durable);
        }
    }

    /// Whether the batches waiting for the ring hold at least
    /// [`SUBMIT_FIRST_BYTES`].
    /// Cost: one atomic load: what the ring took, what the last exchange
    /// left staged, and what producers filled since (an estimate: a frame
    /// filled around the exchange may count twice). Exact it cost a take
    /// of the reservation lock; from the last exchange alone it said
    /// "small" whenever that exchange had taken everything, which lost
    /// write-first at 64 KiB x 8 (0.88x in an A/B run).
    /// decides.
    fn big_batch_waiting(&self) -> bool {
        let taken: usize = self.ex.taken.iter().map(|b| b.len).sum();
        let since = self.sh.staging().filled_bytes() - self.filled_seen;
        taken as u64 + self.waiting as u64 + since >= SUBMIT_FIRST_BYTES as u64
    }

    /// Whether a partly filled batch may be submitted now. Full batches go
    /// out as soon as there is room in flight; a partial one waits while
    /// `PARTIAL_IN_FLIGHT` writes are already in flight, so that under load the
    /// records accumulate into fewer, larger writes (each durable write
    /// costs the device a cache flush) instead of many small ones.
    fn partial_ok(&self) -> bool {
        self.ledger.writes() < PARTIAL_IN_FLIGHT
    }

    /// Write the batches taken while there is room in flight and in the
    /// sync budget, rolling first for one that opens the next segment.
    /// Returns whether any work was started.
    fn submit_writes(&mut self) -> bool {
        let mut any = false;
        while self.ledger.writes() < self.sh.cfg().max_inflight && !self.budget.over_budget() {
            let Some(batch) = self.ex.taken.pop_front() else {
                break;
            };
            if self.failed() {
                // Poisoned since the batch was staged (perhaps by a claim
                // abandoned unfilled in it): it is never written.
                self.ex.taken.push_front(batch);
                break;
            }
            if batch.seg_id != self.seg.id {
                let held = match self.roll(batch) {
                    Ok(Some(b)) => {
                        self.ex.taken.push_front(b);
                        true
                    }
                    Ok(None) => false,
                    Err(e) => {
                        self.fail(Poison::from_error("segment roll failed", e));
                        true
                    }
                };
                if held {
                    break;
                }
                any = true;
                continue;
            }
            self.write(batch);
            any = true;
        }
        any
    }

    fn write(&mut self, mut batch: Batch) {
        assert_eq!(
            batch.seg_id, self.seg.id,
            "a batch is written only into the segment it was staged for"
        );
        // Staging keeps `VOUCH_LEN` bytes for the vouch, the current
        // version's: appends never continue a segment of an older one
        // (`shared::writable_bytes` makes the first append roll).
        assert_eq!(
            self.seg.version(),
            format::FORMAT_VERSION,
            "batches are written only into segments of the current version"
        );
        // The batch's first frame vouches for every LSN this ring knows
        // to be durable now (damage behind it can then never pass for a
        // torn tail), says when the write was submitted, which is its
        // records' write time, and carries the nonce salt its sealed
        // payloads were sealed with. Cost: a CRC over 48 bytes and one
        // `clock_gettime(CLOCK_REALTIME)` (vDSO, about 20 ns) per write.
        let n = format::encode_vouch(
            &mut batch.buf.as_mut_slice()[..format::VOUCH_LEN],
            batch.salt,
            format::Vouch {
                durable: self.ledger.durable(),
                submitted_unix_ns: Some(lifecycle::now_unix_ns()),
                nonce_salt: Some(self.sh.nonce_salt()),
            },
        );
        debug_assert_eq!(n, format::VOUCH_LEN);
        // Durable when it completes, or (written mode, `Grouped`) once a
        // later sync covers it.
        let durable = self.sh.writes_durable_alone();
        let sync = if durable {
            lifecycle::durable_sync(self.sh.sync_method())
        } else {
            WriteSync::None
        };
        self.seg.dirty |= !durable;
        self.budget.wrote(batch.len);
        self.seg.wrote(batch.offset, batch.len);
        let c = &self.sh.counters();
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.write_bytes.fetch_add(batch.len as u64, Ordering::Relaxed);
        match self.placement.way(batch.len, durable) {
            Way::Ring => self.pushed.0 = true,
            Way::InPlace => self.pushed.1 = true,
        }
        let op = Op::Write {
            file: self.seg.file.clone(),
            buf: batch.buf,
            len: batch.len,
            offset: batch.offset,
            sync,
        };
        self.push(
            OpKind::Write {
                last_lsn: batch.ack_lsn,
                durable,
            },
            op,
        );
    }

    /// Move to the segment `batch` belongs to. Returns the batch back while
    /// the old segment still has work in flight (or, in written mode, until
    /// its final sync lands), so a crash can only ever tear the newest
    /// segment. Then installs a prepared spare: header write, rename,
    /// directory sync, all ordered before the batch's own write.
    ///
    /// The header write goes first when it can: if writes are still in
    /// flight and the spare is ready, its durable header write joins them
    /// in the queue (the spare keeps its spare name, so a crash leaves a
    /// file recovery discards), and the install after the drain is only
    /// the rename and the directory sync. That took the header's write
    /// (150-830 µs measured) off the path of every roll under load.
    fn roll(&mut self, batch: Batch) -> Result<Option<Batch>> {
        match self.old_segment_done(&batch) {
            Ok(true) => {}
            Ok(false) => return Ok(Some(batch)),
            Err(e) => return Err(self.hold_failed(batch, e)),
        }
        self.install(batch)?;
        Ok(None)
    }

    /// A roll failed with `batch` in hand: keep it (never to be written,
    /// the log poisons) so that its staging buffer stays counted until
    /// the ring ends, and return the error.
    fn hold_failed(&mut self, batch: Batch, e: Error) -> Error {
        self.ex.taken.push_front(batch);
        e
    }

    /// Take the next step that finishes the old segment before a roll
    /// (drain its writes, staging the next header meanwhile; sync it;
    /// seal it). Returns whether it is done already, with nothing left.
    fn old_segment_done(&mut self, batch: &Batch) -> Result<bool> {
        if !self.ledger.is_empty() {
            if self.staged.is_none()
                && let Some(spare) = self.preparer.try_take()?
            {
                let header = self.header_for(batch);
                let op = lifecycle::header_op(&spare, &header, self.sh.sync_method());
                self.push(OpKind::Barrier, op);
                self.staged = Some((spare, header));
            }
            return Ok(false);
        }
        if self.seg.dirty {
            self.issue_sync();
            return Ok(false);
        }
        if let Some(seal) = self.seg.seal(self.sh.sync_method()) {
            self.push(OpKind::Barrier, seal);
            return Ok(false);
        }
        Ok(true)
    }

    /// Install the segment `batch` opens, the old one done with, and
    /// write `batch` as its first.
    fn install(&mut self, batch: Batch) -> Result<()> {
        // Invariant 6: the old segment is done with (written, synced,
        // sealed, all acknowledged) before the new one gets anything.
        assert!(
            self.ledger.is_empty(),
            "a new segment installed with operations still in flight"
        );
        // Invariant 9: what the manifest is about to promise durable.
        assert!(
            self.ledger.durable() >= batch.seg_base - 1,
            "a segment is installed only once every LSN before it is durable"
        );
        let (spare, header) = match self.open_next(&batch) {
            Ok(next) => next,
            Err(e) => return Err(self.hold_failed(batch, e)),
        };
        self.sh.counters().rolls.fetch_add(1, Ordering::Relaxed);
        crate::obs::trace::event!(info, base_lsn = batch.seg_base, "rolled to a new segment");
        // The new segment is durable and everything before it is (drained
        // and, in written mode, synced): the manifest may now promise it.
        // Written by the preparer, so the roll does not wait for it.
        let m = Manifest {
            newest_base: batch.seg_base,
            durable_lsn: batch.seg_base - 1,
            handed_out: self.sh.next_lsn() - 1,
            ..self.sh.manifest().get()
        };
        self.preparer.installed(m, self.write_totals());
        self.seg = ActiveSegment::installed(&header, batch.seg_id, spare);
        self.write(batch);
        Ok(())
    }

    /// Name the spare as the segment `batch` opens, make the name durable,
    /// list it, and drop what the hard limit says must go.
    fn open_next(&mut self, batch: &Batch) -> Result<(Spare, SegmentHeader)> {
        let seg = self.sh.dir().segment(batch.seg_base);
        let (spare, header) = self.name_next(batch, &seg.path)?;
        self.dir
            .sync_all()
            .map_err(|e| Error::io(self.sh.dir().path(), e))?;
        self.enter_set(seg);
        // The hard limit's `DropOldest`: before the next roll can come.
        crate::write::retention::drop_over_limit(&self.sh)?;
        Ok((spare, header))
    }

    /// Add the segment just named to the log's set, telling the observer
    /// if the log is now over its soft size limit.
    fn enter_set(&self, file: SegmentFile) {
        let log_bytes = {
            let mut set = self.sh.segment_set();
            set.install(Live {
                file,
                bytes: self.sh.cfg().segment_bytes,
            });
            set.bytes()
        };
        if let (Some(limit), Some(o)) = (self.sh.cfg().soft_log_bytes, &self.observer)
            && log_bytes > limit
        {
            o.log_over_soft_limit(log_bytes);
        }
    }

    /// Give the spare for the segment `batch` opens its name `path`: the
    /// staged one, whose header write has completed, or the preparer's
    /// next, whose header is written here. Returns it with its header.
    ///
    /// Named here, on this thread, before the segment's first write is
    /// even queued: the header is durable before the file has its name
    /// (written while the old segment drained, or now), and the name
    /// before any frame. So a segment-named file with a blank header in
    /// front of data is always damage (recovery must never discard it).
    /// The queued header write only ever overlaps writes the roll waits
    /// for anyway; a roll with nothing in flight writes the header here,
    /// synchronously, rather than wait alone on the kernel's I/O
    /// workers, which CPU-bound neighbours can starve for seconds.
    ///
    /// Cost: a rename, and without a staged spare one durable 4 KiB
    /// write and a wait for the preparer.
    fn name_next(&mut self, batch: &Batch, path: &Path) -> Result<(Spare, SegmentHeader)> {
        let vfs = &*self.sh.cfg().vfs;
        let (spare, header, staged) = match self.staged.take() {
            // Its header write was a barrier in the ledger, now empty.
            Some((spare, header)) => {
                assert_eq!(
                    (header.base_lsn, header.salt),
                    (batch.seg_base, batch.salt),
                    "a staged header for another segment"
                );
                (spare, header, true)
            }
            None => (self.preparer.take()?, self.header_for(batch), false),
        };
        // Another thread may have poisoned the log while this one waited
        // for the drain or the spare: the preparer, with the manifest
        // write it made just before this spare, or a checkpoint. That
        // failure may be a directory sync's, so nothing more is named or
        // synced (invariant 4); the spare goes, as at the end of `run`.
        if let Some(p) = self.sh.acks().poison_cause() {
            let _ = vfs.remove_file(&spare.path);
            return Err(p.error());
        }
        if staged {
            lifecycle::name_spare(vfs, &spare, path)?;
        } else {
            lifecycle::install_spare(vfs, &spare, &header, path, self.sh.sync_method())?;
        }
        Ok((spare, header))
    }

    /// The header of the segment `batch` opens.
    fn header_for(&self, batch: &Batch) -> SegmentHeader {
        lifecycle::new_header(
            self.sh.cfg(),
            batch.seg_base,
            batch.salt,
            self.sh.log_id(),
            batch.cipher.as_deref(),
        )
    }

    /// Batch writes and their bytes so far, by which the preparer judges
    /// how to make the next spare.
    fn write_totals(&self) -> (u64, u64) {
        let c = &self.sh.counters();
        (
            c.writes.load(Ordering::Relaxed),
            c.write_bytes.load(Ordering::Relaxed),
        )
    }

    /// What the budget needs to know to decide on a sync.
    fn demand(&self) -> Demand {
        Demand {
            written: self.ledger.written(),
            wanted: self.sh.doorbell().sync_wanted(),
            writes: self.ledger.writes(),
            closing_drained: self.sh.is_closing()
                && self.ledger.writes() == 0
                && self.ex.taken.is_empty(),
            dirty: self.seg.dirty,
        }
    }

    /// The LSN a sync should be issued for now, if any
    /// (`SyncBudget::target`).
    fn sync_target(&self) -> Option<Lsn> {
        self.budget.target(self.demand())
    }

    /// Issue the sync `sync_target` asks for. Returns whether it did.
    fn maybe_sync(&mut self) -> bool {
        if self.sync_target().is_none() {
            return false;
        }
        self.issue_sync();
        true
    }

    /// Issue an fdatasync of the active segment covering every LSN written
    /// so far: the one place a sync is issued, for a waiter or the
    /// interval (`maybe_sync`) and before a roll alike.
    fn issue_sync(&mut self) {
        let covers = self.ledger.written();
        self.push(
            OpKind::Sync { covers },
            Op::Sync {
                file: self.seg.file.clone(),
                data_only: true,
            },
        );
        self.budget.issued(covers);
        // Clean only if every write is acknowledged: a write in flight, or
        // done but not yet advanced (behind a barrier of a rolled-to
        // segment), is not in `covers` and needs the next sync.
        self.seg.dirty = self.ledger.has_write();
        self.sh.counters().syncs.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Backend, Config, Level};
    use crate::wal::Wal;

    /// Times the ring took the reservation lock per record, for `records`
    /// appended by `producers` threads, each waiting for its record to be
    /// durable before the next (so a lone producer's records go one per
    /// write).
    fn ring_takes_per_record(backend: Backend, producers: u64, records: u64) -> f64 {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::builder().backend(backend).build();
        let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
        // Past the open's first turns.
        wal.append(0, b"warm")
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
        let before = wal.shared().staging().ring_takes();
        std::thread::scope(|s| {
            for p in 0..producers {
                let wal = &wal;
                s.spawn(move || {
                    for _ in 0..records / producers {
                        let t = wal.append(p as u16, &[7; 100]).unwrap();
                        t.wait(Level::Durable).unwrap();
                    }
                });
            }
        });
        let takes = wal.shared().staging().ring_takes() - before;
        wal.close().unwrap();
        takes as f64 / records as f64
    }

    /// The ring meets the producers once per loop turn: a lone record
    /// costs it two takes of the reservation lock (the turn that takes it,
    /// and the one that gives its buffer back and finds nothing more),
    /// where about six were taken before the exchange. A record staged
    /// while the ring is between its look and its sleep costs a turn more,
    /// which a busy machine makes common (2.1 quiet, up to 2.6 beside a
    /// build): the bound is half the old count.
    #[test]
    fn a_lone_record_costs_the_ring_two_lock_takes() {
        for backend in [Backend::Auto, Backend::Threaded] {
            let per_record = ring_takes_per_record(backend, 1, 400);
            eprintln!("{backend}: {per_record:.2} ring lock takes per lone record");
            assert!(
                per_record <= 3.0,
                "{backend}: {per_record:.2} ring lock takes per lone record"
            );
        }
    }

    /// Under load the exchange serves many records: sixteen producers
    /// share each write, and the ring's takes per record (0.76 before the
    /// exchange, about 0.2 with it) stay well below half a take.
    #[test]
    fn many_producers_share_the_rings_lock_takes() {
        let per_record = ring_takes_per_record(Backend::Auto, 16, 3200);
        eprintln!("16 producers: {per_record:.2} ring lock takes per record");
        assert!(
            per_record < 0.5,
            "{per_record:.2} ring lock takes per record with 16 producers"
        );
    }
}
