//! Acknowledgement watermarks and the waiters parked on them.
//!
//! The ring thread is the only writer of the watermarks; producers read
//! them lock-free and park only when their LSN is not yet covered. A
//! waiter is registered under its LSN, and an advance wakes exactly the
//! waiters it covers (no thundering herd), in LSN order.
//!
//! A task is woken through its waker, on the ring thread. A blocked thread
//! parks on a [`WakeWord`] of its own; an advance sets the words it covers
//! and returns them ([`Parked`]) for the ring to wake in one submission
//! (`IoQueue::wake`): at 64 producers the ring spent about half its time
//! in one futex wake syscall per waiter, and batching them into one
//! `io_uring_enter` raised 1 KiB x 64 durable appends 1.11x and 1.41x in
//! two alternating runs (docs/benchmarks-history.md).
//!
//! Every wait, blocking or async, is a [`Waiter`]: it owns at most one
//! entry in the lists however often it is polled. A poll with a wake that
//! would wake the same thread or task leaves the entry alone (no clone);
//! another wake replaces it. The entry goes when the wait is decided, or
//! when its owner stops waiting (`forget`, which a future's `Drop` calls).
//! So the lists hold at most one entry per live waiter, never one per poll.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ringwal_platform::WakeWord;

use crate::config::Level;
use crate::error::{Error, Lsn, Poison};
use crate::sync::wake::{wake_all, Wake, WakeBy};

/// The blocked threads an advance covers, their words already set: for
/// the ring to wake in one submission ([`IoQueue::wake`]), or
/// [`wake_now`](Self::wake_now).
///
/// [`IoQueue::wake`]: ringwal_platform::IoQueue::wake
#[must_use = "the threads stay parked until their words are woken"]
pub(crate) struct Parked(pub Vec<Arc<WakeWord>>);

impl Parked {
    /// Wake them here, one syscall each.
    pub fn wake_now(self) {
        WakeWord::wake_each(&self.0);
    }
}

/// One wait for `lsn` at `level`, and its one entry in the lists (if
/// registered). Polled through [`Acks::poll`]; whoever owns it must call
/// [`Acks::forget`] when it stops waiting before the wait is decided.
#[derive(Debug)]
pub(crate) struct Waiter {
    lsn: Lsn,
    level: Level,
    /// The registration number of its entry, keyed `(lsn, seq)`.
    seq: Option<u64>,
}

impl Waiter {
    pub fn new(lsn: Lsn, level: Level) -> Waiter {
        Waiter {
            lsn,
            level,
            seq: None,
        }
    }

    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    pub fn level(&self) -> Level {
        self.level
    }
}

#[derive(Default)]
struct Lists {
    /// Keyed by (lsn, registration number) so equal LSNs coexist.
    written: BTreeMap<(Lsn, u64), Wake>,
    durable: BTreeMap<(Lsn, u64), Wake>,
    seq: u64,
}

impl Lists {
    /// The list waiters for `level` go in (`Accepted` never waits).
    fn of(&mut self, level: Level) -> &mut BTreeMap<(Lsn, u64), Wake> {
        match level {
            Level::Durable => &mut self.durable,
            _ => &mut self.written,
        }
    }
}

/// A thread counted blocked in a wait ([`Acks::block`]) until dropped.
pub(crate) struct Blocked<'a>(&'a Acks);

