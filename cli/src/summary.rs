//! The one JSON document of `stat --json` and `verify --json`: tables of
//! nodes, segments and problems, and their totals, ready for `jq`.
//!
//! ```text
//! {"command": "verify", "dir": "...",
//!  "nodes":    [{"node", "checked", "consistent", "first_lsn", "last_lsn",
//!                "records", "durable_lsn", "bytes", "segments", "spares",
//!                "incomplete", "torn_tail", "archived_lsn",
//!                "archive_held_bytes"}],
//!  "segments": [{"node", "file", "base_lsn", "last_lsn", "last_lsn_from",
//!                "bytes", "format_version", "created_unix_ms",
//!                "created_from", "key_id",
//!                "key_fits" (stat) | "payloads" (verify)}],
//!  "problems": [{"node", "file", "offset", "reason"}],
//!  "totals":   {"nodes", "segments", "records", "bytes", "problems"}}
//! ```
//!
//! `created_from` says where `created_unix_ms` comes from: `"header"` (the
//! segment's header records it) or `"mtime"` (it does not, so the file's
//! modification time stands in); `null` when neither is known.
//! `last_lsn_from` says where `last_lsn` comes from: `"walk"` (the
//! segment's frames were read to their end) or `"next-header"` (the next
//! segment's base LSN). A node's `checked` is `"frames"` for `verify`
//! (every frame and payload checked) and `"headers"` for `stat` (headers,
//! the manifest's promises and a walk of every segment's frames, but no
//! payload check), whose `consistent` is therefore `null` even when it
//! found no problem. `durable_lsn` is what the node's manifest says was made
//! durable (`null` without a manifest); `verify` leaves it `null`.
//! `archived_lsn` is the node's archive point (`null` without an archive):
//! every segment at or below it is archived; `archive_held_bytes` is what
//! the sealed segments above it take on disk, kept until archived.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use ringwal::verify::{LastLsnFrom, LogReport, Payloads};
use ringwal::{Error, Lsn};
use serde_json::{json, Value};

/// A problem as (file, offset, reason): where an operator looks, and why.
/// A gap is placed at the segment's header (offset 0), whose base LSN is
/// the one out of line.
pub(crate) fn problem_parts(e: &Error) -> (Option<PathBuf>, u64, String) {
    match e {
        Error::Corrupt {
            file,
            offset,
            reason,
        } => (Some(file.clone()), *offset, format!("corrupt: {reason}")),
        Error::Lost {
            file,
            durable,
            last,
        } => (
            Some(file.clone()),
            0,
            format!(
                "acknowledged records lost: LSNs up to {durable} were durable, but the log ends at {last}"
            ),
        ),
        Error::Gap {
            file,
            expected,
            found,
        } => (
            Some(file.clone()),
            0,
            format!("LSN gap: segment starts at LSN {found} where {expected} was expected"),
        ),
        other => (None, 0, other.to_string()),
    }
}

/// A problem as one line, `FILE:OFFSET: reason`.
pub(crate) fn problem_line(e: &Error) -> String {
    match problem_parts(e) {
        (Some(file), offset, reason) => format!("{}:{offset}: {reason}", file.display()),
        (None, _, reason) => reason,
    }
}

/// The document being built.
pub(crate) struct Summary {
    command: &'static str,
    dir: String,
    nodes: Vec<Value>,
    segments: Vec<Value>,
    problems: Vec<Value>,
    exposed: Vec<Value>,
    records: u64,
    bytes: u64,
}

/// One segment's facts as both commands know them.
struct Segment<'a> {
    node: u32,
    path: &'a Path,
    base_lsn: Lsn,
    last_lsn: Lsn,
    /// Whether `last_lsn` comes from a walk of the segment's frames.
    walked: bool,
    version: Option<u32>,
    created_unix_ms: Option<u64>,
    key_id: u32,
    key: KeyColumn,
}

/// What a segment row says about its key: `stat` knows whether the key
/// given fits, `verify` how far it checked the payloads.
enum KeyColumn {
    Fits(Option<bool>),
    Payloads(Payloads),
}

impl Summary {
    /// An empty document for `command` (`"stat"` or `"verify"`) on `dir`.
    pub fn new(command: &'static str, dir: &Path) -> Summary {
        Summary {
            command,
            dir: dir.display().to_string(),
            nodes: Vec::new(),
            segments: Vec::new(),
            problems: Vec::new(),
            exposed: Vec::new(),
            records: 0,
            bytes: 0,
        }
    }

    /// The log directory and files that others may read or write (see
    /// `inspect::exposed`): warnings, never problems.
    pub fn add_exposed(&mut self, exposed: &[(PathBuf, u32)]) {
        self.exposed.extend(exposed.iter().map(
            |(p, mode)| json!({"path": p.display().to_string(), "mode": format!("{mode:04o}")}),
        ));
    }

