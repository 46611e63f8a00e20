//! raft-bench: replicated writes through a 3-node openraft 0.9 cluster in
//! one process, with three log stores in turn:
//!
//! - `ringwal`: `ringwal_raft::LogStore` (default ringwal configuration:
//!   durable writes, group commit);
//! - `redb`: a log store on redb 2 written the way an openraft user
//!   typically writes one: every `append` (and `truncate`, `purge`,
//!   `save_vote`, `save_committed`) is one write transaction committed
//!   with `Durability::Immediate`, inline on the calling task, and the
//!   callback fires after the commit;
//! - `memory`: `ringwal_raft::MemLogStore`, entries in a `BTreeMap`,
//!   nothing on disk (the upper bound: what openraft and the state
//!   machine cost by themselves).
//!
//! The three `Raft` instances talk through an in-process network (direct
//! calls, no serialization), and all use the same in-memory state machine
//! (`ringwal_raft::KvStateMachine`), so the log store is what differs.
//! Each cell (store x concurrent clients) runs on fresh directories under
//! `--dir` (default: the system temp dir; use a real disk, not tmpfs):
//! start, initialize, a warm-up second, then `--secs` of closed-loop
//! `client_write`s of `--value-bytes` values on 1024 keys, timing each
//! from the call to its reply (committed on a quorum and applied on the
//! leader). The clients write through `ringwal_raft::Proposer` (group
//! commit at the leader: writes that arrive while a proposal is in flight
//! share one raft entry), or with `--propose direct` through
//! `Raft::client_write`, one entry per write. Every cell runs `--rounds`
//! times, interleaved with the others (the disk of a shared machine is
//! noisy); prints a Markdown table of the median rate, its range, the
//! latencies of all rounds together, and the writes per raft entry.
//!
//! ```text
//! cd benches && cargo run --release --bin raft-bench -- [--secs 5] [--dir DIR]
//! ```

// openraft's traits return its `StorageError` and `RPCError`, and redb's
// `Error` is as large: the helpers return those types as they are.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    BasicNode, Entry, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use redb::{Database, Durability, ReadableTable, TableDefinition};
use ringwal_raft::{
    BatchLimits, KvConfig, KvRequest, KvStateMachine, LogStore, MemLogStore, Proposer,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

type C = KvConfig;
type Raft = openraft::Raft<C>;
type SResult<T> = Result<T, StorageError<u64>>;

#[derive(Parser, Debug)]
#[command(about = "openraft log stores compared: ringwal, redb, in memory")]
struct Args {
    /// Seconds measured per cell (after a 1 s warm-up).
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Where each cell's stores live (a fresh directory per cell).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Concurrent clients per cell, comma-separated.
    #[arg(long, default_value = "1,64", value_delimiter = ',')]
    clients: Vec<usize>,
    /// Stores to run, comma-separated: ringwal, redb, memory.
    #[arg(long, default_value = "ringwal,redb,memory", value_delimiter = ',')]
    stores: Vec<String>,
    /// Value size of each write, in bytes.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Rounds: every cell runs once per round, the stores in a rotated
    /// order each round; the table shows the median rate and the
    /// latencies of all rounds together.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// How clients write: `batched` (through `ringwal_raft::Proposer`,
    /// group commit at the leader) or `direct` (`Raft::client_write`,
    /// one entry per write).
    #[arg(long, default_value = "batched")]
    propose: Propose,
    /// The proposer's most proposals in flight (default: `BatchLimits`'s).
    #[arg(long)]
    in_flight: Option<usize>,
    /// The proposer's longest wait for the proposals in flight, in
    /// microseconds (default: `BatchLimits`'s).
    #[arg(long)]
    max_wait_us: Option<u64>,
}

impl Args {
    fn limits(&self) -> BatchLimits {
        let mut l = BatchLimits::default();
        if let Some(n) = self.in_flight {
            l.max_in_flight = n;
        }
        if let Some(us) = self.max_wait_us {
            l.max_wait = Duration::from_micros(us);
        }
        l
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Propose {
    Batched,
    Direct,
}

/// Where a client's writes go.
#[derive(Clone)]
enum Writer {
    Direct(Raft),
    Batched(Proposer),
}

impl Writer {
    async fn write(&self, req: KvRequest) {
        match self {
            Writer::Direct(raft) => raft.client_write(req).await.map(|_| ()),
            Writer::Batched(p) => p.write(req).await.map(|_| ()),
        }
        .expect("a write is committed")
    }
}

// ---------------------------------------------------------------------
// The in-process network.

/// Every node of the cluster by id; a "connection" looks its target up
/// per call, so a node that is gone is unreachable.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<u64, Raft>>>,
}

/// A connection to one node through the router.
struct Conn {
    router: Router,
    target: u64,
}

impl RaftNetworkFactory<C> for Router {
    type Network = Conn;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Conn {
        Conn {
            router: self.clone(),
            target,
        }
    }
}

impl Conn {
    fn raft<E: std::error::Error>(&self) -> Result<Raft, RPCError<u64, BasicNode, E>> {
        self.router
            .nodes
            .lock()
            .unwrap()
            .get(&self.target)
            .cloned()
            .ok_or_else(|| {
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other("no such node")))
            })
    }

    fn remote<T, E: std::error::Error>(
        &self,
        r: Result<T, RaftError<u64, E>>,
    ) -> Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        r.map_err(|e| match e {
            RaftError::Fatal(f) => RPCError::Network(NetworkError::new(&f)),
            e => RPCError::RemoteError(RemoteError::new(self.target, e)),
        })
    }
}

