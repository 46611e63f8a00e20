//! ringwal: a write-ahead log engine for latency-critical writers on Linux.
//!
//! Many producers append records from any thread; a dedicated ring thread
//! owns an io_uring and turns their appends into few large, block-aligned
//! writes with several in flight (group commit), each made durable with
//! `RWF_DSYNC` on preallocated, zero-written segments opened with O_DIRECT
//! where the filesystem allows. A portable backend runs the same engine on
//! one blocking I/O thread.
//!
//! ```no_run
//! use ringwal::{Config, Level, Wal};
//!
//! let (wal, report) = Wal::open("/var/lib/app/wal", Config::default())?;
//! println!("recovered {} records", report.records);
//! let ticket = wal.append(0, b"hello")?;
//! ticket.wait(Level::Durable)?; // on stable storage now
//! for rec in wal.reader_from(0)? {
//!     let rec = rec?;
//!     println!("{} {:?}", rec.lsn, rec.payload);
//! }
//! # Ok::<(), ringwal::Error>(())
//! ```
//!
//! See `ARCHITECTURE.md` for the map of the code and `docs/format.md` for
//! the on-disk format.

#![warn(missing_docs)]

mod acks;
pub mod channel;
pub mod collector;
mod config;
mod error;
#[cfg(feature = "metrics")]
mod export;
mod files;
mod follow;
pub mod format;
mod index;
mod latency;
mod ledger;
mod lifecycle;
mod manifest;
mod observer;
mod packing;
mod prefetch;
mod reader;
mod recovery;
mod ring;
mod scan;
mod segments;
mod state;
mod sync_budget;
mod ticket;
mod trace;
mod transaction;
pub mod verify;
mod wal;

pub use collector::{Collector, Replayed, Watermarks};
pub use config::{
    Backend, Config, ConfigBuilder, DirectIo, Durability, Level, RecoveryMode, SyncMethod,
};
pub use error::{Corruption, Error, Lsn, Poison, Result};
pub use follow::{DirFollower, Follower};
pub use format::Kind;
pub use latency::LatencySummary;
pub use observer::DurabilityObserver;
pub use reader::{Reader, Record};
pub use recovery::{CheckpointMarker, RecoveryReport, Truncation};
pub use ticket::{Ticket, TicketFuture};
pub use transaction::Transaction;
pub use wal::{Stats, Wal};
