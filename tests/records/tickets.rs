//! Tickets and producers: ticket futures on a hand-written executor (no
//! runtime), in durable and written mode, and many producers getting dense
//! LSNs in the order they were handed out. Every test runs against both
//! backends.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use crate::common::*;
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
    let (wal, _) = Wal::open(
        &log,
        small(backend).durability(durability_for(mode)).build(),
    )
    .unwrap();
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

// ---------------------------------------------------------------------------
// 3. The last handle dropped on the ring thread.

/// A task polled inline by its own waker, as hand-written executors do:
/// the ring thread, waking it, runs it to completion.
struct InlineTask {
    fut: std::sync::Mutex<Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>>,
}

impl std::task::Wake for InlineTask {
    fn wake(self: Arc<Self>) {
        let waker = std::task::Waker::from(self.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut slot = self.fut.lock().unwrap();
        if let Some(f) = slot.as_mut()
            && f.as_mut().poll(&mut cx).is_ready()
        {
            *slot = None;
        }
    }
}

/// When a waker owns the last `Arc<Wal>`, the log's `Drop` runs on the
/// ring thread, which cannot join itself. It must still drain: every
/// record appended reaches the disk, every ticket resolves, nothing
/// panics, and the writer lock is held until the drain is done.
#[test]
fn dropping_the_last_handle_on_the_ring_thread_still_drains() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), cfg(backend)).unwrap();
        let wal = Arc::new(wal);
        let first = wal.append(0, b"first").unwrap();
        let task = Arc::new(InlineTask {
            fut: std::sync::Mutex::new(None),
        });
        let owner = wal.clone();
        *task.fut.lock().unwrap() = Some(Box::pin(async move {
            first.reached(Level::Durable).await.unwrap();
            drop(owner); // the last handle, on whatever thread woke us
        }));
        // Poll once here: the future registers the task's waker, so the
        // ring thread is the one that completes it.
        std::task::Wake::wake_by_ref(&task);
        let tickets: Vec<_> = (0..2000)
            .map(|i| wal.append(0, format!("record {i}").as_bytes()).unwrap())
            .collect();
        drop(wal);
        // Waited for on another thread, so that a ring thread that died
        // (joining itself used to panic it) fails the test instead of
        // hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let all: Result<(), _> = tickets.iter().try_for_each(|t| t.wait(Level::Durable));
            let _ = tx.send(all);
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("every ticket resolves")
            .expect("every ticket reaches Durable");
        assert!(task.fut.lock().unwrap().is_none(), "the task ran");
        // The lock goes once the ring thread has finished its drain.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let (wal, report) = loop {
            match Wal::open(dir.path(), cfg(backend)) {
                Ok(x) => break x,
                Err(ringwal::Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("{backend:?}: reopen: {e}"),
            }
        };
        assert_eq!(report.records, 2001, "{backend:?}: {report:?}");
        wal.close().unwrap();
    });
}

/// A waker that panics when the ring thread wakes it: a bug in the
/// caller's executor, run on the log's thread.
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics");
    }
}

/// A panic on the ring thread poisons the log like a failed write: every
/// waiter is answered (none hangs), later appends are refused, and
/// `close` reports the failure instead of `Ok`.
#[test]
fn a_panic_on_the_ring_thread_poisons_the_log() {
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), cfg(backend)).unwrap();
        let first = wal.append(0, b"first").unwrap();
        let mut fut = Box::pin(first.reached(Level::Durable));
        let waker = std::task::Waker::from(Arc::new(PanickingWaker));
        let mut cx = std::task::Context::from_waker(&waker);
        // Registered before the write can land (a durable write takes a
        // device round trip): the ring thread is the one to wake it.
        if fut.as_mut().poll(&mut cx).is_ready() {
            eprintln!("{backend:?}: the record was durable before the poll; nothing to test");
            wal.close().unwrap();
            return;
        }
        let later = wal.append(0, b"later").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(later.wait(Level::Durable));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a waiter behind the panic is answered");
        // The later record may have landed with the first; if not, the
        // poison answers it.
        if got.is_err() {
            assert!(
                matches!(got, Err(ringwal::Error::Poisoned { .. })),
                "{got:?}"
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !matches!(wal.append(0, b"x"), Err(ringwal::Error::Poisoned { .. })) {
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: never poisoned"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        match wal.close() {
            Err(ringwal::Error::Poisoned { cause }) => {
                assert!(cause.to_string().contains("panicked"), "{cause}")
            }
            other => panic!("{backend:?}: close after a panic: {other:?}"),
        }
    });
}
