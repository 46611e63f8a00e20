//! How a segment ends: recovery's decision table for the bytes after the
//! last valid frame, kept as data ([`ROWS`]) that [`decide`] looks up.
//!
//! A segment's frames end at offset P with an [`End`]. What that means
//! depends on the segment's [`Position`]: only the newest segment can have
//! been torn by a crash (the ring drains, and in written mode syncs, a
//! segment before it writes the next), and only within the torn window its
//! writer recorded (every write it could have had in flight).
//!
//! The verdict follows from a few [`Facts`], each of a small domain, read
//! from the segment only as far as the table needs them:
//!
//! * end at P: the frames fill the segment (`full`), a zero frame, an
//!   invalid frame, or a valid one out of line (the wrong LSN, or a frame
//!   no unfinished batch may hold);
//! * newest: the segment is the newest;
//! * found after P: what the probe of every block boundary after P found
//!   first: a valid frame past the window, a vouch for E or a later LSN
//!   (E is the LSN due at P, or the first of the unfinished batch the
//!   frames end in), or nothing;
//! * no room: a zero frame with too few bytes left for a padding frame,
//!   and zeros to the segment's end;
//! * zero frame: mid-block, or on a block boundary with residue (non-zero
//!   bytes) or zeros behind it: in the window for the newest segment, in
//!   the rest of its block for an older one;
//! * in batch: the frames end inside an atomic batch;
//! * ends short: an older segment's next segment declares a base above E.
//!
//! Exactly one row matches each combination (the tests check every
//! combination, and that this table is [`ROWS`] printed):
//!
//! | end at P                               | newest | found after P     | no room | zero frame         | in batch | ends short | verdict                 |
//! |----------------------------------------|--------|-------------------|---------|--------------------|----------|------------|-------------------------|
//! | full                                   | any    | any               | any     | any                | no       | any        | `Full`                  |
//! | full                                   | any    | any               | any     | any                | yes      | any        | `Corrupt(OpenBatch)`    |
//! | zero frame, invalid frame, out of line | any    | frame past window | any     | any                | any      | any        | `Corrupt(FramesFollow)` |
//! | zero frame, invalid frame, out of line | any    | vouch for E+      | any     | any                | any      | any        | `Corrupt(Vouched)`      |
//! | out of line                            | any    | nothing           | any     | any                | any      | any        | `Corrupt(OutOfLine)`    |
//! | invalid frame                          | no     | nothing           | any     | any                | any      | any        | `Corrupt(Sealed)`       |
//! | invalid frame                          | yes    | nothing           | any     | any                | any      | any        | `Torn`                  |
//! | zero frame                             | any    | nothing           | yes     | any                | no       | any        | `Full`                  |
//! | zero frame                             | any    | nothing           | yes     | any                | yes      | any        | `Corrupt(OpenBatch)`    |
//! | zero frame                             | no     | nothing           | no      | mid-block, residue | any      | any        | `Corrupt(Sealed)`       |
//! | zero frame                             | no     | nothing           | no      | zeros              | no       | no         | `Clean`                 |
//! | zero frame                             | no     | nothing           | no      | zeros              | no       | yes        | `Corrupt(EndsShort)`    |
//! | zero frame                             | no     | nothing           | no      | zeros              | yes      | any        | `Corrupt(OpenBatch)`    |
//! | zero frame                             | yes    | nothing           | no      | mid-block, residue | any      | any        | `Torn`                  |
//! | zero frame                             | yes    | nothing           | no      | zeros              | no       | any        | `Clean`                 |
//! | zero frame                             | yes    | nothing           | no      | zeros              | yes      | any        | `Torn`                  |
//!
//! When the valid frames end inside an atomic batch (its last record is
//! not there), the batch is not part of the data: the facts are read
//! where the frames really end, with E the batch's first LSN. A batch is
//! acknowledged only as a whole (the ledger's watermarks never stop
//! inside one), so a batch cut off by a crash was never acknowledged, and
//! recovery cuts it whole (`Torn` from the batch's start); in an older
//! segment, or in frames that fill theirs, it is damage.
//!
//! An older segment's `Clean` is held to the next segment's base LSN
//! (when that segment's header is usable, and so agrees with its name):
//! its data must end just below it. Where E is below that base, the LSNs
//! between are missing from this segment's end: `Corrupt` at P, in this
//! segment. A lost block over its last records reads exactly like the
//! zeros its writer leaves after its data (the seal, then never-written
//! or stale bytes), so that is the damage it names; the format cannot
//! tell it from a whole segment missing between the two. Only frames that
//! fill the segment (`Full`) prove nothing of it was lost: the LSNs
//! missing after them are a gap, which the consumer reports at the next
//! segment, as it does a next base below E (the two overlap).
//!
//! A vouch (version 2) is the first frame of every write: the highest LSN
//! its writer knew to be durable when it submitted that write. One that
//! covers E proves that the record at P was acknowledged durable before a
//! later write went out, so whatever happened at P, a crash did not: the
//! damage is reported, never cut. A clean close ends with a vouch for
//! everything, so a closed log has no ambiguous tail; a crash leaves only
//! its last writes in flight unvouched, which is inherent.
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

