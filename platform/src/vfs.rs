//! The file-system interface the engine is written against, so the same
//! engine runs on the real disk ([`RealFs`]) and on the deterministic
//! simulated disk (`sim::SimFs`, feature `sim`).
//!
//! Only what a log needs: whole positional reads and writes, data syncs,
//! preallocation, an exclusive lock, and the directory operations that make
//! segments appear and disappear (create, rename, unlink, directory sync).

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::file::{self, FileSystem};

/// One open file (or directory, for syncing it).
///
/// Every method is one or two syscalls on the real disk, and a memory
/// operation on the simulated one; all may block.
pub trait FileIo: Send + Sync + Debug {
    /// Read up to `buf.len()` bytes at `offset`; fewer only at end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Write all of `data` at `offset`; with `dsync` it is on stable storage
    /// when this returns.
    fn write_at(&self, data: &[u8], offset: u64, dsync: bool) -> io::Result<()>;
    /// Make the data durable (fdatasync; F_FULLFSYNC on macOS).
    fn sync_data(&self) -> io::Result<()>;
    /// Make data and metadata durable (fsync); used on directories.
    fn sync_all(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reserve `len` bytes of disk (the file's length becomes `len`).
    fn preallocate(&self, len: u64) -> io::Result<()>;
    /// Take an exclusive advisory lock without blocking; false if held.
    fn try_lock(&self) -> io::Result<bool>;
    /// The descriptor, for io_uring; `None` for simulated files.
    fn raw_fd(&self) -> Option<RawFd>;
    /// Tell the kernel how `[offset, offset + len)` is about to be read
    /// (`len` 0: to the end of the file), so it can read ahead of the
    /// caller. A hint only: it never changes what a read returns, and
    /// simulated files ignore it. See [`file::advise`] for the cost.
    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()>;
    /// What this file's data lives on: whether it honours `RWF_DSYNC`,
    /// survives a power loss, really bypasses the page cache under
    /// O_DIRECT. See [`file::file_system`] for the cost; simulated files
    /// are [`FileSystem::SIMULATED`].
    fn file_system(&self) -> io::Result<FileSystem>;
    /// Whether every write to this file must be aligned to [`BLOCK`]
    /// (address, length and offset), as a file opened O_DIRECT on Linux
    /// demands: a real disk refuses a misaligned one with EINVAL, the
    /// simulated disk panics. The queues assert it of every write that
    /// is not aligned, so it is asked only of those (never, in a correct
    /// run). See [`file::demands_alignment`] for the cost.
    ///
    /// [`BLOCK`]: crate::BLOCK
    fn demands_alignment(&self) -> bool;
}

/// How a range of a file is about to be read, for [`FileIo::advise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Front to back: the kernel may use a larger readahead window.
    Sequential,
    /// Soon: the kernel starts reading the range into the page cache now
    /// and returns without waiting for it. Linux fills the cache this way
    /// with single pages rather than the large folios of its own
    /// readahead, which makes reading them back cost more CPU; prefer
    /// `Sequential` for a file read front to back.
    WillNeed,
    /// Done with: the kernel may drop the range's clean pages from the
    /// page cache now. A scan that reads a whole log once says so behind
    /// itself, so opening a large log does not evict the pages the
    /// application lives on.
    DontNeed,
}

/// A shared handle to an open file.
pub type VFile = Arc<dyn FileIo>;

/// The permission bits of a file the engine creates unless told
/// otherwise: the owner's read and write only. A log holds whatever its
/// users append.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The permission bits of a directory the engine creates unless told
/// otherwise: the owner's only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// How to open a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenHow {
    /// Open for writing too.
    pub write: bool,
    /// Create it; fail with `AlreadyExists` if it exists.
    pub create_new: bool,
    /// Create it if missing.
    pub create: bool,
    /// Bypass the page cache (O_DIRECT / F_NOCACHE).
    pub direct: bool,
    /// The permission bits a file this open creates gets, exactly,
    /// whatever the process's umask; `None`: [`PRIVATE_FILE_MODE`]. A file
    /// that exists keeps its own.
    pub mode: Option<u32>,
}

/// Directory-level operations, and the factory for files.
pub trait Vfs: Send + Sync + Debug {
    /// `mkdir -p`, each directory it creates with exactly the permission
    /// bits `mode` (whatever the umask); existing ones keep theirs.
    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()>;
    /// Names of the entries of `dir` (files only matter to the engine).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Open a file.
    fn open(&self, path: &Path, how: OpenHow) -> io::Result<VFile>;
    /// Open a directory, to sync it through an I/O queue.
    fn open_dir(&self, dir: &Path) -> io::Result<VFile>;
    /// Atomically rename `from` to `to` (same directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlink a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Make `dir`'s entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether files from this Vfs can go through io_uring.
    fn is_real(&self) -> bool;
    /// `dir` as an absolute path with no symlink or `..` left, so that
    /// later operations do not depend on the working directory. A file
    /// system without a working directory (the simulated one) returns it
    /// unchanged.
    fn canonicalize(&self, dir: &Path) -> io::Result<PathBuf> {
        Ok(dir.to_path_buf())
    }
}

/// The real file system, through `std::fs` and [`crate::file`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl RealFs {
    /// A shared handle to the real file system.
    pub fn shared() -> Arc<dyn Vfs> {
        Arc::new(RealFs)
    }
}

impl FileIo for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match FileExt::read_at(self, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
    fn write_at(&self, data: &[u8], offset: u64, dsync: bool) -> io::Result<()> {
        file::write_all_at(self, data, offset, dsync)
    }
    fn sync_data(&self) -> io::Result<()> {
        file::sync_data(self)
    }
    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn preallocate(&self, len: u64) -> io::Result<()> {
        file::preallocate(self, len)
    }
    fn try_lock(&self) -> io::Result<bool> {
        file::try_lock_exclusive(self)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        file::advise(self, offset, len, advice)
    }
    fn file_system(&self) -> io::Result<FileSystem> {
        file::file_system(self)
    }
    fn demands_alignment(&self) -> bool {
        file::demands_alignment(self)
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()> {
        file::create_dir_all(dir, mode)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            if let Some(name) = e?.file_name().to_str() {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }
    fn open(&self, path: &Path, how: OpenHow) -> io::Result<VFile> {
        let mode = how.mode.unwrap_or(PRIVATE_FILE_MODE);
        if how.write && (how.create_new || how.direct) {
            return Ok(Arc::new(file::open_segment(
                path,
                how.create_new,
                how.direct,
                mode,
            )?));
        }
        if how.create && how.write {
            // Created here or not: only a file this call creates gets the
            // mode, so an existing one keeps its owner's choice.
            match file::create_new(path, mode) {
                Ok(f) => return Ok(Arc::new(f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let f = OpenOptions::new()
            .read(true)
            .write(how.write)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(f))
    }
    fn open_dir(&self, dir: &Path) -> io::Result<VFile> {
        Ok(Arc::new(File::open(dir)?))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        file::sync_dir(dir)
    }
    fn is_real(&self) -> bool {
        true
    }
    fn canonicalize(&self, dir: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(dir)
    }
}
