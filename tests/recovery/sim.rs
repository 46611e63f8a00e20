//! Crash simulation at scale on the sim backend.
//!
//! For each seed: a random workload (producers, record sizes up to the
//! maximum, several streams, syncs, checkpoints, tiny segments so rolls are
//! constant) runs on a simulated disk, which loses power at a random point;
//! real recovery (`Wal::open`) then runs on what survived. After each crash:
//! every record acknowledged `Durable` is there byte for byte, LSNs are
//! dense and ordered (but for the ranges an open reported given up),
//! nothing that was never appended appears, a pure crash never makes open
//! fail, appends continue past every recovered or given-up LSN (above
//! every one a poisoned life handed out), and
//! every atomic batch or committed transaction is recovered whole or not
//! at all.
//! A second family injects EIO and ENOSPC: every waiter then fails, nothing
//! in doubt is acknowledged, a failed sync is never retried, and the next
//! open recovers a consistent log.
//! A third runs both again with namespace faults on top (failed creates,
//! renames, unlinks and directory syncs), and single-fault tests aim one
//! at each path of the write side: a checkpoint's renames and unlinks
//! (refused with the segment list still what the disk holds), a roll's
//! directory sync, the manifest's rename and sync, the preparer's spare
//! (each poisons the log, and the directory is never synced again).
//!
//! `RINGWAL_SIM_SEEDS=N` sets the number of seeds (default 500 for pure
//! crashes, a fifth of that with faults); `RINGWAL_SIM_SEED=S` reruns one.
//! A failure prints its seed and the disk's operation log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{format, Config, Durability, Error, Level, Lsn, SyncMethod, Wal};
use ringwal_platform::sim::{Faults, NsOp, SimFs};

const DIR: &str = "/sim/log";
const MAX_RECORD: usize = 6 << 10;

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("RINGWAL_SIM_SEED") {
        return vec![s.parse().expect("RINGWAL_SIM_SEED must be a number")];
    }
    let n = std::env::var("RINGWAL_SIM_SEEDS").map_or(default, |v| {
        v.parse().expect("RINGWAL_SIM_SEEDS must be a number")
    });
    (0..n).collect()
}

fn config(fs: &SimFs, rng: &mut StdRng) -> Config {
    let level = if rng.gen_bool(0.5) {
        Level::Durable
    } else {
        Level::Written
    };
    let inflight = rng.gen_range(1..=4);
    // Data at rest, drawn per life so lives mix them: a third of the
    // lives encrypt (key 1, which every later life can read), a third
    // compress with LZ4.
    let keys = ringwal::StaticKeys::new();
    keys.insert(1, ringwal::Key::new([0x51; 32]), rng.gen_bool(1.0 / 3.0));
    let codec = if rng.gen_bool(1.0 / 3.0) {
        ringwal::Codec::Lz4
    } else {
        ringwal::Codec::None
    };
    Config::builder()
        .sim(fs)
        .segment_bytes(64 << 10)
        .max_record_bytes(MAX_RECORD)
        .write_bytes(16 << 10)
        .max_inflight(inflight)
        .durability(if level == Level::Durable {
            Durability::EveryWrite
        } else {
            Durability::Deferred {
                sync_interval: None,
            }
        })
        // Every way a durable write is made durable: by itself, linked
        // to an fdatasync, or by a later fdatasync shared with others.
        .sync_method(
            [
                SyncMethod::Dsync,
                SyncMethod::WriteThenFdatasync,
                SyncMethod::Grouped,
            ][rng.gen_range(0..3)],
        )
        .encryption(std::sync::Arc::new(keys))
        .compression(codec, 64)
        .build()
}

/// What the workload did, as the test knows it.
#[derive(Default)]
struct Ledger {
    /// Every record appended (LSN → stream and payload), acknowledged or not.
    appended: HashMap<Lsn, (u16, Vec<u8>)>,
    /// LSNs acknowledged durable.
    durable: Vec<Lsn>,
    /// The log refused work (poisoned or full): every waiter after must fail.
    failures: usize,
    /// Atomic batches and committed transactions appended: first and last
    /// LSN. After any crash each is all there or all gone.
    batches: Vec<(Lsn, Lsn)>,
    /// The highest LSN this life handed out.
    life_max: Lsn,
    /// The highest LSN a life that ended poisoned handed out, until the
    /// open after it is checked: that open must resume above it.
    poisoned_max: Option<Lsn>,
    /// The LSNs (first, last) each open reported given up: the only gaps
    /// a reader may step over.
    given_up: Vec<(Lsn, Lsn)>,
}

fn record(rng: &mut StdRng, lsn_hint: u64) -> Vec<u8> {
    let len = if rng.gen_bool(0.05) {
        MAX_RECORD
    } else {
        rng.gen_range(0..600)
    };
    let mut p = vec![0u8; len];
    rng.fill(&mut p[..]);
    // A third are text that compresses, so LZ4 lives store some packed.
    if rng.gen_bool(1.0 / 3.0) {
        let text = b"metric=cpu.user host=web-07 value=";
        for (i, b) in p.iter_mut().enumerate() {
            *b = text[i % text.len()];
        }
    }
    if len >= 8 {
        p[..8].copy_from_slice(&lsn_hint.to_le_bytes());
    }
    p
}

