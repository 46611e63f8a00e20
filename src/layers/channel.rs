//! The channel API: appends over channels, for collector threads that
//! must never block on I/O and want their acknowledgements as messages
//! they can `select!` on beside their own inputs (a crossbeam receiver),
//! and for async collectors (a `Stream`).
//!
//! ```
//! use std::sync::Arc;
//! use ringwal::crossbeam_channel::{self, select};
//! use ringwal::channel::Channels;
//! use ringwal::{Config, Durability, Level, Wal};
//!
//! # let dir = tempfile::tempdir()?;
//! let deferred = Durability::Deferred { sync_interval: None };
//! let cfg = Config::builder().durability(deferred).build();
//! let (wal, _) = Wal::open(dir.path(), cfg)?;
//! let channels = Channels::spawn(Arc::new(wal), 1024);
//! let (tx, acks) = channels.sender(Level::Written);
//! let (inputs_tx, inputs) = crossbeam_channel::unbounded::<Vec<u8>>();
//! inputs_tx.send(b"export body".to_vec()).unwrap();
//! let mut token = 0;
//! loop {
//!     select! {
//!         recv(inputs) -> body => {
//!             token += 1;
//!             tx.send(7, body.unwrap(), token).expect("log open");
//!         }
//!         recv(acks) -> ack => {
//!             let ack = ack.unwrap().expect("written");
//!             println!("token {} is LSN {}", ack.token, ack.lsn);
//!             break;
//!         }
//!     }
//! }
//! drop(tx);
//! channels.close()?; // every sender is dropped: the threads finish
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! For async collectors, [`Channels::async_sender`] hands out the same
//! sender with its acknowledgements on an [`AckStream`] (a `Stream`), and
//! [`RecordSender::send_async`] waits for room in the queue by awaiting;
//! neither blocks an executor's thread, on any executor.
//!
//! Threads: [`Channels::spawn`] starts one appender thread, which drains the
//! shared bounded request queue in order and appends each record, and one
//! acknowledger thread per level (`Written`, `Durable`), which waits for
//! the newest record it holds (acknowledgements cover a contiguous prefix,
//! so that one wait covers every older record) and then sends every
//! acknowledgement it covers. Records of one sender go through one FIFO
//! queue and one appender, so their LSNs ascend in send order, and their
//! acknowledgements arrive in that order too.
//!
//! # Cost
//!
//! Each record crosses two extra threads (appender, acknowledger) on its
//! way, so the API pays off when a collector keeps records outstanding.
//! `ringwal bench --producers 16 --size 1024 --level written
//! --sync-interval-ms 100` (release build, three 3 s runs on the 2-core
//! development VM, shared with other work): `--api append` (append, wait,
//! repeat) did 59–86 k records/s with p99 0.5–0.8 ms; `--api channel`
//! with one record outstanding per thread 39–46 k/s, p99 3.7–5.8 ms (the
//! thread hops, on two cores); with `--window 16` 217–272 k/s, p99
//! 4–11 ms. At `--level durable` append did 12–30 k/s and channel 16–19
//! k/s, both with p99 about 8 ms (the device's flush).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures_core::stream::{FusedStream, Stream};

use crate::config::Level;
use crate::error::{Error, Lsn, Poison, Result};
use crate::layers::collector::Collector;
use crate::sync::wakers::WakerSet;
use crate::wal::Wal;
use crate::write::ticket::Ticket;

/// A log the channel API can append to: [`Wal`], or [`Collector`] (whose
/// tracked streams then become pending as usual).
///
/// Through the channel a record's LSN arrives with its acknowledgement, in
/// LSN order per sender but not across senders; a shard fed by several
/// senders must sort its list before [`Collector::watermark_for`] (or be
/// fed by [`Collector::append_then`], whose hook runs in LSN order).
pub trait AppendLog: Send + Sync + 'static {
    /// Append one record; same contract as [`Wal::append`].
    fn append_record(&self, stream: u16, payload: &[u8]) -> Result<Ticket>;
}

