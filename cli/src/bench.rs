//! `ringwal bench`: closed-loop load. Each producer (a thread, or with
//! `--api async` a tokio task) appends one record, waits for it to reach
//! the level, records the latency, and repeats; so throughput is what the
//! log sustains with that many records outstanding, and latency is what
//! each producer saw.
//!
//! In its own temporary directory the bench checkpoints everything durable
//! every 10 ms, as a log in production truncates behind itself; rolls then
//! reuse checkpointed segments, which is the steady state the figures
//! describe (with `--dir` nothing is checkpointed, and every roll prepares
//! a new file, so large records run slower there).
//!
//! With `--busy-neighbour` another process spins on the last CPU while
//! the producers run (see `neighbour.rs`): the figures of a log that
//! shares its machine with the work feeding it.

use std::collections::VecDeque;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use hdrhistogram::Histogram;
use ringwal::channel::{AckResult, Channels, RecordSender};
use ringwal::{Backend, Durability, Level, Lsn, Stats, Ticket, Wal};

use super::inspect::human_bytes;
use super::neighbour;
use super::{ApiArg, BenchArgs, CmdResult, Failure, PayloadArg};
use ringwal_platform::neighbour::Spent;

/// Highest latency the histograms track exactly (one hour, in µs); larger
/// values are recorded as this.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Longest run accepted, in seconds (a day).
const MAX_SECS: f64 = 86_400.0;

/// What one producer measured.
struct Measured {
    hist: Histogram<u64>,
    records: u64,
    /// With `--roll-stall`: (LSN, latency in µs) of every record.
    samples: Vec<(Lsn, u64)>,
}

/// With `--roll-stall`: latency of the records right after a roll and of
/// the rest, apart.
struct RollStall {
    after_roll: Histogram<u64>,
    others: Histogram<u64>,
    /// Segment bases seen (rolls measured).
    bases: usize,
}

/// The results, ready to print or serialise.
struct Results {
    records: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
    writes: u64,
    write_bytes: u64,
    syncs: u64,
    rolls: u64,
    appended: u64,
    roll_stall: Option<RollStall>,
    /// The ring's device writes, submission to completion, over the log's
    /// whole life (warm-up included): what the device and the kernel's
    /// I/O path took, without the hand-offs to and from the producers.
    device_writes: ringwal::LatencySummary,
}

