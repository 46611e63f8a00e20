//! Recovery: what is on disk, what is trustworthy, and what to repair.
//!
//! Analysis ([`analyze`]) is read-only and shared with `ringwal verify`;
//! [`recover`] applies its decisions. The decision table, per segment in
//! base-LSN order (the newest is the last one with a valid header):
//!
//! | finding                                              | newest segment          | older segment |
//! |------------------------------------------------------|-------------------------|---------------|
//! | header blank (never written) or shorter than a block | discard the file        | `Corrupt`     |
//! | blank, but named outside `1..=MAX_LSN` or past last+1| `Corrupt` / `Gap`       | `Corrupt`     |
//! | header present but invalid (magic, version, CRC)     | `Corrupt`               | `Corrupt`     |
//! | header node/base contradicts the file name           | `Corrupt`               | `Corrupt`     |
//! | base LSN is not previous last LSN + 1                | `Gap`                   | `Gap`         |
//! | a valid frame whose LSN breaks the sequence          | `Corrupt`               | `Corrupt`     |
//! | first bad/zero frame at P, valid frame at a block    | `Corrupt`               | `Corrupt`     |
//! |   boundary beyond P + torn window                    |                         |               |
//! | bad frame at P, nothing valid beyond the window      | torn tail: truncate at P| `Corrupt`     |
//! | zero frame at P, valid frames within the window      | torn tail: truncate at P| `Corrupt`     |
//! | zero frame at P, nothing valid after it              | clean end               | clean end     |
//! | zeros from P to the end, too few for a frame         | full segment            | full segment  |
//!
//! A cut seals the prefix and zeroes everything after it to the end of the
//! segment, so a second open finds nothing to cut. The next LSN is the
//! last surviving record's + 1; a discarded blank file's name is used only
//! when no segment survives.
//! Older segments get no torn window because the ring drains (and, in
//! written mode, syncs) a segment before writing the next one, so a crash
//! can only ever tear the newest. In `PointInTime` mode the first `Corrupt`
//! or `Gap` becomes a truncation point instead, every later segment is
//! set aside, and whatever follows the valid prefix of the segment left
//! newest is cut like a torn tail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{Config, RecoveryMode};
use crate::error::{Error, Lsn, Result};
use crate::format::{self, Decoded, Kind, SegmentHeader, MAX_LSN};

use crate::prefetch::Prefetcher;
use crate::scan::SegmentScan;
use crate::segments::{self, SegmentFile};

/// What [`Wal::open`](crate::Wal::open) found and did.
#[derive(Clone, Debug, Default)]
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
    /// Files removed or set aside: incomplete segments from a crash
    /// mid-create, leftover spares, and (point-in-time mode) segments after
    /// the recovery point.
    pub discarded: Vec<PathBuf>,
    /// True when the directory held no segment and one was created.
    pub created: bool,
    /// Wall time of the whole recovery.
    pub elapsed: Duration,
}

/// A cut made at the tail of the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// The segment.
    pub file: PathBuf,
    /// Offset of the first byte that was not part of a valid frame.
    pub offset: u64,
    /// Why the bytes at `offset` were rejected.
    pub reason: String,
    /// Bytes zeroed after `offset`.
    pub zeroed: u64,
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
    /// A torn tail: (offset, reason, end of the region to zero).
    pub torn: Option<(u64, String, u64)>,
}

