//! Recovery: what is on disk, what is trustworthy, and what to repair.
//!
//! Analysis ([`analyze`]) is read-only and shared with `ringwal verify`;
//! [`plan`] decides from it what recovery changes, and [`recover`] carries
//! that out. Per file, in base-LSN order, one row of this table decides
//! what is reported and what becomes of the file (`decision.rs` keeps it
//! as data; its tests check every combination of the facts against one
//! row, and that this table is those rows printed):
//!
//! | newest | header        | name            | follows | frames end      | policy         | reported         | the file       |
//! |--------|---------------|-----------------|---------|-----------------|----------------|------------------|----------------|
//! | yes    | never written | resumes the log | any     | any             | any            | -                | discarded      |
//! | yes    | never written | out of range    | any     | any             | any            | `Corrupt`        | discarded      |
//! | yes    | never written | past last + 1   | any     | any             | any            | `Gap`            | discarded      |
//! | no     | never written | any             | any     | any             | point in time  | `Corrupt`        | set aside      |
//! | no     | never written | any             | any     | any             | strict, verify | `Corrupt`        | not kept       |
//! | any    | damaged       | any             | any     | any             | point in time  | `Corrupt`        | set aside      |
//! | any    | damaged       | any             | any     | any             | strict, verify | `Corrupt`        | not kept       |
//! | any    | usable        | any             | no      | any             | strict         | `Gap`            | not kept       |
//! | any    | usable        | any             | no      | any             | point in time  | `Gap`            | set aside      |
//! | any    | usable        | any             | no      | `Clean`, `Full` | verify         | `Gap`            | kept           |
//! | any    | usable        | any             | no      | `Torn`          | verify         | `Gap`            | kept, tail cut |
//! | any    | usable        | any             | no      | `Corrupt`       | verify         | `Gap`, `Corrupt` | not kept       |
//! | any    | usable        | any             | yes     | `Clean`, `Full` | any            | -                | kept           |
//! | any    | usable        | any             | yes     | `Torn`          | any            | -                | kept, tail cut |
//! | any    | usable        | any             | yes     | `Corrupt`       | strict, verify | `Corrupt`        | not kept       |
//! | any    | usable        | any             | yes     | `Corrupt`       | point in time  | `Corrupt`        | kept, tail cut |
//!
//! The facts, each read only where a row needs it:
//!
//! * newest: the newest file listed;
//! * header: usable; never written (segment-shaped, its header and first
//!   frame block blank: what a crash while creating it leaves); or
//!   damaged: blank with data behind it (a lost header), shorter than a
//!   block or blank and not segment-shaped, present but invalid (magic,
//!   version, CRC), a base LSN outside `1..=MAX_LSN`, a node or base that
//!   contradicts the file name, another log's, or a file longer than its
//!   header declares;
//! * name: a never-written newest file's name resumes the log (it is in
//!   `1..=MAX_LSN` and at most the last LSN kept + 1), is out of range, or
//!   is past the last LSN kept + 1;
//! * follows: the base LSN is the previous segment's last LSN + 1, or no
//!   segment before it is in the same run;
//! * frames end: the walker's [`Verdict`](crate::scan::Verdict), by its
//!   own table (`scan/verdict.rs`), which judges the newest file with a
//!   written header as the newest segment and holds an older one to the
//!   next segment's base;
//! * policy: a strict open, a point-in-time open, or `verify`.
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
//! file's name is used only when no segment survives. A strict open reads
//! no file after the first problem, and fails with it. In `PointInTime`
//! mode the first `Corrupt` or `Gap` becomes a truncation point instead:
//! every later file is set aside unread, and whatever follows the valid
//! prefix of the segment left newest is cut like a torn tail. `verify`
//! reads every file and names every problem.

mod analyze;
mod apply;
mod decision;
mod plan;
mod prefetch;
mod salvage;
pub mod verify;

use std::path::PathBuf;
use std::time::Duration;

use crate::at_rest::format::Kind;
use crate::error::Lsn;

pub(crate) use analyze::{analyze, Analysis, Cut, CutWhy, Policy, SegmentState};
pub(crate) use apply::{recover, set_aside_name, write_skip, Recovered};
pub(crate) use plan::{plan, Plan};

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
    pub backend: crate::config::Backend,
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