impl AppendLog for Wal {
    fn append_record(&self, stream: u16, payload: &[u8]) -> Result<Ticket> {
        self.append(stream, payload)
    }
}

impl AppendLog for Collector {
    fn append_record(&self, stream: u16, payload: &[u8]) -> Result<Ticket> {
        self.append(stream, payload)
    }
}

/// A record that reached the level its sender asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The caller's token, as given to [`RecordSender::send`].
    pub token: u64,
    /// The record's LSN.
    pub lsn: Lsn,
    /// The level it reached: the sender's.
    pub level: Level,
}

/// A record that will never be acknowledged, and why: the append failed
/// (`TooLarge`, `Closed`, `Poisoned`, ...) or the log was poisoned before
/// the record reached the level (it may or may not be on disk, and is
/// never reported durable).
#[derive(Debug)]
pub struct Nack {
    /// The caller's token.
    pub token: u64,
    /// The error that ended the record.
    pub error: Error,
}

/// What arrives on a sender's acknowledgement receiver, one per record
/// sent, in send order.
pub type AckResult = std::result::Result<Ack, Nack>;

/// [`RecordSender::try_send`] could not queue the record; it comes back.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrySendError {
    /// The queue is full (the log is behind); nothing was queued.
    Full {
        /// The token.
        token: u64,
        /// The payload.
        payload: Vec<u8>,
    },
    /// The channels are shut down; nothing was queued.
    Closed {
        /// The token.
        token: u64,
        /// The payload.
        payload: Vec<u8>,
    },
}

impl std::fmt::Display for TrySendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrySendError::Full { token, .. } => write!(f, "record {token}: queue full"),
            TrySendError::Closed { token, .. } => write!(f, "record {token}: channels closed"),
        }
    }
}

impl std::error::Error for TrySendError {}

/// [`RecordSender::send`] could not queue the record because the channels
/// are shut down; the record comes back.
#[derive(Debug, PartialEq, Eq)]
pub struct SendError {
    /// The token.
    pub token: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record {}: channels closed", self.token)
    }
}

impl std::error::Error for SendError {}

/// Where one sender's acknowledgements go: a crossbeam receiver
/// ([`Channels::sender`]) or an [`AckStream`] ([`Channels::async_sender`]).
enum AckSink {
    Receiver(Sender<AckResult>),
    Stream(UnboundedSender<AckResult>),
}

/// Where one sender's acknowledgements go. Dropped with the last sender
/// and the last of its records in the threads, which ends the receiver.
struct Route {
    acks: AckSink,
    level: Level,
}

impl Route {
    fn deliver(&self, r: AckResult) {
        // A collector that dropped its receiver no longer wants them.
        match &self.acks {
            AckSink::Receiver(tx) => {
                let _ = tx.send(r);
            }
            AckSink::Stream(tx) => {
                let _ = tx.unbounded_send(r);
            }
        }
    }
}

/// The acknowledgements of a sender made by [`Channels::async_sender`], as
/// a [`Stream`]: exactly one [`AckResult`] per queued record, in send
/// order (hence LSN order), then the end once the sender is dropped and
/// every record it queued is answered. The same messages, in the same
/// order, as the crossbeam receiver of [`Channels::sender`].
///
/// Executor-agnostic: an acknowledger thread wakes the polling task.
/// Cost: per acknowledgement, one lock-free queue push on the
/// acknowledger thread and one wake-up of the task when it waits; the
/// queue is unbounded (a task that stops polling grows it by one message
/// per record).
pub struct AckStream(UnboundedReceiver<AckResult>);

impl std::fmt::Debug for AckStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckStream")
            .field("ended", &self.0.is_terminated())
            .finish_non_exhaustive()
    }
}