impl Blocked<'_> {
    /// Spin for the result of waiting for `lsn` at `level` (as
    /// [`Acks::check`] gives it) for up to `spin`, while this thread is the
    /// log's only blocked waiter. `None` once the spin runs out or another
    /// waiter blocks: park then. Cost: up to `spin` of this CPU, yielded
    /// to any other thread runnable on it every 16 polls (one
    /// `sched_yield`); no lock.
    pub fn spin_alone(&self, lsn: Lsn, level: Level, spin: Duration) -> Option<Result<(), Error>> {
        // The clock is read every few polls: a vDSO call, but still
        // dearer than the loads of a poll.
        const POLLS_PER_CLOCK: u32 = 16;
        let acks = self.0;
        let until = Instant::now() + spin;
        loop {
            for _ in 0..POLLS_PER_CLOCK {
                if let Some(done) = acks.check(lsn, level) {
                    return Some(done);
                }
                if acks.blocked.load(Ordering::Relaxed) > 1 {
                    return None;
                }
                std::hint::spin_loop();
            }
            if Instant::now() >= until {
                return None;
            }
            // Give the CPU to whoever waits for it: the ring thread that
            // answers this wait may be runnable on this very CPU (on a
            // machine whose other CPUs are busy), and a pure spin held it
            // off for the whole spin. `ringwal bench --busy-neighbour`,
            // one producer, four alternating rounds: 7,479-10,447
            // records/s with p99 1,124-1,148 us spinning, 12,412-14,302
            // with p99 110-128 us yielding; on a quiet machine level
            // (12,100-13,636 against 12,282-13,421). Cost: one
            // `sched_yield` per 16 polls, returning at once when nothing
            // else is runnable here.
            std::thread::yield_now();
        }
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.0.blocked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Watermarks plus waiters. See the module docs.
pub(crate) struct Acks {
    written: AtomicU64,
    durable: AtomicU64,
    /// The log's one poison: the ring sets it, the reservation refuses
    /// appends by it, waiters fail with it. The first cause wins. Reading
    /// it is one atomic load.
    poison: OnceLock<Poison>,
    /// Set once the ring thread has published its last advance: a wait
    /// not decided by then never will be (its LSN was never handed out).
    ring_gone: AtomicBool,
    lists: Mutex<Lists>,
    /// Threads inside a blocking wait that may spin ([`Acks::block`]).
    blocked: AtomicU64,
}

impl Acks {
    pub fn new(start: Lsn) -> Acks {
        Acks {
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            poison: OnceLock::new(),
            ring_gone: AtomicBool::new(false),
            lists: Mutex::new(Lists::default()),
            blocked: AtomicU64::new(0),
        }
    }

    pub fn written(&self) -> Lsn {
        self.written.load(Ordering::Acquire)
    }

    pub fn durable(&self) -> Lsn {
        self.durable.load(Ordering::Acquire)
    }

    fn lists(&self) -> std::sync::MutexGuard<'_, Lists> {
        // Critical sections only move map entries; a panic inside one
        // cannot leave the map half-updated in a way that matters.
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the log is poisoned, if it is. Cost: one atomic load.
    pub fn poison_cause(&self) -> Option<&Poison> {
        self.poison.get()
    }

    /// Whether the log is poisoned. Cost: one atomic load.
    pub fn is_poisoned(&self) -> bool {
        self.poison.get().is_some()
    }

    /// Whether the watermark for `level` covers `lsn` (always, for
    /// `Accepted`: a ticket exists only once its record is sequenced).
    fn reached(&self, lsn: Lsn, level: Level) -> bool {
        match level {
            Level::Accepted => true,
            Level::Written => self.written() >= lsn,
            Level::Durable => self.durable() >= lsn,
        }
    }

    /// Count the calling thread as blocked in a wait of this log until
    /// the guard drops, so that a spinning waiter knows it is not alone
    /// (only a counted thread can spin: [`Blocked::spin_alone`]).
    /// Cost: one atomic add now and one subtraction at the drop, on a
    /// line every waiter shares.
    pub fn block(&self) -> Blocked<'_> {
        self.blocked.fetch_add(1, Ordering::SeqCst);
        Blocked(self)
    }

    /// Threads blocked in a wait of this log now ([`Acks::block`]). Cost:
    /// one atomic load.
    pub fn blocked_waiters(&self) -> u64 {
        self.blocked.load(Ordering::SeqCst)
    }

    /// The result of waiting for `lsn` at `level`, if already decided:
    /// reached, else the poison, else `Closed` once the ring is gone.
    pub fn check(&self, lsn: Lsn, level: Level) -> Option<Result<(), Error>> {
        if self.reached(lsn, level) {
            return Some(Ok(()));
        }
        if let Some(p) = self.poison_cause() {
            return Some(Err(p.error()));
        }
        if self.ring_gone.load(Ordering::SeqCst) {
            return Some(Err(Error::Closed));
        }
        None
    }

    /// The result of `waiter`'s wait if it is decided (its entry, if any,
    /// removed); otherwise `None`, with `by` in its one entry: inserted on
    /// the first pending poll, replaced only when the entry would not wake
    /// what `by` wakes, left alone otherwise.
    ///
    /// Decided again under the lock, so an advance cannot slip between the
    /// caller's check and the registration. Cost: two atomic loads when
    /// decided; otherwise one lock and one map
    /// lookup, plus one clone of the wake when it is new or changed (a
    /// map insert may allocate a B-tree node).
    pub fn poll(&self, waiter: &mut Waiter, by: WakeBy<'_>) -> Option<Result<(), Error>> {
        let (lsn, level) = (waiter.lsn, waiter.level);
        if let Some(done) = self.check(lsn, level) {
            // Whatever decided the wait (an advance, the poison, the close)
            // changed the atomics first and then takes every entry it
            // decides off the lists, this one included: nothing to remove.
            waiter.seq = None;
            return Some(done);
        }
        let mut l = self.lists();
        // Read under the lock: `poison` sets the cause before it takes the
        // lock to drain the lists, so either it sees this waiter or this
        // waiter sees the cause.
        if let Some(done) = self.check(lsn, level) {
            if let Some(seq) = waiter.seq.take() {
                l.of(level).remove(&(lsn, seq));
            }
            return Some(done);
        }
        if let Some(wake) = waiter.seq.and_then(|seq| l.of(level).get_mut(&(lsn, seq))) {
            if !wake.will_wake(&by) {
                *wake = by.to_owned();
            }
            return None;
        }
        // First registration (or an entry taken without deciding the
        // wait, which nothing does today; re-registering is always safe).
        l.seq += 1;
        let seq = l.seq;
        let earlier = l.of(level).insert((lsn, seq), by.to_owned());
        debug_assert!(earlier.is_none(), "each registration has its own sequence");
        waiter.seq = Some(seq);
        None
    }

    /// `waiter` stops waiting: remove its entry, if it has one. Cost:
    /// nothing if it never registered (or its wait was decided by a poll);
    /// otherwise one lock and one map removal.
    pub fn forget(&self, waiter: &mut Waiter) {
        if let Some(seq) = waiter.seq.take() {
            self.lists().of(waiter.level).remove(&(waiter.lsn, seq));
        }
    }

    /// How many waiters are registered (both lists).
    #[cfg(test)]
    pub fn waiters(&self) -> usize {
        let l = self.lists();
        l.written.len() + l.durable.len()
    }

    /// Advance the watermarks (never backwards) and wake the tasks they
    /// cover; the threads they cover are returned, their words set, for
    /// the caller to wake (the ring does it in one submission).
    pub fn advance(&self, written: Lsn, durable: Lsn) -> Parked {
        debug_assert!(
            durable <= written,
            "durable {durable} published ahead of written {written}"
        );
        let w_old = self.written.fetch_max(written, Ordering::AcqRel);
        let d_old = self.durable.fetch_max(durable, Ordering::AcqRel);
        // The one publisher advances in ledger order: a lower value here
        // would be a watermark going back, which `fetch_max` would hide.
        debug_assert!(
            written >= w_old && durable >= d_old,
            "watermarks published backwards: written {w_old} -> {written}, durable {d_old} -> {durable}"
        );
        if written <= w_old && durable <= d_old {
            return Parked(Vec::new());
        }
        let mut l = self.lists();
        let wake_w = split_covered(&mut l.written, written);
        let wake_d = split_covered(&mut l.durable, durable);
        drop(l);
        let mut threads = Vec::new();
        let tasks = wake_w
            .into_values()
            .chain(wake_d.into_values())
            .filter_map(|w| match w {
                Wake::Thread(word) => {
                    word.set();
                    threads.push(word);
                    None
                }
                task => Some(task),
            });
        if let Err(panic) = wake_all(tasks) {
            // The threads are woken too before the panic goes on.
            Parked(threads).wake_now();
            std::panic::resume_unwind(panic);
        }
        Parked(threads)
    }

    /// Poison: every current and future waiter fails with `cause`.
    pub fn poison(&self, cause: Poison) {
        // First cause wins; a later one changes nothing but wakes again.
        let _ = self.poison.set(cause);
        // Already failing: a waker that panics changes nothing more.
        let _ = wake_all(self.take_all());
    }
}

