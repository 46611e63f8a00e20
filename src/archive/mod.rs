//! The log off the machine: an archiver that ships a node's segments to
//! object storage as they seal and its durable tail every interval, a
//! restore that builds a log from the archive alone, and a standby that
//! follows one (feature `archive`).
//!
//! An archive is a prefix of an object store (`file:///dir` or
//! `s3://bucket/prefix`, through the `object_store` crate) holding, per
//! node, one object per sealed segment (its bytes as on disk, up to where
//! its frames end), one tail object (the newest segment's durable
//! prefix, replaced as it grows) and an archive manifest that lists them
//! with their LSN ranges, sizes, CRCs and write times (docs/format.md
//! §9). Objects are put whole, and the manifest names an object only
//! after the store has it, so a reader never meets a partial one.
//!
//! Guarantees:
//!
//! - **Nothing leaves the disk unarchived.** Once an archiver has run,
//!   the log directory keeps an archive point (`NNNNN.archived`), raised
//!   after each sealed segment is in the manifest; checkpoints and the
//!   size limit never remove a segment above it, unless the log is
//!   configured with
//!   [`release_unarchived`](crate::ConfigBuilder::release_unarchived).
//! - **Only durable records are archived.** In the writer's process the
//!   tail goes up to the durable LSN; from another process, to what the
//!   node's manifest and the writes' vouch frames prove durable. So a
//!   power loss never takes from the log a record the archive holds.
//! - **A restore never reuses an LSN the archive knew of.** The restored
//!   log gives up every LSN above what it restored, up to the highest the
//!   archive held or its writer had handed out.
//! - Encrypted logs stay encrypted: objects are the segments' bytes.
//!
//! Every call here blocks on the store (one request at a time, on a
//! runtime of the calling thread); call it from a thread of its own or
//! tokio's blocking pool, never from inside an async task.

mod follow;
mod mem;
mod restore;
mod ship;
mod store;
mod walk;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::config::{Config, RecoveryMode};
use crate::error::{ArchiveProblem, Error, Lsn, Result};
use crate::segment::set::LogDir;
use crate::wal::Wal;
use crate::write::shared::Shared;

pub use restore::{RestoreTo, Restored};
pub use ship::Pass;
pub use store::{Got, Store, StoreOptions};

use ship::Shipper;
use store::Names;

/// How long the archiver waits after a failed pass before the next one
/// at most: the wait doubles from the interval up to this. Long enough
/// that a store down for an hour sees two requests a minute, short
/// enough that a recovery point is back within a minute of the store.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Ships one node's log to an archive. Made by [`Archiver::open`] (for a
/// log another process writes) or [`Archiver::attach`] (for a `Wal` of
/// this process); run a pass at a time with [`pass`](Self::pass), or on
/// a thread of its own with [`spawn`](Self::spawn).
pub struct Archiver {
    shipper: Shipper,
    /// The writer's state, when it is in this process: its durable LSN
    /// bounds the tail.
    live: Option<Arc<Shared>>,
}