impl Stream for AckStream {
    type Item = AckResult;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AckResult>> {
        Pin::new(&mut self.0).poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl FusedStream for AckStream {
    fn is_terminated(&self) -> bool {
        self.0.is_terminated()
    }
}

struct Request {
    stream: u16,
    payload: Vec<u8>,
    token: u64,
    route: Arc<Route>,
}

/// One record waiting for its level on an acknowledger thread.
struct Waiting {
    token: u64,
    route: Arc<Route>,
    /// The ticket, or the error its append failed with.
    ticket: std::result::Result<Ticket, Error>,
}

/// The handle of the channel API: the appender and acknowledger threads
/// over one log. Hands out [`RecordSender`]s.
///
/// Dropping it lets the threads finish on their own once every sender is
/// dropped; [`close`](Self::close) also waits for that.
pub struct Channels {
    requests: Option<Sender<Request>>,
    /// Tasks waiting for room in the request queue; the appender wakes
    /// them as it takes requests out.
    room: Arc<WakerSet>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl Channels {
    /// Start the threads over `log`, with a request queue of `capacity`
    /// records shared by every sender (at least 1).
    ///
    /// Cost: three threads; per record, one move through a bounded
    /// channel, the append itself (on the appender thread, which is where
    /// device backpressure blocks), and one message back.
    ///
    /// Over a [`Collector`], tracked streams become pending as they would
    /// through [`Collector::append`]:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ringwal::channel::Channels;
    /// use ringwal::{Collector, Config, Level, Wal, Watermarks};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let collector = Arc::new(Collector::open(wal, &[1], &Watermarks::new())?);
    /// let channels = Channels::spawn(collector.clone(), 64);
    /// let (tx, acks) = channels.sender(Level::Durable);
    /// for token in 0..3 {
    ///     tx.send(1, vec![token as u8], token).expect("channels open");
    /// }
    /// let lsns: Vec<_> = acks.iter().take(3).map(|a| a.expect("durable").lsn).collect();
    /// assert_eq!(lsns, [1, 2, 3]); // per sender: in send order, LSNs ascending
    /// assert_eq!(collector.pending(1), 3);
    /// drop(tx);
    /// channels.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn spawn<L: AppendLog>(log: Arc<L>, capacity: usize) -> Channels {
        let (req_tx, req_rx) = crossbeam_channel::bounded::<Request>(capacity.max(1));
        let (written_tx, written_rx) = crossbeam_channel::unbounded::<Waiting>();
        let (durable_tx, durable_rx) = crossbeam_channel::unbounded::<Waiting>();
        let mut threads = Vec::with_capacity(3);
        for (level, rx) in [(Level::Written, written_rx), (Level::Durable, durable_rx)] {
            threads.push(
                std::thread::Builder::new()
                    .name(format!("ringwal-acks-{level:?}").to_lowercase())
                    .spawn(move || acknowledge(level, rx))
                    .expect("spawn acknowledger thread"),
            );
        }
        let room = Arc::new(WakerSet::default());
        let appender_room = room.clone();
        threads.push(
            std::thread::Builder::new()
                .name("ringwal-appender".into())
                .spawn(move || {
                    // Dropped last, after the queue's receiver (even when
                    // the loop unwinds): senders still waiting then find
                    // the queue closed.
                    let _closed = WakeOnExit(&appender_room);
                    append_loop(&*log, req_rx, &appender_room, written_tx, durable_tx)
                })
                .expect("spawn appender thread"),
        );
        Channels {
            requests: Some(req_tx),
            room,
            threads,
        }
    }

    /// A new sender whose records are acknowledged at `level`, and the
    /// receiver its acknowledgements arrive on: exactly one [`AckResult`]
    /// per queued record, in send order (hence LSN order).
    ///
    /// The receiver is unbounded: a collector that stops reading it grows
    /// it by one message per record.
    pub fn sender(&self, level: Level) -> (RecordSender, Receiver<AckResult>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (self.new_sender(level, AckSink::Receiver(tx)), rx)
    }

    /// [`sender`](Self::sender) for async callers: the acknowledgements
    /// arrive on an [`AckStream`] instead of a crossbeam receiver, and
    /// [`RecordSender::send_async`] queues records without blocking the
    /// thread. Same messages, same order. Cost: as `sender`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use futures::StreamExt;
    /// use ringwal::channel::Channels;
    /// use ringwal::{Config, Level, Wal};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// let channels = Channels::spawn(Arc::new(wal), 64);
    /// let (tx, acks) = channels.async_sender(Level::Durable);
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// let lsns = rt.block_on(async {
    ///     for token in 0..3 {
    ///         tx.send_async(0, vec![token as u8], token).await?;
    ///     }
    ///     drop(tx); // the stream ends once every record is answered
    ///     let acks: Vec<_> = acks.collect().await;
    ///     Ok::<_, ringwal::channel::SendError>(acks)
    /// })?;
    /// let lsns: Vec<u64> = lsns.into_iter().map(|a| a.expect("durable").lsn).collect();
    /// assert_eq!(lsns, [1, 2, 3]);
    /// channels.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn async_sender(&self, level: Level) -> (RecordSender, AckStream) {
        let (tx, rx) = futures_channel::mpsc::unbounded();
        (self.new_sender(level, AckSink::Stream(tx)), AckStream(rx))
    }

    fn new_sender(&self, level: Level, acks: AckSink) -> RecordSender {
        let requests = self
            .requests
            .clone()
            .expect("requests is only taken by close, which consumes self");
        RecordSender {
            requests,
            route: Arc::new(Route { acks, level }),
            room: self.room.clone(),
        }
    }

    /// Stop: wait until every [`RecordSender`] is dropped, every queued
    /// record is appended and every acknowledgement sent, then join the
    /// threads. Blocks for as long as any sender lives.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a channel thread panicked (the log's own failures
    /// arrive as [`Nack`]s, not here).
    pub fn close(mut self) -> Result<()> {
        self.requests = None;
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                return Err(Error::io(
                    "ringwal channel thread",
                    std::io::Error::other("a channel thread panicked"),
                ));
            }
        }
        Ok(())
    }
}

