//! `Wal::read(lsn)`: one record by its LSN, agreeing with a full scan,
//! across rolls and inside atomic batches, with typed errors around it.

use crate::common::{self, for_each_backend, read_all, small};
use ringwal::{Error, Level, Wal};

#[test]
fn point_reads_agree_with_a_full_scan_and_fail_typed_around_it() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        let mut rng = common::seeded_rng("point reads");
        for i in 0..300u64 {
            if i % 50 == 7 {
                let a = common::payload(&mut rng, i);
                let b = common::payload(&mut rng, i + 1000);
                let _ = wal.append_batch(&[(3, &a), (4, &b)]).unwrap();
            } else {
                let _ = wal
                    .append(i as u16 % 5, &common::payload(&mut rng, i))
                    .unwrap();
            }
        }
        wal.sync().unwrap();
        let all = read_all(&wal);
        assert!(wal.stats().rolls >= 3, "the log spans several segments");
        for r in &all {
            assert_eq!(&wal.read(r.lsn).unwrap(), r, "LSN {}", r.lsn);
        }
        let next = wal.next_lsn();
        assert!(matches!(wal.read(0), Err(Error::NotWritten { lsn: 0, .. })));
        assert!(matches!(
            wal.read(next),
            Err(Error::NotWritten { lsn, written }) if lsn == next && written == next - 1
        ));
        // Checkpointed away: a gap, not a silent miss.
        let t = wal.append(0, b"last").unwrap();
        t.wait(Level::Durable).unwrap();
        assert!(wal.checkpoint(200).unwrap() > 0);
        let oldest = wal.oldest_lsn();
        assert!(oldest > 1);
        assert!(matches!(wal.read(1), Err(Error::Released { .. })));
        assert_eq!(wal.read(oldest).unwrap().lsn, oldest);
        assert_eq!(wal.read(t.lsn()).unwrap().payload, b"last");
        wal.close().unwrap();
    });
}

/// Reads deep in a segment start at a point of the sparse index: the same
/// records, batches and offsets as a walk from the front, never a start
/// inside a batch; the index is the same when recovery rebuilds it, and a
/// checkpoint prunes it.
#[test]
fn reads_start_at_sparse_index_points_that_recovery_rebuilds_and_checkpoints_prune() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = || {
            ringwal::Config::builder()
                .backend(backend)
                .segment_bytes(4 << 20)
                .build()
        };
        let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
        // About 10 MiB: lone records and batches of 40 KiB, which straddle
        // the 64 KiB spacing of the points.
        let rec = |i: u64| format!("{i:>1000}").into_bytes();
        let mut i = 0u64;
        while i < 10_000 {
            if i % 100 == 3 {
                let batch: Vec<Vec<u8>> = (i..i + 40).map(rec).collect();
                let parts: Vec<(u16, &[u8])> = batch.iter().map(|p| (1, &p[..])).collect();
                let _ = wal.append_batch(&parts).unwrap();
                i += 40;
            } else {
                let _ = wal.append(0, &rec(i)).unwrap();
                i += 1;
            }
        }
        wal.sync().unwrap();
        let stats = wal.stats();
        let spacing = 64 * 1024;
        assert!(stats.rolls >= 2, "several segments");
        assert!(
            stats.index_points as u64 <= stats.write_bytes / spacing + stats.rolls + 1,
            "at most one point per 64 KiB: {stats:?}"
        );
        assert!(
            stats.index_points as u64 >= stats.write_bytes / (2 * spacing) - stats.rolls - 1,
            "a point about every 64 KiB: {stats:?}"
        );
        let walked = located_from_the_front(&wal);
        for r in walked.iter().step_by(7) {
            let sought = wal
                .reader_from(r.lsn)
                .unwrap()
                .located()
                .next()
                .unwrap()
                .unwrap();
            assert_eq!(&sought, r, "LSN {}", r.lsn);
        }
        wal.close().unwrap();

        let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
        assert_eq!(
            wal.stats().index_points,
            stats.index_points,
            "recovery's walk puts the points where the reservation did"
        );
        for r in walked.iter().skip(3).step_by(11) {
            assert_eq!(wal.read(r.lsn).unwrap().payload, r.payload, "LSN {}", r.lsn);
        }
        let second = located_from_the_front(&wal).into_iter();
        let second_base = second
            .map(|r| r.segment)
            .collect::<std::collections::BTreeSet<_>>();
        assert!(second_base.len() >= 3);
        let upto = walked
            .iter()
            .find(|r| r.segment == *second_base.iter().nth(1).unwrap())
            .unwrap()
            .lsn
            - 1;
        assert_eq!(wal.checkpoint(upto).unwrap(), 1);
        let pruned = wal.stats().index_points;
        assert!(
            pruned < stats.index_points,
            "{pruned} of {}",
            stats.index_points
        );
        assert_eq!(wal.read(upto + 1).unwrap().lsn, upto + 1);
        let last = walked.last().unwrap();
        assert_eq!(wal.read(last.lsn).unwrap().payload, last.payload);
        wal.close().unwrap();
    });
}

