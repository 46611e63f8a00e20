//! Recovery: what is on disk, what is trustworthy, and what to repair.
//!
//! Analysis ([`analyze`]) is read-only and shared with `ringwal verify`;
//! [`recover`] applies its decisions. Per file, in base-LSN order (the
//! newest is the last one with a written header):
//!
//! | finding                                              | newest segment          | older segment |
//! |------------------------------------------------------|-------------------------|---------------|
//! | segment-shaped, header and first frame block blank   | discard the file        | `Corrupt`     |
//! | blank, but named outside `1..=MAX_LSN` or past last+1| `Corrupt` / `Gap`       | `Corrupt`     |
//! | blank header with data behind it (a lost header)     | `Corrupt`               | `Corrupt`     |
//! | shorter than a block, or blank and not segment-shaped| `Corrupt`               | `Corrupt`     |
//! | header present but invalid (magic, version, CRC)     | `Corrupt`               | `Corrupt`     |
//! | header node/base contradicts the file name           | `Corrupt`               | `Corrupt`     |
//! | base LSN is not previous last LSN + 1                | `Gap`                   | `Gap`         |
//! | how the frames end                                   | the walker's [`Verdict`] table (`scan/verdict.rs`) ||
//! | frames end clean, not full, below the next base      | (no next segment)       | `Corrupt` at their end |
//!
//! The next segment's base LSN (from its header, when that is usable)
//! says where an older segment's data must end. Frames ending cleanly
//! (zeros on a block boundary) before it are damage in the older
//! segment, at the offset where they end: a lost block over its last
//! records reads exactly like the zeros its writer leaves after its data,
//! and nothing on disk tells that from a whole segment missing between
//! the two, so the report names the file where the LSNs should continue.
//! The `Gap` at the next segment is what is left: a missing segment after
//! frames that fill theirs (nothing of it can have been lost), or a next
//! base at or below the older segment's last LSN.
//!
//! A `Torn` verdict is cut: the prefix is sealed and everything after it
//! is zeroed to the end of the segment, so a second open finds nothing to
//! cut. The next LSN is the last surviving record's + 1; a discarded blank
//! file's name is used only when no segment survives. In `PointInTime`
//! mode the first `Corrupt` or `Gap` becomes a truncation point instead,
//! every later segment is set aside, and whatever follows the valid prefix
//! of the segment left newest is cut like a torn tail.

mod prefetch;
pub mod verify;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::at_rest::format::{self, Kind, SegmentHeader, MAX_LSN};
use crate::config::{Config, RecoveryMode};
use crate::error::{Corruption, Error, Lsn, Result};

use crate::at_rest::format::Manifest;
use crate::read::index::{self, Point, SparseIndex};
use crate::recovery::prefetch::Prefetcher;
use crate::scan::{self, Position, SegmentEnd, Verdict};
use crate::segment::manifest;
use crate::segment::set::{self as segments, Live, LogDir, SegmentFile};

/// What [`Wal::open`](crate::Wal::open) found and did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Segment files scanned (after discarding incomplete ones).
    pub segments_scanned: usize,
    /// Bytes of frames read and verified.
    pub bytes_scanned: u64,
    /// Records (non-padding frames) found.
    pub records: u64,
    /// Oldest LSN kept on disk (0 if the log is empty).
    pub first_lsn: Lsn,
    /// Newest LSN on disk after recovery (0 if the log is empty).
    pub last_lsn: Lsn,
    /// The torn tail that was cut, if any.
    pub truncated: Option<Truncation>,
    /// Segments whose header block was damaged or blank and whose header
    /// was read from its copy (version 2 keeps one). Nothing was lost;
    /// the header block is left as it is for an operator to look at.
    pub headers_from_copy: Vec<PathBuf>,
    /// Point-in-time mode: the manifest did not decode; the log was read
    /// without it and a new one written.
    pub manifest_rebuilt: bool,
    /// Point-in-time mode: LSNs (first, last) recorded as skipped so that
    /// none is handed out again: records lost past the recovery point, and
    /// LSNs handed out before the crash that never reached the disk.
    /// Readers meet them as one `Gap`.
    pub skipped: Option<(Lsn, Lsn)>,
    /// Files removed or set aside: incomplete segments from a crash
    /// mid-create, leftover spares, and (point-in-time mode) segments after
    /// the recovery point.
    pub discarded: Vec<PathBuf>,
    /// True when the directory held no segment and one was created.
    pub created: bool,
    /// The newest checkpoint marker (see
    /// [`Wal::checkpoint_marker`](crate::Wal::checkpoint_marker)) among the
    /// records recovery kept; `None` if there is none. A marker in a torn
    /// tail that was cut, or in a segment set aside, does not count.
    pub last_checkpoint: Option<CheckpointMarker>,
    /// Wall time of the whole recovery.
    pub elapsed: Duration,
    /// The I/O backend the opened log runs (`Uring` or `Threaded`: the
    /// configured `Backend::Auto` resolved; `Auto` only in a report of no
    /// open).
    pub backend: crate::Backend,
    /// Whether the log's segments are written with O_DIRECT
    /// (`DirectIo::Auto` falls back where the file system refuses it).
    pub direct_io: bool,
}

