//! A log's life across opens, through the library API on real files:
//! one writer per directory and node, LSNs that continue across reopens,
//! checkpoints that keep the active segment, configuration changes between
//! runs, and limits that refuse bad input without touching the log. Every
//! test runs against both backends.

use crate::common::*;
use rand::Rng;
use ringwal::format;
use ringwal::{Backend, Error, Level, Wal};

// ---------------------------------------------------------------------------
// 1. One writer per directory and node.

#[test]
fn without_create_if_missing_a_missing_log_is_refused_and_nothing_is_created() {
    let root = tempfile::tempdir().unwrap();
    let cfg = || small(Backend::Threaded).create_if_missing(false).build();
    let missing = root.path().join("typo");
    assert!(matches!(
        Wal::open(&missing, cfg()),
        Err(Error::NoLog { node: NODE, .. })
    ));
    assert!(
        !missing.exists(),
        "no directory made for a log that is not there"
    );
    // A directory without the node's segments: refused, left empty.
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = Wal::open(&empty, cfg()).unwrap_err();
    assert!(matches!(e, Error::NoLog { .. }), "{e}");
    assert!(e.to_string().contains("no log of node"), "{e}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // An existing log opens as usual.
    let (wal, _) = Wal::open(&empty, small(Backend::Threaded).build()).unwrap();
    let _ = wal.append(0, b"x").unwrap().wait(Level::Durable);
    wal.close().unwrap();
    let (wal, report) = Wal::open(&empty, cfg()).unwrap();
    assert_eq!(report.records, 1);
    wal.close().unwrap();
}

#[test]
fn second_open_is_locked_and_nodes_are_independent() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (w1, _) = Wal::open(&log, cfg(backend)).unwrap();
        for i in 0..50u32 {
            let _ = w1.append(0, format!("node1-{i}").as_bytes()).unwrap();
        }
        w1.sync().unwrap();

        match Wal::open(&log, cfg(backend)) {
            Err(e @ Error::Locked { .. }) => {
                let Error::Locked { path, pid } = &e else {
                    unreachable!()
                };
                assert_eq!(*path, log.join(format::lock_file_name(NODE)));
                // The holder is this process, and the message says so.
                assert_eq!(*pid, Some(std::process::id()));
                let id = std::process::id().to_string();
                assert!(e.to_string().contains(&id), "{e}");
            }
            other => panic!("second writer must get Locked, got {other:?}"),
        }
        // The refused open left the first writer intact.
        let t = w1.append(0, b"node1-50").unwrap();
        assert_eq!(t.lsn(), 51);
        t.wait(Level::Durable).unwrap();

        let (w2, report) = Wal::open(&log, small(backend).node(2).build()).unwrap();
        assert!(report.created, "{report:?}");
        assert_eq!(report.records, 0);
        assert!(
            read_all(&w2).is_empty(),
            "node 2 must not see node 1's records"
        );
        let t = w2.append(0, b"node2-0").unwrap();
        assert_eq!(t.lsn(), 1, "node 2 has its own LSN sequence");
        t.wait(Level::Durable).unwrap();
        match Wal::open(&log, small(backend).node(2).build()) {
            Err(Error::Locked { .. }) => {}
            other => panic!("second writer of node 2 must get Locked, got {other:?}"),
        }

        w1.close().unwrap();
        let (w1, report) = Wal::open(&log, cfg(backend)).expect("reopen after close");
        assert_eq!(report.records, 51);
        let recs = read_all(&w1);
        assert_eq!(recs.len(), 51);
        assert!(recs.iter().all(|r| r.payload.starts_with(b"node1-")));
        w1.close().unwrap();
        w2.close().unwrap();
        let (w2, report) = Wal::open(&log, small(backend).node(2).build()).unwrap();
        assert_eq!(report.records, 1);
        assert_eq!(read_all(&w2)[0].payload, b"node2-0");
        w2.close().unwrap();
    });
}

