//! What the tests share: the `ringwal-kv` binary, the lines a node
//! prints as it starts, and the lock that keeps node processes from being
//! spawned while a test in this process reopens a log.
#![allow(dead_code)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{RwLock, RwLockReadGuard};

/// The `ringwal-kv` binary: `RINGWAL_KV_BIN`, or the one cargo built
/// beside this test (with the same profile).
pub fn node_binary() -> PathBuf {
    std::env::var_os("RINGWAL_KV_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ringwal-kv").into())
}

/// A log's writer lock is an `flock` on an open file description, close-
/// on-exec: a child forked by one test thread shares it until its `exec`,
/// so a log another thread has just closed can still be locked for a
/// moment, and an immediate reopen fails with `Locked`. Spawns hold this
/// exclusively (until the child has exec'd); tests that close and reopen
/// a log in this process hold it shared.
static SPAWNING: RwLock<()> = RwLock::new(());

/// Spawn `cmd` while no test of this process reopens a log.
pub fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let _spawning = SPAWNING.write().unwrap_or_else(|p| p.into_inner());
    cmd.spawn()
}

/// Held while a test closes and reopens logs in this process.
pub fn reopening_logs() -> RwLockReadGuard<'static, ()> {
    SPAWNING.read().unwrap_or_else(|p| p.into_inner())
}

/// What a node prints before it serves: the index its log store
/// recovered up to (`None`: an empty log), and the address of the socket
/// it listens on.
#[derive(Debug)]
pub struct Banner {
    pub recovered: Option<u64>,
    pub addr: SocketAddr,
}

/// Read a node's two starting lines from its stdout.
pub fn read_banner(out: &mut impl BufRead) -> Result<Banner, String> {
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        lines.push(line.trim().to_string());
    }
    let recovered = match lines[0].strip_prefix("recovered log up to index ") {
        Some(i) => Some(i.parse::<u64>().map_err(|e| e.to_string())?),
        None if lines[0] == "recovered an empty log" => None,
        None => return Err(format!("did not start: {lines:?}")),
    };
    let addr = lines[1]
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("did not listen: {lines:?}"))?;
    Ok(Banner { recovered, addr })
}
