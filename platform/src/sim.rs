//! A deterministic, in-memory disk for crash and fault testing.
//!
//! [`SimFs`] implements [`Vfs`], so the engine runs on it unmodified (with
//! the threaded queue, which drives any [`FileIo`]). It remembers, for every
//! file, which bytes are durable (covered by a completed sync or a DSYNC
//! write) and which writes are not yet, and for the namespace, which
//! creations, renames and unlinks a directory sync has made durable.
//!
//! [`SimFs::crash`] freezes the disk (every later call fails with EIO, so
//! the crashed engine cannot touch it) and returns the disk as a power loss
//! would leave it: durable state, plus each non-durable write independently
//! dropped, kept, or torn at sector granularity (so writes can survive out
//! of order), plus a random prefix of the namespace operations not yet made
//! durable.
//!
//! Faults are drawn from the seed and the operation's position (the n-th
//! write, the n-th sync, the n-th rename...), not from a shared stream, so
//! a seed reproduces the same faults whatever the thread interleaving.
//! Thread interleaving itself is not controlled: the engine has real
//! threads.
//!
//! Namespace faults (creates, renames, unlinks, directory syncs) fail
//! before the operation takes effect: a failed create makes no name, a
//! failed rename or unlink leaves every name as it was. A failed
//! directory sync makes nothing durable: the operations it would have
//! covered stay undecided, and a crash keeps a random prefix of them.
//!
//! Model limits: preallocation and file length changes are durable at
//! once; a failed sync forgets the file's pending writes (as Linux drops
//! dirty pages after an fsync error), so they can never become durable.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::vfs::{Advice, FileIo, OpenHow, VFile, Vfs, PRIVATE_FILE_MODE};

/// What to inject, and how a crash tears writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Probability that a write fails with EIO (nothing of it lands).
    pub write_eio: f64,
    /// Probability that a sync fails with EIO (its pending writes are lost).
    pub sync_eio: f64,
    /// Probability that a write lands only in part and then fails with EIO.
    pub short_write: f64,
    /// The n-th write (counting from 1, across all files) fails with EIO.
    pub fail_write_at: Option<u64>,
    /// The n-th sync (counting from 1, data or directory) fails with EIO.
    pub fail_sync_at: Option<u64>,
    /// Bytes the disk holds; writes and preallocations past it get ENOSPC.
    pub capacity: Option<u64>,
    /// Granularity at which a crash tears a write: 512 or 4096.
    pub sector: usize,
    /// Probability that a write lands one block away from where it was
    /// aimed, and is reported done: a misdirected write, which leaves the
    /// place it was meant for as it was and overwrites another.
    pub misdirect: f64,
    /// Probability that creating a file (an open with `create` or
    /// `create_new` that would make a new name) fails with EIO.
    pub create_eio: f64,
    /// Probability that a rename fails with EIO.
    pub rename_eio: f64,
    /// Probability that an unlink fails with EIO.
    pub unlink_eio: f64,
    /// Probability that a directory sync fails with EIO (on top of
    /// `sync_eio`, which counts directory syncs among all syncs).
    pub dir_sync_eio: f64,
    /// The n-th namespace operation of a kind (counting from 1, each kind
    /// on its own; see [`SimFs::namespace_ops`]) fails with EIO.
    pub fail_namespace_at: Option<(NsOp, u64)>,
}

/// A kind of namespace operation, for [`Faults::fail_namespace_at`] and
/// [`SimFs::namespace_ops`]. Only operations that would change the
/// namespace count: an open of an existing file, or an unlink or rename
/// of a missing one, fails or succeeds as it would anyway, uncounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsOp {
    /// An open that would create a name.
    Create,
    /// A rename of an existing name.
    Rename,
    /// An unlink of an existing name.
    Unlink,
    /// A directory sync.
    DirSync,
}

impl NsOp {
    fn index(self) -> usize {
        self as usize
    }

    /// The `what` of [`chance`]: apart from 1-4, the data faults'.
    fn salt(self) -> u64 {
        5 + self as u64
    }

