//! A small in-memory key-value state machine ([`KvStateMachine`]) and the
//! openraft type configuration that goes with it ([`KvConfig`]).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// The openraft type configuration of the key-value example: `u64`
    /// node ids, [`BasicNode`] addresses, [`KvRequest`] commands and
    /// [`KvResponse`] replies, snapshots as bytes in memory, on tokio.
    pub KvConfig:
        D = KvRequest,
        R = KvResponse,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<KvConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A command to the key-value state machine, carried in a raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvRequest {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: String,
    },
    /// Append `value` to the value of `key` (a key that is not set counts
    /// as empty). Applying the same entry twice would show as `value`
    /// twice, which is what the kill test (`tests/raft/kill.rs`) looks for.
    /// The reply's `previous` is always `None` (the value can be long).
    Append {
        /// The key.
        key: String,
        /// What to add at the end of its value.
        value: String,
    },
    /// Several commands in one entry, applied in order (what
    /// [`Proposer`](crate::Proposer) proposes for the writes that queued
    /// while others were in flight). The reply's `batch` holds one reply
    /// per command, in order.
    Batch(Vec<KvRequest>),
}

impl KvRequest {
    /// Apply this command to `kv`; the reply (for a batch, one reply per
    /// command in `batch`).
    fn apply_to(self, kv: &mut BTreeMap<String, String>) -> KvResponse {
        let previous = match self {
            KvRequest::Set { key, value } => kv.insert(key, value),
            KvRequest::Delete { key } => kv.remove(&key),
            KvRequest::Append { key, value } => {
                kv.entry(key).or_default().push_str(&value);
                None
            }
            KvRequest::Batch(cmds) => {
                let batch = cmds.into_iter().map(|c| c.apply_to(kv)).collect();
                return KvResponse {
                    previous: None,
                    batch,
                };
            }
        };
        KvResponse {
            previous,
            batch: Vec::new(),
        }
    }
}

/// The state machine's reply to one applied entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvResponse {
    /// The key's value before the command (`None` for a blank or
    /// membership entry, an [`Append`](KvRequest::Append), a
    /// [`Batch`](KvRequest::Batch), or a key that was not set).
    pub previous: Option<String>,
    /// For a [`Batch`](KvRequest::Batch): the reply to each of its
    /// commands, in order. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<KvResponse>,
}

/// The state: what a snapshot holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Data {
    last_applied: Option<LogId<u64>>,
    last_membership: StoredMembership<u64, BasicNode>,
    kv: BTreeMap<String, String>,
}

/// The current snapshot: its metadata and bytes (the JSON of a `Data`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stored {
    meta: SnapshotMeta<u64, BasicNode>,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Where snapshots are kept durably, if anywhere.
    path: Option<PathBuf>,
    data: Data,
    snapshot: Option<Stored>,
    /// Snapshots built so far, for unique snapshot ids.
    built: u64,
}

/// An in-memory key-value state machine ([`RaftStateMachine`]): applied
/// entries live in a `BTreeMap`, snapshots are its JSON.
///
/// The state itself is never written to disk. Made with
/// [`new`](Self::new), nothing is: after a restart the state machine is
/// empty, which is right only while the log still holds every entry (no
/// purge). Made with [`open`](Self::open), every snapshot built or
/// installed is also written durably to a file, and a reopen starts from
/// the last one; openraft then re-applies the committed entries after it
/// from the log (which a purge never takes past a snapshot). `Clone`
/// shares the same state, so the application can keep a handle to read
/// from ([`get`](Self::get)) while openraft owns another.
#[derive(Clone, Debug, Default)]
pub struct KvStateMachine {
    inner: Arc<Mutex<Inner>>,
}

