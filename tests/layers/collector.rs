//! The collector API on real files: watermarks with sibling shards, failed
//! publishes, pinning, replay with original LSNs (and its convergence),
//! torn tails, damage, missing segments, never-written newest files and
//! skipped LSNs as the reader sees them, the replay cap, LSN fillers,
//! truncation, shared directories, background sync in written mode, and a
//! concurrent model check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::common;
use rand::Rng;
use ringwal::collector::{self, FILLER_STREAM};
use ringwal::{Collector, Config, Durability, Level, Lsn, Wal, Watermarks};

const STREAMS: [u16; 3] = [0, 1, 2];

/// Small segments so a few hundred records roll; written-level acks with a
/// background sync, as a collector runs.
fn cfg(node: u32) -> Config {
    Config::builder()
        .node(node)
        .segment_bytes(64 << 10)
        .max_record_bytes(8 << 10)
        .durability(Durability::Deferred {
            sync_interval: Some(Duration::from_millis(20)),
        })
        .build()
}

fn open(dir: &Path, marks: &Watermarks) -> Collector {
    let (wal, _) = Wal::open(dir, cfg(1)).expect("open the log");
    Collector::open(wal, &STREAMS, marks).expect("open the collector")
}

fn body(stream: u16, i: u64) -> Vec<u8> {
    format!("s{stream}-b{i}-")
        .repeat(8 * (1 + (i % 7) as usize))
        .into_bytes()
}

/// Append `n` records per stream, round-robin; returns (stream, lsn, body).
fn fill(c: &Collector, n: u64) -> Vec<(u16, Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    let mut last = None;
    for i in 0..n {
        for s in STREAMS {
            let b = body(s, i);
            let t = c.append(s, &b).unwrap();
            out.push((s, t.lsn(), b));
            last = Some(t);
        }
    }
    if let Some(t) = last {
        t.wait(Level::Written).unwrap();
    }
    out
}

#[test]
fn one_shard_claims_one_past_everything() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let lsns: Vec<Lsn> = (0..5)
        .map(|i| c.append(0, &body(0, i)).unwrap().lsn())
        .collect();
    assert_eq!(c.pending(0), 5);
    // Another stream's records move "everything" forward too.
    let other = c.append(1, b"x").unwrap().lsn();
    assert_eq!(c.watermark_for(0, &lsns), other + 1);
    // A block holding only some of them is pinned at the first it lacks.
    assert_eq!(c.watermark_for(0, &lsns[..2]), lsns[2]);
    assert_eq!(c.watermark_for(0, &lsns[1..]), lsns[0]);
    c.published(0, &lsns);
    assert_eq!(c.pending(0), 0);
    assert_eq!(c.watermark_for(0, &[]), other + 1);
    assert_eq!(c.watermark_for(1, &[]), other);
    assert_eq!(c.covered(), other);
    c.close().unwrap();
}

#[test]
fn untracked_streams_are_plain_appends() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let mut seen = None;
    let t = c.append_then(9, b"plain", |l| seen = Some(l)).unwrap();
    assert_eq!(seen, Some(t.lsn()));
    assert!(!c.is_tracked(9) && c.is_tracked(2));
    assert_eq!(c.pending(9), 0);
    assert_eq!(
        c.watermark_for(9, &[t.lsn()]),
        0,
        "an untracked stream claims nothing"
    );
    // The filler stream cannot be tracked.
    let (wal, _) = Wal::open(tempfile::tempdir().unwrap().path(), cfg(1)).unwrap();
    assert!(matches!(
        Collector::open(wal, &[1, FILLER_STREAM], &Watermarks::new()),
        Err(ringwal::Error::InvalidConfig(_))
    ));
    c.close().unwrap();
}

