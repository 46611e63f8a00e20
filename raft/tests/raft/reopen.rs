//! Reopening a store brings back exactly the state it had: log state,
//! entries, vote and committed, after appends, truncations (with and
//! without entries after them), purges that remove segments, and votes.

use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, LogState, RaftLogReader, Vote};
use ringwal_raft::{KvConfig, KvRequest, LogStore};

use crate::common::reopening_logs;

/// Small segments (64 KiB) so that a few hundred 1 KiB entries fill
/// several, and a purge has whole segments to remove.
fn config() -> ringwal::Config {
    ringwal::Config::builder()
        .segment_bytes(64 << 10)
        .max_record_bytes(4 << 10)
        .write_bytes(16 << 10)
        .build()
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<KvConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(KvRequest::Set {
            key: format!("k{index}"),
            value: format!("{term}:{}", "v".repeat(1000)),
        }),
    }
}

/// Everything a reopen must bring back.
#[derive(Debug, PartialEq)]
struct Seen {
    state: LogState<KvConfig>,
    ids: Vec<LogId<u64>>,
    entries: Vec<String>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
}

async fn seen(store: &mut LogStore<KvConfig>) -> Seen {
    let entries = store.try_get_log_entries(..).await.unwrap();
    // Through a separate reader too: it must agree with the store.
    let mut reader = store.get_log_reader().await;
    let via_reader = reader.try_get_log_entries(0..u64::MAX).await.unwrap();
    assert_eq!(
        via_reader.iter().map(|e| e.log_id).collect::<Vec<_>>(),
        entries.iter().map(|e| e.log_id).collect::<Vec<_>>()
    );
    // Contiguous indexes: no hole.
    assert!(entries
        .windows(2)
        .all(|w| w[1].log_id.index == w[0].log_id.index + 1));
    Seen {
        state: store.get_log_state().await.unwrap(),
        ids: entries.iter().map(|e| e.log_id).collect(),
        entries: entries.iter().map(|e| format!("{:?}", e.payload)).collect(),
        vote: store.read_vote().await.unwrap(),
        committed: store.read_committed().await.unwrap(),
    }
}

fn open(dir: &Path) -> LogStore<KvConfig> {
    LogStore::open(dir, config()).unwrap()
}

/// Close `store` and open its log again, with no process spawned by
/// another test in between (see `common::reopening_logs`).
fn reopen(store: LogStore<KvConfig>, dir: &Path) -> LogStore<KvConfig> {
    let _reopening = reopening_logs();
    drop(store);
    open(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_brings_back_the_same_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let mut store = open(dir);
    // 1..=300 in batches of 10: several segments.
    for first in (1..=300).step_by(10) {
        store
            .blocking_append((first..first + 10).map(|i| entry(1, i)))
            .await
            .unwrap();
    }
    // A conflicting suffix replaced: 250.. truncated, 250..=270 rewritten
    // in term 2.
    store.truncate(log_id(1, 250)).await.unwrap();
    store
        .blocking_append((250..=270).map(|i| entry(2, i)))
        .await
        .unwrap();
    // Purge the first 120: whole segments go.
    let segments_before = store.wal().stats().segments;
    store.purge(log_id(1, 120)).await.unwrap();
    assert!(
        store.wal().stats().segments < segments_before,
        "the purge removed no segment"
    );
    assert!(store.wal().oldest_lsn() > 1);
    store.save_vote(&Vote::new(2, 1)).await.unwrap();
    store.save_committed(Some(log_id(2, 260))).await.unwrap();

    let before = seen(&mut store).await;
    assert_eq!(before.state.last_purged_log_id, Some(log_id(1, 120)));
    assert_eq!(before.state.last_log_id, Some(log_id(2, 270)));
    assert_eq!(before.ids.first(), Some(&log_id(1, 121)));
    assert_eq!(before.ids.len(), 150);
    assert_eq!(before.vote, Some(Vote::new(2, 1)));
    drop(store);

    let mut store = open(dir);
    assert_eq!(seen(&mut store).await, before);

    // A truncation with nothing appended after it (the process dies right
    // after the truncation record): reopen ends the log before it.
    store.truncate(log_id(2, 265)).await.unwrap();
    let before = seen(&mut store).await;
    assert_eq!(before.state.last_log_id, Some(log_id(2, 264)));
    let mut store = reopen(store, dir);
    assert_eq!(seen(&mut store).await, before);

    // Appending goes on from there after the reopen, and survives another.
    store
        .blocking_append((265..=280).map(|i| entry(3, i)))
        .await
        .unwrap();
    store.save_vote(&Vote::new(3, 1)).await.unwrap();
    let before = seen(&mut store).await;
    assert_eq!(before.state.last_log_id, Some(log_id(3, 280)));
    let mut store = reopen(store, dir);
    assert_eq!(seen(&mut store).await, before);

    // Purge past the end of the log: nothing left, the last log id is the
    // purged one, and it stays so.
    store.purge(log_id(3, 300)).await.unwrap();
    let before = seen(&mut store).await;
    assert!(before.ids.is_empty());
    assert_eq!(before.state.last_log_id, Some(log_id(3, 300)));
    let mut store = reopen(store, dir);
    assert_eq!(seen(&mut store).await, before);
    store.blocking_append([entry(3, 301)]).await.unwrap();
    let mut store = reopen(store, dir);
    assert_eq!(seen(&mut store).await.ids, vec![log_id(3, 301)]);
}

/// An entry appended at an index the log holds, without a truncation
/// first, replaces it and everything after it, in memory and after a
/// reopen alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_without_truncate_replays_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = open(tmp.path());
    store
        .blocking_append((1..=10).map(|i| entry(1, i)))
        .await
        .unwrap();
    store
        .blocking_append((6..=7).map(|i| entry(2, i)))
        .await
        .unwrap();
    let before = seen(&mut store).await;
    assert_eq!(before.ids.len(), 7);
    assert_eq!(before.state.last_log_id, Some(log_id(2, 7)));
    let mut store = reopen(store, tmp.path());
    assert_eq!(seen(&mut store).await, before);
}

/// A store another holder has open is refused with ringwal's typed
/// `Locked` (what a restarting process waits on), and opens once the
/// holder is gone; `open` reports the same failure as a `StorageError`.
#[test]
fn a_held_store_is_refused_as_locked_and_opens_once_released() {
    let _reopening = reopening_logs();
    let tmp = tempfile::tempdir().unwrap();
    let holder = LogStore::<KvConfig>::open(tmp.path(), config()).unwrap();
    match LogStore::<KvConfig>::try_open(tmp.path(), config()) {
        Err(ringwal_raft::OpenError::Wal(ringwal::Error::Locked { path, .. })) => {
            assert!(path.starts_with(tmp.path()), "{}", path.display());
        }
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second store opened the same log"),
    }
    let Err(e) = LogStore::<KvConfig>::open(tmp.path(), config()) else {
        panic!("a second store opened the same log");
    };
    assert!(e.to_string().contains("locked"), "{e}");
    drop(holder);
    LogStore::<KvConfig>::try_open(tmp.path(), config()).expect("opens once released");
}
