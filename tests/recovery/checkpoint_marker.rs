//! Checkpoint markers: `Wal::checkpoint_marker` writes one, recovery
//! reports the newest one it keeps, `checkpoint_to_marker` deletes only
//! what the marker's snapshot covers, and a marker torn off with the tail
//! is not reported.

use crate::common::{
    self, as_after_crash, for_each_backend, open_checked, scan_segment, segment_files, NODE,
};
use ringwal::{Backend, CheckpointMarker, Error, Kind, Level, Wal};

/// Large records, so that a segment holds only a handful of them and the
/// first segment ends below LSN 10.
fn payload(i: u64) -> Vec<u8> {
    let mut p = vec![(i % 251) as u8; 7000];
    p[..8].copy_from_slice(&i.to_le_bytes());
    p
}

fn cfg(backend: Backend) -> ringwal::Config {
    common::small(backend).build()
}

/// Append records until LSN `upto` is handed out.
fn fill_to(wal: &Wal, upto: u64) {
    while wal.next_lsn() <= upto {
        let lsn = wal.next_lsn();
        let _ = wal.append(1, &payload(lsn)).unwrap();
    }
}

#[test]
fn marker_survives_reopen_and_is_reported() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (wal, report) = Wal::open(&dir, cfg(backend)).unwrap();
        assert_eq!(report.last_checkpoint, None);
        assert_eq!(wal.last_checkpoint_marker(), None);
        fill_to(&wal, 12);
        let t = wal.checkpoint_marker(10).unwrap();
        let marker = CheckpointMarker {
            lsn: t.lsn(),
            snapshot_lsn: 10,
        };
        assert_eq!(marker.lsn, 13);
        assert_eq!(wal.last_checkpoint_marker(), Some(marker));
        fill_to(&wal, 30);
        wal.close().unwrap();

        let (wal, report) = open_checked(&dir, cfg(backend)).unwrap();
        assert_eq!(report.last_checkpoint, Some(marker), "{report:?}");
        assert_eq!(wal.last_checkpoint_marker(), Some(marker));
        // Readers see the marker with its kind.
        let rec = wal
            .reader_from(marker.lsn)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(rec.lsn, marker.lsn);
        assert_eq!(rec.kind, Kind::Checkpoint);
        assert_eq!(rec.stream, 0);
        assert_eq!(rec.payload, 10u64.to_le_bytes());
        wal.close().unwrap();
    });
}

#[test]
fn marker_beyond_the_log_is_refused() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(tmp.path(), cfg(backend)).unwrap();
        fill_to(&wal, 3);
        let next = wal.next_lsn();
        match wal.checkpoint_marker(next) {
            Err(Error::PastEnd { what, lsn, last }) => {
                assert_eq!(
                    (what, lsn, last),
                    ("snapshot_lsn", next, wal.next_lsn() - 1)
                );
                assert_eq!(last, next - 1);
            }
            other => panic!("expected PastEnd, got {other:?}"),
        }
        assert_eq!(wal.next_lsn(), next, "nothing appended");
        assert_eq!(wal.last_checkpoint_marker(), None);
        // Zero (a snapshot of nothing) and the last LSN are fine.
        let _ = wal.checkpoint_marker(0).unwrap();
        let t = wal.checkpoint_marker(next).unwrap();
        assert_eq!(
            wal.last_checkpoint_marker(),
            Some(CheckpointMarker {
                lsn: t.lsn(),
                snapshot_lsn: next
            })
        );
        wal.close().unwrap();
    });
}

