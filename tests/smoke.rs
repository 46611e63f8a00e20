use ringwal::{Backend, Config, Level, Wal};

fn cfg(backend: Backend) -> Config {
    Config::builder()
        .backend(backend)
        .segment_bytes(256 << 10)
        .max_record_bytes(16 << 10)
        .build()
}

#[test]
fn append_wait_reopen_both_backends() {
    for backend in [Backend::Uring, Backend::Threaded] {
        let dir = tempfile::tempdir().unwrap();
        let (wal, rep) = Wal::open(dir.path(), cfg(backend)).unwrap();
        assert!(rep.created);
        let mut tickets = Vec::new();
        for i in 0..2000u32 {
            let payload = format!("record-{i}-").repeat((i % 50) as usize + 1);
            tickets.push(wal.append((i % 3) as u16, payload.as_bytes()).unwrap());
        }
        for t in &tickets {
            t.wait(Level::Durable).unwrap();
        }
        assert_eq!(wal.durable_lsn(), 2000);
        let recs: Vec<_> = wal.reader_from(0).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), 2000);
        let st = wal.stats();
        assert!(st.rolls > 0, "{st:?}");
        wal.close().unwrap();
        let (wal, rep) = Wal::open(dir.path(), cfg(backend)).unwrap();
        assert_eq!(rep.records, 2000, "{rep:?}");
        assert_eq!(wal.next_lsn(), 2001);
        let t = wal.append(0, b"after").unwrap();
        assert_eq!(t.lsn(), 2001);
        t.wait(Level::Durable).unwrap();
        let recs: Vec<_> = wal.reader_from(1995).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs.last().unwrap().payload, b"after");
    }
}

#[test]
fn handles_are_shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Wal>();
    send_sync::<ringwal::Ticket>();
    fn send<T: Send>() {}
    send::<ringwal::TicketFuture>();
    send::<ringwal::Reader>();
}
