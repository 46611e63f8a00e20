//! Crash test with real processes: three `ringwal-kv` node processes on
//! loopback, writers appending unique tokens through whichever node leads,
//! and SIGKILL, first of the leader (round A), then of a follower (round
//! B). After every restart the killed node must have recovered its log
//! from disk (at least every entry the cluster counted on it), and once it
//! has caught up, every node's state machine, read locally, must hold every
//! acknowledged write exactly once.
//!
//! `RINGWAL_RAFT_KILLS` sets the number of kills (10 by default; half of
//! them leaders); `scripts/raft-kill-loop.sh` runs this test in a loop.
//! The nodes run the `ringwal-kv` binary cargo built for this test run,
//! or the one `RINGWAL_KV_BIN` names.
//!
//! How a double apply shows: every write is `KvRequest::Append` of a token
//! `w{writer}.{attempt};` that is sent once and never again (a retry is a
//! new attempt, so a new token), so a token seen twice on a node was
//! applied twice. A token of an acknowledged write missing on a node after
//! catch-up is a lost write; a token of an attempt its writer never sent
//! is an invented one. Within a key, a writer's acknowledged tokens
//! must appear in the order they were acknowledged.

use std::collections::HashSet;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{node_binary, read_banner, spawn};
use crate::node::{Client, LocalState, Members, PutResult};
use openraft::{BasicNode, RaftMetrics, ServerState};
use rand::Rng;
use ringwal_raft::KvRequest;

/// Concurrent writers.
const WRITERS: u64 = 3;
/// Tokens per key: a writer moves to a new key every this many attempts,
/// so that values stay short.
const TOKENS_PER_KEY: u64 = 50;
/// The nodes' snapshot policy: a snapshot every this many entries, this
/// many kept behind it. A node down long enough still needs a snapshot to
/// catch up; but the log kept must outlast a snapshot's transfer, or a
/// follower that needs one never catches up (the example's default, 50 and
/// 20, sends the whole state every 50 writes, and the state grows with
/// every write: after some 80 kills of a debug build, a transfer outlasted
/// the 20-70 entries kept).
const SNAPSHOT_EVERY: &str = "300";
const SNAPSHOT_KEEP: &str = "300";
/// How long any single wait (an election, a restart, a catch-up) may take
/// before the test fails: generous, for a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

type Metrics = RaftMetrics<u64, BasicNode>;

/// The number of kills to run: `RINGWAL_RAFT_KILLS`, 10 by default.
fn kills_wanted() -> usize {
    std::env::var("RINGWAL_RAFT_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(2)
}

/// Three free loopback ports below the kernel's ephemeral range, so that no
/// outgoing connection takes a node's port while the node is down.
fn free_ports() -> Vec<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let mut rng = rand::thread_rng();
    let mut ports = Vec::new();
    while ports.len() < 3 {
        let p = if low > 12000 {
            rng.gen_range(10000..low)
        } else {
            0
        };
        if ports.contains(&p) && p != 0 {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", p)) {
            ports.push(l.local_addr().unwrap().port());
        }
    }
    ports
}