use crate::at_rest::format::{self, Decoded, SegmentHeader};
use crate::error::{Corruption, Error, Lsn, Result};

use super::bytes::SegmentScan;
use super::table::{Is, ANY, NO, YES};
use super::{End, SegmentEnd};

// The probe of block boundaries finds every write's first frame only if
// frames, which start 8-aligned, can start on a block boundary, and the
// frame area starts on one.
const _: () = assert!(format::BLOCK.is_multiple_of(format::FRAME_ALIGN));
const _: () = assert!(format::HEADER_BYTES.is_multiple_of(format::BLOCK));

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

/// How the frames end at P, as far as the table tells ends apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// [`End::Full`]: the frames fill the segment.
    Full,
    /// [`End::Zero`]: a frame header of zeros.
    Zero,
    /// [`End::Invalid`]: bytes that are no valid frame.
    Invalid,
    /// [`End::LsnBreak`] or [`End::BatchBreak`]: a valid frame no writer
    /// puts there.
    OutOfLine,
}

impl Stop {
    fn of(end: End) -> Stop {
        match end {
            End::Full => Stop::Full,
            End::Zero => Stop::Zero,
            End::Invalid(_) => Stop::Invalid,
            End::LsnBreak { .. } | End::BatchBreak { .. } => Stop::OutOfLine,
        }
    }
}

/// What the probe of the block boundaries after P found first: a write
/// that no crash explains ([`later_writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Later {
    /// Neither of the others.
    Nothing,
    /// A valid frame at a block boundary past the window.
    FramesPastWindow,
    /// A vouch for E or a later LSN.
    Vouch,
}

impl Later {
    fn of(found: Option<Damage>) -> Later {
        match found {
            None => Later::Nothing,
            Some(Damage::FramesFollow { .. }) => Later::FramesPastWindow,
            Some(d) => {
                debug_assert!(matches!(d, Damage::Vouched { .. }), "probe found {d:?}");
                Later::Vouch
            }
        }
    }
}

/// Where a zero frame sits, and what the bytes behind it hold: in the
/// newest segment the window, in an older one the rest of its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behind {
    /// The zero frame starts mid-block.
    MidBlock,
    /// On a block boundary, with non-zero bytes behind it.
    Residue,
    /// On a block boundary, with zeros behind it.
    Zeros,
}

/// What the table decides from: how the frames end and what the bytes
/// after them hold, each of a small domain.
///
/// [`read_facts`] reads a fact only where some row can tell its values
/// apart (see [`Facts::probes`], [`Facts::reads_room`],
/// [`Facts::reads_behind`]); one it does not read holds the value named
/// there, which then cannot change the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Facts {
    stop: Stop,
    newest: bool,
    /// Not probed after `Full`: `Nothing`.
    later: Later,
    /// A zero frame with too few bytes left for a padding frame and zeros
    /// to the segment's end. Read only for a zero frame the probe found
    /// nothing after; otherwise `false`.
    no_room: bool,
    /// `MidBlock` wherever P is mid-block; on a block boundary read only
    /// for a zero frame that has room for a seal (or data behind it);
    /// otherwise `Zeros`.
    behind: Behind,
    /// The frames end inside an atomic batch.
    in_batch: bool,
    /// An older segment's next segment declares a base above E.
    ends_short: bool,
}

impl Facts {
    /// Whether the block boundaries after P are probed.
    fn probes(&self) -> bool {
        self.stop != Stop::Full
    }

    /// Whether [`Facts::no_room`] is read.
    fn reads_room(&self) -> bool {
        self.stop == Stop::Zero && self.later == Later::Nothing
    }

