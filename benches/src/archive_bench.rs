//! The archive's figures, side by side in one run (docs/archive.md):
//!
//! 1. **Shipping sealed segments**: `Archiver::pass` over a log of sealed
//!    segments against a plain `Store::put` of the same files' bytes to
//!    the same store, rounds alternating which goes first, page cache
//!    warm for both.
//! 2. **Appends with an archiver running**: 1 KiB records, 16 producers,
//!    each waiting for `Durable`, p50/p99/p999 with and without an
//!    archiver attached (interval 1 s), rounds alternating.
//! 3. **The recovery point** in the rounds with the archiver: every
//!    50 ms, the age of the newest archived record (now minus the time its
//!    LSN became durable).
//! 4. **Restore** of a large archive from the local store against a full
//!    recovery (`Wal::open`) of the same log, page cache dropped before
//!    each (as root).
//!
//! `--url` picks the store (default: a local directory under `--dir`);
//! for S3 set the usual AWS variables. Medians over `--rounds`; ratios
//! are taken within a round.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use ringwal::archive::{self, Archiver, RestoreTo, Store, StoreOptions};
use ringwal::{Config, Durability, Level, Lsn, Wal};

#[derive(Debug, Parser)]
struct Args {
    /// Scratch directory on the disk under test (removed afterwards).
    #[arg(long, default_value = "bench-archive")]
    dir: PathBuf,
    /// The store: file:///abs/dir or s3://bucket/prefix (default: a
    /// directory under --dir).
    #[arg(long)]
    url: Option<String>,
    /// Rounds of each measurement.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds of load per append round.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Size of the log shipped in part 1, MiB.
    #[arg(long, default_value_t = 1024)]
    ship_mib: u64,
    /// Size of the log restored in part 4, MiB (0: skip).
    #[arg(long, default_value_t = 4096)]
    restore_mib: u64,
    /// Which parts to run (1-4).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    parts: Vec<u32>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn cfg() -> Config {
    Config::builder().durability(Durability::EveryWrite).build()
}

