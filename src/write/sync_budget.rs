//! The written-mode sync budget: how many bytes are on the device but not
//! yet synced, so that a power loss can tear no more than the torn window
//! that recovery is allowed to cut (ARCHITECTURE invariant 5).
//!
//! In durable mode every write is its own sync (`Dsync`,
//! `WriteThenFdatasync`); the budget then only counts bytes in flight and
//! never asks for a sync. With `SyncMethod::Grouped` the writes are plain,
//! as in written mode, and everything written is wanted durable at once:
//! the budget asks for a sync whenever one would make anything durable
//! and none is in flight.

use std::time::{Duration, Instant};

use crate::config::{Config, SyncMethod};
use crate::error::Lsn;

/// What the ring knows when it asks whether to sync.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Demand {
    /// The written watermark.
    pub written: Lsn,
    /// The highest LSN a waiter wants durable.
    pub wanted: Lsn,
    /// Batch writes in flight.
    pub writes: usize,
    /// The log is closing and nothing is left to write.
    pub closing_drained: bool,
    /// The active segment has writes that no issued sync covers.
    pub dirty: bool,
}

/// Bytes written since the last completed sync, and the sync in flight.
pub(crate) struct SyncBudget {
    /// Every write is durable by itself: a sync is never needed.
    durable: bool,
    /// Durable mode with grouped syncs: everything written is wanted
    /// durable without a waiter asking.
    eager: bool,
    /// Background sync interval (written mode).
    interval: Option<Duration>,
    /// The most one more write adds (one staging buffer), and the window
    /// the unsynced bytes must stay under.
    write_bytes: u64,
    torn_window: u64,
    /// Written mode: bytes written since the last completed sync, bytes
    /// still in flight, and the bytes the sync in flight will cover.
    unsynced: u64,
    inflight_bytes: u64,
    syncing: u64,
    /// Whether a sync is in flight, the LSN the last one issued covers,
    /// and when it was issued (the sync interval counts from there).
    in_flight: bool,
    covers: Lsn,
    last_sync: Instant,
}

impl SyncBudget {
    /// Nothing unsynced; everything up to `last` counts as covered.
    /// `method` is the one in use (as resolved for the file system).
    pub fn new(cfg: &Config, method: SyncMethod, last: Lsn) -> SyncBudget {
        let alone = cfg.write_is_durable_alone(method);
        assert!(
            cfg.buffer_bytes() as u64 <= cfg.torn_window(),
            "one write fits the torn window, or over_budget never clears"
        );
        SyncBudget {
            durable: alone,
            eager: cfg.durable && !alone,
            interval: cfg.sync_interval,
            write_bytes: cfg.buffer_bytes() as u64,
            torn_window: cfg.torn_window(),
            unsynced: 0,
            inflight_bytes: 0,
            syncing: 0,
            in_flight: false,
            covers: last,
            last_sync: Instant::now(),
        }
    }

    /// A batch write of `len` bytes was submitted.
    pub fn wrote(&mut self, len: usize) {
        if !self.durable {
            self.unsynced += len as u64;
        }
        self.inflight_bytes += len as u64;
        assert!(
            len as u64 <= self.write_bytes,
            "a write is at most one staging buffer"
        );
    }

    /// A batch write of `len` bytes completed (or failed).
    pub fn write_done(&mut self, len: usize) {
        self.inflight_bytes = self
            .inflight_bytes
            .checked_sub(len as u64)
            .expect("a write completed that was never counted in flight");
    }

    /// A sync covering every LSN up to `covers` was issued: it will make
    /// durable the bytes whose writes completed, not those still in
    /// flight. The one place a sync is accounted; `Ring::issue_sync`, the
    /// one place one is issued, calls it.
    pub fn issued(&mut self, covers: Lsn) {
        assert!(
            !self.in_flight,
            "a second sync issued while one is in flight"
        );
        assert!(
            covers >= self.covers,
            "a sync never covers less than the one before it"
        );
        self.in_flight = true;
        self.syncing = self
            .unsynced
            .checked_sub(self.inflight_bytes)
            .expect("more bytes in flight than written since the last sync");
        self.covers = covers;
        self.last_sync = Instant::now();
    }

    /// The sync in flight completed; only a successful one frees budget.
    pub fn sync_done(&mut self, ok: bool) {
        self.in_flight = false;
        if ok {
            self.unsynced = self
                .unsynced
                .checked_sub(self.syncing)
                .expect("a sync covered more bytes than were unsynced");
        }
        self.syncing = 0;
    }