impl Acks {
    /// The ring thread is done: every advance it will ever make is
    /// published. Waits still undecided (for LSNs never handed out, since
    /// a close drains every record) fail with `Closed`, now and later.
    /// Same protocol as `poison`: the flag first, then the lists drained
    /// under the lock, so no registration slips between.
    pub fn close(&self) {
        self.ring_gone.store(true, Ordering::SeqCst);
        // The ring thread is exiting; a waker's panic changes nothing.
        let _ = wake_all(self.take_all());
    }

    /// Every registered wait, off both lists, taken under the lock (after
    /// the flag that decides them was set, so none registers behind it).
    fn take_all(&self) -> Vec<Wake> {
        let mut l = self.lists();
        std::mem::take(&mut l.written)
            .into_values()
            .chain(std::mem::take(&mut l.durable).into_values())
            .collect()
    }
}

/// Remove and return every entry with an LSN at or below `upto`.
fn split_covered(map: &mut BTreeMap<(Lsn, u64), Wake>, upto: Lsn) -> BTreeMap<(Lsn, u64), Wake> {
    match map.first_key_value() {
        Some((&(first, _), _)) if first <= upto => {
            let rest = map.split_off(&(upto + 1, 0));
            debug_assert!(
                rest.first_key_value().is_none_or(|(&(l, _), _)| l > upto),
                "every waiter an advance covers is woken"
            );
            std::mem::replace(map, rest)
        }
        _ => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(e: Option<Result<(), Error>>) -> String {
        match e {
            Some(Err(Error::Poisoned { cause })) => cause.to_string(),
            other => panic!("expected the poison, got {other:?}"),
        }
    }

    #[test]
    fn poison_fails_every_waiter_now_and_later_with_the_first_cause() {
        let acks = Acks::new(3);
        let me = Arc::new(WakeWord::default());
        let mut w5 = Waiter::new(5, Level::Written);
        let mut w6 = Waiter::new(6, Level::Durable);
        assert!(acks.poll(&mut w5, WakeBy::Thread(&me)).is_none());
        assert!(acks.poll(&mut w6, WakeBy::Thread(&me)).is_none());
        assert_eq!(acks.waiters(), 2);
        acks.poison(Poison::failed("first"));
        acks.poison(Poison::failed("second"));
        assert!(acks.is_poisoned());
        assert_eq!(acks.waiters(), 0, "all woken");
        assert_eq!(cause(acks.check(5, Level::Written)), "first");
        assert_eq!(cause(acks.poll(&mut w5, WakeBy::Thread(&me))), "first");
        let mut w7 = Waiter::new(7, Level::Durable);
        assert_eq!(cause(acks.poll(&mut w7, WakeBy::Thread(&me))), "first");
        assert_eq!(acks.waiters(), 0, "a decided wait never registers");
        // What was acknowledged before the poison stays acknowledged.
        assert!(matches!(acks.check(3, Level::Durable), Some(Ok(()))));
    }

    #[test]
    fn a_waiter_keeps_one_entry_and_forgetting_removes_it() {
        let acks = Acks::new(0);
        let me = Arc::new(WakeWord::default());
        let mut w = Waiter::new(4, Level::Durable);
        for _ in 0..100 {
            assert!(acks.poll(&mut w, WakeBy::Thread(&me)).is_none());
        }
        assert_eq!(acks.waiters(), 1);
        acks.forget(&mut w);
        assert_eq!(acks.waiters(), 0);
        // Polled again after being forgotten, it registers once more.
        assert!(acks.poll(&mut w, WakeBy::Thread(&me)).is_none());
        assert_eq!(acks.waiters(), 1);
        // Decided by an advance: the entry is gone, and the poll says so.
        acks.advance(4, 4).wake_now();
        assert_eq!(acks.waiters(), 0);
        assert!(matches!(
            acks.poll(&mut w, WakeBy::Thread(&me)),
            Some(Ok(()))
        ));
        acks.forget(&mut w);
        assert_eq!(acks.waiters(), 0);
    }

    #[test]
    fn close_fails_undecided_waits_and_keeps_what_was_reached() {
        let acks = Acks::new(0);
        let me = Arc::new(WakeWord::default());
        acks.advance(3, 2).wake_now();
        let mut w = Waiter::new(10, Level::Written);
        assert!(acks.poll(&mut w, WakeBy::Thread(&me)).is_none());
        acks.close();
        assert_eq!(acks.waiters(), 0);
        assert!(matches!(
            acks.poll(&mut w, WakeBy::Thread(&me)),
            Some(Err(Error::Closed))
        ));
        assert!(matches!(acks.check(3, Level::Written), Some(Ok(()))));
        assert!(matches!(
            acks.check(3, Level::Durable),
            Some(Err(Error::Closed))
        ));
        // The poison, when there is one, says more than `Closed`.
        acks.poison(Poison::failed("late"));
        assert_eq!(cause(acks.check(10, Level::Written)), "late");
    }

    #[test]
    fn a_lone_spinner_sees_the_advance_and_the_poison_and_yields_to_a_second_waiter() {
        // Budgets far longer than the test: a spin that ignored what it
        // watches would hold the test for the whole of it.
        let long = Duration::from_secs(60);
        let acks = Acks::new(0);
        std::thread::scope(|s| {
            let me = acks.block();
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                acks.advance(2, 2).wake_now();
            });
            assert!(matches!(
                me.spin_alone(2, Level::Durable, long),
                Some(Ok(()))
            ));
            drop(me);
        });
        // A second blocked waiter ends the spin undecided: park then.
        let (me, other) = (acks.block(), acks.block());
        let began = Instant::now();
        assert!(me.spin_alone(3, Level::Durable, long).is_none());
        assert!(
            began.elapsed() < long,
            "the spin stopped for the other waiter"
        );
        drop((me, other));
        // Out of budget, undecided.
        let me = acks.block();
        assert!(me
            .spin_alone(3, Level::Durable, Duration::from_micros(50))
            .is_none());
        // The poison decides a spinning wait.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                acks.poison(Poison::failed("device gone"));
            });
            assert_eq!(cause(me.spin_alone(3, Level::Durable, long)), "device gone");
        });
        drop(me);
        assert_eq!(
            acks.blocked.load(Ordering::SeqCst),
            0,
            "every guard counted off"
        );
    }
}