/// Run `ringwal bench`.
pub(crate) fn run(a: BenchArgs) -> CmdResult {
    if a.producers == 0 {
        return Err(Failure::usage("--producers must be at least 1"));
    }
    if !(a.secs.is_finite() && a.secs > 0.0 && a.secs <= MAX_SECS) {
        return Err(Failure::usage(format!(
            "--secs must be a number of seconds in (0, {MAX_SECS}]"
        )));
    }
    if a.window == 0 {
        return Err(Failure::usage("--window must be at least 1"));
    }
    // Before anything is opened: a machine that cannot host a neighbour
    // refuses at once.
    let neighbour_cpu = if a.busy_neighbour {
        Some(neighbour::last_cpu()?)
    } else {
        None
    };
    let level = a.level;
    let configured = a.backend.unwrap_or_default();

    // Declared before the log so it is removed after the log is closed.
    let temp;
    let dir: &Path = match &a.dir {
        Some(d) => d,
        None => {
            temp = tempfile::Builder::new()
                .prefix("ringwal-bench-")
                .tempdir()
                .map_err(|e| Failure::io(&std::env::temp_dir().display().to_string(), e))?;
            temp.path()
        }
    };

    let segment_bytes = a.segment_mib << 20;
    let mut builder = a
        .key
        .config(1)?
        .compression(a.compress, 256)
        .backend(configured)
        .sync_method(a.sync_method)
        .max_inflight(a.inflight)
        .wait_spin(Duration::from_micros(a.wait_spin_us))
        .segment_bytes(segment_bytes);
    // Without a limit, the library picks the largest the segment holds.
    if let Some(max) = a.max_record {
        builder = builder.max_record_bytes(max);
    }
    if level != Level::Durable {
        builder = builder.durability(Durability::Deferred {
            sync_interval: a.sync_interval_ms.map(Duration::from_millis),
        });
    }
    let (wal, recovered) = Wal::open(dir, builder.build())?;
    // What runs: `auto` resolved.
    let backend = recovered.backend;
    let wal = Arc::new(wal);

    println!(
        "ringwal bench: backend={} sync={} inflight={} wait_spin={}us producers={} size={} B payload={:?} compress={} encrypted={} level={} api={} window={} batch={} secs={} segment={} MiB checkpoint={} {}dir={}",
        backend.name(),
        a.sync_method.name(),
        a.inflight,
        a.wait_spin_us,
        a.producers,
        a.size,
        a.payload,
        a.compress,
        a.key.key_file.is_some(),
        a.level.name(),
        a.api.name(),
        if a.api == ApiArg::Channel { a.window } else { 1 },
        How::of(&a).records(),
        a.secs,
        a.segment_mib,
        if a.dir.is_none() { "behind-durable" } else { "off" },
        // Only when on: the line stays as it was for every other run.
        neighbour_cpu.map_or_else(String::new, |c| format!("busy_neighbour=cpu{c} ")),
        dir.display()
    );
    let st = wal.stats();
    println!("log:         {}", in_force(&st));
    if let Some(w) = memory_warning(&st) {
        println!("warning:     {w}: these are not a disk's numbers");
    }
    // Started after the log is open and stopped as soon as the load
    // ends: it disturbs what is measured, not the setup. On an early
    // return the guard kills it.
    let busy = neighbour_cpu.map(neighbour::start).transpose()?;
    let res = load(&wal, &a, level)?;
    let spent = busy.map(neighbour::stop).transpose()?;
    Arc::into_inner(wal)
        .expect("the channel threads are joined")
        .close()?;

    report(&a, backend, &res, spent.as_ref());
    if let Some(path) = &a.json {
        write_json(path, &a, &st, &res, spent.as_ref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What an opened log really does, whatever was configured: the backend
/// (`auto` resolved, or the fallback from io_uring), whether writes
/// bypass the page cache, the sync method after the file system's
/// verdict, and the file system. One line, `key=value` words.
pub(crate) fn in_force(st: &Stats) -> String {
    format!(
        "backend={} direct_io={} sync={} file_system={}",
        st.backend.name(),
        st.direct_io,
        st.sync_method.name(),
        st.file_system.to_string().replace(' ', "_")
    )
}

/// Why nothing the log makes durable survives a power loss, where that
/// is so (tmpfs, ramfs, a `volatile` overlay); `None` on a disk.
pub(crate) fn memory_warning(st: &Stats) -> Option<String> {
    (!st.file_system.survives_power_loss()).then(|| {
        format!(
            "the log is on {}: nothing survives a power loss there, durable means written",
            st.file_system
        )
    })
}

/// Drive the producers for the configured time, with a progress line on
/// stderr every second, and merge what they measured.
fn load(wal: &Arc<Wal>, a: &BenchArgs, level: Level) -> Result<Results, Failure> {
    let payload: Vec<u8> = match a.payload {
        PayloadArg::Pattern => (0..a.size).map(|i| (i % 251) as u8).collect(),
        PayloadArg::Telemetry => telemetry(a.size),
    };
    // Shared, not borrowed: async tasks outlive any borrow.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let bases = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let before = wal.stats();
    let run_for = Duration::from_secs_f64(a.secs);
    let start = Instant::now();

    let channels = match a.api {
        ApiArg::Append | ApiArg::Claim | ApiArg::Batch | ApiArg::Async => None,
        ApiArg::Channel => Some(Channels::spawn(
            wal.clone(),
            (a.producers * a.window).max(64),
        )),
    };
    let measured: Vec<Result<Measured, Failure>> = std::thread::scope(|s| {
        let handles: Vec<_> = if a.api == ApiArg::Async {
            let (payload, stop, done) = (&payload, &stop, &done);
            vec![s.spawn(move || produce_tasks(wal, payload, a.producers, level, stop, done))]
        } else {
            (0..a.producers)
                .map(|_| match &channels {
                    None => {
                        let (payload, stop, done) = (&payload, &stop, &done);
                        let keep = a.roll_stall;
                        let how = How::of(a);
                        s.spawn(move || produce(wal, payload, how, level, stop, done, keep))
                    }
                    Some(ch) => {
                        let (tx, acks) = ch.sender(level);
                        let (payload, stop, done) = (&payload, &stop, &done);
                        s.spawn(move || produce_channel(tx, acks, payload, a.window, stop, done))
                    }
                })
                .collect()
        };
        if a.dir.is_none() {
            // A production log truncates behind itself; so does the bench
            // in its own temporary directory, which keeps a long run from
            // filling the disk and lets rolls reuse checkpointed segments
            // instead of preparing new files (the steady state). With
            // `--dir` the log is kept whole for inspection.
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(10));
                    let _ = wal.checkpoint(wal.durable_lsn());
                    // Everything sealed and durable is gone: the oldest
                    // LSN left is the base of the segment being written.
                    bases
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(wal.oldest_lsn());
                }
            });
        }
        let deadline = start + run_for;
        let mut tick = start + Duration::from_secs(1);
        let mut last_count = 0;
        loop {
            let now = Instant::now();
            if now >= deadline || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(tick.min(deadline) - now);
            if Instant::now() >= tick {
                let count = done.load(Ordering::Relaxed);
                eprintln!(
                    "[{:>4}s] {} records/s",
                    (tick - start).as_secs(),
                    count - last_count
                );
                last_count = count;
                tick += Duration::from_secs(1);
            }
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure::other("a producer thread panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    if let Some(ch) = channels {
        ch.close()?;
    }

    let Measured {
        hist,
        records,
        samples,
    } = merge(measured)?;
    let roll_stall = if a.roll_stall {
        let bases = bases.into_inner().unwrap_or_else(|p| p.into_inner());
        let first_base = before.next_lsn;
        let mut stall = RollStall {
            after_roll: new_histogram()?,
            others: new_histogram()?,
            bases: bases.range(first_base + 1..).count(),
        };
        for (lsn, us) in samples {
            let base = bases.range(..=lsn).next_back().copied().unwrap_or(0);
            let right_after = base > first_base && lsn < base + a.producers as u64;
            let h = if right_after {
                &mut stall.after_roll
            } else {
                &mut stall.others
            };
            h.saturating_record(us.max(1));
        }
        Some(stall)
    } else {
        None
    };
    let after = wal.stats();
    Ok(Results {
        records,
        elapsed,
        hist,
        writes: after.writes - before.writes,
        write_bytes: after.write_bytes - before.write_bytes,
        syncs: after.syncs - before.syncs,
        rolls: after.rolls - before.rolls,
        appended: after.next_lsn - before.next_lsn,
        roll_stall,
        device_writes: after.write_latency,
    })
}

fn new_histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
        .map_err(|e| Failure::other(format!("latency histogram: {e}")))
}

/// What several producers measured, as one: histograms added, counts
/// summed, samples joined. The first producer's error, if any.
fn merge(measured: Vec<Result<Measured, Failure>>) -> Result<Measured, Failure> {
    let mut hist = new_histogram()?;
    let mut records = 0;
    let mut samples = Vec::new();
    for m in measured {
        let m = m?;
        records += m.records;
        hist.add(&m.hist)
            .map_err(|e| Failure::other(format!("merging latency histograms: {e}")))?;
        samples.extend(m.samples);
    }
    Ok(Measured {
        hist,
        records,
        samples,
    })
}

/// How a producer thread appends (`--api append`, `claim` or `batch`).
#[derive(Clone, Copy)]
enum How {
    Append,
    Claim,
    /// Atomic batches of this many records.
    Batch(usize),
}

impl How {
    fn of(a: &BenchArgs) -> How {
        match a.api {
            ApiArg::Claim => How::Claim,
            ApiArg::Batch => How::Batch(a.batch as usize),
            _ => How::Append,
        }
    }

    /// Records one append of this kind sequences.
    fn records(self) -> u64 {
        match self {
            How::Batch(n) => n as u64,
            How::Append | How::Claim => 1,
        }
    }
}

/// One producer: append as `how` says (with `Claim`, by writing the
/// payload into the claimed slot; with `Batch`, as one atomic batch),
/// wait, record, until told to stop. An error stops every producer.
fn produce(
    wal: &Wal,
    payload: &[u8],
    how: How,
    level: Level,
    stop: &AtomicBool,
    done: &AtomicU64,
    keep_samples: bool,
) -> Result<Measured, Failure> {
    let mut hist = new_histogram()?;
    let mut records = 0;
    let mut samples = Vec::new();
    let batch: Vec<(u16, &[u8])> = vec![(0, payload); how.records() as usize];
    let append = |wal: &Wal| -> ringwal::Result<Ticket> {
        match how {
            How::Claim => wal.append_with(0, payload.len(), |slot| slot.copy_from_slice(payload)),
            How::Batch(_) => wal.append_batch(&batch),
            How::Append => wal.append(0, payload),
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let acked = append(wal).and_then(|t| t.wait(level).map(|()| t.lsn()));
        let lsn = match acked {
            Ok(lsn) => lsn,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        hist.saturating_record(us.max(1));
        if keep_samples {
            samples.push((lsn, us));
        }
        records += how.records();
        done.fetch_add(how.records(), Ordering::Relaxed);
    }
    Ok(Measured {
        hist,
        records,
        samples,
    })
}

/// `tasks` producers as tokio tasks on a multi-threaded runtime with one
/// worker thread per core, each appending with `append_async` and waiting
/// with `Ticket::reached`; what they measured, merged. Blocks until every
/// task has seen `stop`.
fn produce_tasks(
    wal: &Arc<Wal>,
    payload: &[u8],
    tasks: usize,
    level: Level,
    stop: &Arc<AtomicBool>,
    done: &Arc<AtomicU64>,
) -> Result<Measured, Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .build()
        .map_err(|e| Failure::other(format!("starting the tokio runtime: {e}")))?;
    let payload: Arc<[u8]> = payload.into();
    let measured = rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let task = produce_async(
                    wal.clone(),
                    payload.clone(),
                    level,
                    stop.clone(),
                    done.clone(),
                );
                tokio::spawn(task)
            })
            .collect();
        let mut measured = Vec::with_capacity(tasks);
        for h in handles {
            measured.push(
                h.await
                    .unwrap_or_else(|_| Err(Failure::other("a producer task panicked"))),
            );
        }
        measured
    });
    merge(measured)
}

