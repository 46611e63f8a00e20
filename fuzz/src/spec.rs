//! An independent model of `docs/format.md` (format version 4, and the
//! version-1, -2 and -3 segments readers still accept), written from the document
//! and not from `src/at_rest/format/`: its own constants, its own field offsets,
//! `crc32fast::hash` called directly. The targets compare the engine's
//! decoders and its recovery against it outcome for outcome, so a decoder
//! that accepts a frame the document rejects (or reports the wrong reason,
//! or checks in a different order), or a recovery that cuts what the
//! document calls corrupt, is caught even when nothing panics.
//!
//! Where the document leaves an outcome open, the model says so
//! ([`Judgment::Unspecified`]) instead of guessing, and the oracles do not
//! compare; each such place is named where it is decided.

use std::collections::BTreeMap;

/// §"Constants": one block, the unit of every write.
pub const BLOCK: usize = 4096;
/// §3: the fixed frame header.
pub const FRAME_HEADER: usize = 24;
/// §3: frame start alignment.
pub const FRAME_ALIGN: usize = 8;
/// §"Constants": hard payload limit, 64 MiB.
pub const MAX_PAYLOAD: usize = 67_108_864;
/// §2.1: first eight bytes of a segment (every version).
pub const MAGIC: &[u8; 8] = b"RINGWAL1";
/// §"Constants": where a version-2, -3 or -4 segment's first frame starts.
pub const HEADER_BYTES: usize = 8192;
/// §"Constants": where a version-1 segment's first frame starts.
pub const HEADER_BYTES_V1: usize = 4096;
/// §"Constants", §3.2: size of a vouch frame in a version-4 segment (a
/// 24-byte payload: durable LSN, time, nonce salt).
pub const VOUCH_LEN: usize = 48;
/// §"Constants", §3.2: size of a vouch frame in a version-3 segment (a
/// 16-byte payload: durable LSN, time).
pub const VOUCH_LEN_V3: usize = 40;
/// §"Constants", §3.2: size of a vouch frame in a version-2 segment (an
/// 8-byte payload: durable LSN).
pub const VOUCH_LEN_V2: usize = 32;
/// §"Constants": the version writers produce.
pub const FORMAT_VERSION: u32 = 4;

/// §"Introduction", §2.1: version 3 is version 2 with a time in every
/// vouch, and version 4 is version 3 with a nonce salt in every vouch too;
/// where the document says "version 2" of a header field or of the header
/// copy it means versions 2, 3 and 4 alike.
pub fn v2_layout(version: u32) -> bool {
    matches!(version, 2..=4)
}

/// §3.2, §4: the size of the vouch frames writers write in a segment of
/// `version`: "24-byte vouches in version-4 segments, 16-byte ones in
/// version-3 segments and 8-byte ones in version-2 segments". Version 1
/// (and any version readers refuse) has none.
pub fn vouch_len(version: u32) -> Option<usize> {
    match version {
        2 => Some(VOUCH_LEN_V2),
        3 => Some(VOUCH_LEN_V3),
        4 => Some(VOUCH_LEN),
        _ => None,
    }
}
/// §"Constants": the smallest segment.
pub const MIN_SEGMENT: u64 = 65536;
/// §"Constants": the largest LSN a log may use.
pub const MAX_LSN: u64 = 1 << 62;
/// §7: first eight bytes of a manifest.
pub const MANIFEST_MAGIC: &[u8; 8] = b"RWMANIF1";
/// §7: size of a manifest file.
pub const MANIFEST_BYTES: usize = 64;

