// The README is the crate's front page, and every Rust block in it is a
// doctest: `cargo test --doc` keeps its examples compiling and true.
#![doc = include_str!("../README.md")]
//!
//! ## Where to start in the API
//!
//! - [`Wal::open`] opens or creates a log (recovering first) and returns
//!   the handle every producer shares; [`Config::builder`] sets it up.
//! - [`Wal::append`], [`Wal::append_then`], [`Wal::append_batch`] and
//!   [`Wal::begin`] (a [`Transaction`]) write records; each returns a
//!   [`Ticket`] to wait on, blocking ([`Ticket::wait`]) or async
//!   ([`Ticket::reached`], [`Wal::wait_for`]).
//! - [`Wal::read`], [`Wal::reader_from`] and [`Wal::follow`] read them
//!   back; [`Wal::checkpoint`] and [`Wal::checkpoint_marker`] let go of
//!   what a snapshot covers.
//! - [`Collector`] and the [`channel`] module are the layers for telemetry
//!   collectors; [`verify`] inspects a log without opening it for writing.
//!
//! The engine: a dedicated ring thread owns an io_uring and turns appends
//! into few large, block-aligned writes with several in flight (group
//! commit), each made durable with `RWF_DSYNC` (or write + `fdatasync`)
//! on preallocated segments opened with O_DIRECT where the filesystem
//! allows. A portable backend ([`Backend::Threaded`]) runs the same engine
//! on one blocking I/O thread. `ARCHITECTURE.md` maps the code and its
//! invariants; `docs/format.md` describes the on-disk format.

#![warn(missing_docs)]
// Every `unsafe` block lives in `ringwal-platform`, behind its safe API.
#![forbid(unsafe_code)]

mod acks;
pub mod channel;
mod codec;
pub mod collector;
mod config;
pub mod crypt;
mod error;
#[cfg(feature = "metrics")]
mod export;
pub mod files;
mod follow;
pub mod format;
mod index;
mod latency;
mod ledger;
mod lifecycle;
mod manifest;
mod observer;
mod packing;
mod payload;
#[cfg(feature = "tokio")]
mod pool;
mod prefetch;
mod reader;
mod recovery;
mod retention;
mod ring;
mod scan;
mod segments;
mod state;
mod sync_budget;
mod ticket;
mod trace;
mod transaction;
pub mod verify;
mod wakers;
mod wal;

pub use codec::Compression;
pub use collector::{Collector, Replayed, Watermarks};
pub use config::{
    Backend, Config, ConfigBuilder, DirectIo, Durability, Level, RecoveryMode, SyncMethod, WhenFull,
};
/// The channel crate the [`channel`] API's receivers come from, so that
/// callers `select!` on them with the same version.
pub use crossbeam_channel;
pub use crypt::{Key, KeyProblem, KeyProvider, StaticKeys};
pub use error::{Corruption, Error, Lsn, Poison, Result};
pub use follow::{DirFollower, Follower};
pub use format::{Codec, Kind};
pub use latency::LatencySummary;
pub use observer::DurabilityObserver;
pub use reader::{Reader, Record};
pub use recovery::{CheckpointMarker, RecoveryReport, Truncation};
pub use ticket::{AppendFuture, Ticket, TicketFuture};
pub use transaction::Transaction;
pub use wal::{Stats, Wal};
