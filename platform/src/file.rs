//! File and directory operations the engine needs, each a thin wrapper over
//! one or two syscalls, with the platform differences decided here.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::vfs::Advice;

/// Open a segment file for reading and writing.
///
/// `create_new` fails with `AlreadyExists` if the file exists, so a crash
/// can never make two segments share a file. With `direct` the file is
/// opened with O_DIRECT (Linux) or gets `F_NOCACHE` (macOS); a filesystem
/// that refuses it (ramfs, tmpfs before Linux 6.6) makes this return an
/// error for which [`is_direct_unsupported`] is true, and the caller
/// retries without. Linux refuses only after `create_new` has made the
/// file (with the umask's bits, not yet `mode`'s), so a caller retrying a
/// creation removes that file first.
///
/// Cost: one `open(2)` (plus one `fcntl(2)` on macOS).
pub fn open_segment(path: &Path, create_new: bool, direct: bool, mode: u32) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if create_new {
        opts.create_new(true).mode(mode);
    }
    #[cfg(target_os = "linux")]
    if direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts.open(path)?;
    #[cfg(target_os = "macos")]
    if direct {
        // SAFETY: fcntl on a descriptor we own; F_NOCACHE takes an int.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 1) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    let _ = direct;
    if create_new {
        set_mode(&file, mode)?;
    }
    Ok(file)
}

/// Create `path`, which must not exist, for reading and writing, with
/// exactly the permission bits `mode` (the umask only ever narrows what
/// `open(2)` is given, so the bits are set again once the file exists).
/// Cost: one `open(2)` and one `fchmod(2)`.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    set_mode(&file, mode)?;
    Ok(file)
}

/// Give `file` exactly the permission bits `mode`. Cost: one `fchmod(2)`.
fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// `mkdir -p dir`, every directory it creates with exactly the permission
/// bits `mode`, whatever the umask; directories that exist keep theirs.
/// Cost: one `mkdir(2)` and one `chmod(2)` per level created, and a
/// `stat(2)` per level looked at.
pub fn create_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all(parent, mode)?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)),
        // Made meanwhile by someone else: theirs, with their mode.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// True when `err` is how the kernel says the filesystem does not support
/// O_DIRECT on this file (EINVAL at open time).
pub fn is_direct_unsupported(err: &io::Error) -> bool {
    err.raw_os_error() == Some(libc::EINVAL)
}

/// Reserve `len` bytes of disk for `file` so later writes never allocate.
///
/// Linux uses `fallocate(2)`, which makes the space unwritten extents; the
/// caller then zero-writes them once so that later overwrites need no
/// extent conversion (no journal commit per sync). Where `fallocate` is not
/// supported, the file is only extended (`ftruncate`), which still gives a
/// fixed size. Cost: one syscall; it may block on metadata I/O.
pub fn preallocate(file: &File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let len_off = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        // SAFETY: fallocate on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len_off) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(err);
        }
    }
    file.set_len(len)
}

/// Write all of `data` at `offset`; with `dsync`, return only once the data
/// (and the metadata needed to read it back) is on stable storage.
///
/// Linux: `pwritev2(RWF_DSYNC)`, one syscall per write. Elsewhere: `pwrite`
/// followed by [`sync_data`]. A short write is continued, never reported as
/// success. Blocks the calling thread for the device round trip.
pub fn write_all_at(file: &File, data: &[u8], offset: u64, dsync: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            let iov = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            let flags = if dsync { libc::RWF_DSYNC } else { 0 };
            let off = libc::off_t::try_from(offset + done as u64)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
            // SAFETY: iov points into `data`, which outlives the call; the
            // descriptor is owned by `file`.
            let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, off, flags) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n as usize;
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        file.write_all_at(data, offset)?;
        if dsync {
            sync_data(file)?;
        }
        Ok(())
    }
}

/// File systems known to make an `RWF_DSYNC` write (or one on an
/// `O_DSYNC` file) durable when it completes, for direct I/O submitted
/// asynchronously (io_uring) as well as from `pwritev2`, by their
/// `statfs` magic numbers.
///
/// A whitelist, because the flag is only a request: the file system must
/// act on it, and some do not. FUSE forwards the write and never sends
/// the server a sync for it (the FUSE protocol has no per-write sync
/// flag, and the kernel's direct-I/O path skips the sync), so a
/// "durable" write there is only written. A file system that is not
/// listed (FUSE, NFS, overlayfs, anything new) is assumed not to honour
/// it and gets an explicit `fdatasync` instead, which every file system
/// implements. tmpfs keeps nothing across a power loss either way, but
/// the flag is not what loses it.
#[cfg(any(target_os = "linux", test))]
const DSYNC_HONOURED: [(u32, &str); 4] = [
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
];

