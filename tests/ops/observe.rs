//! Watching the log's progress: the durability observer. Every test runs
//! against both backends.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::common::*;
use ringwal::{Backend, Config, DurabilityObserver, Error, Level, Lsn, Poison, SyncMethod, Wal};

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
        .durability(durability_for(mode))
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

// ---------------------------------------------------------------------------
// 2. Waiting for an LSN: `Wal::wait_for`.

/// Poll `fut` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn wait_for_resolves_for_lsns_handed_out_later() {
    for_each_backend(|backend| {
        for mode in [Level::Durable, Level::Written] {
            wait_for_case(backend, mode);
        }
    });
}

fn wait_for_case(backend: Backend, mode: Level) {
    let what = format!("{backend:?} {mode:?}");
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(
        root.path(),
        small(backend).durability(durability_for(mode)).build(),
    )
    .unwrap();
    // Already reached: at once, with no record at all.
    assert!(matches!(
        poll_once(&mut wal.wait_for(0, Level::Durable)),
        Poll::Ready(Ok(()))
    ));
    let first = wal.next_lsn();
    // Followers waiting for records not appended yet, at every level.
    let mut waits: Vec<_> = [Level::Accepted, Level::Written, Level::Durable]
        .into_iter()
        .map(|level| (level, wal.wait_for(first + 49, level)))
        .collect();
    for (level, w) in &mut waits {
        for _ in 0..10 {
            assert!(
                poll_once(w).is_pending(),
                "{what}: {level:?} before any append"
            );
        }
    }
    let follower = std::thread::spawn({
        let durable = wal.wait_for(first + 99, Level::Durable);
        move || block_on(durable)
    });
    let mut last = None;
    for i in 0..100u32 {
        last = Some(wal.append(0, format!("rec-{i}").as_bytes()).unwrap());
    }
    for (level, w) in waits {
        block_on(w).unwrap_or_else(|e| panic!("{what}: {level:?}: {e}"));
        assert!(wal.written_lsn() >= first + 49, "{what}: {level:?}");
    }
    // Written mode: nobody calls `sync`; the follower's own wait asks for it.
    follower.join().unwrap().unwrap();
    assert!(wal.durable_lsn() >= first + 99, "{what}");
    assert_eq!(last.unwrap().lsn(), first + 99);
    // Accepted for an LSN handed out: at once.
    assert!(matches!(
        poll_once(&mut wal.wait_for(first + 99, Level::Accepted)),
        Poll::Ready(Ok(()))
    ));
    wal.close().unwrap();
}

#[test]
fn wait_for_an_lsn_never_reached_fails_closed_when_the_log_closes() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(root.path(), cfg(backend)).unwrap();
        let t = wal.append(0, b"one").unwrap();
        let mut beyond = wal.wait_for(t.lsn() + 1, Level::Written);
        let mut reached = wal.wait_for(t.lsn(), Level::Durable);
        assert!(poll_once(&mut beyond).is_pending());
        let blocked = std::thread::spawn({
            let w = wal.wait_for(t.lsn() + 10, Level::Durable);
            move || block_on(w)
        });
        wal.close().unwrap();
        assert!(
            matches!(block_on(&mut beyond), Err(Error::Closed)),
            "{backend:?}"
        );
        assert!(
            matches!(blocked.join().unwrap(), Err(Error::Closed)),
            "{backend:?}"
        );
        // The close wrote the record: its wait succeeds, even now.
        assert!(
            matches!(poll_once(&mut reached), Poll::Ready(Ok(()))),
            "{backend:?}"
        );
    });
}

/// A small log on the simulated disk `disk`, whose faults say what fails.
/// Writes 1-3 create the first segment and the spare; then there is one
/// per record when records are waited on one at a time.
fn failing_at(disk: &ringwal_platform::sim::SimFs) -> Config {
    Config::builder()
        .sim(disk)
        .segment_bytes(SEGMENT_BYTES)
        .max_record_bytes(MAX_RECORD)
        .build()
}