#[test]
fn checkpoint_to_marker_removes_only_covered_segments() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (wal, _) = Wal::open(&dir, cfg(backend)).unwrap();
        // No marker: nothing to do.
        assert_eq!(wal.checkpoint_to_marker().unwrap(), 0);
        fill_to(&wal, 12);
        let t = wal.checkpoint_marker(10).unwrap();
        fill_to(&wal, 60);
        wal.sync().unwrap();
        let dir = wal.dir().to_path_buf();
        let before = segment_files(&dir, NODE);
        assert!(before.len() >= 4, "several segments: {before:?}");
        // Sealed segments whose every LSN is at or below 10.
        let covered = before.windows(2).filter(|w| w[1].0 - 1 <= 10).count();
        assert!(covered >= 1, "the first segment ends below 10: {before:?}");
        assert!(covered < before.len() - 1, "not every segment is covered");

        let removed = wal.checkpoint_to_marker().unwrap();
        assert_eq!(removed, covered);
        assert!(wal.durable_lsn() >= t.lsn());
        let oldest = wal.oldest_lsn();
        assert!(oldest > 1 && oldest <= 11, "oldest kept {oldest}");
        // Idempotent.
        assert_eq!(wal.checkpoint_to_marker().unwrap(), 0);

        let recs: Vec<_> = wal
            .reader_from(11)
            .unwrap()
            .collect::<ringwal::Result<_>>()
            .unwrap();
        assert_eq!(recs.first().map(|r| r.lsn), Some(11));
        assert_eq!(recs.last().map(|r| r.lsn), Some(60));
        for r in &recs {
            if r.lsn == t.lsn() {
                assert_eq!(r.kind, Kind::Checkpoint);
            } else {
                assert_eq!(r.kind, Kind::Data);
                assert_eq!(r.payload, payload(r.lsn), "LSN {}", r.lsn);
            }
        }
        wal.close().unwrap();

        // The marker is still there after the checkpoint and a reopen.
        let (wal, report) = open_checked(&dir, cfg(backend)).unwrap();
        assert_eq!(
            report.last_checkpoint,
            Some(CheckpointMarker {
                lsn: t.lsn(),
                snapshot_lsn: 10
            })
        );
        assert_eq!(wal.checkpoint_to_marker().unwrap(), 0);
        wal.close().unwrap();
    });
}

#[test]
fn checkpoint_to_marker_waits_for_an_undurable_marker() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(tmp.path(), cfg(backend)).unwrap();
        fill_to(&wal, 40);
        let t = wal.checkpoint_marker(20).unwrap();
        wal.checkpoint_to_marker().unwrap();
        assert!(wal.durable_lsn() >= t.lsn());
        t.wait(Level::Durable).unwrap();
        assert!(wal.oldest_lsn() <= 21);
        wal.close().unwrap();
    });
}

#[test]
fn a_log_without_marker_reports_none() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (wal, _) = Wal::open(&dir, cfg(backend)).unwrap();
        fill_to(&wal, 30);
        wal.close().unwrap();
        let (wal, report) = open_checked(&dir, cfg(backend)).unwrap();
        assert_eq!(report.last_checkpoint, None);
        assert_eq!(wal.last_checkpoint_marker(), None);
        assert_eq!(wal.checkpoint_to_marker().unwrap(), 0);
        wal.close().unwrap();
    });
}

#[test]
fn a_marker_in_a_cut_tail_is_not_reported() {
    for_each_backend(|backend| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (wal, _) = Wal::open(&dir, cfg(backend)).unwrap();
        fill_to(&wal, 8);
        let kept = wal.checkpoint_marker(5).unwrap();
        fill_to(&wal, 25);
        let torn = wal.checkpoint_marker(20).unwrap();
        wal.sync().unwrap();
        wal.close().unwrap();

        // Tear the newest marker (the last record) as a crash would.
        as_after_crash(&dir, NODE);
        let (_, newest) = segment_files(&dir, NODE).pop().unwrap();
        let seg = scan_segment(&newest);
        let frame = seg
            .records()
            .find(|f| f.lsn == torn.lsn())
            .expect("the marker is in the newest segment")
            .clone();
        assert_eq!(frame.kind, Kind::Checkpoint);
        let mut img = seg.bytes.clone();
        img[frame.start as usize..seg.data_end as usize].fill(0);
        img[frame.start as usize + 20] = 0xa5; // a damaged frame, not a clean end
        common::unvouch_from(&mut img, frame.start, torn.lsn() - 1);
        std::fs::write(&newest, &img).unwrap();

        let (wal, report) = open_checked(&dir, cfg(backend)).unwrap();
        assert_eq!(
            report.truncated.as_ref().map(|t| t.offset),
            Some(frame.start),
            "{report:?}"
        );
        assert_eq!(report.last_lsn, torn.lsn() - 1, "{report:?}");
        let want = CheckpointMarker {
            lsn: kept.lsn(),
            snapshot_lsn: 5,
        };
        assert_eq!(report.last_checkpoint, Some(want), "{report:?}");
        assert_eq!(wal.last_checkpoint_marker(), Some(want));
        wal.close().unwrap();
    });
}
