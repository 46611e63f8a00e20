//! The read-only commands: `cat`, `dump`, `verify` and `stat`. None of
//! them takes the writer lock or writes to the log directory.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use ringwal::verify::{self, LastLsnFrom, LogReport, Payloads, RecordAt};
use ringwal::{Config, KeyProblem, Lsn, Record};

use super::exit::DAMAGED;
use super::progress::Progress;
use super::summary::{problem_line, Summary};
use super::{Bounds, CatArgs, CmdResult, DumpArgs, Failure, StatArgs, VerifyArgs};

/// Longest payload prefix the text form of `dump` shows.
const PREVIEW: usize = 64;

/// A record as the bounds see it: its LSN, stream and write time.
trait Keyed {
    fn lsn(&self) -> Lsn;
    fn stream(&self) -> u16;
    fn written_at(&self) -> Option<SystemTime>;
}

impl Keyed for RecordAt {
    fn lsn(&self) -> Lsn {
        self.lsn
    }
    fn stream(&self) -> u16 {
        self.stream
    }
    fn written_at(&self) -> Option<SystemTime> {
        self.written_at
    }
}

impl Keyed for Record {
    fn lsn(&self) -> Lsn {
        self.lsn
    }
    fn stream(&self) -> u16 {
        self.stream
    }
    fn written_at(&self) -> Option<SystemTime> {
        self.written_at
    }
}

/// A write time as `cat --json` and `dump` print it: RFC 3339 in UTC, to
/// the nanosecond.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_nanos(t).to_string()
}

/// Which records a reading command prints: `--stream`, `--to`, `--limit`,
/// and `cat`'s `--since` and `--until`.
#[derive(Clone, Copy)]
struct Select {
    stream: Option<u16>,
    to: Lsn,
    limit: u64,
    /// Write times from `.0` to `.1`, both included; `None`: any record,
    /// with a write time or not.
    written: Option<(SystemTime, SystemTime)>,
}

impl Select {
    /// The selection of `--stream`, `--to` and `--limit` for a read from
    /// `from`; a `--to` below `from` selects nothing and is refused as
    /// the mistake it is (status 2).
    fn new(from: Lsn, stream: Option<u16>, b: &Bounds) -> Result<Select, Failure> {
        if let Some(to) = b.to.filter(|&to| to < from) {
            return Err(Failure::usage(format!(
                "--to {to} is below --from {from}: there is nothing to print"
            )));
        }
        Ok(Select {
            stream,
            to: b.to.unwrap_or(Lsn::MAX),
            limit: b.limit.unwrap_or(u64::MAX),
            written: None,
        })
    }

    /// Only records written between `since` and `until` (either open),
    /// which leaves out every record without a write time; a `since`
    /// after `until` selects nothing and is refused (status 2).
    fn written(
        self,
        since: Option<SystemTime>,
        until: Option<SystemTime>,
    ) -> Result<Select, Failure> {
        if since.is_none() && until.is_none() {
            return Ok(self);
        }
        let (since, until) = (
            since.unwrap_or(SystemTime::UNIX_EPOCH),
            until.unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::MAX)),
        );
        if since > until {
            return Err(Failure::usage(format!(
                "--since {} is after --until {}: there is nothing to print",
                rfc3339(since),
                rfc3339(until)
            )));
        }
        Ok(Select {
            written: Some((since, until)),
            ..self
        })
    }

    /// Whether `rec` is of the stream and written in the time selected;
    /// counts in `untimed` a record left out only for having no time.
    fn wants(&self, rec: &impl Keyed, untimed: &mut u64) -> bool {
        if self.stream.is_some_and(|s| s != rec.stream()) {
            return false;
        }
        let Some((since, until)) = self.written else {
            return true;
        };
        match rec.written_at() {
            Some(t) => since <= t && t <= until,
            None => {
                *untimed += 1;
                false
            }
        }
    }
}

/// Stream records to stdout through `print`, ending quietly if the reader
/// of stdout goes away (`ringwal cat | head`).
fn each_record(
    dir: &Path,
    cfg: &Config,
    from: Lsn,
    select: Select,
    print: impl FnMut(&mut dyn Write, &RecordAt) -> io::Result<()>,
) -> CmdResult {
    print_each(verify::records(dir, cfg, from)?, false, select, print)
}

