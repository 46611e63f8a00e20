//! The bytes of one segment file, read in large chunks so that every frame
//! is handed out whole from one contiguous buffer.
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
//! leave a page cache that is slower to read back (see `Advice`). Each
//! read starts on a block boundary and lands in a block-aligned buffer,
//! which halves the kernel's copy out of the page cache, the bulk of a
//! cold scan's CPU time.

use ringwal_platform::{Advice, AlignedBuf, OpenHow, VFile, Vfs};
use std::path::{Path, PathBuf};

use crate::at_rest::format::{self, Decoded, SegmentHeader};
use crate::error::{Error, Result};

const CHUNK: usize = 1 << 20;

/// One segment file opened for scanning, with its decoded header.
///
/// Frames are decoded with the format's own payload limit
/// ([`format::MAX_PAYLOAD`]), never a configured one: that limits appends,
/// and a log written under a larger one, or padded with frames larger
/// than a small one, must read back whole (fuzz finding F9).
pub(crate) struct SegmentScan {
    pub path: PathBuf,
    pub header: SegmentHeader,
    /// The header block was unusable and its copy was read instead.
    pub from_copy: bool,
    pub file_len: u64,
    file: VFile,
    /// The file's bytes `[buf_start, buf_start + len)` are `buf[..len]`.
    buf: AlignedBuf,
    len: usize,
    buf_start: u64,
    /// The size of the next read (at least what it must hold): [`CHUNK`],
    /// except for the first read of a walk that starts at an index point.
    next_read: usize,
    /// Drop each chunk from the page cache once the scan moves past it
    /// (see [`drop_behind`](SegmentScan::drop_behind)).
    drop_behind: bool,
}

/// A header block that did not decode, with what the caller needs to tell
/// a segment whose creation a crash interrupted from anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rejected {
    pub error: format::HeaderError,
    pub file_len: u64,
    /// For a blank header: the first non-zero byte of the two blocks after
    /// it (a version-2 header's copy and first frame block, or version 1's
    /// first frames), if any.
    pub data_at: Option<u64>,
}

impl SegmentScan {
    /// Open `path` and decode its header, without checking it against the
    /// name (the caller decides what a mismatch means). A version-2
    /// segment whose header block is damaged or blank is read through the
    /// copy in its second block; `from_copy` says so.
    ///
    /// Cost: one `open`, one `stat`, one 8 KiB read.
    pub fn open(vfs: &dyn Vfs, path: &Path) -> Result<std::result::Result<SegmentScan, Rejected>> {
        let file = vfs
            .open(path, OpenHow::default())
            .map_err(|e| Error::io(path, e))?;
        let file_len = file.size().map_err(|e| Error::io(path, e))?;
        let mut blocks = vec![0u8; 2 * format::BLOCK];
        let n = read_full(&*file, &mut blocks, 0).map_err(|e| Error::io(path, e))?;
        let (first, second) = blocks[..n].split_at(n.min(format::BLOCK));
        let (header, from_copy) = match SegmentHeader::decode(first) {
            Ok(h) => (h, false),
            Err(error @ format::HeaderError::Version(_)) => {
                // A later format: its copy, if any, is no more readable.
                return Ok(Err(Rejected {
                    error,
                    file_len,
                    data_at: None,
                }));
            }
            Err(error) => match SegmentHeader::decode(second) {
                Ok(copy) if copy.version >= 2 => (copy, true),
                _ => {
                    // A blank header: is anything written behind it? The
                    // block after it (version 1's first frames, version
                    // 2's copy) and the one after that (version 2's first
                    // frames).
                    let mut data_at = None;
                    if error == format::HeaderError::Blank {
                        data_at = second
                            .iter()
                            .position(|&b| b != 0)
                            .map(|i| (format::BLOCK + i) as u64);
                        if data_at.is_none() {
                            let mut third = vec![0u8; format::BLOCK];
                            let at = 2 * format::BLOCK as u64;
                            let n = read_full(&*file, &mut third, at)
                                .map_err(|e| Error::io(path, e))?;
                            data_at = third[..n]
                                .iter()
                                .position(|&b| b != 0)
                                .map(|i| at + i as u64);
                        }
                    }
                    return Ok(Err(Rejected {
                        error,
                        file_len,
                        data_at,
                    }));
                }
            },
        };
        // Only a hint: a file that refuses it reads the same, just slower.
        let _ = file.advise(0, 0, Advice::Sequential);
        Ok(Ok(SegmentScan {
            path: path.to_path_buf(),
            header,
            from_copy,
            file_len,
            file,
            // Grown to a chunk at the first read: a scan may only look at
            // the header.
            buf: AlignedBuf::new(format::BLOCK),
            len: 0,
            buf_start: 0,
            next_read: CHUNK,
            drop_behind: false,
        }))
    }