/// Seed hard case: two shards of one stream seal at the same moment.
/// Neither may claim the other's frames.
#[test]
fn two_shards_sealing_at_once_never_claim_each_other() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let mut shard = [Vec::new(), Vec::new()];
    for i in 0..10 {
        let k = (i % 2) as usize;
        let _ = c.append_then(0, &body(0, i), |l| shard[k].push(l)).unwrap();
    }
    // Both seal before either publishes.
    let w0 = c.watermark_for(0, &shard[0]);
    let w1 = c.watermark_for(0, &shard[1]);
    assert_eq!(w0, shard[1][0], "shard 0 is pinned by shard 1's oldest");
    assert_eq!(w1, shard[0][0], "shard 1 is pinned by shard 0's oldest");
    // Both publish; a later block then covers everything.
    c.published(0, &shard[1]);
    c.published(0, &shard[0]);
    assert_eq!(c.watermark_for(0, &[]), c.wal().next_lsn());
    c.close().unwrap();
}

/// Seed hard case: a shard holding an old frame pins every sibling's
/// watermark behind it until it seals.
#[test]
fn a_shard_holding_an_old_frame_pins_the_others() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let old = c.append(0, b"old").unwrap().lsn();
    let mut rest = Vec::new();
    for i in 0..20 {
        rest.push(c.append(0, &body(0, i)).unwrap().lsn());
        let w = c.watermark_for(0, &rest);
        assert_eq!(w, old, "the sibling's old frame pins");
        c.published(0, &rest);
        rest.clear();
    }
    // The old frame seals last, alone: now everything is covered.
    assert_eq!(c.watermark_for(0, &[old]), c.wal().next_lsn());
    c.published(0, &[old]);
    assert_eq!(c.pending(0), 0);
    c.close().unwrap();
}

/// Seed hard case: a publish that fails leaves its frames pending, so no
/// later block's watermark steps over them, whichever shard seals.
#[test]
fn a_failed_publish_keeps_its_frames_pending() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let failed: Vec<Lsn> = (0..3)
        .map(|i| c.append(0, &body(0, i)).unwrap().lsn())
        .collect();
    let _ = c.watermark_for(0, &failed); // sealed, then the publish failed: no `published`
    for round in 0..5 {
        let later: Vec<Lsn> = (0..4)
            .map(|i| c.append(0, &body(0, 10 * round + i)).unwrap().lsn())
            .collect();
        assert_eq!(c.watermark_for(0, &later), failed[0]);
        c.published(0, &later);
    }
    // The retry lands: now the watermark moves past everything.
    assert_eq!(c.watermark_for(0, &failed), c.wal().next_lsn());
    c.published(0, &failed);
    assert_eq!(c.covered(), c.wal().next_lsn());
    c.close().unwrap();
}

#[test]
fn unsorted_lists_can_only_lower_the_watermark() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let l: Vec<Lsn> = (0..6)
        .map(|i| c.append(0, &body(0, i)).unwrap().lsn())
        .collect();
    let sorted = c.watermark_for(0, &l);
    let mut shuffled = l.clone();
    shuffled.reverse();
    let w = c.watermark_for(0, &shuffled);
    assert!(w <= sorted, "{w} > {sorted}");
    assert!(l.contains(&w) || w == sorted);
    c.close().unwrap();
}

