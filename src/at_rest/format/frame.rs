//! Frames: kinds, encoding, padding and decoding.

use super::*;

// Frame header field offsets.
const F_CRC: usize = 0;
const F_LEN: usize = 4;
const F_LSN: usize = 8;
const F_STREAM: usize = 16;
const F_KIND: usize = 18;
const F_FLAGS: usize = 19;
const F_RESERVED: usize = 20;

const _: () = assert!(
    F_CRC == 0
        && F_LEN == F_CRC + 4
        && F_LSN == F_LEN + 4
        && F_STREAM == F_LSN + 8
        && F_KIND == F_STREAM + 2
        && F_FLAGS == F_KIND + 1
        && F_RESERVED == F_FLAGS + 1
        && F_RESERVED + 4 == FRAME_HEADER,
    "the header fields tile the frame header in the order of docs/format.md §3"
);
const _: () = assert!(
    F_LSN == 8 && F_FLAGS + 1 == 20,
    "RecordHead::bound_bytes is exactly the header bytes [8, 20)"
);

/// Frame type, stored in one byte of the frame header.
///
/// [`Kind::Padding`] and [`Kind::Vouch`] consume no LSN, [`Kind::Skip`]
/// consumes the LSNs it names, every other kind one.
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
    /// Version 2: the first frame of every write. Its 8-byte payload is the
    /// highest LSN the writer knew to be durable when it submitted the
    /// write, so a later write vouches for the ones before it: damage
    /// behind a vouch that covers it is corruption, never a torn tail.
    /// Carries LSN 0, like padding.
    Vouch = 7,
    /// Version 2: LSNs that will never hold a record (a point-in-time
    /// recovery resumed above LSNs it could not keep, rather than hand them
    /// out again). `lsn` is the first of them; the 8-byte payload is how
    /// many.
    Skip = 8,
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
            7 => Kind::Vouch,
            8 => Kind::Skip,
            _ => return None,
        })
    }

    /// The kind's lowercase name, as `ringwal dump` prints it: `data`,
    /// `padding`, `tx_begin`, `tx_commit`, `tx_abort`, `checkpoint`,
    /// `vouch`, `skip`.
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
            Kind::Vouch => "vouch",
            Kind::Skip => "skip",
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

/// A record's place in an atomic batch, stored in the frame's `flags` byte.
///
/// The records of a batch are consecutive LSNs in one segment; every one
/// of them is marked [`Batching::Member`] but the last, which is
/// [`Batching::Last`]. Readers and recovery yield a batch only once its
/// last record is found, so a crash keeps all of a batch or none of it.
/// Cost: a match on one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// Not part of a batch: a record that stands alone (flags 0).
    Alone,
    /// A batch record that more records of the same batch follow.
    Member,
    /// The last record of a batch (a batch of one is just this).
    Last,
}

/// Frame flag: the record belongs to an atomic batch.
pub const FLAG_BATCH: u8 = 0x01;
/// Frame flag: the record is the last of its batch (only with
/// [`FLAG_BATCH`]).
pub const FLAG_BATCH_END: u8 = 0x02;

impl Batching {
    /// The flags byte a record frame with this place carries.
    pub const fn flags(self) -> u8 {
        match self {
            Batching::Alone => 0,
            Batching::Member => FLAG_BATCH,
            Batching::Last => FLAG_BATCH | FLAG_BATCH_END,
        }
    }

    /// The place the batch bits of a flags byte name (the other bits are
    /// [`Codec`]'s); `None` for an end without a batch, which makes the
    /// frame invalid.
    pub const fn from_flags(flags: u8) -> Option<Batching> {
        match flags & BATCH_BITS {
            0 => Some(Batching::Alone),
            FLAG_BATCH => Some(Batching::Member),
            f if f == FLAG_BATCH | FLAG_BATCH_END => Some(Batching::Last),
            _ => None,
        }
    }
}

/// The bits of a frame's flags byte that hold its [`Batching`].
const BATCH_BITS: u8 = FLAG_BATCH | FLAG_BATCH_END;