/// One node process, SIGKILLed when dropped.
struct Proc {
    id: u64,
    addr: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Start the node from its data directory and wait until it serves;
    /// returns the index its log store recovered up to.
    fn start(&mut self, bin: &Path) -> Result<Option<u64>, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.try_start(bin) {
                Ok(r) => return Ok(r),
                // The port may still be held for a moment after a kill.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("node {}: {e}; retrying", self.id);
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_start(&mut self, bin: &Path) -> Result<Option<u64>, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.with_extension("stderr"))
            .map_err(|e| e.to_string())?;
        let mut child = spawn(
            Command::new(bin)
                .args(["node", "--id", &self.id.to_string(), "--addr", &self.addr])
                .args(["--snapshot-every", SNAPSHOT_EVERY, "--keep", SNAPSHOT_KEEP])
                .arg("--dir")
                .arg(&self.dir)
                .stdout(Stdio::piped())
                .stderr(log),
        )
        .map_err(|e| e.to_string())?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        match read_banner(&mut out) {
            Ok(banner) => {
                self.child = Some(child);
                Ok(banner.recovered)
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// SIGKILL (what `Child::kill` sends on Unix) and reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn alive(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the writers share with the test.
struct Shared {
    addrs: Vec<String>,
    /// The node the writers send to (1-based id): the leader, as last
    /// learned.
    target: AtomicU64,
    /// Every acknowledged write: (writer, attempt).
    acked: Mutex<Vec<(u64, u64)>>,
    attempts: AtomicU64,
    /// Per writer, the attempts it has started sending: a token of an
    /// attempt at or above it was never sent.
    sent: Vec<AtomicU64>,
    stop: AtomicBool,
}

impl Shared {
    fn addr(&self, id: u64) -> &str {
        &self.addrs[(id - 1) as usize]
    }

    /// Move on from `from` to the next node (unless someone already did).
    fn rotate(&self, from: u64) {
        let _ =
            self.target
                .compare_exchange(from, from % 3 + 1, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn acked(&self) -> Vec<(u64, u64)> {
        self.acked.lock().unwrap().clone()
    }

    /// Whether writer `w` has sent its attempt `a`.
    fn was_sent(&self, (w, a): (u64, u64)) -> bool {
        self.sent
            .get(w as usize)
            .is_some_and(|n| a < n.load(Ordering::SeqCst))
    }
}

fn token(w: u64, attempt: u64) -> (String, String) {
    (
        format!("w{w}-{}", attempt / TOKENS_PER_KEY),
        format!("w{w}.{attempt};"),
    )
}

/// One writer: each attempt sends a new token once, to the node believed
/// to lead, and records it if the cluster acknowledged it.
async fn writer(w: u64, shared: Arc<Shared>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut attempt = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let (key, value) = token(w, attempt);
        let req = KvRequest::Append { key, value };
        let target = shared.target.load(Ordering::Relaxed);
        shared.attempts.fetch_add(1, Ordering::Relaxed);
        shared.sent[w as usize].store(attempt + 1, Ordering::SeqCst);
        let url = format!("http://{}/kv/put", shared.addr(target));
        let res: Result<PutResult, reqwest::Error> = match http.post(url).json(&req).send().await {
            Ok(r) => r.json().await,
            Err(e) => Err(e),
        };
        match res {
            Ok(Ok(_)) => shared.acked.lock().unwrap().push((w, attempt)),
            Ok(Err(e)) => match e.forward_to_leader::<BasicNode>().and_then(|f| f.leader_id) {
                Some(l) if l != target => {
                    let _ = shared.target.compare_exchange(
                        target,
                        l,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    shared.rotate(target);
                }
            },
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                shared.rotate(target);
            }
        }
        attempt += 1;
    }
}

/// What one node's state machine holds, checked.
struct Check {
    /// Tokens present (writer, attempt), acknowledged or not.
    present: HashSet<(u64, u64)>,
    /// Tokens seen more than once.
    duplicates: Vec<String>,
    /// Acknowledged tokens out of order within their key, or in the wrong
    /// key, or not tokens at all.
    misplaced: Vec<String>,
}

fn check(state: &LocalState, acked: &HashSet<(u64, u64)>) -> Check {
    let mut c = Check {
        present: HashSet::new(),
        duplicates: Vec::new(),
        misplaced: Vec::new(),
    };
    for (key, value) in &state.kv {
        let mut last_acked: Option<u64> = None;
        for t in value.split(';').filter(|t| !t.is_empty()) {
            let parsed = t
                .strip_prefix('w')
                .and_then(|t| t.split_once('.'))
                .and_then(|(w, a)| Some((w.parse::<u64>().ok()?, a.parse::<u64>().ok()?)));
            let Some((w, a)) = parsed else {
                c.misplaced.push(format!("{key}: {t}"));
                continue;
            };
            if token(w, a).0 != *key {
                c.misplaced.push(format!("{key}: {t}"));
            }
            if !c.present.insert((w, a)) {
                c.duplicates.push(format!("{key}: {t}"));
            }
            if acked.contains(&(w, a)) {
                if last_acked.is_some_and(|l| l >= a) {
                    c.misplaced
                        .push(format!("{key}: {t} after w{w}.{last_acked:?}"));
                }
                last_acked = Some(a);
            }
        }
    }
    c
}

struct Cluster {
    bin: PathBuf,
    procs: Vec<Proc>,
    client: Client,
    http: reqwest::Client,
}

impl Cluster {
    fn proc(&mut self, id: u64) -> &mut Proc {
        &mut self.procs[(id - 1) as usize]
    }

    async fn metrics(&self, id: u64) -> Option<Metrics> {
        let p = &self.procs[(id - 1) as usize];
        if !p.alive() {
            return None;
        }
        self.client.metrics(&p.addr).await.ok()
    }

    /// A leader among the live nodes other than `not`, with a term above
    /// `above`: the one with the highest term if two think they lead.
    async fn leader(&self, not: Option<u64>, above: u64) -> Result<(u64, Metrics), String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut best: Option<(u64, Metrics)> = None;
            for id in 1..=3 {
                if Some(id) == not {
                    continue;
                }
                if let Some(m) = self.metrics(id).await
                    && m.state == ServerState::Leader
                    && m.current_term > above
                    && m.replication.is_some()
                    && best
                        .as_ref()
                        .is_none_or(|(_, b)| m.current_term > b.current_term)
                {
                    best = Some((id, m));
                }
            }
            if let Some(b) = best {
                return Ok(b);
            }
            if Instant::now() > deadline {
                return Err(format!("no leader (besides {not:?}) within {PATIENCE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn local(&self, id: u64) -> Result<LocalState, String> {
        let url = format!("http://{}/kv/local", self.procs[(id - 1) as usize].addr);
        let resp = self.http.get(url).send().await.map_err(|e| e.to_string())?;
        resp.json().await.map_err(|e| e.to_string())
    }

    /// Wait until every node's state machine holds every write in `acked`;
    /// fail at once on a duplicate or a misplaced token. Then (at the
    /// deadline, if a node never got there) how many acknowledged writes
    /// no node holds (lost), how many the furthest-behind node lacks
    /// (lagging: 0 on success), and how many unacknowledged writes were
    /// applied, and how many tokens a node holds that no writer ever sent
    /// (invented).
    async fn verify(&self, acked: &[(u64, u64)], shared: &Shared) -> Result<Verified, String> {
        let acked: HashSet<(u64, u64)> = acked.iter().copied().collect();
        let deadline = Instant::now() + PATIENCE;
        let mut v = Verified::default();
        let mut present: Vec<HashSet<(u64, u64)>> = Vec::new();
        for id in 1..=3 {
            let mut seen = HashSet::new();
            loop {
                let state = self.local(id).await;
                let mut applied = None;
                if let Ok(s) = &state {
                    let c = check(s, &acked);
                    if !c.duplicates.is_empty() {
                        return Err(format!("node {id} applied twice: {:?}", c.duplicates));
                    }
                    if !c.misplaced.is_empty() {
                        return Err(format!("node {id} misplaced: {:?}", c.misplaced));
                    }
                    v.extra = v.extra.max(c.present.difference(&acked).count());
                    // Read after the state: a token sent meanwhile counts
                    // as sent.
                    let invented = c.present.iter().filter(|&&t| !shared.was_sent(t));
                    v.invented = v.invented.max(invented.count());
                    seen = c.present;
                    applied = s.last_applied;
                }
                let missing = acked.difference(&seen).count();
                if missing == 0 {
                    break;
                }
                if Instant::now() > deadline {
                    let err = state.err();
                    eprintln!(
                        "node {id}: {missing} acknowledged writes missing after {PATIENCE:?} \
                         (applied up to {applied:?}; {err:?})"
                    );
                    v.lagging = v.lagging.max(missing);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            present.push(seen);
        }
        v.lost = acked
            .iter()
            .filter(|w| !present.iter().any(|p| p.contains(w)))
            .count();
        Ok(v)
    }
}

/// What [`Cluster::verify`] found.
#[derive(Debug, Default)]
struct Verified {
    /// Acknowledged writes on no node.
    lost: usize,
    /// Acknowledged writes missing on the node furthest behind.
    lagging: usize,
    /// Unacknowledged writes applied.
    extra: usize,
    /// Writes on a node that were never sent.
    invented: usize,
}

/// The figures of a run.
#[derive(Debug, Default)]
struct Figures {
    kills: usize,
    leader_kills: usize,
    follower_kills: usize,
    attempts: u64,
    acked: usize,
    lost: usize,
    lagging: usize,
    invented: usize,
    unacked_applied: usize,
    max_election: Duration,
    max_catch_up: Duration,
}

async fn run(dir: &Path, figures: &mut Figures) -> Result<(), String> {
    let kills = kills_wanted();
    let bin = node_binary();
    let ports = free_ports();
    let procs: Vec<Proc> = (1..=3u64)
        .map(|id| Proc {
            id,
            addr: format!("127.0.0.1:{}", ports[(id - 1) as usize]),
            dir: dir.join(id.to_string()),
            child: None,
        })
        .collect();
    let mut c = Cluster {
        bin,
        procs,
        client: Client::default(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    };
    for id in 1..=3 {
        let bin = c.bin.clone();
        c.proc(id).start(&bin)?;
    }
    let members: Members = c
        .procs
        .iter()
        .map(|p| (p.id, BasicNode::new(&p.addr)))
        .collect();
    c.client
        .init(&c.procs[0].addr, &members)
        .await
        .map_err(|e| e.to_string())?;
    let (leader, _) = c.leader(None, 0).await?;

    let shared = Arc::new(Shared {
        addrs: c.procs.iter().map(|p| p.addr.clone()).collect(),
        target: AtomicU64::new(leader),
        acked: Mutex::new(Vec::new()),
        attempts: AtomicU64::new(0),
        sent: (0..WRITERS).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(w, shared.clone())))
        .collect();
    let started = Instant::now();
    while shared.acked.lock().unwrap().len() < 50 {
        if started.elapsed() > PATIENCE {
            return Err("no writes acknowledged".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut rng = rand::thread_rng().r#gen::<u64>();
    let mut next = move |lo: u64, hi: u64| {
        // xorshift: the test's own randomness, Send across awaits.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        lo + rng % (hi - lo)
    };
    for k in 0..kills {
        let round_a = k < kills.div_ceil(2);
        // A random point in the stream of writes.
        tokio::time::sleep(Duration::from_millis(next(200, 1200))).await;
        let (leader, lm) = c.leader(None, 0).await?;
        let (victim, floor) = if round_a {
            // Committed (applied) on the leader: in its log, durably.
            (leader, lm.last_applied.map(|l| l.index))
        } else {
            let f = [1, 2, 3]
                .into_iter()
                .filter(|&i| i != leader)
                .nth(next(0, 2) as usize)
                .unwrap();
            // What the follower acknowledged to the leader: durable there.
            let matched = lm
                .replication
                .as_ref()
                .and_then(|r| r.get(&f).copied().flatten());
            (f, matched.map(|l| l.index))
        };
        c.proc(victim).kill();
        figures.kills += 1;
        let killed_at = Instant::now();
        let role = if round_a {
            figures.leader_kills += 1;
            let (new, _) = c.leader(Some(victim), lm.current_term).await?;
            figures.max_election = figures.max_election.max(killed_at.elapsed());
            format!("leader; node {new} elected in {:?}", killed_at.elapsed())
        } else {
            figures.follower_kills += 1;
            "follower".to_string()
        };
        // The survivors go on without it for a while (long enough, at
        // times, that it needs a snapshot to catch up).
        tokio::time::sleep(Duration::from_millis(next(100, 1500))).await;

        let bin = c.bin.clone();
        let recovered = c.proc(victim).start(&bin)?;
        if recovered < floor {
            return Err(format!(
                "node {victim} recovered its log up to {recovered:?}, below {floor:?} \
                 which the cluster counted on"
            ));
        }
        let restarted = Instant::now();
        let (_, lm) = c.leader(None, 0).await?;
        let acked = shared.acked();
        let v = c.verify(&acked, &shared).await?;
        let extra = v.extra;
        if v.lost > 0 || v.lagging > 0 || v.invented > 0 {
            figures.lost = v.lost;
            figures.lagging = v.lagging;
            figures.invented = v.invented;
            figures.acked = acked.len();
            figures.attempts = shared.attempts.load(Ordering::Relaxed);
            return Err(format!(
                "kill {}: {} acknowledged writes on no node; {} missing on a node that did \
                 not catch up; {} never sent",
                k + 1,
                v.lost,
                v.lagging,
                v.invented
            ));
        }
        // The restarted node has applied what the leader had.
        let want = lm.last_applied.map(|l| l.index);
        loop {
            let m = c.metrics(victim).await;
            if m.is_some_and(|m| m.last_applied.map(|l| l.index) >= want) {
                break;
            }
            if restarted.elapsed() > PATIENCE {
                return Err(format!("node {victim} did not catch up to {want:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        figures.max_catch_up = figures.max_catch_up.max(restarted.elapsed());
        println!(
            "kill {:>3}: node {victim} ({role}); recovered log to {recovered:?} (>= {floor:?}); \
             caught up in {:?}; {} acked, {extra} unacked applied, 0 lost",
            k + 1,
            restarted.elapsed(),
            acked.len()
        );
    }

    shared.stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let acked = shared.acked();
    let v = c.verify(&acked, &shared).await?;
    figures.attempts = shared.attempts.load(Ordering::Relaxed);
    figures.acked = acked.len();
    figures.lost = v.lost;
    figures.lagging = v.lagging;
    figures.unacked_applied = v.extra;
    figures.invented = v.invented;
    if v.lost > 0 || v.lagging > 0 || v.invented > 0 {
        return Err(format!(
            "at the end: {} acknowledged writes on no node; {} missing on a node that did \
             not catch up; {} never sent",
            v.lost, v.lagging, v.invented
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_leader_and_followers_loses_and_duplicates_nothing() {
    let tmp = tempfile::Builder::new()
        .prefix("ringwal-raft-kill")
        .tempdir()
        .unwrap();
    let started = Instant::now();
    let mut figures = Figures::default();
    let res = run(tmp.path(), &mut figures).await;
    println!(
        "kills: {} ({} leaders, {} followers); writes sent: {}; acknowledged: {}; \
         lost: {}; invented: {}; missing on a lagging node: {}; \
         unacknowledged but applied: {}; \
         longest election: {:?}; \
         longest catch-up: {:?}; {:?} in all",
        figures.kills,
        figures.leader_kills,
        figures.follower_kills,
        figures.attempts,
        figures.acked,
        figures.lost,
        figures.invented,
        figures.lagging,
        figures.unacked_applied,
        figures.max_election,
        figures.max_catch_up,
        started.elapsed()
    );
    if let Err(e) = res {
        let kept = tmp.keep();
        panic!("{e} (node data and stderr kept in {})", kept.display());
    }
}
