//! Segment files on disk: discovery, preparing spares, installing them.

use std::path::{Path, PathBuf};

use ringwal_platform::{file as pf, AlignedBuf, OpenHow, VFile, Vfs};

use crate::config::DirectIo;
use crate::error::{Error, Lsn, Result};
use crate::format;

/// Where one node's files live: the only place their paths are built.
///
/// `Wal::open` resolves the directory once (through symlinks, against the
/// working directory of that moment), so a later `chdir` or a relative
/// path can never send a roll, a checkpoint or a reader to another log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogDir {
    path: PathBuf,
    node: u32,
}

impl LogDir {
    /// `dir` as given, for read-only tools that never write through it.
    pub fn new(dir: &Path, node: u32) -> LogDir {
        LogDir {
            path: dir.to_path_buf(),
            node,
        }
    }

    /// `dir` resolved to an absolute path without symlinks, for a writer.
    /// Cost: one `realpath`.
    pub fn resolve(vfs: &dyn Vfs, dir: &Path, node: u32) -> Result<LogDir> {
        let path = vfs.canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        Ok(LogDir { path, node })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node whose files these are.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The segment whose first record is `base`.
    pub fn segment(&self, base: Lsn) -> SegmentFile {
        SegmentFile {
            base,
            path: self.path.join(format::segment_file_name(self.node, base)),
        }
    }

    /// Spare number `seq`.
    pub fn spare(&self, seq: u64) -> PathBuf {
        self.path.join(format::spare_file_name(self.node, seq))
    }

    /// The writer's lock file.
    pub fn lock(&self) -> PathBuf {
        self.path.join(format::lock_file_name(self.node))
    }

    /// This node's segments and spares. Cost: one `readdir`.
    pub fn list(&self, vfs: &dyn Vfs) -> Result<Listing> {
        list(vfs, &self.path, self.node)
    }
}

/// A segment as the directory listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    pub base: Lsn,
    pub path: PathBuf,
}

/// One node's files in a directory.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Segments, ascending by base LSN.
    pub segments: Vec<SegmentFile>,
    /// Spare files: preallocated, not yet part of the log.
    pub spares: Vec<PathBuf>,
}

/// List `node`'s segments and spares in `dir`. Other nodes' files and
/// unrelated files are ignored. Cost: one `readdir` pass.
pub(crate) fn list(vfs: &dyn Vfs, dir: &Path, node: u32) -> Result<Listing> {
    let mut out = Listing::default();
    for name in vfs.list(dir).map_err(|e| Error::io(dir, e))? {
        if let Some((n, base)) = format::parse_segment_file_name(&name) {
            if n == node {
                out.segments.push(SegmentFile {
                    base,
                    path: dir.join(&name),
                });
            }
        } else if let Some((n, _)) = format::parse_spare_file_name(&name) {
            if n == node {
                out.spares.push(dir.join(&name));
            }
        }
    }
    out.segments.sort_by_key(|s| s.base);
    Ok(out)
}

