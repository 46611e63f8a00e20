//! Recovery through the library API, on real files: torn tails at every
//! offset, corruption and gaps that must fail `open`, incomplete newest
//! files, headers that contradict their names, point-in-time recovery.
//! Every test runs against both backends. (Locks, reopens, checkpoints and
//! limits are in `tests/ops/open.rs`; tickets and producers in
//! `tests/records/tickets.rs`.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{self, *};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::format::{self, Kind};
use ringwal::{Backend, Corruption, Error, Level, Wal};

const BLOCK: u64 = format::BLOCK as u64;
/// Where a segment's first frame starts (after the header and its copy).
const FRAMES: u64 = format::HEADER_BYTES as u64;

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
            if newest.data_end >= FRAMES + min_blocks * BLOCK {
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
        // Cuts land inside version-3 vouches too (40 bytes, with a time).
        assert_eq!(newest.header.version, format::FORMAT_VERSION);
        let vouches: Vec<_> = newest
            .frames
            .iter()
            .filter(|f| f.kind == Kind::Vouch)
            .collect();
        assert!(
            vouches.len() >= 2
                && vouches
                    .iter()
                    .all(|f| f.end - f.start == format::VOUCH_LEN as u64)
        );
        let end = newest.data_end;
        assert_eq!(end % BLOCK, 0, "a closed log ends every write on a block");
        let from = ((end - 1) / BLOCK * BLOCK)
            .saturating_sub(BLOCK)
            .max(FRAMES);
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
        let cases: Vec<(u64, Damage)> = std::iter::once(FRAMES)
            .filter(|&b| b < from)
            .chain((from..=end).step_by(8))
            .flat_map(|at| {
                let garbage = (at < len).then_some((at, Damage::Garbage));
                std::iter::once((at, Damage::Zeros)).chain(garbage)
            })
            .collect();
        let garbage_seed: u64 = rng.r#gen();
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
        as_after_crash(&work, NODE);
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
            if !matches!(f.kind, Kind::Padding | Kind::Vouch) {
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

        let (wal, report) = open_checked(&work, torn_cfg(backend))
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

        let (wal, report) = open_checked(&work, torn_cfg(backend))
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
/// frames after it (within the torn window), none of which vouches for the
/// lost records, is a torn tail: recovery keeps the frames before it, and
/// must erase the ones after, or they would resurface behind the next
/// appends. If a later write does vouch for them (it was submitted after
/// they were acknowledged durable), the same loss is corruption: open
/// fails and touches nothing.
#[test]
fn lost_block_before_later_writes_is_a_torn_tail() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("lost_block_before_later_writes");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = open_checked(&log, cfg(backend)).unwrap();
        let mut payloads = Vec::new();
        // Every block-aligned frame start with a later write (its vouch at
        // a later block boundary) left intact after its block. The newest
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
            // A later write begins with its vouch; a frame at a later
            // block boundary may still be the same write's.
            let writes: Vec<u64> = newest
                .frames
                .iter()
                .filter(|f| f.kind == Kind::Vouch)
                .map(|f| f.start)
                .collect();
            let starts: Vec<u64> = aligned
                .iter()
                .copied()
                .filter(|&s| writes.iter().any(|&later| later >= s + BLOCK))
                .collect();
            if !starts.is_empty() {
                break (base, newest_path, newest, starts);
            }
        };
        wal.close().unwrap();
        let mut vouched_cases = 0;
        for (i, &lost) in starts.iter().enumerate() {
            let what = format!("block at {lost} lost");
            let work = root.path().join(format!("lost-{i}"));
            copy_dir(&log, &work);
            let target = work.join(newest_path.file_name().unwrap());
            let mut img = newest.bytes.clone();
            img[lost as usize..(lost + BLOCK) as usize].fill(0);
            std::fs::write(&target, &img).unwrap();
            let n = base - 1 + newest.records().filter(|f| f.end <= lost).count() as u64;

            // As written: a later write that went out once the lost one
            // was durable vouches for it (one in the same burst may not
            // have), and then the loss is corruption.
            let vouched = newest.frames.iter().any(|f| {
                f.start > lost
                    && f.kind == Kind::Vouch
                    && u64::from_le_bytes(f.payload[..8].try_into().unwrap()) > n
            });
            if vouched {
                vouched_cases += 1;
                let before = dir_snapshot(&work);
                match open_checked(&work, cfg(backend)) {
                    Err(Error::Corrupt {
                        file,
                        offset,
                        reason,
                    }) => {
                        assert_eq!((&file, offset), (&target, lost), "{what}: {reason}");
                        // Damage among frames, typed so, and the vouch named.
                        assert!(
                            matches!(&reason, ringwal::Corruption::Frames(d) if d.contains("vouches")),
                            "{what}: {reason}"
                        );
                    }
                    other => {
                        panic!("{what}: vouched-for records lost must be Corrupt: {other:?}")
                    }
                }
                assert_eq!(
                    dir_snapshot(&work),
                    before,
                    "{what}: a failed open modified the log"
                );
            }

            // As a crash leaves it: the later writes went out while the
            // lost one was in flight, so they vouch for nothing after it,
            // and the manifest knows only what the last roll did.
            assert!(
                common::unvouch_from(&mut img, lost + BLOCK, n) > 0,
                "{what}"
            );
            std::fs::write(&target, &img).unwrap();
            as_after_crash(&work, NODE);
            let (wal, report) = open_checked(&work, cfg(backend))
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
            let (wal, report) = open_checked(&work, cfg(backend))
                .unwrap_or_else(|e| panic!("{what}: reopen after appending: {e}"));
            assert_eq!(report.records, n + 3, "{what}: {report:?}");
            assert!(report.truncated.is_none(), "{what}: {report:?}");
            let recs = read_all(&wal);
            assert_eq!(recs.len() as u64, n + 3, "{what}");
            assert_eq!(recs.last().unwrap().payload, b"n2", "{what}");
            wal.close().unwrap();
            std::fs::remove_dir_all(&work).unwrap();
        }
        // The closing vouch alone covers every block but the last write's.
        assert!(vouched_cases > 0, "no lost block was vouched for");
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
    let (wal, _) = open_checked(&log, cfg(backend)).unwrap();
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
    let (wal, report) = open_checked(&log, cfg(backend))
        .unwrap_or_else(|e| panic!("{what}: a lost block at the tail is a torn tail: {e}"));
    assert_eq!(report.records, n, "{what}: {report:?}");
    let before_write = std::fs::read(&path).unwrap();
    // The new write opens with its vouch frame: a record that much shorter
    // ends at p too.
    let new_payload = vec![b'a'; a_len as usize - format::FRAME_HEADER - format::VOUCH_LEN];
    let t = wal.append(0, &new_payload).unwrap();
    assert_eq!(t.lsn(), n + 1);
    t.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let after = scan_segment(&path);
    let new_frame = after.frames.iter().find(|f| f.lsn == n + 1).unwrap();
    assert_eq!(
        (new_frame.start, new_frame.end),
        (x + format::VOUCH_LEN as u64, p),
        "{what}: layout assumption"
    );

    // That write is torn: the sectors from p on keep what was on disk
    // before it (whatever recovery left there).
    let mut torn = std::fs::read(&path).unwrap();
    let end = (xs + 2 * blk).min(torn.len());
    torn[p as usize..end].copy_from_slice(&before_write[p as usize..end]);
    std::fs::write(&path, &torn).unwrap();

    let (wal, report) = open_checked(&log, cfg(backend)).unwrap_or_else(|e| {
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

        match open_checked(&log, cfg(backend)) {
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
/// (kept, never read), the LSNs past the recovery point are recorded as
/// skipped (never handed out again: the next append gets the LSN after
/// the last one the log ever had), and a strict reopen then accepts the
/// result.
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
        let (wal, report) = open_checked(&log, pit).expect("point-in-time open");
        assert_eq!(report.records, n, "{report:?}");
        assert_eq!(report.last_lsn, n, "{report:?}");
        for (_, later) in &segs[1..] {
            assert!(report.discarded.contains(later), "{report:?}");
            assert!(!later.exists(), "{} must be set aside", later.display());
            let mut aside = later.clone().into_os_string();
            aside.push(".corrupt");
            assert!(Path::new(&aside).exists(), "{aside:?} kept as evidence");
        }
        let total = payloads.len() as u64;
        assert_eq!(report.skipped, Some((n + 1, total)), "{report:?}");
        // The LSNs given up end no read: the reader steps over them.
        let kept: Vec<_> = wal.reader_from(0).unwrap().map(|r| r.unwrap()).collect();
        assert_records(&kept, 1, &payloads[..n as usize], "point in time");
        assert!(
            matches!(wal.read(n + 1), Err(Error::GivenUp { first, last, .. }) if (first, last) == (n + 1, total)),
            "{:?}",
            wal.read(n + 1)
        );
        let t = wal.append(0, b"after point in time").unwrap();
        assert_eq!(t.lsn(), total + 1);
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();

        let (wal, report) = open_checked(&log, cfg(backend)).expect("strict reopen");
        assert_eq!(report.records, n + 1, "{report:?}");
        let recs: Vec<_> = wal
            .reader_from(total + 1)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].payload, b"after point in time");
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
        expect_corrupt_or_gap(open_checked(&log, cfg(backend)), "middle segment deleted");
        assert_eq!(
            dir_snapshot(&log),
            before,
            "a failed open must not modify the log"
        );
    });
}

