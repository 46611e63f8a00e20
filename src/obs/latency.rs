//! Write and sync latencies as the ring thread measures them, for
//! [`Stats`](crate::Stats): how long each operation took from submission
//! to completion, in an HDR histogram (hdrhistogram crate, 3 significant
//! digits) per kind, since the log was opened.
//!
//! Architecture invariant: the ring thread is the only writer, and it
//! never waits here for a reader: a `Stats` call holds the lock only to
//! copy four quantiles out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latency quantiles of one kind of operation since the log was opened.
/// All zero before the first one completes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencySummary {
    /// Operations measured.
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// The slowest.
    pub max: Duration,
}

/// One histogram of microseconds, 1 us to 10 minutes at 3 significant
/// digits: about 40 KiB each.
pub(crate) struct Latencies {
    hist: Mutex<Histogram<u64>>,
}

impl Default for Latencies {
    fn default() -> Latencies {
        let hist = Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds");
        Latencies {
            hist: Mutex::new(hist),
        }
    }
}

impl Latencies {
    /// Record an operation that took `took` (from its submission to its
    /// completion). Cost: an uncontended lock and a bucket increment, on
    /// the ring thread.
    pub fn record(&self, took: Duration) {
        let us = took.as_micros().clamp(1, 600_000_000) as u64;
        let mut h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        // In bounds by the clamp above.
        let _ = h.record(us);
    }

    /// The quantiles so far. Cost: one lock and four quantile walks.
    pub fn summary(&self) -> LatencySummary {
        let h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_empty() {
            return LatencySummary::default();
        }
        let at = |q: f64| Duration::from_micros(h.value_at_quantile(q));
        let s = LatencySummary {
            count: h.len(),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: Duration::from_micros(h.max()),
        };
        assert!(
            s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max,
            "quantiles of one histogram are ordered"
        );
        s
    }
}

/// When each operation in flight was submitted, by ledger id. A map, not
/// a ring of slots: operations complete out of order, and a slow one may
/// be passed by any number of later ones. Sized once for the queue's
/// depth, so it does not allocate in the steady state.
pub(crate) struct Started {
    at: HashMap<u64, Instant>,
}

impl Started {
    /// Room for `depth` operations in flight.
    pub fn new(depth: usize) -> Started {
        Started {
            at: HashMap::with_capacity(depth),
        }
    }

    /// Operation `id` is submitted now.
    pub fn begin(&mut self, id: u64) {
        let fresh = self.at.insert(id, Instant::now()).is_none();
        assert!(fresh, "ledger id {id} submitted twice");
    }

    /// Operation `id` completed: when it was submitted.
    pub fn end(&mut self, id: u64) -> Option<Instant> {
        self.at.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_what_was_recorded() {
        let l = Latencies::default();
        assert_eq!(l.summary(), LatencySummary::default());
        for _ in 0..10 {
            l.record(Duration::from_millis(2));
        }
        let s = l.summary();
        assert_eq!(s.count, 10);
        assert!(
            s.p50 >= Duration::from_millis(2) && s.p50 < Duration::from_millis(3),
            "{s:?}"
        );
        assert!(s.max >= s.p999 && s.p999 >= s.p99 && s.p99 >= s.p50);
    }

    #[test]
    fn slots_hand_back_their_start_once() {
        let mut s = Started::new(4);
        s.begin(7);
        s.begin(8);
        assert!(s.end(8).is_some());
        // 7 is passed by many later operations and still measured.
        for id in 9..100 {
            s.begin(id);
            assert!(s.end(id).is_some());
        }
        assert!(s.end(7).is_some());
        assert!(s.end(7).is_none());
    }
}
