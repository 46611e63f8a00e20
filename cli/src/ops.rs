//! The operator's commands that change a log: `recover` (what opening it
//! does, shown or done, strictly or up to the first damage), `checkpoint`
//! (remove old segments, or show which) and `import` (the records of
//! `dump --json`, appended to a new log).
//!
//! None of them creates a log by mistake: `recover` and `checkpoint` open
//! with `create_if_missing(false)`, so a mistyped path fails with "no log"
//! and leaves nothing behind; `import` reads and checks all of its input
//! before it opens (so creates) anything.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine as _;
use ringwal::verify::{self, RecoveryPlan, SetAside};
use ringwal::{Config, Error, Lsn, RecoveryMode, RecoveryReport, Ticket, Truncation, Wal};
use serde_json::{json, Value};

use super::append;
use super::exit::{Kind, DAMAGED};
use super::progress::Progress;
use super::summary::{problem_line, problem_parts};
use super::{CheckpointArgs, CmdResult, Failure, ImportArgs, RecoverArgs};

/// Stdout, with write errors as failures.
struct Out(io::StdoutLock<'static>);

impl Out {
    fn new() -> Out {
        Out(io::stdout().lock())
    }

    fn line(&mut self, s: impl AsRef<str>) -> Result<(), Failure> {
        writeln!(self.0, "{}", s.as_ref()).map_err(|e| Failure::io("stdout", e))
    }

    /// One JSON document.
    fn json(&mut self, doc: &Value) -> Result<(), Failure> {
        self.line(format!("{doc:#}"))
    }
}

/// Problems as the JSON rows `verify --json` prints.
fn problem_rows(problems: &[Error]) -> Vec<Value> {
    problems
        .iter()
        .map(|p| {
            let (file, offset, reason) = problem_parts(p);
            json!({
                "file": file.map(|f| f.display().to_string()),
                "offset": offset,
                "reason": reason,
            })
        })
        .collect()
}

/// What recovery does (or would do), one line per change, the same words
/// for the plan and for the report so that the two can be compared line
/// for line. Ends with where LSNs resume.
struct Changes<'a> {
    node: u32,
    /// Point in time: the damage the log is recovered up to.
    recovery_point: &'a [Error],
    cut: Option<&'a Truncation>,
    /// Where the segment the cut is in is copied first.
    cut_copy: Option<&'a Path>,
    discarded: &'a [PathBuf],
    set_aside: &'a [SetAside],
    skipped: Option<(Lsn, Lsn)>,
    headers_from_copy: &'a [PathBuf],
    next_lsn: Lsn,
    records: u64,
}

