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
//! ## Features
//!
//! None is in the default build; each item that needs one says so.
//!
//! - `tokio`: open, close, read and checkpoint on tokio's blocking pool
//!   (`Wal::open_async` and its siblings). The rest of the async API
//!   needs no feature.
//! - `serde`: [`Config`] and its enums to and from configuration files.
//! - `metrics`: `Wal::publish_metrics`, [`Stats`] through the `metrics`
//!   facade.
//! - `tracing`: events for recovery's repairs, the poison, fallbacks,
//!   rolls and checkpoints (no item of its own).
//! - `zstd`: the zstd codec ([`Codec::Zstd`]); LZ4 is always there.
//! - `archive`: the `archive` module (ship a log to a `file://` or S3
//!   store, restore it, follow it as a standby). Its cost is the build:
//!   `object_store` with S3 and a tokio runtime, 199 crates in the
//!   dependency tree against 42 without.
//! - `sim`: the simulated disk (`ConfigBuilder::sim`), for tests.
//! - `internals`: the modules `format` (the on-disk format's encoders,
//!   decoders, file names and limits) and `crypt` (the cipher's tag size,
//!   the key-file mode rule). Not covered by semver; for the CLI,
//!   fuzzers and tests.
//!
//! The engine: a dedicated ring thread owns an io_uring and turns appends
//! into few large, block-aligned writes with several in flight (group
//! commit), each made durable with `RWF_DSYNC` (or write + `fdatasync`)
//! on preallocated segments opened with O_DIRECT where the filesystem
//! allows. A portable backend ([`Backend::Threaded`]) runs the same engine
//! on one blocking I/O thread. `ARCHITECTURE.md` maps the code and its
//! invariants; `docs/format.md` describes the on-disk format.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`): each item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]
// A type the public API hands out can be named by its user: nothing in
// a signature may live only in a module the `internals` feature hides.
#![warn(unnameable_types)]
// Every `unsafe` block lives in `ringwal-platform`, behind its safe API.
#![forbid(unsafe_code)]

// The folders are the architecture (ARCHITECTURE.md's code map): each
// keeps its modules to itself unless another folder needs them.
#[cfg(feature = "archive")]
#[cfg_attr(docsrs, doc(cfg(feature = "archive")))]
pub mod archive;
mod at_rest;
mod config;
mod error;
pub mod files;
mod layers;
mod obs;
mod read;
mod recovery;
mod scan;
mod segment;
mod sync;
mod wal;
mod write;

// The public modules, at the paths users name them by.
pub use layers::{channel, collector};
pub use recovery::verify;

// The internals the CLI, the fuzzers, the benchmarks and the tests take
// apart (feature `internals`): not covered by semver.
#[cfg(feature = "internals")]
#[cfg_attr(docsrs, doc(cfg(feature = "internals")))]
pub use at_rest::{crypt, format};

pub use at_rest::codec::Compression;
pub use at_rest::crypt::{Key, KeyProblem, KeyProvider, StaticKeys};
pub use at_rest::format::{Codec, Kind};
pub use config::{
    Backend, Config, ConfigBuilder, DirectIo, Durability, Level, RecoveryMode, SyncMethod,
    WhenFull, DEFAULT_WAIT_SPIN,
};
/// The channel crate the [`channel`] API's receivers come from, so that
/// callers `select!` on them with the same version.
pub use crossbeam_channel;
pub use error::{ArchiveProblem, Corruption, Error, Lsn, Poison, Result};
pub use layers::collector::{Collector, Replayed, Watermarks};
pub use obs::latency::LatencySummary;
pub use obs::observer::DurabilityObserver;
pub use read::follow::{DirFollower, Follower};
pub use read::reader::{Reader, Record};
pub use recovery::{CheckpointMarker, RecoveryReport, Truncation};
pub use ringwal_platform::file::{FileSystem, FsKind};
pub use wal::{Stats, Wal};
pub use write::ticket::{AppendFuture, Ticket, TicketFuture};
pub use write::transaction::Transaction;
