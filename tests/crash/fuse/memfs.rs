//! `MemFs`: an in-memory file system that this process serves to the
//! kernel over FUSE, and that forgets, at a power cut, everything that was
//! never synced.
//!
//! The kernel drives it like any FUSE file system: the log under test
//! opens, writes, syncs and renames through ordinary syscalls and
//! io_uring, and the requests that reach the server are what a real FUSE
//! file system would see. That is the point: the kernel decides which
//! syncs are sent, not the test.
//!
//! # Durability model
//!
//! Every inode keeps two states: the current one (what reads, `stat`
//! and directory listings show) and the durable one (what survives a
//! power cut).
//!
//! - A regular file's durable state is its bytes and its length as of
//!   its last `FSYNC` (`fsync` and `fdatasync` alike, data only: this
//!   model keeps no times or modes). Writes, truncations and `fallocate`
//!   change only the current state until then. An `RWF_DSYNC` or
//!   `O_DSYNC` write is durable only if the kernel follows it with an
//!   `FSYNC`; the FUSE protocol has no other way to ask.
//! - A directory's durable state is its set of names (name to inode) as
//!   of its last `FSYNCDIR`. Creating, renaming and unlinking a name
//!   change only the current set until the directory itself is synced,
//!   as on Linux, where `fsync` of a file does not make its name
//!   durable. A file whose name was never made durable is lost, data and
//!   all; a renamed file keeps its old name, and an unlinked one comes
//!   back.
//! - A power cut ([`Disk::after_power_cut`]) keeps exactly the durable
//!   state, walking durable names from the root: nothing unsynced
//!   survives, not even partly. Real disks may keep some unsynced writes
//!   or tear them; a log that survives this model has relied on no write
//!   it did not sync, which is what this model checks (torn and
//!   reordered writes are the simulated disk's business, `SimFs`).
//! - Renames across directories are each directory's own change: a
//!   cut between syncing the two may keep a file under both names or
//!   neither. The log never renames across directories.
//!
//! Opens with `O_DIRECT` get `FOPEN_DIRECT_IO` (FUSE's `direct_io` mode),
//! so such files bypass the page cache as they would on a FUSE file
//! system that passes `O_DIRECT` through. In that mode the kernel sends
//! each write to the server and completes it, `RWF_DSYNC` or not, with
//! no `FSYNC` after it, from io_uring and `pwritev2` alike: the loss this
//! file system exists to show. (Without `FOPEN_DIRECT_IO`, Linux 6.18
//! does follow an `O_DIRECT` DSYNC write with an `FSYNC`; which mode a
//! server picks is its own business, so the log cannot rely on either.)
//! `flock` is left to the kernel, which handles it locally for FUSE
//! unless the server opts in, as most servers do not.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

/// How long the kernel may cache names and attributes: not at all, so
/// that every lookup and `stat` reaches the server's current state.
const TTL: Duration = Duration::ZERO;

/// One inode, current and durable (see the module docs).
#[derive(Clone, Debug)]
enum Node {
    File {
        data: Vec<u8>,
        durable: Vec<u8>,
    },
    Dir {
        names: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

/// What the kernel asked of the server, for the test to report and check.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// `WRITE` requests.
    pub writes: u64,
    /// `FSYNC` requests (file `fsync` and `fdatasync`).
    pub fsyncs: u64,
    /// `FSYNCDIR` requests.
    pub fsyncdirs: u64,
    /// Opens (and creates) with `O_DIRECT`.
    pub direct_opens: u64,
}

/// The whole file system: inodes by number, the root is inode 1.
#[derive(Clone, Debug)]
pub struct Disk {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Requests since this disk was mounted (or made).
    pub counters: Counters,
}

impl Default for Disk {
    fn default() -> Disk {
        Disk::new()
    }
}

impl Disk {
    /// An empty file system: the root directory, durable.
    pub fn new() -> Disk {
        let root = Node::Dir {
            names: BTreeMap::new(),
            durable: BTreeMap::new(),
        };
        Disk {
            nodes: HashMap::from([(INodeNo::ROOT.0, root)]),
            next_ino: INodeNo::ROOT.0 + 1,
            counters: Counters::default(),
        }
    }

