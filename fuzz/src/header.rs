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
//! 1. the outcome equals the independent model of §2.1 ([`crate::spec`]);
//! 2. an accepted header re-encodes (with `SegmentHeader::encode`) to the
//!    same first 64 bytes. Two header areas are documented as "not
//!    interpreted by v1 readers" yet covered by the CRC: the flags word
//!    (bytes 20..24) and bytes 56..64. `encode` writes them as zero, so a
//!    header with either non-zero must match its re-encoding everywhere
//!    else, and its stored CRC must be the document's CRC of the input;
//!    a header with both zero must match byte for byte, CRC included;
//! 3. re-encoding writes zeros over 64..4096 and decodes to the same
//!    header; bytes past the block never change the outcome; a block one
//!    byte short is `Short`.

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
        Ok(h) => spec::Header::Valid {
            node: h.node,
            base_lsn: h.base_lsn,
            segment_bytes: h.segment_bytes,
            salt: h.salt,
            created_unix_ms: h.created_unix_ms,
        },
        Err(HeaderError::Short) => spec::Header::Short,
        Err(HeaderError::Blank) => spec::Header::Blank,
        Err(HeaderError::BadMagic) => spec::Header::BadMagic,
        Err(HeaderError::Version(v)) => spec::Header::Version(v),
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
    let mut out = vec![0xA5u8; format::BLOCK + 8];
    h.encode(&mut out);
    assert!(
        out[64..format::BLOCK].iter().all(|&b| b == 0),
        "encode left 64..4096 dirty"
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

    let uninterpreted_zero =
        block[20..24].iter().all(|&b| b == 0) && block[56..64].iter().all(|&b| b == 0);
    if uninterpreted_zero {
        assert!(
            out[..64] == block[..64],
            "accepted header differs from its re-encoding\n input: {:02x?}\n ours:  {:02x?}",
            &block[..64],
            &out[..64]
        );
    } else {
        assert!(out[..12] == block[..12], "magic/version differ");
        assert!(out[16..20] == block[16..20], "node differs");
        assert!(out[24..56] == block[24..56], "fields differ");
        assert_eq!(
            u32::from_le_bytes([block[12], block[13], block[14], block[15]]),
            spec::header_crc(&block),
            "accepted a header whose CRC is not the document's"
        );
    }
}
