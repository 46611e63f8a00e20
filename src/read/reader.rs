//! Reading records back in LSN order across segments: the one record
//! iterator, behind [`Wal::reader_from`](crate::Wal::reader_from) and the
//! read-only tools (`ringwal cat`, `dump`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ringwal_platform::Vfs;

use crate::at_rest::crypt::Keys;
use crate::at_rest::format::{Kind, Manifest};
use crate::at_rest::payload;
use crate::config::Config;
use crate::error::{Error, Lsn, Result};
use crate::scan::{self, End, Position, SegmentEnd, Step, Verdict, Walker};
use crate::segment::index::{Point, SparseIndex};
use crate::segment::manifest;
use crate::segment::set::{LogDir, SegmentFile};

/// One record read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// The stream it was appended to.
    pub stream: u16,
    /// Its frame kind (`Data` for plain appends).
    pub kind: Kind,
    /// The payload.
    pub payload: Vec<u8>,
    /// Its write time: when the write holding it was submitted to the
    /// disk, by the writer's wall clock (format version 3 records it in
    /// the write's first frame), so after the append that made it and
    /// before its `Written` acknowledgement. Informational: a writer's
    /// clock that stepped back makes later records look older. `None` for
    /// a record of a segment written before format version 3. Costs the
    /// reader nothing: the walk reads that frame anyway.
    pub written_at: Option<SystemTime>,
}

/// A vouch's write time (nanoseconds since the Unix epoch) as a
/// [`SystemTime`]; `None` without one, or past what `SystemTime` holds.
fn write_time(unix_ns: Option<u64>) -> Option<SystemTime> {
    unix_ns.and_then(|ns| UNIX_EPOCH.checked_add(Duration::from_nanos(ns)))
}

/// One record with where it lives on disk, from [`Reader::located`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordAt {
    /// Its LSN.
    pub lsn: Lsn,
    /// The stream it was appended to.
    pub stream: u16,
    /// Its frame kind (never `Padding`: padding is skipped).
    pub kind: Kind,
    /// Payload length in bytes.
    pub len: usize,
    /// File name (no directory) of the segment holding it.
    pub segment: String,
    /// Byte offset of its frame in that segment.
    pub offset: u64,
    /// The first LSN of the atomic batch it belongs to; `None` for a
    /// record appended alone.
    pub batch: Option<Lsn>,
    /// The payload.
    pub payload: Vec<u8>,
    /// When its write was submitted ([`Record::written_at`]).
    pub written_at: Option<SystemTime>,
}

/// Where a record was read: its frame's offset and its batch.
#[derive(Clone, Copy)]
struct Place {
    offset: u64,
    batch: Option<Lsn>,
}

/// Iterator over records in LSN order, across segments.
///
/// LSNs that recovery gave up (a skip frame records that they will never
/// hold a record: see [`Error::GivenUp`]) are stepped over: the iteration
/// goes on with the next record, as every reader of the log does, so
/// `cat`, `dump`, `verify`, replay and the followers count the same
/// records. Stepping over them costs nothing but the skip frame's read.
///
/// Reads through the page cache in 1 MiB chunks; allocates one `Vec` per
/// record. Every segment is checked as recovery checks it (header against
/// name, LSN continuity, and how its frames end), so the iterator stops
/// silently exactly where recovery would find the end of the data (never-
/// written space, a torn tail of the newest segment, or where a live
/// writer has got to), and anything recovery would call damage is yielded
/// as one `Err` naming the file and offset, after which it ends. A segment
/// checkpointed away while the reader was on it (deleted, or recycled and
/// overwritten) before it had read all of it ends the iteration with
/// [`Error::Released`], not `Corrupt`: those records were released, not
/// damaged. One released after the reader had read all of it costs
/// nothing: the reader reads on from the next segment.
pub struct Reader {
    vfs: Arc<dyn Vfs>,
    dir: LogDir,
    segments: std::vec::IntoIter<SegmentFile>,
    /// Base of the last segment of the snapshot: the one judged as newest.
    newest_base: Option<Lsn>,
    current: Option<Walker>,
    /// The LSN the next record must carry; `None` before the first segment.
    expect: Option<Lsn>,
    from: Lsn,
    upto: Lsn,
    /// The reader's torn window, for judging the newest segment's end.
    window: u64,
    /// The log's id, which version-2 segments must carry, when known.
    log_id: Option<u64>,
    /// What encrypted payloads are opened with.
    keys: Keys,
    /// Where in the first segment the walk may start instead of at its
    /// first frame (see [`seek_with`](Reader::seek_with)).
    seek: Option<Point>,
    /// Make sure the segment is still the log's before reading on into
    /// what it grew by (see [`recheck_on_growth`](Reader::recheck_on_growth)).
    recheck: bool,
    /// The last LSNs given up that the walk stepped over (first, last),
    /// for a point read to tell a given-up LSN from a missing one.
    given_up: Option<(Lsn, Lsn)>,
    /// What the node's manifest promised when the directory was listed
    /// (readers of a directory; see [`open_dir`](Reader::open_dir)).
    promise: Option<Manifest>,
    /// The oldest segment listed, for the manifest's promise.
    oldest_listed: Option<Lsn>,
    /// Where the complete data ended, if the walk stopped at a torn tail.
    torn_at: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("dir", &self.dir)
            .field("expect", &self.expect)
            .field("from", &self.from)
            .field("upto", &self.upto)
            .finish_non_exhaustive()
    }
}

