//! `harness`: ringwal against the device floor and peer write-ahead logs,
//! side by side, in one run on one disk.
//!
//! Workloads: closed loop (P producers, each appends and waits for
//! durability), the same with large records (bandwidth), an open-loop rate
//! sweep (the highest rate whose p99, measured from each record's intended
//! send time, stays under an SLA), and recovery (open + full replay of a
//! large log against a raw read of its files).
//!
//! Output: a table on stdout, a progress line on stderr, `results.json`
//! and `chart.svg` in the output directory. See `docs/benchmarks.md`.
//!
//! With `--busy-neighbour`, another process spins on the last CPU during
//! every measured run (`neighbour.rs`), as a node runs its log beside the
//! work that feeds it; every table then says so in its title.
//!
//! With `--grid`, the project's standard grid (`grid.rs`): five
//! closed-loop cells in one run, summed up as one table, `grid.md` and
//! `grid.svg`.

mod chart;
mod files;
mod floor;
mod grid;
mod load;
mod machine;
mod measure;
mod neighbour;
mod progress;
mod recovery;
mod report;
mod systems;
#[cfg(feature = "tokio-uring")]
mod touring;

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use machine::Machine;
use measure::{Raw, Window};
use neighbour::Spent;
use report::{
    CaseResult, Probe, RecoveryResult, Report, Settings, SweepRep, SweepResult, SysResult,
};
use systems::{OpenCtx, System};

/// Durable-log benchmark: ringwal, peer WALs and the device floor, side by
/// side on one disk.
#[derive(Parser, Debug, Clone)]
#[command(name = "harness", version)]
struct Args {
    /// Directory to run in (a fresh subdirectory is created and removed).
    /// Default: the system temp dir (/tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where results.json, chart.svg and table.txt go (and with --grid,
    /// grid.md and grid.svg).
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Systems to measure, comma-separated (default: all in this build;
    /// with --grid, the grid's): ringwal-uring, ringwal-threaded, okaywal,
    /// raft-engine, walrus, groupcommit, tokio-uring, floor-4k-qd1,
    /// floor-4k-qd1-ring (one-producer cases only), floor-4k-qd8,
    /// floor-1m-qd4.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Workloads, comma-separated: closed, large, sweep, recovery
    /// (default: all four; with --grid, none but the grid).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Measure the standard grid in this one run: durable closed loop,
    /// 1 KiB records at 1, 16 and 64 producers, 64 KiB at 8 and 1 MiB at
    /// 4, each cell against its floor (floor-4k-qd1 and floor-4k-qd1-ring
    /// at 1 producer, floor-4k-qd8 at 16 and 64, floor-1m-qd4 at the
    /// record's size and the cell's producers in flight for the large
    /// records). Systems default to ringwal-uring, ringwal-threaded,
    /// okaywal, raft-engine and those floors (--systems narrows them);
    /// other workloads run only if --workloads names them. The cells are
    /// fixed: --size, --producers and --large-* do not change them. Adds
    /// the grid as one table (stdout, table.txt, `grid` in results.json),
    /// grid.md (the same table in markdown, for the docs) and grid.svg.
    #[arg(long)]
    grid: bool,
    /// Producer counts for the closed loop with small records.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    producers: Vec<usize>,
    /// Record size for the closed loop and the sweep, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Record size for the bandwidth case, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    large_size: usize,
    /// Producers for the bandwidth case.
    #[arg(long, default_value_t = 4)]
    large_producers: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Seconds of warm-up before each measured window.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Runs of every case (figures are medians; runs are interleaved
    /// across systems).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Latency SLA for the open-loop sweep: p99 must stay under it.
    #[arg(long, default_value_t = 1.0)]
    sla_ms: f64,
    /// A looser SLA also read off the same probes (coarser: the search
    /// aims at --sla-ms).
    #[arg(long, default_value_t = 5.0)]
    alt_sla_ms: f64,
    /// Seconds measured per sweep probe.
    #[arg(long, default_value_t = 1.5)]
    probe_secs: f64,
    /// Bisection steps of the sweep once a passing rate is bracketed
    /// (each narrows the bracket by a square root).
    #[arg(long, default_value_t = 2)]
    sweep_steps: usize,
    /// Lowest rate the sweep tries, records/s.
    #[arg(long, default_value_t = 50.0)]
    sweep_min: f64,
    /// The sweep walks down by halves from its starting rate (the system's
    /// best closed-loop throughput) to at most this factor below it.
    #[arg(long, default_value_t = 64.0)]
    sweep_depth: f64,
    /// Worker threads that send open-loop records to a log whose append
    /// blocks (a log with a pipelined API gets one dispatcher thread and
    /// one completion thread instead).
    #[arg(long, default_value_t = 128)]
    open_workers: usize,
    /// Drive every log's open loop with the worker threads, even one with
    /// a pipelined API (ringwal), to compare the two drivers.
    #[arg(long)]
    open_threads_only: bool,
    /// Log size for the recovery test (suffixes K, M, G: powers of 1024).
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    recovery_bytes: u64,
    /// Record size for the recovery log, in bytes.
    #[arg(long, default_value_t = 1024)]
    recovery_size: usize,
    /// Timed passes of the recovery test.
    #[arg(long, default_value_t = 3)]
    recovery_reps: usize,
    /// Size of the circular preallocated file of the hand-written
    /// baselines (groupcommit, tokio-uring), MiB.
    #[arg(long, default_value_t = 256)]
    baseline_file_mib: u64,
    /// Size of the device-floor file, MiB.
    #[arg(long, default_value_t = 1024)]
    floor_file_mib: u64,
    /// Pause between runs so one system's leftovers (writeback, discards
    /// of deleted files) do not land in the next one's window, ms.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
    /// Before each run, wait up to this long for the rest of the machine
    /// to go quiet (under a quarter of a CPU busy), seconds. Either way
    /// the table's `bg` column says how busy it was during the run.
    #[arg(long, default_value_t = 1.0)]
    quiet_wait_secs: f64,
    /// Measure beside a busy neighbour: before each measured run (its
    /// warm-up included) start another process (the harness again) that
    /// spins in a loop making no syscalls, pinned to the last CPU this
    /// process may run on, and kill it after the run, so the settle and
    /// quiet waits between runs see the machine without it. Every table
    /// title says "busy neighbour on CPU N", results.json records it and
    /// the share of a CPU the neighbour got in each run, and the `bg`
    /// column leaves it out. Refused on a machine (or cpuset) with a
    /// single CPU.
    #[arg(long)]
    busy_neighbour: bool,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in {s:?}")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: f64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    if n <= 0.0 {
        return Err("size must be positive".into());
    }
    Ok((n * mult as f64) as u64)
}

/// One closed-loop case: a record size and a number of producers.
struct Case {
    size: usize,
    producers: usize,
    systems: Vec<System>,
    floor: System,
    /// The busy neighbour's CPU, when the case runs beside one.
    neighbour: Option<usize>,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "closed loop · durable {} records · {} producer{}{}",
            report::human_size(self.size),
            self.producers,
            if self.producers == 1 { "" } else { "s" },
            report::beside(self.neighbour)
        )
    }
}