/// Print the `select`ed `records` through `print` (see [`each_record`]);
/// with `flush_each`, every record reaches stdout before the next is
/// awaited (a follower may wait a long time for it). Ends after the last
/// record `select` allows, without waiting for the one after it.
fn print_each<T: Keyed>(
    records: impl Iterator<Item = ringwal::Result<T>>,
    flush_each: bool,
    select: Select,
    mut print: impl FnMut(&mut dyn Write, &T) -> io::Result<()>,
) -> CmdResult {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut failure = None;
    let mut printed_n = 0;
    let mut untimed = 0;
    // What `cat` and `dump` promise: records in LSN order, each once.
    let mut last_lsn = 0;
    for rec in records {
        if printed_n >= select.limit {
            break;
        }
        if let Ok(rec) = &rec {
            assert!(
                rec.lsn() > last_lsn,
                "the reader gave LSN {} after LSN {last_lsn}",
                rec.lsn()
            );
            last_lsn = rec.lsn();
        }
        let printed = match rec {
            Ok(rec) if rec.lsn() > select.to => break,
            Ok(rec) if !select.wants(&rec, &mut untimed) => {
                if rec.lsn() == select.to {
                    break;
                }
                continue;
            }
            Ok(rec) => {
                printed_n += 1;
                let done = rec.lsn() >= select.to || printed_n >= select.limit;
                let r = print(&mut out, &rec)
                    .and_then(|()| if flush_each { out.flush() } else { Ok(()) })
                    .map_err(|e| Failure::io("stdout", e));
                if r.is_ok() && done {
                    break;
                }
                r
            }
            Err(e) => Err(e.into()),
        };
        if let Err(f) = printed {
            failure = Some(f);
            break;
        }
    }
    // Show everything read before any damage, then report the damage.
    let flushed = out.flush().map_err(|e| Failure::io("stdout", e));
    if untimed > 0 {
        let s = if untimed == 1 { "" } else { "s" };
        eprintln!(
            "ringwal: {untimed} record{s} left out: no write time (written before \
             format version 3), so no time filter matches"
        );
    }
    match failure.map_or(flushed, Err) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(f) if f.is_broken_pipe() => Ok(ExitCode::SUCCESS),
        Err(f) => Err(f),
    }
}

/// `ringwal cat`: payloads, one per line, in LSN order; with `--json`,
/// one object per record.
pub(crate) fn cat(a: CatArgs) -> CmdResult {
    let select = Select::new(a.from, a.stream, &a.bounds)?.written(a.since, a.until)?;
    let json = a.json;
    let print = move |out: &mut dyn Write,
                      lsn: Lsn,
                      stream: u16,
                      written_at: Option<SystemTime>,
                      payload: &[u8]| {
        if !json {
            out.write_all(payload)?;
            return out.write_all(b"\n");
        }
        let written_at = written_at.map(rfc3339);
        let obj = match std::str::from_utf8(payload) {
            Ok(text) => serde_json::json!({
                "lsn": lsn,
                "stream": stream,
                "written_at": written_at,
                "payload": text,
            }),
            Err(_) => serde_json::json!({
                "lsn": lsn,
                "stream": stream,
                "written_at": written_at,
                "payload_b64": base64::engine::general_purpose::STANDARD.encode(payload),
            }),
        };
        writeln!(out, "{obj}")
    };
    let cfg = a.key.config(a.node)?.build();
    if a.follow {
        let every = Duration::from_millis(a.poll_ms);
        let records = verify::follow(&a.dir, &cfg, a.from, every)?;
        return print_each(records, true, select, |out, rec: &Record| {
            print(out, rec.lsn, rec.stream, rec.written_at, &rec.payload)
        });
    }
    each_record(&a.dir, &cfg, a.from, select, |out, rec| {
        print(out, rec.lsn, rec.stream, rec.written_at, &rec.payload)
    })
}