/// Restart: replay hands exactly the frames at or above their own
/// stream's watermark, oldest first, with their original LSNs; storing
/// them under those LSNs makes the next replay skip them (convergence).
#[test]
fn replay_hands_original_lsns_and_converges() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let recs = fill(&c, 300);
    // Publish a prefix of each stream, with a different cut per stream.
    let mut marks = Watermarks::new();
    for (k, s) in STREAMS.into_iter().enumerate() {
        let mine: Vec<Lsn> = recs.iter().filter(|r| r.0 == s).map(|r| r.1).collect();
        let cut = &mine[..50 * (k + 1)];
        let w = c.watermark_for(s, cut);
        assert_eq!(w, mine[50 * (k + 1)]);
        c.published(s, cut);
        marks.observe(s, w);
    }
    c.close().unwrap();
    assert!(common::segment_files(dir.path(), 1).len() > 3);

    let want: Vec<(u16, Lsn, Vec<u8>)> = recs
        .iter()
        .filter(|r| r.1 >= marks.get(r.0))
        .cloned()
        .collect();
    // The read-only replay, beside nothing.
    let mut got = Vec::new();
    let r = collector::replay(dir.path(), &cfg(1), &marks, |s, l, p| {
        got.push((s, l, p.to_vec()));
        Ok(())
    })
    .unwrap();
    assert!(got == want, "read-only replay differs");
    assert_eq!(r.replayed as usize, want.len());
    assert_eq!((r.replayed + r.skipped) as usize, recs.len());
    assert!(r.ended_early.is_empty(), "{r:?}");

    // The collector's replay: the same frames, each pending before f runs.
    let c = open(dir.path(), &marks);
    let mut got = Vec::new();
    let r = c
        .replay(|s, l, p| {
            assert!(c.pending(s) > 0);
            got.push((s, l, p.to_vec()));
            Ok(())
        })
        .unwrap();
    assert!(got == want, "collector replay differs");
    assert_eq!(r.replayed as usize, want.len());
    // Publish every replayed frame under its original LSN, one block per stream.
    let mut marks2 = marks.clone();
    for s in STREAMS {
        let lsns: Vec<Lsn> = got.iter().filter(|g| g.0 == s).map(|g| g.1).collect();
        let w = c.watermark_for(s, &lsns);
        c.published(s, &lsns);
        marks2.observe(s, w);
    }
    c.close().unwrap();
    let again = collector::replay(dir.path(), &cfg(1), &marks2, |_, _, _| Ok(())).unwrap();
    assert_eq!(again.replayed, 0, "replay must converge: {again:?}");
}

/// A torn tail ends the replay of that segment without failing it; what
/// comes before the tear is replayed.
#[test]
fn a_torn_tail_ends_the_segment_not_the_replay() {
    use std::os::unix::fs::FileExt;
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    // Few enough records that the segment keeps room for the torn tail
    // however the ring batches them: each write takes at least a 4 KiB
    // block, and 20 rounds could fill the 64 KiB segment to its end.
    let recs = fill(&c, 3);
    c.close().unwrap();
    let (_, newest) = common::segment_files(dir.path(), 1).pop().unwrap();
    let end = common::scan_segment(&newest).data_end;
    assert!(end + 40 <= 64 << 10, "room for the torn tail behind {end}");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.write_all_at(&[0x5a; 40], end).unwrap();
    drop(f);
    let mut n = 0;
    let r = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, l, _| {
        n += 1;
        assert_eq!(l, n);
        Ok(())
    })
    .unwrap();
    assert_eq!(n as usize, recs.len());
    assert_eq!(r.ended_early, vec![(newest, end)]);
}

/// A crash while a segment file was being created leaves a newest file
/// whose header was never written. Recovery and the reader drop it, so the
/// segment before it is the newest one: the replay reads it as such (a
/// torn tail there is a crash's, and the only early end), and says nothing
/// of the dropped file.
#[test]
fn a_never_written_newest_file_is_dropped_as_recovery_drops_it() {
    use std::os::unix::fs::FileExt;
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    // Room for the torn tail, as above.
    let recs = fill(&c, 3);
    let next = c.wal().next_lsn();
    c.close().unwrap();
    let (_, newest) = common::segment_files(dir.path(), 1).pop().unwrap();
    let end = common::scan_segment(&newest).data_end;
    assert!(end + 40 <= 64 << 10, "room for the torn tail behind {end}");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.write_all_at(&[0x5a; 40], end).unwrap();
    drop(f);
    let blank = dir.path().join(ringwal::format::segment_file_name(1, next));
    std::fs::write(&blank, vec![0u8; 64 << 10]).unwrap();

    let mut got = Vec::new();
    let r = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, l, _| {
        got.push(l);
        Ok(())
    })
    .unwrap();
    let want: Vec<Lsn> = recs.iter().map(|r| r.1).collect();
    assert_eq!(got, want);
    assert_eq!(r.ended_early, vec![(newest, end)], "{r:?}");
    // Recovery agrees: it drops the blank file and cuts the same tail.
    let (wal, rep) = Wal::open(dir.path(), cfg(1)).unwrap();
    assert_eq!(rep.discarded, vec![blank], "{rep:?}");
    let read: Vec<Lsn> = wal
        .reader_from(0)
        .unwrap()
        .map(|r| r.unwrap().lsn)
        .collect();
    assert_eq!(read, want);
    wal.close().unwrap();
}