/// A log of about `mib` MiB in 1 MiB records, closed.
fn big_log(dir: &Path, mib: u64) -> Lsn {
    let (wal, _) = Wal::open(dir, cfg()).expect("open");
    let rec = vec![0x5au8; 1 << 20];
    let mut last = None;
    for i in 0..mib {
        let t = wal.append(1, &rec).expect("append");
        if i % 64 == 63 {
            t.wait(Level::Durable).expect("durable");
        }
        last = Some(t);
    }
    let t = last.expect("mib > 0");
    t.wait(Level::Durable).expect("durable");
    wal.close().expect("close");
    t.lsn()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

fn drop_caches() {
    // Best effort: needs root. Without it both sides read warm.
    let _ = std::process::Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn part1(args: &Args, url: &str) {
    let log = args.dir.join("ship-log");
    big_log(&log, args.ship_mib);
    let files = segment_files(&log);
    let store = Store::open(url, &StoreOptions::default()).expect("store");
    // Warm the page cache for both sides.
    for f in &files {
        let _ = std::fs::read(f).expect("read");
    }
    let (mut plain, mut arch, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let run_plain = |r: usize| {
            let t = Instant::now();
            let mut bytes = 0;
            for f in &files {
                let b = std::fs::read(f).expect("read");
                bytes += b.len() as u64;
                let name = format!("plain/{r}/{}", f.file_name().unwrap().to_str().unwrap());
                store.put(&name, b).expect("put");
            }
            bytes as f64 / t.elapsed().as_secs_f64() / 1e6
        };
        let run_arch = |r: usize| {
            let u = format!("{}/arch-{r}", url.trim_end_matches('/'));
            // A fresh archive point per round: the directory's is the
            // last round's otherwise, and it would ship nothing.
            let _ = std::fs::remove_file(log.join("00001.archived"));
            let mut a =
                Archiver::open(&log, &cfg(), &u, &StoreOptions::default()).expect("archiver");
            let t = Instant::now();
            let p = a.pass().expect("pass");
            p.bytes as f64 / t.elapsed().as_secs_f64() / 1e6
        };
        let (p, a) = if r % 2 == 0 {
            let p = run_plain(r);
            (p, run_arch(r))
        } else {
            let a = run_arch(r);
            (run_plain(r), a)
        };
        println!(
            "part 1 round {r}: plain put {p:.0} MB/s, archiver {a:.0} MB/s, ratio {:.2}",
            a / p
        );
        plain.push(p);
        arch.push(a);
        ratio.push(a / p);
    }
    println!(
        "part 1: shipping sealed segments ({} files, {} MiB): plain put {:.0} MB/s, archiver {:.0} MB/s, \
         archiver/plain median {:.2}",
        files.len(),
        args.ship_mib,
        median(plain),
        median(arch),
        median(ratio)
    );
    let _ = std::fs::remove_dir_all(&log);
}

/// One closed-loop round: 16 producers, 1 KiB, durable; with an archiver
/// when `url` is given. Returns the latency histogram (ns) and, with an
/// archiver, the recovery-point samples (ms).
fn load_round(dir: &Path, secs: u64, url: Option<&str>) -> (Histogram<u64>, Vec<f64>) {
    let _ = std::fs::remove_dir_all(dir);
    let (wal, _) = Wal::open(dir, cfg()).expect("open");
    let wal = Arc::new(wal);
    let running = url.map(|u| {
        Archiver::attach(&wal, u, &StoreOptions::default())
            .expect("attach")
            .spawn(Duration::from_secs(1))
            .expect("spawn")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3).expect("histogram")));
    let producers: Vec<_> = (0..16)
        .map(|_| {
            let (wal, stop, hist) = (wal.clone(), stop.clone(), hist.clone());
            std::thread::spawn(move || {
                let mut h = Histogram::<u64>::new(3).expect("histogram");
                let rec = vec![7u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    wal.append(1, &rec)
                        .expect("append")
                        .wait(Level::Durable)
                        .expect("durable");
                    h.record(t.elapsed().as_nanos() as u64).expect("record");
                }
                hist.lock().expect("lock").add(h).expect("add");
            })
        })
        .collect();
    // The durable LSN's timeline and the archive's age, sampled.
    let start = Instant::now();
    let mut timeline: Vec<(Instant, Lsn)> = Vec::new();
    let mut ages = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(10));
        let now = Instant::now();
        timeline.push((now, wal.durable_lsn()));
        if let Some(r) = &running {
            let archived = r.status().last_lsn;
            if start.elapsed() > Duration::from_secs(3) {
                // When the newest archived record became durable.
                let when = timeline
                    .iter()
                    .find(|(_, d)| *d >= archived)
                    .map(|(t, _)| *t);
                if let (Some(when), true) = (when, archived > 0) {
                    ages.push(now.duration_since(when).as_secs_f64() * 1e3);
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().expect("producer");
    }
    if let Some(r) = running {
        r.stop().expect("archiver stop");
    }
    let h = hist.lock().expect("lock").clone();
    match Arc::try_unwrap(wal) {
        Ok(w) => w.close().expect("close"),
        Err(_) => panic!("producers hold the log"),
    }
    (h, ages)
}

fn part2(args: &Args, url: &str) {
    let dir = args.dir.join("load-log");
    let (mut without, mut with, mut ratio, mut tput) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ages_all = Vec::new();
    for r in 0..args.rounds {
        let u = format!("{}/load-{r}", url.trim_end_matches('/'));
        let first_with = r % 2 == 1;
        let run = |w: bool| load_round(&dir, args.secs, w.then_some(u.as_str()));
        let (a, b) = if first_with {
            let b = run(true);
            (run(false), b)
        } else {
            let a = run(false);
            (a, run(true))
        };
        let (p_without, p_with) = (
            a.0.value_at_quantile(0.99) as f64,
            b.0.value_at_quantile(0.99) as f64,
        );
        let rate = |h: &Histogram<u64>| h.len() as f64 / args.secs as f64;
        println!(
            "part 2 round {r}: p99 without {:.0} us, with {:.0} us ({:.2}x); records/s without {:.0}, with {:.0}; \
             p50 {:.0} / {:.0} us",
            p_without / 1e3,
            p_with / 1e3,
            p_with / p_without,
            rate(&a.0),
            rate(&b.0),
            a.0.value_at_quantile(0.5) as f64 / 1e3,
            b.0.value_at_quantile(0.5) as f64 / 1e3
        );
        without.push(p_without / 1e3);
        with.push(p_with / 1e3);
        ratio.push(p_with / p_without);
        tput.push(rate(&b.0) / rate(&a.0));
        ages_all.extend(b.1);
    }
    println!(
        "part 2: 1 KiB x 16 durable, p99 without {:.0} us, with archiver {:.0} us, with/without median {:.2}; \
         throughput with/without median {:.2}",
        median(without),
        median(with),
        median(ratio),
        median(tput)
    );
    if !ages_all.is_empty() {
        let mut h = Histogram::<u64>::new(3).expect("histogram");
        for a in &ages_all {
            h.record(*a as u64).expect("record");
        }
        println!(
            "part 3: recovery point (age of the newest archived record), {} samples: p50 {} ms, p99 {} ms, max {} ms",
            ages_all.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn part4(args: &Args, url: &str) {
    if args.restore_mib == 0 {
        return;
    }
    let log = args.dir.join("restore-log");
    big_log(&log, args.restore_mib);
    let u = format!("{}/restore", url.trim_end_matches('/'));
    Archiver::open(&log, &cfg(), &u, &StoreOptions::default())
        .expect("archiver")
        .pass()
        .expect("pass");
    let bytes: u64 = segment_files(&log)
        .iter()
        .map(|f| std::fs::metadata(f).expect("stat").len())
        .sum();
    let (mut rec, mut res, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.rounds {
        drop_caches();
        let t = Instant::now();
        let (wal, report) = Wal::open(&log, cfg()).expect("open");
        let recovery = t.elapsed().as_secs_f64();
        wal.close().expect("close");
        let scanned = report.bytes_scanned as f64;
        let to = args.dir.join(format!("restored-{r}"));
        drop_caches();
        let t = Instant::now();
        let got = archive::restore(&u, &StoreOptions::default(), &to, &cfg(), RestoreTo::End)
            .expect("restore");
        let restore = t.elapsed().as_secs_f64();
        let (a, b) = (scanned / recovery / 1e6, got.bytes as f64 / restore / 1e6);
        println!(
            "part 4 round {r}: recovery of {:.0} MB at {a:.0} MB/s, restore of {:.0} MB at {b:.0} MB/s ({:.2}x)",
            scanned / 1e6,
            got.bytes as f64 / 1e6,
            b / a
        );
        rec.push(a);
        res.push(b);
        ratio.push(b / a);
        let _ = std::fs::remove_dir_all(&to);
    }
    println!(
        "part 4: {:.1} GB log: full recovery {:.0} MB/s, restore from the archive {:.0} MB/s, restore/recovery median {:.2}",
        bytes as f64 / 1e9,
        median(rec),
        median(res),
        median(ratio)
    );
    let _ = std::fs::remove_dir_all(&log);
}

fn main() {
    let args = Args::parse();
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir).expect("scratch dir");
    let dir = std::fs::canonicalize(&args.dir).expect("canonical dir");
    let args = Args { dir, ..args };
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| format!("file://{}", args.dir.join("store").display()));
    println!("archive bench: store {url}, {} rounds", args.rounds);
    if args.parts.contains(&1) {
        part1(&args, &url);
    }
    if args.parts.contains(&2) || args.parts.contains(&3) {
        part2(&args, &url);
    }
    if args.parts.contains(&4) {
        part4(&args, &url);
    }
    let _ = std::fs::remove_dir_all(&args.dir);
}