/// Frame flag: the data record's payload is LZ4-compressed ([`Codec::Lz4`]).
pub const FLAG_LZ4: u8 = 0x04;
/// Frame flag: the data record's payload is zstd-compressed ([`Codec::Zstd`]).
pub const FLAG_ZSTD: u8 = 0x08;
/// The bits of a frame's flags byte that hold its [`Codec`].
const CODEC_BITS: u8 = FLAG_LZ4 | FLAG_ZSTD;

const _: () = assert!(
    BATCH_BITS & CODEC_BITS == 0,
    "batch and codec flags are separate bits of the flags byte"
);

/// How a data record's payload is compressed, stored in bits 2 and 3 of
/// the frame's flags byte (docs/format.md §3.4). A compressed payload is
/// the original length as a `u32` followed by the codec's block. Only
/// [`Kind::Data`] frames may be compressed.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Codec {
    /// Stored as given (flag bits 0).
    #[default]
    None,
    /// An LZ4 block (flag bit `0x04`).
    Lz4,
    /// A zstd frame (flag bit `0x08`). Writing and reading it needs the
    /// `zstd` feature.
    Zstd,
}

impl Codec {
    /// The flag bits a frame with this codec carries.
    pub const fn flags(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => FLAG_LZ4,
            Codec::Zstd => FLAG_ZSTD,
        }
    }

    /// The codec the codec bits of a flags byte name; `None` when both
    /// bits are set, which makes the frame invalid. Cost: a match.
    pub const fn from_flags(flags: u8) -> Option<Codec> {
        match flags & CODEC_BITS {
            0 => Some(Codec::None),
            FLAG_LZ4 => Some(Codec::Lz4),
            FLAG_ZSTD => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Whether `flags` is a flags byte a frame of `kind` may carry (section
/// 3.3, step 7): no unknown bit, no batch end without a batch, batch bits
/// only on records and codec bits only on data records. Cost: a match.
pub const fn flags_allowed(kind: Kind, flags: u8) -> bool {
    if flags & !(BATCH_BITS | CODEC_BITS) != 0 {
        return false;
    }
    let batch_ok = match Batching::from_flags(flags) {
        Some(Batching::Alone) => true,
        Some(_) => kind.is_record(),
        None => false,
    };
    let codec_ok = match Codec::from_flags(flags) {
        Some(Codec::None) => true,
        Some(_) => matches!(kind, Kind::Data),
        None => false,
    };
    batch_ok && codec_ok
}

impl Kind {
    /// Whether a frame of this kind is a record: it consumes one LSN and
    /// can be part of a batch (padding, vouch and skip frames are not).
    pub const fn is_record(self) -> bool {
        !matches!(self, Kind::Padding | Kind::Vouch | Kind::Skip)
    }
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
fn seal_frame(
    out: &mut [u8],
    salt: u64,
    lsn: u64,
    stream: u16,
    kind: Kind,
    flags: u8,
    payload_len: usize,
) {
    // MAX_PAYLOAD < u32::MAX, so the cast below is exact.
    put(out, F_LEN, &(payload_len as u32).to_le_bytes());
    put(out, F_LSN, &lsn.to_le_bytes());
    put(out, F_STREAM, &stream.to_le_bytes());
    out[F_KIND] = kind as u8;
    out[F_FLAGS] = flags;
    put(out, F_RESERVED, &0u32.to_le_bytes());
    let crc = frame_crc(salt, out, payload_len);
    put(out, F_CRC, &crc.to_le_bytes());
}

/// Encodes one frame at the start of `out` and returns its length, which is
/// exactly `frame_len(payload.len())`. The alignment tail is written as zeros
/// and nothing past the frame is touched. Frame flags are written as 0 (a
/// record standing alone); [`encode_record`] marks batch records.
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
    encode_record(out, salt, lsn, stream, kind, Batching::Alone, payload)
}

/// [`encode_frame`] for a record with its place in a batch.
///
/// Cost: as [`encode_frame`]. Panics as it does, and if a frame that is
/// not a record ([`Kind::is_record`]) is given a place in a batch.
pub fn encode_record(
    out: &mut [u8],
    salt: u64,
    lsn: u64,
    stream: u16,
    kind: Kind,
    batching: Batching,
    payload: &[u8],
) -> usize {
    let head = RecordHead {
        lsn,
        stream,
        kind,
        flags: batching.flags(),
    };
    encode_record_with(out, salt, head, payload.len(), |p| {
        p.copy_from_slice(payload)
    })
}

/// What a record frame's header says besides its length: the fields a
/// payload transform (compression, encryption) may bind to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHead {
    /// The record's LSN.
    pub lsn: u64,
    /// Its stream.
    pub stream: u16,
    /// Its kind.
    pub kind: Kind,
    /// Its flags byte: [`Batching::flags`] | [`Codec::flags`].
    pub flags: u8,
}

impl RecordHead {
    /// The header bytes `[8, 20)` this head is stored as: LSN, stream,
    /// kind and flags, which an encrypted payload authenticates. Cost: a
    /// 12-byte copy.
    pub fn bound_bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&self.lsn.to_le_bytes());
        b[8..10].copy_from_slice(&self.stream.to_le_bytes());
        b[10] = self.kind as u8;
        b[11] = self.flags;
        b
    }
}