impl KvStateMachine {
    /// An empty state machine. Cost: one allocation.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state machine that keeps its snapshots durably in the file
    /// `path` (a CRC-framed checkpoint file, replaced atomically), starting
    /// from the snapshot there if there is one.
    ///
    /// Cost: one read and JSON decode of the snapshot file. Blocking.
    ///
    /// # Errors
    ///
    /// A read error if the file is damaged (torn, foreign, or not a
    /// snapshot of this state machine) or cannot be read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError<u64>> {
        let path = path.as_ref().to_path_buf();
        let mut inner = Inner {
            path: Some(path.clone()),
            ..Inner::default()
        };
        let bad = |e: &dyn std::error::Error| {
            StorageIOError::read_snapshot(None, openraft::AnyError::error(e))
        };
        if let Some(bytes) = ringwal::files::read_checkpoint(&path).map_err(|e| bad(&e))? {
            let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| bad(&e))?;
            inner.data = serde_json::from_slice(&stored.bytes).map_err(|e| bad(&e))?;
            inner.snapshot = Some(stored);
        }
        Ok(KvStateMachine {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value of `key` in the applied state (a local read: it can lag
    /// the leader). Cost: one short lock and a clone of the value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().data.kv.get(key).cloned()
    }

    /// Every key and value in the applied state, and the id of the last
    /// entry applied, read together (a local read: it can lag the leader).
    /// Cost: one lock held while the whole map is cloned.
    pub fn read_all(&self) -> (Option<LogId<u64>>, BTreeMap<String, String>) {
        let inner = self.lock();
        (inner.data.last_applied, inner.data.kv.clone())
    }
}

impl Inner {
    /// Make `stored` the current snapshot: first in the snapshot file,
    /// durably, when there is one (so a crash leaves the old snapshot or
    /// the new one, whole), then in memory.
    fn keep(&mut self, stored: Stored) -> Result<(), StorageError<u64>> {
        if let Some(path) = &self.path {
            let signature = Some(stored.meta.signature());
            let bytes = serde_json::to_vec(&stored)
                .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
            ringwal::files::write_checkpoint(path, &bytes)
                .map_err(|e| StorageIOError::write_snapshot(signature, &e))?;
        }
        self.snapshot = Some(stored);
        Ok(())
    }
}

impl RaftSnapshotBuilder<KvConfig> for KvStateMachine {
    /// Serialize the whole state to JSON and keep it as the current
    /// snapshot (durably first, for a state machine made with
    /// [`open`](KvStateMachine::open)). Cost: one lock held for the encode
    /// and, with a file, its atomic durable rewrite (a write, an
    /// fdatasync, a rename, a directory fsync); one copy of the bytes.
    async fn build_snapshot(&mut self) -> Result<Snapshot<KvConfig>, StorageError<u64>> {
        let mut inner = self.lock();
        let bytes = serde_json::to_vec(&inner.data)
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        inner.built += 1;
        let last = inner.data.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: inner.data.last_membership.clone(),
            snapshot_id: format!(
                "{}-{}-{}",
                last.map_or(0, |l| l.leader_id.term),
                last.map_or(0, |l| l.index),
                inner.built
            ),
        };
        inner.keep(Stored {
            meta: meta.clone(),
            bytes: bytes.clone(),
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<KvConfig> for KvStateMachine {
    type SnapshotBuilder = Self;

    /// The last applied log id and membership. Cost: one short lock and a
    /// clone of the membership.
    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let inner = self.lock();
        Ok((inner.data.last_applied, inner.data.last_membership.clone()))
    }

    /// Apply `entries` in order, one reply each. Cost: one lock for the
    /// whole batch; a map update per command (each command of a
    /// [`KvRequest::Batch`] too).
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<KvResponse>, StorageError<u64>>
    where
        I: IntoIterator<Item = openraft::Entry<KvConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut inner = self.lock();
        let mut replies = Vec::new();
        for entry in entries {
            inner.data.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => KvResponse::default(),
                EntryPayload::Normal(cmd) => cmd.apply_to(&mut inner.data.kv),
                EntryPayload::Membership(m) => {
                    inner.data.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    KvResponse::default()
                }
            };
            replies.push(reply);
        }
        Ok(replies)
    }

    /// A handle to this same state machine. Cost: one `Arc` clone.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// An empty in-memory buffer to receive a snapshot into. Cost: one
    /// allocation.
    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// Replace the state with the snapshot's and keep it as the current
    /// snapshot (durably first, for a state machine made with
    /// [`open`](KvStateMachine::open)). Cost: one JSON decode; one lock;
    /// with a file, its atomic durable rewrite.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let bytes = snapshot.into_inner();
        let data: Data = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut inner = self.lock();
        inner.keep(Stored {
            meta: meta.clone(),
            bytes,
        })?;
        inner.data = data;
        Ok(())
    }

    /// The current snapshot, if one was built or installed. Cost: a copy
    /// of its bytes.
    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<KvConfig>>, StorageError<u64>> {
        let inner = self.lock();
        Ok(inner.snapshot.as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.bytes.clone())),
        }))
    }
}