/// True when the file system with `statfs` magic `magic` is on the
/// [`dsync_honoured`] whitelist.
#[cfg(any(target_os = "linux", test))]
fn magic_honours_dsync(magic: u32) -> bool {
    DSYNC_HONOURED.iter().any(|&(m, _)| m == magic)
}

/// Whether a write with `RWF_DSYNC` to `file` is durable when it
/// completes, on the file system `file` lives on.
///
/// True only for ext4, XFS, btrfs and tmpfs, the file systems known to
/// honour the flag for direct I/O, synchronous or from io_uring; false
/// for everything else (FUSE, NFS, overlayfs, unknown), where a caller
/// that needs durability must follow each write with [`sync_data`].
/// Always false outside Linux, where `write_all_at` syncs explicitly
/// anyway. Cost: one `fstatfs(2)`; call it once per open file, not per
/// write.
pub fn dsync_honoured(file: &File) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: fstatfs fills the statfs we own (valid for writes of its
        // size) about a descriptor we own.
        let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatfs returned 0, so it initialised the whole struct.
        let st = unsafe { st.assume_init() };
        // Magic numbers are 32 bits; the field is wider (and signed) on
        // some architectures, so compare the low 32 bits only.
        #[allow(clippy::unnecessary_cast)]
        Ok(magic_honours_dsync(st.f_type as u32))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Ok(false)
    }
}

/// Read exactly `buf.len()` bytes at `offset` (`pread`, retried on short
/// reads). Returns `UnexpectedEof` if the file is shorter.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset)
}

/// Pass a read-pattern hint for `[offset, offset + len)` of `file` to the
/// kernel (`len` 0: to the end of the file).
///
/// Linux: `posix_fadvise(2)`. `Sequential` doubles the file's readahead
/// window; `WillNeed` allocates page-cache pages for the range and
/// submits their reads before returning (it does not wait for the data,
/// but may wait for room in the device queue), so it costs about as much
/// CPU as the page-cache lookup of the range. `DontNeed` drops the range's
/// clean pages (dirty ones stay until written back). Elsewhere a no-op.
/// Never changes what a read returns.
pub fn advise(file: &File, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let too_large = |_| io::Error::new(io::ErrorKind::InvalidInput, "range too large");
        let off = libc::off_t::try_from(offset).map_err(too_large)?;
        let len = libc::off_t::try_from(len).map_err(too_large)?;
        let how = match advice {
            Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
            Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
            Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        };
        // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, how) };
        // posix_fadvise returns the error instead of setting errno.
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len, advice);
        Ok(())
    }
}

/// Make the file's data durable: `fdatasync(2)` on Linux, `F_FULLFSYNC` on
/// macOS (plain `fsync` there does not flush the drive's cache).
///
/// Never call this twice for the same failure: after a failed sync Linux
/// may have dropped the dirty pages, so a second success proves nothing.
/// Cost: one syscall that waits for the device.
pub fn sync_data(file: &File) -> io::Result<()> {
    #[cfg(target_os = "macos")]
    {
        // SAFETY: fcntl on a descriptor we own; F_FULLFSYNC takes no argument.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_FULLFSYNC) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "macos"))]
    {
        file.sync_data()
    }
}

/// Make a directory's entries (creations, renames, unlinks) durable.
///
/// Cost: one `open(2)` and one `fsync(2)` of the directory.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = File::open(dir)?;
    #[cfg(target_os = "macos")]
    {
        sync_data(&d)
    }
    #[cfg(not(target_os = "macos"))]
    {
        d.sync_all()
    }
}

