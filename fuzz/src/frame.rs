//! Target `frame_decoder`: `ringwal::format::decode_frame` on arbitrary
//! bytes, salt and payload limit.
//!
//! Input layout (every field optional; missing bytes read as 0):
//!
//! | bytes  | field                                                      |
//! |--------|------------------------------------------------------------|
//! | 0      | limit selector (see [`limit`])                             |
//! | 1..9   | salt, u64 LE                                               |
//! | 9..13  | limit value, u32 LE                                        |
//! | 13..   | the buffer handed to the decoder (the rest of a segment)   |
//!
//! Oracles, for every input:
//! 1. the outcome equals the independent model of §3.3 ([`crate::spec`]),
//!    variant and reason included;
//! 2. an accepted frame is exactly what a writer writes for its fields:
//!    re-encoding it with the same salt, LSN, stream, kind, place in an
//!    atomic batch (`encode_record`; `encode_frame` for flags 0) and
//!    payload reproduces the input's first `24 + len` bytes (everything
//!    but the alignment bytes), and its flags byte is one §3 allows for
//!    its kind (0, or on a record `FLAG_BATCH` with or without
//!    `FLAG_BATCH_END`), named by `FrameRef::batching()`. So no frame is
//!    ever accepted whose CRC differs from the one a writer would compute;
//! 3. an accepted frame borrows its payload from the buffer, occupies
//!    `frame_len(len)` bytes, decodes identically from a buffer cut to
//!    exactly that length, is `PastEnd` one byte shorter (`Truncated`
//!    if that leaves less than a header), is accepted
//!    under a limit of exactly its length and `TooLong` under one less;
//! 4. `FrameRef::word()` is the document's `u64` payload of a vouch
//!    (durable LSN) or skip (count) frame and `None` for every other
//!    kind or payload length; `FrameRef::vouch()` is what §3.2 says a
//!    vouch of 8, 16 or 24 bytes carries (durable LSN, then the time,
//!    then the nonce salt) and `None` for any other length or kind; a
//!    vouch or skip as writers make it (a vouch's payload of 8, 16 or 24
//!    bytes, an 8-byte skip payload, stream 0, LSN 0 for a vouch, a count
//!    of at least 1 for a skip) is exactly what `encode_vouch` /
//!    `encode_skip` write; the vouch sizes (`VOUCH_LEN`, `VOUCH_LEN_V3`,
//!    `VOUCH_LEN_V2`) are the document's;
//! 5. a scan that steps frame to frame from offset 0, as recovery does,
//!    always advances (at least one header, 8-aligned) and so ends.

use ringwal::format::{self, Batching, Codec, Decoded, InvalidFrame, Kind};

use crate::cursor::Cursor;
use crate::spec;

/// Bytes before the decoded buffer in a `frame_decoder` input.
pub const PREFIX: usize = 13;

/// The payload limit an input selects: the format limit, "unlimited"
/// (`usize::MAX`, which must not lift the format limit), the raw u32, a
/// small value (so `TooLong` is reachable with short inputs), or just
/// above the format limit.
pub fn limit(selector: u8, value: u32) -> usize {
    match selector % 5 {
        0 => format::MAX_PAYLOAD,
        1 => usize::MAX,
        2 => value as usize,
        3 => (value & 0xffff) as usize,
        _ => format::MAX_PAYLOAD + (value & 0xff) as usize,
    }
}

/// Build a `frame_decoder` input (used by the seeds).
pub fn input(selector: u8, salt: u64, limit_value: u32, buf: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(PREFIX + buf.len());
    v.push(selector);
    v.extend_from_slice(&salt.to_le_bytes());
    v.extend_from_slice(&limit_value.to_le_bytes());
    v.extend_from_slice(buf);
    v
}

/// Express the engine's outcome in the model's terms.
pub fn as_spec(d: &Decoded<'_>) -> spec::Frame {
    match *d {
        Decoded::Frame(f) => spec::Frame::Valid {
            lsn: f.lsn,
            stream: f.stream,
            kind: f.kind as u8,
            flags: f.flags,
            plen: f.payload.len(),
            total: f.len,
        },
        Decoded::Zero => spec::Frame::Zero,
        Decoded::Invalid(InvalidFrame::Truncated) => spec::Frame::Truncated,
        Decoded::Invalid(InvalidFrame::TooLong(n)) => spec::Frame::TooLong(n),
        Decoded::Invalid(InvalidFrame::PastEnd) => spec::Frame::PastEnd,
        Decoded::Invalid(InvalidFrame::Kind(k)) => spec::Frame::Kind(k),
        Decoded::Invalid(InvalidFrame::Reserved) => spec::Frame::Reserved,
        Decoded::Invalid(InvalidFrame::Flags(f)) => spec::Frame::Flags(f),
        Decoded::Invalid(InvalidFrame::Checksum) => spec::Frame::Checksum,
    }
}

