//! Recovery through the library API, on real files: torn tails at every
//! offset, corruption and gaps that must fail `open`, incomplete newest
//! files, locking, checkpoints, limits, ticket futures and many producers.
//! Every test runs against both backends.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::format::{self, Kind};
use ringwal::{Backend, Error, Level, Wal};

const BLOCK: u64 = format::BLOCK as u64;

/// Append bursts of records (a burst is appended without waiting, so one
/// write carries several frames) until the directory holds at least
/// `min_segments` segments and the newest holds at least `min_blocks`
/// blocks of frames. `payloads[i]` is the payload of LSN `i + 1`.
fn fill(
    wal: &Wal,
    rng: &mut StdRng,
    payloads: &mut Vec<Vec<u8>>,
    min_segments: usize,
    min_blocks: u64,
) {
    loop {
        let burst = rng.gen_range(1..=40);
        let mut last = None;
        for _ in 0..burst {
            let p = payload(rng, payloads.len() as u64 + 1);
            let t = wal.append(0, &p).expect("append");
            assert_eq!(t.lsn(), payloads.len() as u64 + 1, "LSNs are dense");
            payloads.push(p);
            last = Some(t);
        }
        last.expect("burst is non-empty")
            .wait(Level::Durable)
            .expect("wait durable");
        let segs = segment_files(wal.dir(), wal.config().node());
        if segs.len() >= min_segments {
            let newest = scan_segment(&segs.last().expect("a segment").1);
            if newest.data_end >= BLOCK + min_blocks * BLOCK {
                return;
            }
        }
    }
}

/// A closed log in `dir` with at least `min_segments` segments; returns
/// the payloads by LSN.
fn build_log(dir: &Path, backend: Backend, rng: &mut StdRng, min_segments: usize) -> Vec<Vec<u8>> {
    let (wal, report) = Wal::open(dir, cfg(backend)).expect("open new log");
    assert!(report.created);
    let mut payloads = Vec::new();
    fill(&wal, rng, &mut payloads, min_segments, 3);
    wal.close().expect("close");
    payloads
}

fn expect_corrupt_or_gap(
    res: ringwal::Result<(Wal, ringwal::RecoveryReport)>,
    what: &str,
) -> Error {
    match res {
        Ok((_, report)) => panic!("{what}: open succeeded silently: {report:?}"),
        Err(e @ (Error::Corrupt { .. } | Error::Gap { .. })) => e,
        Err(e) => panic!("{what}: expected Corrupt or Gap, got {e:?}"),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

// ---------------------------------------------------------------------------
// 1. Torn tail at every 8-byte offset of the last two data blocks.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// Zero from the offset to the end of the written data: a write that
    /// never reached a preallocated file past that point.
    Zeros,
    /// Same, then random bytes from the offset to the end of its block.
    Garbage,
}

#[test]
fn torn_tail_at_every_offset_recovers_the_prefix() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("torn_tail_at_every_offset");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let payloads = build_log(&log, backend, &mut rng, 2);
        let segs = segment_files(&log, NODE);
        let (newest_base, newest_path) = segs.last().unwrap().clone();
        let newest = scan_segment(&newest_path);
        let prior = newest_base - 1;
        assert_eq!(
            prior + newest.records().count() as u64,
            payloads.len() as u64,
            "the segments hold every record"
        );
        let end = newest.data_end;
        assert_eq!(end % BLOCK, 0, "a closed log ends every write on a block");
        let from = ((end - 1) / BLOCK * BLOCK).saturating_sub(BLOCK).max(BLOCK);
        eprintln!(
            "newest segment {} (base {newest_base}): data ends at {end}; cutting at every 8 bytes in {from}..={end}",
            file_name(&newest_path)
        );
        // Every case is independent (its own copy of the directory); run
        // them on a few threads, since each open and close waits on syncs.
        // Plus the first frame of the segment: a newest segment left with
        // a header and no record at all.
        // Garbage needs a byte to land on: not at the end of a segment
        // whose data fills it to the last byte.
        let len = newest.bytes.len() as u64;
        let cases: Vec<(u64, Damage)> = std::iter::once(BLOCK)
            .filter(|&b| b < from)
            .chain((from..=end).step_by(8))
            .flat_map(|at| {
                let garbage = (at < len).then_some((at, Damage::Garbage));
                std::iter::once((at, Damage::Zeros)).chain(garbage)
            })
            .collect();
        let garbage_seed: u64 = rng.gen();
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..TORN_WORKERS {
                s.spawn(|| loop {
                    let Some(&(at, damage)) = cases.get(next.fetch_add(1, Ordering::Relaxed))
                    else {
                        return;
                    };
                    let mut garbage = StdRng::seed_from_u64(garbage_seed ^ at);
                    let case = TornCase {
                        root: root.path(),
                        log: &log,
                        backend,
                        newest_path: &newest_path,
                        newest: &newest,
                        prior,
                        payloads: &payloads,
                    };
                    case.run(at, damage, &mut garbage);
                });
            }
        });
        let cases = cases.len();
        eprintln!("{cases} torn-tail cases recovered");
    });
}

