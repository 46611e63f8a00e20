//! The systems under test, and how each is opened and asked to make one
//! record durable.
//!
//! Every system runs at its durable setting and is configured the way its
//! documentation recommends for that, with choices that would only favour
//! ringwal taken out (see `docs/benchmarks.md`, "Fairness").

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use serde::Serialize;

use crate::files;

/// Everything measured, peers and floors alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    RingwalUring,
    RingwalThreaded,
    Okaywal,
    RaftEngine,
    Walrus,
    GroupCommit,
    TokioUring,
    /// O_DIRECT + RWF_DSYNC 4 KiB writes, one at a time.
    FloorQd1,
    /// The same, one at a time through the io_uring queue: the kernel's
    /// asynchronous completion path that ringwal's ring takes.
    FloorQd1Ring,
    /// The same, eight in flight (io_uring).
    FloorQd8,
    /// O_DIRECT + RWF_DSYNC 1 MiB writes, four in flight (io_uring).
    Floor1m,
}

pub const ALL: [System; 11] = [
    System::RingwalUring,
    System::RingwalThreaded,
    System::Okaywal,
    System::RaftEngine,
    System::Walrus,
    System::GroupCommit,
    System::TokioUring,
    System::FloorQd1,
    System::FloorQd1Ring,
    System::FloorQd8,
    System::Floor1m,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::RingwalUring => "ringwal-uring",
            System::RingwalThreaded => "ringwal-threaded",
            System::Okaywal => "okaywal",
            System::RaftEngine => "raft-engine",
            System::Walrus => "walrus",
            System::GroupCommit => "groupcommit",
            System::TokioUring => "tokio-uring",
            System::FloorQd1 => "floor-4k-qd1",
            System::FloorQd1Ring => "floor-4k-qd1-ring",
            System::FloorQd8 => "floor-4k-qd8",
            System::Floor1m => "floor-1m-qd4",
        }
    }

    pub fn from_name(s: &str) -> Option<System> {
        ALL.into_iter().find(|x| x.name() == s)
    }

    /// A different log, not ringwal itself and not the device.
    pub fn is_peer(self) -> bool {
        matches!(
            self,
            System::Okaywal
                | System::RaftEngine
                | System::Walrus
                | System::GroupCommit
                | System::TokioUring
        )
    }

    pub fn is_floor(self) -> bool {
        matches!(
            self,
            System::FloorQd1 | System::FloorQd1Ring | System::FloorQd8 | System::Floor1m
        )
    }

    /// `Err(reason)` when this build cannot run the system.
    pub fn available(self) -> Result<(), &'static str> {
        let left_out: &[System] = &[
            #[cfg(not(feature = "okaywal"))]
            System::Okaywal,
            #[cfg(not(feature = "raft-engine"))]
            System::RaftEngine,
            #[cfg(not(feature = "walrus"))]
            System::Walrus,
            #[cfg(not(feature = "tokio-uring"))]
            System::TokioUring,
        ];
        if left_out.contains(&self) {
            Err("left out of this build (cargo feature off)")
        } else {
            Ok(())
        }
    }

    /// What the system is and the setting it runs at, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            System::RingwalUring => "ringwal, io_uring backend, defaults (durable, RWF_DSYNC, O_DIRECT, 8 in flight); checkpoints behind the durable LSN every 10 ms",
            System::RingwalThreaded => "ringwal, threaded backend (one blocking I/O thread), otherwise defaults; checkpoints behind the durable LSN every 10 ms",
            System::Okaywal => "okaywal 0.3.1: begin_entry + write_chunk + commit per record (commit fsyncs, batched across threads); 64 MiB preallocated segments",
            System::RaftEngine => "raft-engine 0.4.2, default features off: one entry per LogBatch, Engine::write(batch, sync = true); region per producer; compression off",
            System::Walrus => "walrus-rust 0.2.0, FsyncSchedule::SyncEach (O_SYNC files + flush per entry): append_for_topic to one topic",
            System::GroupCommit => "hand-written leader/follower group commit: std::fs::File, one write_all_at + sync_data per group, on a preallocated zero-written file",
            System::TokioUring => "tokio-uring 0.5: write_all_at + sync_data per record, one task per producer, preallocated zero-written file",
            System::FloorQd1 => "device floor: 4 KiB O_DIRECT + RWF_DSYNC writes, 1 in flight, preallocated zero-written file",
            System::FloorQd1Ring => "device floor: 4 KiB O_DIRECT + RWF_DSYNC writes, 1 in flight through the ringwal_platform io_uring queue (the kernel's asynchronous completion path)",
            System::FloorQd8 => "device floor: 4 KiB O_DIRECT + RWF_DSYNC writes, 8 in flight (ringwal_platform io_uring queue)",
            System::Floor1m => "device floor for the large case: O_DIRECT + RWF_DSYNC writes of its record size, as many in flight as it has producers (1 MiB and 4 by default; ringwal_platform io_uring queue)",
        }
    }
}