    /// Whether what is behind a zero frame on a block boundary is read.
    fn reads_behind(&self) -> bool {
        self.reads_room() && !self.no_room && self.behind != Behind::MidBlock
    }
}

/// Why the table calls an end damage: [`Damage`] without its offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    FramesFollow,
    Vouched,
    OutOfLine,
    OpenBatch,
    Sealed,
    EndsShort,
}

/// A row's verdict: [`Verdict`] without its offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Clean,
    Full,
    Torn,
    Corrupt(Cause),
}

/// One row of the table: a pattern per fact, and the verdict.
#[derive(Clone, Copy, Debug)]
struct Row {
    stop: Is<Stop>,
    newest: Is<bool>,
    later: Is<Later>,
    no_room: Is<bool>,
    behind: Is<Behind>,
    in_batch: Is<bool>,
    ends_short: Is<bool>,
    then: Outcome,
}

impl Row {
    fn matches(&self, f: &Facts) -> bool {
        self.stop.matches(&f.stop)
            && self.newest.matches(&f.newest)
            && self.later.matches(&f.later)
            && self.no_room.matches(&f.no_room)
            && self.behind.matches(&f.behind)
            && self.in_batch.matches(&f.in_batch)
            && self.ends_short.matches(&f.ends_short)
    }
}

/// The decision table (the module's table is this, printed): every
/// combination of [`Facts`] matches exactly one row, which the tests check
/// for every combination.
///
/// Why the rows say what they say: an end that frames fill is the end the
/// writer left, unless a batch is open there (a writer rolls before a
/// batch that does not fit). Whatever a crash cannot have left, a write
/// past the window or a vouch for E, is damage wherever the segment is,
/// and so is a valid frame out of line. Bytes that are no frame, or a
/// zero frame mid-block or with residue behind it, are a torn write in the
/// newest segment and a lost sector in an older one, which was written in
/// whole blocks each closed with padding. A zero tail too short for a
/// seal is a full segment (cutting would recur on every open). A batch the
/// frames end in was never acknowledged: torn with the tail in the newest
/// segment, damage in an older one.
#[rustfmt::skip]
const ROWS: [Row; 16] = {
    use Behind::{MidBlock, Residue, Zeros};
    use Is::{Any, In};
    use Later::{FramesPastWindow, Nothing, Vouch};
    use Outcome::{Clean, Corrupt, Torn};
    use Stop::{Full, Invalid, OutOfLine, Zero};
    const NOT_FULL: Is<Stop> = In(&[Zero, Invalid, OutOfLine]);
    const SEEN: Is<Behind> = In(&[MidBlock, Residue]);
    // One pattern per fact, in the order of `Facts`' fields.
    type When = (Is<Stop>, Is<bool>, Is<Later>, Is<bool>, Is<Behind>, Is<bool>, Is<bool>);
    const fn row(when: When, then: Outcome) -> Row {
        let (stop, newest, later, no_room, behind, in_batch, ends_short) = when;
        Row { stop, newest, later, no_room, behind, in_batch, ends_short, then }
    }
    [
        //    end at P           newest later                     no_room behind         batch short  verdict
        row((In(&[Full]),       ANY,   Any,                      ANY,    Any,           NO,   ANY), Outcome::Full),
        row((In(&[Full]),       ANY,   Any,                      ANY,    Any,           YES,  ANY), Corrupt(Cause::OpenBatch)),
        row((NOT_FULL,          ANY,   In(&[FramesPastWindow]),  ANY,    Any,           ANY,  ANY), Corrupt(Cause::FramesFollow)),
        row((NOT_FULL,          ANY,   In(&[Vouch]),             ANY,    Any,           ANY,  ANY), Corrupt(Cause::Vouched)),
        row((In(&[OutOfLine]),  ANY,   In(&[Nothing]),           ANY,    Any,           ANY,  ANY), Corrupt(Cause::OutOfLine)),
        row((In(&[Invalid]),    NO,    In(&[Nothing]),           ANY,    Any,           ANY,  ANY), Corrupt(Cause::Sealed)),
        row((In(&[Invalid]),    YES,   In(&[Nothing]),           ANY,    Any,           ANY,  ANY), Torn),
        row((In(&[Zero]),       ANY,   In(&[Nothing]),           YES,    Any,           NO,   ANY), Outcome::Full),
        row((In(&[Zero]),       ANY,   In(&[Nothing]),           YES,    Any,           YES,  ANY), Corrupt(Cause::OpenBatch)),
        row((In(&[Zero]),       NO,    In(&[Nothing]),           NO,     SEEN,          ANY,  ANY), Corrupt(Cause::Sealed)),
        row((In(&[Zero]),       NO,    In(&[Nothing]),           NO,     In(&[Zeros]),  NO,   NO ), Clean),
        row((In(&[Zero]),       NO,    In(&[Nothing]),           NO,     In(&[Zeros]),  NO,   YES), Corrupt(Cause::EndsShort)),
        row((In(&[Zero]),       NO,    In(&[Nothing]),           NO,     In(&[Zeros]),  YES,  ANY), Corrupt(Cause::OpenBatch)),
        row((In(&[Zero]),       YES,   In(&[Nothing]),           NO,     SEEN,          ANY,  ANY), Torn),
        row((In(&[Zero]),       YES,   In(&[Nothing]),           NO,     In(&[Zeros]),  NO,   ANY), Clean),
        row((In(&[Zero]),       YES,   In(&[Nothing]),           NO,     In(&[Zeros]),  YES,  ANY), Torn),
    ]
};

