//! Segment files on disk: discovery, preparing spares, installing them.

use std::fs::File;
use std::path::{Path, PathBuf};

use ringwal_platform::{file as pf, AlignedBuf};

use crate::config::DirectIo;
use crate::error::{Error, Lsn, Result};
use crate::format;

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
pub(crate) fn list(dir: &Path, node: u32) -> Result<Listing> {
    let mut out = Listing::default();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((n, base)) = format::parse_segment_file_name(name) {
            if n == node {
                out.segments.push(SegmentFile {
                    base,
                    path: entry.path(),
                });
            }
        } else if let Some((n, _)) = format::parse_spare_file_name(name) {
            if n == node {
                out.spares.push(entry.path());
            }
        }
    }
    out.segments.sort_by_key(|s| s.base);
    Ok(out)
}

/// Open (or create) a segment-class file under the O_DIRECT policy.
/// Returns the file and whether O_DIRECT is in effect.
pub(crate) fn open_file(path: &Path, create_new: bool, policy: DirectIo) -> Result<(File, bool)> {
    let want = policy != DirectIo::Off;
    match pf::open_segment(path, create_new, want) {
        Ok(f) => Ok((f, want)),
        Err(e) if want && policy == DirectIo::Auto && pf::is_direct_unsupported(&e) => {
            // create_new may have created the file before O_DIRECT was refused.
            let f = pf::open_segment(path, false, false).map_err(|e| Error::io(path, e))?;
            Ok((f, false))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

/// A preallocated, zero-written file under a temporary name, ready to
/// become the next segment.
#[derive(Debug)]
pub(crate) struct Spare {
    pub path: PathBuf,
    pub file: File,
    pub direct: bool,
}

/// Create a spare of `bytes` bytes: preallocate, write zeros over all of
/// it (so later writes are overwrites of written extents, which need no
/// metadata commit per sync), and fdatasync.
///
/// Cost: writes `bytes` bytes; runs on the preparer thread or at open,
/// never on the append path.
pub(crate) fn prepare_spare(
    dir: &Path,
    node: u32,
    seq: u64,
    bytes: u64,
    policy: DirectIo,
) -> Result<Spare> {
    let path = dir.join(format::spare_file_name(node, seq));
    let (file, direct) = open_file(&path, true, policy)?;
    let fail = |e| {
        let _ = std::fs::remove_file(&path);
        Error::io(&path, e)
    };
    pf::preallocate(&file, bytes).map_err(fail)?;
    let zeros = AlignedBuf::new(1 << 20);
    let mut off = 0u64;
    while off < bytes {
        let n = ((bytes - off) as usize).min(zeros.capacity());
        pf::write_all_at(&file, &zeros.as_slice()[..n], off, false).map_err(fail)?;
        off += n as u64;
    }
    pf::sync_data(&file).map_err(fail)?;
    Ok(Spare { path, file, direct })
}