/// A closed log of at least `min_segments` segments in which every write
/// is one block: bursts of up to four small records, each burst waited
/// for before the next. Every write starts at a block boundary and fits in
/// one, so every sealed segment's frames fill it to its last byte, and
/// zeroing any one block of records leaves zeros on a block boundary with
/// nothing after them in that block. Returns the payloads by LSN.
fn build_block_log(dir: &Path, backend: Backend, min_segments: usize) -> Vec<Vec<u8>> {
    let (wal, _) = Wal::open(dir, cfg(backend)).expect("open new log");
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    while segment_files(dir, NODE).len() < min_segments {
        let mut last = None;
        for _ in 0..(payloads.len() % 4 + 1) {
            let lsn = payloads.len() as u64 + 1;
            let mut p = format!("r{lsn}:").into_bytes();
            p.resize(100, b'a' + (lsn % 26) as u8);
            last = Some(wal.append(0, &p).expect("append"));
            payloads.push(p);
        }
        last.expect("a burst").wait(Level::Durable).expect("wait");
    }
    wal.close().expect("close");
    payloads
}

/// A lost block over the last records of a sealed middle segment reads
/// like the end its writer left (zeros on a block boundary), but the next
/// segment's base says which LSNs it must end with: open, verify and the
/// reader all report `Corrupt` in the damaged file, where its valid frames
/// end, and not a gap at the next segment.
#[test]
fn a_lost_block_at_a_sealed_segments_end_is_corruption_there() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let payloads = build_block_log(&log, backend, 4);
        let segs = segment_files(&log, NODE);
        let (_, path) = segs[1].clone();
        let scanned = scan_segment(&path);
        let lost_at = scanned.data_end - BLOCK;
        let first_lost = scanned
            .records()
            .find(|f| f.start >= lost_at)
            .expect("records in the last block")
            .lsn;
        let mut bytes = scanned.bytes.clone();
        bytes[lost_at as usize..(lost_at + BLOCK) as usize].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        let before = dir_snapshot(&log);

        let reason = Corruption::EndsShort {
            due: first_lost,
            next_base: segs[2].0,
        };
        let named = |e: &Error, what: &str| match e {
            Error::Corrupt {
                file,
                offset,
                reason: r,
            } => assert_eq!((file, *offset, r), (&path, lost_at, &reason), "{what}: {e}"),
            other => panic!(
                "{what}: expected Corrupt in {}, got {other:?}",
                path.display()
            ),
        };
        match open_checked(&log, cfg(backend)) {
            Err(e) => named(&e, "open"),
            Ok((_, rep)) => panic!("open succeeded: {rep:?}"),
        }
        assert_eq!(dir_snapshot(&log), before, "a failed open modified the log");
        let v = ringwal::verify::verify(&log, &cfg(backend)).unwrap();
        assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
        named(&v.problems[0], "verify");
        let read: Vec<_> = ringwal::verify::records(&log, &cfg(backend), 0)
            .unwrap()
            .collect();
        let (last, good) = read.split_last().expect("something read");
        named(
            last.as_ref().expect_err("reading ends in an error"),
            "records",
        );
        assert_eq!(good.len() as u64, first_lost - 1);
        for (i, r) in good.iter().enumerate() {
            assert_eq!(r.as_ref().unwrap().payload, payloads[i], "LSN {}", i + 1);
        }
    });
}