/// A checkpoint marker found in the log: a record of kind
/// [`Kind::Checkpoint`](crate::Kind::Checkpoint) written by
/// [`Wal::checkpoint_marker`](crate::Wal::checkpoint_marker), saying that
/// the caller's snapshot covers every LSN up to `snapshot_lsn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CheckpointMarker {
    /// The LSN of the marker record itself.
    pub lsn: Lsn,
    /// The LSN the snapshot covers up to (always below `lsn`).
    pub snapshot_lsn: Lsn,
}

impl CheckpointMarker {
    /// The marker a record of `kind` with `payload` at `lsn` is, if any:
    /// a `Checkpoint` record whose payload is exactly 8 bytes (the
    /// snapshot LSN, little-endian) and whose snapshot LSN is below its own.
    /// A `Checkpoint` record of any other shape was not written by
    /// `checkpoint_marker` of this version and is not taken for a marker.
    pub(crate) fn decode(lsn: Lsn, kind: Kind, payload: &[u8]) -> Option<CheckpointMarker> {
        if kind != Kind::Checkpoint {
            return None;
        }
        let snapshot_lsn = Lsn::from_le_bytes(payload.try_into().ok()?);
        (snapshot_lsn < lsn).then_some(CheckpointMarker { lsn, snapshot_lsn })
    }
}

/// A cut made at the tail of the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncation {
    /// The segment.
    pub file: PathBuf,
    /// Offset of the first byte that was not part of a valid frame.
    pub offset: u64,
    /// Why the bytes at `offset` were rejected.
    pub reason: String,
    /// Bytes zeroed after `offset`.
    pub zeroed: u64,
    /// Valid-looking records that were behind the cut (writes that landed
    /// while an earlier one did not, in the same crash): never
    /// acknowledged, and gone now.
    pub records_behind: u64,
}

/// Why the tail of a segment is to be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CutWhy {
    /// The data ends there: a torn write (or an atomic batch it left
    /// unfinished), or (point-in-time mode) damage.
    At(SegmentEnd),
    /// Point-in-time mode: bytes of the part of the log that was set aside.
    AfterRecoveryPoint,
}

impl fmt::Display for CutWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CutWhy::At(end) => write!(f, "{end}"),
            CutWhy::AfterRecoveryPoint => write!(f, "bytes after the point-in-time recovery point"),
        }
    }
}

/// A tail to cut: from `at` (sealed with padding) zeroed up to `zero_to`,
/// with `records_behind` valid-looking records in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    pub at: u64,
    pub why: CutWhy,
    pub zero_to: u64,
    pub records_behind: u64,
}

/// One segment as analysis understood it.
#[derive(Clone, Debug)]
pub(crate) struct SegmentState {
    pub file: SegmentFile,
    pub header: SegmentHeader,
    /// LSN of the last record (base - 1 if none).
    pub last_lsn: Lsn,
    /// Offset just past the last valid frame.
    pub valid_end: u64,
    pub records: u64,
    /// The tail recovery cuts, if any (only ever on the last segment kept).
    pub cut: Option<Cut>,
    /// The newest checkpoint marker among the records walked (all of them
    /// before the end of the complete data, so none in a tail to cut).
    pub last_checkpoint: Option<CheckpointMarker>,
    /// Seek points for the sparse index, from the records walked (so none
    /// in a tail to cut).
    pub points: Vec<Point>,
}

/// How far analysis goes after the first problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Strict open: the first problem fails it, so stop there.
    StopAtFirst,
    /// Point-in-time open: the first problem is the recovery point; every
    /// later segment is set aside unread.
    SetAsideAfterFirst,
    /// `verify`: name every problem. A segment after a gap is still read,
    /// as the start of a new run of LSNs, and so is the one after a
    /// corrupt segment (its continuity with the damaged one cannot be
    /// judged). Up to the first problem this reads exactly what the
    /// others read, so its first problem is the one a strict open fails with.
    ReportAll,
}

