//! The SIGKILL crash loop shared by the library's and the CLI's crash
//! tests: spawn a writer, feed it unique lines, kill it at a random point,
//! and check the reopened log against everything it acknowledged.
//!
//! A child appends newline-delimited records from stdin and prints each
//! record's LSN once it reached its level. A writer thread feeds it unique
//! lines, a reader thread collects the acknowledgements, and the child is
//! killed (`Child::kill`, SIGKILL) at a random point. After every kill the
//! log is opened with the library and read in full: every acknowledged
//! record must be there with exactly its bytes at its LSN, LSNs must be
//! dense (from 1, or from the oldest record a checkpoint kept), every
//! record must be a line that was sent, and nothing recovered by an
//! earlier iteration may change.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Config, Wal};

use super::{read_all, seeded_rng, spawning_processes};

/// How long a child may take to acknowledge its first record before the
/// test gives up on it. A liveness guard against a broken child, not a
/// performance assertion: a healthy child answers in milliseconds.
pub const FIRST_ACK_PATIENCE: Duration = Duration::from_secs(30);

/// How a child reports acknowledgements on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckFormat {
    /// `ringwal append`: each line is one LSN.
    Plain,
    /// The re-executed test binary, whose stdout also carries the test
    /// harness's own lines: `@start:N;` once, then `@ack:N;` per record.
    Tagged,
}

/// What one child's life produced.
pub struct Life {
    /// Every line fully written to the child's stdin, without its newline,
    /// in order: line `k` gets LSN `first + k` if the child appends it.
    pub sent: Vec<Vec<u8>>,
    /// LSNs the child printed, i.e. acknowledged as durable.
    pub acked: Vec<u64>,
    /// `@start:N;` from a tagged child: the LSN its first append would get.
    pub start: Option<u64>,
    /// How long after spawn, or after the first acknowledgement, the kill came.
    pub delay_ms: u64,
    pub after_first_ack: bool,
}

/// Spawn `cmd`, feed it lines, kill it at a random point, and collect what
/// it acknowledged. Panics if the child exits on its own.
pub fn one_life(mut cmd: Command, format: AckFormat, iteration: usize, rng: &mut StdRng) -> Life {
    let mut child: Child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child writer");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();

    // Writer: unique lines, each written with one write of less than
    // PIPE_BUF bytes, so a line is either wholly in the pipe or not at all.
    let writer_seed: u64 = rng.r#gen();
    let writer = std::thread::spawn(move || {
        let mut stdin = stdin;
        let mut rng = StdRng::seed_from_u64(writer_seed);
        let mut sent = Vec::new();
        loop {
            let n = sent.len();
            let mut line = format!("rec-{iteration}-{n}-").into_bytes();
            let filler = rng.gen_range(0..=400);
            line.extend((0..filler).map(|_| rng.sample(rand::distributions::Alphanumeric)));
            line.push(b'\n');
            if stdin.write_all(&line).is_err() {
                // The child is gone (EPIPE): nothing of this line was taken.
                return sent;
            }
            line.pop();
            sent.push(line);
        }
    });

    // Reader: acknowledgements, and a signal at the first one.
    let (first_tx, first_rx) = mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut out = BufReader::new(stdout);
        let mut acked = Vec::new();
        let mut start = None;
        let mut line = String::new();
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => return (acked, start),
                Ok(_) => {}
            }
            // A line cut short by the kill acknowledges nothing.
            if !line.ends_with('\n') {
                continue;
            }
            let before = acked.len();
            match format {
                AckFormat::Plain => acked.push(
                    line.trim_end()
                        .parse::<u64>()
                        .unwrap_or_else(|_| panic!("`ringwal append` printed {line:?}")),
                ),
                AckFormat::Tagged => {
                    acked.extend(tagged(&line, "@ack:"));
                    if let Some(s) = tagged(&line, "@start:").next() {
                        start = Some(s);
                    }
                }
            }
            if before == 0 && !acked.is_empty() {
                let _ = first_tx.send(());
            }
        }
    });
    let diagnostics = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    // One life in four is cut from spawn (so kills land in open and
    // recovery too); the others from the first acknowledgement.
    let after_first_ack = !rng.gen_ratio(1, 4);
    let delay_ms = rng.gen_range(5..=80);
    if after_first_ack && first_rx.recv_timeout(FIRST_ACK_PATIENCE).is_err() {
        let _ = child.kill();
        let status = child.wait();
        panic!(
            "iteration {iteration}: the child acknowledged nothing ({status:?}); stderr:\n{}",
            diagnostics.join().unwrap()
        );
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    if let Some(status) = child.try_wait().expect("try_wait") {
        panic!(
            "iteration {iteration}: the child exited on its own with {status} while its stdin was open; stderr:\n{}",
            diagnostics.join().unwrap()
        );
    }
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "a killed child cannot succeed: {status}");

    let sent = writer.join().expect("writer thread");
    let (acked, start) = reader.join().expect("reader thread");
    let _ = diagnostics.join();
    Life {
        sent,
        acked,
        start,
        delay_ms,
        after_first_ack,
    }
}