/// The test configuration with writes of at most 64 KiB (one segment)
/// instead of 1 MiB: the same log, but each open allocates 640 KiB of
/// staging buffers instead of 10 MiB, which is most of an open's cost and
/// the torn-tail test opens each of its four thousand copies twice.
fn torn_cfg(backend: Backend) -> ringwal::Config {
    small(backend).write_bytes(64 << 10).build()
}

/// Threads running torn-tail cases side by side.
const TORN_WORKERS: usize = 8;

/// The intact log and what is known about its newest segment.
struct TornCase<'a> {
    root: &'a Path,
    log: &'a Path,
    backend: Backend,
    newest_path: &'a Path,
    newest: &'a common::Scanned,
    prior: u64,
    payloads: &'a [Vec<u8>],
}

impl TornCase<'_> {
    /// Damage a copy of the log from `at` on, recover it, check the result,
    /// append, and check the append survives a reopen.
    fn run(&self, at: u64, damage: Damage, rng: &mut StdRng) {
        let TornCase {
            root,
            log,
            backend,
            newest_path,
            newest,
            prior,
            payloads,
        } = *self;
        let what = format!("{damage:?} from offset {at}");
        let work = root.join(format!("case-{at}-{damage:?}"));
        copy_dir(log, &work);
        let target = work.join(newest_path.file_name().unwrap());

        let orig = &newest.bytes;
        let mut img = orig.clone();
        let (at_u, end_u) = (at as usize, newest.data_end as usize);
        img[at_u..end_u].fill(0);
        if damage == Damage::Garbage {
            let stop = ((at + 1).next_multiple_of(BLOCK) as usize).min(img.len());
            rng.fill(&mut img[at_u..stop]);
            img[at_u] |= 1; // never a zero frame header
        }
        std::fs::write(&target, &img).unwrap();

        // What recovery must find: every frame before the first one the damage
        // changed; the cut goes at that frame's start.
        let mut cut = newest.data_end;
        let mut kept = 0u64;
        for f in &newest.frames {
            let r = f.start as usize..f.end as usize;
            if img[r.clone()] != orig[r] {
                cut = f.start;
                break;
            }
            if f.kind != Kind::Padding {
                kept += 1;
            }
        }
        // The spec's statement of the same thing (payloads hold no zero byte,
        // so any damage inside a data frame changes it).
        assert_eq!(
            kept,
            newest.records().filter(|f| f.end <= at).count() as u64,
            "{what}: test oracle disagrees with itself"
        );
        // A never-written block boundary is a clean end; anything else is a cut.
        let clean_end = cut % BLOCK == 0 && img[cut as usize..].iter().all(|&b| b == 0);
        let n = prior + kept;

        let (wal, report) = Wal::open(&work, torn_cfg(backend))
            .unwrap_or_else(|e| panic!("{what}: open must recover a torn tail, got {e:?}"));
        assert_eq!(report.records, n, "{what}: report.records {report:?}");
        assert_eq!(report.last_lsn, n, "{what}: report.last_lsn {report:?}");
        match (&report.truncated, clean_end) {
            (None, true) => {}
            (Some(t), false) => {
                assert_eq!(t.offset, cut, "{what}: truncation offset {t:?}");
                assert_eq!(t.file, target, "{what}: truncated file");
            }
            (t, _) => {
                panic!(
                    "{what}: expected a cut at {cut} (clean end: {clean_end}), report says {t:?}"
                )
            }
        }
        assert_eq!(wal.next_lsn(), n + 1, "{what}: next LSN");
        assert_records(&read_all(&wal), 1, &payloads[..n as usize], &what);

        let t = wal.append(3, b"after the cut").unwrap();
        assert_eq!(
            t.lsn(),
            n + 1,
            "{what}: the first append continues the LSNs"
        );
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();

        let (wal, report) = Wal::open(&work, torn_cfg(backend))
            .unwrap_or_else(|e| panic!("{what}: reopen after the repair failed: {e:?}"));
        assert_eq!(report.records, n + 1, "{what}: reopen {report:?}");
        assert!(
            report.truncated.is_none(),
            "{what}: second recovery cut again: {report:?}"
        );
        // The recovered prefix was checked above; read from the last of it.
        let recs: Vec<_> = wal
            .reader_from(n.max(1))
            .unwrap()
            .collect::<ringwal::Result<_>>()
            .unwrap_or_else(|e| panic!("{what}: reading after reopen: {e}"));
        let last = recs.last().unwrap();
        assert_eq!((last.lsn, last.stream), (n + 1, 3), "{what}");
        assert_eq!(last.payload, b"after the cut", "{what}");
        wal.close().unwrap();
        std::fs::remove_dir_all(&work).unwrap();
    }
}

