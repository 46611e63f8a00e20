//! The written-mode sync budget: how many bytes are on the device but not
//! yet synced, so that a power loss can tear no more than the torn window
//! that recovery is allowed to cut (ARCHITECTURE invariant 5).
//!
//! In durable mode every write is its own sync; the budget then only
//! counts bytes in flight and never asks for a sync.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::Lsn;

/// Bytes written since the last completed sync, and the sync in flight.
pub(crate) struct SyncBudget {
    durable: bool,
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
    pub fn new(cfg: &Config, last: Lsn) -> SyncBudget {
        SyncBudget {
            durable: cfg.durable,
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

    /// Whether a sync is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The LSN the last sync issued covers.
    pub fn covers(&self) -> Lsn {
        self.covers
    }

    /// Time since the last sync was issued.
    pub fn since_sync(&self) -> Duration {
        self.last_sync.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written_mode() -> SyncBudget {
        let cfg = Config::builder()
            .default_level(crate::config::Level::Written)
            .build();
        SyncBudget::new(&cfg, 0)
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
        assert!(!b.in_flight());
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
