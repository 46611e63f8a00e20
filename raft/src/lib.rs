// The README is the crate's front page; its Rust block is a doctest.
#![doc = include_str!("../README.md")]
//!
//! ## Where to start in the API
//!
//! - [`LogStore::open`] opens or creates a store ([`LogStore::try_open`]
//!   keeps ringwal's error typed, e.g. a held lock); [`LogStore`] implements
//!   openraft's `RaftLogStorage`, [`LogReader`] its `RaftLogReader`.
//! - [`KvStateMachine`] and [`KvConfig`]: the in-memory state machine and
//!   the type configuration it works with.
//! - [`MemLogStore`]: the same storage traits in memory, nothing durable:
//!   a ceiling to measure `LogStore` against.
//! - [`Proposer`]: group commit of client writes at the leader, many
//!   commands to a raft entry.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
// openraft's traits return its `StorageError` (185 bytes); the helpers
// return the same type rather than box it and unbox it at every `?`.
#![allow(clippy::result_large_err)]

mod log_store;
mod mem_store;
mod meta;
mod propose;
mod state_machine;

pub use log_store::{
    LogReader, LogStore, OpenError, COMMIT_STREAM, ENTRY_STREAM, LOG_DIR, TRUNCATE_STREAM,
};
pub use mem_store::MemLogStore;
pub use meta::META_FILE;
pub use propose::{BatchLimits, Proposer, WriteResult};
pub use state_machine::{KvConfig, KvRequest, KvResponse, KvStateMachine};
