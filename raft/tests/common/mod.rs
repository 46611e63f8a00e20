//! What the tests that run `ringwal-kv` node processes share: the binary,
//! and the lines a node prints as it starts.
#![allow(dead_code)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The `ringwal-kv` binary: `RINGWAL_KV_BIN`, or the one cargo built
/// beside this test (with the same profile).
pub fn node_binary() -> PathBuf {
    std::env::var_os("RINGWAL_KV_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ringwal-kv").into())
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
