//! Read-only inspection of a log directory, for `ringwal verify`, `stat`,
//! `cat` and `dump`. The inspections take no writer lock and modify no
//! file, so they run beside a live writer (stopping at the last valid
//! frame); only the plans of a repair or a checkpoint (`recovery_plan`,
//! `checkpoint_plan`) take the writer lock, so that what they print is
//! what an open or a checkpoint would do.
//!
//! Every function sees a snapshot of the directory listing taken when it
//! is called; segments created afterwards are not read. The checks are
//! recovery's own (the same analysis, the same segment walker), so a log
//! that [`verify`] calls consistent opens without error, and the first
//! problem it names is the one a strict open fails with.
//!
//! Every function takes the directory and the [`Config`] the log is
//! written with: it names the node (`Config::node`), holds the keys an
//! encrypted log's payloads need, and sets the torn window
//! (`Config::torn_window`, widened to the window each segment's writer
//! recorded in its header). `Config::builder().node(n).build()` judges
//! node `n`'s log as the default writer would. Only the plans take the
//! recovery mode from it; the inspections judge strictly.
//!
//! [`verify`] and [`stat`] return one report, [`LogReport`]: the same
//! segments, LSN range, files and problems, looked at to two depths
//! ([`Checked`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use super::salvage::{salvage, salvage_plan, Damaged, SalvagePlan};
use crate::at_rest::crypt::KeyProblem;
use crate::at_rest::format::{self, Codec, SegmentHeader};
use crate::at_rest::payload;
use crate::config::{Config, RecoveryMode};
use crate::error::{Error, Lsn, Result};
use crate::read::follow::DirFollower;
use crate::read::reader::Reader;
pub use crate::read::reader::{Located as Records, RecordAt};
use crate::recovery::{self, CutWhy, Policy, Truncation};
use crate::scan::{self, Step};
use crate::segment::set::{Live, LogDir, SegmentFile, SegmentSet};

/// How far a [`LogReport`] looked: which of [`verify`] and [`stat`] made
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checked {
    /// [`stat`]: every segment's header; a walk of every segment's frames
    /// (framing, checksums, LSNs, and whether a sealed segment's records
    /// reach the next one's base); the manifest's promises held against
    /// them. Payloads are not opened; an older segment's last LSN is the
    /// next one's base minus one ([`LastLsnFrom::NextHeader`]); the end of
    /// the newest segment is not judged (a torn tail is neither named nor
    /// a problem).
    Headers,
    /// [`verify`]: recovery's own analysis of every segment end to end,
    /// the newest one's end judged as an open judges it, then every
    /// compressed payload decompressed and every encrypted one
    /// authenticated (with the key, when the configuration has it).
    Frames,
}

/// What a check made of a segment's payloads ([`SegmentReport::payloads`]).
/// Framing, LSNs and checksums are checked in every case: they need no
/// key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payloads {
    /// Plaintext. [`verify`] decompressed every compressed payload to its
    /// length; [`stat`] opens none.
    Plaintext,
    /// Encrypted, with a key the configuration has: [`verify`]
    /// authenticated every payload with it; [`stat`] held it to the
    /// header's key check.
    KeyFits,
    /// Encrypted, and not decrypted: the key is missing or wrong.
    Sealed(KeyProblem),
}

/// Where a [`SegmentReport::last_lsn`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LastLsnFrom {
    /// A walk of the segment's frames to the end of its valid data
    /// (every segment's in [`verify`]; the newest one's in [`stat`]).
    Walk,
    /// The base LSN in the header of the segment after it, minus one
    /// ([`stat`]'s older segments): records missing from its end show as
    /// a problem, not here.
    NextHeader,
}

/// One segment of a [`LogReport`]: a file whose header reads, agrees
/// with its name and belongs to the log. A file under a segment name
/// that is not one is in [`LogReport::problems`] instead, and so is (in
/// [`verify`]'s report) a segment whose frames were rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentReport {
    /// The segment file.
    pub path: PathBuf,
    /// LSN of its first record, from its header.
    pub base_lsn: Lsn,
    /// LSN of its last record (see [`last_lsn_from`](Self::last_lsn_from));
    /// `base_lsn - 1` when it holds none.
    pub last_lsn: Lsn,
    /// Where `last_lsn` comes from.
    pub last_lsn_from: LastLsnFrom,
    /// Records (frames that are neither padding nor given-up LSNs) in its
    /// valid prefix, as the walk of its frames counted them.
    pub records: u64,
    /// Bytes of valid frames, padding included, after the header blocks.
    pub valid_bytes: u64,
    /// Size of the file on disk (preallocated, so usually
    /// `segment_bytes`); 0 for a file a live writer's checkpoint removed
    /// while [`verify`] read.
    pub file_bytes: u64,
    /// The segment size its header declares: a file shorter than that was
    /// cut short (harmless only if nothing but unwritten space went).
    pub segment_bytes: u64,
    /// Format version of the segment, from its header.
    pub version: u32,
    /// When the segment was created, in milliseconds since the Unix
    /// epoch, as its header records it; `None` when the header holds 0.
    pub created_unix_ms: Option<u64>,
    /// The key its data payloads are encrypted with (0: none).
    pub key_id: u32,
    /// What the check made of its payloads.
    pub payloads: Payloads,
}

/// The end of the newest segment as a crash (or a write still in flight)
/// left it: bytes that recovery would cut. Not an error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// The newest segment.
    pub file: PathBuf,
    /// Offset of the first byte that is not part of a valid frame.
    pub offset: u64,
    /// Why the bytes at `offset` were rejected.
    pub reason: String,
    /// End of the region recovery would zero: the end of the segment's
    /// frame area (its declared size, or the file's length if shorter).
    pub zero_to: u64,
    /// Valid-looking records behind the tail, which the cut would drop
    /// (none of them can have been acknowledged: no later write vouches
    /// for them, or this would be corruption).
    pub records_behind: u64,
}

/// What a node's manifest promises, which [`LogReport::problems`] holds
/// the segments to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Promised {
    /// Every LSN up to this one was acknowledged durable.
    pub durable_lsn: Lsn,
    /// The oldest LSN the log keeps: 1 until a checkpoint raises it.
    pub oldest_lsn: Lsn,
}

/// What [`verify`] or [`stat`] found in one node's log. Building it never
/// modifies a file.
#[derive(Debug)]
#[non_exhaustive]
pub struct LogReport {
    /// The node checked.
    pub node: u32,
    /// How far the check looked: which function made the report.
    pub checked: Checked,
    /// The segments accepted, in LSN order (newest files whose header was
    /// never written and files in `problems` aside).
    pub segments: Vec<SegmentReport>,
    /// Oldest LSN holding a record; 0 when the log holds none.
    pub first_lsn: Lsn,
    /// Newest LSN holding a record; 0 when the log holds none.
    pub last_lsn: Lsn,
    /// Records in the accepted segments, as the readers count them (LSNs
    /// recovery gave up hold none).
    pub records: u64,
    /// Bytes of the node's segment files on disk, those named in
    /// `problems` included (never-written newest files and spares not).
    pub file_bytes: u64,
    /// The torn tail of the newest segment, if any (reported, not an
    /// error). [`verify`] only: [`stat`] does not judge the newest
    /// segment's end, so its report says `None`.
    pub torn_tail: Option<TornTail>,
    /// Newest files whose header never became valid (a crash while a
    /// segment was being created); recovery deletes them. Not an error.
    pub incomplete: Vec<PathBuf>,
    /// Preallocated spare files; they hold no log data. Not an error.
    pub spares: Vec<PathBuf>,
    /// Segments whose header block is damaged or blank and whose header
    /// was read from its copy. Not an error, but a sign of a bad sector.
    pub headers_from_copy: Vec<PathBuf>,
    /// What the node's manifest promises, when it has one that decodes
    /// (one that does not is a problem).
    pub manifest: Option<Promised>,
    /// The node's archive point, when it has one (`NNNNN.archived`,
    /// written by an archiver: see `ringwal::archive`): every segment at
    /// or below it is archived, and checkpoints keep the ones above. One
    /// that does not decode reads as 0: it holds every segment. Not a
    /// problem of the log: the log opens and reads without it.
    pub archived_lsn: Option<Lsn>,
    /// Corruption ([`Error::Corrupt`], naming file and offset), LSN gaps
    /// ([`Error::Gap`], naming the file) and records the manifest promised
    /// that are gone ([`Error::Lost`]), in file order. Non-empty means a
    /// strict `Wal::open` would fail. Empty in [`verify`]'s report means
    /// it would succeed; [`stat`] does not look far enough to say (see
    /// [`consistent`](Self::consistent)).
    pub problems: Vec<Error>,
}