/// Producers append until `stop` (one in eight appends an atomic batch or
/// commits a transaction), waiting on some tickets (durable), asking for
/// syncs and checkpointing now and then.
fn workload(
    wal: &Arc<Wal>,
    seed: u64,
    producers: usize,
    stop: &Arc<AtomicBool>,
    ledger: &Arc<Mutex<Ledger>>,
) {
    std::thread::scope(|s| {
        for p in 0..producers {
            let (wal, stop, ledger) = (wal.clone(), stop.clone(), ledger.clone());
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ ((p as u64 + 1) * 0x9E37_79B9));
                let mut pending = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if rng.gen_ratio(1, 8) {
                        // An atomic batch, or a transaction committed as one.
                        let n = rng.gen_range(2..=6);
                        let recs: Vec<(u16, Vec<u8>)> = (0..n)
                            .map(|_| (rng.gen_range(0..4u16), record(&mut rng, p as u64)))
                            .collect();
                        let res = if rng.gen_bool(0.5) {
                            let refs: Vec<(u16, &[u8])> =
                                recs.iter().map(|(s, p)| (*s, p.as_slice())).collect();
                            wal.append_batch(&refs)
                        } else {
                            let mut tx = wal.begin();
                            for (s, p) in &recs {
                                tx.append(*s, p).unwrap();
                            }
                            tx.commit()
                        };
                        let ticket = match res {
                            Ok(t) => t,
                            Err(_) => {
                                ledger.lock().unwrap().failures += 1;
                                return;
                            }
                        };
                        let first = ticket.lsn() + 1 - n as u64;
                        let mut l = ledger.lock().unwrap();
                        for (i, r) in recs.into_iter().enumerate() {
                            l.appended.insert(first + i as u64, r);
                        }
                        l.life_max = l.life_max.max(ticket.lsn());
                        l.batches.push((first, ticket.lsn()));
                        drop(l);
                        pending.push(ticket);
                        continue;
                    }
                    let payload = record(&mut rng, p as u64);
                    let stream = rng.gen_range(0..4u16);
                    let res = wal.append_then(stream, &payload, |lsn| {
                        let mut l = ledger.lock().unwrap();
                        l.appended.insert(lsn, (stream, payload.clone()));
                        l.life_max = l.life_max.max(lsn);
                    });
                    let ticket = match res {
                        Ok(t) => t,
                        Err(_) => {
                            ledger.lock().unwrap().failures += 1;
                            return;
                        }
                    };
                    pending.push(ticket);
                    if pending.len() >= rng.gen_range(1..16) {
                        for t in pending.drain(..) {
                            match t.wait(Level::Durable) {
                                Ok(()) => ledger.lock().unwrap().durable.push(t.lsn()),
                                Err(_) => {
                                    ledger.lock().unwrap().failures += 1;
                                    return;
                                }
                            }
                        }
                    }
                    match rng.gen_range(0..200) {
                        0 => {
                            if wal.sync().is_err() {
                                return;
                            }
                            let d = wal.durable_lsn();
                            ledger.lock().unwrap().durable.push(d);
                        }
                        1 => {
                            // Keep the last few segments: checkpoint well behind.
                            let upto = wal.durable_lsn().saturating_sub(200);
                            let _ = wal.checkpoint(upto);
                        }
                        _ => {}
                    }
                }
            });
        }
    });
}

/// Open the survived disk and check it against the ledger. Returns the
/// recovered log.
fn check_recovery(
    seed: u64,
    fs: &SimFs,
    cfg: &Config,
    ledger: &Ledger,
    what: &str,
) -> (Wal, Lsn, Option<(Lsn, Lsn)>) {
    let fail = |msg: String| -> ! {
        let log = fs.op_log();
        let keep = std::env::var("RINGWAL_SIM_LOG").map_or(60, |v| v.parse().unwrap_or(60));
        let tail = &log[log.len().saturating_sub(keep)..];
        panic!("seed {seed} ({what}): {msg}\nrerun: RINGWAL_SIM_SEED={seed}\nlast disk operations:\n{}", tail.join("\n"));
    };
    // What verify predicts, read first (a read fault of the disk may keep
    // it from reading at all; then there is nothing to compare).
    let verified = ringwal::verify::verify(Path::new(DIR), cfg);
    let (wal, report) = match Wal::open(DIR, cfg.clone()) {
        Ok(x) => x,
        Err(e) => fail(format!("open after a crash failed: {e}")),
    };
    if let Ok(v) = &verified {
        if v.consistent() == Some(false) {
            fail(format!("open succeeded, verify found {:?}", v.problems));
        }
        let torn = |t: Option<(&std::path::PathBuf, u64)>| t.map(|(f, o)| (f.clone(), o));
        if v.records != report.records
            || torn(v.torn_tail.as_ref().map(|t| (&t.file, t.offset)))
                != torn(report.truncated.as_ref().map(|t| (&t.file, t.offset)))
        {
            fail(format!("verify saw {v:?}, open did {report:?}"));
        }
    }
    let mut expect: Option<Lsn> = None;
    let mut seen = 0u64;
    let mut first = 0;
    for rec in wal
        .reader_from(0)
        .unwrap_or_else(|e| fail(format!("reader: {e}")))
    {
        let rec = rec.unwrap_or_else(|e| fail(format!("read: {e}")));
        if let Some(x) = expect {
            if rec.lsn != x && !ledger.given_up.contains(&(x, rec.lsn - 1)) {
                fail(format!("LSN {} where {x} was expected", rec.lsn));
            }
        } else {
            first = rec.lsn;
        }
        expect = Some(rec.lsn + 1);
        seen += 1;
        match ledger.appended.get(&rec.lsn) {
            Some((stream, payload)) if *stream == rec.stream && *payload == rec.payload => {}
            Some(_) => fail(format!("record {} differs from what was appended", rec.lsn)),
            None => fail(format!("record {} was never appended", rec.lsn)),
        }
    }
    let last = expect.map_or(0, |x| x - 1);
    let max_durable = ledger.durable.iter().copied().max().unwrap_or(0);
    if max_durable > last {
        fail(format!(
            "LSN {max_durable} was acknowledged durable but recovery ends at {last}"
        ));
    }
    // A skip that opens the oldest segment left starts it with no record.
    let oldest = wal.oldest_lsn();
    if seen > 0 && first != oldest && !ledger.given_up.contains(&(oldest, first - 1)) {
        fail(format!(
            "first record {first} but the oldest segment starts at {}",
            wal.oldest_lsn()
        ));
    }
    for &(b_first, b_last) in &ledger.batches {
        let kept = |l: Lsn| seen > 0 && l >= first && l <= last;
        if kept(b_first) != kept(b_last) {
            fail(format!(
                "atomic batch {b_first}..={b_last} recovered in part (log holds {first}..={last})"
            ));
        }
    }
    if report.last_lsn != last {
        fail(format!(
            "report says last LSN {} but reading found {last}",
            report.last_lsn
        ));
    }
    (wal, last, report.skipped)
}