impl Archiver {
    /// An archiver for `cfg`'s node in `dir`, which another process may
    /// be writing, shipping to `url`. No request is made yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a URL that is not `file:///...` or
    /// `s3://bucket[/prefix]`; [`Error::NoLog`] when `dir` does not exist
    /// (nothing is created); [`Error::Locked`] while another archiver
    /// runs on the node (one at a time: two would each drop the other's
    /// segments from the manifest); `Io` when a local archive directory
    /// or the lock file cannot be made.
    pub fn open(
        dir: impl AsRef<Path>,
        cfg: &Config,
        url: &str,
        opts: &StoreOptions,
    ) -> Result<Archiver> {
        let store = Store::open(url, opts)?.with_modes(cfg.file_mode(), cfg.dir_mode());
        let dir = dir.as_ref();
        let dir = LogDir::resolve(&*cfg.vfs, dir, cfg.node()).map_err(|e| match e {
            // A mistyped path is no log, not an I/O failure; nothing is
            // created for it.
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::NoLog {
                    dir: dir.to_path_buf(),
                    node: cfg.node(),
                }
            }
            e => e,
        })?;
        Ok(Archiver {
            shipper: Shipper::new(store, cfg.vfs.clone(), dir)?,
            live: None,
        })
    }

    /// An archiver for the log `wal` writes, shipping to `url`: the tail
    /// goes up to `wal`'s durable LSN. Stop it (or let its thread end)
    /// before the `Wal` closes if its last pass must see the last
    /// records; it holds the log's shared state, not the `Wal`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn attach(wal: &Wal, url: &str, opts: &StoreOptions) -> Result<Archiver> {
        let sh = wal.shared().clone();
        let store = Store::open(url, opts)?.with_modes(sh.cfg().file_mode(), sh.cfg().dir_mode());
        let shipper = Shipper::new(store, sh.cfg().vfs.clone(), sh.dir().clone())?;
        Ok(Archiver {
            shipper,
            live: Some(sh),
        })
    }

    /// Ship what is new: every sealed segment not yet archived, then the
    /// tail if it grew. Cost: see [`Pass`]; a directory listing, reads of
    /// the unarchived segments and of the newest one, a PUT per object
    /// and per manifest change, a small durable file write per sealed
    /// segment. Blocking.
    ///
    /// # Errors
    ///
    /// [`Error::Archive`] when the store fails (`Unreachable`: try
    /// again later), refuses, or holds another log's archive; `Corrupt`
    /// for a sealed segment that does not end as a writer leaves one
    /// (it is not shipped); `Io` for the log directory. A failed pass
    /// leaves the archive as the last good one left it.
    pub fn pass(&mut self) -> Result<Pass> {
        // In the writer's process, what it has handed out is known: the
        // archive records it, so that a log restored from it never hands
        // out those LSNs again.
        let live = self
            .live
            .as_ref()
            .map_or((0, 0), |sh| (sh.acks().durable(), sh.next_lsn() - 1));
        let pass = self.shipper.pass(live)?;
        if let Some(sh) = &self.live {
            sh.retention().saw_archived(Some(pass.archived_lsn));
        }
        Ok(pass)
    }

    /// Run passes every `interval` on a thread of its own
    /// (`ringwal-archive`) until [`Running::stop`]. A failed pass is
    /// retried after a wait that doubles up to 30 s; every failure is in
    /// [`Running::status`]. Errors that a retry cannot mend (damage,
    /// another log's archive, refused credentials) end the thread, and
    /// `stop` returns them.
    ///
    /// # Errors
    ///
    /// `Io` if the thread cannot be started.
    pub fn spawn(self, interval: Duration) -> Result<Running> {
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let status = Arc::new(Mutex::new(Status::default()));
        let shared = status.clone();
        let thread = std::thread::Builder::new()
            .name("ringwal-archive".into())
            .spawn(move || self.run(interval, &stopped, &shared))
            .map_err(|e| Error::io("the archive thread", e))?;
        Ok(Running {
            stop,
            thread: Some(thread),
            status,
        })
    }

    fn run(
        mut self,
        interval: Duration,
        stop: &Receiver<()>,
        status: &Mutex<Status>,
    ) -> Result<Pass> {
        // Passes start every `interval` (not `interval` after the last
        // one ended): a pass that ships a sealed segment takes a good part
        // of a second, and the recovery point is the interval plus one
        // pass, not plus two.
        let mut wait = interval;
        let mut started = Instant::now();
        loop {
            let due = wait.saturating_sub(started.elapsed());
            let stopping = match stop.recv_timeout(due) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
                Err(RecvTimeoutError::Timeout) => false,
            };
            started = Instant::now();
            let result = self.pass();
            let fatal = record(status, &result);
            match result {
                Ok(pass) if stopping => return Ok(pass),
                Ok(_) => wait = interval,
                Err(e) if fatal || stopping => return Err(e),
                Err(_) => wait = (wait * 2).clamp(interval, MAX_BACKOFF.max(interval)),
            }
        }
    }
}

/// Note a pass's outcome; true if it failed in a way a retry cannot
/// mend.
fn record(status: &Mutex<Status>, result: &Result<Pass>) -> bool {
    let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
    s.passes += 1;
    match result {
        Ok(p) => {
            s.archived_lsn = p.archived_lsn;
            s.last_lsn = p.last_lsn;
            s.last_success = Some(Instant::now());
            s.failing = None;
            false
        }
        Err(e) => {
            s.failures += 1;
            s.failing = Some(e.chain().to_string());
            !retryable(e)
        }
    }
}

