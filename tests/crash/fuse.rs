//! A log on a FUSE file system survives a power cut with every record it
//! acknowledged durable.
//!
//! FUSE can complete an `RWF_DSYNC` write (from io_uring or `pwritev2`)
//! without sending the server a sync, so a log that trusted the flag
//! there acknowledged records that a power cut then took away. The file
//! system here is real to the kernel: `MemFs` (see `fuse/memfs.rs`) is
//! served by this process over `/dev/fuse` and keeps only what the
//! kernel asked it to sync. Root only (it mounts); skipped otherwise.

mod memfs;

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::{
    self, assert_records, for_each_backend, open_checked, payload, read_all, seeded_rng,
};
use memfs::{Disk, Mounted};
use ringwal::{format, Backend, Level, SyncMethod, Wal};

/// Mount an empty `MemFs` at `dir`, or say why this machine cannot.
fn mount_or_skip(dir: &Path) -> Option<Mounted> {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse is absent (no FUSE in this kernel or container)");
        return None;
    }
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        eprintln!("skipped: not running as root, cannot mount a FUSE file system");
        return None;
    }
    match Mounted::mount(dir, Disk::new()) {
        Ok(m) => Some(m),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound
            ) =>
        {
            eprintln!("skipped: cannot mount a FUSE file system here: {e}");
            None
        }
        Err(e) => panic!("mounting the FUSE file system at {}: {e}", dir.display()),
    }
}

/// Open a log on a fresh FUSE mount and run `work` on it, which appends
/// records, waits for each to be durable and returns their payloads (LSN
/// 1 first). Then cut the power with the log still open, shut it down,
/// remount what survived, and check that every record from the oldest
/// kept on is back, byte for byte, at dense LSNs. Returns the oldest LSN
/// kept (more than 1 when `work` checkpointed), or `None` when this
/// machine cannot mount FUSE.
fn power_cut_on_fuse(backend: Backend, work: impl FnOnce(&Wal) -> Vec<Vec<u8>>) -> Option<u64> {
    power_cut_on_fuse_with(backend, SyncMethod::Dsync, work)
}

/// As [`power_cut_on_fuse`], with the log configured for `method`.
fn power_cut_on_fuse_with(
    backend: Backend,
    method: SyncMethod,
    work: impl FnOnce(&Wal) -> Vec<Vec<u8>>,
) -> Option<u64> {
    let root = tempfile::tempdir().unwrap();
    let mnt = root.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = mount_or_skip(&mnt)?;
    // The log's own directory, durably: the log syncs its directory's
    // entries, its caller the directory's name.
    let dir = mnt.join("log");
    std::fs::create_dir(&dir).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();

    let cfg = common::small(backend).sync_method(method).build();
    let (wal, _) = Wal::open(&dir, cfg.clone()).expect("open on FUSE");
    let expected = match method {
        SyncMethod::Dsync => SyncMethod::WriteThenFdatasync,
        other => other,
    };
    assert_eq!(
        wal.stats().sync_method,
        expected,
        "FUSE may drop RWF_DSYNC: the log must sync explicitly there"
    );
    let acked = work(&wal);
    let stats = wal.stats();
    assert_eq!(stats.durable_lsn, acked.len() as u64, "all acknowledged");
    assert!(stats.rolls >= 3, "rolled only {} times", stats.rolls);

    // The cut, while the log is open and its threads run.
    let survivor = fs.power_cut();
    let seen = fs.disk().counters;
    eprintln!("{backend:?}: FUSE saw {seen:?}; log {stats:?}");
    assert!(
        seen.direct_opens > 0,
        "segments are opened with O_DIRECT on FUSE"
    );
    wal.close().expect("close");
    fs.unmount().expect("unmount");

    let fs = Mounted::mount(&mnt, survivor).expect("remount after the power cut");
    let (wal, report) = open_checked(&dir, cfg).expect("open after the power cut");
    eprintln!("{backend:?}: recovery after the cut: {report:?}");
    let what = format!("{backend:?} after a power cut on FUSE");
    assert_eq!(
        report.last_lsn,
        acked.len() as u64,
        "{what}: the last LSN recovered is the last acknowledged"
    );
    let first = wal.oldest_lsn();
    assert!(
        (1..=acked.len() as u64).contains(&first),
        "{what}: oldest LSN {first}"
    );
    assert_records(&read_all(&wal), first, &acked[first as usize - 1..], &what);
    let next = wal.append(1, b"after").unwrap();
    assert_eq!(next.lsn(), acked.len() as u64 + 1, "{what}: next LSN");
    next.wait(Level::Durable).unwrap();
    wal.close().unwrap();
    fs.unmount().expect("unmount");
    Some(first)
}