/// Writes can complete out of order: a later write may land while an
/// earlier one never does. A lost block in the newest segment with valid
/// frames after it (within the torn window) is a torn tail: recovery keeps
/// the frames before it, and must erase the ones after, or they would
/// resurface behind the next appends.
#[test]
fn lost_block_before_later_writes_is_a_torn_tail() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("lost_block_before_later_writes");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        let mut payloads = Vec::new();
        // Every block-aligned frame start with a later write (a frame at a
        // later block boundary) left intact after its block. The newest
        // segment may have taken its blocks in one write (how appends group
        // depends on timing): append more until it holds two writes.
        let (base, newest_path, newest, starts) = loop {
            fill(&wal, &mut rng, &mut payloads, 2, 6);
            let (base, newest_path) = segment_files(&log, NODE).last().unwrap().clone();
            let newest = scan_segment(&newest_path);
            let aligned: Vec<u64> = newest
                .frames
                .iter()
                .map(|f| f.start)
                .filter(|&s| s % BLOCK == 0)
                .collect();
            let starts: Vec<u64> = aligned
                .iter()
                .copied()
                .filter(|&s| aligned.iter().any(|&later| later >= s + BLOCK))
                .collect();
            if !starts.is_empty() {
                break (base, newest_path, newest, starts);
            }
        };
        wal.close().unwrap();
        for (i, &lost) in starts.iter().enumerate() {
            let what = format!("block at {lost} lost");
            let work = root.path().join(format!("lost-{i}"));
            copy_dir(&log, &work);
            let target = work.join(newest_path.file_name().unwrap());
            let mut img = newest.bytes.clone();
            img[lost as usize..(lost + BLOCK) as usize].fill(0);
            std::fs::write(&target, &img).unwrap();
            let n = base - 1 + newest.records().filter(|f| f.end <= lost).count() as u64;

            let (wal, report) = Wal::open(&work, cfg(backend))
                .unwrap_or_else(|e| panic!("{what}: expected a torn tail, got {e}"));
            assert_eq!(report.records, n, "{what}: {report:?}");
            assert_eq!(
                report.truncated.as_ref().map(|t| t.offset),
                Some(lost),
                "{what}: valid frames after a zero block must be cut: {report:?}"
            );
            assert_records(&read_all(&wal), 1, &payloads[..n as usize], &what);
            // Appends that write less than what was cut: stale frames must
            // not reappear behind them.
            for k in 0..3u8 {
                let t = wal.append(0, &[b'n', b'0' + k]).unwrap();
                assert_eq!(t.lsn(), n + 1 + k as u64, "{what}");
                t.wait(Level::Durable).unwrap();
            }
            wal.close().unwrap();
            let (wal, report) = Wal::open(&work, cfg(backend))
                .unwrap_or_else(|e| panic!("{what}: reopen after appending: {e}"));
            assert_eq!(report.records, n + 3, "{what}: {report:?}");
            assert!(report.truncated.is_none(), "{what}: {report:?}");
            let recs = read_all(&wal);
            assert_eq!(recs.len() as u64, n + 3, "{what}");
            assert_eq!(recs.last().unwrap().payload, b"n2", "{what}");
            wal.close().unwrap();
            std::fs::remove_dir_all(&work).unwrap();
        }
    });
}

/// The same lost first block, but the write's surviving second block holds
/// frames only at mid-block offsets, so no valid frame starts on a block
/// boundary after the loss. Those frames carry this segment's salt. The
/// next life writes over the loss; if one of its writes is torn in turn
/// (its first sectors land, the rest keep whatever the disk held), a stale
/// frame from the earlier life must not be read back as part of the log:
/// neither resurrected behind the new record nor turned into `Corrupt`.
#[test]
fn stale_frames_after_a_lost_block_never_resurface() {
    for_each_backend(|backend| {
        for stale_gap in [1u64, 6] {
            stale_case(backend, stale_gap);
        }
    });
}

/// `stale_gap`: the stale frame's LSN minus the first LSN the new life
/// appends (1: it would continue the sequence; more: it would break it).
fn stale_case(backend: Backend, stale_gap: u64) {
    let what = format!("{backend:?}, stale frame at new first LSN + {stale_gap}");
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
    for i in 0..10u32 {
        let _ = wal.append(0, format!("old-{i}").as_bytes()).unwrap();
    }
    wal.sync().unwrap();
    wal.close().unwrap();
    let (_, path) = segment_files(&log, NODE).pop().unwrap();
    let seg = scan_segment(&path);
    let n = seg.records().count() as u64;
    let x = seg.data_end; // where the earlier life's lost write began
    assert_eq!(x % BLOCK, 0);
    assert!(
        x + 2 * BLOCK <= SEGMENT_BYTES,
        "{what}: room for the scenario"
    );

    // The earlier life's write [x, x + 2 blocks): frame A (LSN n+1, 4608
    // bytes) then frame B (LSN n+1+stale_gap) at p = x + 4608, then padding.
    // Its first block never landed; the second did.
    let a_len = 4608u64;
    let p = x + a_len;
    let salt = seg.header.salt;
    let mut img = seg.bytes.clone();
    let mut write = vec![0u8; 2 * format::BLOCK];
    let a_payload = vec![b'a'; a_len as usize - format::FRAME_HEADER];
    format::encode_frame(&mut write, salt, n + 1, 0, Kind::Data, &a_payload);
    let stale = b"stale record of an earlier life".to_vec();
    let b_at = a_len as usize;
    let b_len = format::encode_frame(
        &mut write[b_at..],
        salt,
        n + 1 + stale_gap,
        0,
        Kind::Data,
        &stale,
    );
    let pad_at = b_at + b_len;
    let pad = write.len() - pad_at;
    format::encode_padding(&mut write[pad_at..], salt, pad);
    let (xs, blk) = (x as usize, format::BLOCK);
    img[xs + blk..xs + 2 * blk].copy_from_slice(&write[blk..]);
    std::fs::write(&path, &img).unwrap();

    // The next life: recovers n records, then writes a record whose frame
    // ends exactly at p, where the stale frame B starts.
    let (wal, report) = Wal::open(&log, cfg(backend))
        .unwrap_or_else(|e| panic!("{what}: a lost block at the tail is a torn tail: {e}"));
    assert_eq!(report.records, n, "{what}: {report:?}");
    let before_write = std::fs::read(&path).unwrap();
    let t = wal.append(0, &a_payload).unwrap();
    assert_eq!(t.lsn(), n + 1);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let after = scan_segment(&path);
    let new_frame = after.frames.iter().find(|f| f.lsn == n + 1).unwrap();
    assert_eq!(
        (new_frame.start, new_frame.end),
        (x, p),
        "{what}: layout assumption"
    );

    // That write is torn: the sectors from p on keep what was on disk
    // before it (whatever recovery left there).
    let mut torn = std::fs::read(&path).unwrap();
    let end = (xs + 2 * blk).min(torn.len());
    torn[p as usize..end].copy_from_slice(&before_write[p as usize..end]);
    std::fs::write(&path, &torn).unwrap();

    let (wal, report) = Wal::open(&log, cfg(backend)).unwrap_or_else(|e| {
        panic!("{what}: a torn write after a recovered torn tail must recover, got {e}")
    });
    let recs = read_all(&wal);
    assert!(
        recs.iter().all(|r| r.payload != stale),
        "{what}: a frame of an earlier life was resurrected as LSN {:?}: {report:?}",
        recs.iter().find(|r| r.payload == stale).map(|r| r.lsn)
    );
    assert!((n..=n + 1).contains(&report.records), "{what}: {report:?}");
    wal.close().unwrap();
}