    /// The end of the frame area: the smaller of the file's length and the
    /// size its header declares.
    pub fn end(&self) -> u64 {
        self.file_len.min(self.header.segment_bytes)
    }

    /// Make the next read `bytes` long (or what it must hold, if more)
    /// instead of a whole chunk: a point read that will look at a few
    /// frames should not allocate, copy and fault in 1 MiB (measured: a
    /// 1 MiB first read made a point read cost about 1 ms). Later reads
    /// are whole chunks again.
    pub fn read_next(&mut self, bytes: usize) {
        self.next_read = bytes;
    }

    /// Tell the kernel to drop each chunk from the page cache once the scan
    /// has moved past it: for recovery and `verify`, which read a whole
    /// log once, so that opening 10 GiB of log does not evict the
    /// application's own pages. Costs one `posix_fadvise` per 1 MiB chunk.
    pub fn drop_behind(&mut self) {
        self.drop_behind = true;
    }

    /// Forget what was read, so the next access reads the file again: a
    /// live writer may have written where this scan saw zeros.
    pub fn refresh(&mut self) {
        self.len = 0;
    }

    /// The resident bytes from `rel` bytes past `buf_start`; empty when
    /// a short read (a file cut after it was opened) ended before them.
    fn window(&self, rel: usize) -> &[u8] {
        self.buf.as_slice()[..self.len].get(rel..).unwrap_or(&[])
    }

    /// Make `[off, off + len)` (clipped to the segment end) resident.
    fn ensure(&mut self, off: u64, len: usize) -> Result<()> {
        let end = self.end();
        let want_end = (off + len as u64).min(end);
        let have_end = self.buf_start + self.len as u64;
        if off >= self.buf_start && want_end <= have_end {
            return Ok(());
        }
        // Read from the block boundary at or below `off` into a
        // block-aligned buffer. A read starts at a frame (8-aligned) nearly
        // every time, and the kernel copies out of the page cache at about
        // half speed when source and destination are not aligned alike:
        // the copy was most of a cold scan's CPU time. Re-reading under one
        // block per chunk is cheap.
        let start = off - off % format::BLOCK as u64;
        debug_assert!(
            start.is_multiple_of(format::BLOCK as u64)
                && start <= off
                && off - start < format::BLOCK as u64,
            "a read starts on the block boundary at or below what it is for"
        );
        if self.drop_behind && self.len > 0 {
            // Only a hint: a file that refuses it reads the same.
            let _ = self
                .file
                .advise(self.buf_start, self.len as u64, Advice::DontNeed);
        }
        let chunk = std::mem::replace(&mut self.next_read, CHUNK);
        let size = ((want_end - start) as usize)
            .max(chunk)
            .min((end - start) as usize);
        if size > self.buf.capacity() {
            self.buf = AlignedBuf::new(size);
        }
        debug_assert!(
            start + size as u64 <= end,
            "a read never reaches past the segment's end"
        );
        self.len = 0;
        let n = self
            .file
            .read_at(&mut self.buf.as_mut_slice()[..size], start)
            .map_err(|e| Error::io(&self.path, e))?;
        assert!(
            n <= size,
            "a read returns at most what it was given room for"
        );
        self.len = n;
        self.buf_start = start;
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
        if self.end() - off < format::FRAME_HEADER as u64
            && self.window(rel).iter().all(|&b| b == 0)
        {
            return Ok(Decoded::Zero);
        }
        let mut need = format::FRAME_HEADER;
        if self.len >= rel + format::FRAME_HEADER {
            let len =
                u32::from_le_bytes(self.window(rel)[4..8].try_into().expect("4 bytes")) as usize;
            if len <= format::MAX_PAYLOAD {
                need = format::frame_len(len);
            }
        }
        self.ensure(off, need)?;
        debug_assert!(off >= self.buf_start, "the frame's start is resident");
        let rel = (off - self.buf_start) as usize;
        Ok(format::decode_frame(
            self.window(rel),
            self.header.salt,
            format::MAX_PAYLOAD,
        ))
    }

    /// `len` bytes at `off`, which a `frame_at(off - FRAME_HEADER)` that
    /// returned a frame made resident. Panics if they are not resident.
    pub fn resident(&self, off: u64, len: usize) -> &[u8] {
        let rel = (off - self.buf_start) as usize;
        &self.buf.as_slice()[..self.len][rel..rel + len]
    }