    fn probability(self, f: &Faults) -> f64 {
        match self {
            NsOp::Create => f.create_eio,
            NsOp::Rename => f.rename_eio,
            NsOp::Unlink => f.unlink_eio,
            NsOp::DirSync => f.dir_sync_eio,
        }
    }
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            write_eio: 0.0,
            sync_eio: 0.0,
            short_write: 0.0,
            fail_write_at: None,
            fail_sync_at: None,
            capacity: None,
            sector: 512,
            misdirect: 0.0,
            create_eio: 0.0,
            rename_eio: 0.0,
            unlink_eio: 0.0,
            dir_sync_eio: 0.0,
            fail_namespace_at: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct FileState {
    /// What reads see.
    data: Vec<u8>,
    /// What survives a crash for sure.
    durable: Vec<u8>,
    /// Writes since the last successful sync, in completion order.
    pending: Vec<(u64, Vec<u8>)>,
    syncs: u64,
    /// Permission bits it was created with (a mode, as `chmod` takes it).
    mode: u32,
}

#[derive(Clone, Debug)]
enum DirOp {
    Create(PathBuf, u64),
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
}

impl DirOp {
    fn dir(&self) -> &Path {
        match self {
            DirOp::Create(p, _) | DirOp::Rename(p, _) | DirOp::Remove(p) => {
                p.parent().unwrap_or(Path::new("/"))
            }
        }
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            DirOp::Create(p, id) => {
                names.insert(p.clone(), *id);
            }
            DirOp::Rename(from, to) => {
                if let Some(id) = names.remove(from) {
                    names.insert(to.clone(), id);
                }
            }
            DirOp::Remove(p) => {
                names.remove(p);
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u64, FileState>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    /// Namespace operations not yet covered by a directory sync.
    dir_log: Vec<DirOp>,
    dirs: Vec<PathBuf>,
    /// Permission bits each directory was created with.
    dir_modes: BTreeMap<PathBuf, u32>,
    /// Which handle holds each file's lock.
    locks: HashMap<u64, u64>,
    /// Paths with a latent read error at an offset.
    read_errors: Vec<(PathBuf, u64)>,
    next_id: u64,
    writes: u64,
    syncs: u64,
    /// Namespace operations attempted, by `NsOp::index`.
    ns_ops: [u64; 4],
    /// What to inject; replaced by `SimFs::set_faults`.
    faults: Faults,
    frozen: bool,
    log: Vec<String>,
}

struct Shared {
    seed: u64,
    state: Mutex<State>,
    handles: AtomicU64,
}

/// The simulated disk. Cheap to clone (a shared handle). See the module docs.
#[derive(Clone)]
pub struct SimFs {
    sh: Arc<Shared>,
}

impl fmt::Debug for SimFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFs")
            .field("seed", &self.sh.seed)
            .finish()
    }
}

const LOG_LIMIT: usize = 4096;

/// splitmix64: a tiny, well-mixed hash, so each decision is a pure
/// function of (seed, what, n) and reproducible under any interleaving.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn chance(seed: u64, what: u64, n: u64, p: f64) -> bool {
    p > 0.0 && (mix(seed ^ mix(what ^ mix(n))) >> 11) as f64 / (1u64 << 53) as f64 <= p
}

