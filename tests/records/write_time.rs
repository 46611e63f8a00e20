//! A record's write time (format version 3): when the ring submitted the
//! write holding it, so after its append and before its acknowledgement,
//! the same from every reader.

use std::time::{Duration, SystemTime};

use crate::common::{self, for_each_backend, read_all, small};
use ringwal::{verify, Level, Wal};

#[test]
fn a_records_write_time_lies_between_its_append_and_its_acknowledgement() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        // Segments large enough for index points (one per 64 KiB), so
        // point reads start past their write's first frame.
        let cfg = small(backend).segment_bytes(256 << 10).build();
        let (wal, _) = Wal::open(dir.path(), cfg.clone()).unwrap();
        let mut rng = common::seeded_rng("write times");
        // (appended no earlier than, acknowledged no later than) per LSN.
        let mut bounds = Vec::new();
        let mut pending = Vec::new();
        for i in 0..600u64 {
            let before = SystemTime::now();
            let t = if i % 40 == 9 {
                let (a, b) = (common::payload(&mut rng, i), common::payload(&mut rng, !i));
                wal.append_batch(&[(1, &a), (2, &b)]).unwrap()
            } else {
                wal.append(0, &common::payload(&mut rng, i)).unwrap()
            };
            let n = if i % 40 == 9 { 2 } else { 1 };
            pending.push((before, t, n));
            // Acknowledged in groups, so writes hold several records: small
            // ones, then runs that fill writes of over 64 KiB.
            if (i % 100 < 50 && i % 7 == 6) || i % 100 == 99 {
                for (before, t, n) in pending.drain(..) {
                    t.wait(Level::Written).unwrap();
                    let after = SystemTime::now();
                    bounds.extend(std::iter::repeat_n((before, after), n));
                }
            }
        }
        for (before, t, n) in pending.drain(..) {
            t.wait(Level::Written).unwrap();
            bounds.extend(std::iter::repeat_n((before, SystemTime::now()), n));
        }
        assert!(wal.stats().rolls >= 2, "the log spans several segments");
        let check = |what: &str, lsn: u64, at: Option<SystemTime>| {
            let (before, after) = bounds[lsn as usize - 1];
            let at = at.unwrap_or_else(|| panic!("{what}: LSN {lsn} has no write time"));
            assert!(
                before <= at && at <= after,
                "{what}: LSN {lsn} written at {at:?}, outside {before:?}..={after:?}"
            );
        };
        let all = read_all(&wal);
        assert_eq!(all.len(), bounds.len());
        for r in &all {
            check("reader", r.lsn, r.written_at);
            // A point read starts at an index point, past its write's
            // vouch: it must still find the write's time.
            assert_eq!(wal.read(r.lsn).unwrap().written_at, r.written_at);
        }
        // Records of one write share its time; writes go out in order.
        assert!(all.windows(2).all(|w| w[0].written_at <= w[1].written_at));
        let mut follower = wal.follow(0).unwrap();
        for r in &all {
            let f = follower.next().unwrap().unwrap();
            assert_eq!((f.lsn, f.written_at), (r.lsn, r.written_at));
        }
        wal.close().unwrap();
        let located: Vec<_> = verify::records(dir.path(), &cfg, 0)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(located.len(), all.len());
        for (l, r) in located.iter().zip(&all) {
            assert_eq!((l.lsn, l.written_at), (r.lsn, r.written_at));
        }
        let dir_follower = verify::follow(dir.path(), &cfg, 0, Duration::from_millis(1)).unwrap();
        // Zipped from the records' side: a follower never ends by itself.
        for (r, d) in all.iter().zip(dir_follower) {
            let d = d.unwrap();
            assert_eq!((d.lsn, d.written_at), (r.lsn, r.written_at));
        }
    });
}
