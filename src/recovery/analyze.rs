//! Analysis: reading a node's files without changing any, and judging
//! each (the module's table).

use std::fmt;
use std::path::PathBuf;

use crate::at_rest::format::{self, Manifest, SegmentHeader, MAX_LSN};
use crate::config::{Config, RecoveryMode};
use crate::error::{Corruption, Error, Lsn, Result};
use crate::scan::{self, Position, SegmentEnd, Verdict, Walker};
use crate::segment::index::{self, Point};
use crate::segment::manifest;
use crate::segment::set::{LogDir, SegmentFile};

use super::decision::{decide, BlankName, Ending, Fate, FileFacts, HeaderRead};
use super::prefetch::Prefetcher;
use super::CheckpointMarker;

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
    /// Read the node's manifest, if it has one. Point in time: one that
    /// does not decode is no recovery point (that would set every segment
    /// aside); the log is read without it and the writer writes it anew.
    fn read_manifest(&mut self, dir: &LogDir, cfg: &Config, policy: Policy) -> Result<()> {
        match manifest::read(&*cfg.vfs, dir) {
            Ok(m) => self.manifest = m,
            Err(Error::Corrupt { .. }) if policy == Policy::SetAsideAfterFirst => {
                self.manifest_unreadable = true;
            }
            Err(e @ Error::Corrupt { .. }) => self.problems.push(e),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Judge the blank files popped off the end of the listing, after the
    /// segments before them have been scanned (the module's table: their
    /// names), and note the highest name as where the log resumes when no
    /// segment survives.
    ///
    /// A crash mid-roll leaves the blank file named exactly one past the
    /// last record (the ring rolls only after the old segment is
    /// complete). A blank file named further out is not that crash, and a
    /// name outside `1..=MAX_LSN` is no name the writer can produce:
    /// resuming at either would skip LSNs or run the counter out.
    fn judge_incomplete(&mut self, policy: Policy) {
        // A writer installs one segment at a time, so a crash leaves at
        // most one never-written file, the newest (docs/format.md §2.1).
        debug_assert!(self.incomplete.len() <= 1, "{:?}", self.incomplete);
        self.floor_lsn = 0;
        let expected = self.segments.last().map(|s| s.last_lsn + 1);
        for path in &self.incomplete {
            let base = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(format::parse_segment_file_name)
                .map_or(0, |(_, base)| base);
            let mut facts = FileFacts::new(true, HeaderRead::NeverWritten, policy);
            facts.name = match expected {
                _ if base == 0 || base > MAX_LSN => BlankName::OutOfRange,
                Some(expected) if base > expected => BlankName::PastNext,
                _ => BlankName::Resumes,
            };
            let (report, fate) = decide(&facts);
            // The file was popped as the newest never-written one, which
            // every row for such a file discards.
            debug_assert_eq!(fate, Fate::Discard, "{facts:?}");
            if facts.name != BlankName::OutOfRange {
                self.floor_lsn = self.floor_lsn.max(base);
            }
            if report.corrupt() {
                self.problems.push(Error::corrupt(
                    path,
                    0,
                    Corruption::Header(format!(
                        "blank segment named with base LSN {base}, out of range"
                    )),
                ));
            }
            if let (true, Some(expected)) = (report.gap(), expected) {
                self.problems.push(Error::Gap {
                    file: path.clone(),
                    expected,
                    found: base,
                });
            }
        }
    }

    /// The log id segments must carry: the manifest's, if there is one.
    pub(super) fn log_id(&self) -> Option<u64> {
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
        // Under the lock the segment is as analysis walked it.
        debug_assert!(last.valid_end <= end, "{}", last.file.path.display());
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

    /// Read the segments of `files` in order (after the newest was popped
    /// if never written) and decide each by the module's table, going as
    /// far past the first problem as `policy` says.
    fn scan_all(&mut self, files: &[SegmentFile], cfg: &Config, policy: Policy) -> Result<()> {
        // Reading ahead on a second thread overlaps the disk with the
        // checks. Not on the simulated disk, whose reads are part of what
        // a seed replays.
        let prefetch = (cfg.vfs.is_real() && files.len() > 1)
            .then(|| {
                Prefetcher::start(
                    cfg.vfs.clone(),
                    files.iter().map(|f| f.path.clone()).collect(),
                )
            })
            .flatten();
        let popped = !self.incomplete.is_empty();
        let mut prev_last: Option<Lsn> = None;
        for (i, f) in files.iter().enumerate() {
            if let Some(p) = &prefetch {
                p.at(i);
            }
            if !self.problems.is_empty() {
                match policy {
                    Policy::StopAtFirst => break,
                    Policy::SetAsideAfterFirst => {
                        self.set_aside.push(f.path.clone());
                        continue;
                    }
                    Policy::ReportAll => {}
                }
            }
            let newest = !popped && i + 1 == files.len();
            let next = files.get(i + 1);
            match self.scan_segment(f, cfg, next, prev_last, newest, policy)? {
                Scanned::Kept(state) => {
                    // LSNs run on from the previous segment kept, unless
                    // verify took this one as the start of a new run.
                    debug_assert!(
                        policy == Policy::ReportAll
                            || prev_last.is_none_or(|p| state.header.base_lsn == p + 1)
                    );
                    prev_last = Some(state.last_lsn);
                    self.segments.push(*state);
                }
                Scanned::SetAside => self.set_aside.push(f.path.clone()),
                Scanned::Dropped => prev_last = None,
            }
        }
        Ok(())
    }

    /// Read one segment, followed by `next` (`None`: it is the newest
    /// with a written header), as far as the module's table needs, and
    /// decide it. Pushes its problems; returns what becomes of it.
    fn scan_segment(
        &mut self,
        f: &SegmentFile,
        cfg: &Config,
        next: Option<&SegmentFile>,
        prev_last: Option<Lsn>,
        newest: bool,
        policy: Policy,
    ) -> Result<Scanned> {
        let mut w = match scan::open(&*cfg.vfs, f, cfg.node, self.log_id())? {
            Ok(w) => w,
            Err(problem) => {
                let header = match HeaderRead::of(&problem) {
                    // The newest file's header read as written before the
                    // loop (`pop_never_written`): blank now, it changed
                    // under recovery, which is damage.
                    HeaderRead::NeverWritten if newest => HeaderRead::Damaged,
                    header => header,
                };
                let facts = FileFacts::new(newest, header, policy);
                let (report, fate) = decide(&facts);
                // Only a blank newest file's name is a gap, and a file the
                // loop reads has none (its own name is not read here).
                debug_assert!(!report.gap(), "{facts:?}");
                if report.corrupt() {
                    self.problems.push(problem.error(f, cfg.node));
                }
                return Ok(Self::not_kept(fate, f));
            }
        };
        if w.header_from_copy() {
            self.headers_from_copy.push(f.path.clone());
        }
        // One pass over the whole log: leave the page cache to the
        // application (seed 003).
        w.drop_behind();
        let base = w.header().base_lsn;
        let gap = prev_last.filter(|&p| base != p + 1).map(|p| Error::Gap {
            file: f.path.clone(),
            expected: p + 1,
            found: base,
        });
        let mut facts = FileFacts::new(newest, HeaderRead::Usable, policy);
        facts.follows = gap.is_none();
        if !facts.reads_ending() {
            let (report, fate) = decide(&facts);
            self.problems.extend(gap.filter(|_| report.gap()));
            return Ok(Self::not_kept(fate, f));
        }
        let walked = walk(&mut w)?;
        self.bytes_scanned += w.valid_end() - format::BLOCK as u64;
        let next_base = scan::declared_base(&*cfg.vfs, next, cfg.node, self.log_id())?;
        let pos =
            Position::of(next.is_none(), cfg.torn_window(), w.header()).followed_by(next_base);
        let verdict = w.judge(walked.end, pos)?;
        facts.ending = Ending::of(verdict);
        let (report, fate) = decide(&facts);
        self.problems.extend(gap.filter(|_| report.gap()));
        if let (true, Verdict::Corrupt(damage)) = (report.corrupt(), verdict) {
            self.problems.push(damage.error(&f.path, walked.end));
        }
        self.settle(f, &mut w, walked, verdict, fate, policy)
    }

    /// What becomes of a segment the table does not keep.
    fn not_kept(fate: Fate, f: &SegmentFile) -> Scanned {
        match fate {
            Fate::SetAside => Scanned::SetAside,
            // Only the file popped before the loop is discarded, and no
            // row keeps a segment whose frames were not judged.
            Fate::Drop | Fate::Discard | Fate::Keep | Fate::Cut => {
                debug_assert_eq!(fate, Fate::Drop, "{}", f.path.display());
                Scanned::Dropped
            }
        }
    }

    /// Carry out the table's `fate` for a segment whose frames were
    /// walked and judged: note what lies behind their end (the records a
    /// cut drops, and in point-in-time mode LSNs on disk that must never
    /// be handed out again, even past a clean end) and make the cut.
    fn settle(
        &mut self,
        f: &SegmentFile,
        w: &mut Walker,
        walked: Walked,
        verdict: Verdict,
        fate: Fate,
        policy: Policy,
    ) -> Result<Scanned> {
        let end = walked.end;
        let state = SegmentState {
            file: f.clone(),
            header: *w.header(),
            last_lsn: w.last_lsn(),
            valid_end: w.valid_end(),
            records: w.records(),
            cut: None,
            last_checkpoint: walked.last_checkpoint,
            points: walked.points,
        };
        let after = match verdict {
            _ if policy == Policy::SetAsideAfterFirst => Some(w.frames_after(end.data_end())?),
            Verdict::Clean | Verdict::Full => None,
            Verdict::Torn { .. } | Verdict::Corrupt(_) => Some(w.frames_after(end.data_end())?),
        };
        if policy == Policy::SetAsideAfterFirst {
            self.highest_seen = self
                .highest_seen
                .max(w.last_lsn())
                .max(after.map_or(0, |a| a.highest_lsn));
        }
        let cut = Cut {
            at: end.data_end(),
            why: CutWhy::At(end),
            zero_to: match verdict {
                Verdict::Torn { zero_to } => zero_to,
                _ => w.end(),
            },
            records_behind: after.map_or(0, |a| a.records),
        };
        // A cut keeps exactly the complete data: the walk stops at the
        // start of an unfinished batch, so its offset is where the data
        // ends either way; and it zeros only forward.
        debug_assert_eq!(cut.at, state.valid_end, "{}", f.path.display());
        debug_assert!(cut.at <= cut.zero_to);
        Ok(match fate {
            Fate::Keep => Scanned::Kept(Box::new(state)),
            Fate::Cut => Scanned::Kept(Box::new(SegmentState {
                cut: Some(cut),
                ..state
            })),
            fate => Self::not_kept(fate, f),
        })
    }
}

/// What became of one segment file read in order.
enum Scanned {
    /// Part of the log kept (its tail may be cut). Boxed: the others
    /// are empty.
    Kept(Box<SegmentState>),
    /// Not part of the log kept: the next segment, if read, starts a new
    /// run of LSNs.
    Dropped,
    /// Point in time: past the recovery point.
    SetAside,
}

/// A segment's frames walked to their end, with what recovery notes on
/// the way.
struct Walked {
    end: SegmentEnd,
    /// The newest checkpoint marker among the records walked.
    last_checkpoint: Option<CheckpointMarker>,
    /// Seek points for the sparse index.
    points: Vec<Point>,
}

/// Walk `w` to the end of its valid frames. The walk yields only records
/// before the end of the complete data (an unfinished batch is never
/// yielded), so a marker noted here is one recovery keeps, unless the
/// whole segment is dropped.
fn walk(w: &mut Walker) -> Result<Walked> {
    let mut last_checkpoint = None;
    let mut points: Vec<Point> = Vec::new();
    let end = w.walk_to_end_visiting(|at, f, batch, write| {
        if let Some(m) = CheckpointMarker::decode(f.lsn, f.kind, f.payload) {
            last_checkpoint = Some(m);
        }
        let last = points.last();
        // The walk yields records in LSN and file order: the index's
        // points grow in both.
        debug_assert!(last.is_none_or(|p| p.offset < at && p.lsn < f.lsn));
        let starts_clean = batch.is_none_or(|first| first == f.lsn);
        if starts_clean && at >= index::due_after(last.map(|p| p.offset)) {
            points.push(Point {
                lsn: f.lsn,
                offset: at,
                write_at: write.map_or(at, |w| w.at),
            });
        }
    })?;
    Ok(Walked {
        end,
        last_checkpoint,
        points,
    })
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
    out.read_manifest(dir, cfg, policy)?;
    let mut files = listing.segments;
    // Incomplete newest files: a crash between rename and a durable header.
    // Only a header that never reached the disk marks one; a damaged but
    // present header is corruption (the segment may hold acknowledged
    // records).
    if let Some(f) = scan::pop_never_written(&*cfg.vfs, &mut files, cfg.node, out.log_id())? {
        out.incomplete.push(f.path);
    }
    if out.manifest.is_none() {
        out.adopted_log_id = adopt_log_id(cfg, &files)?;
    }
    out.newest = files.last().map(|f| f.path.clone());
    out.scan_all(&files, cfg, policy)?;
    out.judge_incomplete(policy);
    out.check_manifest(dir, &files);
    if policy == Policy::SetAsideAfterFirst {
        out.see_set_aside(cfg)?;
        if !out.set_aside.is_empty() {
            out.clear_after_recovery_point(cfg)?;
        }
    }
    Ok(out)
}

/// The log id of the newest version-2 segment of `files` (docs/format.md
/// §7), for a log without a manifest: a newer file whose header does not
/// read, or a version-1 one (which point-in-time recovery sets aside),
/// must not leave the version-2 segments kept without their log id.
/// Cost: one header read per file, newest first, up to that segment.
fn adopt_log_id(cfg: &Config, files: &[SegmentFile]) -> Result<Option<u64>> {
    for f in files.iter().rev() {
        if let Ok(w) = scan::open(&*cfg.vfs, f, cfg.node, None)?
            && w.header().version >= 2
        {
            return Ok(Some(w.header().log_id));
        }
    }
    Ok(None)
}