/// A temporary manifest a writer killed mid-replacement left is no part
/// of the log: readers pass over it, and the next writer of that node,
/// which holds the lock, removes it (another node's stays).
#[test]
fn a_crashed_writers_temporary_manifest_is_ignored_then_removed() {
    let _logs = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let (wal, _) = Wal::open(&log, cfg(Backend::Threaded)).unwrap();
    wal.append(0, b"x").unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
    let temp = |node| {
        let target = format::manifest_file_name(node);
        log.join(format::temp_file_name(&target, 4_000_000, 3, 0xfeed))
    };
    std::fs::write(temp(NODE), b"half a manifest").unwrap();
    std::fs::write(temp(NODE + 1), b"another node's").unwrap();

    let v = ringwal::verify::verify(&log, &ringwal::Config::builder().node(NODE).build()).unwrap();
    assert_eq!(v.consistent(), Some(true), "{:?}", v.problems);
    assert_eq!(v.records, 1);
    let plan = ringwal::verify::recovery_plan(&log, &cfg(Backend::Threaded)).unwrap();
    assert!(plan.is_noop(), "{plan:?}");
    assert_eq!(ringwal::verify::nodes(&log).unwrap(), [NODE]);

    let (wal, report) = Wal::open(&log, cfg(Backend::Threaded)).unwrap();
    assert_eq!(report.records, 1);
    assert!(report.discarded.is_empty(), "{report:?}");
    assert!(
        !temp(NODE).exists(),
        "the writer removes its node's leftover"
    );
    assert!(
        temp(NODE + 1).exists(),
        "another node's file is not its own"
    );
    wal.close().unwrap();
}

// ---------------------------------------------------------------------------
// 2. LSNs across reopen cycles; checkpoints.

#[test]
fn lsns_continue_across_reopens_and_checkpoint_keeps_the_active_segment() {
    for_each_backend(|backend| {
        let mut rng = seeded_rng("lsns_continue_across_reopens");
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        for cycle in 0..6 {
            // Alternate backends across reopens as well: the format is one.
            let b = if cycle % 2 == 0 {
                backend
            } else {
                other(backend)
            };
            let (wal, report) = Wal::open(&log, cfg(b)).unwrap();
            let n = payloads.len() as u64;
            assert_eq!(report.records, n, "cycle {cycle}: {report:?}");
            assert_eq!(report.last_lsn, n, "cycle {cycle}");
            assert_eq!(
                report.first_lsn,
                if n == 0 { 0 } else { 1 },
                "cycle {cycle}"
            );
            assert!(report.truncated.is_none(), "cycle {cycle}: {report:?}");
            assert_eq!(wal.next_lsn(), n + 1, "cycle {cycle}");
            for _ in 0..rng.gen_range(20..200) {
                let p = payload(&mut rng, payloads.len() as u64 + 1);
                let t = wal.append(1, &p).unwrap();
                assert_eq!(t.lsn(), payloads.len() as u64 + 1);
                payloads.push(p);
            }
            wal.sync().unwrap();
            assert_eq!(wal.durable_lsn(), payloads.len() as u64);
            wal.close().unwrap();
        }

        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        assert_records(&read_all(&wal), 1, &payloads, "after reopen cycles");
        let segs = segment_files(&log, NODE);
        assert!(segs.len() >= 4, "expected several segments: {}", segs.len());

        // Up to the last LSN of the second segment: exactly two go.
        let keep_from = segs[2].0;
        assert_eq!(
            wal.checkpoint(keep_from - 2).unwrap(),
            1,
            "only whole segments"
        );
        assert_eq!(wal.checkpoint(keep_from - 1).unwrap(), 1);
        assert!(!segs[0].1.exists() && !segs[1].1.exists());
        assert_eq!(wal.oldest_lsn(), keep_from);
        match wal.reader_from(keep_from - 1) {
            Err(Error::Released { lsn, oldest, .. }) => {
                assert_eq!((lsn, oldest), (keep_from - 1, keep_from));
            }
            Err(e) => panic!("reading below the oldest kept: expected Released, got {e:?}"),
            Ok(_) => panic!("reading below the oldest kept: expected Released, got a reader"),
        }
        assert!(matches!(wal.reader_from(1), Err(Error::Released { .. })));
        let tail = &payloads[keep_from as usize - 1..];
        assert_records(&read_all(&wal), keep_from, tail, "after checkpoint");
        let from_mid: Vec<_> = wal
            .reader_from(keep_from + 3)
            .unwrap()
            .collect::<ringwal::Result<_>>()
            .unwrap();
        assert_records(&from_mid, keep_from + 3, &tail[3..], "reader_from inside");

        // Everything: every sealed segment goes, the active one stays.
        let last = payloads.len() as u64;
        let removed = wal.checkpoint(last).unwrap();
        assert_eq!(removed, segs.len() - 3);
        let left = segment_files(&log, NODE);
        assert_eq!(
            left,
            vec![segs.last().unwrap().clone()],
            "the active segment stays"
        );
        assert_eq!(wal.checkpoint(last).unwrap(), 0);
        // Past the end: refused, nothing removed.
        match wal.checkpoint(last + 1) {
            Err(Error::PastEnd { what, lsn, last: l }) => {
                assert_eq!((what, lsn, l), ("up_to", last + 1, last))
            }
            other => panic!("a checkpoint past the end: {other:?}"),
        }
        assert_eq!(segment_files(&log, NODE), left);
        let t = wal.append(0, b"after checkpoint").unwrap();
        assert_eq!(t.lsn(), last + 1);
        t.wait(Level::Durable).unwrap();
        payloads.push(b"after checkpoint".to_vec());
        wal.close().unwrap();

        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        let oldest = left[0].0;
        assert_eq!(report.first_lsn, oldest, "{report:?}");
        assert_eq!(report.last_lsn, last + 1);
        assert_eq!(wal.oldest_lsn(), oldest);
        assert!(matches!(
            wal.reader_from(oldest - 1),
            Err(Error::Released { .. })
        ));
        assert_records(
            &read_all(&wal),
            oldest,
            &payloads[oldest as usize - 1..],
            "reopen after checkpoint",
        );
        assert_eq!(wal.next_lsn(), last + 2);
        wal.close().unwrap();
    });
}

