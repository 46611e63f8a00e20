//! The log store against openraft and against crashes, and the
//! `ringwal-kv` example on top of it: openraft's conformance suite, a
//! store reopened, power loss on the simulated disk, three nodes in this
//! process, three node processes killed with SIGKILL, and who may call a
//! node. One binary, so that the dependencies are linked once.
//!
//! The tests that run node processes (`kill`, `auth`) spawn the
//! `ringwal-kv` binary cargo builds for this test run; they spawn through
//! `common::spawn`, which keeps a child from inheriting the writer lock
//! of a log another test here is reopening.

#[path = "../common/mod.rs"]
mod common;
// The node of the `ringwal-kv` binary: its HTTP API, network and client
// calls.
#[path = "../../src/bin/ringwal-kv/node.rs"]
mod node;

mod auth;
mod crash;
mod kill;
mod kv_cluster;
mod reopen;
mod suite;