/// Exchange `a` and `b` atomically: each name afterwards refers to what
/// the other did, with no moment at which either is missing. Both must
/// exist and be on one file system. Not durable until the parent
/// directories are synced.
///
/// Linux: `renameat2(RENAME_EXCHANGE)` (ext4, XFS, btrfs, tmpfs; other
/// file systems refuse it with `EINVAL`). macOS: `renamex_np(RENAME_SWAP)`
/// (APFS). Cost: one syscall.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
    };
    let (a, b) = (c(a)?, c(b)?);
    #[cfg(target_os = "linux")]
    // SAFETY: two NUL-terminated paths that outlive the call; no other
    // pointers.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    #[cfg(target_os = "macos")]
    // SAFETY: two NUL-terminated paths that outlive the call.
    let rc = unsafe { libc::renamex_np(a.as_ptr(), b.as_ptr(), libc::RENAME_SWAP) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Take an exclusive advisory lock on `file` without blocking.
///
/// Returns `Ok(false)` when another open file description holds it (another
/// process, or another handle in this process). The lock is released when
/// the file is closed, including when the process dies, so a crash never
/// leaves a stale lock behind.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlignedBuf;

    #[test]
    fn direct_write_read_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let file = match open_segment(&path, true, true, 0o600) {
            Ok(f) => f,
            Err(e) if is_direct_unsupported(&e) => {
                std::fs::remove_file(&path).ok();
                open_segment(&path, true, false, 0o600).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        preallocate(&file, 1 << 20).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 20);
        let mut buf = AlignedBuf::new(8192);
        buf.as_mut_slice()[..5].copy_from_slice(b"hello");
        write_all_at(&file, buf.as_slice(), 4096, true).unwrap();
        sync_data(&file).unwrap();
        let mut back = AlignedBuf::new(4096);
        read_exact_at(&file, back.as_mut_slice(), 4096).unwrap();
        assert_eq!(&back.as_slice()[..5], b"hello");
        assert!(
            open_segment(&path, true, false, 0o600).is_err(),
            "create_new must refuse an existing file"
        );
        sync_dir(dir.path()).unwrap();
    }

    #[test]
    fn dsync_whitelist_names_only_file_systems_that_honour_it() {
        for magic in [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994] {
            assert!(magic_honours_dsync(magic), "{magic:#x}");
        }
        // FUSE, NFS, overlayfs, and a magic nobody uses.
        for magic in [0x6573_5546, 0x6969, 0x794C_7630, 0] {
            assert!(!magic_honours_dsync(magic), "{magic:#x}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dsync_is_honoured_on_the_temporary_directory() {
        // The temporary directory here is on ext4, XFS, btrfs or tmpfs
        // (CI and developer machines alike); a log there keeps RWF_DSYNC.
        let file = tempfile::tempfile().unwrap();
        assert!(dsync_honoured(&file).unwrap());
    }

    /// Pages of `file`'s first `len` bytes in the page cache (mincore).
    #[cfg(target_os = "linux")]
    fn resident(file: &File, len: usize) -> usize {
        // SAFETY: a shared read-only mapping of `len` bytes of a file we
        // hold open; it is only passed to mincore and unmapped below,
        // never dereferenced.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: `map` is a live mapping of `len` bytes and `vec` holds
        // one byte per page of it, as mincore requires.
        let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
        // SAFETY: unmapping exactly the mapping made above.
        unsafe { libc::munmap(map, len) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dont_need_drops_the_range_from_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        // Written back, so the pages are clean and may be dropped.
        file.sync_all().unwrap();
        let mut back = vec![0u8; 4 << 20];
        read_exact_at(&file, &mut back, 0).unwrap();
        let before = resident(&file, 4 << 20);
        assert!(before > 0, "a file just read is cached");
        advise(&file, 0, 4 << 20, Advice::DontNeed).unwrap();
        let after = resident(&file, 4 << 20);
        assert!(after < before / 2, "{after} of {before} pages still cached");
    }

    #[test]
    fn advice_never_changes_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        advise(&file, 0, 0, Advice::Sequential).unwrap();
        advise(&file, 1 << 20, 1 << 20, Advice::WillNeed).unwrap();
        advise(&file, 0, 1 << 20, Advice::DontNeed).unwrap();
        let mut back = vec![0u8; 4096];
        read_exact_at(&file, &mut back, (2 << 20) + 5).unwrap();
        assert!(back.iter().all(|&b| b == 7));
        assert!(advise(&file, u64::MAX, 1, Advice::WillNeed).is_err());
    }

    #[test]
    fn lock_is_exclusive_between_descriptions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = File::create(&path).unwrap();
        let b = File::options().write(true).open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
    }
}
