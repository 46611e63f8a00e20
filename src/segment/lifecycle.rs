//! The life of a segment on the write side, in order: a spare is prepared
//! ahead of need (fresh, or recycled from a checkpointed segment), gets a
//! header with its salt and is installed under its name, takes batches,
//! is sealed with a zero block when the ring rolls past it, and is retired
//! by a checkpoint (unlinked, or renamed to a spare name to live again).
//!
//! The preparer thread that makes the spares lives here too. Paths come
//! only from [`LogDir`]; nothing here knows the engine's shared state, so
//! the reservation, the ring and the handle can all use it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use ringwal_platform::file::{FileSystem, FsKind};
use ringwal_platform::{AlignedBuf, FileIo, Op, VFile, Vfs, WriteSync};

use crate::at_rest::crypt::Cipher;
use crate::at_rest::format::{self, Manifest, SegmentHeader};
use crate::config::{Config, DirectIo, SyncMethod};
use crate::error::{Error, Lsn, Result};
use crate::segment::manifest;
use crate::segment::set::{open_file, LogDir, SegmentFile};

/// Checkpointed segments kept for reuse as spares (see `Wal::checkpoint`).
/// Four: enough to cover the rolls between two checkpoints of a log that
/// checkpoints often, and at most four segments of disk held back.
pub(crate) const RECYCLE_KEEP: usize = 4;

/// Offset added to a checkpointed segment's base LSN to name it as a
/// recycled spare: above every LSN, so it never collides with the
/// preparer's own sequence numbers.
pub(crate) const RECYCLED_SEQ: u64 = 1 << 62;
// A retired segment's spare number, RECYCLED_SEQ + its base, neither
// overflows nor meets the preparer's numbers, which count up from 1.
const _: () = assert!(RECYCLED_SEQ.checked_add(format::MAX_LSN).is_some());

/// The write size from which a write is bound by the device's bandwidth
/// rather than its per-write flush (512 KiB take about 170 µs to transfer
/// at 3 GB/s, twice a durable 4 KiB write). Two decisions follow it: a
/// partial batch this large goes to the device without waiting for more
/// records (`Reservation::take_batch`), and spares are preallocated
/// without being zero-written (`Fill::Allocate`) once the average batch
/// write is this large: zero-writing every segment first halves the
/// bandwidth of such writes, while small writes are bound by flushes,
/// each of which an unwritten extent would turn into a journal commit. Measured with fio on this project's
/// virtio disk (ext4, O_DIRECT + O_DSYNC, 4 in flight): 1 MiB writes ran at
/// 0.7-0.95x the bandwidth on unwritten extents that they did on written
/// ones, while 4 KiB writes at one in flight ran at half the rate.
pub(crate) const LARGE_WRITE_BYTES: u64 = 512 << 10;
// A large write is whole blocks, and at least one large enough that its
// transfer is worth more than a cache flush.
const _: () = assert!(
    LARGE_WRITE_BYTES.is_multiple_of(format::BLOCK as u64)
        && LARGE_WRITE_BYTES >= 16 * format::BLOCK as u64
);

/// A fresh salt for one segment.
///
/// Drawn exactly once per segment: by the reservation when it decides a
/// roll (the segment's frames are sealed with it before the segment has a
/// header), or at open for a log's first segment. The header carries that
/// same salt; a second draw would make every frame of the segment invalid.
///
/// From the OS's random source (one `getrandom` call). Should that ever
/// fail, the time in nanoseconds stands in: a salt only has to differ from
/// the salts of the file's earlier lives, which it does.
pub(crate) fn new_salt() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5a17, |d| d.as_nanos() as u64)
    })
}

