//! `ringwal::files`, the toolkit for snapshots beside the log, on real
//! files: atomic replacement, and checkpoint files that are never taken
//! for good when torn, damaged or foreign.

use ringwal::files::{atomic_write, fsync_dir, read_checkpoint, write_checkpoint};
use ringwal::format::CheckpointError;
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
    // A temporary file an earlier crash left behind is not in the way.
    std::fs::write(dir.path().join(".snapshot.ckpt.tmp"), b"half").unwrap();
    write_checkpoint(&path, b"state at LSN 200").unwrap();
    assert_eq!(
        read_checkpoint(&path).unwrap().unwrap(),
        b"state at LSN 200"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["snapshot.ckpt"], "no temporary file left");
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
}
