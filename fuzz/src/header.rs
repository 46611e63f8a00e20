//! Target `segment_header`: `SegmentHeader::decode` on arbitrary bytes.
//!
//! Input layout: byte 0 is a mode, the rest is header material.
//!
//! * mode bit 0 clear: the rest, cut or padded to exactly one block
//!   (4096 bytes; padding is zeros, or 0xFF with mode bit 1), so short
//!   fuzz inputs exercise every check past `Short`;
//! * mode bit 0 set: the rest as is, any length (so `Short` and inputs
//!   longer than a block are covered too).
//!
//! Oracles:
//! 1. the outcome equals the independent model of §2.1 ([`crate::spec`]),
//!    versions 1 to 4 alike (the `Reserved` step included; versions 3 and
//!    4 have version 2's layout);
//! 2. an accepted header re-encodes (with `SegmentHeader::encode`) to the
//!    same used bytes (64 in version 1, 80 in versions 2 to 4). One area is
//!    documented as not interpreted yet covered by the CRC: the flags word
//!    (bytes 20..24). `encode` writes it as zero, so a header with non-zero
//!    flags must match its re-encoding everywhere else, and its stored CRC
//!    must be the document's CRC of the input; a header with zero flags
//!    must match byte for byte, CRC included. Bytes 56..64 (the torn
//!    window) are interpreted in both versions and compared directly;
//! 3. the CRC covers exactly what the document says for the header's
//!    version: flipping any bit of the used bytes (CRC field included)
//!    makes the block invalid, flipping bytes after them (64..80 in
//!    version 1, where version 2 keeps its log id, key id and reserved
//!    word; the rest of the block in both) changes nothing;
//! 4. re-encoding writes zeros over the rest of the block and decodes to
//!    the same header; `encode_blocks` writes the block and, in versions 2
//!    to 4 only, a byte-for-byte copy of it in the next block; bytes past the
//!    block never change the outcome; a block one byte short is `Short`;
//! 5. the vouch frames writers write in a segment of the header's version
//!    are the size §3.2 gives that version (`format::vouch_len`).

use ringwal::format::{self, HeaderError, SegmentHeader};

use crate::spec;

/// Build a `segment_header` input (used by the seeds).
pub fn input(mode: u8, material: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + material.len());
    v.push(mode);
    v.extend_from_slice(material);
    v
}

/// The block a `segment_header` input describes.
pub fn block(data: &[u8]) -> Vec<u8> {
    let (mode, rest) = match data.split_first() {
        Some((&m, rest)) => (m, rest),
        None => (0, &[][..]),
    };
    if mode & 1 == 1 {
        return rest.to_vec();
    }
    let fill = if mode & 2 == 2 { 0xFF } else { 0 };
    let mut b = rest[..rest.len().min(format::BLOCK)].to_vec();
    b.resize(format::BLOCK, fill);
    b
}

/// Express the engine's outcome in the model's terms.
pub fn as_spec(r: &Result<SegmentHeader, HeaderError>) -> spec::Header {
    match *r {
        Ok(h) => spec::Header::Valid(spec::HeaderValue {
            version: h.version,
            node: h.node,
            base_lsn: h.base_lsn,
            segment_bytes: h.segment_bytes,
            salt: h.salt,
            created_unix_ms: h.created_unix_ms,
            torn_window: h.torn_window,
            log_id: h.log_id,
            key_id: h.key_id,
            key_check: h.key_check,
        }),
        Err(HeaderError::Short) => spec::Header::Short,
        Err(HeaderError::Blank) => spec::Header::Blank,
        Err(HeaderError::BadMagic) => spec::Header::BadMagic,
        Err(HeaderError::Version(v)) => spec::Header::Version(v),
        Err(HeaderError::Reserved) => spec::Header::Reserved,
        Err(HeaderError::Checksum) => spec::Header::Checksum,
    }
}