/// Milliseconds since the Unix epoch now, the clock segment headers
/// record their creation in (0 on a clock set before 1970).
pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall-clock time now in nanoseconds since the Unix epoch, what a
/// version-3 vouch carries: 0 for a clock set before the epoch, the
/// largest `u64` past the year 2554. Cost: one `clock_gettime`
/// (`CLOCK_REALTIME`, answered by the vDSO without a syscall: about 20 ns).
pub(crate) fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The header of a new segment of log `log_id` whose first record is
/// `base`, under this writer's configuration, sealed with `salt` (see
/// [`new_salt`]) and, when `cipher` is given, encrypted with its key
/// (the header names the key and carries its key check), in the current
/// format version. Cost: one AEAD call when encrypted.
pub(crate) fn new_header(
    cfg: &Config,
    base: Lsn,
    salt: u64,
    log_id: u64,
    cipher: Option<&Cipher>,
) -> SegmentHeader {
    assert!(
        (1..=format::MAX_LSN).contains(&base),
        "a segment's base is an LSN recovery accepts"
    );
    assert!(
        cfg.segment_bytes.is_multiple_of(format::BLOCK as u64)
            && cfg.segment_bytes >= format::MIN_SEGMENT_BYTES,
        "a segment is whole blocks, at least the format's minimum"
    );
    let created_unix_ms = now_unix_ms();
    SegmentHeader {
        version: format::FORMAT_VERSION,
        log_id,
        key_id: cipher.map_or(0, |c| c.id()),
        key_check: cipher.map_or(0, |c| c.key_check(log_id, salt)),
        node: cfg.node,
        base_lsn: base,
        segment_bytes: cfg.segment_bytes,
        salt,
        created_unix_ms,
        torn_window: cfg.torn_window(),
    }
}

/// How writes to `file` are made durable: `configured`, except that
/// `Dsync` becomes `WriteThenFdatasync` where the file's file system is
/// not known to honour `RWF_DSYNC` (FUSE completes such a write without
/// ever syncing it). A file system that could not be looked at is
/// `FsKind::Other`, which is not trusted: the explicit sync is correct
/// everywhere, only slower. Cost: none (the caller looked once).
pub(crate) fn sync_method_for(configured: SyncMethod, fs: &FileSystem) -> SyncMethod {
    match configured {
        SyncMethod::Dsync if !fs.honours_dsync() => {
            crate::obs::trace::event!(
                warn,
                "RWF_DSYNC not trusted on this file system: write + fdatasync instead"
            );
            SyncMethod::WriteThenFdatasync
        }
        configured => configured,
    }
}

/// The queue's mode for a write that must be durable when it completes.
pub(crate) fn durable_sync(method: SyncMethod) -> WriteSync {
    match method {
        SyncMethod::Dsync => WriteSync::Dsync,
        // A header or a seal is durable by itself in every method.
        SyncMethod::WriteThenFdatasync | SyncMethod::Grouped => WriteSync::ThenSync,
    }
}

/// Run `write`, told whether to write with `RWF_DSYNC`, so that what it
/// wrote to `file` is on stable storage when this returns: `RWF_DSYNC`
/// writes, or plain writes and one `fdatasync`, as `method` says (the
/// split [`durable_sync`] decides for the ring's queue). Cost: what
/// `write` costs, plus one `fdatasync` for the second.
fn durably(
    file: &dyn FileIo,
    method: SyncMethod,
    write: impl FnOnce(bool) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dsync = durable_sync(method) == WriteSync::Dsync;
    write(dsync)?;
    if !dsync {
        file.sync_data()?;
    }
    Ok(())
}

/// Write `data` at `offset`, on stable storage when this returns (see
/// [`durably`]). Cost: one device round trip (two syscalls without
/// `RWF_DSYNC`).
fn write_durably(
    file: &dyn FileIo,
    data: &[u8],
    offset: u64,
    method: SyncMethod,
) -> std::io::Result<()> {
    durably(file, method, |dsync| file.write_at(data, offset, dsync))
}

/// A block-aligned buffer holding every header block of `header` (in
/// version 2, the header and its copy), ready for an O_DIRECT write.
fn header_block(header: &SegmentHeader) -> AlignedBuf {
    debug_assert!(
        header.header_bytes().is_multiple_of(format::BLOCK as u64),
        "a header is written as whole blocks"
    );
    let mut block = AlignedBuf::new(header.header_bytes() as usize);
    header.encode_blocks(block.as_mut_slice());
    block
}

