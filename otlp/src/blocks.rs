//! Blocks: the files a flusher publishes, `OUT/<signal>/<first>-<watermark>.pb`.
//!
//! A block holds the bodies it covers, concatenated in LSN order. Each
//! body is one encoded `Export*ServiceRequest`, and protobuf parses a
//! concatenation of messages as their merge, whose repeated fields (the
//! resource lists) are the lists appended: so a block is itself one valid
//! request holding every item of its bodies. `first` is the block's first
//! LSN; `watermark` is [`Collector::watermark_for`] of its LSNs, so every
//! LSN of its signal below the highest watermark in the directory is in
//! some block. Names come only from [`name`] and are read only by
//! [`parse_name`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringwal::{Collector, Lsn, Watermarks};

use crate::signal::Signal;

/// The file name of a block whose first LSN is `first`.
pub fn name(first: Lsn, watermark: Lsn) -> String {
    format!("{first}-{watermark}.pb")
}

/// `(first, watermark)` of a block's file name; `None` for anything else
/// (the temporary files of an unfinished write among them).
pub fn parse_name(name: &str) -> Option<(Lsn, Lsn)> {
    let (first, watermark) = name.strip_suffix(".pb")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(first) || !digits(watermark) {
        return None;
    }
    Some((first.parse().ok()?, watermark.parse().ok()?))
}

/// The block directory of `signal` under `out`.
pub fn dir(out: &Path, signal: Signal) -> PathBuf {
    out.join(signal.name())
}

/// Make the block directories under `out` (durably), remove the
/// temporary files an interrupted write left in them, and read the
/// watermarks back from the block names.
///
/// Cost: a `mkdir` and a directory fsync per missing directory, one
/// `readdir` per signal, an unlink per leftover; blocking.
pub fn prepare(out: &Path) -> Result<Watermarks, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut marks = Watermarks::new();
    for signal in Signal::ALL {
        let dir = dir(out, signal);
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            ringwal::files::fsync_dir(out).map_err(|e| e.chain().to_string())?;
        }
        remove_leftovers(&dir)?;
        let found = Watermarks::from_dir(&dir, |n| Some((signal.stream(), parse_name(n)?.1)))
            .map_err(|e| e.chain().to_string())?;
        for (stream, w) in found.iter() {
            marks.observe(stream, w);
        }
    }
    Ok(marks)
}

/// Remove `.NAME.tmp` files: `ringwal::files::atomic_write` removes the
/// one of the name it writes, but a crash can leave one under a name
/// never written again (the watermark differs on the next attempt).
fn remove_leftovers(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// When a flusher seals what it holds.
#[derive(Clone, Copy, Debug)]
pub struct Sealing {
    /// Seal once the bodies held reach this many bytes.
    pub bytes: usize,
    /// Seal once the oldest body held is this old.
    pub age: Duration,
}

/// The bodies of one signal not yet in a block, in LSN order: what one
/// flusher holds. Every LSN here is pending in the collector until the
/// block holding it is published.
pub struct Shard {
    signal: Signal,
    dir: PathBuf,
    collector: Arc<Collector>,
    lsns: Vec<Lsn>,
    bodies: Vec<Bytes>,
    bytes: usize,
    /// When the oldest body held arrived.
    since: Option<Instant>,
}

impl Shard {
    /// An empty shard publishing `signal`'s blocks under `out`.
    pub fn new(signal: Signal, out: &Path, collector: Arc<Collector>) -> Shard {
        Shard {
            signal,
            dir: dir(out, signal),
            collector,
            lsns: Vec::new(),
            bodies: Vec::new(),
            bytes: 0,
            since: None,
        }
    }

    /// Hold `body`, appended (or replayed) under `lsn`. LSNs must come in
    /// ascending order, as the `append_then` hook and the replay hand
    /// them out.
    pub fn push(&mut self, lsn: Lsn, body: Bytes) {
        debug_assert!(self.lsns.last().is_none_or(|&l| l < lsn));
        self.since.get_or_insert_with(Instant::now);
        self.bytes += body.len();
        self.lsns.push(lsn);
        self.bodies.push(body);
    }

    /// Whether it holds enough bytes to seal.
    pub fn full(&self, sealing: Sealing) -> bool {
        self.bytes >= sealing.bytes
    }

    /// When its age calls for a seal; `None` when it holds nothing.
    pub fn due(&self, sealing: Sealing) -> Option<Instant> {
        self.since.map(|t| t + sealing.age)
    }

    /// Seal what it holds into one block, publish it, and only then
    /// retire its LSNs from the collector's pending set. Returns the
    /// block's path, or `None` if it held nothing.
    ///
    /// On error nothing is retired and everything stays held: the next
    /// seal tries again with more bodies, under a new name, and the
    /// temporary file is removed by that write or at the next start.
    ///
    /// Cost: a copy of the bodies into one buffer, then
    /// `ringwal::files::atomic_write` (a create, a write, an fdatasync, a
    /// rename, a directory fsync); blocking.
    pub fn seal(&mut self) -> ringwal::Result<Option<PathBuf>> {
        let Some(&first) = self.lsns.first() else {
            return Ok(None);
        };
        let stream = self.signal.stream();
        let watermark = self.collector.watermark_for(stream, &self.lsns);
        let mut block = Vec::with_capacity(self.bytes);
        for body in &self.bodies {
            block.extend_from_slice(body);
        }
        let path = self.dir.join(name(first, watermark));
        ringwal::files::atomic_write(&path, &block)?;
        self.collector.published(stream, &self.lsns);
        self.lsns.clear();
        self.bodies.clear();
        self.bytes = 0;
        self.since = None;
        Ok(Some(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_nothing_else_parses() {
        assert_eq!(parse_name(&name(17, 230)), Some((17, 230)));
        for other in [
            ".17-230.pb.tmp",
            "17-230.pb.tmp",
            "17-230",
            "-230.pb",
            "17-.pb",
            "17-+3.pb",
            "a-1.pb",
            "1-2-3.pb",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn prepare_reads_the_highest_watermark_per_signal_and_drops_leftovers() {
        let out = tempfile::tempdir().unwrap();
        assert_eq!(prepare(out.path()).unwrap(), Watermarks::new());
        let traces = dir(out.path(), Signal::Traces);
        let logs = dir(out.path(), Signal::Logs);
        for (d, n) in [
            (&traces, "1-5.pb"),
            (&traces, "5-9.pb"),
            (&logs, "2-4.pb"),
            (&logs, ".4-12.pb.tmp"),
        ] {
            std::fs::write(d.join(n), b"").unwrap();
        }
        let marks = prepare(out.path()).unwrap();
        assert_eq!(marks.get(Signal::Traces.stream()), 9);
        assert_eq!(marks.get(Signal::Metrics.stream()), 0);
        assert_eq!(marks.get(Signal::Logs.stream()), 4);
        assert!(!logs.join(".4-12.pb.tmp").exists());
    }
}