/// Damage recovery would refuse to open is an error of the replay, as the
/// reader reports it, not a segment quietly cut short.
#[test]
fn damage_in_a_sealed_segment_fails_the_replay() {
    use std::os::unix::fs::FileExt;
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    fill(&c, 300);
    c.close().unwrap();
    let files = common::segment_files(dir.path(), 1);
    assert!(files.len() > 3);
    let (_, oldest) = &files[0];
    let frame = common::scan_segment(oldest)
        .records()
        .nth(5)
        .unwrap()
        .clone();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(oldest)
        .unwrap();
    // The first payload byte, behind the frame's 24-byte header.
    f.write_all_at(&[!frame.payload[0]], frame.start + 24)
        .unwrap();
    drop(f);
    let read = ringwal::verify::records(dir.path(), &cfg(1), 0)
        .unwrap()
        .find_map(Result::err)
        .expect("the reader reports the damage");
    let mut n = 0;
    let r = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, _, _| {
        n += 1;
        Ok(())
    });
    match (r, read) {
        (
            Err(ringwal::Error::Corrupt { file, offset, .. }),
            ringwal::Error::Corrupt {
                file: f2,
                offset: o2,
                ..
            },
        ) => {
            assert_eq!(&file, oldest);
            assert_eq!((file, offset), (f2, o2), "as the reader reports it");
        }
        other => panic!("expected Corrupt in {}, got {other:?}", oldest.display()),
    }
    assert_eq!(n, 5, "the frames before the damage are replayed");
}

/// A segment missing between two others is a `Gap`, as recovery reports
/// it: its frames are lost, and the replay must not pass over them.
#[test]
fn a_missing_segment_fails_the_replay_with_a_gap() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    fill(&c, 300);
    c.close().unwrap();
    let files = common::segment_files(dir.path(), 1);
    assert!(files.len() > 3);
    std::fs::remove_file(&files[1].1).unwrap();
    let r = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, _, _| Ok(()));
    match r {
        Err(ringwal::Error::Gap {
            file,
            expected,
            found,
        }) => {
            assert_eq!(
                (file, expected, found),
                (files[2].1.clone(), files[1].0, files[2].0)
            );
        }
        other => panic!("expected Gap, got {other:?}"),
    }
}

/// LSNs a point-in-time recovery gave up (a skip frame) never held a
/// record: both replays read on past them.
#[test]
fn replays_read_on_past_skipped_lsns() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let recs = fill(&c, 300);
    c.close().unwrap();
    let files = common::segment_files(dir.path(), 1);
    assert!(files.len() > 3);
    // A blank file in the middle is damage: a point-in-time open keeps
    // what is before it and resumes above every LSN on disk.
    let (cut, _) = files[2];
    std::fs::write(&files[2].1, vec![0u8; 64 << 10]).unwrap();
    let pit = Config::builder()
        .node(1)
        .segment_bytes(64 << 10)
        .max_record_bytes(8 << 10)
        .recovery(ringwal::RecoveryMode::PointInTime)
        .build();
    let (wal, rep) = Wal::open(dir.path(), pit).unwrap();
    let (first, last) = rep.skipped.expect("a point-in-time open skips LSNs");
    assert_eq!(first, cut);
    let c = Collector::open(wal, &STREAMS, &Watermarks::new()).unwrap();
    let later = fill(&c, 3);
    let mut want: Vec<Lsn> = recs.iter().map(|r| r.1).filter(|&l| l < cut).collect();
    let mut got = Vec::new();
    c.replay(|_, l, _| {
        got.push(l);
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want, "the collector's replay");
    c.close().unwrap();
    want.extend(later.iter().map(|r| r.1));
    assert!(later[0].1 > last);
    got.clear();
    collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, l, _| {
        got.push(l);
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want, "the read-only replay");
}