/// The verdict of the one row of [`ROWS`] that matches `facts`. Pure.
fn decide(facts: &Facts) -> Outcome {
    let mut rows = ROWS.iter().filter(|r| r.matches(facts));
    // The tests enumerate every combination of the facts: each has a row.
    let row = rows.next().expect("a row for every combination of facts");
    debug_assert!(rows.next().is_none(), "two rows match {facts:?}");
    row.then
}

/// The verdict for `end`, reading the bytes after it as far as needed.
///
/// Cost: nothing for `Full`; otherwise one read of every block boundary
/// from the window's end to the segment's end (the zero-filled rest of a
/// preallocated segment included), and of the window itself.
pub(super) fn judge(scan: &mut SegmentScan, end: SegmentEnd, pos: Position) -> Result<Verdict> {
    let (facts, found) = read_facts(scan, end, pos)?;
    let verdict = match decide(&facts) {
        Outcome::Clean => Verdict::Clean,
        Outcome::Full => Verdict::Full,
        // The whole rest of the frame area, from the end of the complete
        // data (`SegmentEnd::data_end`): what a crash left there was never
        // acknowledged.
        Outcome::Torn => Verdict::Torn {
            zero_to: scan.end(),
        },
        Outcome::Corrupt(cause) => Verdict::Corrupt(damage(cause, found, pos)),
    };
    // Only the newest segment can have been torn: the log drains (and
    // syncs) a segment before the next one gets a write.
    debug_assert!(
        pos.newest || !matches!(verdict, Verdict::Torn { .. }),
        "torn verdict for a sealed segment: {facts:?}"
    );
    Ok(verdict)
}

/// The [`Damage`] a row's `cause` names, with its offsets: from what the
/// probe found, or from the segment's position.
fn damage(cause: Cause, found: Option<Damage>, pos: Position) -> Damage {
    match (cause, found, pos.next_base) {
        (Cause::FramesFollow | Cause::Vouched, Some(found), _) => found,
        (Cause::OutOfLine, ..) => Damage::OutOfLine,
        (Cause::OpenBatch, ..) => Damage::OpenBatch,
        (Cause::Sealed, ..) => Damage::Sealed,
        (Cause::EndsShort, _, Some(next_base)) => Damage::EndsShort { next_base },
        // The rows name what the probe found only when it found it, and
        // `EndsShort` only with a next base: the facts say so.
        (Cause::FramesFollow | Cause::Vouched | Cause::EndsShort, ..) => {
            unreachable!("the facts of {cause:?} were read from the segment")
        }
    }
}

