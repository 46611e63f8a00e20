//! What leaves the log, and when: checkpoints (whole segments at or
//! below an LSN the caller's snapshot covers) and the hard size limit's
//! two policies: waiting for a checkpoint (`WhenFull::Block`, decided in
//! the reservation, where a roll is decided) or dropping the oldest
//! segments (`DropOldest`, here, called by the ring right after it
//! installs a segment).
//!
//! Architecture invariant: nothing here waits for anything but I/O; the
//! ring never waits on a checkpoint, only producers do (`Block`).

use std::sync::atomic::Ordering;

use crate::config::WhenFull;
use crate::error::{Error, Lsn, Poison, Result};
use crate::format::Manifest;
use crate::lifecycle;
use crate::state::Shared;

/// Whether a checkpoint may keep removed segments as spares to reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recycle {
    /// Up to [`lifecycle::RECYCLE_KEEP`] are renamed to spare names.
    Yes,
    /// Every removed segment is unlinked: the size limit wants the space.
    No,
}

fn poisoned(sh: &Shared) -> Error {
    sh.acks
        .poison_cause()
        .expect("called right after poisoning")
        .error()
}

/// Remove whole sealed segments whose every record is at or below
/// `up_to`, oldest first (never the newest listed), then fsync the
/// directory; `Wal::checkpoint`'s documented contract. Returns how many
/// were removed.
pub(crate) fn checkpoint(sh: &Shared, up_to: Lsn, recycle: Recycle) -> Result<usize> {
    if let Some(p) = sh.acks.poison_cause() {
        return Err(p.error());
    }
    let mut segs = sh.segments.lock().unwrap_or_else(|p| p.into_inner());
    let going = (1..segs.len())
        .take_while(|&i| segs[i].base - 1 <= up_to)
        .count();
    if going == 0 {
        return Ok(0);
    }
    // The manifest first: from now on it promises only what stays, so
    // a crash part way leaves more segments than it promises, never
    // fewer. A failed write of it poisons, as any failed sync does.
    let m = Manifest {
        oldest_lsn: segs[going].base,
        durable_lsn: sh.acks.durable(),
        handed_out: sh.next_lsn.load(Ordering::Acquire) - 1,
        ..sh.manifest.get()
    };
    if let Err(e) = sh.manifest.raise(m) {
        sh.poison(Poison::from_error(
            "writing the manifest at a checkpoint failed",
            e,
        ));
        return Err(poisoned(sh));
    }
    let room = if sh.closing.load(Ordering::SeqCst) || recycle == Recycle::No {
        0
    } else {
        sh.recycled.room()
    };
    let mut recycled = Vec::new();
    let mut removed = 0;
    let mut failed = None;
    for _ in 0..going {
        let keep = recycled.len() < room;
        // A segment leaves the list only once its file is gone, so the
        // list always says what is on disk, whatever fails.
        match lifecycle::retire(&*sh.cfg.vfs, &sh.dir, &segs[0], keep) {
            Ok(spare) => {
                segs.remove(0);
                recycled.extend(spare);
                removed += 1;
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if removed > 0 {
        sh.index().prune_below(segs[0].base);
    }
    drop(segs);
    if removed > 0 {
        // Producers blocked at the size limit wait for exactly this.
        let mut r = sh.lock();
        r.live_segments = r
            .live_segments
            .checked_sub(removed as u64)
            .expect("the reservation counts every listed segment");
        drop(r);
        sh.space.notify_all();
    }
    if removed > 0 {
        if let Err(e) = sh.cfg.vfs.sync_dir(sh.dir.path()) {
            // Never retried: after a failed fsync the renames and
            // unlinks may or may not be durable.
            let e = Error::io(sh.dir.path(), e);
            sh.poison(Poison::from_error(
                "syncing the directory at a checkpoint failed",
                e,
            ));
            return Err(poisoned(sh));
        }
    }
    // Only now that the renames are durable may the files be changed:
    // before, a crash could bring back the old name over new contents.
    if !recycled.is_empty() {
        sh.recycled.add(recycled);
    }
    crate::trace::event!(info, dir = %sh.dir.path().display(), up_to, removed, "checkpoint removed segments");
    match failed {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

/// With `WhenFull::DropOldest`, right after the ring installed a new
/// segment: drop the oldest segments until the listed ones fit the
/// limit again, telling the observer and `Stats` exactly which LSNs
/// went. On the ring thread, so the log is over its limit by the new
/// segment only until this returns, and never by more: the next roll
/// comes after it.
///
/// Cost: per segment dropped, a manifest write, an unlink and a
/// directory fsync (`checkpoint`'s), on the roll's path.
pub(crate) fn drop_over_limit(sh: &Shared) -> Result<()> {
    let (Some(max), WhenFull::DropOldest) = (sh.cfg.max_log_bytes, sh.cfg.when_full) else {
        return Ok(());
    };
    loop {
        let (first, last) = {
            let segs = sh.segments.lock().unwrap_or_else(|p| p.into_inner());
            if segs.len() as u64 * sh.cfg.segment_bytes <= max {
                return Ok(());
            }
            match segs.get(..2) {
                Some([oldest, next]) => (oldest.base, next.base - 1),
                // The limit is at least two segments.
                _ => unreachable!("over a limit of two segments with fewer listed"),
            }
        };
        let removed = checkpoint(sh, last, Recycle::No)?;
        assert_eq!(removed, 1, "the oldest of several listed segments goes");
        let dropped = last + 1 - first;
        sh.counters
            .dropped_records
            .fetch_add(dropped, Ordering::Relaxed);
        *sh.last_dropped.lock().unwrap_or_else(|p| p.into_inner()) = Some((first, last));
        crate::trace::event!(warn, dir = %sh.dir.path().display(), first, last, "log over its size limit: dropped the oldest segment");
        if let Some(o) = &sh.cfg.observer.0 {
            o.records_dropped(first, last);
        }
    }
}
