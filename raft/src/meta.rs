//! The small durable metadata file beside the log: vote and last purged
//! log id (and, in stores written before `COMMIT_STREAM`, the committed
//! log id), rewritten whole on every change.

use std::path::{Path, PathBuf};

use openraft::{LogId, NodeId, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

/// File name of the metadata file inside the store's directory.
/// (Public: the store's directory layout is part of its contract.)
pub const META_FILE: &str = "raft-meta";

/// What the metadata file holds. Serialized as JSON inside a CRC-framed
/// checkpoint file (`ringwal::files::write_checkpoint`), so a torn or
/// foreign file is reported as damage, never taken for good.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct Meta<NID: NodeId> {
    pub vote: Option<Vote<NID>>,
    /// No longer written (the committed log id is a record on
    /// `COMMIT_STREAM`); read from stores written before.
    pub committed: Option<LogId<NID>>,
    pub last_purged: Option<LogId<NID>>,
}

/// The metadata file of one store, and the last contents written to it.
#[derive(Debug)]
pub(crate) struct MetaFile<NID: NodeId> {
    path: PathBuf,
    current: Meta<NID>,
}

impl<NID: NodeId> MetaFile<NID> {
    /// Load `dir/raft-meta`, or start from the empty metadata if there is
    /// none. Cost: one open and read of a file of a few hundred bytes.
    pub fn load(dir: &Path) -> Result<Self, StorageError<NID>> {
        let path = dir.join(META_FILE);
        let current = match ringwal::files::read_checkpoint(&path)
            .map_err(|e| StorageIOError::read(&e))?
        {
            None => Meta::default(),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read(&e))?,
        };
        Ok(MetaFile { path, current })
    }

    /// The contents last written (or loaded).
    pub fn get(&self) -> &Meta<NID> {
        &self.current
    }

    /// Replace the file's contents with `next`, durably, and only then make
    /// it the current one: on error the file and `get()` still hold the
    /// previous contents. Cost: as `ringwal::files::write_checkpoint` (a
    /// create, a write, an fdatasync, a rename and a directory fsync).
    pub fn store(&mut self, next: Meta<NID>) -> Result<(), StorageError<NID>> {
        let bytes = serde_json::to_vec(&next).map_err(|e| StorageIOError::write(&e))?;
        ringwal::files::write_checkpoint(&self.path, &bytes)
            .map_err(|e| StorageIOError::write(&e))?;
        self.current = next;
        Ok(())
    }
}