/// State of one harness run.
struct Run {
    args: Args,
    root: PathBuf,
    next_dir: usize,
    floor_file: Option<std::fs::File>,
    /// A random payload of every record size measured.
    payloads: Vec<Vec<u8>>,
    /// The busy neighbour's CPU (`--busy-neighbour`).
    neighbour: Option<usize>,
}

impl Run {
    fn fresh_dir(&mut self, tag: &str) -> io::Result<PathBuf> {
        self.next_dir += 1;
        let d = self.root.join(format!("m{:04}-{tag}", self.next_dir));
        std::fs::create_dir(&d)?;
        Ok(d)
    }

    fn payload(&self, size: usize) -> &[u8] {
        self.payloads
            .iter()
            .find(|p| p.len() == size)
            .expect("a payload made for every record size measured")
    }

    fn window(&self) -> Window {
        Window::after(
            Duration::from_secs_f64(self.args.warmup),
            Duration::from_secs_f64(self.args.secs),
        )
    }

    fn settle(&self) {
        let _ = std::process::Command::new("sync").status();
        std::thread::sleep(Duration::from_millis(self.args.settle_ms));
    }

    fn quiet(&self) {
        if self.args.quiet_wait_secs > 0.0 {
            measure::wait_for_quiet(Duration::from_secs_f64(self.args.quiet_wait_secs));
        }
    }

    fn baseline_bytes(&self) -> u64 {
        self.args.baseline_file_mib << 20
    }

    fn floor_bytes(&self) -> u64 {
        self.args.floor_file_mib << 20
    }