/// One life of the log on `fs`: open it, run the workload, lose power
/// after a random number of disk writes. Returns the disk as it survived
/// (injecting no faults: recovery itself must succeed), or `None` if the
/// log could not even be opened on a disk with injected faults. `ledger`
/// gains what this life appended and acknowledged.
fn life(seed: u64, round: u32, fs: &SimFs, rng: &mut StdRng, ledger: &mut Ledger) -> Option<SimFs> {
    let cfg = config(fs, rng);
    let wal = match Wal::open(DIR, cfg.clone()) {
        Ok((w, _)) => Arc::new(w),
        // Only possible with injected faults (say, EIO or ENOSPC while
        // creating the first segment); the log then never started.
        Err(e) if round == 0 && fs_has_faults(fs) => {
            assert!(
                matches!(e, Error::Io { .. } | Error::NoSpace { .. }),
                "seed {seed}: {e}"
            );
            return None;
        }
        Err(e) => panic!("seed {seed}: open failed on a fresh or recovered disk: {e}"),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(std::mem::take(ledger)));
    ledger.life_max = 0;
    let crash_at = fs.writes() + rng.gen_range(1..120);
    let producers = rng.gen_range(1..=3);
    let (tx, rx) = std::sync::mpsc::channel();
    let crashed = std::thread::scope(|s| {
        let (w, st, sh) = (wal.clone(), stop.clone(), shared.clone());
        s.spawn(move || {
            workload(&w, seed ^ u64::from(round), producers, &st, &sh);
            let _ = tx.send(());
        });
        // Lose power after the chosen number of disk writes (or when the
        // workload gave up, poisoned by an injected fault).
        // A workload that panicked drops its sender: stop waiting then,
        // so the panic fails the test instead of hanging it.
        while fs.writes() < crash_at
            && matches!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty))
        {
            std::thread::yield_now();
        }
        let clean = Faults {
            sector: if seed.is_multiple_of(2) { 512 } else { 4096 },
            ..Faults::default()
        };
        let image = fs.crash_into(u64::from(round), clean);
        stop.store(true, Ordering::Relaxed);
        image
    });
    // A write the frozen disk failed poisons the log; seen only if it
    // came before this check (one during the drop is not).
    let poisoned = wal.poison_cause().is_some();
    drop(wal);
    *ledger = Arc::try_unwrap(shared)
        .ok()
        .expect("workload threads joined")
        .into_inner()
        .unwrap();
    if poisoned {
        ledger.poisoned_max = Some(ledger.life_max);
    }
    check_no_retried_sync(seed, fs);
    Some(crashed)
}

fn crash_round(seed: u64, faults: Faults, rounds: u32) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fs = SimFs::new(seed, faults);
    let mut ledger = Ledger::default();
    let mut appended_total: HashMap<Lsn, (u16, Vec<u8>)> = HashMap::new();
    for round in 0..rounds {
        let Some(crashed) = life(seed, round, &fs, &mut rng, &mut ledger) else {
            return;
        };
        for (k, v) in ledger.appended.drain() {
            appended_total.insert(k, v);
        }
        ledger.appended = appended_total.clone();
        fs = crashed;
        let cfg = config(&fs, &mut rng);
        let (wal, last, skipped) =
            check_recovery(seed, &fs, &cfg, &ledger, &format!("round {round}"));
        // Batches the crash took are gone for good.
        ledger.batches.retain(|&(_, b_last)| b_last <= last);
        // The crash happened inside this process: LSNs a poisoned life
        // handed out were seen by its producers and hooks, which live on,
        // so the open gives them up instead of handing them out again.
        let next = match skipped {
            Some((from, to)) => {
                assert_eq!(from, last + 1, "seed {seed}: given up {from}..={to}");
                assert!(to >= from, "seed {seed}: given up {from}..={to}");
                ledger.given_up.push((from, to));
                to + 1
            }
            None => last + 1,
        };
        if let Some(handed_out) = ledger.poisoned_max.take() {
            assert!(
                handed_out < next,
                "seed {seed}: LSN {handed_out}, handed out before the poison, is handed out again from {next}"
            );
        }
        // Appends continue past everything recovered or given up.
        let t = wal
            .append(1, b"after recovery")
            .unwrap_or_else(|e| panic!("seed {seed}: append after recovery: {e}"));
        assert_eq!(t.lsn(), next, "seed {seed}: LSN after recovery");
        t.wait(Level::Durable)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        appended_total.insert(t.lsn(), (1, b"after recovery".to_vec()));
        ledger.appended = appended_total.clone();
        ledger.durable.push(t.lsn());
        wal.close()
            .unwrap_or_else(|e| panic!("seed {seed}: close after recovery: {e}"));
    }
}

/// The operations of the life that ended in the last crash: the op log
/// from the crash before it (a disk that survived one carries its log).
fn this_life(mut log: Vec<String>) -> Vec<String> {
    let is_crash = |l: &String| l.starts_with("crash #");
    if log.last().is_some_and(is_crash) {
        log.pop();
    }
    match log.iter().rposition(is_crash) {
        Some(i) => log.split_off(i + 1),
        None => log,
    }
}

fn fs_has_faults(fs: &SimFs) -> bool {
    fs.op_log()
        .iter()
        .any(|l| l.ends_with("EIO") || l.ends_with("ENOSPC"))
}

/// After a sync of a file failed, that file is never synced again (Linux
/// may have dropped its dirty pages; a second sync would prove nothing),
/// and after a directory sync failed, this life syncs the directory no
/// more.
fn check_no_retried_sync(seed: u64, fs: &SimFs) {
    let log = this_life(fs.op_log());
    if let Some(i) = log
        .iter()
        .position(|l| l.starts_with("dirsync #") && l.ends_with(": EIO"))
        && let Some(again) = log[i + 1..].iter().find(|l| l.starts_with("dirsync #"))
    {
        panic!(
                "seed {seed}: a failed directory sync was retried: {again}\nrerun: RINGWAL_SIM_SEED={}\naround the failure ({}):\n{}",
                seed % 1_000_000,
                log[i],
                log[i.saturating_sub(30)..log.len().min(i + 40)].join("\n")
            );
    }
    for (i, line) in log.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("fdatasync #")
            && let Some(path) = rest
                .strip_suffix(": EIO")
                .and_then(|r| r.split_once(' ').map(|x| x.1))
        {
            let retried = log[i + 1..]
                .iter()
                .any(|l| l.starts_with("fdatasync #") && l.ends_with(path));
            assert!(!retried, "seed {seed}: a failed sync of {path} was retried");
        }
    }
}

#[test]
fn pure_crashes_lose_nothing_acknowledged() {
    for seed in seeds(500) {
        crash_round(
            seed,
            Faults {
                sector: if seed % 2 == 0 { 512 } else { 4096 },
                ..Faults::default()
            },
            2,
        );
    }
}