/// Make a spare the segment at `path`: write `header` over its blank
/// first block durably, then rename it. In that order, so a file never
/// has a segment's name without its header (recovery then knows a blank
/// header in front of data for damage). The caller syncs the directory
/// before anything in the segment is written. `method` is how the log
/// makes writes durable (see [`sync_method_for`]).
///
/// Cost: one durable 4 KiB write and one rename, on the calling thread.
pub(crate) fn install_spare(
    vfs: &dyn Vfs,
    spare: &Spare,
    header: &SegmentHeader,
    path: &Path,
    method: SyncMethod,
) -> Result<()> {
    let block = header_block(header);
    write_durably(&*spare.file, block.as_slice(), 0, method)
        .map_err(|e| Error::io(&spare.path, e))?;
    name_spare(vfs, spare, path)
}

/// The durable write of `header` over a spare's blank header blocks, as
/// an operation for the ring's queue: the first half of
/// [`install_spare`], for a ring that writes the next segment's header
/// while the current segment's last writes are still in flight. The
/// spare keeps its spare name until [`name_spare`], so a crash before
/// then leaves a file recovery discards whatever it holds.
pub(crate) fn header_op(spare: &Spare, header: &SegmentHeader, method: SyncMethod) -> Op {
    let buf = header_block(header);
    let len = buf.capacity();
    Op::Write {
        file: spare.file.clone(),
        buf,
        len,
        offset: 0,
        sync: durable_sync(method),
    }
}

/// Give a spare whose header is durable the segment name `path` (the
/// second half of [`install_spare`]). The caller syncs the directory
/// before anything in the segment is written. Cost: one rename.
pub(crate) fn name_spare(vfs: &dyn Vfs, spare: &Spare, path: &Path) -> Result<()> {
    vfs.rename(&spare.path, path)
        .map_err(|e| Error::io(path, e))
}

/// Create a segment of log `log_id` whose first record is `base`,
/// synchronously and durably, for `Wal::open`: the first of an empty log,
/// or one a point-in-time recovery opens with a skip.
pub(crate) fn create_segment(
    dir: &LogDir,
    cfg: &Config,
    base: Lsn,
    log_id: u64,
    cipher: Option<&Cipher>,
) -> Result<(SegmentFile, SegmentHeader)> {
    let spare = prepare_spare(
        &*cfg.vfs,
        dir,
        0,
        cfg.segment_bytes,
        cfg.direct_io,
        Fill::Zeros,
        &|| false,
    )?;
    let header = new_header(cfg, base, new_salt(), log_id, cipher);
    let seg = dir.segment(base);
    // Unknown if the look fails, which trusts nothing.
    let fs = spare
        .file
        .file_system()
        .unwrap_or(FileSystem::of(FsKind::Other));
    let method = sync_method_for(cfg.sync_method, &fs);
    install_spare(&*cfg.vfs, &spare, &header, &seg.path, method)?;
    cfg.vfs
        .sync_dir(dir.path())
        .map_err(|e| Error::io(dir.path(), e))?;
    Ok((seg, header))
}

/// The segment the ring writes to: where its next batch goes, and what
/// is left to do before the ring may leave it.
pub(crate) struct ActiveSegment {
    pub base: Lsn,
    /// Which segment of this log's life (see `Batch::seg_id`).
    pub id: u64,
    pub file: VFile,
    /// Its salt and format version (a version-1 segment left active by
    /// recovery gets no vouch at close: version 1 has none).
    salt: u64,
    version: u32,
    /// Written (not durable) bytes since the last sync of this segment.
    pub dirty: bool,
    /// End of the last write (where the next batch would go), the file's
    /// size, and whether the zero block that seals it has been written.
    end: u64,
    size: u64,
    sealed: bool,
    /// A recycled file, whose bytes past `end` may be an earlier life's.
    recycled: bool,
    /// Whether every byte past `end` is known to read back as zero: a
    /// fresh spare this process made (zero-written or fallocated). Not
    /// known of a segment resumed after recovery (it may have been a
    /// recycled file in an earlier life) nor of a recycled one.
    zeros_past_end: bool,
}

