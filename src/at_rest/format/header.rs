//! The segment header block.

use super::*;

// Header field offsets. Version 1 uses the first 64 bytes, version 2 the
// first 80; the rest of the block is zero.
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
const H_USED_V1: usize = 64;
const H_LOG_ID: usize = 64;
const H_KEY_ID: usize = 72;
const H_KEY_CHECK: usize = 76;
const H_USED_V2: usize = 80;

const _: () = assert!(
    H_MAGIC + MAGIC.len() == H_VERSION
        && H_VERSION + 4 == H_CRC
        && H_CRC + 4 == H_NODE
        && H_NODE + 4 == H_FLAGS
        && H_FLAGS + 4 == H_BASE_LSN
        && H_BASE_LSN + 8 == H_SEGMENT_BYTES
        && H_SEGMENT_BYTES + 8 == H_SALT
        && H_SALT + 8 == H_CREATED
        && H_CREATED + 8 == H_TORN_WINDOW
        && H_TORN_WINDOW + 8 == H_USED_V1,
    "the version-1 fields tile the first 64 bytes (docs/format.md §2.1)"
);
const _: () = assert!(
    H_LOG_ID == H_USED_V1
        && H_LOG_ID + 8 == H_KEY_ID
        && H_KEY_ID + 4 == H_KEY_CHECK
        && H_KEY_CHECK + 4 == H_USED_V2
        && H_USED_V2 <= BLOCK,
    "version 2 only appends fields to version 1's, within the block"
);

/// Decoded contents of a segment header (the first block of a segment file).
///
/// Plain data: copying it is free and it carries no validation state; only
/// [`SegmentHeader::decode`] establishes that bytes on disk were valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version of the segment: 1, 2, 3 or 4 ([`FORMAT_VERSION`], what
    /// writers make). It fixes where frames start, which fields exist,
    /// (from 3) that vouch frames carry the time of their write and (from
    /// 4) the nonce salt of the payloads it seals; versions 2 to 4 share
    /// one header layout.
    pub version: u32,
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
    /// Version 2: the random id of the log the segment belongs to (its
    /// manifest holds the same), so a segment of another log under the
    /// right name is refused. 0 in version 1.
    pub log_id: u64,
    /// Version 2: the key the segment's data payloads are encrypted with;
    /// 0 for none. 0 in version 1.
    pub key_id: u32,
    /// Version 2, with `key_id` ≠ 0: four bytes derived from the key, the
    /// log id and the salt, so that a reader holding the wrong key for
    /// `key_id` is told so at once instead of finding every record
    /// failing authentication. 0 when `key_id` is 0 (anything else is
    /// [`HeaderError::Reserved`]).
    pub key_check: u32,
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
    /// A version-2 header of a plaintext segment (`key_id` 0) whose key
    /// check word is not zero: written by a later writer this reader does
    /// not know.
    #[error("reserved header bytes not zero")]
    Reserved,
}

fn header_crc(block: &[u8], used: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&block[..H_CRC]);
    h.update(&block[H_CRC + 4..used]);
    h.finalize()
}

/// Bytes of a header block that carry data in `version`.
fn used(version: u32) -> usize {
    if version == 1 {
        H_USED_V1
    } else {
        H_USED_V2
    }
}

impl SegmentHeader {
    /// Bytes at the start of the segment taken by the header: one block in
    /// version 1; in version 2 the header block and an identical copy of it,
    /// so that one bad sector cannot make a whole segment unreadable.
    pub fn header_bytes(&self) -> u64 {
        if self.version == 1 {
            BLOCK as u64
        } else {
            2 * BLOCK as u64
        }
    }

    /// Offset of the segment's first frame: [`header_bytes`](Self::header_bytes).
    pub fn frames_start(&self) -> u64 {
        self.header_bytes()
    }

