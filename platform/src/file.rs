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

/// Give the file at `path` (made by another library, which takes the
/// umask's bits) exactly the permission bits `mode`. Cost: one
/// `chmod(2)`.
pub fn set_mode_at(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
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

/// Whether writes to `file` must be aligned to [`BLOCK`](crate::BLOCK):
/// it was opened O_DIRECT (Linux). macOS's `F_NOCACHE` demands no
/// alignment, and a descriptor whose flags cannot be read is taken not
/// to. Cost: one `fcntl(2)` on Linux, nothing elsewhere.
pub fn demands_alignment(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: F_GETFL on a descriptor we own takes no argument and
        // touches no memory.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        flags != -1 && flags & libc::O_DIRECT != 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// Whether a write of `len` bytes from `addr` to `offset` is aligned to
/// [`BLOCK`](crate::BLOCK) in all three, as O_DIRECT demands. Cost: none.
pub(crate) fn block_aligned(addr: usize, len: usize, offset: u64) -> bool {
    addr.is_multiple_of(crate::BLOCK)
        && len.is_multiple_of(crate::BLOCK)
        && offset.is_multiple_of(crate::BLOCK as u64)
}

/// Write all of `data` at `offset`; with `dsync`, return only once the data
/// (and the metadata needed to read it back) is on stable storage.
///
/// Linux: `pwritev2(RWF_DSYNC)`, one syscall per write. Elsewhere: `pwrite`
/// followed by [`sync_data`]. A short write is continued, never reported as
/// success. Blocks the calling thread for the device round trip.
///
/// Panics on a write to an O_DIRECT file whose address, length or offset
/// is not aligned to [`BLOCK`](crate::BLOCK): the kernel would refuse it,
/// and the engine never makes one.
pub fn write_all_at(file: &File, data: &[u8], offset: u64, dsync: bool) -> io::Result<()> {
    // The flags are read only for a misaligned write: never, in a
    // correct run.
    assert!(
        block_aligned(data.as_ptr().addr(), data.len(), offset) || !demands_alignment(file),
        "misaligned write to an O_DIRECT file: {} bytes from {:p} at offset {offset}",
        data.len(),
        data.as_ptr()
    );
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
            assert!(
                n as usize <= rest.len(),
                "pwritev2 wrote {n} bytes of the {} asked",
                rest.len()
            );
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

/// A file system the engine chooses for, told by its `statfs` magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsKind {
    /// ext4 (and ext2/ext3, which share its magic).
    Ext4,
    /// XFS.
    Xfs,
    /// btrfs.
    Btrfs,
    /// tmpfs: memory.
    Tmpfs,
    /// ramfs: memory, and no O_DIRECT.
    Ramfs,
    /// overlayfs: writes go to its upper layer's file system.
    Overlay,
    /// FUSE.
    Fuse,
    /// NFS.
    Nfs,
    /// The simulated disk of the `sim` feature.
    Simulated,
    /// Anything else (and every file system outside Linux).
    Other,
}

/// The `statfs` magic numbers of the kinds that have one.
const MAGICS: [(u32, FsKind); 8] = [
    (0xEF53, FsKind::Ext4),
    (0x5846_5342, FsKind::Xfs),
    (0x9123_683E, FsKind::Btrfs),
    (0x0102_1994, FsKind::Tmpfs),
    (0x8584_58F6, FsKind::Ramfs),
    (0x794C_7630, FsKind::Overlay),
    (0x6573_5546, FsKind::Fuse),
    (0x6969, FsKind::Nfs),
];

impl FsKind {
    /// The kind whose `statfs` magic is `magic`; `Other` if none.
    pub fn from_magic(magic: u32) -> FsKind {
        MAGICS
            .iter()
            .find(|&&(m, _)| m == magic)
            .map_or(FsKind::Other, |&(_, k)| k)
    }

    /// Its name, as `mount -t` spells it ("unknown" for `Other`).
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
            FsKind::Tmpfs => "tmpfs",
            FsKind::Ramfs => "ramfs",
            FsKind::Overlay => "overlay",
            FsKind::Fuse => "fuse",
            FsKind::Nfs => "nfs",
            FsKind::Simulated => "simulated",
            FsKind::Other => "unknown",
        }
    }

    /// Whether the kind is known to make an `RWF_DSYNC` write (or one on
    /// an `O_DSYNC` file) durable when it completes, for direct I/O
    /// submitted from io_uring as well as from `pwritev2`.
    ///
    /// A whitelist, because the flag is only a request: the file system
    /// must act on it, and some do not. FUSE forwards the write and never
    /// sends the server a sync for it (the FUSE protocol has no per-write
    /// sync flag, and the kernel's direct-I/O path skips the sync), so a
    /// "durable" write there is only written. NFS and anything unknown
    /// are not trusted either. tmpfs and ramfs keep nothing across a power
    /// loss either way, but the flag is not what loses it. Overlay is
    /// decided by [`FileSystem::honours_dsync`], from its upper layer.
    fn honours_dsync(self) -> bool {
        matches!(
            self,
            FsKind::Ext4
                | FsKind::Xfs
                | FsKind::Btrfs
                | FsKind::Tmpfs
                | FsKind::Ramfs
                | FsKind::Simulated
        )
    }
}

