//! The one walk the archive makes of a segment: where each record (the
//! last of an atomic batch, or a skip) ends, with its write's time, and
//! how the frames end. The archiver cuts its tail and dates its objects
//! by it; restore checks and cuts by it.

use crate::archive::ship::round_up;
use crate::at_rest::format::{self, ArchivedSegment};
use crate::error::{Lsn, Result};
use crate::scan::{SegmentEnd, Step, Walker};

/// Where one record (or a batch's last, or a skip) ends in its segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct End {
    /// Its LSN (a skip's last).
    pub lsn: Lsn,
    /// Just past its frame: a cut here keeps it and what came before.
    pub at: u64,
    /// Its write's time, ns since the Unix epoch; 0 where none is
    /// recorded (format versions 1 and 2).
    pub time_ns: u64,
}

/// Walk `w` to the end of its valid frames. Only places where a cut
/// leaves whole batches are listed. Cost: the walk's (a read and a CRC
/// pass over the segment's frames).
pub(crate) fn ends(w: &mut Walker) -> Result<(Vec<End>, SegmentEnd)> {
    let mut ends = Vec::new();
    let end = ends_into(w, &mut ends)?;
    Ok((ends, end))
}

/// [`ends`] from where `w` stands, adding to `ends`: a walk resumed after
/// [`Walker::grew`] reads only what the writer added.
pub(crate) fn ends_into(w: &mut Walker, ends: &mut Vec<End>) -> Result<SegmentEnd> {
    loop {
        let lsn = match w.next()? {
            Step::Record { frame, batch, .. } => {
                let whole = batch.is_none()
                    || frame.flags & format::FLAG_BATCH_END == format::FLAG_BATCH_END;
                if !whole {
                    continue;
                }
                frame.lsn
            }
            Step::Hole { .. } => w.last_lsn(),
            Step::End(end) => return Ok(end),
        };
        ends.push(End {
            lsn,
            at: w.valid_end(),
            time_ns: w.write_time().unwrap_or(0),
        });
    }
}

/// The manifest's line for an object of `bytes` holding `base..=last`,
/// dated by the records of `ends` up to `last`.
pub(crate) fn line(base: Lsn, last: Lsn, bytes: &[u8], ends: &[End]) -> ArchivedSegment {
    debug_assert!(round_up(bytes.len() as u64) == bytes.len() as u64);
    let kept = ends.iter().filter(|e| e.lsn <= last && e.time_ns != 0);
    let first_ns = kept.clone().map(|e| e.time_ns).min().unwrap_or(0);
    let last_ns = kept.map(|e| e.time_ns).max().unwrap_or(0);
    ArchivedSegment {
        base,
        last,
        bytes: bytes.len() as u64,
        crc: crc32fast::hash(bytes),
        first_ns,
        last_ns,
    }
}
