//! Tickets: the handle a producer holds on one appended record, and the
//! one waiting future (`TicketFuture`) behind both `Ticket::reached` and
//! `Wal::wait_for`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::acks::{Waiter, WakeBy};
use crate::config::Level;
use crate::error::{Lsn, Result};
use crate::format::Kind;
use crate::state::{OnFull, Shared};

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
        on_full: OnFull,
        then: impl FnOnce(Lsn),
    ) -> Result<Ticket> {
        // The reservation wakes the ring when the record gives it work.
        let first = shared.reserve_all(records, kind, on_full, then)?;
        Ok(Ticket {
            lsn: first + records.len() as u64 - 1,
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
        matches!(self.shared.acks.check(self.lsn, level), Some(Ok(())))
    }

    /// Block the calling thread until the record reaches `level`.
    ///
    /// Returns `Err(Poisoned)` if a write or sync failed first: the record
    /// may or may not be on disk, and is never reported durable. Waiting
    /// for `Durable` in written mode asks the ring for one sync that covers
    /// every record written so far (shared with all concurrent waiters).
    /// Cost: no syscall if already reached; otherwise the thread parks and
    /// is woken exactly once its LSN is covered. The thread holds one entry
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
        let acks = &self.shared.acks;
        if let Some(done) = acks.check(self.lsn, level) {
            return done;
        }
        self.shared.want(self.lsn, level);
        let me = std::thread::current();
        let mut waiter = Waiter::new(self.lsn, level);
        loop {
            // A decided poll removes the entry; a spurious unpark finds the
            // entry already waking this thread and leaves it.
            if let Some(done) = acks.poll(&mut waiter, WakeBy::Thread(&me)) {
                return done;
            }
            std::thread::park();
        }
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
            if let Some(done) = this.shared.acks.check(lsn, level) {
                return Poll::Ready(done);
            }
            this.shared.want(lsn, level);
            this.asked = true;
        }
        match this
            .shared
            .acks
            .poll(&mut this.waiter, WakeBy::Task(cx.waker()))
        {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}

impl Drop for TicketFuture {
    /// Removes the future's waker from the log, if it left one. Cost: one
    /// short lock when it did; nothing otherwise.
    fn drop(&mut self) {
        self.shared.acks.forget(&mut self.waiter);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;
    use crate::format::Kind;
    use crate::state::test_shared;

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
        let acks = &t.shared.acks;
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
        assert_eq!(t.shared.acks.waiters(), 1);
        t.shared.acks.advance(t.lsn, t.lsn);
        assert_eq!((first.woken(), last.woken()), (0, 1));
        assert_eq!(t.shared.acks.waiters(), 0, "woken means removed");
        assert!(matches!(
            poll_with(&mut fut, &last_waker),
            Poll::Ready(Ok(()))
        ));
        drop(fut);
        assert_eq!(last.woken(), 1, "woken exactly once");
    }

    #[test]
    fn a_blocked_thread_leaves_no_entry_behind() {
        let t = pending_ticket();
        let waiting = {
            let t = t.clone();
            std::thread::spawn(move || t.wait(Level::Durable))
        };
        while t.shared.acks.waiters() == 0 {
            std::thread::yield_now();
        }
        // Spurious unparks do not add entries.
        for _ in 0..100 {
            waiting.thread().unpark();
        }
        assert_eq!(t.shared.acks.waiters(), 1);
        t.shared.acks.advance(t.lsn, t.lsn);
        waiting.join().unwrap().unwrap();
        assert_eq!(t.shared.acks.waiters(), 0);
    }
}
