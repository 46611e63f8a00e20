//! Tickets: the handle a producer holds on one appended record, the one
//! waiting future (`TicketFuture`) behind both `Ticket::reached` and
//! `Wal::wait_for`, and the append that awaits staging space
//! (`AppendFuture`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::at_rest::format::Kind;
use crate::config::Level;
use crate::error::{Error, Lsn, Result};
use crate::sync::wake::WakeBy;
use crate::write::acks::Waiter;
use crate::write::reserve::OnFull;
use crate::write::shared::Shared;
use ringwal_platform::WakeWord;

thread_local! {
    /// The word this thread parks on in [`Ticket::wait`]; the ring wakes it
    /// (see `Acks::advance`). One per thread, reused by every wait.
    static WAKE_WORD: Arc<WakeWord> = Arc::new(WakeWord::default());
}

/// One appended record: its LSN, and the means to wait until it reaches a
/// [`Level`].
///
/// Dropping a ticket does not cancel anything; the record is written
/// either way. Cost: a ticket holds one `Arc` reference to the log.
///
/// ```
/// # use ringwal::{Config, Durability, Level, Wal};
/// # let dir = tempfile::tempdir()?;
/// let deferred = Durability::Deferred { sync_interval: None };
/// let cfg = Config::builder().durability(deferred).build();
/// let (wal, _) = Wal::open(dir.path(), cfg)?;
/// let ticket = wal.append(0, b"x")?;
/// ticket.wait(Level::Written)?; // survives a process crash now
/// assert!(ticket.is_done(Level::Written));
/// ticket.wait(Level::Durable)?; // written mode: asks for one shared sync
/// assert!(ticket.is_done(Level::Durable));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[must_use = "a ticket does nothing unless waited on; drop it explicitly if the level does not matter"]
pub struct Ticket {
    pub(crate) lsn: Lsn,
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("lsn", &self.lsn).finish()
    }
}

