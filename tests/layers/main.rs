//! The layers over the log: the collector API, the channel API, the
//! async API on real tokio runtimes and, with the `tokio` feature, the
//! blocking calls moved to tokio's blocking pool.

#[path = "../common/mod.rs"]
mod common;

mod async_api;
mod channel;
mod collector;
#[cfg(feature = "tokio")]
mod tokio_pool;
