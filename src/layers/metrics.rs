//! `Stats` through the `metrics` facade (feature `metrics`), for whatever
//! recorder the application installed (Prometheus, StatsD, ...).
//!
//! Architecture invariant: nothing here runs on the write path. The
//! application decides when to publish (its scrape or report interval);
//! the ring thread never calls into a recorder.

use metrics::{counter, gauge};

use crate::obs::latency::LatencySummary;
use crate::wal::{Stats, Wal};

impl Wal {
    /// Publish [`stats`](Self::stats) through the `metrics` facade, labelled
    /// with this log's node: watermarks, segments, bytes on disk, writes
    /// in flight and `poisoned` as gauges; writes, bytes, syncs, rolls and
    /// backpressure waits as counters (set to their totals); write and
    /// sync latency quantiles (`quantile` label: 0.5, 0.99, 0.999, 1) as
    /// gauges in seconds. Names start with `ringwal_`.
    ///
    /// Cost: one `stats()` call and a few dozen recorder updates. Call it
    /// on the application's reporting interval.
    ///
    /// Needs the `metrics` feature.
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn publish_metrics(&self) {
        let node = self.config().node().to_string();
        publish(&self.stats(), &node);
    }
}

fn publish(s: &Stats, node: &str) {
    let n = ("node", node.to_string());
    let gauges = [
        ("ringwal_next_lsn", s.next_lsn as f64),
        ("ringwal_written_lsn", s.written_lsn as f64),
        ("ringwal_durable_lsn", s.durable_lsn as f64),
        ("ringwal_oldest_lsn", s.oldest_lsn as f64),
        ("ringwal_segments", s.segments as f64),
        ("ringwal_disk_bytes", s.disk_bytes as f64),
        ("ringwal_writes_in_flight", s.writes_in_flight as f64),
        ("ringwal_index_points", s.index_points as f64),
        ("ringwal_poisoned", f64::from(u8::from(s.poisoned))),
    ];
    for (name, value) in gauges {
        gauge!(name, std::slice::from_ref(&n)).set(value);
    }
    let counters = [
        ("ringwal_writes_total", s.writes),
        ("ringwal_write_bytes_total", s.write_bytes),
        ("ringwal_syncs_total", s.syncs),
        ("ringwal_rolls_total", s.rolls),
        ("ringwal_backpressure_waits_total", s.backpressure_waits),
    ];
    for (name, value) in counters {
        counter!(name, std::slice::from_ref(&n)).absolute(value);
    }
    latency("ringwal_write_latency_seconds", &s.write_latency, &n);
    latency("ringwal_sync_latency_seconds", &s.sync_latency, &n);
}

fn latency(name: &'static str, l: &LatencySummary, node: &(&'static str, String)) {
    let quantiles = [
        ("0.5", l.p50),
        ("0.99", l.p99),
        ("0.999", l.p999),
        ("1", l.max),
    ];
    for (q, d) in quantiles {
        gauge!(name, &[node.clone(), ("quantile", q.to_string())]).set(d.as_secs_f64());
    }
}