impl Promised {
    fn of(m: &format::Manifest) -> Promised {
        Promised {
            durable_lsn: m.durable_lsn,
            oldest_lsn: m.oldest_lsn.max(1),
        }
    }
}

impl LogReport {
    /// Whether the log is consistent: it opens in strict mode and every
    /// record in it reads back. `Some` for [`verify`]'s report (true when
    /// there is nothing in `problems`); `None` for [`stat`]'s, which does
    /// not look far enough to say (payloads are not opened), whatever it
    /// found. A `stat` report with problems is damage all the same.
    pub fn consistent(&self) -> Option<bool> {
        match self.checked {
            Checked::Frames => Some(self.problems.is_empty()),
            Checked::Headers => None,
        }
    }
    /// Bytes of the sealed segments (all but the newest) holding LSNs
    /// above [`archived_lsn`](Self::archived_lsn): what the archive keeps
    /// on disk that a checkpoint could otherwise release. 0 without an
    /// archive point.
    pub fn archive_held_bytes(&self) -> u64 {
        let Some(archived) = self.archived_lsn else {
            return 0;
        };
        let sealed = self.segments.len().saturating_sub(1);
        self.segments[..sealed]
            .iter()
            .filter(|s| s.last_lsn > archived)
            .map(|s| s.file_bytes)
            .sum()
    }
}

/// What a segment's key makes of its payloads, by the header's key check
/// alone: [`Payloads::KeyFits`] or [`Payloads::Sealed`] for an encrypted
/// one, [`Payloads::Plaintext`] for the rest. Cost: one AEAD call for an
/// encrypted segment whose key `cfg` has.
fn key_status(cfg: &Config, header: &SegmentHeader) -> Payloads {
    match payload::check_key(&cfg.keys, header) {
        Ok(()) if header.key_id == 0 => Payloads::Plaintext,
        Ok(()) => Payloads::KeyFits,
        Err(problem) => Payloads::Sealed(problem),
    }
}