impl Policy {
    /// The policy of an open in `mode`.
    pub fn of(mode: RecoveryMode) -> Policy {
        match mode {
            RecoveryMode::Strict => Policy::StopAtFirst,
            RecoveryMode::PointInTime => Policy::SetAsideAfterFirst,
        }
    }
}

/// The read-only result of scanning a node's files.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub segments: Vec<SegmentState>,
    /// Newest files whose header never became valid (crash mid-create).
    pub incomplete: Vec<PathBuf>,
    /// Segments read through their header's copy.
    pub headers_from_copy: Vec<PathBuf>,
    pub spares: Vec<PathBuf>,
    /// Temporary manifests a crashed writer left: no part of the log, so
    /// no plan shows them; the writer removes them.
    pub manifest_temps: Vec<PathBuf>,
    /// Segments after a point-in-time recovery point.
    pub set_aside: Vec<PathBuf>,
    /// Point-in-time mode: the LSNs (first, last) of the valid frames
    /// found in each of `set_aside`, by index; `None` for a file with
    /// none, or whose header does not read.
    pub set_aside_lsns: Vec<Option<(Lsn, Lsn)>>,
    /// Corruption and gaps, in file order; non-empty means strict open fails.
    pub problems: Vec<Error>,
    /// LSN named by the newest discarded file, which recovery must resume at or above.
    pub floor_lsn: Lsn,
    pub bytes_scanned: u64,
    /// The newest segment file with a written header, if any.
    pub newest: Option<PathBuf>,
    /// The node's manifest, if it has one (and it decodes).
    pub manifest: Option<Manifest>,
    /// Point in time: the manifest did not decode and was passed over.
    pub manifest_unreadable: bool,
    /// Without a manifest: the log id of the newest version-2 segment,
    /// which every other one must carry (a log whose first manifest a
    /// crash kept from being written).
    pub adopted_log_id: Option<u64>,
    /// Point-in-time mode: the highest LSN any valid frame on disk
    /// carries, past the recovery point and in the files set aside
    /// included. The log resumes above it and above every LSN the manifest
    /// says was handed out.
    pub highest_seen: Lsn,
}

impl Analysis {
    /// Judge the blank files popped off the end of the listing, after the
    /// segments before them have been scanned.
    ///
    /// A crash mid-roll leaves the blank file named exactly one past the
    /// last record (the ring rolls only after the old segment is
    /// complete), and that name is where the log resumes when no segment
    /// survives. A blank file named further out is not that crash, and a
    /// name outside `1..=MAX_LSN` is no name the writer can produce:
    /// resuming at either would skip LSNs or run the counter out.
    fn judge_incomplete(&mut self) {
        self.floor_lsn = 0;
        let mut floor_file = None;
        for path in &self.incomplete {
            let base = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(format::parse_segment_file_name)
                .map_or(0, |(_, base)| base);
            if base == 0 || base > MAX_LSN {
                self.problems.push(Error::corrupt(
                    path,
                    0,
                    Corruption::Header(format!(
                        "blank segment named with base LSN {base}, out of range"
                    )),
                ));
            } else if base > self.floor_lsn {
                self.floor_lsn = base;
                floor_file = Some(path.clone());
            }
        }
        if let (Some(last), Some(path)) = (self.segments.last(), floor_file) {
            let expected = last.last_lsn + 1;
            if self.floor_lsn > expected {
                self.problems.push(Error::Gap {
                    file: path,
                    expected,
                    found: self.floor_lsn,
                });
            }
        }
    }

    /// The log id segments must carry: the manifest's, if there is one.
    fn log_id(&self) -> Option<u64> {
        self.manifest.map(|m| m.log_id).or(self.adopted_log_id)
    }

    /// Hold what is on disk against what the manifest promises: the newest
    /// segment it names is there, every LSN it says was durable is, and no
    /// segment it still keeps is gone from the front. Judged only when the
    /// segments themselves raised no problem (otherwise the first problem
    /// says more).
    fn check_manifest(&mut self, dir: &LogDir, listed: &[SegmentFile]) {
        let Some(m) = self.manifest else {
            return;
        };
        if !self.problems.is_empty() {
            return;
        }
        let newest = self.segments.last();
        let disk = manifest::OnDisk {
            oldest: listed.first().map(|f| f.base),
            newest: listed.last().map(|f| f.base),
            last_lsn: newest.map_or(0, |s| s.last_lsn),
            last_file: newest.map(|s| s.file.path.as_path()),
        };
        self.problems
            .extend(manifest::broken_promise(&m, dir, disk));
    }

