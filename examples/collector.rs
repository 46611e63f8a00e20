//! A telemetry collector on ringwal, end to end.
//!
//! Three signals (traces, metrics, logs), two flusher shards per signal.
//! Producers append export bodies through [`Collector::append_then`], whose
//! hook pushes each `(lsn, body)` onto a shard's crossbeam channel under
//! the log's reservation lock, so every shard's list is ascending. A body
//! is acknowledged once its record is `Written` (it survives a process
//! crash); a background sync every `sync_interval` bounds what a power
//! loss can take.
//!
//! Shards batch frames into blocks and publish each atomically into
//! `blocks/`: write a temporary file, fsync it, rename it, fsync the
//! directory. The block's name carries its watermark from
//! [`Collector::watermark_for`]; on success the shard calls
//! [`Collector::published`] and truncates the log below the smallest
//! watermark of the three signals. A failed publish keeps its frames
//! (still pending) for the next attempt. On start, the watermarks are read
//! back from the block names and everything not covered is replayed into
//! the shards with its original LSN.
//!
//! ```sh
//! cargo run --release --example collector -- [DIR] [--secs S]
//! ```
//!
//! `tests/crash/collector_crash.rs` compiles this file as a module and kills a
//! process running it with SIGKILL, again and again.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use ringwal::{Collector, Config, Durability, Level, Lsn, Replayed, Ticket, Wal, Watermarks};

/// The three signals, each a tracked stream.
pub const SIGNALS: [u16; 3] = [0, 1, 2];
/// Signal names, for output.
pub const SIGNAL_NAMES: [&str; 3] = ["traces", "metrics", "logs"];
/// Flusher shards per signal.
pub const SHARDS: usize = 2;
/// The log's node id.
pub const NODE: u32 = 1;

/// How the collector runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Holds `wal/` and `blocks/`.
    pub root: PathBuf,
    /// A shard seals a block at this many frames...
    pub max_frames: usize,
    /// ...or when its oldest frame is this old.
    pub max_age: Duration,
    /// Background sync interval: the power-loss exposure.
    pub sync_interval: Duration,
    /// WAL segment size.
    pub segment_bytes: u64,
    /// Largest export body accepted.
    pub max_body: usize,
    /// Fault injection: every n-th publish attempt fails after writing its
    /// temporary file and before the rename.
    pub fail_every: Option<u64>,
    /// Fault injection: sleep this long per replayed frame (so a test can
    /// kill the process in the middle of a replay).
    pub replay_delay: Option<Duration>,
}

impl Options {
    /// Defaults for `root`: blocks of up to 256 frames or 20 ms, a sync
    /// every 100 ms, 4 MiB segments, bodies up to 64 KiB, no faults.
    pub fn new(root: impl Into<PathBuf>) -> Options {
        Options {
            root: root.into(),
            max_frames: 256,
            max_age: Duration::from_millis(20),
            sync_interval: Duration::from_millis(100),
            segment_bytes: 4 << 20,
            max_body: 64 << 10,
            fail_every: None,
            replay_delay: None,
        }
    }
}

/// Where the log lives under `root`.
pub fn wal_dir(root: &Path) -> PathBuf {
    root.join("wal")
}

/// Where published blocks live under `root`.
pub fn blocks_dir(root: &Path) -> PathBuf {
    root.join("blocks")
}

/// A published block's name: signal, watermark, and a random nonce (two
/// blocks may share a signal and a watermark; neither may replace the
/// other).
pub fn block_name(signal: u16, watermark: Lsn, nonce: u64) -> String {
    format!("s{signal}-w{watermark:020}-{nonce:016x}.blk")
}

/// `(signal, watermark)` from a published block's name; `None` for
/// anything else, temporary files included.
pub fn parse_block_name(name: &str) -> Option<(u16, Lsn)> {
    let rest = name.strip_prefix('s')?.strip_suffix(".blk")?;
    let mut parts = rest.split('-');
    let signal = parts.next()?.parse().ok()?;
    let wm = parts.next()?.strip_prefix('w')?;
    let nonce = parts.next()?;
    if wm.len() != 20 || nonce.len() != 16 || parts.next().is_some() {
        return None;
    }
    Some((signal, wm.parse().ok()?))
}