/// What a file's data lives on, as far as durability and direct I/O
/// go: [`file_system`] finds it once per open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSystem {
    /// The file system the file is on.
    pub kind: FsKind,
    /// For overlay, its upper layer's kind, where every write lands;
    /// `None` if it could not be found (then nothing is trusted).
    pub upper: Option<FsKind>,
    /// For overlay, whether it is mounted `volatile`, which drops every
    /// sync and `RWF_DSYNC`: nothing is durable there.
    pub volatile: bool,
    /// For btrfs (or an overlay on it), whether the file is NOCOW
    /// (`chattr +C`, `FS_NOCOW_FL`): only such a file has no data
    /// checksums, and only its O_DIRECT writes bypass the page cache.
    pub nocow: bool,
}

impl FileSystem {
    /// The simulated disk: honours `RWF_DSYNC`, keeps what is synced.
    pub const SIMULATED: FileSystem = FileSystem::of(FsKind::Simulated);

    /// A file system of `kind` with nothing more known about it.
    pub const fn of(kind: FsKind) -> FileSystem {
        FileSystem {
            kind,
            upper: None,
            volatile: false,
            nocow: false,
        }
    }

    /// Where the data is written: overlay's upper layer (`Other` when
    /// unknown), otherwise the file system itself.
    pub fn storage(&self) -> FsKind {
        match self.kind {
            FsKind::Overlay => self.upper.unwrap_or(FsKind::Other),
            kind => kind,
        }
    }

    /// Whether an `RWF_DSYNC` write to the file is durable when it
    /// completes. Overlay passes the flag on to its upper layer's file
    /// (its write path keeps `IOCB_DSYNC` for the upper file, synchronous
    /// and from io_uring alike) unless mounted `volatile`, so it is
    /// trusted exactly when its upper layer is. See [`FsKind`] for the
    /// others. Cost: none.
    pub fn honours_dsync(&self) -> bool {
        match self.kind {
            FsKind::Overlay => {
                !self.volatile
                    && self
                        .upper
                        .is_some_and(|u| u != FsKind::Overlay && u.honours_dsync())
            }
            kind => kind.honours_dsync(),
        }
    }

    /// Whether synced data survives a power loss: false on memory (tmpfs,
    /// ramfs, an overlay on one) and on an overlay mounted `volatile`.
    /// Unknown file systems are assumed to be disks. Cost: none.
    pub fn survives_power_loss(&self) -> bool {
        !self.volatile && !matches!(self.storage(), FsKind::Tmpfs | FsKind::Ramfs)
    }

    /// Whether an O_DIRECT write to the file goes through the page cache
    /// anyway: btrfs does so for every file with data checksums (its
    /// default), so that the checksum always matches what is written;
    /// a NOCOW file has none and is really direct. Cost: none.
    pub fn buffers_direct_io(&self) -> bool {
        self.storage() == FsKind::Btrfs && !self.nocow
    }
}

impl std::fmt::Display for FileSystem {
    /// "ext4", "btrfs (copy-on-write)", "overlay on xfs", "overlay
    /// (volatile) on ext4".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.name())?;
        if self.volatile {
            f.write_str(" (volatile)")?;
        }
        if self.kind == FsKind::Overlay {
            write!(f, " on {}", self.storage().name())?;
        }
        if self.storage() == FsKind::Btrfs {
            f.write_str(if self.nocow {
                " (nocow)"
            } else {
                " (copy-on-write)"
            })?;
        }
        Ok(())
    }
}

/// `FS_NOCOW_FL` of `linux/fs.h`: the file has no copy-on-write and no
/// data checksums.
#[cfg(target_os = "linux")]
const FS_NOCOW_FL: libc::c_long = 0x0080_0000;

/// The `statfs` magic of what `fd` (or, with `path`, the path) is on.
#[cfg(target_os = "linux")]
fn statfs_kind(fd: libc::c_int, path: Option<&std::ffi::CStr>) -> io::Result<FsKind> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    let rc = match path {
        // SAFETY: statfs fills the statfs we own (valid for writes of its
        // size) about a NUL-terminated path that outlives the call.
        Some(p) => unsafe { libc::statfs(p.as_ptr(), st.as_mut_ptr()) },
        // SAFETY: fstatfs fills the statfs we own about a descriptor the
        // caller owns.
        None => unsafe { libc::fstatfs(fd, st.as_mut_ptr()) },
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: (f)statfs returned 0, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    // Magic numbers are 32 bits; the field is wider (and signed) on some
    // architectures, so compare the low 32 bits only.
    #[allow(clippy::unnecessary_cast)]
    Ok(FsKind::from_magic(st.f_type as u32))
}

