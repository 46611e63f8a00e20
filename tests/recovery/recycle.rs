//! Recycled segments: checkpointed files reused as spares.
//!
//! A recycled segment keeps its previous life's frames past wherever the
//! new life has written; they were written under another salt and must
//! never validate. These tests checkpoint aggressively so that most rolls
//! reuse a file, then check that nothing acknowledged is lost and nothing
//! stale comes back: after clean closes, after power loss on the sim disk
//! (in the middle of a recycled segment, during the roll into one), and
//! after losing a block inside a recycled segment on real files. A clean
//! close in a recycled segment must reopen without a cut.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Backend, Config, Durability, Level, Lsn, Wal};
use ringwal_platform::sim::{Faults, SimFs};

fn body(rng: &mut StdRng, tag: u64) -> Vec<u8> {
    let len = rng.gen_range(8..3000);
    let mut p = vec![0u8; len];
    rng.fill(&mut p[..]);
    p[..8].copy_from_slice(&tag.to_le_bytes());
    p
}

fn segment_inodes(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().ino(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Reads everything and checks it against `appended`: LSNs dense from the
/// oldest kept, each record exactly what was appended under its LSN.
/// Returns the last LSN.
fn check_log(wal: &Wal, appended: &HashMap<Lsn, Vec<u8>>, what: &str) -> Lsn {
    let mut expect = None;
    for rec in wal.reader_from(0).unwrap() {
        let rec = rec.unwrap_or_else(|e| panic!("{what}: read: {e}"));
        if let Some(x) = expect {
            assert_eq!(rec.lsn, x, "{what}: LSNs must be dense (a stale frame?)");
        } else {
            assert_eq!(rec.lsn, wal.oldest_lsn(), "{what}: first record");
        }
        match appended.get(&rec.lsn) {
            Some(b) => assert_eq!(&rec.payload, b, "{what}: record {}", rec.lsn),
            None => panic!("{what}: record {} was never appended", rec.lsn),
        }
        expect = Some(rec.lsn + 1);
    }
    expect.map_or(0, |x| x - 1)
}

fn recycles_on_real_files(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder()
        .backend(backend)
        .segment_bytes(128 << 10)
        .max_record_bytes(8 << 10)
        .write_bytes(16 << 10)
        .max_inflight(2)
        .build();
    let mut rng = StdRng::seed_from_u64(7);
    let mut appended = HashMap::new();
    let mut seen_inodes: HashMap<u64, String> = HashMap::new();
    let mut reused = 0;
    for round in 0..3 {
        let (wal, report) = Wal::open(dir.path(), cfg.clone()).unwrap();
        check_log(&wal, &appended, &format!("reopen {round}: {report:?}"));
        assert!(report.truncated.is_none(), "clean close, but {report:?}");
        for i in 0..1500u64 {
            let p = body(&mut rng, i);
            let t = wal.append(1, &p).unwrap();
            appended.insert(t.lsn(), p);
            if i.is_multiple_of(7) {
                t.wait(Level::Durable).unwrap();
            }
            if i.is_multiple_of(50) {
                // Keep one older segment: checkpoint a little behind.
                wal.checkpoint(wal.durable_lsn().saturating_sub(30))
                    .unwrap();
                for (name, ino) in segment_inodes(dir.path()) {
                    if let Some(old) = seen_inodes.insert(ino, name.clone())
                        && old != name
                    {
                        reused += 1;
                    }
                }
            }
        }
        wal.sync().unwrap();
        check_log(&wal, &appended, &format!("round {round}"));
        wal.close().unwrap();
    }
    assert!(
        reused > 5,
        "segments were not recycled ({reused} reuses seen)"
    );
    let spares = common::spare_files(dir.path());
    assert_eq!(spares, 0, "close leaves no spare behind");
}

#[test]
fn recycles_on_real_files_uring() {
    if cfg!(target_os = "linux") {
        recycles_on_real_files(Backend::Uring);
    }
}

#[test]
fn recycles_on_real_files_threaded() {
    recycles_on_real_files(Backend::Threaded);
}

/// A recycled segment closed cleanly, then damaged the way a crash would
/// leave it: the last block of data lost while a stale block from the
/// previous life stays behind it. Recovery cuts at the loss, keeps every
/// record before it, and later appends never bring stale frames back.
#[test]
fn lost_block_in_a_recycled_segment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder()
        .backend(Backend::Threaded)
        .segment_bytes(64 << 10)
        .max_record_bytes(4 << 10)
        .write_bytes(8 << 10)
        .max_inflight(2)
        .build();
    let mut rng = StdRng::seed_from_u64(11);
    let mut appended = HashMap::new();
    let (wal, _) = Wal::open(dir.path(), cfg.clone()).unwrap();
    let mut recycled_active = false;
    for i in 0..20_000u64 {
        let p = body(&mut rng, i);
        let t = wal.append(2, &p).unwrap();
        appended.insert(t.lsn(), p);
        t.wait(Level::Durable).unwrap();
        wal.checkpoint(wal.durable_lsn()).unwrap();
        // Stop once the newest segment is a reused file filled past its
        // first few blocks.
        if i > 400 && i.is_multiple_of(10) {
            let segs = segment_inodes(dir.path());
            let newest = dir.path().join(&segs.last().unwrap().0);
            let bytes = std::fs::read(&newest).unwrap();
            let stale_tail = bytes[48 << 10..].iter().any(|&b| b != 0);
            let filled = bytes[16 << 10..20 << 10].iter().any(|&b| b != 0);
            if stale_tail && filled && wal.stats().rolls > 20 {
                recycled_active = true;
                break;
            }
        }
    }
    assert!(recycled_active, "never wrote into a recycled segment");
    let last = wal.durable_lsn();
    wal.close().unwrap();

    let segs = segment_inodes(dir.path());
    let newest = dir.path().join(&segs.last().unwrap().0);
    // Clean reopen first: every record there, nothing stale.
    let (wal, report) = Wal::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(
        check_log(&wal, &appended, "clean reopen"),
        last,
        "{report:?}"
    );
    // Close zeroed the window behind the data: a clean end, no cut.
    assert!(report.truncated.is_none(), "{report:?}");
    wal.close().unwrap();

    // Lose the block at 8 KiB (this life's first frames) and reopen: a
    // torn tail there, nothing after it survives, nothing stale appears.
    // As a crash leaves it: the writes after the loss were in flight with
    // it (they vouch for nothing in this segment), and the manifest knows
    // only what the roll to it did.
    let base = ringwal::format::parse_segment_file_name(&segs.last().unwrap().0)
        .unwrap()
        .1;
    let mut img = std::fs::read(&newest).unwrap();
    img[8 << 10..12 << 10].fill(0);
    common::unvouch_from(&mut img, 12 << 10, base - 1);
    std::fs::write(&newest, &img).unwrap();
    common::as_after_crash(dir.path(), 1);
    let (wal, report) = Wal::open(dir.path(), cfg.clone()).unwrap();
    let cut = report.truncated.as_ref().expect("a torn tail").offset;
    assert!(cut <= 8 << 10, "{report:?}");
    let kept = check_log(&wal, &appended, "after the cut");
    assert!(kept < last);
    // Appends go on from the cut, past the stale bytes, and survive reopen.
    let mut more = HashMap::new();
    for i in 0..300u64 {
        let p = body(&mut rng, 1_000_000 + i);
        let t = wal.append(3, &p).unwrap();
        more.insert(t.lsn(), p);
        t.wait(Level::Durable).unwrap();
    }
    wal.close().unwrap();
    // The LSNs after the cut were handed out again: the appended map must
    // describe what was kept before it plus the new records.
    appended.retain(|&lsn, _| lsn <= kept);
    appended.extend(more);
    let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
    check_log(&wal, &appended, "after appending past the cut");
    wal.close().unwrap();
}

const DIR: &str = "/sim/recycle";

/// Power loss at a random point while every few appends checkpoint
/// everything durable, so nearly every roll goes into a recycled file.
#[test]
fn power_loss_in_recycled_segments_on_sim() {
    let seeds: u64 = std::env::var("RINGWAL_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(150, |n: u64| n.max(150));
    let mut recycles = 0;
    for seed in 0..seeds {
        let fs = SimFs::new(
            seed,
            Faults {
                sector: if seed.is_multiple_of(2) { 512 } else { 4096 },
                ..Faults::default()
            },
        );
        let mut rng = StdRng::seed_from_u64(seed);
        let durable_mode = rng.gen_bool(0.5);
        let cfg = |fs: &SimFs| {
            let b = Config::builder()
                .sim(fs)
                .segment_bytes(64 << 10)
                .max_record_bytes(4 << 10)
                .write_bytes(8 << 10)
                .max_inflight(3);
            if durable_mode {
                b.build()
            } else {
                b.durability(Durability::Deferred {
                    sync_interval: None,
                })
                .build()
            }
        };
        let (wal, _) = Wal::open(DIR, cfg(&fs)).unwrap();
        let wal = Arc::new(wal);
        let appended: Arc<Mutex<HashMap<Lsn, Vec<u8>>>> = Arc::default();
        let durable: Arc<Mutex<Lsn>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let crash_at = fs.writes() + rng.gen_range(20..400);
        let image = std::thread::scope(|s| {
            for p in 0..2u64 {
                let (wal, appended, durable, stop) =
                    (wal.clone(), appended.clone(), durable.clone(), stop.clone());
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 7 + p);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let b = body(&mut rng, p << 32 | i);
                        i += 1;
                        let Ok(t) = wal.append_then(1, &b, |lsn| {
                            appended.lock().unwrap().insert(lsn, b.clone());
                        }) else {
                            return;
                        };
                        if i.is_multiple_of(4) {
                            if t.wait(Level::Durable).is_err() {
                                return;
                            }
                            let mut d = durable.lock().unwrap();
                            *d = (*d).max(t.lsn());
                        }
                        if i.is_multiple_of(8) && wal.checkpoint(wal.durable_lsn()).is_err() {
                            return;
                        }
                    }
                });
            }
            while fs.writes() < crash_at {
                std::thread::yield_now();
            }
            let image = fs.crash(seed);
            stop.store(true, Ordering::Relaxed);
            image
        });
        drop(wal);
        recycles += fs
            .op_log()
            .iter()
            .filter(|l| l.starts_with("rename") && l.contains(".wal ->") && l.ends_with(".spare"))
            .count();
        let appended = appended.lock().unwrap();
        let durable = *durable.lock().unwrap();
        let what = format!("seed {seed}");
        let (wal, _) = Wal::open(DIR, cfg(&image))
            .unwrap_or_else(|e| panic!("{what}: open after power loss: {e}"));
        check_log(&wal, &appended, &what);
        // Checkpoints may have taken every acknowledged record away with
        // their segments; the log must still resume past all of them.
        let last = wal.next_lsn() - 1;
        assert!(
            last >= durable,
            "{what}: LSN {durable} acknowledged durable, recovery ends at {last}"
        );
        // And the recovered log takes appends and reopens cleanly.
        let t = wal.append(9, b"after").unwrap();
        assert_eq!(t.lsn(), last + 1, "{what}");
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let (wal, _) = Wal::open(DIR, cfg(&image)).unwrap();
        assert_eq!(wal.next_lsn(), last + 2, "{what}");
        wal.close().unwrap();
    }
    assert!(
        recycles > seeds as usize,
        "too few recycled segments: {recycles}"
    );
}