/// A read that starts at an index point never reads the frames before it:
/// damage there fails a walk from the front of the segment but not a read
/// of a record past the point.
#[test]
fn a_point_read_does_not_walk_the_frames_before_its_index_point() {
    use std::os::unix::fs::FileExt;

    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(
        dir.path(),
        ringwal::Config::builder()
            .segment_bytes(1 << 20)
            .max_record_bytes(64 << 10)
            .build(),
    )
    .unwrap();
    for i in 0..3_000u64 {
        let _ = wal.append(0, format!("{i:>500}").as_bytes()).unwrap();
    }
    wal.sync().unwrap();
    let walked = located_from_the_front(&wal);
    let first_segment = &walked[0].segment;
    let deep = walked
        .iter()
        .rfind(|r| &r.segment == first_segment)
        .unwrap();
    assert!(
        deep.offset > 256 * 1024,
        "a record deep in the sealed first segment"
    );
    // Flip a payload byte of the segment's first record.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(first_segment))
        .unwrap();
    let at = walked[0].offset + 40;
    file.write_all_at(b"#", at).unwrap();
    assert!(matches!(
        wal.reader_from(0).unwrap().next(),
        Some(Err(Error::Corrupt { .. }))
    ));
    assert_eq!(wal.read(deep.lsn).unwrap().payload, deep.payload);
    drop(wal);
}

/// Every record with its place, read from the front of every segment.
fn located_from_the_front(wal: &Wal) -> Vec<ringwal::verify::RecordAt> {
    wal.reader_from(0)
        .unwrap()
        .located()
        .collect::<ringwal::Result<_>>()
        .unwrap()
}

/// The segment ids seed 004's callers keep: the oldest kept and the one
/// new records go to, by base LSN, and the last LSN handed out.
#[test]
fn segment_ids_and_the_last_lsn_follow_rolls_and_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(tmp.path(), common::cfg(ringwal::Backend::Threaded)).unwrap();
    assert_eq!(
        (wal.next_lsn() - 1, wal.oldest_lsn(), wal.active_segment()),
        (0, 1, 1)
    );
    let mut last = 0;
    while wal.stats().rolls < 2 {
        last = wal.append(0, &[9u8; 2000]).unwrap().lsn();
        common::block_on(wal.wait_for(last, Level::Written)).unwrap();
    }
    assert_eq!(wal.next_lsn() - 1, last);
    let active = wal.active_segment();
    assert!(active > 1 && active <= last, "{active}");
    assert_eq!(wal.oldest_lsn(), 1);
    assert!(wal.checkpoint(active - 1).unwrap() >= 1);
    assert!(wal.oldest_lsn() > 1);
    assert_eq!(wal.active_segment(), active);
    wal.close().unwrap();
}
