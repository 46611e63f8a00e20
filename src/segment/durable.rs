//! Small files replaced whole: how the manifest, and the checkpoint
//! files of `files`, are written so that a crash leaves the old contents
//! or the new ones, never a mix, and read back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use ringwal_platform::{OpenHow, VFile, Vfs};

use crate::at_rest::format;
use crate::error::{Error, Result};

/// Replace `dir/name` with `bytes` so that after a crash the file holds
/// either its old contents or the new ones, whole: write a temporary file
/// of this call's own beside it ([`temp_path`]), make it durable, rename
/// it over `name`, and make the rename durable.
///
/// Writers of one target never share a temporary file, so concurrent
/// calls each place their own bytes (the last rename wins) and none
/// touches another's file. A call that fails before its rename removes
/// its temporary file and leaves `name` as it was; a crash can leave one
/// behind, which nothing here removes (it may be another writer's).
///
/// Cost: a create, one write, one fdatasync, one rename and one directory
/// fsync; blocking.
pub(crate) fn atomic_write_in(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    let tmp = temp_path(dir, name);
    let path = dir.join(name);
    let how = OpenHow {
        write: true,
        create_new: true,
        mode: Some(mode),
        ..OpenHow::default()
    };
    let file = vfs.open(&tmp, how).map_err(|e| Error::io(&tmp, e))?;
    let placed = file
        .write_at(bytes, 0, false)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io(&tmp, e))
        .and_then(|()| {
            drop(file);
            vfs.rename(&tmp, &path).map_err(|e| Error::io(&path, e))
        });
    if let Err(e) = placed {
        // Best effort: the failure reported is the one that matters, and
        // a temporary file left over is never taken for the target.
        let _ = vfs.remove_file(&tmp);
        return Err(e);
    }
    vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// A temporary file for replacing `dir/name` that no other call, in this
/// process or any other, uses: `format::temp_file_name` with this
/// process's id, a process-wide count, and a random draw made once per
/// process. Beside the target, because a rename is atomic only within
/// one file system. Cost: one atomic increment; one `getrandom` the
/// first time.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static NONCE: OnceLock<u64> = OnceLock::new();
    // Only tells this process's names from a dead one's under a reused
    // id; the time stands in should the OS's source fail.
    let nonce = *NONCE.get_or_init(|| {
        getrandom::u64().unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
    });
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format::temp_file_name(name, std::process::id(), seq, nonce))
}

/// The whole of `dir/name`, or `None` if there is no such file. Cost: an
/// open and one read of the file's length.
pub(crate) fn read_small(vfs: &dyn Vfs, path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match vfs.open(path, OpenHow::default()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    // Anything much larger than the small files kept this way is damage;
    // read a little more than the largest so its length is reported.
    read_from(&file, path, 1 << 16).map(Some)
}

#[cfg_attr(
    not(feature = "archive"),
    expect(dead_code, reason = "used by the archive (feature `archive`)")
)]
/// The first `len` bytes of `path` (fewer if it is shorter), through the
/// page cache. Cost: an open and reads of `len` bytes.
pub(crate) fn read_prefix(vfs: &dyn Vfs, path: &Path, len: u64) -> Result<Vec<u8>> {
    let file = vfs
        .open(path, OpenHow::default())
        .map_err(|e| Error::io(path, e))?;
    read_from(&file, path, len)
}

/// Up to `max` bytes of `file` from its start.
fn read_from(file: &VFile, path: &Path, max: u64) -> Result<Vec<u8>> {
    let len = file.size().map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; len.min(max) as usize];
    let mut done = 0;
    while done < buf.len() {
        match file
            .read_at(&mut buf[done..], done as u64)
            .map_err(|e| Error::io(path, e))?
        {
            0 => break,
            n => done += n,
        }
    }
    buf.truncate(done);
    Ok(buf)
}

#[cfg_attr(
    not(feature = "archive"),
    expect(dead_code, reason = "used by the archive (feature `archive`)")
)]
/// Write `bytes` at `offset` of the existing file `path` and make them
/// durable. Cost: an open, a write, an fdatasync.
pub(crate) fn write_durably(vfs: &dyn Vfs, path: &Path, bytes: &[u8], offset: u64) -> Result<()> {
    let how = OpenHow {
        write: true,
        ..OpenHow::default()
    };
    let f = vfs.open(path, how).map_err(|e| Error::io(path, e))?;
    f.write_at(bytes, offset, false)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io(path, e))
}
