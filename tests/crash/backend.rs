//! `Backend::Auto` against a kernel that refuses io_uring: this test
//! binary re-executed as a child that installs a real seccomp filter
//! (`io_uring_setup` fails with EPERM, as under a container runtime's
//! default profile), then opens logs with each backend.

use std::process::Command;

use crate::common::*;
use ringwal::{Backend, Error, Level, Wal};

const CHILD: &str = "RINGWAL_BACKEND_CHILD_DIR";

#[test]
fn auto_runs_io_uring_where_the_kernel_allows_it() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let (wal, report) = Wal::open(root.path(), small(Backend::Auto).build()).unwrap();
    assert_eq!(report.backend, Backend::Uring);
    assert_eq!(wal.stats().backend, Backend::Uring);
    assert_eq!(report.direct_io, wal.stats().direct_io);
    wal.close().unwrap();
}

#[test]
fn auto_falls_back_when_the_kernel_refuses_io_uring_and_uring_says_why() {
    let root = tempfile::tempdir().unwrap();
    let _spawn = spawning_processes();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "backend::refused_io_uring_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD, root.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("@auto:threaded;"), "{stdout}");
    assert!(stdout.contains("@uring:refused;"), "{stdout}");
}

/// Not a test on its own: the child of the test above.
#[test]
fn refused_io_uring_child() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    ringwal_platform::sandbox::forbid_io_uring().expect("child: seccomp filter");
    let dir = std::path::Path::new(&dir);

    // Auto: the threaded backend, and a log that works.
    let (wal, report) = Wal::open(dir, small(Backend::Auto).build()).expect("child: auto open");
    assert_eq!(report.backend, Backend::Threaded);
    assert_eq!(wal.stats().backend, Backend::Threaded);
    wal.append(0, b"on the threaded backend")
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    assert_eq!(wal.read(1).unwrap().payload, b"on the threaded backend");
    wal.close().unwrap();
    println!("@auto:threaded;");

    // Uring: refused by name, the kernel's error as the source.
    match Wal::open(dir, small(Backend::Uring).build()) {
        Err(e @ Error::BackendUnavailable { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("io_uring") && msg.contains("Auto"), "{msg}");
            let source = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .expect("the OS error as the source");
            assert_eq!(source.raw_os_error(), Some(libc::EPERM));
            println!("@uring:refused;");
        }
        other => panic!("expected BackendUnavailable, got {:?}", other.map(|_| ())),
    }
    // The refused open took nothing: the log still opens and holds its record.
    let (wal, _) = Wal::open(dir, small(Backend::Threaded).build()).unwrap();
    assert_eq!(wal.next_lsn(), 2);
    wal.close().unwrap();
}
