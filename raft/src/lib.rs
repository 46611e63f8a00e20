//! ringwal as [openraft](https://docs.rs/openraft/0.9)'s log storage.
//!
//! [`LogStore`] implements openraft's `RaftLogStorage` (storage-v2) over a
//! [`ringwal::Wal`]; [`LogReader`] is its `RaftLogReader` for replication
//! tasks; [`KvStateMachine`] is a small in-memory key-value state machine
//! for [`KvConfig`], enough for openraft's conformance suite and examples.
//! `README.md` beside this crate's manifest explains the design and why it
//! is crash-safe.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod log_store;
mod meta;
mod state_machine;

pub use log_store::{LogReader, LogStore, ENTRY_STREAM, LOG_DIR, TRUNCATE_STREAM};
pub use meta::META_FILE;
pub use state_machine::{KvConfig, KvRequest, KvResponse, KvStateMachine};