/// One async producer: `append_async`, `reached`, record, until told to
/// stop. An error stops every producer.
async fn produce_async(
    wal: Arc<Wal>,
    payload: Arc<[u8]>,
    level: Level,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) -> Result<Measured, Failure> {
    let mut hist = new_histogram()?;
    let mut records = 0;
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let acked = match wal.append_async(0, &payload).await {
            Ok(t) => t.reached(level).await,
            Err(e) => Err(e),
        };
        if let Err(e) = acked {
            stop.store(true, Ordering::Relaxed);
            return Err(e.into());
        }
        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        hist.saturating_record(us.max(1));
        records += 1;
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(Measured {
        hist,
        records,
        samples: Vec::new(),
    })
}

/// One collector thread on the channel API: keep `window` records
/// outstanding, time each from send to acknowledgement. An error stops
/// every producer.
fn produce_channel(
    tx: RecordSender,
    acks: Receiver<AckResult>,
    payload: &[u8],
    window: usize,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<Measured, Failure> {
    let mut hist = new_histogram()?;
    let mut records = 0;
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(window);
    let mut token = 0u64;
    loop {
        while sent.len() < window && !stop.load(Ordering::Relaxed) {
            if tx.send(0, payload.to_vec(), token).is_err() {
                stop.store(true, Ordering::Relaxed);
                return Err(Failure::other("the channel API shut down"));
            }
            sent.push_back(Instant::now());
            token += 1;
        }
        let Some(t0) = sent.pop_front() else {
            return Ok(Measured {
                hist,
                records,
                samples: Vec::new(),
            });
        };
        match acks.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(nack)) => {
                stop.store(true, Ordering::Relaxed);
                return Err(nack.error.into());
            }
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                return Err(Failure::other("the channel API shut down"));
            }
        }
        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        hist.saturating_record(us.max(1));
        records += 1;
        done.fetch_add(1, Ordering::Relaxed);
    }
}