/// One record submitted through [`Pipelined::submit`], not yet known to
/// be durable.
pub trait Pending: Send {
    /// Block until the record is durable (at once, if it already is).
    fn wait(self: Box<Self>) -> io::Result<()>;
}

/// A log that takes records from one thread without waiting for each:
/// `submit` returns as soon as the record is sequenced, and the returned
/// [`Pending`] says when it is durable. The open loop drives such a log
/// from one dispatcher thread and one completion thread
/// (`load::open_pipelined`) instead of a worker thread per outstanding
/// record.
pub trait Pipelined: Sync {
    fn submit(&self, payload: &[u8]) -> io::Result<Box<dyn Pending>>;
}

/// A log driven by ordinary threads: `append` returns once the record is
/// durable.
pub trait Log: Send + Sync {
    /// The same log through its pipelined API, if it has one.
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        None
    }
    /// Append one record and wait until it is durable. `worker` is the
    /// calling producer's index (below the `workers` given at open).
    fn append(&self, worker: usize, payload: &[u8]) -> io::Result<()>;
    /// A system-specific figure worth printing (e.g. records per write).
    fn note(&self) -> Option<String> {
        None
    }
    /// Drain and close.
    fn close(self: Box<Self>) -> io::Result<()>;
}

/// What a system needs to know when it is opened.
pub struct OpenCtx {
    /// Most producers (threads) that will call `append`.
    #[cfg_attr(not(feature = "raft-engine"), allow(dead_code))]
    pub workers: usize,
    /// Size of the preallocated file of the hand-written baselines.
    pub file_bytes: u64,
}

/// Open `sys` in the fresh, empty directory `dir`.
pub fn open(sys: System, dir: &Path, ctx: &OpenCtx) -> io::Result<Box<dyn Log>> {
    match sys {
        System::RingwalUring => ringwal_log(dir, ringwal::Backend::Uring),
        System::RingwalThreaded => ringwal_log(dir, ringwal::Backend::Threaded),
        System::GroupCommit => Ok(Box::new(GroupCommit::open(dir, ctx.file_bytes)?)),
        #[cfg(feature = "okaywal")]
        System::Okaywal => peers::okaywal(dir),
        #[cfg(feature = "raft-engine")]
        System::RaftEngine => peers::raft_engine(dir, ctx.workers),
        #[cfg(feature = "walrus")]
        System::Walrus => peers::walrus(dir),
        other => Err(io::Error::other(format!(
            "{} is not a thread-driven log in this build",
            other.name()
        ))),
    }
}

fn rw_err(e: ringwal::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// ringwal with a checkpointer thread that releases everything durable
/// every 10 ms, as a production log truncates behind itself (and as the
/// okaywal adapter's checkpoints do): rolls then reuse checkpointed
/// segments, the steady state of a long-running log.
struct Ringwal {
    wal: Arc<ringwal::Wal>,
    stop: Arc<AtomicBool>,
    checkpointer: Option<std::thread::JoinHandle<()>>,
}

fn ringwal_log(dir: &Path, backend: ringwal::Backend) -> io::Result<Box<dyn Log>> {
    let cfg = ringwal::Config::builder().backend(backend).build();
    let (wal, _report) = ringwal::Wal::open(dir, cfg).map_err(rw_err)?;
    let wal = Arc::new(wal);
    let stop = Arc::new(AtomicBool::new(false));
    let checkpointer = {
        let (wal, stop) = (wal.clone(), stop.clone());
        std::thread::Builder::new()
            .name("bench-checkpoint".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    if wal.checkpoint(wal.durable_lsn()).is_err() {
                        return;
                    }
                }
            })?
    };
    Ok(Box::new(Ringwal {
        wal,
        stop,
        checkpointer: Some(checkpointer),
    }))
}

impl Pending for ringwal::Ticket {
    // A ticket already durable returns without a syscall.
    fn wait(self: Box<Self>) -> io::Result<()> {
        ringwal::Ticket::wait(&self, ringwal::Level::Durable).map_err(rw_err)
    }
}

impl Pipelined for Ringwal {
    fn submit(&self, payload: &[u8]) -> io::Result<Box<dyn Pending>> {
        let ticket = self.wal.append(0, payload).map_err(rw_err)?;
        Ok(Box::new(ticket))
    }
}

