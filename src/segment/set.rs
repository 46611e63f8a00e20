//! Segment files on disk: where they are, what a directory holds, and
//! how they are opened. Their write-side life (spares, headers, sealing,
//! recycling) is in `lifecycle`.

use std::path::{Path, PathBuf};

use ringwal_platform::{file as pf, OpenHow, VFile, Vfs};

use crate::at_rest::format;
use crate::config::DirectIo;
use crate::error::{Error, Lsn, Result};

/// Where one node's files live: the only place their paths are built.
///
/// `Wal::open` resolves the directory once (through symlinks, against the
/// working directory of that moment), so a later `chdir` or a relative
/// path can never send a roll, a checkpoint or a reader to another log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogDir {
    path: PathBuf,
    node: u32,
    /// The permission bits of the files a writer creates here.
    file_mode: u32,
}

impl LogDir {
    /// `dir` as given, for read-only tools that never write through it.
    pub fn new(dir: &Path, node: u32) -> LogDir {
        LogDir {
            path: dir.to_path_buf(),
            node,
            file_mode: ringwal_platform::PRIVATE_FILE_MODE,
        }
    }

    /// `dir` resolved to an absolute path without symlinks, for a writer.
    /// Cost: one `realpath`.
    pub fn resolve(vfs: &dyn Vfs, dir: &Path, node: u32) -> Result<LogDir> {
        let path = vfs.canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        Ok(LogDir {
            path,
            node,
            file_mode: ringwal_platform::PRIVATE_FILE_MODE,
        })
    }

    /// The permission bits of the files a writer creates here.
    pub fn file_mode(&self) -> u32 {
        self.file_mode
    }

    /// The same directory, whose created files get `mode`.
    pub fn with_file_mode(mut self, mode: u32) -> LogDir {
        self.file_mode = mode;
        self
    }

