//! The archiver's pass: each sealed segment not yet archived goes up as
//! one immutable object, then the newest segment's durable prefix as the
//! tail object, and after each the archive manifest; the archive point
//! in the log directory rises only once the manifest lists what it
//! covers.

use std::sync::Arc;

use ringwal_platform::{VFile, Vfs};

use crate::archive::store::{Got, Names, Store};
use crate::archive::walk;
use crate::at_rest::format::{self, ArchiveManifest, ArchivedPoint};
use crate::error::{ArchiveProblem, Corruption, Error, Lsn, Result};
use crate::scan::{self, End, Position, SegmentEnd, Verdict, Walker};
use crate::segment::set::{LogDir, SegmentFile};
use crate::segment::{archived, durable, manifest};

/// What one pass shipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pass {
    /// Sealed segments shipped by this pass.
    pub sealed: usize,
    /// Bytes put to the store by this pass, tail included.
    pub bytes: u64,
    /// The archive point after it: every segment at or below is archived.
    pub archived_lsn: Lsn,
    /// The last LSN the archive holds, its tail included.
    pub last_lsn: Lsn,
}

/// One node's log directory and its archive.
pub(crate) struct Shipper {
    store: Store,
    names: Names,
    vfs: Arc<dyn Vfs>,
    dir: LogDir,
    /// The node's archiver lock, held for the shipper's life: two
    /// archivers putting manifests in turn could each drop the other's
    /// last segment from the manifest after the archive point counted it.
    _lock: VFile,
    /// The archive manifest as last put (or read at the first pass).
    remote: Option<ArchiveManifest>,
    /// The newest segment's walk, kept between passes: each pass reads
    /// only what the writer added since the last (re-walking a 64 MiB
    /// tail every second cost the appends beside it), and the segment's
    /// walk as a sealed one finishes it.
    live: Option<Live>,
}

/// A walk of the newest segment, resumable.
struct Live {
    base: Lsn,
    walker: Walker,
    ends: Vec<walk::End>,
    end: SegmentEnd,
}

impl Shipper {
    /// A shipper for `dir`, taking its archiver lock.
    ///
    /// # Errors
    ///
    /// `Locked` while another archiver holds it; `Io` naming the lock file.
    pub fn new(store: Store, vfs: Arc<dyn Vfs>, dir: LogDir) -> Result<Shipper> {
        let lock = crate::segment::set::lock_at(&*vfs, &dir, dir.archive_lock())?;
        Ok(Shipper {
            names: Names::new(dir.node()),
            store,
            vfs,
            dir,
            _lock: lock,
            remote: None,
            live: None,
        })
    }

    /// Ship what is new. `live` is the writer's durable LSN and the last
    /// LSN it handed out when the archiver runs in its process; another
    /// process's archiver passes `(0, 0)` and ships the tail only as far
    /// as the manifest and the writes' vouches prove durable, so the
    /// archive never holds a record that a power loss could take from the
    /// log (whose LSN would then be handed out again). The archive
    /// manifest's `handed_out` is the highest of its own, the node
    /// manifest's and `live`'s: a log restored from it resumes above them.
    /// Cost: a directory listing, a read of every segment not yet archived
    /// and of the newest, one PUT per object and one per manifest change,
    /// an archive point write per sealed segment.
    pub fn pass(&mut self, live: (Lsn, Lsn)) -> Result<Pass> {
        let (durable, handed_out) = live;
        let mut files = self.dir.list(&*self.vfs)?.segments;
        let local = manifest::read(&*self.vfs, &self.dir)?;
        // A newest file a crash left never written is no segment: the one
        // before it is the newest, which the next writer may go on
        // writing, so it is no sealed segment yet.
        scan::pop_never_written(
            &*self.vfs,
            &mut files,
            self.dir.node(),
            local.map(|m| m.log_id),
        )?;
        let Some((newest, sealed)) = files.split_last() else {
            return Ok(Pass::default());
        };
        let log_id = match local {
            Some(m) => m.log_id,
            None => self.open(newest, None)?.header().log_id,
        };
        let mut remote = self.remote(log_id)?;
        remote.handed_out = remote
            .handed_out
            .max(local.map_or(0, |m| m.handed_out))
            .max(handed_out);
        let mut pass = Pass::default();
        // Established before anything is shipped: from here on no
        // checkpoint removes what the archive lacks.
        self.hold(log_id, remote.sealed_lsn())?;
        for (i, f) in sealed.iter().enumerate() {
            if self.archived(&remote, f, files[i + 1].base)? {
                continue;
            }
            pass.bytes += self.ship_sealed(&mut remote, f, log_id)?;
            pass.sealed += 1;
        }
        let bound = durable.max(local.map_or(0, |m| m.durable_lsn));
        pass.bytes += self.ship_tail(&mut remote, newest, log_id, bound)?;
        pass.archived_lsn = remote.sealed_lsn();
        pass.last_lsn = remote.last_lsn();
        self.remote = Some(remote);
        Ok(pass)
    }

