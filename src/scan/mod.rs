//! The one reader of segment bytes: open a segment, check its header
//! against its name, walk its frames in LSN order, and say how it ends.
//!
//! Recovery, `verify`, `stat`, the record [`Reader`](crate::Reader) and
//! the collector's replay all read segments through this module and
//! nothing else, so they cannot disagree about where a segment's data
//! ends or whether what follows is a torn write or damage (fuzz finding
//! F2 came from five walkers that did). A walk yields records until it
//! meets a typed [`End`]; [`Walker::judge`] turns that end and the
//! segment's [`Position`] into a [`Verdict`] with recovery's decision
//! table (see `verdict.rs`). What a consumer does with a verdict (cut,
//! fail, stop, skip to the next segment) is its own policy.
//!
//! Architecture invariant: no other module decodes frames or headers
//! from a file; `format` knows the bytes, this module knows the files.

mod bytes;
pub(crate) mod table;
mod verdict;

use std::fmt;
use std::path::Path;

use ringwal_platform::Vfs;

use crate::at_rest::format::{
    self, Batching, Decoded, FrameRef, HeaderError, InvalidFrame, Kind, SegmentHeader, Vouch,
};
use crate::error::{Corruption, Error, Lsn, Result};
use crate::segment::index::{self, Point};
use crate::segment::set::SegmentFile;

use bytes::SegmentScan;
pub(crate) use verdict::{Position, Verdict};

/// Why a segment's header block cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// What a crash while the segment was being created leaves, and
    /// nothing else: a file of a segment's shape (whole blocks, at least
    /// [`format::MIN_SEGMENT_BYTES`]; spares are preallocated before they
    /// get a segment's name) whose header blocks and first frame block
    /// were never written (the ring writes no frame into a segment before
    /// its header is durable, and no segment gets its name before that).
    NeverWritten,
    /// A blank header with data behind it: the header was lost after the
    /// segment was written to, so the segment may hold acknowledged
    /// records.
    LostHeader {
        /// The first non-zero byte after the header.
        data_at: u64,
    },
    /// A file no writer makes: shorter than a block, or a blank header on
    /// a file whose length is no segment's.
    Misshapen {
        /// The file's length.
        len: u64,
    },
    /// A header is there but is not valid: bad magic, an unknown version,
    /// a checksum mismatch.
    Invalid(HeaderError),
    /// Base LSN 0 (which means "none") or past [`format::MAX_LSN`] (which
    /// would make the LSN counter run out): damage, never a log to resume.
    BaseOutOfRange(Lsn),
    /// The header names another node or base LSN than the file name.
    NameMismatch {
        /// The node the header names.
        node: u32,
        /// The base LSN the header names.
        base: Lsn,
    },
    /// A version-2 segment of another log: its header's log id is not the
    /// one in this log's manifest.
    ForeignLog {
        /// The header's log id.
        found: u64,
        /// This log's.
        expected: u64,
    },
    /// The file is longer than the segment size its header declares.
    LongerThanDeclared {
        /// The file's length.
        file_len: u64,
        /// The header's segment size.
        declared: u64,
    },
}

impl HeaderProblem {
    /// True for a segment whose creation a crash interrupted: recovery may
    /// discard it when it is the newest file.
    pub fn never_written(&self) -> bool {
        matches!(self, HeaderProblem::NeverWritten)
    }

    /// The problem as the error a caller reports: `Corrupt`, naming the
    /// file and the offset of the first byte that is wrong.
    pub fn error(&self, file: &SegmentFile, node: u32) -> Error {
        let path = &file.path;
        let header =
            |offset, detail: String| Error::corrupt(path, offset, Corruption::Header(detail));
        match *self {
            HeaderProblem::NeverWritten => {
                header(0, format!("segment header: {}", HeaderError::Blank))
            }
            HeaderProblem::LostHeader { data_at } => header(
                0,
                format!(
                    "segment header is all zeros but data follows at offset {data_at}: \
                     the header was lost after the segment was written"
                ),
            ),
            HeaderProblem::Misshapen { len } => header(
                0,
                format!(
                    "a file of {len} bytes is no segment (segments are whole {}-byte \
                     blocks, at least {} bytes)",
                    format::BLOCK,
                    format::MIN_SEGMENT_BYTES
                ),
            ),
            HeaderProblem::Invalid(ref e) => header(0, format!("segment header: {e}")),
            HeaderProblem::BaseOutOfRange(base) => {
                header(0, format!("base LSN {base} out of range"))
            }
            HeaderProblem::NameMismatch { node: hn, base: hb } => header(
                0,
                format!(
                    "header says node {hn} base {hb}, file name says node {node} base {}",
                    file.base
                ),
            ),
            HeaderProblem::ForeignLog { found, expected } => {
                Error::corrupt(path, 0, Corruption::ForeignLog { found, expected })
            }
            HeaderProblem::LongerThanDeclared { file_len, declared } => header(
                declared,
                format!("file is {file_len} bytes, longer than the {declared} its header declares"),
            ),
        }
    }
}

/// Open `file` as a segment of `node` and check its header: it decodes
/// (from its copy, in version 2, if the header block is damaged), its base
/// LSN is in range, it agrees with the file name, a version-2 header
/// carries `log_id` (when the caller knows the log's id), and the file is no longer than the header declares.
///
/// `Err` is an I/O error; `Ok(Err(_))` a header that cannot be used (the
/// caller decides, by the segment's position, what that means). Cost: one
/// `open`, one `stat` and one 8 KiB read.
pub(crate) fn open(
    vfs: &dyn Vfs,
    file: &SegmentFile,
    node: u32,
    log_id: Option<u64>,
) -> Result<std::result::Result<Walker, HeaderProblem>> {
    let scan = match SegmentScan::open(vfs, &file.path)? {
        Ok(scan) => scan,
        Err(r) => {
            let segment_shaped = r.file_len.is_multiple_of(format::BLOCK as u64)
                && r.file_len >= format::MIN_SEGMENT_BYTES;
            return Ok(Err(match (r.error, r.data_at) {
                (HeaderError::Short, _) => HeaderProblem::Misshapen { len: r.file_len },
                (HeaderError::Blank, _) if !segment_shaped => {
                    HeaderProblem::Misshapen { len: r.file_len }
                }
                (HeaderError::Blank, Some(data_at)) => HeaderProblem::LostHeader { data_at },
                (HeaderError::Blank, None) => HeaderProblem::NeverWritten,
                (e, _) => HeaderProblem::Invalid(e),
            }));
        }
    };
    let h = scan.header;
    if h.base_lsn == 0 || h.base_lsn > format::MAX_LSN {
        return Ok(Err(HeaderProblem::BaseOutOfRange(h.base_lsn)));
    }
    if h.node != node || h.base_lsn != file.base {
        return Ok(Err(HeaderProblem::NameMismatch {
            node: h.node,
            base: h.base_lsn,
        }));
    }
    if h.version >= 2
        && let Some(expected) = log_id.filter(|&id| id != h.log_id)
    {
        return Ok(Err(HeaderProblem::ForeignLog {
            found: h.log_id,
            expected,
        }));
    }
    if scan.file_len > h.segment_bytes {
        return Ok(Err(HeaderProblem::LongerThanDeclared {
            file_len: scan.file_len,
            declared: h.segment_bytes,
        }));
    }
    Ok(Ok(Walker {
        file: file.clone(),
        off: h.frames_start(),
        expect: h.base_lsn,
        records: 0,
        given_up: 0,
        vouched: 0,
        write: None,
        batch: None,
        ended: None,
        scan,
    }))
}

