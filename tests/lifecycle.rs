//! Open/close lifecycle: no thread or descriptor survives a closed log.
//! One test per binary so nothing else runs in this process meanwhile.

mod common;

use ringwal::{Backend, Config, Level, Wal};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn open_close_cycles_leak_no_threads_or_fds() {
    let dir = tempfile::tempdir().unwrap();
    // Warm up lazily initialised process state (allocator, rand) first.
    let (wal, _) = Wal::open(dir.path(), Config::default()).unwrap();
    wal.close().unwrap();
    let fds = count("/proc/self/fd");
    let threads = count("/proc/self/task");
    for i in 0..10 {
        let backend = if i % 2 == 0 {
            Backend::Uring
        } else {
            Backend::Threaded
        };
        let level = if i % 3 == 0 {
            Level::Written
        } else {
            Level::Durable
        };
        let cfg = Config::builder()
            .backend(backend)
            .durability(common::durability_for(level))
            .segment_bytes(64 << 10)
            .max_record_bytes(4 << 10)
            .build();
        let (wal, _) = Wal::open(dir.path(), cfg).unwrap();
        for j in 0..100u32 {
            let _ = wal.append(0, &j.to_le_bytes()).unwrap();
        }
        if i % 2 == 0 {
            wal.close().unwrap();
        } else {
            drop(wal);
        }
    }
    assert_eq!(count("/proc/self/fd"), fds, "file descriptors leaked");
    assert_eq!(count("/proc/self/task"), threads, "threads leaked");
    let (wal, rep) = Wal::open(dir.path(), Config::default()).unwrap();
    assert_eq!(
        rep.records, 1000,
        "dropping the log must drain what was appended"
    );
    assert_eq!(wal.next_lsn(), 1001);
    // An open log keeps a prepared spare; a closed one leaves none.
    wal.close().unwrap();
    let spares = common::spare_files(dir.path());
    assert_eq!(spares, 0, "a closed log leaves no spare behind");
}
