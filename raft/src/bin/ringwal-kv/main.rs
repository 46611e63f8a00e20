//! ringwal-kv: a replicated key-value store, three raft nodes as three
//! processes talking HTTP on loopback, each keeping its raft log in
//! ringwal (`ringwal_raft::LogStore`).
//!
//! ```text
//! ringwal-kv demo [--dir DIR] [--keys N]      three nodes, end to end
//! ringwal-kv node --id N [--addr [HOST:]PORT] --dir DIR [--snapshot-every N] [--keep N]
//!                 [--store ringwal|memory] [--cluster-token-file FILE]
//!                 [--client-token-file FILE]
//! ringwal-kv init --node HOST:PORT [--token-file FILE] ID=HOST:PORT...
//! ringwal-kv put  --node HOST:PORT [--token-file FILE] KEY VALUE
//! ringwal-kv get  --node HOST:PORT [--token-file FILE] KEY
//! ```
//!
//! (`ringwal-kv help`, `ringwal-kv node --help` and so on say more.)
//!
//! `node` prints what its log store recovered (`recovered log up to index
//! N` or `recovered an empty log`), then `listening on HOST:PORT` once it
//! serves (port 0 picks a free one), and runs until interrupted. It
//! listens on 127.0.0.1:21001 unless `--addr` says otherwise (a bare port
//! is on 127.0.0.1 too). Its endpoints, the raft RPCs included, have no
//! authentication unless a token is set (see [`SECURITY`]). It builds
//! a snapshot every `--snapshot-every` applied entries (default 50) and
//! keeps `--keep` entries of log behind it (default 20). `--store memory`
//! runs the same service on an in-memory log (nothing durable; `--dir`
//! unused), to measure the cost of durability against. `put` and `get`
//! follow the leader from whichever node they are given; `get` is
//! linearizable. `demo` starts three `node` processes, initializes the
//! cluster, writes and reads keys, kills the leader, writes more through
//! the survivors, restarts the killed node from its ringwal log and waits
//! for it to catch up, then stops them all.
//!
//! `RUST_LOG` (e.g. `RUST_LOG=openraft=info`) sends openraft's and the
//! node's diagnostics to stderr; without it nothing is logged.

mod node;

/// What `node --help` says of who may call a node.
const SECURITY: &str = "\
Security: a node speaks plain HTTP, and its endpoints, the raft RPCs (/raft/append, \
/raft/vote, /raft/snapshot) included, have no authentication unless a token is set: \
anyone who can reach --addr can append to the raft log, vote, install a snapshot, \
and read and write keys. So a node listens on loopback (127.0.0.1) unless --addr names \
another host. With --cluster-token (or --cluster-token-file) every raft RPC must carry \
`Authorization: Bearer <token>` (401 otherwise, and raft never sees the request), and \
the node sends it on its own RPCs: give every member the same one. The client \
endpoints (/init, /kv/put, /kv/get, /kv/local, /metrics) need --client-token, or the \
cluster token when no client token is set; `init`, `put` and `get` send it with \
--token or --token-file. Tokens travel in the clear: across a network others can \
watch, carry the nodes' HTTP over TLS (a tunnel or a proxy).";

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use node::{BoxError, Client, Members, Snapshots, Token, Tokens};
use openraft::BasicNode;

/// A replicated key-value store on openraft, its raft log in ringwal.
#[derive(Debug, Parser)]
#[command(
    name = "ringwal-kv",
    after_help = "A node's endpoints, the raft RPCs included, have no authentication unless \
a token is set, and it listens on loopback unless told otherwise: see `ringwal-kv node --help`."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one raft node until interrupted: print what its log store
    /// recovered, then where it listens.
    #[command(after_help = SECURITY)]
    Node(NodeArgs),
    /// Set the cluster's membership, once, through one node.
    Init {
        /// A node to send it to.
        #[arg(long, value_name = "HOST:PORT")]
        node: String,
        /// The members, as ID=HOST:PORT.
        #[arg(required = true, value_name = "ID=HOST:PORT", value_parser = member)]
        members: Vec<(u64, String)>,
        #[command(flatten)]
        auth: ClientAuth,
    },
    /// Set KEY to VALUE through the leader; prints the previous value.
    Put {
        /// A node to start at (the write follows the leader).
        #[arg(long, value_name = "HOST:PORT")]
        node: String,
        key: String,
        value: String,
        #[command(flatten)]
        auth: ClientAuth,
    },
    /// Read KEY, linearizably, through the leader (exit status 1 if it is
    /// not set).
    Get {
        /// A node to start at (the read follows the leader).
        #[arg(long, value_name = "HOST:PORT")]
        node: String,
        key: String,
        #[command(flatten)]
        auth: ClientAuth,
    },
    /// Three node processes end to end: writes, reads, the leader killed,
    /// restarted from its log, caught up.
    Demo {
        /// Where the nodes keep their data (default: a temporary
        /// directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Keys to write before the leader is killed.
        #[arg(long, default_value_t = 200)]
        keys: u64,
    },
}

