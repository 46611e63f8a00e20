//! LSNs recovery gave up (a skip frame) are stepped over by every reader
//! and counted by none: a point-in-time repair of a closed log whose last
//! record is damaged gives that LSN up, the next append takes the one
//! after it, and the record at that LSN reads back through every reader.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use ringwal::collector::replay;
use ringwal::{verify, Backend, Error, Level, RecoveryMode, Wal, Watermarks};

const N: u64 = 50;

/// A closed log of `N` records whose last record's payload is damaged:
/// the closing vouch covers it, so only a point-in-time repair opens it.
fn damaged_last_record(dir: &Path, backend: Backend) {
    let (wal, _) = Wal::open(dir, cfg(backend)).unwrap();
    let mut last = None;
    for i in 1..=N {
        last = Some(wal.append(0, format!("record-{i}").as_bytes()).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let (_, path) = segment_files(dir, NODE).pop().unwrap();
    let seg = scan_segment(&path);
    let frame = seg.records().last().unwrap().clone();
    assert_eq!(frame.lsn, N);
    let mut bytes = seg.bytes;
    bytes[frame.start as usize + 24] ^= 0x5a;
    std::fs::write(&path, bytes).unwrap();
}

fn lsns(records: impl Iterator<Item = ringwal::Result<u64>>) -> Vec<u64> {
    records.map(|r| r.unwrap()).collect()
}

#[test]
fn every_reader_steps_over_the_lsns_a_repair_gave_up() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        damaged_last_record(&dir, backend);
        assert!(Wal::open(&dir, cfg(backend)).is_err(), "strict refuses");

        let pit = small(backend).recovery(RecoveryMode::PointInTime).build();
        let (wal, report) = Wal::open(&dir, pit).unwrap();
        assert_eq!(report.skipped, Some((N, N)), "{report:?}");
        let t = wal.append(0, b"after").unwrap();
        assert_eq!(t.lsn(), N + 1);
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();

        let want: Vec<u64> = (1..N).chain([N + 1]).collect();
        let (wal, _) = Wal::open(&dir, cfg(backend)).unwrap();
        let wal = std::sync::Arc::new(wal);
        assert_eq!(
            lsns(wal.reader_from(0).unwrap().map(|r| r.map(|r| r.lsn))),
            want
        );
        assert_eq!(
            lsns(wal.reader_from(N).unwrap().map(|r| r.map(|r| r.lsn))),
            [N + 1]
        );
        assert_eq!(wal.read(N + 1).unwrap().payload, b"after");
        assert_eq!(
            wal.read(N - 1).unwrap().payload,
            format!("record-{}", N - 1).as_bytes()
        );
        match wal.read(N) {
            Err(Error::GivenUp { first, last, .. }) => assert_eq!((first, last), (N, N)),
            other => panic!("read of a given-up LSN: {other:?}"),
        }

        // A follower reads past the LSN given up, then waits for more.
        let mut follower = wal.follow(0).unwrap();
        let mut seen = Vec::new();
        for _ in 0..want.len() {
            seen.push(follower.next().unwrap().unwrap().lsn);
        }
        assert_eq!(seen, want);
        let t = wal.append(0, b"followed").unwrap();
        assert_eq!(follower.next().unwrap().unwrap().lsn, t.lsn());
        t.wait(Level::Durable).unwrap();
        drop(follower);
        let wal = std::sync::Arc::into_inner(wal).unwrap();
        wal.close().unwrap();

        // The read-only tools of a directory count and yield the same.
        let want: Vec<u64> = (1..N).chain([N + 1, N + 2]).collect();
        let node = ringwal::Config::builder().node(NODE).build();
        let located = verify::records(&dir, &node, 0).unwrap();
        assert_eq!(lsns(located.map(|r| r.map(|r| r.lsn))), want);
        let mut dir_follower = verify::follow(&dir, &node, 0, Duration::from_millis(5)).unwrap();
        let followed: Vec<u64> = (0..want.len())
            .map(|_| dir_follower.next().unwrap().unwrap().lsn)
            .collect();
        assert_eq!(followed, want);
        let v = verify::verify(&dir, &node).unwrap();
        assert_eq!(v.consistent(), Some(true), "{:?}", v.problems);
        assert_eq!(v.records, want.len() as u64);
        let s = verify::stat(&dir, &node).unwrap();
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!((s.records, s.last_lsn), (want.len() as u64, N + 2));
        let mut replayed = Vec::new();
        let r = replay(&dir, &node, &Watermarks::new(), |_, lsn, _| {
            replayed.push(lsn);
            Ok(())
        })
        .unwrap();
        assert_eq!(replayed, want);
        assert_eq!(r.replayed, want.len() as u64);
    });
}