    /// Written mode: one more full write would put more unsynced bytes on
    /// the device than the torn window; wait for a sync first.
    pub fn over_budget(&self) -> bool {
        !self.durable && self.unsynced + self.write_bytes > self.torn_window
    }

    /// Bytes whose writes completed that no sync, issued or done, covers
    /// yet: what a sync issued now would make durable beyond the
    /// watermark's LSNs.
    pub fn completed_unsynced(&self) -> u64 {
        assert!(
            self.inflight_bytes + self.syncing <= self.unsynced,
            "bytes in flight and being synced are part of the unsynced ones"
        );
        self.unsynced - self.inflight_bytes - self.syncing
    }

    /// Whether a sync issued now would make anything durable: LSNs the
    /// written watermark has passed since the last sync, or bytes that
    /// completed behind an operation still pending (they count against
    /// the torn window). While the front operation was stuck, the interval
    /// used to fire one fdatasync after another that covered nothing new.
    pub fn useful(&self, written: Lsn) -> bool {
        written > self.covers || self.completed_unsynced() > 0
    }

    /// In written mode, the LSN a sync should be issued for now, if any: a
    /// waiter wants durability (or the interval elapsed, or the log is
    /// closing, or the torn window is full) beyond what the last sync
    /// covered, a sync would serve something, and the written data can
    /// serve it now. The ring's idle check and its sync decision share
    /// this one predicate, so "there is sync work" and "a sync gets
    /// issued" never disagree.
    pub fn target(&self, d: Demand) -> Option<Lsn> {
        if self.durable || self.in_flight || !d.dirty || !self.useful(d.written) {
            return None;
        }
        let due = self
            .interval
            .is_some_and(|every| self.since_sync() >= every)
            || d.closing_drained
            || self.over_budget();
        let mut want = d.wanted;
        if due || self.eager {
            want = want.max(d.written.max(self.covers + 1));
        }
        if want <= self.covers {
            return None;
        }
        // The write holding `want` is in flight: sync once it lands, so one
        // sync serves it instead of two.
        if d.written < want && d.writes > 0 {
            return None;
        }
        Some(want)
    }

    /// How long the idle ring may sleep before the interval's next sync
    /// is due; `None`: until a completion or a producer wakes it. Only a
    /// sync that would be useful then gets a timer. Otherwise a completion
    /// is what can make one useful or possible (a sync or write in flight,
    /// a stuck front operation), and it wakes the ring by itself: a timer
    /// meanwhile only spun the thread, 100 µs at a time.
    pub fn wake_after(&self, d: Demand) -> Option<Duration> {
        let every = self.interval?;
        if self.durable || !d.dirty || self.in_flight || !self.useful(d.written) {
            return None;
        }
        match every.checked_sub(self.since_sync()) {
            Some(left) if !left.is_zero() => Some(left),
            // Due already (the deadline passed since the ring last
            // looked): come round at once, unless a write in flight holds
            // the sync back, whose completion wakes the ring anyway.
            _ => self.target(d).map(|_| Duration::ZERO),
        }
    }

