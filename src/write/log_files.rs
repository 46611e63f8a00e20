//! The files of the log the engine keeps track of while it runs: the
//! segment set, the sparse index over it, the recycled spares and the
//! manifest keeper. Owned by `Shared`; its fields are this file's.

use std::sync::Arc;

use crate::segment::index::SparseIndex;
use crate::segment::lifecycle::RecyclePool;
use crate::segment::manifest::Keeper;
use crate::segment::set::SegmentSet;
use crate::sync::lock_order::{Rank, Ranked, RankedGuard};

pub(crate) struct LogFiles {
    /// Taken after the checkpoint lock and before the reservation lock
    /// when held with either.
    set: Ranked<SegmentSet>,
    /// Where reads of an LSN may start inside its segment. Taken after the
    /// reservation lock when both are held (a producer adding a point),
    /// never the other way round.
    index: Ranked<SparseIndex>,
    /// Checkpointed segments waiting for the preparer to reuse them; see
    /// `Wal::checkpoint`.
    recycled: Arc<RecyclePool>,
    /// The manifest, raised at rolls, checkpoints and close.
    manifest: Arc<Keeper>,
}

impl LogFiles {
    pub fn new(set: SegmentSet, index: SparseIndex, manifest: Keeper) -> LogFiles {
        LogFiles {
            set: Ranked::new(Rank::SegmentSet, set),
            index: Ranked::new(Rank::Index, index),
            recycled: Arc::default(),
            manifest: Arc::new(manifest),
        }
    }

    /// The log's segment set. Held only for list updates and copies,
    /// never across I/O, so the ring's roll never waits for a checkpoint's
    /// syscalls.
    pub fn set(&self) -> RankedGuard<'_, SegmentSet> {
        // Every update is one push, pop or remove that cannot panic half
        // way: a poisoned mutex carries no information.
        self.set.lock()
    }

    /// The sparse index. Taken after the reservation lock when both are
    /// held, never the other way round.
    pub fn index(&self) -> RankedGuard<'_, SparseIndex> {
        // Every update is one push or one pruning loop that cannot panic
        // half-way: a poisoned mutex carries no information.
        self.index.lock()
    }

    /// The spares checkpoints leave for reuse.
    pub fn recycled(&self) -> &Arc<RecyclePool> {
        &self.recycled
    }

    /// The manifest keeper.
    pub fn manifest(&self) -> &Arc<Keeper> {
        &self.manifest
    }
}
