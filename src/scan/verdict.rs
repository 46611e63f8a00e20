//! How a segment ends: recovery's decision table for the bytes after the
//! last valid frame, as one `match`.
//!
//! A segment's frames end at offset P with an [`End`]. What that means
//! depends on the segment's [`Position`]: only the newest segment can have
//! been torn by a crash (the ring drains, and in written mode syncs, a
//! segment before it writes the next), and only within the torn window its
//! writer recorded (every write it could have had in flight).
//!
//! | end at P                       | after P                                          | newest              | older (sealed)   |
//! |--------------------------------|--------------------------------------------------|---------------------|------------------|
//! | frames fill the segment        | nothing                                          | `Full`              | `Full`           |
//! | any                            | a valid frame at a block boundary past the window| `Corrupt`           | `Corrupt`        |
//! | any                            | a vouch for the LSN due at P, or a later one     | `Corrupt`           | `Corrupt`        |
//! | valid frame, LSN out of line   | nothing valid past the window                    | `Corrupt`           | `Corrupt`        |
//! | invalid frame                  | nothing valid past the window                    | `Torn`              | `Corrupt`        |
//! | zeros, too few left for a seal | zeros to the end                                 | `Full`              | `Full`           |
//! | zero frame                     | a valid frame within the window                  | `Torn`              | (no window)      |
//! | zero frame                     | non-zero bytes within the window (residue)       | `Torn`              | (no window)      |
//! | zero frame mid-block           | zeros within the window                          | `Torn`              | `Corrupt`        |
//! | zero frame on a block boundary | non-zero bytes in the rest of its block          | `Torn` (residue)    | `Corrupt`        |
//! | zero frame on a block boundary | zeros within the window (older: its block)       | `Clean`             | `Clean`, or `Corrupt` below the next base |
//!
//! An older segment's `Clean` is held to the next segment's base LSN
//! (when that segment's header is usable, and so agrees with its name):
//! its data must end just below it. Where the LSN due at P is below that
//! base, the LSNs between are missing from this segment's end: `Corrupt`
//! at P, in this segment. A lost block over its last records reads
//! exactly like the zeros its writer leaves after its data (the seal,
//! then never-written or stale bytes), so that is the damage it names;
//! the format cannot tell it from a whole segment missing between the
//! two. Only frames that fill the segment (`Full`) prove nothing of it
//! was lost: the LSNs missing after them are a gap, which the consumer
//! reports at the next segment, as it does a next base below the LSN due
//! at P (the two overlap).
//!
//! When the valid frames end inside an atomic batch (its last record is
//! not there), the batch is not part of the data: the table above is
//! applied to where the frames really end, with "the LSN due" being the
//! batch's first, and then
//!
//! | frames' verdict | newest                     | older       |
//! |-----------------|----------------------------|-------------|
//! | `Corrupt`       | `Corrupt`                  | `Corrupt`   |
//! | `Torn`          | `Torn` from the batch start| (never)     |
//! | `Clean`         | `Torn` from the batch start| `Corrupt`   |
//! | `Full`          | `Corrupt`                  | `Corrupt`   |
//!
//! A batch is acknowledged only as a whole (the ledger's watermarks never
//! stop inside one), so a batch cut off by a crash was never
//! acknowledged, and recovery cuts it whole.
//!
//! A vouch (version 2) is the first frame of every write: the highest LSN
//! its writer knew to be durable when it submitted that write. One that
//! covers the LSN due at P proves that the record at P was acknowledged
//! durable before a later write went out, so whatever happened at P, a
//! crash did not: the damage is reported, never cut. A clean close ends
//! with a vouch for everything, so a closed log has no ambiguous tail; a
//! crash leaves only its last writes in flight unvouched, which is
//! inherent.
//!
//! "The window" is `[P, P + torn window)` rounded up to a block for the
//! newest segment and empty for an older one, so in an older segment any
//! valid frame after P is corruption. A zero frame mid-block in the
//! newest segment is a write that reached the disk only in part (every
//! write is whole blocks, covered by frames). A zero frame on a block
//! boundary ends the data only if the window behind it is all zeros: a
//! torn multi-block write can lose its first block and keep later ones,
//! whose frames sit mid-block where the block-boundary search does not
//! look, and a later torn write must not be able to resurrect them.
//! In an older segment a zero frame is the end its writer left only on a
//! block boundary and before a zero block (the seal): it wrote whole
//! blocks, each closed with padding. Anything else is a zeroed sector in
//! a write that completed, reported where it is rather than as a gap at
//! the next segment.

use crate::at_rest::format::{self, Decoded, Kind, SegmentHeader};
use crate::error::{Corruption, Error, Lsn, Result};

use super::bytes::SegmentScan;
use super::{End, SegmentEnd};