/// A collector thread's handle for sending records. Sending never touches
/// the log: it moves the record into the shared bounded queue.
pub struct RecordSender {
    requests: Sender<Request>,
    route: Arc<Route>,
    /// Tasks waiting for room in the queue (`send_async`).
    room: Arc<WakerSet>,
}

impl std::fmt::Debug for RecordSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSender")
            .field("level", &self.route.level)
            .finish_non_exhaustive()
    }
}

impl RecordSender {
    /// The level this sender's records are acknowledged at.
    pub fn level(&self) -> Level {
        self.route.level
    }

    /// Queue a record, blocking while the queue is full (never on I/O
    /// directly; only on the queue, which drains as the log keeps up).
    /// Its [`AckResult`] arrives on this sender's receiver.
    ///
    /// # Errors
    ///
    /// [`SendError`], with the record, if the channels are shut down (the
    /// appender thread is gone); nothing was queued and no acknowledgement
    /// will come for it.
    pub fn send(
        &self,
        stream: u16,
        payload: Vec<u8>,
        token: u64,
    ) -> std::result::Result<(), SendError> {
        self.requests
            .send(self.request(stream, payload, token))
            .map_err(|e| SendError {
                token,
                payload: e.into_inner().payload,
            })
    }

    /// Queue a record, or fail at once with [`TrySendError::Full`] when the
    /// queue is full. Never blocks.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ringwal::channel::{Channels, TrySendError};
    /// # use ringwal::{Config, Level, Wal};
    /// # let dir = tempfile::tempdir()?;
    /// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
    /// # let channels = Channels::spawn(Arc::new(wal), 64);
    /// let (tx, acks) = channels.sender(Level::Written);
    /// match tx.try_send(0, b"body".to_vec(), 1) {
    ///     Ok(()) => {}
    ///     // The log is behind: keep the record, shed load, or retry later.
    ///     Err(TrySendError::Full { payload, .. }) => drop(payload),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # if let Ok(ack) = acks.recv()? { assert_eq!(ack.token, 1); }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the queue is full,
    /// [`TrySendError::Closed`] when the channels are shut down; either way
    /// the record comes back and nothing was queued.
    pub fn try_send(
        &self,
        stream: u16,
        payload: Vec<u8>,
        token: u64,
    ) -> std::result::Result<(), TrySendError> {
        self.requests
            .try_send(self.request(stream, payload, token))
            .map_err(|e| match e {
                crossbeam_channel::TrySendError::Full(r) => TrySendError::Full {
                    token,
                    payload: r.payload,
                },
                crossbeam_channel::TrySendError::Disconnected(r) => TrySendError::Closed {
                    token,
                    payload: r.payload,
                },
            })
    }

