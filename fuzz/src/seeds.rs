//! The committed seed inputs, built by code so that they stay valid when
//! an input layout changes. `fuzz/seeds/<target>/` holds their bytes;
//! regenerate them with
//!
//! ```text
//! cd fuzz && RINGWAL_FUZZ_WRITE_SEEDS=1 cargo test --lib seeds
//! ```
//!
//! and `cargo test --lib` (in `fuzz/`) checks that the committed files
//! match and that every seed passes its target's oracles.

use ringwal::format::{self, Batching, Kind};

use crate::spec::kind;
use crate::{frame, header, spec};

const SALT: u64 = 0x005e_ed0f_f00d_cafe;

fn frame_bytes(salt: u64, lsn: u64, stream: u16, kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; format::frame_len(payload.len())];
    format::encode_frame(&mut b, salt, lsn, stream, kind, payload);
    b
}

/// Seeds for `frame_decoder`.
pub fn frame_decoder() -> Vec<(&'static str, Vec<u8>)> {
    let data = frame_bytes(SALT, 42, 3, Kind::Data, b"hello, ringwal");
    let mut padding = vec![0u8; 64];
    format::encode_padding(&mut padding, SALT, 64);
    let mut run = Vec::new();
    for (i, p) in [&b"a"[..], b"bb", b"a longer payload of 31 bytes..."]
        .iter()
        .enumerate()
    {
        run.extend(frame_bytes(SALT, 7 + i as u64, 1, Kind::Data, p));
    }
    run.extend(frame_bytes(SALT, 10, 0, Kind::TxBegin, &[]));
    run.extend([0u8; 48]);
    let mut flagged = frame_bytes(SALT, 5, 2, Kind::Checkpoint, b"flags");
    flagged[19] = 0x80;
    let crc = spec::frame_crc(SALT, &flagged, 5);
    flagged[..4].copy_from_slice(&crc.to_le_bytes());
    let mut vouch = vec![0u8; format::VOUCH_LEN_V2];
    format::encode_vouch(
        &mut vouch,
        SALT,
        format::Vouch {
            durable: 41,
            submitted_unix_ns: None,
            nonce_salt: None,
        },
    );
    let vouch_v3 = spec::encode_vouch_v3(SALT, 41, 1_765_000_000_000_000_000);
    let vouch_v4 =
        spec::encode_vouch_v4(SALT, 41, 1_765_000_000_000_000_000, 0x0a0b_0c0d_0e0f_1011);
    let mut skip = vec![0u8; format::VOUCH_LEN_V2];
    format::encode_skip(&mut skip, SALT, 42, 7);
    // A skip of no LSNs decodes (§3.3 has no count step); recovery's scan
    // is where it is invalid.
    let skip_zero = spec::encode_skip(SALT, 42, 0);
    let kind_9 = spec::encode_frame(SALT, 42, 0, 9, b"kind 9");
    // Atomic batches (§3, §4.1): the engine's encoder for a batch's
    // records, a run of a whole batch, and the flags bytes §3.3 step 7
    // refuses (an end without a batch, unknown bits, batch flags on frames
    // that are not records), each with a valid CRC.
    let record = |lsn, kind, place, payload: &[u8]| {
        let mut b = vec![0u8; format::frame_len(payload.len())];
        format::encode_record(&mut b, SALT, lsn, 4, kind, place, payload);
        b
    };
    let member = record(20, Kind::Data, Batching::Member, b"first of three");
    let mut batch = member.clone();
    batch.extend(record(21, Kind::TxBegin, Batching::Member, b""));
    batch.extend(record(22, Kind::TxCommit, Batching::Last, b"last"));
    let flagged_as = |kind, flags| spec::encode_flagged(SALT, 0, 0, kind, flags, &[0; 8]);
    let end_alone = spec::encode_flagged(SALT, 20, 4, kind::DATA, spec::FLAG_BATCH_END, b"end");
    let unknown = spec::encode_flagged(SALT, 20, 4, kind::DATA, 0x05, b"bit 2");
    // Invalid flags and a bad CRC: the flags step comes first.
    let mut flags_then_crc = unknown.clone();
    flags_then_crc[30] ^= 1;
    vec![
        ("data", frame::input(0, SALT, 0, &data)),
        ("vouch", frame::input(0, SALT, 0, &vouch)),
        ("vouch_v3", frame::input(0, SALT, 0, &vouch_v3)),
        ("vouch_v4", frame::input(0, SALT, 0, &vouch_v4)),
        ("skip", frame::input(0, SALT, 0, &skip)),
        ("skip_zero_count", frame::input(0, SALT, 0, &skip_zero)),
        ("kind_9", frame::input(0, SALT, 0, &kind_9)),
        ("padding", frame::input(0, SALT, 0, &padding)),
        ("run", frame::input(1, SALT, 0, &run)),
        ("zero", frame::input(0, 0, 0, &[0u8; 32])),
        ("flags", frame::input(0, SALT, 0, &flagged)),
        ("batch_member", frame::input(0, SALT, 0, &member)),
        ("batch_run", frame::input(1, SALT, 0, &batch)),
        ("batch_end_alone", frame::input(0, SALT, 0, &end_alone)),
        ("batch_unknown_bit", frame::input(0, SALT, 0, &unknown)),
        (
            "batch_flags_before_crc",
            frame::input(0, SALT, 0, &flags_then_crc),
        ),
        (
            "batch_flags_on_padding",
            frame::input(0, SALT, 0, &flagged_as(kind::PADDING, spec::FLAG_BATCH)),
        ),
        (
            "batch_flags_on_vouch",
            frame::input(0, SALT, 0, &flagged_as(kind::VOUCH, spec::FLAGS_LAST)),
        ),
        (
            "batch_flags_on_skip",
            frame::input(0, SALT, 0, &flagged_as(kind::SKIP, spec::FLAG_BATCH)),
        ),
        ("too_long", frame::input(3, SALT, 4, &data)),
        (
            "tx_commit_small_limit",
            frame::input(
                2,
                1,
                16,
                &frame_bytes(1, 9, 0, Kind::TxCommit, b"16 bytes exactly"),
            ),
        ),
    ]
}