/// No log yet (a crash before the first open finished): nothing to replay.
#[test]
fn a_missing_directory_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = collector::replay(
        &dir.path().join("none"),
        &cfg(1),
        &Watermarks::new(),
        |_, _, _| panic!("nothing to replay"),
    )
    .unwrap();
    assert_eq!(r, collector::Replayed::default());
}

/// Seed hard case, crash during replay: a block sealed while the replay
/// runs must not claim a frame the replay has not reached yet, even when
/// every frame replayed so far is already published.
#[test]
fn blocks_sealed_during_replay_are_capped() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let recs = fill(&c, 100);
    c.close().unwrap();

    let c = open(dir.path(), &Watermarks::new());
    // Before the replay, nothing on disk is covered.
    assert_eq!(c.covered(), 1);
    let fresh = c.append(0, b"new").unwrap().lsn();
    assert_eq!(c.watermark_for(0, &[fresh]), 1);
    let mut seen = 0;
    c.replay(|s, l, _| {
        seen += 1;
        // Publish each replayed frame at once, as a fast shard would.
        let w = c.watermark_for(s, &[l]);
        assert!(w <= l + 1, "watermark {w} claims past replayed LSN {l}");
        c.published(s, &[l]);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, recs.len());
    // Done: the new record is the only one pending.
    assert_eq!(c.watermark_for(0, &[]), fresh);
    assert_eq!(c.watermark_for(0, &[fresh]), fresh + 1);
    c.close().unwrap();
}

/// A replay stopped by an error (the process dying in it, as far as the
/// log can tell) keeps the cap where it stopped.
#[test]
fn an_interrupted_replay_keeps_the_cap() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    fill(&c, 50);
    c.close().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let mut n = 0;
    let err = c.replay(|_, _, _| {
        n += 1;
        if n == 40 {
            return Err(ringwal::Error::Closed);
        }
        Ok(())
    });
    assert!(err.is_err());
    let replayed_upto = 40;
    assert!(c.covered() <= replayed_upto + 1);
    c.close().unwrap();
}

/// A block may hold frames that never reached the log before a crash; the
/// restarted log must not hand those LSNs to new records.
#[test]
fn lsns_never_run_below_a_published_watermark() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    fill(&c, 10);
    let next = c.wal().next_lsn();
    c.close().unwrap();
    // Blocks claim 25 LSNs more than the log holds.
    let marks: Watermarks = [(0, next + 25), (1, 3)].into_iter().collect();
    let c = open(dir.path(), &marks);
    assert_eq!(c.fillers(), 25);
    let t = c.append(0, b"after").unwrap();
    assert!(t.lsn() >= next + 25);
    let mut filler_seen = false;
    c.replay(|s, _, _| {
        filler_seen |= s == FILLER_STREAM;
        Ok(())
    })
    .unwrap();
    assert!(!filler_seen);
    c.close().unwrap();
    let r = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |s, _, _| {
        assert_ne!(s, FILLER_STREAM);
        Ok(())
    })
    .unwrap();
    assert!(r.skipped >= 25);
}

