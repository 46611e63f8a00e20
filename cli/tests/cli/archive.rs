//! The archive's faults, through the `ringwal` binary: an archiver
//! SIGKILLed mid-upload, S3 taken away under a running archiver and a
//! writer, writer and archiver killed together, bad archives and bad
//! targets, and a standby following a live archive. S3 is a real Garage
//! node (`common::library::garage`); the kill loop with two children runs
//! on the local store, whose objects the test can also damage by hand.
//!
//! Every check reads real files: restores are verified with `ringwal
//! verify` and compared record by record with what the writer was sent
//! and acknowledged, and with the log it wrote.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::{Config, Lsn};
use serde_json::Value;

use crate::common::library::garage::Garage;
use crate::common::library::seeded_rng;
use crate::common::{exit_statuses, p, ringwal, spawn};

/// How long a condition the test waits for may take before the test
/// gives up: a liveness guard against a hung child, not a measure.
const PATIENCE: Duration = Duration::from_secs(90);

/// The S3 settings of `garage` (if any) on `cmd`, as an operator exports
/// them.
fn env<'a>(cmd: &'a mut Command, garage: Option<&Garage>) -> &'a mut Command {
    if let Some(g) = garage {
        cmd.envs(g.env());
    }
    cmd
}

/// Run `ringwal ARGS` to the end with S3 settings from `garage`.
fn run(garage: Option<&Garage>, args: &[&str]) -> Output {
    let mut cmd = ringwal();
    env(&mut cmd, garage)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn(&mut cmd)
        .wait_with_output()
        .expect("wait for ringwal")
}

/// `out`'s stderr, for messages and assertions.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run `ringwal ARGS`, which must succeed.
fn ok(garage: Option<&Garage>, args: &[&str]) -> Output {
    let out = run(garage, args);
    assert!(
        out.status.success(),
        "ringwal {} failed ({}): {}",
        args.join(" "),
        out.status,
        stderr(&out)
    );
    out
}

/// The status the exit table gives a kind (`archive-damaged`, ...).
fn status_of(kind: &str) -> i32 {
    *exit_statuses()
        .get(kind)
        .unwrap_or_else(|| panic!("no {kind} in the exit table"))
}

fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Every record of node 1 in `dir`, as LSN to payload.
fn records(dir: &Path) -> BTreeMap<Lsn, Vec<u8>> {
    ringwal::verify::records(dir, &Config::default(), 0)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            (r.lsn, r.payload)
        })
        .collect()
}

/// Assert that `recs` run densely from LSN 1.
fn assert_dense(recs: &BTreeMap<Lsn, Vec<u8>>, what: &str) {
    for (i, lsn) in recs.keys().enumerate() {
        assert_eq!(*lsn, i as u64 + 1, "{what}: LSNs must be dense from 1");
    }
}

/// `restore URL DIR`, which must succeed and leave a log `verify` calls
/// clean; returns its records.
fn restore_checked(garage: Option<&Garage>, url: &str, dir: &Path) -> BTreeMap<Lsn, Vec<u8>> {
    ok(garage, &["restore", url, p(dir)]);
    ok(None, &["verify", p(dir)]);
    let recs = records(dir);
    assert_dense(&recs, &format!("restore into {}", dir.display()));
    recs
}

/// `archive ls URL --json`, or `None` when the archive holds nothing yet
/// (the command fails, naming the URL).
fn listing(garage: Option<&Garage>, url: &str) -> Option<Value> {
    let out = run(garage, &["archive", "ls", url, "--json"]);
    if !out.status.success() {
        assert!(
            stderr(&out).contains(url),
            "archive ls failed without naming {url}: {}",
            stderr(&out)
        );
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).expect("archive ls --json is JSON"))
}

/// The last LSN the archive at `url` holds (0: nothing yet).
fn archived_last(garage: Option<&Garage>, url: &str) -> Lsn {
    listing(garage, url).map_or(0, |l| {
        l["objects"]
            .as_array()
            .and_then(|o| o.last())
            .and_then(|o| o["last_lsn"].as_u64())
            .unwrap_or(0)
    })
}

fn hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Poll `cond` every 100 ms until it holds; fail after [`PATIENCE`].
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sigterm(child: &Child) {
    // kill(1) rather than kill(2): no unsafe code outside platform/.
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(ok.success(), "SIGTERM");
}

