//! Observability: latency summaries, the durability observer, tracing
//! events and the metrics export.

pub(crate) mod latency;
pub(crate) mod observer;
pub(crate) mod trace;
