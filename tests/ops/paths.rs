//! A log opened by a relative path stays where it was opened.
//!
//! This file holds one test on purpose: it changes the process's working
//! directory, which every thread of the process shares. The other tests
//! of this binary name every directory by an absolute path (temporary
//! directories, the simulated disk's `/wal`), which a change of working
//! directory cannot move.

use crate::common::{cfg, for_each_backend};
use ringwal::{Level, Lsn, Wal};

/// Append `n` records (`tag-i`, padded to 200 bytes so a few hundred
/// roll a small segment), all durable, and return their LSNs.
fn fill(wal: &Wal, tag: &str, n: usize) -> Vec<Lsn> {
    let tickets: Vec<_> = (0..n)
        .map(|i| {
            let p = format!("{tag}-{i:-<200}");
            wal.append(0, p.as_bytes()).unwrap()
        })
        .collect();
    tickets.last().unwrap().wait(Level::Durable).unwrap();
    tickets.iter().map(|t| t.lsn()).collect()
}

/// Open log A as `"wal"` from directory x, change to directory y whose
/// `"wal"` holds log B of the same node, and keep appending (rolling) and
/// checkpointing A. Every roll, checkpoint and reader of A must stay in
/// x/wal: B keeps every record, and A every record it acknowledged above
/// its checkpoint.
#[test]
fn a_relative_path_survives_a_change_of_directory() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let (x, y) = (root.path().join("x"), root.path().join("y"));
        std::fs::create_dir_all(&x).unwrap();
        std::fs::create_dir_all(&y).unwrap();

        let (b, _) = Wal::open(y.join("wal"), cfg(backend)).unwrap();
        let b_lsns = fill(&b, "b", 300);
        b.close().unwrap();

        let before = std::env::current_dir().unwrap();
        std::env::set_current_dir(&x).unwrap();
        let (a, _) = Wal::open("wal", cfg(backend)).unwrap();
        assert!(a.dir().is_absolute(), "{:?}", a.dir());
        fill(&a, "a", 200);
        std::env::set_current_dir(&y).unwrap();
        let mut acked = fill(&a, "a2", 1500);
        let kept_from = acked[700];
        assert!(a.checkpoint(kept_from - 1).unwrap() > 0);
        acked.retain(|&l| l >= a.oldest_lsn());
        let read: Vec<Lsn> = a.reader_from(0).unwrap().map(|r| r.unwrap().lsn).collect();
        assert!(read.ends_with(&acked), "A's reader left its directory");
        a.close().unwrap();
        std::env::set_current_dir(before).unwrap();

        let (b, rep) = Wal::open(y.join("wal"), cfg(backend)).unwrap();
        assert_eq!(
            rep.last_lsn,
            *b_lsns.last().unwrap(),
            "{backend:?}: B changed"
        );
        let payloads: Vec<Vec<u8>> = b
            .reader_from(0)
            .unwrap()
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(payloads.len(), 300);
        assert!(payloads.iter().all(|p| p.starts_with(b"b-")));
        b.close().unwrap();

        let (a, rep) = Wal::open(x.join("wal"), cfg(backend)).unwrap();
        assert_eq!(
            rep.last_lsn,
            *acked.last().unwrap(),
            "{backend:?}: A lost records"
        );
        let read: Vec<Lsn> = a.reader_from(0).unwrap().map(|r| r.unwrap().lsn).collect();
        assert!(read.ends_with(&acked));
        a.close().unwrap();
    });
}