    /// Point-in-time mode: the LSNs in the files set aside count as seen.
    fn see_set_aside(&mut self, cfg: &Config) -> Result<()> {
        for path in &self.set_aside {
            let Some((_, base)) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(format::parse_segment_file_name)
            else {
                continue;
            };
            // A name no writer makes (0, or past the last LSN) says
            // nothing (and `base - 1` must not wrap).
            if base == 0 || base > MAX_LSN {
                continue;
            }
            self.highest_seen = self.highest_seen.max(base - 1);
            let file = SegmentFile {
                base,
                path: path.clone(),
            };
            let mut lsns = None;
            if let Ok(mut w) = scan::open(&*cfg.vfs, &file, cfg.node, None)? {
                let end = w.walk_to_end()?;
                let highest = w
                    .last_lsn()
                    .max(w.frames_after(end.data_end())?.highest_lsn);
                self.highest_seen = self.highest_seen.max(highest);
                lsns = (highest >= base).then_some((base, highest));
            }
            self.set_aside_lsns.push(lsns);
        }
        Ok(())
    }

    /// Point-in-time mode: the segment left newest was judged as an older
    /// one (no torn window, no residue rule). Whatever follows its valid
    /// prefix belongs to the part of the log that was set aside, so it is
    /// cut and zeroed like a torn tail; otherwise a later open, judging the
    /// segment as newest, would cut again or find stale frames.
    fn clear_after_recovery_point(&mut self, cfg: &Config) -> Result<()> {
        let log_id = self.log_id();
        let Some(last) = self.segments.last_mut() else {
            return Ok(());
        };
        if last.cut.is_some() {
            return Ok(());
        }
        let Ok(mut walker) = scan::open(&*cfg.vfs, &last.file, cfg.node, log_id)? else {
            return Ok(());
        };
        let end = walker.end();
        if walker.first_nonzero(last.valid_end, end)?.is_some() {
            let behind = walker.frames_after(last.valid_end)?;
            last.cut = Some(Cut {
                at: last.valid_end,
                why: CutWhy::AfterRecoveryPoint,
                zero_to: end,
                records_behind: behind.records,
            });
        }
        Ok(())
    }

    /// Read one segment, followed by `next` (`None`: it is the newest).
    /// Pushes its problems; returns its state when it (or, in
    /// point-in-time mode, its valid prefix) is usable.
    fn scan_segment(
        &mut self,
        f: &SegmentFile,
        cfg: &Config,
        next: Option<&SegmentFile>,
        prev_last: Option<Lsn>,
        policy: Policy,
    ) -> Result<Option<SegmentState>> {
        let mut w = match scan::open(&*cfg.vfs, f, cfg.node, self.log_id())? {
            Ok(w) => w,
            Err(problem) => {
                self.problems.push(problem.error(f, cfg.node));
                return Ok(None);
            }
        };
        if w.header_from_copy() {
            self.headers_from_copy.push(f.path.clone());
        }
        // One pass over the whole log: leave the page cache to the
        // application (seed 003).
        w.drop_behind();
        let base = w.header().base_lsn;
        if let Some(prev) = prev_last.filter(|&p| base != p + 1) {
            self.problems.push(Error::Gap {
                file: f.path.clone(),
                expected: prev + 1,
                found: base,
            });
            if policy != Policy::ReportAll {
                return Ok(None);
            }
        }
        // The walk yields only records before the end of the complete
        // data (an unfinished batch is never yielded), so a marker noted
        // here is one recovery keeps, unless the whole segment is dropped.
        let mut last_checkpoint = None;
        let mut points: Vec<Point> = Vec::new();
        let end = w.walk_to_end_visiting(|at, f, batch| {
            if let Some(m) = CheckpointMarker::decode(f.lsn, f.kind, f.payload) {
                last_checkpoint = Some(m);
            }
            let starts_clean = batch.is_none_or(|first| first == f.lsn);
            if starts_clean && at >= index::due_after(points.last().map(|p| p.offset)) {
                points.push(Point {
                    lsn: f.lsn,
                    offset: at,
                });
            }
        })?;
        self.bytes_scanned += w.valid_end() - format::BLOCK as u64;
        let header = *w.header();
        let next_base = scan::declared_base(&*cfg.vfs, next, cfg.node, self.log_id())?;
        let pos = Position::of(next.is_none(), cfg.torn_window(), &header).followed_by(next_base);
        let verdict = w.judge(end, pos)?;
        let mut state = SegmentState {
            file: f.clone(),
            header,
            last_lsn: w.last_lsn(),
            valid_end: w.valid_end(),
            records: w.records(),
            cut: None,
            last_checkpoint,
            points,
        };
        // What lies behind the end: the records a cut drops, and (point
        // in time) LSNs on disk that must never be handed out again, even
        // past a clean end.
        let after = match verdict {
            _ if policy == Policy::SetAsideAfterFirst => Some(w.frames_after(end.data_end())?),
            Verdict::Clean | Verdict::Full => None,
            Verdict::Torn { .. } | Verdict::Corrupt(_) => Some(w.frames_after(end.data_end())?),
        };
        let cut = |zero_to| Cut {
            at: end.data_end(),
            why: CutWhy::At(end),
            zero_to,
            records_behind: after.map_or(0, |a| a.records),
        };
        if policy == Policy::SetAsideAfterFirst {
            self.highest_seen = self
                .highest_seen
                .max(w.last_lsn())
                .max(after.map_or(0, |a| a.highest_lsn));
        }
        match verdict {
            Verdict::Clean | Verdict::Full => {}
            Verdict::Torn { zero_to } => state.cut = Some(cut(zero_to)),
            Verdict::Corrupt(damage) => {
                self.problems.push(damage.error(&f.path, end));
                if policy != Policy::SetAsideAfterFirst {
                    return Ok(None);
                }
                state.cut = Some(cut(w.end()));
            }
        }
        Ok(Some(state))
    }
}

