//! `ringwal::files`, the toolkit for snapshots beside the log, on real
//! files: atomic replacement, and checkpoint files that are never taken
//! for good when torn, damaged or foreign.

use ringwal::files::CheckpointError;
use ringwal::files::{atomic_write, fsync_dir, read_checkpoint, write_checkpoint};
use ringwal::format;
use ringwal::{Corruption, Error};

#[test]
fn a_checkpoint_file_reads_back_and_replaces_the_old_one_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.ckpt");
    assert_eq!(read_checkpoint(&path).unwrap(), None);
    write_checkpoint(&path, b"state at LSN 100").unwrap();
    assert_eq!(
        read_checkpoint(&path).unwrap().unwrap(),
        b"state at LSN 100"
    );
    // A temporary file an earlier crash (or a writer in flight) left is
    // not in the way, and not this writer's to remove.
    let other = format::temp_file_name("snapshot.ckpt", std::process::id(), u64::MAX, 1);
    std::fs::write(dir.path().join(&other), b"half").unwrap();
    write_checkpoint(&path, b"state at LSN 200").unwrap();
    assert_eq!(
        read_checkpoint(&path).unwrap().unwrap(),
        b"state at LSN 200"
    );
    assert_eq!(
        names_in(dir.path()),
        [other.as_str(), "snapshot.ckpt"],
        "no temporary file of its own left, the other one untouched"
    );
    fsync_dir(dir.path()).unwrap();
}

#[test]
fn torn_damaged_and_foreign_files_are_corrupt_never_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.ckpt");
    write_checkpoint(&path, &[7u8; 1000]).unwrap();
    let whole = std::fs::read(&path).unwrap();
    let kind = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        match read_checkpoint(&path) {
            Err(Error::Corrupt {
                file,
                offset: 0,
                reason: Corruption::CheckpointFile(e),
            }) => {
                assert_eq!(file, path);
                e
            }
            other => panic!("expected a corrupt checkpoint file, got {other:?}"),
        }
    };
    assert!(matches!(
        kind(&whole[..500]),
        CheckpointError::Torn { have: 500, .. }
    ));
    let mut flipped = whole.clone();
    flipped[600] ^= 0x10;
    assert_eq!(kind(&flipped), CheckpointError::Crc);
    assert_eq!(kind(b"{\"some\": \"json\"}"), CheckpointError::Magic);
}

#[test]
fn atomic_write_replaces_a_plain_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    atomic_write(&path, b"{\"v\":1}").unwrap();
    atomic_write(&path, b"{\"v\":2}").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"v\":2}");
    let missing = dir.path().join("no-such-dir").join("state.json");
    assert!(matches!(
        atomic_write(&missing, b"x"),
        Err(Error::Io { .. })
    ));
    // A rename that fails (the name is a directory) leaves the old entry
    // as it was and no temporary file behind.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("inside"), b"kept").unwrap();
    match atomic_write(&taken, b"x") {
        Err(Error::Io { path, .. }) => assert_eq!(path, taken),
        other => panic!("expected Io naming the target, got {other:?}"),
    }
    assert_eq!(std::fs::read(taken.join("inside")).unwrap(), b"kept");
    assert_eq!(names_in(dir.path()), ["state.json", "taken"]);
}

/// The names in `dir`, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// `threads` writers replace `path` at once, each `rounds` times with a
/// payload of its own (`payload(thread, round)`) through `write`; every
/// call must succeed. Returns every payload written.
fn race_writers(
    path: &std::path::Path,
    write: fn(&std::path::Path, &[u8]) -> ringwal::Result<()>,
) -> Vec<Vec<u8>> {
    const THREADS: usize = 8;
    const ROUNDS: usize = 25;
    let payload = |t: usize, r: usize| format!("writer {t} round {r} ").repeat(1 + t * 37 + r);
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for r in 0..ROUNDS {
                    if let Err(e) = write(path, payload(t, r).as_bytes()) {
                        panic!("writer {t} round {r}: {e:?}");
                    }
                }
            });
        }
    });
    (0..THREADS)
        .flat_map(|t| (0..ROUNDS).map(move |r| payload(t, r).into_bytes()))
        .collect()
}

#[test]
fn concurrent_checkpoint_writers_all_succeed_and_one_payload_wins_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.ckpt");
    let written = race_writers(&path, write_checkpoint);
    let last = read_checkpoint(&path).unwrap().unwrap();
    assert!(written.contains(&last), "the file holds no payload written");
    assert_eq!(
        names_in(dir.path()),
        ["snapshot.ckpt"],
        "temporary files left"
    );
}

