//! A log built from its archive alone: each object fetched, checked
//! against the archive manifest (length, CRC) and walked frame by frame,
//! written as the segment it was, cut at the point asked for; then a
//! manifest promising what was restored and handed-out LSNs that make a
//! writer opening it resume above everything the archive ever held.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ringwal_platform::{AlignedBuf, OpenHow, Vfs};

use crate::archive::mem::OneFile;
use crate::archive::ship::round_up;
use crate::archive::store::{Names, Store};
use crate::archive::walk::{self, End};
use crate::at_rest::format::{self, ArchiveManifest, ArchivedSegment, Manifest, SegmentHeader};
use crate::config::{Config, DirectIo};
use crate::error::{ArchiveProblem, Error, Lsn, Result};
use crate::scan;
use crate::segment::manifest;
use crate::segment::set::{self as segments, LogDir, SegmentFile};

/// Where a restore stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreTo {
    /// Everything the archive holds, its tail included.
    End,
    /// The records up to this LSN (an atomic batch it falls inside is
    /// left out whole).
    Lsn(Lsn),
    /// The records written at or before this time (by their writes'
    /// times, format version 3; a record with no time recorded counts as
    /// written before it).
    Time(std::time::SystemTime),
}

/// What a restore built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restored {
    /// Segment files written.
    pub segments: usize,
    /// Bytes fetched from the store.
    pub bytes: u64,
    /// The first LSN of the restored log.
    pub first_lsn: Lsn,
    /// Its last LSN (0: none).
    pub last_lsn: Lsn,
    /// LSNs given up: above the restored log, up to the highest LSN the
    /// archive ever held or its writer handed out. A writer opening the
    /// log resumes above them.
    pub given_up: Option<(Lsn, Lsn)>,
}

/// Segments restored at once: the device takes large writes best several
/// in flight (1 MiB writes: ~4 GB/s at 4 in flight against ~1.3 GB/s at
/// one, on the machine docs/benchmarks.md describes), and each worker
/// also fetches its object. Measured on a 4.3 GB archive: four workers
/// 0.69x a full recovery's rate, three 0.66x, within the noise.
const RESTORE_WORKERS: usize = 3;

/// Bytes of one O_DIRECT write of a restored segment: a few large writes
/// per segment, and one aligned copy buffer per worker.
const WRITE_CHUNK: usize = 8 << 20;

/// A restore in progress: the files it made, removed again if it fails.
pub(crate) struct Builder<'a> {
    pub store: &'a Store,
    pub names: Names,
    pub vfs: Arc<dyn Vfs>,
    pub dir: LogDir,
    pub direct: DirectIo,
    pub created: Mutex<Vec<PathBuf>>,
}