    /// Writes one header block into `out[..BLOCK]`: fields, checksum and
    /// zeros for the rest of the block, in the layout of `self.version`.
    ///
    /// Cost: zeroes and checksums one block (a CRC over at most 76 bytes).
    /// Panics if `out.len() < BLOCK` or the version is not 1, 2 or 3. Bytes of
    /// `out` past `BLOCK` are untouched.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= BLOCK, "header buffer shorter than one block");
        assert!(
            (1..=FORMAT_VERSION).contains(&self.version),
            "no layout for header version {}",
            self.version
        );
        assert!(
            self.key_id != 0 || self.key_check == 0,
            "a plaintext header's key check is zero, or readers refuse it"
        );
        let b = &mut out[..BLOCK];
        b.fill(0);
        put(b, H_MAGIC, &MAGIC);
        put(b, H_VERSION, &self.version.to_le_bytes());
        put(b, H_NODE, &self.node.to_le_bytes());
        put(b, H_FLAGS, &0u32.to_le_bytes());
        put(b, H_BASE_LSN, &self.base_lsn.to_le_bytes());
        put(b, H_SEGMENT_BYTES, &self.segment_bytes.to_le_bytes());
        put(b, H_SALT, &self.salt.to_le_bytes());
        put(b, H_CREATED, &self.created_unix_ms.to_le_bytes());
        put(b, H_TORN_WINDOW, &self.torn_window.to_le_bytes());
        if self.version >= 2 {
            put(b, H_LOG_ID, &self.log_id.to_le_bytes());
            put(b, H_KEY_ID, &self.key_id.to_le_bytes());
            put(b, H_KEY_CHECK, &self.key_check.to_le_bytes());
        }
        let crc = header_crc(b, used(self.version));
        put(b, H_CRC, &crc.to_le_bytes());
        debug_assert!(
            self.version == 1 || SegmentHeader::decode(b) == Ok(*self),
            "an encoded version-2 or -3 header decodes as itself"
        );
    }

    /// Writes every header block of the segment into
    /// `out[..header_bytes()]`: the header, and from version 2 on its copy.
    ///
    /// Cost: one [`encode`](Self::encode) and, from version 2 on, a 4 KiB copy.
    /// Panics if `out` is shorter than `header_bytes()`.
    pub fn encode_blocks(&self, out: &mut [u8]) {
        self.encode(out);
        if self.version >= 2 {
            let (first, rest) = out.split_at_mut(BLOCK);
            rest[..BLOCK].copy_from_slice(first);
        }
    }

    /// Parses and verifies a header block of version 1, 2 or 3.
    ///
    /// Checks run in the order Short, Blank, BadMagic, Version, Reserved,
    /// Checksum, so a header from a newer format is reported as
    /// [`HeaderError::Version`] even if its checksum rule has changed. Blank
    /// means the first 64 bytes are zero (in either version). The header
    /// flags field and the bytes after the version's fields are not
    /// interpreted (the flags are still checksummed).
    ///
    /// Cost: one CRC over at most 76 bytes; never panics; reads only
    /// `block[..80]` after the length check.
    pub fn decode(block: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if block.len() < BLOCK {
            return Err(HeaderError::Short);
        }
        if block[..H_USED_V1].iter().all(|&x| x == 0) {
            return Err(HeaderError::Blank);
        }
        if block[H_MAGIC..H_MAGIC + 8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let version = get_u32(block, H_VERSION);
        if !(1..=FORMAT_VERSION).contains(&version) {
            return Err(HeaderError::Version(version));
        }
        let b = &block[..used(version)];
        if version >= 2 && get_u32(b, H_KEY_ID) == 0 && get_u32(b, H_KEY_CHECK) != 0 {
            return Err(HeaderError::Reserved);
        }
        if get_u32(b, H_CRC) != header_crc(b, b.len()) {
            return Err(HeaderError::Checksum);
        }
        let (log_id, key_id, key_check) = if version >= 2 {
            (
                get_u64(b, H_LOG_ID),
                get_u32(b, H_KEY_ID),
                get_u32(b, H_KEY_CHECK),
            )
        } else {
            (0, 0, 0)
        };
        Ok(SegmentHeader {
            version,
            node: get_u32(b, H_NODE),
            base_lsn: get_u64(b, H_BASE_LSN),
            segment_bytes: get_u64(b, H_SEGMENT_BYTES),
            salt: get_u64(b, H_SALT),
            created_unix_ms: get_u64(b, H_CREATED),
            torn_window: get_u64(b, H_TORN_WINDOW),
            log_id,
            key_id,
            key_check,
        })
    }
}