/// The numbers following each occurrence of `tag` up to a `;`.
pub fn tagged<'a>(line: &'a str, tag: &'a str) -> impl Iterator<Item = u64> + 'a {
    line.match_indices(tag).filter_map(move |(i, _)| {
        let rest = &line[i + tag.len()..];
        rest[..rest.find(';')?].parse().ok()
    })
}

/// What earlier iterations recovered: the payloads of LSNs `first..`.
#[derive(Clone, Debug)]
pub struct Known {
    pub first: u64,
    pub payloads: Vec<Vec<u8>>,
}

impl Known {
    pub fn empty() -> Known {
        Known {
            first: 1,
            payloads: Vec::new(),
        }
    }

    /// The LSN the next life's first append gets.
    pub fn next(&self) -> u64 {
        self.first + self.payloads.len() as u64
    }
}

/// Open the log after a kill and check it against everything known:
/// `known` (what earlier iterations recovered) and this life. Records at or
/// below `checkpointed` may have been checkpointed away; every other one
/// must be there. Returns what is now on disk.
pub fn check_after_kill(
    dir: &Path,
    cfg: Config,
    known: &Known,
    life: &Life,
    iteration: usize,
    checkpointed: u64,
) -> Known {
    let what = format!("iteration {iteration}");
    let first = known.next();
    if let Some(start) = life.start {
        assert_eq!(start, first, "{what}: the child resumed at the wrong LSN");
    }
    let (wal, report) = Wal::open(dir, cfg)
        .unwrap_or_else(|e| panic!("{what}: recovery after SIGKILL failed: {e}"));
    let recs = read_all(&wal);
    // Point reads start where the index recovery rebuilt says: each must
    // agree with the walk from the front.
    for r in recs.iter().step_by(recs.len() / 64 + 1) {
        let read = wal
            .read(r.lsn)
            .unwrap_or_else(|e| panic!("{what}: read({}) failed: {e}", r.lsn));
        assert!(
            read == *r,
            "{what}: read({}) disagrees with the walk",
            r.lsn
        );
    }
    wal.close().unwrap();

    // Dense from the oldest record kept, which only a checkpoint moves past
    // LSN 1, and never past what the child asked to drop.
    let oldest = recs.first().map_or(first, |r| r.lsn);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.lsn, oldest + i as u64, "{what}: LSNs must be dense");
    }
    assert!(
        oldest >= known.first && oldest <= known.first.max(checkpointed + 1),
        "{what}: oldest LSN {oldest}, but earlier lives kept {} and only LSNs up to {checkpointed} were checkpointed",
        known.first
    );
    let end = oldest + recs.len() as u64;
    assert!(
        end >= first,
        "{what}: the log ends at LSN {}, but LSN {} was recovered before",
        end - 1,
        first - 1
    );
    // Everything recovered before is unchanged.
    for r in recs.iter().take_while(|r| r.lsn < first) {
        assert!(
            r.payload == known.payloads[(r.lsn - known.first) as usize],
            "{what}: LSN {} changed since the last recovery",
            r.lsn
        );
    }
    // Nothing invented: every new record is the line sent for its LSN.
    for r in recs.iter().filter(|r| r.lsn >= first) {
        let k = (r.lsn - first) as usize;
        let sent = life.sent.get(k).unwrap_or_else(|| {
            panic!(
                "{what}: LSN {} on disk, but only {} lines were sent from LSN {first}",
                r.lsn,
                life.sent.len()
            )
        });
        assert!(
            r.payload == *sent,
            "{what}: LSN {} holds {:?}, but the line sent for it was {:?}",
            r.lsn,
            String::from_utf8_lossy(&r.payload),
            String::from_utf8_lossy(sent)
        );
    }
    // Every acknowledged record is there, exactly.
    let mut acked = life.acked.clone();
    acked.sort_unstable();
    for w in acked.windows(2) {
        assert!(w[0] < w[1], "{what}: LSN {} acknowledged twice", w[0]);
    }
    for &lsn in &acked {
        assert!(
            lsn >= first && lsn < first + life.sent.len() as u64,
            "{what}: acknowledged LSN {lsn} was never assigned in this life (first {first}, {} lines sent)",
            life.sent.len()
        );
        if lsn < oldest {
            assert!(
                lsn <= checkpointed,
                "{what}: acknowledged LSN {lsn} is gone, below the oldest kept {oldest}"
            );
            continue;
        }
        let r = recs.get((lsn - oldest) as usize).unwrap_or_else(|| {
            panic!(
                "{what}: acknowledged LSN {lsn} is lost: the log ends at {} ({report:?})",
                end - 1
            )
        });
        assert!(
            r.payload == life.sent[(lsn - first) as usize],
            "{what}: acknowledged LSN {lsn} has the wrong bytes"
        );
    }
    eprintln!(
        "{what}: killed {} ms after {}; sent {}, acknowledged {}, recovered {} new (log holds {oldest}..{}){}",
        life.delay_ms,
        if life.after_first_ack { "the first ack" } else { "spawn" },
        life.sent.len(),
        acked.len(),
        end - first,
        end - 1,
        match &report.truncated {
            Some(t) => format!(", cut a torn tail at {} ({})", t.offset, t.reason),
            None => String::new(),
        }
    );
    Known {
        first: oldest,
        payloads: recs.into_iter().map(|r| r.payload).collect(),
    }
}

