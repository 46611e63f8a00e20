//! The archive (feature `archive`) on a local object store: the archive
//! point holding segments on disk, what restore gives back (whole, to an
//! LSN, refusing damage by name and leaving nothing behind), and a
//! standby that follows. S3 and the faults that need processes are in
//! the CLI's tests (`cli/tests/cli/archive.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringwal::archive::{self, Archiver, Got, RestoreTo, Restored, Store, StoreOptions};
use ringwal::{
    ArchiveProblem, Backend, Config, DurabilityObserver, Error, Level, Lsn, Wal, WhenFull,
};

use crate::common::{self, opening_logs, BACKENDS};

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// A scratch directory with the paths of a log, its archive and a place
/// to restore it.
fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let [log, arch, back] = ["log", "arch", "back"].map(|n| t.path().join(n));
    (t, log, arch, back)
}

/// An archiver of the log in `log` into `arch` (default store options).
fn archiver(log: &Path, cfg: &Config, arch: &Path) -> ringwal::Result<Archiver> {
    Archiver::open(log, cfg, &url(arch), &StoreOptions::default())
}

/// Restore the archive in `arch` (default store options) into `to`.
fn restore(arch: &Path, to: &Path, cfg: &Config, upto: RestoreTo) -> ringwal::Result<Restored> {
    archive::restore(&url(arch), &StoreOptions::default(), to, cfg, upto)
}

fn payload(i: u64) -> Vec<u8> {
    format!("record {i:06} ").repeat(30).into_bytes()
}

/// Append `n` durable records, returning the last LSN.
fn fill(wal: &Wal, n: u64) -> Lsn {
    let mut last = None;
    for i in 0..n {
        last = Some(wal.append(1, &payload(i)).expect("append"));
    }
    let t = last.expect("n > 0");
    t.wait(Level::Durable).expect("durable");
    t.lsn()
}

/// Every record in `dir` (node 1), as (LSN, payload).
fn records(dir: &Path, cfg: &Config) -> Vec<(Lsn, Vec<u8>)> {
    ringwal::verify::records(dir, cfg, 0)
        .expect("records")
        .map(|r| r.map(|r| (r.lsn, r.payload)).expect("record"))
        .collect()
}

#[derive(Default)]
struct Held(AtomicU64);

impl DurabilityObserver for Held {
    fn advanced(&self, _: Lsn, _: Lsn) {}
    fn log_held_by_archive(&self, held_bytes: u64, _archived_lsn: Lsn) {
        self.0.store(held_bytes, Ordering::Relaxed);
    }
}

#[test]
fn checkpoints_keep_what_the_archive_lacks_and_restore_brings_all_back() {
    let _g = opening_logs();
    for backend in BACKENDS {
        let (_t, log, arch, back) = dirs();
        let held = Arc::new(Held::default());
        let cfg = common::small(backend).observer(held.clone()).build();
        let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
        fill(&wal, 300);
        let mut a = Archiver::attach(&wal, &url(&arch), &StoreOptions::default()).unwrap();
        let first = a.pass().unwrap();
        assert!(first.sealed >= 2, "{backend:?}: {first:?}");
        assert_eq!(
            first.last_lsn,
            wal.durable_lsn(),
            "{backend:?}: the tail reaches durable"
        );
        // In the writer's process the archive knows every LSN handed out,
        // not only what the node manifest said at open (0 here).
        let listed = archive::list(&url(&arch), &StoreOptions::default(), 1)
            .unwrap()
            .unwrap();
        assert_eq!(listed.handed_out, wal.next_lsn() - 1, "{backend:?}");
        // The store's files and directories have the log's modes.
        assert_modes(&arch, 0o600, 0o700);
        // More sealed segments that the archive does not hold yet.
        let last = fill(&wal, 300);
        let before = wal.stats().segments;
        wal.checkpoint(last).unwrap();
        let s = wal.stats();
        assert_eq!(s.archived_lsn, Some(first.archived_lsn), "{backend:?}");
        assert!(s.oldest_lsn == first.archived_lsn + 1, "{backend:?}: {s:?}");
        assert!(
            s.segments < before && s.archive_held_bytes > 0,
            "{backend:?}: {s:?}"
        );
        assert_eq!(
            held.0.load(Ordering::Relaxed),
            s.archive_held_bytes,
            "{backend:?}"
        );
        // Once archived, the same checkpoint releases them.
        let second = a.pass().unwrap();
        assert!(second.archived_lsn > first.archived_lsn);
        wal.checkpoint(last).unwrap();
        let s = wal.stats();
        assert_eq!(
            (s.segments, s.archive_held_bytes),
            (1, 0),
            "{backend:?}: {s:?}"
        );
        let last = fill(&wal, 50);
        a.pass().unwrap();
        wal.close().unwrap();

        // The archive holds every record ever appended, the ones the log
        // released included.
        let r = restore(&arch, &back, &cfg, RestoreTo::End).unwrap();
        assert_eq!(
            (r.first_lsn, r.last_lsn, r.given_up),
            (1, last, None),
            "{backend:?}"
        );
        let got = records(&back, &cfg);
        assert_eq!(got.len() as u64, last, "{backend:?}");
        for (i, (lsn, p)) in got.iter().enumerate() {
            assert_eq!(
                (*lsn, p),
                (i as u64 + 1, &payload(i as u64 % 300 % 300)),
                "{backend:?}"
            );
        }
        // A writer opening the restored log goes on from there.
        let (wal, _) = Wal::open(&back, cfg.clone()).unwrap();
        assert_eq!(wal.append(1, b"more").unwrap().lsn(), last + 1);
        wal.close().unwrap();
    }
}

