//! The durability observer: a hook the ring thread calls each time the
//! written or durable watermark moves, for callers that track progress
//! (replication, metrics, a follower's catch-up) without a waiter per LSN.

use std::sync::Arc;

use crate::error::Lsn;

/// Told, on the ring thread, each time the log's watermarks advance.
///
/// Set with [`ConfigBuilder::observer`](crate::ConfigBuilder::observer).
/// Guarantees:
///
/// - [`advanced`](Self::advanced) is called after the new watermarks are
///   visible to [`Wal::written_lsn`](crate::Wal::written_lsn) and
///   [`Wal::durable_lsn`](crate::Wal::durable_lsn) and after the waiters
///   they cover were woken; so an observer never runs ahead of what a
///   ticket reports.
/// - Calls come one at a time, from the ring thread, in ascending order:
///   neither LSN ever goes back, at least one of them rose since the
///   previous call, and `durable <= written`.
/// - The watermarks the log opened with are not reported (read them from
///   the `Wal`); nothing is reported after the log is poisoned.
///
/// The call runs on the ring thread, between I/O completions: it must not
/// block, must not call into the same log (a `sync` or a ticket wait from
/// here deadlocks), and should return in microseconds, or every append's
/// latency pays for it. Hand the values to another thread (an atomic, a
/// channel) for anything slow. A panic in it poisons the log, as a failed
/// write does.
///
/// Cost: a log configured without an observer pays one branch on an
/// `Option` per watermark advance; with one, one dynamic call.
pub trait DurabilityObserver: Send + Sync + 'static {
    /// The watermarks advanced to `written` (every LSN up to it has been
    /// written: survives a process crash) and `durable` (every LSN up to it
    /// is on stable storage: survives a power loss).
    fn advanced(&self, written: Lsn, durable: Lsn);

    /// The log takes `bytes` on disk, over the soft limit set with
    /// [`ConfigBuilder::soft_log_bytes`](crate::ConfigBuilder::soft_log_bytes):
    /// time to snapshot and checkpoint. Called at each segment roll while
    /// the log is over the limit (so it repeats until a checkpoint brings
    /// it under), on the ring thread, with the same rules as
    /// [`advanced`](Self::advanced). `bytes` is the log's segment files'
    /// sizes, the measure [`Stats::disk_bytes`](crate::Stats::disk_bytes)
    /// and the hard limit use. The default does nothing.
    fn log_over_soft_limit(&self, bytes: u64) {
        let _ = bytes;
    }

    /// The log was over its hard limit
    /// ([`ConfigBuilder::max_log_bytes`](crate::ConfigBuilder::max_log_bytes)
    /// with [`WhenFull::DropOldest`](crate::WhenFull::DropOldest)) and
    /// dropped its oldest segment: the LSNs `first..=last` are gone, read
    /// or not. Called once per segment dropped, in LSN order, once the
    /// drop is durable: on the ring thread right after the roll that took
    /// the log over the limit (with the same rules as
    /// [`advanced`](Self::advanced)), or, if a checkpoint was running at
    /// that roll, on the thread that called it, as it finishes (the ring
    /// never waits for a checkpoint). The default does nothing.
    fn records_dropped(&self, first: Lsn, last: Lsn) {
        let _ = (first, last);
    }

    /// A checkpoint or the hard limit's drop would have removed segments
    /// the log's archive does not hold yet, and kept them
    /// ([`ConfigBuilder::release_unarchived`](crate::ConfigBuilder::release_unarchived)):
    /// `held_bytes` of sealed segments stay on disk above the archive
    /// point `archived_lsn`. Called each time that happens, on the thread
    /// that ran the checkpoint or drop (the ring's, for a drop at a roll,
    /// with the same rules as [`advanced`](Self::advanced)). A log over
    /// its hard limit with [`WhenFull::DropOldest`](crate::WhenFull::DropOldest)
    /// stays over it until the archive catches up. The default does
    /// nothing.
    fn log_held_by_archive(&self, held_bytes: u64, archived_lsn: Lsn) {
        let _ = (held_bytes, archived_lsn);
    }
}

/// The configured observer, if any, behind a `Debug` that names no type.
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(pub Option<Arc<dyn DurabilityObserver>>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}