/// A reader overtaken by a checkpoint, whose segments are then recycled
/// and overwritten by later ones, ends with `Gap` (those records were
/// released), never `Corrupt`; every record it did yield is the one
/// appended under its LSN.
#[test]
fn a_reader_overtaken_by_recycling_ends_with_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder()
        .segment_bytes(64 << 10)
        .max_record_bytes(4 << 10)
        .build();
    let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut appended = HashMap::new();
    let mut append = |wal: &Wal, n: usize| {
        for _ in 0..n {
            let b = body(&mut rng, appended.len() as u64);
            let t = wal.append(0, &b).unwrap();
            t.wait(Level::Durable).unwrap();
            appended.insert(t.lsn(), b);
        }
    };
    append(&wal, 200);
    let mut reader = wal.reader_from(0).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.lsn, 1);
    // Release everything written so far, then roll through more segments
    // than the recycle pool holds, so every released file is reused.
    wal.checkpoint(wal.durable_lsn()).unwrap();
    append(&wal, 400);
    assert!(
        wal.oldest_lsn() > 1,
        "the checkpoint released the old segments"
    );
    let mut last = first.lsn;
    let end = loop {
        match reader.next() {
            Some(Ok(r)) => {
                assert_eq!(r.lsn, last + 1, "dense");
                assert_eq!(Some(&r.payload), appended.get(&r.lsn), "LSN {}", r.lsn);
                last = r.lsn;
            }
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    match end {
        Some(ringwal::Error::Released { lsn, oldest, .. }) => {
            assert_eq!(lsn, last + 1);
            assert_eq!(oldest, wal.oldest_lsn());
        }
        other => panic!("after LSN {last}: expected Released, got {other:?}"),
    }
    wal.close().unwrap();
}