/// The data faults of the fault family, one kind per seed.
fn data_faults(seed: u64) -> Faults {
    match seed % 4 {
        0 => Faults {
            write_eio: 0.02,
            ..Faults::default()
        },
        1 => Faults {
            sync_eio: 0.05,
            ..Faults::default()
        },
        2 => Faults {
            short_write: 0.02,
            ..Faults::default()
        },
        _ => Faults {
            capacity: Some(600 << 10),
            ..Faults::default()
        },
    }
}

#[test]
fn injected_faults_poison_and_recover() {
    for seed in seeds(100) {
        crash_round(seed + 1_000_000, data_faults(seed), 1);
    }
}

/// `faults` with every namespace operation failing now and then: about
/// three creates, renames or directory syncs in a hundred, so most lives
/// get past open and many fail part way (unlinks, rare in the workload,
/// fail more often).
fn with_namespace_faults(faults: Faults) -> Faults {
    Faults {
        create_eio: 0.03,
        rename_eio: 0.03,
        unlink_eio: 0.3,
        dir_sync_eio: 0.03,
        ..faults
    }
}

/// The crash family (every fifth seed) and the fault family (the rest),
/// with namespace faults on as well: a failed spare create, segment or
/// manifest rename, unlink or directory sync poisons the log or fails
/// the checkpoint, nothing acknowledged is lost at the crash after it,
/// no failed sync (of a file or the directory) is retried, and the log
/// reopens.
#[test]
fn namespace_faults_poison_and_recover() {
    for seed in seeds(100) {
        let faults = if seed % 5 == 0 {
            Faults {
                sector: if seed % 2 == 0 { 512 } else { 4096 },
                ..Faults::default()
            }
        } else {
            data_faults(seed)
        };
        crash_round(seed + 4_000_000, with_namespace_faults(faults), 1);
    }
}

/// A waiter never sees success for a record whose write failed, the
/// error says what happened, and the log refuses everything after.
#[test]
fn failed_write_poisons_every_waiter() {
    // Writes 1-3 create the first segment and, usually, the spare (the
    // preparer makes it in the background); then one write per record,
    // waited on one at a time. Whichever the eighth write is, it poisons:
    // a record's at once, the spare's at the roll that needs it.
    let fs = SimFs::new(
        42,
        Faults {
            fail_write_at: Some(8),
            ..Faults::default()
        },
    );
    let cfg = plain_config(&fs);
    let (wal, _) = Wal::open(DIR, cfg).unwrap();
    let mut acked = 0;
    let failed_lsn = loop {
        let t = wal.append(0, &[7; 100]).unwrap();
        match t.wait(Level::Durable) {
            Ok(()) => acked = t.lsn(),
            Err(e) => {
                assert!(matches!(e, Error::Poisoned { .. }), "{e}");
                break t.lsn();
            }
        }
        assert!(acked < 20, "the injected failure never came");
    };
    assert_eq!(
        wal.durable_lsn(),
        acked,
        "nothing after the failure is durable"
    );
    assert!(matches!(wal.append(0, b"x"), Err(Error::Poisoned { .. })));
    assert!(matches!(wal.sync(), Err(Error::Poisoned { .. })));
    drop(wal);
    let image = fs.crash_into(0, Faults::default());
    let cfg = plain_config(&image);
    let (wal, rep) = Wal::open(DIR, cfg).unwrap();
    assert_eq!(
        rep.last_lsn, acked,
        "the failed record ({failed_lsn}) never reached the disk"
    );
    // Its LSN was handed out in this process: never again.
    assert_eq!(rep.skipped, Some((acked + 1, failed_lsn)), "{rep:?}");
    assert_eq!(wal.next_lsn(), failed_lsn + 1);
}

/// A record whose write failed had its LSN handed to its producer and to
/// an `append_then` list before the failure. The log's next open in this
/// process (the disk healthy again, or after a power loss) gives the
/// next record an LSN above every one handed out, records the ones that
/// never reached the disk as given up, and every reader steps over them.
#[test]
fn a_failed_writes_lsn_is_never_handed_out_again() {
    for power_loss in [false, true] {
        let fs = SimFs::new(11, Faults::default());
        let (wal, _) = Wal::open(DIR, plain_config(&fs)).unwrap();
        for i in 0..3u8 {
            wal.append(0, &[i; 100])
                .unwrap()
                .wait(Level::Durable)
                .unwrap();
        }
        wal.close().unwrap();
        let (wal, _) = Wal::open(DIR, plain_config(&fs)).unwrap();
        fs.set_faults(Faults {
            fail_write_at: Some(fs.writes() + 1),
            ..Faults::default()
        });
        let mut consumer = Vec::new();
        let mut acked = 3;
        loop {
            let t = wal
                .append_then(0, b"doomed", |lsn| consumer.push(lsn))
                .unwrap();
            match t.wait(Level::Durable) {
                Ok(()) => acked = t.lsn(),
                Err(e) => {
                    assert!(matches!(e, Error::Poisoned { .. }), "{e}");
                    break;
                }
            }
            assert!(acked < 20, "the injected failure never came");
        }
        let seen = *consumer.last().unwrap();
        assert!(seen > acked, "{consumer:?}");
        drop(wal);
        let disk = if power_loss {
            fs.crash_into(1, Faults::default())
        } else {
            fs.set_faults(Faults::default());
            fs
        };
        let (wal, rep) = Wal::open(DIR, plain_config(&disk)).unwrap();
        assert_eq!(rep.last_lsn, acked, "{rep:?}");
        assert_eq!(rep.skipped, Some((acked + 1, seen)), "{rep:?}");
        let t = wal.append(0, b"fresh").unwrap();
        assert_eq!(
            t.lsn(),
            seen + 1,
            "an LSN a consumer saw is handed out again"
        );
        t.wait(Level::Durable).unwrap();
        assert!(matches!(wal.read(seen), Err(Error::GivenUp { .. })));
        let lsns: Vec<Lsn> = wal
            .reader_from(0)
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        let want: Vec<Lsn> = (1..=acked).chain([seen + 1]).collect();
        assert_eq!(lsns, want);
        wal.close().unwrap();
        // The skip is on disk: a later open needs no memory of the failure.
        let (wal, rep) = Wal::open(DIR, plain_config(&disk)).unwrap();
        assert_eq!((rep.skipped, wal.next_lsn()), (None, seen + 2));
        wal.close().unwrap();
    }
}

