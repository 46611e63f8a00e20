//! On-disk format, version 1: segment headers, frames, padding and file names.
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

/// The only format version this module reads or writes.
pub const FORMAT_VERSION: u32 = 1;

/// Size of the fixed frame header that precedes every payload.
pub const FRAME_HEADER: usize = 24;

/// Every frame starts at a multiple of this many bytes from the segment start.
pub const FRAME_ALIGN: usize = 8;

/// Bytes reserved for the segment header; the first frame starts here.
///
/// The header takes a whole block so that rewriting it can never tear a frame
/// and so that the frame area starts block-aligned.
pub const HEADER_BYTES: usize = BLOCK;

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

/// Largest LSN a log may use.
///
/// LSNs are dense from 1, so a real log never gets near this (2^62 records
/// at a billion per second is over a century). Any larger LSN in a file
/// name or header is therefore damage, and stopping here keeps every
/// `lsn + 1` in the engine far from overflow.
pub const MAX_LSN: u64 = 1 << 62;

/// File-name suffix of preallocated spare segments.
pub const SPARE_SUFFIX: &str = ".spare";

// Header field offsets. Only the first 64 bytes carry data.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_CRC: usize = 12;
const H_NODE: usize = 16;
const H_FLAGS: usize = 20;
const H_BASE_LSN: usize = 24;
const H_SEGMENT_BYTES: usize = 32;
const H_SALT: usize = 40;
const H_CREATED: usize = 48;
const H_TORN_WINDOW: usize = 56;
const H_USED: usize = 64;

// Frame header field offsets.
const F_CRC: usize = 0;
const F_LEN: usize = 4;
const F_LSN: usize = 8;
const F_STREAM: usize = 16;
const F_KIND: usize = 18;
const F_FLAGS: usize = 19;
const F_RESERVED: usize = 20;

const SEGMENT_EXT: &str = ".wal";
const LOCK_EXT: &str = ".lock";
const SPARE_INFIX: &str = "-spare-";
const NODE_DIGITS: usize = 5;
const SEQ_DIGITS: usize = 20;

fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn put(b: &mut [u8], off: usize, bytes: &[u8]) {
    b[off..off + bytes.len()].copy_from_slice(bytes);
}

/// Decoded contents of a segment header (the first block of a segment file).
///
/// Plain data: copying it is free and it carries no validation state; only
/// [`SegmentHeader::decode`] establishes that bytes on disk were valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Node that owns the segment; must match the node in the file name.
    pub node: u32,
    /// LSN of the first frame in the segment (previous segment's last LSN + 1).
    pub base_lsn: u64,
    /// Total size of the segment file in bytes, header included.
    pub segment_bytes: u64,
    /// Random per-segment value mixed into every frame CRC.
    pub salt: u64,
    /// Creation time in milliseconds since the Unix epoch; informational only.
    pub created_unix_ms: u64,
    /// The writer's torn window in bytes (writes in flight × largest
    /// write), so recovery judges a tail by the writer's own bound even if
    /// the next opener is configured differently. 0: not recorded.
    pub torn_window: u64,
}

/// Why a segment header block was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The header area was never written: the segment was being created when
    /// the process stopped, so it holds no frames.
    #[error("segment header is all zeros (incomplete segment)")]
    Blank,
    /// Not a ringwal segment.
    #[error("bad magic")]
    BadMagic,
    /// A ringwal segment of a version this code does not understand.
    #[error("unsupported format version {0}")]
    Version(u32),
    /// Header bytes do not match their checksum.
    #[error("header checksum mismatch")]
    Checksum,
    /// Fewer than [`BLOCK`] bytes were supplied.
    #[error("header shorter than one block")]
    Short,
}

fn header_crc(block: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&block[..H_CRC]);
    h.update(&block[H_CRC + 4..H_USED]);
    h.finalize()
}

impl SegmentHeader {
    /// Writes the complete header block into `out[..BLOCK]`: fields, checksum
    /// and zeros for bytes 64..4096, so the caller can write the block as is.
    ///
    /// Cost: zeroes and checksums one block (a CRC over 60 bytes).
    /// Panics if `out.len() < BLOCK`. Bytes of `out` past `BLOCK` are untouched.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= BLOCK, "header buffer shorter than one block");
        let b = &mut out[..BLOCK];
        b.fill(0);
        put(b, H_MAGIC, &MAGIC);
        put(b, H_VERSION, &FORMAT_VERSION.to_le_bytes());
        put(b, H_NODE, &self.node.to_le_bytes());
        put(b, H_FLAGS, &0u32.to_le_bytes());
        put(b, H_BASE_LSN, &self.base_lsn.to_le_bytes());
        put(b, H_SEGMENT_BYTES, &self.segment_bytes.to_le_bytes());
        put(b, H_SALT, &self.salt.to_le_bytes());
        put(b, H_CREATED, &self.created_unix_ms.to_le_bytes());
        put(b, H_TORN_WINDOW, &self.torn_window.to_le_bytes());
        let crc = header_crc(b);
        put(b, H_CRC, &crc.to_le_bytes());
    }

    /// Parses and verifies a header block.
    ///
    /// Checks run in the order Short, Blank, BadMagic, Version, Checksum, so a
    /// header from a newer format is reported as [`HeaderError::Version`]
    /// even if its checksum rule has changed. The header flags field and bytes
    /// 64..4096 are not interpreted (the flags are still checksummed).
    ///
    /// Cost: one CRC over 60 bytes; never panics; reads only `block[..64]`
    /// after the length check.
    pub fn decode(block: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if block.len() < BLOCK {
            return Err(HeaderError::Short);
        }
        let b = &block[..H_USED];
        if b.iter().all(|&x| x == 0) {
            return Err(HeaderError::Blank);
        }
        if b[H_MAGIC..H_MAGIC + 8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let version = get_u32(b, H_VERSION);
        if version != FORMAT_VERSION {
            return Err(HeaderError::Version(version));
        }
        if get_u32(b, H_CRC) != header_crc(b) {
            return Err(HeaderError::Checksum);
        }
        Ok(SegmentHeader {
            node: get_u32(b, H_NODE),
            base_lsn: get_u64(b, H_BASE_LSN),
            segment_bytes: get_u64(b, H_SEGMENT_BYTES),
            salt: get_u64(b, H_SALT),
            created_unix_ms: get_u64(b, H_CREATED),
            torn_window: get_u64(b, H_TORN_WINDOW),
        })
    }
}

