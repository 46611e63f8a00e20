//! Findings already reported against the engine and not yet fixed, and
//! how the `recovery` target recognises each one's signature.
//!
//! While a finding is open the target tolerates exactly its signature, so
//! a fuzzing run keeps looking for new problems instead of stopping at the
//! known one every time. Each entry names the finding's id in
//! `docs/fuzzing.md`; `fuzz/regressions/recovery/F<n>-*` reproduce it.
//! When the engine fixes one, `cargo test --lib` in `fuzz/` fails on
//! purpose: delete the entry and its signature function here.

use std::path::Path;
use std::sync::OnceLock;

use ringwal::format::{self, SegmentHeader};
use ringwal::RecoveryMode;

use crate::recovery::Scenario;

/// Findings already reported and not yet fixed in the engine. While one is
/// open the target tolerates exactly its signature, so a fuzzing run keeps
/// looking for new problems instead of stopping at the known one every
/// time. `RINGWAL_FUZZ_STRICT=F1,F4` stops tolerating those findings,
/// `RINGWAL_FUZZ_STRICT=1` all of them (use it to check a fix; remove the
/// entry once the engine is fixed). See `docs/fuzzing.md`.
#[derive(Clone, Copy, Debug)]
pub enum Known {
    /// F1: a segment file shorter than its header's `segment_bytes` whose
    /// frame area ends in fewer than 24 bytes: recovery zeroes those bytes
    /// but leaves the file short, so every later open finds the same
    /// `Truncated` header and cuts again (recovery is not idempotent).
    ShortFileRecut,
    /// F2: a blank newest file named past the last record + 1 makes strict
    /// open fail with `Gap` (recovery.rs, end of `analyze`), but
    /// `verify_with` re-scans after any problem with `scan_all`, which does
    /// not repeat that check, and so reports the log consistent.
    VerifyMissesBlankFloorGap,
    /// F3: LSNs taken from file names or headers are trusted up to
    /// `u64::MAX`; a log resumed at `u64::MAX` overflows `next_lsn += 1`
    /// in `Wal::append_then` (wal.rs) on the first append.
    LsnOverflow,
    /// F4: in point-in-time mode, a blank newest file named past the last
    /// record + 1 is discarded but its name still raises `next_lsn`
    /// (recovery.rs, `recover`: `.max(a.floor_lsn)`), although `analyze`
    /// flagged exactly that as a `Gap`. The next append then writes an LSN
    /// that breaks the sequence inside the active segment, and the next
    /// open finds the acknowledged record corrupt.
    PitFloorSkipsLsns,
    /// F5: a segment whose header and name say base LSN 0 underflows
    /// `expect - 1` in `scan_segment` (recovery.rs) during verify and open.
    /// LSNs near `u64::MAX` belong to the same class as F3 (unchecked
    /// arithmetic on LSNs read from disk), so while F3/F5 are open the
    /// target skips inputs with such a name or header LSN.
    LsnEdge,
    /// F6: a torn-tail cut zeroes only up to the torn window and leaves
    /// non-zero bytes beyond it. Once appends move the end of the log
    /// forward, those bytes fall inside the new window, and the next open
    /// cuts again at the clean end ("end of written data" on a block
    /// boundary) although nothing is torn.
    ResidueBeyondWindow,
    /// F7: when the valid prefix of the newest segment ends 8 or 16 bytes
    /// before the segment's end, `cut_tail` (recovery.rs) seals it with a
    /// padding frame of 4104 or 4112 bytes, writing past `segment_bytes`.
    /// The file grows beyond what its header declares, and the next open
    /// rejects the segment as corrupt (point-in-time mode sets it aside).
    SealPastSegmentEnd,
    /// F8: in point-in-time mode, the segment left newest after later ones
    /// are set aside was judged by the older-segment rules (no torn
    /// window), so its cut zeroes only to the next block boundary and
    /// leaves whatever follows. After an append the next open judges it as
    /// the newest segment and cuts again.
    PitNewestJudgedAsOlder,
}

/// F8's signature: point-in-time recovery set a later segment aside, and
/// the next open cuts the segment left newest (again, or for the first
/// time: with no torn window an older segment's tail may not be cut at
/// all).
pub fn pit_recut(
    sc: &Scenario,
    rep: &ringwal::RecoveryReport,
    second: &ringwal::Truncation,
) -> bool {
    let set_aside = rep.discarded.iter().any(|p| {
        let mut aside = p.clone().into_os_string();
        aside.push(".corrupt");
        Path::new(&aside).exists()
    });
    sc.mode == RecoveryMode::PointInTime
        && set_aside
        && rep
            .truncated
            .as_ref()
            .is_none_or(|f| f.file == second.file && second.offset >= f.offset)
}

