//! What a log reports about the file system it is on, checked on real
//! mounts of the file systems production uses: btrfs (a loop image),
//! overlayfs (over the temporary directory's file system), tmpfs. Each
//! needs root and its tools, and skips with a printed reason without them.

use std::path::Path;
use std::process::Command;

use crate::common::*;
use ringwal::{Backend, FsKind, Level, Stats, SyncMethod, Wal};

/// Open a log in `dir`, append and wait durable, and return its stats.
fn stats_in(dir: &Path, backend: Backend) -> Stats {
    let (wal, rep) = Wal::open(dir, small(backend).build()).unwrap();
    wal.append(0, b"on this file system")
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    let s = wal.stats();
    assert_eq!(rep.direct_io, s.direct_io, "the open report agrees: {s:?}");
    wal.close().unwrap();
    s
}

fn root_or_skip(test: &str) -> bool {
    let uid = Command::new("id").arg("-u").output().unwrap();
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    if !root {
        eprintln!("{test}: skipped: not running as root, cannot mount");
    }
    root
}

/// Needs root and mkfs.btrfs. btrfs takes O_DIRECT but buffers the
/// writes of a file with data checksums (its default): the log must say
/// so, and a NOCOW directory (`chattr +C`, which new files inherit) gives
/// really direct writes.
#[test]
fn on_btrfs_direct_io_is_reported_as_the_kernel_does_it() {
    let _spawning = spawning_processes();
    let root = tempfile::tempdir().unwrap();
    let mount = match mount_image(root.path(), "btrfs", 256) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("on_btrfs: skipped: {why}");
            return;
        }
    };
    let cow = mount.dir.join("cow");
    let nocow = mount.dir.join("nocow");
    std::fs::create_dir(&cow).unwrap();
    std::fs::create_dir(&nocow).unwrap();
    let chattr = Command::new("chattr").arg("+C").arg(&nocow).status();
    assert!(chattr.is_ok_and(|s| s.success()), "chattr +C on btrfs");
    for backend in [Backend::Threaded, Backend::Auto] {
        let s = stats_in(&cow.join(format!("{backend:?}")), backend);
        assert_eq!(s.file_system.kind, FsKind::Btrfs, "{s:?}");
        assert!(!s.file_system.nocow && !s.direct_io, "{s:?}");
        assert_eq!(s.sync_method, SyncMethod::Dsync, "{s:?}");
        let s = stats_in(&nocow.join(format!("{backend:?}")), backend);
        assert!(s.file_system.nocow && s.direct_io, "{s:?}");
        assert!(s.file_system.survives_power_loss(), "{s:?}");
    }
}

/// An overlay mount of `lower` and `upper` (with `work`) at `at`.
fn mount_overlay(base: &Path, volatile: bool) -> Result<Mount, String> {
    for d in ["lower", "upper", "work", "mnt"] {
        std::fs::create_dir(base.join(d)).map_err(|e| e.to_string())?;
    }
    let mut opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        base.join("lower").display(),
        base.join("upper").display(),
        base.join("work").display()
    );
    if volatile {
        opts.push_str(",volatile");
    }
    let out = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(base.join("mnt"))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(Mount {
        dir: base.join("mnt"),
    })
}

/// Needs root. overlayfs hands RWF_DSYNC on to its upper layer's file,
/// so a log on an overlay is trusted exactly as its upper layer is; one
/// mounted `volatile` drops every sync, so there nothing is durable and
/// the log says so.
#[test]
fn on_overlayfs_the_upper_layer_decides() {
    if !root_or_skip("on_overlayfs") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let upper_fs = {
        let (wal, _) = Wal::open(base.path().join("probe"), cfg(Backend::Threaded)).unwrap();
        let fs = wal.stats().file_system;
        wal.close().unwrap();
        fs
    };
    for volatile in [false, true] {
        let here = base.path().join(format!("volatile-{volatile}"));
        std::fs::create_dir(&here).unwrap();
        let mount = match mount_overlay(&here, volatile) {
            Ok(m) => m,
            Err(why) => {
                eprintln!("on_overlayfs: skipped: mount: {why}");
                return;
            }
        };
        for backend in [Backend::Threaded, Backend::Auto] {
            let s = stats_in(&mount.dir.join(format!("{backend:?}")), backend);
            let fs = s.file_system;
            assert_eq!(fs.kind, FsKind::Overlay, "{s:?}");
            assert_eq!(fs.upper, Some(upper_fs.kind), "{s:?}");
            assert_eq!(fs.volatile, volatile, "{s:?}");
            let trusted = !volatile && upper_fs.honours_dsync();
            let expect = if trusted {
                SyncMethod::Dsync
            } else {
                SyncMethod::WriteThenFdatasync
            };
            assert_eq!(s.sync_method, expect, "{s:?}");
            assert_eq!(
                fs.survives_power_loss(),
                !volatile && upper_fs.survives_power_loss(),
                "{s:?}"
            );
        }
    }
}

/// Needs root. On tmpfs the log keeps RWF_DSYNC (honoured, and nothing
/// is durable there anyway) and says that nothing survives a power loss.
#[test]
fn on_tmpfs_the_log_says_nothing_survives_a_power_loss() {
    let root = tempfile::tempdir().unwrap();
    let mount = match mount_memory(root.path(), "tmpfs") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("on_tmpfs: skipped: {why}");
            return;
        }
    };
    let s = stats_in(&mount.dir.join("log"), Backend::Threaded);
    assert_eq!(s.file_system.kind, FsKind::Tmpfs, "{s:?}");
    assert!(!s.file_system.survives_power_loss(), "{s:?}");
    assert_eq!(s.sync_method, SyncMethod::Dsync, "{s:?}");
}