    /// The device-floor file, prepared on first use and kept for the run.
    fn floor(&mut self) -> io::Result<&std::fs::File> {
        if self.floor_file.is_none() {
            progress::note(&format!(
                "preparing the floor file ({} MiB, zero-written)",
                self.args.floor_file_mib
            ));
            let p = files::prepare_zeroed(&self.root.join("floor"), self.floor_bytes())?;
            if !p.direct {
                progress::note("the filesystem refused O_DIRECT: the floor is buffered");
            }
            self.floor_file = Some(p.file);
        }
        Ok(self.floor_file.as_ref().expect("set above"))
    }

    /// One closed-loop run of `sys`.
    fn closed(&mut self, sys: System, size: usize, producers: usize) -> io::Result<Raw> {
        let fb = self.floor_bytes();
        match sys {
            System::FloorQd1 => {
                let w = self.window();
                floor::qd1(self.floor()?, fb, 4096, w)
            }
            System::FloorQd1Ring => {
                let f = self.floor()?.try_clone()?;
                floor::queued(f, fb, 4096, 1, self.window())
            }
            System::FloorQd8 => {
                let f = self.floor()?.try_clone()?;
                floor::queued(f, fb, 4096, 8, self.window())
            }
            System::Floor1m => {
                // The large case's floor: its record size (whole blocks, as
                // O_DIRECT needs) at its producers' depth; 1 MiB at 4 by
                // default, hence the name.
                let f = self.floor()?.try_clone()?;
                let block = size.next_multiple_of(4096);
                floor::queued(f, fb, block, producers, self.window())
            }
            #[cfg(feature = "tokio-uring")]
            System::TokioUring => {
                let dir = self.fresh_dir(sys.name())?;
                let path = dir.join("log");
                drop(files::prepare_zeroed(&path, self.baseline_bytes())?);
                let r = touring::closed(
                    &path,
                    self.baseline_bytes(),
                    producers,
                    self.payload(size),
                    self.window(),
                );
                let _ = std::fs::remove_dir_all(&dir);
                r
            }
            _ => {
                let dir = self.fresh_dir(sys.name())?;
                let ctx = OpenCtx {
                    workers: producers,
                    file_bytes: self.baseline_bytes(),
                };
                let log = systems::open(sys, &dir, &ctx)?;
                let r = load::closed(log.as_ref(), producers, self.payload(size), self.window());
                let c = log.close();
                let _ = std::fs::remove_dir_all(&dir);
                let r = r?;
                c?;
                Ok(r)
            }
        }
    }
}

/// One measured run, `f`, beside the busy neighbour on `cpu` if there is
/// one (see [`neighbour::beside`]). The run's background CPU counts every
/// process but the harness, the neighbour too: what it spun over the
/// window, at the rate it spun over the whole run, is taken out, so `bg`
/// stays the noise from outside the benchmark.
fn measured(
    cpu: Option<usize>,
    f: impl FnOnce() -> io::Result<Raw>,
) -> io::Result<(Raw, Option<Spent>)> {
    let (mut raw, spent) = neighbour::beside(cpu, f)?;
    if let Some(s) = &spent {
        raw.cpu.others = raw.cpu.others.saturating_sub(s.over(raw.elapsed));
    }
    Ok((raw, spent))
}

/// Run `f`, turning a panic (some peers panic on I/O errors) into an error.
fn guarded<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        Err(io::Error::other(format!("panicked: {msg}")))
    })
}

fn run_case(run: &mut Run, case: &Case) -> CaseResult {
    let reps = run.args.reps;
    let mut results: Vec<SysResult> = case
        .systems
        .iter()
        .map(|&s| SysResult::unmeasured(s, s.describe()))
        .collect();
    let mut hists: Vec<Vec<hdrhistogram::Histogram<u64>>> = vec![Vec::new(); case.systems.len()];
    let n = case.systems.len();
    for rep in 0..reps {
        // Interleave: each repetition starts with a different system.
        for k in 0..n {
            let i = (k + rep) % n;
            let sys = case.systems[i];
            progress::begin(format!(
                "{} · {} · run {}/{}",
                case.name(),
                sys.name(),
                rep + 1,
                reps
            ));
            // Quiet first, then the neighbour: the wait for a quiet
            // machine must not wait for our own spinner.
            run.quiet();
            let nb = run.neighbour;
            let res = guarded(|| measured(nb, || run.closed(sys, case.size, case.producers)));
            progress::pause();
            match res {
                Ok((raw, spent)) => {
                    results[i].reps.push(raw.sample());
                    hists[i].push(raw.hist);
                    results[i].neighbour.extend(spent);
                }
                Err(e) => {
                    progress::note(&format!("{} failed: {e}", sys.name()));
                    results[i].errors.push(e.to_string());
                }
            }
            run.settle();
        }
    }
    for (r, h) in results.iter_mut().zip(hists) {
        if !r.reps.is_empty() {
            r.median = Some(measure::median(&r.reps));
            r.curve = measure::curve(&measure::merge(h));
        }
    }
    let mut c = CaseResult {
        name: case.name(),
        size: case.size,
        producers: case.producers,
        reference_floor: case.floor,
        systems: results,
        busy_neighbour: case.neighbour,
    };
    c.compute_ratios();
    c
}