/// A stream read to the end on a thread of its own, readable meanwhile.
fn collect(mut from: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let into = text.clone();
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, t)
}

/// A long-running `ringwal` child (`archive`, `restore --follow`), its
/// output collected as it comes.
struct Daemon {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Daemon {
    fn start(garage: Option<&Garage>, args: &[&str]) -> Daemon {
        let mut cmd = ringwal();
        env(&mut cmd, garage)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn(&mut cmd);
        let (stdout, a) = collect(child.stdout.take().unwrap());
        let (stderr, b) = collect(child.stderr.take().unwrap());
        Daemon {
            child,
            stdout,
            stderr,
            readers: vec![a, b],
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("reap");
        assert!(!status.success(), "a killed child cannot succeed");
        self.readers.drain(..).for_each(|r| r.join().unwrap());
    }

    /// SIGTERM, then its status, stdout and stderr.
    fn terminate(mut self) -> (ExitStatus, String, String) {
        sigterm(&self.child);
        let status = self.child.wait().expect("reap");
        self.readers.drain(..).for_each(|r| r.join().unwrap());
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (status, out, err)
    }
}

/// What a writer's life sent and had acknowledged.
#[derive(Default)]
struct Life {
    /// Each line written whole to its stdin, in order.
    sent: Vec<Vec<u8>>,
    /// Each LSN it printed (durable), with when the test read it.
    acked: Vec<(Lsn, Instant)>,
}

impl Life {
    /// The acknowledged records: the i-th LSN printed is the i-th line
    /// sent (`ringwal append` appends each line alone and prints LSNs in
    /// order), so they must also be consecutive.
    fn acked_records(&self) -> BTreeMap<Lsn, Vec<u8>> {
        let Some(&(first, _)) = self.acked.first() else {
            return BTreeMap::new();
        };
        self.acked
            .iter()
            .enumerate()
            .map(|(i, &(lsn, _))| {
                assert_eq!(
                    lsn,
                    first + i as u64,
                    "acknowledged LSNs must be consecutive"
                );
                (lsn, self.sent[i].clone())
            })
            .collect()
    }
}

/// A `ringwal append` child fed unique lines by a thread (one write of
/// less than PIPE_BUF each, so a line is in the pipe whole or not at
/// all), every `pace` (zero: as fast as the pipe takes them), until told
/// to stop; another thread collects the LSNs it prints.
struct Writer {
    child: Child,
    stop: Arc<AtomicBool>,
    pace_us: Arc<AtomicU64>,
    acked: Arc<Mutex<Vec<(Lsn, Instant)>>>,
    feeder: JoinHandle<Vec<Vec<u8>>>,
    reader: JoinHandle<()>,
    stderr: (Arc<Mutex<String>>, JoinHandle<()>),
}

impl Writer {
    /// `tag` makes the lines unique across lives; `filler` bounds each
    /// line's random tail.
    fn start(
        dir: &Path,
        extra: &[&str],
        tag: &str,
        filler: usize,
        pace: Duration,
        seed: u64,
    ) -> Writer {
        let mut cmd = ringwal();
        cmd.arg("append")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn(&mut cmd);
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let pace_us = Arc::new(AtomicU64::new(pace.as_micros() as u64));
        let feeder = {
            let (stop, pace_us, tag) = (stop.clone(), pace_us.clone(), tag.to_string());
            std::thread::spawn(move || {
                let mut stdin = stdin;
                let mut rng = StdRng::seed_from_u64(seed);
                let mut sent = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut line = format!("{tag}-{}-", sent.len()).into_bytes();
                    let n = rng.gen_range(0..=filler);
                    line.extend((0..n).map(|_| rng.sample(rand::distributions::Alphanumeric)));
                    line.push(b'\n');
                    if stdin.write_all(&line).is_err() {
                        // The child is gone: none of this line was taken.
                        break;
                    }
                    line.pop();
                    sent.push(line);
                    let us = pace_us.load(Ordering::Relaxed);
                    if us > 0 {
                        std::thread::sleep(Duration::from_micros(us));
                    }
                }
                // Dropping stdin here is the EOF a clean finish needs.
                sent
            })
        };
        let acked = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let acked = acked.clone();
            std::thread::spawn(move || {
                let mut out = BufReader::new(stdout);
                let mut line = String::new();
                loop {
                    line.clear();
                    match out.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    // A line cut short by a kill acknowledges nothing.
                    if let Some(n) = line.strip_suffix('\n') {
                        let lsn = n.parse().unwrap_or_else(|_| panic!("append printed {n:?}"));
                        acked.lock().unwrap().push((lsn, Instant::now()));
                    }
                }
            })
        };
        let stderr = collect(child.stderr.take().unwrap());
        Writer {
            child,
            stop,
            pace_us,
            acked,
            feeder,
            reader,
            stderr,
        }
    }

