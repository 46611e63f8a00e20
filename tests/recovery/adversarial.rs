//! Hand-built segment files that no writer produces but a damaged or
//! hostile directory can hold (found by the recovery fuzzer): recovery must
//! refuse them or repair them without writing outside the segment, and
//! `verify` must predict what a strict open does with each of them.

use crate::common::{self, open_checked};
use ringwal::format::{self, Kind, SegmentHeader};
use ringwal::{Config, Error, Level, RecoveryMode, Wal};

const SEG: u64 = 64 << 10;
const SALT: u64 = 0x5eed_5eed_5eed_5eed;

fn cfg() -> Config {
    Config::builder()
        .segment_bytes(SEG)
        .max_record_bytes(32 << 10)
        .build()
}

/// `cfg()` in point-in-time recovery mode.
fn pit_cfg() -> Config {
    Config::builder()
        .segment_bytes(SEG)
        .max_record_bytes(32 << 10)
        .recovery(RecoveryMode::PointInTime)
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
        version: 1,
        log_id: 0,
        key_id: 0,
        key_check: 0,
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
        match open_checked(dir.path(), cfg()) {
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
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
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
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
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

/// A header-only ("blank") file, as a crash between creating a segment and
/// writing its header leaves it.
/// A segment file as a crash mid-create leaves it: preallocated to the
/// segment size, nothing written.
fn blank(dir: &std::path::Path, base: u64) -> std::path::PathBuf {
    let path = dir.join(format::segment_file_name(1, base));
    std::fs::write(&path, vec![0u8; SEG as usize]).unwrap();
    path
}

fn payloads_of(wal: &Wal) -> Vec<(u64, Vec<u8>)> {
    wal.reader_from(0)
        .unwrap()
        .map(|r| r.map(|r| (r.lsn, r.payload)).unwrap())
        .collect()
}

#[test]
fn a_blank_file_named_out_of_lsn_range_is_corruption_not_a_place_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = blank(dir.path(), u64::MAX);
    match open_checked(dir.path(), cfg()) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, path),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let v = ringwal::verify::verify(dir.path(), &cfg()).unwrap();
    assert_eq!(
        v.consistent(),
        Some(false),
        "verify must agree with open: {v:?}"
    );

    // Point-in-time discards it and starts the log at 1.
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).unwrap();
    assert_eq!(rep.discarded, vec![path]);
    let t = wal.append(0, b"first").unwrap();
    assert_eq!(t.lsn(), 1);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
}

#[test]
fn appends_stop_at_the_lsn_limit_instead_of_wrapping() {
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), format::MAX_LSN, &[b"last".to_vec()], &[]);
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert_eq!(rep.last_lsn, format::MAX_LSN);
    match wal.append(0, b"one too many") {
        Err(Error::LsnExhausted { next }) => assert_eq!(next, format::MAX_LSN + 1),
        other => panic!("expected LsnExhausted, got {other:?}"),
    }
    // Nothing was reserved: the log is still whole and reopens as it was.
    wal.close().unwrap();
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert_eq!((rep.records, rep.last_lsn), (1, format::MAX_LSN));
    wal.close().unwrap();
}

/// A blank newest file named past the last record + 1 is not a crash
/// mid-roll. Strict open and verify both call it a gap; point-in-time
/// recovery discards it and resumes right after the last record, never at
/// the blank file's name (which would break the LSN sequence inside the
/// active segment and lose the next acknowledged record on reopen).
#[test]
fn a_blank_file_past_the_end_is_a_gap_and_never_where_the_log_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let recs = vec![b"one".to_vec(), b"two".to_vec()];
    segment(dir.path(), 1, &recs, &[]);
    let far = blank(dir.path(), 1000);
    match open_checked(dir.path(), cfg()) {
        Err(Error::Gap {
            file,
            expected,
            found,
        }) => assert_eq!((file, expected, found), (far.clone(), 3, 1000)),
        other => panic!("expected Gap, got {other:?}"),
    }
    let v = ringwal::verify::verify(dir.path(), &cfg()).unwrap();
    assert!(
        matches!(v.problems.as_slice(), [Error::Gap { found: 1000, .. }]),
        "verify must report the same gap: {:?}",
        v.problems
    );

    let (wal, _) = open_checked(dir.path(), pit_cfg()).unwrap();
    assert_eq!(wal.next_lsn(), 3);
    let t = wal.append(0, b"three").unwrap();
    assert_eq!(t.lsn(), 3);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert!(rep.truncated.is_none(), "{rep:?}");
    assert_eq!(
        payloads_of(&wal),
        vec![
            (1, recs[0].clone()),
            (2, recs[1].clone()),
            (3, b"three".to_vec())
        ]
    );
    wal.close().unwrap();
}

