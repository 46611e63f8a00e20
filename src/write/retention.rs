//! What leaves the log, and when: checkpoints (whole segments at or
//! below an LSN the caller's snapshot covers) and the hard size limit's
//! two policies: waiting for a checkpoint (`WhenFull::Block`, decided in
//! the reservation, where a roll is decided) or dropping the oldest
//! segments (`DropOldest`, here, called by the ring right after it
//! installs a segment).
//!
//! Architecture invariant: nothing here waits for anything but I/O and
//! the checkpoint turn; the ring never waits on a checkpoint (it defers
//! its drop to the one running), only producers (`Block`) and other
//! checkpoints do, and no lock the ring takes is held across I/O.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::at_rest::format::Manifest;
use crate::config::WhenFull;
use crate::error::{Error, Lsn, Poison, Result};
use crate::segment::{archived, lifecycle};
use crate::sync::lock_order::{Rank, Token};
use crate::write::shared::Shared;

/// Whether a checkpoint may keep removed segments as spares to reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recycle {
    /// Up to [`lifecycle::RECYCLE_KEEP`] are renamed to spare names.
    Yes,
    /// Every removed segment is unlinked: the size limit wants the space.
    No,
}

fn poisoned(sh: &Shared) -> Error {
    sh.acks()
        .poison_cause()
        .expect("called right after poisoning")
        .error()
}

/// Who is removing segments now: one checkpoint at a time, since each
/// plans from the list and then removes what it planned with the list's
/// lock released (the ring's roll takes that lock and must never wait for
/// a checkpoint's fsyncs and unlinks).
#[derive(Default)]
pub(crate) struct Retention {
    state: Mutex<Turn>,
    /// The last LSN range `WhenFull::DropOldest` dropped, for `Stats`.
    last_dropped: Mutex<Option<(Lsn, Lsn)>>,
    /// The archive point last read (`archived::read`), plus one; 0: the
    /// log had no archive then. For `Stats`, which does no I/O.
    archived: AtomicU64,
    /// Signalled when a checkpoint finishes, for a caller waiting its turn.
    done: Condvar,
}

#[derive(Default)]
struct Turn {
    /// A checkpoint is removing segments.
    busy: bool,
    /// The ring found the log over its hard limit while a checkpoint was
    /// busy: that checkpoint's caller runs the drop before it lets go.
    drop_due: bool,
}

/// Proof that the caller has the checkpoint turn, and its place in the
/// lock order.
struct Held {
    _order: Token,
}

