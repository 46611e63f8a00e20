//! Preparing files the way a careful log does: preallocated, then written
//! with zeros once and synced, so that later overwrites touch no metadata
//! (no unwritten-extent conversion, no size change) and an fdatasync or an
//! O_DSYNC write costs only the data and the device cache flush.

use std::fs::File;
use std::io;
use std::path::Path;

use ringwal_platform::file::{is_direct_unsupported, open_segment, preallocate, sync_data};
use ringwal_platform::{AlignedBuf, PRIVATE_FILE_MODE};

/// A prepared file and whether it is open with O_DIRECT.
pub struct Prepared {
    pub file: File,
    pub direct: bool,
}

/// Create `path` (it must not exist), preallocate `bytes`, zero-write every
/// byte and sync. Opened with O_DIRECT where the filesystem allows it
/// (falling back to buffered I/O, e.g. on tmpfs).
pub fn prepare_zeroed(path: &Path, bytes: u64) -> io::Result<Prepared> {
    let (file, direct) = match open_segment(path, true, true, PRIVATE_FILE_MODE) {
        Ok(f) => (f, true),
        Err(e) if is_direct_unsupported(&e) => {
            let _ = std::fs::remove_file(path);
            (open_segment(path, true, false, PRIVATE_FILE_MODE)?, false)
        }
        Err(e) => return Err(e),
    };
    preallocate(&file, bytes)?;
    let chunk = AlignedBuf::new(1 << 20);
    let mut off = 0u64;
    while off < bytes {
        let n = (bytes - off).min(chunk.capacity() as u64) as usize;
        ringwal_platform::file::write_all_at(&file, &chunk.as_slice()[..n], off, false)?;
        off += n as u64;
    }
    sync_data(&file)?;
    Ok(Prepared { file, direct })
}
