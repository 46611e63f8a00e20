//! The format's unit and property tests, against `docs/format.md`.

use super::*;
use proptest::prelude::*;

const SALT: u64 = 0x0123_4567_89ab_cdef;

fn sample_header() -> SegmentHeader {
    SegmentHeader {
        version: 1,
        log_id: 0,
        key_id: 0,
        key_check: 0,
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
    put(&mut b, 8, &5u32.to_le_bytes());
    assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::Version(5)));

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
        Kind::Vouch,
        Kind::Skip,
    ] {
        assert_eq!(Kind::from_u8(k as u8), Some(k));
    }
    let names: Vec<&str> = (1..=8).map(|b| Kind::from_u8(b).unwrap().name()).collect();
    assert_eq!(
        names,
        [
            "data",
            "padding",
            "tx_begin",
            "tx_commit",
            "tx_abort",
            "checkpoint",
            "vouch",
            "skip"
        ]
    );
    assert_eq!(Kind::from_u8(0), None);
    assert_eq!(Kind::from_u8(9), None);
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

    // Flags are checked before the CRC: an unknown bit, an end without a
    // batch, both codec bits, batch flags on a frame that is no record or
    // codec flags on one that is not data are invalid whatever the
    // checksum says.
    for bad in [0x10u8, 0x80, FLAG_BATCH_END, FLAG_LZ4 | FLAG_ZSTD, 0xFF] {
        let mut b = good.clone();
        b[19] = bad;
        assert_eq!(invalid(&b, SALT), InvalidFrame::Flags(bad));
    }
    let mut pad = vec![0u8; 64];
    encode_padding(&mut pad, SALT, 64);
    pad[19] = FLAG_BATCH;
    assert_eq!(invalid(&pad, SALT), InvalidFrame::Flags(FLAG_BATCH));
    pad[19] = FLAG_LZ4;
    assert_eq!(invalid(&pad, SALT), InvalidFrame::Flags(FLAG_LZ4));
    let mut marker = vec![0u8; frame_len(8)];
    encode_frame(&mut marker, SALT, 5, 0, Kind::Checkpoint, &[0; 8]);
    marker[19] = FLAG_ZSTD;
    assert_eq!(invalid(&marker, SALT), InvalidFrame::Flags(FLAG_ZSTD));

    let mut b = good.clone();
    b[30] ^= 1;
    assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
    let mut b = good.clone();
    b[0] ^= 0x80;
    assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
}

#[test]
fn batch_places_round_trip_and_are_checksummed() {
    for place in [Batching::Alone, Batching::Member, Batching::Last] {
        let mut b = vec![0u8; frame_len(3)];
        encode_record(&mut b, SALT, 9, 4, Kind::Data, place, b"abc");
        let Decoded::Frame(f) = decode_frame(&b, SALT, MAX_PAYLOAD) else {
            panic!("{place:?} does not decode");
        };
        assert_eq!((f.batching(), f.flags), (place, place.flags()));
        assert_eq!(Batching::from_flags(place.flags()), Some(place));
    }
    // Turning a member into the last record of its batch (or back) is a
    // bit flip the CRC must catch, or a torn batch could pass for whole.
    let mut b = vec![0u8; frame_len(3)];
    encode_record(&mut b, SALT, 9, 4, Kind::Data, Batching::Member, b"abc");
    b[19] = Batching::Last.flags();
    assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
}