impl Reader {
    /// Records `from` (0: the oldest) up to `upto` in `segments`, a
    /// snapshot of the log's segments in LSN order. `from` below the
    /// oldest segment is `Released`: those records were checkpointed away.
    /// Reads with `cfg`'s file system, torn window and keys.
    pub(crate) fn new(
        cfg: &Config,
        dir: LogDir,
        segments: Vec<SegmentFile>,
        from: Lsn,
        upto: Lsn,
        log_id: Option<u64>,
    ) -> Result<Reader> {
        debug_assert!(
            segments.windows(2).all(|w| w[0].base < w[1].base),
            "segments are listed by ascending base"
        );
        let oldest_listed = segments.first().map(|s| s.base);
        let oldest = oldest_listed.unwrap_or(1);
        let from = if from == 0 { oldest } else { from };
        if from < oldest {
            return Err(Error::Released {
                file: dir.path().to_path_buf(),
                lsn: from,
                oldest,
            });
        }
        let newest_base = segments.last().map(|s| s.base);
        let start = segments.iter().rposition(|s| s.base <= from).unwrap_or(0);
        let segments: Vec<SegmentFile> = segments.into_iter().skip(start).collect();
        Ok(Reader {
            vfs: cfg.vfs.clone(),
            dir,
            segments: segments.into_iter(),
            newest_base,
            current: None,
            expect: None,
            from,
            upto,
            window: cfg.torn_window(),
            log_id,
            keys: cfg.keys.clone(),
            seek: None,
            recheck: false,
            given_up: None,
            promise: None,
            oldest_listed,
            torn_at: None,
            done: false,
        })
    }

    /// Before reading on into what a segment grew by since the reader
    /// stopped at its end, make sure the segment is still one of the
    /// log's: if a checkpoint released it meanwhile, end with `Released`
    /// instead of reading released records through the open handle. For
    /// a reader that follows a directory from outside the writer, which
    /// has no segment list of the writer's to check against. Cost: one
    /// directory listing each time the segment it is on has grown.
    pub(crate) fn recheck_on_growth(mut self) -> Reader {
        self.recheck = true;
        self
    }

    /// Start in the first segment at the point `index` gives for the first
    /// LSN wanted, instead of at the segment's first frame: a read of an
    /// LSN deep in a segment then walks at most [`index::SPACING`] bytes
    /// and a record, not the whole segment before it. Only records up to
    /// `upto` are looked up, whose segments the reader's list holds.
    /// Cost: a binary search now; at the first step, one check that the
    /// point's frame carries its LSN (else the walk starts at the front).
    ///
    /// [`index::SPACING`]: crate::segment::index::SPACING
    pub(crate) fn seek_with(mut self, index: &SparseIndex) -> Reader {
        if let Some(first) = self.segments.as_slice().first() {
            self.seek = index.seek(self.from.min(self.upto), first.base);
        }
        self
    }

    /// Every record of `dir`'s node on disk now, `from` on: the segments
    /// listed once, here, minus newest files whose header was never
    /// written (a crash mid-create, which recovery discards). Segments are
    /// held to the log id of the node's manifest when it has a readable
    /// one (`verify` reports a manifest that is not). `from` below the
    /// oldest segment is `Released` if the manifest released it too, and
    /// the manifest's broken promise (`Gap`) if it still keeps it.
    pub(crate) fn open_dir(cfg: &Config, dir: LogDir, from: Lsn) -> Result<Reader> {
        let vfs = &*cfg.vfs;
        let promise = manifest::read(vfs, &dir).ok().flatten();
        let log_id = promise.map(|m| m.log_id);
        let mut files = dir.list_log(vfs, promise.is_some())?.segments;
        scan::pop_never_written(vfs, &mut files, dir.node(), log_id)?;
        // Below the oldest segment is a release only if the manifest
        // released it too: a front the manifest still keeps is missing.
        let front = promise.zip(files.first()).and_then(|(m, oldest)| {
            let disk = manifest::OnDisk {
                oldest: Some(oldest.base),
                newest: files.last().map(|s| s.base),
                last_lsn: Lsn::MAX,
                last_file: None,
            };
            manifest::broken_promise(&m, &dir, disk).filter(|_| from != 0 && from < oldest.base)
        });
        if let Some(gap) = front {
            return Err(gap);
        }
        let mut reader = Reader::new(cfg, dir, files, from, Lsn::MAX, log_id)?;
        reader.promise = promise;
        Ok(reader)
    }

