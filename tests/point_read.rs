//! `Wal::read(lsn)`: one record by its LSN, agreeing with a full scan,
//! across rolls and inside atomic batches, with typed errors around it.

mod common;

use common::{for_each_backend, read_all, small};
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
        assert!(matches!(wal.read(1), Err(Error::Gap { .. })));
        assert_eq!(wal.read(oldest).unwrap().lsn, oldest);
        assert_eq!(wal.read(t.lsn()).unwrap().payload, b"last");
        wal.close().unwrap();
    });
}
