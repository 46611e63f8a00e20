//! [`MemLogStore`]: openraft's log storage in memory, nothing on disk. A
//! ceiling to measure [`LogStore`](crate::LogStore) against: what openraft
//! and the service cost with no durability at all.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, Vote,
};

type NodeIdOf<C> = <C as RaftTypeConfig>::NodeId;
type Result<T, C> = std::result::Result<T, StorageError<NodeIdOf<C>>>;

struct Inner<C: RaftTypeConfig> {
    log: BTreeMap<u64, C::Entry>,
    vote: Option<Vote<C::NodeId>>,
    committed: Option<LogId<C::NodeId>>,
    last_purged: Option<LogId<C::NodeId>>,
}

/// openraft's log storage ([`RaftLogStorage`]) in a `BTreeMap`: entries,
/// vote and committed log id live in memory only.
///
/// Guarantees nothing across a restart: a node that restarts on it has
/// forgotten its log and its vote, which raft's safety needs kept, so it
/// is for measuring (and tests), never for a cluster whose data matters.
/// `Clone` shares the same log (it is its own `LogReader`).
///
/// Costs: every call takes one lock; an append's callback fires before
/// `append` returns; reads clone the entries.
pub struct MemLogStore<C: RaftTypeConfig> {
    inner: Arc<Mutex<Inner<C>>>,
}

impl<C: RaftTypeConfig> MemLogStore<C> {
    /// An empty store. Cost: one allocation.
    pub fn new() -> Self {
        MemLogStore {
            inner: Arc::new(Mutex::new(Inner {
                log: BTreeMap::new(),
                vote: None,
                committed: None,
                last_purged: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<C>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<C: RaftTypeConfig> Default for MemLogStore<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: RaftTypeConfig> Clone for MemLogStore<C> {
    fn clone(&self) -> Self {
        MemLogStore {
            inner: self.inner.clone(),
        }
    }
}

impl<C: RaftTypeConfig> Debug for MemLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemLogStore")
            .field("entries", &self.lock().log.len())
            .finish_non_exhaustive()
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for MemLogStore<C>
where
    C::Entry: Clone,
{
    /// The entries whose index is in `range`, cloned. Cost: one lock.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, C> {
        Ok(self
            .lock()
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for MemLogStore<C>
where
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, C> {
        let inner = self.lock();
        let last = inner
            .log
            .values()
            .next_back()
            .map(|e| e.get_log_id().clone());
        Ok(LogState {
            last_purged_log_id: inner.last_purged.clone(),
            last_log_id: last.or_else(|| inner.last_purged.clone()),
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), C> {
        self.lock().vote = Some(vote.clone());
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, C> {
        Ok(self.lock().vote.clone())
    }

    async fn save_committed(&mut self, committed: Option<LogId<C::NodeId>>) -> Result<(), C> {
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<C::NodeId>>, C> {
        Ok(self.lock().committed.clone())
    }

    /// Insert the entries and fire `callback` at once.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = self.lock();
            for e in entries {
                inner.log.insert(e.get_log_id().index, e);
            }
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), C> {
        self.lock().log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), C> {
        let mut inner = self.lock();
        inner.log = match log_id.index.checked_add(1) {
            Some(keep) => inner.log.split_off(&keep),
            None => BTreeMap::new(),
        };
        inner.last_purged = Some(log_id);
        Ok(())
    }
}