/// §3.2: the frame kinds.
pub mod kind {
    pub const DATA: u8 = 1;
    pub const PADDING: u8 = 2;
    pub const TX_BEGIN: u8 = 3;
    pub const TX_COMMIT: u8 = 4;
    pub const TX_ABORT: u8 = 5;
    pub const CHECKPOINT: u8 = 6;
    pub const VOUCH: u8 = 7;
    pub const SKIP: u8 = 8;
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

// ---------------------------------------------------------------------------
// §3 Frames
// ---------------------------------------------------------------------------

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

/// §4: padding that closes a write ending at `end` (a multiple of 8).
pub fn padding_len(end: u64) -> usize {
    let gap = ((BLOCK as u64 - end % BLOCK as u64) % BLOCK as u64) as usize;
    match gap {
        0 => 0,
        g if g >= FRAME_HEADER => g,
        g => g + BLOCK,
    }
}

/// §3: the flags byte of a record that belongs to an atomic batch.
pub const FLAG_BATCH: u8 = 0x01;
/// §3: the flags byte bit of the last record of an atomic batch (only
/// with [`FLAG_BATCH`]).
pub const FLAG_BATCH_END: u8 = 0x02;
/// §3: the flags byte of a batch's last record.
pub const FLAGS_LAST: u8 = FLAG_BATCH | FLAG_BATCH_END;

/// §3.2: kinds that are records (consume one LSN, may belong to a batch).
pub fn is_record(k: u8) -> bool {
    matches!(
        k,
        kind::DATA | kind::TX_BEGIN | kind::TX_COMMIT | kind::TX_ABORT | kind::CHECKPOINT
    )
}

/// One frame as §3 lays it out, CRC included, alignment bytes zero. The
/// generators write frames with this (never with the engine's encoder,
/// which the `frame_decoder` target checks).
pub fn encode_frame(salt: u64, lsn: u64, stream: u16, kind: u8, payload: &[u8]) -> Vec<u8> {
    encode_flagged(salt, lsn, stream, kind, 0, payload)
}

/// [`encode_frame`] with any flags byte (§3): `FLAG_BATCH` or
/// `FLAGS_LAST` for a batch's records, anything at all for frames the
/// decoder must refuse.
pub fn encode_flagged(
    salt: u64,
    lsn: u64,
    stream: u16,
    kind: u8,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; frame_len(payload.len())];
    f[19] = flags;
    f[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    f[8..16].copy_from_slice(&lsn.to_le_bytes());
    f[16..18].copy_from_slice(&stream.to_le_bytes());
    f[18] = kind;
    f[FRAME_HEADER..FRAME_HEADER + payload.len()].copy_from_slice(payload);
    let crc = frame_crc(salt, &f, payload.len());
    f[..4].copy_from_slice(&crc.to_le_bytes());
    f
}

/// §3.2: a padding frame of `total` bytes (LSN 0, stream 0, zero payload).
pub fn encode_padding(salt: u64, total: usize) -> Vec<u8> {
    encode_frame(salt, 0, 0, kind::PADDING, &vec![0u8; total - FRAME_HEADER])
}

/// §3.2: a version-2 vouch frame for `durable` (8-byte payload).
pub fn encode_vouch(salt: u64, durable: u64) -> Vec<u8> {
    encode_frame(salt, 0, 0, kind::VOUCH, &durable.to_le_bytes())
}

/// §3.2: a version-3 vouch frame for `durable`, its write submitted at
/// `unix_ns` (16-byte payload: the durable LSN, then the time).
pub fn encode_vouch_v3(salt: u64, durable: u64, unix_ns: u64) -> Vec<u8> {
    let mut p = durable.to_le_bytes().to_vec();
    p.extend_from_slice(&unix_ns.to_le_bytes());
    encode_frame(salt, 0, 0, kind::VOUCH, &p)
}

/// §3.2: a version-4 vouch frame for `durable`, its write submitted at
/// `unix_ns`, sealing its payloads with `nonce_salt` (24-byte payload: the
/// durable LSN, then the time, then the nonce salt).
pub fn encode_vouch_v4(salt: u64, durable: u64, unix_ns: u64, nonce_salt: u64) -> Vec<u8> {
    let mut p = durable.to_le_bytes().to_vec();
    p.extend_from_slice(&unix_ns.to_le_bytes());
    p.extend_from_slice(&nonce_salt.to_le_bytes());
    encode_frame(salt, 0, 0, kind::VOUCH, &p)
}

/// §3.2: a skip frame for `first .. first + count`.
pub fn encode_skip(salt: u64, first: u64, count: u64) -> Vec<u8> {
    encode_frame(salt, first, 0, kind::SKIP, &count.to_le_bytes())
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
    /// Step 7: a flags byte §3 does not allow for the frame's kind.
    Flags(u8),
    Checksum,
}

/// §3: the codec bits: LZ4.
pub const FLAG_LZ4: u8 = 0x04;
/// §3: the codec bits: zstd.
pub const FLAG_ZSTD: u8 = 0x08;

/// §3 / §3.3 step 7: whether `flags` is allowed on a frame of kind `k`:
/// no bit above bit 3; batch bits 0 on every frame, `FLAG_BATCH` or
/// `FLAG_BATCH | FLAG_BATCH_END` on a record; codec bits 0 on every
/// frame, one of `FLAG_LZ4` and `FLAG_ZSTD` on a `Data` frame.
pub fn flags_allowed(k: u8, flags: u8) -> bool {
    let batch = match flags & 0x03 {
        0 => true,
        FLAG_BATCH | FLAGS_LAST => is_record(k),
        _ => false,
    };
    let codec = match flags & 0x0C {
        0 => true,
        FLAG_LZ4 | FLAG_ZSTD => k == kind::DATA,
        _ => false,
    };
    flags & 0xF0 == 0 && batch && codec
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
    // Step 5: §3.2 defines kinds 1..=8; a skip's count is not part of
    // this table (see `Step::Skip` for where the model applies it).
    let kind = h[18];
    if !(1..=8).contains(&kind) {
        return Frame::Kind(kind);
    }
    // Step 6.
    if u32_at(h, 20) != 0 {
        return Frame::Reserved;
    }
    // Step 7.
    let flags = h[19];
    if !flags_allowed(kind, flags) {
        return Frame::Flags(flags);
    }
    // Step 8.
    if u32_at(h, 0) != frame_crc(salt, buf, plen) {
        return Frame::Checksum;
    }
    Frame::Valid {
        lsn: u64_at(h, 8),
        stream: u16::from_le_bytes([h[16], h[17]]),
        kind,
        flags,
        plen,
        total: frame_len(plen),
    }
}

/// §3.2: the `u64` payload of a vouch (durable LSN) or skip (count) of 8
/// bytes; a skip of any other length carries no word, and so does a
/// vouch (a 16- or 24-byte one is read by [`frame_vouch`]).
pub fn frame_word(kind: u8, payload: &[u8]) -> Option<u64> {
    if kind != kind::VOUCH && kind != kind::SKIP {
        return None;
    }
    let a: [u8; 8] = payload.try_into().ok()?;
    Some(u64::from_le_bytes(a))
}

/// §3.2: what a vouch frame says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VouchSays {
    /// The durable LSN: the highest LSN the writer knew to be on stable
    /// storage when it submitted the write the vouch opens.
    pub durable: u64,
    /// `submitted_unix_ns` (16- and 24-byte vouches): the writer's wall
    /// clock when it submitted that write.
    pub submitted_unix_ns: Option<u64>,
    /// `nonce_salt` (24-byte vouches): the nonce salt of every payload
    /// that write seals (§3.5).
    pub nonce_salt: Option<u64>,
}