/// A latent read error during recovery fails open with the file named,
/// never a silent truncation.
#[test]
fn latent_read_error_fails_open_loudly() {
    let fs = SimFs::new(9, Faults::default());
    let cfg = plain_config(&fs);
    let (wal, _) = Wal::open(DIR, cfg.clone()).unwrap();
    for i in 0..50u8 {
        wal.append(0, &[i; 200])
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    wal.close().unwrap();
    let seg = Path::new(DIR).join(ringwal::format::segment_file_name(1, 1));
    fs.inject_read_error(&seg, 4096 + 1000);
    match Wal::open(DIR, cfg) {
        Err(Error::Io { path, .. }) => assert_eq!(path, seg),
        other => panic!("expected an I/O error naming the segment, got {other:?}"),
    }
}

/// A record the damage may hit: acknowledged durable, and provably so to
/// recovery, because it lies in a sealed segment or a later write of the
/// newest segment vouches for it.
#[derive(Debug)]
struct Target {
    path: PathBuf,
    /// Its frame's offset and payload length.
    start: u64,
    payload: u64,
    lsn: Lsn,
}

/// The node's segments on the disk, oldest first.
fn segments_on(fs: &SimFs) -> Vec<(Lsn, PathBuf)> {
    let mut segs: Vec<(Lsn, PathBuf)> = fs
        .vfs()
        .list(Path::new(DIR))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            let (node, base) = format::parse_segment_file_name(&n)?;
            (node == 1).then(|| (base, Path::new(DIR).join(n)))
        })
        .collect();
    segs.sort();
    segs
}

/// Every acknowledged record recovery must refuse to lose, read from the
/// survived disk with the public format: frames in each segment's valid
/// prefix, and the vouch frames at block boundaries after them.
fn vouched_targets(fs: &SimFs, acknowledged: Lsn) -> Vec<Target> {
    let segs = segments_on(fs);
    let mut out = Vec::new();
    for (i, (_, path)) in segs.iter().enumerate() {
        let Some(bytes) = fs.read_file(path) else {
            continue;
        };
        let Ok(h) = format::SegmentHeader::decode(&bytes) else {
            continue;
        };
        let start = h.frames_start() as usize;
        let mut records = Vec::new();
        let mut off = start;
        while let format::Decoded::Frame(f) =
            format::decode_frame(&bytes[off.min(bytes.len())..], h.salt, format::MAX_PAYLOAD)
        {
            if !matches!(
                f.kind,
                format::Kind::Padding | format::Kind::Vouch | format::Kind::Skip
            ) {
                records.push((off as u64, f.payload.len() as u64, f.lsn));
            }
            off += f.len;
        }
        let vouches: Vec<(u64, u64)> = (start..bytes.len())
            .step_by(format::BLOCK)
            .filter_map(
                |b| match format::decode_frame(&bytes[b..], h.salt, format::MAX_PAYLOAD) {
                    format::Decoded::Frame(f) => Some((b as u64, f.vouch()?.durable)),
                    _ => None,
                },
            )
            .collect();
        let newest = i + 1 == segs.len();
        for (at, payload, lsn) in records {
            let vouched = !newest || vouches.iter().any(|&(b, d)| b > at && d >= lsn);
            if lsn <= acknowledged && vouched {
                out.push(Target {
                    path: path.clone(),
                    start: at,
                    payload,
                    lsn,
                });
            }
        }
    }
    out
}

/// After a crash, damage the survived disk the way a failing disk or an
/// operator can, where recovery can tell: a flipped bit or a lost sector
/// in an acknowledged record that a later write vouches for (or in a
/// sealed segment), or the newest segment deleted once the manifest names
/// it. Open must fail with `Corrupt` (the file and an offset at or before
/// the damaged frame, also when the damage took a sealed segment's last
/// records: the next segment's base says they are missing), or `Gap` (the
/// missing newest file), changing nothing: never a cut, never a log that
/// resumes below what it acknowledged.
#[test]
fn acknowledged_damage_is_reported_never_cut() {
    let mut hit = [0usize; 3];
    for seed in seeds(200) {
        let seed = seed + 2_000_000;
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = SimFs::new(seed, Faults::default());
        let mut ledger = Ledger::default();
        let image = life(seed, 0, &fs, &mut rng, &mut ledger).expect("no faults injected");
        let acknowledged = ledger.durable.iter().copied().max().unwrap_or(0);
        let cfg = config(&image, &mut rng);
        let mode = seed % 3;
        let expect_file = match mode {
            0 | 1 => {
                let targets = vouched_targets(&image, acknowledged);
                if targets.is_empty() {
                    continue;
                }
                let t = &targets[rng.gen_range(0..targets.len())];
                let mut bytes = image.read_file(&t.path).unwrap();
                if mode == 0 {
                    let at = t.start + 24 + rng.gen_range(0..t.payload.max(1));
                    let at = if t.payload == 0 { t.start + 8 } else { at };
                    bytes[at as usize] ^= 1 << rng.gen_range(0..8);
                } else {
                    let sector = t.start / 512 * 512;
                    bytes[sector as usize..sector as usize + 512].fill(0);
                }
                image.write_file(&t.path, &bytes);
                (t.path.clone(), Some(t.start), t.lsn)
            }
            _ => {
                let Some(m) = image
                    .read_file(&Path::new(DIR).join(format::manifest_file_name(1)))
                    .and_then(|b| format::Manifest::decode(&b).ok())
                else {
                    continue;
                };
                let segs = segments_on(&image);
                let Some((base, newest)) = segs.last().cloned() else {
                    continue;
                };
                if segs.len() < 2 || base != m.newest_base {
                    continue;
                }
                image.vfs().remove_file(&newest).unwrap();
                (newest, None, base)
            }
        };
        hit[mode as usize] += 1;
        let (file, at, lsn) = expect_file;
        let before: Vec<(String, Vec<u8>)> = snapshot(&image);
        match Wal::open(DIR, cfg) {
            Err(Error::Corrupt { file: f, offset, .. }) if at.is_some() => {
                assert_eq!(f, file, "seed {seed}: LSN {lsn} damaged");
                assert!(offset <= at.unwrap(), "seed {seed}: offset {offset} past {at:?}");
            }
            Err(Error::Gap { file: f, expected, .. }) if at.is_none() => {
                assert_eq!((f, expected), (file, lsn), "seed {seed}");
            }
            other => panic!(
                "seed {seed}: mode {mode}: damage at LSN {lsn} in {} not reported: {:?}\\nrerun: RINGWAL_SIM_SEED={}",
                file.display(),
                other.map(|(_, r)| r),
                seed - 2_000_000
            ),
        }
        assert!(
            snapshot(&image) == before,
            "seed {seed}: a failed open changed the disk"
        );
    }
    eprintln!(
        "damage seeds: {} bit flips, {} lost sectors, {} lost newest segments",
        hit[0], hit[1], hit[2]
    );
    assert!(
        hit.iter().all(|&n| n > 0) || seeds(200).len() < 30,
        "{hit:?}"
    );
}