/// The base LSN `next`'s header declares, which the segment before it
/// must end just below ([`Position::followed_by`]). `None` without a
/// next segment, or when its header cannot be used (it then does not
/// vouch for its name either): that is the next file's own damage, which
/// reading it reports, and says nothing of the segment before it. Cost,
/// with a next segment: one `open`, one `stat` and one 8 KiB read.
pub(crate) fn declared_base(
    vfs: &dyn Vfs,
    next: Option<&SegmentFile>,
    node: u32,
    log_id: Option<u64>,
) -> Result<Option<Lsn>> {
    let Some(next) = next else {
        return Ok(None);
    };
    let base = open(vfs, next, node, log_id)?
        .ok()
        .map(|w| w.header().base_lsn);
    // `open` refuses a header that contradicts its file's name.
    debug_assert!(base.is_none_or(|b| b == next.base));
    Ok(base)
}

/// Take the newest of `files` off if a crash left it never written (see
/// [`HeaderProblem::NeverWritten`]) and return it: recovery discards it,
/// readers pass over it. Only the newest: a writer installs one segment
/// at a time, so a never-written file before another is damage, which
/// reading it reports. Cost: one header read.
pub(crate) fn pop_never_written(
    vfs: &dyn Vfs,
    files: &mut Vec<SegmentFile>,
    node: u32,
    log_id: Option<u64>,
) -> Result<Option<SegmentFile>> {
    let Some(last) = files.last() else {
        return Ok(None);
    };
    Ok(match open(vfs, last, node, log_id)? {
        Err(p) if p.never_written() => files.pop(),
        _ => None,
    })
}

/// How the frames of a segment end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The frames fill the segment to the end of its frame area.
    Full,
    /// A frame header of zeros: never-written space (or lost data).
    Zero,
    /// Bytes that are not a valid frame.
    Invalid(InvalidFrame),
    /// A valid frame carrying another LSN than the next one.
    LsnBreak {
        /// The LSN the frame carries.
        found: Lsn,
        /// The LSN that should come next.
        expected: Lsn,
    },
    /// A valid frame that a writer never puts inside an unfinished batch
    /// (a record standing alone, or a skip): the batch was reserved under
    /// one lock, so its records are consecutive.
    BatchBreak {
        /// The LSN the frame carries.
        found: Lsn,
    },
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Full => write!(f, "end of segment"),
            End::Zero => write!(f, "end of written data"),
            End::Invalid(why) => write!(f, "{why}"),
            End::LsnBreak { found, expected } => {
                write!(f, "frame LSN {found} where {expected} was expected")
            }
            End::BatchBreak { found } => {
                write!(f, "frame LSN {found} inside an unfinished atomic batch")
            }
        }
    }
}

/// An atomic batch whose last record the walk never found: its records
/// are not part of the data (a reader never yields part of a batch), and
/// recovery judges the frames' real end to decide whether the batch is a
/// torn tail or damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenBatch {
    /// Offset of the batch's first frame: where the complete data ends.
    pub at: u64,
    /// The batch's first LSN: the next LSN of the complete data.
    pub first: Lsn,
}

/// Where a walk stopped and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentEnd {
    /// Offset of the first byte that is not part of the run of valid frames.
    pub at: u64,
    /// What is there.
    pub end: End,
    /// The LSN the next record would have carried: what a write vouching
    /// for it or past it proves was acknowledged.
    pub expect: Lsn,
    /// The unfinished batch the valid frames end in, if any: the complete
    /// data then ends at its start, before `at`.
    pub batch: Option<OpenBatch>,
}

impl fmt::Display for SegmentEnd {
    /// What ends the data: the frame's problem, or the unfinished batch
    /// and where its frames stop.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.batch {
            None => write!(f, "{}", self.end),
            Some(b) => write!(
                f,
                "atomic batch from LSN {} unfinished ({} at offset {})",
                b.first, self.end, self.at
            ),
        }
    }
}

impl SegmentEnd {
    /// Where the complete data ends: a cut of a torn tail starts here.
    pub fn data_end(&self) -> u64 {
        // An unfinished batch starts before the frames stop, and its
        // LSNs run up to the one the walk expected there.
        debug_assert!(self
            .batch
            .is_none_or(|b| b.at < self.at && b.first <= self.expect));
        self.batch.map_or(self.at, |b| b.at)
    }

    /// The first LSN not in the complete data: what a write vouching for
    /// it proves was acknowledged (watermarks never stop inside a batch).
    pub fn due(&self) -> Lsn {
        self.batch.map_or(self.expect, |b| b.first)
    }
}

/// The valid frames found behind a point (see [`Walker::frames_after`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FramesAfter {
    /// Record frames (not padding, vouch or skip).
    pub records: u64,
    /// The highest LSN among them, skips included; 0 if none.
    pub highest_lsn: Lsn,
}

/// One step of a walk.
#[derive(Debug)]
pub(crate) enum Step<'a> {
    /// The next record (padding is stepped over), borrowed from the
    /// walker's buffer.
    Record {
        /// Offset of its frame in the segment.
        at: u64,
        /// The frame.
        frame: FrameRef<'a>,
        /// The first LSN of its atomic batch; `None` for a record that
        /// stands alone.
        batch: Option<Lsn>,
        /// The vouch that opened the write holding it; `None` before the
        /// segment's first (version 1 has none).
        write: Option<WriteStart>,
    },
    /// LSNs `first..first + count` will never hold a record: a point-in-
    /// time recovery resumed above them rather than hand them out again.
    Hole {
        /// The first LSN skipped.
        first: Lsn,
        /// How many.
        count: u64,
    },
    /// The run of valid frames ended; every later call says the same.
    End(SegmentEnd),
}

/// The nonce salt of the payloads sealed in the write `write` opened, in
/// a segment with `header` (docs/format.md §3.5): the vouch's own
/// (version 4), else the header's salt (versions 2 and 3, whose vouches
/// carry none, and a frame before any vouch).
pub(crate) fn nonce_salt(write: Option<WriteStart>, header: &SegmentHeader) -> u64 {
    write
        .and_then(|w| w.vouch.nonce_salt)
        .unwrap_or(header.salt)
}

/// The vouch frame that opened a write: every write starts with one
/// (docs/format.md §4), so the last one a walk stepped over opened the
/// write it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteStart {
    /// Offset of the vouch frame: where the write starts.
    pub at: u64,
    /// What it says.
    pub vouch: Vouch,
}

/// A frame's header fields, copied out so the walk can look ahead
/// without holding a borrow of the buffer.
#[derive(Clone, Copy, Debug)]
struct Head {
    lsn: Lsn,
    stream: u16,
    kind: Kind,
    flags: u8,
    payload_len: usize,
    len: usize,
}

/// What one frame means to a walk that expects LSN `expect` next.
enum Raw {
    /// Padding or a vouch: step over `len` bytes. A vouch that vouches
    /// (docs/format.md §3.2) says what it vouches for.
    Filler { len: usize, vouch: Option<Vouch> },
    /// A record carrying the expected LSN.
    Record(Head),
    /// A skip frame: `count` LSNs from the expected one hold no record.
    Hole { count: u64, len: usize },
    /// The valid frames end here.
    Stop(End),
}

/// Decode the frame at `at` and say what it means to a walk expecting
/// `expect`: the one place that decides, frame by frame, whether the run
/// of valid frames goes on. Both the walk and its look-ahead over a batch
/// use it.
fn raw_at(scan: &mut SegmentScan, at: u64, expect: Lsn) -> Result<Raw> {
    if at >= scan.end() {
        return Ok(Raw::Stop(End::Full));
    }
    let (h, word, vouch) = match scan.frame_at(at)? {
        Decoded::Frame(f) => (
            Head {
                lsn: f.lsn,
                stream: f.stream,
                kind: f.kind,
                flags: f.flags,
                payload_len: f.payload.len(),
                len: f.len,
            },
            f.word(),
            f.vouch(),
        ),
        Decoded::Zero => return Ok(Raw::Stop(End::Zero)),
        Decoded::Invalid(why) => return Ok(Raw::Stop(End::Invalid(why))),
    };
    // A valid frame covers its header and ends 8-aligned, so the walk
    // moves forward and stays on frame starts.
    debug_assert!(h.len >= format::FRAME_HEADER && h.len.is_multiple_of(format::FRAME_ALIGN));
    Ok(match h.kind {
        Kind::Padding => Raw::Filler {
            len: h.len,
            vouch: None,
        },
        Kind::Vouch => Raw::Filler { len: h.len, vouch },
        _ if h.lsn != expect => Raw::Stop(End::LsnBreak {
            found: h.lsn,
            expected: expect,
        }),
        // A skip of no LSNs, or one that would run past the format's last
        // LSN, is no frame a writer makes.
        Kind::Skip => match word {
            Some(n) if n > 0 && h.lsn <= format::MAX_LSN && n - 1 <= format::MAX_LSN - h.lsn => {
                Raw::Hole {
                    count: n,
                    len: h.len,
                }
            }
            _ => Raw::Stop(End::Invalid(InvalidFrame::Kind(h.kind as u8))),
        },
        _ => Raw::Record(h),
    })
}

