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

/// The archived LSN retention holds to: the point's, `Some(0)` (hold
/// everything) for one that does not decode, `None` without one. A
/// damaged hold must not release what it was keeping. Cost: `read`'s.
pub(crate) fn held_at(vfs: &dyn Vfs, dir: &LogDir) -> Result<Option<Lsn>> {
    match read(vfs, dir) {
        Ok(p) => Ok(p.map(|p| p.archived_lsn)),
        Err(Error::Corrupt { .. }) => {
            crate::obs::trace::event!(warn, file = %dir.archived().display(), "archive point unreadable: checkpoints keep every segment");
            Ok(Some(0))
        }
        Err(e) => Err(e),
    }
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

/// The highest LSN retention may release under the archived LSN
/// `held_at` returned: `up_to`, lowered to what the archive holds.
pub(crate) fn hold(archived: Option<Lsn>, up_to: Lsn) -> Lsn {
    archived.map_or(up_to, |a| up_to.min(a))
}