#[test]
fn codecs_round_trip_beside_batch_places_and_are_checksummed() {
    for codec in [Codec::None, Codec::Lz4, Codec::Zstd] {
        for place in [Batching::Alone, Batching::Member, Batching::Last] {
            let head = RecordHead {
                lsn: 9,
                stream: 4,
                kind: Kind::Data,
                flags: place.flags() | codec.flags(),
            };
            let mut b = vec![0u8; frame_len(5)];
            let n = encode_record_with(&mut b, SALT, head, 5, |p| p.copy_from_slice(b"abcde"));
            assert_eq!(n, frame_len(5));
            let Decoded::Frame(f) = decode_frame(&b, SALT, MAX_PAYLOAD) else {
                panic!("{codec:?} {place:?} does not decode");
            };
            assert_eq!((f.codec(), f.batching(), f.head()), (codec, place, head));
            assert_eq!(f.payload, b"abcde");
        }
    }
    // A codec bit flipped on disk changes how the payload would be read:
    // the CRC covers it.
    let mut b = vec![0u8; frame_len(3)];
    encode_record(&mut b, SALT, 9, 4, Kind::Data, Batching::Alone, b"abc");
    b[19] = FLAG_LZ4;
    assert_eq!(invalid(&b, SALT), InvalidFrame::Checksum);
}

