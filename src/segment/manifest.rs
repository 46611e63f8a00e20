//! A node's manifest on disk (the bytes are `format::Manifest`): read at
//! open, replaced atomically whenever a segment is installed, at a
//! checkpoint and at close, each time carrying only values that grew.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ringwal_platform::Vfs;

use crate::at_rest::format::{self, Manifest};
use crate::error::{Corruption, Error, Lsn, Poison, Result};
use crate::segment::durable;
use crate::segment::set::LogDir;
use crate::sync::lock_order::{Rank, Ranked, RankedGuard};

/// The node's manifest, or `None` if it has none (a log from before
/// manifests, or one whose first open stopped before writing it). A file
/// that is there but does not decode is `Corrupt`.
///
/// Cost: an open and a 64-byte read.
pub(crate) fn read(vfs: &dyn Vfs, dir: &LogDir) -> Result<Option<Manifest>> {
    let path = dir.manifest();
    let Some(bytes) = durable::read_small(vfs, &path)? else {
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

/// What a node's segments on disk look like, as far as the manifest's
/// promises go: the oldest and newest segment listed, and the last LSN
/// found in them with the file it was found in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnDisk<'a> {
    pub oldest: Option<Lsn>,
    pub newest: Option<Lsn>,
    pub last_lsn: Lsn,
    pub last_file: Option<&'a Path>,
}

/// The first promise of `m` that the segments on disk break, if any: the
/// newest segment it names is there, no segment it still keeps is gone
/// from the front, and every LSN it says was durable is there. The one
/// rule recovery, `verify` and every reader of a directory hold a log to,
/// so that none of them ends short where another reports a loss. Cost:
/// a few comparisons.
pub(crate) fn broken_promise(m: &Manifest, dir: &LogDir, disk: OnDisk<'_>) -> Option<Error> {
    let newest = disk.newest.unwrap_or(0);
    if newest < m.newest_base {
        return Some(Error::Gap {
            file: dir.segment(m.newest_base).path,
            expected: m.newest_base,
            found: newest,
        });
    }
    if let Some(first) = disk.oldest.filter(|&b| b > m.oldest_lsn.max(1)) {
        return Some(Error::Gap {
            file: dir.segment(first).path,
            expected: m.oldest_lsn,
            found: first,
        });
    }
    (disk.last_lsn < m.durable_lsn).then(|| Error::Lost {
        file: disk
            .last_file
            .map_or_else(|| dir.manifest(), Path::to_path_buf),
        durable: m.durable_lsn,
        last: disk.last_lsn,
    })
}

/// The highest LSN a writer of this process handed out before it was
/// poisoned, by log id: what the next open of that log in this process
/// resumes above ([`handed_out_by_failed_writer`]).
///
/// A failed write's LSN was handed to its producer (and to an
/// `append_then` hook's list, a collector's shard) before the write
/// failed, and nothing on disk records it: the disk is failing, so the
/// manifest is written no more (invariant 4), and strict recovery would
/// resume right after the last record on disk and give that LSN to
/// another record, while the consumers that saw it live on in this
/// process. Memory is the one record that cannot fail, and it lasts
/// exactly as long as they do: after the process ends, no consumer
/// holds the LSN but what it published, which a collector burns past
/// at its open (its invariant 4).
static FAILED_WRITERS: std::sync::Mutex<Vec<(u64, Lsn)>> = std::sync::Mutex::new(Vec::new());

/// A writer of the log `log_id` was poisoned after handing out LSNs up
/// to `handed_out`, and hands out no more: remember them for the next
/// open in this process. Call it once no LSN can be handed out any
/// more (the reservation has seen the poison). Cost: one lock and a
/// scan of one entry per log poisoned in this process.
pub(crate) fn failed_writer(log_id: u64, handed_out: Lsn) {
    let mut all = FAILED_WRITERS.lock().unwrap_or_else(|p| p.into_inner());
    match all.iter_mut().find(|(id, _)| *id == log_id) {
        Some((_, h)) => *h = (*h).max(handed_out),
        None => all.push((log_id, handed_out)),
    }
}

/// The highest LSN a poisoned writer of the log `log_id` in this process
/// handed out ([`failed_writer`]); 0 if none was poisoned. Recovery
/// resumes above it and records the LSNs between as given up, so none is
/// handed out twice. Cost: one lock and a short scan.
pub(crate) fn handed_out_by_failed_writer(log_id: Option<u64>) -> Lsn {
    let Some(log_id) = log_id else { return 0 };
    let all = FAILED_WRITERS.lock().unwrap_or_else(|p| p.into_inner());
    all.iter()
        .find(|(id, _)| *id == log_id)
        .map_or(0, |&(_, h)| h)
}

/// Replace the node's manifest with `m`, atomically and durably.
pub(crate) fn write(vfs: &dyn Vfs, dir: &LogDir, m: &Manifest) -> Result<()> {
    debug_assert_eq!(
        m.node,
        dir.node(),
        "a manifest goes under its own node's name"
    );
    durable::atomic_write_in(
        vfs,
        dir.path(),
        &format::manifest_file_name(dir.node()),
        &m.encode(),
        dir.file_mode(),
    )
}

/// The writer's manifest: the last one written, and the one lock that
/// orders every replacement (rolls on the preparer thread, checkpoints on
/// the caller's, close on the ring thread).
pub(crate) struct Keeper {
    vfs: Arc<dyn Vfs>,
    dir: LogDir,
    current: Ranked<Current>,
    /// A raise handed over by a caller that must not wait for another's
    /// write (the preparer, whose spares the ring waits for): the writer
    /// holding `current` writes it before it lets go. Taken after
    /// `current` when both are held, or with `current` only tried.
    handed_over: Ranked<Option<Manifest>>,
    /// A copy of the manifest as last written, behind a lock never held
    /// across I/O, so that [`get`](Keeper::get) (the ring's roll asks)
    /// never waits for a write.
    written: Ranked<Manifest>,
    /// Set once the log is poisoned (see [`stop`](Keeper::stop)).
    stopped: AtomicBool,
}

/// The manifest as last written, and whether a write of it failed.
struct Current {
    manifest: Manifest,
    failed: bool,
}

impl Keeper {
    /// Keep `m`, which is on disk already.
    pub fn new(vfs: Arc<dyn Vfs>, dir: LogDir, m: Manifest) -> Keeper {
        assert!(
            m.durable_lsn <= m.handed_out && m.oldest_lsn <= m.newest_base,
            "a manifest promises only LSNs handed out, oldest segment first"
        );
        Keeper {
            vfs,
            dir,
            current: Ranked::new(
                Rank::ManifestWrite,
                Current {
                    manifest: m,
                    failed: false,
                },
            ),
            handed_over: Ranked::new(Rank::ManifestHandOver, None),
            written: Ranked::new(Rank::ManifestCopy, m),
            stopped: AtomicBool::new(false),
        }
    }

    /// The log is poisoned: start no more writes. The failure may have
    /// been a directory fsync's on another thread, and a manifest write
    /// ends in one, which would follow the failed one (invariant 4). A
    /// write already under way finishes. Cost: one atomic store.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// The manifest as last written. Never waits for a write in
    /// progress. Cost: one uncontended lock.
    pub fn get(&self) -> Manifest {
        *self.written.lock()
    }

    /// Raise the manifest's fields to at least `to`'s (none ever moves
    /// back) and, if any moved, write it. Holding the lock across the
    /// write keeps the file's successive versions in the order they were
    /// decided. After a write failed or the log was poisoned otherwise
    /// (see [`stop`](Keeper::stop)), none is tried again: the old
    /// manifest stands, which never promises too much. Cost: nothing if
    /// nothing grew; otherwise one atomic write.
    pub fn raise(&self, to: Manifest) -> Result<()> {
        let mut state = self.current.lock();
        let raised = self.raise_locked(&mut state, to);
        raised.and(self.write_handed_over(state))
    }

    /// [`raise`](Self::raise) without waiting: if another raise is being
    /// written now (a checkpoint's, whose fsyncs can take as long as the
    /// disk likes), hand `to` to that writer, who writes it before it
    /// lets go and gets its error. For the preparer, which must not make
    /// the ring's next spare wait for a checkpoint. Cost: as `raise`, or
    /// two uncontended locks when handed over.
    pub fn raise_or_hand_over(&self, to: Manifest) -> Result<()> {
        let mut slot = self.handed_over.lock();
        *slot = Some(merged(slot.take(), to));
        // The holder takes the slot before it lets go: it checks the slot
        // under this lock, which is held until this returns.
        let Some(state) = self.current.try_lock() else {
            return Ok(());
        };
        drop(slot);
        self.write_handed_over(state)
    }

    /// Write what was handed over while `state` was held, then let go,
    /// with the slot's lock held so that nothing is handed over between
    /// the last look and the release.
    fn write_handed_over(&self, mut state: RankedGuard<'_, Current>) -> Result<()> {
        loop {
            let mut slot = self.handed_over.lock();
            let Some(to) = slot.take() else {
                drop(state);
                return Ok(());
            };
            drop(slot);
            self.raise_locked(&mut state, to)?;
        }
    }
}

/// The fields of `a` and `b`, each the higher.
fn merged(a: Option<Manifest>, b: Manifest) -> Manifest {
    let Some(a) = a else { return b };
    Manifest {
        newest_base: a.newest_base.max(b.newest_base),
        durable_lsn: a.durable_lsn.max(b.durable_lsn),
        handed_out: a.handed_out.max(b.handed_out),
        oldest_lsn: a.oldest_lsn.max(b.oldest_lsn),
        ..a
    }
}

impl Keeper {
    /// Raise `state`'s manifest to at least `to`'s fields and write it if
    /// any moved; with the keeper's lock held.
    fn raise_locked(&self, state: &mut Current, to: Manifest) -> Result<()> {
        if state.failed {
            return Err(Poison::failed("an earlier write of the manifest failed").error());
        }
        if self.stopped.load(Ordering::Acquire) {
            return Err(Poison::failed("the log is poisoned: the manifest stays as it is").error());
        }
        let cur = &mut state.manifest;
        assert_eq!(
            (to.node, to.log_id),
            (cur.node, cur.log_id),
            "a manifest update for another log"
        );
        let next = merged(Some(*cur), to);
        assert!(
            next.durable_lsn >= cur.durable_lsn && next.handed_out >= cur.handed_out,
            "the manifest's promises are never lowered"
        );
        debug_assert!(
            next.durable_lsn <= next.handed_out,
            "the manifest promises LSN {} durable, only {} handed out",
            next.durable_lsn,
            next.handed_out
        );
        if next == *cur {
            return Ok(());
        }
        if let Err(e) = write(&*self.vfs, &self.dir, &next) {
            state.failed = true;
            return Err(e);
        }
        *cur = next;
        *self.written.lock() = next;
        Ok(())
    }
}
