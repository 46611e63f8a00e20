//! The model-based contract test: random sequences of operations from
//! several threads against a real log, every answer checked against a
//! small reference model of what the public API promises (the guarantees
//! in docs/guarantees.md and the method docs), not of how the engine works.
//!
//! The model keeps: every LSN ever handed out and its record, the level
//! each one was acknowledged at, the atomic batches, the kept floor (the
//! lowest `oldest_lsn` any answer may still be held to), and the LSNs a
//! point-in-time repair gave up. What it allows:
//!
//! - an LSN is handed out once: across closes, failed writes and
//!   repairs a new record's LSN is above every one before; after a power
//!   loss, only LSNs whose write never completed (so no acknowledgement
//!   named them) may be handed out again;
//! - a point read or reader of an LSN at or above the floor the caller
//!   observes after the answer returns the record appended there, byte
//!   for byte; `Released` only below that floor, and never `Gap`; a given-up LSN is never a
//!   record, and readers step over exactly the given-up LSNs;
//! - `append_then` lists are ascending per stream; watermarks never pass
//!   what was handed out, and each acknowledged level is reached;
//! - a checkpoint at `up_to` keeps every LSN above it;
//! - after a clean close everything handed out is there; after a crash
//!   every durable acknowledgement is, nothing is invented, and a batch is
//!   whole or absent;
//! - `ringwal verify`, `stat`, `cat` and `dump` on the closed directory
//!   exit 0 and agree with the model and with each other on the records;
//!   on a cut sealed segment `stat` and `verify` give one status.
//!
//! Operations: appends (plain, `append_then`, claims), atomic batches,
//! transactions, checkpoint markers, point reads, reads at the floor,
//! readers, followers, readers that finish the oldest segment just before
//! a checkpoint releases it and a roll recycles its file, checkpoints and
//! syncs; in some rounds retention races readers at the floor. Lives vary the backend, durability level,
//! codec and a `DropOldest` limit.
//!
//! `RINGWAL_MODEL_SEEDS=N` runs N seeds per family (default 200 on the
//! real disk, 200 on the simulated one); `RINGWAL_MODEL_SEED=S` replays
//! one. A failure names its seed. `scripts/model.sh` runs thousands.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Config, Durability, Error, Level, Lsn, RecoveryMode, Wal, WhenFull};
use ringwal_platform::sim::{Faults, SimFs};
use ringwal_platform::Vfs;

use crate::common::library::{opening_logs, spawning_processes};

const SEGMENT: u64 = 64 << 10;
const MAX_RECORD: usize = 3 << 10;
const STREAMS: u16 = 4;
const SIM_DIR: &str = "/sim/log";

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("RINGWAL_MODEL_SEED") {
        return vec![s.parse().expect("RINGWAL_MODEL_SEED must be a number")];
    }
    let n = std::env::var("RINGWAL_MODEL_SEEDS").map_or(default, |v| {
        v.parse().expect("RINGWAL_MODEL_SEEDS must be a number")
    });
    (0..n).collect()
}

/// Prints the seed of a failing run as the test unwinds.
struct SeedGuard(&'static str, u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "model ({}): failed at seed {}; replay with RINGWAL_MODEL_SEED={} cargo test -p ringwal-cli --test cli model::{}",
                self.0, self.1, self.1, self.0
            );
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    stream: u16,
    payload: Vec<u8>,
    /// A checkpoint marker, whose payload is its snapshot LSN.
    marker: bool,
}

/// What the public API has promised so far, across every life of one log.
#[derive(Default, Debug)]
struct Model {
    /// Every LSN handed out whose record may still be answered, with it.
    handed: BTreeMap<Lsn, Rec>,
    /// The highest LSN ever handed out (failed, cut and given up included).
    high: Lsn,
    /// The highest level each LSN's ticket was seen to reach.
    acked: BTreeMap<Lsn, Level>,
    /// Atomic batches and transactions, first and last LSN.
    batches: Vec<(Lsn, Lsn)>,
    /// LSNs given up by a point-in-time repair: never a record again.
    given_up: BTreeSet<Lsn>,
    /// The kept floor: the oldest LSN the log last said it keeps.
    floor: Lsn,
    /// The highest LSN a successful checkpoint was given: nothing above
    /// it may go, unless the size limit drops segments.
    checkpointed: Lsn,
    /// This life drops the oldest segments at its size limit.
    drops: bool,
    /// The highest LSN the size limit dropped.
    dropped: Arc<Drops>,
    /// The key file of a log whose lives may encrypt (key id 1), for
    /// every reader and command; `None`: a plaintext log.
    key_file: Option<PathBuf>,
}

const KEY: [u8; 32] = [0x6b; 32];

impl Model {
    /// The log's keys, key 1 the current one or not: a later life reads
    /// what an earlier one sealed either way.
    fn keys(&self, current: bool) -> Option<Arc<ringwal::StaticKeys>> {
        self.key_file.as_ref()?;
        let keys = ringwal::StaticKeys::new();
        keys.insert(1, ringwal::Key::new(KEY), current);
        Some(Arc::new(keys))
    }

    /// `ringwal` with `args` on this log, with its key file if it has one.
    fn cli(&self, args: &[&str]) -> (i32, String) {
        let mut all: Vec<&str> = args.to_vec();
        if let Some(k) = &self.key_file {
            all.extend(["--key-file", k.to_str().expect("a UTF-8 path")]);
        }
        cli(&all)
    }
}

