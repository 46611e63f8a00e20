//! A set of task wakers woken all at once: how a future waits for a
//! condition that blocking callers wait for on a `Condvar` (staging space
//! in the reservation, room in the channel API's request queue).
//!
//! Each waiting future owns at most one entry, found by the key it keeps,
//! however often it is polled: a poll with a waker that `will_wake` the
//! registered one changes nothing, another replaces it. Waking takes every
//! entry off the set; the future registers again if it still has to wait,
//! and removes its entry when it stops waiting first (`forget`, which its
//! `Drop` calls). So the set holds at most one entry per live waiter.
//!
//! Architecture invariant: an empty set costs its waker one atomic load,
//! so the paths that free space (the ring's recycling of a buffer) pay
//! nothing more while no task waits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use crate::sync::wake::{wake_all, Wake};

/// The first panic of a waker, for the caller to resume once all are woken.
pub(crate) type WakePanic = Box<dyn std::any::Any + Send>;

/// Wakers of the tasks waiting for one condition. See the module docs.
#[derive(Default)]
pub(crate) struct WakerSet {
    /// Whether the set may hold an entry: set under the lock by every
    /// registration, cleared under it when the set empties. Read without
    /// the lock by [`wake_all`](Self::wake_all).
    any: AtomicBool,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    /// The last key handed out.
    seq: u64,
    /// An empty map holds no allocation.
    wakers: BTreeMap<u64, Waker>,
}

impl WakerSet {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Every critical section is one map operation; a panic inside one
        // cannot leave the map half-changed.
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // Changed only under the lock, so it is exact here: an empty set
        // costs `wake_all` one load, and a waiter in the set is never missed.
        assert_eq!(
            self.any.load(Ordering::SeqCst),
            !e.wakers.is_empty(),
            "the flag says whether any waker is registered"
        );
        e
    }

    /// Register `waker` for the task whose entry is `key` (`None` before
    /// its first registration): insert an entry, or replace the waker of
    /// the one it has when that would not wake the same task.
    ///
    /// Cost: one lock and a map lookup; a waker clone when it is new or
    /// changed (an insert may allocate a B-tree node).
    pub fn register(&self, key: &mut Option<u64>, waker: &Waker) {
        let mut e = self.lock();
        if let Some(w) = key.and_then(|k| e.wakers.get_mut(&k)) {
            if !w.will_wake(waker) {
                w.clone_from(waker);
            }
            return;
        }
        // No entry, or one already taken by a wake-up: a new one.
        e.seq += 1;
        let k = e.seq;
        let reused = e.wakers.insert(k, waker.clone()).is_some();
        assert!(!reused, "waker keys are never handed out twice");
        *key = Some(k);
        self.any.store(true, Ordering::SeqCst);
    }

    /// The task whose entry is `key` stops waiting: remove it, if it is
    /// still there. Cost: nothing for a task that never registered;
    /// otherwise one lock and a map removal.
    pub fn forget(&self, key: &mut Option<u64>) {
        let Some(k) = key.take() else {
            return;
        };
        let mut e = self.lock();
        e.wakers.remove(&k);
        if e.wakers.is_empty() {
            self.any.store(false, Ordering::SeqCst);
        }
    }

    /// Wake every registered task and take its entry off the set, even if
    /// a waker panics (the first panic is returned once all are woken).
    ///
    /// Sees every registration made before the caller's last change to
    /// the condition, when both happen under one lock (the reservation
    /// lock) or are separated by a `SeqCst` fence on each side (the
    /// channel's queue). Cost: one atomic load when the set is empty;
    /// otherwise one lock, and one wake per task outside it.
    pub fn wake_all(&self) -> Result<(), WakePanic> {
        if !self.any.load(Ordering::SeqCst) {
            return Ok(());
        }
        let taken = {
            let mut e = self.lock();
            self.any.store(false, Ordering::SeqCst);
            std::mem::take(&mut e.wakers)
        };
        wake_all(taken.into_values().map(Wake::Task))
    }

    /// How many tasks are registered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().wakers.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn one_entry_per_task_woken_once_and_forgotten_after() {
        let set = WakerSet::default();
        let (a, b) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let (mut ka, mut kb) = (None, None);
        for _ in 0..100 {
            set.register(&mut ka, &wa);
        }
        // A new waker for the same entry replaces the old one.
        set.register(&mut kb, &Waker::noop().clone());
        set.register(&mut kb, &wb);
        assert_eq!(set.len(), 2);
        set.wake_all().unwrap();
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (1, 1)
        );
        assert_eq!(set.len(), 0, "woken means removed");
        // Woken again only once registered again.
        set.wake_all().unwrap();
        set.register(&mut ka, &wa);
        set.forget(&mut kb);
        assert_eq!((set.len(), kb), (1, None), "a stale key removes nothing");
        set.forget(&mut ka);
        assert_eq!(set.len(), 0);
        set.wake_all().unwrap();
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
    }
}