#[test]
fn release_unarchived_lets_checkpoints_and_drops_go_past_the_archive() {
    let _g = opening_logs();
    let (_t, log, arch, _) = dirs();
    let cfg = common::small(Backend::Threaded).build();
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    fill(&wal, 100);
    Archiver::attach(&wal, &url(&arch), &StoreOptions::default())
        .unwrap()
        .pass()
        .unwrap();
    let last = fill(&wal, 400);
    wal.close().unwrap();
    let release = common::small(Backend::Threaded)
        .release_unarchived(true)
        .build();
    let (wal, _) = Wal::open(&log, release).unwrap();
    wal.checkpoint(last).unwrap();
    assert_eq!(wal.stats().segments, 1);
    wal.close().unwrap();

    // The hard limit's drop respects the archive too, and says so.
    let (_t, log, arch, _) = dirs();
    let held = Arc::new(Held::default());
    let limit = 4 * common::SEGMENT_BYTES;
    let cfg = common::small(Backend::Threaded)
        .max_log_bytes(Some(limit), WhenFull::DropOldest)
        .observer(held.clone())
        .build();
    let (wal, _) = Wal::open(&log, cfg).unwrap();
    fill(&wal, 50);
    Archiver::attach(&wal, &url(&arch), &StoreOptions::default())
        .unwrap()
        .pass()
        .unwrap();
    fill(&wal, 800);
    let s = wal.stats();
    assert!(s.disk_bytes > limit, "held over the limit: {s:?}");
    assert_eq!(s.dropped_records, 0, "{s:?}");
    assert!(held.0.load(Ordering::Relaxed) > 0);
    wal.close().unwrap();
}

