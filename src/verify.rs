//! Read-only inspection of a log directory, for `ringwal verify`, `stat`,
//! `cat` and `dump`. Nothing here takes the writer lock or modifies a file,
//! so it runs beside a live writer (stopping at the last valid frame).
//!
//! Every function sees a snapshot of the directory listing taken when it
//! is called; segments created afterwards are not read. The checks are
//! recovery's own (the same analysis, the same segment walker), so a log
//! that [`verify`] calls consistent opens without error, and the first
//! problem it names is the one a strict open fails with.
//!
//! The functions without a `Config` argument judge the log with
//! `Config::builder().node(node).build()`: the default torn window
//! (`Config::torn_window`, every write the default writer can have in
//! flight), widened to the window each segment's writer recorded in its
//! header. Pass the writer's configuration to the `_with` variants to
//! judge by a wider window than both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::crypt::KeyProblem;
use crate::error::{Error, Lsn, Result};
use crate::follow::DirFollower;
use crate::format::{self, Codec};
use crate::payload;
use crate::reader::Reader;
pub use crate::reader::{Located as Records, RecordAt};
use crate::recovery::{self, CutWhy, Policy, Truncation};
use crate::scan::{self, Step};
use crate::segments::LogDir;

/// One segment whose header and frames [`verify`] accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentReport {
    /// The segment file.
    pub path: PathBuf,
    /// LSN of its first record (from the validated header).
    pub base_lsn: Lsn,
    /// LSN of its last valid record; `base_lsn - 1` when it holds none.
    pub last_lsn: Lsn,
    /// Records (non-padding frames) in its valid prefix.
    pub records: u64,
    /// Bytes of valid frames, padding included, after the header block.
    pub valid_bytes: u64,
    /// Size of the segment as its header declares it.
    pub segment_bytes: u64,
    /// Format version of the segment (from its header).
    pub version: u32,
    /// When the segment was created, in milliseconds since the Unix
    /// epoch, as its header records it; `None` when the header holds 0.
    pub created_unix_ms: Option<u64>,
    /// The key its data payloads are encrypted with (0: none).
    pub key_id: u32,
    /// How far its payloads were checked.
    pub payloads: Payloads,
}

/// How far [`verify_with`] checked a segment's payloads. Framing, LSNs
/// and checksums are checked in every case: they need no key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payloads {
    /// Plaintext; every compressed payload decompressed to its length.
    Checked,
    /// Encrypted, and every payload authenticated with the key given.
    Authenticated,
    /// Encrypted, and not decrypted: the key is missing or wrong.
    Sealed(KeyProblem),
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

/// What [`verify`] found for one node. Building it never modifies a file.
#[derive(Debug)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The node checked.
    pub node: u32,
    /// Segments whose header and frames were accepted, in LSN order.
    /// A segment named in `problems` is not listed.
    pub segments: Vec<SegmentReport>,
    /// The torn tail of the newest segment, if any (reported, not an error).
    pub torn_tail: Option<TornTail>,
    /// Newest files whose header never became valid (a crash while a
    /// segment was being created); recovery deletes them. Not an error.
    pub incomplete: Vec<PathBuf>,
    /// Preallocated spare files; they hold no log data. Not an error.
    pub spares: Vec<PathBuf>,
    /// Segments whose header block is damaged or blank and whose header
    /// was read from its copy. Not an error, but a sign of a bad sector.
    pub headers_from_copy: Vec<PathBuf>,
    /// Corruption ([`Error::Corrupt`], naming file and offset) and LSN gaps
    /// ([`Error::Gap`], naming the file), in file order. Non-empty means a
    /// strict `Wal::open` would fail.
    pub problems: Vec<Error>,
}

impl VerifyReport {
    /// True when there is nothing in `problems`: the log opens in strict
    /// mode and every record in it reads back.
    pub fn is_consistent(&self) -> bool {
        self.problems.is_empty()
    }

    /// Records in the accepted segments.
    pub fn records(&self) -> u64 {
        self.segments.iter().map(|s| s.records).sum()
    }

