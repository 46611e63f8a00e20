//! The channel API on a real log: acknowledgements in send (and LSN) order
//! per sender at the requested level, errors in their place, `Full`
//! without blocking, `select!` beside a collector's own inputs, the
//! collector's tracking through it, and async senders whose waits and
//! acknowledgements never block a runtime's thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::common;
use crossbeam_channel::select;
use futures::StreamExt;
use ringwal::channel::{AckResult, AppendLog, Channels, SendError, TrySendError};
use ringwal::{Collector, Config, Durability, Level, Lsn, Ticket, Wal, Watermarks};

fn cfg() -> Config {
    Config::builder()
        .segment_bytes(256 << 10)
        .max_record_bytes(16 << 10)
        .durability(Durability::Deferred {
            sync_interval: Some(Duration::from_millis(20)),
        })
        .build()
}

/// Whether `done` holds within a minute, checked every millisecond (a
/// liveness guard, not a performance bound).
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}

/// Receive `n` results, failing the test if the channel closes or stalls
/// (a liveness guard, not a performance bound).
fn take(rx: &crossbeam_channel::Receiver<AckResult>, n: usize) -> Vec<AckResult> {
    take_what(rx, n, "")
}

fn take_what(rx: &crossbeam_channel::Receiver<AckResult>, n: usize, what: &str) -> Vec<AckResult> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("{what}acknowledgement {i} of {n} never came: {e}"))
        })
        .collect()
}

#[test]
fn acks_arrive_in_order_at_each_senders_level() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let wal = Arc::new(wal);
    let channels = Channels::spawn(wal.clone(), 64);
    std::thread::scope(|s| {
        for (k, level) in [
            Level::Accepted,
            Level::Written,
            Level::Durable,
            Level::Written,
        ]
        .into_iter()
        .enumerate()
        {
            let (tx, rx) = channels.sender(level);
            let wal = &wal;
            s.spawn(move || {
                let n = 500u64;
                let feeder = std::thread::spawn(move || {
                    for i in 0..n {
                        let body = format!("sender{k}-{i}").repeat(1 + (i % 9) as usize);
                        tx.send(k as u16, body.into_bytes(), i).unwrap();
                    }
                });
                let mut last: Lsn = 0;
                for (i, r) in take_what(&rx, n as usize, &format!("{level:?}: "))
                    .into_iter()
                    .enumerate()
                {
                    let ack = r.expect("no record fails here");
                    assert_eq!(ack.token, i as u64, "acks out of send order");
                    assert_eq!(ack.level, level);
                    assert!(ack.lsn > last, "LSNs must ascend per sender");
                    last = ack.lsn;
                    match level {
                        Level::Written => assert!(wal.written_lsn() >= ack.lsn),
                        Level::Durable => assert!(wal.durable_lsn() >= ack.lsn),
                        Level::Accepted => assert!(wal.next_lsn() > ack.lsn),
                    }
                }
                feeder.join().unwrap();
            });
        }
    });
    channels.close().unwrap();
    // Accepted acks come before the write: sync so the reader sees all.
    wal.sync().unwrap();
    let records = common::read_all(&wal);
    assert_eq!(records.len(), 2000);
    Arc::into_inner(wal).unwrap().close().unwrap();
}

#[test]
fn a_failed_record_is_answered_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let channels = Channels::spawn(Arc::new(wal), 16);
    let (tx, rx) = channels.sender(Level::Written);
    tx.send(0, b"one".to_vec(), 1).unwrap();
    tx.send(0, vec![0u8; 64 << 10], 2).unwrap(); // over max_record_bytes
    tx.send(0, b"three".to_vec(), 3).unwrap();
    let got = take(&rx, 3);
    assert!(matches!(&got[0], Ok(a) if a.token == 1));
    match &got[1] {
        Err(nack) => {
            assert_eq!(nack.token, 2);
            assert!(
                matches!(nack.error, ringwal::Error::TooLarge { .. }),
                "{:?}",
                nack.error
            );
        }
        other => panic!("expected a TooLarge nack, got {other:?}"),
    }
    assert!(matches!(&got[2], Ok(a) if a.token == 3));
    drop(tx);
    channels.close().unwrap();
}

/// A real log behind a gate the test holds, so the appender thread stalls
/// exactly as it would behind a slow device.
struct Gated {
    wal: Wal,
    gate: Mutex<()>,
    /// Appends that reached the gate.
    entered: AtomicUsize,
}

impl AppendLog for Gated {
    fn append_record(&self, stream: u16, payload: &[u8]) -> ringwal::Result<Ticket> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _open = self.gate.lock().unwrap();
        self.wal.append(stream, payload)
    }
}