/// Frame type, stored in one byte of the frame header.
///
/// Every kind except [`Kind::Padding`] consumes one LSN.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An application record.
    Data = 1,
    /// Filler that closes a batch at a block boundary; carries LSN 0.
    Padding = 2,
    /// Start of a transaction.
    TxBegin = 3,
    /// Transaction committed.
    TxCommit = 4,
    /// Transaction rolled back.
    TxAbort = 5,
    /// Checkpoint marker.
    Checkpoint = 6,
}

impl Kind {
    /// Maps a stored kind byte back to a `Kind`; `None` for any value this
    /// version does not define (including 0, which marks unwritten space).
    ///
    /// Cost: a single match.
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Padding,
            3 => Kind::TxBegin,
            4 => Kind::TxCommit,
            5 => Kind::TxAbort,
            6 => Kind::Checkpoint,
            _ => return None,
        })
    }

    /// The kind's lowercase name, as `ringwal dump` prints it: `data`,
    /// `padding`, `tx_begin`, `tx_commit`, `tx_abort`, `checkpoint`.
    ///
    /// Cost: a single match; no allocation.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::Padding => "padding",
            Kind::TxBegin => "tx_begin",
            Kind::TxCommit => "tx_commit",
            Kind::TxAbort => "tx_abort",
            Kind::Checkpoint => "checkpoint",
        }
    }
}

/// Bytes a frame with `payload_len` payload bytes occupies on disk:
/// [`FRAME_HEADER`] plus the payload rounded up to [`FRAME_ALIGN`].
///
/// The result is always a multiple of [`FRAME_ALIGN`], so the next frame
/// starts aligned. Constant-time; usable in const contexts. Overflows (and
/// panics in debug builds) only for lengths near `usize::MAX`, far above
/// [`MAX_PAYLOAD`].
pub const fn frame_len(payload_len: usize) -> usize {
    FRAME_HEADER + payload_len.next_multiple_of(FRAME_ALIGN)
}

fn frame_crc(salt: u64, frame: &[u8], payload_len: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&salt.to_le_bytes());
    h.update(&frame[F_LEN..FRAME_HEADER + payload_len]);
    h.finalize()
}

/// Fills in the header of a frame whose payload is already at
/// `out[FRAME_HEADER..]`, then seals it with the checksum. Shared by data and
/// padding frames so the padding path never needs a separate zero buffer.
fn seal_frame(out: &mut [u8], salt: u64, lsn: u64, stream: u16, kind: Kind, payload_len: usize) {
    // MAX_PAYLOAD < u32::MAX, so the cast below is exact.
    put(out, F_LEN, &(payload_len as u32).to_le_bytes());
    put(out, F_LSN, &lsn.to_le_bytes());
    put(out, F_STREAM, &stream.to_le_bytes());
    out[F_KIND] = kind as u8;
    out[F_FLAGS] = 0;
    put(out, F_RESERVED, &0u32.to_le_bytes());
    let crc = frame_crc(salt, out, payload_len);
    put(out, F_CRC, &crc.to_le_bytes());
}

/// Encodes one frame at the start of `out` and returns its length, which is
/// exactly `frame_len(payload.len())`. The alignment tail is written as zeros
/// and nothing past the frame is touched. Frame flags are written as 0.
///
/// Cost: one copy of the payload plus one CRC pass over it; no allocation.
/// Panics if `out` is shorter than the frame or the payload exceeds
/// [`MAX_PAYLOAD`].
pub fn encode_frame(
    out: &mut [u8],
    salt: u64,
    lsn: u64,
    stream: u16,
    kind: Kind,
    payload: &[u8],
) -> usize {
    assert!(payload.len() <= MAX_PAYLOAD, "payload exceeds MAX_PAYLOAD");
    let total = frame_len(payload.len());
    assert!(out.len() >= total, "frame buffer too short");
    let end = FRAME_HEADER + payload.len();
    out[FRAME_HEADER..end].copy_from_slice(payload);
    out[end..total].fill(0);
    seal_frame(out, salt, lsn, stream, kind, payload.len());
    total
}