/// Where a segment sits in its log: what its end may legitimately be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    newest: bool,
    /// Bytes after the end that a crash may have torn (0 unless newest).
    window: u64,
    /// An older segment's: the base LSN the next segment's header
    /// declares, which its data must end just below.
    next_base: Option<Lsn>,
}

impl Position {
    /// A segment the log has rolled past: drained (and synced) before the
    /// next one got its first write, so nothing in it can be torn.
    pub fn sealed() -> Position {
        Position {
            newest: false,
            window: 0,
            next_base: None,
        }
    }

    /// The newest segment. Its torn window is the wider of the reader's
    /// configured one and the one its writer recorded in the header: a
    /// reopen with a smaller configuration must not turn that writer's
    /// torn tail into corruption.
    pub fn newest(configured_window: u64, header: &SegmentHeader) -> Position {
        Position {
            newest: true,
            window: configured_window.max(header.torn_window),
            next_base: None,
        }
    }

    /// `newest(..)` or `sealed()`.
    pub fn of(newest: bool, configured_window: u64, header: &SegmentHeader) -> Position {
        if newest {
            Position::newest(configured_window, header)
        } else {
            Position::sealed()
        }
    }

    /// This position, followed by a segment whose header declares
    /// `next_base` (see [`declared_base`](super::declared_base); `None`:
    /// no such segment). An older segment's data must end just below it;
    /// the newest has none after it, so this changes nothing for it.
    pub fn followed_by(self, next_base: Option<Lsn>) -> Position {
        Position {
            next_base: next_base.filter(|_| !self.newest),
            ..self
        }
    }
}

/// What the end of a segment's frames means (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The data ends here, as its writer left it.
    Clean,
    /// The segment is full: nothing more fits, nothing is behind.
    Full,
    /// A torn write at the tail of the newest segment: cut the bytes from
    /// the end up to `zero_to` (the end of the frame area).
    Torn {
        /// Where the region to zero ends.
        zero_to: u64,
    },
    /// Damage that a crash cannot explain.
    Corrupt(Damage),
}

/// Why an end is damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Damage {
    /// Valid frames follow at this block boundary, past anything a crash
    /// could have torn.
    FramesFollow {
        /// Offset of the first of them.
        next: u64,
    },
    /// A valid frame no writer puts there (the wrong LSN, or a record
    /// standing alone inside an unfinished batch): a crash never writes
    /// one.
    OutOfLine,
    /// The frames end inside an atomic batch where no crash can have
    /// torn it: in a segment the log had rolled past, or at the end of a
    /// full segment (a writer starts a new segment for a batch that does
    /// not fit).
    OpenBatch,
    /// A bad frame in a segment the log had rolled past.
    Sealed,
    /// A later write vouches that the LSN due at the end (or a later one)
    /// was durable before it was submitted.
    Vouched {
        /// Offset of the vouching write.
        by: u64,
        /// The LSN it vouches for.
        durable: Lsn,
    },
    /// An older segment's data ends cleanly below the LSN the next
    /// segment's base says it must end with.
    EndsShort {
        /// The next segment's base LSN.
        next_base: Lsn,
    },
}

impl Damage {
    /// The damage as `Corrupt`, naming the file and where the frames ended.
    pub fn error(self, file: &std::path::Path, end: SegmentEnd) -> Error {
        let frames = |why: String| Corruption::Frames(why);
        let reason = match self {
            Damage::FramesFollow { next } => frames(format!(
                "{}, but valid frames follow at offset {next}",
                end.end
            )),
            Damage::OutOfLine => frames(end.end.to_string()),
            Damage::OpenBatch => frames(format!(
                "the atomic batch from LSN {} never ends: {}",
                end.due(),
                end.end
            )),
            Damage::Sealed => frames(format!("{} inside a sealed segment", end.end)),
            Damage::Vouched { by, durable } => frames(format!(
                "{}, but the write at offset {by} vouches that LSN {durable} was already durable",
                end.end
            )),
            Damage::EndsShort { next_base } => Corruption::EndsShort {
                due: end.due(),
                next_base,
            },
        };
        Error::corrupt(file, end.at, reason)
    }
}