/// Seeds for `segment_header`.
pub fn segment_header() -> Vec<(&'static str, Vec<u8>)> {
    let h = spec::HeaderFields {
        version: 1,
        node: 1,
        base_lsn: 1,
        segment_bytes: 64 << 10,
        salt: SALT,
        created_unix_ms: 1_700_000_000_000,
        ..spec::HeaderFields::default()
    };
    let valid = spec::encode_header(&h);
    let mut flagged = valid.clone();
    flagged[20] = 1;
    flagged[60] = 0x77;
    let crc = spec::header_crc(&flagged, 1);
    flagged[12..16].copy_from_slice(&crc.to_le_bytes());
    // A later version, named as such before its CRC is looked at.
    let mut v5 = valid.clone();
    v5[8] = 5;
    let h2 = spec::HeaderFields {
        version: 2,
        torn_window: 160 << 10,
        log_id: 0x0001_061d,
        ..h
    };
    let v2 = spec::encode_header(&h2);
    let v2_flags = spec::encode_header(&spec::HeaderFields {
        flags: 0x8000_0001,
        ..h2
    });
    let v2_reserved = spec::encode_header(&spec::HeaderFields { key_check: 1, ..h2 });
    let v2_key = spec::encode_header(&spec::HeaderFields { key_id: 3, ..h2 });
    let v3 = spec::encode_header(&spec::HeaderFields { version: 3, ..h2 });
    let v4 = spec::encode_header(&spec::HeaderFields { version: 4, ..h2 });
    vec![
        ("valid", header::input(0, &valid[..64])),
        ("valid_full_block", header::input(1, &valid)),
        ("flags_and_tail", header::input(0, &flagged[..64])),
        ("version_5", header::input(0, &v5[..64])),
        ("v4_valid", header::input(0, &v4[..80])),
        ("v3_valid", header::input(0, &v3[..80])),
        ("v2_valid", header::input(0, &v2[..80])),
        ("v2_valid_full_block", header::input(1, &v2)),
        ("v2_flags", header::input(0, &v2_flags[..80])),
        ("v2_reserved", header::input(0, &v2_reserved[..80])),
        ("v2_key_id", header::input(0, &v2_key[..80])),
        ("blank", header::input(0, &[])),
        ("short", header::input(1, &valid[..100])),
    ]
}

/// Writes a `recovery` input field by field (see the layout in
/// [`crate::recovery`]).
#[derive(Default)]
struct Rin(Vec<u8>);