    /// Oldest LSN in the accepted segments; 0 when they hold no record.
    pub fn first_lsn(&self) -> Lsn {
        match self.segments.iter().find(|s| s.records > 0) {
            Some(s) => s.base_lsn,
            None => 0,
        }
    }

    /// Newest LSN in the accepted segments; 0 when they hold no record.
    pub fn last_lsn(&self) -> Lsn {
        match self.segments.iter().rev().find(|s| s.records > 0) {
            Some(s) => s.last_lsn,
            None => 0,
        }
    }
}

/// Check every segment of `node` in `dir` with the default configuration
/// (see the module documentation for what that implies).
///
/// Equivalent to [`verify_with`] with `Config::builder().node(node).build()`.
pub fn verify(dir: &Path, node: u32) -> Result<VerifyReport> {
    verify_with(dir, &Config::builder().node(node).build())
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
/// Damage is reported in [`VerifyReport::problems`], not as `Err`; `Err`
/// means the directory or a file could not be read at all. Read-only: no
/// lock, no write, safe beside a live writer. If a live writer makes the
/// newest segment look damaged (it wrote far past where the scan saw the
/// end), the check is repeated once.
///
/// Payloads need a second look only where the checksum is not all there
/// is to them: compressed ones are decompressed, encrypted ones are
/// authenticated when `cfg` has their key ([`SegmentReport::payloads`]);
/// a payload that fails is a `Corrupt` problem.
///
/// Cost: reads every segment file once, end to end (the zero-filled
/// remainder of the newest one included), through the page cache; then
/// walks each accepted segment's frames a second time (from the page
/// cache) to decrypt or decompress the payloads that are so stored.
pub fn verify_with(dir: &Path, cfg: &Config) -> Result<VerifyReport> {
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

fn verify_once(dir: &Path, cfg: &Config) -> Result<VerifyReport> {
    let mut a = recovery::analyze(&LogDir::new(dir, cfg.node), cfg, Policy::ReportAll)?;
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
        let (payloads, damage) = check_payloads(cfg, &s.file, s.last_lsn)?;
        a.problems.extend(damage);
        segments.push(SegmentReport {
            path: s.file.path.clone(),
            base_lsn: s.header.base_lsn,
            last_lsn: s.last_lsn,
            records: s.records,
            valid_bytes: s.valid_end - s.header.frames_start(),
            segment_bytes: s.header.segment_bytes,
            version: s.header.version,
            created_unix_ms: (s.header.created_unix_ms > 0).then_some(s.header.created_unix_ms),
            key_id: s.header.key_id,
            payloads,
        });
    }
    Ok(VerifyReport {
        node: cfg.node(),
        segments,
        torn_tail,
        incomplete: a.incomplete,
        spares: a.spares,
        headers_from_copy: a.headers_from_copy,
        problems: a.problems,
    })
}

/// Open every data payload of `file` up to `last` that is encrypted (when
/// `cfg` has the key) or compressed, through the one payload path; the
/// first that fails is the damage returned. A segment whose key is not
/// at hand is not walked.
fn check_payloads(
    cfg: &Config,
    file: &crate::segments::SegmentFile,
    last: Lsn,
) -> Result<(Payloads, Option<Error>)> {
    let Ok(mut w) = scan::open(&*cfg.vfs, file, cfg.node, None)? else {
        // Accepted by the analysis a moment ago: replaced since (a live
        // writer's checkpoint). Nothing more to say about it.
        return Ok((Payloads::Checked, None));
    };
    let header = *w.header();
    let status = match payload::check_key(&cfg.keys, &header) {
        Ok(()) if header.key_id == 0 => Payloads::Checked,
        Ok(()) => Payloads::Authenticated,
        Err(problem) => return Ok((Payloads::Sealed(problem), None)),
    };
    loop {
        let (at, frame) = match w.next()? {
            Step::Record { at, frame, .. } if frame.lsn <= last => (at, frame),
            Step::Record { .. } | Step::End(_) => return Ok((status, None)),
            Step::Hole { .. } => continue,
        };
        let transformed = payload::sealed(&header, frame.kind) || frame.codec() != Codec::None;
        if transformed {
            if let Err(e) = payload::open(&cfg.keys, &header, &frame) {
                return Ok((status, Some(e.error(&file.path, &header, at))));
            }
        }
    }
}

/// What opening a log in strict mode would do to it, from
/// [`recovery_plan`]. Building it never modifies a file.
#[derive(Debug)]
#[non_exhaustive]
pub struct RecoveryPlan {
    /// The node planned for.
    pub node: u32,
    /// Damage a strict open would fail on (the first one is its error),
    /// in file order. When non-empty, an open changes nothing and the
    /// other fields describe what was read, not what would be done.
    pub problems: Vec<Error>,
    /// The torn tail the open would cut: exactly the
    /// [`RecoveryReport::truncated`](crate::RecoveryReport::truncated)
    /// it would report (bytes zeroed, records dropped).
    pub cut: Option<Truncation>,
    /// Files the open would delete: an incomplete newest segment (a
    /// crash while it was created), then leftover spares. The same list,
    /// in the same order, as `RecoveryReport::discarded`.
    pub discard: Vec<PathBuf>,
    /// LSNs (first, last) the open would record as never to be handed
    /// out; always `None` in strict mode (LSNs resume right after the
    /// last record kept), kept so the plan shows every kind of change.
    pub skipped: Option<(Lsn, Lsn)>,
    /// The first LSN the writer would hand out after the open.
    pub next_lsn: Lsn,
    /// Segments whose header would be read from its copy (not a change).
    pub headers_from_copy: Vec<PathBuf>,
    /// Records the log would hold after the open.
    pub records: u64,
}

impl RecoveryPlan {
    /// True when an open would succeed and change nothing in the node's
    /// files (the manifest and the lock file aside, which every open
    /// writes).
    pub fn is_noop(&self) -> bool {
        self.problems.is_empty()
            && self.cut.is_none()
            && self.discard.is_empty()
            && self.skipped.is_none()
    }
}

/// What `Wal::open` in strict mode would do to `cfg.node()`'s log in
/// `dir`, without doing it: the cut, the files discarded, where LSNs
/// resume, or the damage it would fail on.
///
/// The plan comes from recovery's own analysis and decision (the same
/// functions `Wal::open` runs before it acts), so an open that follows
/// with nothing changed in between does exactly this. `cfg`'s recovery
/// mode is ignored (strict is planned); its torn window counts, as in
/// [`verify_with`]. `Err(NoLog)` when `dir` has no segment of the node
/// (as an open with `create_if_missing(false)` would fail); any other
/// `Err` means a file could not be read.
///
/// Read-only, no lock: beside a live writer the plan describes one moment
/// of a log that an open could not take (`Locked`). Cost: what an open's
/// recovery reads, every segment end to end.
pub fn recovery_plan(dir: &Path, cfg: &Config) -> Result<RecoveryPlan> {
    let mut cfg = cfg.clone();
    cfg.recovery = crate::config::RecoveryMode::Strict;
    let log = LogDir::new(dir, cfg.node);
    log.list_log(&*cfg.vfs, false)?;
    let a = recovery::analyze(&log, &cfg, Policy::of(cfg.recovery))?;
    let records = a.segments.iter().map(|s| s.records).sum();
    let node = cfg.node;
    if !a.problems.is_empty() {
        return Ok(RecoveryPlan {
            node,
            problems: a.problems,
            cut: None,
            discard: Vec::new(),
            skipped: None,
            next_lsn: 0,
            headers_from_copy: a.headers_from_copy,
            records,
        });
    }
    let plan = recovery::plan(&a, &cfg)?;
    Ok(RecoveryPlan {
        node,
        problems: Vec::new(),
        cut: plan.truncation,
        discard: plan.remove,
        skipped: plan.skipped,
        next_lsn: plan.next_lsn,
        headers_from_copy: a.headers_from_copy,
        records,
    })
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

/// One segment as [`stat`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentStat {
    /// The segment file.
    pub path: PathBuf,
    /// LSN of its first record, from the file name.
    pub base_lsn: Lsn,
    /// LSN of its last record: the next segment's base minus one, or for
    /// the newest segment the last valid frame found by scanning it.
    /// `base_lsn - 1` when it holds none.
    pub last_lsn: Lsn,
    /// Size of the file on disk (preallocated, so usually the segment size).
    pub file_bytes: u64,
    /// Format version from the segment's header; `None` when the header
    /// cannot be used (`verify` says why).
    pub version: Option<u32>,
    /// Creation time in milliseconds since the Unix epoch, as the header
    /// records it; `None` when it records none or cannot be used.
    pub created_unix_ms: Option<u64>,
    /// The key its data payloads are encrypted with (0: none, or the
    /// header cannot be used).
    pub key_id: u32,
    /// For an encrypted segment read with keys ([`stat_with`]): whether
    /// the key given for `key_id` is the one it was written with (its
    /// header's key check); `None` without keys or for plaintext.
    pub key_fits: Option<bool>,
}

/// A summary of one node's log, from [`stat`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStat {
    /// The node.
    pub node: u32,
    /// Its segments in LSN order (incomplete newest files excluded).
    pub segments: Vec<SegmentStat>,
    /// Oldest LSN on disk; 0 when the log holds no record.
    pub first_lsn: Lsn,
    /// Newest LSN on disk; 0 when the log holds no record.
    pub last_lsn: Lsn,
    /// Records between them.
    pub records: u64,
    /// Bytes of all segment files together.
    pub file_bytes: u64,
    /// Spare files (preallocated, no log data).
    pub spares: usize,
    /// Newest files whose header never became valid.
    pub incomplete: usize,
}