/// The mount id of the mount `fd` is on (`statx` `STATX_MNT_ID`).
#[cfg(target_os = "linux")]
fn mount_id(fd: libc::c_int) -> io::Result<u64> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: statx of the descriptor itself (empty path, AT_EMPTY_PATH)
    // into the statx we own, valid for writes of its size.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx returned 0 and the struct was zeroed before.
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::ErrorKind::Unsupported.into());
    }
    Ok(stx.stx_mnt_id)
}

/// `mountinfo`'s octal escapes (`\040` for a space) undone.
#[cfg(any(target_os = "linux", test))]
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// From the `/proc/self/mountinfo` line of an overlay mount: its upper
/// directory and whether it is mounted `volatile`.
#[cfg(any(target_os = "linux", test))]
fn overlay_options(line: &str) -> (Option<String>, bool) {
    let Some((_, tail)) = line.split_once(" - ") else {
        return (None, false);
    };
    // fstype, source, super options.
    let Some(opts) = tail.split(' ').nth(2) else {
        return (None, false);
    };
    let mut upper = None;
    let mut volatile = false;
    for opt in opts.split(',') {
        if let Some(dir) = opt.strip_prefix("upperdir=") {
            upper = Some(unescape_mountinfo(dir));
        }
        // Older kernels print the mount option, newer ones its setting.
        volatile |= opt == "volatile" || opt == "fsync=volatile";
    }
    (upper, volatile)
}

