// Records claimed under the reservation lock and filled outside it:
// `append_with`, and what a producer that panics mid-append leaves.

use std::panic::{catch_unwind, AssertUnwindSafe};

use std::sync::Arc;

use ringwal::{Codec, Config, Error, Key, Level, StaticKeys, Wal};

fn open(dir: &std::path::Path, cfg: Config) -> Wal {
    Wal::open(dir, cfg).expect("open").0
}

fn keyed() -> Config {
    let keys = StaticKeys::new();
    keys.insert(1, Key::new([7; 32]), true);
    Config::builder().encryption(Arc::new(keys)).build()
}

#[test]
fn records_serialized_in_place_read_back_plain_sealed_and_packed() {
    let packed = Config::builder().compression(Codec::Lz4, 0).build();
    for (name, cfg) in [
        ("plain", Config::default()),
        ("sealed", keyed()),
        ("packed", packed),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let wal = open(dir.path(), cfg.clone());
        let mut last = None;
        for i in 0..200u32 {
            let len = 1 + (i as usize * 37) % 3000;
            let t = wal
                .append_with((i % 3) as u16, len, |slot| {
                    assert_eq!(slot.len(), len, "{name}: the slot is the length asked for");
                    assert!(
                        slot.iter().all(|&b| b == 0),
                        "{name}: the slot comes zeroed"
                    );
                    slot.iter_mut()
                        .enumerate()
                        .for_each(|(j, b)| *b = (i as usize + j) as u8);
                })
                .expect("append_with");
            last = Some(t);
        }
        last.unwrap().wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let wal = open(dir.path(), cfg);
        for (i, lsn) in (0..200u32).zip(1..) {
            let rec = wal.read(lsn).unwrap();
            let len = 1 + (i as usize * 37) % 3000;
            let want: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            assert_eq!(rec.stream, (i % 3) as u16, "{name}: stream of LSN {lsn}");
            assert_eq!(rec.payload, want, "{name}: payload of LSN {lsn}");
        }
    }
}

#[test]
fn a_record_longer_than_the_maximum_is_refused_before_its_writer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder().max_record_bytes(100).build();
    let wal = open(dir.path(), cfg);
    let mut ran = false;
    let err = wal.append_with(0, 101, |_| ran = true).unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { len: 101, max: 100 }),
        "{err:?}"
    );
    assert!(!ran);
    assert_eq!(wal.append(0, b"next").unwrap().lsn(), 1, "no LSN was taken");
}

#[test]
fn a_writer_that_panics_poisons_the_log_and_its_frame_never_reaches_disk() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), Config::default());
    let before = wal.append(0, b"before").unwrap();
    before.wait(Level::Durable).unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        wal.append_with(0, 64, |slot| {
            slot[0] = 1;
            panic!("serializer failed");
        })
    }));
    assert!(panicked.is_err());
    assert!(
        wal.poison_cause().is_some(),
        "an abandoned claim poisons the log"
    );
    assert!(matches!(
        wal.append(0, b"after"),
        Err(Error::Poisoned { .. })
    ));
    drop(wal);
    // What is on disk recovers cleanly: the record before, and nothing of
    // the abandoned one (its LSN was given, its frame never written).
    let (wal, report) = Wal::open(dir.path(), Config::default()).unwrap();
    assert_eq!(wal.read(1).unwrap().payload, b"before");
    assert!(
        wal.read(2).is_err(),
        "the abandoned record was never written"
    );
    assert!(report.truncated.is_none(), "nothing torn: {report:?}");
    wal.append(0, b"again")
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
}

#[test]
fn a_hook_that_panics_still_has_its_record_written_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path(), Config::default());
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        wal.append_then(0, b"hooked", |_| panic!("hook failed"))
    }));
    assert!(panicked.is_err());
    assert!(
        wal.poison_cause().is_none(),
        "the record was filled: nothing to poison"
    );
    let t = wal.append(0, b"next").unwrap();
    t.wait(Level::Durable).unwrap();
    assert_eq!(t.lsn(), 2);
    assert_eq!(wal.read(1).unwrap().payload, b"hooked");
}

#[test]
fn many_producers_filling_outside_the_lock_leave_every_record_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::builder()
        .segment_bytes(1 << 20)
        .max_record_bytes(64 << 10)
        .build();
    let wal = open(dir.path(), cfg.clone());
    std::thread::scope(|s| {
        for t in 0..8u16 {
            let wal = &wal;
            s.spawn(move || {
                for i in 0..500usize {
                    let len = 1 + (i * 131 + t as usize * 17) % 5000;
                    let tk = wal
                        .append_with(t, len, |slot| slot.fill(t as u8 ^ i as u8))
                        .unwrap();
                    if i % 50 == 0 {
                        tk.wait(Level::Durable).unwrap();
                    }
                }
            });
        }
    });
    wal.close().unwrap();
    let wal = open(dir.path(), cfg);
    let mut seen = [0usize; 8];
    for rec in wal.reader_from(1).unwrap() {
        let rec = rec.unwrap();
        let t = rec.stream as usize;
        let i = seen[t];
        let len = 1 + (i * 131 + t * 17) % 5000;
        assert_eq!(rec.payload.len(), len, "stream {t} record {i}");
        assert!(
            rec.payload.iter().all(|&b| b == t as u8 ^ i as u8),
            "stream {t} record {i}"
        );
        seen[t] += 1;
    }
    assert_eq!(seen, [500; 8]);
}