    /// Queue a record without blocking the thread: a future that resolves
    /// once the record is in the queue, waiting by awaiting while the
    /// queue is full. Its [`AckResult`] arrives as for
    /// [`send`](Self::send), on this sender's receiver or [`AckStream`].
    ///
    /// Records of one sender keep their order as long as each send is
    /// awaited before the next. Dropping the future before it resolves
    /// queues nothing (the record is dropped) and leaves no waker behind.
    ///
    /// Cost: as [`try_send`](Self::try_send) while there is room. When
    /// the queue is full: one short lock to register the task's waker,
    /// which the appender thread wakes when it takes the next request out
    /// (and one more when the future resolves, to remove the entry). The
    /// appender pays one fence and one atomic load per request for it.
    ///
    /// # Errors
    ///
    /// [`SendError`], with the record, if the channels are shut down, as
    /// for [`send`](Self::send).
    pub fn send_async(&self, stream: u16, payload: Vec<u8>, token: u64) -> SendFuture<'_> {
        SendFuture {
            sender: self,
            request: Some(self.request(stream, payload, token)),
            room: None,
        }
    }

    fn request(&self, stream: u16, payload: Vec<u8>, token: u64) -> Request {
        Request {
            stream,
            payload,
            token,
            route: self.route.clone(),
        }
    }
}

/// Future returned by [`RecordSender::send_async`]: the record queued, or
/// [`SendError`] with it when the channels are shut down.
///
/// # Panics
///
/// If polled again after it returned `Ready`.
#[must_use = "futures do nothing unless polled; the record is queued only when it is"]
pub struct SendFuture<'a> {
    sender: &'a RecordSender,
    /// The record, until it is queued or handed back.
    request: Option<Request>,
    /// Its entry in the set of tasks waiting for room, if it has one.
    room: Option<u64>,
}

impl std::fmt::Debug for SendFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFuture")
            .field("token", &self.request.as_ref().map(|r| r.token))
            .field("waiting", &self.room.is_some())
            .finish()
    }
}

impl Future for SendFuture<'_> {
    type Output = std::result::Result<(), SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut req = this
            .request
            .take()
            .expect("SendFuture polled after it completed");
        let mut registered = false;
        let sent = loop {
            match this.sender.requests.try_send(req) {
                Ok(()) => break Ok(()),
                Err(crossbeam_channel::TrySendError::Disconnected(r)) => {
                    break Err(SendError {
                        token: r.token,
                        payload: r.payload,
                    })
                }
                Err(crossbeam_channel::TrySendError::Full(r)) if registered => {
                    this.request = Some(r);
                    return Poll::Pending;
                }
                Err(crossbeam_channel::TrySendError::Full(r)) => {
                    req = r;
                    this.sender.room.register(&mut this.room, cx.waker());
                    // Pairs with the appender's fence after each receive:
                    // either the retry below finds the room that receive
                    // made, or the appender finds this registration.
                    fence(Ordering::SeqCst);
                    registered = true;
                }
            }
        };
        this.sender.room.forget(&mut this.room);
        Poll::Ready(sent)
    }
}