/// Scan `dir` for its node's log without modifying anything, going as far
/// past the first problem as `policy` says.
pub(crate) fn analyze(dir: &LogDir, cfg: &Config, policy: Policy) -> Result<Analysis> {
    let listing = dir.list(&*cfg.vfs)?;
    let mut out = Analysis {
        spares: listing.spares,
        manifest_temps: listing.manifest_temps,
        ..Analysis::default()
    };
    match manifest::read(&*cfg.vfs, dir) {
        Ok(m) => out.manifest = m,
        // Point in time: a manifest that does not decode is no recovery
        // point (that would set every segment aside); the log is read
        // without it and the writer writes it anew.
        Err(Error::Corrupt { .. }) if policy == Policy::SetAsideAfterFirst => {
            out.manifest_unreadable = true;
        }
        Err(e @ Error::Corrupt { .. }) => out.problems.push(e),
        Err(e) => return Err(e),
    }
    let mut files = listing.segments;

    // Incomplete newest files: a crash between rename and a durable header.
    // Only a header that never reached the disk marks one; a damaged but
    // present header is corruption (the segment may hold acknowledged
    // records).
    if let Some(f) = scan::pop_never_written(&*cfg.vfs, &mut files, cfg.node, out.log_id())? {
        out.incomplete.push(f.path);
    }
    if out.manifest.is_none() {
        // The newest version-2 segment's id (docs/format.md §7): a newer
        // file whose header does not read, or a version-1 one (which
        // point-in-time recovery sets aside), must not leave the
        // version-2 segments kept without their log id.
        for f in files.iter().rev() {
            if let Ok(w) = scan::open(&*cfg.vfs, f, cfg.node, None)? {
                if w.header().version >= 2 {
                    out.adopted_log_id = Some(w.header().log_id);
                    break;
                }
            }
        }
    }
    out.newest = files.last().map(|f| f.path.clone());
    let listed = files.clone();

    let count = files.len();
    // Reading ahead on a second thread overlaps the disk with the checks.
    // Not on the simulated disk, whose reads are part of what a seed
    // replays.
    let prefetch = (cfg.vfs.is_real() && count > 1)
        .then(|| {
            Prefetcher::start(
                cfg.vfs.clone(),
                files.iter().map(|f| f.path.clone()).collect(),
            )
        })
        .flatten();
    let mut prev_last: Option<Lsn> = None;
    for (i, f) in files.iter().enumerate() {
        if let Some(p) = &prefetch {
            p.at(i);
        }
        if !out.problems.is_empty() {
            match policy {
                Policy::StopAtFirst => break,
                Policy::SetAsideAfterFirst => {
                    out.set_aside.push(f.path.clone());
                    continue;
                }
                Policy::ReportAll => {}
            }
        }
        match out.scan_segment(f, cfg, files.get(i + 1), prev_last, policy)? {
            Some(state) => {
                prev_last = Some(state.last_lsn);
                out.segments.push(state);
            }
            None if policy == Policy::SetAsideAfterFirst => out.set_aside.push(f.path.clone()),
            None => prev_last = None,
        }
    }
    out.judge_incomplete();
    out.check_manifest(dir, &listed);
    if policy == Policy::SetAsideAfterFirst {
        out.see_set_aside(cfg)?;
        if !out.set_aside.is_empty() {
            out.clear_after_recovery_point(cfg)?;
        }
    }
    Ok(out)
}

