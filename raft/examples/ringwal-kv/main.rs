//! ringwal-kv: a replicated key-value store, three raft nodes as three
//! processes talking HTTP on loopback, each keeping its raft log in
//! ringwal (`ringwal_raft::LogStore`).
//!
//! ```text
//! ringwal-kv demo [--dir DIR] [--keys N]      three nodes, end to end
//! ringwal-kv node --id N --addr HOST:PORT --dir DIR [--snapshot-every N] [--keep N]
//! ringwal-kv init --node HOST:PORT ID=HOST:PORT...
//! ringwal-kv put  --node HOST:PORT KEY VALUE
//! ringwal-kv get  --node HOST:PORT KEY
//! ```
//!
//! `node` prints what its log store recovered (`recovered log up to index
//! N` or `recovered an empty log`), then `listening on HOST:PORT` once it
//! serves (port 0 picks a free one), and runs until interrupted. It builds
//! a snapshot every `--snapshot-every` applied entries (default 50) and
//! keeps `--keep` entries of log behind it (default 20). `put` and `get` follow the leader
//! from whichever node they are given; `get` is linearizable. `demo`
//! starts three `node` processes, initializes the cluster, writes and
//! reads keys, kills the leader, writes more through the survivors,
//! restarts the killed node from its ringwal log and waits for it to
//! catch up, then stops them all.
//!
//! `RUST_LOG` (e.g. `RUST_LOG=openraft=info`) sends openraft's and the
//! node's diagnostics to stderr; without it nothing is logged.

mod node;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use node::{BoxError, Client, Members};
use openraft::BasicNode;

fn usage() -> ! {
    eprintln!(
        "usage: ringwal-kv demo [--dir DIR] [--keys N]\n       \
         ringwal-kv node --id N --addr HOST:PORT --dir DIR [--snapshot-every N] [--keep N]\n       \
         ringwal-kv init --node HOST:PORT ID=HOST:PORT...\n       \
         ringwal-kv put --node HOST:PORT KEY VALUE\n       \
         ringwal-kv get --node HOST:PORT KEY"
    );
    std::process::exit(2)
}

/// `--name value` options and the positional arguments, in order.
struct Args {
    options: Vec<(String, String)>,
    rest: Vec<String>,
}

impl Args {
    fn parse(args: impl Iterator<Item = String>) -> Args {
        let mut options = Vec::new();
        let mut rest = Vec::new();
        let mut args = args.peekable();
        while let Some(a) = args.next() {
            match a.strip_prefix("--") {
                Some(name) => match args.next() {
                    Some(v) => options.push((name.to_string(), v)),
                    None => usage(),
                },
                None => rest.push(a),
            }
        }
        Args { options, rest }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn need(&self, name: &str) -> &str {
        self.get(name).unwrap_or_else(|| usage())
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut argv = std::env::args().skip(1);
    let cmd = argv.next().unwrap_or_else(|| usage());
    let args = Args::parse(argv);
    let client = Client::default();
    match cmd.as_str() {
        "node" => {
            // Off unless asked for: a node under a test writes its stderr
            // to a file kept on failure, and that is what RUST_LOG fills.
            if std::env::var_os("RUST_LOG").is_some() {
                tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .init();
            }
            let id: u64 = args.need("id").parse()?;
            let mut snapshots = node::Snapshots::default();
            if let Some(n) = args.get("snapshot-every") {
                snapshots.every = n.parse()?;
            }
            if let Some(n) = args.get("keep") {
                snapshots.keep = n.parse()?;
            }
            let listener = tokio::net::TcpListener::bind(args.need("addr")).await?;
            let node =
                node::start_with(id, listener, Path::new(args.need("dir")), snapshots).await?;
            match node.recovered {
                Some(l) => println!("recovered log up to index {}", l.index),
                None => println!("recovered an empty log"),
            }
            println!("listening on {}", node.addr);
            tokio::signal::ctrl_c().await?;
            node.stop().await;
        }
        "init" => {
            let mut members = Members::new();
            for m in &args.rest {
                let (id, addr) = m.split_once('=').unwrap_or_else(|| usage());
                members.insert(id.parse()?, BasicNode::new(addr));
            }
            client.init(args.need("node"), &members).await?;
        }
        "put" => {
            let [key, value] = &args.rest[..] else {
                usage()
            };
            let previous = client.put(args.need("node"), key, value).await?;
            println!("{}", previous.unwrap_or_default());
        }
        "get" => {
            let [key] = &args.rest[..] else { usage() };
            match client.get(args.need("node"), key).await? {
                Some(v) => println!("{v}"),
                None => std::process::exit(1),
            }
        }
        "demo" => {
            let keys: u64 = args.get("keys").unwrap_or("200").parse()?;
            let tmp;
            let dir = match args.get("dir") {
                Some(d) => PathBuf::from(d),
                None => {
                    tmp = tempfile::tempdir()?;
                    tmp.path().to_path_buf()
                }
            };
            demo(&client, &dir, keys).await?;
        }
        _ => usage(),
    }
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