// ---------------------------------------------------------------------------
// 2. A flipped byte inside a sealed segment.

/// The oldest segment and a data frame in the middle of it.
fn middle_frame_of_oldest(log: &Path) -> (PathBuf, common::FrameInfo) {
    let segs = segment_files(log, NODE);
    assert!(segs.len() >= 3, "need sealed segments: {segs:?}");
    let (_, path) = segs[0].clone();
    let scanned = scan_segment(&path);
    let recs: Vec<_> = scanned.records().cloned().collect();
    assert!(recs.len() >= 3, "oldest segment holds too few records");
    (path, recs[recs.len() / 2].clone())
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn flipped_byte_in_sealed_segment_fails_open() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("flipped_byte_in_sealed_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 3);
        let (path, frame) = middle_frame_of_oldest(&log);
        let flip_at = frame.start + 24 + frame.payload.len() as u64 / 2;
        flip_byte(&path, flip_at);
        let before = dir_snapshot(&log);

        match Wal::open(&log, cfg(backend)) {
            Err(Error::Corrupt {
                file,
                offset,
                reason,
            }) => {
                assert_eq!(
                    file, path,
                    "Corrupt must name the damaged segment ({reason})"
                );
                assert!(
                    offset <= frame.start,
                    "Corrupt offset {offset} is past the damaged frame at {} ({reason})",
                    frame.start
                );
            }
            other => panic!("expected Corrupt for a flipped byte at {flip_at}, got {other:?}"),
        }
        assert_eq!(
            dir_snapshot(&log),
            before,
            "a failed open must not modify the log"
        );
    });
}

/// File names and contents of a directory, to check nothing was modified.
fn dir_snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The same damage under `RecoveryMode::PointInTime`: the log ends just
/// before the damaged frame, later segments are set aside as `.corrupt`
/// (kept, never read), appends continue densely, and a strict reopen then
/// accepts the result.
#[test]
fn point_in_time_recovery_stops_at_the_flipped_byte() {
    use ringwal::RecoveryMode;
    for_each_backend(|backend| {
        let mut rng = seeded_rng("point_in_time_recovery");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let payloads = build_log(&log, backend, &mut rng, 3);
        let segs = segment_files(&log, NODE);
        let (path, frame) = middle_frame_of_oldest(&log);
        flip_byte(&path, frame.start + 24 + frame.payload.len() as u64 / 2);
        let n = frame.lsn - 1;

        let pit = small(backend).recovery(RecoveryMode::PointInTime).build();
        let (wal, report) = Wal::open(&log, pit).expect("point-in-time open");
        assert_eq!(report.records, n, "{report:?}");
        assert_eq!(report.last_lsn, n, "{report:?}");
        for (_, later) in &segs[1..] {
            assert!(report.discarded.contains(later), "{report:?}");
            assert!(!later.exists(), "{} must be set aside", later.display());
            let mut aside = later.clone().into_os_string();
            aside.push(".corrupt");
            assert!(Path::new(&aside).exists(), "{aside:?} kept as evidence");
        }
        assert_records(&read_all(&wal), 1, &payloads[..n as usize], "point in time");
        let t = wal.append(0, b"after point in time").unwrap();
        assert_eq!(t.lsn(), n + 1);
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).expect("strict reopen");
        assert_eq!(report.records, n + 1, "{report:?}");
        let recs = read_all(&wal);
        assert_eq!(recs.last().unwrap().payload, b"after point in time");
        wal.close().unwrap();
    });
}

// ---------------------------------------------------------------------------
// 3. A missing middle segment.