    /// The archive manifest: the one put last, else the store's, else a
    /// new one. One of another log or node is refused.
    fn remote(&mut self, log_id: u64) -> Result<ArchiveManifest> {
        let m = match self.remote.take() {
            Some(m) => m,
            None => self
                .read_remote()?
                .unwrap_or_else(|| ArchiveManifest::new(self.dir.node(), log_id)),
        };
        if m.log_id != log_id || m.node != self.dir.node() {
            return Err(self.store.problem(
                &self.names.manifest(),
                ArchiveProblem::Mismatch(format!(
                    "it archives log {:016x} node {}, this is log {log_id:016x} node {}",
                    m.log_id,
                    m.node,
                    self.dir.node()
                )),
            ));
        }
        Ok(m)
    }

    fn read_remote(&self) -> Result<Option<ArchiveManifest>> {
        read_manifest(&self.store, &self.names)
    }

    /// Whether `f` is in the archive already. A segment past the
    /// archive's last with LSNs missing between is refused: the log
    /// released segments the archive never got.
    fn archived(&self, remote: &ArchiveManifest, f: &SegmentFile, next_base: Lsn) -> Result<bool> {
        let Some(last) = remote.segments.last() else {
            return Ok(false);
        };
        if f.base <= last.base {
            // Archived, if it is the segment the archive holds: one that
            // goes on past that object's last LSN is another history (a
            // log restored to an earlier point and written again).
            let same = remote
                .segments
                .iter()
                .find(|g| g.base == f.base)
                .is_none_or(|g| g.last + 1 == next_base);
            if !same {
                return Err(self.store.problem(
                    &self.names.segment(f.base),
                    ArchiveProblem::Mismatch(format!(
                        "{} no longer ends where its archived object does: the log went \
                         another way after a restore; archive it to a new prefix",
                        f.path.display()
                    )),
                ));
            }
            return Ok(true);
        }
        if f.base != last.last + 1 {
            return Err(self.store.problem(
                &self.names.segment(f.base),
                ArchiveProblem::Mismatch(format!(
                    "the archive ends at LSN {}, the log goes on at {} ({}): segments were \
                     released unarchived; archive to a new prefix",
                    last.last,
                    f.base,
                    f.path.display()
                )),
            ));
        }
        Ok(false)
    }

    /// Put the sealed segment `f`, then the manifest listing it, then
    /// raise the archive point. Returns the bytes put.
    fn ship_sealed(
        &mut self,
        remote: &mut ArchiveManifest,
        f: &SegmentFile,
        log_id: u64,
    ) -> Result<u64> {
        let Live {
            mut walker,
            ends,
            end,
            ..
        } = self.walk(f, log_id)?;
        let w = &mut walker;
        match w.judge(end, Position::sealed())? {
            Verdict::Clean | Verdict::Full => {}
            _ => {
                return Err(Error::corrupt(
                    &f.path,
                    end.data_end(),
                    Corruption::Frames(format!("a sealed segment ends in {end}; not archived")),
                ));
            }
        }
        let len = round_up(end.data_end());
        let bytes = durable::read_prefix(&*self.vfs, &f.path, len)?;
        let g = walk::line(f.base, w.last_lsn(), &bytes, &ends);
        let n = bytes.len() as u64;
        self.store.put(&self.names.segment(f.base), bytes)?;
        // A tail of this segment (or an older one) is superseded by the
        // sealed object.
        let old_tail = remote.tail.take_if(|t| t.base <= f.base);
        remote.segments.push(g);
        self.put_manifest(remote)?;
        self.hold(log_id, remote.sealed_lsn())?;
        if let Some(t) = old_tail {
            // A leftover only costs space: restore never reads a tail the
            // manifest does not name.
            let _ = self.store.delete(&self.names.tail(t.base));
        }
        Ok(n)
    }

