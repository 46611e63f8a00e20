//! The hard size limit under a producer that outruns checkpoints: `Block`
//! waits for a checkpoint and never poisons the log; `DropOldest` drops
//! whole oldest segments and reports exactly the LSNs it dropped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use ringwal::{DurabilityObserver, Error, Level, Lsn, Wal, WhenFull};

const SEG: u64 = 64 << 10;

#[test]
fn block_waits_for_a_checkpoint_and_never_poisons_the_log() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let timeout = Duration::from_millis(300);
        let cfg = small(backend)
            .segment_bytes(SEG)
            .max_log_bytes(Some(3 * SEG), WhenFull::Block { timeout })
            .build();
        let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
        let payload = [7u8; 1000];
        // Append until the limit refuses, waiting out the timeout once.
        let mut last = 0;
        let refused = loop {
            match wal.append(1, &payload) {
                Ok(t) => last = t.lsn(),
                Err(e) => break e,
            }
            assert!(last < 10_000, "three segments never filled");
        };
        let started = Instant::now();
        match refused {
            Error::LogFull { limit, waited, .. } => {
                assert_eq!(limit, 3 * SEG);
                assert!(waited >= timeout - Duration::from_millis(5), "{waited:?}");
            }
            other => panic!("expected LogFull, got {other}"),
        }
        assert!(started.elapsed() < timeout, "the error came after the wait");
        // A refused append took no LSN, and the log is healthy.
        assert_eq!(wal.next_lsn(), last + 1);
        assert!(wal.poison_cause().is_none());
        block_on(wal.wait_for(last, Level::Durable)).unwrap();
        assert!(matches!(
            wal.try_append(1, &payload),
            Err(Error::LogFull { .. })
        ));

        wal.close().unwrap();

        // A blocked producer goes on once a checkpoint makes room. Reopened
        // with a wait far longer than the checkpoint can take (it writes
        // the manifest durably before it frees anything, and this disk
        // can stall for hundreds of milliseconds): only the checkpoint's
        // wake-up ends the wait in time.
        let patient = small(backend)
            .segment_bytes(SEG)
            .max_log_bytes(
                Some(3 * SEG),
                WhenFull::Block {
                    timeout: Duration::from_secs(60),
                },
            )
            .build();
        let (wal, _) = Wal::open(&dir, patient).unwrap();
        assert!(matches!(
            wal.try_append(1, &payload),
            Err(Error::LogFull { .. })
        ));
        std::thread::scope(|s| {
            let producer = s.spawn(|| wal.append(1, &payload).map(|t| t.lsn()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(wal.checkpoint(last / 2).unwrap() > 0);
            assert_eq!(producer.join().unwrap().unwrap(), last + 1);
        });
        wal.close().unwrap();
        let (wal, _) = Wal::open(&dir, cfg).unwrap();
        let recs = read_all(&wal);
        assert_eq!(recs.last().map(|r| r.lsn), Some(last + 1), "nothing lost");
        wal.close().unwrap();
    });
}

#[derive(Default)]
struct Drops(Mutex<Vec<(Lsn, Lsn)>>);

impl DurabilityObserver for Drops {
    fn advanced(&self, _written: Lsn, _durable: Lsn) {}
    fn records_dropped(&self, first: Lsn, last: Lsn) {
        self.0.lock().unwrap().push((first, last));
    }
}

#[test]
fn drop_oldest_reports_exactly_the_ranges_it_dropped() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let drops = Arc::new(Drops::default());
        let cfg = small(backend)
            .segment_bytes(SEG)
            .max_log_bytes(Some(4 * SEG), WhenFull::DropOldest)
            .observer(drops.clone())
            .build();
        let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
        let mut last = None;
        for i in 0..2000u32 {
            last = Some(wal.append(1, &i.to_le_bytes().repeat(200)).unwrap());
        }
        last.unwrap().wait(Level::Durable).unwrap();
        let stats = wal.stats();
        let ranges = drops.0.lock().unwrap().clone();
        assert!(ranges.len() >= 3, "{ranges:?}");
        // Whole oldest segments, in order, from LSN 1 with no hole, up to
        // just below the oldest LSN kept.
        let mut next = 1;
        for &(first, last) in &ranges {
            assert_eq!(first, next, "{ranges:?}");
            assert!(last >= first);
            next = last + 1;
        }
        assert_eq!(wal.oldest_lsn(), next);
        assert_eq!(stats.dropped_records, next - 1);
        assert_eq!(stats.last_dropped, ranges.last().copied());
        assert!(
            stats.segments as u64 * SEG <= 4 * SEG,
            "{} segments, {ranges:?}, {stats:?}",
            stats.segments
        );
        assert!(matches!(wal.read(next - 1), Err(Error::Released { .. })));
        assert!(wal.poison_cause().is_none());
        wal.close().unwrap();

        // What was not dropped is all there, in order, after a reopen.
        let (wal, _) = Wal::open(&dir, cfg).unwrap();
        let recs = read_all(&wal);
        assert_eq!(recs.first().map(|r| r.lsn), Some(next));
        assert_eq!(recs.last().map(|r| r.lsn), Some(2000));
        for r in &recs {
            assert_eq!(r.payload, ((r.lsn - 1) as u32).to_le_bytes().repeat(200));
        }
        wal.close().unwrap();
    });
}

#[test]
fn a_limit_below_two_segments_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let cfg = small(ringwal::Backend::Threaded)
        .segment_bytes(SEG)
        .max_log_bytes(Some(SEG), WhenFull::DropOldest)
        .build();
    assert!(matches!(
        Wal::open(root.path(), cfg),
        Err(Error::InvalidConfig(m)) if m.contains("two segments")
    ));
}

/// A new segment that replaces an empty one of the same base (the first
/// append after a reopen under another torn window) is not counted
/// twice against the hard limit: the log still holds exactly as many
/// segments as the limit allows.
#[test]
fn a_replaced_empty_segment_counts_once_against_the_limit() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let limited = |inflight| {
            small(backend)
                .segment_bytes(SEG)
                .max_inflight(inflight)
                .max_log_bytes(
                    Some(2 * SEG),
                    WhenFull::Block {
                        timeout: Duration::from_millis(100),
                    },
                )
                .build()
        };
        let (wal, _) = Wal::open(dir.path(), limited(4)).unwrap();
        wal.close().unwrap();
        let (wal, _) = Wal::open(dir.path(), limited(8)).unwrap();
        let payload = [3u8; 1000];
        let refused = loop {
            match wal.append(1, &payload) {
                Ok(t) => t.wait(Level::Written).unwrap(),
                Err(e) => break e,
            }
            assert!(wal.next_lsn() < 10_000, "the limit never held");
        };
        assert!(matches!(refused, Error::LogFull { .. }), "{refused}");
        let stats = wal.stats();
        assert_eq!(stats.segments, 2, "{stats:?}");
        assert_eq!(stats.disk_bytes, 2 * SEG);
        wal.close().unwrap();
    });
}