/// §3.2: what a vouch says, by its payload's length alone, in a segment of
/// any version: 8 bytes, a durable LSN; 16 bytes, a durable LSN and the
/// time its write was submitted (ns since the Unix epoch); 24 bytes, a
/// durable LSN, a time and a nonce salt; any other length (or kind)
/// vouches for nothing and carries no time nor nonce salt.
pub fn frame_vouch(kind: u8, payload: &[u8]) -> Option<VouchSays> {
    if kind != kind::VOUCH {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(payload[i..i + 8].try_into().unwrap());
    match payload.len() {
        8 => Some(VouchSays {
            durable: word(0),
            submitted_unix_ns: None,
            nonce_salt: None,
        }),
        16 => Some(VouchSays {
            durable: word(0),
            submitted_unix_ns: Some(word(8)),
            nonce_salt: None,
        }),
        24 => Some(VouchSays {
            durable: word(0),
            submitted_unix_ns: Some(word(8)),
            nonce_salt: Some(word(16)),
        }),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// §3.5 Encrypted payloads
// ---------------------------------------------------------------------------

/// §3.5: the nonce a `Data` frame's payload is sealed with, in a segment
/// whose header has `key_id` ≠ 0: `le_bytes_u64(log_id) ++
/// le_bytes_u64(nonce_salt) ++ le_bytes_u64(frame.lsn)`.
pub fn nonce(log_id: u64, nonce_salt: u64, lsn: u64) -> [u8; 24] {
    let mut n = [0u8; 24];
    n[..8].copy_from_slice(&log_id.to_le_bytes());
    n[8..16].copy_from_slice(&nonce_salt.to_le_bytes());
    n[16..].copy_from_slice(&lsn.to_le_bytes());
    n
}

/// §3.5: the `nonce_salt` of a frame's write, or a place the document
/// leaves open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceSalt {
    Salt(u64),
    Unspecified(&'static str),
}

/// §3.5: the `nonce_salt` of the frame at offset `at` of the frame area
/// `[h.frames_start(), end)`: "the `nonce_salt` of the last vouch frame
/// before it in its segment when that vouch carries one (version 4), and
/// otherwise (versions 2 and 3, whose vouches carry none) the header's
/// `salt`". So a 24-byte vouch gives its own salt, and an 8- or 16-byte
/// vouch after it gives the header's salt again.
///
/// The frames before it are those a scan steps through from the first
/// frame (§3, §6), valid frame after valid frame; `None` when no such
/// step lands on `at` (a frame the scan never reaches is no data).
///
/// A vouch frame whose payload is of no vouch's length "vouches for
/// nothing and carries no time nor nonce salt (it is stepped over like
/// padding)" (§3.2): whether it is still "the last vouch frame" (the
/// header's salt) or is passed over for an earlier one is not said. It
/// decides only where such a frame follows a 24-byte vouch; there the
/// answer is [`NonceSalt::Unspecified`].
pub fn nonce_salt_at(file: &[u8], h: &HeaderValue, end: usize, at: usize) -> Option<NonceSalt> {
    let mut off = h.frames_start();
    let mut salt = NonceSalt::Salt(h.salt);
    // The salt of the last vouch frame that carried one of a vouch's
    // lengths, for the open question above.
    let mut said = h.salt;
    while off < end && off <= at {
        let Frame::Valid {
            kind: k,
            plen,
            total,
            ..
        } = decode_frame(&file[off..end], h.salt, MAX_PAYLOAD)
        else {
            return None;
        };
        if off == at {
            return Some(salt);
        }
        if k == kind::VOUCH {
            let payload = &file[off + FRAME_HEADER..off + FRAME_HEADER + plen];
            salt = match frame_vouch(k, payload) {
                Some(v) => {
                    said = v.nonce_salt.unwrap_or(h.salt);
                    NonceSalt::Salt(said)
                }
                None if said != h.salt => NonceSalt::Unspecified(
                    "a vouch of no vouch's length after one with a nonce salt",
                ),
                None => NonceSalt::Salt(h.salt),
            };
        }
        off += total;
    }
    None
}

// ---------------------------------------------------------------------------
// §2.1 Segment header
// ---------------------------------------------------------------------------

/// Every field of a header block as §2.1 lays it out, including the flags
/// word and (version 2) the key check, which plaintext segments leave zero. The
/// generators build headers with [`encode_header`] rather than the
/// engine's `SegmentHeader`, so they neither depend on the engine's
/// encoder (which the `segment_header` target checks) nor on its fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderFields {
    /// 1, 2, 3 or 4 (anything else is written as given).
    pub version: u32,
    pub node: u32,
    /// Bytes 20..24: written 0, not interpreted, covered by the CRC.
    pub flags: u32,
    pub base_lsn: u64,
    pub segment_bytes: u64,
    pub salt: u64,
    pub created_unix_ms: u64,
    /// Bytes 56..64 (both versions).
    pub torn_window: u64,
    /// Version 2 only: bytes 64..72.
    pub log_id: u64,
    /// Version 2 only: bytes 72..76.
    pub key_id: u32,
    /// Version 2 only: bytes 76..80; must be 0 when `key_id` is.
    pub key_check: u32,
}

/// §2.1: the bytes the header CRC covers end at `U`: 80 in versions 2 and
/// 3, 64 in version 1 (and, for the purpose of computing a CRC, any other
/// version: a reader stops at step 4 before it needs one). §2.1 names
/// only versions 2 and 3 for `U` = 80; version 4 is taken as version 2's
/// layout by the introduction's rule ("version 2" of a header field means
/// 2, 3 and 4 alike), since the fields up to byte 80 are its fields too.
pub fn header_used(version: u32) -> usize {
    if v2_layout(version) {
        80
    } else {
        64
    }
}

/// §2.1: `crc32(bytes[0..12) ++ bytes[16..U))`.
pub fn header_crc(block: &[u8], version: u32) -> u32 {
    let used = header_used(version);
    let mut covered = Vec::with_capacity(used - 4);
    covered.extend_from_slice(&block[..12]);
    covered.extend_from_slice(&block[16..used]);
    crc32fast::hash(&covered)
}

/// One header block (4096 bytes): magic, the fields of `f.version`, the
/// CRC, zeros after the used bytes.
pub fn encode_header(f: &HeaderFields) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&f.version.to_le_bytes());
    b[16..20].copy_from_slice(&f.node.to_le_bytes());
    b[20..24].copy_from_slice(&f.flags.to_le_bytes());
    b[24..32].copy_from_slice(&f.base_lsn.to_le_bytes());
    b[32..40].copy_from_slice(&f.segment_bytes.to_le_bytes());
    b[40..48].copy_from_slice(&f.salt.to_le_bytes());
    b[48..56].copy_from_slice(&f.created_unix_ms.to_le_bytes());
    b[56..64].copy_from_slice(&f.torn_window.to_le_bytes());
    if v2_layout(f.version) {
        b[64..72].copy_from_slice(&f.log_id.to_le_bytes());
        b[72..76].copy_from_slice(&f.key_id.to_le_bytes());
        b[76..80].copy_from_slice(&f.key_check.to_le_bytes());
    }
    let crc = header_crc(&b, f.version);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// §2: every header block of a segment: the header, and in version 2 its
/// byte-for-byte copy (8192 bytes; 4096 in version 1).
pub fn encode_header_blocks(f: &HeaderFields) -> Vec<u8> {
    let mut b = encode_header(f);
    if v2_layout(f.version) {
        let copy = b.clone();
        b.extend_from_slice(&copy);
    }
    b
}

/// What a reader takes from a valid header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderValue {
    pub version: u32,
    pub node: u32,
    pub base_lsn: u64,
    pub segment_bytes: u64,
    pub salt: u64,
    pub created_unix_ms: u64,
    pub torn_window: u64,
    /// 0 in version 1 (the field does not exist there).
    pub log_id: u64,
    /// 0 in version 1.
    pub key_id: u32,
    /// 0 in version 1.
    pub key_check: u32,
}

impl HeaderValue {
    /// §2 / §3: where the first frame starts.
    pub fn frames_start(&self) -> usize {
        if v2_layout(self.version) {
            HEADER_BYTES
        } else {
            HEADER_BYTES_V1
        }
    }
}

/// Outcome of §2.1's validation table for a header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Valid(HeaderValue),
    Short,
    Blank,
    BadMagic,
    Version(u32),
    Reserved,
    Checksum,
}

/// §2.1, steps 1 to 6 in order.
pub fn decode_header(block: &[u8]) -> Header {
    // Step 1.
    if block.len() < BLOCK {
        return Header::Short;
    }
    // Step 2: bytes [0, 64), in both versions.
    if block[..64].iter().all(|&b| b == 0) {
        return Header::Blank;
    }
    // Step 3.
    if &block[..8] != MAGIC {
        return Header::BadMagic;
    }
    // Step 4.
    let version = u32_at(block, 8);
    if !(version == 1 || v2_layout(version)) {
        return Header::Version(version);
    }
    // Step 5.
    if v2_layout(version) && u32_at(block, 72) == 0 && u32_at(block, 76) != 0 {
        return Header::Reserved;
    }
    // Step 6.
    if u32_at(block, 12) != header_crc(block, version) {
        return Header::Checksum;
    }
    let (log_id, key_id, key_check) = if v2_layout(version) {
        (u64_at(block, 64), u32_at(block, 72), u32_at(block, 76))
    } else {
        (0, 0, 0)
    };
    Header::Valid(HeaderValue {
        version,
        node: u32_at(block, 16),
        base_lsn: u64_at(block, 24),
        segment_bytes: u64_at(block, 32),
        salt: u64_at(block, 40),
        created_unix_ms: u64_at(block, 48),
        torn_window: u64_at(block, 56),
        log_id,
        key_id,
        key_check,
    })
}

/// §2.1: what a reader makes of a segment file's header blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentHead {
    /// A usable header; `from_copy` when block 0 failed and block 1 (a
    /// valid version-2 header) was used.
    Usable { h: HeaderValue, from_copy: bool },
    /// Block 0 blank, segment-shaped, blocks 1 and 2 zero.
    NeverWritten,
    /// Block 0 blank, blocks 1 or 2 non-zero.
    Lost,
    /// Shorter than a block, or blank and not segment-shaped.
    Misshapen,
    /// `BadMagic`, `Version`, `Reserved`, `Checksum`.
    Invalid(Header),
}

impl SegmentHead {
    /// Anything but a usable header is damage (a never-written one only
    /// when the file is not the newest).
    pub fn usable(&self) -> Option<HeaderValue> {
        match *self {
            SegmentHead::Usable { h, .. } => Some(h),
            _ => None,
        }
    }
}