impl<'a> Changes<'a> {
    /// The changes `plan` shows (no problems, or point in time).
    fn of_plan(plan: &'a RecoveryPlan) -> Changes<'a> {
        Changes {
            node: plan.node,
            recovery_point: &plan.problems,
            cut: plan.cut.as_ref(),
            cut_copy: plan.cut_copy.as_deref(),
            discarded: &plan.discard,
            set_aside: &plan.set_aside,
            skipped: plan.skipped,
            headers_from_copy: &plan.headers_from_copy,
            next_lsn: plan.next_lsn,
            records: plan.records,
        }
    }

    /// The changes an open made, as its report tells them (files set
    /// aside among the discarded, which the report does not tell apart).
    fn of_report(node: u32, r: &'a RecoveryReport, next_lsn: Lsn) -> Changes<'a> {
        Changes {
            node,
            recovery_point: &[],
            cut: r.truncated.as_ref(),
            cut_copy: None,
            discarded: &r.discarded,
            set_aside: &[],
            skipped: r.skipped,
            headers_from_copy: &r.headers_from_copy,
            next_lsn,
            records: r.records,
        }
    }

    fn print(&self, out: &mut Out) -> Result<(), Failure> {
        let node = self.node;
        let mut any = false;
        for p in self.recovery_point {
            any = true;
            out.line(format!("node {node}: recovery point: {}", problem_line(p)))?;
        }
        if let (Some(copy), Some(t)) = (self.cut_copy, self.cut) {
            out.line(format!(
                "node {node}: copy {} to {} first (the bytes the cut zeroes are kept there)",
                t.file.display(),
                copy.display()
            ))?;
        }
        if let Some(t) = self.cut {
            any = true;
            out.line(format!("node {node}: cut {}", append::describe_cut(t)))?;
        }
        for f in self.discarded {
            any = true;
            out.line(format!("node {node}: discard {}", f.display()))?;
        }
        for s in self.set_aside {
            any = true;
            let lsns = match s.lsns {
                Some((first, last)) => format!("LSN {first}..={last}"),
                None => "no valid records".to_string(),
            };
            out.line(format!(
                "node {node}: set aside {} as {} ({lsns}, {} bytes)",
                s.file.display(),
                s.to.display(),
                s.bytes
            ))?;
        }
        if let Some((first, last)) = self.skipped {
            any = true;
            out.line(format!(
                "node {node}: give up LSNs {first}..={last}: never to be handed out again"
            ))?;
        }
        for f in self.headers_from_copy {
            out.line(format!(
                "node {node}: note: {}: header block damaged; read from its copy",
                f.display()
            ))?;
        }
        if !any {
            out.line(format!("node {node}: nothing to do"))?;
        }
        out.line(format!(
            "node {node}: {} record{}, next LSN {}",
            self.records,
            if self.records == 1 { "" } else { "s" },
            self.next_lsn
        ))
    }

    /// The same as JSON fields.
    fn json(&self) -> Value {
        let paths =
            |v: &[PathBuf]| -> Vec<String> { v.iter().map(|p| p.display().to_string()).collect() };
        json!({
            "node": self.node,
            "recovery_point": problem_rows(self.recovery_point),
            "cut": self.cut.map(|t| json!({
                "file": t.file.display().to_string(),
                "offset": t.offset,
                "reason": t.reason,
                "zeroed": t.zeroed,
                "records_behind": t.records_behind,
            })),
            "cut_copy": self.cut_copy.map(|p| p.display().to_string()),
            "discard": paths(self.discarded),
            "set_aside": self.set_aside.iter().map(|s| json!({
                "file": s.file.display().to_string(),
                "to": s.to.display().to_string(),
                "first_lsn": s.lsns.map(|l| l.0),
                "last_lsn": s.lsns.map(|l| l.1),
                "bytes": s.bytes,
            })).collect::<Vec<_>>(),
            "skipped": self.skipped.map(|(first, last)| json!({"first": first, "last": last})),
            "headers_from_copy": paths(self.headers_from_copy),
            "records": self.records,
            "next_lsn": self.next_lsn,
        })
    }
}

/// The `recover --json` document: `fields` with the command's own.
fn recover_doc(a: &RecoverArgs, applied: bool, mut fields: Value) -> Value {
    let mode = if a.point_in_time {
        "point-in-time"
    } else if a.salvage {
        "salvage"
    } else {
        "strict"
    };
    fields["command"] = json!("recover");
    fields["dir"] = json!(a.dir.display().to_string());
    fields["mode"] = json!(mode);
    fields["dry_run"] = json!(a.dry_run);
    fields["applied"] = json!(applied);
    fields
}

/// `ringwal recover --salvage`: the plan (`verify::salvage_plan`), each
/// damaged run with the LSNs it gives up, then with `--apply` the deed
/// (`verify::salvage`), which keeps a copy of each segment first. A plan
/// with damage salvage does not mend is printed as problems, status 1,
/// and nothing is done.
fn salvage(out: &mut Out, a: &RecoverArgs, cfg: &Config) -> CmdResult {
    let plan = verify::salvage_plan(&a.dir, cfg)?;
    if !plan.problems.is_empty() {
        if a.json {
            let doc = json!({"node": a.node, "problems": problem_rows(&plan.problems), "would_fail": true});
            out.json(&recover_doc(a, false, doc))?;
        } else {
            for p in &plan.problems {
                out.line(problem_line(p))?;
            }
            out.line(format!(
                "node {}: salvage does not mend the damage above; nothing was changed",
                a.node
            ))?;
        }
        return Ok(ExitCode::from(crate::exit::DAMAGED));
    }
    let done = if a.apply {
        verify::salvage(&a.dir, cfg)?
    } else {
        plan
    };
    if a.json {
        let runs: Vec<Value> = done
            .damaged
            .iter()
            .map(|d| {
                json!({
                    "file": d.file.display().to_string(),
                    "from": d.from,
                    "to": d.to,
                    "given_up": d.given_up.map(|(f, l)| json!([f, l])),
                    "reason": d.reason,
                })
            })
            .collect();
        let copies: Vec<Value> = done
            .copies
            .iter()
            .map(|(f, c)| json!({"file": f.display().to_string(), "copy": c.display().to_string()}))
            .collect();
        let doc = json!({
            "node": a.node,
            "damaged": runs,
            "copies": copies,
            "records_kept": done.records_kept,
            "lsns_given_up": done.lsns_given_up(),
        });
        out.json(&recover_doc(a, a.apply, doc))?;
        return Ok(ExitCode::SUCCESS);
    }
    let (give, keep) = if a.apply {
        ("gave up", "kept")
    } else {
        ("would give up", "would keep")
    };
    for d in &done.damaged {
        out.line(format!(
            "node {}: damage: {}:{}: {}",
            a.node,
            d.file.display(),
            d.from,
            d.reason
        ))?;
        let lsns = d
            .given_up
            .map_or("no LSN".to_string(), |(f, l)| format!("LSNs {f}..={l}"));
        out.line(format!(
            "node {}: {give} {lsns} (bytes {}..{} of {}, as a skip): never to be handed out again",
            a.node,
            d.from,
            d.to,
            d.file.display()
        ))?;
    }
    for (f, c) in &done.copies {
        out.line(format!(
            "node {}: {keep} {} as it was, as {}",
            a.node,
            f.display(),
            c.display()
        ))?;
    }
    out.line(format!(
        "node {}: {} records kept, {} LSNs given up",
        a.node,
        done.records_kept,
        done.lsns_given_up()
    ))?;
    out.line(if a.apply {
        "applied"
    } else {
        "nothing was changed"
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `ringwal recover`: with `--dry-run`, what an open would do (from
/// `verify::recovery_plan`, the decision the open itself makes), changing
/// nothing; with `--apply`, the open itself, then close, and what it did.
/// The lines before the last are the same in both modes. Strict: status
/// 1 when damage keeps the log from opening. `--point-in-time`: the plan
/// of an open up to the first damage, which `--apply` prints before it
/// carries it out. Status 3 when a writer holds the log, dry run or not.
pub(crate) fn recover(a: RecoverArgs, quiet: bool) -> CmdResult {
    append::refuse_regular_file(&a.dir, a.node)?;
    let mode = if a.point_in_time {
        RecoveryMode::PointInTime
    } else {
        RecoveryMode::Strict
    };
    let cfg = crate::appending_nothing(a.node)
        .create_if_missing(false)
        .recovery(mode)
        .build();
    let mut out = Out::new();
    if a.salvage {
        return salvage(&mut out, &a, &cfg);
    }
    if a.dry_run || a.point_in_time {
        let plan = {
            let _progress = Progress::start(quiet, format!("planning node {}", a.node));
            verify::recovery_plan(&a.dir, &cfg)?
        };
        if a.dry_run {
            return print_plan(&mut out, &a, &plan);
        }
        return point_in_time(&mut out, &a, cfg, &plan, quiet);
    }
    let (wal, report) = {
        let _progress = Progress::start(quiet, format!("recovering node {}", a.node));
        Wal::open(&a.dir, cfg).map_err(Failure::from)?
    };
    let next_lsn = wal.next_lsn();
    wal.close()?;
    let done = Changes::of_report(a.node, &report, next_lsn);
    if a.json {
        out.json(&recover_doc(&a, true, done.json()))?;
    } else {
        done.print(&mut out)?;
        out.line("applied")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_plan(out: &mut Out, a: &RecoverArgs, plan: &RecoveryPlan) -> CmdResult {
    let refused = plan.mode == RecoveryMode::Strict && !plan.problems.is_empty();
    if a.json {
        let mut doc = if refused {
            json!({"node": plan.node, "problems": problem_rows(&plan.problems)})
        } else {
            Changes::of_plan(plan).json()
        };
        doc["would_fail"] = json!(refused);
        out.json(&recover_doc(a, false, doc))?;
    } else if refused {
        for p in &plan.problems {
            out.line(problem_line(p))?;
        }
        out.line(format!(
            "node {}: a strict open would fail on the first problem above and change nothing",
            plan.node
        ))?;
        out.line("dry run: nothing was changed")?;
    } else {
        Changes::of_plan(plan).print(out)?;
        out.line("dry run: nothing was changed")?;
    }
    Ok(if refused {
        ExitCode::from(DAMAGED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `recover --point-in-time --apply`: print the plan (what is given up),
/// keep a copy of the segment whose tail the cut zeroes, open the log in
/// point-in-time mode (which sets the later segments aside and records
/// the LSNs given up) and close it. If the open did otherwise than
/// planned (the log changed in between), say what it did.
fn point_in_time(
    out: &mut Out,
    a: &RecoverArgs,
    cfg: Config,
    plan: &RecoveryPlan,
    quiet: bool,
) -> CmdResult {
    let planned = Changes::of_plan(plan);
    if !a.json {
        planned.print(out)?;
    }
    if let (Some(copy), Some(cut)) = (&plan.cut_copy, &plan.cut) {
        copy_aside(&cut.file, copy)?;
    }
    let (wal, report) = {
        let _progress = Progress::start(quiet, format!("recovering node {}", a.node));
        Wal::open(&a.dir, cfg).map_err(Failure::from)?
    };
    let next_lsn = wal.next_lsn();
    wal.close()?;
    let expected: Vec<PathBuf> = plan
        .discard
        .iter()
        .cloned()
        .chain(plan.set_aside.iter().map(|s| s.file.clone()))
        .collect();
    // The open names files under the directory it resolved, the plan
    // under the one given: the same files if their names are the same.
    let name = |p: &Path| p.file_name().map(|n| n.to_os_string());
    let cut = |t: &Truncation| (name(&t.file), t.offset, t.zeroed, t.records_behind);
    let as_planned = report.truncated.as_ref().map(cut) == plan.cut.as_ref().map(cut)
        && report
            .discarded
            .iter()
            .map(|p| name(p))
            .eq(expected.iter().map(|p| name(p)))
        && report.skipped == plan.skipped
        && next_lsn == plan.next_lsn;
    let done = Changes::of_report(a.node, &report, next_lsn);
    if a.json {
        let mut doc = planned.json();
        doc["as_planned"] = json!(as_planned);
        if !as_planned {
            doc["done"] = done.json();
        }
        out.json(&recover_doc(a, true, doc))?;
        return Ok(ExitCode::SUCCESS);
    }
    if !as_planned {
        out.line(format!(
            "node {}: note: the log changed after the plan above; the open did this:",
            a.node
        ))?;
        done.print(out)?;
    }
    out.line("applied")?;
    Ok(ExitCode::SUCCESS)
}

/// Copy `from` to `to`, a name no file has (never overwriting one), and
/// make the copy and its name durable before the original is changed.
/// The copy holds the log's records, so it gets exactly the segment's
/// permission bits (the log's file mode), whatever the umask.
fn copy_aside(from: &Path, to: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Failure::from(Error::Io { path, source })
    };
    let mut src = File::open(from).map_err(io_err(from))?;
    let mode = src.metadata().map_err(io_err(from))?.permissions().mode() & 0o777;
    let mut dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(to)
        .map_err(io_err(to))?;
    // The umask may have taken bits the log's mode grants (a group's).
    dst.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io_err(to))?;
    io::copy(&mut src, &mut dst).map_err(io_err(to))?;
    dst.sync_all().map_err(io_err(to))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Bytes of `node`'s segment and spare files in `dir`: what its log takes
/// on disk. Files that vanish while being counted count as nothing.
fn node_bytes(dir: &Path, node: u32) -> Result<u64, Failure> {
    let entries = std::fs::read_dir(dir).map_err(|source| {
        Failure::from(Error::Io {
            path: dir.to_path_buf(),
            source,
        })
    })?;
    let mut total = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = ringwal::format::parse_segment_file_name(name)
            .or_else(|| ringwal::format::parse_spare_file_name(name))
            .is_some_and(|(n, _)| n == node);
        if ours {
            total += entry.metadata().map_or(0, |m| m.len());
        }
    }
    Ok(total)
}

/// A segment a checkpoint removes (or would).
struct Gone {
    file: PathBuf,
    base_lsn: Lsn,
    last_lsn: Lsn,
    bytes: u64,
}

/// The warning for a checkpoint past the end of the log that `--force`
/// let through, if it is.
fn past_the_end(up_to: Lsn, last_lsn: Lsn) -> Option<String> {
    (up_to > last_lsn).then(|| {
        format!(
            "--up-to {up_to} is past the end of the log (LSN {last_lsn}), taken as {last_lsn} \
             (--force): every segment but the newest goes"
        )
    })
}

/// The LSN a checkpoint runs at: `up_to`, or with `--force` the last LSN
/// when `up_to` is past it. The library refuses an LSN past the end
/// (`PastEnd`, status 2); `--force` is the operator saying "everything".
fn forced(a: &CheckpointArgs, last_lsn: Lsn) -> Lsn {
    if a.force {
        a.up_to.min(last_lsn)
    } else {
        a.up_to
    }
}

/// `ringwal checkpoint`: open (no create), `Wal::checkpoint`, close; print
/// each segment removed and the bytes freed on disk. The library keeps up
/// to a few removed segments as spare files for the next rolls to reuse,
/// so the bytes freed can be fewer than the segments' size; both are
/// printed. `--dry-run` shows the segments from `verify::checkpoint_plan`
/// (the same rule) and changes nothing. An `--up-to` past the end of the
/// log is refused as the library refuses it; with `--force` it is taken
/// as the last LSN and warned about on stderr (and in the JSON document).
pub(crate) fn checkpoint(a: CheckpointArgs) -> CmdResult {
    append::refuse_regular_file(&a.dir, a.node)?;
    let cfg = crate::appending_nothing(a.node)
        .create_if_missing(false)
        .release_unarchived(a.release_unarchived)
        .build();
    let mut out = Out::new();
    if a.dry_run {
        let plan = match verify::checkpoint_plan(&a.dir, &cfg, a.up_to) {
            Err(ringwal::Error::PastEnd { last, .. }) if a.force => {
                verify::checkpoint_plan(&a.dir, &cfg, last)?
            }
            plan => plan?,
        };
        if !plan.problems.is_empty() {
            return refused_checkpoint(&mut out, &a, &plan.problems);
        }
        let gone = plan
            .remove
            .iter()
            .map(|r| Gone {
                file: r.file.clone(),
                base_lsn: r.base_lsn,
                last_lsn: r.last_lsn,
                bytes: r.bytes,
            })
            .collect::<Vec<_>>();
        let warning = past_the_end(a.up_to, plan.last_lsn);
        return print_checkpoint(&mut out, &a, plan.last_lsn, &gone, warning, None);
    }
    // Refused before the open, which would rewrite the manifest: a
    // refusal changes nothing. (The library refuses it too, after.)
    let last = match verify::last_lsn(&a.dir, &cfg) {
        // No log: the open below says so, as "no log".
        Err(ringwal::Error::NoLog { .. }) => None,
        last => Some(last?),
    };
    if let Some(last) = last.filter(|&l| !a.force && a.up_to > l) {
        return Err(ringwal::Error::PastEnd {
            what: "up_to",
            lsn: a.up_to,
            last,
        }
        .into());
    }
    // No directory: the open below says so, as "no log".
    let before_open = node_bytes(&a.dir, a.node).unwrap_or_default();
    let (wal, _) = append::open(&a.dir, cfg.clone())?;
    let last_lsn = wal.next_lsn() - 1;
    let warning = past_the_end(a.up_to, last_lsn);
    let listed = verify::stat(&a.dir, &cfg)?;
    let removed = wal.checkpoint(forced(&a, last_lsn))?;
    let stats = wal.stats();
    wal.close()?;
    let held = stats.archive_held_bytes > 0 && !a.release_unarchived && !a.json;
    if let Some(archived) = stats.archived_lsn.filter(|&l| held && l < a.up_to) {
        eprintln!(
            "ringwal: note: segments above LSN {archived} stay until the archive holds them \
             ({} bytes); --release-unarchived removes them anyway",
            stats.archive_held_bytes
        );
    }
    let after = node_bytes(&a.dir, a.node)?;
    let gone: Vec<Gone> = listed.segments[..removed.min(listed.segments.len())]
        .iter()
        .map(|s| Gone {
            file: s.path.clone(),
            base_lsn: s.base_lsn,
            last_lsn: s.last_lsn,
            bytes: s.file_bytes,
        })
        .collect();
    let freed = before_open.saturating_sub(after);
    print_checkpoint(&mut out, &a, last_lsn, &gone, warning, Some(freed))
}

/// A dry run of a checkpoint that the open it needs would refuse: the
/// problems, status 1.
fn refused_checkpoint(out: &mut Out, a: &CheckpointArgs, problems: &[Error]) -> CmdResult {
    if a.json {
        out.json(&json!({
            "command": "checkpoint",
            "dir": a.dir.display().to_string(),
            "node": a.node,
            "dry_run": true,
            "would_fail": true,
            "problems": problem_rows(problems),
        }))?;
    } else {
        for p in problems {
            out.line(problem_line(p))?;
        }
        out.line(format!(
            "node {}: the checkpoint's open would fail on the first problem above",
            a.node
        ))?;
        out.line("dry run: nothing was changed")?;
    }
    Ok(ExitCode::from(DAMAGED))
}

/// What a checkpoint removed (`freed`: the bytes freed on disk) or, with
/// `freed` `None`, would remove.
fn print_checkpoint(
    out: &mut Out,
    a: &CheckpointArgs,
    last_lsn: Lsn,
    gone: &[Gone],
    warning: Option<String>,
    freed: Option<u64>,
) -> CmdResult {
    let segment_bytes: u64 = gone.iter().map(|g| g.bytes).sum();
    if let Some(w) = &warning {
        eprintln!("ringwal: warning: {w}");
    }
    if a.json {
        let removed: Vec<Value> = gone
            .iter()
            .map(|g| {
                json!({
                    "file": g.file.display().to_string(),
                    "base_lsn": g.base_lsn,
                    "last_lsn": g.last_lsn,
                    "bytes": g.bytes,
                })
            })
            .collect();
        out.json(&json!({
            "command": "checkpoint",
            "dir": a.dir.display().to_string(),
            "node": a.node,
            "up_to": a.up_to,
            "dry_run": a.dry_run,
            "last_lsn": last_lsn,
            "warning": warning,
            "removed": removed,
            "segment_bytes": segment_bytes,
            "freed_bytes": freed,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if freed.is_some() {
        "removed"
    } else {
        "would remove"
    };
    for g in gone {
        out.line(format!(
            "{verb} {} (LSN {}..={}, {} bytes)",
            g.file.display(),
            g.base_lsn,
            g.last_lsn,
            g.bytes
        ))?;
    }
    let n = gone.len();
    let s = if n == 1 { "" } else { "s" };
    match freed {
        Some(freed) => out.line(format!(
            "checkpoint: {n} segment{s} removed ({segment_bytes} bytes of segments), \
             {freed} bytes freed on disk"
        ))?,
        None => out.line(format!(
            "dry run: checkpoint would remove {n} segment{s} ({segment_bytes} bytes of \
             segments); nothing was changed"
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// One record of `dump --json` input.
struct Imported {
    lsn: Option<Lsn>,
    stream: u16,
    batch: Option<u64>,
    payload: Vec<u8>,
    /// A checkpoint marker's snapshot LSN: appended with
    /// `Wal::checkpoint_marker`, the one way such a record is written.
    marker: Option<Lsn>,
}

/// Parse one line of `dump --json`: `payload_b64` is required, `stream`
/// defaults to 0, `batch` to null; `kind`, if given, is `data` or
/// `checkpoint` (a marker: 8 bytes, the snapshot LSN); the other kinds
/// are the log's own framing and are never in a dump.
fn parse_line(line: &str) -> Result<Imported, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = v["payload_b64"]
        .as_str()
        .ok_or("no payload_b64 string")
        .and_then(|s| b64.decode(s).map_err(|_| "payload_b64 is not base64"))?;
    let stream = match &v["stream"] {
        Value::Null => 0,
        s => s
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .ok_or("stream is not a number from 0 to 65535")?,
    };
    let batch = match &v["batch"] {
        Value::Null => None,
        b => Some(b.as_u64().ok_or("batch is neither null nor an LSN")?),
    };
    let marker = match v["kind"].as_str() {
        None | Some("data") => None,
        Some("checkpoint") => {
            let snapshot: [u8; 8] = payload[..]
                .try_into()
                .map_err(|_| "a checkpoint marker's payload is its 8-byte snapshot LSN")?;
            Some(u64::from_le_bytes(snapshot))
        }
        Some(kind) => return Err(format!("a record of kind {kind} cannot be imported")),
    };
    Ok(Imported {
        lsn: v["lsn"].as_u64(),
        stream,
        batch,
        payload,
        marker,
    })
}

/// Every record of stdin, each line parsed and checked against the
/// record size limit `max`, before anything is written: the first line
/// that fails ends the import with an error naming it (status 2) and the
/// log untouched. Holds the whole input in memory.
fn read_all(max: usize) -> Result<Vec<Imported>, Failure> {
    let mut records = Vec::new();
    for (i, line) in io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| Failure::io("stdin", e))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: String| Failure::new(Kind::Input, format!("stdin line {}: {e}", i + 1));
        let rec = parse_line(&line).map_err(bad)?;
        if rec.payload.len() > max {
            return Err(bad(format!(
                "a payload of {} bytes is over the record size limit of {max} bytes",
                rec.payload.len()
            )));
        }
        records.push(rec);
    }
    Ok(records)
}

/// Refuse a log that holds records already, before opening it: an
/// import never interleaves with other data, and a refused import leaves
/// the log as it was (no open, so no recovery either).
fn refuse_nonempty(dir: &Path, node: u32) -> Result<(), Failure> {
    let last = verify::stat(dir, &Config::builder().node(node).build()).map_or(0, |s| s.last_lsn);
    if last == 0 {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{}: node {node} already holds LSNs up to {last}; import needs a new or empty log",
        dir.display()
    )))
}

/// Append `records` in order, consecutive records with the same non-null
/// `batch` as one atomic batch and each checkpoint marker alone. Returns
/// the last ticket and whether the log's LSNs differ from the input's
/// (said once, on stderr).
fn append_all(
    wal: &Wal,
    records: &[Imported],
    progress: &Progress,
) -> Result<(Option<Ticket>, bool), Failure> {
    let mut last: Option<Ticket> = None;
    let mut renumbered = false;
    let mut start = 0;
    while start < records.len() {
        let first = &records[start];
        let joins = |r: &Imported| {
            first.batch.is_some()
                && first.marker.is_none()
                && r.marker.is_none()
                && r.batch == first.batch
        };
        let len = 1 + records[start + 1..].iter().take_while(|r| joins(r)).count();
        let group = &records[start..start + len];
        let t = match group {
            [one] => match one.marker {
                Some(snapshot) => wal.checkpoint_marker(snapshot)?,
                None => wal.append(one.stream, &one.payload)?,
            },
            _ => {
                let batch: Vec<(u16, &[u8])> =
                    group.iter().map(|r| (r.stream, &r.payload[..])).collect();
                wal.append_batch(&batch)?
            }
        };
        // One append per group: its LSNs are the last `len` handed out,
        // above everything imported before it.
        let first_lsn = t.lsn() + 1 - len as u64;
        assert!(
            last.as_ref().is_none_or(|prev| prev.lsn() < first_lsn),
            "import's LSNs ascend: LSN {first_lsn} after LSN {}",
            last.as_ref().map_or(0, Ticket::lsn)
        );
        let moved = group
            .iter()
            .zip(first_lsn..)
            .find(|(r, lsn)| r.lsn.is_some_and(|l| l != *lsn));
        if let (Some((r, lsn)), false) = (moved, renumbered) {
            renumbered = true;
            eprintln!(
                "ringwal: import: LSNs renumbered: input LSN {} is LSN {lsn} here",
                r.lsn.unwrap_or(0)
            );
        }
        progress.inc(len as u64);
        last = Some(t);
        start += len;
    }
    Ok((last, renumbered))
}

/// `ringwal import`: read `dump --json` lines from stdin and append them
/// to a new or empty log (consecutive records with the same non-null
/// `batch` as one atomic batch), wait until all are durable, close, and
/// print the count. All or nothing: every line is parsed and checked
/// before the log is opened, so a bad line creates no log and changes no
/// existing one; a log that already holds records is refused before it
/// is opened. LSNs are the log's own (the input's are kept when the
/// input starts at 1 and is dense, and a warning says so otherwise).
pub(crate) fn import(a: ImportArgs, quiet: bool) -> CmdResult {
    append::refuse_regular_file(&a.dir, a.node)?;
    let cfg = Config::builder().node(a.node).build();
    let records = read_all(cfg.max_record_bytes())?;
    refuse_nonempty(&a.dir, a.node)?;
    let (wal, _) = append::open(&a.dir, cfg)?;
    if wal.next_lsn() != 1 {
        let last = wal.next_lsn() - 1;
        wal.close()?;
        return Err(Failure::usage(format!(
            "{}: node {} already holds LSNs up to {last}; import needs a new or empty log",
            a.dir.display(),
            a.node
        )));
    }
    let (last, renumbered) = {
        let progress = Progress::start(quiet, "importing");
        append_all(&wal, &records, &progress)?
    };
    let last_lsn = match &last {
        Some(t) => {
            t.wait(ringwal::Level::Durable)?;
            Some(t.lsn())
        }
        None => None,
    };
    wal.close()?;
    let count = records.len();
    let mut out = Out::new();
    if a.json {
        return out
            .json(&json!({
                "command": "import",
                "dir": a.dir.display().to_string(),
                "node": a.node,
                "imported": count,
                "first_lsn": last_lsn.map(|_| 1),
                "last_lsn": last_lsn,
                "renumbered": renumbered,
            }))
            .map(|()| ExitCode::SUCCESS);
    }
    let range = last_lsn.map_or(String::new(), |l| format!(" (LSN 1..={l})"));
    out.line(format!(
        "imported {count} record{}{range}",
        if count == 1 { "" } else { "s" }
    ))?;
    Ok(ExitCode::SUCCESS)
}