/// What the writer needs to continue after recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub report: RecoveryReport,
    pub segments: Vec<Live>,
    /// The newest segment and the offset where the next write goes.
    pub active: Option<(SegmentFile, SegmentHeader, u64)>,
    pub next_lsn: Lsn,
    /// Point-in-time: LSNs (first, count) to record as skipped at the
    /// start of a new segment, because the one kept is full. `active` is
    /// `None` then.
    pub skip_in_new_segment: Option<(Lsn, u64)>,
    /// The manifest found, if any (the writer writes the next one).
    pub manifest: Option<Manifest>,
    /// The log's id: the manifest's, else the one its version-2 segments
    /// carry; `None` for a new log or one with version-1 segments only.
    pub log_id: Option<u64>,
    /// Seek points of every record kept.
    pub index: SparseIndex,
}

/// What recovery will do to a node's files, decided from one
/// [`Analysis`]: [`recover`] carries it out and `verify::recovery_plan`
/// shows it, so the two can never disagree.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    /// Files to remove: incomplete newest files, then leftover spares.
    pub remove: Vec<PathBuf>,
    /// Point-in-time mode: segments after the recovery point, renamed.
    pub set_aside: Vec<PathBuf>,
    /// The cut of the last segment kept, as the report will describe it.
    pub truncation: Option<Truncation>,
    /// The first LSN the writer hands out.
    pub next_lsn: Lsn,
    /// LSNs (first, last) to record as skipped (point-in-time mode only).
    pub skipped: Option<(Lsn, Lsn)>,
}

/// Decide what recovery does with what `a` found, without doing any of
/// it. `a.problems` is not looked at: in strict mode a problem fails the
/// open before any of this is carried out. Pure but for the error.
pub(crate) fn plan(a: &Analysis, cfg: &Config) -> Result<Plan> {
    // Where the log resumes. A surviving segment fixes it: its last LSN +
    // 1. The name of a discarded blank file counts only when no segment
    // survives (in strict mode a disagreement is a `Gap`; in
    // point-in-time mode following the name would put a sequence break
    // inside the active segment). Point-in-time recovery never hands out
    // an LSN again: it resumes above every LSN on disk and every one the
    // manifest says was handed out, and records the LSNs in between as a
    // skip.
    let last = a.segments.last();
    let mut next_lsn = match last {
        Some(l) => l.last_lsn + 1,
        None => a.floor_lsn.max(1),
    };
    if cfg.recovery == RecoveryMode::PointInTime {
        let handed_out = a.manifest.map_or(0, |m| m.handed_out);
        next_lsn = next_lsn.max(handed_out.max(a.highest_seen).min(MAX_LSN) + 1);
        // With no segment left to record a skip in, the log restarts at
        // `next_lsn` in a new first segment, whose base must be an LSN.
        if a.segments.is_empty() && next_lsn > MAX_LSN {
            return Err(Error::LsnExhausted { next: next_lsn });
        }
    }
    let skipped = last
        .filter(|l| next_lsn > l.last_lsn + 1)
        .map(|l| (l.last_lsn + 1, next_lsn - 1));
    let truncation = last.and_then(|l| {
        l.cut.map(|c| Truncation {
            file: l.file.path.clone(),
            offset: c.at,
            reason: c.why.to_string(),
            zeroed: cut_extent(&l.header, c.at, c.zero_to).2 - c.at,
            records_behind: c.records_behind,
        })
    });
    Ok(Plan {
        remove: a
            .incomplete
            .iter()
            .chain(a.spares.iter())
            .cloned()
            .collect(),
        set_aside: a.set_aside.clone(),
        truncation,
        next_lsn,
        skipped,
    })
}

