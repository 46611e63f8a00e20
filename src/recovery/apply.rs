//! Carrying out the plan: the only part of recovery that changes files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::at_rest::format::{self, Manifest, SegmentHeader};
use crate::at_rest::payload;
use crate::config::{Config, RecoveryMode};
use crate::error::KeyProblem;
use crate::error::{Error, Lsn, Result};
use crate::segment::index::SparseIndex;
use crate::segment::set::{self as segments, Live, LogDir, SegmentFile};

use super::plan::cut_extent;
use super::{analyze, plan, Analysis, Cut, Plan, Policy, RecoveryReport, SegmentState};

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

/// Recover `dir` for writing: analyze, fail on corruption (strict mode),
/// then carry out the [`plan`](super::plan()): discard incomplete files, cut a torn tail
/// durably.
pub(crate) fn recover(dir: &LogDir, cfg: &Config) -> Result<Recovered> {
    let start = Instant::now();
    let mut a = analyze(dir, cfg, Policy::of(cfg.recovery))?;
    if cfg.recovery == RecoveryMode::Strict {
        if let Some(e) = a.problems.drain(..).next() {
            return Err(e);
        }
        // Without a problem, every LSN the manifest says was acknowledged
        // durable is kept: a cut only ever drops what was never
        // acknowledged.
        let kept = a.segments.last().map_or(0, |s| s.last_lsn);
        debug_assert!(a.manifest.is_none_or(|m| kept >= m.durable_lsn));
    }
    check_keys(cfg, &a.segments)?;
    let plan = plan(&a, cfg)?;
    let mut report = RecoveryReport {
        bytes_scanned: a.bytes_scanned,
        headers_from_copy: std::mem::take(&mut a.headers_from_copy),
        manifest_rebuilt: a.manifest_unreadable,
        ..RecoveryReport::default()
    };
    remove_files(cfg, &a, &plan, &mut report)?;
    let last = a.segments.last().map(|s| s.last_lsn);
    let (active, skip_in_new_segment) = match a.segments.last_mut() {
        Some(newest) => match ready_newest(cfg, newest, &plan, &mut report)? {
            Ready::Active(active) => (Some(active), None),
            Ready::SkipInNewSegment(first, count) => (None, Some((first, count))),
        },
        None => (None, None),
    };
    if !report.discarded.is_empty() || report.truncated.is_some() {
        let dir = dir.path();
        cfg.vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    sum_up(&a, last, &mut report);
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
        next_lsn: plan.next_lsn,
        skip_in_new_segment,
        log_id,
        manifest: a.manifest,
    })
}

/// Refuse a writer whose keys do not fit the log, before anything is
/// changed: a key whose id a segment names but that is not the key it
/// was sealed with (its header's key check differs), since new segments
/// sealed with it under the same id would leave no single key that reads
/// the log; and no key provider at all for a log whose newest segment is
/// encrypted, since its appends would be plaintext in an encrypted log
/// (a provider that names no current key, even an empty one, says that
/// is meant: a writer that only recovers or checkpoints needs no key). A
/// key id the provider lacks is no refusal: a rotated-out key is not
/// needed to append. Cost: one AEAD call (an empty message) per
/// encrypted segment whose key id the provider has, and a provider call
/// per such id the first time.
fn check_keys(cfg: &Config, segments: &[SegmentState]) -> Result<()> {
    let key_error = |s: &SegmentState, problem| Error::Key {
        file: s.file.path.clone(),
        key_id: s.header.key_id,
        problem,
    };
    for s in segments.iter().filter(|s| s.header.key_id != 0) {
        if let Err(KeyProblem::Wrong) = payload::check_key(&cfg.keys, &s.header) {
            return Err(key_error(s, KeyProblem::Wrong));
        }
    }
    match segments.last() {
        Some(newest) if newest.header.key_id != 0 && !cfg.keys.provided() => {
            Err(key_error(newest, KeyProblem::Missing))
        }
        _ => Ok(()),
    }
}

/// Remove the files the plan discards and a crash's temporary manifests,
/// and set aside the ones after a point-in-time recovery point.
fn remove_files(
    cfg: &Config,
    a: &Analysis,
    plan: &Plan,
    report: &mut RecoveryReport,
) -> Result<()> {
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
    Ok(())
}

