//! For async callers: `try_append` refuses instead of blocking an
//! executor thread when the staging buffers are full, `append_async`
//! awaits space instead, `sync_async` awaits durability, and a `Follower`
//! is a `Stream` — all on real files and real tokio runtimes of both
//! flavours.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::common::{self, *};
use futures::{StreamExt, TryStreamExt};
use futures_core::Stream;
use ringwal::{Backend, Collector, ConfigBuilder, Durability, Error, Level, Lsn, Wal, Watermarks};
use tokio::runtime::Runtime;

#[test]
fn try_append_refuses_when_full_and_takes_no_lsn() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        // Three small staging buffers and one write in flight: a producer
        // that never waits fills them long before the device empties one.
        let cfg = small(backend)
            .max_inflight(1)
            .write_bytes(4096)
            .max_record_bytes(1024)
            .build();
        let (wal, _) = Wal::open(root.path(), cfg).unwrap();
        let mut appended = Vec::new();
        let mut refused = 0;
        while refused == 0 || appended.len() < 500 {
            let payload = format!("{:>900}", appended.len()).into_bytes();
            match wal.try_append(0, &payload) {
                Ok(t) => appended.push((t, payload)),
                Err(Error::Full) => {
                    refused += 1;
                    // What an async task would do: let the device catch up.
                    if let Some((t, _)) = appended.last() {
                        t.wait(Level::Written).unwrap();
                    }
                }
                Err(e) => panic!("{backend:?}: {e}"),
            }
        }
        assert!(refused > 0, "{backend:?}: the buffers never filled");
        // A refusal took no LSN: the appended records are dense.
        for (i, (t, _)) in appended.iter().enumerate() {
            assert_eq!(t.lsn(), i as u64 + 1, "{backend:?}");
        }
        wal.sync().unwrap();
        let recs = read_all(&wal);
        assert_eq!(recs.len(), appended.len());
        for (r, (_, p)) in recs.iter().zip(&appended) {
            assert_eq!(&r.payload, p);
        }
        wal.close().unwrap();
    });
}

#[test]
fn sync_async_resolves_once_everything_appended_is_durable() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        // Written mode: durability needs the fdatasync sync_async asks for.
        let cfg = small(backend)
            .durability(Durability::Deferred {
                sync_interval: None,
            })
            .build();
        let (wal, _) = Wal::open(root.path(), cfg).unwrap();
        let tickets: Vec<_> = (0..100u32)
            .map(|i| wal.append(0, &i.to_le_bytes()).unwrap())
            .collect();
        rt.block_on(wal.sync_async()).unwrap();
        assert!(tickets.iter().all(|t| t.is_done(Level::Durable)));
        assert!(wal.stats().syncs > 0, "{backend:?}");
        assert_eq!(wal.durable_lsn(), 100);
        wal.close().unwrap();
    });
}

/// Small staging buffers (three of 4 KiB) that a few records fill.
fn tiny_buffers(backend: Backend) -> ConfigBuilder {
    small(backend)
        .max_inflight(1)
        .write_bytes(4096)
        .max_record_bytes(1024)
}

/// Hold the ring thread and fill every staging buffer: the next append
/// is refused with `Full` until the gate opens. Returns the last LSN
/// appended.
fn fill_staging(wal: &Wal, gate: &RingGate) -> Lsn {
    gate.set(true);
    let first = wal.try_append(0, b"first").unwrap();
    gate.wait_until_held();
    let mut last = first.lsn();
    loop {
        match wal.try_append(0, &[b'f'; 900]) {
            Ok(t) => last = t.lsn(),
            Err(Error::Full) => return last,
            Err(e) => panic!("filling the buffers: {e}"),
        }
    }
}

/// A future that counts its polls.
struct Counted<F>(Arc<AtomicUsize>, F);

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut self.1).poll(cx)
    }
}

/// A runtime flavour's name and how to build it.
type Flavour = (&'static str, fn() -> Runtime);

/// The two runtime flavours the async tests run on. The multi-threaded
/// one has a single worker, so a task that blocked it would stop every
/// other task too.
fn runtimes() -> [Flavour; 2] {
    [
        ("current-thread", || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
        }),
        ("multi-thread", || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .build()
                .unwrap()
        }),
    ]
}