/// The token a client command sends.
#[derive(Debug, clap::Args)]
struct ClientAuth {
    /// Send `Authorization: Bearer TOKEN`: the nodes' client token (or
    /// their cluster token if they have no client token). Shows in `ps`:
    /// prefer --token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    token: Option<String>,
    /// As --token, read from FILE.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl ClientAuth {
    fn client(&self) -> Result<Client, BoxError> {
        let token = token_of(&self.token, &self.token_file, "--token")?;
        Ok(Client::with_token(token))
    }
}

/// The token given inline (`flag`) or in a file, if either; the file's
/// surrounding whitespace is dropped.
fn token_of(
    inline: &Option<String>,
    file: &Option<PathBuf>,
    flag: &str,
) -> Result<Option<Token>, String> {
    match (inline, file) {
        (Some(t), _) => Token::new(t).map(Some).map_err(|e| format!("{flag}: {e}")),
        (None, Some(path)) => Token::from_file(path).map(Some),
        (None, None) => Ok(None),
    }
}

/// The address a node listens on when `--addr` is not given.
const DEFAULT_ADDR: &str = "127.0.0.1:21001";

/// `HOST:PORT`, or a bare `PORT` on loopback.
fn listen_addr(s: &str) -> Result<String, String> {
    match s.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string()),
        Err(_) if s.contains(':') => Ok(s.to_string()),
        Err(_) => Err(format!("{s:?} is neither HOST:PORT nor a port")),
    }
}

#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// This node's raft id.
    #[arg(long)]
    id: u64,
    /// Where to serve HTTP: HOST:PORT, or a port on loopback (port 0 picks
    /// a free one). 0.0.0.0:PORT opens it to every interface: set tokens
    /// first.
    #[arg(long, value_name = "[HOST:]PORT", default_value = DEFAULT_ADDR, value_parser = listen_addr)]
    addr: String,
    /// The node's data: its ringwal log, metadata and snapshot (required
    /// with the ringwal store; the memory store keeps nothing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Build a snapshot every this many applied entries.
    #[arg(long, default_value_t = Snapshots::default().every)]
    snapshot_every: u64,
    /// Entries of log kept behind the last snapshot.
    #[arg(long, default_value_t = Snapshots::default().keep)]
    keep: u64,
    /// The raft log store: ringwal (durable), or memory (nothing on disk,
    /// the same service without durability, to measure against).
    #[arg(long, value_enum, default_value_t = StoreArg::Ringwal)]
    store: StoreArg,
    /// Require `Authorization: Bearer TOKEN` on the raft RPCs, and send it
    /// on this node's own (the same on every member). Shows in `ps`:
    /// prefer --cluster-token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "cluster_token_file")]
    cluster_token: Option<String>,
    /// As --cluster-token, read from FILE.
    #[arg(long, value_name = "FILE")]
    cluster_token_file: Option<PathBuf>,
    /// Require `Authorization: Bearer TOKEN` on the client endpoints
    /// (without it, they need the cluster token, if one is set). Shows in
    /// `ps`: prefer --client-token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "client_token_file")]
    client_token: Option<String>,
    /// As --client-token, read from FILE.
    #[arg(long, value_name = "FILE")]
    client_token_file: Option<PathBuf>,
}