    /// The offset of the first non-zero byte in `[from, to)`, if any.
    pub fn first_nonzero(&mut self, from: u64, to: u64) -> Result<Option<u64>> {
        let to = to.min(self.end());
        let mut off = from;
        while off < to {
            let n = ((to - off) as usize).min(CHUNK);
            self.ensure(off, n)?;
            let rel = (off - self.buf_start) as usize;
            let avail = self.window(rel).len().min(n);
            if avail == 0 {
                break;
            }
            if let Some(i) = self.window(rel)[..avail].iter().position(|&b| b != 0) {
                return Ok(Some(off + i as u64));
            }
            debug_assert!(
                avail > 0 && off + (avail as u64) <= to,
                "each step moves forward, not past the end"
            );
            off += avail as u64;
        }
        Ok(None)
    }
}

/// Read into `buf` from `offset` until it is full or the file ends.
fn read_full(
    file: &dyn ringwal_platform::FileIo,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    assert!(done <= buf.len(), "a read fills at most its buffer");
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::at_rest::format::Kind;
    use ringwal_platform::RealFs;

    const SALT: u64 = 0x5eed;

    /// A segment of `sizes.len()` data frames (LSN 1..) after the header,
    /// then zeros up to `seg_bytes`. Returns the file and each frame's offset.
    fn segment(dir: &Path, sizes: &[usize], seg_bytes: usize) -> (PathBuf, Vec<u64>) {
        let mut data = vec![0u8; seg_bytes];
        SegmentHeader {
            version: 1,
            log_id: 0,
            key_id: 0,
            key_check: 0,
            node: 1,
            base_lsn: 1,
            segment_bytes: seg_bytes as u64,
            salt: SALT,
            created_unix_ms: 0,
            torn_window: 0,
        }
        .encode(&mut data);
        let mut off = format::BLOCK;
        let mut offsets = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            offsets.push(off as u64);
            off += format::encode_frame(
                &mut data[off..],
                SALT,
                i as u64 + 1,
                0,
                Kind::Data,
                &payload,
            );
        }
        let path = dir.join("seg");
        std::fs::write(&path, &data).unwrap();
        (path, offsets)
    }

    fn open(path: &Path) -> SegmentScan {
        SegmentScan::open(&RealFs, path).unwrap().unwrap()
    }

    #[test]
    fn frames_across_chunks_and_larger_than_a_chunk_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Odd sizes put frame boundaries at every alignment; one frame is
        // larger than a chunk.
        let mut sizes: Vec<usize> = (0..3000).map(|i| 1 + (i * 977) % 3001).collect();
        sizes.insert(1500, CHUNK + 12_345);
        let (path, offsets) = segment(dir.path(), &sizes, 8 << 20);
        let mut scan = open(&path);
        let mut off = format::BLOCK as u64;
        for (i, &n) in sizes.iter().enumerate() {
            assert_eq!(off, offsets[i]);
            match scan.frame_at(off).unwrap() {
                Decoded::Frame(f) => {
                    assert_eq!((f.lsn, f.payload.len()), (i as u64 + 1, n));
                    assert!(f
                        .payload
                        .iter()
                        .enumerate()
                        .all(|(j, &b)| b == (i * 31 + j) as u8));
                    off += f.len as u64;
                }
                other => panic!("frame {i} at {off}: {other:?}"),
            }
        }
        assert_eq!(scan.frame_at(off).unwrap(), Decoded::Zero);
        // Backward jumps see the same frames.
        for &i in &[2999usize, 0, 1500, 1501, 7] {
            match scan.frame_at(offsets[i]).unwrap() {
                Decoded::Frame(f) => assert_eq!(f.lsn, i as u64 + 1),
                other => panic!("frame {i}: {other:?}"),
            }
        }
        assert_eq!(scan.first_nonzero(off, 8 << 20).unwrap(), None);
        assert_eq!(
            scan.first_nonzero(offsets[10] + 1, off).unwrap(),
            Some(offsets[10] + 1)
        );
    }

    #[test]
    fn a_file_cut_after_opening_reads_as_missing_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = vec![1000usize; 50];
        let (path, offsets) = segment(dir.path(), &sizes, 1 << 20);
        let mut scan = open(&path);
        // Cut mid-block, in the middle of frame 30.
        let cut = offsets[30] + 100;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        for (i, &o) in offsets.iter().enumerate().skip(29) {
            let d = scan.frame_at(o).unwrap();
            assert_eq!(matches!(d, Decoded::Frame(_)), i < 30, "frame {i}: {d:?}");
        }
        assert!(!matches!(
            scan.frame_at(cut + 8).unwrap(),
            Decoded::Frame(_)
        ));
        assert_eq!(scan.first_nonzero(cut + 1000, 1 << 20).unwrap(), None);
    }
}