/// Encodes one record frame of `len` payload bytes at the start of `out`,
/// letting `fill` write the payload in place (it is handed exactly `len`
/// bytes, zeroed), and returns the frame's length. The checksum covers
/// what `fill` wrote, so a transform such as encryption runs without a
/// second buffer.
///
/// Cost: what `fill` costs, plus one CRC pass over the payload; no
/// allocation. Panics if `out` is shorter than the frame, `len` exceeds
/// [`MAX_PAYLOAD`], or `head.flags` is not allowed for `head.kind`
/// ([`flags_allowed`]).
pub fn encode_record_with(
    out: &mut [u8],
    salt: u64,
    head: RecordHead,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) -> usize {
    assert!(
        flags_allowed(head.kind, head.flags),
        "flags {:#04x} not allowed on a {} frame",
        head.flags,
        head.kind.name()
    );
    assert!(len <= MAX_PAYLOAD, "payload exceeds MAX_PAYLOAD");
    let total = frame_len(len);
    assert!(out.len() >= total, "frame buffer too short");
    let end = FRAME_HEADER + len;
    fill(&mut out[FRAME_HEADER..end]);
    out[end..total].fill(0);
    seal_frame(out, salt, head.lsn, head.stream, head.kind, head.flags, len);
    debug_assert!(
        matches!(
            decode_frame(&out[..total], salt, MAX_PAYLOAD),
            Decoded::Frame(f) if f.len == total && f.head() == head
        ),
        "an encoded record decodes as itself"
    );
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
    let pad = if gap < FRAME_HEADER { gap + BLOCK } else { gap };
    debug_assert!(
        (FRAME_HEADER..BLOCK + FRAME_HEADER).contains(&pad)
            && (end + pad as u64).is_multiple_of(BLOCK as u64),
        "padding is one frame that closes the write at a block boundary"
    );
    pad
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
    seal_frame(out, salt, 0, 0, Kind::Padding, 0, total - FRAME_HEADER);
    debug_assert!(
        matches!(
            decode_frame(&out[..total], salt, MAX_PAYLOAD),
            Decoded::Frame(f) if f.len == total && f.kind == Kind::Padding && f.lsn == 0
        ),
        "a padding frame decodes as one frame of exactly its length"
    );
}

/// Bytes of a vouch frame in a version-4 segment, what writers make: a
/// frame header and its 24-byte payload (durable LSN, submission time,
/// nonce salt).
pub const VOUCH_LEN: usize = frame_len(24);

/// Bytes of a vouch frame in a version-3 segment: a frame header and its
/// 16-byte payload (durable LSN, submission time).
pub const VOUCH_LEN_V3: usize = frame_len(16);

/// Bytes of a vouch frame in a version-2 segment: a frame header and its
/// 8-byte payload (durable LSN).
pub const VOUCH_LEN_V2: usize = frame_len(8);