    fn acks(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn set_pace(&self, pace: Duration) {
        self.pace_us
            .store(pace.as_micros() as u64, Ordering::Relaxed);
    }

    fn wait_for_acks(&self, n: usize) {
        wait_until("the writer's acknowledgements", || self.acks() >= n);
    }

    fn life(self) -> Life {
        let sent = self.feeder.join().expect("feeder");
        self.reader.join().expect("reader");
        self.stderr.1.join().unwrap();
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        Life { sent, acked }
    }

    /// Stop feeding; the child acknowledges what it has and exits 0.
    fn finish(mut self) -> Life {
        self.stop.store(true, Ordering::Relaxed);
        let status = self.child.wait().expect("reap the writer");
        let err = self.stderr.0.lock().unwrap().clone();
        assert!(status.success(), "the writer failed ({status}): {err}");
        self.life()
    }

    /// SIGKILL, at once; [`life`](Self::life) then says what it did.
    fn kill_now(&mut self) {
        self.child.kill().expect("SIGKILL the writer");
        self.child.wait().expect("reap the writer");
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// An archiver killed again and again in the middle of its uploads of
/// multi-MiB segments to S3, while a writer keeps filling the log: after
/// every kill the archive restores to a log that verifies clean and holds
/// exactly what the writer was sent, from LSN 1 on (never a partial
/// object); at the end one pass ships the rest and a restore holds every
/// record of the log.
#[test]
fn archiver_killed_mid_upload_leaves_a_restorable_archive() {
    let Some(garage) = Garage::start() else {
        return;
    };
    let g = Some(&garage);
    let started = Instant::now();
    let mut rng = seeded_rng("archiver kill loop");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let url = garage.s3_url("kill-upload");
    let segment = (2 << 20).to_string();
    let writer = Writer::start(
        &dir,
        &["--segment-bytes", &segment],
        "k",
        3000,
        Duration::ZERO,
        rng.r#gen(),
    );
    // A backlog of several sealed segments for the first archivers, then
    // about a segment a second, so that later ones meet new ones too.
    writer.wait_for_acks(6 << 20 >> 11);
    writer.set_pace(Duration::from_micros(700));
    let kills = 20;
    let (mut empty, mut restores, mut max_objects) = (0, 0, 0);
    let mut seen = Vec::new();
    for i in 0..kills {
        let a = Daemon::start(g, &["archive", p(&dir), "--to", &url, "--interval", "50ms"]);
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..400)));
        a.kill();
        let to = root.path().join(format!("restore-{i}"));
        let Some(l) = listing(g, &url) else {
            // Killed before its first manifest: nothing to restore, and
            // restore says so by the manifest's name: no archive there yet.
            let out = run(g, &["restore", &url, p(&to)]);
            assert_eq!(out.status.code(), Some(status_of("no-archive")));
            assert!(
                stderr(&out).contains("archive.manifest"),
                "{}",
                stderr(&out)
            );
            assert!(!to.exists() || std::fs::read_dir(&to).unwrap().next().is_none());
            empty += 1;
            continue;
        };
        max_objects = max_objects.max(l["objects"].as_array().unwrap().len());
        let got = restore_checked(g, &url, &to);
        restores += 1;
        // Everything restored is the writer's, at the LSN it was given:
        // the one life's line k is LSN k + 1. The writer is alive, so its
        // lines are compared, not its files.
        for (lsn, payload) in &got {
            let want = format!("k-{}-", lsn - 1);
            assert!(
                payload.starts_with(want.as_bytes()),
                "kill {i}: LSN {lsn} restored as {:?}",
                String::from_utf8_lossy(&payload[..payload.len().min(40)])
            );
        }
        seen.push(got.values().map(|v| hash(v)).collect::<Vec<_>>());
        std::fs::remove_dir_all(&to).unwrap();
    }
    let life = writer.finish();
    // Now that the lines are known: each restore held exactly them.
    for (i, hashes) in seen.iter().enumerate() {
        for (k, h) in hashes.iter().enumerate() {
            assert_eq!(
                *h,
                hash(&life.sent[k]),
                "restore {i}: LSN {} differs from its line",
                k + 1
            );
        }
    }
    ok(g, &["archive", p(&dir), "--to", &url, "--once"]);
    let log = records(&dir);
    let to = root.path().join("restore-end");
    let got = restore_checked(g, &url, &to);
    assert_eq!(got.len(), life.sent.len(), "every line sent is restored");
    assert!(got == log, "the restore differs from the log it archives");
    for (lsn, payload) in life.acked_records() {
        assert_eq!(got.get(&lsn), Some(&payload), "acknowledged LSN {lsn}");
    }
    let objects = listing(g, &url).unwrap()["objects"]
        .as_array()
        .unwrap()
        .len();
    eprintln!(
        "archiver kill loop: {kills} kills ({empty} before a first manifest, {restores} restores \
         checked, up to {max_objects} objects then), {objects} objects at the end, {} records \
         acknowledged, {} restored, 0 lost; {:.1} s",
        life.acked.len(),
        got.len(),
        started.elapsed().as_secs_f64()
    );
}

