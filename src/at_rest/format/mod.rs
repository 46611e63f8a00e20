//! On-disk format, version 4 (and the version-1 to -3 segments it still
//! reads):
//! segment headers, frames, padding, file names, the manifest and
//! checkpoint files.
//!
//! This module is pure byte layout. It performs no I/O and allocates only in
//! the file-name helpers, so every other layer (writer, recovery, tools) can
//! share one definition of the bytes. The normative description lives in
//! `docs/format.md`; the two must change together.
//!
//! All integers are little-endian.

/// Size of one block: the unit of every write and of the segment header.
///
/// Writers only ever issue whole, block-aligned writes, which is what lets
/// recovery reason about torn writes at block granularity.
pub const BLOCK: usize = 4096;

/// First eight bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"RINGWAL1";

/// The format version writers produce: vouch frames carry the write's
/// time and its nonce salt. Readers also accept version 3 segments (no
/// nonce salt: sealed payloads use the header's salt), version 2 ones
/// (no time either) and version 1 ones (one header block, no vouch
/// frames, no log id).
pub const FORMAT_VERSION: u32 = 4;

/// Size of the fixed frame header that precedes every payload.
pub const FRAME_HEADER: usize = 24;

/// Every frame starts at a multiple of this many bytes from the segment start.
pub const FRAME_ALIGN: usize = 8;

/// Bytes reserved for the header of a version-2 to -4 segment, where its first
/// frame starts: the header block and its copy.
///
/// Whole blocks, so that writing the header can never tear a frame and the
/// frame area starts block-aligned; two of them, so that one bad sector in
/// a header leaves the other readable. (Version 1: one block; see
/// [`SegmentHeader::frames_start`].)
pub const HEADER_BYTES: usize = 2 * BLOCK;

/// Smallest segment: sixteen blocks. A file with a segment's name and a
/// blank header that is not whole blocks of at least this size was not
/// made by a writer (spares are preallocated to the segment size before
/// they are named).
pub const MIN_SEGMENT_BYTES: u64 = 16 * BLOCK as u64;

/// Hard format limit on a frame payload (64 MiB).
///
/// Configurations may choose a lower limit; nothing may exceed this one.
/// Keeping it well below `u32::MAX` also means `frame_len` of any accepted
/// length cannot overflow on 32-bit targets.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// Largest node id that file names can carry (five decimal digits).
///
/// Names built for larger ids are longer than the fixed shape and will not
/// parse back; configuration must reject such ids before any file is created.
pub const MAX_NODE: u32 = 99_999;

pub use crate::error::MAX_LSN;

/// File-name suffix of preallocated spare segments.
pub const SPARE_SUFFIX: &str = ".spare";

// Relations between the constants above that the layout relies on
// (docs/format.md §2-§4).
const _: () = assert!(BLOCK.is_power_of_two(), "BLOCK is a power of two");
const _: () = assert!(
    FRAME_ALIGN.is_power_of_two() && BLOCK.is_multiple_of(FRAME_ALIGN),
    "frame alignment divides the block, so every block boundary is a frame offset"
);
const _: () = assert!(
    FRAME_HEADER.is_multiple_of(FRAME_ALIGN),
    "the frame header keeps the payload frame-aligned"
);
const _: () = assert!(
    HEADER_BYTES.is_multiple_of(BLOCK),
    "the frame area starts block-aligned"
);
const _: () = assert!(
    MIN_SEGMENT_BYTES.is_multiple_of(BLOCK as u64) && MIN_SEGMENT_BYTES > HEADER_BYTES as u64,
    "the smallest segment is whole blocks with room behind its header"
);
const _: () = assert!(
    MAX_PAYLOAD < u32::MAX as usize - BLOCK,
    "a frame's u32 length field holds every accepted payload"
);
const _: () = assert!(
    MAX_LSN < u64::MAX / 2,
    "lsn + count of any valid frame stays far from overflow"
);

mod archive;
mod checkpoint;
mod frame;
mod header;
mod manifest;
mod names;

pub use archive::*;
pub use checkpoint::*;
pub use frame::*;
pub use header::*;
pub use manifest::*;
pub use names::*;

pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn put(b: &mut [u8], off: usize, bytes: &[u8]) {
    b[off..off + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests;