const _: () = assert!(
    VOUCH_LEN == FRAME_HEADER + 24
        && VOUCH_LEN_V3 == FRAME_HEADER + 16
        && VOUCH_LEN_V2 == FRAME_HEADER + 8,
    "a vouch's payload needs no alignment tail"
);
const _: () = assert!(
    VOUCH_LEN + FRAME_HEADER <= BLOCK,
    "a clean close fits its vouch and padding in one block"
);
const _: () = assert!(
    BLOCK + FRAME_HEADER - FRAME_ALIGN - FRAME_HEADER <= MAX_PAYLOAD,
    "the longest padding (gap + BLOCK) is a frame the format accepts"
);

/// Bytes of the vouch frame a writer opens each write with in a segment
/// of `version`: [`VOUCH_LEN`] from version 4, [`VOUCH_LEN_V3`] in
/// version 3, [`VOUCH_LEN_V2`] before (version 1 has no vouches; a reader
/// takes any vouch by its length).
pub const fn vouch_len(version: u32) -> usize {
    match version {
        0..=2 => VOUCH_LEN_V2,
        3 => VOUCH_LEN_V3,
        _ => VOUCH_LEN,
    }
}

/// What a vouch frame says (docs/format.md §3.2): the durable LSN when
/// the write it opens was submitted and, from version 3, when that was
/// and, from version 4, the nonce salt of the payloads the write seals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vouch {
    /// The highest LSN the writer knew to be on stable storage when it
    /// submitted the write.
    pub durable: u64,
    /// The wall-clock time the write was submitted, in nanoseconds since
    /// the Unix epoch (`CLOCK_REALTIME`): informational, never used to
    /// decide recovery, and not monotonic if the clock steps back. `None`
    /// for an 8-byte (version-2) vouch.
    pub submitted_unix_ns: Option<u64>,
    /// The nonce salt of every payload the write seals (docs/format.md
    /// §3.5): drawn by each writer at open, so that a writer resuming a
    /// segment an earlier one wrote never repeats a nonce. `None` for a
    /// vouch of version 2 or 3 (sealed payloads use the header's salt);
    /// only with a time.
    pub nonce_salt: Option<u64>,
}

impl Vouch {
    /// Bytes of its frame: [`VOUCH_LEN`] with a nonce salt,
    /// [`VOUCH_LEN_V3`] with only a time, [`VOUCH_LEN_V2`] with neither.
    pub const fn frame_len(&self) -> usize {
        match (self.submitted_unix_ns, self.nonce_salt) {
            (Some(_), Some(_)) => VOUCH_LEN,
            (Some(_), None) => VOUCH_LEN_V3,
            (None, _) => VOUCH_LEN_V2,
        }
    }
}

/// Writes a vouch frame into `out[..vouch.frame_len()]`: kind
/// [`Kind::Vouch`], LSN 0, payload the durable LSN, followed (with a time,
/// from version 3) by the submission time and (with a nonce salt, from
/// version 4) by the nonce salt. Returns the frame's length.
///
/// Cost: a CRC over at most 48 bytes; no allocation. Panics if `out` is
/// shorter than the frame, or given a nonce salt without a time.
pub fn encode_vouch(out: &mut [u8], salt: u64, vouch: Vouch) -> usize {
    assert!(
        vouch.nonce_salt.is_none() || vouch.submitted_unix_ns.is_some(),
        "a vouch with a nonce salt carries a time (version 4)"
    );
    let mut payload = [0u8; 24];
    payload[..8].copy_from_slice(&vouch.durable.to_le_bytes());
    let mut used = 8;
    for word in [vouch.submitted_unix_ns, vouch.nonce_salt]
        .into_iter()
        .flatten()
    {
        payload[used..used + 8].copy_from_slice(&word.to_le_bytes());
        used += 8;
    }
    let n = encode_frame(out, salt, 0, 0, Kind::Vouch, &payload[..used]);
    debug_assert_eq!(n, vouch.frame_len(), "a vouch frame is its frame_len");
    n
}