/// An open log (or prepared file) that sweep probes run against.
enum Target {
    Log(Box<dyn systems::Log>),
    #[cfg(feature = "tokio-uring")]
    Uring(PathBuf),
}

fn probe(run: &Run, t: &Target, rate: f64) -> io::Result<Raw> {
    let a = &run.args;
    let warm = Duration::from_secs_f64(0.25);
    let secs = Duration::from_secs_f64(a.probe_secs);
    let payload = run.payload(a.size);
    match t {
        Target::Log(log) => match log.pipelined() {
            Some(p) if !a.open_threads_only => {
                let mut raw = load::open_pipelined(p, rate, payload, warm, secs)?;
                raw.note = log.note();
                Ok(raw)
            }
            _ => load::open(log.as_ref(), rate, a.open_workers, payload, warm, secs),
        },
        #[cfg(feature = "tokio-uring")]
        Target::Uring(path) => touring::open(path, run.baseline_bytes(), rate, payload, warm, secs),
    }
}

/// Bracket, then bisect in log space, the highest rate whose p99 stays
/// under the SLA with nothing left behind.
fn sweep_once(run: &mut Run, sys: System, hint: f64, rep: usize) -> io::Result<SweepRep> {
    let a = run.args.clone();
    let sla_us = (a.sla_ms * 1000.0).round() as u64;
    let dir = run.fresh_dir(sys.name())?;
    let target = match sys {
        #[cfg(feature = "tokio-uring")]
        System::TokioUring => {
            let path = dir.join("log");
            drop(files::prepare_zeroed(&path, run.baseline_bytes())?);
            Target::Uring(path)
        }
        _ => Target::Log(systems::open(
            sys,
            &dir,
            &OpenCtx {
                workers: a.open_workers,
                file_bytes: run.baseline_bytes(),
            },
        )?),
    };
    let mut probes: Vec<Probe> = Vec::new();
    let try_rate = |run: &Run, rate: f64, probes: &mut Vec<Probe>| -> io::Result<bool> {
        progress::begin(format!(
            "open-loop sweep · {} · sweep {}/{} · {} records/s offered",
            sys.name(),
            rep + 1,
            a.reps,
            report::thousands(rate)
        ));
        run.quiet();
        let raw = guarded(|| measured(run.neighbour, || probe(run, &target, rate)));
        progress::pause();
        let (raw, neighbour) = raw?;
        let s = raw.sample();
        let pass = s.missed == 0 && s.p99_us < sla_us;
        probes.push(Probe {
            rate,
            sample: s,
            pass,
            neighbour,
        });
        std::thread::sleep(Duration::from_millis(a.settle_ms));
        Ok(pass)
    };
    // Latency is not monotonic in the rate on every device (an idle
    // virtual disk can be slower than a busy one), so instead of bisecting
    // from the bottom, walk down from the top by halves to the first rate
    // that passes, then bisect between it and the failure just above.
    let top = hint.max(a.sweep_min);
    let mut above: Option<f64> = None;
    let mut rate = top;
    let mut best = None;
    loop {
        if try_rate(run, rate, &mut probes)? {
            best = Some(rate);
            break;
        }
        above = Some(rate);
        if rate <= a.sweep_min || rate <= top / a.sweep_depth {
            break;
        }
        rate = (rate / 2.0).max(a.sweep_min).max(top / a.sweep_depth);
    }
    let capped = best == Some(top);
    if let (Some(mut lo), Some(mut hi)) = (best, above) {
        for _ in 0..a.sweep_steps {
            let mid = (lo * hi).sqrt();
            if try_rate(run, mid, &mut probes)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        best = Some(lo);
    }
    let best = best.unwrap_or(0.0);
    let closed = match target {
        Target::Log(log) => log.close(),
        #[cfg(feature = "tokio-uring")]
        Target::Uring(_) => Ok(()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    closed?;
    run.settle();
    let alt_us = (a.alt_sla_ms * 1000.0).round() as u64;
    let best_alt = probes
        .iter()
        .filter(|p| p.sample.missed == 0 && p.sample.p99_us < alt_us)
        .map(|p| p.rate)
        .fold(0.0, f64::max);
    Ok(SweepRep {
        best,
        best_alt,
        capped,
        probes,
        error: None,
    })
}

fn run_sweeps(run: &mut Run, systems: &[System], cases: &[CaseResult]) -> Vec<SweepResult> {
    let a = run.args.clone();
    let sla_us = (a.sla_ms * 1000.0).round() as u64;
    // Start each sweep at the system's best closed-loop throughput (what it
    // can do with unlimited patience); 50k records/s when unmeasured.
    let hint = |s: System| {
        cases
            .iter()
            .filter(|c| c.size == a.size)
            .filter_map(|c| c.median(s).map(|m| m.ops_per_s))
            .fold(0.0f64, f64::max)
    };
    let mut out: Vec<SweepResult> = systems
        .iter()
        .map(|&s| SweepResult {
            system: s,
            name: s.name(),
            size: a.size,
            sla_us,
            alt_sla_us: (a.alt_sla_ms * 1000.0).round() as u64,
            reps: Vec::new(),
            median_best: None,
            median_best_alt: None,
            capped: false,
        })
        .collect();
    for rep in 0..a.reps {
        for k in 0..systems.len() {
            let i = (k + rep) % systems.len();
            let s = systems[i];
            let h = match hint(s) {
                x if x > 0.0 => x * 1.1,
                _ => 50_000.0,
            };
            let r = guarded(|| sweep_once(run, s, h, rep)).unwrap_or_else(|e| {
                progress::note(&format!("{} sweep failed: {e}", s.name()));
                SweepRep {
                    best: 0.0,
                    best_alt: 0.0,
                    capped: false,
                    probes: Vec::new(),
                    error: Some(e.to_string()),
                }
            });
            out[i].reps.push(r);
        }
    }
    for s in &mut out {
        let mut ok: Vec<&SweepRep> = s.reps.iter().filter(|r| r.error.is_none()).collect();
        if ok.is_empty() {
            continue;
        }
        ok.sort_by(|a, b| a.best.total_cmp(&b.best));
        let mid = ok[ok.len() / 2];
        s.median_best = Some(mid.best);
        s.capped = mid.capped;
        let mut alts: Vec<f64> = ok.iter().map(|r| r.best_alt).collect();
        alts.sort_by(f64::total_cmp);
        s.median_best_alt = Some(alts[alts.len() / 2]);
    }
    out
}

fn run_recovery(run: &mut Run) -> io::Result<RecoveryResult> {
    let a = run.args.clone();
    let dir = run.fresh_dir("recovery")?;
    progress::begin(format!(
        "recovery · writing a {:.2} GB log of {}-byte records",
        a.recovery_bytes as f64 / 1e9,
        a.recovery_size
    ));
    let filled = recovery::fill(&dir, a.recovery_bytes, a.recovery_size)?;
    progress::pause();
    run.settle();
    let mut passes = Vec::new();
    let mut dropped = true;
    let mut beside = Vec::new();
    for rep in 0..a.recovery_reps {
        progress::begin(format!(
            "recovery · raw read + open/replay · pass {}/{}",
            rep + 1,
            a.recovery_reps
        ));
        // A pass times two reads and calls `before` ahead of each: the
        // neighbour of the read before is stopped there, the machine
        // waited on without it, and a new one started for the next read.
        let busy = NeighbourPerRead::new(run.neighbour);
        let (p, d) = recovery::pass(&dir, rep % 2 == 1, || busy.next(|| run.quiet()))?;
        progress::pause();
        beside.extend(busy.finish()?);
        dropped &= d;
        passes.push(p);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let med = |f: &dyn Fn(&recovery::Pass) -> f64| {
        let mut v: Vec<f64> = passes.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let log_bytes = filled.log_bytes as f64;
    let raw_mb_s = med(&|p| p.raw_bytes as f64 / 1e6 / p.raw_secs);
    let replay_mb_s = med(&|p| log_bytes / 1e6 / p.replay_secs);
    let replay_vs_raw_paired =
        med(&|p| (log_bytes / p.replay_secs) / (p.raw_bytes as f64 / p.raw_secs));
    Ok(RecoveryResult {
        replay_vs_raw_paired,
        replay_payload_mb_s: med(&|p| p.replay_payload_bytes as f64 / 1e6 / p.replay_secs),
        open_secs: med(&|p| p.open_secs),
        raw_cpu_secs: med(&|p| p.raw_cpu_secs),
        open_cpu_secs: med(&|p| p.open_cpu_secs),
        replay_cpu_secs: med(&|p| p.replay_cpu_secs),
        replay_secs: med(&|p| p.replay_secs),
        replay_vs_raw: replay_mb_s / raw_mb_s,
        raw_mb_s,
        replay_mb_s,
        cache_dropped: dropped,
        filled,
        passes,
        neighbour: beside,
    })
}

/// A busy neighbour for each timed read of a recovery pass, whose
/// `before` hook (a plain `Fn()`) is the only place to start one: the
/// neighbours' records, and the first failure to start or stop one,
/// which [`finish`](Self::finish) returns after the pass.
struct NeighbourPerRead {
    cpu: Option<usize>,
    running: std::cell::RefCell<Option<ringwal_platform::neighbour::Neighbour>>,
    spent: std::cell::RefCell<Vec<Spent>>,
    failed: std::cell::RefCell<Option<io::Error>>,
}

impl NeighbourPerRead {
    fn new(cpu: Option<usize>) -> NeighbourPerRead {
        NeighbourPerRead {
            cpu,
            running: Default::default(),
            spent: Default::default(),
            failed: Default::default(),
        }
    }

    /// Stop the running neighbour, if any; then `quiet`; then start the
    /// next one.
    fn next(&self, quiet: impl FnOnce()) {
        self.stop();
        quiet();
        if let Some(cpu) = self.cpu {
            match neighbour::start(cpu) {
                Ok(n) => *self.running.borrow_mut() = Some(n),
                Err(e) => self.fail(e),
            }
        }
    }

    fn stop(&self) {
        let running = self.running.borrow_mut().take();
        if let Some(n) = running {
            match neighbour::stop(n) {
                Ok(s) => self.spent.borrow_mut().push(s),
                Err(e) => self.fail(e),
            }
        }
    }

    fn fail(&self, e: io::Error) {
        self.failed.borrow_mut().get_or_insert(e);
    }

    /// Stop the last neighbour; what each did, or the first failure.
    fn finish(self) -> io::Result<Vec<Spent>> {
        self.stop();
        match self.failed.into_inner() {
            Some(e) => Err(e),
            None => Ok(self.spent.into_inner()),
        }
    }
}

/// Systems to run, and those asked for that this build cannot run (name,
/// reason).
type Chosen = (Vec<System>, Vec<(String, String)>);

fn choose_systems(a: &Args) -> Result<Chosen, String> {
    let wanted: Vec<System> = if a.systems.is_empty() && a.grid {
        grid::SYSTEMS.to_vec()
    } else if a.systems.is_empty() {
        systems::ALL.to_vec()
    } else {
        a.systems
            .iter()
            .map(|n| System::from_name(n.trim()).ok_or_else(|| format!("unknown system {n:?}")))
            .collect::<Result<_, _>>()?
    };
    let mut ok = Vec::new();
    let mut missing = Vec::new();
    for s in wanted {
        match s.available() {
            Ok(()) => ok.push(s),
            Err(why) => missing.push((s.name().to_string(), why.to_string())),
        }
    }
    Ok((ok, missing))
}

fn main() -> ExitCode {
    // Started by --busy-neighbour as the neighbour: be one, not a harness.
    if let Some(e) = neighbour::serve_if_asked() {
        eprintln!("harness: {e}");
        return ExitCode::FAILURE;
    }
    let args = Args::parse();
    match real_main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            progress::pause();
            eprintln!("harness: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workloads to run: those `--workloads` names, else all four; with
/// `--grid` none, since a grid run is for the grid's figures and the rest
/// would take longer than the grid itself.
fn workloads(a: &Args) -> Vec<String> {
    match (&a.workloads[..], a.grid) {
        ([], true) => Vec::new(),
        ([], false) => ["closed", "large", "sweep", "recovery"]
            .map(String::from)
            .to_vec(),
        (named, _) => named.to_vec(),
    }
}

fn real_main(mut args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    args.workloads = workloads(&args);
    for w in &args.workloads {
        if !["closed", "large", "sweep", "recovery"].contains(&w.as_str()) {
            return Err(format!("unknown workload {w:?}").into());
        }
    }
    if args.reps == 0 || args.secs <= 0.0 || args.producers.contains(&0) {
        return Err("--reps, --secs and every --producers value must be positive".into());
    }
    let (chosen, unavailable) = choose_systems(&args)?;
    // Before anything is created: a machine that cannot host a neighbour
    // refuses at once.
    let neighbour = if args.busy_neighbour {
        Some(neighbour::last_cpu()?)
    } else {
        None
    };
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("ringwal-harness-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    // Walrus finds its directory through the environment; set it while the
    // process is still single-threaded.
    std::env::set_var("WALRUS_DATA_DIR", &root);
    std::env::set_var("WALRUS_QUIET", "1");
    // Sleep-until-due is how the open loop keeps its schedule: ask for the
    // tightest timer slack (inherited by every thread spawned from here)
    // instead of the default 50 µs. Needs Linux 4.6+; ignored elsewhere.
    let slack = std::fs::write("/proc/self/timerslack_ns", "1").is_ok();
    std::fs::create_dir_all(&args.out)?;
    progress::start();

    let mut machine = Machine::probe(&root);
    machine.busy_neighbour = neighbour;
    progress::note(&format!("machine: {}", machine.summary()));
    progress::note(&format!("running in {}", root.display()));

    let mut sizes = vec![args.size, args.large_size];
    if args.grid {
        sizes.extend(grid::CELLS.iter().map(|c| c.size));
    }
    sizes.sort_unstable();
    sizes.dedup();
    let payloads = sizes
        .into_iter()
        .map(|n| {
            let mut p = vec![0u8; n];
            floor::fill_random(&mut p);
            p
        })
        .collect();
    let mut run = Run {
        args: args.clone(),
        root: root.clone(),
        next_dir: 0,
        floor_file: None,
        payloads,
        neighbour,
    };
    let has = |w: &str| args.workloads.iter().any(|x| x == w);
    let logs: Vec<System> = chosen.iter().copied().filter(|s| !s.is_floor()).collect();

    let mut plan = Vec::new();
    if args.grid {
        // First, so that the grid's figures are the run's earliest and
        // closest together in time.
        for cell in grid::CELLS {
            let systems: Vec<System> = chosen
                .iter()
                .copied()
                .filter(|s| !s.is_floor() || cell.floors().contains(s))
                .collect();
            plan.push(Case {
                size: cell.size,
                producers: cell.producers,
                systems,
                floor: cell.floor(),
                neighbour,
            });
        }
    }
    let in_grid = plan.len();
    if has("closed") {
        let mut ps = args.producers.clone();
        ps.sort_unstable();
        ps.dedup();
        for p in ps {
            let floor = if p == 1 {
                System::FloorQd1
            } else {
                System::FloorQd8
            };
            let systems: Vec<System> = chosen
                .iter()
                .copied()
                .filter(|s| {
                    !s.is_floor()
                        || matches!(s, System::FloorQd1 | System::FloorQd8)
                        || (p == 1 && *s == System::FloorQd1Ring)
                })
                .collect();
            plan.push(Case {
                size: args.size,
                producers: p,
                systems,
                floor,
                neighbour,
            });
        }
    }
    if has("large") {
        let systems: Vec<System> = chosen
            .iter()
            .copied()
            .filter(|s| !s.is_floor() || *s == System::Floor1m)
            .collect();
        plan.push(Case {
            size: args.large_size,
            producers: args.large_producers,
            systems,
            floor: System::Floor1m,
            neighbour,
        });
    }

    let mut cases = Vec::new();
    let mut grid = None;
    for case in &plan {
        let c = run_case(&mut run, case);
        // Show each case as soon as it is done.
        progress::pause();
        eprintln!("\n{}", report::case_table(&c));
        cases.push(c);
        if cases.len() == in_grid && args.grid {
            let head = grid::Head {
                started_utc: machine.date_utc.clone(),
                finished_utc: machine::utc_now(),
                commit: machine.ringwal_commit.clone(),
                machine: machine.hardware(),
                reps: args.reps,
                secs: args.secs,
                warmup_secs: args.warmup,
                busy_neighbour: neighbour,
            };
            grid = Some(grid::Grid::new(head, &cases[..in_grid]));
        }
    }

    let sweeps = if has("sweep") && !logs.is_empty() {
        run_sweeps(&mut run, &logs, &cases)
    } else {
        Vec::new()
    };

    let (recovery, recovery_error) = if has("recovery") {
        match guarded(|| run_recovery(&mut run)) {
            Ok(r) => (Some(r), None),
            Err(e) => {
                progress::note(&format!("recovery failed: {e}"));
                (None, Some(e.to_string()))
            }
        }
    } else {
        (None, None)
    };
    progress::pause();
    drop(run);
    let _ = std::fs::remove_dir_all(&root);

    let mut rep = Report {
        machine,
        settings: settings(&args, slack),
        systems: chosen.iter().map(|&s| (s, s.describe())).collect(),
        unavailable,
        cases,
        sweeps,
        recovery,
        recovery_error,
        targets: Vec::new(),
        grid,
        total_secs: started.elapsed().as_secs_f64(),
    };
    // The cells the targets and chart.svg read: with --grid the grid's,
    // whatever --size and --producers say.
    let (main_size, max_p, large) = if args.grid {
        let (small, large) = (grid::CELLS[0], grid::CELLS[grid::CELLS.len() - 1]);
        let most = grid::CELLS
            .iter()
            .filter(|c| c.size == small.size)
            .map(|c| c.producers)
            .max()
            .unwrap_or(1);
        (small.size, most, (large.size, large.producers))
    } else {
        let most = args.producers.iter().copied().max().unwrap_or(1);
        (args.size, most, (args.large_size, args.large_producers))
    };
    rep.compute_targets(main_size, max_p, large);
    let table = rep.table();
    println!("{table}");
    std::fs::write(args.out.join("table.txt"), &table)?;
    let json = serde_json::to_string_pretty(&rep)?;
    std::fs::write(args.out.join("results.json"), json + "\n")?;
    let svg = args.out.join("chart.svg");
    if let Err(e) = chart::draw(&rep, &svg, main_size, max_p) {
        eprintln!("harness: chart not drawn: {e}");
    }
    let mut wrote = vec![
        args.out.join("table.txt"),
        args.out.join("results.json"),
        svg,
    ];
    if let Some(g) = &rep.grid {
        let md = args.out.join("grid.md");
        std::fs::write(&md, g.markdown())?;
        wrote.push(md);
        let svg = args.out.join("grid.svg");
        match chart::draw_grid(g, &svg) {
            Ok(()) => wrote.push(svg),
            Err(e) => eprintln!("harness: grid chart not drawn: {e}"),
        }
    }
    let wrote: Vec<String> = wrote.iter().map(|p| p.display().to_string()).collect();
    eprintln!("wrote {}", wrote.join(", "));
    Ok(())
}

fn settings(a: &Args, tight_timer_slack: bool) -> Settings {
    Settings {
        tight_timer_slack,
        nice: own_nice(),
        reps: a.reps,
        secs: a.secs,
        warmup_secs: a.warmup,
        sla_ms: a.sla_ms,
        probe_secs: a.probe_secs,
        open_workers: a.open_workers,
        open_threads_only: a.open_threads_only,
        baseline_file_mib: a.baseline_file_mib,
        floor_file_mib: a.floor_file_mib,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// This process's nice value (field 19 of `/proc/self/stat`).
fn own_nice() -> i64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| {
            let rest = t.rfind(')').map(|i| t[i + 1..].to_string())?;
            rest.split_whitespace().nth(16)?.parse().ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, workloads, Args};
    use clap::Parser;

    #[test]
    fn grid_runs_only_the_workloads_named() {
        let w = |argv: &[&str]| workloads(&Args::parse_from([&["harness"], argv].concat()));
        assert_eq!(w(&[]), ["closed", "large", "sweep", "recovery"]);
        assert!(w(&["--grid"]).is_empty());
        assert_eq!(w(&["--grid", "--workloads", "sweep"]), ["sweep"]);
        assert_eq!(w(&["--workloads", "closed,large"]), ["closed", "large"]);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("1.5k"), Ok(1536));
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("3Q").is_err());
    }
}