#[test]
fn deleted_middle_segment_fails_open() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("deleted_middle_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 3);
        let segs = segment_files(&log, NODE);
        std::fs::remove_file(&segs[segs.len() / 2].1).unwrap();
        let before = dir_snapshot(&log);
        expect_corrupt_or_gap(Wal::open(&log, cfg(backend)), "middle segment deleted");
        assert_eq!(
            dir_snapshot(&log),
            before,
            "a failed open must not modify the log"
        );
    });
}

// ---------------------------------------------------------------------------
// 4. An incomplete newest file: crash between rename and header write.

#[test]
fn blank_newest_file_is_discarded() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("blank_newest_file");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let mut payloads = build_log(&log, backend, &mut rng, 2);
        let last = payloads.len() as u64;
        let blank = log.join(format::segment_file_name(NODE, last + 1));
        std::fs::write(&blank, vec![0u8; SEGMENT_BYTES as usize]).unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).expect("open with a blank newest file");
        assert!(report.discarded.contains(&blank), "{report:?}");
        assert!(!blank.exists(), "the blank file must be removed");
        assert_eq!(report.records, last);
        assert_eq!(report.last_lsn, last);
        assert_eq!(wal.next_lsn(), last + 1);
        // Enough appends to roll again, possibly onto the same name.
        fill(&wal, &mut rng, &mut payloads, 4, 1);
        assert_records(&read_all(&wal), 1, &payloads, "after discarding");
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).expect("reopen");
        assert_eq!(report.records, payloads.len() as u64);
        assert!(report.discarded.is_empty(), "{report:?}");
        assert_records(&read_all(&wal), 1, &payloads, "after reopen");
        wal.close().unwrap();
    });
}

#[test]
fn short_blank_newest_file_is_discarded() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("short_blank_newest_file");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let payloads = build_log(&log, backend, &mut rng, 2);
        let last = payloads.len() as u64;
        let short = log.join(format::segment_file_name(NODE, last + 1));
        std::fs::write(&short, vec![0u8; 100]).unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).expect("open with a short newest file");
        assert!(report.discarded.contains(&short), "{report:?}");
        assert!(!short.exists());
        let t = wal.append(0, b"next").unwrap();
        assert_eq!(t.lsn(), last + 1);
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        assert_eq!(report.records, last + 1);
        wal.close().unwrap();
    });
}

/// A newest segment whose header is damaged may hold acknowledged records:
/// it must be reported, never discarded.
#[test]
fn damaged_header_of_newest_segment_is_corruption() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("damaged_header_of_newest_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 2);
        let (_, newest) = segment_files(&log, NODE).pop().unwrap();
        flip_byte(&newest, 44); // inside the salt: the header CRC fails
        let before = dir_snapshot(&log);
        let err = expect_corrupt_or_gap(Wal::open(&log, cfg(backend)), "damaged newest header");
        if let Error::Corrupt { file, .. } = &err {
            assert_eq!(file, &newest, "{err}");
        }
        assert_eq!(
            dir_snapshot(&log),
            before,
            "a failed open must not modify the log"
        );
    });
}

/// A blank file named past the next LSN (an operator's stray copy, say) must
/// not make recovery skip LSNs: either `open` refuses the directory, or
/// appends continue densely and the log it leaves behind opens again.
#[test]
fn blank_file_named_beyond_next_lsn_keeps_lsns_dense() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("blank_file_named_beyond_next_lsn");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let mut payloads = build_log(&log, backend, &mut rng, 2);
        let last = payloads.len() as u64;
        let blank = log.join(format::segment_file_name(NODE, last + 100));
        std::fs::write(&blank, vec![0u8; SEGMENT_BYTES as usize]).unwrap();

        let (wal, _) = match Wal::open(&log, cfg(backend)) {
            Ok(x) => x,
            // Refusing the directory is a consistent answer.
            Err(Error::Corrupt { .. } | Error::Gap { .. }) => return,
            Err(e) => panic!("unexpected error {e:?}"),
        };
        let t = wal.append(0, b"after a stray blank file").unwrap();
        let lsn = t.lsn();
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let reopened = Wal::open(&log, cfg(backend));
        assert_eq!(
            lsn,
            last + 1,
            "open accepted a blank file named {} and resumed at LSN {lsn} inside the segment holding {last}; reopening then gives {:?}",
            file_name(&blank),
            reopened.as_ref().map(|(_, r)| r.records)
        );
        let (wal, _) = reopened.expect("reopen");
        payloads.push(b"after a stray blank file".to_vec());
        assert_records(&read_all(&wal), 1, &payloads, "after stray file");
        wal.close().unwrap();
    });
}

// ---------------------------------------------------------------------------
// 5. One writer per directory and node.