fn block_at(file: &[u8], i: usize) -> &[u8] {
    let from = (i * BLOCK).min(file.len());
    let to = ((i + 1) * BLOCK).min(file.len());
    &file[from..to]
}

/// §2.1, "If the header block (block 0) fails ..." to the four kinds of
/// unusable header.
pub fn segment_head(file: &[u8]) -> SegmentHead {
    let first = decode_header(block_at(file, 0));
    match first {
        Header::Valid(h) => {
            return SegmentHead::Usable {
                h,
                from_copy: false,
            }
        }
        Header::Version(_) => return SegmentHead::Invalid(first),
        _ => {}
    }
    if let Header::Valid(h) = decode_header(block_at(file, 1)) {
        if v2_layout(h.version) {
            return SegmentHead::Usable { h, from_copy: true };
        }
    }
    let len = file.len() as u64;
    let shaped = len.is_multiple_of(BLOCK as u64) && len >= MIN_SEGMENT;
    if len < BLOCK as u64 {
        return SegmentHead::Misshapen;
    }
    if first == Header::Blank {
        let later_zero =
            block_at(file, 1).iter().all(|&b| b == 0) && block_at(file, 2).iter().all(|&b| b == 0);
        // A blank, misshapen file with bytes in blocks 1 or 2 is both
        // "lost" and "misshapen"; both are damage.
        return match (shaped, later_zero) {
            (false, _) => SegmentHead::Misshapen,
            (true, true) => SegmentHead::NeverWritten,
            (true, false) => SegmentHead::Lost,
        };
    }
    SegmentHead::Invalid(first)
}

// ---------------------------------------------------------------------------
// §1 Names, §7 Manifest
// ---------------------------------------------------------------------------

fn fixed_digits(s: &str, n: usize) -> Option<u64> {
    if s.len() != n || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok()
}

/// §1: `N-S.wal` with exactly 5 and 20 digits; `(node, base)`.
pub fn parse_segment_name(name: &str) -> Option<(u32, u64)> {
    let stem = name.strip_suffix(".wal")?;
    let (n, s) = stem.split_once('-')?;
    Some((fixed_digits(n, 5)? as u32, fixed_digits(s, 20)?))
}

/// §1: the segment name of `node` and `base`.
pub fn segment_name(node: u32, base: u64) -> String {
    format!("{node:05}-{base:020}.wal")
}

/// §1: the manifest's name.
pub fn manifest_name(node: u32) -> String {
    format!("{node:05}.manifest")
}

/// §7: the fields of a manifest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManifestFields {
    pub node: u32,
    pub flags: u32,
    pub log_id: u64,
    pub newest_base: u64,
    pub durable_lsn: u64,
    pub handed_out: u64,
    pub oldest_lsn: u64,
}

fn manifest_crc(b: &[u8]) -> u32 {
    let mut covered = Vec::with_capacity(60);
    covered.extend_from_slice(&b[..12]);
    covered.extend_from_slice(&b[16..64]);
    crc32fast::hash(&covered)
}

/// §7: the 64 bytes of a manifest.
pub fn encode_manifest(m: &ManifestFields) -> Vec<u8> {
    let mut b = vec![0u8; MANIFEST_BYTES];
    b[..8].copy_from_slice(MANIFEST_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[16..20].copy_from_slice(&m.node.to_le_bytes());
    b[20..24].copy_from_slice(&m.flags.to_le_bytes());
    b[24..32].copy_from_slice(&m.log_id.to_le_bytes());
    b[32..40].copy_from_slice(&m.newest_base.to_le_bytes());
    b[40..48].copy_from_slice(&m.durable_lsn.to_le_bytes());
    b[48..56].copy_from_slice(&m.handed_out.to_le_bytes());
    b[56..64].copy_from_slice(&m.oldest_lsn.to_le_bytes());
    let crc = manifest_crc(&b);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// §7: a manifest's fields, if the bytes are one (64 bytes, magic,
/// version 1, CRC). The document gives no validation order and no
/// outcome for bytes that are not a manifest; see [`judge`].
pub fn decode_manifest(b: &[u8]) -> Option<ManifestFields> {
    if b.len() != MANIFEST_BYTES
        || &b[..8] != MANIFEST_MAGIC
        || u32_at(b, 8) != 1
        || u32_at(b, 12) != manifest_crc(b)
    {
        return None;
    }
    Some(ManifestFields {
        node: u32_at(b, 16),
        flags: u32_at(b, 20),
        log_id: u64_at(b, 24),
        newest_base: u64_at(b, 32),
        durable_lsn: u64_at(b, 40),
        handed_out: u64_at(b, 48),
        oldest_lsn: u64_at(b, 56),
    })
}

// ---------------------------------------------------------------------------
// §5, §6 Scanning a segment and judging its end
// ---------------------------------------------------------------------------

/// §6: how a segment's scan ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Full,
    Zero,
    Invalid,
    LsnBreak,
    /// §6.1: a valid frame carrying the LSN due that a writer never puts
    /// inside an unfinished batch (a record standing alone, or a skip).
    BatchBreak,
}

/// §6.1: the atomic batch the valid frames end in, its last record
/// missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenBatch {
    /// Offset of its first record's frame: where the data ends.
    pub at: usize,
    /// Its first LSN: the LSN due at the end of the data.
    pub first: u64,
}

/// One step of a scan that the model can take, or a place the document
/// leaves open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// `P`: where the scan ended (inside an unfinished batch: where its
    /// valid frames end, not where the batch starts).
    pub at: usize,
    pub end: End,
    /// The LSN the next frame at `P` would have carried.
    pub expect: u64,
    /// Records of the data, in order: (offset, lsn, stream, kind,
    /// payload). An unfinished batch's records are not among them.
    pub records: Vec<(usize, u64, u16, u8, Vec<u8>)>,
    /// Skips: (first, count).
    pub skips: Vec<(u64, u64)>,
    /// §6.1: set when the valid frames end inside an atomic batch.
    pub batch: Option<OpenBatch>,
    /// Set when the scan met something the document does not decide.
    pub unspecified: Option<&'static str>,
}

impl Walk {
    /// `E`, the LSN due at the end of the data: what a vouch must cover
    /// to make the end damage (§6, §6.1).
    pub fn due(&self) -> u64 {
        self.batch.map_or(self.expect, |b| b.first)
    }

    /// Where the data ends: `P`, or the start of the unfinished batch.
    pub fn data_end(&self) -> usize {
        self.batch.map_or(self.at, |b| b.at)
    }
}