impl Drop for SendFuture<'_> {
    /// Removes the future's waker, if it left one. Cost: one short lock
    /// when it did; nothing otherwise.
    fn drop(&mut self) {
        self.sender.room.forget(&mut self.room);
    }
}

/// Wakes every task waiting for room in the request queue when the
/// appender thread ends, however it ends.
struct WakeOnExit<'a>(&'a WakerSet);

impl Drop for WakeOnExit<'_> {
    fn drop(&mut self) {
        let _ = self.0.wake_all();
    }
}

/// The appender thread: append in queue order, answer `Accepted` senders
/// at once, pass the rest to the acknowledger of their level. Each request
/// taken out makes room in the queue: senders awaiting it are woken.
fn append_loop<L: AppendLog + ?Sized>(
    log: &L,
    requests: Receiver<Request>,
    room: &WakerSet,
    written: Sender<Waiting>,
    durable: Sender<Waiting>,
) {
    let mut last: Lsn = 0;
    for req in requests {
        // Pairs with a sender's fence between registering and retrying.
        fence(Ordering::SeqCst);
        // A task's waker that panics is not the log's failure; the other
        // tasks were woken all the same.
        let _ = room.wake_all();
        let ticket = log.append_record(req.stream, &req.payload);
        if let Ok(t) = &ticket {
            // What lets an acknowledger answer a round with one wait.
            debug_assert!(t.lsn() > last, "the one appender's LSNs ascend");
            last = t.lsn();
        }
        let level = req.route.level;
        let next = match level {
            Level::Accepted => {
                req.route.deliver(match ticket {
                    Ok(t) => Ok(Ack {
                        token: req.token,
                        lsn: t.lsn(),
                        level,
                    }),
                    Err(error) => Err(Nack {
                        token: req.token,
                        error,
                    }),
                });
                continue;
            }
            Level::Written => &written,
            Level::Durable => &durable,
        };
        let _ = next.send(Waiting {
            token: req.token,
            route: req.route,
            ticket,
        });
    }
}

/// An acknowledger thread: take whatever is queued, wait once for the
/// newest record in it, answer all of it in order, repeat.
fn acknowledge(level: Level, rx: Receiver<Waiting>) {
    let mut round: VecDeque<Waiting> = VecDeque::new();
    while let Ok(first) = rx.recv() {
        round.push_back(first);
        round.extend(rx.try_iter());
        // One wait for the newest answers the whole round only because the
        // one appender queues its tickets in LSN order.
        debug_assert!(
            round
                .iter()
                .filter_map(|w| w.ticket.as_ref().ok().map(Ticket::lsn))
                .is_sorted_by(|a, b| a < b),
            "an acknowledger's round is in ascending LSN order"
        );
        let newest = round.iter().rev().find_map(|w| w.ticket.as_ref().ok());
        let outcome = match newest {
            Some(t) => t.wait(level),
            None => Ok(()),
        };
        // Every later waiter fails the same way: keep the failure in a
        // form that can be handed out again.
        let cause = outcome.err().map(|e| match e {
            Error::Poisoned { cause } => cause,
            Error::NoSpace { path } => Poison::NoSpace(path),
            other => Poison::failed(other.to_string()),
        });
        debug_assert!(
            cause.is_some()
                || round
                    .iter()
                    .all(|w| w.ticket.as_ref().ok().is_none_or(|t| t.is_done(level))),
            "one wait for the newest covers every ticket of its round"
        );
        for w in round.drain(..) {
            let r = match w.ticket {
                Ok(t) if cause.is_none() || t.is_done(level) => Ok(Ack {
                    token: w.token,
                    lsn: t.lsn(),
                    level,
                }),
                Ok(_) => Err(Nack {
                    token: w.token,
                    error: cause
                        .as_ref()
                        .expect("a record not done has a failure")
                        .error(),
                }),
                Err(error) => Err(Nack {
                    token: w.token,
                    error,
                }),
            };
            w.route.deliver(r);
        }
    }
}