/// The read-only result of scanning a node's files.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub segments: Vec<SegmentState>,
    /// Newest files whose header never became valid (crash mid-create).
    pub incomplete: Vec<PathBuf>,
    pub spares: Vec<PathBuf>,
    /// Segments after a point-in-time recovery point.
    pub set_aside: Vec<PathBuf>,
    /// Corruption and gaps, in file order; non-empty means strict open fails.
    pub problems: Vec<Error>,
    /// LSN named by the newest discarded file, which recovery must resume at or above.
    pub floor_lsn: Lsn,
    pub bytes_scanned: u64,
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
    pub(crate) fn judge_incomplete(&mut self) {
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
                    format!("blank segment named with base LSN {base}, out of range"),
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

    /// Point-in-time mode: the segment left newest was judged as an older
    /// one (no torn window, no residue rule). Whatever follows its valid
    /// prefix belongs to the part of the log that was set aside, so it is
    /// cut and zeroed like a torn tail; otherwise a later open, judging the
    /// segment as newest, would cut again or find stale frames.
    fn clear_after_recovery_point(&mut self, cfg: &Config) -> Result<()> {
        let Some(last) = self.segments.last_mut() else {
            return Ok(());
        };
        if last.torn.is_some() {
            return Ok(());
        }
        let Ok(mut scan) = SegmentScan::open(&*cfg.vfs, &last.file.path, format::MAX_PAYLOAD)?
        else {
            return Ok(());
        };
        let end = scan.end();
        if scan.first_nonzero(last.valid_end, end)?.is_some() {
            last.torn = Some((
                last.valid_end,
                "bytes after the point-in-time recovery point".into(),
                end,
            ));
        }
        Ok(())
    }
}

/// Scan `dir` for `cfg.node`'s log without modifying anything.
pub(crate) fn analyze(dir: &Path, cfg: &Config) -> Result<Analysis> {
    let listing = segments::list(&*cfg.vfs, dir, cfg.node)?;
    let mut out = Analysis {
        spares: listing.spares,
        ..Analysis::default()
    };
    let mut files = listing.segments;

    // Scans accept every frame the format allows (`MAX_PAYLOAD`), not just
    // the configured maximum: that limits appends, and a log written under
    // a larger one, or padded with frames larger than a small one, must
    // recover whole.

    // Incomplete newest files: a crash between rename and a durable header.
    while let Some(last) = files.last() {
        match SegmentScan::open(&*cfg.vfs, &last.path, format::MAX_PAYLOAD)? {
            // Only a header that never reached the disk marks a crash
            // mid-create. A damaged but present header is corruption: the
            // segment may hold acknowledged records.
            Err((format::HeaderError::Blank | format::HeaderError::Short, _)) => {
                let f = files.pop().expect("last exists");
                out.incomplete.push(f.path);
            }
            _ => break,
        }
    }

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
    for (i, f) in files.into_iter().enumerate() {
        if let Some(p) = &prefetch {
            p.at(i);
        }
        if !out.problems.is_empty() && cfg.recovery == RecoveryMode::PointInTime {
            out.set_aside.push(f.path);
            continue;
        }
        let newest = i + 1 == count;
        match scan_segment(&f, cfg, newest, prev_last, &mut out)? {
            Some(state) => {
                prev_last = Some(state.last_lsn);
                out.segments.push(state);
            }
            None if cfg.recovery == RecoveryMode::PointInTime => out.set_aside.push(f.path),
            None => {}
        }
    }
    out.judge_incomplete();
    if cfg.recovery == RecoveryMode::PointInTime && !out.set_aside.is_empty() {
        out.clear_after_recovery_point(cfg)?;
    }
    Ok(out)
}