/// Operators change configurations between runs (the CLI, for one, always
/// opens with the defaults). A log written with small segments and
/// continued with a larger `segment_bytes` must keep every acknowledged
/// record: the active segment is as large as its header says, not as the
/// new configuration says; and the other way round.
#[test]
fn changing_segment_size_between_runs_loses_nothing() {
    for_each_backend(|backend| {
        for (first, second) in [(SEGMENT_BYTES, 1 << 20), (1 << 20, SEGMENT_BYTES)] {
            let what = format!("{backend:?}: segments of {first} then {second} bytes");
            let mut rng = seeded_rng("changing_segment_size_between_runs");
            let root = tempfile::tempdir().unwrap();
            let log = root.path().join("log");
            let mut payloads: Vec<Vec<u8>> = Vec::new();
            for (run, bytes) in [first, second, first].into_iter().enumerate() {
                let c = small(backend).segment_bytes(bytes).build();
                let (wal, report) = Wal::open(&log, c)
                    .unwrap_or_else(|e| panic!("{what}: open for run {run}: {e}"));
                assert_eq!(
                    report.records,
                    payloads.len() as u64,
                    "{what}: run {run}: {report:?}"
                );
                assert!(report.truncated.is_none(), "{what}: run {run}: {report:?}");
                assert_records(&read_all(&wal), 1, &payloads, &format!("{what}: run {run}"));
                // A little over two small segments' worth per run.
                let mut written = 0;
                while written < 2 * SEGMENT_BYTES as usize + 10_000 {
                    let p = payload(&mut rng, payloads.len() as u64 + 1);
                    written += p.len() + 24;
                    let t = wal.append(0, &p).unwrap();
                    assert_eq!(t.lsn(), payloads.len() as u64 + 1);
                    payloads.push(p);
                }
                wal.sync().unwrap();
                wal.close().unwrap();
            }
            let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
            assert_eq!(report.records, payloads.len() as u64, "{what}: {report:?}");
            assert_records(&read_all(&wal), 1, &payloads, &what);
            wal.close().unwrap();
        }
    });
}

fn other(b: Backend) -> Backend {
    if b == Backend::Uring {
        Backend::Threaded
    } else {
        Backend::Uring
    }
}

// ---------------------------------------------------------------------------
// 3. Limits.