/// After a cut nothing non-zero is left behind the seal, even beyond the
/// torn window: otherwise a later open, its window moved forward by new
/// appends, finds the leftovers and cuts again.
#[test]
fn a_cut_clears_the_rest_of_the_segment_so_recovery_is_idempotent() {
    let small = || {
        Config::builder()
            .segment_bytes(SEG)
            .max_record_bytes(1024)
            .write_bytes(4096)
            .max_inflight(2)
            .build()
    };
    let window = small().torn_window();
    assert!(window < SEG / 2, "the test needs room beyond the window");
    let dir = tempfile::tempdir().unwrap();
    let path = segment(dir.path(), 1, &[b"kept".to_vec()], &[0xff; 8]);
    let far = (SEG - 4096) as usize;
    {
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[far..far + 8].fill(0xee);
        std::fs::write(&path, bytes).unwrap();
    }
    let (wal, rep) = open_checked(dir.path(), small()).unwrap();
    let cut = rep.truncated.clone().expect("the garbage is a torn tail");
    assert_eq!(
        cut.offset,
        format::BLOCK as u64 + format::frame_len(4) as u64
    );
    let bytes = std::fs::read(&path).unwrap();
    let sealed = (cut.offset as usize).next_multiple_of(format::BLOCK);
    assert!(
        bytes[sealed..].iter().all(|&b| b == 0),
        "bytes left after the seal"
    );
    // Enough appends (one block each) to carry the window past `far`.
    for i in 0..12u8 {
        wal.append(0, &[i + 1; 100])
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    wal.close().unwrap();
    let (wal, rep) = open_checked(dir.path(), small()).unwrap();
    assert!(rep.truncated.is_none(), "cut again: {rep:?}");
    assert_eq!(rep.records, 13);
    wal.close().unwrap();
}

/// Frames that end a few bytes short of the segment's end, followed by
/// zeros, are a full segment: nothing to cut, and the next append rolls.
#[test]
fn a_zero_tail_too_short_for_a_frame_is_a_full_segment() {
    let dir = tempfile::tempdir().unwrap();
    // 4096 + 30712 + 30712 = 65520: 16 zero bytes remain.
    let payloads = vec![vec![1u8; 30688], vec![2u8; 30688]];
    segment(dir.path(), 1, &payloads, &[]);
    for round in 0..2 {
        let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
        assert!(rep.truncated.is_none(), "round {round}: {rep:?}");
        let t = wal.append(0, &[round + 3; 10]).unwrap();
        t.wait(Level::Durable).unwrap();
        assert_eq!(t.lsn(), 3 + round as u64);
        wal.close().unwrap();
    }
    assert!(dir.path().join(format::segment_file_name(1, 3)).exists());
}

/// Point-in-time: the segment left newest after later ones are set aside
/// keeps nothing past its valid prefix, so the next open (which judges it
/// as the newest) finds nothing to cut; and the log resumes above every
/// LSN on disk (the set-aside segment held LSN 4), recording the LSNs it
/// gave up as skipped rather than handing them out again.
#[test]
fn point_in_time_clears_the_segment_it_resumes_in() {
    let dir = tempfile::tempdir().unwrap();
    let recs = vec![b"one".to_vec(), b"two".to_vec()];
    let first = segment(dir.path(), 1, &recs, &[]);
    {
        // Stale bytes beyond the end of data, on no block boundary.
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[3 * format::BLOCK + 100..3 * format::BLOCK + 108].fill(0xff);
        std::fs::write(&first, bytes).unwrap();
    }
    // A blank file that is not the newest is corrupt: the recovery point.
    blank(dir.path(), 3);
    segment(dir.path(), 4, &[b"four".to_vec()], &[]);
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).unwrap();
    assert_eq!(rep.discarded.len(), 2, "{rep:?}");
    assert!(
        rep.truncated.is_some(),
        "stale bytes must be cleared: {rep:?}"
    );
    assert_eq!(rep.skipped, Some((3, 4)), "{rep:?}");
    let t = wal.append(0, b"five").unwrap();
    assert_eq!(t.lsn(), 5);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert!(rep.truncated.is_none(), "cut again: {rep:?}");
    let read: Vec<_> = wal
        .reader_from(0)
        .unwrap()
        .map(|r| r.unwrap().lsn)
        .collect();
    assert_eq!(read, [1, 2, 5], "the LSNs given up are stepped over");
    assert!(
        matches!(
            wal.read(3),
            Err(Error::GivenUp {
                first: 3,
                last: 4,
                ..
            })
        ),
        "{:?}",
        wal.read(3)
    );
    let after: Vec<_> = wal
        .reader_from(5)
        .unwrap()
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(after, vec![b"five".to_vec()]);
    wal.close().unwrap();
}

