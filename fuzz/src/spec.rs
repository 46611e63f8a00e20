//! An independent model of `docs/format.md` (format v1), written from the
//! document and not from `src/format.rs`: its own constants, its own field
//! offsets, `crc32fast::hash` called directly. The targets compare the
//! engine's decoders against it outcome for outcome, so a decoder that
//! accepts a frame the document rejects (or reports the wrong reason, or
//! checks in a different order) is caught even when it does not panic.

/// §"Constants": one block, the segment header size.
pub const BLOCK: usize = 4096;
/// §3: the fixed frame header.
pub const FRAME_HEADER: usize = 24;
/// §3: frame start alignment.
pub const FRAME_ALIGN: usize = 8;
/// §"Constants": hard payload limit, 64 MiB.
pub const MAX_PAYLOAD: usize = 67_108_864;
/// §2.1: first eight bytes of a segment.
pub const MAGIC: &[u8; 8] = b"RINGWAL1";

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// §3: `frame_len(len) = 24 + roundup(len, 8)`.
pub fn frame_len(plen: usize) -> usize {
    FRAME_HEADER + plen.div_ceil(FRAME_ALIGN) * FRAME_ALIGN
}

/// §3.1: `crc32(le_bytes_u64(salt) ++ frame[4..24) ++ payload)`.
pub fn frame_crc(salt: u64, frame: &[u8], plen: usize) -> u32 {
    let mut covered = Vec::with_capacity(8 + 20 + plen);
    covered.extend_from_slice(&salt.to_le_bytes());
    covered.extend_from_slice(&frame[4..FRAME_HEADER + plen]);
    crc32fast::hash(&covered)
}

/// §2.1: `crc32(bytes[0..12) ++ bytes[16..64))`.
pub fn header_crc(block: &[u8]) -> u32 {
    let mut covered = Vec::with_capacity(60);
    covered.extend_from_slice(&block[..12]);
    covered.extend_from_slice(&block[16..64]);
    crc32fast::hash(&covered)
}

/// Outcome of §3.3 for the bytes at one frame offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A valid frame.
    Valid {
        lsn: u64,
        stream: u16,
        kind: u8,
        flags: u8,
        plen: usize,
        total: usize,
    },
    Zero,
    Truncated,
    TooLong(u32),
    PastEnd,
    Kind(u8),
    Reserved,
    Checksum,
}

/// §3.3, step by step, in the document's order.
pub fn decode_frame(buf: &[u8], salt: u64, configured_limit: usize) -> Frame {
    // Step 1.
    if buf.len() < FRAME_HEADER {
        return Frame::Truncated;
    }
    let h = &buf[..FRAME_HEADER];
    // Step 2.
    if h.iter().all(|&b| b == 0) {
        return Frame::Zero;
    }
    let len = u32_at(h, 4);
    let limit = configured_limit.min(MAX_PAYLOAD);
    // Step 3 (compared in u64 so no target width can wrap it).
    if u64::from(len) > limit as u64 {
        return Frame::TooLong(len);
    }
    let plen = len as usize;
    // Step 4.
    if frame_len(plen) > buf.len() {
        return Frame::PastEnd;
    }
    // Step 5: §3.2 defines kinds 1..=6.
    let kind = h[18];
    if !(1..=6).contains(&kind) {
        return Frame::Kind(kind);
    }
    // Step 6.
    if u32_at(h, 20) != 0 {
        return Frame::Reserved;
    }
    // Step 7.
    if u32_at(h, 0) != frame_crc(salt, buf, plen) {
        return Frame::Checksum;
    }
    Frame::Valid {
        lsn: u64_at(h, 8),
        stream: u16::from_le_bytes([h[16], h[17]]),
        kind,
        flags: h[19],
        plen,
        total: frame_len(plen),
    }
}

/// Every field of a v1 header block as §2.1 lays it out, including the
/// flags word and bytes 56..64 that v1 writers leave zero. The generators
/// build headers with [`encode_header`] rather than the engine's
/// `SegmentHeader`, so they neither depend on the engine's encoder (which
/// the `segment_header` target checks) nor on its struct's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderFields {
    pub node: u32,
    pub flags: u32,
    pub base_lsn: u64,
    pub segment_bytes: u64,
    pub salt: u64,
    pub created_unix_ms: u64,
    /// Bytes 56..64: zero in v1, covered by the CRC.
    pub word56: u64,
}

/// One header block (4096 bytes): magic, version 1, the fields, the CRC,
/// zeros after byte 64.
pub fn encode_header(f: &HeaderFields) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[16..20].copy_from_slice(&f.node.to_le_bytes());
    b[20..24].copy_from_slice(&f.flags.to_le_bytes());
    b[24..32].copy_from_slice(&f.base_lsn.to_le_bytes());
    b[32..40].copy_from_slice(&f.segment_bytes.to_le_bytes());
    b[40..48].copy_from_slice(&f.salt.to_le_bytes());
    b[48..56].copy_from_slice(&f.created_unix_ms.to_le_bytes());
    b[56..64].copy_from_slice(&f.word56.to_le_bytes());
    let crc = header_crc(&b);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Outcome of §2.1's validation table for a header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Valid {
        node: u32,
        base_lsn: u64,
        segment_bytes: u64,
        salt: u64,
        created_unix_ms: u64,
    },
    Short,
    Blank,
    BadMagic,
    Version(u32),
    Checksum,
}

/// §2.1, steps 1 to 5 in order.
pub fn decode_header(block: &[u8]) -> Header {
    if block.len() < BLOCK {
        return Header::Short;
    }
    if block[..64].iter().all(|&b| b == 0) {
        return Header::Blank;
    }
    if &block[..8] != MAGIC {
        return Header::BadMagic;
    }
    let version = u32_at(block, 8);
    if version != 1 {
        return Header::Version(version);
    }
    if u32_at(block, 12) != header_crc(block) {
        return Header::Checksum;
    }
    Header::Valid {
        node: u32_at(block, 16),
        base_lsn: u64_at(block, 24),
        segment_bytes: u64_at(block, 32),
        salt: u64_at(block, 40),
        created_unix_ms: u64_at(block, 48),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_check_value() {
        // The value docs/format.md §3.1 quotes for CRC-32/ISO-HDLC.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn encoded_header_validates() {
        let f = HeaderFields {
            node: 3,
            base_lsn: 7,
            segment_bytes: 1 << 16,
            salt: 9,
            ..HeaderFields::default()
        };
        let b = encode_header(&f);
        assert_eq!(
            decode_header(&b),
            Header::Valid {
                node: 3,
                base_lsn: 7,
                segment_bytes: 1 << 16,
                salt: 9,
                created_unix_ms: 0
            }
        );
    }

    #[test]
    fn frame_len_matches_document() {
        assert_eq!(frame_len(0), 24);
        assert_eq!(frame_len(1), 32);
        assert_eq!(frame_len(8), 32);
        assert_eq!(frame_len(9), 40);
    }
}