/// Wait until the spare the preparer makes at open is durable on `disk`.
fn wait_for_the_first_spare(disk: &ringwal_platform::sim::SimFs) {
    let dir = std::path::Path::new("/wal");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let names = disk.vfs().list(dir).unwrap();
        if names
            .iter()
            .any(|n| n.ends_with(".spare") && disk.file_syncs(&dir.join(n)) > 0)
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no spare: {names:?}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Append and wait, one record at a time, until the log fails. Returns the
/// error and the last LSN acknowledged durable.
fn append_until_poisoned(wal: &Wal) -> (Error, Lsn) {
    let mut acked = 0;
    loop {
        let t = wal.append(0, &[7; 100]).unwrap();
        match t.wait(Level::Durable) {
            Ok(()) => acked = t.lsn(),
            Err(e) => return (e, acked),
        }
        assert!(acked < 50, "the injected failure never came");
    }
}

#[test]
fn wait_for_fails_with_the_poison() {
    use ringwal_platform::sim::{Faults, SimFs};
    let disk = SimFs::new(
        7,
        Faults {
            fail_write_at: Some(8),
            ..Faults::default()
        },
    );
    let (wal, _) = Wal::open("/wal", failing_at(&disk)).unwrap();
    let mut ahead = wal.wait_for(1_000, Level::Written);
    assert!(poll_once(&mut ahead).is_pending());
    let (err, acked) = append_until_poisoned(&wal);
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    match poll_once(&mut ahead) {
        Poll::Ready(Err(Error::Poisoned { cause })) => {
            assert!(err.to_string().contains(&cause.to_string()))
        }
        other => panic!("expected the poison, got {other:?}"),
    }
    // Created after the failure: fails at once, unless already reached.
    assert!(matches!(
        poll_once(&mut wal.wait_for(acked + 1, Level::Durable)),
        Poll::Ready(Err(Error::Poisoned { .. }))
    ));
    assert!(matches!(
        poll_once(&mut wal.wait_for(acked, Level::Durable)),
        Poll::Ready(Ok(()))
    ));
    drop(wal);
}

// ---------------------------------------------------------------------------
// 3. Health: `Wal::poison_cause`.

#[test]
fn a_healthy_log_has_no_poison_cause() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(root.path(), cfg(backend)).unwrap();
        assert_eq!(wal.poison_cause(), None, "{backend:?}: fresh");
        for i in 0..200u32 {
            drop(wal.append(0, &i.to_le_bytes()).unwrap());
        }
        wal.sync().unwrap();
        wal.checkpoint(100).unwrap();
        assert_eq!(wal.poison_cause(), None, "{backend:?}: after work");
        assert!(!wal.stats().poisoned);
        wal.close().unwrap();
    });
}

#[test]
fn a_failed_write_is_the_poison_cause() {
    use ringwal_platform::sim::{Faults, SimFs};
    let disk = SimFs::new(11, Faults::default());
    let (wal, _) = Wal::open("/wal", failing_at(&disk)).unwrap();
    assert_eq!(wal.poison_cause(), None);
    // The preparer zero-writes the first spare in the background, so a
    // fault counted from the disk's creation could hit the spare (a failed
    // roll) as well as a record. Once the spare is durable nothing but
    // records writes until the first roll, many records away.
    wait_for_the_first_spare(&disk);
    disk.set_faults(Faults {
        fail_write_at: Some(disk.writes() + 3),
        ..Faults::default()
    });
    let (err, _) = append_until_poisoned(&wal);
    let cause = wal.poison_cause().expect("poisoned");
    let Poison::Failed { context, .. } = &cause else {
        panic!("expected a failed write, got {cause:?}");
    };
    // The cause is the error every caller gets, typed and cloneable, and
    // the OS error behind it can be matched on through `source()`.
    assert!(context.contains("write failed"), "{context}");
    assert!(
        matches!(&err, Error::Poisoned { cause: c } if *c == cause),
        "{err}"
    );
    let os = cause
        .io_error()
        .expect("a failed write carries its OS error");
    let via_source = std::error::Error::source(&err)
        .and_then(std::error::Error::source)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .expect("the OS error is the poisoned error's source's source");
    assert_eq!(via_source.kind(), os.kind());
    assert!(err.to_string().contains(context.as_str()), "{err}");
    assert!(matches!(cause.error(), Error::Poisoned { cause: c } if c == cause));
    assert!(matches!(wal.append(0, b"x"), Err(Error::Poisoned { .. })));
    assert!(wal.stats().poisoned);
    // The first cause stays, whatever fails after it.
    assert_eq!(wal.poison_cause(), Some(cause));
}