/// The configured record limit bounds appends only. A log whose limit is
/// below a block (its batches end in padding frames larger than any
/// record), or one reopened with a smaller limit than it was written
/// with, must recover every acknowledged record.
#[test]
fn the_record_limit_never_hides_written_frames() {
    let with_max = |max: usize| {
        Config::builder()
            .segment_bytes(SEG)
            .max_record_bytes(max)
            .build()
    };
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open_checked(dir.path(), with_max(8 << 10)).unwrap();
    let mut want = Vec::new();
    // Durable one at a time: every batch ends mid-block and is padded.
    for i in 0..40u64 {
        let body = vec![i as u8 + 1; if i % 5 == 0 { 6000 } else { 300 }];
        let t = wal.append(0, &body).unwrap();
        t.wait(Level::Durable).unwrap();
        want.push((t.lsn(), body));
    }
    wal.close().unwrap();
    for max in [512, 8 << 10] {
        let (wal, rep) = open_checked(dir.path(), with_max(max)).unwrap();
        assert!(rep.truncated.is_none(), "max {max}: {rep:?}");
        assert_eq!(payloads_of(&wal), want, "max {max}");
        let v = ringwal::verify::verify(dir.path(), &with_max(max)).unwrap();
        assert_eq!(v.consistent(), Some(true), "max {max}: {:?}", v.problems);
        wal.close().unwrap();
    }
}

/// A segment set aside by point-in-time recovery never overwrites an
/// earlier one set aside under the same name: the evidence of every
/// recovery is kept.
#[test]
fn set_aside_segments_never_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), 1, &[b"one".to_vec(), b"two".to_vec()], &[]);
    // Base 3 with a header naming base 4: corrupt, the recovery point.
    let bad = segment(dir.path(), 4, &[b"four".to_vec()], &[]);
    let named3 = dir.path().join(format::segment_file_name(1, 3));
    std::fs::rename(&bad, &named3).unwrap();
    let taken = dir
        .path()
        .join(format!("{}.corrupt", format::segment_file_name(1, 3)));
    std::fs::write(&taken, b"an earlier recovery's evidence").unwrap();
    let contents = std::fs::read(&named3).unwrap();
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).unwrap();
    assert_eq!(rep.discarded, vec![named3.clone()], "{rep:?}");
    wal.close().unwrap();
    assert_eq!(
        std::fs::read(&taken).unwrap(),
        b"an earlier recovery's evidence"
    );
    let next = dir
        .path()
        .join(format!("{}.corrupt.1", format::segment_file_name(1, 3)));
    assert_eq!(std::fs::read(&next).unwrap(), contents);
}