/// S3 taken away under a running archiver: the writer's appends go on
/// being acknowledged, the archiver says on stderr that its passes fail
/// and keeps running, a checkpoint keeps every segment the archive lacks
/// (`stat` shows the archive point and the bytes held); once S3 is back
/// the archiver catches up by itself, exits 0 on SIGTERM after a last
/// pass, and a restore holds every acknowledged record.
#[test]
fn s3_outage_holds_the_log_and_the_archiver_catches_up() {
    let Some(mut garage) = Garage::start() else {
        return;
    };
    let started = Instant::now();
    let mut rng = seeded_rng("s3 outage");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let url = garage.s3_url("outage");
    let seg = ["--segment-bytes", "131072"];
    let pace = Duration::from_micros(500);
    let w = Writer::start(&dir, &seg, "a", 300, pace, rng.r#gen());
    w.wait_for_acks(1);
    let g = Some(&garage);
    let mut archiver = Daemon::start(
        g,
        &["archive", p(&dir), "--to", &url, "--interval", "200ms"],
    );
    wait_until("a first archive", || archived_last(g, &url) > 0);

    garage.stop();
    let down_at = w.acks();
    wait_until("appends acknowledged with S3 down", || {
        w.acks() > down_at + 500
    });
    wait_until("the archiver reporting a failed pass", || {
        archiver
            .stderr()
            .contains("archive pass failed (will retry)")
    });
    assert!(
        archiver.running(),
        "the archiver gave up: {}",
        archiver.stderr()
    );
    let a = w.finish();
    let last = a.acked.last().unwrap().0;
    // A checkpoint of everything: only what the archive holds may go.
    let out = ok(None, &["checkpoint", p(&dir), "--up-to", &last.to_string()]);
    let stat = ok(None, &["stat", p(&dir), "--json"]);
    let stat: Value = serde_json::from_slice(&stat.stdout).unwrap();
    let node = &stat["nodes"][0];
    let archived = node["archived_lsn"].as_u64().expect("an archive point");
    assert!(
        archived < last,
        "the archive point {archived} passed the outage"
    );
    assert!(node["archive_held_bytes"].as_u64().unwrap() > 0, "{node}");
    assert!(
        node["first_lsn"].as_u64().unwrap() <= archived + 1,
        "the checkpoint removed segments the archive lacks: {node}; {}",
        stderr(&out)
    );
    // The log goes on, S3 still down.
    let w = Writer::start(&dir, &seg, "b", 300, pace, rng.r#gen());
    w.wait_for_acks(500);
    garage.restart();
    let b = w.finish();
    let last = b.acked.last().unwrap().0;
    let g = Some(&garage);
    wait_until("the archive catching up", || archived_last(g, &url) >= last);
    let (status, out, err) = archiver.terminate();
    assert!(status.success(), "the archiver on SIGTERM: {status}: {err}");
    assert!(out.contains(&format!("archived up to LSN {last}")), "{out}");

    let got = restore_checked(g, &url, &root.path().join("restored"));
    let mut acked = a.acked_records();
    acked.extend(b.acked_records());
    for (lsn, payload) in &acked {
        assert_eq!(got.get(lsn), Some(payload), "acknowledged LSN {lsn}");
    }
    assert_eq!(
        got.len(),
        acked.len(),
        "restored beyond what was acknowledged"
    );
    eprintln!(
        "s3 outage: {} records acknowledged ({} after S3 went down), archive point {archived} \
         during it, {} restored, 0 lost; {:.1} s",
        acked.len(),
        acked.len() as u64 - down_at as u64,
        got.len(),
        started.elapsed().as_secs_f64()
    );
}

/// A `--on-full block` log at its limit, held there by an archive whose
/// store is down: appends fail with log-full after the timeout, a
/// checkpoint frees nothing, until S3 is back, an archive pass ships the
/// segments and a checkpoint makes room; then appends succeed again, and
/// the archive holds every acknowledged record.
#[test]
fn block_log_waits_for_the_archive_then_goes_on() {
    let Some(mut garage) = Garage::start() else {
        return;
    };
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let url = garage.s3_url("full");
    let limited = |input: &[u8]| {
        let out = crate::common::run(
            &[
                "append",
                p(&dir),
                "--segment-bytes",
                "65536",
                "--max-log-bytes",
                "262144",
                "--full-timeout-ms",
                "300",
            ],
            input,
        );
        let acked: Vec<Lsn> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        (out, acked)
    };
    let lines = |tag: &str, n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{tag}-{i}-{}", "x".repeat(200)).into_bytes())
            .collect()
    };
    let joined = |l: &[Vec<u8>]| {
        l.iter()
            .flat_map(|l| [&l[..], b"\n"].concat())
            .collect::<Vec<u8>>()
    };
    let mut acked = BTreeMap::new();
    let mut note = |sent: &[Vec<u8>], got: &[Lsn]| {
        for (i, lsn) in got.iter().enumerate() {
            acked.insert(*lsn, sent[i].clone());
        }
    };
    let first = lines("first", 200);
    let (out, got) = limited(&joined(&first));
    assert!(out.status.success(), "{}", stderr(&out));
    note(&first, &got);
    ok(Some(&garage), &["archive", p(&dir), "--to", &url, "--once"]);

    garage.stop();
    let full = status_of("log-full");
    let many = lines("many", 3000);
    let (out, got) = limited(&joined(&many));
    assert_eq!(
        out.status.code(),
        Some(full),
        "at the limit: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(p(&dir)), "{}", stderr(&out));
    note(&many, &got);
    let last = *got.last().expect("appends up to the limit");
    ok(None, &["checkpoint", p(&dir), "--up-to", &last.to_string()]);
    let again = lines("again", 20);
    let (out, got) = limited(&joined(&again));
    assert_eq!(
        out.status.code(),
        Some(full),
        "still held: {}",
        stderr(&out)
    );
    assert!(got.is_empty(), "a held log took {got:?}");

    garage.restart();
    ok(Some(&garage), &["archive", p(&dir), "--to", &url, "--once"]);
    ok(None, &["checkpoint", p(&dir), "--up-to", &last.to_string()]);
    let (out, got) = limited(&joined(&again));
    assert!(
        out.status.success(),
        "room after the archive: {}",
        stderr(&out)
    );
    note(&again, &got);
    ok(Some(&garage), &["archive", p(&dir), "--to", &url, "--once"]);
    let back = restore_checked(Some(&garage), &url, &root.path().join("restored"));
    assert!(
        back == acked,
        "the archive holds other records than were acknowledged"
    );
    eprintln!(
        "block at the limit: {} records acknowledged, {} restored; {:.1} s",
        acked.len(),
        back.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Writer and archiver (local store, a pass every 200 ms) SIGKILLed
/// together at random points, again and again, each life going on from
/// the last on the same log and archive: after every kill, a restore
/// holds every record acknowledged more than a pass before the kill,
/// with its bytes; nothing that was not sent; LSNs dense; and every
/// record it holds is the one the log holds at that LSN (the archive
/// never got a record the writer's recovery later gave to another line).
#[test]
fn writer_and_archiver_killed_together_lose_nothing_older_than_a_pass() {
    let started = Instant::now();
    let mut rng = seeded_rng("writer and archiver kill loop");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let url = file_url(&root.path().join("archive"));
    // The interval and one pass's time: a record acknowledged longer
    // before the kill than this must be in the archive.
    let window = Duration::from_millis(200 + 1000);
    let rounds = 10;
    let mut acked: BTreeMap<Lsn, Vec<u8>> = BTreeMap::new();
    let mut sent = std::collections::HashSet::new();
    let (mut required, mut kills, mut restored) = (0, 0, 0);
    for round in 0..rounds {
        let mut w = Writer::start(
            &dir,
            &["--segment-bytes", "131072"],
            &format!("w{round}"),
            300,
            Duration::from_micros(300),
            rng.r#gen(),
        );
        // The archiver refuses a directory with no log yet (as every
        // command but `append` does): it starts once the writer made one.
        w.wait_for_acks(1);
        let a = Daemon::start(
            None,
            &["archive", p(&dir), "--to", &url, "--interval", "200ms"],
        );
        // The first round lives past the window, so that some
        // acknowledgement is always old enough to be checked (by chance
        // alone, no round of ten does about once in a hundred runs).
        let lower = if round == 0 { 1500 } else { 100 };
        std::thread::sleep(Duration::from_millis(rng.gen_range(lower..1800)));
        let killed_at = Instant::now();
        if rng.r#gen() {
            a.kill();
            w.kill_now();
        } else {
            w.kill_now();
            a.kill();
        }
        kills += 1;
        let life = w.life();
        let old: Vec<Lsn> = life
            .acked
            .iter()
            .filter(|(_, t)| killed_at.duration_since(*t) > window)
            .map(|(lsn, _)| *lsn)
            .collect();
        acked.extend(life.acked_records());
        sent.extend(life.sent);

        let to = root.path().join(format!("restore-{round}"));
        let Some(_) = listing(None, &url) else {
            assert!(
                old.is_empty(),
                "round {round}: nothing archived, {} old acks",
                old.len()
            );
            continue;
        };
        let got = restore_checked(None, &url, &to);
        let log = records(&dir);
        for (lsn, payload) in &got {
            assert!(
                sent.contains(payload),
                "round {round}: LSN {lsn} was never sent"
            );
            assert_eq!(
                log.get(lsn),
                Some(payload),
                "round {round}: LSN {lsn} is another record in the log"
            );
            if let Some(want) = acked.get(lsn) {
                assert_eq!(payload, want, "round {round}: acknowledged LSN {lsn}");
            }
        }
        let last = got.keys().last().copied().unwrap_or(0);
        for lsn in &old {
            assert!(
                *lsn <= last,
                "round {round}: LSN {lsn}, acknowledged over {window:?} before the kill, \
                 is not in the archive (it ends at {last})"
            );
        }
        required += old.len();
        restored = got.len();
        std::fs::remove_dir_all(&to).unwrap();
    }
    assert!(
        required > 0,
        "no acknowledgement was ever old enough to be checked"
    );
    let archived = archived_last(None, &url);
    eprintln!(
        "writer and archiver kill loop: {kills} kills of both, {} records acknowledged, \
         {required} of them over {window:?} before a kill, {archived} archived, {restored} \
         restored at the last kill, 0 lost; {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The files of `dir` (none if it is missing), with their bytes; lock
/// files aside (they name the last process to take them, and taking a
/// lock changes nothing of the log).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".lock")
        })
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The names of the files that differ between two snapshots.
fn changed(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut names: Vec<String> = a.keys().chain(b.keys()).cloned().collect();
    names.sort();
    names.dedup();
    names.into_iter().filter(|n| a.get(n) != b.get(n)).collect()
}

/// `restore URL TO` must fail with `kind`'s status, naming `names`, and
/// leave `to` empty.
fn restore_refused(
    garage: Option<&Garage>,
    url: &str,
    to: &Path,
    kind: &str,
    names: &str,
) -> String {
    let out = run(garage, &["restore", url, p(to)]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(status_of(kind)),
        "restore from {url}: {err}"
    );
    assert!(
        err.contains(names),
        "the message does not name {names}: {err}"
    );
    assert!(
        snapshot(to).is_empty(),
        "a failed restore left {:?}",
        snapshot(to).keys()
    );
    err
}

/// Bad archives and bad targets: each is refused with the status the
/// exit table gives it and a message naming the object, URL or directory,
/// and changes nothing: a missing or damaged object (restore leaves its
/// target empty), wrong credentials, a bucket that does not exist (the
/// log's archive point untouched), a target that holds a log (the log
/// unchanged), an empty prefix.
#[test]
fn bad_archives_and_targets_are_refused_by_name() {
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let input: Vec<u8> = (0..3000)
        .flat_map(|i| format!("bad-{i}-{}\n", "y".repeat(100)).into_bytes())
        .collect();
    let out = crate::common::run(&["append", p(&dir), "--segment-bytes", "65536"], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = root.path().join("archive");
    let url = file_url(&store);
    ok(None, &["archive", p(&dir), "--to", &url, "--once"]);
    let objects = store.join("00001/segments");
    let mut sealed: Vec<_> = std::fs::read_dir(&objects)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    sealed.sort();
    assert!(sealed.len() >= 3, "{sealed:?}");
    let middle = &sealed[sealed.len() / 2];
    let name = middle.file_name().unwrap().to_str().unwrap().to_string();

    // A middle segment gone from the store.
    let aside = root.path().join("aside");
    std::fs::rename(middle, &aside).unwrap();
    let err = restore_refused(
        None,
        &url,
        &root.path().join("t1"),
        "archive-damaged",
        &name,
    );
    assert!(err.contains("missing"), "{err}");
    std::fs::rename(&aside, middle).unwrap();
    // One byte of it flipped.
    let mut bytes = std::fs::read(middle).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(middle, &bytes).unwrap();
    let err = restore_refused(
        None,
        &url,
        &root.path().join("t2"),
        "archive-damaged",
        &name,
    );
    assert!(err.contains("damaged"), "{err}");
    bytes[at] ^= 0x40;
    std::fs::write(middle, &bytes).unwrap();

    // A target that holds a log: refused, the log as it was.
    let other = root.path().join("other");
    let out = crate::common::run(&["append", p(&other)], b"mine\nand mine\n");
    assert!(out.status.success());
    let (cat, files) = (ok(None, &["cat", p(&other)]).stdout, snapshot(&other));
    let out = run(None, &["restore", &url, p(&other)]);
    assert_eq!(
        out.status.code(),
        Some(status_of("archive-refused")),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(p(&other)), "{}", stderr(&out));
    // The directory is no archive object: the message says what it is.
    assert!(
        stderr(&out).contains("already holds a log") && !stderr(&out).contains("archive object"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ok(None, &["cat", p(&other)]).stdout, cat);
    assert!(
        snapshot(&other) == files,
        "a refused restore changed the log"
    );

    // An empty prefix: nothing to list, said with the URL.
    let empty = file_url(&root.path().join("nothing"));
    let out = run(None, &["archive", "ls", &empty]);
    assert_eq!(out.status.code(), Some(status_of("no-archive")), "{out:?}");
    assert!(stderr(&out).contains(&empty), "{}", stderr(&out));
    // A URL with no archive (a typo) is no damage: said as such, status 2.
    let err = restore_refused(None, &empty, &root.path().join("t4"), "no-archive", &empty);
    assert!(err.contains("no archive of this node there"), "{err}");
    // Reading an archive makes nothing at its URL.
    assert!(!root.path().join("nothing").exists());
    // The archive as it was restores whole again.
    restore_checked(None, &url, &root.path().join("t3"));

    let Some(garage) = Garage::start() else {
        return;
    };
    let g = Some(&garage);
    let s3 = garage.s3_url("bad");
    ok(g, &["archive", p(&dir), "--to", &s3, "--once"]);
    let point = snapshot(&dir);
    let refused = status_of("archive-refused");
    // Wrong credentials: refused at once (S3 answers 403, which is not
    // retried), the log's archive point untouched.
    let wrong = |args: &[&str]| {
        let mut cmd = ringwal();
        env(&mut cmd, g)
            .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t = Instant::now();
        let out = spawn(&mut cmd).wait_with_output().unwrap();
        (out, t.elapsed())
    };
    let (out, took) = wrong(&["archive", p(&dir), "--to", &s3, "--once"]);
    assert_eq!(out.status.code(), Some(refused), "{}", stderr(&out));
    assert!(stderr(&out).contains(&s3), "{}", stderr(&out));
    assert!(
        changed(&snapshot(&dir), &point).is_empty(),
        "a refused archiver changed {:?}",
        changed(&snapshot(&dir), &point)
    );
    let t4 = root.path().join("t4");
    let (out, took2) = wrong(&["restore", &s3, p(&t4)]);
    assert_eq!(out.status.code(), Some(refused), "{}", stderr(&out));
    assert!(stderr(&out).contains(&s3), "{}", stderr(&out));
    assert!(snapshot(&t4).is_empty());
    // A bucket that does not exist: the store's "no such bucket", as a
    // missing object of that URL.
    let nowhere = "s3://no-such-bucket/wal";
    let out = run(g, &["archive", p(&dir), "--to", nowhere, "--once"]);
    assert_eq!(
        out.status.code(),
        Some(status_of("archive-damaged")),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(nowhere), "{}", stderr(&out));
    assert!(
        changed(&snapshot(&dir), &point).is_empty(),
        "an archiver to no bucket changed {:?}",
        changed(&snapshot(&dir), &point)
    );
    restore_refused(
        g,
        nowhere,
        &root.path().join("t5"),
        "archive-damaged",
        nowhere,
    );
    eprintln!(
        "bad input: wrong credentials refused in {:.2} s (archive) and {:.2} s (restore); {:.1} s",
        took.as_secs_f64(),
        took2.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// A standby (`restore --follow`) of an S3 archive that a live archiver
/// feeds from a live writer: `cat` on the standby sees the records as
/// they land, each the one acknowledged; SIGTERM stops it with status 0,
/// and it verifies clean with every record of the log.
#[test]
fn standby_follows_a_live_archive_and_stops_cleanly() {
    let Some(garage) = Garage::start() else {
        return;
    };
    let g = Some(&garage);
    let started = Instant::now();
    let mut rng = seeded_rng("standby");
    let root = tempfile::tempdir().unwrap();
    let (dir, standby) = (root.path().join("log"), root.path().join("standby"));
    let url = garage.s3_url("standby");
    let w = Writer::start(
        &dir,
        &["--segment-bytes", "65536"],
        "s",
        300,
        Duration::from_micros(500),
        rng.r#gen(),
    );
    let archiver = Daemon::start(
        g,
        &["archive", p(&dir), "--to", &url, "--interval", "100ms"],
    );
    wait_until("a first archive", || archived_last(g, &url) > 0);
    let mut follower = Daemon::start(
        g,
        &[
            "restore",
            "--follow",
            &url,
            p(&standby),
            "--interval",
            "100ms",
        ],
    );
    // Records the standby could not have held when it started.
    let later = w.acks() as u64 + 1000;
    w.wait_for_acks(later as usize);
    let shown = |upto: Lsn| {
        let out = run(None, &["cat", p(&standby), "--json"]);
        out.status.success()
            && crate::common::json_lsns(&String::from_utf8_lossy(&out.stdout)).last() >= Some(&upto)
    };
    wait_until(
        "the standby showing records acknowledged after it started",
        || {
            assert!(
                follower.running(),
                "the standby stopped: {}",
                follower.stderr()
            );
            shown(later)
        },
    );
    assert!(
        follower.running(),
        "the standby stopped: {}",
        follower.stderr()
    );
    let life = w.finish();
    let last = life.acked.last().unwrap().0;
    wait_until("the standby catching up", || shown(last));
    let (status, _, err) = follower.terminate();
    assert!(status.success(), "the standby on SIGTERM: {status}: {err}");
    let (status, _, err) = archiver.terminate();
    assert!(status.success(), "the archiver on SIGTERM: {status}: {err}");
    ok(None, &["verify", p(&standby)]);
    let got = records(&standby);
    assert_dense(&got, "the standby");
    assert!(got == records(&dir), "the standby differs from the log");
    assert!(
        got == life.acked_records(),
        "the standby holds other records than were acknowledged"
    );
    eprintln!(
        "standby: {} records acknowledged, all on the standby; {:.1} s",
        got.len(),
        started.elapsed().as_secs_f64()
    );
}
