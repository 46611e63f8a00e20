//! The blocking calls for async callers (feature `tokio`): open, close,
//! read, checkpoint and a collector's truncate on tokio's blocking pool,
//! with the same results and errors as their blocking twins, on both
//! runtime flavours, and a close that waits for the disk while another
//! task on the one runtime thread keeps running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{opening_logs, small, RingGate};
use ringwal::{Backend, Collector, Error, Level, Wal, Watermarks};
use tokio::runtime::Runtime;

fn runtimes() -> [(&'static str, Runtime); 2] {
    [
        (
            "current-thread",
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
        ),
        (
            "multi-thread",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .build()
                .unwrap(),
        ),
    ]
}

#[test]
fn open_read_checkpoint_and_close_answer_as_their_blocking_twins() {
    let _logs = opening_logs();
    for (flavour, rt) in runtimes() {
        eprintln!("--- {flavour}");
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("wal");
        let cfg = || small(Backend::Auto).build();
        rt.block_on(async {
            let (wal, report) = Wal::open_async(&dir, cfg()).await.unwrap();
            assert!(report.created);
            let mut last = None;
            for i in 0..100u32 {
                let body = format!("{i:>4}").repeat(500);
                last = Some(wal.append_async(0, body.as_bytes()).await.unwrap());
            }
            let last = last.unwrap();
            last.reached(Level::Durable).await.unwrap();
            let rec = wal.read_async(40).await.unwrap();
            assert_eq!(rec.payload, wal.read(40).unwrap().payload);
            assert!(rec.payload.starts_with(b"  39"));
            assert!(matches!(
                wal.read_async(last.lsn() + 1).await,
                Err(Error::NotWritten { .. })
            ));
            let removed = wal.checkpoint_async(60).await.unwrap();
            assert!(removed > 0, "{flavour}: whole segments under 60 removed");
            assert!(matches!(
                wal.read_async(1).await,
                Err(Error::Released { .. })
            ));
            assert!(wal.oldest_lsn() <= 61);
            wal.close_async().await.unwrap();
            let (wal, report) = Wal::open_async(&dir, cfg()).await.unwrap();
            assert_eq!(wal.next_lsn(), last.lsn() + 1);
            assert_eq!(report.records, last.lsn() + 1 - wal.oldest_lsn());
            // A second writer is refused as by `open`.
            assert!(matches!(
                Wal::open_async(&dir, cfg()).await,
                Err(Error::Locked { .. })
            ));
            wal.close_async().await.unwrap();
        });
    }
}

#[test]
fn a_collector_truncates_on_the_pool_what_its_blocks_cover() {
    let _logs = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let (wal, _) = Wal::open_async(root.path(), small(Backend::Auto).build())
            .await
            .unwrap();
        let collector = Collector::open(wal, &[1], &Watermarks::new()).unwrap();
        let mut lsns = Vec::new();
        for _ in 0..60 {
            let t = collector.append(1, &[7; 4000]).unwrap();
            lsns.push(t.lsn());
        }
        collector.wal().sync_async().await.unwrap();
        // Nothing published yet: nothing is covered, nothing removed.
        assert_eq!(collector.truncate_async(lsns[40]).await.unwrap(), 0);
        collector.published(1, &lsns[..40]);
        let removed = collector.truncate_async(lsns[40]).await.unwrap();
        assert!(removed > 0);
        assert!(collector.wal().oldest_lsn() <= lsns[40]);
        collector.close_async().await.unwrap();
    });
}

/// Holds the ring thread while closed (a test device: an observer must
/// not block), so that a close, which waits for the ring's drain, takes
/// as long as the test wants.

#[test]
fn a_close_waiting_for_the_disk_leaves_the_runtime_thread_free() {
    let _logs = opening_logs();
    let (flavour, rt) = runtimes().into_iter().next().unwrap();
    let root = tempfile::tempdir().unwrap();
    let gate = Arc::new(RingGate::default());
    let cfg = small(Backend::Auto).observer(gate.clone()).build();
    let (wal, _) = Wal::open(root.path(), cfg).unwrap();
    gate.set(true);
    drop(wal.append(0, b"held").unwrap());
    gate.wait_until_held();
    let deadline = Instant::now() + Duration::from_secs(60);
    let progress = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let driver = {
        let (progress, closed) = (progress.clone(), closed.clone());
        std::thread::spawn(move || {
            rt.block_on(async move {
                let stop = Arc::new(AtomicBool::new(false));
                let other = tokio::spawn({
                    let stop = stop.clone();
                    async move {
                        while !stop.load(Ordering::SeqCst) {
                            progress.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                        }
                    }
                });
                let result = wal.close_async().await;
                closed.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
                other.await.unwrap();
                result
            })
        })
    };
    while progress.load(Ordering::SeqCst) < 10_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let progressed = progress.load(Ordering::SeqCst) >= 10_000;
    let waited = !closed.load(Ordering::SeqCst);
    gate.set(false);
    driver.join().unwrap().unwrap();
    assert!(
        progressed,
        "{flavour}: the close blocked the runtime's thread"
    );
    assert!(waited, "the close finished while the ring was held");
    let (wal, report) = Wal::open(root.path(), small(Backend::Auto).build()).unwrap();
    assert_eq!(report.records, 1, "the close drained the record");
    wal.close().unwrap();
}