#[test]
fn too_large_writes_nothing_and_invalid_config_is_refused() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let (wal, _) = Wal::open(&log, cfg(backend)).unwrap();
        wal.append(0, b"one").unwrap().wait(Level::Durable).unwrap();
        match wal.append(0, &vec![b'x'; MAX_RECORD + 1]) {
            Err(Error::TooLarge { len, max }) => {
                assert_eq!((len, max), (MAX_RECORD + 1, MAX_RECORD))
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let mut called = false;
        let res = wal.append_then(0, &vec![b'y'; MAX_RECORD * 4], |_| called = true);
        assert!(matches!(res, Err(Error::TooLarge { .. })), "{res:?}");
        assert!(!called, "no LSN may be handed out for a refused record");
        assert_eq!(wal.next_lsn(), 2, "no LSN consumed");
        let t = wal.append(0, &vec![b'z'; MAX_RECORD]).unwrap();
        assert_eq!(t.lsn(), 2, "exactly the maximum is accepted");
        t.wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let (wal, report) = Wal::open(&log, cfg(backend)).unwrap();
        assert_eq!(report.records, 2);
        let recs = read_all(&wal);
        assert_eq!(recs[0].payload, b"one");
        assert_eq!(recs[1].payload, vec![b'z'; MAX_RECORD]);
        wal.close().unwrap();

        let bad = [
            (
                "segment not a block multiple",
                small(backend).segment_bytes(SEGMENT_BYTES + 100).build(),
            ),
            (
                "segment below 64 KiB",
                small(backend).segment_bytes(32 << 10).build(),
            ),
            ("node above 99999", small(backend).node(100_000).build()),
            (
                "zero record size",
                small(backend).max_record_bytes(0).build(),
            ),
            (
                "record larger than a segment",
                small(backend).max_record_bytes(64 << 10).build(),
            ),
            // Past the kernel's CPU set: pinning to it used to abort the
            // process.
            ("ring CPU 1024", small(backend).ring_cpu(Some(1024)).build()),
            (
                "ring CPU the process may not use",
                small(backend).ring_cpu(Some(usize::MAX)).build(),
            ),
        ];
        for (what, c) in bad {
            let dir = root.path().join("never-created");
            match Wal::open(&dir, c) {
                Err(Error::InvalidConfig(msg)) => assert!(!msg.is_empty()),
                other => panic!("{what}: expected InvalidConfig, got {other:?}"),
            }
            assert!(
                !dir.exists(),
                "{what}: nothing may be created for a refused config"
            );
        }
        let (wal, _) = Wal::open(
            root.path().join("max-node"),
            small(backend).node(99_999).build(),
        )
        .expect("node 99999 is valid");
        wal.close().unwrap();
    });
}