#[test]
fn concurrent_atomic_writes_all_succeed_and_one_wins_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let written = race_writers(&path, atomic_write);
    let last = std::fs::read(&path).unwrap();
    assert!(written.contains(&last), "the file holds no payload written");
    assert_eq!(names_in(dir.path()), ["state.json"], "temporary files left");
}

/// A closed log of 64 KiB segments holding `n` records of 1 KiB.
fn small_log(dir: &std::path::Path, n: u32) -> ringwal::Lsn {
    let cfg = ringwal::Config::builder()
        .segment_bytes(64 << 10)
        .max_record_bytes(4 << 10)
        .build();
    let (wal, _) = ringwal::Wal::open(dir, cfg).unwrap();
    for i in 0..n {
        let _ = wal.append(1, &[i as u8; 1024]).unwrap();
    }
    let last = wal.next_lsn() - 1;
    wal.close().unwrap();
    last
}

#[test]
fn segments_are_truncated_whole_as_a_checkpoint_plan_says() {
    use ringwal::files::truncate_segments;
    use ringwal::verify::{checkpoint_plan, stat};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let last = small_log(&dir, 300);
    let cfg = ringwal::Config::default();

    let found = stat(&dir, &cfg).unwrap().segments;
    assert!(found.len() >= 4, "{found:?}");
    assert_eq!(found[0].base_lsn, 1);
    assert!(found.iter().all(|s| s.file_bytes == 64 << 10));
    let node2 = ringwal::Config::builder().node(2).build();
    assert!(matches!(
        truncate_segments(&dir, &node2, u64::MAX),
        Err(Error::NoLog { node: 2, .. })
    ));

    // Below the third segment's base: exactly the first two go, as the
    // plan of a checkpoint up to the LSN before it says.
    let below = found[2].base_lsn;
    let plan = checkpoint_plan(&dir, &cfg, below - 1).unwrap();
    let t = truncate_segments(&dir, &cfg, below).unwrap();
    assert_eq!(t.removed, plan.remove);
    let gone: Vec<_> = t.removed.iter().map(|r| &r.file).collect();
    assert_eq!(gone, [&found[0].path, &found[1].path]);
    assert_eq!(t.oldest_kept, below);
    assert!(t.removed.iter().all(|s| !s.file.exists()));
    // Nothing more is below it; the newest is never removed.
    assert!(truncate_segments(&dir, &cfg, below)
        .unwrap()
        .removed
        .is_empty());
    // Past the end of the log: refused before anything goes.
    let listed = stat(&dir, &cfg).unwrap().segments.len();
    match truncate_segments(&dir, &cfg, last + 2) {
        Err(Error::PastEnd { what, lsn, last: l }) => {
            assert_eq!((what, lsn, l), ("below", last + 2, last))
        }
        other => panic!("a truncation past the end: {other:?}"),
    }
    assert_eq!(stat(&dir, &cfg).unwrap().segments.len(), listed);
    let everything = truncate_segments(&dir, &cfg, last + 1).unwrap();
    assert_eq!(stat(&dir, &cfg).unwrap().segments.len(), 1);
    assert_eq!(everything.oldest_kept, found.last().unwrap().base_lsn);

    // The log opens on what is left, with the manifest raised: no gap.
    let (wal, _) = ringwal::Wal::open(&dir, ringwal::Config::default()).unwrap();
    assert_eq!(wal.oldest_lsn(), everything.oldest_kept);
    assert_eq!(wal.next_lsn() - 1, last);
    // A writer holds the node: truncation is refused, nothing removed.
    assert!(matches!(
        truncate_segments(&dir, &cfg, u64::MAX),
        Err(Error::Locked { .. })
    ));
    wal.close().unwrap();
}

#[test]
fn directories_swap_whole_and_checkpoints_read_without_staying_cached() {
    use ringwal::files::{read_checkpoint_dontneed, swap_dirs};
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("current"), tmp.path().join("next"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    write_checkpoint(&a.join("state"), b"generation 1").unwrap();
    write_checkpoint(&b.join("state"), b"generation 2").unwrap();
    swap_dirs(&a, &b).unwrap();
    assert_eq!(
        read_checkpoint_dontneed(&a.join("state")).unwrap().unwrap(),
        b"generation 2"
    );
    assert_eq!(
        read_checkpoint(&b.join("state")).unwrap().unwrap(),
        b"generation 1"
    );
    assert_eq!(read_checkpoint_dontneed(&a.join("missing")).unwrap(), None);
    let e = swap_dirs(&a, &tmp.path().join("absent")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // A torn checkpoint is refused by the uncached read too.
    let torn = a.join("state");
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 3]).unwrap();
    assert!(matches!(
        read_checkpoint_dontneed(&torn),
        Err(Error::Corrupt {
            reason: Corruption::CheckpointFile(_),
            ..
        })
    ));
}