    /// Put the newest segment's prefix up to the last record at or below
    /// `bound` (and below what the writes' vouches prove durable), if it
    /// grew. Returns the bytes put.
    fn ship_tail(
        &mut self,
        remote: &mut ArchiveManifest,
        newest: &SegmentFile,
        log_id: u64,
        bound: Lsn,
    ) -> Result<u64> {
        if let Some(g) = remote.segments.iter().find(|g| g.base == newest.base) {
            // The archive holds this segment sealed: records past its
            // object's last are another history (see `archived`).
            let (last, sealed_last) = (self.walk_live(newest, log_id)?, g.last);
            if last > sealed_last {
                return Err(self.store.problem(
                    &self.names.segment(newest.base),
                    ArchiveProblem::Mismatch(format!(
                        "{} goes on past LSN {sealed_last}, where its archived object ends: \
                         the log went another way after a restore; archive it to a new prefix",
                        newest.path.display()
                    )),
                ));
            }
            return Ok(0);
        }
        if remote
            .segments
            .last()
            .is_some_and(|s| s.base >= newest.base)
        {
            return Ok(0);
        }
        let live = self.walk(newest, log_id)?;
        let bound = bound.max(live.walker.vouched());
        let found = live.ends.iter().rev().find(|e| e.lsn <= bound).copied();
        let ends = &self.live.insert(live).ends;
        let Some(walk::End {
            lsn: last, at: end, ..
        }) = found
        else {
            return Ok(0);
        };
        let have = remote.tail.as_ref().filter(|t| t.base == newest.base);
        if have.is_some_and(|t| t.last >= last) {
            return Ok(0);
        }
        let bytes = durable::read_prefix(&*self.vfs, &newest.path, round_up(end))?;
        let g = walk::line(newest.base, last, &bytes, ends);
        let n = bytes.len() as u64;
        self.store.put(&self.names.tail(newest.base), bytes)?;
        let superseded = remote.tail.replace(g).filter(|t| t.base != newest.base);
        self.put_manifest(remote)?;
        if let Some(t) = superseded {
            let _ = self.store.delete(&self.names.tail(t.base));
        }
        Ok(n)
    }

    fn put_manifest(&self, remote: &ArchiveManifest) -> Result<()> {
        self.store.put(&self.names.manifest(), remote.encode())
    }

    /// Raise the log directory's archive point to `lsn` (written each
    /// time: it is what a writer in another process reads).
    fn hold(&self, log_id: u64, lsn: Lsn) -> Result<()> {
        let now = archived::read(&*self.vfs, &self.dir).ok().flatten();
        if now.is_some_and(|p| p.log_id == log_id && p.archived_lsn == lsn) {
            return Ok(());
        }
        archived::write(
            &*self.vfs,
            &self.dir,
            ArchivedPoint {
                log_id,
                archived_lsn: lsn,
            },
        )
    }

    /// The last LSN of `f`, by the kept walk (resumed, and kept again).
    fn walk_live(&mut self, f: &SegmentFile, log_id: u64) -> Result<Lsn> {
        let live = self.walk(f, log_id)?;
        Ok(self.live.insert(live).walker.last_lsn())
    }

    /// The walk of `f` to the end of its frames: the kept one resumed if
    /// it is of `f` (taken out of `self.live`), else a new one.
    fn walk(&mut self, f: &SegmentFile, log_id: u64) -> Result<Live> {
        // A walk that met frames out of line starts over: the file is not
        // the one it read (recycled, or rewritten under it).
        let resumable = |l: &Live| {
            l.base == f.base && !matches!(l.end.end, End::LsnBreak { .. } | End::BatchBreak { .. })
        };
        match self.live.take() {
            Some(mut l) if resumable(&l) => {
                if l.walker.grew()? {
                    l.end = walk::ends_into(&mut l.walker, &mut l.ends)?;
                }
                Ok(l)
            }
            _ => {
                let mut walker = self.open(f, Some(log_id))?;
                let (ends, end) = walk::ends(&mut walker)?;
                Ok(Live {
                    base: f.base,
                    walker,
                    ends,
                    end,
                })
            }
        }
    }

    fn open(&self, f: &SegmentFile, log_id: Option<u64>) -> Result<Walker> {
        scan::open(&*self.vfs, f, self.dir.node(), log_id)?.map_err(|p| p.error(f, self.dir.node()))
    }
}

/// A node's archive manifest from the store, checked; `None` if the
/// archive has none yet.
pub(crate) fn read_manifest(store: &Store, names: &Names) -> Result<Option<ArchiveManifest>> {
    let rel = names.manifest();
    match store.get(&rel)? {
        Got::Missing => Ok(None),
        Got::Bytes(b) => ArchiveManifest::decode(&b)
            .map(Some)
            .map_err(|e| store.problem(&rel, ArchiveProblem::Damaged(e))),
    }
}

/// `n` rounded up to a whole block.
pub(crate) fn round_up(n: u64) -> u64 {
    n.next_multiple_of(format::BLOCK as u64)
}