impl<'a> Builder<'a> {
    /// A restore of `cfg`'s node into `dir` from `store`; nothing made yet.
    pub fn new(store: &'a Store, dir: &Path, cfg: &Config) -> Builder<'a> {
        Builder {
            store,
            names: Names::new(cfg.node()),
            vfs: cfg.vfs.clone(),
            dir: LogDir::new(dir, cfg.node()),
            direct: cfg.direct_io(),
            created: Mutex::new(Vec::new()),
        }
    }

    /// Refuse a directory that holds a log of the node already.
    pub fn check_target(&self) -> Result<()> {
        let listing = match self.dir.list(&*self.vfs) {
            Ok(l) => l,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let has_manifest = self
            .vfs
            .open(&self.dir.manifest(), OpenHow::default())
            .is_ok();
        if !listing.segments.is_empty() || has_manifest {
            return Err(Error::Archive {
                object: self.dir.path().display().to_string(),
                problem: ArchiveProblem::TargetHoldsLog,
                source: None,
            });
        }
        Ok(())
    }

    /// Fetch the bytes of `g` (the object `rel`) the manifest names,
    /// check them, and return them. Only that prefix is read: the tail
    /// object is replaced before the manifest naming the longer one, so
    /// an archiver stopped between the two leaves it longer than its
    /// line, and its first `g.bytes` are still the ones the line names
    /// (each object of a segment is a prefix of every later one); the
    /// CRC checks them. For the same reason a tail object gone since the
    /// manifest was read (a live archiver sealed its segment, then removed
    /// it) is read from the sealed object, which the archiver put first.
    pub fn fetch(&self, rel: &str, g: &ArchivedSegment) -> Result<Vec<u8>> {
        let bytes = match self.store.get_prefix(rel, g.bytes) {
            Err(
                e @ Error::Archive {
                    problem: ArchiveProblem::Missing,
                    ..
                },
            ) if rel == self.names.tail(g.base) => self
                .store
                .get_prefix(&self.names.segment(g.base), g.bytes)
                .map_err(|_| e)?,
            got => got?,
        };
        if crc32fast::hash(&bytes) != g.crc {
            return Err(self
                .store
                .problem(rel, ArchiveProblem::Damaged("CRC mismatch".into())));
        }
        Ok(bytes)
    }

    /// Write `bytes` as the segment `base`, at its full size (zeros
    /// after), durably, with O_DIRECT where the file system takes it
    /// (buffered writes reach a fraction of the device's bandwidth); return
    /// its file. Cost: a create, writes of `WRITE_CHUNK`, a preallocation
    /// and an fdatasync.
    pub fn write_segment(&self, rel: &str, base: Lsn, bytes: &[u8]) -> Result<SegmentFile> {
        let header = SegmentHeader::decode(bytes).map_err(|e| {
            self.store
                .problem(rel, ArchiveProblem::Damaged(format!("segment header: {e}")))
        })?;
        let file = self.dir.segment(base);
        let (f, _) = segments::open_file(&*self.vfs, &file.path, Some(&self.dir), self.direct)?;
        self.created_file(file.path.clone());
        let io = |e| Error::io(&file.path, e);
        let mut buf = AlignedBuf::new(WRITE_CHUNK.min(bytes.len().max(format::BLOCK)));
        let cap = buf.capacity();
        for (i, chunk) in bytes.chunks(cap).enumerate() {
            // Objects end on a block boundary (§9), so every chunk is
            // whole blocks, as O_DIRECT demands.
            let b = &mut buf.as_mut_slice()[..chunk.len()];
            b.copy_from_slice(chunk);
            f.write_at(b, (i * cap) as u64, false).map_err(io)?;
        }
        f.preallocate(header.segment_bytes.max(bytes.len() as u64))
            .and_then(|()| f.sync_data())
            .map_err(io)?;
        Ok(file)
    }

    fn created_file(&self, p: PathBuf) {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p);
    }

    /// Walk the object `rel` (`bytes`, the segment `base`'s first bytes)
    /// in memory: its frames must run from its base to `want_last` (the
    /// manifest's word). Returns where its records end, with their
    /// writes' times, and the bytes. Checked before anything is written,
    /// and without reading the segment back from the disk. Cost: a walk
    /// (a CRC pass) over the bytes; no I/O.
    pub fn check(
        &self,
        rel: &str,
        base: Lsn,
        bytes: Vec<u8>,
        log_id: u64,
        want_last: Lsn,
    ) -> Result<(Vec<End>, Vec<u8>)> {
        let file = self.dir.segment(base);
        let one = OneFile::new(file.path.clone(), bytes);
        let damaged = |why: String| self.store.problem(rel, ArchiveProblem::Damaged(why));
        let walked = scan::open(&one, &file, self.dir.node(), Some(log_id))
            .and_then(|w| w.map_err(|p| p.error(&file, self.dir.node())))
            .and_then(|mut w| walk::ends(&mut w).map(|(ends, _)| (ends, w.last_lsn())));
        let (ends, last) = walked.map_err(|e| damaged(e.to_string()))?;
        if last != want_last {
            return Err(damaged(format!(
                "its frames end at LSN {last}, the archive manifest says {want_last}"
            )));
        }
        Ok((ends, one.into_bytes()))
    }

    /// The node's manifest for the restored log.
    pub fn write_manifest(&self, m: &Manifest) -> Result<()> {
        manifest::write(&*self.vfs, &self.dir, m)?;
        self.created_file(self.dir.manifest());
        Ok(())
    }

    /// Keep what was made so far: a later failure removes only what it
    /// makes after this.
    pub fn keep(&self) {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Undo: remove every file made since the last `keep` (best effort:
    /// the error reported is the one that stopped the restore).
    pub fn undo(&self) {
        let made = std::mem::take(&mut *self.created.lock().unwrap_or_else(|e| e.into_inner()));
        for p in made {
            let _ = self.vfs.remove_file(&p);
        }
        let _ = self.vfs.sync_dir(self.dir.path());
    }
}

/// Build the log of `cfg`'s node in `dir` from the archive behind
/// `store`, up to `to`. See [`crate::archive::restore`].
pub(crate) fn restore(store: &Store, dir: &Path, cfg: &Config, to: RestoreTo) -> Result<Restored> {
    let names = Names::new(cfg.node());
    let remote = crate::archive::ship::read_manifest(store, &names)?
        .ok_or_else(|| store.problem(&names.manifest(), ArchiveProblem::NoArchive))?;
    let b = Builder::new(store, dir, cfg);
    b.check_target()?;
    cfg.vfs
        .create_dir_all(dir, cfg.dir_mode())
        .map_err(|e| Error::io(dir, e))?;
    match build(&b, &remote, to) {
        Ok(r) => Ok(r),
        Err(e) => {
            b.undo();
            Err(e)
        }
    }
}

pub(crate) fn build(b: &Builder<'_>, remote: &ArchiveManifest, to: RestoreTo) -> Result<Restored> {
    let pieces = pieces(&b.names, remote);
    let Some(first) = pieces.first() else {
        return Err(b.store.problem(
            &b.names.manifest(),
            ArchiveProblem::Damaged("it lists no segment".into()),
        ));
    };
    // From the manifest alone: the pieces wholly within the point asked
    // for, restored side by side, and those after them that may hold part
    // of it, restored in order until one is cut.
    let starting = pieces
        .iter()
        .take_while(|(_, g)| starts_within(g, to))
        .count();
    let whole = pieces[..starting]
        .iter()
        .take_while(|(_, g)| ends_within(g, to))
        .count();
    let mut r = Restored {
        first_lsn: first.1.base,
        last_lsn: first.1.base - 1,
        ..Restored::default()
    };
    r.bytes = restore_whole(b, remote, &pieces[..whole])?;
    r.segments = whole;
    let mut newest_base = first.1.base;
    if let Some((_, g)) = pieces[..whole].last() {
        (r.last_lsn, newest_base) = (g.last, g.base);
    }
    for (rel, g) in &pieces[whole..starting] {
        let bytes = b.fetch(rel, g)?;
        r.bytes += bytes.len() as u64;
        let (ends, mut bytes) = b.check(rel, g.base, bytes, remote.log_id, g.last)?;
        let keep = ends.iter().rev().find(|e| within(e, to)).copied();
        r.last_lsn = keep.map_or(g.base - 1, |e| e.lsn);
        let cut = r.last_lsn < g.last;
        if cut {
            // The walk above read this header.
            let h = SegmentHeader::decode(&bytes).map_err(|e| {
                b.store
                    .problem(rel, ArchiveProblem::Damaged(format!("segment header: {e}")))
            })?;
            cut_after(&mut bytes, h.salt, keep.map_or(h.frames_start(), |e| e.at));
        }
        b.write_segment(rel, g.base, &bytes)?;
        r.segments += 1;
        newest_base = g.base;
        if cut {
            break;
        }
    }
    if r.segments == 0 {
        return Err(b.store.problem(
            &b.names.manifest(),
            ArchiveProblem::Mismatch(format!(
                "the archive starts at LSN {}, after the point asked for",
                r.first_lsn
            )),
        ));
    }
    let handed_out = remote.handed_out.max(remote.last_lsn());
    b.write_manifest(&Manifest {
        node: b.dir.node(),
        log_id: remote.log_id,
        newest_base,
        durable_lsn: r.last_lsn,
        handed_out,
        oldest_lsn: r.first_lsn,
    })?;
    b.vfs
        .sync_dir(b.dir.path())
        .map_err(|e| Error::io(b.dir.path(), e))?;
    if handed_out > r.last_lsn {
        r.given_up = Some((r.last_lsn + 1, handed_out));
    }
    Ok(r)
}

/// Fetch, write and check `pieces`, `RESTORE_WORKERS` at a time; the
/// first error stops the rest. Returns the bytes fetched.
fn restore_whole(
    b: &Builder<'_>,
    remote: &ArchiveManifest,
    pieces: &[(String, ArchivedSegment)],
) -> Result<u64> {
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(None);
    let fetched = AtomicU64::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((rel, g)) = pieces.get(i) else {
                return;
            };
            let one = b.fetch(rel, g).and_then(|bytes| {
                fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let (_, bytes) = b.check(rel, g.base, bytes, remote.log_id, g.last)?;
                b.write_segment(rel, g.base, &bytes).map(drop)
            });
            if let Err(e) = one {
                // The others stop at their next piece.
                next.store(pieces.len(), Ordering::Relaxed);
                failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                return;
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..RESTORE_WORKERS.min(pieces.len()) {
            s.spawn(work);
        }
        work();
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(fetched.into_inner()),
    }
}

/// Whether a piece holds anything at or before `to`, by the manifest.
fn starts_within(g: &ArchivedSegment, to: RestoreTo) -> bool {
    match to {
        RestoreTo::End => true,
        RestoreTo::Lsn(n) => g.base <= n,
        RestoreTo::Time(t) => g.first_ns == 0 || g.first_ns <= unix_ns(t),
    }
}

/// Whether all of a piece lies at or before `to`, by the manifest.
fn ends_within(g: &ArchivedSegment, to: RestoreTo) -> bool {
    match to {
        RestoreTo::End => true,
        RestoreTo::Lsn(n) => g.last <= n,
        RestoreTo::Time(t) => g.last_ns <= unix_ns(t),
    }
}

fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The archive's objects in LSN order: sealed segments, then the tail.
pub(crate) fn pieces(names: &Names, remote: &ArchiveManifest) -> Vec<(String, ArchivedSegment)> {
    let sealed = remote
        .segments
        .iter()
        .map(|g| (names.segment(g.base), g.clone()));
    let tail = remote.tail.iter().map(|g| (names.tail(g.base), g.clone()));
    sealed.chain(tail).collect()
}

/// Whether the record ending at `e` is restored under `to`.
fn within(e: &End, to: RestoreTo) -> bool {
    match to {
        RestoreTo::End => true,
        RestoreTo::Lsn(n) => e.lsn <= n,
        RestoreTo::Time(t) => e.time_ns <= unix_ns(t),
    }
}

/// Cut a segment's bytes after the record ending at `at`: padding to the
/// block, nothing after (the file is zeros there). In memory, before the
/// segment is written: one write of what stays.
fn cut_after(bytes: &mut Vec<u8>, salt: u64, at: u64) {
    let pad = format::padding_len(at);
    let end = round_up(at + pad as u64) as usize;
    bytes.truncate(at as usize);
    bytes.resize(end, 0);
    if pad > 0 {
        format::encode_padding(&mut bytes[at as usize..], salt, pad);
    }
}