/// Writes a skip frame into `out[..frame_len(8)]`: kind [`Kind::Skip`],
/// LSN `first`, payload `count` (the LSNs `first..first + count` hold no
/// record, ever).
///
/// Cost: a CRC over 36 bytes; no allocation. Panics if `out` is shorter
/// than `frame_len(8)` or `count` is 0.
pub fn encode_skip(out: &mut [u8], salt: u64, first: u64, count: u64) {
    assert!(count > 0, "a skip of no LSNs");
    assert!(
        (1..=MAX_LSN).contains(&first) && count - 1 <= MAX_LSN - first,
        "a skip names LSNs in 1..=MAX_LSN (docs/format.md §3.2)"
    );
    encode_frame(out, salt, first, 0, Kind::Skip, &count.to_le_bytes());
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
    /// Per-frame flags byte as stored: a record's place in a batch
    /// ([`Batching`]) and a data record's [`Codec`]; 0 on every other
    /// frame and in version 1.
    pub flags: u8,
    /// The payload bytes (alignment tail excluded).
    pub payload: &'a [u8],
    /// Total bytes the frame occupies, alignment included: the distance to
    /// the next frame.
    pub len: usize,
}

impl FrameRef<'_> {
    /// The record's place in a batch. Decoding checked the flags byte, so
    /// every valid frame has one (`Alone` for non-records).
    pub fn batching(&self) -> Batching {
        Batching::from_flags(self.flags).unwrap_or(Batching::Alone)
    }

    /// The record's payload codec. Decoding checked the flags byte, so
    /// every valid frame has one (`None` for all but compressed data).
    pub fn codec(&self) -> Codec {
        Codec::from_flags(self.flags).unwrap_or(Codec::None)
    }

    /// The header fields a payload transform binds to.
    pub fn head(&self) -> RecordHead {
        RecordHead {
            lsn: self.lsn,
            stream: self.stream,
            kind: self.kind,
            flags: self.flags,
        }
    }

    /// What a [`Kind::Vouch`] frame says, read by its payload's length
    /// alone (whatever the segment's version): 8 bytes a durable LSN, 16
    /// bytes a durable LSN and a submission time, 24 bytes those and a
    /// nonce salt; `None` for another kind or length (such a vouch
    /// vouches for nothing).
    pub fn vouch(&self) -> Option<Vouch> {
        if self.kind != Kind::Vouch {
            return None;
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.payload[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let len = self.payload.len();
        matches!(len, 8 | 16 | 24).then(|| Vouch {
            durable: word(0),
            submitted_unix_ns: (len >= 16).then(|| word(8)),
            nonce_salt: (len == 24).then(|| word(16)),
        })
    }

    /// The 8-byte payload of a [`Kind::Vouch`] or [`Kind::Skip`] frame (the
    /// durable LSN, or the number of LSNs skipped); `None` for other kinds
    /// or a payload of another length.
    pub fn word(&self) -> Option<u64> {
        if !matches!(self.kind, Kind::Vouch | Kind::Skip) {
            return None;
        }
        Some(u64::from_le_bytes(self.payload.try_into().ok()?))
    }
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
    /// The flags byte is not one this version defines for the frame's
    /// kind: unknown bits, a batch end without a batch, both codec bits,
    /// batch flags on a frame that is not a record, or codec flags on one
    /// that is not data.
    #[error("frame flags {0:#04x} not valid for its kind")]
    Flags(u8),
    /// The checksum does not match (damaged, torn, or written under another salt).
    #[error("frame checksum mismatch")]
    Checksum,
}

/// Decode the frame at the start of `buf` (buf = the rest of the segment from this offset). Never panics on any input, never reads past buf.
///
/// Checks run cheapest first so garbage is rejected before any CRC work:
/// Truncated, Zero, TooLong, PastEnd, Kind, Reserved, Flags, Checksum. The payload
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
    let flags = h[F_FLAGS];
    if !flags_allowed(kind, flags) {
        return Decoded::Invalid(InvalidFrame::Flags(flags));
    }
    if get_u32(h, F_CRC) != frame_crc(salt, buf, plen) {
        return Decoded::Invalid(InvalidFrame::Checksum);
    }
    debug_assert!(
        total.is_multiple_of(FRAME_ALIGN) && total <= buf.len(),
        "a decoded frame ends aligned, inside the buffer"
    );
    Decoded::Frame(FrameRef {
        lsn: get_u64(h, F_LSN),
        stream: u16::from_le_bytes([h[F_STREAM], h[F_STREAM + 1]]),
        kind,
        flags,
        payload: &buf[FRAME_HEADER..FRAME_HEADER + plen],
        len: total,
    })
}
