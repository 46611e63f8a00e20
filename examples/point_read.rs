//! Point-read latency, side by side in one run: `Wal::read(lsn)`, which
//! starts at the sparse index's nearest point, against a walk from the
//! front of the record's segment (what a read costs without the index),
//! for random LSNs of a log of 1 KiB records in 64 MiB segments, read
//! through a warm page cache. The two are alternated sample by sample;
//! p50 and p99 of each and the ratio of the p50s are printed, per round
//! and as the median of three rounds.
//!
//! Run: `cargo run --release --example point_read [DIR] [MIB]` (DIR
//! defaults to a temporary directory; MIB of log to write, default 192).
//! It measures, it asserts nothing.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use ringwal::{Config, Durability, Level, Wal};

const RECORD: usize = 1024;
const SAMPLES: usize = 400;
const ROUNDS: usize = 3;

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = args
        .get(1)
        .map_or_else(|| tmp.path().join("log"), std::path::PathBuf::from);
    let mib: u64 = args.get(2).map_or(192, |s| s.parse().expect("MIB"));
    let _ = std::fs::remove_dir_all(&dir);
    let (wal, _) = Wal::open(
        &dir,
        Config::builder()
            .durability(Durability::Deferred {
                sync_interval: None,
            })
            .build(),
    )
    .expect("open");
    let payload = vec![b'x'; RECORD];
    let n = mib * 1024 * 1024 / (RECORD as u64 + 32);
    let mut last = None;
    for _ in 0..n {
        last = Some(wal.append(0, &payload).expect("append"));
    }
    last.expect("records").wait(Level::Durable).expect("sync");
    // The first LSN of each segment: where a read without the index starts.
    let mut bases = Vec::new();
    let mut seg = String::new();
    for r in wal.reader_from(0).expect("reader").located() {
        let r = r.expect("record");
        if r.segment != seg {
            seg = r.segment;
            bases.push(r.lsn);
        }
    }
    let stats = wal.stats();
    println!(
        "log: {n} records of {RECORD} B in {} segments; index: {} points ({} KiB)",
        bases.len(),
        stats.index_points,
        stats.index_points * 16 / 1024
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (mut p50s, mut p99s, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let (mut indexed, mut walked) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let lsn = rng.gen_range(1..=n);
            let t = Instant::now();
            let rec = wal.read(lsn).expect("read");
            indexed.push(t.elapsed());
            assert_eq!(rec.lsn, lsn);
            let base = bases[bases.partition_point(|&b| b <= lsn) - 1];
            let t = Instant::now();
            let rec = wal
                .reader_from(base)
                .expect("reader")
                .find(|r| r.as_ref().map_or(true, |r| r.lsn == lsn))
                .expect("found")
                .expect("read");
            walked.push(t.elapsed());
            assert_eq!(rec.lsn, lsn);
        }
        let (i50, i99) = (
            percentile(&mut indexed, 0.5),
            percentile(&mut indexed, 0.99),
        );
        let (w50, w99) = (percentile(&mut walked, 0.5), percentile(&mut walked, 0.99));
        let ratio = w50.as_secs_f64() / i50.as_secs_f64();
        println!(
            "round {round}: read(lsn) p50 {i50:?} p99 {i99:?} | walk from segment front p50 {w50:?} p99 {w99:?} | {ratio:.0}x"
        );
        p50s.push((i50.as_secs_f64(), w50.as_secs_f64()));
        p99s.push((i99.as_secs_f64(), w99.as_secs_f64()));
        ratios.push(ratio);
    }
    let us = |v: Vec<f64>| median(v) * 1e6;
    println!(
        "median of {ROUNDS}: read(lsn) p50 {:.0} us, p99 {:.0} us; front walk p50 {:.0} us, p99 {:.0} us; p50 ratio {:.0}x",
        us(p50s.iter().map(|p| p.0).collect()),
        us(p99s.iter().map(|p| p.0).collect()),
        us(p50s.iter().map(|p| p.1).collect()),
        us(p99s.iter().map(|p| p.1).collect()),
        median(ratios)
    );
    wal.close().expect("close");
}
