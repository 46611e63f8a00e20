//! Durable throughput of one producer writing groups of 16 records of
//! 1 KiB, three ways, side by side in one run (alternating rounds, median
//! reported): each record waited on alone, the 16 appended then the last
//! waited on (group commit), and the 16 as one atomic batch.
//!
//! Run: `cargo run --release --example batch_throughput [DIR] [SECONDS]`
//! (DIR defaults to a temporary directory; SECONDS per case per round,
//! default 2). It measures, it asserts nothing.

use std::time::{Duration, Instant};

use ringwal::{Config, Level, Wal};

const GROUP: usize = 16;
const RECORD: usize = 1024;
const ROUNDS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Case {
    OneByOne,
    Grouped,
    Batch,
}

fn run(dir: &std::path::Path, case: Case, secs: f64) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let (wal, _) = Wal::open(dir, Config::default()).expect("open");
    let payload = vec![0x5au8; RECORD];
    let refs: Vec<(u16, &[u8])> = (0..GROUP).map(|_| (0, payload.as_slice())).collect();
    let start = Instant::now();
    let mut records = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        match case {
            Case::OneByOne => {
                for _ in 0..GROUP {
                    wal.append(0, &payload)
                        .unwrap()
                        .wait(Level::Durable)
                        .unwrap();
                }
            }
            Case::Grouped => {
                let mut last = None;
                for _ in 0..GROUP {
                    last = Some(wal.append(0, &payload).unwrap());
                }
                last.unwrap().wait(Level::Durable).unwrap();
            }
            Case::Batch => wal
                .append_batch(&refs)
                .unwrap()
                .wait(Level::Durable)
                .unwrap(),
        }
        records += GROUP as u64;
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    wal.close().unwrap();
    rate
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tmp;
    let dir = match args.next() {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().expect("tempdir");
            tmp.path().join("log")
        }
    };
    let secs: f64 = args.next().map_or(2.0, |s| s.parse().expect("SECONDS"));
    let cases = [Case::OneByOne, Case::Grouped, Case::Batch];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        for (i, &c) in cases.iter().enumerate() {
            rates[i].push(run(&dir, c, secs));
        }
    }
    println!("durable 1 KiB records, groups of {GROUP}, 1 producer, median of {ROUNDS} alternating rounds");
    for (i, c) in cases.iter().enumerate() {
        let mut r = rates[i].clone();
        r.sort_by(f64::total_cmp);
        println!(
            "{:>10}: {:>9.0} records/s  (rounds: {:?})",
            format!("{c:?}"),
            r[ROUNDS / 2],
            rates[i].iter().map(|x| x.round()).collect::<Vec<_>>()
        );
    }
}