/// Bytes of padding needed so that a batch ending at segment offset `end`
/// (8-aligned) is closed at a block boundary; 0 if `end` is already aligned.
///
/// A padding frame needs at least [`FRAME_HEADER`] bytes, so when the gap to
/// the next boundary is smaller than that (8 or 16 bytes) the padding runs to
/// the boundary after it (gap + [`BLOCK`]). The result is therefore 0 or in
/// `FRAME_HEADER..BLOCK + FRAME_HEADER`, always a multiple of [`FRAME_ALIGN`].
/// Constant-time.
pub fn padding_len(end: u64) -> usize {
    debug_assert!(
        end.is_multiple_of(FRAME_ALIGN as u64),
        "batch end not frame-aligned"
    );
    let rem = (end % BLOCK as u64) as usize;
    if rem == 0 {
        return 0;
    }
    let gap = BLOCK - rem;
    if gap < FRAME_HEADER {
        gap + BLOCK
    } else {
        gap
    }
}

/// Writes one padding frame occupying exactly `out[..total]`: kind
/// [`Kind::Padding`], LSN 0, stream 0, zero payload of `total - FRAME_HEADER`
/// bytes and a valid checksum, so recovery can step over it like any frame.
///
/// Cost: zeroes and checksums `total` bytes; no allocation.
/// Panics unless `total >= FRAME_HEADER`, `total` is a multiple of
/// [`FRAME_ALIGN`], the payload fits [`MAX_PAYLOAD`] and `out.len() >= total`.
pub fn encode_padding(out: &mut [u8], salt: u64, total: usize) {
    assert!(total >= FRAME_HEADER, "padding shorter than a frame header");
    assert!(
        total.is_multiple_of(FRAME_ALIGN),
        "padding not frame-aligned"
    );
    assert!(
        total - FRAME_HEADER <= MAX_PAYLOAD,
        "padding exceeds MAX_PAYLOAD"
    );
    assert!(out.len() >= total, "padding buffer too short");
    out[FRAME_HEADER..total].fill(0);
    seal_frame(out, salt, 0, 0, Kind::Padding, total - FRAME_HEADER);
}

/// A frame that passed every check of [`decode_frame`], borrowing its payload
/// from the scanned buffer (no copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// Log sequence number; 0 for padding.
    pub lsn: u64,
    /// Application stream id.
    pub stream: u16,
    /// Frame type.
    pub kind: Kind,
    /// Per-frame flags byte as stored; v1 writers store 0.
    pub flags: u8,
    /// The payload bytes (alignment tail excluded).
    pub payload: &'a [u8],
    /// Total bytes the frame occupies, alignment included: the distance to
    /// the next frame.
    pub len: usize,
}

/// Outcome of decoding the bytes at one frame offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid frame.
    Frame(FrameRef<'a>),
    /// The 24 header bytes are all zero: never-written space (end of log in a preallocated segment).
    Zero,
    /// Not a valid frame; the reason names what failed.
    Invalid(InvalidFrame),
}

/// Why the bytes at a frame offset are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidFrame {
    /// Fewer than [`FRAME_HEADER`] bytes remain.
    #[error("frame header truncated")]
    Truncated,
    /// The stored payload length exceeds the limit in force.
    #[error("frame length {0} exceeds limit")]
    TooLong(u32),
    /// The frame, alignment included, would extend beyond the buffer.
    #[error("frame runs past the end of the segment")]
    PastEnd,
    /// The kind byte is not a kind defined by this version.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// The reserved header word is not zero.
    #[error("reserved bytes not zero")]
    Reserved,
    /// The checksum does not match (damaged, torn, or written under another salt).
    #[error("frame checksum mismatch")]
    Checksum,
}

/// Decode the frame at the start of `buf` (buf = the rest of the segment from this offset). Never panics on any input, never reads past buf.
///
/// Checks run cheapest first so garbage is rejected before any CRC work:
/// Truncated, Zero, TooLong, PastEnd, Kind, Reserved, Checksum. The payload
/// limit is `min(max_payload, MAX_PAYLOAD)`. Alignment bytes after the
/// payload are not checked: they carry no information and always share an
/// 8-byte word (hence a block) with the payload's end.
///
/// Cost: constant for rejected headers; one CRC pass over the payload
/// otherwise. No allocation.
pub fn decode_frame(buf: &[u8], salt: u64, max_payload: usize) -> Decoded<'_> {
    let Some(h) = buf.first_chunk::<FRAME_HEADER>() else {
        return Decoded::Invalid(InvalidFrame::Truncated);
    };
    if h.iter().all(|&x| x == 0) {
        return Decoded::Zero;
    }
    let len = get_u32(h, F_LEN);
    // Widening u32 -> usize is lossless on the 32/64-bit targets Rust std
    // supports for file I/O; the limit check then bounds frame_len.
    let plen = len as usize;
    if plen > max_payload.min(MAX_PAYLOAD) {
        return Decoded::Invalid(InvalidFrame::TooLong(len));
    }
    let total = frame_len(plen);
    if total > buf.len() {
        return Decoded::Invalid(InvalidFrame::PastEnd);
    }
    let Some(kind) = Kind::from_u8(h[F_KIND]) else {
        return Decoded::Invalid(InvalidFrame::Kind(h[F_KIND]));
    };
    if get_u32(h, F_RESERVED) != 0 {
        return Decoded::Invalid(InvalidFrame::Reserved);
    }
    if get_u32(h, F_CRC) != frame_crc(salt, buf, plen) {
        return Decoded::Invalid(InvalidFrame::Checksum);
    }
    Decoded::Frame(FrameRef {
        lsn: get_u64(h, F_LSN),
        stream: u16::from_le_bytes([h[F_STREAM], h[F_STREAM + 1]]),
        kind,
        flags: h[F_FLAGS],
        payload: &buf[FRAME_HEADER..FRAME_HEADER + plen],
        len: total,
    })
}

