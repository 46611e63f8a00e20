//! openraft's storage conformance suite, run against `LogStore` over a
//! real ringwal log, each store in a fresh temporary directory.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use ringwal_raft::{KvConfig, KvStateMachine, LogStore, MemLogStore};
use tempfile::TempDir;

/// Small segments and records, so that creating a log (which zero-writes
/// its first segment) costs little: the suite builds dozens of stores.
fn config() -> ringwal::Config {
    ringwal::Config::builder()
        .segment_bytes(1 << 20)
        .max_record_bytes(64 << 10)
        .write_bytes(64 << 10)
        .build()
}

struct Builder;

impl StoreBuilder<KvConfig, LogStore<KvConfig>, KvStateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<KvConfig>, KvStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = LogStore::open(dir.path(), config())?;
        Ok((dir, store, KvStateMachine::new()))
    }
}

#[test]
fn openraft_suite() {
    if let Err(e) = Suite::test_all(Builder) {
        panic!("openraft's storage suite failed: {e}");
    }
}

struct MemBuilder;

impl StoreBuilder<KvConfig, MemLogStore<KvConfig>, KvStateMachine> for MemBuilder {
    async fn build(
        &self,
    ) -> Result<((), MemLogStore<KvConfig>, KvStateMachine), StorageError<u64>> {
        Ok(((), MemLogStore::new(), KvStateMachine::new()))
    }
}

/// The in-memory store the benchmarks and `ringwal-kv --store memory`
/// measure against passes the same suite.
#[test]
fn openraft_suite_on_the_memory_store() {
    if let Err(e) = Suite::test_all(MemBuilder) {
        panic!("openraft's storage suite failed on MemLogStore: {e}");
    }
}