/// A log written in format version 1 (one header block, frames at 4096,
/// no vouches, no manifest) opens and reads back whole; the next append
/// starts a segment of the current version beside it rather than write
/// its frames into a version-1 one, and the log then has a manifest and
/// reopens strictly.
#[test]
fn a_version_1_log_opens_and_continues_in_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let recs = vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()];
    let v1 = segment(dir.path(), 1, &recs, &[]);
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert_eq!((rep.records, rep.last_lsn), (3, 3), "{rep:?}");
    let t = wal.append(0, b"four").unwrap();
    assert_eq!(t.lsn(), 4);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let header = |p: &std::path::Path| SegmentHeader::decode(&std::fs::read(p).unwrap()).unwrap();
    assert_eq!(
        header(&v1).version,
        1,
        "the version-1 segment was not rewritten"
    );
    let current = dir.path().join(format::segment_file_name(1, 4));
    assert_eq!(header(&current).version, format::FORMAT_VERSION);
    assert!(dir.path().join(format::manifest_file_name(1)).exists());
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
    let mut all = recs.clone();
    all.push(b"four".to_vec());
    let got: Vec<Vec<u8>> = wal
        .reader_from(0)
        .unwrap()
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(got, all);
    wal.close().unwrap();
}

/// A version-2 segment of log `log_id`, node 1, base 1, as a version-2
/// writer lays it out: header and copy, then one write per element of
/// `writes`, each opened by an 8-byte vouch for the LSNs before it and
/// closed with padding; then a clean close's vouch block.
fn v2_segment(dir: &std::path::Path, log_id: u64, writes: &[&[&[u8]]]) -> std::path::PathBuf {
    let mut buf = vec![0u8; SEG as usize];
    SegmentHeader {
        version: 2,
        log_id,
        key_id: 0,
        key_check: 0,
        node: 1,
        base_lsn: 1,
        segment_bytes: SEG,
        salt: SALT,
        created_unix_ms: 0,
        torn_window: 0,
    }
    .encode_blocks(&mut buf);
    let vouch = |durable| format::Vouch {
        durable,
        submitted_unix_ns: None,
        nonce_salt: None,
    };
    let mut off = format::HEADER_BYTES;
    let mut lsn = 1;
    for w in writes {
        off += format::encode_vouch(&mut buf[off..], SALT, vouch(lsn - 1));
        for p in *w {
            off += format::encode_frame(&mut buf[off..], SALT, lsn, 0, Kind::Data, p);
            lsn += 1;
        }
        let pad = format::padding_len(off as u64);
        format::encode_padding(&mut buf[off..], SALT, pad);
        off += pad;
    }
    let n = format::encode_vouch(&mut buf[off..], SALT, vouch(lsn - 1));
    format::encode_padding(&mut buf[off + n..], SALT, format::BLOCK - n);
    let path = dir.join(format::segment_file_name(1, 1));
    std::fs::write(&path, &buf).unwrap();
    path
}

/// The payload lengths of the vouch frames of the segment at `path`.
fn vouch_payloads(path: &std::path::Path) -> Vec<usize> {
    let s = common::scan_segment(path);
    s.frames
        .iter()
        .filter(|f| f.kind == Kind::Vouch)
        .map(|f| f.payload.len())
        .collect()
}

/// A log of format version 2 reads as before (its records have no write
/// time); an open that appends nothing closes its version-2 segment with
/// a version-2 vouch; the first append goes to a new segment of the
/// current version, whose records have one.
#[test]
fn a_version_2_log_reads_as_before_and_continues_in_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = v2_segment(dir.path(), 77, &[&[b"one", b"two"], &[b"three"]]);
    let recs: Vec<Vec<u8>> = vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()];
    for round in 0..2 {
        let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
        assert_eq!((rep.records, rep.last_lsn), (3, 3), "open {round}: {rep:?}");
        let got = common::read_all(&wal);
        common::assert_records(&got, 1, &recs, "a version-2 log");
        assert!(got.iter().all(|r| r.written_at.is_none()), "{got:?}");
        wal.close().unwrap();
        // Each close vouched once more, in the segment's own shape.
        assert_eq!(vouch_payloads(&v2), vec![8; 4 + round]);
        assert_eq!(common::scan_segment(&v2).header.version, 2);
    }
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
    let before = std::time::SystemTime::now();
    let t = wal.append(0, b"four").unwrap();
    assert_eq!(t.lsn(), 4);
    t.wait(Level::Durable).unwrap();
    let after = std::time::SystemTime::now();
    wal.close().unwrap();
    assert_eq!(
        vouch_payloads(&v2),
        vec![8; 5],
        "the version-2 segment got no record"
    );
    let v4 = dir.path().join(format::segment_file_name(1, 4));
    assert_eq!(
        common::scan_segment(&v4).header.version,
        format::FORMAT_VERSION
    );
    // Its write's vouch and the closing one: 24 bytes each (a time and
    // the writer's nonce salt).
    assert_eq!(vouch_payloads(&v4), vec![24, 24]);
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
    let got = common::read_all(&wal);
    assert_eq!(got.len(), 4);
    assert!(got[..3].iter().all(|r| r.written_at.is_none()));
    let at = got[3]
        .written_at
        .expect("a version-4 record has a write time");
    assert!(
        before <= at && at <= after,
        "{before:?} <= {at:?} <= {after:?}"
    );
    wal.close().unwrap();
}

