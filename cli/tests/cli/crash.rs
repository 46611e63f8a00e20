//! `ringwal append` under SIGKILL: the default configuration (hence the
//! default backend), on the test machine's file system and on a
//! loop-mounted XFS image. The loop is the library's
//! (`tests/common/crash_loop.rs`), with the CLI as the child.

use std::cell::Cell;
use std::path::Path;
use std::process::Command;

use crate::common::library;
use crate::common::library::crash_loop::{
    assert_whole_groups, crash_loop, crash_loop_checked, kills, temp_root, AckFormat,
};
use rand::Rng;
use ringwal::Config;

/// Kills per loop.
const CLI_KILLS: usize = 30;

fn cli_crash_loop(what: &str, root: &Path, kills: usize) {
    let dir = root.join("log");
    // The CLI opens the default configuration: node 1, default backend.
    crash_loop(
        what,
        &dir,
        &Config::default(),
        AckFormat::Plain,
        kills,
        None,
        || {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ringwal"));
            c.arg("append").arg(&dir);
            c
        },
    );
}

#[test]
fn cli_append_survives_sigkill() {
    let root = temp_root();
    cli_crash_loop("cli crash loop", root.path(), kills(CLI_KILLS));
}

/// XFS handles unwritten extents and O_DIRECT differently from ext4, so
/// the same loop runs on a loop-mounted XFS image when the machine can
/// make one (root and mkfs.xfs; .ci/run installs xfsprogs).
#[test]
fn cli_append_survives_sigkill_on_xfs() {
    let root = tempfile::tempdir().unwrap();
    let mount = match library::mount_image(root.path(), "xfs", 512) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("xfs crash loop: skipped: {why}");
            return;
        }
    };
    cli_crash_loop("cli crash loop on xfs", &mount.dir, kills(CLI_KILLS / 2));
}

/// `ringwal append --batch N` under SIGKILL, N drawn from 2..=8 per life:
/// the usual invariants, plus all or nothing. Each life's lines are
/// grouped by N from its first, so the records recovered from a life are
/// whole batches (a multiple of N), and each names its batch's first LSN.
#[test]
fn cli_append_batch_survives_sigkill() {
    let what = "cli batch crash loop";
    let root = temp_root();
    let dir = root.path().join("log");
    let mut rng = library::seeded_rng(what);
    let sizes: Vec<u64> = (0..kills(CLI_KILLS / 3))
        .map(|_| rng.gen_range(2..=8))
        .collect();
    let life = Cell::new(0);
    let mut whole = 0;
    crash_loop_checked(
        what,
        &dir,
        &Config::default(),
        AckFormat::Plain,
        sizes.len(),
        None,
        || {
            let n = sizes[life.get()];
            life.set(life.get() + 1);
            let mut c = Command::new(env!("CARGO_BIN_EXE_ringwal"));
            c.arg("append").arg(&dir).arg("--batch").arg(n.to_string());
            c
        },
        |iteration, before, after, _| {
            whole += assert_whole_groups(&dir, iteration, before, after, sizes[iteration]);
        },
    );
    assert!(whole > 0, "{what}: no batch was ever recovered");
}