/// A whole segment missing behind one whose frames fill it to the end:
/// nothing of the earlier one can have been lost, so the LSNs missing are
/// a gap, reported at the segment after them.
#[test]
fn a_missing_segment_after_a_full_one_is_a_gap() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_block_log(&log, backend, 4);
        let segs = segment_files(&log, NODE);
        assert_eq!(scan_segment(&segs[1].1).data_end, SEGMENT_BYTES, "full");
        std::fs::remove_file(&segs[2].1).unwrap();
        let gap = |e: &Error, what: &str| match e {
            Error::Gap {
                file,
                expected,
                found,
            } => assert_eq!(
                (file, *expected, *found),
                (&segs[3].1, segs[2].0, segs[3].0),
                "{what}"
            ),
            other => panic!("{what}: expected Gap, got {other:?}"),
        };
        match open_checked(&log, cfg(backend)) {
            Err(e) => gap(&e, "open"),
            Ok((_, rep)) => panic!("open succeeded: {rep:?}"),
        }
        let v = ringwal::verify::verify(&log, &cfg(backend)).unwrap();
        assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
        gap(&v.problems[0], "verify");
        let last = ringwal::verify::records(&log, &cfg(backend), 0)
            .unwrap()
            .last()
            .expect("something read");
        gap(
            last.as_ref().expect_err("reading ends in an error"),
            "records",
        );
    });
}

