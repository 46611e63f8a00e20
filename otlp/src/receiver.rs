//! The receiver's storage side: the log, the collector over it, and one
//! flusher thread per signal that seals bodies into blocks.
//!
//! Everything here blocks (opening and recovering the log, the replay,
//! block writes with their fsyncs or PUTs, checkpoints): it runs on the
//! flusher threads, or on tokio's blocking pool when called from the
//! server.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver as Rx, RecvTimeoutError, Sender};
use ringwal::{Collector, Config, Durability, Level, Lsn, Ticket, Wal, WhenFull};

use crate::blocks::{self, Out, Sealing, Shard};
use crate::signal::Signal;

/// How long an append waits for a checkpoint to make room when the log is
/// at its size limit before the request is refused with 503.
const FULL_WAIT: Duration = Duration::from_millis(500);

/// How long a flusher waits before it tries again after a first failed
/// block write (its bodies stay held and pending meanwhile); each further
/// failure doubles the wait, up to [`RETRY_AFTER_FAILURE_MAX`].
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The longest wait between two attempts at a block. A retry is one
/// write or one request, so an outage of the store costs a signal no more
/// than one every 15 s, and the held blocks go out at most 15 s after the
/// store is back (as long as the S3 client's own longest backoff).
const RETRY_AFTER_FAILURE_MAX: Duration = Duration::from_secs(15);

/// The background sync interval at `--level written`: what a power loss
/// (not a process crash) can take from acknowledged bodies.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// Everything the storage side is configured with.
#[derive(Clone, Debug)]
pub struct Options {
    pub wal: PathBuf,
    /// Where blocks are published: a directory or an object store.
    pub out: Out,
    /// The level a body reaches before its 200: `Written` (survives a
    /// process crash; synced every [`SYNC_INTERVAL`]) or `Durable`.
    pub level: Level,
    pub sealing: Sealing,
    /// The largest body, after decompression, and so the largest record.
    pub max_body: usize,
    pub segment_bytes: u64,
    /// The log's hard size limit: past it appends are refused (503) until
    /// the flushers publish and the log is truncated.
    pub max_log_bytes: u64,
}

impl Options {
    fn config(&self) -> Config {
        let durability = match self.level {
            Level::Durable => Durability::EveryWrite,
            _ => Durability::Deferred {
                sync_interval: Some(SYNC_INTERVAL),
            },
        };
        Config::builder()
            .durability(durability)
            .max_record_bytes(self.max_body.max(1))
            .segment_bytes(self.segment_bytes)
            .max_log_bytes(
                Some(self.max_log_bytes),
                WhenFull::Block { timeout: FULL_WAIT },
            )
            .build()
    }
}

enum Msg {
    Body(Lsn, Bytes),
    /// Seal what is held and stop.
    Drain,
}

/// What `open` reports of the start.
#[derive(Debug, Default)]
pub struct Started {
    /// Frames the blocks did not cover, put into new blocks.
    pub replayed: u64,
    /// Blocks written by the replay.
    pub blocks: usize,
    /// LSNs burnt so that none a block claims is handed out again.
    pub fillers: u64,
}

/// The open storage side. `append` is for the server; `finish` drains.
pub struct Receiver {
    collector: Arc<Collector>,
    feeds: Vec<Sender<Msg>>,
    flushers: Vec<JoinHandle<Result<(), String>>>,
    level: Level,
}

impl Receiver {
    /// Open the log in `opts.wal`, read the watermarks back from the
    /// block names in `opts.out`, put every frame no block covers into
    /// new blocks (sealed and published before this returns, whatever
    /// their size), truncate the log by what the blocks cover, and start
    /// the flushers.
    ///
    /// An object store must answer here: one that does not (after its
    /// client's own retries, which take minutes) or refuses is an error,
    /// as is a missing bucket. Only the flushers wait an outage out.
    ///
    /// Blocking: recovery, a listing of `opts.out` per signal, a read of
    /// the uncovered part of the log, a block write per
    /// `opts.sealing.bytes` replayed.
    pub fn open(opts: &Options) -> Result<(Receiver, Started), String> {
        let place = opts.out.open()?;
        let marks = blocks::prepare(&*place)?;
        let (wal, _report) =
            Wal::open(&opts.wal, opts.config()).map_err(|e| e.chain().to_string())?;
        let streams: Vec<u16> = Signal::ALL.iter().map(|s| s.stream()).collect();
        let collector =
            Arc::new(Collector::open(wal, &streams, &marks).map_err(|e| e.chain().to_string())?);
        let mut shards: Vec<Shard> = Signal::ALL
            .iter()
            .map(|&s| Shard::new(s, place.clone(), collector.clone()))
            .collect();
        let mut started = Started {
            fillers: collector.fillers(),
            ..Started::default()
        };
        let replayed = collector
            .replay(|stream, lsn, body| {
                let Some(signal) = Signal::of_stream(stream) else {
                    return Ok(());
                };
                let shard = &mut shards[signal.index()];
                shard.push(lsn, Bytes::copy_from_slice(body));
                if shard.full(opts.sealing) {
                    shard.seal()?;
                    started.blocks += 1;
                }
                Ok(())
            })
            .map_err(|e| format!("replaying {}: {}", opts.wal.display(), e.chain()))?;
        started.replayed = replayed.replayed;
        for shard in &mut shards {
            if shard.seal().map_err(|e| e.chain().to_string())?.is_some() {
                started.blocks += 1;
            }
        }
        truncate(&collector);
        let (feeds, flushers) = start_flushers(shards, &collector, opts.sealing)?;
        let receiver = Receiver {
            collector,
            feeds,
            flushers,
            level: opts.level,
        };
        Ok((receiver, started))
    }