/// Scan one segment. Pushes problems into `out`; returns the state when
/// the segment (or, in point-in-time mode, its valid prefix) is usable.
pub(crate) fn scan_segment(
    f: &SegmentFile,
    cfg: &Config,
    newest: bool,
    prev_last: Option<Lsn>,
    out: &mut Analysis,
) -> Result<Option<SegmentState>> {
    let mut scan = match SegmentScan::open(&*cfg.vfs, &f.path, format::MAX_PAYLOAD)? {
        Ok(s) => s,
        Err((e, _)) => {
            out.problems
                .push(Error::corrupt(&f.path, 0, format!("segment header: {e}")));
            return Ok(None);
        }
    };
    let h = scan.header;
    if h.base_lsn == 0 || h.base_lsn > MAX_LSN {
        // LSN 0 means "none", and a base near u64::MAX would make the LSN
        // counter wrap: both are damage, not something to resume from.
        out.problems.push(Error::corrupt(
            &f.path,
            0,
            format!("base LSN {} out of range", h.base_lsn),
        ));
        return Ok(None);
    }
    if h.node != cfg.node || h.base_lsn != f.base {
        out.problems.push(Error::corrupt(
            &f.path,
            0,
            format!(
                "header says node {} base {}, file name says node {} base {}",
                h.node, h.base_lsn, cfg.node, f.base
            ),
        ));
        return Ok(None);
    }
    if scan.file_len > h.segment_bytes {
        out.problems.push(Error::corrupt(
            &f.path,
            h.segment_bytes,
            format!(
                "file is {} bytes, longer than the {} its header declares",
                scan.file_len, h.segment_bytes
            ),
        ));
        return Ok(None);
    }
    if let Some(prev) = prev_last {
        if h.base_lsn != prev + 1 {
            out.problems.push(Error::Gap {
                file: f.path.clone(),
                expected: prev + 1,
                found: h.base_lsn,
            });
            return Ok(None);
        }
    }
    let point_in_time = cfg.recovery == RecoveryMode::PointInTime;
    let mut off = format::BLOCK as u64;
    let mut expect = h.base_lsn;
    let mut records = 0u64;
    let mut bad: Option<(u64, String, bool)> = None; // (offset, reason, was_zero)
    while off < scan.end() {
        match scan.frame_at(off)? {
            Decoded::Frame(fr) => {
                if fr.kind != Kind::Padding {
                    if fr.lsn != expect {
                        bad = Some((
                            off,
                            format!("frame LSN {} where {} was expected", fr.lsn, expect),
                            false,
                        ));
                        break;
                    }
                    expect += 1;
                    records += 1;
                }
                off += fr.len as u64;
            }
            Decoded::Zero => {
                bad = Some((off, "end of written data".into(), true));
                break;
            }
            Decoded::Invalid(why) => {
                bad = Some((off, why.to_string(), false));
                break;
            }
        }
    }
    out.bytes_scanned += off - format::BLOCK as u64;
    let last_lsn = expect - 1;
    let mut state = SegmentState {
        file: f.clone(),
        header: h,
        last_lsn,
        valid_end: off,
        records,
        torn: None,
    };
    let Some((at, reason, was_zero)) = bad else {
        return Ok(Some(state));
    };

    // The writer recorded its own window; a reopen with a smaller config
    // must not turn that writer's torn tail into corruption.
    let window = if newest {
        cfg.torn_window().max(h.torn_window)
    } else {
        0
    };
    let window_end = (at + window)
        .next_multiple_of(format::BLOCK as u64)
        .min(scan.end());
    let beyond = scan.next_valid_block(window_end.max(at + 1))?;
    let within = if window > 0 {
        scan.next_valid_block(at + 1)?.filter(|&b| b < window_end)
    } else {
        None
    };
    let lsn_break = reason.starts_with("frame LSN");
    let corrupt = if let Some(b) = beyond {
        Some(format!("{reason}, but valid frames follow at offset {b}"))
    } else if lsn_break {
        Some(reason.clone())
    } else if !was_zero && !newest {
        Some(format!("{reason} inside a sealed segment"))
    } else {
        None
    };
    if let Some(why) = corrupt {
        out.problems.push(Error::corrupt(&f.path, at, why));
        if point_in_time {
            state.torn = Some((at, reason, scan.end()));
            return Ok(Some(state));
        }
        return Ok(None);
    }
    // A zero frame mid-block is a write that reached the disk only in
    // part: every write is whole blocks, fully covered by frames.
    // A zero header on a block boundary ends the data only if the torn
    // window behind it is all zeros: a torn multi-block write can lose its
    // first block and keep later ones, whose frames sit mid-block where the
    // block-boundary search does not look, and a later torn write must not
    // be able to resurrect them.
    let residue = newest && was_zero && scan.first_nonzero(at, window_end)?.is_some();
    // A zero tail too short to hold a seal is not a torn write: the writer
    // fills a segment to its end in whole blocks, so such a segment is
    // simply full (nothing behind it to cut, and cutting would recur on
    // every open).
    let full = was_zero
        && at + format::padding_len(at) as u64 > h.segment_bytes
        && scan.first_nonzero(at, scan.end())?.is_none();
    if !full && (!was_zero || within.is_some() || residue || at % format::BLOCK as u64 != 0) {
        // Zero to the end of the frame area, not just the window: by now
        // nothing after `at` is data, and bytes left beyond the window
        // would be judged again (and cut again) once appends move the
        // window over them.
        state.torn = Some((at, reason, scan.end()));
    }
    Ok(Some(state))
}