/// Whether a later pass may succeed where this one failed: the store was
/// unreachable, or a segment went (a checkpoint of a log that releases
/// unarchived segments) between listing and reading.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Archive { problem, .. } => *problem == ArchiveProblem::Unreachable,
        Error::Io { .. } | Error::NoSpace { .. } => true,
        _ => false,
    }
}

/// An archiver running on its thread (see [`Archiver::spawn`]).
pub struct Running {
    stop: Sender<()>,
    thread: Option<JoinHandle<Result<Pass>>>,
    status: Arc<Mutex<Status>>,
}

/// How an archiver has fared so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// Passes run.
    pub passes: u64,
    /// Passes failed.
    pub failures: u64,
    /// The archive point after the last good pass.
    pub archived_lsn: Lsn,
    /// The last LSN archived, tail included, after the last good pass.
    pub last_lsn: Lsn,
    /// When the last good pass ended.
    pub last_success: Option<Instant>,
    /// Why the passes fail, while they do (the error and its causes).
    pub failing: Option<String>,
}

impl Running {
    /// How it has fared so far. Cost: one uncontended lock.
    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether its thread has ended (on an error no retry mends).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Run one last pass, stop, and return that pass, or the error that
    /// ended the thread. Blocks for the pass. A panic of the archive
    /// thread (a bug) resumes here.
    ///
    /// # Errors
    ///
    /// As [`Archiver::pass`].
    pub fn stop(mut self) -> Result<Pass> {
        let _ = self.stop.try_send(());
        let thread = self.thread.take().expect("stop runs once");
        match thread.join() {
            Ok(r) => r,
            // A bug of the archiver's: the caller sees the panic itself,
            // as a join of any thread would show it.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Running {
    /// Stops the thread after one last pass, as [`stop`](Self::stop)
    /// does, discarding its result.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.stop.try_send(());
            let _ = t.join();
        }
    }
}

/// Build `cfg`'s node's log in `dir` (which must hold none) from the
/// archive at `url`, up to `to`, checking every object against the
/// archive manifest and every frame as it goes; then, if the archive
/// held LSNs beyond what was restored, record them as given up (a
/// point-in-time open writes the skip), so a writer opening the log
/// never hands one out again.
///
/// Cost: one GET per object restored, their bytes written and synced,
/// and, with LSNs given up, one open and close of the log. Blocking.
///
/// # Errors
///
/// Nothing is left in `dir` on error. [`Error::Archive`] naming the
/// object for no archive of the node at `url` (`NoArchive`: no archive
/// manifest there), a missing or damaged object (`Missing`, `Damaged`),
/// a store that refuses or does not answer, and for a `dir` that already
/// holds a log (`TargetHoldsLog`); `InvalidConfig` for a bad URL; `Io` for
/// the directory.
pub fn restore(
    url: &str,
    opts: &StoreOptions,
    dir: impl AsRef<Path>,
    cfg: &Config,
    to: RestoreTo,
) -> Result<Restored> {
    let store = Store::open_to_read(url, opts, cfg.node())?;
    let dir = dir.as_ref();
    let restored = restore::restore(&store, dir, cfg, to)?;
    if restored.given_up.is_some() {
        let mut pit = cfg.clone();
        pit.recovery = RecoveryMode::PointInTime;
        let (wal, _) = Wal::open(dir, pit)?;
        wal.close()?;
    }
    Ok(restored)
}