impl Ticket {
    /// Sequence `records` of `kind` as one run (`Shared::reserve_all`:
    /// one record, or one atomic batch), wake the ring thread, and return
    /// the ticket of the last. The one path from a reservation to a
    /// ticket: appends, batches, commits and markers all take it.
    pub(crate) fn issue(
        shared: &Arc<Shared>,
        records: &[(u16, &[u8])],
        kind: Kind,
        on_full: OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Ticket> {
        // The reservation wakes the ring when the record gives it work.
        let first = shared.reserve_all(records, kind, on_full, then)?;
        assert!(
            !records.is_empty() && first >= 1,
            "a reserved batch has records, at LSNs from 1"
        );
        Ok(Ticket {
            lsn: first + records.len() as u64 - 1,
            shared: shared.clone(),
        })
    }

    /// Sequence one data record of `len` bytes that `write` serializes in
    /// place ([`Wal::append_with`](crate::Wal::append_with)): claimed
    /// under the reservation lock, written after it. With compression on,
    /// `write` fills a temporary buffer that is packed and copied as any
    /// append is.
    pub(crate) fn issue_with(
        shared: &Arc<Shared>,
        stream: u16,
        len: usize,
        on_full: OnFull<'_>,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<Ticket> {
        let max = shared.cfg().max_record_bytes;
        if len > max {
            return Err(crate::error::Error::TooLarge { len, max });
        }
        if shared.cfg().compression.codec != crate::at_rest::format::Codec::None {
            let mut bytes = vec![0; len];
            write(&mut bytes);
            return Ticket::issue(shared, &[(stream, &bytes)], Kind::Data, on_full, |_| {});
        }
        let claim = shared.claim_one(
            stream,
            Kind::Data,
            crate::at_rest::format::Codec::None,
            len,
            on_full,
            |_| {},
        )?;
        let lsn = claim.fill(|p| {
            // A recycled buffer holds an older batch's bytes: whatever
            // `write` leaves unwritten must not carry them into this record.
            p.fill(0);
            write(p);
        });
        Ok(Ticket {
            lsn,
            shared: shared.clone(),
        })
    }

    /// The record's LSN.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// True if the record has already reached `level` (no blocking, no
    /// syscall; two atomic loads).
    pub fn is_done(&self, level: Level) -> bool {
        matches!(self.shared.acks().check(self.lsn, level), Some(Ok(())))
    }

    /// Block the calling thread until the record reaches `level`.
    ///
    /// Returns `Err(Poisoned)` if a write or sync failed first: the record
    /// may or may not be on disk, and is never reported durable. Waiting
    /// for `Durable` in written mode asks the ring for one sync that covers
    /// every record written so far (shared with all concurrent waiters).
    /// Cost: no syscall if already reached; otherwise, while it is the
    /// log's only blocked waiter, it first spins for up to
    /// [`Config::wait_spin`](crate::Config::wait_spin) (1 ms by default,
    /// yielding the CPU every 16 polls; it stops as soon as a second
    /// thread waits), then parks on
    /// a futex word of its own and is woken exactly once its LSN is
    /// covered (the ring batches the wakes of one advance into one
    /// `io_uring_enter`). The thread holds one entry
    /// in the log's waiter lists while it waits, however often it is
    /// unparked, and none once this returns.
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`](crate::Error::Poisoned) or
    /// [`Error::NoSpace`](crate::Error::NoSpace) if a write or sync failed
    /// before the record reached `level` (see
    /// [`Wal::poison_cause`](crate::Wal::poison_cause)). A record already
    /// at `level` when the failure came still returns `Ok`.
    pub fn wait(&self, level: Level) -> Result<()> {
        let acks = &self.shared.acks();
        if let Some(done) = acks.check(self.lsn, level) {
            return done;
        }
        self.shared.want(self.lsn, level);
        // Counted through the park too: a spinner must see every waiter.
        let spin = self.shared.wait_spin();
        let blocked = (!spin.is_zero()).then(|| acks.block());
        if let Some(done) = blocked
            .as_ref()
            .and_then(|b| b.spin_alone(self.lsn, level, spin))
        {
            return done;
        }
        let mut waiter = Waiter::new(self.lsn, level);
        WAKE_WORD.with(|word| loop {
            // Cleared before the poll registers it, so a wake that comes
            // between the poll and the park makes the park return at once.
            word.clear();
            // A decided poll removes the entry; a spurious return finds the
            // entry already waking this thread and leaves it.
            if let Some(done) = acks.poll(&mut waiter, WakeBy::Thread(word)) {
                debug_assert!(
                    done.is_err() || self.is_done(level),
                    "a wait ends well only once its level is reached"
                );
                return done;
            }
            word.park();
        })
    }

    /// A future that resolves when the record reaches `level`, with the
    /// same meaning as [`wait`](Self::wait). Works on any executor: it
    /// registers the task's waker with the log, which the ring thread
    /// wakes. See [`TicketFuture`] for what a poll costs. Cost here: one
    /// `Arc` clone, no lock.
    ///
    /// ```
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let ticket = wal.append(0, b"x")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// rt.block_on(ticket.reached(Level::Durable))?;
    /// assert!(ticket.is_done(Level::Durable));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The future resolves to an error exactly when [`wait`](Self::wait)
    /// would return one.
    pub fn reached(&self, level: Level) -> TicketFuture {
        TicketFuture::new(self.shared.clone(), self.lsn, level)
    }
}

/// Future returned by [`Ticket::reached`] (and, unnamed, by
/// [`Wal::wait_for`](crate::Wal::wait_for)): resolves when the log's
/// watermark for its level covers its LSN, or fails with the poison, or
/// with `Closed` if the log closed first (only possible for an LSN never
/// handed out: a close writes every record first).
///
/// Guarantees: it holds at most one waker in the log however often it is
/// polled. A poll with a waker that [`will_wake`](std::task::Waker::will_wake)
/// the registered one changes nothing; another waker replaces it, so the
/// waker of the latest pending poll is the one woken. Dropping the future
/// removes its waker. Cost of a poll: two atomic loads when already
/// decided; otherwise one short lock, a map lookup, and a waker clone only
/// when the waker changed. The first pending poll may also wake the ring
/// thread (one eventfd write, only if it sleeps) or, for `Durable` in
/// written mode, ask it for a sync.
pub struct TicketFuture {
    shared: Arc<Shared>,
    waiter: Waiter,
    /// Whether the ring was told of this wait (`Shared::want`) yet.
    asked: bool,
}

impl TicketFuture {
    /// The wait for `lsn` at `level` on the log `shared`.
    pub(crate) fn new(shared: Arc<Shared>, lsn: Lsn, level: Level) -> TicketFuture {
        TicketFuture {
            shared,
            waiter: Waiter::new(lsn, level),
            asked: false,
        }
    }
}

impl std::fmt::Debug for TicketFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketFuture")
            .field("lsn", &self.waiter.lsn())
            .field("level", &self.waiter.level())
            .finish()
    }
}

