//! `Wal::follow`: a tailing reader gets every record exactly once, in
//! order, while a producer appends across rolls; it ends at close, and
//! with `Gap` when a checkpoint overtakes it.

mod common;

use std::sync::Arc;

use common::{block_on, for_each_backend, small};
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
            Some(Err(Error::Gap { expected, .. })) => assert_eq!(expected, 2),
            other => panic!("expected Gap, got {other:?}"),
        }
        assert!(follower.next().is_none());
        wal.close().unwrap();
    });
}