    /// The level a body must reach before its 200.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Append `body` to `signal`'s stream and hand it to its flusher, in
    /// LSN order, under the log's reservation lock.
    ///
    /// Returns at `Accepted`; await the ticket for [`level`](Self::level).
    /// Blocks while every staging buffer is full, and up to half a second
    /// when the log is at its size limit (then `Error::LogFull`): call it
    /// from a blocking thread.
    pub fn append(&self, signal: Signal, body: Bytes) -> ringwal::Result<Ticket> {
        let feed = &self.feeds[signal.index()];
        self.collector.append_then(signal.stream(), &body, |lsn| {
            // Only a stopped flusher has no receiver: the body stays in
            // the log, pending, and the next start replays it.
            let _ = feed.send(Msg::Body(lsn, body.clone()));
        })
    }

    /// Seal and publish what every flusher holds, stop them, truncate the
    /// log by what the blocks cover and close it. Call it after the last
    /// append has returned. Blocking.
    pub fn finish(self) -> Result<(), String> {
        for feed in &self.feeds {
            let _ = feed.send(Msg::Drain);
        }
        let mut failed = Vec::new();
        for handle in self.flushers {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed.push(e),
                Err(_) => failed.push("a flusher panicked".to_string()),
            }
        }
        truncate(&self.collector);
        drop(self.feeds);
        match Arc::try_unwrap(self.collector) {
            Ok(c) => c.close().map_err(|e| e.chain().to_string())?,
            // A handler still holds it: the last one to let go closes it.
            Err(_) => failed.push("the log was still in use at exit".to_string()),
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}

type Flushers = (Vec<Sender<Msg>>, Vec<JoinHandle<Result<(), String>>>);

/// One flusher thread per shard, in signal order, and the channels that
/// feed them.
fn start_flushers(
    shards: Vec<Shard>,
    collector: &Arc<Collector>,
    sealing: Sealing,
) -> Result<Flushers, String> {
    let (mut feeds, mut flushers) = (Vec::new(), Vec::new());
    for (shard, signal) in shards.into_iter().zip(Signal::ALL) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let collector = collector.clone();
        let handle = std::thread::Builder::new()
            .name(format!("flush-{}", signal.name()))
            .spawn(move || flusher(shard, &collector, rx, sealing))
            .map_err(|e| format!("starting a flusher: {e}"))?;
        feeds.push(tx);
        flushers.push(handle);
    }
    Ok((feeds, flushers))
}

/// Drop whole segments every published block covers. Failure only keeps
/// segments longer; it is reported, not fatal.
fn truncate(collector: &Collector) {
    if let Err(e) = collector.truncate(collector.covered()) {
        eprintln!("ringwal-otlp: truncating the log: {}", e.chain());
    }
}

/// One signal's flusher: hold bodies, seal at the size or age limit,
/// truncate behind each block. A failed seal (a full disk, a store that
/// is down or refuses) keeps everything held and pending, bodies still
/// arriving join it, and it is tried again after [`RETRY_AFTER_FAILURE`],
/// doubling up to [`RETRY_AFTER_FAILURE_MAX`]: the log keeps every body
/// meanwhile, and answers 503 once it is full. On `Drain` a failure is
/// returned, the bodies staying in the log for the next start to replay.
fn flusher(
    mut shard: Shard,
    collector: &Collector,
    rx: Rx<Msg>,
    sealing: Sealing,
) -> Result<(), String> {
    let mut retry_at: Option<Instant> = None;
    let mut backoff = RETRY_AFTER_FAILURE;
    loop {
        let deadline = retry_at.or_else(|| shard.due(sealing));
        let msg = match deadline {
            Some(at) => rx.recv_deadline(at),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let seal_now = match msg {
            Ok(Msg::Body(lsn, body)) => {
                shard.push(lsn, body);
                retry_at.is_none() && shard.full(sealing)
            }
            Ok(Msg::Drain) | Err(RecvTimeoutError::Disconnected) => {
                return shard.seal().map(drop).map_err(|e| e.chain().to_string());
            }
            Err(RecvTimeoutError::Timeout) => true,
        };
        if !seal_now {
            continue;
        }
        match shard.seal() {
            Ok(_) => {
                retry_at = None;
                backoff = RETRY_AFTER_FAILURE;
                truncate(collector);
            }
            Err(e) => {
                eprintln!(
                    "ringwal-otlp: writing a block: {}; retrying in {} s",
                    e.chain(),
                    backoff.as_secs()
                );
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(RETRY_AFTER_FAILURE_MAX);
            }
        }
    }
}