/// Read the [`Facts`] of `end` from the segment, each only where the
/// table needs it, in the order the table consults them; with them, the
/// damage the probe found, if any.
fn read_facts(
    scan: &mut SegmentScan,
    end: SegmentEnd,
    pos: Position,
) -> Result<(Facts, Option<Damage>)> {
    // The newest segment has no next one to be held to.
    debug_assert!(!pos.newest || pos.next_base.is_none());
    let at = end.at;
    let mut facts = Facts {
        stop: Stop::of(end.end),
        newest: pos.newest,
        later: Later::Nothing,
        no_room: false,
        behind: if at.is_multiple_of(format::BLOCK as u64) {
            Behind::Zeros
        } else {
            Behind::MidBlock
        },
        in_batch: end.batch.is_some(),
        ends_short: pos.next_base.is_some_and(|b| b > end.due()),
    };
    if !facts.probes() {
        return Ok((facts, None));
    }
    let seg_end = scan.end();
    // Saturating: a header may record any window (a damaged one, near
    // u64::MAX); past the segment's end it means "to the end".
    let window_end = at
        .saturating_add(pos.window)
        .min(seg_end)
        .next_multiple_of(format::BLOCK as u64)
        .min(seg_end);
    debug_assert!(
        window_end >= at.min(seg_end)
            && (window_end.is_multiple_of(format::BLOCK as u64) || window_end == seg_end),
        "window [{at}, {window_end}) of a segment ending at {seg_end}"
    );
    let found = later_writes(scan, at, window_end, end.due())?;
    facts.later = Later::of(found);
    if facts.reads_room() {
        // The writer fills a segment to its end in whole blocks, so a
        // zero tail too short for a seal ends a full segment.
        facts.no_room = at + format::padding_len(at) as u64 > scan.header.segment_bytes
            && scan.first_nonzero(at, seg_end)?.is_none();
    }
    if facts.reads_behind() {
        // An older segment's writer closed every block with padding, so
        // its block is all it vouches for; in the newest segment a torn
        // write can have left residue anywhere in the window.
        let to = if pos.newest {
            window_end
        } else {
            (at + format::BLOCK as u64).min(seg_end)
        };
        if scan.first_nonzero(at, to)?.is_some() {
            facts.behind = Behind::Residue;
        }
    }
    Ok((facts, found))
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
    // Every write starts on a block boundary, so these are the offsets
    // of every write's first frame after `at`.
    debug_assert!(b > at && b.is_multiple_of(format::BLOCK as u64));
    while b < scan.end() {
        if let Decoded::Frame(f) = scan.frame_at(b)? {
            if b >= window_end {
                return Ok(Some(Damage::FramesFollow { next: b }));
            }
            if let Some(durable) = f.vouch().map(|v| v.durable).filter(|&d| d >= due) {
                return Ok(Some(Damage::Vouched { by: b, durable }));
            }
        }
        b += format::BLOCK as u64;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::table::doc::{assert_documented, cell, markdown, Label};

    const STOPS: [Stop; 4] = [Stop::Full, Stop::Zero, Stop::Invalid, Stop::OutOfLine];
    const LATERS: [Later; 3] = [Later::Nothing, Later::FramesPastWindow, Later::Vouch];
    const BEHINDS: [Behind; 3] = [Behind::MidBlock, Behind::Residue, Behind::Zeros];
    const BOOLS: [bool; 2] = [false, true];

    /// Every combination of the facts' domains.
    fn every() -> Vec<Facts> {
        let mut all = Vec::new();
        for stop in STOPS {
            for newest in BOOLS {
                for later in LATERS {
                    for no_room in BOOLS {
                        for behind in BEHINDS {
                            for in_batch in BOOLS {
                                for ends_short in BOOLS {
                                    all.push(Facts {
                                        stop,
                                        newest,
                                        later,
                                        no_room,
                                        behind,
                                        in_batch,
                                        ends_short,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        all
    }

    #[test]
    fn every_combination_of_facts_matches_exactly_one_row() {
        let all = every();
        assert_eq!(all.len(), 4 * 2 * 3 * 2 * 3 * 2 * 2);
        let wrong: Vec<_> = all
            .iter()
            .map(|f| (f, ROWS.iter().filter(|r| r.matches(f)).count()))
            .filter(|&(_, n)| n != 1)
            .collect();
        assert!(wrong.is_empty(), "(facts, rows matching): {wrong:#?}");
        // No row is dead: each decides some combination.
        for (i, row) in ROWS.iter().enumerate() {
            assert!(
                all.iter().any(|f| row.matches(f)),
                "row {i} matches nothing"
            );
        }
    }

    /// What docs/format.md (sections 6 and 6.1) says of `f`, read in the
    /// order its tables are written, and which damage the `Damage`
    /// variants' docs name for it.
    fn format_md_says(f: &Facts) -> Outcome {
        use Outcome::{Clean, Corrupt, Full, Torn};
        // Section 6: the first row of its table that applies.
        let frames = match f.stop {
            Stop::Full => Full,
            _ if f.later == Later::FramesPastWindow => Corrupt(Cause::FramesFollow),
            _ if f.later == Later::Vouch => Corrupt(Cause::Vouched),
            Stop::OutOfLine => Corrupt(Cause::OutOfLine),
            Stop::Invalid if f.newest => Torn,
            Stop::Invalid => Corrupt(Cause::Sealed),
            Stop::Zero if f.no_room => Full,
            Stop::Zero => match (f.behind, f.newest) {
                (Behind::MidBlock | Behind::Residue, true) => Torn,
                (Behind::MidBlock | Behind::Residue, false) => Corrupt(Cause::Sealed),
                (Behind::Zeros, true) => Clean,
                // "clean, or corrupt if E < the next segment's base_lsn"
                (Behind::Zeros, false) if f.ends_short && !f.in_batch => Corrupt(Cause::EndsShort),
                (Behind::Zeros, false) => Clean,
            },
        };
        if !f.in_batch {
            return frames;
        }
        // Section 6.1's second step. Its "clean" in an older segment is
        // corrupt whether or not E is below the next base, and the code
        // names the open batch as the damage either way.
        match (frames, f.newest) {
            (Corrupt(c), _) => Corrupt(c),
            (Torn, true) => Torn,
            (Torn, false) => unreachable!("section 6 tears only the newest segment"),
            (Clean, true) => Torn,
            (Clean, false) | (Full, _) => Corrupt(Cause::OpenBatch),
        }
    }

    #[test]
    fn every_combination_is_decided_as_docs_format_md_says() {
        for f in every() {
            assert_eq!(decide(&f), format_md_says(&f), "{f:?}");
        }
    }

    #[test]
    fn only_the_newest_segment_is_ever_torn() {
        for f in every().iter().filter(|f| !f.newest) {
            assert_ne!(decide(f), Outcome::Torn, "{f:?}");
        }
    }

    #[test]
    fn facts_left_unread_cannot_change_the_verdict() {
        for f in every() {
            let v = decide(&f);
            if !f.probes() {
                for later in LATERS {
                    assert_eq!(decide(&Facts { later, ..f }), v, "{f:?}");
                }
            }
            if !f.reads_room() {
                for no_room in BOOLS {
                    assert_eq!(decide(&Facts { no_room, ..f }), v, "{f:?}");
                }
            }
            if !f.reads_behind() && f.behind != Behind::MidBlock {
                for behind in [Behind::Residue, Behind::Zeros] {
                    assert_eq!(decide(&Facts { behind, ..f }), v, "{f:?}");
                }
            }
        }
    }

    impl Label for Stop {
        fn label(self) -> &'static str {
            match self {
                Stop::Full => "full",
                Stop::Zero => "zero frame",
                Stop::Invalid => "invalid frame",
                Stop::OutOfLine => "out of line",
            }
        }
    }

    impl Label for Later {
        fn label(self) -> &'static str {
            match self {
                Later::Nothing => "nothing",
                Later::FramesPastWindow => "frame past window",
                Later::Vouch => "vouch for E+",
            }
        }
    }

    impl Label for Behind {
        fn label(self) -> &'static str {
            match self {
                Behind::MidBlock => "mid-block",
                Behind::Residue => "residue",
                Behind::Zeros => "zeros",
            }
        }
    }

    fn verdict_cell(o: Outcome) -> String {
        match o {
            Outcome::Corrupt(c) => format!("`Corrupt({c:?})`"),
            o => format!("`{o:?}`"),
        }
    }

    #[test]
    fn the_module_docs_print_the_table() {
        let rows: Vec<Vec<String>> = ROWS
            .iter()
            .map(|r| {
                vec![
                    cell(r.stop),
                    cell(r.newest),
                    cell(r.later),
                    cell(r.no_room),
                    cell(r.behind),
                    cell(r.in_batch),
                    cell(r.ends_short),
                    verdict_cell(r.then),
                ]
            })
            .collect();
        let want = markdown(
            &[
                "end at P",
                "newest",
                "found after P",
                "no room",
                "zero frame",
                "in batch",
                "ends short",
                "verdict",
            ],
            &rows,
        );
        assert_documented(include_str!("verdict.rs"), &want);
    }
}