impl Future for TicketFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        let (lsn, level) = (this.waiter.lsn(), this.waiter.level());
        if !this.asked {
            if let Some(done) = this.shared.acks().check(lsn, level) {
                return Poll::Ready(done);
            }
            this.shared.want(lsn, level);
            this.asked = true;
        }
        match this
            .shared
            .acks()
            .poll(&mut this.waiter, WakeBy::Task(cx.waker()))
        {
            Some(done) => {
                debug_assert!(
                    done.is_err() || matches!(this.shared.acks().check(lsn, level), Some(Ok(()))),
                    "a wait ends well only once its level is reached"
                );
                Poll::Ready(done)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for TicketFuture {
    /// Removes the future's waker from the log, if it left one. Cost: one
    /// short lock when it did; nothing otherwise.
    fn drop(&mut self) {
        self.shared.acks().forget(&mut self.waiter);
    }
}

/// Future returned by [`Wal::append_async`](crate::Wal::append_async)
/// and its `then` and [`Collector`](crate::Collector) variants: one record
/// appended, waiting for staging space by awaiting, never by parking the
/// thread. Resolves to the record's [`Ticket`] at level `Accepted`.
///
/// Each poll tries the append as [`Wal::try_append`](crate::Wal::try_append)
/// does. When every staging buffer is full it registers the task's waker
/// with the log, under the same lock that found no space, and returns
/// `Pending`; the ring thread wakes it when it frees a buffer (and so do
/// the end of an atomic batch that held producers back, the poison and
/// the close). No polling, no thread parked, no LSN taken while it waits.
///
/// Guarantees: the record is appended at most once (on the poll that
/// returns `Ready(Ok)`), and `then` runs then, under the reservation lock,
/// exactly once. Dropping the future before that appends nothing and
/// removes its waker. It holds at most one waker in the log however often
/// it is polled.
///
/// Cost of a poll: that of `try_append` (one lock, one copy, one CRC).
/// When refused: also one short lock of the log's waiter set and a waker
/// clone (the first time, or when the waker changed; an insert may
/// allocate a B-tree node). An append that had to wait pays one more short
/// lock when it completes or is dropped, to remove its entry. While no
/// task waits, the ring thread pays one atomic load per buffer it frees.
///
/// # Panics
///
/// If polled again after it returned `Ready`.
#[must_use = "futures do nothing unless polled; the record is appended only when it is"]
pub struct AppendFuture<'a, F> {
    shared: &'a Arc<Shared>,
    record: (u16, &'a [u8]),
    /// The hook, until the append that runs it.
    then: Option<F>,
    /// Its entry in `Shared::space_waiters`, if it registered one.
    space: Option<u64>,
    done: bool,
}

impl<'a, F: FnOnce(Lsn)> AppendFuture<'a, F> {
    pub(crate) fn new(shared: &'a Arc<Shared>, stream: u16, payload: &'a [u8], then: F) -> Self {
        AppendFuture {
            shared,
            record: (stream, payload),
            then: Some(then),
            space: None,
            done: false,
        }
    }
}

// Nothing in it is pinned: `then` is only ever moved out and called.
impl<F> Unpin for AppendFuture<'_, F> {}

impl<F> std::fmt::Debug for AppendFuture<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendFuture")
            .field("stream", &self.record.0)
            .field("len", &self.record.1.len())
            .field("waiting", &self.space.is_some())
            .finish()
    }
}

