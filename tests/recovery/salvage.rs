//! Salvage: one flipped byte in the middle of a log gives up the LSNs of
//! the frames it damaged, not the rest of the log.

use std::path::Path;
use std::sync::Arc;

use crate::common::{opening_logs, segment_files, NODE};
use ringwal::verify::{self, Damaged};
use ringwal::{Config, Error, Level, Lsn, StaticKeys, Wal};

fn body(i: u64) -> Vec<u8> {
    format!("record {i:08} {}", "x".repeat(48)).into_bytes()
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

/// Salvage `dir` and check what every reader then agrees on: the log
/// opens strictly, holds every record but the given-up LSNs, each at its
/// LSN with its bytes, and appends above them. Returns the runs.
fn salvage_and_check(dir: &Path, cfg: &Config, appended: u64) -> Vec<Damaged> {
    assert!(
        matches!(Wal::open(dir, cfg.clone()), Err(Error::Corrupt { .. })),
        "a strict open refuses the damage"
    );
    let plan = verify::salvage_plan(dir, cfg).unwrap();
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let done = verify::salvage(dir, cfg).unwrap();
    assert_eq!(done.damaged, plan.damaged, "the deed is the plan");
    assert_eq!(done.copies, plan.copies, "the copies it said it would keep");
    let (file, copy) = &done.copies[0];
    assert!(
        copy.exists() && *file == done.damaged[0].file,
        "{:?}",
        done.copies
    );
    let given_up = done.lsns_given_up();
    assert_eq!(done.records_kept + given_up, appended);
    let report = verify::verify(dir, cfg).unwrap();
    assert_eq!(report.consistent(), Some(true), "{:?}", report.problems);
    assert_eq!(report.records, done.records_kept);

    let (wal, _) = Wal::open(dir, cfg.clone()).unwrap();
    let mut seen = 0;
    for r in wal.reader_from(0).unwrap() {
        let r = r.unwrap();
        assert_eq!(r.payload, body(r.lsn), "LSN {}", r.lsn);
        assert!(!done
            .damaged
            .iter()
            .filter_map(|d| d.given_up)
            .any(|(a, b)| (a..=b).contains(&r.lsn)));
        seen += 1;
    }
    assert_eq!(seen, done.records_kept);
    for d in &done.damaged {
        if let Some((first, _)) = d.given_up {
            assert!(matches!(wal.read(first), Err(Error::GivenUp { .. })));
        }
    }
    let t = wal.append(0, b"after").unwrap();
    assert_eq!(t.lsn(), appended + 1, "no LSN handed out again");
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    done.damaged
}

#[test]
fn one_flipped_byte_in_the_oldest_segment_gives_up_only_its_write() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let cfg = Config::builder().segment_bytes(1 << 20).build();
    let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
    let n: Lsn = 30_000;
    let mut last = None;
    for i in 1..=n {
        last = Some(wal.append(0, &body(i)).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let segs = segment_files(&dir, NODE);
    assert!(segs.len() >= 3, "{segs:?}");
    flip(&segs[0].1, 500_000);
    let damaged = salvage_and_check(&dir, &cfg, n);
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    let (first, last) = damaged[0].given_up.expect("records were hit");
    eprintln!("salvage gave up LSNs {first}..={last} of {n}");
    assert!(last - first < 10, "at most ten LSNs given up: {damaged:?}");
}

#[test]
fn a_flipped_byte_in_an_encrypted_segment_gives_up_the_records_of_its_write() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let keys = StaticKeys::new();
    keys.insert(1, ringwal::Key::new([5; 32]), true);
    let cfg = Config::builder()
        .segment_bytes(1 << 20)
        .encryption(Arc::new(keys))
        .build();
    let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
    // One record a write: each durable before the next is appended.
    let n: Lsn = 400;
    for i in 1..=n {
        wal.append(0, &body(i))
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    wal.close().unwrap();
    let segs = segment_files(&dir, NODE);
    // Inside the record frame of the 123rd write: past its 48-byte vouch.
    flip(&segs[0].1, 2 * 4096 + 122 * 4096 + 80);
    let damaged = salvage_and_check(&dir, &cfg, n);
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    let (first, last) = damaged[0].given_up.expect("a record was hit");
    assert_eq!(
        first, last,
        "exactly the one record of the write: {damaged:?}"
    );
}