/// The watermarks the published blocks under `root` claim.
pub fn read_watermarks(root: &Path) -> ringwal::Result<Watermarks> {
    Watermarks::from_dir(&blocks_dir(root), parse_block_name)
}

const BLOCK_MAGIC: &[u8; 4] = b"BLK1";

/// Encode a block: magic, frame count, `(lsn, len, body)` per frame, and a
/// CRC of everything before it.
fn encode_block(frames: &[(Lsn, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + frames.iter().map(|f| 12 + f.1.len()).sum::<usize>());
    out.extend_from_slice(BLOCK_MAGIC);
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    for (lsn, body) in frames {
        out.extend_from_slice(&lsn.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Read a published block back: its `(lsn, body)` frames. Fails on a
/// block that is damaged (a published block never is: it is renamed into
/// place only after it is complete and synced).
pub fn read_block(path: &Path) -> io::Result<Vec<(Lsn, Vec<u8>)>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    if bytes.len() < 12 || &bytes[..4] != BLOCK_MAGIC {
        return Err(bad("not a block"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(bad("checksum mismatch"));
    }
    let n = u32::from_le_bytes(body[4..8].try_into().unwrap()) as usize;
    let mut frames = Vec::with_capacity(n);
    let mut at = 8;
    for _ in 0..n {
        let head = body
            .get(at..at + 12)
            .ok_or_else(|| bad("truncated frame"))?;
        let lsn = u64::from_le_bytes(head[..8].try_into().unwrap());
        let len = u32::from_le_bytes(head[8..].try_into().unwrap()) as usize;
        let b = body
            .get(at + 12..at + 12 + len)
            .ok_or_else(|| bad("truncated body"))?;
        frames.push((lsn, b.to_vec()));
        at += 12 + len;
    }
    Ok(frames)
}

/// Publish a block atomically: temporary file, fsync, rename, fsync the
/// directory. Returns its name.
fn publish_block(
    dir: &Path,
    signal: u16,
    watermark: Lsn,
    frames: &[(Lsn, Vec<u8>)],
    fail: bool,
) -> io::Result<String> {
    let name = block_name(signal, watermark, rand::random());
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&encode_block(frames))?;
    f.sync_all()?;
    drop(f);
    if fail {
        return Err(io::Error::other("injected publish failure"));
    }
    std::fs::rename(&tmp, dir.join(&name))?;
    File::open(dir)?.sync_all()?;
    Ok(name)
}

/// Counters of one run, summed over the shards.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    /// Frames replayed into the shards at start.
    pub replayed: u64,
    /// Blocks published (marker blocks included).
    pub blocks: u64,
    /// Frames in them.
    pub frames: u64,
    /// Publish attempts that failed (and were retried).
    pub failed_publishes: u64,
    /// Segments deleted by truncation.
    pub truncated: u64,
}

/// State the shards share.
struct Shared {
    collector: Arc<Collector>,
    opts: Options,
    blocks: PathBuf,
    marks: Mutex<Watermarks>,
    attempts: AtomicU64,
    blocks_published: AtomicU64,
    frames_published: AtomicU64,
    failed: AtomicU64,
    truncated: AtomicU64,
}

impl Shared {
    fn publish(&self, signal: u16, frames: &[(Lsn, Vec<u8>)]) -> io::Result<()> {
        let lsns: Vec<Lsn> = frames.iter().map(|f| f.0).collect();
        let wm = self.collector.watermark_for(signal, &lsns);
        let n = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let fail = self.opts.fail_every.is_some_and(|k| n.is_multiple_of(k));
        if let Err(e) = publish_block(&self.blocks, signal, wm, frames, fail) {
            // The frames stay pending: no later watermark steps over them.
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        self.collector.published(signal, &lsns);
        self.blocks_published.fetch_add(1, Ordering::Relaxed);
        self.frames_published
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        let covered = {
            let mut m = self.marks.lock().unwrap_or_else(|p| p.into_inner());
            m.observe(signal, wm);
            m.min_over(&SIGNALS)
        };
        match self.collector.truncate(covered) {
            Ok(n) => {
                self.truncated.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => eprintln!("collector: truncate: {e}"),
        }
        Ok(())
    }
}

/// One flusher shard: batch, seal, publish; retry what failed.
fn shard(sh: Arc<Shared>, signal: u16, rx: Receiver<(Lsn, Vec<u8>)>) {
    let mut held: Vec<(Lsn, Vec<u8>)> = Vec::new();
    let mut since = Instant::now();
    loop {
        let got = if held.is_empty() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(sh.opts.max_age.saturating_sub(since.elapsed()))
        };
        match got {
            Ok(frame) => {
                if held.is_empty() {
                    since = Instant::now();
                }
                held.push(frame);
                if held.len() < sh.opts.max_frames {
                    continue;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                while !held.is_empty() {
                    if sh.publish(signal, &held).is_ok() {
                        held.clear();
                    }
                }
                return;
            }
        }
        match sh.publish(signal, &held) {
            Ok(()) => held.clear(),
            // Keep the frames; try again when the next batch is due.
            Err(_) => since = Instant::now(),
        }
    }
}

/// One shard's input: `(lsn, body)` frames, ascending.
type ShardTx = Sender<(Lsn, Vec<u8>)>;

/// An I/O error on `path` in the log's error type.
fn io_error(path: &Path, source: io::Error) -> ringwal::Error {
    ringwal::Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A running collector: the log, the shards, and the way in.
pub struct Pipeline {
    shared: Arc<Shared>,
    /// `[signal][shard]`.
    shards: Vec<Vec<ShardTx>>,
    threads: Vec<JoinHandle<()>>,
    next: AtomicUsize,
    replayed: Replayed,
}

impl Pipeline {
    /// Open the log, read the watermarks back from `blocks/`, start the
    /// shards and replay into them everything the blocks do not cover.
    /// Leftover temporary files (publishes cut short) are removed first.
    pub fn start(opts: &Options) -> ringwal::Result<Pipeline> {
        let blocks = blocks_dir(&opts.root);
        std::fs::create_dir_all(&blocks).map_err(|e| io_error(&blocks, e))?;
        for e in std::fs::read_dir(&blocks).map_err(|e| io_error(&blocks, e))? {
            let e = e.map_err(|e| io_error(&blocks, e))?;
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let marks = read_watermarks(&opts.root)?;
        let cfg = Config::builder()
            .node(NODE)
            .segment_bytes(opts.segment_bytes)
            .max_record_bytes(opts.max_body)
            .durability(Durability::Deferred {
                sync_interval: Some(opts.sync_interval),
            })
            .build();
        let (wal, _) = Wal::open(wal_dir(&opts.root), cfg)?;
        let collector = Arc::new(Collector::open(wal, &SIGNALS, &marks)?);
        let shared = Arc::new(Shared {
            collector,
            opts: opts.clone(),
            blocks,
            marks: Mutex::new(marks),
            attempts: AtomicU64::new(0),
            blocks_published: AtomicU64::new(0),
            frames_published: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
        });
        let mut shards = Vec::new();
        let mut threads = Vec::new();
        for signal in SIGNALS {
            let mut txs = Vec::new();
            for _ in 0..SHARDS {
                let (tx, rx) = crossbeam_channel::unbounded();
                let sh = shared.clone();
                threads.push(std::thread::spawn(move || shard(sh, signal, rx)));
                txs.push(tx);
            }
            shards.push(txs);
        }
        let delay = opts.replay_delay;
        let replayed = shared.collector.replay(|signal, lsn, body| {
            // Each frame is pending again before it reaches a shard.
            let tx = &shards[signal as usize][(lsn % SHARDS as u64) as usize];
            let _ = tx.send((lsn, body.to_vec()));
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            Ok(())
        })?;
        Ok(Pipeline {
            shared,
            shards,
            threads,
            next: AtomicUsize::new(0),
            replayed,
        })
    }

    /// What the start-up replay did.
    pub fn replayed(&self) -> &Replayed {
        &self.replayed
    }

    /// The collector underneath.
    pub fn collector(&self) -> &Collector {
        &self.shared.collector
    }

    /// Append one export body of `signal` and hand it to a shard. Wait on
    /// the ticket for `Written` before acknowledging it to the exporter.
    pub fn ingest(&self, signal: u16, body: &[u8]) -> ringwal::Result<Ticket> {
        let k = self.next.fetch_add(1, Ordering::Relaxed) % SHARDS;
        let tx = &self.shards[signal as usize][k];
        let owned = body.to_vec();
        self.shared.collector.append_then(signal, body, move |lsn| {
            // Unbounded: never blocks under the reservation lock.
            let _ = tx.send((lsn, owned));
        })
    }

    /// Stop: the shards publish everything they hold, each signal gets an
    /// empty marker block claiming everything now covered (so a clean
    /// restart replays nothing), the log is truncated and closed.
    pub fn shutdown(self) -> ringwal::Result<Summary> {
        let Pipeline {
            shared,
            shards,
            threads,
            replayed,
            ..
        } = self;
        drop(shards);
        for t in threads {
            t.join().expect("shard thread panicked");
        }
        for signal in SIGNALS {
            while shared.publish(signal, &[]).is_err() {}
        }
        let summary = Summary {
            replayed: replayed.replayed,
            blocks: shared.blocks_published.load(Ordering::Relaxed),
            frames: shared.frames_published.load(Ordering::Relaxed),
            failed_publishes: shared.failed.load(Ordering::Relaxed),
            truncated: shared.truncated.load(Ordering::Relaxed),
        };
        let shared = Arc::into_inner(shared).expect("the shards are gone");
        Arc::into_inner(shared.collector)
            .expect("the only collector handle")
            .close()?;
        Ok(summary)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut root = None;
    let mut secs = 3.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().ok_or("--secs needs a value")?.parse()?,
            _ => root = Some(PathBuf::from(a)),
        }
    }
    let root = root.unwrap_or_else(|| std::env::temp_dir().join("ringwal-collector-example"));
    let opts = Options::new(&root);
    let p = Pipeline::start(&opts)?;
    println!(
        "collector in {}: replayed {} frames, skipped {}",
        root.display(),
        p.replayed().replayed,
        p.replayed().skipped
    );
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let acked = AtomicU64::new(0);
    let lat_max_us = AtomicU64::new(0);
    std::thread::scope(|s| {
        for producer in 0..6u64 {
            let (p, acked, lat_max_us) = (&p, &acked, &lat_max_us);
            s.spawn(move || {
                let mut i = 0u64;
                while Instant::now() < stop {
                    let signal = SIGNALS[((producer + i) % 3) as usize];
                    let body =
                        format!("{}:{producer}:{i}:", SIGNAL_NAMES[signal as usize]).repeat(20);
                    let t0 = Instant::now();
                    let t = p.ingest(signal, body.as_bytes()).expect("ingest");
                    t.wait(Level::Written).expect("written");
                    let us = t0.elapsed().as_micros() as u64;
                    lat_max_us.fetch_max(us, Ordering::Relaxed);
                    acked.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            });
        }
    });
    let n = acked.load(Ordering::Relaxed);
    let summary = p.shutdown()?;
    let blocks = std::fs::read_dir(blocks_dir(&root))?.count();
    let segments = std::fs::read_dir(wal_dir(&root))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .count();
    let mut per_signal: BTreeMap<&str, Lsn> = BTreeMap::new();
    for (s, w) in read_watermarks(&root)?.iter() {
        per_signal.insert(SIGNAL_NAMES[s as usize], w);
    }
    println!(
        "acknowledged {n} bodies in {secs} s ({:.0}/s, slowest ack {} µs)",
        n as f64 / secs,
        lat_max_us.load(Ordering::Relaxed)
    );
    println!(
        "published {} blocks ({} frames, {} failed attempts); truncated {} segments; \
         {blocks} block files and {segments} segments on disk",
        summary.blocks, summary.frames, summary.failed_publishes, summary.truncated
    );
    println!("watermarks: {per_signal:?}");
    Ok(())
}