impl Results {
    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn records_per_s(&self) -> f64 {
        self.records as f64 / self.secs()
    }

    /// Payload megabytes (10^6 bytes) per second.
    fn mb_per_s(&self, size: usize) -> f64 {
        self.records as f64 * size as f64 / 1e6 / self.secs()
    }

    /// Bytes the log wrote per payload byte appended.
    fn stored_ratio(&self, size: usize) -> f64 {
        self.write_bytes as f64 / (self.appended.max(1) as f64 * size.max(1) as f64)
    }

    fn records_per_write(&self) -> f64 {
        if self.writes == 0 {
            0.0
        } else {
            self.appended as f64 / self.writes as f64
        }
    }

    fn quantile(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }
}

fn report(a: &BenchArgs, backend: Backend, r: &Results, busy: Option<&Spent>) {
    println!(
        "records:     {} in {:.2} s ({} producers, {}, {})",
        r.records,
        r.secs(),
        a.producers,
        backend.name(),
        a.level.name()
    );
    println!("records/s:   {:.0}", r.records_per_s());
    println!(
        "MB/s:        {:.2} (payload, 10^6 bytes; {} per record)",
        r.mb_per_s(a.size),
        human_bytes(a.size as u64)
    );
    let per = match How::of(a) {
        How::Batch(n) => format!(" (per batch of {n})"),
        How::Append | How::Claim => String::new(),
    };
    println!(
        "latency µs:  p50={} p99={} p99.9={} max={}{per}",
        r.quantile(0.50),
        r.quantile(0.99),
        r.quantile(0.999),
        r.hist.max()
    );
    let w = &r.device_writes;
    println!(
        "device µs:   write p50={} p99={} p99.9={} max={} (the ring's writes, submission to completion)",
        w.p50.as_micros(),
        w.p99.as_micros(),
        w.p999.as_micros(),
        w.max.as_micros()
    );
    println!(
        "wal:         writes={} records/write={:.1} syncs={} rolls={}",
        r.writes,
        r.records_per_write(),
        r.syncs,
        r.rolls
    );
    println!(
        "stored:      {:.3} bytes written per payload byte (frames, padding, tags and compression included)",
        r.stored_ratio(a.size)
    );
    if let Some(s) = &r.roll_stall {
        let q = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
        println!(
            "roll stall:  {} rolls; right after a roll: {} records, p50={} p99={} p99.9={} max={} µs; others: p50={} p99={} p99.9={} max={} µs",
            s.bases,
            s.after_roll.len(),
            q(&s.after_roll, 0.5),
            q(&s.after_roll, 0.99),
            q(&s.after_roll, 0.999),
            s.after_roll.max(),
            q(&s.others, 0.5),
            q(&s.others, 0.99),
            q(&s.others, 0.999),
            s.others.max()
        );
    }
    if let Some(n) = busy {
        // The share shows the neighbour really spun: near 1, or less
        // where the producers and the ring took turns on its CPU.
        println!(
            "neighbour:   pid {} spinning on CPU {} (allowed: {}) got {:.2} of a CPU ({:.2} s of CPU in {:.2} s)",
            n.pid,
            n.cpu,
            n.cpus_allowed,
            n.share(),
            n.cpu_secs,
            n.wall_secs
        );
    }
}