/// Run every oracle on one input. Panics (which libFuzzer reports) on the
/// first violation.
pub fn check(data: &[u8]) {
    let mut c = Cursor::new(data);
    let selector = c.u8();
    let salt = c.u64();
    let limit_value = c.u32();
    let buf = c.rest();
    let limit = limit(selector, limit_value);

    let got = format::decode_frame(buf, salt, limit);
    let want = spec::decode_frame(buf, salt, limit);
    assert_eq!(
        as_spec(&got),
        want,
        "decode_frame disagrees with docs/format.md §3.3 (salt {salt:#x}, limit {limit})"
    );
    if let Decoded::Frame(f) = got {
        check_accepted(buf, salt, limit, &f);
    }
    check_scan_terminates(buf, salt, limit);
}

fn check_accepted(buf: &[u8], salt: u64, limit: usize, f: &format::FrameRef<'_>) {
    let plen = f.payload.len();
    let covered = format::FRAME_HEADER + plen;
    assert_eq!(f.len, format::frame_len(plen), "frame length");
    assert!(f.len <= buf.len(), "frame runs past the buffer");
    assert!(f.len >= format::FRAME_HEADER && f.len.is_multiple_of(format::FRAME_ALIGN));
    assert!(
        std::ptr::eq(f.payload.as_ptr(), buf[format::FRAME_HEADER..].as_ptr()),
        "payload is not borrowed from offset 24 of the buffer"
    );
    assert!(
        plen <= limit.min(format::MAX_PAYLOAD),
        "payload over the limit"
    );

    // The flags byte: one §3 allows for the kind, and the place in a
    // batch the engine names for it.
    assert!(
        spec::flags_allowed(f.kind as u8, f.flags),
        "accepted flags {:#04x} on a {:?} frame",
        f.flags,
        f.kind
    );
    let place = match f.flags & 0x03 {
        0 => Batching::Alone,
        spec::FLAG_BATCH => Batching::Member,
        _ => Batching::Last,
    };
    assert_eq!(
        f.batching(),
        place,
        "FrameRef::batching() of flags {:#04x}",
        f.flags
    );
    assert_eq!(place.flags(), f.flags & 0x03, "Batching::flags()");
    assert_eq!(Batching::from_flags(f.flags), Some(place));
    // The codec bits (§3, §3.4).
    let codec = match f.flags & 0x0C {
        0 => Codec::None,
        spec::FLAG_LZ4 => Codec::Lz4,
        _ => Codec::Zstd,
    };
    assert_eq!(
        f.codec(),
        codec,
        "FrameRef::codec() of flags {:#04x}",
        f.flags
    );
    assert_eq!(codec.flags() | place.flags(), f.flags, "Codec::flags()");

    // The never-accept-a-bad-CRC oracle: what would we have written?
    let mut out = vec![0xA5u8; f.len];
    let n = if f.flags == 0 {
        format::encode_frame(&mut out, salt, f.lsn, f.stream, f.kind, f.payload)
    } else if codec == Codec::None {
        format::encode_record(&mut out, salt, f.lsn, f.stream, f.kind, place, f.payload)
    } else {
        format::encode_record_with(&mut out, salt, f.head(), f.payload.len(), |p| {
            p.copy_from_slice(f.payload)
        })
    };
    assert_eq!(n, f.len, "encode_frame length");
    assert!(
        out[..covered] == buf[..covered],
        "accepted frame differs from its re-encoding\n input: {:02x?}\n ours:  {:02x?}",
        &buf[..covered],
        &out[..covered]
    );
    // The alignment bytes encode_frame writes are zero.
    assert!(out[covered..f.len].iter().all(|&b| b == 0));
    // Re-decoding what we wrote gives the same frame.
    match format::decode_frame(&out, salt, limit) {
        Decoded::Frame(g) => {
            assert_eq!(
                (g.lsn, g.stream, g.kind, g.payload, g.len, g.flags),
                (f.lsn, f.stream, f.kind, f.payload, f.len, f.flags)
            );
        }
        other => panic!("re-encoded frame does not decode: {other:?}"),
    }

    check_word(buf, salt, f);

    // Only the frame's own bytes matter.
    assert_eq!(
        format::decode_frame(&buf[..f.len], salt, limit),
        Decoded::Frame(*f),
        "decoding depends on bytes past the frame"
    );
    let short = &buf[..f.len - 1];
    let want_short = if short.len() < format::FRAME_HEADER {
        Decoded::Invalid(InvalidFrame::Truncated)
    } else {
        Decoded::Invalid(InvalidFrame::PastEnd)
    };
    assert_eq!(
        format::decode_frame(short, salt, limit),
        want_short,
        "a frame one byte short of its length"
    );
    // The limit is inclusive.
    assert_eq!(format::decode_frame(buf, salt, plen), Decoded::Frame(*f));
    if plen > 0 {
        assert_eq!(
            format::decode_frame(buf, salt, plen - 1),
            Decoded::Invalid(InvalidFrame::TooLong(plen as u32))
        );
    }
}