/// Run every oracle on one input. Panics on the first violation.
pub fn check(data: &[u8]) {
    let block = block(data);
    let got = SegmentHeader::decode(&block);
    assert_eq!(
        as_spec(&got),
        spec::decode_header(&block),
        "SegmentHeader::decode disagrees with docs/format.md §2.1"
    );

    if block.len() >= format::BLOCK {
        // Nothing past the first block is read.
        let mut longer = block[..format::BLOCK].to_vec();
        longer.extend_from_slice(&[0x5A; 17]);
        assert_eq!(
            SegmentHeader::decode(&longer),
            got,
            "bytes past the block matter"
        );
        assert_eq!(
            SegmentHeader::decode(&block[..format::BLOCK - 1]),
            Err(HeaderError::Short)
        );
    }

    let Ok(h) = got else { return };
    let used = spec::header_used(h.version);
    check_crc_coverage(&block, &h, used);

    let mut out = vec![0xA5u8; format::BLOCK + 8];
    h.encode(&mut out);
    assert!(
        out[used..format::BLOCK].iter().all(|&b| b == 0),
        "encode left {used}..4096 dirty"
    );
    assert!(
        out[format::BLOCK..].iter().all(|&b| b == 0xA5),
        "encode wrote past the block"
    );
    assert_eq!(
        SegmentHeader::decode(&out),
        Ok(h),
        "re-encoded header does not decode"
    );

    if block[20..24].iter().all(|&b| b == 0) {
        assert!(
            out[..used] == block[..used],
            "accepted header differs from its re-encoding\n input: {:02x?}\n ours:  {:02x?}",
            &block[..used],
            &out[..used]
        );
    } else {
        assert!(out[..12] == block[..12], "magic/version differ");
        assert!(out[16..20] == block[16..20], "node differs");
        assert!(out[24..used] == block[24..used], "fields differ");
        assert_eq!(
            u32::from_le_bytes([block[12], block[13], block[14], block[15]]),
            spec::header_crc(&block, h.version),
            "accepted a header whose CRC is not the document's"
        );
    }

    // The segment's header blocks: the copy exists in versions 2 to 4.
    let mut blocks = vec![0xA5u8; 2 * format::BLOCK + 8];
    h.encode_blocks(&mut blocks);
    assert!(
        blocks[..format::BLOCK] == out[..format::BLOCK],
        "encode_blocks' header block"
    );
    let copy = &blocks[format::BLOCK..2 * format::BLOCK];
    if spec::v2_layout(h.version) {
        assert!(
            copy == &out[..format::BLOCK],
            "version-{} copy is not byte for byte",
            h.version
        );
        assert_eq!(h.header_bytes(), spec::HEADER_BYTES as u64);
        // Oracle 5.
        assert_eq!(
            Some(format::vouch_len(h.version)),
            spec::vouch_len(h.version),
            "vouch_len of version {}",
            h.version
        );
    } else {
        assert!(
            copy.iter().all(|&b| b == 0xA5),
            "a version-1 segment got a copy"
        );
        assert_eq!(h.header_bytes(), spec::HEADER_BYTES_V1 as u64);
    }
    assert!(blocks[2 * format::BLOCK..].iter().all(|&b| b == 0xA5));
    assert_eq!(h.frames_start(), h.header_bytes());
}

/// Oracle 3: the CRC covers `[0, 12)` and `[16, used)`, the CRC field is
/// compared, and nothing after `used` is read.
fn check_crc_coverage(block: &[u8], h: &SegmentHeader, used: usize) {
    for i in 0..used {
        let mut b = block[..format::BLOCK].to_vec();
        b[i] ^= 1 << (i % 8);
        let got = SegmentHeader::decode(&b);
        assert!(
            got.is_err(),
            "version {} header still accepted with byte {i} changed",
            h.version
        );
        assert_eq!(as_spec(&got), spec::decode_header(&b), "byte {i} changed");
    }
    for i in (used..used + 24).chain([format::BLOCK - 1]) {
        let mut b = block[..format::BLOCK].to_vec();
        b[i] ^= 0x81;
        assert_eq!(
            SegmentHeader::decode(&b),
            Ok(*h),
            "byte {i} is not covered by a version-{} header",
            h.version
        );
    }
}