#[test]
fn append_async_awaits_space_without_blocking_the_runtime_and_completes_once_it_frees() {
    for (flavour, runtime) in runtimes() {
        for_each_backend(|backend| {
            eprintln!("--- {flavour}");
            let root = tempfile::tempdir().unwrap();
            let gate = Arc::new(RingGate::default());
            let cfg = tiny_buffers(backend).observer(gate.clone()).build();
            let (wal, _) = Wal::open(root.path(), cfg).unwrap();
            let wal = Arc::new(wal);
            let filled = fill_staging(&wal, &gate);
            let progress = Arc::new(AtomicU64::new(0));
            let polls = Arc::new(AtomicUsize::new(0));
            let appended = Arc::new(AtomicBool::new(false));
            let rt = runtime();
            let driver = {
                let (wal, progress, polls, appended) = (
                    wal.clone(),
                    progress.clone(),
                    polls.clone(),
                    appended.clone(),
                );
                std::thread::spawn(move || {
                    rt.block_on(async move {
                        let stop = Arc::new(AtomicBool::new(false));
                        // Another task on the same runtime: it advances only
                        // while the runtime's thread is free.
                        let other = tokio::spawn({
                            let (progress, stop) = (progress.clone(), stop.clone());
                            async move {
                                while !stop.load(Ordering::SeqCst) {
                                    progress.fetch_add(1, Ordering::SeqCst);
                                    tokio::task::yield_now().await;
                                }
                            }
                        });
                        let append = tokio::spawn(async move {
                            let t =
                                Counted(polls, wal.append_async(2, b"waited for space")).await?;
                            appended.store(true, Ordering::SeqCst);
                            t.reached(Level::Written).await?;
                            Ok::<_, Error>(t.lsn())
                        });
                        let lsn = append.await.unwrap();
                        stop.store(true, Ordering::SeqCst);
                        other.await.unwrap();
                        lsn
                    })
                })
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while progress.load(Ordering::SeqCst) < 10_000 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let progressed = progress.load(Ordering::SeqCst) >= 10_000;
            let waited = !appended.load(Ordering::SeqCst);
            let polled = polls.load(Ordering::SeqCst);
            // Free the buffers whatever happened, so a failure still ends.
            gate.set(false);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !driver.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                driver.is_finished(),
                "the append was never woken once space freed"
            );
            let lsn = driver.join().unwrap().unwrap();
            assert!(
                progressed,
                "the waiting append blocked the runtime's thread"
            );
            assert!(waited, "the append went through while no buffer was free");
            assert_eq!(polled, 1, "polled again only once woken: no busy polling");
            assert!(polls.load(Ordering::SeqCst) >= 2, "woken when space freed");
            assert_eq!(lsn, filled + 1, "the next LSN, taken only once it fit");
            let rec = wal.read(lsn).unwrap();
            assert_eq!(
                (rec.stream, rec.payload.as_slice()),
                (2, &b"waited for space"[..])
            );
            assert!(wal.stats().backpressure_waits >= 1);
            Arc::into_inner(wal).unwrap().close().unwrap();
        });
    }
}

