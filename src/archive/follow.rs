//! A standby: a directory restored from an archive and kept current as
//! new objects land. The newest segment grows in place by the bytes its
//! newer object adds (a segment's archived bytes are a prefix of every
//! later object of it: acknowledged bytes are never rewritten), a new
//! segment is written whole, and the manifest follows once the data is
//! durable; so every reader of the directory sees a log that a writer
//! left, only longer each time.

use crate::segment::durable;

use crate::archive::restore::{self, Builder, Restored};
use crate::archive::ship::read_manifest;
use crate::at_rest::format::Manifest;
use crate::error::{ArchiveProblem, Result};

/// What the standby holds: the newest segment's base, its restored
/// length and last LSN.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Have {
    base: u64,
    bytes: u64,
    last: u64,
}

/// Restore everything the archive holds into the empty directory of
/// `b`, without giving up the LSNs above it (the standby will hold
/// them). Returns what it holds.
pub(crate) fn start(b: &Builder<'_>) -> Result<(Restored, Have)> {
    let remote = read_manifest(b.store, &b.names)?.ok_or_else(|| {
        b.store
            .problem(&b.names.manifest(), ArchiveProblem::NoArchive)
    })?;
    b.check_target()?;
    let r = match restore::build(b, &remote, restore::RestoreTo::End) {
        Ok(r) => r,
        Err(e) => {
            b.undo();
            return Err(e);
        }
    };
    b.keep();
    let newest = restore::pieces(&b.names, &remote).pop().map(|(_, g)| Have {
        base: g.base,
        bytes: g.bytes,
        last: g.last,
    });
    let have = newest.ok_or_else(|| {
        b.store.problem(
            &b.names.manifest(),
            ArchiveProblem::Damaged("it lists no segment".into()),
        )
    })?;
    Ok((r, have))
}

/// Bring the standby up to the archive as it is now. Returns whether it
/// changed.
pub(crate) fn step(b: &Builder<'_>, have: &mut Have, r: &mut Restored) -> Result<bool> {
    let Some(remote) = read_manifest(b.store, &b.names)? else {
        return Err(b
            .store
            .problem(&b.names.manifest(), ArchiveProblem::Missing));
    };
    let mut changed = false;
    for (rel, g) in restore::pieces(&b.names, &remote) {
        if g.base < have.base || (g.base == have.base && g.last <= have.last) {
            continue;
        }
        let bytes = b.fetch(&rel, &g)?;
        r.bytes += bytes.len() as u64;
        let (_, bytes) = b.check(&rel, g.base, bytes, remote.log_id, g.last)?;
        if g.base == have.base {
            grow(b, &rel, have, &bytes)?;
        } else {
            r.segments += 1;
            b.write_segment(&rel, g.base, &bytes)?;
        }
        *have = Have {
            base: g.base,
            bytes: g.bytes,
            last: g.last,
        };
        r.last_lsn = g.last;
        changed = true;
    }
    if changed {
        b.keep();
        let newest_base = have.base;
        b.write_manifest(&Manifest {
            node: b.dir.node(),
            log_id: remote.log_id,
            newest_base,
            durable_lsn: have.last,
            handed_out: remote.handed_out.max(remote.last_lsn()),
            oldest_lsn: r.first_lsn,
        })?;
        b.keep();
    }
    Ok(changed)
}

/// Write the part of `bytes` past what the standby's newest segment
/// holds, durably. The part it holds must be the same bytes: anything
/// else is an archive that rewrote an acknowledged byte.
fn grow(
    b: &Builder<'_>,
    rel: &str,
    have: &Have,
    bytes: &[u8],
) -> Result<crate::segment::set::SegmentFile> {
    let file = b.dir.segment(have.base);
    let held = durable::read_prefix(&*b.vfs, &file.path, have.bytes)?;
    if bytes.len() < held.len() || bytes[..held.len()] != held[..] {
        return Err(b.store.problem(
            rel,
            ArchiveProblem::Damaged(format!(
                "its first {} bytes differ from the {} restored before",
                held.len(),
                file.path.display()
            )),
        ));
    }
    durable::write_durably(&*b.vfs, &file.path, &bytes[held.len()..], have.bytes)?;
    Ok(file)
}