impl Rin {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    /// Start: flags, config byte, start LSN 1.
    fn start(flags: u8, config: u8) -> Self {
        Rin::default().u8(flags).u8(config).u8(0)
    }
    /// A structured segment continuing the LSNs: kind 2, salt, op count.
    fn segment(self, salt: u64, ops: u8) -> Self {
        self.u8(2).u64(salt).u8(ops)
    }
    /// The same, version 2.
    fn v2_segment(self, salt: u64, ops: u8) -> Self {
        self.u8(2 | 0x20).u64(salt).u8(ops)
    }
    /// Start of a log with a manifest: flags, config, start LSN 1, the
    /// manifest's deviation byte and the log id.
    fn with_manifest(flags: u8, config: u8, mdev: u8) -> Self {
        Rin::default()
            .u8(flags)
            .u8(config | 0x10)
            .u8(0)
            .u8(mdev)
            .u64(0x0005_eed1_061d)
    }
    /// A bit flip at `at` bytes past the segment's first frame.
    fn flip_at(self, at: u16, bit: u8) -> Self {
        self.u8(6 | 0x80).u16(at).u8(bit)
    }
    /// Data frame op with a payload of `len` (< 256) bytes, in order.
    fn data(self, kind_sel: u8, len: u8) -> Self {
        self.u8(kind_sel << 3).u8(len)
    }
    fn pad(self) -> Self {
        self.u8(3)
    }
    /// A data record in order with a flags byte: op 7, variant 1, a
    /// payload of `len` bytes, then the byte `v` with flags `1 + v % 255`.
    fn flagged(self, len: u8, flags: u8) -> Self {
        self.u8(7 | 1 << 3).u8(len).u8(flags - 1)
    }
    /// A record of an atomic batch that more records follow.
    fn member(self, len: u8) -> Self {
        self.flagged(len, spec::FLAG_BATCH)
    }
    /// The last record of an atomic batch.
    fn last(self, len: u8) -> Self {
        self.flagged(len, spec::FLAGS_LAST)
    }
}

/// Seeds for `recovery`.
pub fn recovery() -> Vec<(&'static str, Vec<u8>)> {
    let clean_one = Rin::start(0, 0)
        .segment(11, 5)
        .data(0, 10)
        .data(1, 20)
        .u8(0x80)
        .u8(1)
        .u8(5) // 42-byte record
        .data(2, 0)
        .pad();
    let torn_two = Rin::start(1, 0)
        .segment(21, 3)
        .data(0, 100)
        .data(0, 200)
        .pad()
        .segment(22, 3)
        .data(0, 30)
        .data(0, 31)
        .u8(4)
        .u8(12)
        .bytes(&[0x5a; 12]);
    let blank_newest = Rin::start(1 | 8, 0)
        .segment(31, 2)
        .data(0, 64)
        .pad()
        .u8(3)
        .u64(0)
        .u8(0);
    let pit_flip = Rin::start(2 | 4, 0)
        .segment(41, 3)
        .data(0, 50)
        .data(0, 60)
        .pad()
        .segment(42, 4)
        .data(0, 70)
        .data(0, 80)
        .pad()
        .u8(6)
        .u16(100)
        .u8(3)
        .segment(43, 2)
        .data(0, 90)
        .pad();
    let extras = Rin::start(8 | 0x10 | 0x20 | 0x40 | 0x80, 0)
        .segment(51, 2)
        .data(3, 40)
        .pad()
        .u8(2)
        .u8(3)
        .bytes(b"spa")
        .u8(4)
        .bytes(b"node");
    // Torn window 20 KiB (one 4 KiB write in flight): a record 24 KiB past
    // a zero gap is data written after the damage, so open must fail.
    let mut corrupt_small_window = Rin::start(0, 1).segment(61, 15).data(0, 8);
    for _ in 0..12 {
        corrupt_small_window = corrupt_small_window.u8(5).u8(255); // 2 KiB of zeros
    }
    let corrupt_small_window = corrupt_small_window.u8(5 | 0x80).data(0, 8);
    let raw = Rin::start(0, 0).u8(0).u64(0).u16(64).bytes(b"RINGWAL1");
    let mut seeds = vec![
        ("clean_one_segment", clean_one.0),
        ("torn_tail_two_segments", torn_two.0),
        ("blank_newest_then_append", blank_newest.0),
        ("point_in_time_flip", pit_flip.0),
        ("extra_files", extras.0),
        ("corrupt_small_window", corrupt_small_window.0),
        ("raw_file", raw.0),
    ];
    // A raw file holding a whole valid segment header, for mutation.
    let h = spec::HeaderFields {
        version: 1,
        node: 1,
        base_lsn: 1,
        segment_bytes: 64 << 10,
        salt: 71,
        ..spec::HeaderFields::default()
    };
    let mut file = spec::encode_header(&h);
    file.extend(frame_bytes(71, 1, 0, Kind::Data, b"record one"));
    let raw_header = Rin::start(0, 0)
        .u8(0)
        .u64(71)
        .u16(file.len() as u16)
        .bytes(&file);
    seeds.push(("raw_valid_segment", raw_header.0));
    seeds.extend(recovery_v2());
    seeds
}