/// EIO, as the kernel reports it; `what` only goes to the op log.
fn eio(_what: &str) -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl SimFs {
    /// An empty disk driven by `seed`, injecting `faults`.
    pub fn new(seed: u64, faults: Faults) -> SimFs {
        assert!(
            faults.sector == 512 || faults.sector == 4096,
            "sector must be 512 or 4096"
        );
        SimFs {
            sh: Arc::new(Shared {
                seed,
                state: Mutex::new(State {
                    next_id: 1,
                    faults,
                    ..State::default()
                }),
                handles: AtomicU64::new(1),
            }),
        }
    }

    /// This disk as a shared [`Vfs`] handle, for `Config`.
    pub fn vfs(&self) -> Arc<dyn Vfs> {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.sh.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The seed this disk was made with.
    pub fn seed(&self) -> u64 {
        self.sh.seed
    }

    /// Syncs (data and directory) attempted so far, failed ones included.
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// Syncs attempted on the file now named `path`.
    pub fn file_syncs(&self, path: &Path) -> u64 {
        let st = self.state();
        st.names
            .get(path)
            .and_then(|id| st.files.get(id))
            .map_or(0, |f| f.syncs)
    }

    /// Writes attempted so far.
    pub fn writes(&self) -> u64 {
        self.state().writes
    }

    /// Namespace operations of kind `op` attempted so far, failed ones
    /// included: the count [`Faults::fail_namespace_at`] refers to.
    pub fn namespace_ops(&self, op: NsOp) -> u64 {
        self.state().ns_ops[op.index()]
    }

    /// Inject `faults` from now on, in place of the ones this disk was
    /// made or last set with. Operation counts go on from where they are,
    /// so a test can aim a fault at the next operation of a kind.
    pub fn set_faults(&self, faults: Faults) {
        assert!(
            faults.sector == 512 || faults.sector == 4096,
            "sector must be 512 or 4096"
        );
        self.state().faults = faults;
    }

    /// The last operations, oldest first, for a failure report.
    pub fn op_log(&self) -> Vec<String> {
        self.state().log.clone()
    }

    /// Make reads of `path` that cover `offset` fail with EIO (a latent
    /// sector error).
    pub fn inject_read_error(&self, path: &Path, offset: u64) {
        self.state().read_errors.push((path.to_path_buf(), offset));
    }

    /// The permission bits the file at `path` was created with, or those
    /// of the directory `path` (`None` if neither exists): what a real
    /// disk's `stat` would show, whatever the process's umask.
    pub fn mode_of(&self, path: &Path) -> Option<u32> {
        let st = self.state();
        if let Some(id) = st.names.get(path) {
            return st.files.get(id).map(|f| f.mode);
        }
        st.dir_modes.get(path).copied()
    }

    /// The current contents of the file named `path` (what reads see).
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.state();
        st.names
            .get(path)
            .and_then(|id| st.files.get(id))
            .map(|f| f.data.clone())
    }

    /// Replace the contents of the file named `path`, durably (for tests
    /// that damage a log on purpose).
    pub fn write_file(&self, path: &Path, data: &[u8]) {
        let mut st = self.state();
        if let Some(id) = st.names.get(path).copied() {
            let f = st.files.get_mut(&id).expect("named file exists");
            f.data = data.to_vec();
            f.durable = data.to_vec();
            f.pending.clear();
        }
    }

    /// Simulate a power loss now. This disk freezes (every later call
    /// fails with EIO); the returned disk holds what survived, with the
    /// same seed and faults (`crash_no` varies the tearing between crashes
    /// of one run).
    pub fn crash(&self, crash_no: u64) -> SimFs {
        let faults = self.state().faults.clone();
        self.crash_into(crash_no, faults)
    }

    /// As [`crash`](Self::crash), but the surviving disk injects `faults`
    /// from now on (say, none, to check that recovery succeeds).
    pub fn crash_into(&self, crash_no: u64, faults: Faults) -> SimFs {
        let mut st = self.state();
        st.frozen = true;
        let seed = self.sh.seed;
        let salt = mix(seed ^ mix(0xC8A5 ^ crash_no));
        let mut draw = 0u64;
        let mut next = || {
            draw += 1;
            mix(salt ^ draw)
        };
        let sector = st.faults.sector as u64;
        let mut files = HashMap::new();
        let mut ids: Vec<u64> = st.files.keys().copied().collect();
        ids.sort_unstable();
        let mut kept = 0;
        let mut torn = 0;
        let mut dropped = 0;
        for id in ids {
            let f = &st.files[&id];
            let mut image = f.durable.clone();
            for (off, bytes) in &f.pending {
                match next() % 3 {
                    0 => dropped += 1,
                    1 => {
                        kept += 1;
                        overlay(&mut image, *off, bytes);
                    }
                    _ => {
                        torn += 1;
                        let mut s = 0u64;
                        while s < bytes.len() as u64 {
                            // Sectors are aligned on the disk, not in the write.
                            let abs = off + s;
                            let end = ((abs / sector + 1) * sector - off).min(bytes.len() as u64);
                            if next() % 2 == 0 {
                                overlay(&mut image, abs, &bytes[s as usize..end as usize]);
                            }
                            s = end;
                        }
                    }
                }
            }
            files.insert(
                id,
                FileState {
                    data: image.clone(),
                    durable: image,
                    pending: Vec::new(),
                    syncs: 0,
                    mode: f.mode,
                },
            );
        }
        let mut names = st.durable_names.clone();
        let prefix = if st.dir_log.is_empty() {
            0
        } else {
            (next() % (st.dir_log.len() as u64 + 1)) as usize
        };
        for op in &st.dir_log[..prefix] {
            op.apply(&mut names);
        }
        let summary = format!(
            "crash #{crash_no}: {kept} pending writes kept, {torn} torn, {dropped} dropped; {prefix} of {} namespace ops kept",
            st.dir_log.len()
        );
        st.log.push(summary.clone());
        let log = st.log.clone();
        let dirs = st.dirs.clone();
        let dir_modes = st.dir_modes.clone();
        let next_id = st.next_id;
        drop(st);
        let new = SimFs::new(seed, faults);
        {
            let mut ns = new.state();
            ns.files = files;
            ns.durable_names = names.clone();
            ns.names = names;
            ns.dirs = dirs;
            ns.dir_modes = dir_modes;
            ns.next_id = next_id;
            ns.log = log;
            ns.writes = 0;
        }
        new
    }

    fn record(st: &mut State, line: String) {
        if st.log.len() >= LOG_LIMIT {
            st.log.drain(..LOG_LIMIT / 2);
        }
        st.log.push(line);
    }

    fn check_frozen(st: &State) -> io::Result<()> {
        if st.frozen {
            Err(eio("disk crashed"))
        } else {
            Ok(())
        }
    }

    fn used(st: &State) -> u64 {
        st.files.values().map(|f| f.data.len() as u64).sum()
    }

    /// Count a namespace operation of kind `op` (described by `line` in
    /// the op log) and fail it with EIO if the faults say so: a pure
    /// function of the seed, the kind and its count.
    fn namespace_fault(&self, st: &mut State, op: NsOp, line: &str) -> io::Result<()> {
        st.ns_ops[op.index()] += 1;
        let n = st.ns_ops[op.index()];
        let f = &st.faults;
        if f.fail_namespace_at == Some((op, n))
            || chance(self.sh.seed, op.salt(), n, op.probability(f))
        {
            SimFs::record(st, format!("{line}: EIO"));
            return Err(eio("namespace operation"));
        }
        Ok(())
    }
}