/// Parses a field of exactly `digits` ASCII decimal digits. Rejects signs,
/// spaces, other lengths and values that overflow `u64`.
fn parse_fixed_digits(b: &[u8], digits: usize) -> Option<u64> {
    if b.len() != digits {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &c| {
        if !c.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })
}

/// Parses `<5-digit node><mid><20-digit number><ext>`, the shape shared by
/// segment and spare names.
fn parse_node_seq(name: &str, mid: &str, ext: &str) -> Option<(u32, u64)> {
    let b = name.as_bytes();
    if b.len() != NODE_DIGITS + mid.len() + SEQ_DIGITS + ext.len() {
        return None;
    }
    let (node, rest) = b.split_at(NODE_DIGITS);
    let rest = rest.strip_prefix(mid.as_bytes())?;
    let (seq, rest) = rest.split_at(SEQ_DIGITS);
    if rest != ext.as_bytes() {
        return None;
    }
    let node = parse_fixed_digits(node, NODE_DIGITS)?;
    let seq = parse_fixed_digits(seq, SEQ_DIGITS)?;
    // Five digits always fit in u32.
    Some((node as u32, seq))
}

/// Name of the segment whose first frame has LSN `base_lsn`, e.g.
/// `00001-00000000000000000001.wal`. Zero padding makes lexical order equal
/// LSN order within a node.
///
/// Round-trips through [`parse_segment_file_name`] only for
/// `node <= MAX_NODE`. Cost: one small allocation.
pub fn segment_file_name(node: u32, base_lsn: u64) -> String {
    format!("{node:05}-{base_lsn:020}{SEGMENT_EXT}")
}

/// Inverse of [`segment_file_name`]: returns `(node, base_lsn)` for a name of
/// exactly 5 digits, `-`, 20 digits, `.wal`, and `None` for anything else
/// (other lengths, signs, extra characters, values overflowing `u64`).
///
/// Cost: linear in the name length; no allocation.
pub fn parse_segment_file_name(name: &str) -> Option<(u32, u64)> {
    parse_node_seq(name, "-", SEGMENT_EXT)
}

/// Name of spare (preallocated, not yet assigned) segment number `seq`, e.g.
/// `00001-spare-00000000000000000007.spare`.
///
/// Round-trips through [`parse_spare_file_name`] only for `node <= MAX_NODE`.
/// Cost: one small allocation.
pub fn spare_file_name(node: u32, seq: u64) -> String {
    format!("{node:05}{SPARE_INFIX}{seq:020}{SPARE_SUFFIX}")
}

/// Inverse of [`spare_file_name`]: returns `(node, seq)` for a name of exactly
/// 5 digits, `-spare-`, 20 digits, `.spare`, and `None` for anything else.
///
/// Cost: linear in the name length; no allocation.
pub fn parse_spare_file_name(name: &str) -> Option<(u32, u64)> {
    parse_node_seq(name, SPARE_INFIX, SPARE_SUFFIX)
}