/// The writer's configuration replays an encrypted log; one without its
/// key is refused with the key error, never garbage.
#[test]
fn an_encrypted_log_replays_with_the_writers_keys() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(ringwal::StaticKeys::new());
    keys.insert(1, ringwal::Key::new([7; 32]), true);
    let sealed = Config::builder()
        .node(1)
        .segment_bytes(64 << 10)
        .max_record_bytes(8 << 10)
        .encryption(keys)
        .build();
    let (wal, _) = Wal::open(dir.path(), sealed.clone()).unwrap();
    let mut last = None;
    for i in 0..50u32 {
        last = Some(wal.append((i % 3) as u16, &i.to_le_bytes()).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();

    let mut seen = Vec::new();
    let r = collector::replay(dir.path(), &sealed, &Watermarks::new(), |s, l, p| {
        seen.push((s, l, p.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(r.replayed, 50);
    for (i, (s, l, p)) in seen.iter().enumerate() {
        assert_eq!(
            (*s, *l, p.as_slice()),
            ((i % 3) as u16, i as Lsn + 1, &(i as u32).to_le_bytes()[..])
        );
    }
    let keyless = collector::replay(dir.path(), &cfg(1), &Watermarks::new(), |_, _, _| Ok(()));
    assert!(
        matches!(keyless, Err(ringwal::Error::Key { key_id: 1, .. })),
        "{keyless:?}"
    );
}

#[test]
fn truncate_drops_covered_segments_and_never_a_pending_frame() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let recs = fill(&c, 400);
    let before = common::segment_files(dir.path(), 1).len();
    assert!(before > 5);
    // Stream 2's first frame stays pending: nothing can go, whatever is asked.
    let mut marks = Watermarks::new();
    for s in STREAMS {
        let mut lsns: Vec<Lsn> = recs.iter().filter(|r| r.0 == s).map(|r| r.1).collect();
        if s == 2 {
            lsns.remove(0);
        }
        marks.observe(s, c.watermark_for(s, &lsns));
        c.published(s, &lsns);
    }
    assert_eq!(c.truncate(Lsn::MAX).unwrap(), 0);
    assert_eq!(c.truncate(marks.min_over(&STREAMS)).unwrap(), 0);
    // Publish it: now all but the active segment go.
    let first2 = recs.iter().find(|r| r.0 == 2).unwrap().1;
    marks.observe(2, c.watermark_for(2, &[first2]));
    c.published(2, &[first2]);
    let removed = c.truncate(marks.min_over(&STREAMS)).unwrap();
    assert_eq!(removed, before - 1);
    assert_eq!(common::segment_files(dir.path(), 1).len(), 1);
    c.close().unwrap();
    // Reopen: replay from the published watermarks finds nothing to do.
    let c = open(dir.path(), &marks);
    assert_eq!(c.replay(|_, _, _| Ok(())).unwrap().replayed, 0);
    c.close().unwrap();
}

/// Several nodes share one directory: each replays only its own frames.
#[test]
fn nodes_sharing_a_directory_never_replay_each_other() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    for node in [1u32, 2] {
        let (wal, _) = Wal::open(dir.path(), cfg(node)).unwrap();
        let c = Collector::open(wal, &STREAMS, &Watermarks::new()).unwrap();
        for i in 0..50u64 {
            let _ = c.append(0, format!("node{node}-{i}").as_bytes()).unwrap();
        }
        c.wal().sync().unwrap();
        c.close().unwrap();
    }
    for node in [1u32, 2] {
        let (wal, _) = Wal::open(dir.path(), cfg(node)).unwrap();
        let c = Collector::open(wal, &STREAMS, &Watermarks::new()).unwrap();
        let mut n = 0;
        c.replay(|_, _, p| {
            assert!(p.starts_with(format!("node{node}-").as_bytes()));
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 50);
        c.close().unwrap();
    }
}

/// Written-level acks with `sync_interval`: durability arrives without any
/// caller asking for it, and a quiet log is not synced again.
#[test]
fn background_sync_makes_written_records_durable_and_skips_quiet_logs() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), &Watermarks::new());
    let recs = fill(&c, 200); // rolls segments on the way
    let last = recs.last().unwrap().1;
    assert!(c.wal().stats().rolls > 0);
    // Liveness guard, not a performance bound: the interval is 20 ms.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.wal().durable_lsn() < last {
        assert!(Instant::now() < deadline, "the background sync never came");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A sync issued while a later write was in flight leaves the segment
    // dirty, and one more sync follows; wait until the count settles...
    let mut syncs = c.wal().stats().syncs;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(100) {
        assert!(Instant::now() < deadline, "syncs never settled");
        std::thread::sleep(Duration::from_millis(5));
        let now = c.wal().stats().syncs;
        if now != syncs {
            (syncs, quiet_since) = (now, Instant::now());
        }
    }
    // ...then ten more intervals with nothing written must bring none.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.wal().stats().syncs, syncs, "a quiet log was synced again");
    c.close().unwrap();
}

/// Power loss on the simulated disk: what the background sync made
/// durable survives, and the collector's replay (which reads through the
/// log's own Vfs) hands all of it back; nothing after the cut is invented.
#[test]
fn durable_records_survive_a_power_loss_and_replay_through_the_vfs() {
    use ringwal_platform::sim::{Faults, SimFs};
    let disk = SimFs::new(7, Faults::default());
    let sim_cfg = |disk: &SimFs| {
        Config::builder()
            .segment_bytes(64 << 10)
            .max_record_bytes(8 << 10)
            .durability(Durability::Deferred {
                sync_interval: Some(Duration::from_millis(10)),
            })
            .sim(disk)
            .build()
    };
    let dir = Path::new("/sim/collector");
    let (wal, _) = Wal::open(dir, sim_cfg(&disk)).unwrap();
    let c = Collector::open(wal, &STREAMS, &Watermarks::new()).unwrap();
    let recs = fill(&c, 100);
    let last = recs.last().unwrap().1;
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.wal().durable_lsn() < last {
        assert!(Instant::now() < deadline, "the background sync never came");
        std::thread::sleep(Duration::from_millis(2));
    }
    // More records, then the power goes before any sync can cover them all.
    let more = fill(&c, 5);
    let after = disk.crash(1);
    drop(c); // its disk is frozen now; closing fails, which is the point
    let (wal, _) = Wal::open(dir, sim_cfg(&after)).unwrap();
    let c = Collector::open(wal, &STREAMS, &Watermarks::new()).unwrap();
    let mut got = Vec::new();
    c.replay(|s, l, p| {
        got.push((s, l, p.to_vec()));
        Ok(())
    })
    .unwrap();
    assert!(
        got.len() >= recs.len(),
        "{} of {} durable records",
        got.len(),
        recs.len()
    );
    let all: Vec<_> = recs.iter().chain(&more).cloned().collect();
    assert!(
        got == all[..got.len()],
        "replay differs from what was appended"
    );
    c.close().unwrap();
}

/// Regression: a `Durable` wait in written mode beside `Written` waiters,
/// across segment rolls. A sync issued while a completed write still sat
/// behind the new segment's install barrier used to mark the segment
/// clean without covering that write, so the durable waiter hung forever.
#[test]
fn durable_waits_in_written_mode_never_hang_across_rolls() {
    let _logs = common::opening_logs();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), cfg(1)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for k in 0..4u16 {
                let (wal, tx) = (&wal, tx.clone());
                s.spawn(move || {
                    let level = if k == 0 {
                        Level::Durable
                    } else {
                        Level::Written
                    };
                    for i in 0..400u64 {
                        let t = wal.append(k, &body(k, i)).unwrap();
                        t.wait(level).unwrap();
                    }
                    tx.send(()).unwrap();
                });
            }
            for _ in 0..4 {
                // Liveness guard, not a performance bound.
                if rx.recv_timeout(Duration::from_secs(60)).is_err() {
                    eprintln!("round {round}: a waiter hung: {:?}", wal.stats());
                    std::process::abort();
                }
            }
        });
        assert!(wal.stats().rolls > 0);
        wal.close().unwrap();
    }
}

