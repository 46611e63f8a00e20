//! A node's manifest on disk (the bytes are `format::Manifest`): read at
//! open, replaced atomically whenever a segment is installed, at a
//! checkpoint and at close, each time carrying only values that grew.

use std::sync::{Arc, Mutex};

use ringwal_platform::Vfs;

use crate::error::{Corruption, Error, Poison, Result};
use crate::files;
use crate::format::{self, Manifest};
use crate::segments::LogDir;

/// The node's manifest, or `None` if it has none (a log from before
/// manifests, or one whose first open stopped before writing it). A file
/// that is there but does not decode is `Corrupt`.
///
/// Cost: an open and a 64-byte read.
pub(crate) fn read(vfs: &dyn Vfs, dir: &LogDir) -> Result<Option<Manifest>> {
    let path = dir.manifest();
    let Some(bytes) = files::read_small(vfs, &path)? else {
        return Ok(None);
    };
    match Manifest::decode(&bytes) {
        Ok(m) if m.node == dir.node() => Ok(Some(m)),
        Ok(m) => Err(Error::corrupt(
            &path,
            0,
            Corruption::Manifest(format!("of node {}, not {}", m.node, dir.node())),
        )),
        Err(e) => Err(Error::corrupt(
            &path,
            0,
            Corruption::Manifest(e.to_string()),
        )),
    }
}

/// Replace the node's manifest with `m`, atomically and durably.
pub(crate) fn write(vfs: &dyn Vfs, dir: &LogDir, m: &Manifest) -> Result<()> {
    files::atomic_write_in(
        vfs,
        dir.path(),
        &format::manifest_file_name(dir.node()),
        &m.encode(),
    )
}

/// The writer's manifest: the last one written, and the one lock that
/// orders every replacement (rolls on the preparer thread, checkpoints on
/// the caller's, close on the ring thread).
pub(crate) struct Keeper {
    vfs: Arc<dyn Vfs>,
    dir: LogDir,
    current: Mutex<Current>,
}

/// The manifest as last written, and whether a write of it failed.
struct Current {
    manifest: Manifest,
    failed: bool,
}

impl Keeper {
    /// Keep `m`, which is on disk already.
    pub fn new(vfs: Arc<dyn Vfs>, dir: LogDir, m: Manifest) -> Keeper {
        Keeper {
            vfs,
            dir,
            current: Mutex::new(Current {
                manifest: m,
                failed: false,
            }),
        }
    }

    /// The manifest as last written.
    pub fn get(&self) -> Manifest {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .manifest
    }

    /// Raise the manifest's fields to at least `to`'s (none ever moves
    /// back) and, if any moved, write it. Holding the lock across the
    /// write keeps the file's successive versions in the order they were
    /// decided. After a write failed (the log is poisoned then), none is
    /// tried again: the old manifest stands, which never promises too
    /// much. Cost: nothing if nothing grew; otherwise one atomic write.
    pub fn raise(&self, to: Manifest) -> Result<()> {
        let mut state = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if state.failed {
            return Err(Poison::failed("an earlier write of the manifest failed").error());
        }
        let cur = &mut state.manifest;
        assert_eq!(
            (to.node, to.log_id),
            (cur.node, cur.log_id),
            "a manifest update for another log"
        );
        let next = Manifest {
            newest_base: cur.newest_base.max(to.newest_base),
            durable_lsn: cur.durable_lsn.max(to.durable_lsn),
            handed_out: cur.handed_out.max(to.handed_out),
            oldest_lsn: cur.oldest_lsn.max(to.oldest_lsn),
            ..*cur
        };
        if next == *cur {
            return Ok(());
        }
        if let Err(e) = write(&*self.vfs, &self.dir, &next) {
            state.failed = true;
            return Err(e);
        }
        state.manifest = next;
        Ok(())
    }
}
