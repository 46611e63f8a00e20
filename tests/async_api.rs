//! For async callers: `try_append` refuses instead of blocking an
//! executor thread when the staging buffers are full, and `sync_async`
//! awaits durability.

mod common;

use common::*;
use ringwal::{Durability, Error, Level, Wal};

#[test]
fn try_append_refuses_when_full_and_takes_no_lsn() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        // Three small staging buffers and one write in flight: a producer
        // that never waits fills them long before the device empties one.
        let cfg = small(backend)
            .max_inflight(1)
            .write_bytes(4096)
            .max_record_bytes(1024)
            .build();
        let (wal, _) = Wal::open(root.path(), cfg).unwrap();
        let mut appended = Vec::new();
        let mut refused = 0;
        while refused == 0 || appended.len() < 500 {
            let payload = format!("{:>900}", appended.len()).into_bytes();
            match wal.try_append(0, &payload) {
                Ok(t) => appended.push((t, payload)),
                Err(Error::Full) => {
                    refused += 1;
                    // What an async task would do: let the device catch up.
                    if let Some((t, _)) = appended.last() {
                        t.wait(Level::Written).unwrap();
                    }
                }
                Err(e) => panic!("{backend:?}: {e}"),
            }
        }
        assert!(refused > 0, "{backend:?}: the buffers never filled");
        // A refusal took no LSN: the appended records are dense.
        for (i, (t, _)) in appended.iter().enumerate() {
            assert_eq!(t.lsn(), i as u64 + 1, "{backend:?}");
        }
        wal.sync().unwrap();
        let recs = read_all(&wal);
        assert_eq!(recs.len(), appended.len());
        for (r, (_, p)) in recs.iter().zip(&appended) {
            assert_eq!(&r.payload, p);
        }
        wal.close().unwrap();
    });
}

#[test]
fn sync_async_resolves_once_everything_appended_is_durable() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        // Written mode: durability needs the fdatasync sync_async asks for.
        let cfg = small(backend)
            .durability(Durability::Deferred {
                sync_interval: None,
            })
            .build();
        let (wal, _) = Wal::open(root.path(), cfg).unwrap();
        let tickets: Vec<_> = (0..100u32)
            .map(|i| wal.append(0, &i.to_le_bytes()).unwrap())
            .collect();
        rt.block_on(wal.sync_async()).unwrap();
        assert!(tickets.iter().all(|t| t.is_done(Level::Durable)));
        assert!(wal.stats().syncs > 0, "{backend:?}");
        assert_eq!(wal.durable_lsn(), 100);
        wal.close().unwrap();
    });
}
