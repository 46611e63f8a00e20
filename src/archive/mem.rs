//! An object's bytes as a read-only file, so that the one reader of
//! segment bytes (`scan`) walks a fetched object in memory: a restore
//! checks each object before it writes it, and never reads the segment
//! back from the disk (which, written with O_DIRECT, is not in the page
//! cache: reading 4 GB back took longer than fetching and writing it).

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ringwal_platform::file::FileSystem;
use ringwal_platform::{Advice, FileIo, OpenHow, VFile, Vfs};

/// One read-only file at `path`, holding `bytes`; nothing else exists.
#[derive(Debug)]
pub(crate) struct OneFile {
    path: PathBuf,
    file: Arc<Bytes>,
}

#[derive(Debug)]
struct Bytes(Vec<u8>);

impl OneFile {
    pub fn new(path: PathBuf, bytes: Vec<u8>) -> OneFile {
        OneFile {
            path,
            file: Arc::new(Bytes(bytes)),
        }
    }

    /// The bytes back, once every handle to the file is gone.
    pub fn into_bytes(self) -> Vec<u8> {
        match Arc::try_unwrap(self.file) {
            Ok(b) => b.0,
            Err(shared) => shared.0.clone(),
        }
    }
}

fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "an object in memory is read-only",
    )
}

fn no_such(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not in memory", path.display()),
    )
}

impl FileIo for Bytes {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = (offset as usize).min(self.0.len());
        let n = buf.len().min(self.0.len() - start);
        buf[..n].copy_from_slice(&self.0[start..start + n]);
        Ok(n)
    }
    fn write_at(&self, _: &[u8], _: u64, _: bool) -> io::Result<()> {
        Err(read_only())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
    fn preallocate(&self, _: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn try_lock(&self) -> io::Result<bool> {
        Ok(true)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn advise(&self, _: u64, _: u64, _: Advice) -> io::Result<()> {
        Ok(())
    }
    fn file_system(&self) -> io::Result<FileSystem> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "an object in memory",
        ))
    }
    fn demands_alignment(&self) -> bool {
        false
    }
}

impl Vfs for OneFile {
    fn create_dir_all(&self, _: &Path, _: u32) -> io::Result<()> {
        Err(read_only())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let name = self.path.file_name().and_then(|n| n.to_str());
        match name {
            Some(n) if self.path.parent() == Some(dir) => Ok(vec![n.to_string()]),
            _ => Ok(Vec::new()),
        }
    }
    fn open(&self, path: &Path, how: OpenHow) -> io::Result<VFile> {
        if how.write || how.create || how.create_new {
            return Err(read_only());
        }
        if path != self.path {
            return Err(no_such(path));
        }
        Ok(self.file.clone())
    }
    fn open_dir(&self, dir: &Path) -> io::Result<VFile> {
        Err(no_such(dir))
    }
    fn rename(&self, _: &Path, _: &Path) -> io::Result<()> {
        Err(read_only())
    }
    fn remove_file(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }
    fn sync_dir(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn is_real(&self) -> bool {
        false
    }
}