/// §6 first paragraph, §3.3, §5, §6.1: scan the frame area `[start, end)`
/// of a segment from its first frame.
///
/// Places the document leaves open are named in `unspecified` rather
/// than guessed:
///
/// * a skip frame whose LSN is not `E` and whose count is invalid: an
///   LSN break (§6) or an invalid frame (§3.2)? The two rows differ for
///   the newest segment (corrupt vs torn);
/// * a record whose LSN exceeds `MAX_LSN`: the document says no log uses
///   one, not what a reader makes of it.
///
/// Fewer than 24 zero bytes before the end are `Zero` here: §3.3 step 1
/// calls any buffer shorter than a frame header `Truncated`, but §6's
/// row "Zero, too few bytes left for a padding frame" can only ever apply
/// if such zeros end the scan as `Zero`.
///
/// Batches (§4.1, §6.1): a record flagged `FLAG_BATCH` opens a batch (or
/// continues the open one); one flagged `FLAG_BATCH | FLAG_BATCH_END`
/// closes it (or is a batch of one). The records of a batch join the data
/// only when its last record is found. Padding and vouches may sit
/// between its records; a record standing alone or a skip carrying the
/// LSN due inside it ends the scan as a batch break.
pub fn walk(file: &[u8], h: &HeaderValue, end: usize) -> Walk {
    let mut w = Walk {
        at: h.frames_start(),
        end: End::Full,
        expect: h.base_lsn,
        records: Vec::new(),
        skips: Vec::new(),
        batch: None,
        unspecified: None,
    };
    // The open batch's records, held back until its last one is found.
    let mut pending: Vec<(usize, u64, u16, u8, Vec<u8>)> = Vec::new();
    let mut open: Option<OpenBatch> = None;
    let stop = |mut w: Walk, e: End, open: Option<OpenBatch>| {
        w.end = e;
        w.batch = open;
        w
    };
    loop {
        let at = w.at;
        if at >= end {
            return stop(w, End::Full, open);
        }
        let buf = &file[at..end];
        if buf.len() < FRAME_HEADER && buf.iter().all(|&b| b == 0) {
            return stop(w, End::Zero, open);
        }
        let (lsn, stream, k, flags, plen, total) = match decode_frame(buf, h.salt, MAX_PAYLOAD) {
            Frame::Valid {
                lsn,
                stream,
                kind,
                flags,
                plen,
                total,
            } => (lsn, stream, kind, flags, plen, total),
            Frame::Zero => return stop(w, End::Zero, open),
            _ => return stop(w, End::Invalid, open),
        };
        let payload = &buf[FRAME_HEADER..FRAME_HEADER + plen];
        // §5: padding and vouch frames consume no LSN; the document
        // gives them LSN 0 but no reader rule for another value, and
        // "an LSN break" is meant for frames that carry one. They may sit
        // between a batch's records (§4.1).
        if k == kind::PADDING || k == kind::VOUCH {
            w.at += total;
            continue;
        }
        if k == kind::SKIP {
            let count = frame_word(k, payload);
            let valid = match count {
                Some(n) if n >= 1 => {
                    let last = u128::from(lsn) + u128::from(n) - 1;
                    if last == u128::from(MAX_LSN) {
                        w.unspecified = Some("a skip ending exactly at MAX_LSN");
                    }
                    last <= u128::from(MAX_LSN)
                }
                _ => false,
            };
            if !valid {
                if lsn != w.expect {
                    w.unspecified = Some("an invalid skip carrying the wrong LSN");
                }
                return stop(w, End::Invalid, open);
            }
            if lsn != w.expect {
                return stop(w, End::LsnBreak, open);
            }
            if open.is_some() {
                return stop(w, End::BatchBreak, open);
            }
            let n = count.expect("checked above");
            w.skips.push((lsn, n));
            w.expect = lsn + n;
            w.at += total;
            continue;
        }
        if lsn != w.expect {
            return stop(w, End::LsnBreak, open);
        }
        if lsn > MAX_LSN {
            w.unspecified = Some("a record LSN above MAX_LSN");
        }
        let rec = (at, lsn, stream, k, payload.to_vec());
        // §3: the batch bits (the codec bits say how to read the payload).
        match flags & 0x03 {
            0 if open.is_some() => return stop(w, End::BatchBreak, open),
            0 => w.records.push(rec),
            FLAG_BATCH => {
                open.get_or_insert(OpenBatch { at, first: lsn });
                pending.push(rec);
            }
            // Step 7 of §3.3 let nothing else through.
            _ => {
                pending.push(rec);
                w.records.append(&mut pending);
                open = None;
            }
        }
        w.expect = lsn.wrapping_add(1);
        w.at += total;
    }
}

/// §6's decision table (and §6.1's for an unfinished batch): what an
/// end means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Full,
    Clean,
    /// Cut at the end of the data: `P`, or the start of the unfinished
    /// batch the frames end in.
    Torn,
    Corrupt(Why),
}

/// Which row of §6's (or §6.1's) table made an end corrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// A valid frame at a block boundary past the window.
    FramesFollow(usize),
    /// A valid vouch (at a block boundary after `P`) for `E` or later.
    Vouched(usize),
    LsnBreak,
    /// §6.1: a record standing alone or a skip inside an unfinished batch.
    BatchBreak,
    /// An invalid frame in an older segment, or a zero frame there that
    /// is not a writer's seal (mid-block, or with bytes in its block).
    Sealed,
    /// §6.1: an unfinished batch in an older segment, or in frames that
    /// fill the segment.
    OpenBatch,
}

/// §6 and §6.1: judge the end of `w`. `window` is the larger of the
/// header's and the reader's torn window; it applies to the newest
/// segment only.
pub fn judge_end(
    file: &[u8],
    h: &HeaderValue,
    end: usize,
    w: &Walk,
    newest: bool,
    window: u64,
) -> Verdict {
    let frames = judge_frames(file, h, end, w, newest, window);
    if w.batch.is_none() {
        return frames;
    }
    // §6.1: the frames end inside an atomic batch.
    match frames {
        Verdict::Corrupt(why) => Verdict::Corrupt(why),
        Verdict::Torn => Verdict::Torn,
        Verdict::Clean if newest => Verdict::Torn,
        Verdict::Clean | Verdict::Full => Verdict::Corrupt(Why::OpenBatch),
    }
}

/// §6's table for where the valid frames end, `E` being the LSN due at
/// the end of the data ([`Walk::due`]).
fn judge_frames(
    file: &[u8],
    h: &HeaderValue,
    end: usize,
    w: &Walk,
    newest: bool,
    window: u64,
) -> Verdict {
    if w.end == End::Full {
        return Verdict::Full;
    }
    let p = w.at;
    let due = w.due();
    let block = BLOCK as u128;
    // "[P, P + torn_window) rounded up to a block", empty for an older
    // segment. u128: a recorded window may be any u64.
    let window_end: u128 = if newest {
        (p as u128 + u128::from(window)).div_ceil(block) * block
    } else {
        p as u128
    };
    // "Probe every block boundary b > P (at or after the first frame
    // offset) for a valid frame of this segment."
    let mut b = (p / BLOCK + 1) * BLOCK;
    b = b.max(h.frames_start());
    while b < end {
        if let Frame::Valid { kind: k, plen, .. } = decode_frame(&file[b..end], h.salt, MAX_PAYLOAD)
        {
            if b as u128 >= window_end {
                return Verdict::Corrupt(Why::FramesFollow(b));
            }
            let payload = &file[b + FRAME_HEADER..b + FRAME_HEADER + plen];
            if let Some(v) = frame_vouch(k, payload) {
                if v.durable >= due {
                    return Verdict::Corrupt(Why::Vouched(b));
                }
            }
        }
        b += BLOCK;
    }
    match w.end {
        End::Full => unreachable!(),
        End::LsnBreak => Verdict::Corrupt(Why::LsnBreak),
        End::BatchBreak => Verdict::Corrupt(Why::BatchBreak),
        End::Invalid if newest => Verdict::Torn,
        End::Invalid => Verdict::Corrupt(Why::Sealed),
        End::Zero => {
            let zeros_to_end = file[p..end].iter().all(|&x| x == 0);
            // "too few bytes left for a padding frame": the padding §4
            // would close a write ending at P with does not fit.
            if p + padding_len(p as u64) > end && zeros_to_end {
                return Verdict::Full;
            }
            if !newest {
                // "Zero mid-block" and "Zero on a block boundary, non-zero
                // bytes in the rest of its block": corrupt in an older
                // segment.
                let block_end = (p + BLOCK).min(end);
                if !p.is_multiple_of(BLOCK) || file[p..block_end].iter().any(|&x| x != 0) {
                    return Verdict::Corrupt(Why::Sealed);
                }
                return Verdict::Clean;
            }
            if !p.is_multiple_of(BLOCK) {
                return Verdict::Torn;
            }
            let wend = window_end.min(end as u128) as usize;
            if file[p..wend].iter().any(|&x| x != 0) {
                Verdict::Torn
            } else {
                Verdict::Clean
            }
        }
    }
}