/// Names and contents of the log's files (all but the lock file).
fn snapshot(fs: &SimFs) -> Vec<(String, Vec<u8>)> {
    let mut names = fs.vfs().list(Path::new(DIR)).unwrap_or_default();
    // Not the lock file: an open that takes the lock writes its process id
    // there before recovery, and that is no change to the log.
    names.retain(|n| !n.ends_with(".lock"));
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = fs.read_file(&Path::new(DIR).join(&n)).unwrap_or_default();
            (n, bytes)
        })
        .collect()
}

/// Writes the disk misdirects (reported done, landed one block off) are
/// damage recovery may or may not be able to see. Whatever it decides, no
/// damaged record is ever handed back: open either fails with a typed
/// error (`Corrupt`, `Gap`, `Lost`), or every record it reads is exactly
/// the one appended at that LSN, dense from the oldest kept.
#[test]
fn misdirected_writes_never_pass_for_good_data() {
    let mut opened = 0;
    let mut refused = 0;
    for seed in seeds(100) {
        let seed = seed + 3_000_000;
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = SimFs::new(
            seed,
            Faults {
                misdirect: 0.03,
                ..Faults::default()
            },
        );
        let mut ledger = Ledger::default();
        let Some(image) = life(seed, 0, &fs, &mut rng, &mut ledger) else {
            continue;
        };
        let cfg = config(&image, &mut rng);
        let wal = match Wal::open(DIR, cfg) {
            Ok((wal, _)) => wal,
            Err(Error::Corrupt { .. } | Error::Gap { .. } | Error::Lost { .. }) => {
                refused += 1;
                continue;
            }
            Err(e) => panic!(
                "seed {seed}: {e}\\nrerun: RINGWAL_SIM_SEED={}",
                seed - 3_000_000
            ),
        };
        opened += 1;
        let mut expect = None;
        for rec in wal.reader_from(0).unwrap() {
            let rec = match rec {
                Ok(r) => r,
                Err(e) => panic!("seed {seed}: read: {e}"),
            };
            if let Some(x) = expect {
                assert_eq!(rec.lsn, x, "seed {seed}: LSNs dense");
            }
            expect = Some(rec.lsn + 1);
            match ledger.appended.get(&rec.lsn) {
                Some((s, p)) if *s == rec.stream && *p == rec.payload => {}
                _ => panic!("seed {seed}: LSN {} is not what was appended", rec.lsn),
            }
        }
        wal.close().unwrap();
    }
    eprintln!("misdirected writes: {opened} logs opened, {refused} refused as damaged");
}

// Namespace faults aimed at one operation of the write path.

/// The log the single-fault tests run: small segments, every write
/// durable, nothing encrypted or compressed.
fn plain_config(fs: &SimFs) -> Config {
    Config::builder()
        .sim(fs)
        .segment_bytes(64 << 10)
        .max_record_bytes(MAX_RECORD)
        .build()
}

/// What an aimed test appended (LSN → payload) and the highest LSN it saw
/// acknowledged durable.
#[derive(Default)]
struct Acked {
    appended: HashMap<Lsn, Vec<u8>>,
    durable: Lsn,
}

/// Append `n` records of 2 KiB (about fifteen fill a segment), waiting
/// for each to be durable; the first refusal or failed wait ends it.
fn append_durably(wal: &Wal, n: usize, acked: &mut Acked) -> ringwal::Result<()> {
    for _ in 0..n {
        let lsn = wal.next_lsn();
        let payload: Vec<u8> = lsn
            .to_le_bytes()
            .iter()
            .cycle()
            .take(2048)
            .copied()
            .collect();
        let t = wal.append(0, &payload)?;
        acked.appended.insert(t.lsn(), payload);
        t.wait(Level::Durable)?;
        acked.durable = t.lsn();
    }
    Ok(())
}

/// A log of `segments` segments on a fresh disk, closed and reopened, so
/// that the writer has nothing left to do but prepare its first spare
/// (a create, writes and syncs of that file: no rename, unlink or
/// directory sync). What an aimed fault hits is then known.
fn quiet_log(seed: u64, segments: usize) -> (SimFs, Wal, Acked) {
    let fs = SimFs::new(seed, Faults::default());
    let (wal, _) = Wal::open(DIR, plain_config(&fs)).unwrap();
    let mut acked = Acked::default();
    while segments_on(&fs).len() < segments {
        append_durably(&wal, 1, &mut acked).unwrap();
    }
    wal.close().unwrap();
    let (wal, _) = Wal::open(DIR, plain_config(&fs)).unwrap();
    (fs, wal, acked)
}

/// Fail the `nth` next namespace operation of kind `op`, and nothing else.
fn aim(fs: &SimFs, op: NsOp, nth: u64) {
    fs.set_faults(Faults {
        fail_namespace_at: Some((op, fs.namespace_ops(op) + nth)),
        ..Faults::default()
    });
}

/// The operation log from the injected failure on (the failure first).
fn since_failure(fs: &SimFs) -> Vec<String> {
    let log = fs.op_log();
    let at = log
        .iter()
        .rposition(|l| l.ends_with(": EIO"))
        .expect("a fault was injected");
    log[at..].to_vec()
}

/// The log's list of segments is what the disk holds.
fn assert_list_is_disk(wal: &Wal, fs: &SimFs, what: &str) {
    assert_list_is_disk_above(wal, fs, None, what);
}