impl ActiveSegment {
    /// The segment recovery left active, written up to `write_at`.
    pub fn resumed(header: &SegmentHeader, file: VFile, write_at: u64) -> ActiveSegment {
        assert!(
            (write_at.is_multiple_of(format::BLOCK as u64) || write_at == header.segment_bytes)
                && (header.frames_start()..=header.segment_bytes).contains(&write_at),
            "writes resume on a block boundary after the header, inside the segment"
        );
        ActiveSegment {
            base: header.base_lsn,
            id: 0,
            file,
            salt: header.salt,
            version: header.version,
            dirty: false,
            end: write_at,
            size: header.segment_bytes,
            sealed: false,
            // Unknown after a reopen; recovery then zeroed the window
            // behind any torn tail, and at worst the next open cuts stale
            // bytes as one.
            recycled: false,
            zeros_past_end: false,
        }
    }

    /// A spare just installed as segment `id` under `header`.
    pub fn installed(header: &SegmentHeader, id: u64, spare: Spare) -> ActiveSegment {
        ActiveSegment {
            base: header.base_lsn,
            id,
            file: spare.file,
            salt: header.salt,
            version: header.version,
            dirty: false,
            end: header.frames_start(),
            size: header.segment_bytes,
            sealed: false,
            recycled: spare.recycled,
            zeros_past_end: !spare.recycled,
        }
    }

    /// The segment's format version, which fixes the shape of its vouches.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Record a batch write of `len` bytes at `offset`.
    ///
    /// Asserts what O_DIRECT and invariant 7 (no acknowledged byte is
    /// rewritten) need: whole blocks, at or past the end of the last
    /// write, inside the file. Cost: a few integer operations per batch.
    pub fn wrote(&mut self, offset: u64, len: usize) {
        let block = format::BLOCK as u64;
        assert!(
            offset.is_multiple_of(block) && (len as u64).is_multiple_of(block),
            "batch write at {offset}+{len} is not block-aligned"
        );
        assert!(
            offset >= self.end,
            "batch write at {offset} goes back over the segment's end {}",
            self.end
        );
        let end = offset + len as u64;
        assert!(
            end <= self.size,
            "batch write ends at {end}, past the segment's {} bytes",
            self.size
        );
        self.end = end;
    }

    /// The zero block that seals this segment right after its last batch,
    /// once (`None` if already sealed or there is no room for it).
    ///
    /// The segment may be a recycled file with an earlier life's frames
    /// past its end. A zero block right after the last batch ends it for
    /// recovery, which reads older segments strictly (anything but a zero
    /// frame after the data is corruption). The ring makes it durable
    /// (the way `method` says) before the next segment gets its first
    /// write.
    ///
    /// Skipped in a fresh spare, whose bytes past the end already read
    /// back as zeros: it saved a durable 4 KiB write (about 80 us on the
    /// measured disk) from every roll of such a segment.
    pub fn seal(&mut self, method: SyncMethod) -> Option<Op> {
        if self.sealed {
            return None;
        }
        self.sealed = true;
        if self.zeros_past_end || self.end + format::BLOCK as u64 > self.size {
            return None;
        }
        assert!(
            self.end.is_multiple_of(format::BLOCK as u64),
            "the seal lands on a block boundary"
        );
        Some(Op::Write {
            file: self.file.clone(),
            buf: AlignedBuf::new(format::BLOCK),
            len: format::BLOCK,
            offset: self.end,
            sync: durable_sync(method),
        })
    }