/// Open (or create) a segment-class file for writing under the O_DIRECT
/// policy. Returns the file and whether O_DIRECT is in effect.
pub(crate) fn open_file(
    vfs: &dyn Vfs,
    path: &Path,
    create_new: bool,
    policy: DirectIo,
) -> Result<(VFile, bool)> {
    let want = policy != DirectIo::Off;
    let how = OpenHow {
        write: true,
        create_new,
        direct: want,
        ..OpenHow::default()
    };
    match vfs.open(path, how) {
        Ok(f) => Ok((f, want)),
        Err(e) if want && policy == DirectIo::Auto && pf::is_direct_unsupported(&e) => {
            // create_new may have created the file before O_DIRECT was refused.
            let how = OpenHow {
                write: true,
                ..OpenHow::default()
            };
            let f = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
            Ok((f, false))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

/// A preallocated file under a temporary name, ready to become the next
/// segment. Its blocks read back as zeros whether or not they were
/// zero-written, so recovery sees the same clean end either way.
#[derive(Debug)]
pub(crate) struct Spare {
    pub path: PathBuf,
    pub file: VFile,
    /// A reused file: bytes past whatever gets written may be stale.
    pub recycled: bool,
}

/// How a spare's blocks are prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Write zeros over every block, so later writes are overwrites of
    /// written extents: an `RWF_DSYNC` write or `fdatasync` then flushes
    /// data only, with no extent conversion (a journal commit on ext4 and
    /// XFS) per flush. What small, flush-bound writes need.
    Zeros,
    /// Preallocate only. The first write to each extent converts it, which
    /// costs the flush a metadata commit; for large writes that is cheaper
    /// than writing every byte twice (the zeros, then the data), which
    /// halves the device's bandwidth for the log.
    Allocate,
}

/// Create a spare of `bytes` bytes: preallocate, write zeros over all of
/// it when `fill` says so, and fdatasync (which also makes the allocation
/// itself durable).
///
/// Cost: one `fallocate` and one `fdatasync`, plus writing `bytes` bytes
/// with [`Fill::Zeros`]; runs on the preparer thread or at open, never on
/// the append path.
pub(crate) fn prepare_spare(
    vfs: &dyn Vfs,
    dir: &LogDir,
    seq: u64,
    bytes: u64,
    policy: DirectIo,
    fill: Fill,
) -> Result<Spare> {
    let path = dir.spare(seq);
    let (file, _) = open_file(vfs, &path, true, policy)?;
    let fail = |e| {
        let _ = vfs.remove_file(&path);
        Error::io(&path, e)
    };
    file.preallocate(bytes).map_err(fail)?;
    if fill == Fill::Zeros {
        write_zeros(&*file, 0, bytes, false).map_err(fail)?;
    }
    file.sync_data().map_err(fail)?;
    Ok(Spare {
        path,
        file,
        recycled: false,
    })
}

/// Write zeros over `[from, to)` in 1 MiB writes (each with `dsync`, if
/// asked), from one 4 KiB-aligned buffer so O_DIRECT files accept them.
/// Cost: one 1 MiB allocation and `(to - from) / 1 MiB` writes.
pub(crate) fn write_zeros(
    file: &dyn ringwal_platform::FileIo,
    from: u64,
    to: u64,
    dsync: bool,
) -> std::io::Result<()> {
    let zeros = AlignedBuf::new(1 << 20);
    let mut off = from;
    while off < to {
        let n = ((to - off) as usize).min(zeros.capacity());
        file.write_at(&zeros.as_slice()[..n], off, dsync)?;
        off += n as u64;
    }
    Ok(())
}

/// Offset added to a checkpointed segment's base LSN to name it as a
/// recycled spare: above every LSN, so it never collides with the
/// preparer's own sequence numbers.
pub(crate) const RECYCLED_SEQ: u64 = 1 << 62;

/// Turn a recycled file (a checkpointed segment already renamed to a spare
/// name, durably) into a spare of `bytes` bytes: blank its header block,
/// durably. Its other blocks keep the previous life's frames, which were
/// sealed with another salt and so never validate in the next one.
///
/// Blanking comes first because installing writes the new header and
/// renames concurrently: a crash that keeps the rename but not the header
/// must leave a blank header (an incomplete newest file, discarded), never
/// the old one, whose name would contradict the new file name.
///
/// Cost: one durable 4 KiB write, instead of writing the whole
/// segment. Fails (and the caller makes a fresh spare instead) when the
/// file is not `bytes` long.
pub(crate) fn recycle_spare(
    vfs: &dyn Vfs,
    path: &Path,
    bytes: u64,
    policy: DirectIo,
) -> Result<Spare> {
    let (file, _) = open_file(vfs, path, false, policy)?;
    let io = |e| Error::io(path, e);
    let size = file.size().map_err(io)?;
    if size != bytes {
        return Err(Error::io(
            path,
            std::io::Error::other(format!("recycled file is {size} bytes, not {bytes}")),
        ));
    }
    let blank = AlignedBuf::new(format::BLOCK);
    file.write_at(blank.as_slice(), 0, true).map_err(io)?;
    Ok(Spare {
        path: path.to_path_buf(),
        file,
        recycled: true,
    })
}
