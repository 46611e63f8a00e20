//! Optional `tracing` events (feature `tracing`), off the hot path only:
//! recovery's repairs, the poison, fallbacks from what was configured,
//! rolls and checkpoints. Without the feature the macros expand to
//! nothing, so the default build neither links `tracing` nor pays a
//! branch for it.
//!
//! Architecture invariant: no event per record or per write; every
//! event marks something an operator would want in a log file.

/// An event at `$level` (`error`, `warn`, `info` or `debug`) with
/// `tracing`'s field syntax, or nothing without the feature.
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        {
            tracing::$level!(target: "ringwal", $($arg)+);
        }
    }};
}

pub(crate) use event;