impl<F: FnOnce(Lsn)> Future for AppendFuture<'_, F> {
    type Output = Result<Ticket>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Ticket>> {
        let this = self.get_mut();
        assert!(!this.done, "AppendFuture polled after it completed");
        let then = &mut this.then;
        let on_full = OnFull::Register {
            key: &mut this.space,
            waker: cx.waker(),
        };
        let hook = |lsn| {
            if let Some(f) = then.take() {
                f(lsn);
            }
        };
        match Ticket::issue(this.shared, &[this.record], Kind::Data, on_full, hook) {
            Err(Error::Full) => Poll::Pending,
            done => {
                this.done = true;
                this.shared.admission().forget(&mut this.space);
                Poll::Ready(done)
            }
        }
    }
}

impl<F> Drop for AppendFuture<'_, F> {
    /// Removes the future's waker from the log, if it left one. Cost: one
    /// short lock when it did; nothing otherwise.
    fn drop(&mut self) {
        self.shared.admission().forget(&mut self.space);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;
    use crate::at_rest::format::Kind;
    use crate::write::shared::test_shared;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Counter {
        fn woken(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A ticket for one record of a log whose ring never runs: its
    /// futures stay pending until the test advances the watermarks.
    fn pending_ticket() -> Ticket {
        let shared = test_shared(1);
        let lsn = shared
            .reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            .unwrap();
        Ticket { lsn, shared }
    }

    fn poll_with(fut: &mut TicketFuture, waker: &Waker) -> Poll<Result<()>> {
        Pin::new(fut).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_future_polled_many_times_holds_one_waker_and_drop_removes_it() {
        let t = pending_ticket();
        let acks = &t.shared.acks();
        for level in [Level::Written, Level::Durable] {
            let mut fut = t.reached(level);
            let same = Waker::from(Arc::new(Counter::default()));
            for i in 0..1000 {
                // Alternately the same waker and a fresh one each time.
                let fresh = Waker::from(Arc::new(Counter::default()));
                let w = if i % 2 == 0 { &same } else { &fresh };
                assert!(poll_with(&mut fut, w).is_pending());
                assert!(poll_with(&mut fut, Waker::noop()).is_pending());
                assert_eq!(acks.waiters(), 1, "{level:?}: poll {i}");
            }
            drop(fut);
            assert_eq!(acks.waiters(), 0, "{level:?}: dropping removes it");
        }
        // Many futures at once: one entry each, all gone with them.
        let futs: Vec<_> = (0..50)
            .map(|_| {
                let mut f = t.reached(Level::Durable);
                for _ in 0..10 {
                    assert!(poll_with(&mut f, Waker::noop()).is_pending());
                }
                f
            })
            .collect();
        assert_eq!(acks.waiters(), 50);
        drop(futs);
        assert_eq!(acks.waiters(), 0);
    }

    #[test]
    fn the_last_registered_waker_is_the_one_woken() {
        let t = pending_ticket();
        let (first, last) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        let mut fut = t.reached(Level::Durable);
        assert!(poll_with(&mut fut, &Waker::from(first.clone())).is_pending());
        // The waker of the latest pending poll replaces the first; a clone
        // of it (`will_wake`) leaves the entry as it is.
        let last_waker = Waker::from(last.clone());
        assert!(poll_with(&mut fut, &last_waker).is_pending());
        assert!(poll_with(&mut fut, &last_waker.clone()).is_pending());
        assert_eq!(t.shared.acks().waiters(), 1);
        t.shared.acks().advance(t.lsn, t.lsn).wake_now();
        assert_eq!((first.woken(), last.woken()), (0, 1));
        assert_eq!(t.shared.acks().waiters(), 0, "woken means removed");
        assert!(matches!(
            poll_with(&mut fut, &last_waker),
            Poll::Ready(Ok(()))
        ));
        drop(fut);
        assert_eq!(last.woken(), 1, "woken exactly once");
    }

    fn poll_append<F: FnOnce(Lsn)>(
        fut: &mut AppendFuture<'_, F>,
        waker: &Waker,
    ) -> Poll<Result<Ticket>> {
        Pin::new(fut).poll(&mut Context::from_waker(waker))
    }

    /// A buffer comes back to a log with none free, as the ring's
    /// `recycle` returns one.
    fn free_one(shared: &Shared) {
        let buf = ringwal_platform::AlignedBuf::new(shared.cfg().buffer_bytes());
        shared.lock().free.push(buf);
        shared.space_freed(false);
    }

    #[test]
    fn an_append_refused_for_space_waits_as_one_waker_and_is_woken_when_a_buffer_frees() {
        let shared = test_shared(0);
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        let mut hooked = Vec::new();
        let mut fut = AppendFuture::new(&shared, 3, b"x", |lsn| hooked.push(lsn));
        for _ in 0..100 {
            assert!(poll_append(&mut fut, &waker).is_pending());
        }
        assert_eq!(
            shared.admission().tasks_waiting(),
            1,
            "one entry however often polled"
        );
        assert_eq!(shared.next_lsn(), 1, "no LSN taken while waiting");
        free_one(&shared);
        assert_eq!(counter.woken(), 1);
        assert_eq!(shared.admission().tasks_waiting(), 0, "woken means removed");
        match poll_append(&mut fut, &waker) {
            Poll::Ready(Ok(t)) => assert_eq!(t.lsn(), 1),
            other => panic!("expected the ticket, got {other:?}"),
        }
        drop(fut);
        assert_eq!(hooked, [1], "the hook ran once, with the LSN");
        assert_eq!(shared.admission().tasks_waiting(), 0);
    }

    #[test]
    fn a_dropped_append_leaves_no_waker_and_the_poison_wakes_the_rest() {
        let shared = test_shared(0);
        let mut dropped = AppendFuture::new(&shared, 0, b"x", |_| {});
        assert!(poll_append(&mut dropped, Waker::noop()).is_pending());
        assert_eq!(shared.admission().tasks_waiting(), 1);
        drop(dropped);
        assert_eq!(shared.admission().tasks_waiting(), 0);
        assert_eq!(shared.next_lsn(), 1, "nothing appended");

        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        let mut fut = AppendFuture::new(&shared, 0, b"x", |_| panic!("never appended"));
        assert!(poll_append(&mut fut, &waker).is_pending());
        shared.poison(crate::error::Poison::failed("test"));
        assert_eq!(counter.woken(), 1);
        assert!(matches!(
            poll_append(&mut fut, &waker),
            Poll::Ready(Err(Error::Poisoned { .. }))
        ));
    }

    #[test]
    fn a_blocked_thread_leaves_no_entry_behind() {
        let t = pending_ticket();
        let waiting = {
            let t = t.clone();
            std::thread::spawn(move || t.wait(Level::Durable))
        };
        while t.shared.acks().waiters() == 0 {
            std::thread::yield_now();
        }
        // Unparks (the log wakes through the thread's word, not its parker)
        // neither wake it nor add entries.
        for _ in 0..100 {
            waiting.thread().unpark();
        }
        assert_eq!(t.shared.acks().waiters(), 1);
        t.shared.acks().advance(t.lsn, t.lsn).wake_now();
        waiting.join().unwrap().unwrap();
        assert_eq!(t.shared.acks().waiters(), 0);
    }
}