// ---------------------------------------------------------------------------
// 4. An incomplete newest file (crash between rename and header write),
//    and files that only look like one.

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

        let (wal, report) =
            open_checked(&log, cfg(backend)).expect("open with a blank newest file");
        assert!(report.discarded.contains(&blank), "{report:?}");
        assert!(!blank.exists(), "the blank file must be removed");
        assert_eq!(report.records, last);
        assert_eq!(report.last_lsn, last);
        assert_eq!(wal.next_lsn(), last + 1);
        // Enough appends to roll again, possibly onto the same name.
        fill(&wal, &mut rng, &mut payloads, 4, 1);
        assert_records(&read_all(&wal), 1, &payloads, "after discarding");
        wal.close().unwrap();

        let (wal, report) = open_checked(&log, cfg(backend)).expect("reopen");
        assert_eq!(report.records, payloads.len() as u64);
        assert!(report.discarded.is_empty(), "{report:?}");
        assert_records(&read_all(&wal), 1, &payloads, "after reopen");
        wal.close().unwrap();
    });
}

/// Only what a writer can leave behind is discarded: a file of a
/// segment's shape whose header never reached the disk. A short file, or a
/// text file, under a segment's name (an operator's stray file, a copy cut
/// short) is reported and left alone, whether it stands after the log or
/// is the only file of the node.
#[test]
fn a_foreign_file_under_a_segment_name_is_corruption() {
    for_each_backend(|backend| {
        for contents in [&[0u8; 1][..], &[0u8; 100], b"some notes\n"] {
            let mut rng = seeded_rng("foreign_file_under_a_segment_name");
            let root = tempfile::tempdir().unwrap();
            let log = root.path().join("log");
            let payloads = build_log(&log, backend, &mut rng, 2);
            let last = payloads.len() as u64;
            let stray = log.join(format::segment_file_name(NODE, last + 1));
            std::fs::write(&stray, contents).unwrap();
            let before = dir_snapshot(&log);
            let err = expect_corrupt_or_gap(open_checked(&log, cfg(backend)), "stray newest");
            assert!(
                matches!(&err, Error::Corrupt { file, offset: 0, .. } if file == &stray),
                "{err}"
            );
            assert_eq!(dir_snapshot(&log), before, "a failed open modified the log");

            let alone = root.path().join("alone");
            std::fs::create_dir(&alone).unwrap();
            let first = alone.join(format::segment_file_name(NODE, 1));
            std::fs::write(&first, contents).unwrap();
            expect_corrupt_or_gap(open_checked(&alone, cfg(backend)), "stray first");
            assert_eq!(std::fs::read(&first).unwrap(), contents);
        }
    });
}

