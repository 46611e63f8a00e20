//! Atomic batches and transactions against real files, on both backends:
//! consecutive LSNs, one segment, whole or nothing, never interleaved with
//! other producers' records.

use std::sync::Arc;

use crate::common::{self, for_each_backend, read_all, segment_files, small, SEGMENT_BYTES};
use ringwal::{Backend, Error, Key, Level, StaticKeys, Wal};

fn tagged(tag: &str, i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("{tag}{i}:").into_bytes();
    p.resize(len.max(p.len()), b'.');
    p
}

#[test]
fn a_batch_gets_consecutive_lsns_and_reads_back_whole_after_reopen() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = small(backend).build();
        let (wal, _) = Wal::open(dir.path(), cfg.clone()).unwrap();
        let _ = wal.append(0, b"before").unwrap();
        let payloads: Vec<Vec<u8>> = (0..20).map(|i| tagged("b", i, 100 + i * 37)).collect();
        let recs: Vec<(u16, &[u8])> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u16 % 3, p.as_slice()))
            .collect();
        let t = wal.append_batch(&recs).unwrap();
        assert_eq!(t.lsn(), 21, "the ticket is the batch's last LSN");
        t.wait(Level::Durable).unwrap();
        assert!(wal.durable_lsn() >= 21);
        wal.close().unwrap();

        let (wal, rep) = Wal::open(dir.path(), cfg).unwrap();
        assert_eq!(rep.records, 21);
        let all = read_all(&wal);
        assert_eq!(all.len(), 21);
        for (i, r) in all[1..].iter().enumerate() {
            assert_eq!(r.lsn, 2 + i as u64);
            assert_eq!(r.stream, i as u16 % 3);
            assert_eq!(r.payload, payloads[i]);
        }
        wal.close().unwrap();
    });
}

#[test]
fn a_batch_that_does_not_fit_the_segment_opens_the_next_one() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        // Fill most of the first segment, then a batch of ~24 KiB.
        let filler = vec![b'f'; 4000];
        for _ in 0..12 {
            let _ = wal.append(0, &filler).unwrap();
        }
        let payloads: Vec<Vec<u8>> = (0..6).map(|i| tagged("b", i, 4000)).collect();
        let recs: Vec<(u16, &[u8])> = payloads.iter().map(|p| (1, p.as_slice())).collect();
        let t = wal.append_batch(&recs).unwrap();
        t.wait(Level::Durable).unwrap();
        let first = t.lsn() - 5;
        let segs = segment_files(dir.path(), 1);
        assert!(
            segs.iter().any(|(base, _)| *base == first),
            "the batch opens a segment named by its first LSN: {segs:?}"
        );
        wal.close().unwrap();
    });
}

#[test]
fn a_batch_larger_than_a_segment_or_empty_appends_nothing() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
        let _ = wal.append(0, b"x").unwrap();
        let big = vec![b'z'; 8 << 10];
        let recs: Vec<(u16, &[u8])> = (0..(SEGMENT_BYTES as usize / (8 << 10)))
            .map(|_| (0, big.as_slice()))
            .collect();
        match wal.append_batch(&recs) {
            Err(Error::TooLarge { len, max }) => assert!(len > max, "{len} > {max}"),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(matches!(wal.append_batch(&[]), Err(Error::EmptyBatch)));
        let over = vec![0u8; common::MAX_RECORD + 1];
        assert!(matches!(
            wal.append_batch(&[(0, b"ok"), (0, &over)]),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(wal.next_lsn(), 2, "no LSN was handed out");
        assert_eq!(wal.append(0, b"y").unwrap().lsn(), 2);
        wal.close().unwrap();
    });
}

#[test]
fn batches_larger_than_the_staging_buffers_are_never_interleaved() {
    // Sealed too: the cipher runs in each member's fill, after the lock.
    for sealed in [false, true] {
        for_each_backend(|backend| large_batches_stay_whole(backend, sealed));
    }
}

fn large_batches_stay_whole(backend: Backend, sealed: bool) {
    let dir = tempfile::tempdir().unwrap();
    // One write in flight and 4 KiB writes: a batch of 40 KiB needs
    // many more buffers than the pool has, and waits for the ring
    // while other producers keep appending.
    let mut cfg = small(backend)
        .max_inflight(1)
        .write_bytes(4096)
        .max_record_bytes(1024);
    if sealed {
        let keys = StaticKeys::new();
        keys.insert(1, Key::new([7; 32]), false);
        keys.set_current(Some(1));
        cfg = cfg.encryption(Arc::new(keys));
    }
    let cfg = cfg.build();
    let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
    let wal = Arc::new(wal);
    let singles: Vec<_> = (0..2)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let _ = wal.append(9, &tagged(&format!("s{t}-"), i, 64)).unwrap();
                }
            })
        })
        .collect();
    // Each member's bytes its own, so that a member filled into
    // another's claim (they are filled after the lock, some while the
    // batch waits for buffers) reads back wrong.
    let member = |b: usize, m: usize| tagged(&format!("b{b}-"), m, 1000);
    let mut batches = Vec::new();
    for b in 0..10 {
        let payloads: Vec<Vec<u8>> = (0..40).map(|m| member(b, m)).collect();
        let recs: Vec<(u16, &[u8])> = payloads.iter().map(|p| (1, p.as_slice())).collect();
        batches.push(wal.append_batch(&recs).unwrap().lsn());
    }
    for s in singles {
        s.join().unwrap();
    }
    wal.sync().unwrap();
    let all = read_all(&wal);
    assert_eq!(all.len(), 600 + 400);
    for (b, last) in batches.into_iter().enumerate() {
        for (m, lsn) in (last - 39..=last).enumerate() {
            let r = &all[lsn as usize - 1];
            assert_eq!((r.lsn, r.stream), (lsn, 1), "batch ending at {last}");
            assert_eq!(r.payload, member(b, m), "member {m} of batch {b}");
        }
    }
    Arc::into_inner(wal).unwrap().close().unwrap();
}

#[test]
fn a_committed_transaction_is_one_batch_and_an_aborted_one_writes_nothing() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = small(backend).build();
        let (wal, _) = Wal::open(dir.path(), cfg.clone()).unwrap();
        let mut aborted = wal.begin();
        aborted.append(0, b"never").unwrap();
        let mut tx = wal.begin();
        tx.append(1, b"one").unwrap();
        let _ = wal.append(0, b"between").unwrap();
        tx.append(2, b"two").unwrap();
        assert!(matches!(
            tx.append(2, &vec![0; common::MAX_RECORD + 1]),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(tx.len(), 2);
        aborted.abort();
        drop({
            let mut dropped = wal.begin();
            dropped.append(0, b"dropped").unwrap();
            dropped
        });
        assert_eq!(wal.next_lsn(), 2, "open transactions take no LSN");
        let t = tx.commit().unwrap();
        assert_eq!(t.lsn(), 3);
        t.wait(Level::Durable).unwrap();
        assert!(matches!(wal.begin().commit(), Err(Error::EmptyBatch)));
        wal.close().unwrap();

        let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
        let got: Vec<(u64, u16, Vec<u8>)> = read_all(&wal)
            .into_iter()
            .map(|r| (r.lsn, r.stream, r.payload.to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 0, b"between".to_vec()),
                (2, 1, b"one".to_vec()),
                (3, 2, b"two".to_vec()),
            ]
        );
        wal.close().unwrap();
    });
}