/// Point-in-time recovery that must skip LSNs but keeps a segment filled
/// to its last byte: the skip opens a new segment instead (it used to fail
/// the open), the next append gets the LSN after every one ever handed
/// out, and the log reopens strictly.
#[test]
fn a_skip_after_a_full_segment_opens_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    // Fifteen 4 KiB frames fill a 64 KiB version-1 segment exactly.
    let full: Vec<Vec<u8>> = (0..15u8).map(|i| vec![i; 4096 - 24]).collect();
    segment(dir.path(), 1, &full, &[]);
    // The next segment's header names another node: the recovery point.
    let bad = segment(dir.path(), 16, &[b"sixteen".to_vec()], &[]);
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[16] = 2;
    std::fs::write(&bad, &bytes).unwrap();
    // The manifest says LSNs up to 20 were handed out.
    let m = format::Manifest {
        node: 1,
        log_id: 7,
        newest_base: 16,
        durable_lsn: 15,
        handed_out: 20,
        oldest_lsn: 1,
    };
    std::fs::write(dir.path().join(format::manifest_file_name(1)), m.encode()).unwrap();
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).unwrap();
    assert_eq!(rep.skipped, Some((16, 20)), "{rep:?}");
    let t = wal.append(0, b"twenty-one").unwrap();
    assert_eq!(t.lsn(), 21);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
    let read: Vec<_> = wal
        .reader_from(0)
        .unwrap()
        .map(|r| r.unwrap().lsn)
        .collect();
    let want: Vec<u64> = (1..=15).chain([21]).collect();
    assert_eq!(read, want, "the LSNs given up are stepped over");
    assert!(matches!(
        wal.read(20),
        Err(Error::GivenUp {
            first: 16,
            last: 20,
            ..
        })
    ));
    let after: Vec<_> = wal
        .reader_from(21)
        .unwrap()
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(after, vec![b"twenty-one".to_vec()]);
    wal.close().unwrap();
}

/// A version-2 log whose first manifest a crash kept from being written
/// still opens: its segments are held to the log id they carry, not to a
/// new one (which made them "of another log").
#[test]
fn a_version_2_log_without_its_manifest_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    for i in 0..5u8 {
        wal.append(0, &[i; 10])
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    wal.close().unwrap();
    std::fs::remove_file(dir.path().join(format::manifest_file_name(1))).unwrap();
    let (wal, rep) = open_checked(dir.path(), cfg()).unwrap();
    assert_eq!(rep.records, 5);
    assert_eq!(payloads_of(&wal).len(), 5);
    wal.close().unwrap();
    let (wal, _) = open_checked(dir.path(), cfg()).unwrap();
    assert_eq!(payloads_of(&wal).len(), 5);
    wal.close().unwrap();
}

/// Only the newest file may be one a crash left never written; a second
/// blank file before it is damage, not another crash.
#[test]
fn only_the_newest_never_written_file_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    // A sealed segment as a writer leaves it: its one write closed with
    // padding to the block's end.
    let mut pad = vec![0u8; format::BLOCK - format::frame_len(3)];
    let n = pad.len();
    format::encode_padding(&mut pad, SALT, n);
    segment(dir.path(), 1, &[b"one".to_vec()], &pad);
    let older = blank(dir.path(), 2);
    blank(dir.path(), 3);
    let segments = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "wal")
            })
            .count()
    };
    match open_checked(dir.path(), cfg()) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, older),
        other => panic!("expected Corrupt for the older blank file, got {other:?}"),
    }
    assert_eq!(segments(), 3, "a failed open removed a file");
}

