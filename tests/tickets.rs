//! Tickets and producers: ticket futures on a hand-written executor (no
//! runtime), in durable and written mode, and many producers getting dense
//! LSNs in the order they were handed out. Every test runs against both
//! backends.

mod common;

use std::collections::BTreeSet;

use common::*;
use ringwal::{Backend, Level, Wal};

// ---------------------------------------------------------------------------
// 1. Ticket futures on a hand-written executor.

#[test]
fn ticket_futures_resolve_without_a_runtime() {
    for_each_backend(|backend| futures_case(backend, Level::Durable));
}

/// The same in written mode, where waiting for `Durable` asks the ring for
/// an fdatasync.
#[test]
fn ticket_futures_resolve_in_written_mode() {
    for_each_backend(|backend| futures_case(backend, Level::Written));
}

fn futures_case(backend: Backend, mode: Level) {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let (wal, _) = Wal::open(&log, small(backend).default_level(mode).build()).unwrap();
    // Many appends without waiting, so the last one's write is very likely
    // still in flight when its future is first polled.
    let tickets: Vec<_> = (0..300u32)
        .map(|i| wal.append(0, format!("fut-{i}").as_bytes()).unwrap())
        .collect();
    let last = tickets.last().unwrap();
    block_on(last.reached(Level::Durable)).expect("durable");
    assert!(wal.durable_lsn() >= last.lsn(), "{mode:?}");
    for t in &tickets {
        assert!(t.is_done(Level::Durable), "{mode:?}: LSN {}", t.lsn());
        block_on(t.reached(Level::Written)).unwrap();
        block_on(t.reached(Level::Accepted)).unwrap();
        block_on(t.reached(Level::Durable)).unwrap();
    }
    let t = wal.append(0, b"one more").unwrap();
    block_on(t.reached(Level::Written)).unwrap();
    block_on(t.reached(Level::Durable)).unwrap();
    // A future on another thread, for that thread's own append.
    let lsn = std::thread::scope(|s| {
        s.spawn(|| {
            let t = wal.append(7, b"from another thread").unwrap();
            block_on(t.reached(Level::Durable)).unwrap();
            t.lsn()
        })
        .join()
        .unwrap()
    });
    assert_eq!(lsn, 302);
    assert!(wal.durable_lsn() >= 302);
    wal.close().unwrap();
    let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
    assert_eq!(
        report.records, 302,
        "{mode:?}: every resolved record is on disk"
    );
    let recs = read_all(&wal);
    assert_eq!(recs[299].payload, b"fut-299");
    assert_eq!(
        (recs[301].stream, &recs[301].payload[..]),
        (7, &b"from another thread"[..])
    );
    wal.close().unwrap();
}

// ---------------------------------------------------------------------------
// 2. Many producers.

#[test]
fn many_producers_get_dense_ordered_lsns() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 2000;
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let wal = &wal;
                    s.spawn(move || {
                        let mut lsns = Vec::with_capacity(PER_THREAD);
                        let mut last = None;
                        for i in 0..PER_THREAD {
                            let p = producer_payload(t, i);
                            last =
                                Some(wal.append_then(t as u16, &p, |lsn| lsns.push(lsn)).unwrap());
                        }
                        last.unwrap().wait(Level::Durable).unwrap();
                        lsns
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total = (THREADS * PER_THREAD) as u64;
        let mut by_lsn = vec![None; total as usize];
        for (t, lsns) in per_thread.iter().enumerate() {
            assert_eq!(lsns.len(), PER_THREAD);
            assert!(
                lsns.windows(2).all(|w| w[0] < w[1]),
                "thread {t}: hook LSNs ascending"
            );
            for (i, &lsn) in lsns.iter().enumerate() {
                assert!((1..=total).contains(&lsn), "LSN {lsn} out of range");
                let slot = &mut by_lsn[lsn as usize - 1];
                assert!(slot.is_none(), "LSN {lsn} handed out twice");
                *slot = Some((t, i));
            }
        }
        let unique: BTreeSet<u64> = per_thread.iter().flatten().copied().collect();
        assert_eq!(
            unique.len() as u64,
            total,
            "all LSNs 1..={total} exactly once"
        );
        wal.sync().unwrap();
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        assert_eq!(report.records, total);
        let recs = read_all(&wal);
        assert_eq!(recs.len() as u64, total);
        for (k, r) in recs.iter().enumerate() {
            assert_eq!(r.lsn, k as u64 + 1);
            let (t, i) = by_lsn[k].unwrap();
            assert_eq!(r.stream, t as u16, "LSN {}", r.lsn);
            assert_eq!(r.payload, producer_payload(t, i), "LSN {}", r.lsn);
        }
        wal.close().unwrap();
    });
}

fn producer_payload(thread: usize, i: usize) -> Vec<u8> {
    let mut p = format!("producer-{thread}-{i}-").into_bytes();
    p.resize(p.len() + (i * 7 + thread * 13) % 200, b'a' + (thread as u8));
    p
}