impl RaftNetwork<C> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self.raft()?;
        self.remote(raft.append_entries(rpc).await)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        let raft = self.raft()?;
        self.remote(raft.install_snapshot(rpc).await)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self.raft()?;
        self.remote(raft.vote(rpc).await)
    }
}

// ---------------------------------------------------------------------
// The redb log store.

/// Raft index -> the entry as JSON.
const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
/// "vote", "committed", "last_purged" -> JSON.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// A log store in one redb database; `Clone` shares it (the reader).
#[derive(Clone)]
struct RedbStore {
    db: Arc<Database>,
}

fn write_err(e: impl Into<redb::Error>) -> StorageError<u64> {
    StorageIOError::write_logs(&e.into()).into()
}

fn read_err(e: impl Into<redb::Error>) -> StorageError<u64> {
    StorageIOError::read_logs(&e.into()).into()
}

fn json_err(e: serde_json::Error) -> StorageError<u64> {
    StorageIOError::read_logs(&e).into()
}

impl RedbStore {
    fn open(dir: &Path) -> SResult<RedbStore> {
        std::fs::create_dir_all(dir).map_err(|e| StorageIOError::write_logs(&e))?;
        let db = Database::create(dir.join("raft.redb")).map_err(write_err)?;
        let store = RedbStore { db: Arc::new(db) };
        // Create both tables, so that reads never find them missing.
        store.write(|txn| {
            txn.open_table(LOGS)?;
            txn.open_table(META)?;
            Ok(())
        })?;
        Ok(store)
    }

    /// One write transaction, committed durably (`Durability::Immediate`).
    fn write<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, redb::Error>,
    ) -> SResult<T> {
        let mut txn = self.db.begin_write().map_err(write_err)?;
        txn.set_durability(Durability::Immediate);
        let out = f(&txn).map_err(write_err)?;
        txn.commit().map_err(write_err)?;
        Ok(out)
    }

    fn put_meta<T: Serialize>(&self, key: &str, value: &T) -> SResult<()> {
        let bytes = serde_json::to_vec(value).map_err(json_err)?;
        self.write(|txn| {
            txn.open_table(META)?.insert(key, bytes.as_slice())?;
            Ok(())
        })
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> SResult<Option<T>> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(META).map_err(read_err)?;
        match table.get(key).map_err(read_err)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(json_err)?)),
            None => Ok(None),
        }
    }
}

