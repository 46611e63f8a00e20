//! Reading records back in LSN order across segments.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ringwal_platform::Vfs;

use crate::error::{Error, Lsn, Result};
use crate::format::{self, Decoded, Kind};
use crate::scan::SegmentScan;
use crate::segments::SegmentFile;

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
}

/// Iterator over records in LSN order, from [`Wal::reader_from`](crate::Wal::reader_from).
///
/// Reads through the page cache in 1 MiB chunks; allocates one `Vec` per
/// record. Stops after `upto` (the written watermark when it was created).
/// Damage met on the way is yielded as one `Err`, after which it stops.
/// A segment checkpointed away while the reader was on it (deleted, or
/// recycled and overwritten by a later segment) ends the iteration with
/// [`Error::Gap`], not `Corrupt`: those records were released, not damaged.
pub struct Reader {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    segments: std::vec::IntoIter<SegmentFile>,
    current: Option<(SegmentScan, u64)>,
    /// The LSN the next record must carry.
    expect: Lsn,
    from: Lsn,
    upto: Lsn,
    max_payload: usize,
    done: bool,
}

impl Reader {
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        segments: Vec<SegmentFile>,
        from: Lsn,
        upto: Lsn,
        max_payload: usize,
    ) -> Result<Reader> {
        let oldest = segments.first().map_or(1, |s| s.base);
        let from = if from == 0 { oldest } else { from };
        if from < oldest {
            return Err(Error::Gap {
                file: dir.to_path_buf(),
                expected: from,
                found: oldest,
            });
        }
        let start = segments.iter().rposition(|s| s.base <= from).unwrap_or(0);
        let segments: Vec<SegmentFile> = segments.into_iter().skip(start).collect();
        let expect = segments.first().map_or(from, |s| s.base);
        Ok(Reader {
            vfs,
            dir: dir.to_path_buf(),
            segments: segments.into_iter(),
            current: None,
            expect,
            from,
            upto,
            max_payload,
            done: false,
        })
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(seg) = self.segments.next() else {
            return Ok(false);
        };
        let scan = match SegmentScan::open(&*self.vfs, &seg.path, self.max_payload)? {
            Ok(s) => s,
            Err((e, _)) => {
                return Err(Error::corrupt(&seg.path, 0, format!("segment header: {e}")))
            }
        };
        if scan.header.base_lsn != self.expect {
            return Err(Error::Gap {
                file: seg.path,
                expected: self.expect,
                found: scan.header.base_lsn,
            });
        }
        self.current = Some((scan, crate::format::BLOCK as u64));
        Ok(true)
    }

    fn step(&mut self) -> Result<Option<Record>> {
        loop {
            if self.expect > self.upto {
                return Ok(None);
            }
            if self.current.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let (scan, off) = self.current.as_mut().expect("opened above");
            let at = *off;
            match scan.frame_at(at)? {
                Decoded::Frame(f) => {
                    *off += f.len as u64;
                    if f.kind == Kind::Padding {
                        continue;
                    }
                    if f.lsn != self.expect {
                        let (lsn, expect) = (f.lsn, self.expect);
                        return Err(Error::corrupt(
                            &scan.path,
                            at,
                            format!("frame LSN {lsn} where {expect} was expected"),
                        ));
                    }
                    self.expect += 1;
                    if f.lsn < self.from {
                        continue;
                    }
                    return Ok(Some(Record {
                        lsn: f.lsn,
                        stream: f.stream,
                        kind: f.kind,
                        payload: f.payload.to_vec(),
                    }));
                }
                // End of this segment's data: the next segment must continue the sequence.
                Decoded::Zero => self.current = None,
                Decoded::Invalid(why) => {
                    if at >= scan.end() {
                        self.current = None;
                        continue;
                    }
                    return Err(Error::corrupt(&scan.path, at, why.to_string()));
                }
            }
        }
    }
}

impl Reader {
    /// `e`, or a `Gap` when the file it names is no longer one of the
    /// log's segments: a checkpoint released it (and recycling may have
    /// overwritten it) while this reader was on its way. Costs one
    /// directory listing, on the error path only.
    fn released_or(&self, e: Error) -> Error {
        let file = match &e {
            Error::Corrupt { file, .. } => file,
            Error::Io { path, .. } => path,
            _ => return e,
        };
        let Some((node, _)) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(format::parse_segment_file_name)
        else {
            return e;
        };
        let Ok(listing) = crate::segments::list(&*self.vfs, &self.dir, node) else {
            return e;
        };
        if listing.segments.iter().any(|s| &s.path == file) {
            return e;
        }
        Error::Gap {
            file: file.clone(),
            expected: self.expect,
            found: listing.segments.first().map_or(self.expect, |s| s.base),
        }
    }
}

impl Iterator for Reader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(self.released_or(e)))
            }
        }
    }
}