impl NodeArgs {
    fn tokens(&self) -> Result<Tokens, String> {
        Ok(Tokens {
            cluster: token_of(
                &self.cluster_token,
                &self.cluster_token_file,
                "--cluster-token",
            )?,
            client: token_of(
                &self.client_token,
                &self.client_token_file,
                "--client-token",
            )?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StoreArg {
    Ringwal,
    Memory,
}

/// `ID=HOST:PORT`.
fn member(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not ID=HOST:PORT"))?;
    let id = id.parse().map_err(|e| format!("{id:?}: {e}"))?;
    Ok((id, addr.to_string()))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    match Cli::parse().cmd {
        Cmd::Node(args) => run_node(args).await?,
        Cmd::Init {
            node,
            members,
            auth,
        } => {
            let members: Members = members
                .into_iter()
                .map(|(id, addr)| (id, BasicNode::new(addr)))
                .collect();
            auth.client()?.init(&node, &members).await?;
        }
        Cmd::Put {
            node,
            key,
            value,
            auth,
        } => {
            let previous = auth.client()?.put(&node, &key, &value).await?;
            println!("{}", previous.unwrap_or_default());
        }
        Cmd::Get { node, key, auth } => match auth.client()?.get(&node, &key).await? {
            Some(v) => println!("{v}"),
            None => std::process::exit(1),
        },
        Cmd::Demo { dir, keys } => {
            let tmp;
            let dir = match dir {
                Some(d) => d,
                None => {
                    tmp = tempfile::tempdir()?;
                    tmp.path().to_path_buf()
                }
            };
            demo(&Client::default(), &dir, keys).await?;
        }
    }
    Ok(())
}

async fn run_node(args: NodeArgs) -> Result<(), BoxError> {
    // Off unless asked for: a node under a test writes its stderr to a
    // file kept on failure, and that is what RUST_LOG fills.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let tokens = args.tokens()?;
    let snapshots = Snapshots {
        every: args.snapshot_every,
        keep: args.keep,
    };
    let store = match args.store {
        StoreArg::Ringwal => node::Store::Ringwal,
        StoreArg::Memory => node::Store::Memory,
    };
    let dir = match (store, args.dir) {
        (_, Some(dir)) => dir,
        (node::Store::Memory, None) => PathBuf::new(),
        (node::Store::Ringwal, None) => {
            let mut cli = Cli::command();
            let cmd = cli.find_subcommand_mut("node").cloned().unwrap_or(cli);
            cmd.override_usage("ringwal-kv node --id <ID> --dir <DIR> [OPTIONS]")
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "the ringwal store (the default) needs --dir <DIR>",
                )
                .exit()
        }
    };
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    let node = node::start_with(args.id, listener, &dir, snapshots, store, tokens).await?;
    match node.recovered {
        Some(l) => println!("recovered log up to index {}", l.index),
        None => println!("recovered an empty log"),
    }
    println!("listening on {}", node.addr);
    tokio::signal::ctrl_c().await?;
    node.stop().await;
    Ok(())
}

/// A node process of the demo, killed when dropped.
struct NodeProcess {
    id: u64,
    addr: String,
    child: Child,
}

impl NodeProcess {
    /// Start `ringwal-kv node` for `id` in `dir/ID` (on `addr`, or a free
    /// port) and wait for it to say where it listens.
    fn spawn(id: u64, dir: &Path, addr: Option<&str>) -> Result<NodeProcess, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["node", "--id", &id.to_string()])
            .args(["--addr", addr.unwrap_or("127.0.0.1:0")])
            .arg("--dir")
            .arg(dir.join(id.to_string()))
            .stdout(Stdio::piped())
            .spawn()?;
        // `recovered ...`, then `listening on ADDR`.
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        for _ in 0..2 {
            line.clear();
            out.read_line(&mut line)?;
        }
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("node {id} did not start").into());
        };
        Ok(NodeProcess {
            id,
            addr: addr.to_string(),
            child,
        })
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn demo(client: &Client, dir: &Path, keys: u64) -> Result<(), BoxError> {
    let started = Instant::now();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(NodeProcess::spawn(id, dir, None)?);
    }
    let members: Members = nodes
        .iter()
        .map(|n| (n.id, BasicNode::new(&n.addr)))
        .collect();
    for n in &nodes {
        println!("node {} (pid {}) on {}", n.id, n.child.id(), n.addr);
    }
    client.init(&nodes[0].addr, &members).await?;

    let t = Instant::now();
    for k in 0..keys {
        client
            .put(&nodes[1].addr, &format!("key{k}"), &format!("value{k}"))
            .await?;
    }
    println!("put {keys} keys through node 2 in {:?}", t.elapsed());
    for k in 0..keys {
        let got = client.get(&nodes[2].addr, &format!("key{k}")).await?;
        if got.as_deref() != Some(format!("value{k}").as_str()) {
            return Err(format!("key{k}: read {got:?}").into());
        }
    }
    println!("read them back (linearizable, through node 3)");

    let leader = client
        .metrics(&nodes[0].addr)
        .await?
        .current_leader
        .ok_or("no leader")?;
    let at = nodes.iter().position(|n| n.id == leader).expect("a member");
    let killed = nodes.remove(at);
    let (killed_id, killed_addr) = (killed.id, killed.addr.clone());
    drop(killed);
    println!("killed the leader, node {killed_id}");

    for k in keys..keys + 20 {
        client
            .put(&nodes[0].addr, &format!("key{k}"), &format!("value{k}"))
            .await?;
    }
    let last = client
        .metrics(&nodes[0].addr)
        .await?
        .last_applied
        .map(|l| l.index)
        .unwrap_or(0);
    println!("20 more keys through the survivors (applied up to {last})");

    let back = NodeProcess::spawn(killed_id, dir, Some(&killed_addr))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = client.metrics(&back.addr).await?;
        if m.last_applied.map(|l| l.index).unwrap_or(0) >= last {
            println!(
                "node {killed_id} restarted from its ringwal log and caught up: \
                 last log {:?}, purged up to {:?}, snapshot {:?}",
                m.last_log_index,
                m.purged.map(|p| p.index),
                m.snapshot.map(|s| s.index)
            );
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("node {killed_id} did not catch up: {m:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nodes.push(back);
    println!("done in {:?}", started.elapsed());
    Ok(())
}