/// What the file system of `file` is (see [`FileSystem`]).
///
/// Linux: `fstatfs(2)`; for overlay also `statx(2)` for its mount, a read
/// of `/proc/self/mountinfo` and a `statfs(2)` of its upper directory
/// (found: `upper` is `None` when any of these fails); for btrfs one
/// `ioctl(FS_IOC_GETFLAGS)`. Elsewhere `Other`, with no syscall. Call it
/// once per open file, not per write.
pub fn file_system(file: &File) -> io::Result<FileSystem> {
    #[cfg(target_os = "linux")]
    {
        let fd = file.as_raw_fd();
        let mut fs = FileSystem::of(statfs_kind(fd, None)?);
        if fs.kind == FsKind::Overlay {
            let found = mount_id(fd).ok().and_then(|id| {
                let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
                let id = id.to_string();
                let line = info
                    .lines()
                    .find(|l| l.split(' ').next() == Some(id.as_str()))?;
                Some(overlay_options(line))
            });
            if let Some((upper, volatile)) = found {
                fs.volatile = volatile;
                fs.upper = upper
                    .and_then(|u| std::ffi::CString::new(u).ok())
                    .and_then(|u| statfs_kind(-1, Some(&u)).ok());
            }
        }
        if fs.storage() == FsKind::Btrfs {
            let mut flags: libc::c_long = 0;
            // SAFETY: FS_IOC_GETFLAGS on a descriptor we own writes one
            // long into `flags`, which outlives the call.
            let rc = unsafe { libc::ioctl(fd, libc::FS_IOC_GETFLAGS, &mut flags) };
            // Flags unreadable: assume the default, checksummed file.
            fs.nocow = rc == 0 && flags & FS_NOCOW_FL != 0;
        }
        Ok(fs)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Ok(FileSystem::of(FsKind::Other))
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
/// clean pages (dirty ones stay until written back; on tmpfs and ramfs,
/// where the page cache is the only copy, none go). Elsewhere a no-op.
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

    /// An O_DIRECT file says it demands alignment, and a misaligned
    /// write to it panics before the kernel sees it; a buffered file
    /// takes any write. Skips the direct half where the file system
    /// refuses O_DIRECT.
    #[test]
    fn only_a_direct_file_demands_aligned_writes() {
        let dir = tempfile::tempdir().unwrap();
        let buffered = open_segment(&dir.path().join("b"), true, false, 0o600).unwrap();
        assert!(!demands_alignment(&buffered));
        write_all_at(&buffered, b"hello", 3, false).unwrap();
        let path = dir.path().join("d");
        let direct = match open_segment(&path, true, true, 0o600) {
            Ok(f) => f,
            Err(e) if is_direct_unsupported(&e) => {
                eprintln!("only_a_direct_file_demands_aligned_writes: no O_DIRECT here");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(demands_alignment(&direct), cfg!(target_os = "linux"));
        let buf = AlignedBuf::new(8192);
        write_all_at(&direct, &buf.as_slice()[..4096], 4096, false).unwrap();
        if cfg!(target_os = "linux") {
            for (from, len, offset) in [(0, 100, 0), (0, 4096, 100), (8, 4096, 0)] {
                let data = &buf.as_slice()[from..from + len];
                let refused =
                    std::panic::catch_unwind(|| write_all_at(&direct, data, offset, false));
                assert!(
                    refused.is_err(),
                    "{len} bytes at {offset}, {from} into the buffer"
                );
            }
        }
    }

    #[test]
    fn dsync_whitelist_names_only_file_systems_that_honour_it() {
        for magic in [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x8584_58F6] {
            assert!(
                FileSystem::of(FsKind::from_magic(magic)).honours_dsync(),
                "{magic:#x}"
            );
        }
        // FUSE, NFS, an overlay whose upper layer is unknown, and a magic
        // nobody uses.
        for magic in [0x6573_5546, 0x6969, 0x794C_7630, 0] {
            assert!(
                !FileSystem::of(FsKind::from_magic(magic)).honours_dsync(),
                "{magic:#x}"
            );
        }
    }

    #[test]
    fn overlay_is_trusted_as_its_upper_layer_unless_volatile() {
        let over = |upper, volatile| FileSystem {
            upper,
            volatile,
            ..FileSystem::of(FsKind::Overlay)
        };
        assert!(over(Some(FsKind::Ext4), false).honours_dsync());
        assert!(over(Some(FsKind::Ext4), false).survives_power_loss());
        assert!(!over(Some(FsKind::Ext4), true).honours_dsync());
        assert!(!over(Some(FsKind::Ext4), true).survives_power_loss());
        assert!(!over(Some(FsKind::Fuse), false).honours_dsync());
        assert!(!over(None, false).honours_dsync());
        assert!(!over(Some(FsKind::Tmpfs), false).survives_power_loss());
        assert!(over(Some(FsKind::Btrfs), false).buffers_direct_io());
        assert_eq!(over(Some(FsKind::Xfs), false).to_string(), "overlay on xfs");
    }

    #[test]
    fn mountinfo_gives_an_overlays_upper_directory_and_volatility() {
        let line = "412 30 0:77 / /mnt/o rw,relatime - overlay overlay \
                    rw,lowerdir=/l,upperdir=/up\\040dir,workdir=/w,volatile";
        assert_eq!(overlay_options(line), (Some("/up dir".into()), true));
        let line = "47 27 0:40 / /m rw - overlay overlay rw,upperdir=/u,fsync=volatile";
        assert_eq!(overlay_options(line), (Some("/u".into()), true));
        let line = "413 30 0:78 / /mnt/p rw - overlay none rw,lowerdir=/a:/b";
        assert_eq!(overlay_options(line), (None, false));
        assert_eq!(unescape_mountinfo("a\\134b\\0"), "a\\b\\0");
    }

    /// Needs root, to mount a tmpfs and a ramfs: each is told by its
    /// magic, trusted with RWF_DSYNC and said to keep nothing across a
    /// power loss. Skips with a printed reason otherwise.
    #[cfg(target_os = "linux")]
    #[test]
    fn memory_file_systems_are_told_apart_from_disks() {
        for (fs, kind) in [("tmpfs", FsKind::Tmpfs), ("ramfs", FsKind::Ramfs)] {
            let dir = tempfile::tempdir().unwrap();
            let mounted = std::process::Command::new("mount")
                .args(["-t", fs, fs])
                .arg(dir.path())
                .output();
            match mounted {
                Ok(out) if out.status.success() => {}
                other => {
                    eprintln!("memory_file_systems: skipped {fs}: cannot mount: {other:?}");
                    continue;
                }
            }
            let file = File::create(dir.path().join("f")).unwrap();
            let got = file_system(&file);
            drop(file);
            std::process::Command::new("umount")
                .arg(dir.path())
                .status()
                .unwrap();
            let got = got.unwrap();
            assert_eq!(got.kind, kind);
            assert!(got.honours_dsync() && !got.survives_power_loss(), "{got}");
            assert!(!got.buffers_direct_io(), "{got}");
        }
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

    /// On a disk the clean pages go; on memory (tmpfs, ramfs) the page
    /// cache is the file's only copy, so nothing may go.
    #[cfg(target_os = "linux")]
    #[test]
    fn dont_need_drops_the_range_from_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        if !file_system(&file).unwrap().survives_power_loss() {
            let before = resident(&file, 4 << 20);
            advise(&file, 0, 4 << 20, Advice::DontNeed).unwrap();
            assert_eq!(resident(&file, 4 << 20), before, "memory keeps its pages");
            return;
        }
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