#[test]
fn a_full_queue_is_an_immediate_error_or_a_wait_as_the_caller_chooses() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let log = Arc::new(Gated {
        wal,
        gate: Mutex::new(()),
        entered: AtomicUsize::new(0),
    });
    let channels = Channels::spawn(log.clone(), 4);
    let (tx, rx) = channels.sender(Level::Written);
    let closed = log.gate.lock().unwrap();
    // The appender takes one record and stalls on the gate...
    tx.try_send(1, b"r0".to_vec(), 0).unwrap();
    for _ in 0..60_000 {
        if log.entered.load(Ordering::SeqCst) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        log.entered.load(Ordering::SeqCst),
        1,
        "the appender never took a record"
    );
    // ...the queue takes four more, and the fifth is Full at once.
    for i in 1..=4u64 {
        tx.try_send(1, format!("r{i}").into_bytes(), i).unwrap();
    }
    let queued = 5u64;
    let full = tx.try_send(1, b"r5".to_vec(), 5).unwrap_err();
    assert_eq!(
        full,
        TrySendError::Full {
            token: 5,
            payload: b"r5".to_vec()
        }
    );
    // A blocking send waits for room, then goes through.
    let blocked = std::thread::scope(|s| {
        let h = s.spawn(|| tx.send(1, b"late".to_vec(), 99));
        std::thread::sleep(Duration::from_millis(50));
        let still_waiting = !h.is_finished();
        drop(closed);
        h.join().unwrap().unwrap();
        still_waiting
    });
    assert!(blocked, "send returned while the queue was full");
    let got = take(&rx, queued as usize + 1);
    let tokens: Vec<u64> = got.iter().map(|r| r.as_ref().unwrap().token).collect();
    let mut want: Vec<u64> = (0..queued).collect();
    want.push(99);
    assert_eq!(tokens, want);
    drop(tx);
    channels.close().unwrap();
}

/// Async senders on a real runtime: `send_async` waits for room in a full
/// queue by awaiting (another task on the one thread keeps running, and
/// the waiting send is not polled again until woken), and the
/// acknowledgements arrive on a `Stream` in send order, then end.
#[test]
fn async_senders_await_room_and_their_acks_arrive_as_a_stream() {
    for flavour in ["current-thread", "multi-thread"] {
        eprintln!("--- {flavour}");
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
        let log = Arc::new(Gated {
            wal,
            gate: Mutex::new(()),
            entered: AtomicUsize::new(0),
        });
        let channels = Channels::spawn(log.clone(), 2);
        let (tx, acks) = channels.async_sender(Level::Written);
        let closed = log.gate.lock().unwrap();
        // One record held by the appender at the gate, two in the queue:
        // the next send has to wait.
        tx.try_send(0, b"r0".to_vec(), 0).unwrap();
        while log.entered.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        tx.try_send(0, b"r1".to_vec(), 1).unwrap();
        tx.try_send(0, b"r2".to_vec(), 2).unwrap();
        assert!(matches!(
            tx.try_send(0, b"r3".to_vec(), 3),
            Err(TrySendError::Full { .. })
        ));
        let progress = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicUsize::new(0));
        let polls = Arc::new(AtomicUsize::new(0));
        let rt = match flavour {
            "current-thread" => tokio::runtime::Builder::new_current_thread().build(),
            // One worker: a send that blocked it would stop the other task.
            _ => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .build(),
        }
        .unwrap();
        let driver = {
            let (progress, sent, polls) = (progress.clone(), sent.clone(), polls.clone());
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
                    let senders = tokio::spawn(async move {
                        for token in 3..10u64 {
                            let body = format!("r{token}").into_bytes();
                            let send = tx.send_async(0, body, token);
                            PollCount(polls.clone(), send).await.unwrap();
                            sent.fetch_add(1, Ordering::SeqCst);
                        }
                        // Dropping the sender ends the stream once all is answered.
                    });
                    let got: Vec<AckResult> = acks.collect().await;
                    senders.await.unwrap();
                    stop.store(true, Ordering::SeqCst);
                    other.await.unwrap();
                    got
                })
            })
        };
        // The runtime promises no order between the two tasks: on the
        // multi-thread flavour `other` can run for a whole time slice
        // before `block_on`'s thread even spawns the senders. So the
        // steps that count are those taken after the send's first poll,
        // which finds the queue full and has to leave a waker.
        assert!(
            eventually(|| polls.load(Ordering::SeqCst) >= 1),
            "{flavour}: the send was never polled"
        );
        let before = progress.load(Ordering::SeqCst);
        let progressed = eventually(|| progress.load(Ordering::SeqCst) >= before + 10_000);
        let (waiting, polled) = (
            sent.load(Ordering::SeqCst) == 0,
            polls.load(Ordering::SeqCst),
        );
        drop(closed);
        // A lost wake-up leaves the send waiting with room in the queue:
        // fail on it instead of hanging in the join.
        let finished = eventually(|| driver.is_finished());
        assert!(
            progressed,
            "{flavour}: the waiting send blocked the runtime's thread"
        );
        assert!(waiting, "{flavour}: a send went through a full queue");
        // Nothing made room during those steps: a second poll would be a
        // spurious wake or a future that polls itself in a loop.
        assert_eq!(polled, 1, "{flavour}: polled again only once woken");
        assert!(
            finished,
            "{flavour}: the sends never finished once the queue drained"
        );
        let got = driver.join().unwrap();
        let acked: Vec<(u64, Lsn)> = got
            .into_iter()
            .map(|a| {
                let a = a.unwrap();
                (a.token, a.lsn)
            })
            .collect();
        let want: Vec<(u64, Lsn)> = (0..10).map(|t| (t, t + 1)).collect();
        assert_eq!(acked, want, "{flavour}: in send order, LSNs ascending");
        channels.close().unwrap();
        let log = Arc::into_inner(log).unwrap();
        assert_eq!(log.wal.read(10).unwrap().payload, b"r9");
    }
}

