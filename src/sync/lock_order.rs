//! The lock order, written once as data and checked in debug builds.
//!
//! Every lock that is ever held together with another is a [`Ranked`]
//! mutex (or, for the checkpoint turn, a [`Token`]) with a [`Rank`]; a
//! thread may take a lock only if every lock it holds ranks lower. Debug
//! builds keep, per thread, the ranks held and panic at the first lock
//! taken out of order, naming both, so a test that exercises a path finds
//! a wrong nesting even when it does not deadlock. Release builds keep
//! nothing: a `Ranked` is a `Mutex` and a guard is a `MutexGuard`.
//!
//! A `try_lock` never waits, so it cannot close a cycle: it is not
//! checked, though what it takes is held from then on like any lock.

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The lock order: a lock is taken only while every lock held ranks
/// lower. The discriminants are the order; [`ORDER`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// The checkpoint turn (`retention::Retention`), held across a
    /// checkpoint's I/O; the ring only ever tries it.
    CheckpointTurn,
    /// The manifest keeper's write lock, held across a manifest write.
    ManifestWrite,
    /// The keeper's hand-over slot, after the write lock (or alone, with
    /// the write lock only tried).
    ManifestHandOver,
    /// The keeper's copy of the manifest as written, never across I/O.
    ManifestCopy,
    /// The writer's segment set, never across I/O.
    SegmentSet,
    /// The reservation: every append's critical section.
    Reservation,
    /// The sparse index, taken by a producer adding a point.
    Index,
}

/// The ranks in the order they must be taken: what the type's derived
/// order is, written out so that a test can hold the two together and a
/// violation can print it.
#[cfg(debug_assertions)]
pub(crate) const ORDER: [Rank; 7] = [
    Rank::CheckpointTurn,
    Rank::ManifestWrite,
    Rank::ManifestHandOver,
    Rank::ManifestCopy,
    Rank::SegmentSet,
    Rank::Reservation,
    Rank::Index,
];

#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    use super::{Rank, ORDER};

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Record `rank` as taken; when `checked`, panic if a lock of this
    /// rank or a higher one is held already.
    pub(super) fn take(rank: Rank, checked: bool) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(&top) = h.iter().max().filter(|&&top| checked && top >= rank) {
                drop(h);
                panic!("lock order: {rank:?} taken while {top:?} is held; the order is {ORDER:?}");
            }
            h.push(rank);
        });
    }

    /// Forget the latest taking of `rank` (guards may drop in any order).
    pub(super) fn release(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&r| r == rank) {
                h.remove(i);
            }
        });
    }
}

#[cfg(not(debug_assertions))]
mod held {
    use super::Rank;

    pub(super) fn take(_: Rank, _: bool) {}

    pub(super) fn release(_: Rank) {}
}

/// A mutex with its place in the lock order. Every critical section of
/// the engine completes its updates before anything that could panic, so
/// a poisoned mutex carries no information and is taken over.
pub(crate) struct Ranked<T> {
    rank: Rank,
    inner: Mutex<T>,
}

impl<T> Ranked<T> {
    pub(crate) fn new(rank: Rank, value: T) -> Ranked<T> {
        Ranked {
            rank,
            inner: Mutex::new(value),
        }
    }

    /// Take the lock, in order (checked in debug builds). Cost: the
    /// mutex; in debug builds a thread-local push.
    pub(crate) fn lock(&self) -> RankedGuard<'_, T> {
        held::take(self.rank, true);
        RankedGuard {
            guard: Some(self.inner.lock().unwrap_or_else(|p| p.into_inner())),
            rank: self.rank,
        }
    }

    /// The lock if it is free now. Never waits, so never out of order.
    pub(crate) fn try_lock(&self) -> Option<RankedGuard<'_, T>> {
        let guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        held::take(self.rank, false);
        Some(RankedGuard {
            guard: Some(guard),
            rank: self.rank,
        })
    }
}

/// A held [`Ranked`] lock.
pub(crate) struct RankedGuard<'a, T> {
    /// Always `Some` but inside a condvar wait, which takes it by value.
    guard: Option<MutexGuard<'a, T>>,
    rank: Rank,
}

impl<'a, T> RankedGuard<'a, T> {
    /// Wait on `cv`, the lock released meanwhile and taken back after.
    /// Its rank stays held for the order: nothing else may be taken by a
    /// thread that sleeps here.
    pub(crate) fn wait(mut self, cv: &Condvar) -> Self {
        let g = self
            .guard
            .take()
            .expect("a guard outside a wait holds its lock");
        self.guard = Some(cv.wait(g).unwrap_or_else(|p| p.into_inner()));
        self
    }

    /// As [`wait`](Self::wait), for at most `timeout`.
    pub(crate) fn wait_timeout(mut self, cv: &Condvar, timeout: Duration) -> Self {
        let g = self
            .guard
            .take()
            .expect("a guard outside a wait holds its lock");
        let (g, _) = cv
            .wait_timeout(g, timeout)
            .unwrap_or_else(|p| p.into_inner());
        self.guard = Some(g);
        self
    }
}

impl<T> Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard
            .as_ref()
            .expect("a guard outside a wait holds its lock")
    }
}

impl<T> DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard
            .as_mut()
            .expect("a guard outside a wait holds its lock")
    }
}

impl<T> Drop for RankedGuard<'_, T> {
    fn drop(&mut self) {
        // The mutex first, then the record: the rank is never forgotten
        // while the lock is still held.
        drop(self.guard.take());
        held::release(self.rank);
    }
}

/// A logical lock held across I/O (the checkpoint turn): its place in the
/// order, from its taking to its drop, on the thread that took it.
pub(crate) struct Token {
    rank: Rank,
}

impl Token {
    /// Record the taking of a logical lock of `rank`; `waited` when the
    /// taker may have waited for it (a try is never out of order).
    pub(crate) fn taken(rank: Rank, waited: bool) -> Token {
        held::take(rank, waited);
        Token { rank }
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        held::release(self.rank);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(debug_assertions)]
    #[test]
    fn the_written_order_is_the_types_order() {
        assert!(ORDER.windows(2).all(|w| w[0] < w[1]));
        // Every rank is listed: the last discriminant is the length - 1.
        assert_eq!(Rank::Index as usize, ORDER.len() - 1);
    }

    #[test]
    fn locks_taken_in_order_pass_and_release_in_any_order() {
        let (a, b) = (
            Ranked::new(Rank::SegmentSet, 1),
            Ranked::new(Rank::Reservation, 2),
        );
        let ga = a.lock();
        let gb = b.lock();
        drop(ga);
        drop(gb);
        let _gb = b.lock();
        assert!(a.try_lock().is_some(), "a try is never out of order");
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_lock_taken_out_of_order_panics_naming_both() {
        let (a, b) = (
            Ranked::new(Rank::SegmentSet, 1),
            Ranked::new(Rank::Reservation, 2),
        );
        let _gb = b.lock();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(a.lock())))
            .expect_err("out of order");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("SegmentSet taken while Reservation is held"),
            "{msg}"
        );
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_lock_of_the_same_rank_is_out_of_order_too() {
        let (a, b) = (Ranked::new(Rank::Index, 1), Ranked::new(Rank::Index, 2));
        let _ga = a.lock();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(b.lock())));
        assert!(err.is_err(), "two locks of one rank are never nested");
    }
}