/// Version-2 seeds for `recovery`.
fn recovery_v2() -> Vec<(&'static str, Vec<u8>)> {
    use crate::recovery::{ManifestDeviation as M, V2Deviation as V};
    // Two segments, writes opened by vouches, a closing vouch block, a
    // manifest that agrees (with more LSNs handed out than written, and a
    // leftover temporary manifest), one append.
    let v2_log = Rin::with_manifest(1 | 8, 0, M::HANDED_OUT | M::TEMP_FILE)
        .v2_segment(81, 5)
        .data(0, 10)
        .data(1, 20)
        .pad()
        .data(2, 30)
        .u8(3 | 0x80) // pad, then a closing vouch block
        .v2_segment(82, 2)
        .data(0, 40)
        .pad()
        .u16(5) // handed out: 5 past the last LSN written
        .u8(3)
        .bytes(b"tmp");
    // Records 1-3 in one write, record 4 in the next, whose vouch says 3
    // was durable; then record 2 loses a bit. Torn in version 1 (the
    // second write is within the torn window); corrupt now.
    let flip_behind_vouch = Rin::start(0, 0)
        .v2_segment(91, 7)
        .data(0, 100)
        .data(0, 100)
        .data(0, 100)
        .pad()
        .data(0, 50)
        .pad()
        .flip_at(32 + 128 + 40, 1); // record 2's payload
                                    // The same in point-in-time mode, with a manifest that handed out
                                    // LSNs up to 7: the log resumes at 8 and skips 2..=7.
    let pit_vouched = Rin::with_manifest(4 | 8, 0, M::HANDED_OUT)
        .v2_segment(92, 7)
        .data(0, 100)
        .data(0, 100)
        .data(0, 100)
        .pad()
        .data(0, 50)
        .pad()
        .flip_at(32 + 128 + 40, 1)
        .u16(3);
    // Block 0 of the header loses a bit of its base LSN: the copy is read.
    let header_copy = Rin::with_manifest(8, 0, 0)
        .u8(2 | 0x20 | 0x40)
        .u8(V::BLOCK0_DAMAGED)
        .u64(101)
        .u8(24 - 16)
        .u8(0)
        .u8(2)
        .data(0, 33)
        .pad();
    // The manifest names segment 2, which is gone.
    let missing_newest = Rin::with_manifest(1, 0, M::DROP_NEWEST)
        .v2_segment(111, 2)
        .data(0, 10)
        .pad()
        .v2_segment(112, 2)
        .data(0, 20)
        .pad();
    // The manifest says LSN 3 + 7 was durable; the log ends at 2.
    let durable_ahead = Rin::with_manifest(0, 0, M::DURABLE_AHEAD)
        .v2_segment(121, 3)
        .data(0, 10)
        .data(0, 10)
        .pad()
        .u8(7);
    // Record 1, a skip block for 2..=6 (as point-in-time recovery writes
    // it), record 7: a reader meets one gap.
    let skip_in_log = Rin::with_manifest(8, 0, 0)
        .v2_segment(131, 4)
        .data(0, 10)
        .u8(7 | 0x20 | 1 << 3)
        .u8(5)
        .data(0, 10)
        .pad();
    let mut seeds = vec![
        ("v2_log", v2_log.0),
        ("v2_flip_behind_vouch", flip_behind_vouch.0),
        ("v2_point_in_time_vouched", pit_vouched.0),
        ("v2_header_block_damaged", header_copy.0),
        ("manifest_missing_newest", missing_newest.0),
        ("manifest_durable_ahead", durable_ahead.0),
        ("v2_skip_in_log", skip_in_log.0),
    ];
    seeds.extend(recovery_batches());
    seeds
}