impl Model {
    /// The records a full read of the log must yield: every one handed
    /// out from the floor up to `upto`, less the given-up ones.
    fn kept(&self, upto: Lsn) -> Vec<(Lsn, &Rec)> {
        self.handed
            .range(self.floor.max(1)..=upto)
            .filter(|(l, _)| !self.given_up.contains(l))
            .map(|(&l, r)| (l, r))
            .collect()
    }

    /// Whether every LSN in `lo..hi` is one a reader may step over.
    fn skippable(&self, lo: Lsn, hi: Lsn) -> bool {
        (lo..hi).all(|l| self.given_up.contains(&l))
    }

    fn check_record(&self, r: &ringwal::Record, ctx: &str) {
        let want = self
            .handed
            .get(&r.lsn)
            .unwrap_or_else(|| panic!("{ctx}: LSN {} answered but never handed out", r.lsn));
        assert!(
            !self.given_up.contains(&r.lsn),
            "{ctx}: given-up LSN {} answered as a record",
            r.lsn
        );
        if want.marker {
            assert_eq!(
                (r.kind, &r.payload),
                (ringwal::Kind::Checkpoint, &want.payload),
                "{ctx}: LSN {} is not the checkpoint marker appended",
                r.lsn
            );
            return;
        }
        assert_eq!(
            (r.kind, r.stream, &r.payload),
            (ringwal::Kind::Data, want.stream, &want.payload),
            "{ctx}: LSN {} holds another record",
            r.lsn
        );
    }
}

/// One thing a producer thread saw, checked once every thread has
/// joined (only then is every LSN's record known).
#[derive(Debug)]
enum Event {
    Appended {
        first: Lsn,
        recs: Vec<Rec>,
        batch: bool,
        reached: Option<Level>,
    },
    /// An append or its wait failed: only under injected faults.
    Failed { lsn: Option<Lsn> },
    Read {
        lsn: Lsn,
        got: Result<ringwal::Record, Error>,
        floor_after: Lsn,
    },
    Scan {
        from: Lsn,
        written_before: Lsn,
        got: Vec<ringwal::Record>,
        end: Option<Error>,
        floor_after: Lsn,
    },
    Checkpoint {
        up_to: Lsn,
        ok: bool,
        floor_after: Lsn,
    },
}

fn payload(rng: &mut StdRng) -> Vec<u8> {
    let len = if rng.gen_bool(0.1) {
        rng.gen_range(1..=MAX_RECORD)
    } else {
        rng.gen_range(1..300)
    };
    let mut p = vec![0u8; len];
    rng.fill(&mut p[..]);
    p
}

fn level(rng: &mut StdRng) -> Option<Level> {
    match rng.gen_range(0..4) {
        0 => None,
        1 => Some(Level::Accepted),
        2 => Some(Level::Written),
        _ => Some(Level::Durable),
    }
}

/// One producer's share of a round: `ops` random operations.
fn producer(
    wal: &Wal,
    lists: &Mutex<HashMap<u16, Vec<Lsn>>>,
    mut rng: StdRng,
    ops: usize,
    faults: bool,
) -> Vec<Event> {
    let mut out = Vec::new();
    for _ in 0..ops {
        let op = rng.gen_range(0..100);
        let ev = match op {
            0..=34 => append_one(wal, lists, &mut rng),
            35..=44 => append_many(wal, &mut rng, false),
            45..=52 => append_many(wal, &mut rng, true),
            53..=66 => point_read(wal, &mut rng),
            67..=74 => {
                out.extend(floor_reads(wal));
                continue;
            }
            75..=82 => scan(wal, &mut rng),
            83..=86 => {
                out.extend(overtaken_scan(wal, lists, &mut rng));
                continue;
            }
            87..=93 => checkpoint(wal, &mut rng),
            94..=95 => marker(wal, &mut rng),
            _ => {
                let r = wal.sync();
                assert!(faults || r.is_ok(), "sync failed: {r:?}");
                continue;
            }
        };
        if let Event::Failed { .. } = ev {
            assert!(faults, "an operation failed with no fault injected: {ev:?}");
        }
        out.push(ev);
    }
    out
}

fn append_one(wal: &Wal, lists: &Mutex<HashMap<u16, Vec<Lsn>>>, rng: &mut StdRng) -> Event {
    let rec = Rec {
        stream: rng.gen_range(0..STREAMS),
        payload: payload(rng),
        marker: false,
    };
    let how = rng.gen_range(0..3);
    let ticket = if how == 0 {
        let s = rec.stream;
        wal.append_then(rec.stream, &rec.payload, |lsn| {
            lists.lock().unwrap().entry(s).or_default().push(lsn);
        })
    } else if how == 1 {
        // A claim, filled in place after the reservation.
        wal.append_with(rec.stream, rec.payload.len(), |slot| {
            slot.copy_from_slice(&rec.payload)
        })
    } else {
        wal.append(rec.stream, &rec.payload)
    };
    settle(ticket, rng, vec![rec], false)
}

/// An atomic batch, or a transaction committed as one.
fn append_many(wal: &Wal, rng: &mut StdRng, tx: bool) -> Event {
    let n = rng.gen_range(1..=6);
    let recs: Vec<Rec> = (0..n)
        .map(|_| Rec {
            stream: rng.gen_range(0..STREAMS),
            payload: {
                let mut p = payload(rng);
                p.truncate(600);
                p
            },
            marker: false,
        })
        .collect();
    let ticket = if tx {
        let mut t = wal.begin();
        for r in &recs {
            t.append(r.stream, &r.payload).expect("staging in memory");
        }
        t.commit()
    } else {
        let pairs: Vec<(u16, &[u8])> = recs.iter().map(|r| (r.stream, &r.payload[..])).collect();
        wal.append_batch(&pairs)
    };
    settle(ticket, rng, recs, true)
}