/// The log's list of segments is what the disk holds, but for the file
/// of the segment based at `stranded`, if any: a checkpoint took that
/// segment off the list (the kept floor rises before a file goes) and
/// then failed to retire its file, which stays on disk, below the floor.
fn assert_list_is_disk_above(wal: &Wal, fs: &SimFs, stranded: Option<Lsn>, what: &str) {
    let mut on_disk = segments_on(fs);
    if let Some(base) = stranded {
        assert_eq!(
            on_disk.first().map(|s| s.0),
            Some(base),
            "{what}: the file left below the floor: {on_disk:?}"
        );
        on_disk.remove(0);
    }
    let stats = wal.stats();
    assert_eq!(stats.segments, on_disk.len(), "{what}: {on_disk:?}");
    assert_eq!(stats.oldest_lsn, on_disk[0].0, "{what}: {on_disk:?}");
    let first = wal.reader_from(0).unwrap().next().map(|r| r.unwrap().lsn);
    assert_eq!(first, Some(on_disk[0].0), "{what}: the first record read");
}

/// After a poisoning failure, the writer syncs the directory no more.
fn assert_no_dir_sync_after_failure(fs: &SimFs, what: &str) {
    let log = since_failure(fs);
    assert!(
        !log[1..].iter().any(|l| l.starts_with("dirsync")),
        "{what}: the directory was synced again after\n{}",
        log.join("\n")
    );
}

/// Lose power (the surviving disk injects nothing), reopen, and check the
/// log: LSNs dense, every record the one appended under its LSN, every
/// acknowledged one from `floor` on there. Returns the reopened log.
fn crash_and_check(fs: &SimFs, acked: &Acked, floor: Lsn, what: &str) -> (SimFs, Wal) {
    let image = fs.crash_into(0, Faults::default());
    let (wal, report) = Wal::open(DIR, plain_config(&image))
        .unwrap_or_else(|e| panic!("{what}: reopen after the failure: {e}"));
    let (mut first, mut next) = (None, None);
    for rec in wal.reader_from(0).unwrap() {
        let rec = rec.unwrap_or_else(|e| panic!("{what}: read: {e}"));
        match next {
            Some(n) => assert_eq!(rec.lsn, n, "{what}: LSNs dense"),
            None => first = Some(rec.lsn),
        }
        let appended = acked.appended.get(&rec.lsn);
        assert_eq!(appended, Some(&rec.payload), "{what}: LSN {}", rec.lsn);
        next = Some(rec.lsn + 1);
    }
    let last = next.map_or(0, |n| n - 1);
    assert!(last >= acked.durable, "{what}: {last} < {}", acked.durable);
    assert_eq!(report.last_lsn, last, "{what}");
    if acked.durable >= floor {
        assert!(
            first.is_some_and(|f| f <= floor),
            "{what}: starts at {first:?}"
        );
    }
    (image, wal)
}

/// The path of `Error::Io`, or a panic naming what came instead.
fn io_path(res: ringwal::Result<usize>, what: &str) -> PathBuf {
    match res {
        Err(Error::Io { path, .. }) => path,
        other => panic!("{what}: expected an I/O error, got {other:?}"),
    }
}

/// The poison's message, or a panic if `err` is not `Poisoned`.
fn poison_context(err: &Error, what: &str) -> String {
    match err {
        Error::Poisoned { cause } => cause.to_string(),
        other => panic!("{what}: expected Poisoned, got {other}"),
    }
}

/// A rename that fails at a checkpoint (a removed segment kept as a
/// spare) fails the checkpoint with `Io` naming that segment and poisons
/// nothing; the log's list of segments stays what the disk holds (those
/// renamed before it gone from both, the rest in both) but for the failed
/// one, already off the list and left on disk below the kept floor;
/// appends go on, and after a crash the log reopens with everything
/// acknowledged and a checkpoint there finishes the job.
#[test]
fn failed_rename_at_a_checkpoint_keeps_the_list_true() {
    // A checkpoint's first rename replaces the manifest; then come the
    // segments', oldest first. Fail the first segment's, then the third's.
    for nth in [2u64, 4] {
        let what = &format!("rename {nth} of the checkpoint");
        let (fs, wal, mut acked) = quiet_log(nth, 6);
        let segs = segments_on(&fs);
        let up_to = wal.durable_lsn();
        aim(&fs, NsOp::Rename, nth);
        let failed = &segs[nth as usize - 2];
        assert_eq!(io_path(wal.checkpoint(up_to), what), failed.1);
        let line = &since_failure(&fs)[0];
        assert!(
            line.starts_with(&format!("rename {} -> ", failed.1.display())),
            "{line}"
        );
        assert!(wal.poison_cause().is_none(), "{what}");
        // The failed segment left the list before its rename was tried.
        assert_list_is_disk_above(&wal, &fs, Some(failed.0), what);
        assert_eq!(wal.oldest_lsn(), segs[nth as usize - 1].0, "{what}");
        append_durably(&wal, 20, &mut acked).unwrap();
        let (image, wal) = crash_and_check(&fs, &acked, up_to + 1, what);
        // What the failed checkpoint left, from the failed segment on.
        let left = segs.len() - (nth as usize - 2) - 1;
        assert_eq!(wal.checkpoint(up_to).unwrap(), left, "{what}");
        assert_list_is_disk(&wal, &image, what);
    }
}

/// Past the four segments a checkpoint keeps as spares, it unlinks them;
/// an unlink that fails fails the checkpoint with `Io` naming the
/// segment, poisons nothing, and keeps the list what the disk holds but
/// for that segment, already off the list and left on disk below the
/// kept floor. The segments renamed before it are spares the next rolls reuse; a crash
/// after them loses nothing acknowledged.
#[test]
fn failed_unlink_at_a_checkpoint_keeps_the_list_true() {
    let what = "unlink at a checkpoint";
    let (fs, wal, mut acked) = quiet_log(7, 7);
    let segs = segments_on(&fs);
    let up_to = wal.durable_lsn();
    // A checkpoint's unlinks: its manifest's leftover temporary file, if
    // any (none here), then the segments past the four recycled.
    aim(&fs, NsOp::Unlink, 1);
    assert_eq!(io_path(wal.checkpoint(up_to), what), segs[4].1);
    let line = &since_failure(&fs)[0];
    assert_eq!(line, &format!("unlink {}: EIO", segs[4].1.display()));
    assert!(wal.poison_cause().is_none());
    // The failed segment left the list before its unlink was tried.
    assert_list_is_disk_above(&wal, &fs, Some(segs[4].0), what);
    assert_eq!(wal.oldest_lsn(), segs[5].0);
    // Rolls through the recycled spares.
    append_durably(&wal, 70, &mut acked).unwrap();
    assert_list_is_disk_above(&wal, &fs, Some(segs[4].0), what);
    let (image, wal) = crash_and_check(&fs, &acked, up_to + 1, what);
    wal.checkpoint(up_to).unwrap();
    assert_list_is_disk(&wal, &image, what);
}