pub fn seal_past_end(t: &ringwal::Truncation) -> bool {
    let Ok(bytes) = std::fs::read(&t.file) else {
        return false;
    };
    let Ok(h) = SegmentHeader::decode(&bytes[..bytes.len().min(format::BLOCK)]) else {
        return false;
    };
    let pad = format::padding_len(t.offset - t.offset % format::FRAME_ALIGN as u64) as u64;
    t.offset + pad > h.segment_bytes && bytes.len() as u64 > h.segment_bytes
}

pub fn residue_recut(offset: u64, reason: &str) -> bool {
    reason == "end of written data" && offset.is_multiple_of(format::BLOCK as u64)
}

/// An LSN in the class of F3/F5: 0, or so close to `u64::MAX` that a few
/// records overflow it.
pub fn lsn_edge(lsn: u64) -> bool {
    lsn == 0 || lsn > u64::MAX - (1 << 20)
}

pub fn has_lsn_edge(sc: &Scenario) -> bool {
    sc.files.iter().any(
        |(name, bytes)| match format::parse_segment_file_name(name) {
            Some((1, base)) => {
                lsn_edge(base)
                    || SegmentHeader::decode(&bytes[..bytes.len().min(format::BLOCK)])
                        .is_ok_and(|h| lsn_edge(h.base_lsn))
            }
            _ => false,
        },
    )
}

impl Known {
    /// The finding's number in `docs/fuzzing.md`.
    pub fn id(self) -> &'static str {
        match self {
            Known::ShortFileRecut => "F1",
            Known::VerifyMissesBlankFloorGap => "F2",
            Known::LsnOverflow => "F3",
            Known::PitFloorSkipsLsns => "F4",
            Known::LsnEdge => "F5",
            Known::ResidueBeyondWindow => "F6",
            Known::SealPastSegmentEnd => "F7",
            Known::PitNewestJudgedAsOlder => "F8",
        }
    }
}

/// Whether a known finding's signature is tolerated on this input:
/// `matches`, unless `RINGWAL_FUZZ_STRICT` names the finding (`F3`, a
/// comma-separated list, or `1` / `all` for every one).
pub fn tolerated(which: Known, matches: bool) -> bool {
    static STRICT: OnceLock<Vec<String>> = OnceLock::new();
    let strict = STRICT.get_or_init(|| {
        std::env::var("RINGWAL_FUZZ_STRICT")
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_ascii_uppercase())
                    .collect()
            })
            .unwrap_or_default()
    });
    let named = strict
        .iter()
        .any(|s| s == "1" || s == "ALL" || s == which.id())
        || STRICT_HERE.with(|s| s.borrow().contains(&which.id()));
    matches && !named
}

thread_local! {
    /// Findings made strict on this thread by [`with_strict`].
    static STRICT_HERE: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub fn short_file_recut(file: &Path, offset: u64, reason: &str) -> bool {
    let len = std::fs::metadata(file).map_or(0, |m| m.len());
    reason == "frame header truncated" && len.saturating_sub(offset) < format::FRAME_HEADER as u64
}

/// F4's signature: point-in-time recovery deleted an incomplete segment
/// file named exactly `next`, and `next` is not where the surviving
/// segments end.
pub fn pit_floor_skip(dir: &Path, sc: &Scenario, rep: &ringwal::RecoveryReport, next: u64) -> bool {
    if sc.mode != RecoveryMode::PointInTime {
        return false;
    }
    let deleted_floor = rep.discarded.iter().any(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut aside = p.clone().into_os_string();
        aside.push(".corrupt");
        format::parse_segment_file_name(name) == Some((1, next))
            && !p.exists()
            && !Path::new(&aside).exists()
    });
    let survivors = std::fs::read_dir(dir).map_or(0, |rd| {
        rd.filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_str().unwrap_or("");
                matches!(format::parse_segment_file_name(n), Some((1, b)) if b < next)
            })
            .count()
    });
    deleted_floor && survivors > 0 && (rep.records == 0 || rep.last_lsn.wrapping_add(1) != next)
}

/// Run `f` with the findings `ids` not tolerated on this thread.
pub fn with_strict<T>(ids: &[&'static str], f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            STRICT_HERE.with(|s| s.borrow_mut().clear());
        }
    }
    let _reset = Reset;
    STRICT_HERE.with(|s| *s.borrow_mut() = ids.to_vec());
    f()
}