/// `ringwal dump`: one line per record, JSON or text.
pub(crate) fn dump(a: DumpArgs) -> CmdResult {
    let b64 = base64::engine::general_purpose::STANDARD;
    let select = Select::new(a.from, a.stream, &a.bounds)?;
    let cfg = a.key.config(a.node)?.build();
    each_record(&a.dir, &cfg, a.from, select, |out, rec| {
        if a.json {
            let obj = serde_json::json!({
                "lsn": rec.lsn,
                "stream": rec.stream,
                "kind": rec.kind.name(),
                "len": rec.len,
                "segment": rec.segment,
                "offset": rec.offset,
                "batch": rec.batch,
                "written_at": rec.written_at.map(rfc3339),
                "payload_b64": b64.encode(&rec.payload),
            });
            writeln!(out, "{obj}")
        } else {
            let shown = &rec.payload[..rec.payload.len().min(PREVIEW)];
            let more = rec.payload.len() - shown.len();
            let written = rec.written_at.map_or_else(|| "-".to_owned(), rfc3339);
            write!(
                out,
                "lsn={} stream={} kind={} len={} at={}:{} written={} payload=\"{}\"",
                rec.lsn,
                rec.stream,
                rec.kind.name(),
                rec.len,
                rec.segment,
                rec.offset,
                written,
                shown.escape_ascii()
            )?;
            if more > 0 {
                write!(out, "...(+{more} bytes)")?;
            }
            writeln!(out)
        }
    })
}

/// The nodes a command looks at: `node`, or every node with a segment in
/// `dir`. Finding none is "no log here" (status 2), never a silent pass: a
/// check of nothing must not look like a check that found nothing wrong.
fn nodes_to_check(dir: &Path, node: Option<u32>) -> Result<Vec<u32>, Failure> {
    let found = match verify::nodes(dir) {
        Ok(found) => found,
        Err(ringwal::Error::Io { source, .. })
            if matches!(
                source.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    match node {
        None if found.is_empty() => Err(Failure::no_log(dir, None)),
        None => Ok(found),
        Some(n) if found.contains(&n) => Ok(vec![n]),
        Some(n) => Err(Failure::no_log(dir, Some(n))),
    }
}

/// The status of a check (`verify`, `stat`) that found `problems` in
/// each node it read: one for a log with damage, whichever command found
/// it, so that a script gets one answer for one log; the `key` status
/// when the only problem is a key given that is not the log's.
fn checked_status<'a>(problems: impl Iterator<Item = &'a [ringwal::Error]>) -> ExitCode {
    let mut status = None;
    for p in problems.flatten() {
        // Damage outranks a key that does not fit: it is what a strict
        // open would say first whichever key is given.
        if !matches!(p, ringwal::Error::Key { .. }) {
            return ExitCode::from(DAMAGED);
        }
        status = Some(crate::exit::Kind::Key.status());
    }
    status.map_or(ExitCode::SUCCESS, ExitCode::from)
}

/// Write `doc` to stdout as one JSON document.
fn print_json(doc: &serde_json::Value) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    writeln!(out, "{doc:#}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::io("stdout", e))
}

/// `ringwal verify`: problems on stdout as `FILE:OFFSET: reason`, notes
/// (torn tail, incomplete files) on stdout, a summary per damaged node on
/// stderr; or, with `--json`, one document (see `summary.rs`). Status 1
/// if any node is damaged, 2 if there is nothing to check.
pub(crate) fn verify(a: VerifyArgs, quiet: bool) -> CmdResult {
    let nodes = nodes_to_check(&a.dir, a.node)?;
    let exposed = exposed(&a.dir);
    let progress = Progress::start(quiet, "verifying");
    let mut reports = Vec::with_capacity(nodes.len());
    for node in nodes {
        progress.message(format!("verifying node {node}"));
        reports.push(verify::verify(&a.dir, &a.key.config(node)?.build())?);
        progress.inc(1);
    }
    drop(progress);
    let status = checked_status(reports.iter().map(|r| r.problems.as_slice()));
    if a.json {
        let mut doc = Summary::new("verify", &a.dir);
        for r in &reports {
            doc.add_verify(r);
        }
        doc.add_exposed(&exposed);
        print_json(&doc.finish())?;
        return Ok(status);
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let w = |e| Failure::io("stdout", e);
    for r in reports {
        let node = r.node;
        print_verify(&mut out, &r).map_err(w)?;
        if r.consistent() != Some(true) {
            out.flush().map_err(w)?;
            let n = r.problems.len();
            let only_keys = r
                .problems
                .iter()
                .all(|p| matches!(p, ringwal::Error::Key { .. }));
            let next = if only_keys {
                "give the log's own key".to_string()
            } else {
                crate::exit::recover_hint(&a.dir, node)
            };
            eprintln!(
                "ringwal: node {node}: {n} problem{} found; a strict open would fail; {next}",
                if n == 1 { "" } else { "s" }
            );
        }
    }
    out.flush().map_err(w)?;
    warn_exposed(&exposed);
    Ok(status)
}

/// The log directory `dir` and the log's files in it that others (not
/// the owner, not the group) may read or write, with their modes: a log
/// holds whatever its users append. Files that are no part of a log (a
/// README beside it) are not the log's to warn about. What cannot be read
/// is left out (the commands report what matters of it). Cost: one
/// `readdir` and a `stat` per file of the log.
fn exposed(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    };
    let entries = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(ringwal::format::is_log_file_name)
        })
        .map(|e| e.path());
    std::iter::once(dir.to_path_buf())
        .chain(entries)
        .filter_map(|p| mode(&p).filter(|m| m & 0o006 != 0).map(|m| (p, m)))
        .collect()
}