/// A file named with base LSN 0 (no writer makes one) is set aside by a
/// point-in-time open without the name's `base - 1` wrapping round to the
/// end of the LSN space, which made the open fail with `LsnExhausted`
/// (fuzz finding W1).
#[test]
fn a_set_aside_file_named_base_zero_does_not_exhaust_the_lsns() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join(format::segment_file_name(1, 0));
    std::fs::write(&zero, vec![0xA5u8; SEG as usize]).unwrap();
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).expect("point-in-time open");
    assert_eq!(rep.discarded, vec![zero], "{rep:?}");
    assert_eq!(wal.append(0, b"first").unwrap().lsn(), 1);
    wal.close().unwrap();
}

/// A version-2 log without its manifest, behind a newest file whose
/// header does not read: point-in-time recovery sets that file aside and
/// must keep the log id the surviving segments carry, not draw a new one
/// that makes them "of another log" (fuzz finding W2).
#[test]
fn a_log_without_manifest_keeps_its_id_when_the_newest_file_is_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), cfg()).unwrap();
    for i in 0..5u8 {
        let _ = wal.append(0, &[i; 10]).unwrap();
    }
    wal.sync().unwrap();
    let next = wal.next_lsn();
    wal.close().unwrap();
    std::fs::remove_file(dir.path().join(format::manifest_file_name(1))).unwrap();
    let junk = dir.path().join(format::segment_file_name(1, next));
    std::fs::write(&junk, vec![0x5Au8; SEG as usize]).unwrap();
    let (wal, rep) = open_checked(dir.path(), pit_cfg()).expect("point-in-time open");
    assert_eq!(rep.discarded, vec![junk], "{rep:?}");
    assert_eq!(payloads_of(&wal).len(), 5);
    wal.close().unwrap();
    let (wal, _) = open_checked(dir.path(), cfg()).expect("strict reopen");
    assert_eq!(payloads_of(&wal).len(), 5);
    wal.close().unwrap();
}

/// The newest segment cut short after a clean close (its records were
/// durable, the manifest says so): every reader of the directory ends
/// with the `Lost` the open fails with, never a quiet end; a directory
/// with no log is `NoLog`.
#[test]
fn readers_of_a_directory_end_with_the_loss_an_open_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (wal, _) = Wal::open(&dir, cfg()).unwrap();
    for i in 0..300u32 {
        let _ = wal.append(1, &i.to_le_bytes().repeat(100)).unwrap();
    }
    wal.close().unwrap();
    let newest = common::segment_files(&dir, 1).pop().unwrap().1;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(format::HEADER_BYTES as u64 + 4096)
        .unwrap();

    let open = Wal::open(&dir, cfg()).map(|_| ()).unwrap_err();
    assert!(matches!(open, Error::Lost { durable: 300, .. }), "{open}");
    // Read as a tool with the default configuration reads it.
    let node1 = ringwal::Config::builder().node(1).build();
    let read: Vec<_> = ringwal::verify::records(&dir, &node1, 0).unwrap().collect();
    let (last, ok) = read.split_last().unwrap();
    assert!(ok.iter().all(|r| r.is_ok()));
    match last {
        Err(Error::Lost { durable, file, .. }) => {
            assert_eq!((*durable, file), (300, &newest));
        }
        other => panic!("the read ended without the loss: {other:?}"),
    }
    let from_late: Vec<_> = ringwal::verify::records(&dir, &node1, 290)
        .unwrap()
        .collect();
    assert!(
        matches!(from_late.last(), Some(Err(Error::Lost { .. }))),
        "{from_late:?}"
    );

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for no_log in [&empty, &tmp.path().join("missing"), &newest] {
        let e = ringwal::verify::records(no_log, &node1, 0)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, Error::NoLog { node: 1, .. }), "{e}");
    }
}
