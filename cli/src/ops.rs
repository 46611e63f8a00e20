//! The operator's commands that change a log: `recover` (what opening it
//! does, shown or done), `checkpoint` (remove old segments) and `import`
//! (the records of `dump --json`, appended to a new log).
//!
//! None of them creates a log by mistake: `recover` and `checkpoint` open
//! with `create_if_missing(false)`, so a mistyped path fails with "no log"
//! and leaves nothing behind.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine as _;
use ringwal::verify::{self, RecoveryPlan};
use ringwal::{Config, Error, Lsn, RecoveryReport, Ticket, Truncation, Wal};

use super::append;
use super::exit::DAMAGED;
use super::progress::Progress;
use super::summary::problem_line;
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
}

/// What recovery does (or would do), one line per change, the same words
/// for the plan and for the report so that the two can be compared line
/// for line. Ends with where LSNs resume.
struct Changes<'a> {
    node: u32,
    cut: Option<&'a Truncation>,
    discarded: &'a [PathBuf],
    skipped: Option<(Lsn, Lsn)>,
    headers_from_copy: &'a [PathBuf],
    next_lsn: Lsn,
    records: u64,
}

impl Changes<'_> {
    fn print(&self, out: &mut Out) -> Result<(), Failure> {
        let node = self.node;
        let mut any = false;
        if let Some(t) = self.cut {
            any = true;
            out.line(format!("node {node}: cut {}", append::describe_cut(t)))?;
        }
        for f in self.discarded {
            any = true;
            out.line(format!("node {node}: discard {}", f.display()))?;
        }
        if let Some((first, last)) = self.skipped {
            any = true;
            out.line(format!(
                "node {node}: skip LSNs {first}..={last}: never to be handed out"
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
}

/// `ringwal recover`: with `--dry-run`, what a strict open would do (from
/// `verify::recovery_plan`, the decision the open itself makes), changing
/// nothing; with `--apply`, the open itself, then close, and what it did.
/// The lines before the last are the same in both modes. Status 1 when
/// damage keeps the log from opening.
pub(crate) fn recover(a: RecoverArgs, quiet: bool) -> CmdResult {
    let cfg = Config::builder()
        .node(a.node)
        .create_if_missing(false)
        .build();
    let mut out = Out::new();
    if a.dry_run {
        let plan = verify::recovery_plan(&a.dir, &cfg)?;
        return print_plan(&mut out, &plan);
    }
    let (wal, report) = {
        let _progress = Progress::start(quiet, format!("recovering node {}", a.node));
        append::refuse_regular_file(&a.dir)?;
        Wal::open(&a.dir, cfg).map_err(Failure::open)?
    };
    let next_lsn = wal.next_lsn();
    wal.close()?;
    print_report(&mut out, a.node, &report, next_lsn)?;
    out.line("applied")?;
    Ok(ExitCode::SUCCESS)
}

fn print_plan(out: &mut Out, plan: &RecoveryPlan) -> CmdResult {
    if !plan.problems.is_empty() {
        for p in &plan.problems {
            out.line(problem_line(p))?;
        }
        out.line(format!(
            "node {}: a strict open would fail on the first problem above and change nothing",
            plan.node
        ))?;
        out.line("dry run: nothing was changed")?;
        return Ok(ExitCode::from(DAMAGED));
    }
    Changes {
        node: plan.node,
        cut: plan.cut.as_ref(),
        discarded: &plan.discard,
        skipped: plan.skipped,
        headers_from_copy: &plan.headers_from_copy,
        next_lsn: plan.next_lsn,
        records: plan.records,
    }
    .print(out)?;
    out.line("dry run: nothing was changed")?;
    Ok(ExitCode::SUCCESS)
}

fn print_report(
    out: &mut Out,
    node: u32,
    r: &RecoveryReport,
    next_lsn: Lsn,
) -> Result<(), Failure> {
    Changes {
        node,
        cut: r.truncated.as_ref(),
        discarded: &r.discarded,
        skipped: r.skipped,
        headers_from_copy: &r.headers_from_copy,
        next_lsn,
        records: r.records,
    }
    .print(out)
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

/// `ringwal checkpoint`: open (no create), `Wal::checkpoint`, close; print
/// each segment removed and the bytes freed on disk. The library keeps up
/// to a few removed segments as spare files for the next rolls to reuse,
/// so the bytes freed can be fewer than the segments' size; both are
/// printed.
pub(crate) fn checkpoint(a: CheckpointArgs) -> CmdResult {
    append::refuse_regular_file(&a.dir)?;
    let cfg = Config::builder()
        .node(a.node)
        .create_if_missing(false)
        .build();
    // No directory: the open below says so, as "no log".
    let before_open = node_bytes(&a.dir, a.node).unwrap_or_default();
    let (wal, _) = append::open(&a.dir, cfg)?;
    let listed = verify::stat(&a.dir, a.node)?;
    let removed = wal.checkpoint(a.up_to)?;
    wal.close()?;
    let after = node_bytes(&a.dir, a.node)?;
    let mut out = Out::new();
    let gone = &listed.segments[..removed.min(listed.segments.len())];
    let mut segment_bytes = 0;
    for s in gone {
        segment_bytes += s.file_bytes;
        out.line(format!(
            "removed {} (LSN {}..={}, {} bytes)",
            s.path.display(),
            s.base_lsn,
            s.last_lsn,
            s.file_bytes
        ))?;
    }
    out.line(format!(
        "checkpoint: {removed} segment{} removed ({segment_bytes} bytes of segments), \
         {} bytes freed on disk",
        if removed == 1 { "" } else { "s" },
        before_open.saturating_sub(after)
    ))?;
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
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = v["payload_b64"]
        .as_str()
        .ok_or("no payload_b64 string")
        .and_then(|s| b64.decode(s).map_err(|_| "payload_b64 is not base64"))?;
    let stream = match &v["stream"] {
        serde_json::Value::Null => 0,
        s => s
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .ok_or("stream is not a number from 0 to 65535")?,
    };
    let batch = match &v["batch"] {
        serde_json::Value::Null => None,
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

/// `ringwal import`: read `dump --json` lines from stdin and append them
/// to a new or empty log (consecutive records with the same non-null
/// `batch` as one atomic batch), wait until all are durable, close, and
/// print the count. A log that already holds records is refused, so an
/// import never interleaves with other data; LSNs are the log's own (the
/// input's are kept when the input starts at 1 and is dense, and a
/// warning says so otherwise). A line that does not parse ends the import
/// with an error naming it; the records before it stay in the log.
pub(crate) fn import(a: ImportArgs, quiet: bool) -> CmdResult {
    let cfg = Config::builder().node(a.node).build();
    let (wal, _) = append::open(&a.dir, cfg)?;
    if wal.next_lsn() != 1 {
        let last = wal.next_lsn() - 1;
        wal.close()?;
        return Err(Failure::msg(format!(
            "{}: node {} already holds LSNs up to {last}; import needs a new or empty log",
            a.dir.display(),
            a.node
        )));
    }
    let progress = Progress::start(quiet, "importing");
    let mut pending: Vec<Imported> = Vec::new();
    let mut last: Option<Ticket> = None;
    let mut count = 0u64;
    let mut renumbered = false;
    let mut flush = |pending: &mut Vec<Imported>| -> Result<(), Failure> {
        if pending.is_empty() {
            return Ok(());
        }
        let t = if let [one] = &pending[..] {
            match one.marker {
                Some(snapshot) => wal.checkpoint_marker(snapshot)?,
                None => wal.append(one.stream, &one.payload)?,
            }
        } else {
            let records: Vec<(u16, &[u8])> =
                pending.iter().map(|r| (r.stream, &r.payload[..])).collect();
            wal.append_batch(&records)?
        };
        let first = t.lsn() + 1 - pending.len() as u64;
        let moved = pending
            .iter()
            .zip(first..)
            .find(|(r, lsn)| r.lsn.is_some_and(|l| l != *lsn));
        if let (Some((r, lsn)), false) = (moved, renumbered) {
            renumbered = true;
            eprintln!(
                "ringwal: import: LSNs renumbered: input LSN {} is LSN {lsn} here",
                r.lsn.unwrap_or(0)
            );
        }
        count += pending.len() as u64;
        progress.inc(pending.len() as u64);
        pending.clear();
        last = Some(t);
        Ok(())
    };
    let stdin = io::stdin();
    for (i, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| Failure::io("stdin", e))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec =
            parse_line(&line).map_err(|e| Failure::msg(format!("stdin line {}: {e}", i + 1)))?;
        // A marker is never part of a batch: it goes alone.
        let joins = rec.batch.is_some()
            && rec.marker.is_none()
            && pending.last().is_some_and(|p| p.batch == rec.batch);
        if !joins {
            flush(&mut pending)?;
        }
        pending.push(rec);
    }
    flush(&mut pending)?;
    drop(progress);
    let range = match &last {
        Some(t) => {
            t.wait(ringwal::Level::Durable)?;
            format!(" (LSN 1..={})", t.lsn())
        }
        None => String::new(),
    };
    wal.close()?;
    let mut out = Out::new();
    out.line(format!(
        "imported {count} record{}{range}",
        if count == 1 { "" } else { "s" }
    ))?;
    Ok(ExitCode::SUCCESS)
}
