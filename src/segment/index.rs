//! The sparse LSN → offset index: where, inside its segment, a read of a
//! given LSN can start instead of at the segment's first frame.
//!
//! A point says "the frame of record `lsn` starts at `offset` of the
//! segment holding `lsn`, in the write whose vouch is at `write_at`", and
//! only for records a walk may start at: one
//! that stands alone or opens an atomic batch (a walk started inside a
//! batch would see part of it). The segment is implied: LSNs are
//! contiguous per segment, so the segment holding `lsn` is the newest one
//! whose base is at or below it.
//!
//! Architecture invariant: no locks, no I/O, no knowledge of frames here.
//! Recovery feeds it the records its walk visits; the reservation feeds it
//! records as it places them; checkpoints prune it; readers ask it.

use std::collections::VecDeque;

use crate::at_rest::format;
use crate::error::Lsn;

/// The least distance between two points of one segment. Bounds memory to
/// one 24-byte point per 64 KiB of log (384 KiB of index per GiB), and a
/// point read to a walk over at most 64 KiB plus one record's frame: about
/// 10 us of CRC at the ~6 GB/s crc32fast reaches with SSE4.2, against up
/// to 10 ms to walk a 64 MiB segment from its start.
pub(crate) const SPACING: u64 = 64 * 1024;

/// One seek point: record `lsn`'s frame starts at `offset` of its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    pub lsn: Lsn,
    pub offset: u64,
    /// Where the write holding the record starts, with the vouch that
    /// says when it was submitted: a walk started at the point reads it
    /// for the record's write time. `offset` itself where no vouch opened
    /// the write (version 1).
    pub write_at: u64,
}

/// The points of every segment kept, in LSN order (and, within one
/// segment, in offset order).
#[derive(Debug, Default)]
pub(crate) struct SparseIndex {
    points: VecDeque<Point>,
}

/// Where the next point of a segment is due, given where its last one is
/// (`None`: it has none yet; the segment's first frame is a free start).
pub(crate) fn due_after(last: Option<u64>) -> u64 {
    last.unwrap_or(format::HEADER_BYTES as u64) + SPACING
}

impl SparseIndex {
    /// Add `p`, a record that stands alone or opens a batch, at least
    /// [`SPACING`] past the previous point when both are in one segment
    /// (the caller decides that with [`due_after`]). Cost: amortised O(1),
    /// an allocation when the deque grows.
    pub fn add(&mut self, p: Point) {
        if let Some(last) = self.points.back() {
            assert!(
                p.lsn > last.lsn,
                "index points ascend: {p:?} after {last:?}"
            );
        }
        assert!(
            p.offset >= format::HEADER_BYTES as u64 && p.offset.is_multiple_of(8),
            "a point is a frame start: {p:?}"
        );
        assert!(
            p.write_at <= p.offset,
            "a write starts before its records: {p:?}"
        );
        self.points.push_back(p);
    }

    /// The point to start a read of `lsn` at, in the segment whose base is
    /// `seg_base` (the segment holding `lsn`): the last point at or below
    /// `lsn` in that segment, if any. Cost: a binary search.
    pub fn seek(&self, lsn: Lsn, seg_base: Lsn) -> Option<Point> {
        let n = self.points.partition_point(|p| p.lsn <= lsn);
        let p = *self.points.get(n.checked_sub(1)?)?;
        (p.lsn >= seg_base).then_some(p)
    }

    /// The last point, if any.
    pub fn last(&self) -> Option<Point> {
        self.points.back().copied()
    }

    /// Forget the points of records below `oldest`: their segments were
    /// checkpointed away.
    pub fn prune_below(&mut self, oldest: Lsn) {
        while self.points.front().is_some_and(|p| p.lsn < oldest) {
            self.points.pop_front();
        }
    }

    /// How many points are held.
    pub fn len(&self) -> usize {
        self.points.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: Lsn, offset: u64) -> Point {
        Point {
            lsn,
            offset,
            write_at: offset,
        }
    }

    #[test]
    fn a_seek_finds_the_last_point_at_or_below_in_the_same_segment() {
        let mut ix = SparseIndex::default();
        // Segment based at 1: points at 100 and 200; segment at 300: 350.
        ix.add(at(100, 80 * 1024));
        ix.add(at(200, 160 * 1024));
        ix.add(at(350, 72 * 1024));
        assert_eq!(ix.seek(99, 1), None);
        assert_eq!(ix.seek(100, 1), Some(at(100, 80 * 1024)));
        assert_eq!(ix.seek(299, 1), Some(at(200, 160 * 1024)));
        // In the next segment before its first point: the point found is
        // in the segment before, which is no place to start.
        assert_eq!(ix.seek(320, 300), None);
        assert_eq!(ix.seek(9_999, 300), Some(at(350, 72 * 1024)));
    }

    #[test]
    fn pruning_drops_only_points_below_the_oldest_kept() {
        let mut ix = SparseIndex::default();
        for i in 1..=10 {
            ix.add(at(i * 100, 8192 + i * SPACING));
        }
        ix.prune_below(500);
        assert_eq!(ix.len(), 6);
        assert_eq!(ix.seek(499, 1), None);
        assert_eq!(ix.seek(550, 500), Some(at(500, 8192 + 5 * SPACING)));
    }

    #[test]
    #[should_panic(expected = "index points ascend")]
    fn points_out_of_order_are_refused() {
        let mut ix = SparseIndex::default();
        ix.add(at(10, 81920));
        ix.add(at(10, 163840));
    }

    #[test]
    fn the_first_point_of_a_segment_is_due_one_spacing_past_its_header() {
        assert_eq!(due_after(None), format::HEADER_BYTES as u64 + SPACING);
        assert_eq!(due_after(Some(1 << 20)), (1 << 20) + SPACING);
    }
}