/// Run `kills` lives of the child `command` makes, checking after each.
pub fn crash_loop(
    what: &str,
    dir: &Path,
    cfg: &Config,
    format: AckFormat,
    kills: usize,
    keep: Option<u64>,
    command: impl Fn() -> Command,
) {
    crash_loop_checked(
        what,
        dir,
        cfg,
        format,
        kills,
        keep,
        command,
        |_, _, _, _| {},
    );
}

/// [`crash_loop`] with a further check after each kill, once the usual
/// invariants hold: `extra(iteration, before, after, life)` gets what was
/// recovered before this life and what is recovered now (the child is
/// dead, so the log may be read).
#[allow(clippy::too_many_arguments)]
pub fn crash_loop_checked(
    what: &str,
    dir: &Path,
    cfg: &Config,
    format: AckFormat,
    kills: usize,
    keep: Option<u64>,
    command: impl Fn() -> Command,
    mut extra: impl FnMut(usize, &Known, &Known, &Life),
) {
    // One loop at a time: every loop both spawns children and holds logs
    // open in this process (see `common::SPAWNING`).
    let _spawning = spawning_processes();
    let mut rng = seeded_rng(what);
    let mut known = Known::empty();
    let mut total_acked = 0;
    let mut checkpointed = 0;
    for iteration in 0..kills {
        let life = one_life(command(), format, iteration, &mut rng);
        total_acked += life.acked.len();
        // The child checkpoints only behind an acknowledgement it printed.
        if let (Some(k), Some(&top)) = (keep, life.acked.iter().max()) {
            checkpointed = checkpointed.max(top.saturating_sub(k));
        }
        let after = check_after_kill(dir, cfg.clone(), &known, &life, iteration, checkpointed);
        extra(iteration, &known, &after, &life);
        known = after;
    }
    assert!(total_acked > 0, "{what}: nothing was ever acknowledged");
    if keep.is_some() {
        assert!(
            known.first > 1,
            "{what}: the checkpoints never removed a segment"
        );
    }
    eprintln!(
        "{what}: {kills} kills, {total_acked} acknowledged records, LSNs {}..{} on disk",
        known.first,
        known.next() - 1
    );
}

/// After a kill, for a child that appended its lines in atomic groups of
/// `n` (batches or transactions) from `before.next()` on: the records
/// recovered since form whole groups, and each names its group's first
/// LSN as its batch. Returns how many groups were recovered.
pub fn assert_whole_groups(
    dir: &Path,
    iteration: usize,
    before: &Known,
    after: &Known,
    n: u64,
) -> u64 {
    let first = before.next();
    let new = after.next() - first;
    assert!(
        new.is_multiple_of(n),
        "iteration {iteration}: {new} records recovered from LSN {first} in groups of {n}: a group was cut"
    );
    let node1 = ringwal::Config::builder().node(1).build();
    for rec in ringwal::verify::records(dir, &node1, first).unwrap() {
        let rec = rec.unwrap();
        let start = first + (rec.lsn - first) / n * n;
        assert_eq!(
            rec.batch,
            Some(start),
            "iteration {iteration}: LSN {} in groups of {n} from LSN {first}",
            rec.lsn
        );
    }
    new / n
}

/// `RINGWAL_KILLS=N` scales every loop (scripts/torture.sh runs thousands).
pub fn kills(default: usize) -> usize {
    match std::env::var("RINGWAL_KILLS") {
        Ok(v) => v.parse().expect("RINGWAL_KILLS must be a number"),
        Err(_) => default,
    }
}

/// Where the loops put their logs: `RINGWAL_CRASH_ROOT` (another
/// filesystem, say) or the system temp directory.
pub fn temp_root() -> tempfile::TempDir {
    match std::env::var_os("RINGWAL_CRASH_ROOT") {
        Some(root) => tempfile::tempdir_in(root).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}