/// Recover `dir` for writing: analyze, fail on corruption (strict mode),
/// then carry out the [`plan`]: discard incomplete files, cut a torn tail
/// durably.
pub(crate) fn recover(dir: &LogDir, cfg: &Config) -> Result<Recovered> {
    let start = Instant::now();
    let mut a = analyze(dir, cfg, Policy::of(cfg.recovery))?;
    if cfg.recovery == RecoveryMode::Strict {
        if let Some(e) = a.problems.drain(..).next() {
            return Err(e);
        }
    }
    let plan = plan(&a, cfg)?;
    let mut report = RecoveryReport {
        bytes_scanned: a.bytes_scanned,
        headers_from_copy: std::mem::take(&mut a.headers_from_copy),
        manifest_rebuilt: a.manifest_unreadable,
        ..RecoveryReport::default()
    };
    for p in &plan.remove {
        cfg.vfs.remove_file(p).map_err(|e| Error::io(p, e))?;
        report.discarded.push(p.clone());
    }
    // Under the lock no other writer of the manifest runs, so these are
    // a crash's leftovers. Not made durable: one that comes back after a
    // power loss is removed by the next open.
    for p in &a.manifest_temps {
        match cfg.vfs.remove_file(p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(p, e)),
            _ => {}
        }
    }
    for p in &plan.set_aside {
        let to = set_aside_name(&*cfg.vfs, p)?;
        cfg.vfs.rename(p, &to).map_err(|e| Error::io(p, e))?;
        report.discarded.push(p.clone());
    }
    let last = a.segments.last().map(|s| s.last_lsn);
    let next_lsn = plan.next_lsn;
    let mut active = None;
    let mut skip_in_new_segment = None;
    if let Some(last) = a.segments.last_mut() {
        let mut write_at = last.valid_end;
        if let Some(Cut { at, zero_to, .. }) = last.cut.take() {
            let zeroed = cut_tail(&*cfg.vfs, &last.file.path, &last.header, at, zero_to)?;
            write_at = (at + format::padding_len(at) as u64).min(last.header.segment_bytes);
            debug_assert_eq!(plan.truncation.as_ref().map(|t| t.zeroed), Some(zeroed));
            report.truncated = plan.truncation.clone();
        } else if !write_at.is_multiple_of(format::BLOCK as u64) {
            // Frames ending mid-block with nothing after them (a segment a
            // point-in-time recovery kept): seal them with padding, durably,
            // so that what is written next is not behind a zero frame.
            cut_tail(&*cfg.vfs, &last.file.path, &last.header, write_at, write_at)?;
            write_at =
                (write_at + format::padding_len(write_at) as u64).min(last.header.segment_bytes);
        }
        if let Some((first, _)) = plan.skipped {
            let count = next_lsn - first;
            report.skipped = plan.skipped;
            match write_skip(
                &*cfg.vfs,
                &last.file.path,
                &last.header,
                write_at,
                first,
                count,
            )? {
                Some(at) => {
                    write_at = at;
                    last.last_lsn = next_lsn - 1;
                }
                // The segment is full: the skip opens a new one (`Wal::open`).
                None => skip_in_new_segment = Some((first, count)),
            }
        }
        // Everything found is made durable before the manifest may call it
        // so: a process crash can leave unsynced writes in the page cache
        // that a power loss would still take.
        sync_segment(&*cfg.vfs, &last.file.path)?;
        if skip_in_new_segment.is_none() {
            active = Some((last.file.clone(), last.header, write_at));
        }
    }
    if !report.discarded.is_empty() || report.truncated.is_some() {
        let dir = dir.path();
        cfg.vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    report.segments_scanned = a.segments.len();
    report.records = a.segments.iter().map(|s| s.records).sum();
    report.first_lsn = a.segments.first().map_or(0, |s| s.header.base_lsn);
    report.last_lsn = last.unwrap_or(0);
    if report.records == 0 {
        report.first_lsn = 0;
        report.last_lsn = 0;
    }
    report.last_checkpoint = a.segments.iter().rev().find_map(|s| s.last_checkpoint);
    report.elapsed = start.elapsed();
    trace_repairs(dir, &report);
    let log_id = a.log_id();
    let mut index = SparseIndex::default();
    for p in a.segments.iter().flat_map(|s| &s.points) {
        index.add(*p);
    }
    Ok(Recovered {
        index,
        report,
        segments: a
            .segments
            .into_iter()
            .map(|s| Live {
                bytes: s.header.segment_bytes,
                file: s.file,
            })
            .collect(),
        active,
        next_lsn,
        skip_in_new_segment,
        log_id,
        manifest: a.manifest,
    })
}

/// What recovery changed or worked around, as `tracing` warnings.
#[cfg(not(feature = "tracing"))]
fn trace_repairs(_: &LogDir, _: &RecoveryReport) {}

/// What recovery changed or worked around, as `tracing` warnings.
#[cfg(feature = "tracing")]
fn trace_repairs(dir: &LogDir, report: &RecoveryReport) {
    let dir = dir.path().display();
    if let Some(t) = &report.truncated {
        crate::obs::trace::event!(
            warn,
            %dir,
            file = %t.file.display(),
            offset = t.offset,
            reason = %t.reason,
            records_behind = t.records_behind,
            "recovery cut a torn tail"
        );
    }
    for p in &report.discarded {
        crate::obs::trace::event!(warn, %dir, file = %p.display(), "recovery discarded a file");
    }
    if let Some((first, last)) = report.skipped {
        crate::obs::trace::event!(warn, %dir, first, last, "recovery skipped LSNs that will never hold a record");
    }
    for p in &report.headers_from_copy {
        crate::obs::trace::event!(warn, %dir, file = %p.display(), "segment header read from its copy");
    }
    crate::obs::trace::event!(
        info,
        %dir,
        records = report.records,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "recovered"
    );
}

