//! Large records: segments prepared without zero-writing.
//!
//! When the writes are large, the ring asks the preparer for spares that
//! are only preallocated (their blocks are unwritten extents that read
//! back as zeros) instead of zero-written. Recovery must not be able to
//! tell the difference: these tests fill several such segments, on real
//! files with both backends and on the sim disk with power losses, and
//! check that every acknowledged record comes back byte for byte, in LSN
//! order, with nothing invented and no tail cut after a clean close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Backend, Config, Level, Lsn, Wal};
use ringwal_platform::sim::{Faults, SimFs};

/// A payload that says which LSN-independent record it is.
fn payload(producer: u64, n: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    let mut x = producer.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n;
    for chunk in p.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    p
}

fn large_records_round_trip(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder()
        .backend(backend)
        .segment_bytes(8 << 20)
        .build();
    let (wal, _) = Wal::open(dir.path(), cfg.clone()).unwrap();
    let wal = Arc::new(wal);
    let written: Mutex<HashMap<Lsn, Vec<u8>>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for p in 0..4u64 {
            let (wal, written) = (wal.clone(), &written);
            s.spawn(move || {
                for n in 0..12u64 {
                    let len = (1 << 20) - (n as usize * 4099) % 300_000;
                    let body = payload(p, n, len);
                    let t = wal.append(p as u16, &body).unwrap();
                    t.wait(Level::Durable).unwrap();
                    written.lock().unwrap().insert(t.lsn(), body);
                }
            });
        }
    });
    let stats = wal.stats();
    assert!(stats.rolls >= 3, "expected several rolls, got {stats:?}");
    Arc::into_inner(wal).unwrap().close().unwrap();

    let (wal, report) = Wal::open(dir.path(), cfg).unwrap();
    assert!(report.truncated.is_none(), "clean close, but {report:?}");
    let written = written.into_inner().unwrap();
    assert_eq!(report.records, written.len() as u64);
    let mut expect = 1;
    for rec in wal.reader_from(0).unwrap() {
        let rec = rec.unwrap();
        assert_eq!(rec.lsn, expect);
        assert_eq!(&rec.payload, &written[&rec.lsn], "record {}", rec.lsn);
        expect += 1;
    }
    assert_eq!(expect - 1, written.len() as u64);
    // Appends continue in the recovered log.
    let t = wal.append(9, b"after").unwrap();
    assert_eq!(t.lsn(), expect);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
}

#[test]
fn large_records_round_trip_uring() {
    if cfg!(target_os = "linux") {
        large_records_round_trip(Backend::Uring);
    }
}

#[test]
fn large_records_round_trip_threaded() {
    large_records_round_trip(Backend::Threaded);
}

const DIR: &str = "/sim/large";

fn sim_config(fs: &SimFs) -> Config {
    Config::builder()
        .sim(fs)
        .segment_bytes(3 << 20)
        .max_record_bytes(1 << 20)
        .max_inflight(3)
        .build()
}

/// Power loss at a random point while large records fill segments whose
/// spares were preallocated only: every record acknowledged durable is
/// recovered intact, and nothing that was never appended appears.
#[test]
fn power_loss_with_large_records_on_sim() {
    let seeds: u64 = std::env::var("RINGWAL_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(24, |n: u64| (n / 20).max(24));
    for seed in 0..seeds {
        let fs = SimFs::new(seed, Faults::default());
        let mut rng = StdRng::seed_from_u64(seed);
        let (wal, _) = Wal::open(DIR, sim_config(&fs)).unwrap();
        let wal = Arc::new(wal);
        let appended: Arc<Mutex<HashMap<Lsn, Vec<u8>>>> = Arc::default();
        let durable: Arc<Mutex<Vec<Lsn>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let crash_at = fs.writes() + rng.gen_range(5..60);
        let image = std::thread::scope(|s| {
            for p in 0..2u64 {
                let (wal, appended, durable, stop) =
                    (wal.clone(), appended.clone(), durable.clone(), stop.clone());
                s.spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let len = 600_000 + ((seed * 31 + n * 7919) % 400_000) as usize;
                        let body = payload(p, n + seed * 1000, len);
                        n += 1;
                        let Ok(t) = wal.append_then(1, &body, |lsn| {
                            appended.lock().unwrap().insert(lsn, body.clone());
                        }) else {
                            return;
                        };
                        match t.wait(Level::Durable) {
                            Ok(()) => durable.lock().unwrap().push(t.lsn()),
                            Err(_) => return,
                        }
                    }
                });
            }
            while fs.writes() < crash_at && wal.stats().rolls < 6 {
                std::thread::yield_now();
            }
            let image = fs.crash(seed);
            stop.store(true, Ordering::Relaxed);
            image
        });
        drop(wal);
        let appended = appended.lock().unwrap();
        let max_durable = durable.lock().unwrap().iter().copied().max().unwrap_or(0);
        let (wal, _) = Wal::open(DIR, sim_config(&image))
            .unwrap_or_else(|e| panic!("seed {seed}: open after power loss: {e}"));
        let mut expect = 1;
        for rec in wal.reader_from(0).unwrap() {
            let rec = rec.unwrap_or_else(|e| panic!("seed {seed}: read: {e}"));
            assert_eq!(rec.lsn, expect, "seed {seed}: LSNs dense");
            match appended.get(&rec.lsn) {
                Some(body) => assert_eq!(&rec.payload, body, "seed {seed}: record {}", rec.lsn),
                None => panic!("seed {seed}: record {} was never appended", rec.lsn),
            }
            expect += 1;
        }
        assert!(
            expect > max_durable,
            "seed {seed}: LSN {max_durable} acknowledged durable, recovery ends at {}",
            expect - 1
        );
        wal.close().unwrap();
    }
}