    /// The same records with their segment and offset. Costs one more
    /// allocation per record (the segment's name).
    pub fn located(self) -> Located {
        Located(self)
    }

    /// [`Error::GivenUp`] if `lsn` is among the LSNs given up that the
    /// walk last stepped over: what a point read of it answers.
    pub(crate) fn given_up(&self, lsn: Lsn) -> Option<Error> {
        let (first, last) = self.given_up.filter(|&(f, l)| f <= lsn && lsn <= l)?;
        Some(Error::GivenUp {
            file: self
                .segment()
                .map_or_else(|| self.dir.path().to_path_buf(), Path::to_path_buf),
            first,
            last,
        })
    }

    /// The segment the last record came from, or that the walk ended in.
    pub(crate) fn segment(&self) -> Option<&Path> {
        self.current.as_ref().map(|w| w.path())
    }

    /// The newest segment and where its complete data ends, if the
    /// iteration ended at a torn tail there (a crash's, not yet cut).
    pub(crate) fn torn_tail(&self) -> Option<(&Path, u64)> {
        self.segment().zip(self.torn_at)
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(seg) = self.segments.next() else {
            return Ok(false);
        };
        let mut walker = match scan::open(&*self.vfs, &seg, self.dir.node(), self.log_id)? {
            Ok(w) => w,
            Err(p) => return Err(p.error(&seg, self.dir.node())),
        };
        let expect = *self.expect.get_or_insert(seg.base);
        if seg.base != expect {
            return Err(Error::Gap {
                file: seg.path,
                expected: expect,
                found: seg.base,
            });
        }
        if let Some(p) = self.seek.take()
            && walker.seek(p)?
        {
            self.expect = Some(p.lsn);
        }
        self.current = Some(walker);
        Ok(true)
    }

    /// The next record and where it was read.
    fn step(&mut self) -> Result<Option<(Record, Place)>> {
        loop {
            // Before the first record too: a reader made at its watermark
            // (an empty log, a freshly rolled segment) yields nothing
            // written after it was made.
            if self.next_lsn() > self.upto {
                return Ok(None);
            }
            if self.current.is_none() && !self.open_next()? {
                return self.ended();
            }
            let w = self.current.as_mut().expect("opened above");
            // Copied before the step borrows the walker: 88 bytes.
            let header = *w.header();
            let end = match w.next()? {
                Step::Record {
                    at,
                    frame,
                    batch,
                    write,
                } => {
                    debug_assert!(
                        self.expect.is_none_or(|e| frame.lsn >= e),
                        "records are read in ascending LSN order: {} after {:?}",
                        frame.lsn,
                        self.expect
                    );
                    self.expect = Some(frame.lsn + 1);
                    if frame.lsn < self.from {
                        continue;
                    }
                    debug_assert!(
                        frame.lsn <= self.upto,
                        "a reader yields nothing above its watermark"
                    );
                    let (lsn, stream, kind) = (frame.lsn, frame.stream, frame.kind);
                    let nonce_salt = scan::nonce_salt(write, &header);
                    let payload = payload::open(&self.keys, &header, nonce_salt, &frame)
                        .map_err(|e| e.error(w.path(), &header, at))?;
                    let rec = Record {
                        lsn,
                        stream,
                        kind,
                        payload,
                        written_at: write_time(w.write_time()),
                    };
                    return Ok(Some((rec, Place { offset: at, batch })));
                }
                Step::Hole { first, count } => {
                    // LSNs no record will ever have: nothing to yield,
                    // nothing missing. The walk reads on past them.
                    let after = first + count;
                    self.expect = Some(after);
                    self.given_up = Some((first, after - 1));
                    continue;
                }
                Step::End(end) => end,
            };
            if !self.at_end(end)? {
                return self.ended();
            }
        }
    }

