//! With the `tracing` feature, what an operator wants in a log file is
//! emitted as events: rolls and checkpoints (INFO), recovery's repairs
//! (WARN) and the poison (ERROR). Run with
//! `cargo test --features tracing --test tracing_events`.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use ringwal::{format, Backend, Level, Wal};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every event's level and message, from every thread.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), m.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Capture {
    fn saw(&self, level: tracing::Level, message: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l == level && m.contains(message))
    }
}

#[test]
fn rolls_checkpoints_repairs_and_the_poison_are_events() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    let mut last = None;
    for _ in 0..2_000 {
        last = Some(wal.append(0, &[b'x'; 200]).unwrap());
    }
    let last = last.unwrap();
    last.wait(Level::Durable).unwrap();
    assert!(capture.saw(tracing::Level::INFO, "rolled to a new segment"));
    assert!(wal.checkpoint(last.lsn() / 2).unwrap() > 0);
    assert!(capture.saw(tracing::Level::INFO, "checkpoint removed segments"));
    let next = wal.next_lsn();
    wal.close().unwrap();

    // A crash mid-create leaves a blank newest file: recovery discards it.
    let blank = root.path().join(format::segment_file_name(NODE, next));
    std::fs::write(&blank, vec![0u8; SEGMENT_BYTES as usize]).unwrap();
    let (wal, report) = Wal::open(root.path(), cfg(Backend::Threaded)).unwrap();
    assert_eq!(report.discarded, vec![blank]);
    assert!(capture.saw(tracing::Level::WARN, "recovery discarded a file"));
    wal.close().unwrap();

    // A failed write poisons the log.
    use ringwal_platform::sim::{Faults, SimFs};
    let disk = SimFs::new(
        3,
        Faults {
            fail_write_at: Some(5),
            ..Faults::default()
        },
    );
    let cfg = ringwal::Config::builder()
        .sim(&disk)
        .segment_bytes(SEGMENT_BYTES)
        .max_record_bytes(MAX_RECORD)
        .build();
    let (wal, _) = Wal::open("/wal", cfg).unwrap();
    while wal
        .append(0, b"x")
        .and_then(|t| t.wait(Level::Durable))
        .is_ok()
    {}
    assert!(capture.saw(tracing::Level::ERROR, "log poisoned"));
    drop(wal);
}