#[test]
fn a_full_disk_is_the_poison_cause() {
    use ringwal_platform::sim::{Faults, SimFs};
    let disk = SimFs::new(
        12,
        Faults {
            capacity: Some(600 << 10),
            ..Faults::default()
        },
    );
    let (wal, _) = Wal::open("/wal", failing_at(&disk)).unwrap();
    let mut failed = None;
    for i in 0..10_000u32 {
        let r = wal
            .append(0, &[b'x'; 1000])
            .and_then(|t| t.wait(Level::Durable));
        if let Err(e) = r {
            failed = Some((i, e));
            break;
        }
    }
    let (_, err) = failed.expect("the disk never filled");
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    match wal.poison_cause() {
        Some(Poison::NoSpace(path)) => {
            assert!(matches!(err, Error::NoSpace { path: p } if p == path))
        }
        other => panic!("expected a full disk, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// 4. Stats: what a dashboard shows.

#[test]
fn stats_show_the_disk_the_device_and_the_latencies() {
    for_each_backend(|backend| {
        for level in [Level::Durable, Level::Written] {
            let root = tempfile::tempdir().unwrap();
            // One write in flight and small writes: three staging buffers
            // of a few records each, which a producer that never waits
            // fills faster than any device empties them.
            let cfg = small(backend)
                .durability(durability_for(level))
                .max_inflight(1)
                .write_bytes(4096)
                .max_record_bytes(1024)
                .build();
            let (wal, _) = Wal::open(root.path(), cfg).unwrap();
            let mut last = None;
            for _ in 0..2_000 {
                last = Some(wal.append(0, &[b'x'; 1000]).unwrap());
            }
            last.unwrap().wait(Level::Durable).unwrap();
            let s = wal.stats();
            let what = format!("{backend:?} {level:?}: {s:?}");
            assert_eq!(s.backend, backend, "{what}");
            assert!(s.segments >= 2, "{what}");
            let on_disk: u64 = std::fs::read_dir(root.path())
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
                .map(|e| e.metadata().unwrap().len())
                .sum();
            assert_eq!(s.disk_bytes, on_disk, "{what}");
            assert_eq!(s.oldest_lsn, 1, "{what}");
            assert!(s.backpressure_waits > 0, "{what}");
            assert_eq!(s.writes_in_flight, 0, "all done: {what}");
            assert!(!s.poisoned, "{what}");
            // Every write submitted has completed and was timed.
            assert_eq!(s.write_latency.count, s.writes, "{what}");
            assert!(s.write_latency.p50 > std::time::Duration::ZERO, "{what}");
            assert!(s.write_latency.max >= s.write_latency.p99, "{what}");
            // Written mode made the records durable with explicit syncs.
            if level == Level::Written {
                assert!(s.syncs > 0 && s.sync_latency.count == s.syncs, "{what}");
            }
            wal.close().unwrap();
        }
    });
}

/// Every fdatasync the ring issues is counted, the ones linked to a
/// write as much as the ones of their own; an RWF_DSYNC write is none.
#[test]
fn stats_count_the_syncs_linked_to_writes() {
    for_each_backend(|backend| {
        for method in [SyncMethod::WriteThenFdatasync, SyncMethod::Dsync] {
            let root = tempfile::tempdir().unwrap();
            // One segment: no roll's header or seal among the writes.
            let cfg = small(backend)
                .segment_bytes(4 << 20)
                .sync_method(method)
                .build();
            let (wal, _) = Wal::open(root.path(), cfg).unwrap();
            for _ in 0..50 {
                wal.append(0, b"one at a time")
                    .unwrap()
                    .wait(Level::Durable)
                    .unwrap();
            }
            let s = wal.stats();
            let what = format!("{backend:?} {method:?}: {s:?}");
            assert!(s.writes >= 50 && s.rolls == 0, "{what}");
            // What the log really uses: Dsync only where the file system
            // honours it, linked syncs otherwise.
            match s.sync_method {
                SyncMethod::WriteThenFdatasync => {
                    assert_eq!(s.syncs, s.writes, "one linked sync per write: {what}")
                }
                SyncMethod::Dsync => assert_eq!(s.syncs, 0, "{what}"),
                SyncMethod::Grouped => panic!("not configured: {what}"),
                _ => panic!("unknown method: {what}"),
            }
            wal.close().unwrap();
        }
    });
}

/// Past the soft limit the observer is told at each roll, and `Stats`
/// says so, until a checkpoint brings the log under it again.
#[test]
fn a_log_over_its_soft_limit_says_so_until_a_checkpoint() {
    struct Over(Mutex<Vec<u64>>);
    impl DurabilityObserver for Over {
        fn advanced(&self, _: Lsn, _: Lsn) {}
        fn log_over_soft_limit(&self, bytes: u64) {
            self.0.lock().unwrap().push(bytes);
        }
    }
    let over = Arc::new(Over(Mutex::new(Vec::new())));
    let root = tempfile::tempdir().unwrap();
    let limit = 3 * SEGMENT_BYTES;
    let cfg = small(Backend::Threaded)
        .observer(over.clone())
        .soft_log_bytes(Some(limit))
        .build();
    let (wal, _) = Wal::open(root.path(), cfg).unwrap();
    let write = |n: u32| {
        let mut last = None;
        for i in 0..n {
            last = Some(wal.append(0, format!("{i:>400}").as_bytes()).unwrap());
        }
        last.unwrap().wait(Level::Durable).unwrap();
    };
    write(100);
    assert!(over.0.lock().unwrap().is_empty(), "under the limit");
    assert!(!wal.stats().over_soft_limit);
    write(1_000);
    let s = wal.stats();
    assert!(s.segments as u64 * SEGMENT_BYTES > limit, "{s:?}");
    assert!(s.over_soft_limit, "{s:?}");
    let told = over.0.lock().unwrap().clone();
    assert!(
        !told.is_empty() && told.iter().all(|&b| b > limit),
        "{told:?}"
    );
    // A checkpoint of everything but the active segment: under again.
    wal.checkpoint(wal.durable_lsn()).unwrap();
    assert!(!wal.stats().over_soft_limit);
    let calls = over.0.lock().unwrap().len();
    write(100);
    assert_eq!(
        over.0.lock().unwrap().len(),
        calls,
        "no signal under the limit"
    );
    wal.close().unwrap();
}