/// What the newest segment kept is after [`ready_newest`].
enum Ready {
    /// The active segment, and the offset where the next write goes.
    Active((SegmentFile, SegmentHeader, u64)),
    /// Too full for the plan's skip: LSNs (first, count) for a new
    /// segment to record as skipped.
    SkipInNewSegment(Lsn, u64),
}

/// Make the newest segment kept ready for writing: cut or seal its tail,
/// record the plan's skip in it (point in time), and make it durable.
fn ready_newest(
    cfg: &Config,
    newest: &mut SegmentState,
    plan: &Plan,
    report: &mut RecoveryReport,
) -> Result<Ready> {
    let mut write_at = cut_or_seal(cfg, newest, plan, report)?;
    let mut skip_in_new_segment = None;
    if let Some((first, _)) = plan.skipped {
        let count = plan.next_lsn - first;
        report.skipped = plan.skipped;
        let path = &newest.file.path;
        match write_skip(&*cfg.vfs, path, &newest.header, write_at, first, count)? {
            Some(at) => {
                write_at = at;
                newest.last_lsn = plan.next_lsn - 1;
            }
            // The segment is full: the skip opens a new one (`Wal::open`).
            None => skip_in_new_segment = Some((first, count)),
        }
    }
    // Everything found is made durable before the manifest may call it
    // so: a process crash can leave unsynced writes in the page cache
    // that a power loss would still take.
    sync_segment(&*cfg.vfs, &newest.file.path)?;
    // The next write lands on a block boundary (writes are whole blocks)
    // or finds the segment full, and never on the data kept.
    debug_assert!(
        write_at.is_multiple_of(format::BLOCK as u64) || write_at == newest.header.segment_bytes
    );
    debug_assert!(write_at >= newest.valid_end);
    Ok(match skip_in_new_segment {
        Some((first, count)) => Ready::SkipInNewSegment(first, count),
        None => Ready::Active((newest.file.clone(), newest.header, write_at)),
    })
}

/// Cut the newest segment's tail as the plan says, or seal frames that
/// end mid-block with nothing after them (a segment a point-in-time
/// recovery kept) with padding, durably, so that what is written next is
/// not behind a zero frame. Returns where the next write goes.
fn cut_or_seal(
    cfg: &Config,
    newest: &mut SegmentState,
    plan: &Plan,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let (at, zero_to, planned) = match newest.cut.take() {
        Some(Cut { at, zero_to, .. }) => (at, zero_to, true),
        None if newest.valid_end.is_multiple_of(format::BLOCK as u64) => {
            return Ok(newest.valid_end)
        }
        None => (newest.valid_end, newest.valid_end, false),
    };
    let zeroed = cut_tail(&*cfg.vfs, &newest.file.path, &newest.header, at, zero_to)?;
    if planned {
        debug_assert_eq!(plan.truncation.as_ref().map(|t| t.zeroed), Some(zeroed));
        report.truncated = plan.truncation.clone();
    }
    Ok((at + format::padding_len(at) as u64).min(newest.header.segment_bytes))
}

/// The report's totals over the segments kept; `last` is the newest one's
/// last LSN before recovery wrote any skip.
fn sum_up(a: &Analysis, last: Option<Lsn>, report: &mut RecoveryReport) {
    report.segments_scanned = a.segments.len();
    report.records = a.segments.iter().map(|s| s.records).sum();
    report.first_lsn = a.segments.first().map_or(0, |s| s.header.base_lsn);
    report.last_lsn = last.unwrap_or(0);
    if report.records == 0 {
        report.first_lsn = 0;
        report.last_lsn = 0;
    }
    report.last_checkpoint = a.segments.iter().rev().find_map(|s| s.last_checkpoint);
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
    // A skip a reader would take for no frame must never be written: of
    // at least one LSN, none past the format's last.
    debug_assert!(count > 0 && first <= format::MAX_LSN && count - 1 <= format::MAX_LSN - first);
    if at + block > header.segment_bytes {
        return Ok(None);
    }
    debug_assert!(at.is_multiple_of(block), "skip at {at}");
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