#[test]
fn second_open_is_locked_and_nodes_are_independent() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (w1, _) = Wal::open(&log, cfg(backend)).unwrap();
        for i in 0..50u32 {
            let _ = w1.append(0, format!("node1-{i}").as_bytes()).unwrap();
        }
        w1.sync().unwrap();

        match Wal::open(&log, cfg(backend)) {
            Err(Error::Locked { path }) => {
                assert_eq!(path, log.join(format::lock_file_name(NODE)));
            }
            other => panic!("second writer must get Locked, got {other:?}"),
        }
        // The refused open left the first writer intact.
        let t = w1.append(0, b"node1-50").unwrap();
        assert_eq!(t.lsn(), 51);
        t.wait(Level::Durable).unwrap();

        let (w2, report) = Wal::open(&log, small(backend).node(2).build()).unwrap();
        assert!(report.created, "{report:?}");
        assert_eq!(report.records, 0);
        assert!(
            read_all(&w2).is_empty(),
            "node 2 must not see node 1's records"
        );
        let t = w2.append(0, b"node2-0").unwrap();
        assert_eq!(t.lsn(), 1, "node 2 has its own LSN sequence");
        t.wait(Level::Durable).unwrap();
        match Wal::open(&log, small(backend).node(2).build()) {
            Err(Error::Locked { .. }) => {}
            other => panic!("second writer of node 2 must get Locked, got {other:?}"),
        }

        w1.close().unwrap();
        let (w1, report) = Wal::open(&log, cfg(backend)).expect("reopen after close");
        assert_eq!(report.records, 51);
        let recs = read_all(&w1);
        assert_eq!(recs.len(), 51);
        assert!(recs.iter().all(|r| r.payload.starts_with(b"node1-")));
        w1.close().unwrap();
        w2.close().unwrap();
        let (w2, report) = Wal::open(&log, small(backend).node(2).build()).unwrap();
        assert_eq!(report.records, 1);
        assert_eq!(read_all(&w2)[0].payload, b"node2-0");
        w2.close().unwrap();
    });
}

// ---------------------------------------------------------------------------
// 6. LSNs across reopen cycles; checkpoints.

#[test]
fn lsns_continue_across_reopens_and_checkpoint_keeps_the_active_segment() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("lsns_continue_across_reopens");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        for cycle in 0..6 {
            // Alternate backends across reopens as well: the format is one.
            let b = if cycle % 2 == 0 {
                backend
            } else {
                other(backend)
            };
            let (wal, report) = Wal::open(&log, cfg(b)).unwrap();
            let n = payloads.len() as u64;
            assert_eq!(report.records, n, "cycle {cycle}: {report:?}");
            assert_eq!(report.last_lsn, n, "cycle {cycle}");
            assert_eq!(
                report.first_lsn,
                if n == 0 { 0 } else { 1 },
                "cycle {cycle}"
            );
            assert!(report.truncated.is_none(), "cycle {cycle}: {report:?}");
            assert_eq!(wal.next_lsn(), n + 1, "cycle {cycle}");
            for _ in 0..rng.gen_range(20..200) {
                let p = payload(&mut rng, payloads.len() as u64 + 1);
                let t = wal.append(1, &p).unwrap();
                assert_eq!(t.lsn(), payloads.len() as u64 + 1);
                payloads.push(p);
            }
            wal.sync().unwrap();
            assert_eq!(wal.durable_lsn(), payloads.len() as u64);
            wal.close().unwrap();
        }

        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        assert_records(&read_all(&wal), 1, &payloads, "after reopen cycles");
        let segs = segment_files(&log, NODE);
        assert!(segs.len() >= 4, "expected several segments: {}", segs.len());

        // Up to the last LSN of the second segment: exactly two go.
        let keep_from = segs[2].0;
        assert_eq!(
            wal.checkpoint(keep_from - 2).unwrap(),
            1,
            "only whole segments"
        );
        assert_eq!(wal.checkpoint(keep_from - 1).unwrap(), 1);
        assert!(!segs[0].1.exists() && !segs[1].1.exists());
        assert_eq!(wal.oldest_lsn(), keep_from);
        match wal.reader_from(keep_from - 1) {
            Err(Error::Gap {
                expected, found, ..
            }) => {
                assert_eq!((expected, found), (keep_from - 1, keep_from));
            }
            Err(e) => panic!("reading below the oldest kept: expected Gap, got {e:?}"),
            Ok(_) => panic!("reading below the oldest kept: expected Gap, got a reader"),
        }
        assert!(matches!(wal.reader_from(1), Err(Error::Gap { .. })));
        let tail = &payloads[keep_from as usize - 1..];
        assert_records(&read_all(&wal), keep_from, tail, "after checkpoint");
        let from_mid: Vec<_> = wal
            .reader_from(keep_from + 3)
            .unwrap()
            .collect::<ringwal::Result<_>>()
            .unwrap();
        assert_records(&from_mid, keep_from + 3, &tail[3..], "reader_from inside");

        // Everything: every sealed segment goes, the active one stays.
        let last = payloads.len() as u64;
        let removed = wal.checkpoint(last).unwrap();
        assert_eq!(removed, segs.len() - 3);
        let left = segment_files(&log, NODE);
        assert_eq!(
            left,
            vec![segs.last().unwrap().clone()],
            "the active segment stays"
        );
        assert_eq!(wal.checkpoint(u64::MAX).unwrap(), 0);
        let t = wal.append(0, b"after checkpoint").unwrap();
        assert_eq!(t.lsn(), last + 1);
        t.wait(Level::Durable).unwrap();
        payloads.push(b"after checkpoint".to_vec());
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        let oldest = left[0].0;
        assert_eq!(report.first_lsn, oldest, "{report:?}");
        assert_eq!(report.last_lsn, last + 1);
        assert_eq!(wal.oldest_lsn(), oldest);
        assert!(matches!(
            wal.reader_from(oldest - 1),
            Err(Error::Gap { .. })
        ));
        assert_records(
            &read_all(&wal),
            oldest,
            &payloads[oldest as usize - 1..],
            "reopen after checkpoint",
        );
        assert_eq!(wal.next_lsn(), last + 2);
        wal.close().unwrap();
    });
}

