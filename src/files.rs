//! The file toolkit a layer above the log builds its snapshots on: files
//! replaced atomically, directories swapped atomically, directory syncs,
//! CRC-framed checkpoint files that are never taken for good when torn or
//! foreign; and whole-segment truncation of a log no writer has open. The
//! log's own manifest is written the same way. (A log's segments, as its
//! headers describe them: [`verify::stat`](crate::verify::stat).)
//!
//! Every function blocks the calling thread on the file system and syncs
//! before it returns: nothing here is durable "later".

use std::path::{Path, PathBuf};

use ringwal_platform::{file as pf, Advice, OpenHow, RealFs, Vfs};

use crate::at_rest::format;
pub use crate::at_rest::format::CheckpointError;
use crate::config::Config;
use crate::error::{Corruption, Error, Lsn, Result};
use crate::recovery::verify::Released;
use crate::segment::durable::atomic_write_in;
use crate::segment::set::{self as segments, LogDir};
use crate::segment::{archived, manifest};

/// The directory and file name of `path`, for [`atomic_write_in`].
fn split(path: &Path) -> Result<(&Path, String)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::InvalidConfig(format!(
            "{}: not a file path",
            path.display()
        )));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Ok((dir, name.to_string_lossy().into_owned()))
}

/// Replace the file at `path` with `bytes`, so that after a crash at any
/// point it holds either its old contents or the new ones, whole, and
/// once this returns, the new ones durably: write a temporary file beside
/// it (hidden, `.NAME.PID-SEQ-NONCE.tmp`, this call's own), fsync it,
/// rename it over `path`, fsync the directory.
///
/// Calls may replace one path from many threads or processes at once:
/// each succeeds with its own bytes placed whole, and the file ends up
/// holding the bytes of the last rename. A crash can leave a temporary
/// file behind; none is ever removed here, since it may be another
/// writer's in flight (one may delete them when no writer of the path
/// runs; they are never read).
///
/// # Errors
///
/// `Io` (or `NoSpace`) naming the file or directory that failed; this
/// call's temporary file is removed. Unless the error names the
/// directory, the old contents are intact; when it does (its final fsync
/// failed), the new contents are in place but may not survive a crash.
/// `InvalidConfig` for a path without a file name.
///
/// Cost: a create, one write, one fdatasync, one rename and one
/// directory fsync.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name) = split(path)?;
    atomic_write_in(
        &RealFs,
        dir,
        &name,
        bytes,
        ringwal_platform::PRIVATE_FILE_MODE,
    )
}

/// Make the entries of `dir` (files created, renamed or removed in it)
/// durable: an fsync of the directory.
///
/// # Errors
///
/// `Io` naming the directory. Never retry a failed sync and assume the
/// entries durable: after a failed fsync the kernel may have dropped them.
///
/// Cost: one open and one fsync.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    RealFs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Write `payload` to `path` as a checkpoint file (`docs/format.md` §8:
/// magic, version, length, CRC, payload), atomically and durably as
/// [`atomic_write`] does.
///
/// # Errors
///
/// As [`atomic_write`].
///
/// Cost: as [`atomic_write`], plus a copy and a CRC pass of the payload.
pub fn write_checkpoint(path: &Path, payload: &[u8]) -> Result<()> {
    atomic_write(path, &format::encode_checkpoint(payload))
}

/// The payload of the checkpoint file at `path`, checked whole; `None` if
/// there is no such file.
///
/// # Errors
///
/// `Corrupt` naming the file, with [`Corruption::CheckpointFile`], if it
/// is torn, damaged, longer than it declares, or not a checkpoint file at
/// all: never its bytes. `Io` if it cannot be read.
///
/// Cost: one open and a read of the whole file; one allocation.
pub fn read_checkpoint(path: &Path) -> Result<Option<Vec<u8>>> {
    read_checkpoint_advised(path, false)
}

/// [`read_checkpoint`], then tell the kernel the file's pages may leave
/// the page cache (`POSIX_FADV_DONTNEED`): for a snapshot read once at
/// start, which would otherwise crowd out what the process reads next.
///
/// # Errors
///
/// As [`read_checkpoint`].
///
/// Cost: as [`read_checkpoint`], plus one `posix_fadvise` (none on macOS,
/// which has no such advice).
pub fn read_checkpoint_dontneed(path: &Path) -> Result<Option<Vec<u8>>> {
    read_checkpoint_advised(path, true)
}