/// `size` bytes of JSON telemetry: one metric sample per line, hosts,
/// metric names, values and timestamps varying as a collector's do.
fn telemetry(size: usize) -> Vec<u8> {
    const METRICS: [&str; 6] = [
        "cpu.user",
        "cpu.system",
        "mem.used_bytes",
        "net.rx_bytes",
        "disk.io_ms",
        "http.requests",
    ];
    let mut out = String::with_capacity(size + 160);
    let mut i: u64 = 0;
    while out.len() < size {
        // A cheap mix so values do not repeat in a pattern LZ4 would
        // find trivially.
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        out.push_str(&format!(
            "{{\"ts\":{},\"host\":\"web-{:02}.eu-west-1\",\"metric\":\"{}\",\"value\":{}.{:03},\"tags\":{{\"env\":\"prod\",\"svc\":\"checkout\"}}}}\n",
            1_764_547_200_000 + i * 137,
            x % 40,
            METRICS[(i % 6) as usize],
            x % 10_000,
            x % 1000
        ));
        i += 1;
    }
    out.truncate(size);
    out.into_bytes()
}

fn write_json(
    path: &Path,
    a: &BenchArgs,
    st: &Stats,
    r: &Results,
    busy: Option<&Spent>,
) -> Result<(), Failure> {
    let obj = serde_json::json!({
        "records_per_s": r.records_per_s(),
        "mb_per_s": r.mb_per_s(a.size),
        "p50_us": r.quantile(0.50),
        "p99_us": r.quantile(0.99),
        "p999_us": r.quantile(0.999),
        "max_us": r.hist.max(),
        "records": r.records,
        "secs": r.secs(),
        "producers": a.producers,
        "size": a.size,
        "level": a.level.name(),
        "backend": st.backend.name(),
        "direct_io": st.direct_io,
        "sync_method": st.sync_method.name(),
        "file_system": st.file_system.to_string(),
        "survives_power_loss": st.file_system.survives_power_loss(),
        "api": a.api.name(),
        "window": if a.api == ApiArg::Channel { a.window } else { 1 },
        "batch": How::of(a).records(),
        "wait_spin_us": a.wait_spin_us,
        "writes": r.writes,
        "write_bytes": r.write_bytes,
        "stored_per_payload_byte": r.stored_ratio(a.size),
        "compress": a.compress.name(),
        "encrypted": a.key.key_file.is_some(),
        "records_per_write": r.records_per_write(),
        "device_write_p50_us": r.device_writes.p50.as_micros() as u64,
        "device_write_p99_us": r.device_writes.p99.as_micros() as u64,
        "syncs": r.syncs,
        "rolls": r.rolls,
        "segment_mib": a.segment_mib,
        "roll_stall": r.roll_stall.as_ref().map(|s| serde_json::json!({
            "rolls": s.bases,
            "after_roll_records": s.after_roll.len(),
            "after_roll_p999_us": s.after_roll.value_at_quantile(0.999),
            "after_roll_max_us": s.after_roll.max(),
            "others_p999_us": s.others.value_at_quantile(0.999),
            "others_max_us": s.others.max(),
        })),
        "busy_neighbour": busy.map(neighbour::json),
    });
    let mut text = serde_json::to_string_pretty(&obj)
        .map_err(|e| Failure::other(format!("encoding JSON: {e}")))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| Failure::io(&path.display().to_string(), e))
}
