//! Salvage: give up only what is damaged. Where a strict open refuses
//! damage in the middle of a log, and a point-in-time recovery keeps
//! only what precedes it, a salvage keeps every record whose frame
//! verifies and gives up exactly the LSNs whose frames are damaged or
//! lost: the damaged run, from the end of the last whole record (or the
//! start of the atomic batch it ends in) to the next valid frame of a
//! record standing alone, is rewritten as one skip frame for the
//! LSNs it held and padding, so that every reader steps over exactly
//! those LSNs, as it steps over any LSNs given up. With no such write
//! left in an older segment, the run to the segment's end is given up up
//! to the next segment's base and zeroed. A copy of each segment as it
//! was is kept beside it before its first byte changes.
//!
//! Not salvaged, reported as problems instead: a segment header that
//! does not read, a missing segment, damage running to the end of the
//! newest segment (the point-in-time recovery's case), and a damaged run
//! whose length leaves 8 or 16 bytes that no frame fills.

use std::path::{Path, PathBuf};

use ringwal_platform::{OpenHow, Vfs};

use crate::at_rest::format;
use crate::config::Config;
use crate::error::{Error, Lsn, Result};
use crate::scan::{self, Position, Verdict};
use crate::segment::index::Point;
use crate::segment::set::{LogDir, SegmentFile};

/// One damaged run a salvage rewrites.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damaged {
    /// The segment.
    pub file: PathBuf,
    /// The first byte rewritten: where the complete data before the
    /// damage ends.
    pub from: u64,
    /// The end of the run rewritten: the start of the next record kept,
    /// or the segment's end.
    pub to: u64,
    /// The LSNs given up, first and last; `None` when the run held none
    /// (damage in padding or a vouch).
    pub given_up: Option<(Lsn, Lsn)>,
    /// The damage, as `verify` names it.
    pub reason: String,
    /// The segment's salt, which the skip and padding are written under.
    salt: u64,
    /// Whether padding fills the run up to a record kept (else zeros run
    /// to the end of an older segment).
    padded: bool,
}

/// What a salvage of a log does (or did): from [`salvage_plan`] or
/// [`salvage`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SalvagePlan {
    /// The damaged runs, in log order.
    pub damaged: Vec<Damaged>,
    /// The copy of each segment kept before it is rewritten, beside it
    /// (`NAME.corrupt`, or `.corrupt.N`), in the order of `damaged`'s
    /// segments.
    pub copies: Vec<(PathBuf, PathBuf)>,
    /// The records whose frames verify: what the log holds afterwards.
    pub records_kept: u64,
    /// Damage a salvage does not mend (see the module docs); a plan with
    /// any is not carried out.
    pub problems: Vec<Error>,
}

impl SalvagePlan {
    /// How many LSNs it gives up.
    pub fn lsns_given_up(&self) -> u64 {
        self.damaged
            .iter()
            .filter_map(|d| d.given_up)
            .map(|(first, last)| last - first + 1)
            .sum()
    }
}

/// What a salvage of `cfg.node()`'s log in `dir` would do, changing
/// nothing. Takes the writer lock for as long as it reads (`Locked`
/// while a writer holds it); `NoLog` when there is no log. Cost: a read
/// of every segment's frames, and of the blocks after each damaged run
/// until the next write that starts cleanly.
pub fn salvage_plan(dir: &Path, cfg: &Config) -> Result<SalvagePlan> {
    let log = LogDir::new(dir, cfg.node());
    let files = log.list_log(&*cfg.vfs, false)?.segments;
    let _lock = super::verify::hold_writer_lock(cfg, &log)?;
    plan(cfg, &log, &files)
}