#[test]
fn restore_to_an_lsn_gives_up_the_rest_and_refuses_damage_by_name() {
    let _g = opening_logs();
    let (t, log, arch, _) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let last = fill(&wal, 400);
    Archiver::attach(&wal, &url(&arch), &StoreOptions::default())
        .unwrap()
        .pass()
        .unwrap();
    wal.close().unwrap();

    let to = t.path().join("to");
    let r = restore(&arch, &to, &cfg, RestoreTo::Lsn(123)).unwrap();
    assert_eq!((r.last_lsn, r.given_up), (123, Some((124, last))));
    let got = records(&to, &cfg);
    assert_eq!(got.last().map(|r| r.0), Some(123));
    assert_eq!(got.len(), 123);
    let report = ringwal::verify::verify(&to, &cfg).unwrap();
    assert_eq!(report.consistent(), Some(true), "{report:?}");
    let (wal, _) = Wal::open(&to, cfg.clone()).unwrap();
    assert_eq!(
        wal.append(1, b"x").unwrap().lsn(),
        last + 1,
        "no LSN handed out twice"
    );
    wal.close().unwrap();

    // A directory holding a log is refused and left as it was.
    let e = restore(&arch, &to, &cfg, RestoreTo::End).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Archive {
                problem: ArchiveProblem::TargetHoldsLog,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(records(&to, &cfg).len(), 124);

    // A damaged object, then a missing one: named, and nothing left.
    let segs = arch.join("00001/segments");
    let mut objs: Vec<_> = std::fs::read_dir(&segs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    objs.sort();
    let victim = &objs[1];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[9000] ^= 0x40;
    std::fs::write(victim, &bytes).unwrap();
    let to = t.path().join("damaged");
    let e = restore(&arch, &to, &cfg, RestoreTo::End).unwrap_err();
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        matches!(&e, Error::Archive { problem: ArchiveProblem::Damaged(_), object, .. } if object.ends_with(name)),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(&to).unwrap().count(),
        0,
        "nothing left behind"
    );
    std::fs::remove_file(victim).unwrap();
    let e = restore(&arch, &to, &cfg, RestoreTo::End).unwrap_err();
    assert!(
        matches!(&e, Error::Archive { problem: ArchiveProblem::Missing, object, .. } if object.ends_with(name)),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(&to).unwrap().count(),
        0,
        "nothing left behind"
    );
}

#[test]
fn an_archiver_in_another_process_ships_only_what_the_vouches_prove_durable() {
    let _g = opening_logs();
    let (_t, log, arch, _) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let mut a = archiver(&log, &cfg, &arch).unwrap();
    for round in 0..5 {
        // One record a write: each write vouches for the ones before it.
        for i in 0..60 {
            wal.append(1, &payload(i))
                .unwrap()
                .wait(Level::Durable)
                .unwrap();
        }
        let p = a.pass().unwrap();
        let durable = wal.durable_lsn();
        assert!(
            p.last_lsn <= durable,
            "round {round}: {p:?} past durable {durable}"
        );
        assert!(
            p.last_lsn + 1 >= durable,
            "round {round}: {p:?}, durable {durable}"
        );
    }
    let last = wal.durable_lsn();
    wal.close().unwrap();
    // A clean close vouches for everything.
    assert_eq!(a.pass().unwrap().last_lsn, last);
}

#[test]
fn a_standby_follows_the_archive_and_reads_meanwhile() {
    let _g = opening_logs();
    let t = tempfile::tempdir().unwrap();
    let (log, arch, standby) = (
        t.path().join("log"),
        t.path().join("arch"),
        t.path().join("sb"),
    );
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    fill(&wal, 100);
    let mut a = Archiver::attach(&wal, &url(&arch), &StoreOptions::default()).unwrap();
    a.pass().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (u, sb, cfg, stop) = (url(&arch), standby.clone(), cfg.clone(), stop.clone());
        std::thread::spawn(move || {
            archive::follow(
                &u,
                &StoreOptions::default(),
                &sb,
                &cfg,
                Duration::from_millis(20),
                &|| stop.load(Ordering::Relaxed),
            )
        })
    };
    for _ in 0..4 {
        let last = fill(&wal, 150);
        a.pass().unwrap();
        // The standby catches up, and reads as a log meanwhile.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let seen = ringwal::verify::records(&standby, &cfg, 0)
                .map(|r| r.filter_map(|r| r.ok()).last().map_or(0, |r| r.lsn))
                .unwrap_or(0);
            if seen == last {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "standby stuck at {seen} of {last}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let r = follower.join().unwrap().unwrap();
    wal.close().unwrap();
    assert_eq!(r.last_lsn, 700);
    let report = ringwal::verify::verify(&standby, &cfg).unwrap();
    assert_eq!(report.consistent(), Some(true), "{report:?}");
    assert_eq!(records(&standby, &cfg), records(&log, &cfg));
}

#[test]
fn a_store_puts_gets_lists_and_deletes_whole_objects() {
    let t = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default();
    let s = Store::open(&url(t.path()), &opts).unwrap();
    s.put("a/x", b"one".to_vec()).unwrap();
    s.put("a/y", b"two".to_vec()).unwrap();
    s.put("b/z", b"three".to_vec()).unwrap();
    s.put("a/x", b"uno".to_vec()).unwrap();
    assert_eq!(s.list("a").unwrap(), ["x", "y"]);
    assert_eq!(s.get("a/x").unwrap(), Got::Bytes(b"uno".to_vec()));
    assert_eq!(s.get("a/nope").unwrap(), Got::Missing);
    let e = s.get_existing("a/nope").unwrap_err();
    assert!(
        matches!(&e, Error::Archive { problem: ArchiveProblem::Missing, object, .. } if object.ends_with("a/nope")),
        "{e}"
    );
    s.delete("a/x").unwrap();
    s.delete("a/x").unwrap();
    assert_eq!(s.list("a").unwrap(), ["y"]);
    for bad in ["http://host/x", "file://relative/dir", "s3://", "dir"] {
        let e = Store::open(bad, &opts).err().expect(bad);
        assert!(matches!(e, Error::InvalidConfig(_)), "{bad}: {e}");
    }
}

#[test]
fn the_dry_run_the_offline_truncation_and_a_damaged_point_keep_what_the_archive_lacks() {
    let _g = opening_logs();
    let (_t, log, arch, _) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    fill(&wal, 300);
    let archived = Archiver::attach(&wal, &url(&arch), &StoreOptions::default())
        .unwrap()
        .pass()
        .unwrap()
        .archived_lsn;
    let last = fill(&wal, 300);
    wal.close().unwrap();

    let plan = ringwal::verify::checkpoint_plan(&log, &cfg, last).unwrap();
    assert!(!plan.remove.is_empty());
    assert!(
        plan.remove.iter().all(|r| r.last_lsn <= archived),
        "{plan:?}"
    );
    let stat = ringwal::verify::stat(&log, &cfg).unwrap();
    assert_eq!(stat.archived_lsn, Some(archived));
    assert!(stat.archive_held_bytes() > 0);
    let done = ringwal::files::truncate_segments(&log, &cfg, last + 1).unwrap();
    assert_eq!(done.removed, plan.remove, "the dry run is the deed");
    assert_eq!(done.oldest_kept, archived + 1);

    // A damaged archive point holds every segment.
    let point = log.join("00001.archived");
    let mut bytes = std::fs::read(&point).unwrap();
    bytes[30] ^= 1;
    std::fs::write(&point, &bytes).unwrap();
    assert_eq!(
        ringwal::verify::stat(&log, &cfg).unwrap().archived_lsn,
        Some(0)
    );
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    assert_eq!(wal.checkpoint(last).unwrap(), 0);
    wal.close().unwrap();
    let release = common::small(Backend::Threaded)
        .release_unarchived(true)
        .build();
    let done = ringwal::files::truncate_segments(&log, &release, last + 1).unwrap();
    assert!(!done.removed.is_empty());
}

#[test]
fn one_archiver_at_a_time() {
    let _g = opening_logs();
    let (_t, log, arch, _) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    fill(&wal, 10);
    let first = Archiver::attach(&wal, &url(&arch), &StoreOptions::default()).unwrap();
    let e = archiver(&log, &cfg, &arch).err().expect("locked");
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    // Said as what it is: another archiver, not another writer.
    assert!(
        e.to_string()
            .contains("the log's archive is locked by another archiver"),
        "{e}"
    );
    drop(first);
    let mut second = archiver(&log, &cfg, &arch).unwrap();
    // A clean close vouches for every record: all of them go.
    wal.close().unwrap();
    assert_eq!(second.pass().unwrap().last_lsn, 10);
}

#[test]
fn an_encrypted_log_stays_encrypted_in_the_archive() {
    let _g = opening_logs();
    let (_t, log, arch, back) = dirs();
    let keys = Arc::new(ringwal::StaticKeys::new());
    keys.insert(7, ringwal::Key::new([7; 32]), true);
    let cfg = common::small(Backend::Threaded)
        .encryption(keys.clone())
        .build();
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let marker = b"PLAINTEXT-MARKER-";
    let mut last = None;
    for i in 0..2000u32 {
        let mut p = marker.to_vec();
        p.extend_from_slice(&i.to_le_bytes());
        last = Some(wal.append(1, &p).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let mut a = archiver(&log, &cfg, &arch).unwrap();
    assert_eq!(a.pass().unwrap().last_lsn, 2000);
    drop(a);
    // No object shows a payload in the clear.
    let mut objects = Vec::new();
    for sub in ["00001/segments", "00001/tail"] {
        if let Ok(rd) = std::fs::read_dir(arch.join(sub)) {
            objects.extend(rd.map(|e| e.unwrap().path()));
        }
    }
    assert!(objects.len() >= 2, "{objects:?}");
    for o in &objects {
        let bytes = std::fs::read(o).unwrap();
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker),
            "{}",
            o.display()
        );
    }
    // Restored, it reads with the key and not without.
    restore(&arch, &back, &cfg, RestoreTo::End).unwrap();
    let got = records(&back, &cfg);
    assert_eq!(got.len(), 2000);
    assert!(got.iter().all(|(_, p)| p.starts_with(marker)));
    let keyless = common::cfg(Backend::Threaded);
    let e = ringwal::verify::records(&back, &keyless, 0)
        .unwrap()
        .find_map(|r| r.err())
        .expect("a key error without the key");
    assert!(matches!(e, Error::Key { .. }), "{e}");
}

#[test]
fn a_segment_a_crash_left_unwritten_does_not_seal_the_one_before() {
    let _g = opening_logs();
    let (_t, log, arch, back) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let last = fill(&wal, 20);
    wal.close().unwrap();
    // What a crash while the next segment was being made leaves: its
    // name over a blank, preallocated file.
    let blank = log.join(ringwal::format::segment_file_name(1, last + 1));
    std::fs::write(&blank, vec![0u8; common::SEGMENT_BYTES as usize]).unwrap();
    let mut a = archiver(&log, &cfg, &arch).unwrap();
    let p = a.pass().unwrap();
    assert_eq!(
        (p.sealed, p.archived_lsn, p.last_lsn),
        (0, 0, last),
        "{p:?}"
    );
    // The next writer discards the blank file and goes on in the segment
    // before it; the archive follows.
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let last = fill(&wal, 300);
    wal.close().unwrap();
    assert_eq!(a.pass().unwrap().last_lsn, last);
    drop(a);
    restore(&arch, &back, &cfg, RestoreTo::End).unwrap();
    assert_eq!(records(&back, &cfg), records(&log, &cfg));
}

/// Every file under `dir` has mode `file`, every directory `dir_mode`
/// (the root included).
fn assert_modes(dir: &Path, file: u32, dir_mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, dir_mode, "{}", dir.display());
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            assert_modes(&p, file, dir_mode);
        } else {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, file, "{}", p.display());
        }
    }
}