/// Name of the lock file that guards a node's log directory, e.g.
/// `00001.lock`. Cost: one small allocation.
pub fn lock_file_name(node: u32) -> String {
    format!("{node:05}{LOCK_EXT}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SALT: u64 = 0x0123_4567_89ab_cdef;

    fn sample_header() -> SegmentHeader {
        SegmentHeader {
            node: 7,
            base_lsn: 1_000_001,
            segment_bytes: 64 << 20,
            salt: SALT,
            created_unix_ms: 1_700_000_000_123,
            torn_window: 8 << 20,
        }
    }

    fn encoded_header() -> Vec<u8> {
        let mut b = vec![0xAAu8; BLOCK];
        sample_header().encode(&mut b);
        b
    }

    fn encode(salt: u64, lsn: u64, stream: u16, kind: Kind, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0xEEu8; frame_len(payload.len())];
        let n = encode_frame(&mut b, salt, lsn, stream, kind, payload);
        assert_eq!(n, b.len());
        b
    }

    fn invalid(buf: &[u8], salt: u64) -> InvalidFrame {
        match decode_frame(buf, salt, MAX_PAYLOAD) {
            Decoded::Invalid(e) => e,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn header_round_trip_and_layout() {
        let b = encoded_header();
        assert_eq!(SegmentHeader::decode(&b), Ok(sample_header()));
        assert_eq!(&b[..8], b"RINGWAL1");
        assert_eq!(get_u32(&b, 8), 1);
        assert_eq!(get_u32(&b, 16), 7);
        assert_eq!(get_u32(&b, 20), 0);
        assert_eq!(get_u64(&b, 24), 1_000_001);
        assert_eq!(get_u64(&b, 32), 64 << 20);
        assert_eq!(get_u64(&b, 40), SALT);
        assert_eq!(get_u64(&b, 48), 1_700_000_000_123);
        assert!(b[64..].iter().all(|&x| x == 0), "tail must be zeroed");
        // Longer input is fine; only the first block matters.
        let mut long = b.clone();
        long.extend_from_slice(&[0xFF; 100]);
        assert_eq!(SegmentHeader::decode(&long), Ok(sample_header()));
    }

    #[test]
    fn header_crc_definition() {
        let b = encoded_header();
        let mut covered = b[..12].to_vec();
        covered.extend_from_slice(&b[16..64]);
        assert_eq!(get_u32(&b, 12), crc32fast::hash(&covered));
    }

    #[test]
    fn crc_is_iso_hdlc() {
        // The check value docs/format.md promises to third-party readers.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn header_encode_leaves_rest_of_buffer() {
        let mut b = vec![0x55u8; BLOCK + 8];
        sample_header().encode(&mut b);
        assert_eq!(&b[BLOCK..], &[0x55; 8]);
    }

    #[test]
    #[should_panic]
    fn header_encode_short_buffer_panics() {
        sample_header().encode(&mut [0u8; BLOCK - 1]);
    }

    #[test]
    fn header_errors() {
        assert_eq!(SegmentHeader::decode(&[]), Err(HeaderError::Short));
        assert_eq!(
            SegmentHeader::decode(&encoded_header()[..BLOCK - 1]),
            Err(HeaderError::Short)
        );
        assert_eq!(
            SegmentHeader::decode(&[0u8; BLOCK]),
            Err(HeaderError::Blank)
        );

        // Garbage after byte 64 does not make a header non-blank.
        let mut b = vec![0u8; BLOCK];
        b[64] = 1;
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::Blank));

        let mut b = encoded_header();
        b[0] = b'X';
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::BadMagic));

        // A different version is reported as such even though the CRC is now wrong.
        let mut b = encoded_header();
        put(&mut b, 8, &2u32.to_le_bytes());
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::Version(2)));

        for off in [12, 16, 20, 24, 33, 40, 55, 63] {
            let mut b = encoded_header();
            b[off] ^= 0x10;
            assert_eq!(
                SegmentHeader::decode(&b),
                Err(HeaderError::Checksum),
                "offset {off}"
            );
        }
    }

    #[test]
    fn kind_bytes() {
        for k in [
            Kind::Data,
            Kind::Padding,
            Kind::TxBegin,
            Kind::TxCommit,
            Kind::TxAbort,
            Kind::Checkpoint,
        ] {
            assert_eq!(Kind::from_u8(k as u8), Some(k));
        }
        let names: Vec<&str> = (1..=6).map(|b| Kind::from_u8(b).unwrap().name()).collect();
        assert_eq!(
            names,
            [
                "data",
                "padding",
                "tx_begin",
                "tx_commit",
                "tx_abort",
                "checkpoint"
            ]
        );
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Kind::from_u8(7), None);
        assert_eq!(Kind::from_u8(255), None);
    }

    #[test]
    fn frame_len_values() {
        assert_eq!(frame_len(0), 24);
        assert_eq!(frame_len(1), 32);
        assert_eq!(frame_len(8), 32);
        assert_eq!(frame_len(9), 40);
        assert_eq!(frame_len(4072), 4096);
    }

    #[test]
    fn frame_round_trip_and_layout() {
        let payload = b"hello, ringwal";
        let b = encode(SALT, 42, 3, Kind::TxCommit, payload);
        assert_eq!(b.len(), 40);
        assert_eq!(get_u32(&b, 4), payload.len() as u32);
        assert_eq!(get_u64(&b, 8), 42);
        assert_eq!(&b[16..18], &3u16.to_le_bytes());
        assert_eq!(b[18], 4);
        assert_eq!(b[19], 0);
        assert_eq!(get_u32(&b, 20), 0);
        assert_eq!(&b[24..38], payload);
        assert_eq!(&b[38..40], &[0, 0], "alignment bytes must be zero");

        let mut covered = SALT.to_le_bytes().to_vec();
        covered.extend_from_slice(&b[4..24 + payload.len()]);
        assert_eq!(get_u32(&b, 0), crc32fast::hash(&covered));

        // Decoding sees only its own frame, even with more bytes after it.
        let mut seg = b.clone();
        seg.extend_from_slice(&[0xFF; 64]);
        let want = FrameRef {
            lsn: 42,
            stream: 3,
            kind: Kind::TxCommit,
            flags: 0,
            payload,
            len: 40,
        };
        assert_eq!(decode_frame(&seg, SALT, MAX_PAYLOAD), Decoded::Frame(want));
        assert_eq!(decode_frame(&b, SALT, payload.len()), Decoded::Frame(want));
    }

    #[test]
    fn encode_frame_touches_only_its_bytes() {
        let mut b = vec![0x77u8; 64];
        let n = encode_frame(&mut b, SALT, 1, 0, Kind::Data, &[1, 2, 3]);
        assert_eq!(n, 32);
        assert!(b[32..].iter().all(|&x| x == 0x77));
    }

    #[test]
    #[should_panic]
    fn encode_frame_short_buffer_panics() {
        let mut b = vec![0u8; 31];
        encode_frame(&mut b, SALT, 1, 0, Kind::Data, &[1]);
    }

    #[test]
    fn empty_payload_frame() {
        let b = encode(SALT, 9, 0, Kind::TxBegin, &[]);
        assert_eq!(b.len(), FRAME_HEADER);
        match decode_frame(&b, SALT, 0) {
            Decoded::Frame(f) => {
                assert_eq!(
                    (f.lsn, f.kind, f.payload, f.len),
                    (9, Kind::TxBegin, &[][..], 24)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_frame_variants() {
        let good = encode(SALT, 5, 1, Kind::Data, &[9u8; 20]);
        assert!(matches!(
            decode_frame(&good, SALT, MAX_PAYLOAD),
            Decoded::Frame(_)
        ));

        assert_eq!(invalid(&[], SALT), InvalidFrame::Truncated);
        assert_eq!(
            invalid(&good[..FRAME_HEADER - 1], SALT),
            InvalidFrame::Truncated
        );

        assert_eq!(
            decode_frame(&good, SALT, 19),
            Decoded::Invalid(InvalidFrame::TooLong(20))
        );
        let mut b = good.clone();
        put(&mut b, 4, &u32::MAX.to_le_bytes());
        assert_eq!(invalid(&b, SALT), InvalidFrame::TooLong(u32::MAX));
        // A caller limit above the format limit does not lift the format limit.
        let mut b = good.clone();
        put(&mut b, 4, &(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert_eq!(
            decode_frame(&b, SALT, usize::MAX),
            Decoded::Invalid(InvalidFrame::TooLong(MAX_PAYLOAD as u32 + 1))
        );

        assert_eq!(
            invalid(&good[..good.len() - 1], SALT),
            InvalidFrame::PastEnd
        );
        assert_eq!(invalid(&good[..FRAME_HEADER], SALT), InvalidFrame::PastEnd);

        let mut b = good.clone();
        b[18] = 0;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Kind(0));
        b[18] = 200;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Kind(200));

        let mut b = good.clone();
        b[22] = 1;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Reserved);

        let mut b = good.clone();
        b[30] ^= 1;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
        let mut b = good.clone();
        b[0] ^= 0x80;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        for n in [0usize, 5, 8, 100] {
            let payload: Vec<u8> = (0..n as u8).collect();
            let orig = encode(SALT, 77, 2, Kind::Data, &payload);
            for bit in 0..(FRAME_HEADER + n) * 8 {
                let mut b = orig.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                let got = decode_frame(&b, SALT, MAX_PAYLOAD);
                assert!(
                    matches!(got, Decoded::Invalid(_)),
                    "n {n} bit {bit}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn zero_header_is_end_of_log() {
        assert_eq!(
            decode_frame(&[0u8; FRAME_HEADER], SALT, MAX_PAYLOAD),
            Decoded::Zero
        );
        assert_eq!(
            decode_frame(&[0u8; BLOCK], SALT, MAX_PAYLOAD),
            Decoded::Zero
        );
        // One set bit anywhere in the header makes it not-zero.
        let mut b = [0u8; BLOCK];
        b[23] = 1;
        assert_ne!(decode_frame(&b, SALT, MAX_PAYLOAD), Decoded::Zero);
    }

    #[test]
    fn salt_separates_segments() {
        let b = encode(SALT, 5, 1, Kind::Data, b"payload");
        assert_eq!(invalid(&b, SALT ^ 1), InvalidFrame::Checksum);
        assert_eq!(invalid(&b, 0), InvalidFrame::Checksum);
        let p = encode(7, 0, 0, Kind::Padding, &[0; 16]);
        assert_eq!(invalid(&p, 8), InvalidFrame::Checksum);
    }

    #[test]
    fn padding_len_values() {
        let cases: &[(u64, usize)] = &[
            (0, 0),
            (8, 4088),
            (24, 4072),
            (4072, 24),
            (4080, 16 + 4096),
            (4088, 8 + 4096),
            (4096, 0),
            (4104, 4088),
            (8192, 0),
            (8176, 16 + 4096),
            (8168, 24),
        ];
        for &(end, want) in cases {
            assert_eq!(padding_len(end), want, "end {end}");
        }
        for end in (0..3 * BLOCK as u64).step_by(FRAME_ALIGN) {
            let p = padding_len(end);
            assert_eq!((end + p as u64) % BLOCK as u64, 0, "end {end}");
            assert!(p == 0 || p >= FRAME_HEADER, "end {end}");
            assert_eq!(p % FRAME_ALIGN, 0);
            assert!(p < BLOCK + FRAME_HEADER);
        }
    }

    #[test]
    fn padding_frames_decode() {
        for total in [24usize, 32, 4072, 4088 + 4096, 4096 + 16] {
            let mut b = vec![0xCCu8; total + 8];
            encode_padding(&mut b, SALT, total);
            assert!(b[total..].iter().all(|&x| x == 0xCC));
            match decode_frame(&b[..total], SALT, MAX_PAYLOAD) {
                Decoded::Frame(f) => {
                    assert_eq!(f.kind, Kind::Padding);
                    assert_eq!((f.lsn, f.stream, f.flags, f.len), (0, 0, 0, total));
                    assert_eq!(f.payload.len(), total - FRAME_HEADER);
                    assert!(f.payload.iter().all(|&x| x == 0));
                }
                other => panic!("total {total}: {other:?}"),
            }
        }
    }

    #[test]
    fn batch_closed_by_padding_ends_on_block() {
        // A whole write: header-less frame area starting at HEADER_BYTES.
        let mut seg = vec![0u8; 3 * BLOCK];
        let mut off = HEADER_BYTES;
        for (i, n) in [100usize, 3000, 950].into_iter().enumerate() {
            off += encode_frame(
                &mut seg[off..],
                SALT,
                i as u64 + 1,
                0,
                Kind::Data,
                &vec![1u8; n],
            );
        }
        let pad = padding_len(off as u64);
        encode_padding(&mut seg[off..], SALT, pad);
        assert_eq!((off + pad) % BLOCK, 0);

        let mut at = HEADER_BYTES;
        let mut lsns = vec![];
        loop {
            match decode_frame(&seg[at..], SALT, MAX_PAYLOAD) {
                Decoded::Frame(f) => {
                    if f.kind != Kind::Padding {
                        lsns.push(f.lsn);
                    }
                    at += f.len;
                }
                Decoded::Zero => break,
                Decoded::Invalid(e) => panic!("at {at}: {e}"),
            }
            if at == seg.len() {
                break;
            }
        }
        assert_eq!(lsns, [1, 2, 3]);
        assert_eq!(at, off + pad);
    }

    #[test]
    #[should_panic]
    fn padding_too_small_panics() {
        encode_padding(&mut [0u8; 64], SALT, 16);
    }

    #[test]
    #[should_panic]
    fn padding_unaligned_panics() {
        encode_padding(&mut [0u8; 64], SALT, 28);
    }

    #[test]
    fn file_names() {
        assert_eq!(segment_file_name(1, 1), "00001-00000000000000000001.wal");
        assert_eq!(
            segment_file_name(MAX_NODE, u64::MAX),
            "99999-18446744073709551615.wal"
        );
        assert_eq!(
            parse_segment_file_name("00001-00000000000000000001.wal"),
            Some((1, 1))
        );
        assert_eq!(
            spare_file_name(2, 7),
            "00002-spare-00000000000000000007.spare"
        );
        assert_eq!(
            parse_spare_file_name("00002-spare-00000000000000000007.spare"),
            Some((2, 7))
        );
        assert!(spare_file_name(2, 7).ends_with(SPARE_SUFFIX));
        assert_eq!(lock_file_name(3), "00003.lock");
        // Names for node ids beyond five digits do not parse back.
        assert_eq!(
            parse_segment_file_name(&segment_file_name(MAX_NODE + 1, 1)),
            None
        );
    }

    #[test]
    fn file_name_near_misses() {
        let bad_segments = [
            "",
            ".wal",
            "00001-00000000000000000001.wa",
            "00001-00000000000000000001.WAL",
            "00001-00000000000000000001.wal ",
            " 00001-00000000000000000001.wal",
            "00001-00000000000000000001.wal.tmp",
            "00001-00000000000000000001.spare",
            "0001-000000000000000000001.wal",
            "000001-0000000000000000001.wal",
            "00001-0000000000000000001.wal",
            "00001-000000000000000000001.wal",
            "00001_00000000000000000001.wal",
            "+0001-00000000000000000001.wal",
            "00001-+0000000000000000001.wal",
            "-0001-00000000000000000001.wal",
            "0000a-00000000000000000001.wal",
            "00001-0000000000000000000x.wal",
            "00001-18446744073709551616.wal",
            "00001-99999999999999999999.wal",
            "00001-0000000000000000000١.wal",
            "00001-spare-00000000000000000001.spare",
            "00001.lock",
        ];
        for n in bad_segments {
            assert_eq!(parse_segment_file_name(n), None, "{n:?}");
        }
        let bad_spares = [
            "",
            "00001-spare-00000000000000000001.spar",
            "00001-spare-00000000000000000001.wal",
            "00001-Spare-00000000000000000001.spare",
            "00001-spare-0000000000000000001.spare",
            "00001-spare-000000000000000000001.spare",
            "0001-spare-00000000000000000001.spare",
            "00001spare-00000000000000000001.spare",
            "00001-spare-+0000000000000000001.spare",
            "00001-spare-00000000000000000001.spare~",
            "00001-00000000000000000001.wal",
        ];
        for n in bad_spares {
            assert_eq!(parse_spare_file_name(n), None, "{n:?}");
        }
    }

    fn kind_strategy() -> impl Strategy<Value = Kind> {
        prop::sample::select(vec![
            Kind::Data,
            Kind::Padding,
            Kind::TxBegin,
            Kind::TxCommit,
            Kind::TxAbort,
            Kind::Checkpoint,
        ])
    }

    proptest! {
        #[test]
        fn decode_never_panics(
            buf in prop::collection::vec(any::<u8>(), 0..512),
            salt in any::<u64>(),
            max in prop_oneof![Just(MAX_PAYLOAD), Just(usize::MAX), 0usize..600],
        ) {
            if let Decoded::Frame(f) = decode_frame(&buf, salt, max) {
                prop_assert!(f.len <= buf.len());
                prop_assert!(f.payload.len() + FRAME_HEADER <= f.len);
            }
        }

        #[test]
        fn decode_never_panics_on_plausible_headers(
            len in any::<u32>(),
            kind in any::<u8>(),
            reserved in prop_oneof![Just(0u32), any::<u32>()],
            tail in 0usize..300,
            salt in any::<u64>(),
        ) {
            let mut buf = vec![0u8; FRAME_HEADER + tail];
            put(&mut buf, 0, &1u32.to_le_bytes());
            put(&mut buf, 4, &len.to_le_bytes());
            buf[18] = kind;
            put(&mut buf, 20, &reserved.to_le_bytes());
            let _ = decode_frame(&buf, salt, MAX_PAYLOAD);
        }

        #[test]
        fn frame_round_trip(
            payload in prop::collection::vec(any::<u8>(), 0..10_000),
            salt in any::<u64>(),
            lsn in any::<u64>(),
            stream in any::<u16>(),
            kind in kind_strategy(),
            slack in 0usize..16,
        ) {
            let mut b = vec![0xA5u8; frame_len(payload.len()) + slack];
            let n = encode_frame(&mut b, salt, lsn, stream, kind, &payload);
            prop_assert_eq!(n, frame_len(payload.len()));
            prop_assert_eq!(n % FRAME_ALIGN, 0);
            prop_assert!(b[FRAME_HEADER + payload.len()..n].iter().all(|&x| x == 0));
            let want = FrameRef { lsn, stream, kind, flags: 0, payload: &payload, len: n };
            prop_assert_eq!(decode_frame(&b, salt, MAX_PAYLOAD), Decoded::Frame(want));
            prop_assert_eq!(decode_frame(&b, salt, payload.len()), Decoded::Frame(want));
        }

        #[test]
        fn single_bit_flip_is_detected(
            payload in prop::collection::vec(any::<u8>(), 0..2_000),
            salt in any::<u64>(),
            lsn in any::<u64>(),
            stream in any::<u16>(),
            kind in kind_strategy(),
            bit_seed in any::<prop::sample::Index>(),
        ) {
            let orig = encode(salt, lsn, stream, kind, &payload);
            let covered = FRAME_HEADER + payload.len();
            let bit = bit_seed.index(orig.len() * 8);
            let mut b = orig.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let got = decode_frame(&b, salt, MAX_PAYLOAD);
            let original = FrameRef { lsn, stream, kind, flags: 0, payload: &payload, len: orig.len() };
            if bit / 8 < covered {
                // Header and payload are protected: the flip must be caught.
                prop_assert!(matches!(got, Decoded::Invalid(_)), "bit {}: {:?}", bit, got);
            } else {
                // Alignment bytes are deliberately outside the CRC; a flip
                // there cannot change what the frame says.
                prop_assert_eq!(got, Decoded::Frame(original));
            }
        }

        #[test]
        fn padding_closes_any_batch(k in 0u64..100_000) {
            let end = k * FRAME_ALIGN as u64;
            let p = padding_len(end);
            prop_assert_eq!((end + p as u64) % BLOCK as u64, 0);
            prop_assert!(p == 0 || (FRAME_HEADER..BLOCK + FRAME_HEADER).contains(&p));
            if p > 0 {
                let mut b = vec![0u8; p];
                encode_padding(&mut b, k, p);
                let is_padding = matches!(
                    decode_frame(&b, k, MAX_PAYLOAD),
                    Decoded::Frame(FrameRef { kind: Kind::Padding, len, .. }) if len == p
                );
                prop_assert!(is_padding);
            }
        }

        #[test]
        fn generated_names_parse(node in 0u32..=MAX_NODE, seq in any::<u64>()) {
            prop_assert_eq!(parse_segment_file_name(&segment_file_name(node, seq)), Some((node, seq)));
            prop_assert_eq!(parse_spare_file_name(&spare_file_name(node, seq)), Some((node, seq)));
            prop_assert_eq!(parse_spare_file_name(&segment_file_name(node, seq)), None);
            prop_assert_eq!(parse_segment_file_name(&spare_file_name(node, seq)), None);
        }

        #[test]
        fn mutated_names_rejected(
            node in 0u32..=MAX_NODE,
            seq in any::<u64>(),
            pos in any::<prop::sample::Index>(),
            repl in prop::sample::select(vec!['x', '+', '-', ' ', '.', '/', 'é']),
            op in 0u8..3,
        ) {
            for (name, parse) in [
                (segment_file_name(node, seq), parse_segment_file_name as fn(&str) -> Option<(u32, u64)>),
                (spare_file_name(node, seq), parse_spare_file_name),
            ] {
                let mut chars: Vec<char> = name.chars().collect();
                let i = pos.index(chars.len());
                match op {
                    0 => { chars.remove(i); }
                    1 => chars.insert(i, repl),
                    _ => {
                        if chars[i] == repl { continue; }
                        chars[i] = repl;
                    }
                }
                let mutated: String = chars.into_iter().collect();
                prop_assert_eq!(parse(&mutated), None, "{:?}", mutated);
            }
        }
    }
}