impl Retention {
    /// The last LSN range the size limit dropped, if any.
    pub fn last_dropped(&self) -> Option<(Lsn, Lsn)> {
        *self.last_dropped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember that `first..=last` was dropped.
    fn dropped(&self, first: Lsn, last: Lsn) {
        // One value replaced whole: a poisoned mutex carries no
        // information.
        *self.last_dropped.lock().unwrap_or_else(|p| p.into_inner()) = Some((first, last));
    }

    /// The archive point as last read: `None` when the log had no
    /// archive then. No I/O.
    pub fn archived_lsn(&self) -> Option<Lsn> {
        self.archived.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Remember the archive point just read (`None`: no archive).
    pub fn saw_archived(&self, lsn: Option<Lsn>) {
        self.archived
            .store(lsn.map_or(0, |l| l.saturating_add(1)), Ordering::Relaxed);
    }

    fn turn(&self) -> MutexGuard<'_, Turn> {
        // Two flags set and cleared whole: a poisoned mutex carries no
        // information.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for the turn. For callers that may block (a user's
    /// checkpoint), never the ring.
    fn take(&self) -> Held {
        let mut t = self.turn();
        while t.busy {
            t = self.done.wait(t).unwrap_or_else(|p| p.into_inner());
        }
        t.busy = true;
        Held {
            _order: Token::taken(Rank::CheckpointTurn, true),
        }
    }

    /// The turn if it is free now; else the holder is told to run the
    /// hard limit's drop when it is done. For the ring: no wait.
    fn try_take_or_defer(&self) -> Option<Held> {
        let mut t = self.turn();
        if t.busy {
            t.drop_due = true;
            return None;
        }
        t.busy = true;
        Some(Held {
            _order: Token::taken(Rank::CheckpointTurn, false),
        })
    }

    /// Give the turn back, unless a drop became due meanwhile: then keep
    /// it and return it for that drop.
    fn give_back(&self, held: Held) -> Option<Held> {
        let mut t = self.turn();
        assert!(t.busy, "the turn is given back by its holder");
        if std::mem::take(&mut t.drop_due) {
            return Some(held);
        }
        t.busy = false;
        drop(t);
        self.done.notify_one();
        None
    }
}

/// Remove whole sealed segments whose every record is at or below
/// `up_to`, oldest first (never the newest listed), then fsync the
/// directory; `Wal::checkpoint`'s documented contract. Returns how many
/// were removed. Waits for a checkpoint already running; if the ring
/// found the log over its hard limit meanwhile, runs that drop too
/// before it returns.
pub(crate) fn checkpoint(sh: &Shared, up_to: Lsn, recycle: Recycle) -> Result<usize> {
    let held = sh.retention().take();
    let removed = remove_upto(sh, &held, up_to, recycle);
    let dropped = finish(sh, held);
    let removed = removed?;
    dropped.map(|()| removed)
}

/// Give the turn back, first running every drop that became due while
/// it was held.
fn finish(sh: &Shared, mut held: Held) -> Result<()> {
    let mut result = Ok(());
    while let Some(again) = sh.retention().give_back(held) {
        if result.is_ok() {
            result = drop_while_over(sh, &again);
        }
        held = again;
    }
    result
}

/// The checkpoint itself, with the turn held.
fn remove_upto(sh: &Shared, _held: &Held, up_to: Lsn, recycle: Recycle) -> Result<usize> {
    if let Some(p) = sh.acks().poison_cause() {
        return Err(p.error());
    }
    // Planned from a copy: only a checkpoint removes segments, and only
    // the holder of the turn checkpoints, so these stay the oldest while
    // the lock is released. A roll only adds or replaces the newest,
    // which is never planned away.
    let wanted = up_to;
    let up_to = archive_hold(sh, up_to)?;
    let (going, oldest_kept) = {
        let set = sh.segment_set();
        let going = set.releasable(up_to).to_vec();
        if up_to < wanted && set.releasable(wanted).len() > going.len() {
            report_held(sh, &set, up_to);
        }
        assert!(
            going.len() < set.len().max(1),
            "a checkpoint never removes the newest segment"
        );
        let kept = set.get(going.len()).map(|s| s.file.base);
        (going, kept)
    };
    let Some(oldest_kept) = oldest_kept.filter(|_| !going.is_empty()) else {
        return Ok(0);
    };
    // Every record of the segments going is below the oldest kept.
    assert!(
        oldest_kept <= up_to.saturating_add(1),
        "a checkpoint removes no segment holding an LSN above its own"
    );
    raise_manifest(sh, oldest_kept)?;
    let room = if sh.is_closing() || recycle == Recycle::No {
        0
    } else {
        sh.files().recycled().room()
    };
    let mut recycled = Vec::new();
    let (mut removed, mut freed) = (0, 0);
    let mut failed = None;
    for seg in &going {
        let keep = recycled.len() < room;
        // The kept floor rises before the data goes: a segment leaves the
        // list (which `oldest_lsn` and every new reader read) before its
        // file is unlinked or renamed, so a reader that finds the file
        // gone finds the floor above its LSN too, and no answer says a
        // record is both kept and gone. If the unlink then fails, the
        // file stays on disk below the floor, where the manifest already
        // no longer promises it: the next open keeps it as an older
        // segment, never as a hole.
        let gone = sh.segment_set().remove_oldest();
        assert_eq!(gone, *seg, "only the checkpoint turn removes segments");
        removed += 1;
        freed += seg.bytes;
        match lifecycle::retire(&*sh.cfg().vfs, sh.dir(), &seg.file, keep) {
            Ok(spare) => recycled.extend(spare),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if removed > 0 {
        release(sh, freed);
        sync_dir_or_poison(sh)?;
    }
    // Only now that the renames are durable may the files be changed:
    // before, a crash could bring back the old name over new contents.
    if !recycled.is_empty() {
        sh.files().recycled().add(recycled);
    }
    crate::obs::trace::event!(info, dir = %sh.dir().path().display(), up_to, removed, "checkpoint removed segments");
    match failed {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

/// `up_to`, lowered to what the log's archive holds, unless the
/// configuration releases unarchived segments. Reads the archive point
/// (a small file another process may be writing) each time: it only
/// rises, so a stale read holds more, never less; a damaged one holds
/// everything.
fn archive_hold(sh: &Shared, up_to: Lsn) -> Result<Lsn> {
    if sh.cfg().release_unarchived {
        return Ok(up_to);
    }
    let point = archived::held_at(&*sh.cfg().vfs, sh.dir())?;
    sh.retention().saw_archived(point);
    Ok(archived::hold(point, up_to))
}

/// The archive held back segments a checkpoint or drop would have
/// removed: tell the trace and the observer how many bytes it holds.
fn report_held(sh: &Shared, set: &crate::segment::set::SegmentSet, archived_lsn: Lsn) {
    let held = set.held_by_archive(archived_lsn);
    crate::obs::trace::event!(warn, dir = %sh.dir().path().display(), archived_lsn, held, "segments kept until the archive holds them");
    if let Some(o) = &sh.cfg().observer.0 {
        o.log_held_by_archive(held, archived_lsn);
    }
}

/// The manifest first: from now on it promises only what stays (from
/// `oldest_kept`), so a crash part way leaves more segments than it
/// promises, never fewer. A failed write of it poisons, as any failed
/// sync does.
fn raise_manifest(sh: &Shared, oldest_kept: Lsn) -> Result<()> {
    let m = Manifest {
        oldest_lsn: oldest_kept,
        durable_lsn: sh.acks().durable(),
        handed_out: sh.next_lsn() - 1,
        ..sh.manifest().get()
    };

    sh.manifest().raise(m).map_err(|e| {
        sh.poison(Poison::from_error(
            "writing the manifest at a checkpoint failed",
            e,
        ));
        poisoned(sh)
    })
}

/// Segments of `freed` bytes are gone: drop their index points and give
/// the room to producers blocked at the size limit, who wait for exactly
/// this.
fn release(sh: &Shared, freed: u64) {
    let oldest = sh.segment_set().oldest_base();
    if let Some(oldest) = oldest {
        sh.index().prune_below(oldest);
    }
    let mut r = sh.lock();
    r.live_bytes = r
        .live_bytes
        .checked_sub(freed)
        .expect("the reservation counts every listed segment's bytes");
    drop(r);
    sh.space_freed(true);
}

/// Make the checkpoint's renames and unlinks durable. Never retried:
/// after a failed fsync they may or may not be.
fn sync_dir_or_poison(sh: &Shared) -> Result<()> {
    sh.cfg().vfs.sync_dir(sh.dir().path()).map_err(|e| {
        let e = Error::io(sh.dir().path(), e);
        sh.poison(Poison::from_error(
            "syncing the directory at a checkpoint failed",
            e,
        ));
        poisoned(sh)
    })
}

/// With `WhenFull::DropOldest`, right after the ring installed a new
/// segment: drop the oldest segments until the listed ones fit the
/// limit again, telling the observer and `Stats` exactly which LSNs
/// went. On the ring thread, which never waits for a user's checkpoint:
/// if one is running, its caller runs the drop as it finishes (on its
/// thread), so the log is over its limit until then.
///
/// Cost: per segment dropped, a manifest write, an unlink and a
/// directory fsync (`checkpoint`'s), on the roll's path.
pub(crate) fn drop_over_limit(sh: &Shared) -> Result<()> {
    if hard_drop_limit(sh).is_none() {
        return Ok(());
    }
    let Some(held) = sh.retention().try_take_or_defer() else {
        return Ok(());
    };
    let dropped = drop_while_over(sh, &held);
    finish(sh, held).and(dropped)
}

/// The hard limit, if the log drops its oldest segments to keep it.
fn hard_drop_limit(sh: &Shared) -> Option<u64> {
    match (sh.cfg().max_log_bytes, sh.cfg().when_full) {
        (Some(max), WhenFull::DropOldest) => Some(max),
        _ => None,
    }
}

/// Drop the oldest segment while the log is over its hard limit, with
/// the turn held.
fn drop_while_over(sh: &Shared, held: &Held) -> Result<()> {
    let Some(max) = hard_drop_limit(sh) else {
        return Ok(());
    };
    loop {
        let (first, last) = {
            let set = sh.segment_set();
            if set.bytes() <= max {
                return Ok(());
            }
            match (set.get(0), set.get(1)) {
                (Some(oldest), Some(next)) => (oldest.file.base, next.file.base - 1),
                // The limit is at least two segments.
                _ => unreachable!("over a limit of two segments with fewer listed"),
            }
        };
        let removed = remove_upto(sh, held, last, Recycle::No)?;
        if removed == 0 {
            // The archive holds it: the log stays over its limit until
            // the archive catches up (`report_held` told the observer).
            return Ok(());
        }
        // With the turn held nothing else removes segments: exactly the
        // oldest one went.
        assert_eq!(removed, 1, "the oldest of several listed segments goes");
        report_dropped(sh, first, last);
    }
}

/// Tell `Stats`, the trace and the observer that `first..=last` went.
fn report_dropped(sh: &Shared, first: Lsn, last: Lsn) {
    let dropped = last + 1 - first;
    sh.counters()
        .dropped_records
        .fetch_add(dropped, Ordering::Relaxed);
    sh.retention().dropped(first, last);
    crate::obs::trace::event!(warn, dir = %sh.dir().path().display(), first, last, "log over its size limit: dropped the oldest segment");
    if let Some(o) = &sh.cfg().observer.0 {
        o.records_dropped(first, last);
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::{mpsc, Arc, Condvar, Mutex};
    use std::time::Duration;

    use ringwal_platform::{OpenHow, RealFs, VFile, Vfs};

    use crate::config::{Config, Level, WhenFull};
    use crate::{Lsn, Wal};

    const SEG: u64 = 64 << 10;

    /// Where a checkpoint is held once the test arms it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Point {
        /// Before its directory sync: a checkpoint whose fsyncs take as
        /// long as a slow disk's can.
        SyncDir,
        /// Right after it unlinked or renamed a segment file: the moment
        /// a reader may find the file gone.
        AfterRetire,
    }

    /// The real file system, except that once armed, the checkpoint
    /// thread (named `checkpoint`) waits at the armed point until the
    /// test lets it go.
    #[derive(Debug, Default)]
    struct Gated {
        /// (armed at, a checkpoint is held, released)
        state: Mutex<(Option<Point>, bool, bool)>,
        changed: Condvar,
    }

    impl Gated {
        fn arm(&self) {
            self.arm_at(Point::SyncDir);
        }
        fn arm_at(&self, at: Point) {
            *self.state.lock().unwrap() = (Some(at), false, false);
        }
        /// Hold the calling thread here if it is the checkpoint and the
        /// gate is armed at `at`.
        fn hold(&self, at: Point) {
            let mut g = self.state.lock().unwrap();
            if std::thread::current().name() == Some("checkpoint") && g.0 == Some(at) {
                g.0 = None;
                g.1 = true;
                self.changed.notify_all();
                drop(self.changed.wait_while(g, |s| !s.2).unwrap());
            }
        }
        fn wait_until_held(&self) {
            let g = self.state.lock().unwrap();
            drop(self.changed.wait_while(g, |s| !s.1).unwrap());
        }
        fn release(&self) {
            self.state.lock().unwrap().2 = true;
            self.changed.notify_all();
        }
    }

    /// A segment's file, not the manifest a checkpoint also renames.
    fn is_segment(path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "wal")
    }

    impl Vfs for Gated {
        fn create_dir_all(&self, dir: &Path, mode: u32) -> std::io::Result<()> {
            RealFs.create_dir_all(dir, mode)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
            RealFs.list(dir)
        }
        fn open(&self, path: &Path, how: OpenHow) -> std::io::Result<VFile> {
            RealFs.open(path, how)
        }
        fn open_dir(&self, dir: &Path) -> std::io::Result<VFile> {
            RealFs.open_dir(dir)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            RealFs.rename(from, to)?;
            if is_segment(from) {
                self.hold(Point::AfterRetire);
            }
            Ok(())
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            RealFs.remove_file(path)?;
            if is_segment(path) {
                self.hold(Point::AfterRetire);
            }
            Ok(())
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            self.hold(Point::SyncDir);
            RealFs.sync_dir(dir)
        }
        fn is_real(&self) -> bool {
            true
        }
        fn canonicalize(&self, dir: &Path) -> std::io::Result<PathBuf> {
            RealFs.canonicalize(dir)
        }
    }

    fn open(dir: &Path, gate: &Arc<Gated>, limit: Option<u64>) -> Wal {
        let mut cfg = Config::builder()
            .segment_bytes(SEG)
            .max_record_bytes(4 << 10)
            .max_log_bytes(limit, WhenFull::DropOldest)
            .build();
        cfg.vfs = gate.clone();
        Wal::open(dir, cfg).unwrap().0
    }

    /// Append 1 KiB records until the log has rolled `rolls` more times,
    /// each one written before the next.
    fn append_rolls(wal: &Wal, rolls: u64) {
        let goal = wal.stats().rolls + rolls;
        while wal.stats().rolls < goal {
            wal.append(1, &[5u8; 1024])
                .unwrap()
                .wait(Level::Written)
                .unwrap();
        }
    }

    /// Append 1 KiB records without waiting until the reservation has
    /// rolled `rolls` more times, and say whether the last is written
    /// within 20 s: waited for on another thread, so that a wait that
    /// never ends fails the test instead of hanging it. Rolls are counted
    /// as the reservation decides them (`Wal::active_segment`): how many
    /// records fill a segment depends on how the ring batches them, since
    /// every write takes whole blocks.
    fn rolls_go_on(wal: &Wal, rolls: u64) -> bool {
        let (mut seen, mut seg) = (0, wal.active_segment());
        let mut last = None;
        while seen < rolls {
            last = Some(wal.append(1, &[6u8; 1024]).unwrap());
            let now = wal.active_segment();
            if now != seg {
                (seen, seg) = (seen + 1, now);
            }
        }
        let last = last.expect("a roll takes at least one record");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(last.wait(Level::Written));
        });
        matches!(rx.recv_timeout(Duration::from_secs(20)), Ok(Ok(())))
    }

    fn spawn_checkpoint(
        f: impl FnOnce() -> crate::Result<usize> + Send + 'static,
    ) -> std::thread::JoinHandle<crate::Result<usize>> {
        std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(f)
            .unwrap()
    }

    /// The base of the `i`th oldest segment.
    fn base(wal: &Wal, i: usize) -> Lsn {
        wal.shared().segment_list()[i].base
    }

    /// A checkpoint stalled in its fsyncs does not hold up a roll: the
    /// ring never waits for a user's checkpoint.
    #[test]
    fn a_roll_goes_on_while_a_checkpoint_waits_for_its_fsyncs() {
        let tmp = tempfile::tempdir().unwrap();
        let gate = Arc::new(Gated::default());
        let wal = Arc::new(open(tmp.path(), &gate, None));
        append_rolls(&wal, 1);
        gate.arm();
        let ckpt = {
            let (wal, up_to) = (wal.clone(), base(&wal, 1) - 1);
            spawn_checkpoint(move || wal.checkpoint(up_to))
        };
        gate.wait_until_held();
        let rolled = rolls_go_on(&wal, 1);
        gate.release();
        assert!(rolled, "the roll waited for the checkpoint's fsync");
        assert_eq!(ckpt.join().unwrap().unwrap(), 1);
        assert!(wal.poison_cause().is_none());
    }

    /// The ring finds the log over its `DropOldest` limit while a user's
    /// checkpoint holds the turn: it neither waits nor races it; the
    /// checkpoint's caller drops what is still over, reports exactly
    /// that, and the list matches the directory.
    #[test]
    fn a_drop_due_during_a_checkpoint_is_done_by_it() {
        let tmp = tempfile::tempdir().unwrap();
        let gate = Arc::new(Gated::default());
        let wal = Arc::new(open(tmp.path(), &gate, Some(3 * SEG)));
        append_rolls(&wal, 2);
        assert_eq!(wal.stats().segments, 3);
        let (b, c) = (base(&wal, 1), base(&wal, 2));
        gate.arm();
        let ckpt = {
            let wal = wal.clone();
            spawn_checkpoint(move || wal.checkpoint(b - 1))
        };
        gate.wait_until_held();
        // Two rolls: five segments listed less the one the checkpoint
        // takes is still one over the limit.
        let rolled = rolls_go_on(&wal, 2);
        gate.release();
        assert!(rolled, "the roll waited for the checkpoint");
        assert_eq!(ckpt.join().unwrap().unwrap(), 1);
        let stats = wal.stats();
        assert!(wal.poison_cause().is_none());
        assert_eq!((stats.segments, stats.disk_bytes), (3, 3 * SEG));
        assert_eq!(stats.last_dropped, Some((b, c - 1)));
        assert_eq!(stats.dropped_records, c - b);
        let listed = wal.shared().dir().list(&RealFs).unwrap().segments;
        assert_eq!(listed, wal.shared().segment_list());
    }

    /// While a checkpoint removes a segment, every answer agrees: once
    /// its file is gone, `oldest_lsn` is already past it, so a read that
    /// says `Released` names an LSN below a floor the caller can observe, and
    /// every LSN at or above the floor reads back.
    #[test]
    fn the_kept_floor_rises_before_the_file_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let gate = Arc::new(Gated::default());
        let wal = Arc::new(open(tmp.path(), &gate, None));
        append_rolls(&wal, 2);
        let (first, second) = (base(&wal, 0), base(&wal, 1));
        gate.arm_at(Point::AfterRetire);
        let ckpt = {
            let wal = wal.clone();
            spawn_checkpoint(move || wal.checkpoint(second - 1))
        };
        gate.wait_until_held();
        // The oldest segment's file is gone now, and the checkpoint has
        // not returned.
        let read = wal.read(first);
        let floor = wal.oldest_lsn();
        gate.release();
        assert!(
            matches!(read, Err(crate::Error::Released { .. })),
            "{read:?}"
        );
        assert!(
            floor > first,
            "LSN {first} read as gone while the floor was still {floor}"
        );
        assert_eq!(wal.read(floor).unwrap().lsn, floor);
        assert_eq!(ckpt.join().unwrap().unwrap(), 1);
        assert!(wal.poison_cause().is_none());
    }
}
