//! The plan: what recovery will do, decided from an analysis and done
//! nowhere here.

use std::path::PathBuf;

use crate::at_rest::format::{self, SegmentHeader, MAX_LSN};
use crate::config::{Config, RecoveryMode};
use crate::error::{Error, Lsn, Result};

use super::{Analysis, Truncation};

/// What recovery will do to a node's files, decided from one
/// [`Analysis`]: [`recover`](super::recover) carries it out and `verify::recovery_plan`
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
    /// LSNs (first, last) to record as given up: above the last record
    /// kept, up to every LSN ever handed out (point-in-time mode) or that
    /// a poisoned writer of this process handed out (either mode).
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
    // skip. Either mode resumes above what a poisoned writer of this
    // process handed out, recording a skip the same way.
    let last = a.segments.last();
    let mut next_lsn = match last {
        Some(l) => l.last_lsn + 1,
        None => a.floor_lsn.max(1),
    };
    // A writer of this process that failed handed out LSNs the disk may
    // not show; its producers and hooks saw them: in either mode, resume
    // above them too (invariant 1).
    let mut above = crate::segment::manifest::handed_out_by_failed_writer(a.log_id());
    if cfg.recovery == RecoveryMode::PointInTime {
        let handed_out = a.manifest.map_or(0, |m| m.handed_out);
        above = above.max(handed_out).max(a.highest_seen);
    }
    if above >= next_lsn {
        next_lsn = above.min(MAX_LSN) + 1;
    }
    // With no segment left to record a skip in, the log restarts at
    // `next_lsn` in a new first segment, whose base must be an LSN.
    if a.segments.is_empty() && next_lsn > MAX_LSN {
        return Err(Error::LsnExhausted { next: next_lsn });
    }
    // No LSN kept is handed out again.
    debug_assert!(last.is_none_or(|l| next_lsn > l.last_lsn));
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

/// Where a cut at `at` asked to zero up to `zero_to` really writes:
/// (padding bytes of the seal, end of the seal, end of the zeroing). A
/// seal that would run past the segment's end (a tail a few bytes short
/// of it) is replaced by zeros to the end: the next append rolls. Pure:
/// [`plan`] reports what `apply::cut_tail` will do with it.
pub(super) fn cut_extent(header: &SegmentHeader, at: u64, zero_to: u64) -> (usize, u64, u64) {
    let pad = match format::padding_len(at) {
        p if at + p as u64 > header.segment_bytes => 0,
        p => p,
    };
    let sealed = at + pad as u64;
    let zero_to = zero_to.max(sealed).min(header.segment_bytes);
    // A seal closes its block and never runs past the segment, so the
    // next write starts on a block boundary, or finds the segment full.
    debug_assert!(pad == 0 || sealed.is_multiple_of(format::BLOCK as u64));
    debug_assert!(at <= sealed && sealed <= zero_to);
    (pad, sealed, zero_to)
}
