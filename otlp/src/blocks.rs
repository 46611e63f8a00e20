//! Blocks: what a flusher publishes, `<signal>/<first>-<watermark>.pb`
//! under `--out`, a directory or an object store's prefix.
//!
//! A block holds the bodies it covers, concatenated in LSN order. Each
//! body is one encoded `Export*ServiceRequest`, and protobuf parses a
//! concatenation of messages as their merge, whose repeated fields (the
//! resource lists) are the lists appended: so a block is itself one valid
//! request holding every item of its bodies. `first` is the block's first
//! LSN; `watermark` is [`Collector::watermark_for`] of its LSNs, so every
//! LSN of its signal below the highest watermark under `--out` is in
//! some block. Names come only from [`name`] and are read only by
//! [`parse_name`].
//!
//! The two kinds of place are one [`Place`]: the start's read-back
//! ([`prepare`]) and the seal ([`Shard::seal`]) are written once, over
//! it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringwal::archive::{Store, StoreOptions};
use ringwal::{Collector, Lsn, Watermarks};

use crate::signal::Signal;

/// The file or object name of a block whose first LSN is `first`.
pub fn name(first: Lsn, watermark: Lsn) -> String {
    format!("{first}-{watermark}.pb")
}

/// `(first, watermark)` of a block's name; `None` for anything else
/// (the temporary files of an unfinished write among them).
pub fn parse_name(name: &str) -> Option<(Lsn, Lsn)> {
    let (first, watermark) = name.strip_suffix(".pb")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(first) || !digits(watermark) {
        return None;
    }
    Some((first.parse().ok()?, watermark.parse().ok()?))
}

/// Where blocks go, as `--out` says it: a directory, or the URL of an
/// object store (`file:///dir`, `s3://bucket/prefix`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// `DIR/<signal>/<name>`, each file written and synced before its
    /// rename.
    Dir(PathBuf),
    /// `<signal>/<name>` under the URL's prefix, each one PUT.
    Url {
        url: String,
        /// S3 settings the flags gave; the rest come from the
        /// environment.
        s3: StoreOptions,
    },
}

impl Out {
    /// `--out` read as a URL when it starts with a scheme (`name://`),
    /// else as a path. The scheme is checked when the place is opened,
    /// so that an unknown one is an error rather than a directory.
    pub fn parse(arg: &Path) -> Out {
        match arg.to_str() {
            Some(s) if has_scheme(s) => Out::Url {
                url: s.to_string(),
                s3: StoreOptions::default(),
            },
            _ => Out::Dir(arg.to_path_buf()),
        }
    }

    /// The place itself. Opening a directory does nothing yet (see
    /// [`Place::ready`]); opening a URL checks its shape and, for S3,
    /// sends nothing yet.
    ///
    /// Cost: for a URL, a runtime of the place's own (no thread).
    /// Blocking: call it from a thread that may block.
    pub fn open(&self) -> Result<Arc<dyn Place>, String> {
        match self {
            Out::Dir(dir) => Ok(Arc::new(Dir(dir.clone()))),
            Out::Url { url, s3 } => {
                let store = Store::open(url, s3).map_err(|e| format!("--out: {}", e.chain()))?;
                Ok(Arc::new(Objects(store)))
            }
        }
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Out::Dir(dir) => write!(f, "{}", dir.display()),
            Out::Url { url, .. } => f.write_str(url),
        }
    }
}

/// `scheme://...`, the scheme as RFC 3986 spells one.
fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once("://") else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// A place blocks are published to. Every call blocks (file I/O with
/// its syncs, or requests to a store): call them from a thread that may
/// block, never from inside an async task.
pub trait Place: Send + Sync {
    /// Make the place ready for `signal`'s blocks (removing what an
    /// interrupted write left, where one can leave something) and return
    /// the names there, blocks or not.
    fn ready(&self, signal: Signal) -> Result<Vec<String>, String>;