/// The LSNs (each frame's last: a skip's last covered LSN) of every valid
/// frame at any 8-aligned offset of the frame area: "every LSN any valid
/// frame on disk carries" (§7), read literally.
pub fn every_valid_lsn(file: &[u8], h: &HeaderValue, end: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut off = h.frames_start();
    while off + FRAME_HEADER <= end {
        if let Frame::Valid {
            lsn, kind: k, plen, ..
        } = decode_frame(&file[off..end], h.salt, MAX_PAYLOAD)
        {
            let payload = &file[off + FRAME_HEADER..off + FRAME_HEADER + plen];
            let last = match (k, frame_word(k, payload)) {
                (kind::SKIP, Some(n)) if n >= 1 => lsn.saturating_add(n - 1),
                (kind::PADDING | kind::VOUCH, _) => 0,
                _ => lsn,
            };
            out.push(last);
        }
        off += FRAME_ALIGN;
    }
    out
}

// ---------------------------------------------------------------------------
// The whole directory: §1, §2.1, §5, §6, §7 for a strict open
// ---------------------------------------------------------------------------

/// A problem the model says a strict open must fail with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Corrupt(String),
    Gap(String),
    /// A manifest rule (§7): the document names no file.
    ManifestGap,
    ManifestLost,
}

/// What §1-§7 say a strict open of a directory does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgment {
    /// The document leaves the outcome open (the reason says where).
    Unspecified(&'static str),
    /// Open fails with one of these (a segment problem is the first one
    /// in file order; several manifest problems may apply at once and the
    /// document orders neither them nor them against segment problems).
    Fails(Vec<Problem>),
    /// Open succeeds.
    Opens(Opened),
}

/// A log the document says opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// Records, in LSN order: (lsn, stream, kind, payload).
    pub records: Vec<(u64, u16, u8, Vec<u8>)>,
    /// LSN ranges skip frames cover: (first, count).
    pub skips: Vec<(u64, u64)>,
    /// The last LSN on disk (a skip's last included); 0 if none.
    pub last_lsn: u64,
    /// The newest segment's torn tail: (file, where the data ends: `P`,
    /// or the start of the unfinished batch the frames end in).
    pub torn: Option<(String, usize)>,
    /// Segments read through their header's copy.
    pub from_copy: Vec<String>,
    /// The never-written newest file discarded, if any.
    pub discarded: Option<String>,
}

/// §2.1: the header of the segment file named with base `base`, and
/// whether it was read from the copy, if it raises no problem: usable,
/// in range, matching the name's node and base, of the manifest's log,
/// and declaring a size no smaller than the file's.
fn checked_header(
    base: u64,
    b: &[u8],
    node: u32,
    manifest: Option<ManifestFields>,
) -> Option<(HeaderValue, bool)> {
    let SegmentHead::Usable { h, from_copy } = segment_head(b) else {
        return None;
    };
    // §2.1's last paragraph: each failure is damage.
    let foreign = v2_layout(h.version) && manifest.is_some_and(|m| m.log_id != h.log_id);
    let bad = h.base_lsn == 0
        || h.base_lsn > MAX_LSN
        || h.node != node
        || h.base_lsn != base
        || foreign
        || b.len() as u64 > h.segment_bytes;
    (!bad).then_some((h, from_copy))
}

