//! What the tests that run `ringwal-kv` node processes share: the binary,
//! and the lines a node prints as it starts.
#![allow(dead_code)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `ringwal-kv` binary: `RINGWAL_KV_BIN`, or the example as cargo
/// builds it (with the profile of this test).
pub fn node_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("RINGWAL_KV_BIN") {
        return bin.into();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "ringwal-raft", "--example", "ringwal-kv"])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build --example ringwal-kv");
    assert!(
        out.status.success(),
        "cargo build --example ringwal-kv failed"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "ringwal-kv")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo named the ringwal-kv executable")
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