/// Where a record stands in an atomic batch (see `Walker::place`).
enum Placed {
    /// Yield it, with the first LSN of its batch (`None`: it stands alone).
    In(Option<Lsn>),
    /// The first record of a batch now known whole: decode it again.
    Again,
    /// The valid frames end here.
    End(SegmentEnd),
}

/// How a batch that starts at a given frame turns out.
enum BatchRun {
    /// Its last record is there, with this LSN.
    Whole(Lsn),
    /// The valid frames end first, at this offset, expecting this LSN.
    Unfinished { at: u64, end: End, expect: Lsn },
}

/// A segment being read front to back, frame by frame, checking that
/// LSNs run on from the base without a break, and yielding an atomic
/// batch's records only once its last record is known to be there.
pub(crate) struct Walker {
    file: SegmentFile,
    scan: SegmentScan,
    /// Where the next frame starts: just past the last valid one.
    off: u64,
    /// The LSN the next record must carry.
    expect: Lsn,
    records: u64,
    /// LSNs the skip frames read so far gave up.
    given_up: u64,
    /// The highest durable LSN a vouch read so far carried; 0 before one.
    vouched: Lsn,
    /// The vouch that opened the write the walk is in.
    write: Option<WriteStart>,
    /// The batch being yielded, known whole: its first and last LSN.
    batch: Option<(Lsn, Lsn)>,
    /// Set once the walk ended in an unfinished batch: the walk stays
    /// ended there.
    ended: Option<SegmentEnd>,
}

