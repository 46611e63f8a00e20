//! Crash loops with real processes and SIGKILL.
//!
//! A child appends newline-delimited records from stdin and prints each
//! record's LSN once it is durable. A writer thread feeds it unique lines, a
//! reader thread collects the acknowledgements, and the child is killed
//! (`Child::kill`, SIGKILL) at a random point. After every kill the log is
//! opened with the library and read in full: every acknowledged record must
//! be there with exactly its bytes at its LSN, LSNs must be dense (from 1,
//! or from the oldest record a checkpoint kept),
//! every record must be a line that was sent, and nothing recovered by an
//! earlier iteration may change.
//!
//! Two children: the `ringwal append` CLI (default configuration, hence the
//! default backend only), and this test binary itself re-executed as a
//! library-level writer, which runs both backends with small segments so
//! that kills also land in segment rolls, and in one loop checkpoints
//! behind itself so that rolls reuse recycled segments.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Backend, Config, Level, Wal};

/// Kills per loop: the CLI loop and each backend of the library loop.
const CLI_KILLS: usize = 30;
const LIBRARY_KILLS: usize = 16;

/// Environment that turns [`crash_child_entry_point`] into a writer.
const CHILD_DIR: &str = "RINGWAL_CRASH_CHILD_DIR";
const CHILD_BACKEND: &str = "RINGWAL_CRASH_CHILD_BACKEND";
const CHILD_LEVEL: &str = "RINGWAL_CRASH_CHILD_LEVEL";
/// When set to N, the child checkpoints everything but its last N
/// acknowledged records as it goes, so rolls reuse recycled segments.
const CHILD_KEEP: &str = "RINGWAL_CRASH_CHILD_KEEP";

/// How long a child may take to acknowledge its first record before the
/// test gives up on it. A liveness guard against a broken child, not a
/// performance assertion: a healthy child answers in milliseconds.
const FIRST_ACK_PATIENCE: Duration = Duration::from_secs(30);

/// How a child reports acknowledgements on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckFormat {
    /// `ringwal append`: each line is one LSN.
    Plain,
    /// The re-executed test binary, whose stdout also carries the test
    /// harness's own lines: `@start:N;` once, then `@ack:N;` per record.
    Tagged,
}

/// What one child's life produced.
struct Life {
    /// Every line fully written to the child's stdin, without its newline,
    /// in order: line `k` gets LSN `first + k` if the child appends it.
    sent: Vec<Vec<u8>>,
    /// LSNs the child printed, i.e. acknowledged as durable.
    acked: Vec<u64>,
    /// `@start:N;` from a tagged child: the LSN its first append would get.
    start: Option<u64>,
    /// How long after spawn, or after the first acknowledgement, the kill came.
    delay_ms: u64,
    after_first_ack: bool,
}