/// One warning line per exposed path on stderr; the status is unchanged.
fn warn_exposed(exposed: &[(PathBuf, u32)]) {
    for (path, mode) in exposed {
        eprintln!(
            "ringwal: warning: {} has mode {mode:04o}: other users may read or change the log",
            path.display()
        );
    }
}

fn print_verify(out: &mut impl Write, r: &LogReport) -> io::Result<()> {
    for p in &r.problems {
        writeln!(out, "{}", problem_line(p))?;
    }
    if let Some(t) = &r.torn_tail {
        writeln!(
            out,
            "note: {}:{}: torn tail ({}); recovery will cut it{}",
            t.file.display(),
            t.offset,
            t.reason,
            match t.records_behind {
                0 => String::new(),
                1 => ", and the 1 valid-looking record behind it, which no later write vouches for"
                    .to_string(),
                n => format!(
                    ", and the {n} valid-looking records behind it, which no later write vouches for"
                ),
            }
        )?;
    }
    for (problem, why) in [
        (KeyProblem::Missing, "no key was given (--key-file)"),
        (KeyProblem::Wrong, "the key given is not theirs"),
    ] {
        let sealed: Vec<u32> = r
            .segments
            .iter()
            .filter(|s| s.payloads == Payloads::Sealed(problem))
            .map(|s| s.key_id)
            .collect();
        if let Some(&id) = sealed.first() {
            writeln!(
                out,
                "note: node {}: the payloads of {} segment{} are encrypted (key id {id}{}) and were not decrypted: {why}; framing, LSNs and checksums were checked",
                r.node,
                sealed.len(),
                if sealed.len() == 1 { "" } else { "s" },
                if sealed.iter().any(|&k| k != id) { " and others" } else { "" },
            )?;
        }
    }
    let authenticated = r
        .segments
        .iter()
        .filter(|s| s.payloads == Payloads::KeyFits)
        .count();
    if authenticated > 0 {
        writeln!(
            out,
            "note: node {}: encrypted payloads of {authenticated} segment{} authenticated with the key given",
            r.node,
            if authenticated == 1 { "" } else { "s" },
        )?;
    }
    for f in &r.headers_from_copy {
        writeln!(
            out,
            "note: {}:0: header block damaged; read from its copy",
            f.display()
        )?;
    }
    for f in &r.incomplete {
        writeln!(
            out,
            "note: {}: incomplete segment (header never written); recovery will delete it",
            f.display()
        )?;
    }
    if r.consistent() == Some(true) {
        writeln!(
            out,
            "node {}: ok: {} segment{}, {}, {} spare{}",
            r.node,
            r.segments.len(),
            if r.segments.len() == 1 { "" } else { "s" },
            lsn_range(r.first_lsn, r.last_lsn, r.records),
            r.spares.len(),
            if r.spares.len() == 1 { "" } else { "s" },
        )?;
    }
    Ok(())
}

fn lsn_range(first: Lsn, last: Lsn, records: u64) -> String {
    // LSNs are dense but for given-up ones: never more records than LSNs.
    assert!(
        records == 0 || (first <= last && records <= last - first + 1),
        "{records} records in LSN {first}..={last}"
    );
    if records == 0 {
        "no records".into()
    } else {
        format!("LSN {first}..={last} ({records} records)")
    }
}