#[test]
fn the_archive_dates_its_objects_and_restores_to_a_time() {
    let _g = opening_logs();
    let (_t, log, arch, back) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    let first = fill(&wal, 250);
    std::thread::sleep(Duration::from_millis(30));
    let split = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_millis(30));
    let last = fill(&wal, 250);
    wal.close().unwrap();
    archiver(&log, &cfg, &arch).unwrap().pass().unwrap();
    let l = archive::list(&url(&arch), &StoreOptions::default(), 1)
        .unwrap()
        .unwrap();
    assert!(l.objects.len() >= 2);
    for o in &l.objects {
        let (a, b) = o.written.expect("format version 3 dates every write");
        assert!(a <= b, "{o:?}");
    }
    let r = restore(&arch, &back, &cfg, RestoreTo::Time(split)).unwrap();
    assert_eq!((r.last_lsn, r.given_up), (first, Some((first + 1, last))));
    let got = records(&back, &cfg);
    assert_eq!(got.last().map(|r| r.0), Some(first));
}

#[test]
fn an_archiver_of_a_missing_directory_is_refused_and_creates_nothing() {
    let (_t, log, arch, _) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let e = archiver(&log, &cfg, &arch).err().expect("no log there");
    assert!(matches!(e, Error::NoLog { .. }), "{e}");
    assert!(!log.exists());
}

#[test]
fn a_restored_log_written_again_is_refused_by_its_old_archive() {
    let _g = opening_logs();
    let (t, log, arch, back) = dirs();
    let cfg = common::cfg(Backend::Threaded);
    let (wal, _) = Wal::open(&log, cfg.clone()).unwrap();
    fill(&wal, 600);
    wal.close().unwrap();
    archiver(&log, &cfg, &arch).unwrap().pass().unwrap();
    // Back to a point inside the first segment, then a new history.
    restore(&arch, &back, &cfg, RestoreTo::Lsn(10)).unwrap();
    let (wal, _) = Wal::open(&back, cfg.clone()).unwrap();
    fill(&wal, 5);
    wal.close().unwrap();
    let e = archiver(&back, &cfg, &arch).unwrap().pass().unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Archive {
                problem: ArchiveProblem::Mismatch(_),
                ..
            }
        ),
        "{e}"
    );
    // To a new prefix it archives whole.
    let fresh = t.path().join("arch2");
    let p = archiver(&back, &cfg, &fresh).unwrap().pass().unwrap();
    assert_eq!(p.last_lsn, records(&back, &cfg).last().unwrap().0);
}