/// A segment's header is durable before anything is written behind it.
/// One lost header block is survived: the copy in the next block is read
/// instead, every record comes back, and the report names the segment. A
/// header lost with its copy, in front of data, is damage, not a segment
/// a crash left half-made: the segment's acknowledged records must never
/// be discarded with it, nor their LSNs handed out again.
#[test]
fn a_zeroed_header_in_front_of_records_is_corruption() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("zeroed_header_in_front_of_records");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let payloads = build_log(&log, backend, &mut rng, 2);
        let (_, newest) = segment_files(&log, NODE).pop().unwrap();
        let mut bytes = std::fs::read(&newest).unwrap();

        bytes[..BLOCK as usize].fill(0);
        std::fs::write(&newest, &bytes).unwrap();
        let (wal, report) = open_checked(&log, cfg(backend)).expect("read through the copy");
        assert_eq!(report.headers_from_copy, vec![newest.clone()], "{report:?}");
        assert_records(&read_all(&wal), 1, &payloads, "header from its copy");
        wal.close().unwrap();

        let mut bytes = std::fs::read(&newest).unwrap();
        bytes[..2 * BLOCK as usize].fill(0);
        std::fs::write(&newest, &bytes).unwrap();
        let before = dir_snapshot(&log);
        let err = expect_corrupt_or_gap(open_checked(&log, cfg(backend)), "zeroed header");
        assert!(
            matches!(&err, Error::Corrupt { file, offset: 0, .. } if file == &newest),
            "{err}"
        );
        assert_eq!(dir_snapshot(&log), before, "a failed open modified the log");
    });
}

/// A newest segment whose header (and its copy) is damaged may hold
/// acknowledged records: it must be reported, never discarded.
#[test]
fn damaged_header_of_newest_segment_is_corruption() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("damaged_header_of_newest_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 2);
        let (_, newest) = segment_files(&log, NODE).pop().unwrap();
        flip_byte(&newest, 44); // inside the salt: the header CRC fails
        let (wal, report) = open_checked(&log, cfg(backend)).expect("read through the copy");
        assert_eq!(report.headers_from_copy, vec![newest.clone()]);
        wal.close().unwrap();
        flip_byte(&newest, BLOCK + 44); // and now the copy's
        let before = dir_snapshot(&log);
        let err = expect_corrupt_or_gap(open_checked(&log, cfg(backend)), "damaged newest header");
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

        let (wal, _) = match open_checked(&log, cfg(backend)) {
            Ok(x) => x,
            // Refusing the directory is a consistent answer.
            Err(Error::Corrupt { .. } | Error::Gap { .. }) => return,
            Err(e) => panic!("unexpected error {e:?}"),
        };
        let t = wal.append(0, b"after a stray blank file").unwrap();
        let lsn = t.lsn();
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let reopened = open_checked(&log, cfg(backend));
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
// 5. A header that contradicts its file name.

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
            let err = expect_corrupt_or_gap(open_checked(&work, cfg(backend)), &what);
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
// 6. Damage a crash cannot explain, and losses only the manifest can see.

/// 7,000 synced 1 KiB records in one (newest) segment of the default
/// size, then one flipped bit in the first record: a later write vouches
/// for it, so open fails with `Corrupt` naming the file and offset, and
/// changes nothing (it used to cut all 7,000 and hand out LSN 1 again).
#[test]
fn a_flipped_bit_behind_a_vouch_fails_open_in_the_newest_segment() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let cfg = || ringwal::Config::builder().backend(backend).build();
        let (wal, _) = Wal::open(&log, cfg()).unwrap();
        let record = vec![0x42u8; 1024];
        for _ in 0..7000 {
            let _ = wal.append(0, &record).unwrap();
        }
        wal.sync().unwrap();
        wal.close().unwrap();
        let segs = segment_files(&log, NODE);
        assert_eq!(segs.len(), 1, "one segment: the newest");
        let (_, path) = &segs[0];
        let first = scan_segment(path).records().next().unwrap().clone();
        flip_byte(path, first.start + 24 + 100);
        let before = dir_snapshot(&log);
        match open_checked(&log, cfg()) {
            Err(Error::Corrupt { file, offset, .. }) => {
                assert_eq!((&file, offset), (path, first.start));
            }
            other => panic!("{backend:?}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(dir_snapshot(&log), before, "a failed open modified the log");
    });
}