/// Oracle 4: the payload word of vouch and skip frames, and what a vouch
/// says.
fn check_word(buf: &[u8], salt: u64, f: &format::FrameRef<'_>) {
    let want = spec::frame_word(f.kind as u8, f.payload);
    assert_eq!(f.word(), want, "FrameRef::word() of a {:?} frame", f.kind);
    let vouch = spec::frame_vouch(f.kind as u8, f.payload);
    assert_eq!(
        f.vouch().map(|v| spec::VouchSays {
            durable: v.durable,
            submitted_unix_ns: v.submitted_unix_ns,
            nonce_salt: v.nonce_salt,
        }),
        vouch,
        "FrameRef::vouch() of a {:?} frame",
        f.kind
    );
    assert_eq!(
        (
            format::VOUCH_LEN,
            format::VOUCH_LEN_V3,
            format::VOUCH_LEN_V2
        ),
        (spec::VOUCH_LEN, spec::VOUCH_LEN_V3, spec::VOUCH_LEN_V2)
    );
    let mut out = vec![0xA5u8; format::VOUCH_LEN + 8];
    let n = match (f.kind, want, vouch) {
        (Kind::Vouch, _, Some(said)) if f.lsn == 0 && f.stream == 0 => {
            let v = format::Vouch {
                durable: said.durable,
                submitted_unix_ns: said.submitted_unix_ns,
                nonce_salt: said.nonce_salt,
            };
            assert_eq!(v.frame_len(), f.len, "Vouch::frame_len()");
            format::encode_vouch(&mut out, salt, v)
        }
        (Kind::Skip, Some(word), _) if word > 0 && f.stream == 0 => {
            format::encode_skip(&mut out, salt, f.lsn, word);
            spec::frame_len(8)
        }
        _ => return,
    };
    assert_eq!(n, spec::frame_len(f.payload.len()));
    assert!(
        out[n..].iter().all(|&b| b == 0xA5),
        "vouch/skip encoder wrote past the frame"
    );
    // Vouch and skip frames are no records: decoding refused any flags.
    assert_eq!(f.flags, 0, "a {:?} frame accepted with flags", f.kind);
    assert!(
        out[..n] == buf[..n],
        "{:?} frame differs from encode_vouch/encode_skip\n input: {:02x?}\n ours:  {:02x?}",
        f.kind,
        &buf[..n],
        &out[..n]
    );
}

/// Step through `buf` frame by frame like a segment scan: every accepted
/// frame must move the offset forward by a whole, aligned frame.
fn check_scan_terminates(buf: &[u8], salt: u64, limit: usize) {
    let mut off = 0usize;
    let mut steps = 0usize;
    while off < buf.len() {
        match format::decode_frame(&buf[off..], salt, limit) {
            Decoded::Frame(f) => {
                assert!(
                    f.len >= format::FRAME_HEADER && f.len.is_multiple_of(format::FRAME_ALIGN),
                    "frame of length {} at {off} would stall or misalign a scan",
                    f.len
                );
                off += f.len;
            }
            _ => break,
        }
        steps += 1;
        assert!(
            steps <= buf.len() / format::FRAME_HEADER + 1,
            "scan does not advance"
        );
    }
    assert!(off <= buf.len(), "scan stepped past the buffer");
}
