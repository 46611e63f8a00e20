//! A real full filesystem: a small ext4 image, loop-mounted, filled by the
//! log until the device says ENOSPC. Needs root (mount); without it the test
//! says why it skipped and passes vacuously.

use crate::common::{mount_image, spawning_processes};
use ringwal::{Config, Error, Level, Wal};

fn cfg() -> Config {
    Config::builder()
        .segment_bytes(4 << 20)
        .max_record_bytes(16 << 10)
        .write_bytes(64 << 10)
        .build()
}

fn payload(lsn: u64) -> Vec<u8> {
    let mut p = format!("record-{lsn}-").into_bytes();
    p.resize(8 << 10, (lsn % 251) as u8);
    p
}

#[test]
fn full_filesystem_reports_no_space_and_loses_nothing() {
    // Mounting runs mkfs, mount and umount while the other tests of this
    // binary may hold logs open (see `common::SPAWNING`).
    let _spawning = spawning_processes();
    let root = tempfile::tempdir().unwrap();
    let mount = match mount_image(root.path(), "ext4", 40) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("disk_full: skipped: {why}");
            return;
        }
    };
    let dir = mount.dir.join("log");
    // Room an operator frees later: two segments' worth.
    let reserve = mount.dir.join("reserve");
    std::fs::write(&reserve, vec![1u8; 9 << 20]).unwrap();

    // Fill: append in groups and wait for each group, until the log refuses.
    let (wal, _) = Wal::open(&dir, cfg()).unwrap();
    let (mut acked, mut handed) = (0u64, 0u64);
    let failure = 'fill: loop {
        let mut tickets = Vec::new();
        for _ in 0..32 {
            match wal.append(0, &payload(wal.next_lsn())) {
                Ok(t) => {
                    handed = t.lsn();
                    tickets.push(t)
                }
                Err(e) => break 'fill e,
            }
        }
        for t in tickets {
            match t.wait(Level::Durable) {
                Ok(()) => acked = acked.max(t.lsn()),
                Err(e) => break 'fill e,
            }
        }
        assert!(acked < 10_000, "a 40 MiB filesystem cannot hold this much");
    };
    assert!(
        matches!(failure, Error::NoSpace { .. }),
        "expected NoSpace, got {failure:?}"
    );
    assert!(
        acked > 100,
        "the log should have filled most of the image first ({acked} records)"
    );
    // Later calls keep saying what is wrong.
    assert!(matches!(wal.append(0, b"more"), Err(Error::NoSpace { .. })));
    drop(wal);

    // Everything acknowledged is there, byte for byte; verify is clean.
    let report =
        ringwal::verify::verify(&dir, &ringwal::Config::builder().node(1).build()).unwrap();
    assert_eq!(report.consistent(), Some(true), "{:?}", report.problems);
    // LSNs the poisoned writer handed out that the disk does not hold are
    // never handed out again: the next open in this process records them
    // as given up first, which takes a block, in a new segment when the
    // last one is full. On the full disk that open says NoSpace and
    // leaves the log as it was; once room is freed, it goes on.
    match Wal::open(&dir, cfg()) {
        Ok((wal, rep)) => {
            // Room was left in the last segment for the skip.
            let top = rep.skipped.map_or(rep.last_lsn, |(_, last)| last);
            assert!(top >= handed, "{rep:?}");
            wal.close().unwrap();
        }
        Err(e) => {
            assert!(matches!(e, Error::NoSpace { .. }), "{e:?}");
            assert!(
                handed > acked,
                "an open with nothing to give up failed: {e}"
            );
            let report =
                ringwal::verify::verify(&dir, &ringwal::Config::builder().node(1).build()).unwrap();
            assert_eq!(report.consistent(), Some(true), "{:?}", report.problems);
        }
    }
    std::fs::remove_file(&reserve).unwrap();
    let (wal, rep) = Wal::open(&dir, cfg()).unwrap();
    assert!(
        rep.last_lsn >= acked,
        "recovered up to {} but {acked} were acknowledged",
        rep.last_lsn
    );
    assert!(
        wal.next_lsn() > handed,
        "LSN {} handed out again after a failure",
        wal.next_lsn()
    );
    for (i, rec) in wal.reader_from(0).unwrap().enumerate() {
        let rec = rec.unwrap();
        assert_eq!(rec.lsn, i as u64 + 1);
        assert_eq!(rec.payload, payload(rec.lsn), "record {} changed", rec.lsn);
    }

    // Free space with a checkpoint; the log continues across a roll.
    let freed = wal.checkpoint(wal.durable_lsn()).unwrap();
    assert!(
        freed >= 2,
        "sealed segments should be deletable, removed {freed}"
    );
    let start = wal.next_lsn();
    let tickets: Vec<_> = (0..1024)
        .map(|_| wal.append(0, &payload(wal.next_lsn())).unwrap())
        .collect();
    for t in &tickets {
        t.wait(Level::Durable).unwrap();
    }
    assert!(wal.stats().rolls >= 1, "the test must cross a segment roll");
    wal.close().unwrap();
    let (wal, _) = Wal::open(&dir, cfg()).unwrap();
    let last: Vec<_> = wal
        .reader_from(start)
        .unwrap()
        .map(|r| r.unwrap().lsn)
        .collect();
    assert_eq!(last.len(), 1024);
    drop(wal);
    drop(mount);
}