    /// Add one node's `stat`; `keyed`: a key was given (`--key-file`).
    pub fn add_stat(&mut self, s: &LogReport, keyed: bool) {
        let mut bytes = 0;
        for seg in &s.segments {
            bytes += self.add_segment(Segment {
                node: s.node,
                path: &seg.path,
                base_lsn: seg.base_lsn,
                last_lsn: seg.last_lsn,
                walked: seg.last_lsn_from == LastLsnFrom::Walk,
                version: Some(seg.version),
                created_unix_ms: seg.created_unix_ms,
                key_id: seg.key_id,
                key: KeyColumn::Fits(super::inspect::key_fits(seg, keyed)),
            });
        }
        self.add_problems(s.node, &s.problems);
        self.records += s.records;
        self.nodes.push(json!({
            "node": s.node,
            "checked": "headers",
            "consistent": null,
            "first_lsn": s.first_lsn,
            "last_lsn": s.last_lsn,
            "records": s.records,
            "durable_lsn": s.manifest.map(|m| m.durable_lsn),
            "bytes": bytes,
            "segments": s.segments.len(),
            "spares": s.spares.len(),
            "incomplete": s.incomplete.len(),
            "torn_tail": null,
            "archived_lsn": s.archived_lsn,
            "archive_held_bytes": s.archive_held_bytes(),
        }));
    }

    /// Add one node's `verify` report.
    pub fn add_verify(&mut self, r: &LogReport) {
        let mut bytes = 0;
        for seg in &r.segments {
            bytes += self.add_segment(Segment {
                node: r.node,
                path: &seg.path,
                base_lsn: seg.base_lsn,
                last_lsn: seg.last_lsn,
                walked: true,
                version: Some(seg.version),
                created_unix_ms: seg.created_unix_ms,
                key_id: seg.key_id,
                key: KeyColumn::Payloads(seg.payloads),
            });
        }
        self.add_problems(r.node, &r.problems);
        self.records += r.records;
        let torn = r.torn_tail.as_ref().map(|t| {
            json!({
                "file": t.file.display().to_string(),
                "offset": t.offset,
                "reason": t.reason,
                "records_behind": t.records_behind,
            })
        });
        self.nodes.push(json!({
            "node": r.node,
            "checked": "frames",
            "consistent": r.consistent(),
            "first_lsn": r.first_lsn,
            "last_lsn": r.last_lsn,
            "records": r.records,
            "durable_lsn": null,
            "bytes": bytes,
            "segments": r.segments.len(),
            "spares": r.spares.len(),
            "incomplete": r.incomplete.len(),
            "torn_tail": torn,
            "archived_lsn": r.archived_lsn,
            "archive_held_bytes": r.archive_held_bytes(),
        }));
    }

    /// Add a node's problems, as (file, offset, reason) rows.
    fn add_problems(&mut self, node: u32, problems: &[Error]) {
        for p in problems {
            let (file, offset, reason) = problem_parts(p);
            self.problems.push(json!({
                "node": node,
                "file": file.map(|f| f.display().to_string()),
                "offset": offset,
                "reason": reason,
            }));
        }
    }

    /// Add a segment row; returns its size on disk.
    fn add_segment(&mut self, s: Segment<'_>) -> u64 {
        let meta = std::fs::metadata(s.path).ok();
        let bytes = meta.as_ref().map_or(0, |m| m.len());
        let mtime_ms = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
        let (created, from) = match (s.created_unix_ms, mtime_ms) {
            (Some(ms), _) => (Some(ms), Some("header")),
            (None, Some(ms)) => (Some(ms), Some("mtime")),
            (None, None) => (None, None),
        };
        self.bytes += bytes;
        self.segments.push(json!({
            "node": s.node,
            "file": s.path.display().to_string(),
            "base_lsn": s.base_lsn,
            "last_lsn": s.last_lsn,
            "last_lsn_from": if s.walked { "walk" } else { "next-header" },
            "bytes": bytes,
            "format_version": s.version,
            "created_unix_ms": created,
            "created_from": from,
            "key_id": s.key_id,
        }));
        let row = self.segments.last_mut().expect("just pushed");
        let (field, value) = match s.key {
            KeyColumn::Fits(fits) => ("key_fits", json!(fits)),
            KeyColumn::Payloads(p) => (
                "payloads",
                json!(match p {
                    Payloads::Plaintext => "checked".to_string(),
                    Payloads::KeyFits => "authenticated".to_string(),
                    Payloads::Sealed(why) => format!("encrypted, not decrypted: {why}"),
                    _ => "unknown".to_string(),
                }),
            ),
        };
        row[field] = value;
        bytes
    }

    /// The finished document.
    pub fn finish(self) -> Value {
        json!({
            "command": self.command,
            "dir": self.dir,
            "totals": {
                "nodes": self.nodes.len(),
                "segments": self.segments.len(),
                "records": self.records,
                "bytes": self.bytes,
                "problems": self.problems.len(),
            },
            "nodes": self.nodes,
            "segments": self.segments,
            "problems": self.problems,
            "exposed": self.exposed,
        })
    }
}