/// Summarise `node`'s log in `dir` cheaply: segment names, sizes and
/// headers, and one scan of the newest segment for the last LSN.
///
/// Unlike [`verify`] this trusts the file names of older segments and
/// stops the newest at the first frame that is not valid; it finds no
/// corruption. Read-only. Cost: one `readdir`, one `stat` and one 8 KiB
/// header read per segment, and one read of the newest segment's frames.
pub fn stat(dir: &Path, node: u32) -> Result<NodeStat> {
    stat_with(dir, &Config::builder().node(node).build())
}

/// [`stat`] `cfg.node()`'s log, and with `cfg`'s keys say of each
/// encrypted segment whether the key fits ([`SegmentStat::key_fits`]).
/// Cost: [`stat`]'s, plus one AEAD call per encrypted segment.
pub fn stat_with(dir: &Path, cfg: &Config) -> Result<NodeStat> {
    let node = cfg.node;
    let listing = LogDir::new(dir, node).list(&*cfg.vfs)?;
    let spares = listing.spares.len();
    let mut files = listing.segments;
    let incomplete =
        usize::from(scan::pop_never_written(&*cfg.vfs, &mut files, node, None)?.is_some());
    let mut newest_last = None;
    if let Some(last) = files.last() {
        if let Ok(mut w) = scan::open(&*cfg.vfs, last, node, None)? {
            w.walk_to_end()?;
            newest_last = Some(w.last_lsn());
        }
    }
    let mut out = NodeStat {
        node,
        segments: Vec::with_capacity(files.len()),
        first_lsn: 0,
        last_lsn: 0,
        records: 0,
        file_bytes: 0,
        spares,
        incomplete,
    };
    for (i, f) in files.iter().enumerate() {
        let file_bytes = cfg
            .vfs
            .open(&f.path, ringwal_platform::OpenHow::default())
            .and_then(|h| h.size())
            .map_err(|e| Error::io(&f.path, e))?;
        let header = match scan::open(&*cfg.vfs, f, node, None)? {
            Ok(w) => Some(*w.header()),
            Err(_) => None,
        };
        let last_lsn = match files.get(i + 1) {
            Some(next) => next.base.saturating_sub(1),
            None => newest_last.unwrap_or(f.base.saturating_sub(1)),
        };
        out.file_bytes += file_bytes;
        out.segments.push(SegmentStat {
            path: f.path.clone(),
            base_lsn: f.base,
            last_lsn,
            file_bytes,
            version: header.map(|h| h.version),
            created_unix_ms: header.map(|h| h.created_unix_ms).filter(|&ms| ms > 0),
            key_id: header.map_or(0, |h| h.key_id),
            key_fits: header
                .filter(|h| h.key_id != 0 && cfg.has_keys())
                .map(|h| payload::check_key(&cfg.keys, &h).is_ok()),
        });
    }
    if let (Some(first), Some(last)) = (out.segments.first(), out.segments.last()) {
        if last.last_lsn >= first.base_lsn {
            out.first_lsn = first.base_lsn;
            out.last_lsn = last.last_lsn;
            out.records = last.last_lsn - first.base_lsn + 1;
        }
    }
    Ok(out)
}