/// Operators change configurations between runs (the CLI, for one, always
/// opens with the defaults). A log written with small segments and
/// continued with a larger `segment_bytes` must keep every acknowledged
/// record: the active segment is as large as its header says, not as the
/// new configuration says; and the other way round.
#[test]
fn changing_segment_size_between_runs_loses_nothing() {
    for_each_backend(|backend| {
        for (first, second) in [(SEGMENT_BYTES, 1 << 20), (1 << 20, SEGMENT_BYTES)] {
            let what = format!("{backend:?}: segments of {first} then {second} bytes");
            let mut rng = seeded_rng("changing_segment_size_between_runs");
            let root = tempfile::tempdir().unwrap();
            let log = root.path().join("log");
            let mut payloads: Vec<Vec<u8>> = Vec::new();
            for (run, bytes) in [first, second, first].into_iter().enumerate() {
                let c = small(backend).segment_bytes(bytes).build();
                let (wal, report) = Wal::open(&log, c)
                    .unwrap_or_else(|e| panic!("{what}: open for run {run}: {e}"));
                assert_eq!(
                    report.records,
                    payloads.len() as u64,
                    "{what}: run {run}: {report:?}"
                );
                assert!(report.truncated.is_none(), "{what}: run {run}: {report:?}");
                assert_records(&read_all(&wal), 1, &payloads, &format!("{what}: run {run}"));
                // A little over two small segments' worth per run.
                let mut written = 0;
                while written < 2 * SEGMENT_BYTES as usize + 10_000 {
                    let p = payload(&mut rng, payloads.len() as u64 + 1);
                    written += p.len() + 24;
                    let t = wal.append(0, &p).unwrap();
                    assert_eq!(t.lsn(), payloads.len() as u64 + 1);
                    payloads.push(p);
                }
                wal.sync().unwrap();
                wal.close().unwrap();
            }
            let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
            assert_eq!(report.records, payloads.len() as u64, "{what}: {report:?}");
            assert_records(&read_all(&wal), 1, &payloads, &what);
            wal.close().unwrap();
        }
    });
}

fn other(b: Backend) -> Backend {
    match b {
        Backend::Uring => Backend::Threaded,
        Backend::Threaded => Backend::Uring,
    }
}

// ---------------------------------------------------------------------------
// 7. Limits.

#[test]
fn too_large_writes_nothing_and_invalid_config_is_refused() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        wal.append(0, b"one").unwrap().wait(Level::Durable).unwrap();
        match wal.append(0, &vec![b'x'; MAX_RECORD + 1]) {
            Err(Error::TooLarge { len, max }) => {
                assert_eq!((len, max), (MAX_RECORD + 1, MAX_RECORD))
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let mut called = false;
        let res = wal.append_then(0, &vec![b'y'; MAX_RECORD * 4], |_| called = true);
        assert!(matches!(res, Err(Error::TooLarge { .. })), "{res:?}");
        assert!(!called, "no LSN may be handed out for a refused record");
        assert_eq!(wal.next_lsn(), 2, "no LSN consumed");
        let t = wal.append(0, &vec![b'z'; MAX_RECORD]).unwrap();
        assert_eq!(t.lsn(), 2, "exactly the maximum is accepted");
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        assert_eq!(report.records, 2);
        let recs = read_all(&wal);
        assert_eq!(recs[0].payload, b"one");
        assert_eq!(recs[1].payload, vec![b'z'; MAX_RECORD]);
        wal.close().unwrap();

        let bad = [
            (
                "segment not a block multiple",
                small(backend).segment_bytes(SEGMENT_BYTES + 100).build(),
            ),
            (
                "segment below 64 KiB",
                small(backend).segment_bytes(32 << 10).build(),
            ),
            ("node above 99999", small(backend).node(100_000).build()),
            (
                "zero record size",
                small(backend).max_record_bytes(0).build(),
            ),
            (
                "record larger than a segment",
                small(backend).max_record_bytes(64 << 10).build(),
            ),
        ];
        for (what, c) in bad {
            let dir = root.path().join("never-created");
            match Wal::open(&dir, c) {
                Err(Error::InvalidConfig(msg)) => assert!(!msg.is_empty()),
                other => panic!("{what}: expected InvalidConfig, got {other:?}"),
            }
            assert!(
                !dir.exists(),
                "{what}: nothing may be created for a refused config"
            );
        }
        let (wal, _) = Wal::open(
            root.path().join("max-node"),
            small(backend).node(99_999).build(),
        )
        .expect("node 99999 is valid");
        wal.close().unwrap();
    });
}

// ---------------------------------------------------------------------------
// 8. A header that contradicts its file name.