/// Append `p` and wait until it is durable.
fn append_durable(wal: &Wal, p: &[u8]) {
    wal.append(1, p)
        .unwrap()
        .wait(Level::Durable)
        .expect("durable on FUSE");
}

/// Records one at a time (each waited for, so each its own write) and in
/// bursts (several writes in flight, group commit), over several rolls.
#[test]
fn acknowledged_records_survive_a_power_cut_on_fuse() {
    for_each_backend(|backend| {
        let first = power_cut_on_fuse(backend, |wal| singles_and_bursts(wal, backend));
        assert!(first.is_none_or(|f| f == 1), "nothing was checkpointed");
    });
}

/// The same with grouped syncs: a record is acknowledged durable only by
/// an fdatasync issued after its write completed, and the FUSE file
/// system keeps nothing else across the cut.
#[test]
fn grouped_syncs_keep_acknowledged_records_across_a_power_cut_on_fuse() {
    for_each_backend(|backend| {
        let first = power_cut_on_fuse_with(backend, SyncMethod::Grouped, |wal| {
            singles_and_bursts(wal, backend)
        });
        assert!(first.is_none_or(|f| f == 1), "nothing was checkpointed");
    });
}

/// Four rounds of 40 records waited for one by one, then a burst of 80
/// waited for together; returns the payloads, all acknowledged durable.
fn singles_and_bursts(wal: &Wal, backend: Backend) -> Vec<Vec<u8>> {
    let mut rng = seeded_rng(&format!("fuse power cut, {backend:?}"));
    let mut acked = Vec::new();
    for _ in 0..4 {
        for _ in 0..40 {
            let p = payload(&mut rng, acked.len() as u64);
            append_durable(wal, &p);
            acked.push(p);
        }
        let burst: Vec<_> = (0..80)
            .map(|_| {
                let p = payload(&mut rng, acked.len() as u64);
                acked.push(p.clone());
                wal.append(1, &p).unwrap()
            })
            .collect();
        for ticket in burst {
            ticket.wait(Level::Durable).expect("durable on FUSE");
        }
    }
    acked
}

/// Checkpointed segments are recycled, and a recycled file keeps its
/// earlier life's frames past the new data: only the zero block the log
/// seals a segment with ends it for recovery, so that seal must be as
/// durable as the records. Here every recycled segment's earlier life
/// filled its last block and its new one stops a block short.
#[test]
fn acknowledged_records_survive_a_power_cut_on_fuse_in_recycled_segments() {
    let per_segment = (common::SEGMENT_BYTES as usize - format::HEADER_BYTES) / format::BLOCK;
    for_each_backend(|backend| {
        let first = power_cut_on_fuse(backend, |wal| {
            let record = |tag: usize, len: usize| {
                let mut p = format!("r{tag}:").into_bytes();
                p.resize(len, b'a' + (tag % 26) as u8);
                p
            };
            let mut acked = Vec::new();
            // One block per record, every block of each segment.
            for _ in 0..6 * per_segment {
                let p = record(acked.len(), 100);
                append_durable(wal, &p);
                acked.push(p);
            }
            let removed = wal.checkpoint(wal.durable_lsn()).unwrap();
            assert!(removed >= 4, "checkpointed only {removed} segments");
            // Two blocks per record: a segment's last block stays free,
            // for the seal, over a frame of the file's earlier life.
            let two_blocks = 2 * format::BLOCK - format::FRAME_HEADER - 100;
            for _ in 0..6 * per_segment / 2 {
                let p = record(acked.len(), two_blocks);
                append_durable(wal, &p);
                acked.push(p);
            }
            acked
        });
        assert!(
            first.is_none_or(|f| f > 1),
            "the checkpoint released segments"
        );
    });
}

/// Where the file system honours `RWF_DSYNC` (the temporary directory is
/// on ext4, XFS, btrfs or tmpfs), the log keeps the configured method.
#[test]
fn dsync_is_kept_where_the_file_system_honours_it() {
    // Whatever the temporary directory is on: the log keeps Dsync exactly
    // where the platform says that file system honours it.
    for_each_backend(|backend| {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), common::small(backend).build()).unwrap();
        let st = wal.stats();
        let expect = if st.file_system.honours_dsync() {
            SyncMethod::Dsync
        } else {
            SyncMethod::WriteThenFdatasync
        };
        assert_eq!(st.sync_method, expect, "{}", st.file_system);
        wal.close().unwrap();
    });
}