/// `recovery` seeds with atomic batches (docs/format.md §4.1, §6.1), all
/// in version-2 segments.
fn recovery_batches() -> Vec<(&'static str, Vec<u8>)> {
    // Record 1; a batch of 2..=5 spread over two writes (padding, then a
    // vouch for 1 only, between its records); a batch of one (6); one
    // append (7).
    let whole = Rin::start(8, 0)
        .v2_segment(141, 8)
        .data(0, 10)
        .member(20)
        .member(30)
        .pad()
        .member(200)
        .last(40)
        .last(8)
        .pad();
    // Records 1 and 2, then a crash while the batch of 3 and 4 (and more)
    // was being written: the batch is the torn tail, and its LSNs are
    // handed out again (the append gets 3).
    let open_newest = Rin::start(8, 0)
        .v2_segment(142, 5)
        .data(0, 10)
        .data(0, 10)
        .member(20)
        .pad()
        .member(20);
    // The same in point-in-time mode: LSNs 3 and 4 are skipped.
    let open_pit = Rin::start(4 | 8, 0)
        .v2_segment(143, 5)
        .data(0, 10)
        .data(0, 10)
        .member(20)
        .pad()
        .member(20);
    // A batch left open in a segment the log rolled past: damage.
    let open_older = Rin::start(1, 0)
        .v2_segment(144, 3)
        .data(0, 10)
        .member(20)
        .pad()
        .v2_segment(145, 2)
        .data(0, 10)
        .pad();
    // Record 1, batch record 2, then record 3 standing alone: no writer
    // writes that, even at the newest end.
    let alone_inside = Rin::start(0, 0)
        .v2_segment(146, 4)
        .data(0, 10)
        .member(20)
        .data(0, 30)
        .pad();
    // Record 1, batch record 2, then a padding frame carrying batch flags
    // (an invalid frame): torn, cut from the batch's start.
    let flagged_padding = Rin::start(0, 0)
        .v2_segment(147, 3)
        .data(0, 10)
        .member(20)
        .u8(7 | 1 << 3 | 0x40)
        .u8(16)
        .u8(0);
    // Record 1, then record 2 flagged as a batch's end without the batch
    // flag (an invalid frame): torn at record 2.
    let end_without_batch = Rin::start(0, 0)
        .v2_segment(148, 3)
        .data(0, 10)
        .flagged(20, spec::FLAG_BATCH_END)
        .pad();
    // Record 1 and batch record 2, then a torn write (garbage), then, in
    // the window, a write whose vouch says LSN 2 was durable: the batch
    // was acknowledged, so its loss is damage.
    let vouched = Rin::start(0, 0)
        .v2_segment(149, 6)
        .data(0, 10)
        .member(20)
        .pad()
        .u8(4)
        .u8(8)
        .bytes(&[0xff; 8])
        .u8(5 | 0x80)
        .u8(7 | 0x20)
        .u8(0);
    vec![
        ("batch_whole_across_writes", whole.0),
        ("batch_open_at_newest_end", open_newest.0),
        ("batch_open_point_in_time", open_pit.0),
        ("batch_open_in_older_segment", open_older.0),
        ("batch_record_alone_inside", alone_inside.0),
        ("batch_flags_on_padding", flagged_padding.0),
        ("batch_end_without_batch", end_without_batch.0),
        ("batch_open_then_vouched", vouched.0),
    ]
}

/// A reproducer of a finding, built by hand to be as small and readable as
/// the input layout allows (the `-tmin` files next to them are what
/// `cargo fuzz tmin` made of the fuzzer's own crash inputs).
pub struct Regression {
    /// Finding id in docs/fuzzing.md.
    pub id: &'static str,
    /// File name under `fuzz/regressions/recovery/`.
    pub name: &'static str,
    pub input: Vec<u8>,
}

/// Hand-built `recovery` reproducers, one per finding.
pub fn regressions() -> Vec<Regression> {
    // F1: header + 6 zero bytes, a file shorter than the 64 KiB its header
    // declares: content 1, deviation SHORT_FILE, file length 4102, no raw
    // bytes.
    let f1 = Rin::start(0, 0).u8(1 | 0x10).u8(16).u64(1).u16(4102).u16(0);
    // F2: an empty segment at base 1 and a blank newest file named 3.
    let f2 = Rin::start(1, 0)
        .segment(2, 0)
        .u8(3 | 1 << 2)
        .u8(1)
        .u64(0)
        .u8(0);
    // F3: a lone blank file named u64::MAX, then one append.
    let f3 = Rin::default().u8(8).u8(0).u8(3).u8(0).u8(3).u64(0).u8(0);
    // F4: point-in-time; records 1 and 2, a blank newest file named 1000,
    // then one append (which gets LSN 1000 inside the segment of 1..2).
    let f4 = Rin::start(1 | 4 | 8, 0)
        .segment(4, 3)
        .data(0, 10)
        .data(0, 20)
        .pad()
        .u8(3 | 2 << 2)
        .u64(1000)
        .u64(0)
        .u8(0);
    // F5: a segment whose name and header say base LSN 0.
    let f5 = Rin::default().u8(0).u8(0).u8(1).u8(0).segment(5, 0);
    // F6: torn window 20 KiB; a record, 8 bytes of garbage (the torn
    // tail), 24 KiB of zeros, 8 more bytes of garbage beyond the window;
    // then one append.
    let mut f6 = Rin::start(8, 1)
        .segment(6, 15)
        .data(0, 10)
        .u8(4)
        .u8(8)
        .bytes(&[0xff; 8]);
    for _ in 0..12 {
        f6 = f6.u8(5).u8(255);
    }
    let f6 = f6.u8(4).u8(8).bytes(&[0xee; 8]);
    // F7: valid frames filling the segment to 16 bytes before its end
    // (7 frames of 8192 bytes and one of 4080), the last 16 bytes zero.
    let mut f7 = Rin::start(0, 0).segment(7, 8);
    for _ in 0..7 {
        f7 = f7.u8(0x80).u8(220).u8(28);
    }
    let f7 = f7.u8(0x80).u8(109).u8(23);
    // F8: point-in-time; segment 1 holds records 1 and 2 ending mid-block,
    // then zeros, then 8 bytes of garbage at 12288; a blank header at base
    // 3 (corrupt, since it is not the newest) and a segment at 4 are set
    // aside; then one append.
    let f8 = Rin::start(2 | 4 | 8, 0)
        .segment(8, 6)
        .data(0, 10)
        .data(0, 20)
        .u8(5 | 0x80)
        .u8(5)
        .u8(255)
        .u8(5)
        .u8(255)
        .u8(4)
        .u8(8)
        .bytes(&[0xff; 8])
        .u8(3)
        .u64(0)
        .u8(0)
        .u8(2 | 1 << 2)
        .u8(0)
        .u64(9)
        .u8(0);
    vec![
        Regression {
            id: "F8",
            name: "F8-point-in-time-newest-judged-as-older",
            input: f8.0,
        },
        Regression {
            id: "F1",
            name: "F1-short-file-recut",
            input: f1.0,
        },
        Regression {
            id: "F2",
            name: "F2-verify-misses-blank-floor-gap",
            input: f2.0,
        },
        Regression {
            id: "F3",
            name: "F3-lsn-overflow-on-append",
            input: f3.0,
        },
        Regression {
            id: "F4",
            name: "F4-point-in-time-floor-skips-lsns",
            input: f4.0,
        },
        Regression {
            id: "F5",
            name: "F5-base-lsn-zero-underflow",
            input: f5.0,
        },
        Regression {
            id: "F6",
            name: "F6-residue-beyond-window-recut",
            input: f6.0,
        },
        Regression {
            id: "F7",
            name: "F7-seal-past-segment-end",
            input: f7.0,
        },
    ]
}