    /// Publish `block` as `signal`'s `name`: whole or not at all, and
    /// durable (synced, or acknowledged by the store) when it returns
    /// `Ok`. A block of that name is replaced.
    fn put(&self, signal: Signal, name: &str, block: Vec<u8>) -> ringwal::Result<()>;

    /// `signal`'s `name` as a path or URL, for messages.
    fn locate(&self, signal: Signal, name: &str) -> String;
}

/// Blocks as files: `DIR/<signal>/<name>`.
struct Dir(PathBuf);

impl Dir {
    fn of(&self, signal: Signal) -> PathBuf {
        self.0.join(signal.name())
    }
}

impl Place for Dir {
    /// Cost: a `mkdir` and a directory fsync if the signal's directory is
    /// missing, a `readdir`, an unlink per leftover.
    fn ready(&self, signal: Signal) -> Result<Vec<String>, String> {
        let out = &self.0;
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let dir = self.of(signal);
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            ringwal::files::fsync_dir(out).map_err(|e| e.chain().to_string())?;
        }
        remove_leftovers(&dir)?;
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        entries
            .map(|entry| {
                let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
                Ok(entry.file_name().to_string_lossy().into_owned())
            })
            .collect()
    }

    /// Cost: `ringwal::files::atomic_write` (a create, a write, an
    /// fdatasync, a rename, a directory fsync).
    fn put(&self, signal: Signal, name: &str, block: Vec<u8>) -> ringwal::Result<()> {
        ringwal::files::atomic_write(&self.of(signal).join(name), &block)
    }

    fn locate(&self, signal: Signal, name: &str) -> String {
        self.of(signal).join(name).display().to_string()
    }
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

/// Blocks as objects: `<signal>/<name>` under the store's prefix. A PUT
/// is whole or nothing, so an interrupted one leaves nothing a listing
/// shows, and there is nothing to make ready: `ready` only lists, which
/// also proves at the start that the bucket is there and the key may
/// read it.
struct Objects(Store);

impl Objects {
    fn rel(signal: Signal, name: &str) -> String {
        format!("{}/{name}", signal.name())
    }
}

impl Place for Objects {
    /// Cost: one LIST request per thousand names.
    fn ready(&self, signal: Signal) -> Result<Vec<String>, String> {
        self.0
            .list(signal.name())
            .map_err(|e| format!("--out: {}", e.chain()))
    }

    /// Cost: one PUT carrying the block.
    fn put(&self, signal: Signal, name: &str, block: Vec<u8>) -> ringwal::Result<()> {
        self.0.put(&Objects::rel(signal, name), block)
    }

    fn locate(&self, signal: Signal, name: &str) -> String {
        self.0.url_of(&Objects::rel(signal, name))
    }
}

/// Make `place` ready for every signal and read the watermarks back from
/// the block names there. Blocking, at the cost of [`Place::ready`] per
/// signal.
pub fn prepare(place: &dyn Place) -> Result<Watermarks, String> {
    let mut marks = Watermarks::new();
    for signal in Signal::ALL {
        for name in place.ready(signal)? {
            if let Some((_, watermark)) = parse_name(&name) {
                marks.observe(signal.stream(), watermark);
            }
        }
    }
    Ok(marks)
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
    place: Arc<dyn Place>,
    collector: Arc<Collector>,
    lsns: Vec<Lsn>,
    bodies: Vec<Bytes>,
    bytes: usize,
    /// When the oldest body held arrived.
    since: Option<Instant>,
}