#[test]
fn many_async_appenders_under_backpressure_get_dense_lsns_and_every_record_back() {
    for (flavour, _) in runtimes() {
        for_each_backend(|backend| {
            eprintln!("--- {flavour}");
            let root = tempfile::tempdir().unwrap();
            let (wal, _) = Wal::open(root.path(), tiny_buffers(backend).build()).unwrap();
            let wal = Arc::new(wal);
            let rt = match flavour {
                "current-thread" => tokio::runtime::Builder::new_current_thread().build(),
                _ => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .build(),
            }
            .unwrap();
            let mut sent: Vec<(Lsn, Vec<u8>)> = rt.block_on(async {
                let tasks: Vec<_> = (0..16u16)
                    .map(|task| {
                        let wal = wal.clone();
                        tokio::spawn(async move {
                            let mut mine = Vec::new();
                            for i in 0..40 {
                                let body = format!("{task}:{i}:{}", "x".repeat(800)).into_bytes();
                                let t = wal.append_async(task, &body).await?;
                                mine.push((t.lsn(), body));
                            }
                            Ok::<_, Error>(mine)
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for t in tasks {
                    all.extend(t.await.unwrap().unwrap());
                }
                all
            });
            wal.sync().unwrap();
            sent.sort();
            let lsns: Vec<Lsn> = sent.iter().map(|(l, _)| *l).collect();
            assert_eq!(lsns, (1..=16 * 40).collect::<Vec<_>>(), "dense, none twice");
            let back = read_all(&wal);
            assert_eq!(back.len(), sent.len());
            for (r, (lsn, body)) in back.iter().zip(&sent) {
                assert_eq!((&r.lsn, &r.payload), (lsn, body));
            }
            assert!(
                wal.stats().backpressure_waits > 0,
                "{flavour}: the buffers never filled"
            );
            Arc::into_inner(wal).unwrap().close().unwrap();
        });
    }
}

#[test]
fn a_follower_is_a_stream_in_lsn_order_that_ends_at_close() {
    for (flavour, runtime) in runtimes() {
        for_each_backend(|backend| {
            eprintln!("--- {flavour}");
            let root = tempfile::tempdir().unwrap();
            let (wal, _) = Wal::open(root.path(), small(backend).build()).unwrap();
            let wal = Arc::new(wal);
            let rt = runtime();
            let follower = wal.follow(1).unwrap();
            let got: Vec<(Lsn, Vec<u8>)> = rt.block_on(async {
                let producer = tokio::spawn({
                    let wal = wal.clone();
                    async move {
                        for i in 1..=300u64 {
                            let body =
                                format!("r{i}:").repeat(if i % 30 == 0 { 1000 } else { 100 });
                            drop(wal.append_async(0, body.as_bytes()).await?);
                            if i % 50 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        Ok::<_, Error>(())
                    }
                });
                // Both an Iterator and a Stream: the trait is named.
                let got = StreamExt::map(follower, |r| r.map(|r| (r.lsn, r.payload)))
                    .take(300)
                    .try_collect()
                    .await
                    .unwrap();
                producer.await.unwrap().unwrap();
                got
            });
            assert!(wal.stats().rolls >= 2, "the stream crossed rolls");
            for (i, (lsn, p)) in got.iter().enumerate() {
                let i = i as u64 + 1;
                assert_eq!(*lsn, i);
                assert!(p.starts_with(format!("r{i}:").as_bytes()));
            }
            // Waiting at the end of the log, the stream ends when it closes.
            let mut tail = wal.follow(301).unwrap();
            let ended = std::thread::spawn(move || runtime().block_on(StreamExt::next(&mut tail)));
            // Most likely waiting by now; ended by the close either way.
            std::thread::sleep(Duration::from_millis(20));
            Arc::into_inner(wal).unwrap().close().unwrap();
            assert!(ended.join().unwrap().is_none(), "closed: the end");
        });
    }
}

#[test]
fn a_follower_stream_ends_with_the_iterators_gap() {
    for (flavour, runtime) in runtimes() {
        for_each_backend(|backend| {
            eprintln!("--- {flavour}");
            let dir = tempfile::tempdir().unwrap();
            let (wal, _) = Wal::open(dir.path(), small(backend).build()).unwrap();
            let big = vec![b'x'; 6000];
            let _ = wal.append(0, &big).unwrap();
            let mut follower = wal.follow(0).unwrap();
            let rt = runtime();
            let first = rt
                .block_on(StreamExt::next(&mut follower))
                .unwrap()
                .unwrap();
            assert_eq!(first.lsn, 1);
            for _ in 0..100 {
                let _ = wal.append(0, &big).unwrap();
            }
            let t = wal.append(0, b"end").unwrap();
            t.wait(Level::Durable).unwrap();
            assert!(wal.checkpoint(t.lsn() - 1).unwrap() > 0);
            let rest: Vec<_> = rt.block_on(StreamExt::collect::<Vec<_>>(follower));
            match rest.as_slice() {
                [Err(Error::Released { lsn: 2, .. })] => {}
                other => panic!("expected one Released, got {other:?}"),
            }
            wal.close().unwrap();
        });
    }
}

#[test]
fn a_stream_poll_and_a_blocking_next_share_one_wait() {
    let _logs = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    let mut follower = wal.follow(1).unwrap();
    // Polled with nothing there: one waker in the log, then the thread's
    // own wait takes over.
    let mut cx = Context::from_waker(Waker::noop());
    assert!(Pin::new(&mut follower).poll_next(&mut cx).is_pending());
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            drop(wal.append(0, b"one").unwrap());
        });
        let rec = Iterator::next(&mut follower).unwrap().unwrap();
        assert_eq!((rec.lsn, rec.payload.as_slice()), (1, &b"one"[..]));
    });
    drop(wal.append(0, b"two").unwrap());
    let rec = common::block_on(follower.next_async()).unwrap().unwrap();
    assert_eq!(rec.lsn, 2);
    wal.close().unwrap();
}

#[test]
fn collector_appends_await_space_and_track_in_lsn_order() {
    let _logs = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), tiny_buffers(Backend::Auto).build()).unwrap();
    let collector = Arc::new(Collector::open(wal, &[1], &Watermarks::new()).unwrap());
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..8u16)
            .map(|task| {
                let (collector, hooked) = (collector.clone(), hooked.clone());
                tokio::spawn(async move {
                    for i in 0..30 {
                        let stream = 1 + task % 2; // 1 tracked, 2 not
                        let body = format!("{task}:{i}:{}", "y".repeat(700)).into_bytes();
                        let hook = |lsn| hooked.lock().unwrap().push(lsn);
                        drop(collector.append_then_async(stream, &body, hook).await?);
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    });
    let hooked = hooked.lock().unwrap().clone();
    assert_eq!(
        hooked,
        (1..=240).collect::<Vec<Lsn>>(),
        "once each, in LSN order"
    );
    assert_eq!(collector.pending(1), 120, "the tracked stream's records");
    assert_eq!(collector.pending(2), 0);
    assert!(
        collector.wal().stats().backpressure_waits > 0,
        "some appends waited"
    );
    Arc::into_inner(collector).unwrap().close().unwrap();
}