    /// Time since the last sync was issued.
    fn since_sync(&self) -> Duration {
        self.last_sync.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written_mode() -> SyncBudget {
        every(None)
    }

    fn every(interval: Option<Duration>) -> SyncBudget {
        let cfg = Config::builder()
            .durability(crate::config::Durability::Deferred {
                sync_interval: interval,
            })
            .build();
        SyncBudget::new(&cfg, cfg.sync_method(), 0)
    }

    /// Durable mode: per-write methods never ask for a sync; `Grouped`
    /// asks for one as soon as anything written is not covered, one at a
    /// time, each covering everything written when it is issued, and
    /// holds a sync back while the write it would serve is in flight.
    #[test]
    fn grouped_syncs_everything_written_one_sync_at_a_time() {
        let dsync = SyncBudget::new(&Config::default(), SyncMethod::Dsync, 0);
        let written = Demand {
            written: 5,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(dsync.target(written), None);
        assert!(!dsync.over_budget());

        let mut g = SyncBudget::new(&Config::default(), SyncMethod::Grouped, 0);
        g.wrote(4096);
        let in_flight = Demand {
            written: 0,
            writes: 1,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(g.target(in_flight), None, "nothing completed yet");
        g.write_done(4096);
        assert_eq!(g.target(written), Some(5), "no waiter needs to ask");
        g.issued(5);
        g.wrote(4096);
        g.write_done(4096);
        let more = Demand {
            written: 9,
            ..written
        };
        assert_eq!(g.target(more), None, "one sync at a time");
        g.sync_done(true);
        assert_eq!(g.target(more), Some(9));
        g.issued(9);
        g.sync_done(true);
        let clean = Demand {
            written: 9,
            dirty: false,
            ..Demand::default()
        };
        assert_eq!(g.target(clean), None, "everything is covered");
    }

    /// A front operation (a segment install, say) that never completes:
    /// three writes behind it completed, so the written watermark stays at
    /// 0. One sync makes their bytes durable; after it, however often the
    /// interval elapses, no sync is issued, and the idle ring sleeps.
    #[test]
    fn a_stuck_front_operation_gets_one_sync_not_one_per_interval() {
        let mut b = every(Some(Duration::ZERO));
        for _ in 0..3 {
            b.wrote(4096);
            b.write_done(4096);
        }
        let stuck = Demand {
            written: 0,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(b.target(stuck), Some(1));
        b.issued(0);
        assert_eq!(b.target(stuck), None, "one sync at a time");
        assert_eq!(
            b.wake_after(stuck),
            None,
            "the sync's completion wakes the ring"
        );
        b.sync_done(true);
        for _ in 0..100 {
            assert_eq!(b.target(stuck), None, "a sync that would cover nothing");
            assert_eq!(b.wake_after(stuck), None, "a timer that would spin");
        }
        // Once the front operation completes the watermark moves: a sync
        // is useful again.
        let moved = Demand {
            written: 3,
            ..stuck
        };
        assert_eq!(b.target(moved), Some(3));
    }

    #[test]
    fn the_interval_sets_the_timer_only_for_a_useful_sync() {
        let mut b = every(Some(Duration::from_secs(3600)));
        let d = Demand {
            written: 5,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(b.target(d), None, "not due yet");
        let left = b.wake_after(d).expect("a timer for the next interval");
        assert!(left > Duration::from_secs(3500) && left <= Duration::from_secs(3600));
        // A waiter wanting durability is served at once.
        assert_eq!(b.target(Demand { wanted: 5, ..d }), Some(5));
        b.issued(5);
        b.sync_done(true);
        assert_eq!(b.wake_after(d), None, "everything written is covered");
        assert_eq!(every(None).wake_after(d), None, "no interval, no timer");
    }

    /// The interval can run out between the ring's sync decision and its
    /// sleep: it must come round for the sync then, not sleep until a
    /// producer happens to wake it.
    #[test]
    fn an_interval_that_ran_out_wakes_the_ring_at_once() {
        let mut b = every(Some(Duration::ZERO));
        b.wrote(4096);
        b.write_done(4096);
        let d = Demand {
            written: 1,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(b.wake_after(d), Some(Duration::ZERO));
        // With the write still in flight, its completion wakes the ring.
        let mut b = every(Some(Duration::ZERO));
        b.wrote(4096);
        let d = Demand {
            written: 0,
            writes: 1,
            dirty: true,
            ..Demand::default()
        };
        assert_eq!(b.wake_after(d), None);
    }

    #[test]
    fn a_sync_frees_only_the_bytes_whose_writes_had_completed() {
        let mut b = written_mode();
        b.wrote(4096);
        b.wrote(8192);
        b.write_done(4096);
        b.issued(1);
        b.write_done(8192);
        b.sync_done(true);
        // The second write was in flight at the sync: still unsynced.
        assert_eq!(b.unsynced, 8192);
        assert!(!b.in_flight);
    }

    #[test]
    fn a_failed_sync_frees_nothing() {
        let mut b = written_mode();
        b.wrote(4096);
        b.write_done(4096);
        b.issued(1);
        b.sync_done(false);
        assert_eq!(b.unsynced, 4096);
    }

    #[test]
    fn the_budget_fills_up_to_the_torn_window() {
        let mut b = written_mode();
        while !b.over_budget() {
            b.wrote(b.write_bytes as usize);
        }
        assert!(b.unsynced <= b.torn_window);
        assert!(b.unsynced + b.write_bytes > b.torn_window);
    }

    #[test]
    #[should_panic(expected = "while one is in flight")]
    fn one_sync_at_a_time() {
        let mut b = written_mode();
        b.issued(0);
        b.issued(0);
    }
}