/// What the writer needs to continue after recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub report: RecoveryReport,
    pub segments: Vec<SegmentFile>,
    /// The newest segment and the offset where the next write goes.
    pub active: Option<(SegmentFile, SegmentHeader, u64)>,
    pub next_lsn: Lsn,
}

/// Recover `dir` for writing: analyze, fail on corruption (strict mode),
/// discard incomplete files, cut a torn tail durably.
pub(crate) fn recover(dir: &Path, cfg: &Config) -> Result<Recovered> {
    let start = Instant::now();
    let mut a = analyze(dir, cfg)?;
    if cfg.recovery == RecoveryMode::Strict {
        if let Some(e) = a.problems.drain(..).next() {
            return Err(e);
        }
    }
    let mut report = RecoveryReport {
        bytes_scanned: a.bytes_scanned,
        ..RecoveryReport::default()
    };
    for p in a.incomplete.iter().chain(a.spares.iter()) {
        cfg.vfs.remove_file(p).map_err(|e| Error::io(p, e))?;
        report.discarded.push(p.clone());
    }
    for p in &a.set_aside {
        let mut to = p.clone().into_os_string();
        to.push(".corrupt");
        cfg.vfs
            .rename(p, std::path::Path::new(&to))
            .map_err(|e| Error::io(p, e))?;
        report.discarded.push(p.clone());
    }
    let mut active = None;
    if let Some(last) = a.segments.last_mut() {
        let mut write_at = last.valid_end;
        if let Some((at, reason, zero_to)) = last.torn.take() {
            let zeroed = cut_tail(&*cfg.vfs, &last.file.path, &last.header, at, zero_to)?;
            write_at = (at + format::padding_len(at) as u64).min(last.header.segment_bytes);
            report.truncated = Some(Truncation {
                file: last.file.path.clone(),
                offset: at,
                reason,
                zeroed,
            });
        } else {
            write_at =
                (write_at + format::padding_len(write_at) as u64).min(last.header.segment_bytes);
        }
        active = Some((last.file.clone(), last.header, write_at));
    }
    if !report.discarded.is_empty() || report.truncated.is_some() {
        cfg.vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    report.segments_scanned = a.segments.len();
    report.records = a.segments.iter().map(|s| s.records).sum();
    report.first_lsn = a.segments.first().map_or(0, |s| s.header.base_lsn);
    report.last_lsn = a.segments.last().map_or(0, |s| s.last_lsn);
    if report.records == 0 {
        report.first_lsn = 0;
        report.last_lsn = 0;
    }
    // A surviving segment fixes where the log resumes: its last LSN + 1.
    // The name of a discarded blank file counts only when no segment
    // survives (in strict mode a disagreement is a `Gap` above; in
    // point-in-time mode following the name would put a sequence break
    // inside the active segment).
    let next_lsn = match a.segments.last() {
        Some(s) => s.last_lsn + 1,
        None => a.floor_lsn.max(1),
    };
    report.elapsed = start.elapsed();
    Ok(Recovered {
        report,
        segments: a.segments.into_iter().map(|s| s.file).collect(),
        active,
        next_lsn,
    })
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
    // A seal that would run past the segment's end (a tail a few bytes
    // short of it) is replaced by zeros to the end: the next append rolls.
    let pad = match format::padding_len(at) {
        p if at + p as u64 > header.segment_bytes => 0,
        p => p,
    };
    let sealed = at + pad as u64;
    let zero_to = zero_to.max(sealed).min(header.segment_bytes);
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