/// A send still waiting when the appender thread is gone is answered with
/// its record, not left waiting.
#[test]
fn a_waiting_async_send_gets_its_record_back_when_the_channels_end() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let log = Arc::new(Panicking {
        wal,
        gate: Mutex::new(()),
        entered: AtomicUsize::new(0),
    });
    let channels = Channels::spawn(log.clone(), 1);
    let (tx, _acks) = channels.async_sender(Level::Written);
    let closed = log.gate.lock().unwrap();
    tx.try_send(0, b"held".to_vec(), 0).unwrap();
    while log.entered.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    tx.try_send(0, b"queued".to_vec(), 1).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let waiting = std::thread::spawn(move || rt.block_on(tx.send_async(0, b"late".to_vec(), 2)));
    std::thread::sleep(Duration::from_millis(20));
    // The appender panics once the gate opens: the queue is gone.
    drop(closed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !waiting.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(waiting.is_finished(), "the waiting send was never answered");
    assert_eq!(
        waiting.join().unwrap(),
        Err(SendError {
            token: 2,
            payload: b"late".to_vec()
        })
    );
    assert!(channels.close().is_err(), "the panic is reported at close");
}

/// A log whose appends panic once past the gate: the appender thread dies.
struct Panicking {
    wal: Wal,
    gate: Mutex<()>,
    entered: AtomicUsize,
}

impl AppendLog for Panicking {
    fn append_record(&self, _stream: u16, _payload: &[u8]) -> ringwal::Result<Ticket> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _open = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        let _ = &self.wal;
        panic!("the appender dies");
    }
}

/// A future that counts its polls.
struct PollCount<F>(Arc<AtomicUsize>, F);

impl<F: Future + Unpin> Future for PollCount<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut self.1).poll(cx)
    }
}

/// A collector thread selects over its own inputs and its acks; records
/// of tracked streams become pending through the channel too.
#[test]
fn a_collector_selects_over_inputs_and_acks() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let collector = Arc::new(Collector::open(wal, &[3], &Watermarks::new()).unwrap());
    let channels = Channels::spawn(collector.clone(), 32);
    let (tx, acks) = channels.sender(Level::Written);
    let (inputs_tx, inputs) = crossbeam_channel::bounded::<Vec<u8>>(8);
    let feeder = std::thread::spawn(move || {
        for i in 0..300u32 {
            inputs_tx.send(format!("export-{i}").into_bytes()).unwrap();
        }
    });
    let (mut sent, mut acked, mut inputs_open) = (0u64, Vec::new(), true);
    while acked.len() < 300 {
        select! {
            recv(if inputs_open { inputs.clone() } else { crossbeam_channel::never() }) -> body => match body {
                Ok(b) => {
                    tx.send(3, b, sent).unwrap();
                    sent += 1;
                }
                Err(_) => inputs_open = false,
            },
            recv(acks) -> a => acked.push(a.unwrap().unwrap()),
            default(Duration::from_secs(60)) => panic!("stalled with {} acks", acked.len()),
        }
    }
    feeder.join().unwrap();
    assert!(acked
        .windows(2)
        .all(|w| w[0].lsn < w[1].lsn && w[0].token < w[1].token));
    assert_eq!(collector.pending(3), 300);
    let lsns: Vec<Lsn> = acked.iter().map(|a| a.lsn).collect();
    assert_eq!(
        collector.watermark_for(3, &lsns),
        collector.wal().next_lsn()
    );
    drop(tx);
    channels.close().unwrap();
    Arc::into_inner(collector).unwrap().close().unwrap();
}

/// The ticket future on tokio: many tasks on one thread, each awaiting its
/// record's level (examples/tokio_ticket.rs is the longer version).
#[tokio::test(flavor = "current_thread")]
async fn ticket_futures_complete_on_tokio() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let wal = Arc::new(wal);
    let tasks: Vec<_> = (0..32u16)
        .map(|t| {
            let wal = wal.clone();
            tokio::spawn(async move {
                let mut last = 0;
                for i in 0..20 {
                    let ticket = wal.append(t, format!("{t}-{i}").as_bytes()).unwrap();
                    ticket.reached(Level::Written).await.unwrap();
                    last = ticket.lsn();
                }
                let ticket = wal.append(t, b"end").unwrap();
                ticket.reached(Level::Durable).await.unwrap();
                assert!(ticket.lsn() > last);
                ticket.lsn()
            })
        })
        .collect();
    for t in tasks {
        let lsn = t.await.unwrap();
        assert!(wal.durable_lsn() >= lsn);
    }
    assert_eq!(wal.next_lsn(), 32 * 21 + 1);
}