#[test]
#[should_panic(expected = "not allowed on a padding frame")]
fn a_padding_frame_cannot_join_a_batch() {
    let mut b = vec![0u8; 64];
    encode_record(&mut b, SALT, 0, 0, Kind::Padding, Batching::Last, &[0; 8]);
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
    let mut seg = vec![0u8; 4 * BLOCK];
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

#[test]
fn temp_file_names_round_trip_and_near_misses_are_refused() {
    for target in ["00001.manifest", "snapshot.ckpt", "a", ".hidden", "x.tmp"] {
        let name = temp_file_name(target, 4242, 7, 0x00c0_ffee);
        assert!(name.starts_with('.'), "{name:?} is not hidden");
        assert_eq!(parse_temp_file_name(&name), Some(target), "{name:?}");
    }
    assert_ne!(
        temp_file_name("a", 1, 1, 5),
        temp_file_name("a", 1, 2, 5),
        "the count alone makes names differ"
    );
    let bad = [
        "",
        ".tmp",
        "00001.manifest.tmp",
        ".00001.manifest.tmp",
        "..1-2-00000000000000ff.tmp",
        ".a.1-2-00000000000000ff",
        "a.1-2-00000000000000ff.tmp",
        ".a.1-2-00000000000000f.tmp",
        ".a.1-2-00000000000000fff.tmp",
        ".a.1-2-0000000000000fgf.tmp",
        ".a.-2-00000000000000ff.tmp",
        ".a.1--00000000000000ff.tmp",
        ".a.1-2-3-00000000000000ff.tmp",
        ".a.x-2-00000000000000ff.tmp",
        ".a.1-2-00000000000000ff.tmp~",
        "00001-00000000000000000001.wal",
    ];
    for n in bad {
        assert_eq!(parse_temp_file_name(n), None, "{n:?}");
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

fn sample_v2() -> SegmentHeader {
    SegmentHeader {
        version: 2,
        log_id: 0xfeed_beef_0042_0001,
        key_id: 0,
        key_check: 0,
        ..sample_header()
    }
}

#[test]
fn v3_and_v4_headers_are_v2_layout_with_their_own_version() {
    assert_eq!(FORMAT_VERSION, 4);
    let v2 = sample_v2();
    for version in [3, 4] {
        let v = SegmentHeader { version, ..v2 };
        assert_eq!((v.header_bytes(), v.frames_start()), (8192, 8192));
        let (mut a, mut b) = (vec![0u8; 2 * BLOCK], vec![0u8; 2 * BLOCK]);
        v2.encode_blocks(&mut a);
        v.encode_blocks(&mut b);
        assert_eq!(SegmentHeader::decode(&b), Ok(v));
        assert_eq!(SegmentHeader::decode(&b[BLOCK..]), Ok(v), "the copy");
        assert_eq!(get_u32(&b, 8), version);
        let differ: Vec<usize> = (0..2 * BLOCK).filter(|&i| a[i] != b[i]).collect();
        assert!(
            differ.iter().all(|&i| (8..16).contains(&(i % BLOCK))),
            "only the version and the CRC differ: {differ:?}"
        );
    }
}

#[test]
fn v2_header_layout_and_copy() {
    let h = sample_v2();
    assert_eq!((h.header_bytes(), h.frames_start()), (8192, 8192));
    assert_eq!(sample_header().frames_start(), 4096);
    let mut b = vec![0xAAu8; 3 * BLOCK];
    h.encode_blocks(&mut b);
    assert_eq!(&b[..8], b"RINGWAL1");
    assert_eq!(get_u32(&b, 8), 2);
    assert_eq!(get_u64(&b, 64), 0xfeed_beef_0042_0001);
    assert_eq!(get_u32(&b, 72), 0);
    assert_eq!(get_u32(&b, 76), 0);
    assert!(b[80..BLOCK].iter().all(|&x| x == 0));
    assert_eq!(b[..BLOCK], b[BLOCK..2 * BLOCK], "the copy is the header");
    assert!(
        b[2 * BLOCK..].iter().all(|&x| x == 0xAA),
        "nothing past the copy"
    );
    assert_eq!(SegmentHeader::decode(&b), Ok(h));
    // The CRC covers the log id and the key id.
    let mut covered = b[..12].to_vec();
    covered.extend_from_slice(&b[16..80]);
    assert_eq!(get_u32(&b, 12), crc32fast::hash(&covered));
    for at in [64, 72] {
        let mut bad = b.clone();
        bad[at] ^= 1;
        assert_eq!(
            SegmentHeader::decode(&bad),
            Err(HeaderError::Checksum),
            "{at}"
        );
    }
    let mut reserved = b.clone();
    reserved[77] = 1;
    assert_eq!(SegmentHeader::decode(&reserved), Err(HeaderError::Reserved));
}

#[test]
fn vouch_and_skip_frames() {
    let mut b = vec![0u8; 64];
    let v2 = Vouch {
        durable: 12345,
        submitted_unix_ns: None,
        nonce_salt: None,
    };
    assert_eq!(encode_vouch(&mut b, SALT, v2), VOUCH_LEN_V2);
    match decode_frame(&b, SALT, MAX_PAYLOAD) {
        Decoded::Frame(f) => {
            assert_eq!(
                (f.kind, f.lsn, f.len, f.word(), f.vouch()),
                (Kind::Vouch, 0, VOUCH_LEN_V2, Some(12345), Some(v2))
            );
        }
        other => panic!("{other:?}"),
    }
    // Version 3: the durable LSN, then the submission time.
    let v3 = Vouch {
        durable: 12345,
        submitted_unix_ns: Some(1_765_000_000_123_456_789),
        nonce_salt: None,
    };
    let mut b = vec![0xAAu8; 64];
    assert_eq!(encode_vouch(&mut b, SALT, v3), VOUCH_LEN_V3);
    assert_eq!((VOUCH_LEN, VOUCH_LEN_V3, VOUCH_LEN_V2), (48, 40, 32));
    assert_eq!(get_u32(&b, 4), 16, "payload length");
    assert_eq!(get_u64(&b, 24), 12345);
    assert_eq!(get_u64(&b, 32), 1_765_000_000_123_456_789);
    assert!(b[40..].iter().all(|&x| x == 0xAA), "nothing past the frame");
    match decode_frame(&b, SALT, MAX_PAYLOAD) {
        Decoded::Frame(f) => {
            assert_eq!(
                (f.kind, f.lsn, f.len, f.vouch()),
                (Kind::Vouch, 0, VOUCH_LEN_V3, Some(v3))
            );
            // word() reads 8-byte payloads only.
            assert_eq!(f.word(), None);
        }
        other => panic!("{other:?}"),
    }
    // Version 4: then the nonce salt.
    let v4 = Vouch {
        nonce_salt: Some(0x0123_4567_89ab_cdef),
        ..v3
    };
    let mut b = vec![0xAAu8; 64];
    assert_eq!(encode_vouch(&mut b, SALT, v4), VOUCH_LEN);
    assert_eq!(get_u32(&b, 4), 24, "payload length");
    assert_eq!(get_u64(&b, 32), 1_765_000_000_123_456_789);
    assert_eq!(get_u64(&b, 40), 0x0123_4567_89ab_cdef);
    assert!(b[48..].iter().all(|&x| x == 0xAA), "nothing past the frame");
    match decode_frame(&b, SALT, MAX_PAYLOAD) {
        Decoded::Frame(f) => assert_eq!((f.len, f.vouch()), (VOUCH_LEN, Some(v4))),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        (vouch_len(2), vouch_len(3), vouch_len(4)),
        (VOUCH_LEN_V2, VOUCH_LEN_V3, VOUCH_LEN)
    );
    // A vouch payload of any other length vouches for nothing; other
    // kinds are no vouch.
    for (kind, len) in [
        (Kind::Vouch, 0),
        (Kind::Vouch, 12),
        (Kind::Vouch, 32),
        (Kind::Padding, 16),
    ] {
        let f = encode(SALT, 0, 0, kind, &vec![0; len]);
        match decode_frame(&f, SALT, MAX_PAYLOAD) {
            Decoded::Frame(f) => assert_eq!(f.vouch(), None, "{kind:?} {len}"),
            other => panic!("{other:?}"),
        }
    }
    encode_skip(&mut b, SALT, 100, 7);
    match decode_frame(&b, SALT, MAX_PAYLOAD) {
        Decoded::Frame(f) => assert_eq!((f.kind, f.lsn, f.word()), (Kind::Skip, 100, Some(7))),
        other => panic!("{other:?}"),
    }
    // word() is for vouch and skip frames only.
    let d = encode(SALT, 5, 0, Kind::Data, &7u64.to_le_bytes());
    match decode_frame(&d, SALT, MAX_PAYLOAD) {
        Decoded::Frame(f) => assert_eq!(f.word(), None),
        other => panic!("{other:?}"),
    }
}

#[test]
fn manifest_round_trip_and_rejections() {
    let m = Manifest {
        node: 3,
        log_id: 0x1234_5678_9abc_def0,
        newest_base: 1_000_001,
        durable_lsn: 1_000_500,
        handed_out: 1_000_510,
        oldest_lsn: 900_001,
    };
    let b = m.encode();
    assert_eq!(&b[..8], b"RWMANIF1");
    assert_eq!(get_u32(&b, 8), 1);
    assert_eq!(get_u32(&b, 16), 3);
    assert_eq!(get_u64(&b, 24), m.log_id);
    assert_eq!(get_u64(&b, 32), m.newest_base);
    assert_eq!(get_u64(&b, 40), m.durable_lsn);
    assert_eq!(get_u64(&b, 48), m.handed_out);
    assert_eq!(get_u64(&b, 56), m.oldest_lsn);
    assert_eq!(Manifest::decode(&b), Ok(m));
    assert_eq!(Manifest::decode(&b[..63]), Err(ManifestError::Length(63)));
    for i in 0..64 {
        for bit in 0..8 {
            let mut bad = b;
            bad[i] ^= 1 << bit;
            assert!(
                Manifest::decode(&bad).is_err(),
                "flip at byte {i} bit {bit} accepted"
            );
        }
    }
}

#[test]
fn the_log_owns_the_files_it_names_and_nothing_else() {
    let seg = segment_file_name(3, 77);
    let owned = [
        seg.clone(),
        spare_file_name(3, 9),
        manifest_file_name(3),
        archived_file_name(3),
        archive_lock_file_name(3),
        lock_file_name(3),
        temp_file_name(&manifest_file_name(3), 4242, 7, 0xc0ffee),
        format!("{seg}.corrupt"),
        format!("{seg}.corrupt.12"),
    ];
    for name in &owned {
        assert!(is_log_file_name(name), "{name}");
    }
    let foreign = [
        "README.txt".to_string(),
        format!("{seg}.bak"),
        format!("{seg}.corrupt.x"),
        format!("{seg}.corrupt."),
        "1.manifest".to_string(),
        "00001.archive.manifest".to_string(),
        temp_file_name("README.txt", 1, 1, 1),
        ".tmp".to_string(),
    ];
    for name in &foreign {
        assert!(!is_log_file_name(name), "{name}");
    }
}