fn point_read(wal: &Wal, rng: &mut StdRng) -> Event {
    let (floor, written) = (wal.oldest_lsn(), wal.written_lsn());
    if written == 0 {
        return Event::Read {
            lsn: 0,
            got: Err(Error::EmptyBatch),
            floor_after: floor,
        };
    }
    let lsn = rng.gen_range(floor.saturating_sub(3).max(1)..=written.max(floor));
    let lsn = lsn.min(written);
    let got = wal.read(lsn);
    Event::Read {
        lsn,
        got,
        floor_after: wal.oldest_lsn(),
    }
}

/// Reads at the kept floor as the log reports it, where a checkpoint or
/// a drop racing them removes records: whatever they answer must agree
/// with the floor seen right after.
fn floor_reads(wal: &Wal) -> Vec<Event> {
    (0..8)
        .filter_map(|_| {
            let lsn = wal.oldest_lsn();
            (lsn <= wal.written_lsn()).then(|| Event::Read {
                lsn,
                got: wal.read(lsn),
                floor_after: wal.oldest_lsn(),
            })
        })
        .collect()
}

/// A reader, or a follower read up to a record already written (so that
/// it never waits for one no producer will append).
fn scan(wal: &Wal, rng: &mut StdRng) -> Event {
    let (floor, written_before) = (wal.oldest_lsn(), wal.written_lsn());
    let from = rng.gen_range(floor..=written_before.max(floor));
    let mut got = Vec::new();
    let mut end = None;
    if rng.gen_bool(0.3) && from <= written_before && wal.read(written_before).is_ok() {
        match wal.follow(from) {
            Err(e) => end = Some(e),
            Ok(follower) => {
                for item in follower {
                    match item {
                        Ok(r) => {
                            let at = r.lsn;
                            got.push(r);
                            if at >= written_before {
                                break;
                            }
                        }
                        Err(e) => {
                            end = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        return Event::Scan {
            from,
            written_before,
            got,
            end,
            floor_after: wal.oldest_lsn(),
        };
    }
    match wal.reader_from(from) {
        Err(e) => end = Some(e),
        Ok(reader) => {
            for item in reader.take(300) {
                match item {
                    Ok(r) => got.push(r),
                    Err(e) => {
                        end = Some(e);
                        break;
                    }
                }
            }
        }
    }
    Event::Scan {
        from,
        written_before,
        got,
        end,
        floor_after: wal.oldest_lsn(),
    }
}

/// A reader (or follower) that reads the oldest segment to its last
/// record, then a checkpoint that releases exactly that segment, then
/// appends that roll into new segments, likely reusing its file (a
/// recycled spare), then the same reader again: it must read on into the
/// next segment, whose records are kept (`Released` only below the
/// floor). Segment bounds from `verify::stat`, the public listing.
fn overtaken_scan(
    wal: &Wal,
    lists: &Mutex<HashMap<u16, Vec<Lsn>>>,
    rng: &mut StdRng,
) -> Vec<Event> {
    let mut out = Vec::new();
    let Ok(stat) = ringwal::verify::stat(wal.dir(), wal.config()) else {
        return out;
    };
    let [oldest, next, ..] = stat.segments.as_slice() else {
        return out;
    };
    let (from, last) = (oldest.base_lsn, next.base_lsn - 1);
    let written_before = wal.written_lsn();
    let follow = rng.gen_bool(0.5);
    let reader: Result<Box<dyn Iterator<Item = ringwal::Result<ringwal::Record>>>, Error> =
        if follow && written_before >= last {
            wal.follow(from)
                .map(|f| Box::new(f) as Box<dyn Iterator<Item = _>>)
        } else {
            wal.reader_from(from)
                .map(|r| Box::new(r) as Box<dyn Iterator<Item = _>>)
        };
    let mut reader = match reader {
        Ok(r) => r,
        Err(e) => {
            out.push(Event::Scan {
                from,
                written_before,
                got: Vec::new(),
                end: Some(e),
                floor_after: wal.oldest_lsn(),
            });
            return out;
        }
    };
    let (mut got, mut end) = (Vec::new(), None);
    let mut step = |got: &mut Vec<ringwal::Record>, end: &mut Option<Error>| match reader.next() {
        Some(Ok(r)) => {
            got.push(r);
            true
        }
        Some(Err(e)) => {
            *end = Some(e);
            false
        }
        None => false,
    };
    while got.last().is_none_or(|r: &ringwal::Record| r.lsn < last) && step(&mut got, &mut end) {}
    if end.is_none() && got.last().is_some_and(|r| r.lsn == last) {
        let ok = wal.checkpoint(last).is_ok();
        out.push(Event::Checkpoint {
            up_to: last,
            ok,
            floor_after: wal.oldest_lsn(),
        });
        // About two segments of records: the rolls reuse released files.
        let mut bytes = 0;
        while bytes < 2 * SEGMENT as usize {
            let ev = append_one(wal, lists, rng);
            if let Event::Appended { recs, .. } = &ev {
                bytes += recs.iter().map(|r| r.payload.len() + 64).sum::<usize>();
            } else {
                out.push(ev);
                break;
            }
            out.push(ev);
        }
    }
    // The reader again (or on, if the segment's last LSNs were given up
    // and it read past them), up to what was written when it was made.
    while end.is_none()
        && got.len() < 300
        && got
            .last()
            .is_none_or(|r: &ringwal::Record| r.lsn < written_before)
        && step(&mut got, &mut end)
    {}
    out.push(Event::Scan {
        from,
        written_before,
        got,
        end,
        floor_after: wal.oldest_lsn(),
    });
    out
}

/// A checkpoint marker for a snapshot covering a random LSN handed out.
fn marker(wal: &Wal, rng: &mut StdRng) -> Event {
    let snapshot = rng.gen_range(0..wal.next_lsn());
    let rec = Rec {
        stream: 0,
        payload: snapshot.to_le_bytes().to_vec(),
        marker: true,
    };
    settle(wal.checkpoint_marker(snapshot), rng, vec![rec], false)
}

/// What became of an append of `recs` (one, or an atomic batch, whose
/// ticket is its last record's): its ticket waited for at a random level.
fn settle(
    ticket: Result<ringwal::Ticket, Error>,
    rng: &mut StdRng,
    recs: Vec<Rec>,
    batch: bool,
) -> Event {
    let ticket = match ticket {
        Ok(t) => t,
        Err(_) => return Event::Failed { lsn: None },
    };
    let want = level(rng);
    if let Some(l) = want
        && ticket.wait(l).is_err()
    {
        return Event::Failed {
            lsn: Some(ticket.lsn()),
        };
    }
    Event::Appended {
        first: ticket.lsn() + 1 - recs.len() as Lsn,
        recs,
        batch,
        reached: want,
    }
}

fn checkpoint(wal: &Wal, rng: &mut StdRng) -> Event {
    let written = wal.written_lsn();
    let up_to = rng.gen_range(0..=written);
    let ok = wal.checkpoint(up_to).is_ok();
    Event::Checkpoint {
        up_to,
        ok,
        floor_after: wal.oldest_lsn(),
    }
}

/// Fold one round's events into the model, checking each answer.
fn absorb(model: &mut Model, events: Vec<Event>, life_start: Lsn) {
    // Appends first: every answer below is checked against their records.
    for ev in &events {
        match ev {
            Event::Appended {
                first,
                recs,
                batch,
                reached,
            } => {
                let last = first + recs.len() as Lsn - 1;
                assert!(
                    *first >= life_start,
                    "LSN {first} handed out again (this life began at {life_start})"
                );
                for (i, r) in recs.iter().enumerate() {
                    let lsn = first + i as Lsn;
                    let old = model.handed.insert(lsn, r.clone());
                    assert!(old.is_none(), "LSN {lsn} handed out twice");
                    if let Some(l) = reached {
                        model.acked.insert(lsn, *l);
                    }
                }
                if *batch {
                    model.batches.push((*first, last));
                }
                model.high = model.high.max(last);
            }
            Event::Failed { lsn: Some(l) } => model.high = model.high.max(*l),
            Event::Checkpoint {
                up_to, ok: true, ..
            } => model.checkpointed = model.checkpointed.max(*up_to),
            _ => {}
        }
    }
    for ev in &events {
        check_answer(model, ev);
    }
}

fn check_answer(model: &Model, ev: &Event) {
    match ev {
        Event::Read {
            lsn,
            got,
            floor_after,
        } if *lsn > 0 => match got {
            Ok(r) => {
                assert_eq!(r.lsn, *lsn, "a read of {lsn} answered another LSN");
                model.check_record(r, "point read");
            }
            Err(Error::Released { .. }) => assert!(
                lsn < floor_after || model.given_up.contains(lsn),
                "read({lsn}) said Released while the log still keeps LSNs from {floor_after}"
            ),
            Err(e) if model.given_up.contains(lsn) => {
                let _ = e;
            }
            Err(Error::Poisoned { .. } | Error::NoSpace { .. }) => {}
            Err(e) => panic!("read({lsn}) of a written LSN failed: {e}"),
        },
        Event::Scan {
            from,
            written_before,
            got,
            end,
            floor_after,
        } => check_scan(
            model,
            *from,
            *written_before,
            got,
            end.as_ref(),
            *floor_after,
        ),
        Event::Checkpoint {
            up_to, floor_after, ..
        } => {
            // Concurrent checkpoints may have taken more than this one:
            // the bound is the highest any of them was given.
            let bound = model.checkpointed.max(*up_to) + 1;
            assert!(
                model.drops || *floor_after <= bound || model.skippable(bound, *floor_after),
                "the log keeps LSNs only from {floor_after}, but no checkpoint went above {}",
                bound - 1
            );
        }
        _ => {}
    }
}

fn check_scan(
    model: &Model,
    from: Lsn,
    written_before: Lsn,
    got: &[ringwal::Record],
    end: Option<&Error>,
    floor_after: Lsn,
) {
    let mut next = from;
    for r in got {
        assert!(
            r.lsn >= next,
            "a reader from {from} went back to {} after {}",
            r.lsn,
            next - 1
        );
        assert!(
            model.skippable(next, r.lsn),
            "a reader from {from} stepped from {next} to {} over LSNs not given up",
            r.lsn
        );
        model.check_record(r, "reader");
        next = r.lsn + 1;
    }
    match end {
        None => {
            if got.len() < 300 {
                assert!(
                    next > written_before || model.skippable(next, written_before + 1),
                    "a reader from {from} ended at {} below the written watermark {written_before}",
                    next - 1
                );
            }
        }
        Some(Error::Released { lsn, .. }) => assert!(
            *lsn < floor_after,
            "a reader from {from} ended with Released at {lsn}, at or above the kept floor {floor_after}"
        ),
        Some(Error::Poisoned { .. } | Error::NoSpace { .. }) => {}
        Some(e) => panic!("a reader from {from} failed: {e}"),
    }
}

/// What a live log must say once a round's threads have joined.
fn check_quiet(
    model: &mut Model,
    wal: &Wal,
    lists: &Mutex<HashMap<u16, Vec<Lsn>>>,
    life_start: Lsn,
) {
    for (stream, l) in lists.lock().unwrap().iter() {
        assert!(
            l.windows(2).all(|w| w[0] < w[1]),
            "append_then's list of stream {stream} is not ascending: {l:?}"
        );
    }
    // With no fault, every LSN of this life was handed to an append.
    let last = wal.next_lsn() - 1;
    for l in life_start..=last {
        assert!(
            model.handed.contains_key(&l),
            "LSN {l} handed out to no append"
        );
    }
    let (durable, written) = (wal.durable_lsn(), wal.written_lsn());
    assert!(
        durable <= written && written <= last,
        "{durable} {written} {last}"
    );
    for (&l, &lv) in model.acked.range(life_start..) {
        match lv {
            Level::Durable => assert!(l <= durable, "{l} acked durable above {durable}"),
            Level::Written => assert!(l <= written, "{l} acked written above {written}"),
            Level::Accepted => {}
        }
    }
    let floor = wal.oldest_lsn();
    assert!(
        floor >= model.floor,
        "the kept floor went back from {} to {floor}",
        model.floor
    );
    model.floor = floor;
    wal.sync()
        .expect("no fault: everything handed out gets durable");
    let all = read_all(wal, "a full read of a quiet log");
    // A drop at the size limit may raise the floor while the read runs:
    // it then starts at most at the floor seen after it.
    let after = wal.oldest_lsn();
    let first = all.first().map_or(after, |r| r.lsn);

    model.floor = model.floor.max(first.min(after));
    let want = model.kept(last);
    let lsns: Vec<Lsn> = all.iter().map(|r| r.lsn).collect();
    let want_lsns: Vec<Lsn> = want.iter().map(|(l, _)| *l).collect();
    assert_eq!(
        lsns, want_lsns,
        "a full read yields other LSNs than were kept"
    );
    for r in &all {
        model.check_record(r, "full read");
    }
}

fn config(rng: &mut StdRng, sim: Option<&SimFs>, mode: RecoveryMode, model: &Model) -> Config {
    let mut b = Config::builder()
        .observer(model.dropped.clone())
        .segment_bytes(SEGMENT)
        .max_record_bytes(MAX_RECORD)
        .max_inflight(rng.gen_range(1..=4))
        .recovery(mode);
    if rng.gen_bool(0.5) {
        b = b.durability(Durability::Deferred {
            sync_interval: Some(Duration::from_millis(5)),
        });
    }
    if rng.gen_bool(0.3) {
        b = b.max_log_bytes(Some(4 * SEGMENT), WhenFull::DropOldest);
    }
    if rng.gen_bool(0.5) {
        b = b.backend(ringwal::Backend::Threaded);
    }
    if let Some(keys) = model.keys(rng.gen_bool(0.5)) {
        b = b.encryption(keys);
    }
    match rng.gen_range(0..4) {
        0 => b = b.compression(ringwal::Codec::Lz4, 64),
        1 => b = b.compression(ringwal::Codec::Zstd, 64),
        _ => {}
    }
    if let Some(fs) = sim {
        b = b.sim(fs);
    }
    b.build()
}

/// Hears which LSNs the size limit dropped, so that the model's floor
/// follows drops the ring makes after the last answer it saw (a roll
/// still under way when the producers are done).
#[derive(Debug, Default)]
struct Drops(std::sync::atomic::AtomicU64);

impl ringwal::DurabilityObserver for Drops {
    fn advanced(&self, _written: Lsn, _durable: Lsn) {}
    fn records_dropped(&self, _first: Lsn, last: Lsn) {
        self.0.fetch_max(last, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Open a life of the log, telling the model how it keeps its size.
fn open_life(
    model: &mut Model,
    dir: &Path,
    cfg: Config,
) -> Result<(Wal, ringwal::RecoveryReport), Error> {
    model.drops = matches!(cfg.max_log_bytes(), Some((_, WhenFull::DropOldest)));

    let pit = cfg.recovery_mode() == RecoveryMode::PointInTime;
    let (wal, rep) = open_wal(dir, cfg)?;
    if let Some((first, last)) = rep.skipped {
        model.given_up.extend(first..=last);
        model.high = model.high.max(last);
    }
    if pit {
        // A repair keeps the log up to its first damage: what lay after
        // it is given up, never answered again.
        // With nothing kept, the log starts afresh above them all: they
        // are then below its floor, released rather than given up.
        let (kept, floor) = (rep.last_lsn, wal.oldest_lsn());
        let gone: Vec<Lsn> = model.handed.range(kept + 1..).map(|(&l, _)| l).collect();
        for l in gone {
            model.handed.remove(&l);
            assert!(
                l < floor || model.given_up.contains(&l),
                "the repair gave up LSN {l} without recording it"
            );
        }
    }
    // Whatever earlier lives released stays released.
    model.checkpointed = model.checkpointed.max(wal.oldest_lsn().saturating_sub(1));
    Ok((wal, rep))
}

/// Run `rounds` rounds of `threads` producers on `wal`.
fn run_life(model: &mut Model, wal: &Arc<Wal>, rng: &mut StdRng, faults: bool) -> Lsn {
    let life_start = wal.next_lsn();
    assert!(
        life_start > model.high,
        "the log resumed at {life_start}, not above LSN {} handed out before",
        model.high
    );
    let lists = Arc::new(Mutex::new(HashMap::new()));
    for _ in 0..rng.gen_range(1..=3) {
        let threads = rng.gen_range(1..=4);
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (wal, lists) = (wal.clone(), lists.clone());
                let (r, ops) = (StdRng::seed_from_u64(rng.r#gen()), rng.gen_range(5..40));
                std::thread::spawn(move || producer(&wal, &lists, r, ops, faults))
            })
            .collect();
        let mut events: Vec<Event> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("a producer panicked"))
            .collect();
        if rng.gen_bool(0.3) {
            events.extend(race_round(wal));
        }
        absorb(model, events, life_start);
        if !faults {
            check_quiet(model, wal, &lists, life_start);
        }
    }
    life_start
}

/// Retention racing readers: one thread appends fast enough to roll
/// every few records, one checkpoints everything written over and over,
/// and three read at the floor meanwhile (more threads than cores, so
/// any of them may be preempted between two steps of another).
fn race_round(wal: &Arc<Wal>) -> Vec<Event> {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (wal, done) = (wal.clone(), done.clone());
        std::thread::spawn(move || {
            let mut out = Vec::new();
            for i in 0..150u32 {
                let rec = Rec {
                    stream: 3,
                    payload: i.to_le_bytes().repeat(400),
                    marker: false,
                };
                let t = wal.append(rec.stream, &rec.payload).expect("append");
                let reached = (i % 16 == 15).then_some(Level::Written);
                if reached.is_some() {
                    t.wait(Level::Written).expect("written");
                }
                out.push(Event::Appended {
                    first: t.lsn(),
                    recs: vec![rec],
                    batch: false,
                    reached,
                });
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            out
        })
    };
    let others: Vec<_> = (0..4)
        .map(|i| {
            let (wal, done) = (wal.clone(), done.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    if i == 0 {
                        let up_to = wal.written_lsn();
                        let ok = wal.checkpoint(up_to).is_ok();
                        out.push(Event::Checkpoint {
                            up_to,
                            ok,
                            floor_after: wal.oldest_lsn(),
                        });
                    } else {
                        out.extend(floor_reads(&wal));
                    }
                }
                out
            })
        })
        .collect();
    let mut events = appender.join().expect("the appender panicked");
    for h in others {
        events.extend(h.join().expect("a racer panicked"));
    }
    events
}

/// After a clean close and reopen: everything handed out is there.
fn check_reopened(model: &mut Model, wal: &Wal) {
    assert!(
        wal.next_lsn() > model.high,
        "reopened at {}, not above LSN {} handed out before",
        wal.next_lsn(),
        model.high
    );
    let floor = wal.oldest_lsn();
    assert!(floor >= model.floor, "the floor went back over a reopen");
    model.floor = floor;
    let all = read_all(wal, "a full read after reopen");
    let want: Vec<Lsn> = model.kept(model.high).iter().map(|(l, _)| *l).collect();
    let got: Vec<Lsn> = all.iter().map(|r| r.lsn).collect();
    assert_eq!(got, want, "after reopen the log holds other LSNs");
    for r in &all {
        model.check_record(r, "after reopen");
    }
    for &l in &model.given_up {
        if l >= floor {
            assert!(wal.read(l).is_err(), "given-up LSN {l} read as a record");
        }
    }
}

/// Damage the last record of the closed log in `dir`, as a bad sector
/// would, so that a point-in-time repair gives it up.
fn damage_last_record(dir: &Path, model: &Model) -> Option<Lsn> {
    let mut b = Config::builder()
        .segment_bytes(SEGMENT)
        .max_record_bytes(MAX_RECORD);
    if let Some(keys) = model.keys(false) {
        b = b.encryption(keys);
    }
    let cfg = b.build();
    let (wal, _) = open_wal(dir, cfg).expect("open a closed log");
    // Keep it simple: only a lone record (damaging a batch member gives
    // up the batch's later members too).
    let last = model
        .kept(model.high)
        .last()
        .map(|(l, _)| *l)
        .filter(|&last| !model.batches.iter().any(|&(a, b)| a <= last && last <= b));
    let Some(last) = last else {
        wal.close().expect("close");
        return None;
    };
    let at = wal
        .reader_from(last)
        .ok()
        .and_then(|r| r.located().find_map(|r| r.ok().filter(|r| r.lsn == last)));
    wal.close().expect("close");
    let at = at?;
    let path = dir.join(&at.segment);
    let mut bytes = std::fs::read(&path).expect("read segment");
    // The frame's stored CRC (its first bytes, docs/format.md): whatever
    // the payload's codec, the frame no longer checks.
    bytes[at.offset as usize] ^= 0x5A;
    std::fs::write(&path, &bytes).expect("write segment");
    Some(last)
}

/// Cut a sealed segment of the closed log in `dir` short, as a lost
/// write-back or a copy cut off would. Every command that reads the log
/// must call it damaged, with one status. Returns whether it cut one.
fn cut_sealed_segment(dir: &Path, rng: &mut StdRng, model: &Model) -> bool {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    if segs.len() < 2 {
        return false;
    }
    let victim = &segs[rng.gen_range(0..segs.len() - 1)];
    let len = std::fs::metadata(victim).expect("stat").len();
    let header = ringwal::format::HEADER_BYTES as u64;
    let cut = rng.gen_range(header + 1..len);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(victim)
        .expect("open");
    f.set_len(cut).expect("truncate");
    drop(f);
    let d = dir.to_str().expect("a UTF-8 path");
    let (verify, vout) = model.cli(&["verify", d]);
    let (stat, sout) = model.cli(&["stat", d]);
    // A cut past the last frame loses nothing and no command calls it
    // damage; any other cut is damage to each of them alike.
    assert_eq!(
        stat, verify,
        "stat and verify give one log two statuses:\nverify: {vout}\nstat: {sout}"
    );
    true
}

/// The key, as a file only its owner may read, in `dir`.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("key");
    std::fs::write(&path, KEY).expect("write the key");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod the key");
    path
}

/// A writer's lock is an `flock` on an open file description, close-on-
/// exec: a child that another test thread forks shares it until its
/// `exec`, so a log closed meanwhile can still be locked for a moment.
/// Spawns hold the tests' shared lock exclusively; opens hold it shared,
/// so the two families running side by side, and the other tests of
/// this binary, never meet in that window.
fn open_wal(dir: &Path, cfg: Config) -> Result<(Wal, ringwal::RecoveryReport), Error> {
    let _opening = opening_logs();
    Wal::open(dir, cfg)
}

fn cli(args: &[&str]) -> (i32, String) {
    let _spawning = spawning_processes();
    let out = Command::new(env!("CARGO_BIN_EXE_ringwal"))
        .args(args)
        .output()
        .expect("run ringwal");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The command line's answers on the closed log in `dir` agree with the
/// model and with each other.
fn check_cli(model: &Model, dir: &Path) {
    let d = dir.to_str().expect("a UTF-8 path");
    let want = model.kept(model.high);
    let want_lsns: Vec<Lsn> = want.iter().map(|(l, _)| *l).collect();
    for cmd in ["verify", "stat"] {
        let (code, out) = model.cli(&[cmd, "--json", d]);
        assert_eq!(code, 0, "ringwal {cmd} exited {code}: {out}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(
            v["totals"]["records"].as_u64(),
            Some(want.len() as u64),
            "ringwal {cmd} counts other records than the model keeps (from {}, given up {:?}): {out}\n{}",
            model.floor,
            model.given_up,
            model.cli(&["dump", d]).1
        );
    }
    let (code, out) = model.cli(&["cat", "--json", d]);
    assert_eq!(code, 0, "ringwal cat exited {code}: {out}");
    let mut lsns = Vec::new();
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let lsn = v["lsn"].as_u64().expect("an LSN");
        let body = match (v["payload"].as_str(), v["payload_b64"].as_str()) {
            (Some(p), _) => p.as_bytes().to_vec(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64"),
            _ => panic!("a cat line without a payload: {line}"),
        };
        assert_eq!(
            Some(&body),
            model.handed.get(&lsn).map(|r| &r.payload),
            "cat: LSN {lsn}"
        );
        lsns.push(lsn);
    }
    assert_eq!(
        lsns, want_lsns,
        "ringwal cat yields other LSNs than the model keeps"
    );
    let (code, out) = model.cli(&["dump", "--json", d]);
    assert_eq!(code, 0, "ringwal dump exited {code}: {out}");
    let dumped: Vec<Lsn> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["lsn"]
                .as_u64()
                .expect("an LSN")
        })
        .collect();
    assert_eq!(
        dumped, want_lsns,
        "ringwal dump yields other LSNs than the model keeps"
    );
    for entry in std::fs::read_dir(dir).expect("list") {
        let entry = entry.expect("entry");
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&entry.metadata().expect("stat").permissions());
        assert_eq!(
            mode & 0o077,
            0,
            "{} is readable by others ({mode:o})",
            entry.path().display()
        );
    }
}

/// Lives of one log on a real disk: rounds of producers, clean closes,
/// reopens, point-in-time repairs, with the command line's answers
/// checked after each close.
fn real_seed(seed: u64) {
    let _guard = SeedGuard("model_contract_on_a_real_disk", seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let mut model = Model::default();
    if rng.gen_bool(0.3) {
        model.key_file = Some(key_file(tmp.path()));
    }
    let mut mode = RecoveryMode::Strict;
    for _life in 0..rng.gen_range(1..=3) {
        let cfg = config(&mut rng, None, mode, &model);
        let (wal, _) = open_life(&mut model, &dir, cfg).expect("open");
        let wal = Arc::new(wal);
        check_reopened(&mut model, &wal);
        run_life(&mut model, &wal, &mut rng, false);
        let wal = Arc::into_inner(wal).expect("every producer joined");
        wal.close().expect("a clean close");
        // The ring may have dropped segments after the last answer.
        model.floor = model
            .floor
            .max(model.dropped.0.load(std::sync::atomic::Ordering::SeqCst) + 1);
        check_cli(&model, &dir);
        mode = RecoveryMode::Strict;
        match rng.gen_range(0..10) {
            0..=2 => {
                if let Some(lsn) = damage_last_record(&dir, &model) {
                    model.handed.remove(&lsn);
                    model.given_up.insert(lsn);
                    mode = RecoveryMode::PointInTime;
                }
            }
            3 if cut_sealed_segment(&dir, &mut rng, &model) => mode = RecoveryMode::PointInTime,
            _ => {}
        }
    }
    let cfg = config(&mut rng, None, mode, &model);
    let (wal, _) = open_life(&mut model, &dir, cfg).expect("open");
    check_reopened(&mut model, &wal);
    // One more record past whatever was given up, then every reader
    // and command must still agree.
    let t = wal.append(1, b"after").expect("append");
    t.wait(Level::Durable).expect("durable");
    model.handed.insert(
        t.lsn(),
        Rec {
            stream: 1,
            payload: b"after".to_vec(),
            marker: false,
        },
    );
    model.high = t.lsn();
    wal.close().expect("close");
    model.floor = model
        .floor
        .max(model.dropped.0.load(std::sync::atomic::Ordering::SeqCst) + 1);
    check_cli(&model, &dir);
}

#[test]
fn model_contract_on_a_real_disk() {
    for seed in seeds(200) {
        real_seed(seed);
    }
}

/// Copy what the simulated disk holds under its log directory into a
/// real directory, for the command line to read.
fn export(fs: &SimFs, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    let names = fs.list(Path::new(SIM_DIR)).expect("list the sim dir");
    for name in names {
        let from: PathBuf = Path::new(SIM_DIR).join(&name);
        if let Some(bytes) = fs.read_file(&from) {
            let path = to.join(&name);
            std::fs::write(&path, bytes).expect("write");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod");
        }
    }
}

/// Lives of one log on the simulated disk: each life ends in a power
/// loss at a random point or in an injected write failure; what recovery
/// keeps is checked against the acknowledgements, and the last state
/// against the command line.
fn sim_seed(seed: u64) {
    let _guard = SeedGuard("model_contract_through_crashes", seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fs = SimFs::new(seed, Faults::default());
    let mut model = Model::default();
    let keys_at = tempfile::tempdir().expect("tempdir");
    if rng.gen_bool(0.3) {
        model.key_file = Some(key_file(keys_at.path()));
    }
    let mut failed = false;
    for life in 0..rng.gen_range(1..=3) {
        let cfg = config(&mut rng, Some(&fs), RecoveryMode::Strict, &model);
        let (wal, _) = open_life(&mut model, Path::new(SIM_DIR), cfg)
            .unwrap_or_else(|e| panic!("open after a crash: {e}"));
        check_after_crash(&mut model, &wal, failed);
        let wal = Arc::new(wal);
        run_life(&mut model, &wal, &mut rng, false);
        failed = rng.gen_bool(0.3);
        if failed {
            // A failed write poisons: what it carried is never
            // acknowledged, and its LSNs are never handed out again.
            let ticket = wal.append(2, b"doomed");
            fs.set_faults(Faults {
                write_eio: 1.0,
                ..Faults::default()
            });
            let ticket = ticket.and_then(|t| {
                let _ = wal
                    .append(2, b"doomed too")
                    .map(|t2| model.high = model.high.max(t2.lsn()));
                model.high = model.high.max(t.lsn());
                t.wait(Level::Written).map(|()| t)
            });
            if let Ok(t) = ticket {
                // Written before the fault took hold.
                model.handed.insert(
                    t.lsn(),
                    Rec {
                        stream: 2,
                        payload: b"doomed".to_vec(),
                        marker: false,
                    },
                );
            }
            let _ = wal.sync();
        }
        let durable = wal.durable_lsn();
        let wal = Arc::into_inner(wal).expect("every producer joined");
        fs = fs.crash_into(life as u64, Faults::default());
        drop(wal);
        // Everything acknowledged durable stays; what was only handed
        // out, written or accepted may be cut, and is then never answered.
        for (&l, &lv) in &model.acked {
            if lv == Level::Durable {
                assert!(
                    l <= durable,
                    "{l} acked durable above the watermark {durable}"
                );
            }
        }
        model.acked.retain(|_, lv| *lv == Level::Durable);
    }
    let cfg = config(&mut rng, Some(&fs), RecoveryMode::Strict, &model);
    let (wal, _) = open_life(&mut model, Path::new(SIM_DIR), cfg)
        .unwrap_or_else(|e| panic!("open after a crash: {e}"));
    check_after_crash(&mut model, &wal, failed);
    model.floor = wal.oldest_lsn();
    wal.close().expect("close");
    model.floor = model
        .floor
        .max(model.dropped.0.load(std::sync::atomic::Ordering::SeqCst) + 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    export(&fs, tmp.path());
    check_cli(&model, tmp.path());
}

/// Every record from the oldest kept on, failing the test on any error:
/// for a log that nothing is changing.
fn read_all(wal: &Wal, what: &str) -> Vec<ringwal::Record> {
    wal.reader_from(0)
        .expect("a reader from the oldest")
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

/// After a crash: every durable acknowledgement is there, nothing is
/// invented, batches are whole or absent; what was cut is forgotten.
fn check_after_crash(model: &mut Model, wal: &Wal, after_failure: bool) {
    let all = read_all(wal, "a full read after a crash");
    let floor = wal.oldest_lsn();
    assert!(floor >= model.floor, "the floor went back over a crash");
    model.floor = floor;
    let present: BTreeSet<Lsn> = all.iter().map(|r| r.lsn).collect();
    for r in &all {
        model.check_record(r, "after a crash");
    }
    for (&l, &lv) in &model.acked {
        if lv == Level::Durable && l >= floor {
            assert!(
                present.contains(&l),
                "LSN {l} was acknowledged durable and is gone"
            );
        }
    }
    for &(a, b) in &model.batches {
        let n = (a..=b).filter(|l| present.contains(l)).count();
        assert!(
            n == 0 || n as Lsn == b - a + 1 || a < floor,
            "batch {a}..={b} recovered in part ({n} records)"
        );
    }
    let last = all.last().map_or(0, |r| r.lsn);
    model
        .handed
        .retain(|l, _| present.contains(l) || *l < floor);
    model.acked.retain(|l, _| *l <= last);
    model.batches.retain(|&(a, _)| a <= last);
    // Reuse after a pure power loss: LSNs handed out but never written
    // may be handed out again (the write that carried them never
    // completed, so no acknowledgement named them); after a failed
    // write, never.
    if after_failure {
        assert!(
            wal.next_lsn() > model.high,
            "after a failed write the log resumed at {}, not above LSN {} handed out before",
            wal.next_lsn(),
            model.high
        );
    }
    model.high = wal.next_lsn() - 1;
}

#[test]
fn model_contract_through_crashes() {
    for seed in seeds(200) {
        sim_seed(seed);
    }
}
