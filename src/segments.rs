//! Segment files on disk: where they are, what a directory holds, and
//! how they are opened. Their write-side life (spares, headers, sealing,
//! recycling) is in `lifecycle`.

use std::path::{Path, PathBuf};

use ringwal_platform::{file as pf, OpenHow, VFile, Vfs};

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

    /// The node's manifest.
    pub fn manifest(&self) -> PathBuf {
        self.path.join(format::manifest_file_name(self.node))
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
    /// Temporary manifests a crashed writer left (`format::temp_file_name`
    /// of the node's manifest): never part of the log, and only a writer
    /// holding the node's lock may remove them.
    pub manifest_temps: Vec<PathBuf>,
}

/// List `node`'s segments, spares and temporary manifests in `dir`.
/// Other nodes' files and unrelated files are ignored. Cost: one
/// `readdir` pass.
pub(crate) fn list(vfs: &dyn Vfs, dir: &Path, node: u32) -> Result<Listing> {
    let mut out = Listing::default();
    let manifest = format::manifest_file_name(node);
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
        } else if format::parse_temp_file_name(&name) == Some(manifest.as_str()) {
            out.manifest_temps.push(dir.join(&name));
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
            crate::trace::event!(
                warn,
                file = %path.display(),
                "O_DIRECT refused by the file system: buffered writes"
            );
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

/// Recovery zeroes the torn window behind a sealed tail with the same
/// writer the segment lifecycle uses for spares and for close.
pub(crate) use crate::lifecycle::write_zeros;