impl Shard {
    /// An empty shard publishing `signal`'s blocks to `place`.
    pub fn new(signal: Signal, place: Arc<dyn Place>, collector: Arc<Collector>) -> Shard {
        Shard {
            signal,
            place,
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
    /// retire its LSNs from the collector's pending set. Returns where
    /// the block went (a path or URL), or `None` if it held nothing.
    ///
    /// On error nothing is retired and everything stays held: the next
    /// seal tries again with more bodies, under a new name, and a
    /// directory's temporary file is removed by that write or at the
    /// next start.
    ///
    /// Cost: a copy of the bodies into one buffer, then [`Place::put`];
    /// blocking.
    pub fn seal(&mut self) -> ringwal::Result<Option<String>> {
        let Some(&first) = self.lsns.first() else {
            return Ok(None);
        };
        let stream = self.signal.stream();
        let watermark = self.collector.watermark_for(stream, &self.lsns);
        let mut block = Vec::with_capacity(self.bytes);
        for body in &self.bodies {
            block.extend_from_slice(body);
        }
        let block_name = name(first, watermark);
        self.place.put(self.signal, &block_name, block)?;
        self.collector.published(stream, &self.lsns);
        self.lsns.clear();
        self.bodies.clear();
        self.bytes = 0;
        self.since = None;
        Ok(Some(self.place.locate(self.signal, &block_name)))
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

    /// Both places, over one temporary directory each: a directory and
    /// a `file://` store.
    fn places() -> Vec<(tempfile::TempDir, Arc<dyn Place>)> {
        let dir = tempfile::tempdir().unwrap();
        let objects = tempfile::tempdir().unwrap();
        let url = format!("file://{}", objects.path().display());
        let in_dir = Out::parse(dir.path()).open().unwrap();
        let in_store = Out::parse(Path::new(&url)).open().unwrap();
        vec![(dir, in_dir), (objects, in_store)]
    }

    #[test]
    fn prepare_reads_the_highest_watermark_per_signal_from_either_place() {
        for (tmp, place) in places() {
            assert_eq!(prepare(&*place).unwrap(), Watermarks::new());
            for (signal, n) in [
                (Signal::Traces, "1-5.pb"),
                (Signal::Traces, "5-9.pb"),
                (Signal::Logs, "2-4.pb"),
            ] {
                place.put(signal, n, b"x".to_vec()).unwrap();
            }
            let marks = prepare(&*place).unwrap();
            assert_eq!(marks.get(Signal::Traces.stream()), 9);
            assert_eq!(marks.get(Signal::Metrics.stream()), 0);
            assert_eq!(marks.get(Signal::Logs.stream()), 4);
            // Both lay blocks out alike: `<signal>/<name>` under `--out`.
            let file = tmp.path().join("traces/5-9.pb");
            assert_eq!(std::fs::read(&file).unwrap(), b"x");
            assert!(place
                .locate(Signal::Traces, "5-9.pb")
                .ends_with("/traces/5-9.pb"));
        }
    }

    #[test]
    fn a_directory_loses_the_leftovers_of_interrupted_writes_at_the_start() {
        let out = tempfile::tempdir().unwrap();
        let place = Out::Dir(out.path().to_path_buf()).open().unwrap();
        prepare(&*place).unwrap();
        let logs = out.path().join("logs");
        std::fs::write(logs.join(".4-12.pb.tmp"), b"").unwrap();
        std::fs::write(logs.join("2-4.pb"), b"").unwrap();
        assert_eq!(prepare(&*place).unwrap().get(Signal::Logs.stream()), 4);
        assert!(!logs.join(".4-12.pb.tmp").exists());
        assert!(logs.join("2-4.pb").exists());
    }

    #[test]
    fn out_is_a_url_only_when_it_starts_with_a_scheme() {
        for url in [
            "file:///tmp/x",
            "s3://bucket/prefix",
            "s3://bucket",
            "ftp://h/x",
        ] {
            assert!(
                matches!(Out::parse(Path::new(url)), Out::Url { .. }),
                "{url}"
            );
        }
        for path in [
            "/tmp/out",
            "out",
            "./a://b",
            "://x",
            "1s3://x",
            "dir/s3://b",
        ] {
            assert_eq!(Out::parse(Path::new(path)), Out::Dir(path.into()), "{path}");
        }
    }

    #[test]
    fn an_unknown_scheme_or_a_relative_file_url_is_refused_naming_it() {
        for url in ["ftp://host/x", "file://relative/x"] {
            let Err(e) = Out::parse(Path::new(url)).open() else {
                panic!("{url} opened");
            };
            assert!(e.starts_with("--out: ") && e.contains(url), "{e}");
        }
    }
}
