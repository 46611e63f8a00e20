//! Acknowledgement watermarks and the waiters parked on them.
//!
//! The ring thread is the only writer of the watermarks; producers read
//! them lock-free and park only when their LSN is not yet covered. A
//! waiter is registered under its LSN, and an advance wakes exactly the
//! waiters it covers (no thundering herd), in LSN order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::Waker;
use std::thread::Thread;

use crate::config::Level;
use crate::error::{Error, Lsn, Poison};

/// How to wake one waiter.
pub(crate) enum Wake {
    Thread(Thread),
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
    }
}

#[derive(Default)]
struct Lists {
    /// Keyed by (lsn, registration number) so equal LSNs coexist.
    written: BTreeMap<(Lsn, u64), Wake>,
    durable: BTreeMap<(Lsn, u64), Wake>,
    seq: u64,
}

/// Watermarks plus waiters. See the module docs.
pub(crate) struct Acks {
    written: AtomicU64,
    durable: AtomicU64,
    /// The log's one poison: the ring sets it, the reservation refuses
    /// appends by it, waiters fail with it. The first cause wins. Reading
    /// it is one atomic load.
    poison: OnceLock<Poison>,
    lists: Mutex<Lists>,
}

impl Acks {
    pub fn new(start: Lsn) -> Acks {
        Acks {
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            poison: OnceLock::new(),
            lists: Mutex::new(Lists::default()),
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

    /// The result of waiting for `lsn` at `level`, if already decided.
    pub fn check(&self, lsn: Lsn, level: Level) -> Option<Result<(), Error>> {
        if self.reached(lsn, level) {
            return Some(Ok(()));
        }
        self.poison_cause().map(|p| Err(p.error()))
    }

    /// Register `wake` for `lsn` at `level` unless it is already decided
    /// (checked again under the lock, so an advance cannot slip between
    /// the caller's check and the registration).
    pub fn register(&self, lsn: Lsn, level: Level, wake: Wake) -> Option<Result<(), Error>> {
        let mut l = self.lists();
        if self.reached(lsn, level) {
            return Some(Ok(()));
        }
        // Read under the lock: `poison` sets the cause before it takes the
        // lock to drain the lists, so either it sees this waiter or this
        // waiter sees the cause.
        if let Some(p) = self.poison_cause() {
            return Some(Err(p.error()));
        }
        l.seq += 1;
        let key = (lsn, l.seq);
        match level {
            Level::Durable => l.durable.insert(key, wake),
            _ => l.written.insert(key, wake),
        };
        None
    }

    /// Advance the watermarks (never backwards) and wake who they cover.
    pub fn advance(&self, written: Lsn, durable: Lsn) {
        let w_old = self.written.fetch_max(written, Ordering::AcqRel);
        let d_old = self.durable.fetch_max(durable, Ordering::AcqRel);
        if written <= w_old && durable <= d_old {
            return;
        }
        let mut l = self.lists();
        let wake_w = split_covered(&mut l.written, written);
        let wake_d = split_covered(&mut l.durable, durable);
        drop(l);
        if let Err(panic) = wake_all(wake_w.into_values().chain(wake_d.into_values())) {
            std::panic::resume_unwind(panic);
        }
    }

    /// Poison: every current and future waiter fails with `cause`.
    pub fn poison(&self, cause: Poison) {
        // First cause wins; a later one changes nothing but wakes again.
        let _ = self.poison.set(cause);
        let mut l = self.lists();
        let all: Vec<Wake> = std::mem::take(&mut l.written)
            .into_values()
            .chain(std::mem::take(&mut l.durable).into_values())
            .collect();
        drop(l);
        // Already failing: a waker that panics changes nothing more.
        let _ = wake_all(all);
    }
}

/// Wake every one of `wakes`, even if a waker panics (a task polled
/// inline by a waker may panic on the ring thread): the others were
/// already taken off the lists and would never be woken again. Returns
/// the first panic, for the caller to resume once all are woken.
fn wake_all(wakes: impl IntoIterator<Item = Wake>) -> Result<(), Box<dyn std::any::Any + Send>> {
    let mut first = None;
    for w in wakes {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake())) {
            first.get_or_insert(p);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Remove and return every entry with an LSN at or below `upto`.
fn split_covered(map: &mut BTreeMap<(Lsn, u64), Wake>, upto: Lsn) -> BTreeMap<(Lsn, u64), Wake> {
    match map.first_key_value() {
        Some((&(first, _), _)) if first <= upto => {
            let rest = map.split_off(&(upto + 1, 0));
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
            Some(Err(Error::Poisoned { cause })) => cause,
            other => panic!("expected the poison, got {other:?}"),
        }
    }

    #[test]
    fn poison_fails_every_waiter_now_and_later_with_the_first_cause() {
        let acks = Acks::new(3);
        let me = || Wake::Thread(std::thread::current());
        assert!(acks.register(5, Level::Written, me()).is_none());
        assert!(acks.register(6, Level::Durable, me()).is_none());
        acks.poison(Poison::Failed("first".into()));
        acks.poison(Poison::Failed("second".into()));
        assert!(acks.is_poisoned());
        {
            let l = acks.lists();
            assert!(l.written.is_empty() && l.durable.is_empty(), "all woken");
        }
        assert_eq!(cause(acks.check(5, Level::Written)), "first");
        assert_eq!(cause(acks.register(7, Level::Durable, me())), "first");
        // What was acknowledged before the poison stays acknowledged.
        assert!(matches!(acks.check(3, Level::Durable), Some(Ok(()))));
    }
}
