//! Reading a segment file frame by frame, for recovery, readers and verify.
//!
//! Reads go through the page cache in large chunks (no O_DIRECT: readers
//! run beside a writer and benefit from readahead), and a frame is always
//! handed out whole from one contiguous buffer.
//!
//! A scan reads each segment front to back and checks every byte between
//! two reads, so the device must keep working while this thread checks:
//! each segment is marked sequential, which doubles the kernel's
//! readahead window for it. The reads stay synchronous and in this
//! thread, where the chunk just copied is still in this CPU's cache when
//! it is checked: a read-ahead thread handing chunks over cost more CPU in
//! cross-CPU copies than it saved by overlapping, and `WillNeed` hints
//! leave a page cache that is slower to read back (see `Advice`).

use ringwal_platform::{Advice, OpenHow, VFile, Vfs};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{self, Decoded, SegmentHeader};

const CHUNK: usize = 1 << 20;

/// One segment file opened for scanning, with its validated header.
pub(crate) struct SegmentScan {
    pub path: PathBuf,
    pub header: SegmentHeader,
    pub file_len: u64,
    file: VFile,
    max_payload: usize,
    buf: Vec<u8>,
    buf_start: u64,
}

impl SegmentScan {
    /// Open `path` and decode its header, without checking it against the
    /// name (the caller decides what a mismatch means).
    pub fn open(
        vfs: &dyn Vfs,
        path: &Path,
        max_payload: usize,
    ) -> Result<std::result::Result<SegmentScan, (format::HeaderError, u64)>> {
        let file = vfs
            .open(path, OpenHow::default())
            .map_err(|e| Error::io(path, e))?;
        let file_len = file.size().map_err(|e| Error::io(path, e))?;
        let mut block = vec![0u8; format::BLOCK];
        let n = file
            .read_at(&mut block, 0)
            .map_err(|e| Error::io(path, e))?;
        let header = match SegmentHeader::decode(&block[..n]) {
            Ok(h) => h,
            Err(e) => return Ok(Err((e, file_len))),
        };
        // Only a hint: a file that refuses it reads the same, just slower.
        let _ = file.advise(0, 0, Advice::Sequential);
        Ok(Ok(SegmentScan {
            path: path.to_path_buf(),
            header,
            file_len,
            file,
            max_payload,
            buf: Vec::new(),
            buf_start: 0,
        }))
    }

    /// The end of the frame area: the smaller of the file's length and the
    /// size its header declares.
    pub fn end(&self) -> u64 {
        self.file_len.min(self.header.segment_bytes)
    }

    /// Make `[off, off + len)` (clipped to the segment end) resident.
    fn ensure(&mut self, off: u64, len: usize) -> Result<()> {
        let end = self.end();
        let want_end = (off + len as u64).min(end);
        let have_end = self.buf_start + self.buf.len() as u64;
        if off >= self.buf_start && want_end <= have_end {
            return Ok(());
        }
        let size = ((want_end - off) as usize)
            .max(CHUNK)
            .min((end - off) as usize);
        self.buf.resize(size, 0);
        let n = self
            .file
            .read_at(&mut self.buf, off)
            .map_err(|e| Error::io(&self.path, e))?;
        self.buf.truncate(n);
        self.buf_start = off;
        Ok(())
    }

    /// Decode the frame at `off` (8-aligned, at least one block in).
    pub fn frame_at(&mut self, off: u64) -> Result<Decoded<'_>> {
        if off >= self.end() {
            return Ok(Decoded::Invalid(format::InvalidFrame::Truncated));
        }
        self.ensure(off, format::FRAME_HEADER)?;
        let rel = (off - self.buf_start) as usize;
        // Fewer bytes than a frame header before the end, all zero: unused
        // space (a tail sealed with zeros because no padding frame fits).
        if self.end() - off < format::FRAME_HEADER as u64 && self.buf[rel..].iter().all(|&b| b == 0)
        {
            return Ok(Decoded::Zero);
        }
        let mut need = format::FRAME_HEADER;
        if self.buf.len() >= rel + format::FRAME_HEADER {
            let len = u32::from_le_bytes(self.buf[rel + 4..rel + 8].try_into().expect("4 bytes"))
                as usize;
            if len <= self.max_payload {
                need = format::frame_len(len);
            }
        }
        self.ensure(off, need)?;
        let rel = (off - self.buf_start) as usize;
        Ok(format::decode_frame(
            &self.buf[rel..],
            self.header.salt,
            self.max_payload,
        ))
    }

    /// The offset of the first non-zero byte in `[from, to)`, if any.
    pub fn first_nonzero(&mut self, from: u64, to: u64) -> Result<Option<u64>> {
        let to = to.min(self.end());
        let mut off = from;
        while off < to {
            let n = ((to - off) as usize).min(CHUNK);
            self.ensure(off, n)?;
            let rel = (off - self.buf_start) as usize;
            let avail = (self.buf.len() - rel).min(n);
            if avail == 0 {
                break;
            }
            if let Some(i) = self.buf[rel..rel + avail].iter().position(|&b| b != 0) {
                return Ok(Some(off + i as u64));
            }
            off += avail as u64;
        }
        Ok(None)
    }

    /// The first block boundary at or after `from` where a valid frame of
    /// this segment starts, if any. Every write begins at a block boundary
    /// with a frame, so this finds data written after a damaged region.
    pub fn next_valid_block(&mut self, from: u64) -> Result<Option<u64>> {
        let mut b = from
            .next_multiple_of(format::BLOCK as u64)
            .max(format::BLOCK as u64);
        while b < self.end() {
            if let Decoded::Frame(_) = self.frame_at(b)? {
                return Ok(Some(b));
            }
            b += format::BLOCK as u64;
        }
        Ok(None)
    }
}