/// Iterate over `node`'s records from `from` with the default
/// configuration. See [`records_with`].
pub fn records(dir: &Path, node: u32, from: Lsn) -> Result<Records> {
    records_with(dir, &Config::builder().node(node).build(), from)
}

/// Iterate over `cfg.node()`'s records in `dir` in LSN order, starting at
/// `from` (0: the oldest on disk), across segments, each with its segment
/// and offset: a [`Reader`] over the directory as it is now.
///
/// `from` below the oldest LSN on disk is `Err(Gap)` (those records were
/// checkpointed away). `from` past the newest yields nothing. A path that
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
pub fn records_with(dir: &Path, cfg: &Config, from: Lsn) -> Result<Records> {
    let dir = LogDir::new(dir, cfg.node);
    Ok(Reader::open_dir(cfg, dir, from)?.located())
}

/// Follow `node`'s records in `dir` from `from` (0: the oldest on disk) as
/// another process writes them, polling every `every` at the end of the
/// data (see [`DirFollower`]). `Gap` at once if `from` is below the
/// oldest record on disk. Read-only, like [`records`].
pub fn follow(dir: &Path, node: u32, from: Lsn, every: Duration) -> Result<DirFollower> {
    follow_with(dir, &Config::builder().node(node).build(), from, every)
}