    /// How a file this log creates is opened: for writing, created with
    /// this directory's file mode.
    pub fn creating(&self, create_new: bool) -> OpenHow {
        OpenHow {
            write: true,
            create_new,
            create: !create_new,
            mode: Some(self.file_mode),
            ..OpenHow::default()
        }
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
        debug_assert!(base >= 1, "a segment's base is an LSN, and LSNs start at 1");
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

    /// The node's archive point (`NNNNN.archived`).
    pub fn archived(&self) -> PathBuf {
        self.path.join(format::archived_file_name(self.node))
    }

    #[cfg_attr(
        not(feature = "archive"),
        expect(dead_code, reason = "used by the archive (feature `archive`)")
    )]
    /// The archiver's lock file: one archiver per node.
    pub fn archive_lock(&self) -> PathBuf {
        self.path.join(format::archive_lock_file_name(self.node))
    }

    /// The writer's lock file.
    pub fn lock(&self) -> PathBuf {
        self.path.join(format::lock_file_name(self.node))
    }

    /// This node's segments and spares. Cost: one `readdir`.
    pub fn list(&self, vfs: &dyn Vfs) -> Result<Listing> {
        list(vfs, &self.path, self.node)
    }

    /// [`list`](Self::list) for a tool that needs a log there: `NoLog`
    /// when the directory does not exist, is not a directory, or holds no
    /// segment of the node and (`has_manifest` false) no manifest either.
    /// A manifest without segments is a log whose segments were lost,
    /// which the caller reports as such. Cost: one `readdir`.
    pub fn list_log(&self, vfs: &dyn Vfs, has_manifest: bool) -> Result<Listing> {
        let no_log = || Error::NoLog {
            dir: self.path.clone(),
            node: self.node,
        };
        match self.list(vfs) {
            Err(Error::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Err(no_log())
            }
            Ok(l) if l.segments.is_empty() && !has_manifest => Err(no_log()),
            other => other,
        }
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

/// Bytes of the writer's process id in its lock file (a u32 in decimal,
/// padded, and a newline).
const LOCK_PID_BYTES: usize = 11;

// The widest process id, `u32::MAX`, and its newline fill the width.
const _: () = assert!(LOCK_PID_BYTES > u32::MAX.ilog10() as usize + 1);

/// Take the exclusive lock of `dir`'s node (one writer per directory and
/// node), writing this process's id into the lock file for the message a
/// refused writer gets. Held until the returned file is dropped.
///
/// # Errors
///
/// `Locked` (with the holder's pid when its lock file says it) if another
/// open file description holds it; `Io` naming the lock file.
///
/// Cost: an open (creating the file if needed), a `flock`, and a
/// 11-byte write; on refusal, an 11-byte read instead of the write.
pub(crate) fn lock_writer(vfs: &dyn Vfs, dir: &LogDir) -> Result<VFile> {
    lock_at(vfs, dir, dir.lock())
}

/// [`lock_writer`] for another of the node's lock files (the archiver's).
pub(crate) fn lock_at(vfs: &dyn Vfs, dir: &LogDir, lock_path: PathBuf) -> Result<VFile> {
    let lock = vfs
        .open(&lock_path, dir.creating(false))
        .map_err(|e| Error::io(&lock_path, e))?;
    if !lock.try_lock().map_err(|e| Error::io(&lock_path, e))? {
        return Err(held_by_another(&lock, lock_path));
    }
    // Who holds the lock, for the next writer's error message: padded
    // to a fixed width so a shorter id never leaves digits of a longer
    // one behind. Written at once, before a recovery that can take seconds, so
    // that a writer refused meanwhile is not shown a previous holder's
    // id. Not synced: it only matters while this process lives. The
    // lock file is no part of the log: recovery's "nothing modified"
    // is about segments and the manifest.
    let pid = format!(
        "{:<width$}\n",
        std::process::id(),
        width = LOCK_PID_BYTES - 1
    );
    lock.write_at(pid.as_bytes(), 0, false)
        .map_err(|e| Error::io(&lock_path, e))?;
    Ok(lock)
}

/// The `Locked` error for the lock file at `path`, which another open
/// file description holds: with the holder's process id when the file
/// shows one. A file being rewritten reads as no id, never as a wrong one
/// (the id is checked to parse). Cost: one 11-byte read.
pub(crate) fn held_by_another(lock: &VFile, path: PathBuf) -> Error {
    let mut buf = [0u8; LOCK_PID_BYTES];
    let n = lock.read_at(&mut buf, 0).unwrap_or(0);
    let pid = std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Error::Locked { path, pid }
}

/// Open (or, with `create_new`, create as a file of that log, with its
/// file mode) a segment-class file for writing under the O_DIRECT policy.
/// Returns the file and whether its writes really bypass the page cache:
/// false where the file system refuses O_DIRECT (`DirectIo::Auto` then
/// opens it buffered) and where it takes the flag but buffers the writes
/// anyway (btrfs, for a file with data checksums). Cost: one `open(2)`
/// (three on a refusal), and with O_DIRECT what
/// [`FileIo::file_system`](ringwal_platform::FileIo::file_system) costs.
pub(crate) fn open_file(
    vfs: &dyn Vfs,
    path: &Path,
    create_new: Option<&LogDir>,
    policy: DirectIo,
) -> Result<(VFile, bool)> {
    let want = policy != DirectIo::Off;
    let how = OpenHow {
        write: true,
        create_new: create_new.is_some(),
        direct: want,
        mode: create_new.map(|d| d.file_mode),
        ..OpenHow::default()
    };
    match vfs.open(path, how) {
        Ok(f) if want => {
            // A failed look counts as direct: the flag is set, and only a
            // file system known to buffer anyway says otherwise.
            let buffered = f.file_system().is_ok_and(|fs| fs.buffers_direct_io());
            if buffered {
                crate::obs::trace::event!(
                    warn,
                    file = %path.display(),
                    "O_DIRECT taken but buffered by the file system (btrfs data checksums): make the directory NOCOW"
                );
            }
            Ok((f, !buffered))
        }
        Ok(f) => Ok((f, false)),
        Err(e) if want && policy == DirectIo::Auto && pf::is_direct_unsupported(&e) => {
            crate::obs::trace::event!(
                warn,
                file = %path.display(),
                "O_DIRECT refused by the file system: buffered writes"
            );
            // Linux refuses O_DIRECT after an O_EXCL create has made the
            // file, so the file is ours, with the umask's bits rather than
            // the log's. Made again, it gets the log's mode exactly and
            // keeps create_new's guarantee that no one else's file is used.
            if create_new.is_some() {
                match vfs.remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(path, e)),
                }
            }
            let how = OpenHow {
                direct: false,
                ..how
            };
            let f = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
            Ok((f, false))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Recovery zeroes the torn window behind a sealed tail with the same
/// writer the segment lifecycle uses for spares and for close.
pub(crate) use crate::segment::lifecycle::write_zeros;

/// A segment of a live log: its file and its size on disk. Every segment
/// is preallocated to the size its header gives, so the size is known
/// without a `stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Live {
    pub file: SegmentFile,
    pub bytes: u64,
}

/// The writer's list of its segments, oldest first: the one place the
/// log's size on disk is measured (the soft limit, `DropOldest` and
/// `Stats` all read [`bytes`](Self::bytes)), and the one place a roll
/// replaces an empty segment of the same base.
///
/// Architecture invariant: bases strictly ascend, and a segment leaves
/// the list only once its file is gone.
#[derive(Debug, Default)]
pub(crate) struct SegmentSet {
    live: Vec<Live>,
}

impl SegmentSet {
    /// The set of `live`, which must be in ascending base order.
    pub fn new(live: Vec<Live>) -> SegmentSet {
        let set = SegmentSet { live };
        assert!(set.ascending(), "segments listed in ascending base order");
        set
    }

    /// The files, oldest first. Cost: one allocation and a copy of the
    /// paths.
    pub fn files(&self) -> Vec<SegmentFile> {
        self.live.iter().map(|l| l.file.clone()).collect()
    }

    /// Bytes of every listed segment file: what the size limits are held
    /// against. Cost: a walk over the list, no syscall.
    pub fn bytes(&self) -> u64 {
        self.live.iter().map(|l| l.bytes).sum()
    }

    /// How many segments are listed.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// The `i`th oldest segment.
    pub fn get(&self, i: usize) -> Option<&Live> {
        self.live.get(i)
    }

    /// The oldest segments whose every record is at or below `up_to`:
    /// each one's successor starts at or below `up_to + 1`. Never the
    /// newest, which frames may still go to.
    pub fn releasable(&self, up_to: Lsn) -> &[Live] {
        let n = self
            .live
            .windows(2)
            .take_while(|w| w[1].file.base - 1 <= up_to)
            .count();
        &self.live[..n]
    }

    /// Bytes of the sealed segments (all but the newest) holding any
    /// LSN above `archived_lsn`: what the archive keeps on disk that a
    /// checkpoint could otherwise release. No I/O.
    pub fn held_by_archive(&self, archived_lsn: Lsn) -> u64 {
        let sealed = self.live.len().saturating_sub(1);
        (0..sealed)
            .filter(|&i| self.live[i + 1].file.base - 1 > archived_lsn)
            .map(|i| self.live[i].bytes)
            .sum()
    }

    /// The oldest segment's base, if any.
    pub fn oldest_base(&self) -> Option<Lsn> {
        self.live.first().map(|l| l.file.base)
    }

    /// Add a segment a roll installed. One of the same base as the
    /// newest replaces it: that segment never got a record (bases are
    /// the LSN of a segment's first record, and LSNs are never reused),
    /// and the rename that installed the new file replaced its file.
    /// Returns the replaced segment.
    pub fn install(&mut self, seg: Live) -> Option<Live> {
        let replaced = match self.live.last() {
            Some(newest) if newest.file.base == seg.file.base => self.live.pop(),
            Some(newest) => {
                assert!(
                    newest.file.base < seg.file.base,
                    "a roll installs a segment above the newest"
                );
                None
            }
            None => None,
        };
        self.live.push(seg);
        debug_assert!(self.ascending(), "segment bases ascend, without duplicates");
        replaced
    }

    /// Whether the bases strictly ascend (the set's invariant).
    fn ascending(&self) -> bool {
        self.live
            .windows(2)
            .all(|w| w[0].file.base < w[1].file.base)
    }

    /// Take the oldest segment off the list, once its file is gone.
    pub fn remove_oldest(&mut self) -> Live {
        assert!(self.live.len() > 1, "the newest segment is never removed");
        self.live.remove(0)
    }
}

/// Whether a roll at `next_lsn` out of the segment based at `seg_base`
/// replaces that segment instead of adding one: it holds no record, so
/// the new segment, named by its first record's LSN, has the same base.
/// The reservation counts by this; [`SegmentSet::install`] replaces by
/// the same rule.
pub(crate) fn roll_replaces(seg_base: Lsn, next_lsn: Lsn) -> bool {
    seg_base == next_lsn
}