/// Keep `dir` a standby of the archive at `url`: restore everything it
/// holds (into a `dir` that holds no log of `cfg`'s node), then every
/// `interval` add what landed since, until `stop` says so (it is asked
/// between steps, at least every 50 ms). Every reader of `dir` works
/// meanwhile: it sees a log a writer left, growing. Returns what it
/// holds when it stops.
///
/// The standby keeps the archive's LSNs as they are, so it gives none
/// up: to promote it, stop it and run a point-in-time recovery
/// (`ringwal recover --apply --point-in-time`), which resumes above every
/// LSN its writer handed out as far as the archive knew.
///
/// Cost: per step one GET of the manifest; per new or grown segment one
/// GET of its object, a write of the new bytes, an fdatasync, a walk of
/// the segment's frames and a manifest write. Blocking.
///
/// # Errors
///
/// As [`restore`] at the start (and nothing is left in `dir`). Later, a
/// store that does not answer is retried at the next step; damage (an
/// object that does not match the manifest, or bytes that differ from
/// what the standby holds) ends it with the error, the directory left as
/// the last good step made it.
pub fn follow(
    url: &str,
    opts: &StoreOptions,
    dir: impl AsRef<Path>,
    cfg: &Config,
    interval: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Restored> {
    let store = Store::open_to_read(url, opts, cfg.node())?;
    let dir = dir.as_ref();
    cfg.vfs
        .create_dir_all(dir, cfg.dir_mode())
        .map_err(|e| Error::io(dir, e))?;
    let b = restore::Builder::new(&store, dir, cfg);
    // No writer may open the standby while it is being written: it holds
    // the node's writer lock, as a writer would. Readers take none.
    let _lock = crate::segment::set::lock_writer(&*cfg.vfs, &b.dir)?;
    let (mut restored, mut have) = follow::start(&b)?;
    let nap = Duration::from_millis(50);
    loop {
        let mut waited = Duration::ZERO;
        while waited < interval {
            if stop() {
                return Ok(restored);
            }
            std::thread::sleep(nap.min(interval - waited));
            waited += nap;
        }
        match follow::step(&b, &mut have, &mut restored) {
            Ok(_) => {}
            Err(e) if retryable(&e) => {
                crate::obs::trace::event!(warn, error = %e.chain(), "standby step failed; retrying");
            }
            Err(e) => return Err(e),
        }
    }
}

/// What an archive holds for one node (see [`list`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The node.
    pub node: u32,
    /// The log's id.
    pub log_id: u64,
    /// The highest LSN its writer had handed out, as last archived.
    pub handed_out: Lsn,
    /// Its objects, oldest first; the tail, if any, last.
    pub objects: Vec<Object>,
    /// When the tail object was last replaced, if there is one.
    pub tail_modified: Option<SystemTime>,
}

/// One object of an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Object {
    /// Its URL.
    pub url: String,
    /// Whether it is the tail (the newest segment's prefix, replaced as
    /// it grows) rather than a sealed segment.
    pub tail: bool,
    /// Its first LSN (the segment's base).
    pub first_lsn: Lsn,
    /// Its last LSN.
    pub last_lsn: Lsn,
    /// Its size.
    pub bytes: u64,
    /// Its first and last writes' times, where the log records them
    /// (format version 3).
    pub written: Option<(SystemTime, SystemTime)>,
}

/// What the archive at `url` holds for `node`: `None` if nothing.
/// Cost: one GET, and a HEAD of the tail. Blocking.
///
/// # Errors
///
/// [`Error::Archive`] for a damaged manifest or a store that fails.
pub fn list(url: &str, opts: &StoreOptions, node: u32) -> Result<Option<Listing>> {
    let store = match Store::open_to_read(url, opts, node) {
        Err(Error::Archive {
            problem: ArchiveProblem::NoArchive,
            ..
        }) => return Ok(None),
        store => store?,
    };
    let names = Names::new(node);
    let Some(m) = ship::read_manifest(&store, &names)? else {
        return Ok(None);
    };
    let object = |g: &crate::at_rest::format::ArchivedSegment, tail: bool| {
        let rel = if tail {
            names.tail(g.base)
        } else {
            names.segment(g.base)
        };
        let at = |ns: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        Object {
            url: store.url_of(&rel),
            tail,
            first_lsn: g.base,
            last_lsn: g.last,
            bytes: g.bytes,
            written: (g.first_ns != 0).then(|| (at(g.first_ns), at(g.last_ns))),
        }
    };
    let mut objects: Vec<Object> = m.segments.iter().map(|g| object(g, false)).collect();
    objects.extend(m.tail.iter().map(|g| object(g, true)));
    let tail_modified = match &m.tail {
        Some(t) => store.modified(&names.tail(t.base))?,
        None => None,
    };
    Ok(Some(Listing {
        node: m.node,
        log_id: m.log_id,
        handed_out: m.handed_out,
        objects,
        tail_modified,
    }))
}
