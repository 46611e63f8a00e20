//! The segment header block.

use super::*;

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