fn overlay(image: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let end = off as usize + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[off as usize..end].copy_from_slice(bytes);
}

/// One open handle on a simulated file.
pub struct SimFile {
    fs: SimFs,
    id: u64,
    handle: u64,
    path: PathBuf,
    /// Opened with [`OpenHow::direct`]: every write must be aligned to
    /// [`BLOCK`](crate::BLOCK), as O_DIRECT on a real disk demands.
    direct: bool,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile").field("path", &self.path).finish()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.fs.state();
        if st.locks.get(&self.id) == Some(&self.handle) {
            st.locks.remove(&self.id);
        }
    }
}

impl SimFile {
    fn write_inner(&self, data: &[u8], off: u64, dsync: bool) -> io::Result<()> {
        // A real disk refuses this with EINVAL; here it is the engine's
        // bug, so it stops the test where it happened. The length and the
        // offset only: the address is the caller's memory, which a
        // simulated device never reads by DMA.
        assert!(
            !self.direct
                || (data.len().is_multiple_of(crate::BLOCK)
                    && off.is_multiple_of(crate::BLOCK as u64)),
            "misaligned write to {} (opened direct): {} bytes at offset {off}",
            self.path.display(),
            data.len()
        );
        let seed = self.fs.sh.seed;
        let mut st = self.fs.state();
        SimFs::check_frozen(&st)?;
        let faults = st.faults.clone();
        st.writes += 1;
        let n = st.writes;
        let line = format!(
            "write #{n} {} @{off} len {} dsync={dsync}",
            self.path.display(),
            data.len()
        );
        let cur_len = st.files[&self.id].data.len() as u64;
        let grow = (off + data.len() as u64).saturating_sub(cur_len);
        if faults
            .capacity
            .is_some_and(|cap| SimFs::used(&st) + grow > cap)
        {
            SimFs::record(&mut st, format!("{line}: ENOSPC"));
            return Err(enospc());
        }
        if faults.fail_write_at == Some(n) || chance(seed, 1, n, faults.write_eio) {
            SimFs::record(&mut st, format!("{line}: EIO"));
            return Err(eio("write"));
        }
        let short = chance(seed, 2, n, faults.short_write) && data.len() > 1;
        let land = if short { &data[..data.len() / 2] } else { data };
        let block = 4096u64;
        let off = if chance(seed, 4, n, faults.misdirect) {
            // One block on if the file has room there, else one block back.
            let on = off + block;
            let to = if on + land.len() as u64 <= cur_len {
                on
            } else {
                off.saturating_sub(block)
            };
            SimFs::record(&mut st, format!("{line}: misdirected to @{to}"));
            to
        } else {
            off
        };
        let f = st.files.get_mut(&self.id).expect("open file exists");
        overlay(&mut f.data, off, land);
        if dsync && !short {
            overlay(&mut f.durable, off, land);
        } else {
            f.pending.push((off, land.to_vec()));
        }
        if short {
            SimFs::record(
                &mut st,
                format!("{line}: short ({} bytes) then EIO", land.len()),
            );
            return Err(eio("short write"));
        }
        SimFs::record(&mut st, line);
        Ok(())
    }

