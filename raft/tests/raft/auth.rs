//! Who may call a `ringwal-kv` node, with real node processes: three
//! nodes sharing a cluster token work as a cluster, while a raft RPC
//! without the token, or with a wrong one, is refused with 401 and never
//! reaches raft (the same request with the token does land); and a node
//! listens on loopback unless told otherwise.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{node_binary, read_banner, spawn};
use crate::node::{self, Client, Members, Token};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, RaftMetrics, Vote};
use ringwal_raft::{KvConfig, KvRequest};

const SECRET: &str = "cluster-s3cret";

/// A raft id no member has: the forged leader.
const INTRUDER: u64 = 99;

/// A node process, killed when dropped.
struct NodeProc {
    child: Child,
    addr: SocketAddr,
}

impl NodeProc {
    fn spawn<S: Into<OsString>>(bin: &Path, args: impl IntoIterator<Item = S>) -> NodeProc {
        let mut child = spawn(
            Command::new(bin)
                .args(args.into_iter().map(Into::into))
                .stdout(Stdio::piped()),
        )
        .expect("spawning ringwal-kv");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        match read_banner(&mut out) {
            Ok(banner) => NodeProc {
                child,
                addr: banner.addr,
            },
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node did not start: {e}");
            }
        }
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An append from a leader no member elected: a vote above the
/// follower's, the follower's last entry as the previous one, and one
/// entry setting `stray`, committed at once.
fn forged_append(term: u64, last: LogId<u64>) -> AppendEntriesRequest<KvConfig> {
    let leader = CommittedLeaderId::new(term + 1, INTRUDER);
    let log_id = LogId::new(leader, last.index + 1);
    AppendEntriesRequest {
        vote: Vote::new_committed(term + 1, INTRUDER),
        prev_log_id: Some(last),
        entries: vec![Entry {
            log_id,
            payload: EntryPayload::Normal(KvRequest::Set {
                key: "stray".into(),
                value: "landed".into(),
            }),
        }],
        leader_commit: Some(log_id),
    }
}

/// Poll `f` every 50 ms until it holds, for up to 20 s.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(client: &Client, addr: &str) -> RaftMetrics<u64, BasicNode> {
    client.metrics(addr).await.expect("metrics")
}