/// The newest of several segments deleted: the manifest names it, so open
/// fails with `Gap` naming the missing file instead of handing its LSNs
/// out again.
#[test]
fn a_missing_newest_segment_is_a_gap() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("missing_newest_segment");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        build_log(&log, backend, &mut rng, 3);
        let (base, newest) = segment_files(&log, NODE).pop().unwrap();
        std::fs::remove_file(&newest).unwrap();
        let before = dir_snapshot(&log);
        match open_checked(&log, cfg(backend)) {
            Err(Error::Gap {
                file,
                expected,
                found,
            }) => {
                assert_eq!((&file, expected), (&newest, base));
                assert!(found < base, "{found}");
            }
            other => panic!("{backend:?}: expected Gap, got {other:?}"),
        }
        assert_eq!(dir_snapshot(&log), before, "a failed open modified the log");
        // A newest segment cut short loses records the manifest says were
        // durable: `Lost`, naming the segment.
        let (_, newest) = segment_files(&log, NODE).pop().unwrap();
        let m = format::Manifest::decode(
            &std::fs::read(log.join(format::manifest_file_name(NODE))).unwrap(),
        )
        .unwrap();
        let mut fixed = m;
        fixed.newest_base = segment_files(&log, NODE).last().unwrap().0;
        std::fs::write(log.join(format::manifest_file_name(NODE)), fixed.encode()).unwrap();
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..format::HEADER_BYTES + format::BLOCK]).unwrap();
        match open_checked(&log, cfg(backend)) {
            Err(Error::Lost {
                file,
                durable,
                last,
            }) => {
                assert_eq!((&file, durable), (&newest, m.durable_lsn));
                assert!(last < durable);
            }
            other => panic!("{backend:?}: expected Lost, got {other:?}"),
        }
    });
}

/// A segment copied in from another log is typed as such, not as damaged
/// data: the operator has the wrong file or the wrong directory.
#[test]
fn a_segment_of_another_log_is_typed_as_foreign() {
    let root = tempfile::tempdir().unwrap();
    let (ours, theirs) = (root.path().join("ours"), root.path().join("theirs"));
    for dir in [&ours, &theirs] {
        let (wal, _) = Wal::open(dir, cfg(Backend::Threaded)).unwrap();
        let _ = wal.append(0, b"x").unwrap();
        wal.close().unwrap();
    }
    let name = format::segment_file_name(NODE, 1);
    std::fs::copy(theirs.join(&name), ours.join(&name)).unwrap();
    match Wal::open(&ours, cfg(Backend::Threaded)) {
        Err(e @ Error::Corrupt { .. }) => {
            let Error::Corrupt { file, reason, .. } = &e else {
                unreachable!()
            };
            assert_eq!(file, &ours.join(&name));
            assert!(
                matches!(reason, ringwal::Corruption::ForeignLog { found, expected } if found != expected),
                "{e}"
            );
            assert!(e.to_string().contains("segment of another log"), "{e}");
        }
        other => panic!("expected a foreign segment, got {other:?}"),
    }
}