impl RaftLogReader<C> for RedbStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> SResult<Vec<Entry<C>>> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let mut out = Vec::new();
        for row in table.range(range).map_err(read_err)? {
            let (_, v) = row.map_err(read_err)?;
            out.push(serde_json::from_slice(v.value()).map_err(json_err)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<C> for RedbStore {
    type LogReader = RedbStore;

    async fn get_log_state(&mut self) -> SResult<LogState<C>> {
        let last_purged: Option<LogId<u64>> = self.get_meta("last_purged")?;
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let last = match table.last().map_err(read_err)? {
            Some((_, v)) => {
                let e: Entry<C> = serde_json::from_slice(v.value()).map_err(json_err)?;
                Some(*e.get_log_id())
            }
            None => None,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> RedbStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> SResult<()> {
        self.put_meta("vote", vote)
    }

    async fn read_vote(&mut self) -> SResult<Option<Vote<u64>>> {
        self.get_meta("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> SResult<()> {
        self.put_meta("committed", &committed)
    }

    async fn read_committed(&mut self) -> SResult<Option<LogId<u64>>> {
        Ok(self.get_meta::<Option<LogId<u64>>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> SResult<()>
    where
        I: IntoIterator<Item = Entry<C>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for e in entries {
            rows.push((e.log_id.index, serde_json::to_vec(&e).map_err(json_err)?));
        }
        self.write(|txn| {
            let mut table = txn.open_table(LOGS)?;
            for (index, bytes) in &rows {
                table.insert(*index, bytes.as_slice())?;
            }
            Ok(())
        })?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> SResult<()> {
        self.write(|txn| {
            txn.open_table(LOGS)?
                .retain_in(log_id.index.., |_, _| false)?;
            Ok(())
        })
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> SResult<()> {
        let bytes = serde_json::to_vec(&Some(log_id)).map_err(json_err)?;
        self.write(|txn| {
            txn.open_table(META)?
                .insert("last_purged", bytes.as_slice())?;
            txn.open_table(LOGS)?
                .retain_in(..=log_id.index, |_, _| false)?;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------
// The benchmark.

fn raft_config() -> Arc<openraft::Config> {
    let cfg = openraft::Config {
        cluster_name: "raft-bench".into(),
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        ..Default::default()
    };
    Arc::new(cfg.validate().expect("a valid raft configuration"))
}

/// Start node `id` on `store` and register it with the router.
async fn start<LS: RaftLogStorage<C>>(id: u64, store: LS, router: &Router) -> Raft {
    let raft = Raft::new(
        id,
        raft_config(),
        router.clone(),
        store,
        KvStateMachine::new(),
    )
    .await
    .expect("raft starts");
    router.nodes.lock().unwrap().insert(id, raft.clone());
    raft
}

/// What one cell measured.
struct Cell {
    store: String,
    clients: usize,
    writes: u64,
    /// Raft entries the leader's log grew by while measured.
    entries: u64,
    secs: f64,
    hist: Histogram<u64>,
}

/// `clients` closed-loop writers through `leader` until `until`; the
/// latencies (microseconds) of those that finished.
async fn load(leader: &Writer, clients: usize, value: &str, until: Instant) -> Histogram<u64> {
    let mut tasks = Vec::new();
    for c in 0..clients {
        let raft = leader.clone();
        let value = value.to_string();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).unwrap();
            let mut n = c as u64;
            while Instant::now() < until {
                let req = KvRequest::Set {
                    key: format!("k{}", n % 1024),
                    value: value.clone(),
                };
                n += clients as u64;
                let t = Instant::now();
                raft.write(req).await;
                hist.record(t.elapsed().as_micros() as u64).unwrap();
            }
            hist
        }));
    }
    let mut all = Histogram::<u64>::new(3).unwrap();
    for t in tasks {
        all.add(t.await.unwrap()).unwrap();
    }
    all
}

async fn cell(store: &str, clients: usize, args: &Args, base: &Path) -> Cell {
    let dir = base.join(format!(
        "raft-bench-{}-{store}-{clients}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let router = Router::default();
    let mut rafts = Vec::new();
    for id in 1..=3u64 {
        let d = dir.join(id.to_string());
        let raft = match store {
            "ringwal" => {
                let s = LogStore::<C>::open(&d, ringwal::Config::default()).expect("ringwal opens");
                start(id, s, &router).await
            }
            "redb" => start(id, RedbStore::open(&d).expect("redb opens"), &router).await,
            "memory" => start(id, MemLogStore::<C>::new(), &router).await,
            other => panic!("unknown store {other}"),
        };
        rafts.push(raft);
    }
    let members: BTreeMap<u64, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    rafts[0].initialize(members).await.expect("initialize");
    let m = rafts[0]
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .expect("a leader within 30 s");
    let raft = rafts[(m.current_leader.unwrap() - 1) as usize].clone();
    let leader = match args.propose {
        Propose::Direct => Writer::Direct(raft.clone()),
        Propose::Batched => Writer::Batched(Proposer::spawn(raft.clone(), args.limits())),
    };
    let last_index = || raft.metrics().borrow().last_log_index.unwrap_or(0);

    let value = "x".repeat(args.value_bytes);
    load(
        &leader,
        clients,
        &value,
        Instant::now() + Duration::from_secs(1),
    )
    .await;
    let first = last_index();
    let t = Instant::now();
    let hist = load(
        &leader,
        clients,
        &value,
        t + Duration::from_secs_f64(args.secs),
    )
    .await;
    let secs = t.elapsed().as_secs_f64();
    let entries = last_index() - first;

    router.nodes.lock().unwrap().clear();
    for r in rafts {
        let _ = r.shutdown().await;
    }
    drop(leader);
    drop(raft);
    let _ = std::fs::remove_dir_all(&dir);
    Cell {
        store: store.to_string(),
        clients,
        writes: hist.len(),
        entries,
        secs,
        hist,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let args = Args::parse();
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).expect("the base directory");
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let date = sh("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let fs = sh("stat", &["-f", "-c", "%T", &base.to_string_lossy()]);
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = loadavg();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut runs: Vec<Cell> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for &clients in &args.clients {
            let n = args.stores.len();
            for k in 0..n {
                let store = &args.stores[(k + round) % n];
                let c = rt.block_on(cell(store, clients, &args, &base));
                eprintln!(
                    "raft-bench: round {}, {store}, {clients} clients: {:.0} writes/s",
                    round + 1,
                    c.writes as f64 / c.secs
                );
                runs.push(c);
            }
        }
    }
    let load_after = loadavg();
    // One row per (store, clients): the median rate of its rounds, their
    // range, and all their latencies.
    let mut cells: Vec<Row> = Vec::new();
    for &clients in &args.clients {
        for store in &args.stores {
            let mine: Vec<&Cell> = runs
                .iter()
                .filter(|c| &c.store == store && c.clients == clients)
                .collect();
            let mut rates: Vec<f64> = mine.iter().map(|c| c.writes as f64 / c.secs).collect();
            rates.sort_by(f64::total_cmp);
            let mut hist = Histogram::<u64>::new(3).unwrap();
            for c in &mine {
                hist.add(&c.hist).unwrap();
            }
            let writes: u64 = mine.iter().map(|c| c.writes).sum();
            let entries: u64 = mine.iter().map(|c| c.entries).sum();
            cells.push(Row {
                store: store.clone(),
                clients,
                per_entry: writes as f64 / entries.max(1) as f64,
                rate: rates[rates.len() / 2],
                min: rates[0],
                max: rates[rates.len() - 1],
                hist,
            });
        }
    }

    println!("`{command}`");
    println!();
    println!(
        "{date}; nproc {nproc}; stores in {} ({fs}); {} B values; {} rounds of {} s per \
         cell after 1 s warm-up; writes {}; /proc/loadavg before: {load_before}, after: \
         {load_after}",
        base.display(),
        args.value_bytes,
        args.rounds.max(1),
        args.secs,
        match args.propose {
            Propose::Batched => "through the proposer (group commit at the leader)",
            Propose::Direct => "direct (one raft entry each)",
        }
    );
    println!();
    println!(
        "| store | clients | writes/s (median) | range | p50 | p99 | vs redb (writes/s) | \
         writes/entry |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cells {
        let redb = cells
            .iter()
            .find(|r| r.store == "redb" && r.clients == c.clients)
            .map(|r| r.rate);
        let ratio = match redb {
            Some(r) if r > 0.0 => format!("{:.2}x", c.rate / r),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {:.0} | {:.0}-{:.0} | {} | {} | {} | {:.1} |",
            c.store,
            c.clients,
            c.rate,
            c.min,
            c.max,
            us(c.hist.value_at_quantile(0.5)),
            us(c.hist.value_at_quantile(0.99)),
            ratio,
            c.per_entry
        );
    }
}

/// One row of the table: a store at a number of clients, over the rounds.
struct Row {
    store: String,
    clients: usize,
    rate: f64,
    min: f64,
    max: f64,
    /// Writes per raft entry (all rounds).
    per_entry: f64,
    hist: Histogram<u64>,
}

/// Microseconds, printed in ms above 1 ms.
fn us(v: u64) -> String {
    if v >= 1000 {
        format!("{:.2} ms", v as f64 / 1000.0)
    } else {
        format!("{v} µs")
    }
}