/// What the node at `addr` has applied (`/kv/local`, with the token).
async fn applied(addr: &str) -> BTreeMap<String, String> {
    let local: node::LocalState = reqwest::Client::new()
        .get(format!("http://{addr}/kv/local"))
        .header("Authorization", format!("Bearer {SECRET}"))
        .send()
        .await
        .expect("a GET")
        .json()
        .await
        .expect("JSON");
    local.kv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_cluster_token_the_cluster_works_and_a_raft_rpc_without_it_is_refused() {
    let bin = node_binary();
    let tmp = tempfile::tempdir().unwrap();
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let nodes: Vec<NodeProc> = (1..=3u64)
        .map(|id| {
            let dir = tmp.path().join(id.to_string());
            let args: [OsString; 8] = [
                "node".into(),
                "--id".into(),
                id.to_string().into(),
                "--addr".into(),
                "127.0.0.1:0".into(),
                "--dir".into(),
                dir.into(),
                "--cluster-token-file".into(),
            ];
            NodeProc::spawn(&bin, args.into_iter().chain([token_file.clone().into()]))
        })
        .collect();
    let addr = |i: usize| nodes[i].addr.to_string();

    // (a) With the token, the cluster forms, replicates and answers.
    let client = Client::with_token(Some(Token::new(SECRET).unwrap()));
    let members: Members = (0..3)
        .map(|i| (i as u64 + 1, BasicNode::new(addr(i))))
        .collect();
    client.init(&addr(0), &members).await.unwrap();
    client.put(&addr(1), "k", "v").await.unwrap();
    assert_eq!(
        client.get(&addr(2), "k").await.unwrap().as_deref(),
        Some("v")
    );
    // No client token is set, so the client endpoints need the cluster
    // token too.
    let err = Client::default().put(&addr(0), "k", "w").await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    // A follower, caught up with the leader (nothing else is written).
    let leader = metrics(&client, &addr(0)).await.current_leader.unwrap();
    let f = (0..3).find(|&i| i as u64 + 1 != leader).unwrap();
    let leader_applied = metrics(&client, &addr(leader as usize - 1))
        .await
        .last_applied;
    eventually("the follower has applied what the leader has", || async {
        metrics(&client, &addr(f)).await.last_applied >= leader_applied
    })
    .await;
    let before = metrics(&client, &addr(f)).await;
    let stray = forged_append(before.current_term, before.last_applied.unwrap());

    // (b) Without the token, or with a wrong one, every raft RPC is 401,
    // before its body is even read.
    let http = reqwest::Client::new();
    let wrong = [
        None,
        Some(format!("Bearer {SECRET}x")),
        Some(format!("Bearer {}", &SECRET[1..])),
        Some(format!("Basic {SECRET}")),
    ];
    let vote = VoteRequest::new(Vote::new(before.current_term + 10, INTRUDER), None);
    for auth in &wrong {
        for (path, body) in [
            ("raft/append", serde_json::to_vec(&stray).unwrap()),
            ("raft/vote", serde_json::to_vec(&vote).unwrap()),
            ("raft/snapshot", b"{}".to_vec()),
        ] {
            let mut req = http
                .post(format!("http://{}/{path}", addr(f)))
                .header("Content-Type", "application/json")
                .body(body);
            if let Some(a) = auth {
                req = req.header("Authorization", a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 401, "{path} with {auth:?}");
            let said = r.text().await.unwrap();
            assert!(said.contains("cluster token"), "{path}: {said}");
        }
    }
    // The log goes on from the real leader, and the stray entry is not in
    // it: a later write is applied on the follower, the stray key is not,
    // and the follower never voted for the intruder.
    client.put(&addr(0), "after", "1").await.unwrap();
    eventually("the follower applies the next write", || async {
        applied(&addr(f)).await.contains_key("after")
    })
    .await;
    assert_eq!(applied(&addr(f)).await.get("stray"), None);
    let after = metrics(&client, &addr(f)).await;
    assert_ne!(after.vote.leader_id.node_id, INTRUDER);
    assert_ne!(after.last_applied.unwrap().leader_id.node_id, INTRUDER);

    // The same forged append with the token is taken: what the 401 kept
    // out was a real write to the log.
    let now = metrics(&client, &addr(f)).await;
    let stray = forged_append(now.current_term, now.last_applied.unwrap());
    let r = http
        .post(format!("http://{}/raft/append", addr(f)))
        .header("Authorization", format!("Bearer {SECRET}"))
        .json(&stray)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    eventually(
        "the stray entry, sent with the token, is applied",
        || async { applied(&addr(f)).await.get("stray").map(String::as_str) == Some("landed") },
    )
    .await;
}

/// An address of this machine other than loopback, if it has one: the
/// source address of a route out (a UDP connect sends nothing).
fn outward_ip() -> Option<IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn a_node_listens_on_loopback_unless_told_otherwise() {
    let bin = node_binary();
    let help = spawn(
        Command::new(&bin)
            .args(["node", "--help"])
            .stdout(Stdio::piped()),
    )
    .and_then(Child::wait_with_output)
    .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("[default: 127.0.0.1:21001]"), "{help}");
    assert!(
        help.contains("no authentication unless a token is set"),
        "{help}"
    );

    // A bare port is a port on loopback.
    let memory = ["node", "--id", "1", "--store", "memory", "--addr"];
    let local = NodeProc::spawn(&bin, memory.iter().chain(&["0"]));
    assert_eq!(local.addr.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert!(TcpStream::connect(local.addr).is_ok());
    match outward_ip() {
        Some(ip) => {
            let through = SocketAddr::new(ip, local.addr.port());
            let timeout = Duration::from_secs(2);
            assert!(
                TcpStream::connect_timeout(&through, timeout).is_err(),
                "a loopback node answered on {through}"
            );
            // Told every interface, it is reachable there.
            let open = NodeProc::spawn(&bin, memory.iter().chain(&["0.0.0.0:0"]));
            assert!(open.addr.ip().is_unspecified());
            let through = SocketAddr::new(ip, open.addr.port());
            TcpStream::connect_timeout(&through, timeout).expect("reachable on 0.0.0.0");
        }
        None => eprintln!("no address but loopback here: checked the listening address only"),
    }
}