    /// The walk of the current segment found `end`: whether reading goes
    /// on (the segment grew, or the next one follows), or the iteration
    /// ends there (`step` then checks it against what was promised). An
    /// error is damage, or `Released` where the segment was checkpointed
    /// away while read.
    fn at_end(&mut self, end: SegmentEnd) -> Result<bool> {
        let w = self.current.as_mut().expect("at the end of a walk");
        let newest = Some(w.file().base) == self.newest_base;
        // Records up to `upto` are known written: an end short of them
        // is a resident chunk read before they landed (a follower's
        // reader reads on past where it first stopped). One read.
        let due = self.expect.is_some_and(|e| e <= self.upto);
        if due && end.end != End::Full && w.grew()? {
            if self.recheck {
                let path = w.path().to_path_buf();
                if let Some(gap) = self.released(&path) {
                    // `next_with` reads on past it if every record of
                    // the released segment was read.
                    return Err(gap);
                }
            }
            return Ok(true);
        }
        // An older segment's data must end just below the next one's base.
        let next = self.segments.as_slice().first().filter(|_| !newest);
        let next_base = scan::declared_base(&*self.vfs, next, self.dir.node(), self.log_id)?;
        let pos = Position::of(newest, self.window, w.header()).followed_by(next_base);
        match w.judge(end, pos)? {
            Verdict::Clean | Verdict::Full if !newest => self.current = None,
            Verdict::Clean | Verdict::Full => return Ok(false),
            Verdict::Torn { .. } => {
                assert!(newest, "only the newest segment can be torn");
                self.torn_at = Some(end.data_end());
                return Ok(false);
            }
            // A live writer may have written past where this walk saw
            // the end: read again before calling it damage.
            Verdict::Corrupt(_) if newest && w.grew()? => {}
            Verdict::Corrupt(damage) => return Err(damage.error(w.path(), end)),
        }
        Ok(true)
    }

    /// The walk found the end of the data: the iteration's end, unless
    /// records it was promised are missing. A reader of a directory holds
    /// the end to the manifest's promises as recovery does
    /// ([`manifest::broken_promise`]); a reader of a live log to the
    /// written watermark it was made (or extended) with. Either way an
    /// end short of them is `Lost` (or `Gap`, for a missing segment),
    /// never a quiet end.
    fn ended<T>(&self) -> Result<Option<T>> {
        let last = self.expect.map_or(0, |e| e - 1);
        let last_file = self.current.as_ref().map(|w| w.path());
        if let Some(m) = &self.promise {
            let disk = manifest::OnDisk {
                oldest: self.oldest_listed,
                newest: self.newest_base,
                last_lsn: last,
                last_file,
            };
            if let Some(broken) = manifest::broken_promise(m, &self.dir, disk) {
                return Err(broken);
            }
        }
        if self.upto != Lsn::MAX && last < self.upto {
            return Err(Error::Lost {
                file: last_file.map_or_else(|| self.dir.path().to_path_buf(), Path::to_path_buf),
                durable: self.upto,
                last,
            });
        }
        Ok(None)
    }

    /// `e` (damage, an I/O error, or an end short of what was promised),
    /// or `Released` when the file it names is no longer one of the log's
    /// segments: a checkpoint released it (and recycling may have
    /// overwritten it) while this reader was on its way. Costs one
    /// directory listing, on the error path only.
    fn released_or(&self, e: Error) -> Error {
        let file = match &e {
            Error::Corrupt { file, .. } => file,
            Error::Io { path, .. } => path,
            // A live reader's file that ends short of the watermark: a
            // recycled spare's new header or zeros over a released
            // segment read through the handle it opened.
            Error::Lost { file, .. } => file,
            _ => return e,
        };
        let file = file.clone();
        self.released(&file).unwrap_or(e)
    }

    /// The `Released` to end with if `file` is no longer one of the log's
    /// segments (a checkpoint released it); `None` if it still is, or if
    /// the directory cannot be listed. Costs one directory listing.
    fn released(&self, file: &Path) -> Option<Error> {
        let listing = self.dir.list(&*self.vfs).ok()?;
        if listing.segments.iter().any(|s| s.path == file) {
            return None;
        }
        let expect = self.expect.unwrap_or(self.from);
        Some(Error::Released {
            file: file.to_path_buf(),
            lsn: expect,
            oldest: listing.segments.first().map_or(expect, |s| s.base),
        })
    }

