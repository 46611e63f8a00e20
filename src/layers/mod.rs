//! Layers over the engine for particular users: the telemetry collector,
//! the channel API, and the tokio blocking-pool surface.

pub mod channel;
pub mod collector;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "tokio")]
mod pool;
