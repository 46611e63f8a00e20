//! Admission: who may still append (the close), the one count of LSNs
//! handed out, and where producers wait for staging space.
//!
//! Producers refused for space wait here: a thread parks on the condvar
//! with the reservation lock, a task registers its waker under that lock;
//! both are woken by [`Admission::space_freed`] once the ring gives back
//! a buffer, a batch lets go, or a checkpoint makes room.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Condvar;
use std::task::Waker;
use std::time::Duration;

use crate::at_rest::format;
use crate::error::Lsn;
use crate::sync::lock_order::RankedGuard;
use crate::sync::wakers::{WakePanic, WakerSet};
use crate::write::staging::Reservation;

/// The close flag, the LSN count and the waits for space. Owned by
/// `Shared`; its fields are this file's.
pub(crate) struct Admission {
    /// Set once by close, under the reservation lock so that no append
    /// decided after it proceeds; the ring reads it every loop without
    /// the lock. The one "closed" flag of the write path (`Acks` keeps
    /// whether the ring is gone).
    closing: AtomicBool,
    /// The LSN the next record gets: the one count of LSNs handed out,
    /// written only under the reservation lock ([`hand_out`](Self::hand_out)),
    /// read without it by anyone.
    next_lsn: AtomicU64,
    /// Producers parked for staging space (`OnFull::Wait`).
    space: Condvar,
    /// Tasks refused for staging space (`OnFull::Register`), woken with
    /// the parked producers. Registered under the reservation lock.
    space_waiters: WakerSet,
}

impl Admission {
    pub fn new(next_lsn: Lsn) -> Admission {
        Admission {
            closing: AtomicBool::new(false),
            next_lsn: AtomicU64::new(next_lsn),
            space: Condvar::new(),
            space_waiters: WakerSet::default(),
        }
    }

    /// The LSN the next record gets. Cost: one atomic load.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn.load(Ordering::Acquire)
    }

    /// Hand out `n` consecutive LSNs, under the reservation lock (`held`
    /// proves it): the only place LSNs are given, so none is given twice.
    pub fn hand_out(&self, held: &Reservation, n: u64) -> Lsn {
        let first = self.next_lsn.load(Ordering::Relaxed);
        assert!(
            held.seg_base <= first,
            "the segment frames go to is named at or below the next LSN"
        );
        assert!(
            n >= 1
                && first
                    .checked_add(n)
                    .is_some_and(|e| e - 1 <= format::MAX_LSN),
            "LSNs {first} + {n} stay in 1..=MAX_LSN"
        );
        self.next_lsn.store(first + n, Ordering::Release);
        first
    }

    /// Refuse every append from now on, under the reservation lock
    /// (`held`), so that no append decided after it proceeds.
    pub fn close(&self, _held: &Reservation) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether close has begun. Cost: one atomic load.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Park the caller, lock released, until space may be free.
    pub fn park<'a>(&self, r: RankedGuard<'a, Reservation>) -> RankedGuard<'a, Reservation> {
        r.wait(&self.space)
    }

    /// [`park`](Self::park), for at most `left`.
    pub fn park_for<'a>(
        &self,
        r: RankedGuard<'a, Reservation>,
        left: Duration,
    ) -> RankedGuard<'a, Reservation> {
        r.wait_timeout(&self.space, left)
    }

    /// Register a task refused for space (under the reservation lock,
    /// which decided the refusal): the next freeing of space wakes it.
    pub fn register(&self, key: &mut Option<u64>, waker: &Waker) {
        self.space_waiters.register(key, waker);
    }

    /// A task stops waiting for space: its entry goes.
    pub fn forget(&self, key: &mut Option<u64>) {
        self.space_waiters.forget(key);
    }

    /// Tasks registered for space now.
    #[cfg(test)]
    pub fn tasks_waiting(&self) -> usize {
        self.space_waiters.len()
    }

    /// Space may be free again: wake the parked producers when `parked`
    /// says some may be, and every registered task. Call with the
    /// reservation lock released: a task registers under that lock, so it
    /// either saw the change or is woken here. Cost: one atomic load when
    /// no task waits, plus the condvar's notification when `parked`.
    pub fn space_freed(&self, parked: bool) -> Result<(), WakePanic> {
        if parked {
            self.space.notify_all();
        }
        self.space_waiters.wake_all()
    }

    /// Wake every producer waiting for space once the log is poisoned or
    /// closing: each finds that and fails. A waker that panics changes
    /// nothing more (and must not unwind out of a close).
    pub fn wake_ending(&self) {
        self.space.notify_all();
        let _ = self.space_waiters.wake_all();
    }
}
