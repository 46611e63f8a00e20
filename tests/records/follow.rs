//! `Wal::follow`: a tailing reader gets every record exactly once, in
//! order, while a producer appends across rolls; it ends at close, and
//! with `Released` when a checkpoint overtakes it.

use std::sync::Arc;

use crate::common::{block_on, for_each_backend, small};
use ringwal::{Error, Level, Wal};

#[test]
fn a_follower_sees_every_record_once_across_rolls_and_ends_at_close() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        let wal = Arc::new(wal);
        let _ = wal.append(0, b"r1:").unwrap();
        let follower = wal.follow(0).unwrap();
        let reader = std::thread::spawn(move || {
            follower
                .map(|r| {
                    let r = r.unwrap();
                    (r.lsn, r.payload)
                })
                .collect::<Vec<_>>()
        });
        let mut async_follower = wal.follow(0).unwrap();
        let asyncs = std::thread::spawn(move || {
            block_on(async {
                let mut n = 0u64;
                while let Some(r) = async_follower.next_async().await {
                    n += 1;
                    assert_eq!(r.unwrap().lsn, n);
                }
                n
            })
        });
        for i in 2..=600u64 {
            let p = format!("r{i}:").repeat(if i % 40 == 0 { 500 } else { 60 });
            if i % 7 == 0 {
                let _ = wal.append_batch(&[(1, p.as_bytes())]).unwrap();
            } else {
                let _ = wal.append(0, p.as_bytes()).unwrap();
            }
            if i % 100 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        wal.sync().unwrap();
        assert!(wal.stats().rolls >= 2, "the follower crossed rolls");
        Arc::into_inner(wal).unwrap().close().unwrap();
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 600);
        for (i, (lsn, p)) in got.iter().enumerate() {
            let i = i as u64 + 1;
            assert_eq!(*lsn, i);
            assert!(p.starts_with(format!("r{i}:").as_bytes()));
        }
        assert_eq!(asyncs.join().unwrap(), 600);
    });
}

#[test]
fn a_checkpoint_that_overtakes_a_follower_ends_it_with_a_gap() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        let big = vec![b'x'; 6000];
        let _ = wal.append(0, &big).unwrap();
        let mut follower = wal.follow(0).unwrap();
        assert_eq!(follower.next().unwrap().unwrap().lsn, 1);
        for _ in 0..100 {
            let _ = wal.append(0, &big).unwrap();
        }
        let t = wal.append(0, b"end").unwrap();
        t.wait(Level::Durable).unwrap();
        assert!(wal.checkpoint(t.lsn() - 1).unwrap() > 0);
        assert!(wal.oldest_lsn() > 2);
        match follower.next() {
            Some(Err(Error::Released { lsn, .. })) => assert_eq!(lsn, 2),
            other => panic!("expected Released, got {other:?}"),
        }
        assert!(follower.next().is_none());
        wal.close().unwrap();
    });
}

/// A log whose newest segment is empty, reopened under a configuration
/// that starts a new segment at the first append (another torn window):
/// the new segment has the same base and replaces the empty one's file.
fn reopened_with_a_replaced_empty_segment(dir: &std::path::Path, backend: ringwal::Backend) -> Wal {
    let (wal, _) = Wal::open(dir, small(backend).max_inflight(4).build()).unwrap();
    wal.close().unwrap();
    Wal::open(dir, small(backend).max_inflight(8).build())
        .unwrap()
        .0
}

/// The records `rx` receives within 10 s each, up to `n`: a reader that
/// never yields fails the test instead of hanging it.
fn received(rx: &std::sync::mpsc::Receiver<Vec<u8>>, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map_while(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).ok())
        .collect()
}