/// [`follow`] `cfg.node()`'s records with `cfg`'s torn window and keys
/// (an encrypted log's records need [`ConfigBuilder::encryption`]).
///
/// [`ConfigBuilder::encryption`]: crate::ConfigBuilder::encryption
pub fn follow_with(dir: &Path, cfg: &Config, from: Lsn, every: Duration) -> Result<DirFollower> {
    DirFollower::new(cfg, LogDir::new(dir, cfg.node), from, every)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Kind;
    use crate::segments;
    use crate::{Level, Wal};
    use std::os::unix::fs::FileExt;

    const SEG: u64 = 64 << 10;

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
        let r = verify(dir.path(), 1).unwrap();
        assert!(r.is_consistent(), "{:?}", r.problems);
        assert!(r.segments.len() > 2, "{r:?}");
        assert_eq!(r.records(), 1500);
        assert_eq!((r.first_lsn(), r.last_lsn()), (1, 1500));
        assert!(r.torn_tail.is_none());
        for w in r.segments.windows(2) {
            assert_eq!(w[0].last_lsn + 1, w[1].base_lsn);
        }

        let recs: Vec<RecordAt> = records(dir.path(), 1, 0)
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
        let got: Vec<Lsn> = records(dir.path(), 1, 777)
            .unwrap()
            .map(|r| r.unwrap().lsn)
            .collect();
        assert_eq!(got, (777..=1200).collect::<Vec<_>>());
        assert_eq!(records(dir.path(), 1, 5000).unwrap().count(), 0);

        // Drop the oldest segment with a checkpoint.
        let second = segment_paths(dir.path(), 1)[1].clone();
        let oldest = format::parse_segment_file_name(second.file_name().unwrap().to_str().unwrap())
            .unwrap()
            .1;
        let (wal, _) = Wal::open(dir.path(), small(1)).unwrap();
        assert_eq!(wal.checkpoint(oldest - 1).unwrap(), 1);
        wal.close().unwrap();
        match records(dir.path(), 1, 1) {
            Err(Error::Gap {
                expected, found, ..
            }) => assert_eq!((expected, found), (1, oldest)),
            other => panic!("expected a gap, got {other:?}"),
        }
        // A log that starts later is still consistent.
        assert!(verify(dir.path(), 1).unwrap().is_consistent());
        // One whose oldest segment went missing without a checkpoint is not.
        let first = segment_paths(dir.path(), 1).remove(0);
        std::fs::remove_file(&first).unwrap();
        let r = verify(dir.path(), 1).unwrap();
        assert!(
            matches!(r.problems.as_slice(), [Error::Gap { expected, .. }] if *expected == oldest),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn damage_in_a_sealed_segment_is_named_by_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1500);
        let segs = segment_paths(dir.path(), 1);
        let at = format::HEADER_BYTES as u64 + 4000;
        flip(&segs[1], at);

        let r = verify(dir.path(), 1).unwrap();
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        match &r.problems[0] {
            Error::Corrupt { file, offset, .. } => {
                assert_eq!(file, &segs[1]);
                assert!(*offset <= at && *offset >= format::HEADER_BYTES as u64);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }

        let items: Vec<Result<RecordAt>> = records(dir.path(), 1, 0).unwrap().collect();
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
        let r = verify(dir.path(), 1).unwrap();
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
                    let next = stat(dir.path(), 1).unwrap().last_lsn + 1;
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
            let r = verify(dir.path(), 1).unwrap();
            assert_eq!(r.is_consistent(), consistent, "{case:?}: {:?}", r.problems);
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
            let items: Vec<Result<RecordAt>> = records(dir.path(), 1, 0).unwrap().collect();
            assert_eq!(items.iter().all(|r| r.is_ok()), consistent, "{case:?}");
            if consistent {
                assert_eq!(items.len(), 1200);
            }
            let s = stat(dir.path(), 1).unwrap();
            assert_eq!(s.incomplete, incomplete);
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
        let r = verify(dir.path(), 1).unwrap();
        assert!(
            matches!(r.problems.as_slice(), [Error::Gap { file, .. }] if file == &segs[2]),
            "{:?}",
            r.problems
        );
        let last = records(dir.path(), 1, 0).unwrap().last().unwrap();
        assert!(matches!(last, Err(Error::Gap { .. })), "{last:?}");
    }

    #[test]
    fn torn_tail_is_reported_and_reading_stops_silently() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 1000);
        let newest = segment_paths(dir.path(), 1).pop().unwrap();
        let end = verify(dir.path(), 1)
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

        let r = verify(dir.path(), 1).unwrap();
        assert!(r.is_consistent(), "{:?}", r.problems);
        let torn = r.torn_tail.expect("a torn tail");
        assert_eq!((torn.file, torn.offset), (newest, end));
        let lsns: Vec<Lsn> = records(dir.path(), 1, 0)
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

        let s = stat(dir.path(), 1).unwrap();
        assert_eq!((s.first_lsn, s.last_lsn, s.records), (1, 1500, 1500));
        assert!(s.segments.len() > 2);
        assert_eq!(s.file_bytes, s.segments.len() as u64 * SEG);
        for w in s.segments.windows(2) {
            assert_eq!(w[0].last_lsn + 1, w[1].base_lsn);
        }
        let s7 = stat(dir.path(), 7).unwrap();
        assert_eq!((s7.first_lsn, s7.last_lsn, s7.segments.len()), (1, 10, 1));
        let none = stat(dir.path(), 3).unwrap();
        assert_eq!((none.records, none.segments.len()), (0, 0));
        assert!(matches!(
            records(dir.path(), 3, 0),
            Err(Error::NoLog { node: 3, .. })
        ));
    }

    #[test]
    fn empty_log_has_no_records() {
        let dir = tempfile::tempdir().unwrap();
        make_log(dir.path(), 1, 0);
        let r = verify(dir.path(), 1).unwrap();
        assert!(r.is_consistent());
        assert_eq!((r.segments.len(), r.records(), r.last_lsn()), (1, 0, 0));
        assert_eq!(records(dir.path(), 1, 0).unwrap().count(), 0);
        let s = stat(dir.path(), 1).unwrap();
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
        assert!(!verify(dir.path(), 1).unwrap().is_consistent());
        let _ = records(dir.path(), 1, 0).unwrap().count();
        let _ = stat(dir.path(), 1).unwrap();
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
        let r = verify(dir.path(), 1).unwrap();
        assert!(r.is_consistent(), "{:?}", r.problems);
        assert!(r.records() >= 300);
        let mut n = 0;
        for rec in records(dir.path(), 1, 0).unwrap() {
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
        let end = verify(dir.path(), 1)
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
}