impl Walker {
    /// The next record, or where and why the frames end.
    ///
    /// Cost: no allocation; one CRC pass per frame; a read of 1 MiB (or of
    /// the frame, if larger) whenever the walk leaves the resident chunk.
    /// At the first record of a batch, the walk reads ahead to the batch's
    /// last record (one more CRC pass over the batch, and a re-read of the
    /// chunk it started in when the batch is larger than one).
    pub fn next(&mut self) -> Result<Step<'_>> {
        if let Some(end) = self.ended {
            return Ok(Step::End(end));
        }
        loop {
            let at = self.off;
            // Frames start 8-aligned, inside the frame area, and the walk
            // only moves forward over whole frames.
            debug_assert!(
                at.is_multiple_of(format::FRAME_ALIGN as u64)
                    && at >= self.scan.header.frames_start()
            );
            let h = match raw_at(&mut self.scan, at, self.expect)? {
                Raw::Filler { len, vouch } => {
                    if let Some(vouch) = vouch {
                        self.opened(WriteStart { at, vouch });
                    }
                    self.off += len as u64;
                    continue;
                }
                Raw::Stop(end) => return Ok(Step::End(self.end_here(end))),
                Raw::Hole { .. } if self.batch.is_some() => {
                    let found = self.expect;
                    return Ok(Step::End(self.end_here(End::BatchBreak { found })));
                }
                Raw::Hole { count, len } => {
                    let first = self.expect;
                    self.expect += count;
                    self.given_up += count;
                    self.off += len as u64;
                    return Ok(Step::Hole { first, count });
                }
                Raw::Record(h) => h,
            };
            return match self.place(at, h)? {
                Placed::In(batch) => Ok(self.record(at, h, batch)),
                Placed::Again => continue,
                Placed::End(end) => Ok(Step::End(end)),
            };
        }
    }

    /// The walk stepped over the vouch opening the write at `w.at`.
    fn opened(&mut self, w: WriteStart) {
        self.vouched = self.vouched.max(w.vouch.durable);
        self.write = Some(w);
    }

    /// Where the record `h` at `at` stands in an atomic batch: alone, in
    /// the batch being yielded (its first LSN), or the first of a batch,
    /// which is read ahead to its last record before any of it is
    /// yielded: whole, the walk decodes `h` again; unfinished, the walk
    /// ends there for good.
    fn place(&mut self, at: u64, h: Head) -> Result<Placed> {
        let place = Batching::from_flags(h.flags).unwrap_or(Batching::Alone);
        Ok(match (place, self.batch) {
            (Batching::Alone, None) => Placed::In(None),
            // Known whole a moment ago: the file changed under the walk
            // (recycled by a checkpoint).
            (Batching::Alone, Some(_)) => {
                Placed::End(self.end_here(End::BatchBreak { found: h.lsn }))
            }
            (_, Some((first, last))) => {
                debug_assert!(first <= h.lsn && h.lsn <= last, "{h:?} in {first}..={last}");
                Placed::In(Some(first))
            }
            (_, None) => match self.batch_run(at)? {
                BatchRun::Whole(last) => {
                    self.batch = Some((h.lsn, last));
                    // The look-ahead moved the resident chunk: decode
                    // this frame again before lending out its payload.
                    Placed::Again
                }
                BatchRun::Unfinished {
                    at: stop,
                    end,
                    expect,
                } => {
                    let open = SegmentEnd {
                        at: stop,
                        end,
                        expect,
                        batch: Some(OpenBatch { at, first: h.lsn }),
                    };
                    self.ended = Some(open);
                    Placed::End(open)
                }
            },
        })
    }

    /// Step over the record `h` at `at` and lend it out. The frame was
    /// checked by `raw_at` and is still resident: its payload is handed
    /// out without decoding it twice.
    fn record(&mut self, at: u64, h: Head, batch: Option<Lsn>) -> Step<'_> {
        // `raw_at` stops the walk at any other LSN.
        debug_assert_eq!(h.lsn, self.expect);
        if self.batch.is_some_and(|(_, last)| last == h.lsn) {
            self.batch = None;
        }
        self.expect += 1;
        self.records += 1;
        self.off += h.len as u64;
        let payload = self
            .scan
            .resident(at + format::FRAME_HEADER as u64, h.payload_len);
        Step::Record {
            at,
            frame: FrameRef {
                lsn: h.lsn,
                stream: h.stream,
                kind: h.kind,
                flags: h.flags,
                payload,
                len: h.len,
            },
            batch,
            write: self.write,
        }
    }

    /// Read ahead from the batch record at `from` (the walk's position) to
    /// the batch's last record, without moving the walk.
    fn batch_run(&mut self, from: u64) -> Result<BatchRun> {
        let (mut at, mut expect) = (from, self.expect);
        loop {
            let unfinished = |end| BatchRun::Unfinished { at, end, expect };
            match raw_at(&mut self.scan, at, expect)? {
                Raw::Filler { len, .. } => at += len as u64,
                Raw::Stop(end) => return Ok(unfinished(end)),
                Raw::Hole { .. } => return Ok(unfinished(End::BatchBreak { found: expect })),
                Raw::Record(h) => match Batching::from_flags(h.flags) {
                    Some(Batching::Last) => return Ok(BatchRun::Whole(h.lsn)),
                    Some(Batching::Member) => {
                        at += h.len as u64;
                        expect += 1;
                    }
                    _ => return Ok(unfinished(End::BatchBreak { found: h.lsn })),
                },
            }
        }
    }

    /// `end`, met where the walk stands.
    fn end_here(&self, end: End) -> SegmentEnd {
        SegmentEnd {
            at: self.off,
            end,
            expect: self.expect,
            batch: None,
        }
    }

    /// Walk to the end of the valid frames and return how they end.
    pub fn walk_to_end(&mut self) -> Result<SegmentEnd> {
        self.walk_to_end_visiting(|_, _, _, _| {})
    }

    /// [`walk_to_end`](Self::walk_to_end), showing `visit` every record on
    /// the way (never one of an unfinished batch) with its frame's offset,
    /// the first LSN of its batch (`None`: it stands alone) and the vouch
    /// that opened its write.
    pub fn walk_to_end_visiting(
        &mut self,
        mut visit: impl FnMut(u64, &FrameRef, Option<Lsn>, Option<WriteStart>),
    ) -> Result<SegmentEnd> {
        loop {
            match self.next()? {
                Step::Record {
                    at,
                    frame,
                    batch,
                    write,
                } => visit(at, &frame, batch, write),
                Step::Hole { .. } => {}
                Step::End(end) => return Ok(end),
            }
        }
    }

    /// What valid frames lie at or after `from`: every 8-aligned offset is
    /// tried (runs of zeros are skipped whole), so frames a damaged write
    /// left mid-block count too. How many records there are behind a torn
    /// tail that recovery cuts, and the highest LSN any of them carries (a
    /// skip frame: the last LSN it covers), which a point-in-time recovery
    /// must resume above so that no LSN on disk is handed out again. Reads
    /// the rest of the segment; a decode is tried at each non-zero word.
    pub fn frames_after(&mut self, from: u64) -> Result<FramesAfter> {
        let mut out = FramesAfter::default();
        let align = format::FRAME_ALIGN as u64;
        let end = self.scan.end();
        let mut off = from
            .next_multiple_of(align)
            .max(self.scan.header.frames_start());
        while off < end {
            match self.scan.frame_at(off)? {
                Decoded::Frame(f) => {
                    let last = match (f.kind, f.word()) {
                        (Kind::Padding | Kind::Vouch, _) => 0,
                        (Kind::Skip, Some(n)) => f.lsn.saturating_add(n.saturating_sub(1)),
                        _ => {
                            out.records += 1;
                            f.lsn
                        }
                    };
                    if last <= format::MAX_LSN {
                        out.highest_lsn = out.highest_lsn.max(last);
                    }
                    off += f.len as u64;
                }
                Decoded::Zero => match self.scan.first_nonzero(off, end)? {
                    Some(nz) => off = (nz - nz % align).max(off + align),
                    None => break,
                },
                Decoded::Invalid(_) => off += align,
            }
        }
        Ok(out)
    }

    /// The first record past `at` that a walk can start from: a valid
    /// frame at an 8-aligned offset after `at` (the frames a damaged one
    /// is followed by in its write count: every offset is tried, and runs
    /// of zeros are skipped whole) that carries a record standing alone
    /// (not inside an atomic batch, whose start would be missing) with an
    /// LSN of at least `min`, and that `fits` accepts (given its offset).
    /// Returns its LSN and offset; `None` if no such record is left in
    /// the segment. For salvage, which gives up what lies between. Cost:
    /// a read of the rest of the segment at most; a decode at each
    /// non-zero word until one is found.
    pub fn record_after(
        &mut self,
        at: u64,
        min: Lsn,
        fits: impl Fn(u64) -> bool,
    ) -> Result<Option<(Lsn, u64)>> {
        let align = format::FRAME_ALIGN as u64;
        let end = self.scan.end();
        let mut off = (at + 1).next_multiple_of(align);
        while off < end {
            match self.scan.frame_at(off)? {
                Decoded::Frame(f) => {
                    let alone = Batching::from_flags(f.flags) == Some(Batching::Alone);
                    let record = !matches!(f.kind, Kind::Padding | Kind::Vouch | Kind::Skip);
                    if record && alone && f.lsn >= min && f.lsn <= format::MAX_LSN && fits(off) {
                        return Ok(Some((f.lsn, off)));
                    }
                    off += align;
                }
                Decoded::Zero => match self.scan.first_nonzero(off, end)? {
                    Some(nz) => off = (nz - nz % align).max(off + align),
                    None => break,
                },
                Decoded::Invalid(_) => off += align,
            }
        }
        Ok(None)
    }

    /// Start the walk at the index point `p` instead of the segment's
    /// first frame, if a record carrying `p.lsn` starts there; otherwise
    /// (a point of another life of this file name) the walk stays at the
    /// start. Only before the first step. The frames before `p` are then
    /// never read, so damage among them goes unseen: for reads, which
    /// want the records from `p` on, never for recovery or `verify`. The
    /// vouch opening the point's write (at `p.write_at`) is read, so the
    /// walk knows its write time; [`vouched`](Self::vouched) counts it
    /// and the vouches after `p` only.
    /// Cost: one read of 128 KiB (not the usual 1 MiB: a point read looks
    /// at a few frames) and one CRC pass over the frame and the vouch;
    /// one more read of a block when the write began over 64 KiB before
    /// the point.
    pub fn seek(&mut self, p: Point) -> Result<bool> {
        assert!(
            self.records == 0 && self.off == self.scan.header.frames_start(),
            "a walk seeks before its first step"
        );
        if p.lsn < self.expect || p.offset < self.off {
            return Ok(false);
        }
        // Enough for the walk to the next point and a record of up to
        // 64 KiB past it: most point reads then need one read, begun at
        // the write's vouch when that is near.
        let spacing = index::SPACING as usize;
        let opened = if (self.off..p.offset).contains(&p.write_at) {
            let behind = (p.offset - p.write_at) as usize;
            let first = if behind <= spacing {
                behind + 2 * spacing
            } else {
                format::BLOCK
            };
            self.scan.read_next(first);
            match self.scan.frame_at(p.write_at)? {
                Decoded::Frame(f) => f.vouch().map(|vouch| WriteStart {
                    at: p.write_at,
                    vouch,
                }),
                _ => None,
            }
        } else {
            None
        };
        self.scan.read_next(2 * spacing);
        Ok(match raw_at(&mut self.scan, p.offset, p.lsn)? {
            Raw::Record(_) => {
                self.off = p.offset;
                self.expect = p.lsn;
                if let Some(w) = opened {
                    self.opened(w);
                }
                true
            }
            _ => false,
        })
    }

    /// Drop what the walk has read from the page cache behind it (see
    /// `SegmentScan::drop_behind`): for recovery's one pass over a log.
    pub fn drop_behind(&mut self) {
        self.scan.drop_behind();
    }

    /// Whether the header was read from its copy (the header block was
    /// damaged or blank).
    pub fn header_from_copy(&self) -> bool {
        self.scan.from_copy
    }

    /// Judge how this segment ends (see [`Verdict`]): reads the bytes
    /// after `end` as far as the decision needs, up to the segment's end.
    pub fn judge(&mut self, end: SegmentEnd, pos: Position) -> Result<Verdict> {
        verdict::judge(&mut self.scan, end, pos)
    }

    /// True if, read from the file again, a frame that continues the walk
    /// now starts where it ended: a live writer wrote there after this
    /// walker read the bytes. Costs one read.
    /// The walk then reads on from where it stopped (an unfinished batch
    /// is looked at again from its start).
    pub fn grew(&mut self) -> Result<bool> {
        self.scan.refresh();
        // Where the valid frames really stopped: past the complete data
        // when they end in an unfinished batch.
        let (at, expect) = match self.ended.take() {
            Some(e) => (e.at, e.expect),
            None => (self.off, self.expect),
        };
        if at >= self.scan.end() {
            return Ok(false);
        }
        Ok(match self.scan.frame_at(at)? {
            Decoded::Frame(f) => matches!(f.kind, Kind::Padding | Kind::Vouch) || f.lsn == expect,
            _ => false,
        })
    }

    /// The offset of the first non-zero byte in `[from, to)`, if any.
    pub fn first_nonzero(&mut self, from: u64, to: u64) -> Result<Option<u64>> {
        self.scan.first_nonzero(from, to)
    }

    /// The segment's validated header.
    pub fn header(&self) -> &SegmentHeader {
        &self.scan.header
    }

    /// The segment file.
    pub fn file(&self) -> &SegmentFile {
        &self.file
    }

    /// The segment's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Just past the last valid frame read so far.
    pub fn valid_end(&self) -> u64 {
        self.off
    }

    /// The LSN of the last record read so far, or of the last LSN a skip
    /// frame covered (base - 1 before the first).
    pub fn last_lsn(&self) -> Lsn {
        self.expect - 1
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// LSNs given up by the skip frames read so far: with
    /// [`records`](Self::records), every LSN from the base to
    /// [`last_lsn`](Self::last_lsn) is one or the other.
    pub fn given_up(&self) -> u64 {
        self.given_up
    }

    /// End of the frame area: the smaller of the file's length and the
    /// size its header declares.
    pub fn end(&self) -> u64 {
        self.scan.end()
    }

    /// The highest durable LSN that any vouch the walk has stepped over
    /// in this segment carried (0 before the first, and always in a
    /// version-1 segment, which has none): every LSN up to it was on
    /// stable storage before the write holding that vouch was submitted.
    /// Vouches before a [`seek`](Self::seek) point are not read, and a
    /// batch's look-ahead counts only once the walk steps over them.
    /// Costs nothing: the walk decodes every vouch anyway.
    #[cfg_attr(
        not(any(test, feature = "archive")),
        expect(
            dead_code,
            reason = "the archiver's bound for a tail (feature `archive`)"
        )
    )]
    pub fn vouched(&self) -> Lsn {
        self.vouched
    }

    /// The write time of the write the walk is in, so of the record it
    /// yielded last: when the ring submitted it, in nanoseconds since the
    /// Unix epoch, as the vouch opening it says (docs/format.md §3.2).
    /// `None` before the first vouch and when that vouch carries no time
    /// (versions 1 and 2). Wall-clock time: informational, and not
    /// monotonic if the writer's clock stepped back. Costs nothing.
    pub fn write_time(&self) -> Option<u64> {
        self.write.and_then(|w| w.vouch.submitted_unix_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::verdict::Damage;
    use ringwal_platform::RealFs;

    const SALT: u64 = 0x5eed_1234;
    const SEG: usize = 64 << 10;
    const B: u64 = format::BLOCK as u64;
    /// The writer's torn window recorded in the headers below: two blocks.
    const WINDOW: u64 = 2 * B;

    /// A version-2 vouch for `durable`: no time.
    fn untimed(durable: Lsn) -> format::Vouch {
        format::Vouch {
            durable,
            submitted_unix_ns: None,
            nonce_salt: None,
        }
    }

    /// A segment image of node 1, base 1, as a writer lays it out.
    struct Image {
        bytes: Vec<u8>,
        next_lsn: Lsn,
    }

    impl Image {
        fn new() -> Image {
            let mut bytes = vec![0u8; SEG];
            SegmentHeader {
                version: 1,
                log_id: 0,
                key_id: 0,
                key_check: 0,
                node: 1,
                base_lsn: 1,
                segment_bytes: SEG as u64,
                salt: SALT,
                created_unix_ms: 0,
                torn_window: WINDOW,
            }
            .encode(&mut bytes);
            Image { bytes, next_lsn: 1 }
        }

        /// One write at block offset `at`: `n` records of `size` bytes,
        /// closed with padding. Returns the offset just past it.
        fn write(&mut self, at: u64, n: usize, size: usize) -> u64 {
            let mut off = at as usize;
            for _ in 0..n {
                let p = vec![self.next_lsn as u8; size];
                off += format::encode_frame(
                    &mut self.bytes[off..],
                    SALT,
                    self.next_lsn,
                    0,
                    Kind::Data,
                    &p,
                );
                self.next_lsn += 1;
            }
            let pad = format::padding_len(off as u64);
            if pad > 0 {
                format::encode_padding(&mut self.bytes[off..], SALT, pad);
            }
            (off + pad) as u64
        }

        /// Walk the image as `pos` and judge how it ends.
        fn judge(&self, newest: bool) -> (SegmentEnd, Verdict, u64) {
            self.judge_before(newest, None)
        }

        /// The same, followed by a segment whose header declares `next_base`.
        fn judge_before(&self, newest: bool, next_base: Option<Lsn>) -> (SegmentEnd, Verdict, u64) {
            let dir = tempfile::tempdir().unwrap();
            let file = SegmentFile {
                base: 1,
                path: dir.path().join(format::segment_file_name(1, 1)),
            };
            std::fs::write(&file.path, &self.bytes).unwrap();
            let mut w = open(&RealFs, &file, 1, None).unwrap().unwrap();
            let end = w.walk_to_end().unwrap();
            let pos = Position::of(newest, 0, w.header()).followed_by(next_base);
            let v = w.judge(end, pos).unwrap();
            (end, v, w.records())
        }
    }

    impl Image {
        /// A version-2 segment of log 9: header and copy, frames at 8 KiB.
        fn v2() -> Image {
            let mut bytes = vec![0u8; SEG];
            SegmentHeader {
                version: 2,
                log_id: 9,
                key_id: 0,
                key_check: 0,
                node: 1,
                base_lsn: 1,
                segment_bytes: SEG as u64,
                salt: SALT,
                created_unix_ms: 0,
                torn_window: WINDOW,
            }
            .encode_blocks(&mut bytes);
            Image { bytes, next_lsn: 1 }
        }

        /// One version-2 write at `at`: a vouch for `durable`, then `n`
        /// records of `size` bytes, closed with padding.
        fn write_vouched(&mut self, at: u64, durable: Lsn, n: usize, size: usize) -> u64 {
            format::encode_vouch(&mut self.bytes[at as usize..], SALT, untimed(durable));
            self.write(at + format::VOUCH_LEN_V2 as u64, n, size)
        }
    }

    impl Image {
        /// The records of an atomic batch of `n`, `size` bytes each, from
        /// offset `at` with no padding: with its last record if `finish`,
        /// else only its first `n - 1`. Returns the offset just past them.
        fn batch(&mut self, at: u64, n: usize, size: usize, finish: bool) -> u64 {
            let mut off = at as usize;
            let upto = if finish { n } else { n - 1 };
            for i in 0..upto {
                let place = if i + 1 == n {
                    Batching::Last
                } else {
                    Batching::Member
                };
                let p = vec![self.next_lsn as u8; size];
                off += format::encode_record(
                    &mut self.bytes[off..],
                    SALT,
                    self.next_lsn,
                    0,
                    Kind::Data,
                    place,
                    &p,
                );
                self.next_lsn += 1;
            }
            off as u64
        }

        /// Close a write at `off` with padding to the next block.
        fn pad(&mut self, off: u64) -> u64 {
            let pad = format::padding_len(off);
            if pad > 0 {
                format::encode_padding(&mut self.bytes[off as usize..], SALT, pad);
            }
            off + pad as u64
        }

        /// Every step of a walk: (LSN, batch) per record, then the end.
        fn steps(&self) -> (Vec<(Lsn, Option<Lsn>)>, SegmentEnd) {
            let dir = tempfile::tempdir().unwrap();
            let file = SegmentFile {
                base: 1,
                path: dir.path().join(format::segment_file_name(1, 1)),
            };
            std::fs::write(&file.path, &self.bytes).unwrap();
            let mut w = open(&RealFs, &file, 1, None).unwrap().unwrap();
            let mut seen = Vec::new();
            loop {
                match w.next().unwrap() {
                    Step::Record { frame, batch, .. } => seen.push((frame.lsn, batch)),
                    Step::Hole { .. } => panic!("no holes written"),
                    Step::End(e) => {
                        // The walk stays ended where it stopped.
                        assert!(matches!(w.next().unwrap(), Step::End(again) if again == e));
                        return (seen, e);
                    }
                }
            }
        }
    }

    /// A version-3 vouch for `durable`, submitted at `t`.
    fn timed(durable: Lsn, t: u64) -> format::Vouch {
        format::Vouch {
            durable,
            submitted_unix_ns: Some(t),
            nonce_salt: None,
        }
    }

    #[test]
    fn a_walker_knows_each_records_write_time_even_from_a_seek_point() {
        let mut img = Image::v2();
        let mut h = SegmentHeader::decode(&img.bytes).unwrap();
        h.version = 3;
        h.encode_blocks(&mut img.bytes);
        let start = format::HEADER_BYTES as u64;
        let n = format::encode_vouch(&mut img.bytes[start as usize..], SALT, timed(0, 1_000));
        assert_eq!(n, format::VOUCH_LEN_V3);
        let a = img.write(start + n as u64, 3, 100);
        // An 8-byte vouch vouches in any version, with no time.
        let n = format::encode_vouch(&mut img.bytes[a as usize..], SALT, untimed(3));
        let b = img.write(a + n as u64, 2, 100);
        let n = format::encode_vouch(&mut img.bytes[b as usize..], SALT, timed(5, 3_000));
        img.write(b + n as u64, 4, 100);
        let dir = tempfile::tempdir().unwrap();
        let file = SegmentFile {
            base: 1,
            path: dir.path().join(format::segment_file_name(1, 1)),
        };
        std::fs::write(&file.path, &img.bytes).unwrap();
        let walk = |seek: Option<Point>| {
            let mut w = open(&RealFs, &file, 1, None).unwrap().unwrap();
            assert_eq!(w.write_time(), None);
            let sought = seek.map(|p| w.seek(p).unwrap());
            let mut seen = Vec::new();
            loop {
                let (lsn, write) = match w.next().unwrap() {
                    Step::Record { frame, write, .. } => (frame.lsn, write),
                    Step::Hole { .. } => panic!("no holes written"),
                    Step::End(_) => break,
                };
                assert_eq!(
                    write.and_then(|w| w.vouch.submitted_unix_ns),
                    w.write_time()
                );
                seen.push((lsn, w.write_time(), w.vouched()));
            }
            (sought, seen)
        };
        let t1 = Some(1_000);
        let t3 = Some(3_000);
        let (_, all) = walk(None);
        let want = [
            (1, t1, 0),
            (2, t1, 0),
            (3, t1, 0),
            (4, None, 3),
            (5, None, 3),
            (6, t3, 5),
            (7, t3, 5),
            (8, t3, 5),
            (9, t3, 5),
        ];
        assert_eq!(all, want);
        // A point on LSN 7, in the write whose vouch is at `b`: the walk
        // starting there reads that vouch for the write time.
        let r7 = b + format::VOUCH_LEN_V3 as u64 + format::frame_len(100) as u64;
        let point = |write_at| Point {
            lsn: 7,
            offset: r7,
            write_at,
        };
        let (sought, seen) = walk(Some(point(b)));
        assert_eq!((sought, &seen[..]), (Some(true), &want[6..]));
        // Without a vouch where the point says its write starts, the walk
        // knows no time until the next vouch.
        let (sought, seen) = walk(Some(point(r7)));
        assert_eq!(sought, Some(true));
        assert!(seen.iter().all(|&(_, t, v)| t.is_none() && v == 0));
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn a_walker_knows_the_highest_vouch_it_stepped_over() {
        let mut img = Image::v2();
        let v = format::VOUCH_LEN_V2 as u64;
        let a = img.write_vouched(format::HEADER_BYTES as u64, 0, 3, 100);
        // A batch of three (LSNs 4..=6) across two writes: the look-ahead
        // for its first record reads the second write's vouch before the
        // walk steps over it.
        format::encode_vouch(&mut img.bytes[a as usize..], SALT, untimed(2));
        let b = img.batch(a + v, 3, 100, false);
        let b = img.pad(b);
        format::encode_vouch(&mut img.bytes[b as usize..], SALT, untimed(3));
        let r6 = (b + v) as usize;
        let n = format::encode_record(
            &mut img.bytes[r6..],
            SALT,
            6,
            0,
            Kind::Data,
            Batching::Last,
            &[6; 100],
        );
        img.next_lsn = 7;
        let c = img.write(r6 as u64 + n as u64, 1, 100);
        // A vouch payload of another length vouches for nothing.
        let odd = format::encode_frame(
            &mut img.bytes[c as usize..],
            SALT,
            0,
            0,
            Kind::Vouch,
            &[9; 12],
        );
        img.write(c + odd as u64, 1, 100);
        let dir = tempfile::tempdir().unwrap();
        let file = SegmentFile {
            base: 1,
            path: dir.path().join(format::segment_file_name(1, 1)),
        };
        std::fs::write(&file.path, &img.bytes).unwrap();
        let mut w = open(&RealFs, &file, 1, None).unwrap().unwrap();
        assert_eq!(w.vouched(), 0);
        let mut seen = Vec::new();
        loop {
            let lsn = match w.next().unwrap() {
                Step::Record { frame, .. } => frame.lsn,
                Step::Hole { .. } => panic!("no holes written"),
                Step::End(_) => break,
            };
            seen.push((lsn, w.vouched()));
        }
        let want = [
            (1, 0),
            (2, 0),
            (3, 0),
            (4, 2),
            (5, 2),
            (6, 3),
            (7, 3),
            (8, 3),
        ];
        assert_eq!(seen, want);
    }

    #[test]
    fn a_whole_batch_is_yielded_with_its_first_lsn_even_across_writes() {
        let mut img = Image::new();
        let a = img.write(B, 2, 100);
        // A batch of 5 split over two writes (padding between them), as a
        // batch larger than the rest of a buffer is.
        let mid = img.batch(a, 5, 700, false);
        let mid = img.pad(mid);
        let first = 3;
        // The last record lands in the next write.
        let mut off = mid as usize;
        off += format::encode_record(
            &mut img.bytes[off..],
            SALT,
            img.next_lsn,
            0,
            Kind::Data,
            Batching::Last,
            &[7; 50],
        );
        img.next_lsn += 1;
        let end = img.write(off as u64, 1, 10);
        let (seen, e) = img.steps();
        let want: Vec<_> = [(1, None), (2, None)]
            .into_iter()
            .chain((first..=7).map(|l| (l, Some(first))))
            .chain([(8, None)])
            .collect();
        assert_eq!(seen, want);
        assert_eq!((e.at, e.end, e.batch), (end, End::Zero, None));
        assert_eq!(both(&img), (Verdict::Clean, Verdict::Clean));
    }

    #[test]
    fn an_unfinished_batch_is_never_yielded_and_is_torn_only_in_the_newest() {
        let mut img = Image::new();
        let a = img.write(B, 3, 100);
        let stop = img.batch(a, 4, 300, false);
        let stop = img.pad(stop);
        let (seen, e) = img.steps();
        assert_eq!(seen, vec![(1, None), (2, None), (3, None)]);
        assert_eq!(
            (e.at, e.end, e.batch),
            (stop, End::Zero, Some(OpenBatch { at: a, first: 4 }))
        );
        assert_eq!((e.data_end(), e.due()), (a, 4));
        let (_, v, n) = img.judge(true);
        assert_eq!(
            (v, n),
            (
                Verdict::Torn {
                    zero_to: SEG as u64
                },
                3
            )
        );
        assert_eq!(img.judge(false).1, Verdict::Corrupt(Damage::OpenBatch));
    }

    #[test]
    fn a_record_standing_alone_inside_a_batch_is_damage() {
        let mut img = Image::new();
        let a = img.write(B, 1, 100);
        let stop = img.batch(a, 4, 100, false);
        // LSN 5 arrives without the batch flags: no writer does that.
        img.write(stop, 1, 100);
        let (seen, e) = img.steps();
        assert_eq!(seen, vec![(1, None)]);
        assert_eq!(e.end, End::BatchBreak { found: 5 });
        assert_eq!(both(&img).0, Verdict::Corrupt(Damage::OutOfLine));
    }

    #[test]
    fn a_later_vouch_for_an_unfinished_batch_makes_it_damage() {
        let mut img = Image::v2();
        let frames = format::HEADER_BYTES as u64;
        let a = img.write_vouched(frames, 0, 2, 100);
        format::encode_vouch(&mut img.bytes[a as usize..], SALT, untimed(0));
        let b = img.batch(a + format::VOUCH_LEN_V2 as u64, 3, 100, false);
        let b = img.pad(b);
        // The batch's last record (LSN 5) is in the next write, torn.
        format::encode_vouch(&mut img.bytes[b as usize..], SALT, untimed(2));
        let r5 = b + format::VOUCH_LEN_V2 as u64;
        let c = format::encode_record(
            &mut img.bytes[r5 as usize..],
            SALT,
            5,
            0,
            Kind::Data,
            Batching::Last,
            &[5; 100],
        );
        img.bytes[r5 as usize + 40] ^= 1;
        let c = img.pad(r5 + c as u64);
        // A later write whose writer knew the batch (LSNs 3..=5) durable:
        // the batch was acknowledged, so its loss is damage.
        img.next_lsn = 6;
        img.write_vouched(c, 5, 1, 100);
        let (e, v, _) = img.judge(true);
        assert_eq!(e.batch.map(|o| o.first), Some(3));
        assert_eq!(v, Verdict::Corrupt(Damage::Vouched { by: c, durable: 5 }));
    }

    #[test]
    fn a_batch_that_ends_the_segment_unfinished_is_damage() {
        let mut img = Image::new();
        // 15 one-block records: the batch runs to the segment's last byte
        // without its last record (a writer rolls rather than do that).
        let stop = img.batch(B, 16, format::BLOCK - format::FRAME_HEADER, false);
        assert_eq!(stop, SEG as u64);
        let (seen, e) = img.steps();
        assert!(seen.is_empty());
        assert_eq!((e.end, e.data_end()), (End::Full, B));
        assert_eq!(both(&img).0, Verdict::Corrupt(Damage::OpenBatch));
    }

    #[test]
    fn a_vouch_for_the_lost_records_makes_the_loss_damage() {
        let frames = format::HEADER_BYTES as u64;
        for (vouch, newest_verdict) in [
            // Written after records 1..=10 were durable: it vouches for
            // the one lost at P (LSN 5).
            (10, Verdict::Corrupt(Damage::Vouched { by: 0, durable: 10 })),
            // In flight with them: no vouch for LSN 5, a torn tail.
            (
                4,
                Verdict::Torn {
                    zero_to: SEG as u64,
                },
            ),
        ] {
            let mut img = Image::v2();
            let a_end = img.write_vouched(frames, 0, 10, 100);
            img.write_vouched(a_end, vouch, 3, 100);
            let r5 = frames + format::VOUCH_LEN_V2 as u64 + 4 * format::frame_len(100) as u64;
            img.bytes[r5 as usize + 30] ^= 0x10;
            let (e, v, n) = img.judge(true);
            assert_eq!((e.at, e.expect, n), (r5, 5, 4));
            let want = match newest_verdict {
                Verdict::Corrupt(Damage::Vouched { durable, .. }) => {
                    Verdict::Corrupt(Damage::Vouched { by: a_end, durable })
                }
                other => other,
            };
            assert_eq!(v, want, "vouch {vouch}");
            // A sealed segment has no window: any later write is damage.
            assert!(matches!(img.judge(false).1, Verdict::Corrupt(_)));
        }
    }

    #[test]
    fn any_recorded_torn_window_is_judged_without_overflow() {
        let mut img = Image::v2();
        let end = img.write_vouched(format::HEADER_BYTES as u64, 0, 3, 50);
        img.bytes[end as usize + 64] = 0x5a;
        let mut h = SegmentHeader::decode(&img.bytes).unwrap();
        h.torn_window = u64::MAX;
        h.encode_blocks(&mut img.bytes);
        let torn = Verdict::Torn {
            zero_to: SEG as u64,
        };
        assert_eq!(img.judge(true).1, torn);
    }

    #[test]
    fn a_damaged_header_block_is_read_through_its_copy() {
        let mut img = Image::v2();
        img.write_vouched(format::HEADER_BYTES as u64, 0, 3, 50);
        img.bytes[40] ^= 1; // the salt: the header block's CRC fails
        let dir = tempfile::tempdir().unwrap();
        let file = SegmentFile {
            base: 1,
            path: dir.path().join(format::segment_file_name(1, 1)),
        };
        std::fs::write(&file.path, &img.bytes).unwrap();
        let mut w = open(&RealFs, &file, 1, Some(9)).unwrap().unwrap();
        assert!(w.header_from_copy());
        assert_eq!(w.header().salt, SALT);
        assert_eq!(w.walk_to_end().unwrap().end, End::Zero);
        assert_eq!(w.records(), 3);
        // Another log's segment is refused, by either copy.
        assert_eq!(
            open(&RealFs, &file, 1, Some(10)).unwrap().err(),
            Some(HeaderProblem::ForeignLog {
                found: 9,
                expected: 10
            })
        );
    }

    fn both(img: &Image) -> (Verdict, Verdict) {
        (img.judge(true).1, img.judge(false).1)
    }

    #[test]
    fn frames_to_the_last_byte_are_a_full_segment() {
        let mut img = Image::new();
        // 15 blocks of 4,072-byte records: each frame is exactly one block.
        let end = img.write(B, 15, format::BLOCK - format::FRAME_HEADER);
        assert_eq!(end, SEG as u64);
        let (e, v, n) = img.judge(true);
        assert_eq!(
            (e.at, e.end, v, n),
            (SEG as u64, End::Full, Verdict::Full, 15)
        );
    }

    #[test]
    fn zeros_on_a_block_boundary_end_the_data_cleanly() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        let (e, _, n) = img.judge(true);
        assert_eq!((e.at, e.end, n), (end, End::Zero, 10));
        assert_eq!(both(&img), (Verdict::Clean, Verdict::Clean));
    }

    #[test]
    fn a_valid_write_past_the_window_is_damage_wherever_the_segment_is() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        img.next_lsn += 3; // the lost write's records
        let later = end + WINDOW + B;
        img.write(later, 2, 100);
        let want = Verdict::Corrupt(Damage::FramesFollow { next: later });
        assert_eq!(both(&img), (want, want));
    }

    #[test]
    fn a_valid_write_within_the_window_is_a_torn_tail_only_in_the_newest() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        img.next_lsn += 3;
        img.write(end + B, 2, 100);
        let torn = Verdict::Torn {
            zero_to: SEG as u64,
        };
        let sealed = Verdict::Corrupt(Damage::FramesFollow { next: end + B });
        assert_eq!(both(&img), (torn, sealed));
    }

    #[test]
    fn an_lsn_out_of_line_is_damage() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        img.next_lsn += 1;
        img.write(end, 3, 100);
        let (e, v, n) = img.judge(true);
        assert_eq!(
            e,
            SegmentEnd {
                at: end,
                end: End::LsnBreak {
                    found: 12,
                    expected: 11
                },
                expect: 11,
                batch: None,
            }
        );
        assert_eq!((v, n), (Verdict::Corrupt(Damage::OutOfLine), 10));
        assert_eq!(both(&img).1, Verdict::Corrupt(Damage::OutOfLine));
    }

    #[test]
    fn a_bad_frame_is_torn_in_the_newest_and_damage_in_a_sealed_segment() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        img.write(end, 3, 100);
        img.bytes[end as usize + 40] ^= 1; // inside the first payload
        let (e, _, n) = img.judge(true);
        assert_eq!(
            (e.at, e.end, n),
            (end, End::Invalid(InvalidFrame::Checksum), 10)
        );
        let torn = Verdict::Torn {
            zero_to: SEG as u64,
        };
        assert_eq!(both(&img), (torn, Verdict::Corrupt(Damage::Sealed)));
    }

    #[test]
    fn residue_behind_a_zero_frame_is_torn_only_in_the_newest() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        // Bytes that are no frame, a block into the window.
        img.bytes[(end + B) as usize + 100] = 0x5a;
        let torn = Verdict::Torn {
            zero_to: SEG as u64,
        };
        assert_eq!(both(&img), (torn, Verdict::Clean));
        // In the zero frame's own block: in a sealed segment that block
        // was written whole, so this is a lost sector, not the end.
        img.bytes[(end + B) as usize + 100] = 0;
        img.bytes[end as usize + 100] = 0x5a;
        assert_eq!(both(&img), (torn, Verdict::Corrupt(Damage::Sealed)));
    }

    #[test]
    fn a_zero_frame_mid_block_is_torn_in_the_newest_and_damage_in_a_sealed_segment() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        // Lose the padding frame that closed the write: the records stay,
        // the zero frame now starts mid-block.
        let pad_at = (B as usize) + 10 * format::frame_len(100);
        img.bytes[pad_at..end as usize].fill(0);
        let (e, _, n) = img.judge(true);
        assert_eq!((e.at, e.end, n), (pad_at as u64, End::Zero, 10));
        let torn = Verdict::Torn {
            zero_to: SEG as u64,
        };
        assert_eq!(both(&img), (torn, Verdict::Corrupt(Damage::Sealed)));
    }

    #[test]
    fn an_older_segment_ending_below_the_next_base_is_damage_unless_full() {
        let mut img = Image::new();
        let end = img.write(B, 10, 100);
        let (e, v, _) = img.judge_before(false, Some(11));
        assert_eq!((e.at, e.end, v), (end, End::Zero, Verdict::Clean));
        // LSNs 11..=13 are missing from its end: a lost block there reads
        // like the zeros its writer leaves after its data.
        let (e, v, _) = img.judge_before(false, Some(14));
        let short = Damage::EndsShort { next_base: 14 };
        assert_eq!(v, Verdict::Corrupt(short));
        let want = Error::corrupt(
            "seg",
            end,
            Corruption::EndsShort {
                due: 11,
                next_base: 14,
            },
        );
        assert_eq!(
            short.error(Path::new("seg"), e).to_string(),
            want.to_string()
        );
        // A next base at or below the end's is the consumer's gap, and the
        // newest segment has no next one to be held to.
        assert_eq!(img.judge_before(false, Some(5)).1, Verdict::Clean);
        assert_eq!(img.judge_before(true, Some(14)).1, Verdict::Clean);
        // Frames that fill the segment lost nothing: what is missing after
        // them is a gap.
        let mut full = Image::new();
        full.write(B, 15, format::BLOCK - format::FRAME_HEADER);
        assert_eq!(full.judge_before(false, Some(99)).1, Verdict::Full);
        // An unfinished batch in an older segment stays its own damage.
        let mut batch = Image::new();
        let a = batch.write(B, 3, 100);
        let stop = batch.batch(a, 4, 300, false);
        batch.pad(stop);
        let v = batch.judge_before(false, Some(99)).1;
        assert_eq!(v, Verdict::Corrupt(Damage::OpenBatch));
    }

    #[test]
    fn zeros_too_short_for_a_seal_are_a_full_segment() {
        let mut img = Image::new();
        // Frames up to 16 bytes short of the end: no padding frame fits.
        let last = SEG - 16 - format::FRAME_HEADER;
        let n = (last - format::BLOCK) / format::BLOCK;
        let mut off = img.write(B, n, format::BLOCK - format::FRAME_HEADER) as usize;
        let p = vec![7u8; SEG - 16 - off - format::FRAME_HEADER];
        off += format::encode_frame(&mut img.bytes[off..], SALT, n as u64 + 1, 0, Kind::Data, &p);
        assert_eq!(off, SEG - 16);
        let (e, v, _) = img.judge(true);
        assert_eq!((e.at, e.end, v), (off as u64, End::Zero, Verdict::Full));
        assert_eq!(both(&img).1, Verdict::Full);
    }

    #[test]
    fn header_problems_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        let file = SegmentFile {
            base: 1,
            path: dir.path().join(format::segment_file_name(1, 1)),
        };
        let check = |bytes: &[u8], node: u32| {
            std::fs::write(&file.path, bytes).unwrap();
            open(&RealFs, &file, node, None).unwrap().err()
        };
        let good = Image::new().bytes;
        assert_eq!(check(&good, 1), None);
        assert_eq!(
            check(&good, 2),
            Some(HeaderProblem::NameMismatch { node: 1, base: 1 })
        );
        assert_eq!(check(&vec![0u8; SEG], 1), Some(HeaderProblem::NeverWritten));
        // Stale bytes past the first frame block (a recycled file) do not
        // count: only the block right after the header does.
        let mut recycled = vec![0u8; SEG];
        recycled[3 * format::BLOCK..].fill(0x77);
        assert_eq!(check(&recycled, 1), Some(HeaderProblem::NeverWritten));
        let mut lost = good.clone();
        lost[..format::BLOCK].fill(0);
        lost[format::BLOCK + 9] = 1;
        assert_eq!(
            check(&lost, 1),
            Some(HeaderProblem::LostHeader { data_at: B + 9 })
        );
        for len in [0, 1, 100, format::BLOCK, SEG - 8, 8 * format::BLOCK] {
            assert_eq!(
                check(&vec![0u8; len], 1),
                Some(HeaderProblem::Misshapen { len: len as u64 }),
                "{len}"
            );
        }
        assert_eq!(
            check(b"hello\n", 1),
            Some(HeaderProblem::Misshapen { len: 6 })
        );
        let mut bad = good.clone();
        bad[30] ^= 1;
        assert_eq!(
            check(&bad, 1),
            Some(HeaderProblem::Invalid(HeaderError::Checksum))
        );
        let mut long = good.clone();
        long.extend_from_slice(&[0u8; 512]);
        assert_eq!(
            check(&long, 1),
            Some(HeaderProblem::LongerThanDeclared {
                file_len: SEG as u64 + 512,
                declared: SEG as u64
            })
        );
        let mut zero_base = vec![0u8; SEG];
        SegmentHeader {
            base_lsn: 0,
            ..SegmentHeader::decode(&good).unwrap()
        }
        .encode(&mut zero_base);
        assert_eq!(check(&zero_base, 1), Some(HeaderProblem::BaseOutOfRange(0)));
        // The error names the file and the header's offset.
        let e = HeaderProblem::NameMismatch { node: 1, base: 1 }.error(&file, 2);
        assert!(
            matches!(&e, Error::Corrupt { file: f, offset: 0, .. } if f == &file.path),
            "{e}"
        );
    }

    #[test]
    fn a_walker_sees_what_a_live_writer_added_after_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = SegmentFile {
            base: 1,
            path: dir.path().join(format::segment_file_name(1, 1)),
        };
        let mut img = Image::new();
        let end = img.write(B, 5, 100);
        std::fs::write(&file.path, &img.bytes).unwrap();
        let mut w = open(&RealFs, &file, 1, None).unwrap().unwrap();
        assert_eq!(w.walk_to_end().unwrap().at, end);
        assert!(!w.grew().unwrap());
        img.write(end, 3, 100);
        std::fs::write(&file.path, &img.bytes).unwrap();
        assert!(w.grew().unwrap());
        let e = w.walk_to_end().unwrap();
        assert_eq!((e.end, w.records(), w.last_lsn()), (End::Zero, 8, 8));
    }
}