    /// On a clean close: one block right after the last batch holding a
    /// vouch for `durable` (every LSN acknowledged), durably, so that no
    /// damage anywhere in the segment can pass for a torn tail: a cleanly
    /// closed log has no ambiguous end. In the segment's own version's
    /// shape (an open may close a version-2 segment it never wrote to):
    /// from version 3 it carries the close time, from version 4 the
    /// writer's `nonce_salt` too (it opens no records; the shape is the
    /// version's). Skipped in a version-1 segment and when no block is
    /// left (a full segment's end is not ambiguous). Cost: one durable
    /// 4 KiB write (`method`: see [`sync_method_for`]) and, from version
    /// 3, one read of the clock.
    pub fn close_vouch(
        &mut self,
        durable: Lsn,
        nonce_salt: u64,
        method: SyncMethod,
    ) -> std::io::Result<()> {
        let block = format::BLOCK as u64;
        if self.version < 2 || self.end + block > self.size {
            return Ok(());
        }
        assert!(
            self.end.is_multiple_of(block),
            "the closing vouch lands on a block boundary"
        );
        let mut buf = AlignedBuf::new(format::BLOCK);
        let b = buf.as_mut_slice();
        let vouch = format::Vouch {
            durable,
            submitted_unix_ns: (self.version >= 3).then(now_unix_ns),
            nonce_salt: (self.version >= 4).then_some(nonce_salt),
        };
        let n = format::encode_vouch(b, self.salt, vouch);
        debug_assert_eq!(n, format::vouch_len(self.version));
        format::encode_padding(&mut b[n..], self.salt, format::BLOCK - n);
        write_durably(&*self.file, buf.as_slice(), self.end, method)?;
        self.end += block;
        Ok(())
    }

    /// On a clean close in a recycled segment: zero `torn_window` bytes
    /// past the end, durably, so the next open finds a clean end (a zero
    /// frame with nothing but zeros behind it for as far as a crash could
    /// have written) instead of stale bytes it would cut as a torn tail.
    /// Nothing to do in a fresh segment, whose blocks read back as zeros.
    pub fn clear_torn_window(&self, torn_window: u64, method: SyncMethod) -> std::io::Result<()> {
        if !self.recycled {
            return Ok(());
        }
        let to = (self.end + torn_window)
            .next_multiple_of(format::BLOCK as u64)
            .min(self.size);
        durably(&*self.file, method, |dsync| {
            write_zeros(&*self.file, self.end, to, dsync)
        })
    }
}

/// Checkpointed segments renamed to spare names (durably), waiting for the
/// preparer to reuse them; at most [`RECYCLE_KEEP`].
#[derive(Default)]
pub(crate) struct RecyclePool {
    files: Mutex<Vec<PathBuf>>,
}

impl RecyclePool {
    fn files(&self) -> MutexGuard<'_, Vec<PathBuf>> {
        // Every critical section is one push, pop or take of the vector.
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many more files the pool takes.
    pub fn room(&self) -> usize {
        RECYCLE_KEEP.saturating_sub(self.files().len())
    }

    /// Hand over files whose spare names are durable already: before,
    /// a crash could bring back the old name over new contents.
    pub fn add(&self, paths: Vec<PathBuf>) {
        let mut files = self.files();
        files.extend(paths);
        // Only the checkpoint turn adds, within the room it asked for.
        assert!(
            files.len() <= RECYCLE_KEEP,
            "the recycle pool stays bounded"
        );
    }

    fn take(&self) -> Option<PathBuf> {
        self.files().pop()
    }

    /// Delete every file still waiting (the log is closing).
    fn clear(&self, vfs: &dyn Vfs) {
        for path in std::mem::take(&mut *self.files()) {
            let _ = vfs.remove_file(&path);
        }
    }
}