    /// What a power cut leaves: the durable state of every inode that
    /// durable names reach from the root, as both its current and its
    /// durable state. Counters start again from zero.
    pub fn after_power_cut(&self) -> Disk {
        let mut kept = HashMap::new();
        let mut todo = vec![INodeNo::ROOT.0];
        while let Some(ino) = todo.pop() {
            if kept.contains_key(&ino) {
                continue;
            }
            let node = match &self.nodes[&ino] {
                Node::File { durable, .. } => Node::File {
                    data: durable.clone(),
                    durable: durable.clone(),
                },
                Node::Dir { durable, .. } => {
                    todo.extend(durable.values().copied());
                    Node::Dir {
                        names: durable.clone(),
                        durable: durable.clone(),
                    }
                }
            };
            kept.insert(ino, node);
        }
        Disk {
            nodes: kept,
            next_ino: self.next_ino,
            counters: Counters::default(),
        }
    }

    fn node(&self, ino: INodeNo) -> Result<&Node, Errno> {
        self.nodes.get(&ino.0).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: INodeNo) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)
    }

    fn names(&self, dir: INodeNo) -> Result<&BTreeMap<OsString, u64>, Errno> {
        match self.node(dir)? {
            Node::Dir { names, .. } => Ok(names),
            Node::File { .. } => Err(Errno::ENOTDIR),
        }
    }

    fn names_mut(&mut self, dir: INodeNo) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match self.node_mut(dir)? {
            Node::Dir { names, .. } => Ok(names),
            Node::File { .. } => Err(Errno::ENOTDIR),
        }
    }

    fn data_mut(&mut self, ino: INodeNo) -> Result<&mut Vec<u8>, Errno> {
        match self.node_mut(ino)? {
            Node::File { data, .. } => Ok(data),
            Node::Dir { .. } => Err(Errno::EISDIR),
        }
    }

    fn attr(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let (kind, size, perm, nlink) = match self.node(ino)? {
            Node::File { data, .. } => (FileType::RegularFile, data.len() as u64, 0o644, 1),
            Node::Dir { .. } => (FileType::Directory, 0, 0o755, 2),
        };
        Ok(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Add `name` in `parent` for a new inode `node`; its attributes.
    fn add(&mut self, parent: INodeNo, name: &OsStr, node: Node) -> Result<FileAttr, Errno> {
        if self.names(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        self.names_mut(parent)?.insert(name.to_owned(), ino);
        self.attr(INodeNo(ino))
    }

    /// Move `name` in `parent` to `newname` in `newparent`, replacing
    /// what was there.
    fn rename(
        &mut self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<(), Errno> {
        let ino = *self.names(parent)?.get(name).ok_or(Errno::ENOENT)?;
        self.names(newparent)?;
        self.names_mut(parent)?.remove(name);
        self.names_mut(newparent)?.insert(newname.to_owned(), ino);
        Ok(())
    }

    fn open_flags(&mut self, flags: i32) -> FopenFlags {
        if flags & libc::O_DIRECT != 0 {
            self.counters.direct_opens += 1;
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }
}

/// The FUSE server: requests from the kernel applied to a shared [`Disk`].
struct MemFs {
    disk: Arc<Mutex<Disk>>,
}

impl MemFs {
    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A panic while the lock is held can only come from a bug here,
        // which the test reports anyway; keep serving the kernel.
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for MemFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let disk = self.disk();
        let r = disk.names(parent).and_then(|names| {
            let ino = names.get(name).ok_or(Errno::ENOENT)?;
            disk.attr(INodeNo(*ino))
        });
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.disk().attr(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut disk = self.disk();
        let r = match size {
            Some(size) => disk.data_mut(ino).map(|d| d.resize(size as usize, 0)),
            None => Ok(()),
        };
        match r.and_then(|()| disk.attr(ino)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let dir = Node::Dir {
            names: BTreeMap::new(),
            durable: BTreeMap::new(),
        };
        match self.disk().add(parent, name, dir) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut disk = self.disk();
        let r = disk.names(parent).and_then(|names| {
            let ino = *names.get(name).ok_or(Errno::ENOENT)?;
            match disk.node(INodeNo(ino))? {
                Node::Dir { .. } => Err(Errno::EISDIR),
                Node::File { .. } => Ok(()),
            }
        });
        // The inode stays: open descriptors may still use it, and a power
        // cut before the directory is synced brings the name back.
        let r = r.and_then(|()| {
            disk.names_mut(parent).map(|n| {
                n.remove(name);
            })
        });
        reply_empty(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let r = self.disk().rename(parent, name, newparent, newname);
        reply_empty(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut disk = self.disk();
        if let Err(e) = disk.node(ino) {
            return reply.error(e);
        }
        let fl = disk.open_flags(flags.0);
        reply.opened(FileHandle(0), fl);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let disk = self.disk();
        match disk.node(ino) {
            Ok(Node::File { data, .. }) => {
                let from = (offset as usize).min(data.len());
                let to = (from + size as usize).min(data.len());
                reply.data(&data[from..to]);
            }
            Ok(Node::Dir { .. }) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        bytes: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut disk = self.disk();
        disk.counters.writes += 1;
        match disk.data_mut(ino) {
            Ok(data) => {
                let end = offset as usize + bytes.len();
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[offset as usize..end].copy_from_slice(bytes);
                reply.written(bytes.len() as u32);
            }
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close, not a sync: nothing becomes durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut disk = self.disk();
        disk.counters.fsyncs += 1;
        let r = match disk.node_mut(ino) {
            Ok(Node::File { data, durable }) => {
                durable.clone_from(data);
                Ok(())
            }
            Ok(Node::Dir { .. }) => Ok(()),
            Err(e) => Err(e),
        };
        reply_empty(reply, r);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let disk = self.disk();
        let names = match disk.names(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let dots = [(ino.0, OsStr::new(".")), (ino.0, OsStr::new(".."))];
        let entries = dots
            .into_iter()
            .chain(names.iter().map(|(n, i)| (*i, n.as_os_str())));
        for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
            let kind = match disk.nodes.get(&child) {
                Some(Node::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut disk = self.disk();
        disk.counters.fsyncdirs += 1;
        let r = match disk.node_mut(ino) {
            Ok(Node::Dir { names, durable }) => {
                durable.clone_from(names);
                Ok(())
            }
            Ok(Node::File { .. }) => Err(Errno::ENOTDIR),
            Err(e) => Err(e),
        };
        reply_empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Room enough for any test; the kernel reports FUSE's own magic
        // number as the file system type, whatever the server says.
        reply.statfs(1 << 24, 1 << 24, 1 << 24, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut disk = self.disk();
        let existing = disk.names(parent).map(|n| n.get(name).copied());
        let r = match existing {
            Err(e) => Err(e),
            Ok(Some(_)) if flags & libc::O_EXCL != 0 => Err(Errno::EEXIST),
            Ok(Some(ino)) => disk.attr(INodeNo(ino)),
            Ok(None) => {
                let file = Node::File {
                    data: Vec::new(),
                    durable: Vec::new(),
                };
                disk.add(parent, name, file)
            }
        };
        match r {
            Ok(attr) => {
                let fl = disk.open_flags(flags);
                reply.created(&TTL, &attr, Generation(0), FileHandle(0), fl);
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Plain allocation only (the file grows, zero-filled); no hole
        // punching or keep-size modes, which the log does not use.
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let mut disk = self.disk();
        let r = disk.data_mut(ino).map(|data| {
            let end = (offset + length) as usize;
            if data.len() < end {
                data.resize(end, 0);
            }
        });
        reply_empty(reply, r);
    }
}

/// A [`Disk`] mounted at a directory, served by a background thread;
/// unmounted on drop, even when a test fails.
pub struct Mounted {
    dir: PathBuf,
    disk: Arc<Mutex<Disk>>,
    session: Option<BackgroundSession>,
}

impl Mounted {
    /// Mount `disk` at `dir` (an existing, empty directory). Needs root
    /// (the kernel's `mount(2)`; without it fuser tries `fusermount3`)
    /// and `/dev/fuse`.
    pub fn mount(dir: &Path, disk: Disk) -> io::Result<Mounted> {
        let disk = Arc::new(Mutex::new(disk));
        let mut config = fuser::Config::default();
        config.mount_options = vec![MountOption::FSName("ringwal-memfs".into()), MountOption::RW];
        let session = fuser::spawn_mount(MemFs { disk: disk.clone() }, dir, &config)?;
        Ok(Mounted {
            dir: dir.to_path_buf(),
            disk,
            session: Some(session),
        })
    }

    /// The file system's state right now, for inspection.
    pub fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cut the power: what the disk holds at this instant, every request
    /// before it applied and none after (the lock orders them). The mount
    /// stays up, so the writer still open on it can be shut down normally;
    /// mount the result to see what survived.
    pub fn power_cut(&self) -> Disk {
        self.disk().after_power_cut()
    }

    /// Unmount, and wait for the serving thread to finish.
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take()
            && s.umount_and_join().is_err()
        {
            // Something still holds a file open (a failing test):
            // detach the mount so no later test sees it.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
