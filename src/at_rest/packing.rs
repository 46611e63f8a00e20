//! Where the reservation puts frames: a pure model of the staging
//! buffers and the segment they fill, used both to decide before copying
//! anything whether a record or an atomic batch fits the segment (or a
//! roll must come first, or it can never fit) and then to place it.
//!
//! Architecture invariant: no locks, no I/O, no buffers here; the
//! reservation (`reserve.rs`) owns those and follows this model's answers.

use crate::at_rest::format;

/// Room a staging buffer keeps free behind its last frame: the padding
/// that closes it to a block boundary (at most one block plus a header).
pub(crate) const CLOSE_ROOM: usize = format::BLOCK + format::FRAME_HEADER;

const _: () = assert!(
    CLOSE_ROOM >= format::BLOCK - format::FRAME_ALIGN + format::FRAME_HEADER,
    "the room kept free holds the longest padding padding_len asks for"
);

/// The write position as the reservation sees it: where in the segment
/// the next frame would start, and how full the active staging buffer is
/// (`None`: no buffer is open; the next one starts at `end` with its
/// vouch frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Segment offset just past the last frame placed (a block boundary
    /// when no buffer is open).
    pub end: u64,
    /// Bytes used in the open buffer, its vouch frame included.
    pub fill: Option<usize>,
}

/// What placing one frame did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Into the open buffer, or a new one opened at the cursor.
    InPlace,
    /// The open buffer was full: it was closed with padding first, and
    /// the frame opens the next buffer.
    AfterClose,
}

impl Cursor {
    /// The position where no buffer is open yet: at `end`, a block
    /// boundary.
    pub fn at(end: u64) -> Cursor {
        assert!(
            end.is_multiple_of(format::BLOCK as u64),
            "writes start on block boundaries"
        );
        Cursor { end, fill: None }
    }

    /// Where the data would end if the open buffer were closed now: its
    /// end padded to a block boundary.
    pub fn closed_end(self) -> u64 {
        let end = match self.fill {
            Some(_) => self.end + format::padding_len(self.end) as u64,
            None => self.end,
        };
        debug_assert!(
            end.is_multiple_of(format::BLOCK as u64),
            "a closed buffer ends on a block boundary"
        );
        end
    }

    /// Place a frame of `flen` bytes in buffers of `cap` bytes. The caller
    /// guarantees an empty buffer holds any one frame
    /// (`VOUCH_LEN + flen + CLOSE_ROOM <= cap`, as `Config` validates).
    pub fn place(self, flen: usize, cap: usize) -> (Cursor, Placed) {
        assert!(
            format::VOUCH_LEN + flen + CLOSE_ROOM <= cap,
            "a frame of {flen} bytes does not fit an empty buffer of {cap}"
        );
        debug_assert!(
            flen >= format::FRAME_HEADER && flen.is_multiple_of(format::FRAME_ALIGN),
            "placed lengths are frame lengths, so the next frame starts aligned"
        );
        let (start, how) = match self.fill {
            Some(fill) if fill + flen + CLOSE_ROOM <= cap => {
                return (
                    Cursor {
                        end: self.end + flen as u64,
                        fill: Some(fill + flen),
                    },
                    Placed::InPlace,
                );
            }
            Some(_) => (self.closed_end(), Placed::AfterClose),
            None => (self.end, Placed::InPlace),
        };
        debug_assert!(
            start.is_multiple_of(format::BLOCK as u64),
            "a buffer opens on a block boundary, with its vouch"
        );
        let c = Cursor {
            end: start + (format::VOUCH_LEN + flen) as u64,
            fill: Some(format::VOUCH_LEN + flen),
        };
        (c, how)
    }

    /// The cursor after frames of the given lengths, all placed from this
    /// one in order.
    pub fn place_all(self, flens: impl IntoIterator<Item = usize>, cap: usize) -> Cursor {
        flens.into_iter().fold(self, |c, flen| c.place(flen, cap).0)
    }

    /// True if frames placed from here up to `after` leave the segment of
    /// `seg_bytes` room to close the last buffer.
    pub fn fits(after: Cursor, seg_bytes: u64) -> bool {
        after.closed_end() <= seg_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: u64 = format::BLOCK as u64;

    #[test]
    fn a_first_frame_leaves_room_for_the_vouch() {
        let flen = format::frame_len(100);
        let (c, how) = Cursor::at(2 * B).place(flen, 64 << 10);
        assert_eq!(how, Placed::InPlace);
        assert_eq!(c.end, 2 * B + (format::VOUCH_LEN + flen) as u64);
        assert_eq!(c.closed_end(), 3 * B);
    }

    #[test]
    fn a_frame_that_overflows_the_buffer_opens_the_next_one() {
        let cap = 4 * format::BLOCK;
        let c = Cursor::at(0).place(2 * format::BLOCK, cap).0;
        let (d, how) = c.place(2 * format::BLOCK, cap);
        assert_eq!(how, Placed::AfterClose);
        assert_eq!(
            d.end,
            c.closed_end() + (format::VOUCH_LEN + 2 * format::BLOCK) as u64
        );
    }

    #[test]
    fn a_segment_fits_only_what_closes_within_it() {
        let c = Cursor::at(15 * B)
            .place(B as usize - format::VOUCH_LEN, 64 << 10)
            .0;
        assert!(Cursor::fits(c, 16 * B));
        let c = Cursor::at(15 * B)
            .place(B as usize - format::VOUCH_LEN + 8, 64 << 10)
            .0;
        assert!(!Cursor::fits(c, 16 * B));
    }

    proptest! {
        /// Frames placed one by one never overlap a buffer's vouch, never
        /// overflow a buffer, and every buffer starts on a block boundary;
        /// the data end only grows.
        #[test]
        fn placements_respect_buffers_and_blocks(
            start in 0u64..64,
            flens in prop::collection::vec(1usize..2000, 1..200),
        ) {
            let cap = 16 * format::BLOCK;
            let mut c = Cursor::at(start * B);
            let mut buf_start = c.end;
            for f in flens {
                let flen = format::frame_len(f);
                let (d, how) = c.place(flen, cap);
                prop_assert!(d.end > c.end);
                if how == Placed::AfterClose || c.fill.is_none() {
                    buf_start = d.end - (format::VOUCH_LEN + flen) as u64;
                    prop_assert!(buf_start.is_multiple_of(B));
                }
                let fill = d.fill.unwrap();
                prop_assert_eq!(d.end - buf_start, fill as u64);
                prop_assert!(fill + CLOSE_ROOM <= cap);
                c = d;
            }
        }
    }
}
