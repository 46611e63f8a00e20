//! A log built from its archive alone: each object fetched, checked
//! against the archive manifest (length, CRC) and walked frame by frame,
//! written as the segment it was, cut at the point asked for; then a
//! manifest promising what was restored and handed-out LSNs that make a
//! writer opening it resume above everything the archive ever held.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ringwal_platform::{OpenHow, Vfs};

use crate::archive::ship::round_up;
use crate::archive::store::{Names, Store};
use crate::at_rest::format::{self, ArchiveManifest, ArchivedSegment, Manifest, SegmentHeader};
use crate::config::Config;
use crate::error::{ArchiveProblem, Corruption, Error, Lsn, Result};
use crate::scan::{self, Step};
use crate::segment::manifest;
use crate::segment::set::{LogDir, SegmentFile};

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

/// A restore in progress: the files it made, removed again if it fails.
pub(crate) struct Builder<'a> {
    pub store: &'a Store,
    pub names: Names,
    pub vfs: Arc<dyn Vfs>,
    pub dir: LogDir,
    pub created: Vec<PathBuf>,
}

impl Builder<'_> {
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

    /// Fetch `g` (the object `rel`), check it whole, and return its bytes.
    pub fn fetch(&self, rel: &str, g: &ArchivedSegment) -> Result<Vec<u8>> {
        let mut bytes = self.store.get_existing(rel)?;
        let damaged = |why: String| self.store.problem(rel, ArchiveProblem::Damaged(why));
        // The tail object is replaced in place, before the manifest that
        // names the longer one: an archiver stopped between the two puts
        // leaves it longer than its line. Its first `g.bytes` are still
        // the ones the line names (each object of a segment is a prefix
        // of every later one), and the CRC below checks them.
        if rel == self.names.tail(g.base) && bytes.len() as u64 > g.bytes {
            bytes.truncate(g.bytes as usize);
        }
        if bytes.len() as u64 != g.bytes {
            return Err(damaged(format!(
                "{} bytes, the archive manifest says {}",
                bytes.len(),
                g.bytes
            )));
        }
        if crc32fast::hash(&bytes) != g.crc {
            return Err(damaged("CRC mismatch".into()));
        }
        Ok(bytes)
    }

    /// Write `bytes` as the segment `base`, at its full size (zeros
    /// after), durably; return its file. Cost: a create, a write, a
    /// preallocation and an fdatasync.
    pub fn write_segment(&mut self, rel: &str, base: Lsn, bytes: &[u8]) -> Result<SegmentFile> {
        let header = SegmentHeader::decode(bytes).map_err(|e| {
            self.store
                .problem(rel, ArchiveProblem::Damaged(format!("segment header: {e}")))
        })?;
        let file = self.dir.segment(base);
        let how = OpenHow {
            write: true,
            create_new: true,
            mode: Some(self.dir.file_mode()),
            ..OpenHow::default()
        };
        let f = self
            .vfs
            .open(&file.path, how)
            .map_err(|e| Error::io(&file.path, e))?;
        self.created.push(file.path.clone());
        f.write_at(bytes, 0, false)
            .and_then(|()| f.preallocate(header.segment_bytes.max(bytes.len() as u64)))
            .and_then(|()| f.sync_data())
            .map_err(|e| Error::io(&file.path, e))?;
        Ok(file)
    }

    /// Walk the segment just written: its frames must run from its base
    /// to `want_last` (the manifest's word) and end as a writer leaves
    /// one. Returns the offsets and write times where its records end.
    pub fn check(
        &self,
        rel: &str,
        file: &SegmentFile,
        log_id: u64,
        want_last: Lsn,
    ) -> Result<Vec<End>> {
        let mut w = scan::open(&*self.vfs, file, self.dir.node(), Some(log_id))?
            .map_err(|p| p.error(file, self.dir.node()))?;
        let mut ends = Vec::new();
        loop {
            match w.next()? {
                Step::Record { frame, batch, .. } => {
                    let whole = batch.is_none()
                        || frame.flags & format::FLAG_BATCH_END == format::FLAG_BATCH_END;
                    let lsn = frame.lsn;
                    if whole {
                        ends.push(End {
                            lsn,
                            at: w.valid_end(),
                            time_ns: write_time(&w),
                        });
                    }
                }
                Step::Hole { .. } => ends.push(End {
                    lsn: w.last_lsn(),
                    at: w.valid_end(),
                    time_ns: write_time(&w),
                }),
                Step::End(_) => break,
            }
        }
        if w.last_lsn() != want_last {
            return Err(self.store.problem(
                rel,
                ArchiveProblem::Damaged(format!(
                    "its frames end at LSN {}, the archive manifest says {want_last}",
                    w.last_lsn()
                )),
            ));
        }
        Ok(ends)
    }

    /// Cut the segment `file` (whose object was `bytes`) after the
    /// record ending at `at`: padding to the block, zeros after, durably.
    pub fn cut(&self, file: &SegmentFile, bytes: &[u8], at: u64) -> Result<()> {
        let header = SegmentHeader::decode(bytes)
            .map_err(|e| Error::corrupt(&file.path, 0, Corruption::Header(e.to_string())))?;
        let pad = format::padding_len(at);
        let mut tail = vec![0u8; (round_up(at + pad as u64) - at) as usize];
        if pad > 0 {
            format::encode_padding(&mut tail, header.salt, pad);
        }
        let zeros_to = (bytes.len() as u64).max(at + tail.len() as u64);
        tail.resize((zeros_to - at) as usize, 0);
        let how = OpenHow {
            write: true,
            ..OpenHow::default()
        };
        let f = self
            .vfs
            .open(&file.path, how)
            .map_err(|e| Error::io(&file.path, e))?;
        f.write_at(&tail, at, false)
            .and_then(|()| f.sync_data())
            .map_err(|e| Error::io(&file.path, e))
    }

    /// The node's manifest for the restored log.
    pub fn write_manifest(&mut self, m: &Manifest) -> Result<()> {
        manifest::write(&*self.vfs, &self.dir, m)?;
        self.created.push(self.dir.manifest());
        Ok(())
    }

    /// Undo: remove every file made so far (best effort: the error
    /// reported is the one that stopped the restore).
    pub fn undo(&mut self) {
        for p in self.created.drain(..) {
            let _ = self.vfs.remove_file(&p);
        }
        let _ = self.vfs.sync_dir(self.dir.path());
    }
}