impl Log for Ringwal {
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        Some(self)
    }

    fn append(&self, _worker: usize, payload: &[u8]) -> io::Result<()> {
        self.wal
            .append(0, payload)
            .and_then(|t| t.wait(ringwal::Level::Durable))
            .map_err(rw_err)
    }

    fn note(&self) -> Option<String> {
        let s = self.wal.stats();
        (s.writes > 0).then(|| {
            format!(
                "{:.1} records/write",
                (s.next_lsn - 1) as f64 / s.writes as f64
            )
        })
    }

    fn close(mut self: Box<Self>) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.checkpointer.take() {
            let _ = h.join();
        }
        let wal = Arc::try_unwrap(self.wal)
            .map_err(|_| io::Error::other("ringwal still shared at close"))?;
        wal.close().map_err(rw_err)
    }
}

/// Frame a record as a careful hand-written log would: length, CRC32 of the
/// payload, payload.
pub fn frame_into(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What a competent engineer writes by hand: producers queue framed
/// records under a mutex; whoever finds no write in progress becomes the
/// leader, takes the whole queue, writes it with one `write_all_at` and
/// one `sync_data`, and wakes everyone it covered. The file is circular
/// (offsets wrap at its end), preallocated and zero-written.
struct GroupCommit {
    file: File,
    size: u64,
    state: Mutex<GcState>,
    done: Condvar,
}

struct GcState {
    queue: Vec<u8>,
    spare: Vec<u8>,
    queued: u64,
    durable: u64,
    leading: bool,
    offset: u64,
    failed: Option<String>,
    groups: u64,
}

impl GroupCommit {
    fn open(dir: &Path, bytes: u64) -> io::Result<GroupCommit> {
        let path = dir.join("log");
        drop(files::prepare_zeroed(&path, bytes)?);
        let file = File::options().write(true).open(&path)?;
        Ok(GroupCommit {
            file,
            size: bytes,
            state: Mutex::new(GcState {
                queue: Vec::new(),
                spare: Vec::new(),
                queued: 0,
                durable: 0,
                leading: false,
                offset: 0,
                failed: None,
                groups: 0,
            }),
            done: Condvar::new(),
        })
    }
}

impl Log for GroupCommit {
    fn append(&self, _worker: usize, payload: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        frame_into(&mut s.queue, payload);
        s.queued += 1;
        let mine = s.queued;
        loop {
            if s.durable >= mine {
                return Ok(());
            }
            if let Some(e) = &s.failed {
                return Err(io::Error::other(e.clone()));
            }
            if s.leading {
                s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Lead: take everything queued so far.
            s.leading = true;
            let fresh = std::mem::take(&mut s.spare);
            let group = std::mem::replace(&mut s.queue, fresh);
            let covers = s.queued;
            let len = group.len() as u64;
            let mut at = s.offset;
            if at + len > self.size {
                at = 0;
            }
            s.offset = at + len;
            drop(s);
            let res = self
                .file
                .write_all_at(&group, at)
                .and_then(|()| self.file.sync_data());
            s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let mut group = group;
            group.clear();
            s.spare = group;
            s.leading = false;
            s.groups += 1;
            match res {
                Ok(()) => s.durable = covers,
                Err(e) => s.failed = Some(e.to_string()),
            }
            self.done.notify_all();
        }
    }

    fn note(&self) -> Option<String> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.groups > 0).then(|| format!("{:.1} records/write", s.queued as f64 / s.groups as f64))
    }

    fn close(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(any(feature = "okaywal", feature = "raft-engine", feature = "walrus"))]
mod peers {
    use std::io;
    use std::path::Path;

    use super::Log;

    #[cfg(feature = "okaywal")]
    pub fn okaywal(dir: &Path) -> io::Result<Box<dyn Log>> {
        okay::open(dir)
    }

    #[cfg(feature = "okaywal")]
    mod okay {
        use std::io;
        use std::path::Path;

        use okaywal::{Entry, EntryId, LogManager, SegmentReader, WriteAheadLog};

        use crate::systems::Log;

        /// Nothing to recover (fresh directory) and nothing to apply at a
        /// checkpoint: segments are simply recycled.
        #[derive(Debug)]
        struct Discard;

        impl LogManager for Discard {
            fn recover(&mut self, _entry: &mut Entry<'_>) -> io::Result<()> {
                Ok(())
            }

            fn checkpoint_to(
                &mut self,
                _last: EntryId,
                _entries: &mut SegmentReader,
                _wal: &WriteAheadLog,
            ) -> io::Result<()> {
                Ok(())
            }
        }

        struct Okay {
            log: WriteAheadLog,
        }

        pub fn open(dir: &Path) -> io::Result<Box<dyn Log>> {
            // The defaults preallocate 1 MiB segments and checkpoint after
            // 768 KiB, which would make every 1 MiB record grow a file.
            // Segments as large as ringwal's are the fair setting.
            let log = okaywal::Configuration::default_for(dir)
                .preallocate_bytes(64 << 20)
                .checkpoint_after_bytes(48 << 20)
                .open(Discard)?;
            Ok(Box::new(Okay { log }))
        }

        impl Log for Okay {
            fn append(&self, _worker: usize, payload: &[u8]) -> io::Result<()> {
                let mut entry = self.log.begin_entry()?;
                entry.write_chunk(payload)?;
                entry.commit().map(|_| ())
            }

            fn close(self: Box<Self>) -> io::Result<()> {
                self.log.shutdown()
            }
        }
    }

    #[cfg(feature = "raft-engine")]
    pub fn raft_engine(dir: &Path, workers: usize) -> io::Result<Box<dyn Log>> {
        raft::open(dir, workers)
    }

    #[cfg(feature = "raft-engine")]
    mod raft {
        use std::io;
        use std::path::Path;
        use std::sync::atomic::{AtomicU64, Ordering};

        use protobuf::well_known_types::BytesValue;
        use raft_engine::{Config, Engine, LogBatch, MessageExt, ReadableSize};

        use crate::systems::Log;

        /// raft-engine stores protobuf entries and asks each for its index;
        /// the index travels in the first 8 bytes of the value.
        #[derive(Clone)]
        struct Indexed;

        impl MessageExt for Indexed {
            type Entry = BytesValue;

            fn index(e: &BytesValue) -> u64 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&e.value[..8]);
                u64::from_le_bytes(b)
            }
        }

        struct Raft {
            engine: Engine,
            /// Last index appended per region (one region per producer, as
            /// one raft group per writer would have).
            last: Vec<AtomicU64>,
        }

        fn re_err(e: raft_engine::Error) -> io::Error {
            io::Error::other(e.to_string())
        }

        pub fn open(dir: &Path, workers: usize) -> io::Result<Box<dyn Log>> {
            let cfg = Config {
                dir: dir.to_string_lossy().into_owned(),
                // Payloads are random bytes; compression would only cost CPU.
                batch_compression_threshold: ReadableSize(0),
                ..Config::default()
            };
            let engine = Engine::open(cfg).map_err(re_err)?;
            Ok(Box::new(Raft {
                engine,
                last: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            }))
        }

        impl Log for Raft {
            fn append(&self, worker: usize, payload: &[u8]) -> io::Result<()> {
                let index = self.last[worker].fetch_add(1, Ordering::Relaxed) + 1;
                let mut value = Vec::with_capacity(8 + payload.len());
                value.extend_from_slice(&index.to_le_bytes());
                value.extend_from_slice(payload);
                let entry = BytesValue {
                    value,
                    ..BytesValue::default()
                };
                let mut batch = LogBatch::with_capacity(1);
                batch
                    .add_entries::<Indexed>(worker as u64 + 1, &[entry])
                    .map_err(re_err)?;
                self.engine.write(&mut batch, true).map_err(re_err)?;
                Ok(())
            }

            fn close(self: Box<Self>) -> io::Result<()> {
                Ok(())
            }
        }
    }

    #[cfg(feature = "walrus")]
    pub fn walrus(dir: &Path) -> io::Result<Box<dyn Log>> {
        wal::open(dir)
    }

    #[cfg(feature = "walrus")]
    mod wal {
        use std::io;
        use std::path::Path;

        use walrus_rust::{FsyncSchedule, ReadConsistency, Walrus};

        use crate::systems::Log;

        struct Walr {
            w: Walrus,
        }

        /// Walrus places its files under `$WALRUS_DATA_DIR/<key>`; the
        /// harness sets that variable to the run's root directory before
        /// any thread starts, so the key is `dir`'s own name.
        pub fn open(dir: &Path) -> io::Result<Box<dyn Log>> {
            let key = dir
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| io::Error::other("walrus needs a named directory"))?;
            let w = Walrus::with_consistency_and_schedule_for_key(
                key,
                ReadConsistency::StrictlyAtOnce,
                FsyncSchedule::SyncEach,
            )?;
            Ok(Box::new(Walr { w }))
        }

        impl Log for Walr {
            fn append(&self, _worker: usize, payload: &[u8]) -> io::Result<()> {
                self.w.append_for_topic("log", payload)
            }

            fn close(self: Box<Self>) -> io::Result<()> {
                Ok(())
            }
        }
    }
}
