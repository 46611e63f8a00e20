//! The read-only commands: `cat`, `dump`, `verify` and `stat`. None of
//! them takes the writer lock or writes to the log directory.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use base64::Engine as _;
use ringwal::verify::{self, RecordAt, VerifyReport};
use ringwal::{Error, Lsn, Record};

use super::{CatArgs, CmdResult, DumpArgs, Failure, StatArgs, VerifyArgs};

/// Exit status of `verify` when it finds damage.
const EXIT_DAMAGED: u8 = 1;

/// Longest payload prefix the text form of `dump` shows.
const PREVIEW: usize = 64;

/// Stream records to stdout through `print`, ending quietly if the reader
/// of stdout goes away (`ringwal cat | head`).
fn each_record(
    dir: &Path,
    node: u32,
    from: Lsn,
    print: impl FnMut(&mut dyn Write, &RecordAt) -> io::Result<()>,
) -> CmdResult {
    print_each(verify::records(dir, node, from)?, false, print)
}

/// Print `records` through `print` (see [`each_record`]); with
/// `flush_each`, every record reaches stdout before the next is awaited
/// (a follower may wait a long time for it).
fn print_each<T>(
    records: impl Iterator<Item = ringwal::Result<T>>,
    flush_each: bool,
    mut print: impl FnMut(&mut dyn Write, &T) -> io::Result<()>,
) -> CmdResult {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut failure = None;
    for rec in records {
        let printed = match rec {
            Ok(rec) => print(&mut out, &rec)
                .and_then(|()| if flush_each { out.flush() } else { Ok(()) })
                .map_err(|e| Failure::io("stdout", e)),
            Err(e) => Err(e.into()),
        };
        if let Err(f) = printed {
            failure = Some(f);
            break;
        }
    }
    // Show everything read before any damage, then report the damage.
    let flushed = out.flush().map_err(|e| Failure::io("stdout", e));
    match failure.map_or(flushed, Err) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(f) if f.is_broken_pipe() => Ok(ExitCode::SUCCESS),
        Err(f) => Err(f),
    }
}

/// `ringwal cat`: payloads, one per line, in LSN order.
pub(crate) fn cat(a: CatArgs) -> CmdResult {
    let print = |out: &mut dyn Write, stream: u16, payload: &[u8]| {
        if a.stream.is_some_and(|s| s != stream) {
            return Ok(());
        }
        out.write_all(payload)?;
        out.write_all(b"\n")
    };
    if a.follow {
        let every = Duration::from_millis(a.poll_ms);
        let records = verify::follow(&a.dir, a.node, a.from, every)?;
        return print_each(records, true, |out, rec: &Record| {
            print(out, rec.stream, &rec.payload)
        });
    }
    each_record(&a.dir, a.node, a.from, |out, rec| {
        print(out, rec.stream, &rec.payload)
    })
}

/// `ringwal dump`: one line per record, JSON or text.
pub(crate) fn dump(a: DumpArgs) -> CmdResult {
    let b64 = base64::engine::general_purpose::STANDARD;
    each_record(&a.dir, a.node, a.from, |out, rec| {
        if a.json {
            let obj = serde_json::json!({
                "lsn": rec.lsn,
                "stream": rec.stream,
                "kind": rec.kind.name(),
                "len": rec.len,
                "segment": rec.segment,
                "offset": rec.offset,
                "batch": rec.batch,
                "payload_b64": b64.encode(&rec.payload),
            });
            writeln!(out, "{obj}")
        } else {
            let shown = &rec.payload[..rec.payload.len().min(PREVIEW)];
            let more = rec.payload.len() - shown.len();
            write!(
                out,
                "lsn={} stream={} kind={} len={} at={}:{} payload=\"{}\"",
                rec.lsn,
                rec.stream,
                rec.kind.name(),
                rec.len,
                rec.segment,
                rec.offset,
                shown.escape_ascii()
            )?;
            if more > 0 {
                write!(out, "...(+{more} bytes)")?;
            }
            writeln!(out)
        }
    })
}

/// One problem as `FILE:OFFSET: reason`. A gap is reported at the
/// segment's header (offset 0), whose base LSN is the one out of line.
fn problem_line(e: &Error) -> String {
    match e {
        Error::Corrupt { .. } => e.to_string(),
        Error::Lost { file, durable, last } => format!(
            "{}:0: acknowledged records lost: LSNs up to {durable} were durable, but the log ends at {last}",
            file.display()
        ),
        Error::Gap {
            file,
            expected,
            found,
        } => format!(
            "{}:0: LSN gap: segment starts at LSN {found} where {expected} was expected",
            file.display()
        ),
        other => other.to_string(),
    }
}

/// `ringwal verify`: problems on stdout as `FILE:OFFSET: reason`, notes
/// (torn tail, incomplete files) on stdout, a summary per damaged node on
/// stderr. Status 1 if any node is damaged.
pub(crate) fn verify(a: VerifyArgs) -> CmdResult {
    let nodes = match a.node {
        Some(n) => vec![n],
        None => verify::nodes(&a.dir)?,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let w = |e| Failure::io("stdout", e);
    if nodes.is_empty() {
        writeln!(out, "{}: no segments found", a.dir.display()).map_err(w)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut damaged = 0;
    for node in nodes {
        let r = verify::verify(&a.dir, node)?;
        print_verify(&mut out, &r).map_err(w)?;
        if !r.is_consistent() {
            damaged += 1;
            out.flush().map_err(w)?;
            let n = r.problems.len();
            eprintln!(
                "ringwal: node {node}: {n} problem{} found; a strict open would fail",
                if n == 1 { "" } else { "s" }
            );
        }
    }
    if damaged > 0 {
        return Ok(ExitCode::from(EXIT_DAMAGED));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_verify(out: &mut impl Write, r: &VerifyReport) -> io::Result<()> {
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
    if r.is_consistent() {
        writeln!(
            out,
            "node {}: ok: {} segment{}, {}, {} spare{}",
            r.node,
            r.segments.len(),
            if r.segments.len() == 1 { "" } else { "s" },
            lsn_range(r.first_lsn(), r.last_lsn(), r.records()),
            r.spares.len(),
            if r.spares.len() == 1 { "" } else { "s" },
        )?;
    }
    Ok(())
}

fn lsn_range(first: Lsn, last: Lsn, records: u64) -> String {
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

/// `ringwal stat`: every node, its segments, LSN ranges and sizes.
pub(crate) fn stat(a: StatArgs) -> CmdResult {
    let nodes = verify::nodes(&a.dir)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let w = |e| Failure::io("stdout", e);
    if nodes.is_empty() {
        writeln!(out, "{}: no segments found", a.dir.display()).map_err(w)?;
        return Ok(ExitCode::SUCCESS);
    }
    for node in nodes {
        let s = verify::stat(&a.dir, node)?;
        let mut line = format!(
            "node {}: {} segment{}, {}, {} in segment files",
            s.node,
            s.segments.len(),
            if s.segments.len() == 1 { "" } else { "s" },
            lsn_range(s.first_lsn, s.last_lsn, s.records),
            human_bytes(s.file_bytes)
        );
        if s.spares > 0 {
            line += &format!(", {} spare", s.spares);
        }
        if s.incomplete > 0 {
            line += &format!(", {} incomplete", s.incomplete);
        }
        writeln!(out, "{line}").map_err(w)?;
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
            writeln!(out, "  {name}  {range}  {}", human_bytes(seg.file_bytes)).map_err(w)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