fn read_checkpoint_advised(path: &Path, drop_cache: bool) -> Result<Option<Vec<u8>>> {
    let io = |e| Error::io(path, e);
    let file = match RealFs.open(path, OpenHow::default()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let len = file.size().map_err(io)?;
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    let mut done = 0;
    while done < bytes.len() {
        match file.read_at(&mut bytes[done..], done as u64).map_err(io)? {
            0 => break,
            n => done += n,
        }
    }
    bytes.truncate(done);
    if drop_cache {
        // Advice only: a kernel that ignores it costs nothing but cache.
        let _ = file.advise(0, len, Advice::DontNeed);
    }
    match format::decode_checkpoint(&bytes) {
        Ok(payload) => Ok(Some(payload.to_vec())),
        Err(e) => Err(Error::corrupt(path, 0, Corruption::CheckpointFile(e))),
    }
}

/// Swap the directories `a` and `b` atomically and durably: each one's
/// entries are synced, the two names are exchanged in one step (there is
/// no moment at which either name is missing), and the parent
/// directories are synced. After a crash each name holds either its old
/// directory or the other one, whole. For a layer that builds a new
/// generation of its state beside the old one and puts it in place.
///
/// # Errors
///
/// `Io` naming the directory whose sync failed, or `a` when the exchange
/// itself was refused: both must exist, on one file system that supports
/// it (Linux: ext4, XFS, btrfs, tmpfs; macOS: APFS). Never retry a failed
/// sync and assume the swap durable.
///
/// Cost: two directory fsyncs, one `renameat2` (`renamex_np` on macOS),
/// and one or two more directory fsyncs.
pub fn swap_dirs(a: &Path, b: &Path) -> Result<()> {
    fsync_dir(a)?;
    fsync_dir(b)?;
    pf::exchange(a, b).map_err(|e| Error::io(a, e))?;
    let parent = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (pa, pb) = (parent(a), parent(b));
    fsync_dir(&pa)?;
    if pa != pb {
        fsync_dir(&pb)?;
    }
    Ok(())
}

/// What [`truncate_segments`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncated {
    /// The segments removed, oldest first: what
    /// [`checkpoint_plan`](crate::verify::checkpoint_plan) at `below - 1`
    /// lists.
    pub removed: Vec<Released>,
    /// The base LSN of the oldest segment left: every LSN below it is
    /// gone.
    pub oldest_kept: Lsn,
}

/// Remove `cfg.node()`'s whole segments in `dir` whose every record is
/// below `below`, oldest first, never the newest (the one a writer
/// appends to): what `Wal::checkpoint(below - 1)` does, for a directory
/// no writer has open. The manifest is raised first, so that the next
/// open holds the log to what is left and a crash part way leaves more
/// segments than it promises, never fewer; then each file is unlinked,
/// then the directory is synced. Segments are judged by their names, not
/// read. Segments the log's archive does not hold yet stay, as they do
/// at a checkpoint (see
/// [`ConfigBuilder::release_unarchived`](crate::ConfigBuilder::release_unarchived)).
///
/// A `below` past the end of the log (above its last LSN plus one) is
/// refused with `PastEnd` before anything is removed, as
/// `Wal::checkpoint` refuses an LSN past the end: no snapshot covers
/// records not written, and taken at its word such a `below` would
/// remove every segment but the newest.
///
/// # Errors
///
/// `Locked` while a writer holds the node (use `Wal::checkpoint` there);
/// `NoLog` when there is no log of the node in `dir`; `PastEnd` (`what`
/// is `"below"`) for a `below` past the end; `Io` naming the
/// file or directory that failed, with the segments removed before it
/// gone (and listed by a later call as not there). Never retry a failed
/// directory sync and assume the removals durable.
///
/// Cost: the node's lock, one `readdir`, a read of the newest segment's
/// frames (for the last LSN), a read of the archive point, an `fstat` per
/// segment removed,
/// one manifest write when anything goes (a create, a write, two fsyncs
/// and a rename), an unlink per segment removed, and one directory fsync.
pub fn truncate_segments(dir: &Path, cfg: &Config, below: Lsn) -> Result<Truncated> {
    let vfs = &*cfg.vfs;
    let log = LogDir::new(dir, cfg.node());
    let _lock = segments::lock_writer(vfs, &log)?;
    let listed = log.list_log(vfs, false)?.segments;
    assert!(
        !listed.is_empty() && listed.windows(2).all(|w| w[0].base < w[1].base),
        "a log lists its segments, in LSN order (NoLog otherwise)"
    );
    let last = crate::recovery::verify::last_lsn_of(cfg, &log, &listed)?;
    if below > last.saturating_add(1) {
        return Err(Error::PastEnd {
            what: "below",
            lsn: below,
            last,
        });
    }
    // As a checkpoint would: keep what the log's archive lacks.
    let below = if cfg.release_unarchived() {
        below
    } else {
        archived::held_at(vfs, &log)?.map_or(below, |a| below.min(a.saturating_add(1)))
    };
    let going = listed.windows(2).take_while(|w| w[1].base <= below).count();
    let oldest_kept = listed[going].base;
    if going == 0 {
        return Ok(Truncated {
            removed: Vec::new(),
            oldest_kept,
        });
    }
    if let Some(m) = manifest::read(vfs, &log)? {
        let raised = format::Manifest {
            oldest_lsn: m.oldest_lsn.max(oldest_kept),
            ..m
        };
        manifest::write(vfs, &log, &raised)?;
    }
    assert!(
        going < listed.len() && oldest_kept <= below,
        "truncation keeps the newest segment and the one holding `below`"
    );
    let mut removed = Vec::with_capacity(going);
    for pair in listed[..=going].windows(2) {
        let (seg, next) = (&pair[0], &pair[1]);
        let io = |e| Error::io(&seg.path, e);
        let bytes = vfs
            .open(&seg.path, OpenHow::default())
            .and_then(|f| f.size())
            .map_err(io)?;
        vfs.remove_file(&seg.path).map_err(io)?;
        removed.push(Released {
            file: seg.path.clone(),
            base_lsn: seg.base,
            last_lsn: next.base - 1,
            bytes,
        });
    }
    vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    Ok(Truncated {
        removed,
        oldest_kept,
    })
}