/// The model's reading of one node's directory (file name → bytes), for
/// a reader whose configured torn window is `window`.
pub fn judge(files: &BTreeMap<String, Vec<u8>>, node: u32, window: u64) -> Judgment {
    // §7: a manifest that is there but is no manifest, or names another
    // node: the document says nothing.
    let manifest = match files.get(&manifest_name(node)) {
        None => None,
        Some(b) => match decode_manifest(b) {
            Some(m) if m.node == node => Some(m),
            _ => {
                return Judgment::Unspecified(
                    "a manifest that does not decode or names another node",
                )
            }
        },
    };
    // §1: segment files of this node, in base order.
    let mut segs: Vec<(u64, &String, &Vec<u8>)> = files
        .iter()
        .filter_map(|(name, b)| match parse_segment_name(name) {
            Some((n, base)) if n == node => Some((base, name, b)),
            _ => None,
        })
        .collect();
    segs.sort();
    let mut out = Opened::default();
    // §2.1: "Only the newest file may be discarded" for a never-written
    // header.
    if let Some(&(_, name, b)) = segs.last() {
        if segment_head(b) == SegmentHead::NeverWritten {
            out.discarded = Some(name.clone());
            segs.pop();
        }
    }
    let mut prev_last: Option<u64> = None;
    let count = segs.len();
    for (i, &(base, name, b)) in segs.iter().enumerate() {
        let newest = i + 1 == count;
        let corrupt = || Judgment::Fails(vec![Problem::Corrupt(name.clone())]);
        let Some((h, from_copy)) = checked_header(base, b, node, manifest) else {
            return corrupt();
        };
        // A file shorter than its header says, or a declared size that
        // is no segment's (§2 says "a multiple of BLOCK, at least
        // MIN_SEGMENT" but lists no check): where its frame area ends
        // and what its end means is not in the document.
        if (b.len() as u64) < h.segment_bytes
            || !h.segment_bytes.is_multiple_of(BLOCK as u64)
            || h.segment_bytes < MIN_SEGMENT
        {
            return Judgment::Unspecified(
                "a segment file that is not the size its header declares",
            );
        }
        if from_copy {
            out.from_copy.push(name.clone());
        }
        // §6 last paragraph: continuity across segments.
        if let Some(p) = prev_last {
            if base != p.wrapping_add(1) {
                return Judgment::Fails(vec![Problem::Gap(name.clone())]);
            }
        }
        let end = b.len();
        let w = walk(b, &h, end);
        if let Some(why) = w.unspecified {
            return Judgment::Unspecified(why);
        }
        let tw = window.max(h.torn_window);
        // §6: the next segment's base, from a header with no §2.1
        // problem, is where an older segment's data must end; a clean end
        // below it is corrupt here.
        let next_base = segs
            .get(i + 1)
            .and_then(|&(nb, _, nbytes)| checked_header(nb, nbytes, node, manifest))
            .map(|(nh, _)| nh.base_lsn);
        match judge_end(b, &h, end, &w, newest, tw) {
            Verdict::Clean if next_base.is_some_and(|nb| nb > w.due()) => return corrupt(),
            Verdict::Full | Verdict::Clean => {}
            Verdict::Torn => out.torn = Some((name.clone(), w.data_end())),
            Verdict::Corrupt(_) => return corrupt(),
        }
        for (_, lsn, stream, k, payload) in &w.records {
            out.records.push((*lsn, *stream, *k, payload.clone()));
        }
        out.skips.extend_from_slice(&w.skips);
        prev_last = Some(w.due().wrapping_sub(1));
    }
    out.last_lsn = prev_last.unwrap_or(0);
    // A discarded never-written file: the document does not say whether
    // its name must continue the log (nor where a log with no segment
    // left resumes); only the crash it describes (named last + 1) is
    // judged.
    if let Some(name) = &out.discarded {
        let named = parse_segment_name(name).map_or(0, |(_, b)| b);
        let fits = match prev_last {
            Some(last) => named == last.wrapping_add(1),
            None => (1..=MAX_LSN).contains(&named),
        };
        if !fits {
            return Judgment::Unspecified(
                "a never-written newest file not named where the log goes on",
            );
        }
    }
    if let Some(m) = manifest {
        // §7's rules, against the segment files left once the
        // never-written newest one is discarded (the manifest names a
        // segment only after its header was durable, so a never-written
        // file is never the one it names).
        let mut problems = Vec::new();
        let newest_on_disk = segs.last().map_or(0, |s| s.0);
        if newest_on_disk < m.newest_base {
            problems.push(Problem::ManifestGap);
        }
        if let Some(&(first, _, _)) = segs.first() {
            if m.oldest_lsn == 0 {
                // Read literally, every log is missing LSN 0 (no LSN is
                // 0); no writer records it.
                return Judgment::Unspecified("a manifest whose oldest_lsn is 0");
            }
            if first > m.oldest_lsn {
                problems.push(Problem::ManifestGap);
            }
        }
        if out.last_lsn < m.durable_lsn {
            problems.push(Problem::ManifestLost);
        }
        if !problems.is_empty() {
            return Judgment::Fails(problems);
        }
    }
    Judgment::Opens(out)
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
    fn encoded_headers_validate() {
        for version in [1, 2, 3, 4] {
            let f = HeaderFields {
                version,
                node: 3,
                base_lsn: 7,
                segment_bytes: 1 << 16,
                salt: 9,
                torn_window: 11,
                log_id: 13,
                ..HeaderFields::default()
            };
            let b = encode_header(&f);
            assert_eq!(
                decode_header(&b),
                Header::Valid(HeaderValue {
                    version,
                    node: 3,
                    base_lsn: 7,
                    segment_bytes: 1 << 16,
                    salt: 9,
                    created_unix_ms: 0,
                    torn_window: 11,
                    log_id: if v2_layout(version) { 13 } else { 0 },
                    key_id: 0,
                    key_check: 0,
                })
            );
        }
    }

    #[test]
    fn header_steps_in_order() {
        let f = HeaderFields {
            version: 2,
            node: 1,
            base_lsn: 1,
            segment_bytes: 1 << 16,
            salt: 5,
            key_check: 1,
            ..HeaderFields::default()
        };
        let b = encode_header(&f);
        assert_eq!(decode_header(&b), Header::Reserved);
        let keyed = encode_header(&HeaderFields { key_id: 2, ..f });
        assert!(matches!(decode_header(&keyed), Header::Valid(_)));
        let mut b = encode_header(&HeaderFields { key_check: 0, ..f });
        b[70] ^= 1; // log id: covered in version 2
        assert_eq!(decode_header(&b), Header::Checksum);
        let mut v1 = encode_header(&HeaderFields {
            version: 1,
            key_check: 0,
            ..f
        });
        v1[70] ^= 1; // not covered in version 1
        assert!(matches!(decode_header(&v1), Header::Valid(_)));
        v1[8] = 5;
        assert_eq!(decode_header(&v1), Header::Version(5));
        // A version-1 block relabelled 4 is read with version 2's layout:
        // its CRC (over 64 bytes) no longer matches.
        v1[8] = 4;
        assert_eq!(decode_header(&v1), Header::Checksum);
        // Versions 3 and 4 are version 2's layout: the log id is covered,
        // and the key check is reserved without a key id.
        for version in [3, 4] {
            let b = encode_header(&HeaderFields {
                version,
                key_check: 0,
                ..f
            });
            assert!(matches!(decode_header(&b), Header::Valid(h) if h.version == version));
            let mut b = b.clone();
            b[70] ^= 1;
            assert_eq!(decode_header(&b), Header::Checksum);
            let b = encode_header(&HeaderFields { version, ..f });
            assert_eq!(decode_header(&b), Header::Reserved);
        }
        assert_eq!(decode_header(&v1[..100]), Header::Short);
        assert_eq!(decode_header(&[0u8; BLOCK]), Header::Blank);
    }

    #[test]
    fn header_copy_and_unusable_kinds() {
        let f = HeaderFields {
            version: 2,
            node: 1,
            base_lsn: 1,
            segment_bytes: MIN_SEGMENT,
            salt: 5,
            ..HeaderFields::default()
        };
        let mut file = encode_header_blocks(&f);
        file.resize(MIN_SEGMENT as usize, 0);
        assert!(matches!(
            segment_head(&file),
            SegmentHead::Usable {
                from_copy: false,
                ..
            }
        ));
        file[30] ^= 1;
        assert!(matches!(
            segment_head(&file),
            SegmentHead::Usable {
                from_copy: true,
                ..
            }
        ));
        file[..BLOCK].fill(0);
        assert!(matches!(
            segment_head(&file),
            SegmentHead::Usable {
                from_copy: true,
                ..
            }
        ));
        file[BLOCK + 30] ^= 1;
        assert_eq!(segment_head(&file), SegmentHead::Lost);
        let blank = vec![0u8; MIN_SEGMENT as usize];
        assert_eq!(segment_head(&blank), SegmentHead::NeverWritten);
        assert_eq!(segment_head(&blank[..BLOCK * 2]), SegmentHead::Misshapen);
        assert_eq!(segment_head(&blank[..10]), SegmentHead::Misshapen);
        // A version-1 header in block 1 is no copy.
        let mut v1copy = vec![0u8; MIN_SEGMENT as usize];
        v1copy[BLOCK..2 * BLOCK].copy_from_slice(&encode_header(&HeaderFields { version: 1, ..f }));
        assert_eq!(segment_head(&v1copy), SegmentHead::Lost);
        // A future version is never read through a copy.
        let mut future = encode_header_blocks(&f);
        future[8] = 5;
        future.resize(MIN_SEGMENT as usize, 0);
        assert_eq!(
            segment_head(&future),
            SegmentHead::Invalid(Header::Version(5))
        );
        // Version-3 and -4 headers have their copy, and are read through it.
        for version in [3, 4] {
            let mut b = encode_header_blocks(&HeaderFields { version, ..f });
            assert_eq!(b.len(), HEADER_BYTES);
            b.resize(MIN_SEGMENT as usize, 0);
            b[30] ^= 1;
            assert!(matches!(
                segment_head(&b),
                SegmentHead::Usable {
                    from_copy: true,
                    h,
                } if h.version == version && h.frames_start() == HEADER_BYTES
            ));
        }
    }

    #[test]
    fn frame_len_and_padding_match_document() {
        assert_eq!(frame_len(0), 24);
        assert_eq!(frame_len(1), 32);
        assert_eq!(frame_len(8), 32);
        assert_eq!(frame_len(9), 40);
        assert_eq!(VOUCH_LEN, frame_len(24));
        assert_eq!(VOUCH_LEN_V3, frame_len(16));
        assert_eq!(VOUCH_LEN_V2, frame_len(8));
        assert_eq!(vouch_len(FORMAT_VERSION), Some(VOUCH_LEN));
        assert_eq!(vouch_len(3), Some(VOUCH_LEN_V3));
        assert_eq!(vouch_len(2), Some(VOUCH_LEN_V2));
        assert_eq!(vouch_len(1), None);
        assert_eq!(padding_len(4096), 0);
        assert_eq!(padding_len(4096 + 8), 4088);
        assert_eq!(padding_len(4096 - 16), 16 + 4096);
        assert_eq!(padding_len(4096 - 24), 24);
    }

    #[test]
    fn vouch_and_skip_words() {
        let v = encode_vouch(3, 42);
        assert_eq!(v.len(), VOUCH_LEN_V2);
        match decode_frame(&v, 3, MAX_PAYLOAD) {
            Frame::Valid {
                kind: k, plen, lsn, ..
            } => {
                assert_eq!((k, plen, lsn), (kind::VOUCH, 8, 0));
                assert_eq!(frame_word(k, &v[24..32]), Some(42));
                assert_eq!(
                    frame_vouch(k, &v[24..32]),
                    Some(VouchSays {
                        durable: 42,
                        submitted_unix_ns: None,
                        nonce_salt: None,
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        let v = encode_vouch_v3(3, 42, 7_000);
        assert_eq!(v.len(), VOUCH_LEN_V3);
        match decode_frame(&v, 3, MAX_PAYLOAD) {
            Frame::Valid {
                kind: k, plen, lsn, ..
            } => {
                assert_eq!((k, plen, lsn), (kind::VOUCH, 16, 0));
                assert_eq!(frame_word(k, &v[24..40]), None);
                assert_eq!(
                    frame_vouch(k, &v[24..40]),
                    Some(VouchSays {
                        durable: 42,
                        submitted_unix_ns: Some(7_000),
                        nonce_salt: None,
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(frame_vouch(kind::VOUCH, &v[24..36]), None);
        let v = encode_vouch_v4(3, 42, 7_000, 0xfeed);
        assert_eq!(v.len(), VOUCH_LEN);
        match decode_frame(&v, 3, MAX_PAYLOAD) {
            Frame::Valid {
                kind: k, plen, lsn, ..
            } => {
                assert_eq!((k, plen, lsn), (kind::VOUCH, 24, 0));
                assert_eq!(frame_word(k, &v[24..48]), None);
                assert_eq!(
                    frame_vouch(k, &v[24..48]),
                    Some(VouchSays {
                        durable: 42,
                        submitted_unix_ns: Some(7_000),
                        nonce_salt: Some(0xfeed),
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        // Lengths between and past the three vouch for nothing.
        for n in [0, 4, 12, 20, 32] {
            assert_eq!(frame_vouch(kind::VOUCH, &[7u8; 32][..n]), None, "{n}");
        }
        assert_eq!(frame_vouch(kind::SKIP, &v[24..32]), None);
        let s = encode_skip(3, 10, 5);
        assert!(matches!(
            decode_frame(&s, 3, MAX_PAYLOAD),
            Frame::Valid {
                kind: 8,
                lsn: 10,
                ..
            }
        ));
        assert_eq!(frame_word(kind::SKIP, &s[24..32]), Some(5));
        assert_eq!(frame_word(kind::DATA, &s[24..32]), None);
        assert_eq!(frame_word(kind::VOUCH, &s[24..31]), None);
        assert!(matches!(decode_frame(&s, 4, MAX_PAYLOAD), Frame::Checksum));
    }

    #[test]
    fn nonce_salts_follow_the_last_vouch() {
        assert_eq!(
            nonce(0x0102, 0x0304, 0x0506),
            [2, 1, 0, 0, 0, 0, 0, 0, 4, 3, 0, 0, 0, 0, 0, 0, 6, 5, 0, 0, 0, 0, 0, 0]
        );
        let salt = 77;
        let h = HeaderValue {
            version: 4,
            node: 1,
            base_lsn: 1,
            segment_bytes: MIN_SEGMENT,
            salt,
            created_unix_ms: 0,
            torn_window: 0,
            log_id: 5,
            key_id: 1,
            key_check: 0,
        };
        // Record 1 before any vouch, then a version-4 vouch and record
        // 2, a version-3 vouch and record 3, a version-4 vouch, a vouch
        // of no vouch's length and record 4.
        let frames = [
            (encode_frame(salt, 1, 0, kind::DATA, b"one"), true),
            (encode_vouch_v4(salt, 1, 9, 1000), false),
            (encode_frame(salt, 2, 0, kind::DATA, b"two"), true),
            (encode_vouch_v3(salt, 2, 9), false),
            (encode_frame(salt, 3, 0, kind::DATA, b"three"), true),
            (encode_vouch_v4(salt, 3, 9, 2000), false),
            (encode_frame(salt, 0, 0, kind::VOUCH, &[1; 12]), false),
            (encode_frame(salt, 4, 0, kind::DATA, b"four"), true),
        ];
        let mut file = vec![0u8; HEADER_BYTES];
        let mut at = Vec::new();
        for (f, record) in frames {
            if record {
                at.push(file.len());
            }
            file.extend(f);
        }
        let end = file.len();
        let got: Vec<_> = at
            .iter()
            .map(|&a| nonce_salt_at(&file, &h, end, a))
            .collect();
        assert_eq!(
            got,
            [
                Some(NonceSalt::Salt(salt)),
                Some(NonceSalt::Salt(1000)),
                Some(NonceSalt::Salt(salt)),
                Some(NonceSalt::Unspecified(
                    "a vouch of no vouch's length after one with a nonce salt"
                )),
            ]
        );
        // Not a frame offset of the scan.
        assert_eq!(nonce_salt_at(&file, &h, end, at[1] + 8), None);
        assert_eq!(nonce_salt_at(&file, &h, end, end), None);
    }

    #[test]
    fn names_and_manifest() {
        assert_eq!(
            parse_segment_name("00001-00000000000000000001.wal"),
            Some((1, 1))
        );
        assert_eq!(parse_segment_name("00001-1.wal"), None);
        assert_eq!(parse_segment_name("00001-99999999999999999999.wal"), None);
        assert_eq!(
            parse_segment_name("00001-00000000000000000001.wal.corrupt"),
            None
        );
        let m = ManifestFields {
            node: 1,
            log_id: 7,
            newest_base: 3,
            durable_lsn: 2,
            handed_out: 4,
            oldest_lsn: 1,
            ..ManifestFields::default()
        };
        let b = encode_manifest(&m);
        assert_eq!(decode_manifest(&b), Some(m));
        let mut bad = b.clone();
        bad[40] ^= 1;
        assert_eq!(decode_manifest(&bad), None);
    }
}