/// Every setting of the builder given a value no log can run with: the
/// largest values of its type (whose derived sizes overflow), zero where
/// zero means nothing, and values just past the documented limits. Each
/// is `InvalidConfig` naming the setting, never a panic (with overflow
/// checks, or a wrapped size accepted without them: run also with
/// `--release`), and nothing is created.
#[test]
fn nonsense_settings_are_invalid_config_naming_the_setting_never_a_panic() {
    use ringwal::crypt::TAG_BYTES;
    use ringwal::{Config, WhenFull};
    use std::time::Duration;
    let b = || Config::builder().backend(Backend::Threaded);
    let max_payload = format::MAX_PAYLOAD;
    let huge_segment = u64::MAX - (format::BLOCK as u64 - 1);
    let block = |timeout| WhenFull::Block { timeout };
    // The documented limits: segments up to 1 TiB, waits up to a year.
    let largest_segment = 1u64 << 40;
    let a_year = Duration::from_secs(365 * 24 * 60 * 60);
    let table = [
        ("node", b().node(format::MAX_NODE + 1)),
        ("node", b().node(u32::MAX)),
        ("segment_bytes", b().segment_bytes(0)),
        (
            "segment_bytes",
            b().segment_bytes(format::MIN_SEGMENT_BYTES - 4096),
        ),
        (
            "segment_bytes",
            b().segment_bytes(format::MIN_SEGMENT_BYTES + 8),
        ),
        ("segment_bytes", b().segment_bytes(u64::MAX)),
        ("segment_bytes", b().segment_bytes(huge_segment)),
        ("segment_bytes", b().segment_bytes(largest_segment + 4096)),
        ("max_record_bytes", b().max_record_bytes(0)),
        ("max_record_bytes", b().max_record_bytes(usize::MAX)),
        (
            "max_record_bytes",
            b().max_record_bytes(usize::MAX - TAG_BYTES),
        ),
        (
            "max_record_bytes",
            b().max_record_bytes(usize::MAX - TAG_BYTES + 1),
        ),
        (
            "max_record_bytes",
            b().max_record_bytes(max_payload - TAG_BYTES + 1),
        ),
        ("max_record_bytes", b().max_record_bytes(max_payload)),
        (
            "max_record_bytes",
            b().segment_bytes(SEGMENT_BYTES).max_record_bytes(64 << 10),
        ),
        ("max_inflight", b().max_inflight(0)),
        ("max_inflight", b().max_inflight(257)),
        ("max_inflight", b().max_inflight(usize::MAX)),
        ("write_bytes", b().write_bytes(0)),
        ("write_bytes", b().write_bytes(format::BLOCK - 1)),
        ("write_bytes", b().write_bytes((64 << 20) + 1)),
        ("write_bytes", b().write_bytes(usize::MAX)),
        (
            "write_bytes",
            b().write_bytes(usize::MAX - (format::BLOCK - 1)),
        ),
        ("ring_cpu", b().ring_cpu(Some(usize::MAX))),
        (
            "wait_spin",
            b().wait_spin(Duration::from_millis(10) + Duration::from_nanos(1)),
        ),
        ("wait_spin", b().wait_spin(Duration::MAX)),
        (
            "max_log_bytes",
            b().max_log_bytes(Some(0), WhenFull::DropOldest),
        ),
        (
            "max_log_bytes",
            b().segment_bytes(SEGMENT_BYTES)
                .max_log_bytes(Some(2 * SEGMENT_BYTES - 1), WhenFull::DropOldest),
        ),
        (
            "max_log_bytes",
            b().segment_bytes(largest_segment)
                .max_log_bytes(Some(2 * largest_segment - 1), WhenFull::DropOldest),
        ),
        (
            "timeout",
            b().max_log_bytes(Some(u64::MAX), block(Duration::MAX)),
        ),
        (
            "timeout",
            b().max_log_bytes(Some(u64::MAX), block(a_year + Duration::from_nanos(1))),
        ),
    ];
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("never-created");
    let mut wrong = Vec::new();
    for (i, (setting, builder)) in table.into_iter().enumerate() {
        let cfg = builder.build();
        let open = std::panic::AssertUnwindSafe(|| Wal::open(&dir, cfg));
        match std::panic::catch_unwind(open) {
            Ok(Err(Error::InvalidConfig(msg))) if msg.contains(setting) => {}
            Ok(Err(Error::InvalidConfig(msg))) => {
                wrong.push(format!("{i} {setting}: {msg:?} does not name it"))
            }
            Ok(other) => wrong.push(format!("{i} {setting}: not refused: {other:?}")),
            Err(_) => wrong.push(format!("{i} {setting}: Wal::open panicked")),
        }
        if dir.exists() {
            wrong.push(format!("{i} {setting}: a refused config created the log"));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Age-based retention removes exactly the segments whose successor was
/// created before the cutoff (every record of such a segment is older),
/// never one with a record written after it, and never the active one.
#[test]
fn checkpoint_older_than_removes_only_segments_wholly_older() {
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    let write = |n: u32| {
        let mut last = None;
        for i in 0..n {
            last = Some(wal.append(0, format!("{i:>400}").as_bytes()).unwrap());
        }
        last.unwrap().wait(Level::Durable).unwrap();
    };
    write(600);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    write(600);
    let age = std::time::Duration::from_millis(1000);
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    };
    let before =
        ringwal::verify::stat(root.path(), &ringwal::Config::builder().node(NODE).build()).unwrap();
    let earliest_cutoff = ms(std::time::SystemTime::now()) - age.as_millis() as u64;
    let removed = wal.checkpoint_older_than(age).unwrap();
    let latest_cutoff = ms(std::time::SystemTime::now()) - age.as_millis() as u64;
    let created: Vec<u64> = before
        .segments
        .iter()
        .map(|s| s.created_unix_ms.unwrap())
        .collect();
    // Segment i may go once segment i + 1 was created by the cutoff.
    let surely_old = created[1..]
        .iter()
        .filter(|&&c| c <= earliest_cutoff)
        .count();
    let maybe_old = created[1..].iter().filter(|&&c| c <= latest_cutoff).count();
    assert!(
        surely_old > 0,
        "the first phase's segments are old: {created:?}"
    );
    assert!(
        (surely_old..=maybe_old).contains(&removed),
        "removed {removed}, expected {surely_old}..={maybe_old} of {created:?}"
    );
    assert!(removed < before.segments.len(), "the active segment stays");
    assert_eq!(wal.oldest_lsn(), before.segments[removed].base_lsn);
    assert_eq!(
        wal.checkpoint_older_than(age).unwrap(),
        0,
        "nothing more that old"
    );
    wal.close().unwrap();
}

/// One shape of log for the record-size search: segment size, write
/// size, and keying (no provider; a provider with a current key, so
/// segments are sealed; a provider naming none, so they are plain while
/// a key may become current at any roll).
#[derive(Clone, Copy, Debug)]
struct Shape {
    segment: u64,
    write: usize,
    keying: Option<Option<u32>>,
}

impl Shape {
    /// Its configuration with records up to `max`, on `disk`.
    fn config(self, max: usize, disk: &ringwal_platform::sim::SimFs) -> ringwal::Config {
        let b = ringwal::Config::builder()
            .segment_bytes(self.segment)
            .write_bytes(self.write)
            .max_record_bytes(max)
            .sim(disk);
        match self.keying {
            None => b.build(),
            Some(current) => {
                let keys = ringwal::StaticKeys::new();
                keys.insert(1, ringwal::Key::new([7; 32]), false);
                keys.set_current(current);
                b.encryption(std::sync::Arc::new(keys)).build()
            }
        }
    }

    /// Whether `Wal::open` accepts records up to `max`; any refusal but
    /// one naming `max_record_bytes` fails the test.
    fn accepts(self, max: usize) -> bool {
        let disk = ringwal_platform::sim::SimFs::new(1, Default::default());
        match Wal::open("/wal", self.config(max, &disk)) {
            Ok((wal, _)) => {
                wal.close().unwrap();
                true
            }
            Err(Error::InvalidConfig(m)) if m.contains("max_record_bytes") => false,
            Err(e) => panic!("{self:?}: max_record_bytes {max}: {e}"),
        }
    }
}

/// The largest record size a configuration accepts is one it can keep:
/// the accepted sizes are every size up to a maximum (none refused below
/// it, none accepted just above it), the maximum loses at most a block
/// to the format, and a record of every length near it, and of a few
/// smaller ones, appends and reads back, sealed or not.
#[test]
fn every_record_up_to_the_accepted_maximum_appends_and_reads_back() {
    let mut rng = seeded_rng("record sizes");
    let room = |seg: u64| (seg - format::HEADER_BYTES as u64) as usize;
    for segment in [64 << 10, 68 << 10, 132 << 10] {
        // Staging buffers sized by the largest record, or by the write.
        for write in [4 << 10, 1 << 20] {
            for keying in [None, Some(Some(1)), Some(None)] {
                let shape = Shape {
                    segment,
                    write,
                    keying,
                };
                // The largest accepted, if what is accepted is a prefix.
                let (mut lo, mut hi) = (1, room(segment));
                assert!(shape.accepts(lo) && !shape.accepts(hi), "{shape:?}");
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    *(if shape.accepts(mid) { &mut lo } else { &mut hi }) = mid;
                }
                let max = lo;
                assert!(max + format::BLOCK >= room(segment), "{shape:?}: {max}");
                for n in max + 1..=max + 64 {
                    assert!(!shape.accepts(n), "{shape:?}: {max} accepted, then {n}");
                }
                let disk = ringwal_platform::sim::SimFs::new(1, Default::default());
                match Wal::open("/wal", shape.config(max + 1, &disk)) {
                    Err(Error::InvalidConfig(m)) => {
                        assert!(m.contains(&format!("at most {max} does")), "{shape:?}: {m}")
                    }
                    other => panic!("{shape:?}: {other:?}"),
                }
                let disk = ringwal_platform::sim::SimFs::new(2, Default::default());
                let (wal, _) = Wal::open("/wal", shape.config(max, &disk)).unwrap();
                let lens: Vec<usize> = [0, 1, 8, 9, 4096, max / 2]
                    .into_iter()
                    // Past the lengths whose frames end within a padding
                    // frame's header of a block boundary.
                    .chain(max - 32..=max)
                    .collect();
                let mut want = Vec::new();
                for len in lens {
                    let mut payload = vec![0u8; len];
                    rng.fill(&mut payload[..]);
                    if let Err(e) = wal.append(0, &payload) {
                        panic!("{shape:?}: max {max}: a record of {len}: {e}");
                    }
                    want.push(payload);
                }
                wal.sync().unwrap();
                let got: Vec<Vec<u8>> = read_all(&wal).into_iter().map(|r| r.payload).collect();
                assert!(got == want, "{shape:?}: the records read back differ");
                wal.close().unwrap();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Private by default: every file and directory a log creates.

const MODES_CHILD: &str = "RINGWAL_MODES_CHILD_DIR";
const MODES_WIDE: &str = "RINGWAL_MODES_CHILD_WIDE";

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Not a test on its own: the child of the test below, run under a
/// umask it sets. Makes every kind of file a log has: a directory and
/// its missing parent, segments, a spare, a recycled spare, the
/// manifest (and its temporary file, renamed), the lock file, and a
/// checkpoint file of the toolkit.
#[test]
fn modes_child() {
    let Some(dir) = std::env::var_os(MODES_CHILD) else {
        return;
    };
    let dir = std::path::Path::new(&dir).join("parent").join("log");
    let mut b = small(Backend::Threaded);
    if std::env::var_os(MODES_WIDE).is_some() {
        b = b.file_mode(0o640).dir_mode(0o750);
    }
    let (wal, _) = Wal::open(&dir, b.build()).unwrap();
    while wal.stats().rolls < 3 {
        wal.append(0, &[1u8; 4000])
            .unwrap()
            .wait(Level::Durable)
            .unwrap();
    }
    assert!(wal.checkpoint(wal.next_lsn() - 1).unwrap() > 0);
    // The spares live only while the log is open: report them now.
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        println!(
            "@{} {:o}",
            e.file_name().to_string_lossy(),
            mode_of(&e.path())
        );
    }
    wal.close().unwrap();
    ringwal::files::write_checkpoint(&dir.join("snapshot"), b"state").unwrap();
}

/// Run `modes_child` under `umask` with a log under `root` and check the
/// mode of every file and directory it made.
fn check_modes(root: &std::path::Path, umask: &str, wide: bool) {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(std::env::current_exe().unwrap())
        .args([
            "open::modes_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(MODES_CHILD, root);
    if wide {
        cmd.env(MODES_WIDE, "1");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "child: {out:?}");
    let (file, dirm) = if wide { (0o640, 0o750) } else { (0o600, 0o700) };
    let log = root.join("parent").join("log");
    let what = format!("umask {umask}, wide {wide}");
    assert_eq!(mode_of(&root.join("parent")), dirm, "{what}: parent");
    assert_eq!(mode_of(&log), dirm, "{what}: log directory");
    let mut kinds = std::collections::BTreeSet::new();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let while_open = stdout.lines().filter_map(|l| l.strip_prefix('@')).map(|l| {
        let (name, mode) = l.split_once(' ').unwrap();
        (name.to_string(), u32::from_str_radix(mode, 8).unwrap())
    });
    let after_close = std::fs::read_dir(&log).unwrap().map(|e| {
        let e = e.unwrap();
        (e.file_name().into_string().unwrap(), mode_of(&e.path()))
    });
    for (name, mode) in while_open.chain(after_close.collect::<Vec<_>>()) {
        let kind = if format::parse_segment_file_name(&name).is_some() {
            "segment"
        } else if format::parse_spare_file_name(&name).is_some() {
            "spare"
        } else {
            name.rsplit('.').next().unwrap().to_string().leak()
        };
        kinds.insert(kind);
        // The toolkit's files are the caller's, private always.
        let expected = if name == "snapshot" { 0o600 } else { file };
        assert_eq!(mode, expected, "{what}: {name}");
    }
    for kind in ["segment", "spare", "manifest", "lock", "snapshot"] {
        assert!(
            kinds.iter().any(|k| k.contains(kind)),
            "{what}: no {kind} in {kinds:?}"
        );
    }
}

#[test]
fn every_file_and_directory_a_log_creates_is_private_whatever_the_umask() {
    let _spawn = spawning_processes();
    for (umask, wide) in [("022", false), ("000", false), ("077", true), ("000", true)] {
        let root = tempfile::tempdir().unwrap();
        check_modes(root.path(), umask, wide);
    }
}

/// Needs root, to mount a ramfs: a file system that refuses O_DIRECT
/// (EINVAL at open, after an O_EXCL open has created the file), so every
/// segment and spare takes the buffered fallback and must still get the
/// configured mode, not the umask's.
#[test]
fn the_buffered_fallback_keeps_the_configured_modes() {
    let _spawn = spawning_processes();
    let root = tempfile::tempdir().unwrap();
    let mount = match mount_memory(root.path(), "ramfs") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("the_buffered_fallback_keeps_the_configured_modes: skipped: {why}");
            return;
        }
    };
    let probe = mount.dir.join("probe");
    let refused = ringwal_platform::file::open_segment(&probe, true, true, 0o600)
        .map(|_| ())
        .unwrap_err();
    assert!(
        ringwal_platform::file::is_direct_unsupported(&refused),
        "ramfs refuses O_DIRECT: {refused}"
    );
    for (umask, wide) in [("077", true), ("022", true), ("000", false)] {
        let dir = mount.dir.join(format!("{umask}-{wide}"));
        std::fs::create_dir(&dir).unwrap();
        check_modes(&dir, umask, wide);
    }
}

#[test]
fn an_existing_log_keeps_its_owners_modes_and_bad_modes_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    wal.close().unwrap();
    let seg = segment_files(root.path(), NODE).pop().unwrap().1;
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    wal.close().unwrap();
    assert_eq!(mode_of(&seg), 0o644, "an open never changes a file's mode");
    assert_eq!(mode_of(root.path()), 0o755);
    for (file, dir) in [
        (0o400, 0o700),
        (0o1600, 0o700),
        (0o600, 0o500),
        (0o600, 0o10700),
    ] {
        let cfg = small(Backend::Threaded)
            .file_mode(file)
            .dir_mode(dir)
            .build();
        let e = Wal::open(root.path(), cfg).map(|_| ()).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig(m) if m.contains("_mode")),
            "{file:#o} {dir:#o}: {e}"
        );
    }
}

/// The mode goes through the file-system interface: the simulated disk
/// records what every created file and directory was given.
#[test]
fn the_simulated_disk_records_every_created_files_mode() {
    use ringwal_platform::sim::{Faults, SimFs};
    for (file, dir) in [(0o600, 0o700), (0o640, 0o750)] {
        let fs = SimFs::new(7, Faults::default());
        let log = std::path::Path::new("/sim/log");
        let cfg = small(Backend::Threaded)
            .sim(&fs)
            .file_mode(file)
            .dir_mode(dir)
            .build();
        let (wal, _) = Wal::open(log, cfg).unwrap();
        while wal.stats().rolls < 2 {
            wal.append(0, &[2u8; 4000])
                .unwrap()
                .wait(Level::Written)
                .unwrap();
        }
        let names = fs.vfs().list(log).unwrap();
        assert!(names.len() >= 4, "{names:?}");
        for name in &names {
            assert_eq!(fs.mode_of(&log.join(name)), Some(file), "{name}");
        }
        assert_eq!(fs.mode_of(log), Some(dir));
        wal.close().unwrap();
    }
}

/// A segment size alone opens: the builder picks the largest record limit
/// the segment holds (the default where it fits), a record of that size
/// is appended and read back, and one byte more is refused, as an explicit
/// limit one byte larger is refused at open, naming the one picked.
#[test]
fn a_segment_size_alone_opens_with_the_largest_record_it_holds() {
    assert_eq!(
        ringwal::Config::builder().build().max_record_bytes(),
        ringwal::Config::default().max_record_bytes()
    );
    for segment in [64u64 << 10, 256 << 10, 1 << 20, 2 << 20] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = ringwal::Config::builder().segment_bytes(segment).build();
        let max = cfg.max_record_bytes();
        assert!(
            max == 1 << 20 || (max < 1 << 20 && max as u64 > segment / 2),
            "{segment}: limit {max}"
        );
        let (wal, _) = Wal::open(tmp.path(), cfg).unwrap();
        let t = wal.append(3, &vec![7; max]).unwrap();
        t.wait(Level::Durable).unwrap();
        assert_eq!(wal.read(t.lsn()).unwrap().payload.len(), max);
        assert!(matches!(
            wal.append(3, &vec![7; max + 1]),
            Err(Error::TooLarge { .. })
        ));
        wal.close().unwrap();
        if max < 1 << 20 {
            let over = ringwal::Config::builder()
                .segment_bytes(segment)
                .max_record_bytes(max + 1)
                .build();
            match Wal::open(tmp.path(), over) {
                Err(Error::InvalidConfig(m)) => {
                    assert!(m.contains(&format!("at most {max} does")), "{m}")
                }
                other => panic!("{segment}: a limit one byte over: {other:?}"),
            }
        }
        eprintln!("segment {segment}: record limit {max}");
    }
}
