//! Watching the log's progress: the durability observer. Every test runs
//! against both backends.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use ringwal::{Backend, DurabilityObserver, Level, Lsn, Wal};

// ---------------------------------------------------------------------------
// 1. The durability observer.

/// Keeps every pair of watermarks it is told.
#[derive(Default)]
struct Collect(Mutex<Vec<(Lsn, Lsn)>>);

impl DurabilityObserver for Collect {
    fn advanced(&self, written: Lsn, durable: Lsn) {
        self.0.lock().unwrap().push((written, durable));
    }
}

/// The observer sees the watermarks rise, never fall, never report
/// durable beyond written, and end at the last record.
fn check_observed(seen: &[(Lsn, Lsn)], start: Lsn, last: Lsn, what: &str) {
    assert!(!seen.is_empty(), "{what}: never called");
    let mut prev = (start, start);
    for &(w, d) in seen {
        assert!(w >= prev.0 && d >= prev.1, "{what}: {prev:?} then {w}/{d}");
        assert!(
            (w, d) != prev,
            "{what}: called without an advance at {w}/{d}"
        );
        assert!(d <= w, "{what}: durable {d} passed written {w}");
        prev = (w, d);
    }
    assert_eq!(prev, (last, last), "{what}: the last call");
}

#[test]
fn the_observer_sees_watermarks_rise_to_the_last_ticket() {
    for_each_backend(|backend| {
        for mode in [Level::Durable, Level::Written] {
            observer_case(backend, mode);
        }
    });
}

fn observer_case(backend: Backend, mode: Level) {
    let what = format!("{backend:?} {mode:?}");
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    // A first life, so the second starts from watermarks above zero.
    let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
    for i in 0..10u32 {
        wal.append(0, &i.to_le_bytes())
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    wal.close().unwrap();

    let seen = Arc::new(Collect::default());
    let config = small(backend)
        .default_level(mode)
        .observer(seen.clone())
        .build();
    let (wal, _) = Wal::open(&log, config).unwrap();
    let start = wal.durable_lsn();
    assert_eq!(start, 10, "{what}");
    assert!(
        seen.0.lock().unwrap().is_empty(),
        "{what}: the start is not an advance"
    );
    // Enough records to roll the small segments several times, waited on
    // in groups so the watermarks move many times.
    let mut last = 0;
    for round in 0..20u32 {
        let tickets: Vec<_> = (0..25u32)
            .map(|i| {
                wal.append(1, format!("{round}-{i}-{}", "x".repeat(300)).as_bytes())
                    .unwrap()
            })
            .collect();
        let t = tickets.last().unwrap();
        t.wait(Level::Durable).unwrap();
        last = t.lsn();
    }
    assert_eq!(last, start + 500, "{what}");
    // The observer runs after the waiters are woken: only once the ring
    // thread is gone is every call made.
    wal.close().unwrap();
    let seen = seen.0.lock().unwrap();
    check_observed(&seen, start, last, &what);
    if mode == Level::Durable {
        // Durable mode: each write is durable when it completes.
        assert!(seen.iter().all(|&(w, d)| w == d), "{what}: {seen:?}");
    }
}
