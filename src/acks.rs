//! Acknowledgement watermarks and the waiters parked on them.
//!
//! The ring thread is the only writer of the watermarks; producers read
//! them lock-free and park only when their LSN is not yet covered. A
//! waiter is registered under its LSN, and an advance wakes exactly the
//! waiters it covers (no thundering herd), in LSN order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
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
    poison: Option<Poison>,
}

/// Watermarks plus waiters. See the module docs.
pub(crate) struct Acks {
    written: AtomicU64,
    durable: AtomicU64,
    poisoned: AtomicBool,
    lists: Mutex<Lists>,
}

impl Acks {
    pub fn new(start: Lsn) -> Acks {
        Acks {
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            poisoned: AtomicBool::new(false),
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

    pub fn poison_cause(&self) -> Option<Poison> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        self.lists().poison.clone()
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
        // Only the watermarks here: `check` would read the poison through
        // this same (non-reentrant) lock.
        if self.reached(lsn, level) {
            return Some(Ok(()));
        }
        if let Some(p) = &l.poison {
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
        for w in wake_w.into_values().chain(wake_d.into_values()) {
            w.wake();
        }
    }

    /// Poison: every current and future waiter fails with `cause`.
    pub fn poison(&self, cause: Poison) {
        let mut l = self.lists();
        if l.poison.is_none() {
            l.poison = Some(cause);
        }
        self.poisoned.store(true, Ordering::Release);
        let all: Vec<Wake> = std::mem::take(&mut l.written)
            .into_values()
            .chain(std::mem::take(&mut l.durable).into_values())
            .collect();
        drop(l);
        for w in all {
            w.wake();
        }
    }
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
