//! Small files replaced atomically: the manifest today, snapshot and
//! checkpoint files of layers above tomorrow.

use std::path::Path;

use ringwal_platform::{OpenHow, Vfs};

use crate::error::{Error, Result};

/// Replace `dir/name` with `bytes` so that after a crash the file holds
/// either its old contents or the new ones, whole: write `dir/tmp`, make
/// it durable, rename it over `name`, and make the rename durable.
///
/// A `tmp` left by an earlier crash is removed first. Cost: an unlink, a
/// create, one write, one fdatasync, one rename and one directory fsync;
/// blocking.
pub(crate) fn atomic_write(
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