/// Spawn `cmd`, feed it lines, kill it at a random point, and collect what
/// it acknowledged. Panics if the child exits on its own.
fn one_life(mut cmd: Command, format: AckFormat, iteration: usize, rng: &mut StdRng) -> Life {
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
    let writer_seed: u64 = rng.gen();
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
fn tagged<'a>(line: &'a str, tag: &'a str) -> impl Iterator<Item = u64> + 'a {
    line.match_indices(tag).filter_map(move |(i, _)| {
        let rest = &line[i + tag.len()..];
        rest[..rest.find(';')?].parse().ok()
    })
}

/// What earlier iterations recovered: the payloads of LSNs `first..`.
#[derive(Clone, Debug)]
struct Known {
    first: u64,
    payloads: Vec<Vec<u8>>,
}

impl Known {
    fn empty() -> Known {
        Known {
            first: 1,
            payloads: Vec::new(),
        }
    }

    /// The LSN the next life's first append gets.
    fn next(&self) -> u64 {
        self.first + self.payloads.len() as u64
    }
}

/// Open the log after a kill and check it against everything known:
/// `known` (what earlier iterations recovered) and this life. Records at or
/// below `checkpointed` may have been checkpointed away; every other one
/// must be there. Returns what is now on disk.
fn check_after_kill(
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
fn crash_loop(
    what: &str,
    dir: &Path,
    cfg: &Config,
    format: AckFormat,
    kills: usize,
    keep: Option<u64>,
    command: impl Fn() -> Command,
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
        known = check_after_kill(dir, cfg.clone(), &known, &life, iteration, checkpointed);
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

/// `RINGWAL_KILLS=N` scales every loop (scripts/torture.sh runs thousands).
fn kills(default: usize) -> usize {
    match std::env::var("RINGWAL_KILLS") {
        Ok(v) => v.parse().expect("RINGWAL_KILLS must be a number"),
        Err(_) => default,
    }
}

/// Where the loops put their logs: `RINGWAL_CRASH_ROOT` (another
/// filesystem, say) or the system temp directory.
fn temp_root() -> tempfile::TempDir {
    match std::env::var_os("RINGWAL_CRASH_ROOT") {
        Some(root) => tempfile::tempdir_in(root).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

fn cli_crash_loop(what: &str, root: &Path, kills: usize) {
    let dir = root.join("log");
    // The CLI opens the default configuration: node 1, default backend.
    crash_loop(
        what,
        &dir,
        &Config::default(),
        AckFormat::Plain,
        kills,
        None,
        || {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ringwal"));
            c.arg("append").arg(&dir);
            c
        },
    );
}

#[test]
fn cli_append_survives_sigkill() {
    let root = temp_root();
    cli_crash_loop("cli crash loop", root.path(), kills(CLI_KILLS));
}

/// XFS handles unwritten extents and O_DIRECT differently from ext4, so
/// the same loop runs on a loop-mounted XFS image when the machine can
/// make one (root and mkfs.xfs; .ci/run installs xfsprogs).
#[test]
fn cli_append_survives_sigkill_on_xfs() {
    let root = tempfile::tempdir().unwrap();
    let mount = match common::mount_image(root.path(), "xfs", 512) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("xfs crash loop: skipped: {why}");
            return;
        }
    };
    cli_crash_loop("cli crash loop on xfs", &mount.dir, kills(CLI_KILLS / 2));
}

#[test]
fn library_writer_survives_sigkill() {
    library_crash_loop(Level::Durable, kills(LIBRARY_KILLS), None);
}

/// The same with a writer that checkpoints all but its last 200 records
/// as it goes: segments are deleted and recycled under the kills, and
/// nothing acknowledged above the checkpoints may go missing.
#[test]
fn checkpointing_writer_survives_sigkill() {
    library_crash_loop(Level::Durable, kills(LIBRARY_KILLS), Some(200));
}

/// `Written` promises survival of a process crash (not of a power loss),
/// and a SIGKILL is exactly that: the page cache keeps what was written.
#[test]
fn library_writer_in_written_mode_survives_sigkill() {
    library_crash_loop(Level::Written, kills(LIBRARY_KILLS / 2), None);
}

/// Kill this binary re-executed as a library writer that acknowledges at
/// `level`, with both backends. (Not `for_each_backend`: the loop takes
/// the spawning lock exclusively.)
fn library_crash_loop(level: Level, kills: usize, keep: Option<u64>) {
    for backend in BACKENDS {
        let root = temp_root();
        let dir = root.path().join("log");
        let exe = std::env::current_exe().expect("path of this test binary");
        crash_loop(
            &format!("library crash loop ({backend:?}, {level:?})"),
            &dir,
            &cfg(backend),
            AckFormat::Tagged,
            kills,
            keep,
            || {
                let mut c = Command::new(&exe);
                c.args([
                    "crash_child_entry_point",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env(CHILD_DIR, &dir)
                .env(CHILD_BACKEND, format!("{backend:?}"))
                .env(CHILD_LEVEL, format!("{level:?}"));
                if let Some(k) = keep {
                    c.env(CHILD_KEEP, k.to_string());
                }
                c
            },
        );
    }
}

/// Not a test on its own: the library-level writer that
/// [`library_writer_survives_sigkill`] runs in a child process by
/// re-executing this binary. Without its environment it returns at once.
///
/// Appends each stdin line (without its newline) as soon as it is read,
/// waits for the tickets in order on another thread, and prints `@ack:N;`
/// for each that reached the configured level (the log's default level);
/// prints `@start:N;` after recovery.
#[test]
fn crash_child_entry_point() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let backend = match std::env::var(CHILD_BACKEND).as_deref() {
        Ok("Uring") => Backend::Uring,
        Ok("Threaded") => Backend::Threaded,
        other => panic!("{CHILD_BACKEND}={other:?}"),
    };
    let level = match std::env::var(CHILD_LEVEL).as_deref() {
        Ok("Durable") => Level::Durable,
        Ok("Written") => Level::Written,
        other => panic!("{CHILD_LEVEL}={other:?}"),
    };
    let keep: Option<u64> = std::env::var(CHILD_KEEP)
        .ok()
        .map(|v| v.parse().expect("child: keep count"));
    let config = small(backend).default_level(level).build();
    let (wal, _) = Wal::open(&dir, config).expect("child: open");
    let out = std::io::stdout();
    let emit = |s: String| {
        let mut o = out.lock();
        o.write_all(s.as_bytes()).expect("child: stdout");
        o.flush().expect("child: stdout");
    };
    emit(format!("@start:{};\n", wal.next_lsn()));
    let (tx, rx) = mpsc::sync_channel(1 << 16);
    std::thread::scope(|s| {
        let wal = &wal;
        s.spawn(move || {
            let mut input = std::io::stdin().lock();
            let mut line = Vec::new();
            loop {
                line.clear();
                if input.read_until(b'\n', &mut line).expect("child: stdin") == 0 {
                    return;
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                let ticket = wal.append(0, &line).expect("child: append");
                if tx.send(ticket).is_err() {
                    return;
                }
            }
        });
        for ticket in rx {
            ticket.wait(level).expect("child: wait");
            emit(format!("@ack:{};\n", ticket.lsn()));
            // Only behind an acknowledgement already printed, so the test
            // knows every LSN the log may drop.
            if let Some(k) = keep.filter(|&k| ticket.lsn() % 32 == 0 && ticket.lsn() > k) {
                wal.checkpoint(ticket.lsn() - k).expect("child: checkpoint");
            }
        }
    });
    wal.close().expect("child: close");
}