/// Retire one checkpointed segment: renamed to a recycled spare name if
/// `keep` (returned, for [`RecyclePool::add`] once the caller made the
/// rename durable), else unlinked.
pub(crate) fn retire(
    vfs: &dyn Vfs,
    dir: &LogDir,
    seg: &SegmentFile,
    keep: bool,
) -> Result<Option<PathBuf>> {
    if keep {
        let to = dir.spare(RECYCLED_SEQ + seg.base);
        vfs.rename(&seg.path, &to)
            .map_err(|e| Error::io(&seg.path, e))?;
        Ok(Some(to))
    } else {
        vfs.remove_file(&seg.path)
            .map_err(|e| Error::io(&seg.path, e))?;
        Ok(None)
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

/// Create a spare of `bytes` bytes: preallocate, write zeros over it from
/// the front when `fill` says so, and fdatasync (which also makes the
/// allocation itself durable).
///
/// `hurry` is asked before each 1 MiB of zeros: once it says true the
/// zeros stop where they are and the spare is finished as it stands. A
/// spare zero-written only in part is still a spare (every block reads
/// back as zeros, written or not); only the flushes of small writes into
/// its unwritten part cost more. The ring needs a spare sooner than the
/// zeros take only when it fills segments faster than the device writes
/// zeros, i.e. under large writes, for which [`Fill::Allocate`] is the
/// right preparation anyway. Measured before the hurry existed: the first
/// roll of a 1 MiB-record log waited 10-20 ms for 64 MiB of zeros.
///
/// Cost: one `fallocate` and one `fdatasync`, plus up to `bytes` bytes of
/// zeros with [`Fill::Zeros`]; runs on the preparer thread or at open,
/// never on the append path.
pub(crate) fn prepare_spare(
    vfs: &dyn Vfs,
    dir: &LogDir,
    seq: u64,
    bytes: u64,
    policy: DirectIo,
    fill: Fill,
    hurry: &dyn Fn() -> bool,
) -> Result<Spare> {
    let path = dir.spare(seq);
    let (file, _) = open_file(vfs, &path, Some(dir), policy)?;
    let fail = |e| {
        let _ = vfs.remove_file(&path);
        Error::io(&path, e)
    };
    file.preallocate(bytes).map_err(fail)?;
    if fill == Fill::Zeros {
        write_zeros_until(&*file, 0, bytes, false, hurry).map_err(fail)?;
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
    file: &dyn FileIo,
    from: u64,
    to: u64,
    dsync: bool,
) -> std::io::Result<()> {
    write_zeros_until(file, from, to, dsync, &|| false)
}

/// [`write_zeros`], stopping early, between two writes, once `stop` says
/// true.
fn write_zeros_until(
    file: &dyn FileIo,
    from: u64,
    to: u64,
    dsync: bool,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<()> {
    let zeros = AlignedBuf::new(1 << 20);
    let mut off = from;
    while off < to && !stop() {
        let n = ((to - off) as usize).min(zeros.capacity());
        file.write_at(&zeros.as_slice()[..n], off, dsync)?;
        off += n as u64;
    }
    Ok(())
}

/// Turn a recycled file (a checkpointed segment already renamed to a spare
/// name, durably) into a spare of `bytes` bytes: blank its header block,
/// durably. Its other blocks keep the previous life's frames, which were
/// sealed with another salt and so never validate in the next one.
///
/// Blanking comes first so that a spare never carries an old header: a
/// file with a spare's name is discarded whatever it holds, and a
/// segment's name is given only after the new header is durable.
///
/// Cost: one durable 4 KiB write, instead of writing the whole
/// segment. Fails (and the caller makes a fresh spare instead) when the
/// file is not `bytes` long.
pub(crate) fn recycle_spare(
    vfs: &dyn Vfs,
    path: &Path,
    bytes: u64,
    policy: DirectIo,
    method: SyncMethod,
) -> Result<Spare> {
    let (file, _) = open_file(vfs, path, None, policy)?;
    let io = |e| Error::io(path, e);
    let size = file.size().map_err(io)?;
    if size != bytes {
        return Err(Error::io(
            path,
            std::io::Error::other(format!("recycled file is {size} bytes, not {bytes}")),
        ));
    }
    // Both the header block and its copy's: a copy left behind would be
    // read in place of a damaged new header.
    let blank = AlignedBuf::new(format::HEADER_BYTES);
    write_durably(&*file, blank.as_slice(), 0, method).map_err(io)?;
    Ok(Spare {
        path: path.to_path_buf(),
        file,
        recycled: true,
    })
}

/// What the ring asks of the preparer thread.
enum Request {
    /// Make the next spare, filled so.
    Spare(Fill),
    /// A segment was installed: raise the manifest to this. Done before
    /// the next spare is prepared, so it waits on no zero-writing.
    Manifest(Manifest),
}

/// The preparer's next spare, the `seq`th it makes: a file from the
/// recycle pool when one is there and can be reused (one that cannot is
/// removed), else a new one filled with `fill`, finished at once when
/// `hurry` is set.
fn next_spare(
    cfg: &Config,
    dir: &LogDir,
    pool: &RecyclePool,
    seq: u64,
    fill: Fill,
    method: SyncMethod,
    hurry: &AtomicBool,
) -> Result<Spare> {
    let recycled = pool.take().and_then(|path| {
        let s = recycle_spare(&*cfg.vfs, &path, cfg.segment_bytes, cfg.direct_io, method);
        if s.is_err() {
            let _ = cfg.vfs.remove_file(&path);
        }
        s.ok()
    });
    match recycled {
        Some(spare) => Ok(spare),
        None => prepare_spare(
            &*cfg.vfs,
            dir,
            seq,
            cfg.segment_bytes,
            cfg.direct_io,
            fill,
            &|| hurry.load(Ordering::Acquire),
        ),
    }
}

/// The preparer thread, which makes one spare segment ahead of need and
/// brings the manifest up to date after each roll, off every hot path;
/// and the ring's end of its two channels.
pub(crate) struct Preparer {
    requests: Option<Sender<Request>>,
    spares: Receiver<Result<Spare>>,
    thread: Option<JoinHandle<()>>,
    /// Set while the ring waits in [`take`](Self::take): a spare still
    /// being zero-written is then finished at once (see [`prepare_spare`]).
    hurry: Arc<AtomicBool>,
    /// Batch writes and their bytes as counted at the last spare request.
    fill_mark: (u64, u64),
    dir: LogDir,
    vfs: Arc<dyn Vfs>,
    pool: Arc<RecyclePool>,
}

impl Preparer {
    /// Start the thread and ask it for the first spare: a recycled file
    /// when the pool holds one, else a new one. A manifest write that
    /// fails is handed to `failed` (the ring poisons the log with it).
    /// `method` is how the log makes writes durable (a recycled file's
    /// header is blanked durably).
    pub fn spawn(
        cfg: &Config,
        dir: &LogDir,
        pool: Arc<RecyclePool>,
        manifest: Arc<manifest::Keeper>,
        failed: Box<dyn Fn(Error) + Send>,
        method: SyncMethod,
    ) -> Preparer {
        let (req_tx, req_rx) = crossbeam_channel::unbounded::<Request>();
        let (out_tx, out_rx) = crossbeam_channel::bounded::<Result<Spare>>(1);
        let hurry = Arc::new(AtomicBool::new(false));
        let thread = {
            let (dir, cfg, pool, hurry) = (dir.clone(), cfg.clone(), pool.clone(), hurry.clone());
            std::thread::Builder::new()
                .name(format!("ringwal-prep-{}", cfg.node))
                .spawn(move || {
                    let mut seq = 1u64;
                    while let Ok(req) = req_rx.recv() {
                        let fill = match req {
                            Request::Spare(fill) => fill,
                            Request::Manifest(m) => {
                                if let Err(e) = manifest.raise_or_hand_over(m) {
                                    failed(e);
                                }
                                continue;
                            }
                        };
                        let s = next_spare(&cfg, &dir, &pool, seq, fill, method, &hurry);
                        seq += 1;
                        if out_tx.send(s).is_err() {
                            break;
                        }
                    }
                })
                .expect("spawn preparer thread")
        };
        // Nothing is known about the workload yet: assume small writes, for
        // which an unwritten extent costs the most.
        let _ = req_tx.send(Request::Spare(Fill::Zeros));
        Preparer {
            requests: Some(req_tx),
            spares: out_rx,
            thread: Some(thread),
            hurry,
            fill_mark: (0, 0),
            dir: dir.clone(),
            vfs: cfg.vfs.clone(),
            pool,
        }
    }

    /// The prepared spare if it is ready now, without waiting: `None`
    /// when it is not, and the preparer is then told to finish it as it
    /// stands (see [`take`](Self::take)). Cost: one channel check.
    pub fn try_take(&mut self) -> Result<Option<Spare>> {
        if self.spares.is_empty() {
            self.hurry.store(true, Ordering::Release);
            return Ok(None);
        }
        // This thread is the only receiver: the answer waiting is taken
        // without blocking (only a lack of space asks for another).
        self.take().map(Some)
    }

    /// The prepared spare. One that failed for lack of space is asked for
    /// once more: it may have been prepared long ago, and a checkpoint may
    /// have freed space since. The next one is asked for by
    /// [`installed`](Self::installed).
    pub fn take(&mut self) -> Result<Spare> {
        // A spare still being zero-written is finished as it stands: the
        // zeros only ever save later flushes work, never worth a stall.
        self.hurry.store(true, Ordering::Release);
        let got = self.take_ready();
        // Only one request is outstanding and it was just answered, so
        // the next spare (asked for by `installed`) starts unhurried.
        self.hurry.store(false, Ordering::Release);
        got
    }

    fn take_ready(&mut self) -> Result<Spare> {
        let mut retried = false;
        loop {
            let got = self.spares.recv().map_err(|_| {
                Error::io(
                    self.dir.path(),
                    std::io::Error::other("segment preparer stopped"),
                )
            })?;
            match got {
                Err(Error::NoSpace { .. }) if !retried => {
                    retried = true;
                    self.send(Request::Spare(Fill::Zeros));
                }
                other => return other,
            }
        }
    }

    /// The spare taken last is installed: have the manifest raised to `m`,
    /// then the next spare made, prepared as the batch writes and bytes
    /// written so far (`totals`) suggest.
    pub fn installed(&mut self, m: Manifest, totals: (u64, u64)) {
        self.send(Request::Manifest(m));
        let fill = self.next_fill(totals);
        self.send(Request::Spare(fill));
    }

    fn send(&self, req: Request) {
        if let Some(tx) = &self.requests {
            // The thread only stops when this end is dropped.
            let _ = tx.send(req);
        }
    }

    /// How to prepare the next spare, judged by the average size of the
    /// batch writes since the last request (see `LARGE_WRITE_BYTES`).
    fn next_fill(&mut self, now: (u64, u64)) -> Fill {
        let (writes, bytes) = (now.0 - self.fill_mark.0, now.1 - self.fill_mark.1);
        self.fill_mark = now;
        if writes > 0 && bytes / writes >= LARGE_WRITE_BYTES {
            Fill::Allocate
        } else {
            Fill::Zeros
        }
    }

    /// Stop the thread and delete the spares it made but nobody used, and
    /// the recycled files still waiting. At most one request is
    /// outstanding, so this waits for at most one spare in preparation.
    pub fn stop(&mut self) {
        self.requests = None;
        while let Ok(s) = self.spares.recv() {
            if let Ok(s) = s {
                let _ = self.vfs.remove_file(&s.path);
            }
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        self.pool.clear(&*self.vfs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringwal_platform::RealFs;
    use std::cell::Cell;

    /// A spare asked for while its zeros are being written is finished
    /// where the zeros stand, full size, reading back as zeros throughout.
    #[test]
    fn a_hurried_spare_stops_its_zeros_and_is_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let vfs = RealFs::shared();
        let dir = LogDir::new(tmp.path(), 0);
        let bytes = 8 << 20;
        let asked = Cell::new(0);
        // Not hurried before the first 1 MiB of zeros, hurried after it.
        let hurry = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        let spare =
            prepare_spare(&*vfs, &dir, 1, bytes, DirectIo::Off, Fill::Zeros, &hurry).unwrap();
        assert_eq!(asked.get(), 2, "one chunk of zeros, then the stop");
        assert_eq!(spare.file.size().unwrap(), bytes);
        assert!(!spare.recycled);
        let mut tail = vec![0xaau8; format::BLOCK];
        spare
            .file
            .read_at(&mut tail, bytes - format::BLOCK as u64)
            .unwrap();
        assert!(
            tail.iter().all(|&b| b == 0),
            "unwritten blocks read as zeros"
        );

        // Unhurried, every chunk is written; preallocated only, none is.
        asked.set(0);
        let calm = || {
            asked.set(asked.get() + 1);
            false
        };
        prepare_spare(&*vfs, &dir, 2, bytes, DirectIo::Off, Fill::Zeros, &calm).unwrap();
        assert_eq!(asked.get(), 8, "asked once before each of the eight chunks");
        asked.set(0);
        prepare_spare(&*vfs, &dir, 3, bytes, DirectIo::Off, Fill::Allocate, &calm).unwrap();
        assert_eq!(asked.get(), 0);
    }
}