/// Many producers, two shards per stream, shards sealing and publishing
/// concurrently with random publish failures. Every claimed watermark is
/// checked against a model: each LSN of the stream below it must be in a
/// published block or in the sealing block itself.
#[test]
fn concurrent_shards_never_claim_an_unpublished_frame() {
    let _logs = common::opening_logs();
    let dir = tempfile::tempdir().unwrap();
    let c = Arc::new(open(dir.path(), &Watermarks::new()));
    // The model: every LSN handed out per stream (recorded in the hook, so
    // in LSN order) and every LSN published. `gate` makes "publish in the
    // model and in the collector" atomic with respect to a seal.
    let handed: Arc<Mutex<BTreeMap<u16, BTreeSet<Lsn>>>> = Arc::default();
    let published: Arc<Mutex<BTreeMap<u16, BTreeSet<Lsn>>>> = Arc::default();
    let gate = Arc::new(RwLock::new(()));
    let producing = AtomicUsize::new(6);
    let shards: Vec<Vec<Arc<Mutex<Vec<Lsn>>>>> = STREAMS
        .iter()
        .map(|_| (0..2).map(|_| Arc::default()).collect())
        .collect();
    let mut rng = common::seeded_rng("concurrent shards");
    let seeds: Vec<u64> = (0..12).map(|_| rng.r#gen()).collect();
    std::thread::scope(|s| {
        for p in 0..6u64 {
            let (c, handed, shards, producing) = (&c, &handed, &shards, &producing);
            s.spawn(move || {
                for i in 0..1500u64 {
                    let stream = ((p + i) % 3) as u16;
                    let k = ((i / 3) % 2) as usize;
                    let q = &shards[stream as usize][k];
                    let _ = c
                        .append_then(stream, &body(stream, i), |l| {
                            handed.lock().unwrap().entry(stream).or_default().insert(l);
                            q.lock().unwrap().push(l);
                        })
                        .unwrap();
                }
                producing.fetch_sub(1, Ordering::SeqCst);
            });
        }
        for (si, stream) in STREAMS.into_iter().enumerate() {
            for k in 0..2 {
                let seed = seeds[si * 2 + k];
                let (c, handed, published, gate, producing) =
                    (&c, &handed, &published, &gate, &producing);
                let q = shards[si][k].clone();
                s.spawn(move || {
                    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
                    let mut held: Vec<Lsn> = Vec::new();
                    loop {
                        // Read the flag first: once it is zero, the queue is final.
                        let last_round = producing.load(Ordering::SeqCst) == 0;
                        held.extend(q.lock().unwrap().drain(..));
                        if held.is_empty() {
                            if last_round {
                                break;
                            }
                            std::thread::sleep(Duration::from_micros(200));
                            continue;
                        }
                        assert!(
                            held.windows(2).all(|w| w[0] < w[1]),
                            "shard list not ascending"
                        );
                        let w = {
                            let _g = gate.read().unwrap();
                            let w = c.watermark_for(stream, &held);
                            let handed = handed.lock().unwrap();
                            let published = published.lock().unwrap();
                            let empty = BTreeSet::new();
                            let pubd = published.get(&stream).unwrap_or(&empty);
                            for &l in handed.get(&stream).unwrap_or(&empty).range(..w) {
                                assert!(
                                    pubd.contains(&l) || held.binary_search(&l).is_ok(),
                                    "watermark {w} of stream {stream} claims unpublished LSN {l}"
                                );
                            }
                            w
                        };
                        assert!(w > 0);
                        if rng.gen_ratio(1, 4) {
                            continue; // the publish failed: keep the frames, retry later
                        }
                        let _g = gate.write().unwrap();
                        published
                            .lock()
                            .unwrap()
                            .entry(stream)
                            .or_default()
                            .extend(held.iter().copied());
                        c.published(stream, &held);
                        held.clear();
                    }
                });
            }
        }
    });
    for s in STREAMS {
        assert_eq!(c.pending(s), 0);
    }
    assert_eq!(c.covered(), c.wal().next_lsn());
    Arc::into_inner(c).unwrap().close().unwrap();
}
