//! The file toolkit a layer above the log builds its snapshots on: files
//! replaced atomically, directory syncs, and CRC-framed checkpoint files
//! that are never taken for good when torn or foreign. The log's own
//! manifest is written the same way.
//!
//! Every function blocks the calling thread on the file system and syncs
//! before it returns: nothing here is durable "later".

use std::path::{Path, PathBuf};

use ringwal_platform::{OpenHow, RealFs, Vfs};

use crate::error::{Corruption, Error, Result};
use crate::format;

/// Replace `dir/name` with `bytes` so that after a crash the file holds
/// either its old contents or the new ones, whole: write `dir/tmp`, make
/// it durable, rename it over `name`, and make the rename durable.
///
/// A `tmp` left by an earlier crash is removed first. Cost: an unlink, a
/// create, one write, one fdatasync, one rename and one directory fsync;
/// blocking.
pub(crate) fn atomic_write_in(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    tmp: &str,
    bytes: &[u8],
) -> Result<()> {
    let tmp = dir.join(tmp);
    let path = dir.join(name);
    match vfs.remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&tmp, e)),
        _ => {}
    }
    let how = OpenHow {
        write: true,
        create_new: true,
        ..OpenHow::default()
    };
    let file = vfs.open(&tmp, how).map_err(|e| Error::io(&tmp, e))?;
    file.write_at(bytes, 0, false)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io(&tmp, e))?;
    drop(file);
    vfs.rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// The whole of `dir/name`, or `None` if there is no such file. Cost: an
/// open and one read of the file's length.
pub(crate) fn read_small(vfs: &dyn Vfs, path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match vfs.open(path, OpenHow::default()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let len = file.size().map_err(|e| Error::io(path, e))?;
    // Anything much larger than the small files kept this way is damage;
    // read a little more than the largest so its length is reported.
    let mut buf = vec![0u8; len.min(1 << 16) as usize];
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
    Ok(Some(buf))
}

/// Where `path`'s temporary file goes: beside it (a rename is atomic only
/// within one file system), hidden, named after it.
fn temp_name(path: &Path) -> Result<(PathBuf, String, String)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::InvalidConfig(format!(
            "{}: not a file path",
            path.display()
        )));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let name = name.to_string_lossy().into_owned();
    let tmp = format!(".{name}.tmp");
    Ok((dir.to_path_buf(), name, tmp))
}

/// Replace the file at `path` with `bytes`, so that after a crash at any
/// point it holds either its old contents or the new ones, whole, and
/// once this returns, the new ones durably: write a temporary file beside
/// it (`.NAME.tmp`, one an earlier crash left is removed first), fsync
/// it, rename it over `path`, fsync the directory.
///
/// # Errors
///
/// `Io` (or `NoSpace`) naming the file or directory that failed; the old
/// contents are then intact. `InvalidConfig` for a path without a file
/// name.
///
/// Cost: an unlink, a create, one write, one fdatasync, one rename and
/// one directory fsync.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name, tmp) = temp_name(path)?;
    atomic_write_in(&RealFs, &dir, &name, &tmp, bytes)
}

/// Make the entries of `dir` (files created, renamed or removed in it)
/// durable: an fsync of the directory.
///
/// # Errors
///
/// `Io` naming the directory. Never retry a failed sync and assume the
/// entries durable: after a failed fsync the kernel may have dropped them.
///
/// Cost: one open and one fsync.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    RealFs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Write `payload` to `path` as a checkpoint file (`docs/format.md` §8:
/// magic, version, length, CRC, payload), atomically and durably as
/// [`atomic_write`] does.
///
/// # Errors
///
/// As [`atomic_write`].
///
/// Cost: as [`atomic_write`], plus a copy and a CRC pass of the payload.
pub fn write_checkpoint(path: &Path, payload: &[u8]) -> Result<()> {
    atomic_write(path, &format::encode_checkpoint(payload))
}

/// The payload of the checkpoint file at `path`, checked whole; `None` if
/// there is no such file.
///
/// # Errors
///
/// `Corrupt` naming the file, with [`Corruption::CheckpointFile`], if it
/// is torn, damaged, longer than it declares, or not a checkpoint file at
/// all: never its bytes. `Io` if it cannot be read.
///
/// Cost: one open and a read of the whole file; one allocation.
pub fn read_checkpoint(path: &Path) -> Result<Option<Vec<u8>>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    match format::decode_checkpoint(&bytes) {
        Ok(payload) => Ok(Some(payload.to_vec())),
        Err(e) => Err(Error::corrupt(path, 0, Corruption::CheckpointFile(e))),
    }
}