/// The size of `path` on disk; 0 when it is gone (removed by a live
/// writer's checkpoint since the directory was listed). Cost: an open
/// and an `fstat`.
fn size_if_there(cfg: &Config, path: &Path) -> Result<u64> {
    match cfg
        .vfs
        .open(path, ringwal_platform::OpenHow::default())
        .and_then(|f| f.size())
    {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Check every segment of `cfg.node()` in `dir`, judging the torn window
/// by `cfg` (pass the configuration the writer uses; its recovery mode is
/// ignored: verify always judges strictly).
///
/// Recovery's analysis, going on after a problem so that every damaged
/// segment is named: a segment after a gap is still scanned, and after a
/// segment rejected as corrupt the next one starts a new run of LSNs (its
/// continuity with the damaged one cannot be judged). The first problem
/// reported is the one a strict `Wal::open` fails with.
///
/// Damage is reported in [`LogReport::problems`], not as `Err`; `Err`
/// means the directory or a file could not be read at all. Read-only: no
/// lock, no write, safe beside a live writer. If a live writer makes the
/// newest segment look damaged (it wrote far past where the scan saw the
/// end), the check is repeated once.
///
/// Payloads need a second look only where the checksum is not all there
/// is to them: compressed ones are decompressed, encrypted ones are
/// authenticated when `cfg` has their key ([`SegmentReport::payloads`]);
/// a payload that fails is a `Corrupt` problem. A key `cfg` gives for a
/// segment's key id that is not the key it was sealed with (its header's
/// key check differs) is a `Key` problem naming the segment: a strict
/// open with that key fails the same way.
///
/// Cost: reads every segment file once, end to end (the zero-filled
/// remainder of the newest one included), through the page cache; then
/// walks each accepted segment's frames a second time (from the page
/// cache) to decrypt or decompress the payloads that are so stored; an
/// `fstat` per segment file.
pub fn verify(dir: &Path, cfg: &Config) -> Result<LogReport> {
    let report = verify_once(dir, cfg)?;
    let newest = LogDir::new(dir, cfg.node)
        .list(&*cfg.vfs)?
        .segments
        .pop()
        .map(|s| s.path);
    let racy = report.problems.iter().any(|p| match p {
        Error::Corrupt { file, .. } => Some(file) == newest.as_ref(),
        _ => false,
    });
    if racy {
        return verify_once(dir, cfg);
    }
    Ok(report)
}

fn verify_once(dir: &Path, cfg: &Config) -> Result<LogReport> {
    let log = LogDir::new(dir, cfg.node);
    let listed = log.list(&*cfg.vfs)?.segments;
    let mut a = recovery::analyze(&log, cfg, Policy::ReportAll)?;
    a.incomplete.sort();
    let torn_tail = a
        .segments
        .last()
        .filter(|s| Some(&s.file.path) == a.newest.as_ref())
        .and_then(|s| match s.cut {
            Some(
                cut @ recovery::Cut {
                    why: CutWhy::At(end),
                    ..
                },
            ) => Some(TornTail {
                file: s.file.path.clone(),
                offset: cut.at,
                reason: end.to_string(),
                zero_to: cut.zero_to,
                records_behind: cut.records_behind,
            }),
            _ => None,
        });
    let mut segments = Vec::with_capacity(a.segments.len());
    for s in &a.segments {
        assert!(
            s.header.frames_start() <= s.valid_end && s.valid_end <= s.header.segment_bytes,
            "a segment's valid data lies between its header and its end"
        );
        assert!(
            s.header.base_lsn + s.records <= s.last_lsn + 1,
            "a segment holds no more records than LSNs"
        );
        let (payloads, damage) = check_payloads(cfg, &s.file, &s.header, s.last_lsn)?;
        a.problems.extend(damage);
        segments.push(SegmentReport {
            path: s.file.path.clone(),
            base_lsn: s.header.base_lsn,
            last_lsn: s.last_lsn,
            last_lsn_from: LastLsnFrom::Walk,
            records: s.records,
            valid_bytes: s.valid_end - s.header.frames_start(),
            file_bytes: size_if_there(cfg, &s.file.path)?,
            segment_bytes: s.header.segment_bytes,
            version: s.header.version,
            created_unix_ms: (s.header.created_unix_ms > 0).then_some(s.header.created_unix_ms),
            key_id: s.header.key_id,
            payloads,
        });
    }
    assert!(
        segments.windows(2).all(|w| w[0].base_lsn < w[1].base_lsn),
        "accepted segments are reported by ascending base"
    );
    let mut file_bytes = 0;
    for f in listed.iter().filter(|f| !a.incomplete.contains(&f.path)) {
        file_bytes += size_if_there(cfg, &f.path)?;
    }
    let first_lsn = segments
        .iter()
        .find(|s| s.records > 0)
        .map_or(0, |s| s.base_lsn);
    let last_lsn = segments
        .iter()
        .rev()
        .find(|s| s.records > 0)
        .map_or(0, |s| s.last_lsn);
    Ok(LogReport {
        node: cfg.node(),
        checked: Checked::Frames,
        first_lsn,
        last_lsn,
        records: segments.iter().map(|s| s.records).sum(),
        segments,
        file_bytes,
        torn_tail,
        incomplete: a.incomplete,
        spares: a.spares,
        headers_from_copy: a.headers_from_copy,
        manifest: a.manifest.as_ref().map(Promised::of),
        archived_lsn: crate::segment::archived::held_at(&*cfg.vfs, &log)?,
        problems: a.problems,
    })
}

/// Open every data payload of `file` (whose header the analysis read as
/// `header`) up to `last` that is encrypted (when `cfg` has the key) or
/// compressed, through the one payload path; the first that fails is the
/// damage returned. A segment whose key is not at hand is not walked.
fn check_payloads(
    cfg: &Config,
    file: &SegmentFile,
    header: &SegmentHeader,
    last: Lsn,
) -> Result<(Payloads, Option<Error>)> {
    let status = key_status(cfg, header);
    match status {
        // A key given for the segment's id that is not its key is the
        // caller's mistake to report, not a note: appending with it
        // would be refused too.
        Payloads::Sealed(problem @ KeyProblem::Wrong) => {
            let wrong = Error::Key {
                file: file.path.clone(),
                key_id: header.key_id,
                problem,
            };
            return Ok((status, Some(wrong)));
        }
        Payloads::Sealed(_) => return Ok((status, None)),
        _ => {}
    }
    let Ok(mut w) = scan::open(&*cfg.vfs, file, cfg.node, None)? else {
        // Accepted by the analysis a moment ago: replaced since (a live
        // writer's checkpoint). Nothing more to say about it.
        return Ok((status, None));
    };
    let header = *w.header();
    let mut prev = header.base_lsn - 1;
    loop {
        let (at, frame, write) = match w.next()? {
            Step::Record {
                at, frame, write, ..
            } if frame.lsn <= last => (at, frame, write),
            Step::Record { .. } | Step::End(_) => return Ok((status, None)),
            Step::Hole { .. } => continue,
        };
        debug_assert!(frame.lsn > prev, "a segment's records ascend by LSN");
        prev = frame.lsn;
        let transformed = payload::sealed(&header, frame.kind) || frame.codec() != Codec::None;
        let nonce_salt = scan::nonce_salt(write, &header);
        if transformed && let Err(e) = payload::open(&cfg.keys, &header, nonce_salt, &frame) {
            return Ok((status, Some(e.error(&file.path, &header, at))));
        }
    }
}

/// What opening a log would do to it, from [`recovery_plan`]. Building it
/// never modifies a file.
#[derive(Debug)]
#[non_exhaustive]
pub struct RecoveryPlan {
    /// The node planned for.
    pub node: u32,
    /// The recovery mode planned: the configuration's.
    pub mode: RecoveryMode,
    /// Strict mode: damage the open would fail on (the first one is its
    /// error), in file order; when non-empty, the open changes nothing
    /// and the other fields describe what was read, not what would be
    /// done. Point-in-time mode: the damage the log is recovered up to
    /// (at most one: what follows it is set aside unread), which the
    /// other fields then say how the open gets past.
    pub problems: Vec<Error>,
    /// The tail the open would cut: exactly the
    /// [`RecoveryReport::truncated`](crate::RecoveryReport::truncated)
    /// it would report (bytes zeroed, records dropped).
    pub cut: Option<Truncation>,
    /// Point-in-time mode with damage in the segment the cut is in: a
    /// name no file has, under which a copy of that segment as it is now
    /// keeps the bytes the cut zeroes. The open itself makes no copy
    /// (`ringwal recover --point-in-time --apply` does, first).
    pub cut_copy: Option<PathBuf>,
    /// Files the open would delete: an incomplete newest segment (a
    /// crash while it was created), then leftover spares. In the same
    /// order as `RecoveryReport::discarded`.
    pub discard: Vec<PathBuf>,
    /// Point-in-time mode: the segments after the damage, renamed aside
    /// (never deleted), in the order `RecoveryReport::discarded` lists
    /// them after `discard`.
    pub set_aside: Vec<SetAside>,
    /// LSNs (first, last) the open would record as never to be handed
    /// out: in point-in-time mode, every LSN above the last record kept
    /// that the log ever held or handed out; in either mode, those a
    /// writer of this process handed out before it was poisoned. Else
    /// `None` in strict mode (LSNs resume right after the last record
    /// kept).
    pub skipped: Option<(Lsn, Lsn)>,
    /// The first LSN the writer would hand out after the open.
    pub next_lsn: Lsn,
    /// Segments whose header would be read from its copy (not a change).
    pub headers_from_copy: Vec<PathBuf>,
    /// Records the log would hold after the open.
    pub records: u64,
    /// The oldest and newest LSN of those records; `None` when there are
    /// none.
    pub kept: Option<(Lsn, Lsn)>,
}

/// A segment a point-in-time recovery renames aside.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetAside {
    /// The segment.
    pub file: PathBuf,
    /// The name it gets: no file has it now.
    pub to: PathBuf,
    /// The LSNs (first, last) of the valid frames in it; `None` when it
    /// has none, or its header does not read.
    pub lsns: Option<(Lsn, Lsn)>,
    /// Its size on disk.
    pub bytes: u64,
}

impl RecoveryPlan {
    /// True when an open would succeed and change nothing in the node's
    /// files (the manifest and the lock file aside, which every open
    /// writes).
    pub fn is_noop(&self) -> bool {
        self.problems.is_empty()
            && self.cut.is_none()
            && self.discard.is_empty()
            && self.set_aside.is_empty()
            && self.skipped.is_none()
    }
}

/// What `Wal::open` with `cfg` would do to `cfg.node()`'s log in `dir`,
/// without doing it: the cut, the files discarded or (point-in-time
/// mode) set aside, the LSNs skipped, where LSNs resume, or (strict mode)
/// the damage it would fail on.
///
/// The plan comes from recovery's own analysis and decision (the same
/// functions `Wal::open` runs before it acts), so an open that follows
/// with nothing changed in between does exactly this. `cfg`'s recovery
/// mode and torn window count, as in [`verify`]. `Err(NoLog)` when
/// `dir` has no segment of the node (as an open with
/// `create_if_missing(false)` would fail); `Err(Locked)` when a writer
/// holds the log (its plan would be of a moving log, and an open could
/// not take it); any other `Err` means a file could not be read.
///
/// Takes the writer lock for as long as it reads (a writer that starts
/// meanwhile is refused), writes nothing. Cost: what an open's recovery
/// reads, every segment end to end; one `readdir` per file set aside.
pub fn recovery_plan(dir: &Path, cfg: &Config) -> Result<RecoveryPlan> {
    let log = LogDir::new(dir, cfg.node);
    log.list_log(&*cfg.vfs, false)?;
    let _lock = hold_writer_lock(cfg, &log)?;
    let a = recovery::analyze(&log, cfg, Policy::of(cfg.recovery))?;
    let records = a.segments.iter().map(|s| s.records).sum();
    let kept = a
        .segments
        .iter()
        .find(|s| s.records > 0)
        .zip(a.segments.iter().rev().find(|s| s.records > 0))
        .map(|(first, last)| (first.header.base_lsn, last.last_lsn));
    assert!(
        kept.is_none_or(|(first, last)| first <= last),
        "the LSNs kept run from the oldest up"
    );
    let mut plan = RecoveryPlan {
        node: cfg.node,
        mode: cfg.recovery,
        problems: Vec::new(),
        cut: None,
        cut_copy: None,
        discard: Vec::new(),
        set_aside: Vec::new(),
        skipped: None,
        next_lsn: 0,
        headers_from_copy: a.headers_from_copy.clone(),
        records,
        kept,
    };
    if !a.problems.is_empty() && cfg.recovery == RecoveryMode::Strict {
        plan.problems = a.problems;
        return Ok(plan);
    }
    let decided = recovery::plan(&a, cfg)?;
    if let (Some(cut), false) = (&decided.truncation, a.problems.is_empty()) {
        plan.cut_copy = Some(recovery::set_aside_name(&*cfg.vfs, &cut.file)?);
    }
    for (file, lsns) in a.set_aside.iter().zip(&a.set_aside_lsns) {
        let bytes = cfg
            .vfs
            .open(file, ringwal_platform::OpenHow::default())
            .and_then(|f| f.size())
            .map_err(|e| Error::io(file, e))?;
        plan.set_aside.push(SetAside {
            file: file.clone(),
            to: recovery::set_aside_name(&*cfg.vfs, file)?,
            lsns: *lsns,
            bytes,
        });
    }
    plan.problems = a.problems;
    plan.cut = decided.truncation;
    plan.discard = decided.remove;
    plan.skipped = decided.skipped;
    plan.next_lsn = decided.next_lsn;
    Ok(plan)
}

/// What `Wal::checkpoint(up_to)` would remove from `cfg.node()`'s log in
/// `dir`, from [`checkpoint_plan`].
#[derive(Debug)]
#[non_exhaustive]
pub struct CheckpointPlan {
    /// The node planned for.
    pub node: u32,
    /// Damage a strict open would fail on (so would the checkpoint,
    /// which opens the log); when non-empty, `remove` is empty.
    pub problems: Vec<Error>,
    /// The segments it would remove, oldest first: every whole segment
    /// whose records are all at or below `up_to`, never the newest.
    pub remove: Vec<Released>,
    /// The last LSN the log holds (after the cut of a torn tail an open
    /// makes), every one of them durable; 0 when it holds none. An
    /// `up_to` above it covers records that were never written.
    pub last_lsn: Lsn,
}

/// A segment a checkpoint removes: one [`checkpoint_plan`] says it
/// would, or one [`files::truncate_segments`](crate::files::truncate_segments)
/// did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// The segment.
    pub file: PathBuf,
    /// Its first LSN.
    pub base_lsn: Lsn,
    /// Its last LSN.
    pub last_lsn: Lsn,
    /// Its size on disk.
    pub bytes: u64,
}