#[test]
fn renamed_segment_fails_open() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("renamed_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 3);
        let segs = segment_files(&log, NODE);
        let cases: Vec<(usize, u64)> = vec![
            (1, segs[1].0 + 1),                 // a sealed middle segment, one higher
            (0, 2),                             // the first segment
            (1, segs.last().unwrap().0 + 1000), // past the newest
        ];
        for (i, (idx, new_base)) in cases.into_iter().enumerate() {
            let work = root.path().join(format!("case-{i}"));
            copy_dir(&log, &work);
            let from = work.join(segs[idx].1.file_name().unwrap());
            let to = work.join(format::segment_file_name(NODE, new_base));
            std::fs::rename(&from, &to).unwrap();
            let what = format!("segment {} renamed to base {new_base}", segs[idx].0);
            let before = dir_snapshot(&work);
            let err = expect_corrupt_or_gap(Wal::open(&work, cfg(backend)), &what);
            eprintln!("{what}: {err}");
            assert_eq!(
                dir_snapshot(&work),
                before,
                "{what}: a failed open must not modify the log"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// 9. Ticket futures on a hand-written executor.

#[test]
fn ticket_futures_resolve_without_a_runtime() {
    for_each_backend(|backend| futures_case(backend, Level::Durable));
}

/// The same in written mode, where waiting for `Durable` asks the ring for
/// an fdatasync.
#[test]
fn ticket_futures_resolve_in_written_mode() {
    for_each_backend(|backend| futures_case(backend, Level::Written));
}

fn futures_case(backend: Backend, mode: Level) {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let (wal, _) = Wal::open(&log, small(backend).default_level(mode).build()).unwrap();
    // Many appends without waiting, so the last one's write is very likely
    // still in flight when its future is first polled.
    let tickets: Vec<_> = (0..300u32)
        .map(|i| wal.append(0, format!("fut-{i}").as_bytes()).unwrap())
        .collect();
    let last = tickets.last().unwrap();
    block_on(last.reached(Level::Durable)).expect("durable");
    assert!(wal.durable_lsn() >= last.lsn(), "{mode:?}");
    for t in &tickets {
        assert!(t.is_done(Level::Durable), "{mode:?}: LSN {}", t.lsn());
        block_on(t.reached(Level::Written)).unwrap();
        block_on(t.reached(Level::Accepted)).unwrap();
        block_on(t.reached(Level::Durable)).unwrap();
    }
    let t = wal.append(0, b"one more").unwrap();
    block_on(t.reached(Level::Written)).unwrap();
    block_on(t.reached(Level::Durable)).unwrap();
    // A future on another thread, for that thread's own append.
    let lsn = std::thread::scope(|s| {
        s.spawn(|| {
            let t = wal.append(7, b"from another thread").unwrap();
            block_on(t.reached(Level::Durable)).unwrap();
            t.lsn()
        })
        .join()
        .unwrap()
    });
    assert_eq!(lsn, 302);
    assert!(wal.durable_lsn() >= 302);
    wal.close().unwrap();
    let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
    assert_eq!(
        report.records, 302,
        "{mode:?}: every resolved record is on disk"
    );
    let recs = read_all(&wal);
    assert_eq!(recs[299].payload, b"fut-299");
    assert_eq!(
        (recs[301].stream, &recs[301].payload[..]),
        (7, &b"from another thread"[..])
    );
    wal.close().unwrap();
}

// ---------------------------------------------------------------------------
// 10. Many producers.

#[test]
fn many_producers_get_dense_ordered_lsns() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 2000;
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let wal = &wal;
                    s.spawn(move || {
                        let mut lsns = Vec::with_capacity(PER_THREAD);
                        let mut last = None;
                        for i in 0..PER_THREAD {
                            let p = producer_payload(t, i);
                            last =
                                Some(wal.append_then(t as u16, &p, |lsn| lsns.push(lsn)).unwrap());
                        }
                        last.unwrap().wait(Level::Durable).unwrap();
                        lsns
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total = (THREADS * PER_THREAD) as u64;
        let mut by_lsn = vec![None; total as usize];
        for (t, lsns) in per_thread.iter().enumerate() {
            assert_eq!(lsns.len(), PER_THREAD);
            assert!(
                lsns.windows(2).all(|w| w[0] < w[1]),
                "thread {t}: hook LSNs ascending"
            );
            for (i, &lsn) in lsns.iter().enumerate() {
                assert!((1..=total).contains(&lsn), "LSN {lsn} out of range");
                let slot = &mut by_lsn[lsn as usize - 1];
                assert!(slot.is_none(), "LSN {lsn} handed out twice");
                *slot = Some((t, i));
            }
        }
        let unique: BTreeSet<u64> = per_thread.iter().flatten().copied().collect();
        assert_eq!(
            unique.len() as u64,
            total,
            "all LSNs 1..={total} exactly once"
        );
        wal.sync().unwrap();
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        assert_eq!(report.records, total);
        let recs = read_all(&wal);
        assert_eq!(recs.len() as u64, total);
        for (k, r) in recs.iter().enumerate() {
            assert_eq!(r.lsn, k as u64 + 1);
            let (t, i) = by_lsn[k].unwrap();
            assert_eq!(r.stream, t as u16, "LSN {}", r.lsn);
            assert_eq!(r.payload, producer_payload(t, i), "LSN {}", r.lsn);
        }
        wal.close().unwrap();
    });
}

fn producer_payload(thread: usize, i: usize) -> Vec<u8> {
    let mut p = format!("producer-{thread}-{i}-").into_bytes();
    p.resize(p.len() + (i * 7 + thread * 13) % 200, b'a' + (thread as u8));
    p
}