    /// Read on up to `upto`, a higher written watermark, through the
    /// segments of `segments` (the log's list now) not listed before.
    /// Only for a reader that stopped at its watermark. `Released` if the
    /// records it would read next were checkpointed away meanwhile (even
    /// if the file it is on is still readable through its open handle).
    pub(crate) fn extend(&mut self, upto: Lsn, segments: &[SegmentFile]) -> Result<()> {
        assert!(upto >= self.upto, "a written watermark never goes back");
        debug_assert!(
            segments.windows(2).all(|w| w[0].base < w[1].base),
            "segments are listed by ascending base"
        );
        let next = self.expect.unwrap_or(self.from);
        let oldest = segments.first().map_or(next, |s| s.base);
        if next < oldest {
            return Err(Error::Released {
                file: self.dir.path().to_path_buf(),
                lsn: next,
                oldest,
            });
        }
        // A segment the reader has read nothing of may have been replaced
        // under its name since it was opened (an empty segment is rolled
        // past with the same base): open it afresh from the list now. It
        // costs a header read, and only while the segment is empty.
        if self.current.as_ref().is_some_and(|w| w.file().base == next) {
            self.current = None;
        }
        let rest: Vec<SegmentFile> = match &self.current {
            // Part way through a segment: the ones after it.
            Some(w) => {
                let base = w.file().base;
                segments.iter().filter(|s| s.base > base).cloned().collect()
            }
            // Between segments: from the one that holds `next` on.
            None => {
                let start = segments.iter().rposition(|s| s.base <= next).unwrap_or(0);
                segments[start..].to_vec()
            }
        };
        self.newest_base = segments.last().map(|s| s.base).or(self.newest_base);
        self.segments = rest.into_iter();
        self.upto = upto;
        self.done = false;
        self.torn_at = None;
        Ok(())
    }

    /// The LSN the next record will carry (or the start, before any).
    pub(crate) fn next_lsn(&self) -> Lsn {
        self.expect.unwrap_or(self.from).max(self.from)
    }

    /// The iterator's step with its end-of-iteration bookkeeping.
    fn next_with<T>(&mut self, f: impl FnOnce(&Self, Record, Place) -> T) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some((rec, at))) => Some(Ok(f(self, rec, at))),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                if self.read_on_past_release(&e) {
                    return self.next_with(f);
                }
                self.done = true;
                Some(Err(self.released_or(e)))
            }
        }
    }

    /// After `e` from the segment the walk is on: if a checkpoint released
    /// that segment (and the writer may have recycled its file) once the
    /// walk had read every record of it, the records wanted next are still
    /// kept in the segments after it, so the walk leaves the file and reads
    /// on from the segment that starts at the next LSN. True if it does;
    /// false leaves `e` to be answered (`Released` when the released segment
    /// held records not yet read). Costs one directory listing, on the
    /// error path only.
    fn read_on_past_release(&mut self, e: &Error) -> bool {
        let (Some(expect), Some(w)) = (self.expect, self.current.as_ref()) else {
            return false;
        };
        let file = w.path().to_path_buf();
        let released = match e {
            Error::Corrupt { file: f, .. } | Error::Lost { file: f, .. } => *f == file,
            Error::Io { path, .. } => *path == file,
            Error::Released { file: f, .. } => *f == file,
            _ => false,
        };
        if !released {
            return false;
        }
        let Ok(listing) = self.dir.list(&*self.vfs) else {
            return false;
        };
        let mut kept = listing.segments;
        if kept.iter().any(|s| s.path == file) {
            return false;
        }
        let Some(start) = kept.iter().position(|s| s.base == expect) else {
            return false;
        };
        assert!(
            kept[start].base > w.file().base,
            "a segment starting at the next LSN follows the one read to its end"
        );
        self.newest_base = kept.last().map(|s| s.base).max(self.newest_base);
        self.segments = kept.split_off(start).into_iter();
        self.current = None;
        true
    }
}

impl Iterator for Reader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        self.next_with(|_, rec, _| rec)
    }
}

/// [`Reader`] yielding [`RecordAt`]s: each record with its segment and
/// offset. From [`Reader::located`] or [`verify::records`](crate::recovery::verify::records).
#[derive(Debug)]
pub struct Located(Reader);

impl Iterator for Located {
    type Item = Result<RecordAt>;

    fn next(&mut self) -> Option<Result<RecordAt>> {
        self.0.next_with(|r, rec, place| {
            let segment = r
                .current
                .as_ref()
                .and_then(|w| w.path().file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            RecordAt {
                lsn: rec.lsn,
                stream: rec.stream,
                kind: rec.kind,
                len: rec.payload.len(),
                segment,
                offset: place.offset,
                batch: place.batch,
                payload: rec.payload,
                written_at: rec.written_at,
            }
        })
    }
}