/// The verdict for `end`, reading the bytes after it as far as needed.
///
/// Cost: nothing for `Full`; otherwise one read of every block boundary
/// from the window's end to the segment's end (the zero-filled rest of a
/// preallocated segment included), and of the window itself.
pub(super) fn judge(scan: &mut SegmentScan, end: SegmentEnd, pos: Position) -> Result<Verdict> {
    let frames = judge_frames(scan, end, pos)?;
    if end.batch.is_none() {
        return Ok(match (frames, pos.next_base) {
            // An older segment's data ending cleanly short of the next
            // base: its last records are missing (the module's table).
            // Inside an unfinished batch such an end is damage already.
            (Verdict::Clean, Some(next_base)) if next_base > end.due() => {
                Verdict::Corrupt(Damage::EndsShort { next_base })
            }
            (v, _) => v,
        });
    }
    // The frames end inside an atomic batch. Acknowledgements never stop
    // inside one, so the batch was never acknowledged unless a later
    // write vouches for its first LSN (`judge_frames` looked for that):
    // where the frames' end is torn, or clean (the writes with the rest of
    // the batch never landed), the whole batch is the torn tail. An older
    // segment was drained before the next one got a write, and a batch
    // never spans segments, so one there, or in frames that fill the
    // segment, is damage.
    Ok(match (frames, pos.newest) {
        (Verdict::Corrupt(d), _) => Verdict::Corrupt(d),
        (Verdict::Torn { zero_to }, _) => Verdict::Torn { zero_to },
        (Verdict::Clean, true) => Verdict::Torn {
            zero_to: scan.end(),
        },
        (Verdict::Clean | Verdict::Full, _) => Verdict::Corrupt(Damage::OpenBatch),
    })
}

/// The verdict for where the valid frames stop, whether or not they stop
/// inside a batch (the table in the module docs).
fn judge_frames(scan: &mut SegmentScan, end: SegmentEnd, pos: Position) -> Result<Verdict> {
    let due = end.due();
    let SegmentEnd { at, end, .. } = end;
    if end == End::Full {
        return Ok(Verdict::Full);
    }
    let seg_end = scan.end();
    // Saturating: a header may record any window (a damaged one, near
    // u64::MAX); past the segment's end it means "to the end".
    let window_end = at
        .saturating_add(pos.window)
        .min(seg_end)
        .next_multiple_of(format::BLOCK as u64)
        .min(seg_end);
    if let Some(damage) = later_writes(scan, at, window_end, due)? {
        return Ok(Verdict::Corrupt(damage));
    }
    let torn = Verdict::Torn { zero_to: seg_end };
    Ok(match (end, pos.newest) {
        (End::Full, _) => unreachable!("returned above"),
        (End::LsnBreak { .. } | End::BatchBreak { .. }, _) => Verdict::Corrupt(Damage::OutOfLine),
        (End::Invalid(_), false) => Verdict::Corrupt(Damage::Sealed),
        (End::Invalid(_), true) => torn,
        // A zero tail too short for a seal is not a torn write: the writer
        // fills a segment to its end in whole blocks, so the segment is
        // simply full (and cutting would recur on every open).
        (End::Zero, _)
            if at + format::padding_len(at) as u64 > scan.header.segment_bytes
                && scan.first_nonzero(at, seg_end)?.is_none() =>
        {
            Verdict::Full
        }
        // A sealed segment was written in whole blocks, each closed with
        // padding, and sealed with a zero block: a zero frame mid-block,
        // or one whose block holds anything but zeros, is bytes lost from
        // a write that completed (a zeroed sector), not its end.
        (End::Zero, false)
            if !at.is_multiple_of(format::BLOCK as u64)
                || scan
                    .first_nonzero(at, (at + format::BLOCK as u64).min(seg_end))?
                    .is_some() =>
        {
            Verdict::Corrupt(Damage::Sealed)
        }
        (End::Zero, false) => Verdict::Clean,
        // Residue in the window (valid frames included: they are
        // non-zero bytes too) or a zero frame mid-block: torn.
        (End::Zero, true)
            if !at.is_multiple_of(format::BLOCK as u64)
                || scan.first_nonzero(at, window_end)?.is_some() =>
        {
            torn
        }
        (End::Zero, true) => Verdict::Clean,
    })
}

/// What the writes after `at` say about it: a valid frame at a block
/// boundary past the window is data written after the damage, and a
/// vouch for `due` or later (wherever it is) proves the first record
/// missing from the data (at `at`, or the first of the unfinished batch
/// `at` is in) was acknowledged. Every write starts with a frame at a block
/// boundary, so those are the only places to look.
fn later_writes(
    scan: &mut SegmentScan,
    at: u64,
    window_end: u64,
    due: Lsn,
) -> Result<Option<Damage>> {
    let mut b = (at + 1)
        .next_multiple_of(format::BLOCK as u64)
        .max(scan.header.frames_start());
    while b < scan.end() {
        if let Decoded::Frame(f) = scan.frame_at(b)? {
            if b >= window_end {
                return Ok(Some(Damage::FramesFollow { next: b }));
            }
            if f.kind == Kind::Vouch {
                if let Some(durable) = f.word().filter(|&d| d >= due) {
                    return Ok(Some(Damage::Vouched { by: b, durable }));
                }
            }
        }
        b += format::BLOCK as u64;
    }
    Ok(None)
}