    fn sync_inner(&self, what: &str) -> io::Result<()> {
        let seed = self.fs.sh.seed;
        let mut st = self.fs.state();
        SimFs::check_frozen(&st)?;
        let faults = st.faults.clone();
        st.syncs += 1;
        let n = st.syncs;
        let f = st.files.get_mut(&self.id).expect("open file exists");
        f.syncs += 1;
        if faults.fail_sync_at == Some(n) || chance(seed, 3, n, faults.sync_eio) {
            // As on Linux: the dirty data is gone, and a later sync that
            // "succeeds" will not bring it back.
            f.pending.clear();
            SimFs::record(&mut st, format!("{what} #{n} {}: EIO", self.path.display()));
            return Err(eio("sync"));
        }
        let pending = std::mem::take(&mut f.pending);
        for (off, bytes) in pending {
            overlay(&mut f.durable, off, &bytes);
        }
        SimFs::record(&mut st, format!("{what} #{n} {}", self.path.display()));
        Ok(())
    }
}

impl FileIo for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = self.fs.state();
        SimFs::check_frozen(&st)?;
        let end = offset + buf.len() as u64;
        if st
            .read_errors
            .iter()
            .any(|(p, o)| p == &self.path && (offset..end).contains(o))
        {
            return Err(eio("latent read error"));
        }
        let data = &st.files[&self.id].data;
        if offset >= data.len() as u64 {
            return Ok(0);
        }
        let n = (data.len() - offset as usize).min(buf.len());
        buf[..n].copy_from_slice(&data[offset as usize..offset as usize + n]);
        Ok(n)
    }

    fn write_at(&self, data: &[u8], offset: u64, dsync: bool) -> io::Result<()> {
        self.write_inner(data, offset, dsync)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync_inner("fdatasync")
    }

    fn sync_all(&self) -> io::Result<()> {
        if self.id == 0 {
            return self.fs.sync_dir(&self.path);
        }
        self.sync_inner("fsync")
    }

    fn size(&self) -> io::Result<u64> {
        let st = self.fs.state();
        SimFs::check_frozen(&st)?;
        Ok(st.files.get(&self.id).map_or(0, |f| f.data.len() as u64))
    }

    fn preallocate(&self, len: u64) -> io::Result<()> {
        let mut st = self.fs.state();
        SimFs::check_frozen(&st)?;
        let cur = st.files[&self.id].data.len() as u64;
        if st
            .faults
            .capacity
            .is_some_and(|cap| SimFs::used(&st) + len.saturating_sub(cur) > cap)
        {
            SimFs::record(
                &mut st,
                format!("fallocate {} {len}: ENOSPC", self.path.display()),
            );
            return Err(enospc());
        }
        let f = st.files.get_mut(&self.id).expect("open file exists");
        if (f.data.len() as u64) < len {
            f.data.resize(len as usize, 0);
            f.durable.resize(len as usize, 0);
        }
        SimFs::record(&mut st, format!("fallocate {} {len}", self.path.display()));
        Ok(())
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut st = self.fs.state();
        SimFs::check_frozen(&st)?;
        match st.locks.get(&self.id) {
            Some(&h) if h != self.handle => Ok(false),
            _ => {
                st.locks.insert(self.id, self.handle);
                Ok(true)
            }
        }
    }

    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    // A hint has nothing to act on in memory. It is not an operation of
    // the simulated disk either: counting it would shift every later
    // fault a seed injects.
    fn advise(&self, _offset: u64, _len: u64, _advice: Advice) -> io::Result<()> {
        Ok(())
    }

    // The simulated disk makes a dsync write durable as it completes. Not
    // an operation either, for the same reason as `advise`.
    fn file_system(&self) -> io::Result<crate::file::FileSystem> {
        Ok(crate::file::FileSystem::SIMULATED)
    }

    fn demands_alignment(&self) -> bool {
        self.direct
    }
}