/// Carry out [`salvage_plan`]: for each segment with damage, first a
/// durable copy of it as it was, then each damaged run rewritten (a skip
/// frame and padding, or zeros), durably. Refused, changing nothing,
/// when the plan has problems (the first is returned). Afterwards a
/// strict open accepts the log, and every reader steps over the LSNs
/// given up; none of them is ever handed out again (they are below the
/// log's next LSN). Cost: the plan's reads, a copy of each damaged
/// segment, one small write and `fdatasync` per run, a directory sync.
pub fn salvage(dir: &Path, cfg: &Config) -> Result<SalvagePlan> {
    let log = LogDir::new(dir, cfg.node());
    let files = log.list_log(&*cfg.vfs, false)?.segments;
    let _lock = super::verify::hold_writer_lock(cfg, &log)?;
    let mut plan = plan(cfg, &log, &files)?;
    if !plan.problems.is_empty() {
        return Err(plan.problems.swap_remove(0));
    }
    let vfs = &*cfg.vfs;
    for (file, copy) in &plan.copies {
        copy_durably(vfs, file, copy, cfg.file_mode())?;
        for d in plan.damaged.iter().filter(|d| d.file == *file) {
            rewrite(vfs, d)?;
        }
    }
    if !plan.damaged.is_empty() {
        vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(plan)
}

/// The salvage of `files`, the log's segments in LSN order.
fn plan(cfg: &Config, log: &LogDir, files: &[SegmentFile]) -> Result<SalvagePlan> {
    let vfs = &*cfg.vfs;
    let (log_id, files) = super::verify::written_segments(cfg, log, files)?;
    let mut out = SalvagePlan::default();
    debug_assert!(
        files.windows(2).all(|w| w[0].base < w[1].base),
        "segments are listed by ascending base"
    );
    for (i, f) in files.iter().enumerate() {
        let next_base = files.get(i + 1).map(|n| n.base);
        let runs = out.damaged.len();
        plan_segment(cfg, f, log.node(), log_id, next_base, &mut out)?;
        if out.damaged.len() > runs {
            let copy = super::set_aside_name(vfs, &f.path)?;
            out.copies.push((f.path.clone(), copy));
        }
    }
    Ok(out)
}

/// Walk `f` from its start, and on from each record after a damaged run,
/// adding its runs and records to `out`.
fn plan_segment(
    cfg: &Config,
    f: &SegmentFile,
    node: u32,
    log_id: Option<u64>,
    next_base: Option<Lsn>,
    out: &mut SalvagePlan,
) -> Result<()> {
    let vfs = &*cfg.vfs;
    let mut resume: Option<Point> = None;
    loop {
        let mut w = match scan::open(vfs, f, node, log_id)? {
            Ok(w) => w,
            Err(p) => {
                out.problems.push(p.error(f, node));
                return Ok(());
            }
        };
        if let Some(p) = resume
            && !w.seek(p)?
        {
            unreachable!("a record found by record_after starts a walk");
        }
        let end = w.walk_to_end()?;
        out.records_kept += w.records();
        let newest = next_base.is_none();
        let pos = Position::of(newest, cfg.torn_window(), w.header()).followed_by(next_base);
        let damage = match w.judge(end, pos)? {
            Verdict::Corrupt(damage) => damage.error(w.path(), end),
            Verdict::Clean | Verdict::Full | Verdict::Torn { .. } => return Ok(()),
        };
        let (from, due) = (end.data_end(), end.due());
        let reason = match &damage {
            Error::Corrupt { reason, .. } => reason.to_string(),
            e => e.to_string(),
        };
        let salt = w.header().salt;
        let run = |to: u64, given_up: Option<(Lsn, Lsn)>, padded: bool| Damaged {
            file: f.path.clone(),
            from,
            to,
            given_up,
            reason: reason.clone(),
            salt,
            padded,
        };
        match w.record_after(end.at, due, |to| fits(to - from, true))? {
            Some((lsn, to)) => {
                let d = run(to, (lsn > due).then(|| (due, lsn - 1)), true);
                if !fits(to - from, d.given_up.is_some()) {
                    out.problems.push(damage);
                    return Ok(());
                }
                out.damaged.push(d);
                // `write_at` outside the walk: no vouch is read there.
                resume = Some(Point {
                    lsn,
                    offset: to,
                    write_at: to,
                });
            }
            None => match next_base {
                Some(next) => {
                    let d = run(w.end(), (next > due).then(|| (due, next - 1)), false);
                    if !fits(d.to - from, d.given_up.is_some()) {
                        out.problems.push(damage);
                    } else {
                        out.damaged.push(d);
                    }
                    return Ok(());
                }
                // Damage to the end of the newest segment: nothing after
                // it to keep; the point-in-time recovery's case.
                None => {
                    out.problems.push(damage);
                    return Ok(());
                }
            },
        }
    }
}

/// Whether a damaged run of `len` bytes can be rewritten: a skip frame
/// (with `skip`) and then nothing or a frame of at least a header. A
/// leftover of 8 or 16 bytes, which no frame fills, or a run too short
/// for the skip, cannot.
fn fits(len: u64, skip: bool) -> bool {
    let skip = if skip { format::frame_len(8) as u64 } else { 0 };
    len.checked_sub(skip)
        .is_some_and(|rest| rest == 0 || rest >= format::FRAME_HEADER as u64)
}

/// Write `d`'s run, durably: a skip frame for the LSNs given up, then
/// padding up to the record kept after it (whose offset need not be a
/// block boundary), or zeros to the end of an older segment.
fn rewrite(vfs: &dyn Vfs, d: &Damaged) -> Result<()> {
    debug_assert!(fits(d.to - d.from, d.given_up.is_some()), "{d:?}");
    let io = |e| Error::io(&d.file, e);
    // A run lies within one segment, whose size is a `usize` here.
    let mut bytes = vec![0u8; (d.to - d.from) as usize];
    let len = bytes.len();
    let mut at = 0;
    if let Some((first, last)) = d.given_up {
        format::encode_skip(&mut bytes, d.salt, first, last - first + 1);
        at = format::frame_len(8);
    }
    if d.padded && at < len {
        format::encode_padding(&mut bytes[at..], d.salt, len - at);
    }
    let how = OpenHow {
        write: true,
        ..OpenHow::default()
    };
    let file = vfs.open(&d.file, how).map_err(io)?;
    file.write_at(&bytes, d.from, false)
        .and_then(|()| file.sync_data())
        .map_err(io)
}

/// Copy `from` to `to` (which must not exist) with mode `mode`, durably:
/// the evidence a salvage keeps before it changes a byte.
fn copy_durably(vfs: &dyn Vfs, from: &Path, to: &Path, mode: u32) -> Result<()> {
    let src = vfs
        .open(from, OpenHow::default())
        .map_err(|e| Error::io(from, e))?;
    let len = src.size().map_err(|e| Error::io(from, e))?;
    let how = OpenHow {
        write: true,
        create_new: true,
        mode: Some(mode),
        ..OpenHow::default()
    };
    let dst = vfs.open(to, how).map_err(|e| Error::io(to, e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = src.read_at(&mut buf, off).map_err(|e| Error::io(from, e))?;
        if n == 0 {
            break;
        }
        dst.write_at(&buf[..n], off, false)
            .map_err(|e| Error::io(to, e))?;
        off += n as u64;
    }
    dst.sync_all().map_err(|e| Error::io(to, e))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    vfs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}