/// Bytes as a short human-readable size (binary units).
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `ringwal stat`: every node (or `--node`), its segments, LSN ranges
/// and sizes from the headers and a walk of each newest segment; or, with
/// `--json`, one document (see `summary.rs`). What the headers and the
/// manifest show wrong (a file under a segment name that is no segment of
/// the log, a sealed segment cut short, records the manifest promised
/// that are gone) is printed as
/// `verify` prints problems, and is status 1; older segments' frames are
/// not read, and the output says so. Status 2 if there is no segment to
/// describe.
pub(crate) fn stat(a: StatArgs) -> CmdResult {
    let nodes = nodes_to_check(&a.dir, a.node)?;
    let exposed = exposed(&a.dir);
    let stats = nodes
        .into_iter()
        .map(|node| Ok(verify::stat(&a.dir, &a.key.config(node)?.build())?))
        .collect::<Result<Vec<_>, Failure>>()?;
    let keyed = a.key.key_file.is_some();
    let status = checked_status(stats.iter().map(|s| s.problems.as_slice()));
    if a.json {
        let mut doc = Summary::new("stat", &a.dir);
        for s in &stats {
            doc.add_stat(s, keyed);
        }
        doc.add_exposed(&exposed);
        print_json(&doc.finish())?;
        return Ok(status);
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let w = |e| Failure::io("stdout", e);
    for s in &stats {
        print_stat(&mut out, s, keyed).map_err(w)?;
    }
    writeln!(
        out,
        "note: LSN ranges are from the segment headers (a segment ends where the next \
         begins) and a walk of the frames; payloads were not checked \
         (ringwal verify checks every payload)"
    )
    .map_err(w)?;
    out.flush().map_err(w)?;
    for s in &stats {
        let n = s.problems.len();
        if n > 0 {
            eprintln!(
                "ringwal: node {}: {n} problem{} found in the headers and the manifest",
                s.node,
                if n == 1 { "" } else { "s" }
            );
        }
    }
    warn_exposed(&exposed);
    Ok(status)
}

/// `s` as `stat` prints it; `keyed`: a key was given (`--key-file`), so
/// each encrypted segment's row says whether it fits.
fn print_stat(out: &mut impl Write, s: &LogReport, keyed: bool) -> io::Result<()> {
    let mut line = format!(
        "node {}: {} segment{}, {}, {} in segment files",
        s.node,
        s.segments.len(),
        if s.segments.len() == 1 { "" } else { "s" },
        lsn_range(s.first_lsn, s.last_lsn, s.records),
        human_bytes(s.file_bytes)
    );
    if !s.spares.is_empty() {
        line += &format!(", {} spare", s.spares.len());
    }
    if !s.incomplete.is_empty() {
        line += &format!(", {} incomplete", s.incomplete.len());
    }
    writeln!(out, "{line}")?;
    for seg in &s.segments {
        let name = seg
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let range = if seg.last_lsn >= seg.base_lsn {
            format!("LSN {}..={}", seg.base_lsn, seg.last_lsn)
        } else {
            format!("LSN {}.. (empty)", seg.base_lsn)
        };
        let walked = match seg.last_lsn_from {
            LastLsnFrom::Walk => " (walked)",
            _ => "",
        };
        let key = match (seg.key_id, key_fits(seg, keyed)) {
            (0, _) => String::new(),
            (id, None) => format!("  encrypted (key id {id})"),
            (id, Some(true)) => format!("  encrypted (key id {id}; the key given fits)"),
            (id, Some(false)) => {
                format!("  encrypted (key id {id}; the key given is not its key)")
            }
        };
        let short = if seg.file_bytes < seg.segment_bytes {
            format!(
                "  shorter than the {} its header declares",
                human_bytes(seg.segment_bytes)
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {name}  {range}{walked}  {}{key}{short}",
            human_bytes(seg.file_bytes)
        )?;
    }
    if let Some(m) = &s.manifest {
        writeln!(
            out,
            "  manifest: durable up to LSN {}, oldest LSN kept {}",
            m.durable_lsn, m.oldest_lsn
        )?;
    }
    if let Some(a) = s.archived_lsn {
        writeln!(
            out,
            "  archive: segments up to LSN {a} archived; {} of sealed segments kept until archived",
            human_bytes(s.archive_held_bytes())
        )?;
    }
    for p in &s.problems {
        writeln!(out, "{}", problem_line(p))?;
    }
    Ok(())
}

/// Whether the key given fits an encrypted segment, by its header's key
/// check: `None` for a plaintext segment, or when no key was given
/// (`keyed` false).
pub(crate) fn key_fits(seg: &ringwal::verify::SegmentReport, keyed: bool) -> Option<bool> {
    (seg.key_id != 0 && keyed).then_some(seg.payloads == Payloads::KeyFits)
}
