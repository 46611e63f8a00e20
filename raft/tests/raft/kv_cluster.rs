//! Three ringwal-kv nodes in this process, over HTTP on loopback: the log
//! store under real openraft use (appends with callbacks, replication
//! reads, snapshots and purges, a leader change, a restart from the log).

use std::time::Duration;

use crate::node::{self, Client, Members, Node};
use openraft::BasicNode;

async fn start(id: u64, dir: &std::path::Path, addr: Option<std::net::SocketAddr>) -> Node {
    let listener = match addr {
        Some(a) => tokio::net::TcpListener::bind(a).await.unwrap(),
        None => tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    };
    node::start(id, listener, &dir.join(id.to_string()))
        .await
        .unwrap()
}

/// Three nodes in `dir`, their membership initialized through the first.
async fn cluster(dir: &std::path::Path, client: &Client) -> Vec<Node> {
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(id, dir, None).await);
    }
    let members: Members = nodes
        .iter()
        .map(|n| (n.id, BasicNode::new(n.addr.to_string())))
        .collect();
    client
        .init(&nodes[0].addr.to_string(), &members)
        .await
        .unwrap();
    nodes
}

/// Start node `id` again from its directory at `addr` and wait, up to
/// `secs`, until it has applied up to index `last`.
async fn restart_until_applied(
    id: u64,
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    last: u64,
    secs: u64,
) -> Node {
    let back = start(id, dir, Some(addr)).await;
    back.raft
        .wait(Some(Duration::from_secs(secs)))
        .applied_index_at_least(Some(last), "the restarted node catches up")
        .await
        .unwrap();
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_replicate_fail_over_and_restart_from_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::default();
    let mut nodes = cluster(tmp.path(), &client).await;

    // Enough entries for two snapshots and purges (every 50 entries).
    let keys = 120;
    for k in 0..keys {
        let addr = nodes[k % 3].addr.to_string();
        client
            .put(&addr, &format!("k{k}"), &format!("v{k}"))
            .await
            .unwrap();
    }
    for k in (0..keys).step_by(7) {
        let got = client
            .get(&nodes[1].addr.to_string(), &format!("k{k}"))
            .await
            .unwrap();
        assert_eq!(got, Some(format!("v{k}")));
    }

    // Stop the leader; the other two elect a new one and go on.
    let leader = nodes[0].raft.current_leader().await.expect("a leader");
    let at = nodes.iter().position(|n| n.id == leader).unwrap();
    let stopped = nodes.remove(at);
    let (id, addr) = (stopped.id, stopped.addr);
    stopped.stop().await;
    for k in keys..keys + 20 {
        client
            .put(
                &nodes[0].addr.to_string(),
                &format!("k{k}"),
                &format!("v{k}"),
            )
            .await
            .unwrap();
    }
    let last = nodes[0].raft.metrics().borrow().last_applied.unwrap().index;

    // Restart it from its ringwal log and snapshot: it catches up.
    let back = restart_until_applied(id, tmp.path(), addr, last, 30).await;
    for k in 0..keys + 20 {
        assert_eq!(back.sm.get(&format!("k{k}")), Some(format!("v{k}")));
    }
    let m = back.raft.metrics().borrow().clone();
    assert!(m.purged.is_some(), "no purge happened: {m:?}");
    nodes.push(back);
    for n in nodes {
        n.stop().await;
    }
}

/// A follower that missed more than the leader keeps of its log is sent a
/// snapshot; here the state is several MiB, so the snapshot travels in
/// several chunks, each a JSON body of about 4 MiB (over the 2 MiB an
/// HTTP server accepts by default: before the limit was raised, every
/// chunk was refused and the follower never caught up).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_a_multi_mib_snapshot_catches_up() {
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::default();
    let mut nodes = cluster(tmp.path(), &client).await;
    let leader = nodes[0]
        .raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader is elected")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let at = nodes.iter().position(|n| n.id != leader).unwrap();
    let follower = nodes.remove(at);
    let (id, addr) = (follower.id, follower.addr);
    follower.stop().await;

    // 120 values of 40 KiB: a 4.7 MiB state, five snapshot chunks, and
    // more entries than a snapshot (every 50) plus what is kept (20).
    let value = |k: usize| format!("{k:08}").repeat(5 << 10);
    let keys = 120;
    for k in 0..keys {
        client
            .put(&nodes[0].addr.to_string(), &format!("k{k}"), &value(k))
            .await
            .unwrap();
    }
    let m = nodes[0].raft.metrics().borrow().clone();
    let last = m.last_applied.unwrap().index;
    let purged = m.purged.map(|p| p.index).unwrap_or(0);
    assert!(purged > 2, "the leader purged nothing: {m:?}");

    let back = restart_until_applied(id, tmp.path(), addr, last, 60).await;
    let snap = back.raft.metrics().borrow().snapshot;
    assert!(
        snap.is_some_and(|s| s.index > 2),
        "caught up without a snapshot: {snap:?}"
    );
    for k in 0..keys {
        assert_eq!(back.sm.get(&format!("k{k}")).as_deref(), Some(&*value(k)));
    }
    nodes.push(back);
    for n in nodes {
        n.stop().await;
    }
}

/// Writes that arrive together at the leader go out as fewer raft entries
/// than writes (the proposer's group commit), and each client still gets
/// the reply to its own command.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_share_entries_and_each_gets_its_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::default();
    let nodes = cluster(tmp.path(), &client).await;
    let leader = nodes[0]
        .raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader is elected")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let leader = nodes.iter().find(|n| n.id == leader).unwrap();
    let addr = leader.addr.to_string();
    let writes = 64;
    for k in 0..writes {
        client
            .put(&addr, &format!("k{k}"), &format!("old{k}"))
            .await
            .unwrap();
    }
    let before = leader.raft.metrics().borrow().last_log_index.unwrap();

    let puts: Vec<_> = (0..writes)
        .map(|k| {
            let addr = addr.clone();
            tokio::spawn(async move {
                Client::default()
                    .put(&addr, &format!("k{k}"), &format!("new{k}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    for (k, p) in puts.into_iter().enumerate() {
        assert_eq!(p.await.unwrap(), Some(format!("old{k}")), "reply to k{k}");
    }
    let after = leader.raft.metrics().borrow().last_log_index.unwrap();
    assert!(
        after - before < writes as u64,
        "{writes} concurrent writes took {} entries",
        after - before
    );
    for n in &nodes {
        n.raft
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(Some(after), "every node applies")
            .await
            .unwrap();
        for k in 0..writes {
            assert_eq!(n.sm.get(&format!("k{k}")), Some(format!("new{k}")));
        }
    }
    for n in nodes {
        n.stop().await;
    }
}