#[test]
fn followers_waiting_in_a_replaced_empty_segment_see_what_follows() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let wal = Arc::new(reopened_with_a_replaced_empty_segment(dir.path(), backend));
        let (tx, rx) = std::sync::mpsc::channel();
        let mut follower = wal.follow(1).unwrap();
        let tx2 = tx.clone();
        let mine = std::thread::spawn(move || {
            for r in follower.by_ref() {
                let _ = tx2.send(r.unwrap().payload);
            }
        });
        let (dtx, drx) = std::sync::mpsc::channel();
        let every = std::time::Duration::from_millis(5);
        let outside = ringwal::verify::follow(
            dir.path(),
            &ringwal::Config::builder().node(1).build(),
            1,
            every,
        )
        .unwrap();
        std::thread::spawn(move || {
            for r in outside {
                if dtx.send(r.unwrap().payload).is_err() {
                    break;
                }
            }
        });
        // Both readers are at the end of the empty segment before the
        // first append replaces it.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let sent: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
        for p in &sent {
            wal.append(0, p).unwrap().wait(Level::Written).unwrap();
        }
        assert_eq!(received(&rx, 3), sent, "the log's own follower");
        assert_eq!(received(&drx, 3), sent, "the directory follower");
        Arc::into_inner(wal).unwrap().close().unwrap();
        drop(tx);
        mine.join().unwrap();
    });
}

#[test]
fn a_reader_ends_at_the_watermark_of_its_making() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        // An empty log.
        let empty = wal.reader_from(0).unwrap();
        wal.append(0, b"after")
            .unwrap()
            .wait(Level::Written)
            .unwrap();
        assert_eq!(empty.count(), 0, "a record appended after the reader");
        // At the end of a log with records, and at the base of a segment
        // just rolled to.
        let mut rolls = wal.stats().rolls;
        for _ in 0..2 {
            while wal.stats().rolls == rolls {
                wal.append(0, &[1u8; 1000])
                    .unwrap()
                    .wait(Level::Written)
                    .unwrap();
            }
            rolls = wal.stats().rolls;
            let at_end = wal.reader_from(wal.next_lsn()).unwrap();
            let next = wal.append(0, b"later").unwrap();
            next.wait(Level::Written).unwrap();
            assert_eq!(
                at_end.count(),
                0,
                "record {} is past the reader",
                next.lsn()
            );
        }
        wal.close().unwrap();
    });
}

/// A reader that has read all of the oldest segment, which a checkpoint
/// then releases and the writer recycles, reads on into the next segment:
/// the records it wants next are still kept, so this is no `Gap`. The
/// recycled file's new frames sit where the old walk would read next.
#[test]
fn a_reader_past_a_released_and_recycled_segment_reads_on() {
    for_each_backend(|backend| {
        for follow in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let cfg = ringwal::Config::builder()
                .backend(backend)
                .segment_bytes(64 << 10)
                .max_record_bytes(16 << 10)
                .build();
            let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
            let big = vec![b'b'; 9000];
            for _ in 0..8 {
                wal.append(0, &big).unwrap().wait(Level::Durable).unwrap();
            }
            let mut records: Box<dyn Iterator<Item = ringwal::Result<ringwal::Record>>> = if follow
            {
                Box::new(wal.follow(1).unwrap())
            } else {
                Box::new(wal.reader_from(1).unwrap())
            };
            for lsn in 1..=4 {
                assert_eq!(records.next().unwrap().unwrap().lsn, lsn);
            }
            assert_eq!(
                wal.checkpoint(4).unwrap(),
                1,
                "the first segment holds 1..=4"
            );
            let small = vec![b's'; 1000];
            for _ in 0..40 {
                wal.append(0, &small).unwrap().wait(Level::Durable).unwrap();
            }
            assert_eq!(wal.oldest_lsn(), 5);
            for lsn in 5..=8 {
                match records.next() {
                    Some(Ok(rec)) => assert_eq!(rec.lsn, lsn, "follow={follow}"),
                    other => panic!("follow={follow}: LSN {lsn} is kept, got {other:?}"),
                }
            }
            drop(records);
            wal.close().unwrap();
        }
    });
}