impl Vfs for SimFs {
    fn create_dir_all(&self, dir: &Path, mode: u32) -> io::Result<()> {
        let mut st = self.state();
        SimFs::check_frozen(&st)?;
        if !st.dirs.iter().any(|d| d == dir) {
            st.dirs.push(dir.to_path_buf());
            st.dir_modes.insert(dir.to_path_buf(), mode);
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.state();
        SimFs::check_frozen(&st)?;
        if !st.dirs.iter().any(|d| d == dir) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(st
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn open(&self, path: &Path, how: OpenHow) -> io::Result<VFile> {
        let mut st = self.state();
        SimFs::check_frozen(&st)?;
        let parent = path.parent().unwrap_or(Path::new("/"));
        if !st.dirs.iter().any(|d| d == parent) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let id = match st.names.get(path) {
            Some(_) if how.create_new => return Err(io::Error::from_raw_os_error(libc::EEXIST)),
            Some(&id) => id,
            None if how.create || how.create_new => {
                self.namespace_fault(&mut st, NsOp::Create, &format!("create {}", path.display()))?;
                let id = st.next_id;
                st.next_id += 1;
                let mode = how.mode.unwrap_or(PRIVATE_FILE_MODE);
                st.files.insert(
                    id,
                    FileState {
                        mode,
                        ..FileState::default()
                    },
                );
                st.names.insert(path.to_path_buf(), id);
                st.dir_log.push(DirOp::Create(path.to_path_buf(), id));
                SimFs::record(&mut st, format!("create {}", path.display()));
                id
            }
            None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        let handle = self.sh.handles.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(SimFile {
            fs: self.clone(),
            id,
            handle,
            path: path.to_path_buf(),
            direct: how.direct,
        }))
    }

    fn open_dir(&self, dir: &Path) -> io::Result<VFile> {
        let st = self.state();
        SimFs::check_frozen(&st)?;
        if !st.dirs.iter().any(|d| d == dir) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let handle = self.sh.handles.fetch_add(1, Ordering::Relaxed);
        // Id 0 marks a directory handle: its sync_all syncs the namespace.
        Ok(Arc::new(SimFile {
            fs: self.clone(),
            id: 0,
            handle,
            path: dir.to_path_buf(),
            direct: false,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        SimFs::check_frozen(&st)?;
        if !st.names.contains_key(from) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let line = format!("rename {} -> {}", from.display(), to.display());
        self.namespace_fault(&mut st, NsOp::Rename, &line)?;
        let id = st.names.remove(from).expect("checked above");
        st.names.insert(to.to_path_buf(), id);
        st.dir_log
            .push(DirOp::Rename(from.to_path_buf(), to.to_path_buf()));
        SimFs::record(&mut st, line);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        SimFs::check_frozen(&st)?;
        if !st.names.contains_key(path) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.namespace_fault(&mut st, NsOp::Unlink, &format!("unlink {}", path.display()))?;
        st.names.remove(path);
        st.dir_log.push(DirOp::Remove(path.to_path_buf()));
        SimFs::record(&mut st, format!("unlink {}", path.display()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state();
        SimFs::check_frozen(&st)?;
        st.syncs += 1;
        let n = st.syncs;
        let line = format!("dirsync #{n} {}", dir.display());
        let f = &st.faults;
        if f.fail_sync_at == Some(n) || chance(self.sh.seed, 3, n, f.sync_eio) {
            SimFs::record(&mut st, format!("{line}: EIO"));
            return Err(eio("directory sync"));
        }
        // The operations it would have covered stay in `dir_log`: after a
        // failed sync they may or may not be durable.
        self.namespace_fault(&mut st, NsOp::DirSync, &line)?;
        let log = std::mem::take(&mut st.dir_log);
        let (mine, rest): (Vec<DirOp>, Vec<DirOp>) =
            log.into_iter().partition(|op| op.dir() == dir);
        let mut names = std::mem::take(&mut st.durable_names);
        for op in &mine {
            op.apply(&mut names);
        }
        st.durable_names = names;
        st.dir_log = rest;
        SimFs::record(&mut st, line);
        Ok(())
    }

    fn is_real(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn how_new() -> OpenHow {
        OpenHow {
            write: true,
            create_new: true,
            ..OpenHow::default()
        }
    }

    #[test]
    fn durable_data_survives_and_unsynced_may_not() {
        let fs = SimFs::new(7, Faults::default());
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        let f = fs.open(&dir.join("a"), how_new()).unwrap();
        f.preallocate(8192).unwrap();
        f.write_at(&[1; 4096], 0, true).unwrap();
        f.write_at(&[2; 4096], 4096, false).unwrap();
        fs.sync_dir(dir).unwrap();
        // Over many crash draws the unsynced block is sometimes lost, torn
        // or kept; the DSYNC block always survives.
        let mut outcomes = std::collections::BTreeSet::new();
        for c in 0..64 {
            let after = fs.clone();
            let img = after.crash(c);
            let data = img.read_file(&dir.join("a")).unwrap();
            assert!(data[..4096].iter().all(|&b| b == 1));
            let twos = data[4096..].iter().filter(|&&b| b == 2).count();
            outcomes.insert(match twos {
                0 => "dropped",
                4096 => "kept",
                _ => "torn",
            });
        }
        assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    }

    #[test]
    fn namespace_needs_a_directory_sync() {
        let fs = SimFs::new(1, Faults::default());
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        let f = fs.open(&dir.join("a"), how_new()).unwrap();
        f.write_at(b"x", 0, true).unwrap();
        fs.sync_dir(dir).unwrap();
        fs.rename(&dir.join("a"), &dir.join("b")).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for c in 0..32 {
            let img = fs.clone().crash(c);
            seen.insert(img.list(dir).unwrap());
        }
        assert!(
            seen.contains(&vec!["a".to_string()]) && seen.contains(&vec!["b".to_string()]),
            "{seen:?}"
        );
        fs.sync_dir(dir).unwrap_err(); // frozen by the crashes above
    }

    #[test]
    fn failed_sync_loses_pending_writes_for_good() {
        let fs = SimFs::new(
            3,
            Faults {
                fail_sync_at: Some(1),
                ..Faults::default()
            },
        );
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        let f = fs.open(&dir.join("a"), how_new()).unwrap();
        f.write_at(&[9; 512], 0, false).unwrap();
        assert!(f.sync_data().is_err());
        f.sync_data().unwrap(); // a retry "succeeds"...
        fs.sync_dir(dir).unwrap();
        for c in 0..16 {
            let img = fs.clone().crash(c);
            // ...but the data it claims to cover is never durable.
            assert!(img
                .read_file(&dir.join("a"))
                .unwrap()
                .iter()
                .all(|&b| b == 0));
        }
        assert_eq!(fs.syncs(), 3);
    }

    fn failing(op: NsOp, n: u64) -> Faults {
        Faults {
            fail_namespace_at: Some((op, n)),
            ..Faults::default()
        }
    }

    #[test]
    fn a_failed_namespace_operation_changes_no_name() {
        let dir = Path::new("/d");
        let (a, b) = (dir.join("a"), dir.join("b"));
        let names = |fs: &SimFs| fs.list(dir).unwrap();

        let fs = SimFs::new(1, failing(NsOp::Create, 2));
        fs.create_dir_all(dir, 0o700).unwrap();
        fs.open(&a, how_new()).unwrap();
        // Opening an existing file with `create` creates nothing: uncounted.
        let again = OpenHow {
            write: true,
            create: true,
            ..OpenHow::default()
        };
        fs.open(&a, again).unwrap();
        assert_eq!(fs.namespace_ops(NsOp::Create), 1);
        let err = fs.open(&b, how_new()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert_eq!(names(&fs), ["a"]);
        fs.open(&b, how_new()).unwrap(); // the third create is not the second

        let fs = SimFs::new(1, failing(NsOp::Rename, 1));
        fs.create_dir_all(dir, 0o700).unwrap();
        fs.open(&a, how_new()).unwrap();
        // A rename of a missing name fails as always, uncounted.
        assert!(fs.rename(&b, &a).is_err());
        assert_eq!(fs.namespace_ops(NsOp::Rename), 0);
        assert!(fs.rename(&a, &b).is_err());
        assert_eq!(names(&fs), ["a"]);
        fs.rename(&a, &b).unwrap();
        assert_eq!(names(&fs), ["b"]);

        let fs = SimFs::new(1, failing(NsOp::Unlink, 1));
        fs.create_dir_all(dir, 0o700).unwrap();
        fs.open(&a, how_new()).unwrap();
        assert!(fs.remove_file(&a).is_err());
        assert_eq!(names(&fs), ["a"]);
        fs.remove_file(&a).unwrap();
        assert!(names(&fs).is_empty());
        assert_eq!(fs.namespace_ops(NsOp::Unlink), 2);
    }

    /// After a failed directory sync, what it would have covered is
    /// undecided: a crash keeps it or not.
    #[test]
    fn a_failed_directory_sync_leaves_the_names_undecided() {
        let fs = SimFs::new(2, failing(NsOp::DirSync, 2));
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        fs.open(&dir.join("a"), how_new()).unwrap();
        fs.sync_dir(dir).unwrap();
        fs.rename(&dir.join("a"), &dir.join("b")).unwrap();
        assert!(fs.sync_dir(dir).is_err());
        let mut seen = std::collections::BTreeSet::new();
        for c in 0..32 {
            seen.insert(fs.crash(c).list(dir).unwrap());
        }
        assert_eq!(seen.len(), 2, "{seen:?}");
        // Directory syncs count among all syncs as well.
        assert_eq!((fs.namespace_ops(NsOp::DirSync), fs.syncs()), (2, 2));
    }

    /// Which namespace operations fail is a function of the seed and each
    /// operation's number, the same on every run; `set_faults` aims at
    /// the next one.
    #[test]
    fn namespace_faults_follow_the_seed() {
        let run = |seed: u64| {
            let fs = SimFs::new(
                seed,
                Faults {
                    create_eio: 0.3,
                    rename_eio: 0.3,
                    unlink_eio: 0.3,
                    dir_sync_eio: 0.3,
                    ..Faults::default()
                },
            );
            let dir = Path::new("/d");
            fs.create_dir_all(dir, 0o700).unwrap();
            let mut failed = Vec::new();
            for i in 0..40 {
                let (a, b) = (dir.join(format!("a{i}")), dir.join(format!("b{i}")));
                failed.push(fs.open(&a, how_new()).is_err());
                failed.push(fs.rename(&a, &b).is_err());
                failed.push(fs.remove_file(&b).is_err() && fs.remove_file(&a).is_err());
                failed.push(fs.sync_dir(dir).is_err());
            }
            failed
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
        assert!(run(11).iter().any(|&f| f) && !run(11).iter().all(|&f| f));

        let fs = SimFs::new(3, Faults::default());
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        fs.open(&dir.join("a"), how_new()).unwrap();
        let next = fs.namespace_ops(NsOp::Rename) + 1;
        fs.set_faults(failing(NsOp::Rename, next));
        assert!(fs.rename(&dir.join("a"), &dir.join("b")).is_err());
        fs.rename(&dir.join("a"), &dir.join("b")).unwrap();
    }

    #[test]
    fn capacity_gives_enospc_and_locks_are_exclusive() {
        let fs = SimFs::new(
            5,
            Faults {
                capacity: Some(10_000),
                ..Faults::default()
            },
        );
        let dir = Path::new("/d");
        fs.create_dir_all(dir, 0o700).unwrap();
        let f = fs.open(&dir.join("a"), how_new()).unwrap();
        f.preallocate(8192).unwrap();
        assert_eq!(
            f.preallocate(16384).unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        let g = fs
            .open(
                &dir.join("a"),
                OpenHow {
                    write: true,
                    ..OpenHow::default()
                },
            )
            .unwrap();
        assert!(f.try_lock().unwrap());
        assert!(!g.try_lock().unwrap());
        drop(f);
        assert!(g.try_lock().unwrap());
    }
}