/// What a checkpoint at `up_to` would remove from `cfg.node()`'s log in
/// `dir`, by the rule `Wal::checkpoint` applies to the segments an open
/// would keep, without removing anything. `Err(NoLog)` and `Err(Locked)`
/// as [`recovery_plan`].
///
/// An `up_to` past [`CheckpointPlan::last_lsn`] is `Err(PastEnd)`, as
/// `Wal::checkpoint` refuses it.
///
/// Takes the writer lock for as long as it reads, writes nothing. Cost:
/// what an open's recovery reads, and one `stat` per segment removed.
pub fn checkpoint_plan(dir: &Path, cfg: &Config, up_to: Lsn) -> Result<CheckpointPlan> {
    let mut cfg = cfg.clone();
    cfg.recovery = RecoveryMode::Strict;
    let log = LogDir::new(dir, cfg.node);
    log.list_log(&*cfg.vfs, false)?;
    let _lock = hold_writer_lock(&cfg, &log)?;
    let a = recovery::analyze(&log, &cfg, Policy::StopAtFirst)?;
    let mut out = CheckpointPlan {
        node: cfg.node,
        problems: Vec::new(),
        remove: Vec::new(),
        last_lsn: 0,
    };
    if !a.problems.is_empty() {
        out.problems = a.problems;
        return Ok(out);
    }
    out.last_lsn = recovery::plan(&a, &cfg)?.next_lsn.saturating_sub(1);
    if up_to > out.last_lsn {
        return Err(Error::PastEnd {
            what: "up_to",
            lsn: up_to,
            last: out.last_lsn,
        });
    }
    let live: Vec<Live> = a
        .segments
        .iter()
        .map(|s| Live {
            file: s.file.clone(),
            bytes: s.header.segment_bytes,
        })
        .collect();
    let set = SegmentSet::new(live);
    // What a checkpoint would do: keep what the archive lacks.
    let up_to = if cfg.release_unarchived {
        up_to
    } else {
        crate::segment::archived::hold(crate::segment::archived::held_at(&*cfg.vfs, &log)?, up_to)
    };
    for (seg, state) in set.releasable(up_to).iter().zip(&a.segments) {
        assert!(
            seg.file.path == state.file.path && state.last_lsn <= up_to,
            "a checkpoint removes only segments wholly at or below its LSN"
        );
        let bytes = cfg
            .vfs
            .open(&seg.file.path, ringwal_platform::OpenHow::default())
            .and_then(|f| f.size())
            .map_err(|e| Error::io(&seg.file.path, e))?;
        out.remove.push(Released {
            file: seg.file.path.clone(),
            base_lsn: seg.file.base,
            last_lsn: state.last_lsn,
            bytes,
        });
    }
    Ok(out)
}

