//! With the `metrics` feature, `Wal::publish_metrics` hands `Stats` to the
//! installed recorder: here Prometheus's, rendered as its text format.
//! Run with `cargo test --features metrics --test ops metrics_export`.

use crate::common::*;
use metrics_exporter_prometheus::PrometheusBuilder;
use ringwal::{Backend, Level, Wal};

#[test]
fn published_stats_reach_the_recorder() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    let mut last = None;
    for _ in 0..500 {
        last = Some(wal.append(0, &[b'x'; 100]).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    let stats = wal.stats();
    metrics::with_local_recorder(&recorder, || wal.publish_metrics());
    let text = handle.render();
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series} missing from:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("ringwal_durable_lsn{node=\"1\"}"), 500.0);
    assert_eq!(
        value("ringwal_writes_total{node=\"1\"}"),
        stats.writes as f64
    );
    assert_eq!(value("ringwal_segments{node=\"1\"}"), stats.segments as f64);
    assert_eq!(value("ringwal_poisoned{node=\"1\"}"), 0.0);
    let p99 = value("ringwal_write_latency_seconds{node=\"1\",quantile=\"0.99\"}");
    assert!(p99 > 0.0 && p99 < 60.0, "{p99}");
    wal.close().unwrap();
}