/// A name to set `path` aside under that no earlier set-aside file has:
/// `NAME.corrupt`, else `NAME.corrupt.1`, `.2`, ... (a name that comes
/// round again must never overwrite the evidence of an earlier recovery).
/// Cost: one `readdir`.
pub(crate) fn set_aside_name(vfs: &dyn ringwal_platform::Vfs, path: &Path) -> Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let names = vfs.list(dir).map_err(|e| Error::io(dir, e))?;
    let base = format!(
        "{}.corrupt",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("segment")
    );
    let taken = |n: &str| names.iter().any(|x| x == n);
    let name = (0..)
        .map(|i| {
            if i == 0 {
                base.clone()
            } else {
                format!("{base}.{i}")
            }
        })
        .find(|n| !taken(n))
        .expect("an unused name");
    Ok(dir.join(name))
}

/// Make the segment at `path` durable (one fdatasync).
fn sync_segment(vfs: &dyn ringwal_platform::Vfs, path: &Path) -> Result<()> {
    let how = ringwal_platform::OpenHow {
        write: true,
        ..ringwal_platform::OpenHow::default()
    };
    let file = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
    file.sync_data().map_err(|e| Error::io(path, e))
}

/// Record LSNs `first..first + count` as skipped: one block at `at` (a
/// block boundary) holding a skip frame and padding, durable. Returns
/// where the next write goes, or `None` if the segment has no block left.
pub(crate) fn write_skip(
    vfs: &dyn ringwal_platform::Vfs,
    path: &Path,
    header: &SegmentHeader,
    at: u64,
    first: Lsn,
    count: u64,
) -> Result<Option<u64>> {
    let block = format::BLOCK as u64;
    if at + block > header.segment_bytes {
        return Ok(None);
    }
    let mut buf = ringwal_platform::AlignedBuf::new(format::BLOCK);
    let frame = format::frame_len(8);
    format::encode_skip(buf.as_mut_slice(), header.salt, first, count);
    format::encode_padding(
        &mut buf.as_mut_slice()[frame..],
        header.salt,
        format::BLOCK - frame,
    );
    let how = ringwal_platform::OpenHow {
        write: true,
        ..ringwal_platform::OpenHow::default()
    };
    let file = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
    // A plain write and an fdatasync, like the cut: recovery runs before
    // the log knows whether its file system honours RWF_DSYNC.
    file.write_at(buf.as_slice(), at, false)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(at + block))
}

/// Where a cut at `at` asked to zero up to `zero_to` really writes:
/// (padding bytes of the seal, end of the seal, end of the zeroing). A
/// seal that would run past the segment's end (a tail a few bytes short
/// of it) is replaced by zeros to the end: the next append rolls. Pure:
/// [`plan`] reports what [`cut_tail`] will do with it.
fn cut_extent(header: &SegmentHeader, at: u64, zero_to: u64) -> (usize, u64, u64) {
    let pad = match format::padding_len(at) {
        p if at + p as u64 > header.segment_bytes => 0,
        p => p,
    };
    let sealed = at + pad as u64;
    (pad, sealed, zero_to.max(sealed).min(header.segment_bytes))
}

/// Seal the valid prefix at `at` with a padding frame up to the next block
/// boundary, zero everything after it up to `zero_to`, and make both
/// durable before any new write can land beyond them.
fn cut_tail(
    vfs: &dyn ringwal_platform::Vfs,
    path: &Path,
    header: &SegmentHeader,
    at: u64,
    zero_to: u64,
) -> Result<u64> {
    let how = ringwal_platform::OpenHow {
        write: true,
        ..ringwal_platform::OpenHow::default()
    };
    let file = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
    let (pad, sealed, zero_to) = cut_extent(header, at, zero_to);
    let mut buf = vec![0u8; pad];
    if pad > 0 {
        format::encode_padding(&mut buf, header.salt, pad);
    }
    let io = |e| Error::io(path, e);
    // Zero first and make it durable, then seal: interrupted anywhere, the
    // file is either as it was or has a zeroed tail (both recover to the
    // same prefix), never a seal followed by frames it was meant to erase.
    segments::write_zeros(&*file, sealed, zero_to, false).map_err(io)?;
    file.sync_data().map_err(io)?;
    if pad > 0 {
        file.write_at(&buf, at, false).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    Ok(zero_to - at)
}