/// Where one record (or a batch's last, or a skip) ends in its segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct End {
    pub lsn: Lsn,
    pub at: u64,
    pub time_ns: u64,
}

/// The write time of the write the walk is in, ns (0: none recorded).
fn write_time(_w: &scan::Walker) -> u64 {
    0
}

/// Build the log of `cfg`'s node in `dir` from the archive behind
/// `store`, up to `to`. See [`crate::archive::restore`].
pub(crate) fn restore(store: &Store, dir: &Path, cfg: &Config, to: RestoreTo) -> Result<Restored> {
    let names = Names::new(cfg.node());
    let remote = crate::archive::ship::read_manifest(store, &names)?
        .ok_or_else(|| store.problem(&names.manifest(), ArchiveProblem::Missing))?;
    let mut b = Builder {
        store,
        names,
        vfs: cfg.vfs.clone(),
        dir: LogDir::new(dir, cfg.node()),
        created: Vec::new(),
    };
    b.check_target()?;
    cfg.vfs
        .create_dir_all(dir, cfg.dir_mode())
        .map_err(|e| Error::io(dir, e))?;
    match build(&mut b, &remote, to) {
        Ok(r) => Ok(r),
        Err(e) => {
            b.undo();
            Err(e)
        }
    }
}

pub(crate) fn build(
    b: &mut Builder<'_>,
    remote: &ArchiveManifest,
    to: RestoreTo,
) -> Result<Restored> {
    let pieces = pieces(&b.names, remote);
    let Some(first) = pieces.first() else {
        return Err(b.store.problem(
            &b.names.manifest(),
            ArchiveProblem::Damaged("it lists no segment".into()),
        ));
    };
    let mut r = Restored {
        first_lsn: first.1.base,
        last_lsn: first.1.base - 1,
        ..Restored::default()
    };
    let mut newest_base = first.1.base;
    for (rel, g) in &pieces {
        if let RestoreTo::Lsn(n) = to
            && g.base > n
        {
            break;
        }
        let bytes = b.fetch(rel, g)?;
        r.bytes += bytes.len() as u64;
        let file = b.write_segment(rel, g.base, &bytes)?;
        r.segments += 1;
        newest_base = g.base;
        let ends = b.check(rel, &file, remote.log_id, g.last)?;
        let keep = ends.iter().rev().find(|e| within(e, to)).copied();
        let last = keep.map_or(g.base - 1, |e| e.lsn);
        if last < g.last {
            b.cut(&file, &bytes, keep.map_or(first_frame(&bytes), |e| e.at))?;
            r.last_lsn = last;
            break;
        }
        r.last_lsn = last;
    }
    if r.segments == 0 {
        return Err(b.store.problem(
            &b.names.manifest(),
            ArchiveProblem::Mismatch(format!(
                "the archive starts at LSN {}, after the LSN asked for",
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
        RestoreTo::Time(t) => {
            let ns = t
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            e.time_ns <= ns
        }
    }
}

/// Where a segment's frames start (its header's size).
fn first_frame(bytes: &[u8]) -> u64 {
    SegmentHeader::decode(bytes).map_or(format::HEADER_BYTES as u64, |h| h.frames_start())
}