/// The directory fsync that makes a new segment's name durable fails:
/// the log is poisoned (the record that needed the segment fails, and
/// every later call), the directory is never synced again, and after a
/// crash the log reopens with every acknowledged record.
#[test]
fn failed_directory_sync_at_a_roll_poisons() {
    let what = "directory sync at a roll";
    let (fs, wal, mut acked) = quiet_log(8, 1);
    // The preparer syncs no directory until the roll is done: the next
    // directory sync is the roll's.
    aim(&fs, NsOp::DirSync, 1);
    let err = append_durably(&wal, 40, &mut acked).unwrap_err();
    let cause = poison_context(&err, what);
    assert!(cause.starts_with("segment roll failed"), "{cause}");
    assert!(since_failure(&fs)[0].starts_with("dirsync"));
    assert_eq!(
        wal.durable_lsn(),
        acked.durable,
        "nothing after the failure"
    );
    assert!(matches!(wal.append(0, b"x"), Err(Error::Poisoned { .. })));
    assert!(matches!(wal.sync(), Err(Error::Poisoned { .. })));
    assert!(matches!(
        wal.checkpoint(acked.durable),
        Err(Error::Poisoned { .. })
    ));
    assert!(wal.close().is_err(), "{what}: close reports the poison");
    assert_no_dir_sync_after_failure(&fs, what);
    crash_and_check(&fs, &acked, 1, what);
}

/// The manifest's rename fails, at a checkpoint (before any segment is
/// touched) and at close: the log is poisoned, the checkpoint removed
/// nothing, the list is still the disk's, and after a crash the log
/// reopens (past the temporary manifest file left behind) with every
/// acknowledged record, those the checkpoint meant to remove included.
#[test]
fn failed_manifest_rename_poisons() {
    let what = "manifest rename at a checkpoint";
    let (fs, wal, acked) = quiet_log(9, 3);
    let before = segments_on(&fs);
    aim(&fs, NsOp::Rename, 1);
    let err = wal.checkpoint(acked.durable).unwrap_err();
    let cause = poison_context(&err, what);
    assert!(
        cause.starts_with("writing the manifest at a checkpoint failed"),
        "{cause}"
    );
    let failed = &since_failure(&fs)[0];
    assert!(
        failed.contains(".manifest.") && failed.contains(".tmp -> "),
        "{failed}"
    );
    assert_eq!(segments_on(&fs), before, "{what}");
    assert_list_is_disk(&wal, &fs, what);
    assert!(matches!(
        wal.checkpoint(acked.durable),
        Err(Error::Poisoned { .. })
    ));
    drop(wal);
    crash_and_check(&fs, &acked, 1, what);

    let what = "manifest rename at close";
    let (fs, wal, mut acked) = quiet_log(10, 2);
    append_durably(&wal, 3, &mut acked).unwrap();
    aim(&fs, NsOp::Rename, 1);
    let err = wal.close().unwrap_err();
    let cause = poison_context(&err, what);
    assert!(
        cause.starts_with("writing the manifest at close failed"),
        "{cause}"
    );
    crash_and_check(&fs, &acked, 1, what);
}

/// The preparer fails to create the next spare: the roll that needs it
/// fails and poisons the log, nothing after it is acknowledged, and the
/// log reopens with everything that was.
#[test]
fn failed_spare_create_poisons_the_roll() {
    let what = "spare create";
    let (fs, wal, mut acked) = quiet_log(11, 1);
    // Wait for the first spare (its create is counted once its name is
    // there); then a roll has the preparer create the manifest's
    // temporary file, then the next spare.
    let spare = Path::new(DIR).join(format::spare_file_name(1, 1));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while fs.read_file(&spare).is_none() {
        assert!(std::time::Instant::now() < deadline, "no spare prepared");
        std::thread::yield_now();
    }
    aim(&fs, NsOp::Create, 2);
    let err = append_durably(&wal, 60, &mut acked).unwrap_err();
    let cause = poison_context(&err, what);
    assert!(cause.starts_with("segment roll failed"), "{cause}");
    let line = &since_failure(&fs)[0];
    let next = Path::new(DIR).join(format::spare_file_name(1, 2));
    assert_eq!(line, &format!("create {}: EIO", next.display()));
    assert_eq!(
        wal.durable_lsn(),
        acked.durable,
        "nothing after the failure"
    );
    assert!(matches!(wal.append(0, b"x"), Err(Error::Poisoned { .. })));
    drop(wal);
    assert_no_dir_sync_after_failure(&fs, what);
    crash_and_check(&fs, &acked, 1, what);
}

/// The manifest's directory sync fails on the preparer thread after a
/// roll, while the ring is already on its way to the next one: the log
/// is poisoned, and the ring then names and syncs no further segment
/// (it would sync the directory again after a failed sync). A burst of
/// records across several segments, repeated, so that the next roll is
/// under way when the failure lands.
#[test]
fn failed_manifest_sync_after_a_roll_stops_every_later_roll() {
    for seed in 0..20 {
        let what = &format!("manifest sync after a roll, life {seed}");
        let (fs, wal, mut acked) = quiet_log(100 + seed, 1);
        // The roll's own sync, then the manifest's.
        aim(&fs, NsOp::DirSync, 2);
        let mut tickets = Vec::new();
        for _ in 0..60 {
            let lsn = wal.next_lsn();
            let payload = vec![lsn as u8; 2048];
            match wal.append(0, &payload) {
                Ok(t) => {
                    acked.appended.insert(t.lsn(), payload);
                    tickets.push(t);
                }
                Err(_) => break,
            }
        }
        for t in tickets {
            if t.wait(Level::Durable).is_ok() {
                acked.durable = acked.durable.max(t.lsn());
            }
        }
        let cause = wal
            .poison_cause()
            .map(|p| p.to_string())
            .unwrap_or_default();
        assert!(
            cause.starts_with("writing the manifest failed"),
            "{what}: {cause}"
        );
        drop(wal);
        assert_no_dir_sync_after_failure(&fs, what);
        crash_and_check(&fs, &acked, 1, what);
    }
}
