//! Hand-built segment files that no writer produces but a damaged or
//! hostile directory can hold (found by the recovery fuzzer): recovery must
//! refuse them or repair them without writing outside the segment.

use ringwal::format::{self, Kind, SegmentHeader};
use ringwal::{Config, Error, Level, Wal};

const SEG: u64 = 64 << 10;
const SALT: u64 = 0x5eed_5eed_5eed_5eed;

fn cfg() -> Config {
    Config::builder()
        .segment_bytes(SEG)
        .max_record_bytes(32 << 10)
        .build()
}

/// A segment file for node 1 with `base`, holding `payloads` from offset
/// 4096 and `tail` bytes right after them.
fn segment(
    dir: &std::path::Path,
    base: u64,
    payloads: &[Vec<u8>],
    tail: &[u8],
) -> std::path::PathBuf {
    let mut buf = vec![0u8; SEG as usize];
    let h = SegmentHeader {
        node: 1,
        base_lsn: base,
        segment_bytes: SEG,
        salt: SALT,
        created_unix_ms: 0,
        torn_window: 0,
    };
    h.encode(&mut buf);
    let mut off = format::BLOCK;
    for (i, p) in payloads.iter().enumerate() {
        off += format::encode_frame(&mut buf[off..], SALT, base + i as u64, 0, Kind::Data, p);
    }
    buf[off..off + tail.len()].copy_from_slice(tail);
    let path = dir.join(format::segment_file_name(1, base));
    std::fs::write(&path, &buf).unwrap();
    path
}

#[test]
fn base_lsn_zero_or_near_overflow_is_corruption() {
    for base in [0u64, u64::MAX - 1] {
        let dir = tempfile::tempdir().unwrap();
        let path = segment(dir.path(), base, &[b"x".to_vec()], &[]);
        match Wal::open(dir.path(), cfg()) {
            Err(Error::Corrupt { file, .. }) => assert_eq!(file, path),
            other => panic!("base {base}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn a_tail_just_short_of_the_end_is_sealed_inside_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    // Two frames ending 8 bytes before the segment's end, then 8 bytes of
    // garbage: the seal cannot fit a padding frame there.
    let payloads = vec![vec![1u8; 30688], vec![2u8; 30696]];
    let path = segment(dir.path(), 1, &payloads, &[0xAB; 8]);
    let (wal, rep) = Wal::open(dir.path(), cfg()).unwrap();
    assert_eq!(rep.records, 2);
    assert!(rep.truncated.is_some(), "{rep:?}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        SEG,
        "recovery wrote past the segment"
    );
    let t = wal.append(0, b"next").unwrap();
    t.wait(Level::Durable).unwrap();
    assert_eq!(t.lsn(), 3);
    wal.close().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    let got: Vec<_> = wal
        .reader_from(0)
        .unwrap()
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(
        got,
        vec![payloads[0].clone(), payloads[1].clone(), b"next".to_vec()]
    );
}