/// Every seed, as (target, name, bytes).
pub fn all() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut v = Vec::new();
    for (target, list) in [
        ("frame_decoder", frame_decoder()),
        ("segment_header", segment_header()),
        ("recovery", recovery()),
    ] {
        for (name, bytes) in list {
            v.push((target, name, bytes));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn seed_dir(target: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("seeds")
            .join(target)
    }

    #[test]
    fn seeds_are_committed_and_small() {
        let write = std::env::var_os("RINGWAL_FUZZ_WRITE_SEEDS").is_some();
        for (target, name, bytes) in all() {
            assert!(
                bytes.len() < 8 << 10,
                "{target}/{name} is {} bytes",
                bytes.len()
            );
            let path = seed_dir(target).join(name);
            if write {
                std::fs::create_dir_all(seed_dir(target)).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            }
            let on_disk = std::fs::read(&path).unwrap_or_default();
            assert!(
                on_disk == bytes,
                "{} is stale; regenerate (see seeds.rs)",
                path.display()
            );
        }
    }

    #[test]
    fn seeds_pass_their_oracles() {
        for (target, name, bytes) in all() {
            eprintln!("{target}/{name}");
            match target {
                "frame_decoder" => crate::frame::check(&bytes),
                "segment_header" => crate::header::check(&bytes),
                _ => {
                    let got = crate::recovery::check(&bytes);
                    eprintln!("  {got:?}");
                }
            }
        }
    }

    #[test]
    fn recovery_seeds_mean_what_they_say() {
        let by_name: std::collections::HashMap<_, _> = recovery().into_iter().collect();
        let clean = crate::recovery::build(&by_name["clean_one_segment"]);
        let want = clean.expected.expect("clean seed is clean");
        assert_eq!(want.iter().map(|r| r.lsn).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(want[2].payload.len(), 42);
        let torn = crate::recovery::build(&by_name["torn_tail_two_segments"]);
        assert!(torn.expected.is_none());
        assert_eq!(torn.files.len(), 2);
        let blank = crate::recovery::build(&by_name["blank_newest_then_append"]);
        assert_eq!(blank.expected.map(|r| r.len()), Some(1));
        assert!(blank.append);
        let v2 = crate::recovery::build(&by_name["v2_log"]);
        let want = v2.expected.expect("v2 seed is clean");
        assert_eq!(want.iter().map(|r| r.lsn).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(v2.expected_next, 5);
        let m = v2.manifest.expect("v2 seed has a manifest");
        assert_eq!((m.newest_base, m.durable_lsn, m.handed_out), (4, 3, 9));
        let seg = &v2.files[0].1;
        assert_eq!(&seg[..4096], &seg[4096..8192], "header copy");
        let skip = crate::recovery::build(&by_name["v2_skip_in_log"]);
        assert_eq!(skip.expected_skips, [(2, 5)]);
        assert_eq!(skip.expected.map(|r| r.len()), Some(2));
        let gone = crate::recovery::build(&by_name["manifest_missing_newest"]);
        assert_eq!(gone.must_fail, Some(crate::recovery::MustFail::Gap));
        let ahead = crate::recovery::build(&by_name["manifest_durable_ahead"]);
        assert_eq!(ahead.must_fail, Some(crate::recovery::MustFail::Lost));
        // Atomic batches: what a writer could have left, and what the
        // document reads from it.
        let lsns = |sc: &crate::recovery::Scenario| {
            sc.expected
                .as_ref()
                .map(|r| r.iter().map(|r| r.lsn).collect::<Vec<_>>())
        };
        let judged = |sc: &crate::recovery::Scenario| {
            spec::judge(&sc.directory(), 1, sc.config(sc.mode).torn_window())
        };
        let whole = crate::recovery::build(&by_name["batch_whole_across_writes"]);
        assert_eq!(lsns(&whole), Some(vec![1, 2, 3, 4, 5, 6]));
        assert_eq!(whole.expected_next, 7);
        let open = crate::recovery::build(&by_name["batch_open_at_newest_end"]);
        assert_eq!(lsns(&open), Some(vec![1, 2]));
        assert_eq!(open.expected_next, 3);
        // Cut at the batch's first frame (after the vouch and records 1
        // and 2), not where its frames end.
        let batch_at = spec::HEADER_BYTES + spec::VOUCH_LEN_V2 + 2 * spec::frame_len(10);
        match judged(&open) {
            spec::Judgment::Opens(m) => {
                assert_eq!(m.records.len(), 2);
                assert_eq!(m.last_lsn, 2);
                assert_eq!(m.torn.map(|t| t.1), Some(batch_at));
            }
            other => panic!("{other:?}"),
        }
        let pit = crate::recovery::build(&by_name["batch_open_point_in_time"]);
        assert_eq!((lsns(&pit), pit.expected_next), (Some(vec![1, 2]), 5));
        for (name, why) in [
            ("batch_open_in_older_segment", spec::Why::OpenBatch),
            ("batch_record_alone_inside", spec::Why::BatchBreak),
        ] {
            let sc = crate::recovery::build(&by_name[name]);
            assert!(sc.expected.is_none(), "{name}");
            let files = sc.directory();
            let (seg, b) = files.iter().next().unwrap();
            let h = spec::segment_head(b).usable().unwrap();
            let w = spec::walk(b, &h, b.len());
            let newest = files.len() == 1;
            let v = spec::judge_end(b, &h, b.len(), &w, newest, 0);
            assert_eq!(v, spec::Verdict::Corrupt(why), "{name}: {seg}");
            assert_eq!(w.due(), 2, "{name}");
        }
        let padded = crate::recovery::build(&by_name["batch_flags_on_padding"]);
        match judged(&padded) {
            spec::Judgment::Opens(m) => {
                let at = spec::HEADER_BYTES + spec::VOUCH_LEN_V2 + spec::frame_len(10);
                assert_eq!(m.torn.map(|t| t.1), Some(at));
            }
            other => panic!("{other:?}"),
        }
        let extras = crate::recovery::build(&by_name["extra_files"]);
        assert!(extras.expected.is_some());
        assert!(
            extras.files.len() >= 6,
            "{:?}",
            extras.files.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
    }

    fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    /// Each hand-built reproducer is committed and now passes every
    /// oracle: the findings are fixed, and these inputs keep them fixed.
    #[test]
    fn regressions_stay_fixed() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("regressions")
            .join("recovery");
        let write = std::env::var_os("RINGWAL_FUZZ_WRITE_SEEDS").is_some();
        for r in regressions() {
            let path = dir.join(r.name);
            if write {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &r.input).unwrap();
            }
            assert!(
                std::fs::read(&path).unwrap_or_default() == r.input,
                "{} is stale",
                path.display()
            );
            let got = std::panic::catch_unwind(|| crate::recovery::check(&r.input));
            if let Err(e) = got {
                panic!("{} fails again: {}", r.id, panic_message(&*e));
            }
        }
    }

    /// Committed reproducers that fail again since format version 2, on an
    /// engine bug that is open (docs/fuzzing.md, "Open findings"): each
    /// must still fail, and with this message, so that the fix shows up
    /// here as a test to update rather than going unnoticed.
    const OPEN: &[(&str, &str, &str)] = &[];

    /// The fuzzer's own crash inputs (`-tmin`, `-fuzzer`) and the harness
    /// bugs it found pass every oracle too (but for [`OPEN`]).
    #[test]
    fn fuzzer_reproducers_stay_fixed() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("regressions")
            .join("recovery");
        let mut seen = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let fuzzer_made = name.ends_with("-tmin") || name.ends_with("-fuzzer");
            if !(fuzzer_made || name.starts_with("harness-")) {
                continue;
            }
            seen += 1;
            let input = std::fs::read(&path).unwrap();
            let got = std::panic::catch_unwind(|| crate::recovery::check(&input));
            if let Some((_, id, why)) = OPEN.iter().find(|o| o.0 == name) {
                match got {
                    Ok(o) => {
                        panic!("{name} passes now ({o:?}): is {id} fixed? Move it out of OPEN")
                    }
                    Err(e) => {
                        let m = panic_message(&*e);
                        assert!(m.contains(why), "{name} ({id}) fails otherwise: {m}");
                    }
                }
                continue;
            }
            if let Err(e) = got {
                panic!("{name} fails again: {}", panic_message(&*e));
            }
        }
        assert!(seen >= 9, "only {seen} fuzzer reproducers");
        // The harness bug the frame target found first: a 24-byte frame
        // cut by one byte is Truncated, not PastEnd.
        let frame = std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("regressions/frame_decoder/harness-empty-frame-cut-short"),
        )
        .unwrap();
        crate::frame::check(&frame);
    }

    #[test]
    fn recovery_seeds_reach_their_paths() {
        use crate::recovery::Outcome;
        let opened = |records, truncated, discarded| Outcome::Opened {
            from_copy: 0,
            skipped: None,
            records,
            truncated,
            discarded,
        };
        for (name, bytes) in recovery() {
            let got = crate::recovery::check(&bytes);
            match name {
                "clean_one_segment" => assert_eq!(got, opened(4, false, 0)),
                "torn_tail_two_segments" => assert_eq!(got, opened(4, true, 0)),
                "blank_newest_then_append" => assert_eq!(got, opened(1, false, 1)),
                // The set-aside third segment held LSN 5: it is skipped,
                // never handed out again.
                "point_in_time_flip" => assert_eq!(
                    got,
                    Outcome::Opened {
                        records: 4,
                        truncated: true,
                        discarded: 1,
                        from_copy: 0,
                        skipped: Some((5, 5)),
                    }
                ),
                "extra_files" => assert_eq!(got, opened(1, false, 1)),
                "corrupt_small_window" => {
                    assert!(
                        matches!(&got, Outcome::Failed(e) if e.contains("valid frames follow")),
                        "{got:?}"
                    )
                }
                // Eight bytes under a segment's name: no writer makes that.
                "raw_file" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("is no segment")),
                    "{got:?}"
                ),
                "raw_valid_segment" => assert_eq!(got, opened(1, false, 0)),
                "v2_log" => assert_eq!(got, opened(4, false, 0)),
                // Torn in version 1; the second write's vouch makes it
                // damage.
                "v2_flip_behind_vouch" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("corrupt") && e.contains("vouches that LSN 3")),
                    "{got:?}"
                ),
                "v2_point_in_time_vouched" => assert_eq!(
                    got,
                    Outcome::Opened {
                        records: 1,
                        truncated: true,
                        discarded: 0,
                        from_copy: 0,
                        skipped: Some((2, 7)),
                    }
                ),
                "v2_header_block_damaged" => assert_eq!(
                    got,
                    Outcome::Opened {
                        records: 1,
                        truncated: false,
                        discarded: 0,
                        from_copy: 1,
                        skipped: None,
                    }
                ),
                "manifest_missing_newest" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("LSN gap: LSN 2 is not there; the next LSN present is 1")),
                    "{got:?}"
                ),
                "manifest_durable_ahead" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("acknowledged records lost")),
                    "{got:?}"
                ),
                "v2_skip_in_log" => assert_eq!(got, opened(2, false, 0)),
                "batch_whole_across_writes" => assert_eq!(got, opened(6, false, 0)),
                "batch_open_at_newest_end" => assert_eq!(got, opened(2, true, 0)),
                "batch_open_point_in_time" => assert_eq!(
                    got,
                    Outcome::Opened {
                        records: 2,
                        truncated: true,
                        discarded: 0,
                        from_copy: 0,
                        skipped: Some((3, 4)),
                    }
                ),
                "batch_open_in_older_segment" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("batch from LSN 2 never ends")),
                    "{got:?}"
                ),
                "batch_record_alone_inside" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("inside an unfinished atomic batch")),
                    "{got:?}"
                ),
                "batch_flags_on_padding" => assert_eq!(got, opened(1, true, 0)),
                "batch_end_without_batch" => assert_eq!(got, opened(1, true, 0)),
                "batch_open_then_vouched" => assert!(
                    matches!(&got, Outcome::Failed(e) if e.contains("vouches that LSN 2")),
                    "{got:?}"
                ),
                other => panic!("no expectation for seed {other}"),
            }
        }
    }
}
