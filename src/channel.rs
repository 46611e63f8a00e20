//! The channel API: appends over crossbeam channels, for collector threads
//! that must never block on I/O and want their acknowledgements as
//! messages they can `select!` on beside their own inputs.
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
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::collector::Collector;
use crate::config::Level;
use crate::error::{Error, Lsn, Poison, Result};
use crate::ticket::Ticket;
use crate::wal::Wal;

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

/// Where one sender's acknowledgements go.
struct Route {
    acks: Sender<AckResult>,
    level: Level,
}

impl Route {
    fn deliver(&self, r: AckResult) {
        // A collector that dropped its receiver no longer wants them.
        let _ = self.acks.send(r);
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
        threads.push(
            std::thread::Builder::new()
                .name("ringwal-appender".into())
                .spawn(move || append_loop(&*log, req_rx, written_tx, durable_tx))
                .expect("spawn appender thread"),
        );
        Channels {
            requests: Some(req_tx),
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
        let requests = self
            .requests
            .clone()
            .expect("requests is only taken by close, which consumes self");
        (
            RecordSender {
                requests,
                route: Arc::new(Route { acks: tx, level }),
            },
            rx,
        )
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

    fn request(&self, stream: u16, payload: Vec<u8>, token: u64) -> Request {
        Request {
            stream,
            payload,
            token,
            route: self.route.clone(),
        }
    }
}

/// The appender thread: append in queue order, answer `Accepted` senders
/// at once, pass the rest to the acknowledger of their level.
fn append_loop<L: AppendLog + ?Sized>(
    log: &L,
    requests: Receiver<Request>,
    written: Sender<Waiting>,
    durable: Sender<Waiting>,
) {
    for req in requests {
        let ticket = log.append_record(req.stream, &req.payload);
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