/// Hold `log`'s writer lock for as long as the returned file is open, so
/// that no writer starts while a plan is made; `Locked`, naming the
/// holder's process id when its lock file shows one, if a writer holds
/// it. No lock file (no writer ever opened the log), or one this process
/// may not open, is no writer. Opened read-only: `flock` needs no more.
/// Cost: an `open` and a `flock`.
pub(crate) fn hold_writer_lock(
    cfg: &Config,
    log: &LogDir,
) -> Result<Option<ringwal_platform::VFile>> {
    let path = log.lock();
    let file = match cfg.vfs.open(&path, ringwal_platform::OpenHow::default()) {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    if file.try_lock().map_err(|e| Error::io(&path, e))? {
        return Ok(Some(file));
    }
    Err(crate::segment::set::held_by_another(&file, path))
}

/// Node ids that have at least one segment file in `dir`, ascending.
///
/// Only names matching the segment pattern count (spares, lock files and
/// unrelated files do not); headers are not read. Cost: one `readdir`.
pub fn nodes(dir: &Path) -> Result<Vec<u32>> {
    let cfg = Config::default();
    let names = cfg.vfs.list(dir).map_err(|e| Error::io(dir, e))?;
    let mut out: Vec<u32> = names
        .iter()
        .filter_map(|n| format::parse_segment_file_name(n))
        .map(|(node, _)| node)
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The log id the node's manifest names (when it reads) and `files`, a
/// log's segments in LSN order, less a newest file whose header was never
/// written (a crash mid-create): what an offline deed walks. Cost: a
/// 64-byte manifest read and one header read.
pub(crate) fn written_segments(
    cfg: &Config,
    log: &LogDir,
    files: &[SegmentFile],
) -> Result<(Option<u64>, Vec<SegmentFile>)> {
    let log_id = crate::segment::manifest::read(&*cfg.vfs, log)
        .ok()
        .flatten()
        .map(|m| m.log_id);
    let mut files = files.to_vec();
    scan::pop_never_written(&*cfg.vfs, &mut files, log.node(), log_id)?;
    Ok((log_id, files))
}

/// The last LSN of `files`, a log's segments in LSN order: where the walk
/// of the newest one whose header was written ends (the base of an empty
/// one minus one). What an offline deed holds an LSN given to it against,
/// so that an LSN past the end is refused rather than taken to release
/// everything. A newest segment whose header does not read is damage,
/// returned as the error a reader would meet. Cost: one header read per
/// never-written file popped, and one read of the newest segment's frames
/// (through the page cache).
pub(crate) fn last_lsn_of(cfg: &Config, log: &LogDir, files: &[SegmentFile]) -> Result<Lsn> {
    let (log_id, files) = written_segments(cfg, log, files)?;
    let Some(newest) = files.last() else {
        return Ok(0);
    };
    let mut w = match scan::open(&*cfg.vfs, newest, log.node(), log_id)? {
        Ok(w) => w,
        Err(p) => return Err(p.error(newest, log.node())),
    };
    w.walk_to_end()?;
    Ok(w.last_lsn())
}

/// The last LSN of `cfg.node()`'s log in `dir` as it is on disk: where
/// the frames of its newest segment end (recovery may still cut a torn
/// tail below it). For a check made before a deed that must change
/// nothing when refused, such as a checkpoint past the end. `NoLog` when
/// there is none; `Locked`, as [`recovery_plan`], while a writer holds it
/// (its end moves); 0 for a log of no record. Takes the writer lock for
/// as long as it reads, writes nothing. Cost: one `readdir`, a 64-byte
/// manifest read, and one read of the newest segment's frames (through
/// the page cache).
pub fn last_lsn(dir: &Path, cfg: &Config) -> Result<Lsn> {
    let log = LogDir::new(dir, cfg.node);
    let files = log.list_log(&*cfg.vfs, false)?.segments;
    let _lock = hold_writer_lock(cfg, &log)?;
    last_lsn_of(cfg, &log, &files)
}

/// Summarise `cfg.node()`'s log in `dir`: segment headers and sizes, a
/// walk of each segment's frames (the newest one's for the last LSN,
/// every one's for the LSNs given up and for where it ends), and the
/// manifest's promises held against them ([`Checked::Headers`]). With
/// `cfg`'s keys, each encrypted segment's key is held to its header's key
/// check ([`SegmentReport::payloads`]).
///
/// An older segment's last LSN is the next segment's base minus one
/// ([`LastLsnFrom::NextHeader`]). A header that does not read, or
/// contradicts its file name, is reported in [`LogReport::problems`] and
/// its file counted in nothing but `file_bytes`; so is a manifest that
/// does not decode, damage a walk meets (frames cut off a sealed segment
/// among them), and an end of the log short of the LSN the manifest says
/// was durable: the problems [`verify`] reports, but for payloads and
/// the newest segment's end. A directory that holds no log of the node
/// gives an empty report; one that cannot be listed is `Err(Io)`.
/// Read-only.
///
/// Cost: one `readdir`, one `fstat` and one 8 KiB header read per
/// segment, one 64-byte manifest read, and one read of every segment's
/// frames (through the page cache), for the last LSN and for the LSNs
/// recovery gave up, which hold no record; one AEAD call per encrypted
/// segment whose key `cfg` has. Payloads are not decrypted or
/// decompressed ([`verify`] checks them).
pub fn stat(dir: &Path, cfg: &Config) -> Result<LogReport> {
    let node = cfg.node;
    let log = LogDir::new(dir, node);
    let listing = log.list(&*cfg.vfs)?;
    let mut problems = Vec::new();
    let manifest = match crate::segment::manifest::read(&*cfg.vfs, &log) {
        Ok(m) => m,
        Err(e @ Error::Corrupt { .. }) => {
            problems.push(e);
            None
        }
        Err(e) => return Err(e),
    };
    let log_id = manifest.map(|m| m.log_id);
    let mut files = listing.segments;
    let incomplete = scan::pop_never_written(&*cfg.vfs, &mut files, node, log_id)?;
    let mut out = LogReport {
        node,
        checked: Checked::Headers,
        segments: Vec::with_capacity(files.len()),
        first_lsn: 0,
        last_lsn: 0,
        records: 0,
        file_bytes: 0,
        torn_tail: None,
        incomplete: incomplete.into_iter().map(|f| f.path).collect(),
        spares: listing.spares,
        headers_from_copy: Vec::new(),
        manifest: manifest.as_ref().map(Promised::of),
        archived_lsn: crate::segment::archived::held_at(&*cfg.vfs, &log)?,
        problems: Vec::new(),
    };
    let mut given_up = 0;
    let newest_walker = stat_segments(cfg, &files, log_id, &mut out, &mut problems, &mut given_up)?;
    if let (Some(mut w), Some(newest)) = (newest_walker, out.segments.last_mut()) {
        w.walk_to_end()?;
        newest.last_lsn = w.last_lsn();
        newest.last_lsn_from = LastLsnFrom::Walk;
        walked(newest, &w);
        given_up += w.given_up();
    }
    if let (Some(first), Some(last)) = (out.segments.first(), out.segments.last())
        && last.last_lsn >= first.base_lsn
    {
        out.first_lsn = first.base_lsn;
        out.last_lsn = last.last_lsn;
        // The LSNs recovery gave up hold no record, as `verify` and
        // the readers count them.
        out.records = last.last_lsn - first.base_lsn + 1 - given_up;
    }
    if let Some(m) = &manifest {
        let newest = out.segments.last();
        let disk = crate::segment::manifest::OnDisk {
            oldest: files.first().map(|f| f.base),
            newest: files.last().map(|f| f.base),
            last_lsn: newest.map_or(0, |s| s.last_lsn),
            last_file: newest.map(|s| s.path.as_path()),
        };
        problems.extend(crate::segment::manifest::broken_promise(m, &log, disk));
    }
    out.problems = problems;
    Ok(out)
}

/// Read the header of each of `files` into `out.segments` (each one's
/// last LSN the next one's base minus one), pushing a header that cannot
/// be used to `problems` instead. Returns the walker of the newest usable
/// segment, not yet walked.
fn stat_segments(
    cfg: &Config,
    files: &[SegmentFile],
    log_id: Option<u64>,
    out: &mut LogReport,
    problems: &mut Vec<Error>,
    given_up: &mut Lsn,
) -> Result<Option<scan::Walker>> {
    let node = cfg.node;
    let mut newest: Option<scan::Walker> = None;
    for f in files {
        let file_bytes = cfg
            .vfs
            .open(&f.path, ringwal_platform::OpenHow::default())
            .and_then(|h| h.size())
            .map_err(|e| Error::io(&f.path, e))?;
        out.file_bytes += file_bytes;
        let w = match scan::open(&*cfg.vfs, f, node, log_id)? {
            Ok(w) => w,
            Err(p) => {
                problems.push(p.error(f, node));
                continue;
            }
        };
        let h = *w.header();
        assert!(
            out.segments.last().is_none_or(|p| p.base_lsn < h.base_lsn),
            "segments are read by ascending base"
        );
        if w.header_from_copy() {
            out.headers_from_copy.push(f.path.clone());
        }
        // The segment before this one is older now: its frames are walked
        // for what its header cannot give, the LSNs recovery gave up in
        // it (a skip frame: no record), and whether its records reach
        // this one's base; so every command counts the records `verify`
        // and the readers yield, and calls a cut one damage as they do.
        if let (Some(older), Some(prev)) = (newest.take(), out.segments.last_mut())
            && let Err(e) = judge_older(cfg, older, prev, &f.path, h.base_lsn, given_up)
        {
            problems.push(e);
        }
        if let Some(prev) = out.segments.last_mut() {
            prev.last_lsn = h.base_lsn - 1;
        }
        out.segments.push(SegmentReport {
            path: f.path.clone(),
            base_lsn: h.base_lsn,
            last_lsn: h.base_lsn - 1,
            last_lsn_from: LastLsnFrom::NextHeader,
            records: 0,
            valid_bytes: 0,
            file_bytes,
            segment_bytes: h.segment_bytes,
            version: h.version,
            created_unix_ms: (h.created_unix_ms > 0).then_some(h.created_unix_ms),
            key_id: h.key_id,
            payloads: key_status(cfg, &h),
        });
        newest = Some(w);
    }
    Ok(newest)
}

/// Note in `seg` what the walk `w` of its frames, now at their end,
/// counted.
fn walked(seg: &mut SegmentReport, w: &scan::Walker) {
    seg.records = w.records();
    seg.valid_bytes = w.valid_end() - w.header().frames_start();
}

/// Walk an older segment (`seg`) to its end and judge that end as every
/// reader does (the one table), given the next segment's base: damage is
/// the error `verify` reports for it. Adds the LSNs given up in it.
fn judge_older(
    cfg: &Config,
    mut w: scan::Walker,
    seg: &mut SegmentReport,
    next: &Path,
    next_base: Lsn,
    given_up: &mut Lsn,
) -> Result<()> {
    let end = w.walk_to_end()?;
    *given_up += w.given_up();
    walked(seg, &w);
    let last = w.last_lsn();
    let pos = scan::Position::of(false, cfg.torn_window(), w.header()).followed_by(Some(next_base));
    if let scan::Verdict::Corrupt(damage) = w.judge(end, pos)? {
        return Err(damage.error(w.path(), end));
    }
    if last + 1 < next_base {
        // Named where the gap shows, as recovery names it: the segment
        // that starts too high.
        return Err(Error::Gap {
            file: next.to_path_buf(),
            expected: last + 1,
            found: next_base,
        });
    }
    Ok(())
}

/// Iterate over `cfg.node()`'s records in `dir` in LSN order, starting at
/// `from` (0: the oldest on disk), across segments, each with its segment
/// and offset: a [`Reader`] over the directory as it is now, with `cfg`'s
/// torn window and keys (an encrypted log's records need
/// [`ConfigBuilder::encryption`]).
///
/// `from` below the oldest LSN on disk is `Err(Released)` (those records
/// were checkpointed away), or `Err(Gap)` if the node's manifest says the
/// log still holds them (its oldest segment is missing). `from` past the newest yields nothing. A path that
/// does not exist or is not a directory, or a directory with neither a
/// segment nor a manifest of the node, is `Err(NoLog)`.
///
/// The iterator stops at the end of valid data in the newest segment:
/// never-written space, a torn tail, or where a live writer has got to,
/// unless the node's manifest promised more: records it says were
/// durable that are not there end the iteration with `Lost`, a newest
/// segment it names that is gone with `Gap`, as `Wal::open` would fail.
/// Damage that is not a torn tail (a bad frame in an older
/// segment, a valid frame beyond the torn window, an LSN out of sequence,
/// a gap between segments, a bad header) is yielded as one `Err` naming
/// the file and offset, after which the iterator ends.
///
/// Read-only; the directory is listed once, here. Cost: reads through the
/// page cache in 1 MiB chunks, two allocations per record (payload and
/// segment name); reaching the end of a segment early reads the rest of
/// it to tell a clean end from lost data.
///
/// [`ConfigBuilder::encryption`]: crate::ConfigBuilder::encryption
pub fn records(dir: &Path, cfg: &Config, from: Lsn) -> Result<Records> {
    let dir = LogDir::new(dir, cfg.node);
    Ok(Reader::open_dir(cfg, dir, from)?.located())
}

/// Follow `cfg.node()`'s records in `dir` from `from` (0: the oldest on
/// disk) as another process writes them, polling every `every` at the
/// end of the data (see [`DirFollower`]), with `cfg`'s torn window and
/// keys. `Gap` at once if `from` is below the oldest record on disk.
/// Read-only, like [`records`].
pub fn follow(dir: &Path, cfg: &Config, from: Lsn, every: Duration) -> Result<DirFollower> {
    DirFollower::new(cfg, LogDir::new(dir, cfg.node), from, every)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::at_rest::format::Kind;
    use crate::segment::set as segments;
    use crate::{Level, Wal};
    use std::os::unix::fs::FileExt;

    const SEG: u64 = 64 << 10;

    /// The default writer's configuration of `node`.
    fn node(n: u32) -> Config {
        Config::builder().node(n).build()
    }

    fn small(node: u32) -> Config {
        Config::builder()
            .node(node)
            .segment_bytes(SEG)
            .max_record_bytes(8 << 10)
            .build()
    }

    fn payload(i: u64) -> Vec<u8> {
        format!("rec-{i}-")
            .repeat((i % 40) as usize + 1)
            .into_bytes()
    }

    /// A closed log of `n` records on `node`, rolled over several segments.
    fn make_log(dir: &Path, node: u32, n: u64) {
        let (wal, _) = Wal::open(dir, small(node)).unwrap();
        let mut last = None;
        for i in 1..=n {
            last = Some(wal.append((i % 3) as u16, &payload(i)).unwrap());
        }
        if let Some(t) = last {
            t.wait(Level::Durable).unwrap();
        }
        wal.close().unwrap();
    }

    fn segment_paths(dir: &Path, node: u32) -> Vec<PathBuf> {
        segments::list(&ringwal_platform::RealFs, dir, node)
            .unwrap()
            .segments
            .into_iter()
            .map(|s| s.path)
            .collect()
    }

    fn flip(path: &Path, at: u64) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        b[0] ^= 0x40;
        f.write_all_at(&b, at).unwrap();
    }

    #[test]
    fn good_log_is_consistent_and_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        let r = verify(dir.path(), &node(1)).unwrap();
        assert_eq!(r.consistent(), Some(true), "{:?}", r.problems);
        assert!(r.segments.len() > 2, "{r:?}");
        assert_eq!(r.records, 1500);
        assert_eq!((r.first_lsn, r.last_lsn), (1, 1500));
        assert!(r.torn_tail.is_none());
        for w in r.segments.windows(2) {
            assert_eq!(w[0].last_lsn + 1, w[1].base_lsn);
        }

        let recs: Vec<RecordAt> = records(dir.path(), &node(1), 0)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(recs.len(), 1500);
        for (i, rec) in recs.iter().enumerate() {
            let lsn = i as u64 + 1;
            assert_eq!(rec.lsn, lsn);
            assert_eq!(rec.payload, payload(lsn));
            assert_eq!(rec.len, rec.payload.len());
            assert_eq!(rec.stream, (lsn % 3) as u16);
            assert_eq!(rec.kind, Kind::Data);
            assert!(rec.offset >= format::HEADER_BYTES as u64 && rec.offset < SEG);
            assert!(format::parse_segment_file_name(&rec.segment).is_some());
        }
        // The reported location is where the frame really is.
        let last = recs.last().unwrap();
        let f = std::fs::File::open(dir.path().join(&last.segment)).unwrap();
        let mut lsn = [0u8; 8];
        f.read_exact_at(&mut lsn, last.offset + 8).unwrap();
        assert_eq!(u64::from_le_bytes(lsn), 1500);
    }

    #[test]
    fn from_seeks_and_below_oldest_is_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1200);
        let got: Vec<Lsn> = records(dir.path(), &node(1), 777)
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        assert_eq!(got, (777..=1200).collect::<Vec<_>>());
        assert_eq!(records(dir.path(), &node(1), 5000).unwrap().count(), 0);

        // Drop the oldest segment with a checkpoint.
        let second = segment_paths(dir.path(), 1)[1].clone();
        let oldest = format::parse_segment_file_name(second.file_name().unwrap().to_str().unwrap())
            .unwrap()
            .1;
        let (wal, _) = Wal::open(dir.path(), small(1)).unwrap();
        assert_eq!(wal.checkpoint(oldest - 1).unwrap(), 1);
        wal.close().unwrap();
        match records(dir.path(), &node(1), 1) {
            Err(Error::Released { lsn, oldest: o, .. }) => assert_eq!((lsn, o), (1, oldest)),
            other => panic!("expected a release, got {other:?}"),
        }
        // A log that starts later is still consistent.
        assert_eq!(
            verify(dir.path(), &node(1)).unwrap().consistent(),
            Some(true)
        );
        // One whose oldest segment went missing without a checkpoint is not.
        let first = segment_paths(dir.path(), 1).remove(0);
        std::fs::remove_file(&first).unwrap();
        let r = verify(dir.path(), &node(1)).unwrap();
        assert!(
            matches!(r.problems.as_slice(), [Error::Gap { expected, .. }] if *expected == oldest),
            "{:?}",
            r.problems
        );
        // And a read from below it is that damage, not a release.
        assert!(
            matches!(records(dir.path(), &node(1), oldest), Err(Error::Gap { expected, .. }) if expected == oldest),
        );
    }

    #[test]
    fn damage_in_a_sealed_segment_is_named_by_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        let segs = segment_paths(dir.path(), 1);
        let at = format::HEADER_BYTES as u64 + 4000;
        flip(&segs[1], at);

        let r = verify(dir.path(), &node(1)).unwrap();
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        match &r.problems[0] {
            Error::Corrupt { file, offset, .. } => {
                assert_eq!(file, &segs[1]);
                assert!(*offset <= at && *offset >= format::HEADER_BYTES as u64);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }

        let items: Vec<Result<RecordAt>> = records(dir.path(), &node(1), 0).unwrap().collect();
        let (ok, bad): (Vec<_>, Vec<_>) = items.into_iter().partition(|r| r.is_ok());
        assert_eq!(bad.len(), 1);
        assert!(matches!(&bad[0], Err(Error::Corrupt { file, .. }) if file == &segs[1]));
        assert!(!ok.is_empty());
    }

    #[test]
    fn every_damaged_segment_is_named() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 2500);
        let segs = segment_paths(dir.path(), 1);
        assert!(segs.len() > 5, "{segs:?}");
        flip(&segs[1], format::HEADER_BYTES as u64 + 200);
        std::fs::remove_file(&segs[3]).unwrap();
        flip(
            &segs[4],
            format::HEADER_BYTES as u64 + format::BLOCK as u64 + 64,
        );
        let r = verify(dir.path(), &node(1)).unwrap();
        let named: Vec<(&Path, bool)> = r
            .problems
            .iter()
            .map(|p| match p {
                Error::Corrupt { file, .. } => (file.as_path(), true),
                Error::Gap { file, .. } => (file.as_path(), false),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            named,
            vec![
                (segs[1].as_path(), true),
                (segs[4].as_path(), false),
                (segs[4].as_path(), true)
            ],
            "{:?}",
            r.problems
        );
        // The first problem is the one a strict open fails with.
        let err = Wal::open(dir.path(), small(1)).unwrap_err();
        assert_eq!(err.to_string(), r.problems[0].to_string());
    }

    #[test]
    fn header_rules_match_recovery() {
        // A never-written newest file is an incomplete file; a damaged or
        // blank header with its copy intact reads through the copy; with
        // both lost it is corruption. verify, records, stat and a strict
        // open must agree.
        #[derive(Clone, Copy, PartialEq, Debug)]
        enum Case {
            NeverWritten,
            HeaderZeroed,
            HeaderDamaged,
            BothZeroed,
            BothDamaged,
        }
        for case in [
            Case::NeverWritten,
            Case::HeaderZeroed,
            Case::HeaderDamaged,
            Case::BothZeroed,
            Case::BothDamaged,
        ] {
            let dir = tempfile::tempdir().unwrap();
            make_log(dir.path(), 1, 1200);
            let newest = segment_paths(dir.path(), 1).pop().unwrap();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&newest)
                .unwrap();
            let block = format::BLOCK as u64;
            match case {
                Case::NeverWritten => {
                    let next = stat(dir.path(), &node(1)).unwrap().last_lsn + 1;
                    let name = format::segment_file_name(1, next);
                    std::fs::write(dir.path().join(name), vec![0u8; SEG as usize]).unwrap();
                }
                Case::HeaderZeroed => f.write_all_at(&[0u8; 64], 0).unwrap(),
                Case::HeaderDamaged => f.write_all_at(b"XX", 0).unwrap(),
                Case::BothZeroed => {
                    f.write_all_at(&[0u8; 64], 0).unwrap();
                    f.write_all_at(&[0u8; 4096], block).unwrap();
                }
                Case::BothDamaged => {
                    f.write_all_at(b"XX", 0).unwrap();
                    f.write_all_at(b"XX", block).unwrap();
                }
            }
            drop(f);
            let incomplete = usize::from(case == Case::NeverWritten);
            let consistent = matches!(
                case,
                Case::NeverWritten | Case::HeaderZeroed | Case::HeaderDamaged
            );
            let r = verify(dir.path(), &node(1)).unwrap();
            assert_eq!(
                r.consistent(),
                Some(consistent),
                "{case:?}: {:?}",
                r.problems
            );
            assert_eq!(r.incomplete.len(), incomplete);
            let from_copy = matches!(case, Case::HeaderZeroed | Case::HeaderDamaged);
            assert_eq!(
                r.headers_from_copy,
                if from_copy {
                    vec![newest.clone()]
                } else {
                    vec![]
                }
            );
            let items: Vec<Result<RecordAt>> = records(dir.path(), &node(1), 0).unwrap().collect();
            assert_eq!(items.iter().all(|r| r.is_ok()), consistent, "{case:?}");
            if consistent {
                assert_eq!(items.len(), 1200);
            }
            let s = stat(dir.path(), &node(1)).unwrap();
            assert_eq!(s.incomplete.len(), incomplete);
            match Wal::open(dir.path(), small(1)) {
                Ok((wal, rep)) => {
                    assert!(consistent, "{case:?}");
                    assert_eq!(rep.headers_from_copy.len(), usize::from(from_copy));
                    wal.close().unwrap();
                }
                Err(e) => {
                    assert!(!consistent, "{case:?}: {e}");
                    assert_eq!(e.to_string(), r.problems[0].to_string());
                }
            }
        }
    }

    #[test]
    fn missing_middle_segment_is_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        let segs = segment_paths(dir.path(), 1);
        std::fs::remove_file(&segs[1]).unwrap();
        let r = verify(dir.path(), &node(1)).unwrap();
        assert!(
            matches!(r.problems.as_slice(), [Error::Gap { file, .. }] if file == &segs[2]),
            "{:?}",
            r.problems
        );
        let last = records(dir.path(), &node(1), 0).unwrap().last().unwrap();
        assert!(matches!(last, Err(Error::Gap { .. })), "{last:?}");
    }

    #[test]
    fn torn_tail_is_reported_and_reading_stops_silently() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1000);
        let newest = segment_paths(dir.path(), 1).pop().unwrap();
        let end = verify(dir.path(), &node(1))
            .unwrap()
            .segments
            .last()
            .map(|s| s.valid_bytes + format::HEADER_BYTES as u64)
            .unwrap();
        // Half a frame header of garbage where the next write would go.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&newest)
            .unwrap();
        f.write_all_at(&[0x5a; 12], end).unwrap();

        let r = verify(dir.path(), &node(1)).unwrap();
        assert_eq!(r.consistent(), Some(true), "{:?}", r.problems);
        let torn = r.torn_tail.expect("a torn tail");
        assert_eq!((torn.file, torn.offset), (newest, end));
        let lsns: Vec<Lsn> = records(dir.path(), &node(1), 0)
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        assert_eq!(lsns, (1..=1000).collect::<Vec<_>>());
        // Verify changed nothing: recovery still finds and cuts the tail.
        let (wal, rep) = Wal::open(dir.path(), small(1)).unwrap();
        assert!(rep.truncated.is_some());
        assert_eq!(rep.records, 1000);
        wal.close().unwrap();
    }

    #[test]
    fn nodes_and_stat_summarise_each_node() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        make_log(dir.path(), 7, 10);
        std::fs::write(dir.path().join("notes.txt"), b"not a segment").unwrap();
        assert_eq!(nodes(dir.path()).unwrap(), vec![1, 7]);

        let s = stat(dir.path(), &node(1)).unwrap();
        assert_eq!((s.first_lsn, s.last_lsn, s.records), (1, 1500, 1500));
        assert!(s.segments.len() > 2);
        assert_eq!(s.file_bytes, s.segments.len() as u64 * SEG);
        for w in s.segments.windows(2) {
            assert_eq!(w[0].last_lsn + 1, w[1].base_lsn);
        }
        let s7 = stat(dir.path(), &node(7)).unwrap();
        assert_eq!((s7.first_lsn, s7.last_lsn, s7.segments.len()), (1, 10, 1));
        let none = stat(dir.path(), &node(3)).unwrap();
        assert_eq!((none.records, none.segments.len()), (0, 0));
        assert!(matches!(
            records(dir.path(), &node(3), 0),
            Err(Error::NoLog { node: 3, .. })
        ));
    }

    #[test]
    fn empty_log_has_no_records() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 0);
        let r = verify(dir.path(), &node(1)).unwrap();
        assert_eq!(r.consistent(), Some(true));
        assert_eq!((r.segments.len(), r.records, r.last_lsn), (1, 0, 0));
        assert_eq!(records(dir.path(), &node(1), 0).unwrap().count(), 0);
        let s = stat(dir.path(), &node(1)).unwrap();
        assert_eq!((s.first_lsn, s.last_lsn, s.records), (0, 0, 0));
    }

    #[test]
    fn verify_never_modifies_files() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 800);
        let segs = segment_paths(dir.path(), 1);
        flip(&segs[0], format::HEADER_BYTES as u64 + 100);
        let before: Vec<Vec<u8>> = segs.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let names_before = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(
            verify(dir.path(), &node(1)).unwrap().consistent(),
            Some(false)
        );
        let _ = records(dir.path(), &node(1), 0).unwrap().count();
        let _ = stat(dir.path(), &node(1)).unwrap();
        let after: Vec<Vec<u8>> = segs.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(before == after);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), names_before);
    }

    #[test]
    fn reads_beside_a_live_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(1)).unwrap();
        for i in 1..=300 {
            let _ = wal.append(0, &payload(i)).unwrap();
        }
        wal.sync().unwrap();
        let r = verify(dir.path(), &node(1)).unwrap();
        assert_eq!(r.consistent(), Some(true), "{:?}", r.problems);
        assert!(r.records >= 300);
        let mut n = 0;
        for rec in records(dir.path(), &node(1), 0).unwrap() {
            assert_eq!(rec.unwrap().lsn, n + 1);
            n += 1;
        }
        assert!(n >= 300);
        wal.close().unwrap();
    }

    #[test]
    fn recovery_plan_is_what_an_open_then_does() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            recovery_plan(dir.path(), &small(1)),
            Err(Error::NoLog { node: 1, .. })
        ));
        make_log(dir.path(), 1, 1000);
        let clean = recovery_plan(dir.path(), &small(1)).unwrap();
        assert!(clean.is_noop(), "{clean:?}");
        assert_eq!((clean.next_lsn, clean.records), (1001, 1000));

        let newest = segment_paths(dir.path(), 1).pop().unwrap();
        let end = verify(dir.path(), &node(1))
            .unwrap()
            .segments
            .last()
            .map(|s| s.valid_bytes + format::HEADER_BYTES as u64)
            .unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&newest)
            .unwrap();
        f.write_all_at(&[0x5a; 12], end).unwrap();
        // A blank spare-named leftover is discarded too.
        let spare = dir.path().join(format::spare_file_name(1, 9));
        std::fs::write(&spare, vec![0u8; SEG as usize]).unwrap();
        let before = std::fs::read(&newest).unwrap();
        let plan = recovery_plan(dir.path(), &small(1)).unwrap();
        assert_eq!(std::fs::read(&newest).unwrap(), before);
        assert!(!plan.is_noop());
        let cut = plan.cut.clone().expect("a cut");
        assert_eq!((cut.file.clone(), cut.offset), (newest, end));
        assert_eq!(plan.discard, vec![spare]);

        let (wal, rep) = Wal::open(dir.path(), small(1)).unwrap();
        assert_eq!(rep.truncated, Some(cut));
        assert_eq!(rep.discarded, plan.discard);
        assert_eq!(rep.skipped, plan.skipped);
        assert_eq!(wal.next_lsn(), plan.next_lsn);
        wal.close().unwrap();
        assert!(recovery_plan(dir.path(), &small(1)).unwrap().is_noop());
    }

    #[test]
    fn stat_reads_headers_and_holds_the_log_to_its_manifest() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        let clean = stat(dir.path(), &node(1)).unwrap();
        assert!(clean.problems.is_empty(), "{:?}", clean.problems);
        assert_eq!(clean.manifest.map(|m| m.durable_lsn), Some(1500));
        let n = clean.segments.len();
        assert!(n > 2);
        assert!(clean.segments[..n - 1]
            .iter()
            .all(|s| s.last_lsn_from == LastLsnFrom::NextHeader));
        assert_eq!(clean.segments[n - 1].last_lsn_from, LastLsnFrom::Walk);

        // Garbage under a segment name past the newest: reported, and
        // its name counts for nothing.
        let junk = dir.path().join(format::segment_file_name(1, 9999));
        let noise: Vec<u8> = (0..SEG).map(|i| (i * 7 + 3) as u8).collect();
        std::fs::write(&junk, &noise).unwrap();
        let s = stat(dir.path(), &node(1)).unwrap();
        assert_eq!((s.last_lsn, s.records, s.segments.len()), (1500, 1500, n));
        assert!(
            matches!(s.problems.as_slice(), [Error::Corrupt { file, .. }] if file == &junk),
            "{:?}",
            s.problems
        );
        std::fs::remove_file(&junk).unwrap();

        // The newest segment cut short: the manifest's durable LSN is gone.
        let newest = segment_paths(dir.path(), 1).pop().unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&newest)
            .unwrap();
        f.set_len(format::BLOCK as u64 * 2).unwrap();
        let s = stat(dir.path(), &node(1)).unwrap();
        assert!(
            matches!(s.problems.as_slice(), [Error::Lost { durable: 1500, .. }]),
            "{:?}",
            s.problems
        );
        assert!(s.segments[n - 1].file_bytes < s.segments[n - 1].segment_bytes);
    }

    #[test]
    fn point_in_time_plan_is_what_a_point_in_time_open_does() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 2500);
        let segs = segment_paths(dir.path(), 1);
        assert!(segs.len() > 4, "{segs:?}");
        flip(&segs[2], format::HEADER_BYTES as u64 + 300);
        let pit = Config::builder()
            .node(1)
            .segment_bytes(SEG)
            .max_record_bytes(8 << 10)
            .recovery(RecoveryMode::PointInTime)
            .build();
        let before: Vec<Vec<u8>> = segs.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let plan = recovery_plan(dir.path(), &pit).unwrap();
        let after: Vec<Vec<u8>> = segs.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(before == after, "a plan changed a file");
        assert_eq!(plan.mode, RecoveryMode::PointInTime);
        assert!(
            matches!(plan.problems.as_slice(), [Error::Corrupt { file, .. }] if file == &segs[2]),
            "{:?}",
            plan.problems
        );
        let cut = plan.cut.clone().expect("the damaged segment is cut");
        assert_eq!(cut.file, segs[2]);
        let mut copy = segs[2].clone().into_os_string();
        copy.push(".corrupt");
        assert_eq!(plan.cut_copy.as_deref(), Some(Path::new(&copy)));
        let aside: Vec<&Path> = plan.set_aside.iter().map(|s| s.file.as_path()).collect();
        let later: Vec<&Path> = segs[3..].iter().map(PathBuf::as_path).collect();
        assert_eq!(aside, later);
        for s in &plan.set_aside {
            let (first, last) = s.lsns.expect("records in a set-aside segment");
            assert!(first <= last && last <= 2500, "{s:?}");
            assert_eq!(s.bytes, SEG);
            assert!(!s.to.exists());
        }
        let (kept_first, kept_last) = plan.kept.unwrap();
        assert_eq!(kept_first, 1);
        assert_eq!(plan.skipped, Some((kept_last + 1, 2500)));
        assert_eq!(plan.next_lsn, 2501);

        let (wal, rep) = Wal::open(dir.path(), pit).unwrap();
        assert_eq!(wal.next_lsn(), plan.next_lsn);
        assert_eq!(rep.skipped, plan.skipped);
        assert_eq!(rep.truncated.map(|t| t.offset), Some(cut.offset));
        let names = |v: &[PathBuf]| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let planned: Vec<PathBuf> = plan.set_aside.iter().map(|s| s.file.clone()).collect();
        assert_eq!(names(&rep.discarded), names(&planned));
        wal.close().unwrap();
        assert!(plan.set_aside.iter().all(|s| s.to.exists()));
    }

    #[test]
    fn plans_refuse_a_log_a_writer_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), small(1)).unwrap();
        wal.append(0, b"x").unwrap().wait(Level::Durable).unwrap();
        let pid = Some(std::process::id());
        for locked in [
            recovery_plan(dir.path(), &small(1)).map(|_| ()),
            checkpoint_plan(dir.path(), &small(1), 1).map(|_| ()),
        ] {
            assert!(
                matches!(&locked, Err(Error::Locked { pid: p, .. }) if *p == pid),
                "{locked:?}"
            );
        }
        wal.close().unwrap();
        assert!(recovery_plan(dir.path(), &small(1)).unwrap().is_noop());
    }

    #[test]
    fn checkpoint_plan_names_what_a_checkpoint_removes() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 2000);
        let segs = segment_paths(dir.path(), 1);
        let plan = checkpoint_plan(dir.path(), &small(1), 1000).unwrap();
        assert_eq!(plan.last_lsn, 2000);
        assert!(!plan.remove.is_empty());
        assert!(plan.remove.iter().all(|r| r.last_lsn <= 1000));
        let all = checkpoint_plan(dir.path(), &small(1), 2000).unwrap();
        assert_eq!(all.remove.len(), segs.len() - 1, "never the newest");
        // Past the end, as a checkpoint is: refused.
        assert!(matches!(
            checkpoint_plan(dir.path(), &small(1), 2001),
            Err(Error::PastEnd {
                what: "up_to",
                lsn: 2001,
                last: 2000
            })
        ));
        assert_eq!(segment_paths(dir.path(), 1), segs, "a plan removed a file");

        let (wal, _) = Wal::open(dir.path(), small(1)).unwrap();
        assert_eq!(wal.checkpoint(1000).unwrap(), plan.remove.len());
        wal.close().unwrap();
        let gone: Vec<&PathBuf> = plan.remove.iter().map(|r| &r.file).collect();
        assert!(gone.iter().all(|f| !f.exists()));
        assert_eq!(
            segment_paths(dir.path(), 1),
            segs[plan.remove.len()..].to_vec()
        );
    }
}
