//! The archive point a node's directory keeps (`NNNNN.archived`,
//! docs/format.md §9): how far the node's archive holds its sealed
//! segments. The archiver writes it after the archive manifest that
//! lists them; retention reads it before it removes a segment, so that
//! no segment leaves the disk before it is archived. It is the one
//! channel between an archiver and the writer, in one process or two.

use ringwal_platform::Vfs;

use crate::at_rest::format::{self, ArchivedPoint};
use crate::error::{Corruption, Error, Lsn, Result};
use crate::segment::durable;
use crate::segment::set::LogDir;

/// The node's archive point, or `None` when the log has no archive.
/// Damage is `Corrupt`, naming the file: a hold that cannot be read
/// holds everything. Cost: an open and one small read.
pub(crate) fn read(vfs: &dyn Vfs, dir: &LogDir) -> Result<Option<ArchivedPoint>> {
    let path = dir.archived();
    let Some(bytes) = durable::read_small(vfs, &path)? else {
        return Ok(None);
    };
    format::decode_archived(&bytes).map(Some).map_err(|e| {
        Error::corrupt(
            &path,
            0,
            Corruption::Manifest(format!("archive point: {e}")),
        )
    })
}

#[cfg_attr(
    not(feature = "archive"),
    expect(dead_code, reason = "written by the archiver (feature `archive`)")
)]
/// Replace the node's archive point, atomically and durably. Cost:
/// `durable::atomic_write_in`'s (a create, a write, an fdatasync, a
/// rename and a directory fsync).
pub(crate) fn write(vfs: &dyn Vfs, dir: &LogDir, p: ArchivedPoint) -> Result<()> {
    durable::atomic_write_in(
        vfs,
        dir.path(),
        &format::archived_file_name(dir.node()),
        &format::encode_archived(p),
        dir.file_mode(),
    )
}

/// The highest LSN retention may release under the archive point `p`:
/// `up_to`, lowered to what the archive holds. Without an archive, or
/// when told to ignore it, `up_to` itself.
pub(crate) fn hold(p: Option<ArchivedPoint>, up_to: Lsn) -> Lsn {
    p.map_or(up_to, |p| up_to.min(p.archived_lsn))
}
