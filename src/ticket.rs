//! Tickets: the handle a producer holds on one appended record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::acks::Wake;
use crate::config::Level;
use crate::error::{Lsn, Result};
use crate::state::Shared;

/// One appended record: its LSN, and the means to wait until it reaches a
/// [`Level`].
///
/// Dropping a ticket does not cancel anything; the record is written
/// either way. Cost: a ticket holds one `Arc` reference to the log.
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
    /// is woken exactly once its LSN is covered.
    pub fn wait(&self, level: Level) -> Result<()> {
        let acks = &self.shared.acks;
        if let Some(done) = acks.check(self.lsn, level) {
            return done;
        }
        self.shared.want(self.lsn, level);
        loop {
            if let Some(done) = acks.register(self.lsn, level, Wake::Thread(std::thread::current()))
            {
                return done;
            }
            std::thread::park();
            if let Some(done) = acks.check(self.lsn, level) {
                return done;
            }
        }
    }

    /// A future that resolves when the record reaches `level`, with the
    /// same meaning as [`wait`](Self::wait). Works on any executor: it
    /// registers the task's waker with the log, which the ring thread wakes.
    pub fn reached(&self, level: Level) -> TicketFuture {
        TicketFuture {
            ticket: self.clone(),
            level,
            asked: false,
        }
    }
}

/// Future returned by [`Ticket::reached`].
#[derive(Debug)]
pub struct TicketFuture {
    ticket: Ticket,
    level: Level,
    asked: bool,
}

impl Future for TicketFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let (lsn, level) = (self.ticket.lsn, self.level);
        let acks = &self.ticket.shared.acks;
        if let Some(done) = acks.check(lsn, level) {
            return Poll::Ready(done);
        }
        if !self.asked {
            self.ticket.shared.want(lsn, level);
            self.asked = true;
        }
        match self
            .ticket
            .shared
            .acks
            .register(lsn, level, Wake::Task(cx.waker().clone()))
        {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}
