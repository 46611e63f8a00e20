//! The one error type of ringwal.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A log sequence number: dense, starting at 1, never reused.
pub type Lsn = u64;

/// Largest LSN a log may use.
///
/// LSNs are dense from 1, so a real log never gets near this (2^62 records
/// at a billion per second is over a century). Any larger LSN in a file
/// name or header is therefore damage, and stopping here keeps every
/// `lsn + 1` in the engine far from overflow.
pub const MAX_LSN: u64 = 1 << 62;

/// Everything that can go wrong, as variants a caller can act on.
///
/// Messages name the file and byte offset wherever one is involved, so an
/// operator can go straight to `ringwal dump` or a hex editor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process (or another handle in this one) holds the writer
    /// lock for this directory and node, or (a lock file named
    /// `NNNNN.archive.lock`) the archiver's lock of its log. Retry after
    /// it closes.
    #[error("{}", locked_message(path, *pid))]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The process id the holder wrote into the lock file, if it could
        /// be read (a holder in this process shows this process's id).
        pid: Option<u32>,
    },
    /// There is no log of `node` in `dir`, and the configuration says not
    /// to create one ([`create_if_missing`]). Nothing was created.
    ///
    /// [`create_if_missing`]: crate::ConfigBuilder::create_if_missing
    #[error("{}: no log of node {node} here", dir.display())]
    NoLog {
        /// The directory looked in.
        dir: PathBuf,
        /// The node whose segments were looked for.
        node: u32,
    },
    /// On-disk data that cannot be a torn tail: a bad frame with valid data
    /// after it, a header that contradicts its file name, an unknown format.
    /// Nothing was modified; inspect with `ringwal verify`.
    #[error("{}:{offset}: corrupt: {reason}", file.display())]
    Corrupt {
        /// The segment file.
        file: PathBuf,
        /// Byte offset of the first bad byte in `file`.
        offset: u64,
        /// What is wrong there, by kind.
        reason: Corruption,
    },
    /// A segment's payloads are encrypted and cannot be decrypted: no key
    /// with its key id was given, or the key given is not the one it was
    /// written with; or a key file is unusable (`file` is then the key
    /// file). Nothing was modified, and nothing was taken for damage.
    #[error("{}: key id {key_id}: {problem}", file.display())]
    Key {
        /// The segment (or key file, or log directory for a writer whose
        /// current key id has no key).
        file: PathBuf,
        /// The key id the segment's header names.
        key_id: u32,
        /// What is wrong with the key.
        problem: KeyProblem,
    },
    /// A new segment would take the log over its hard limit
    /// ([`ConfigBuilder::max_log_bytes`](crate::ConfigBuilder::max_log_bytes)
    /// with [`WhenFull::Block`](crate::WhenFull::Block)) and no checkpoint
    /// made room within the timeout (or at once, for `try_append`). The
    /// append took no LSN and the log is not poisoned: checkpoint, then
    /// append again.
    #[error(
        "{}: the log is at its limit of {limit} bytes and no checkpoint made room in {waited:?}",
        dir.display()
    )]
    LogFull {
        /// The log directory.
        dir: PathBuf,
        /// The configured limit.
        limit: u64,
        /// How long the append waited.
        waited: std::time::Duration,
    },
    /// The io_uring backend (`Backend::Uring`, configured explicitly) cannot
    /// run here: the kernel refused
    /// `io_uring_setup` (a container's seccomp profile, the
    /// `kernel.io_uring_disabled` sysctl, an old kernel); the OS error is
    /// the `source()`. `Backend::Auto` (the default) runs the threaded
    /// backend instead. Nothing was modified but recovery's repairs.
    #[error(
        "the uring backend is unavailable here: the kernel refused io_uring_setup; \
         Backend::Auto (the default) falls back to the threaded backend"
    )]
    BackendUnavailable {
        /// The kernel's refusal.
        #[source]
        source: io::Error,
    },
    /// LSNs that should exist do not: a segment missing before, between
    /// or after the others. Damage, unlike [`Error::Released`].
    #[error(
        "{}: LSN gap: LSN {expected} is not there; the next LSN present is {found}",
        file.display()
    )]
    Gap {
        /// The file where the gap was noticed.
        file: PathBuf,
        /// The LSN that should come next.
        expected: Lsn,
        /// The LSN found instead.
        found: Lsn,
    },
    /// A read of LSNs that a checkpoint released: `lsn` is below the
    /// oldest LSN the log keeps, asked for, or next for a reader that a
    /// checkpoint overtook (the segment it was on was released before it
    /// had read all of it). Not damage: the log gave those records back
    /// as its owner asked. Read again from `oldest`.
    #[error(
        "{}: LSN {lsn} was released by a checkpoint; the oldest LSN kept is {oldest}",
        file.display()
    )]
    Released {
        /// The log directory, or the segment released under a reader.
        file: PathBuf,
        /// The LSN asked for, or the one the reader would have read next.
        lsn: Lsn,
        /// The oldest LSN the log keeps now.
        oldest: Lsn,
    },
    /// A read of an LSN that recovery gave up: LSNs `first..=last` will
    /// never hold a record, as a skip frame in `file` records (a
    /// point-in-time recovery resumed above them, or an open resumed above
    /// what a failed writer of this process had handed out). Not damage:
    /// readers step over these LSNs; only a read of one of them ends here.
    #[error(
        "{}: LSNs {first}..={last} were given up by recovery: no record has them",
        file.display()
    )]
    GivenUp {
        /// The segment holding the skip frame.
        file: PathBuf,
        /// The first LSN given up.
        first: Lsn,
        /// The last LSN given up.
        last: Lsn,
    },
    /// Records the log acknowledged as durable are not on disk: its
    /// manifest says LSNs up to `durable` were durable, but the log ends at
    /// `last` (a segment file cut short, or replaced by an older copy).
    /// Nothing was modified; restore the file, or open in point-in-time
    /// mode to accept the loss (the lost LSNs are never handed out again).
    #[error(
        "{}: acknowledged records lost: LSNs up to {durable} were durable, but the log ends at {last}",
        file.display()
    )]
    Lost {
        /// The newest segment (or the manifest, when no segment is left).
        file: PathBuf,
        /// The highest LSN the manifest says was durable.
        durable: Lsn,
        /// The last LSN on disk.
        last: Lsn,
    },
    /// A write or sync failed earlier; the log accepts nothing more and
    /// reports nothing more as durable. Reopen to recover; nothing that was
    /// acknowledged is lost.
    #[error("log is poisoned by an earlier failure: {cause}")]
    Poisoned {
        /// The failure that poisoned the log; its `source()` (and so this
        /// error's second link) is the OS error when there was one, to
        /// match on (`EIO` and the like).
        #[source]
        cause: Poison,
    },
    /// A record larger than the configured maximum, or an atomic batch
    /// whose frames do not fit one segment. Nothing was appended.
    #[error("{len} bytes exceed the limit of {max} bytes (one record's payload, or an atomic batch in one segment)")]
    TooLarge {
        /// The record's payload length, or the bytes the batch's frames
        /// take in a segment.
        len: usize,
        /// The configured maximum (`Config::max_record_bytes`), or the
        /// room for frames in a segment.
        max: usize,
    },
    /// Every staging buffer is full and the caller asked not to wait
    /// ([`Wal::try_append`](crate::Wal::try_append)): the device is behind
    /// the producers. Nothing was appended; retry later.
    #[error("all staging buffers are full: the device is behind; retry later")]
    Full,
    /// An atomic batch (or a transaction's commit) with no records: there
    /// is no LSN to give it. Nothing was appended.
    #[error("an atomic batch needs at least one record")]
    EmptyBatch,
    /// The filesystem is full. Acknowledged records are safe; free space
    /// (for example with `checkpoint`) and reopen.
    #[error("{}: no space left on device", path.display())]
    NoSpace {
        /// The file being written or created.
        path: PathBuf,
    },
    /// The log has used every LSN up to the format's limit, 2^62. No
    /// real log gets here; a log that does was resumed from a damaged
    /// name or header. Nothing was appended; start a new log.
    #[error(
        "LSN space exhausted: the next LSN {next} is past the limit {}",
        MAX_LSN
    )]
    LsnExhausted {
        /// The LSN that would have been assigned.
        next: Lsn,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An LSN passed to a call lies past the end of the log: a snapshot
    /// LSN for a checkpoint marker, or the LSN a checkpoint or an offline
    /// truncation would release records up to, that no record has been
    /// handed out for yet. Nothing was appended, removed or changed.
    #[error("{what} {lsn} is past the end of the log (last LSN {last})")]
    PastEnd {
        /// The argument, by its name in the API (`snapshot_lsn`,
        /// `up_to`, `below`).
        what: &'static str,
        /// The LSN given.
        lsn: Lsn,
        /// The last LSN handed out when it was given (0: none yet).
        last: Lsn,
    },
    /// A point read of an LSN not written yet (or 0, which no record
    /// has). Wait for it with `Wal::wait_for(lsn, Level::Written)`.
    #[error("LSN {lsn} is not written yet (written up to {written})")]
    NotWritten {
        /// The LSN asked for.
        lsn: Lsn,
        /// The written watermark when it was asked for.
        written: Lsn,
    },
    /// The log was closed; no more appends.
    #[error("log is closed")]
    Closed,
    /// An I/O error outside the write path (opening, scanning, deleting).
    /// The message names the path; the OS error is the `source()`.
    #[error("I/O error on {}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An archive object (`ringwal::archive`) is missing, damaged, or
    /// its store failed a request. The message names the object by its
    /// URL; a store's own error is the `source()`. What to do depends on
    /// the [`ArchiveProblem`]: retry an unreachable store, fix the
    /// credentials or the URL, or restore from another archive.
    #[error("{}", archive_message(object, problem))]
    Archive {
        /// The object, as a URL (`s3://bucket/prefix/...`, `file:///...`).
        object: String,
        /// What is wrong with it.
        problem: ArchiveProblem,
        /// The store's error, when it reported one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// What is wrong with an archive object (see [`Error::Archive`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArchiveProblem {
    /// The store says there is no such object (or bucket).
    Missing,
    /// The object is there but is not what the archive manifest says
    /// (length, CRC, frames), or does not decode.
    Damaged(String),
    /// The store refused the request: wrong credentials or no
    /// permission.
    Refused,
    /// The request failed on its way (the store is down or unreachable,
    /// a timeout): worth retrying later.
    Unreachable,
    /// The archive is not one this log may use: another log's, another
    /// node's, or one its segments no longer follow on from.
    Mismatch(String),
    /// The restore target already holds a log.
    TargetHoldsLog,
    /// There is no archive of the node at the URL: the store holds no
    /// archive manifest there (a mistyped URL or node, or nothing
    /// archived yet), as opposed to an archive with an object missing.
    NoArchive,
}

impl std::fmt::Display for ArchiveProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArchiveProblem::Missing => f.write_str("missing"),
            ArchiveProblem::Damaged(d) => write!(f, "damaged: {d}"),
            ArchiveProblem::Refused => f.write_str("the store refused access"),
            ArchiveProblem::Unreachable => f.write_str("the store did not answer"),
            ArchiveProblem::Mismatch(d) => write!(f, "not this log's: {d}"),
            ArchiveProblem::TargetHoldsLog => {
                f.write_str("already holds a log; restore into a new directory")
            }
            ArchiveProblem::NoArchive => f.write_str(
                "no archive of this node there: check the URL and --node, \
                 or archive the log first",
            ),
        }
    }
}

/// What kind of damage a [`Error::Corrupt`] is: which part of the log it
/// is in, so a caller can tell a wrong directory or a missing key from
/// damaged data. Each carries the detail its message shows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// A segment's header (and its copy) is unreadable, or contradicts
    /// the file: its name, its size, its base LSN.
    Header(String),
    /// A segment of another log (another log id) is among this log's
    /// files: a file copied from elsewhere, or the wrong directory.
    ForeignLog {
        /// The log id the segment carries.
        found: u64,
        /// This log's id.
        expected: u64,
    },
    /// A record's payload fails authentication under its segment's key:
    /// the ciphertext, or the header fields it is bound to, changed after
    /// it was written with a valid checksum (tampering, not a torn write,
    /// which the checksum catches first).
    Unauthentic,
    /// A record's compressed payload does not decompress to the length it
    /// states, or states more than the format allows.
    Compressed(String),
    /// Frames end in a way no crash can explain (damage in a sealed
    /// segment, behind a later write's vouch, with valid data after it).
    Frames(String),
    /// A sealed segment's frames end cleanly where the LSN `due` would
    /// come next, but the segment after it starts at `next_base`: the
    /// LSNs `due..next_base` are missing from its end (the offset is where
    /// its valid frames end). Bytes over its last records were lost (a
    /// zeroed block reads like the end its writer left), or a whole
    /// segment between the two is missing: the format cannot tell which
    /// when the frames do not fill the segment, so the file where the
    /// LSNs should continue is named. A missing segment after frames that
    /// fill theirs is [`Error::Gap`] instead.
    EndsShort {
        /// The first LSN missing.
        due: Lsn,
        /// The base LSN of the next segment.
        next_base: Lsn,
    },
    /// The node's manifest does not decode or names another node.
    Manifest(String),
    /// A checkpoint file ([`files::read_checkpoint`](crate::files::read_checkpoint))
    /// that is torn, damaged or not one.
    CheckpointFile(CheckpointError),
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Corruption::Header(d) | Corruption::Frames(d) => f.write_str(d),
            Corruption::ForeignLog { found, expected } => write!(
                f,
                "segment of another log (log id {found:016x}; this log is {expected:016x})"
            ),
            Corruption::Unauthentic => {
                f.write_str("record payload fails authentication (altered after it was written)")
            }
            Corruption::Compressed(d) => write!(f, "compressed payload: {d}"),
            Corruption::EndsShort { due, next_base } => write!(
                f,
                "the data ends before LSN {due}, but the next segment starts at LSN {next_base}: \
                 LSNs {due}..={} are missing (lost over this sealed segment's last records, \
                 or a segment between the two is missing)",
                next_base - 1
            ),
            Corruption::Manifest(d) => write!(f, "manifest: {d}"),
            Corruption::CheckpointFile(e) => write!(f, "{e}"),
        }
    }
}

/// Why a log stopped accepting work (it is poisoned): the first failure,
/// kept once by the log and reported to every caller after it.
///
/// Returned by [`Wal::poison_cause`](crate::Wal::poison_cause) for health
/// and readiness checks; [`error`](Self::error) is the error every call
/// on the log returns from then on. Cloning copies one string or path and
/// bumps a reference count.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Poison {
    /// A write, sync or other operation of the write path failed. Nothing
    /// after the failure was acknowledged; reopen to recover.
    Failed {
        /// What failed, on which file.
        context: String,
        /// The OS error, when the failure was one (its `source()` too).
        io: Option<Arc<io::Error>>,
    },
    /// The filesystem is full (at this file): nothing acknowledged is
    /// lost, and the log reopens once space is freed.
    NoSpace(PathBuf),
}

impl std::fmt::Display for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Poison::Failed { context, .. } => f.write_str(context),
            Poison::NoSpace(path) => write!(f, "{}: no space left on device", path.display()),
        }
    }
}

/// Two causes are equal when they say the same and carry the same OS
/// error (kind and code): `io::Error` itself has no equality.
impl PartialEq for Poison {
    fn eq(&self, other: &Poison) -> bool {
        let os = |e: Option<&io::Error>| e.map(|e| (e.kind(), e.raw_os_error()));
        match (self, other) {
            (Poison::Failed { context: a, .. }, Poison::Failed { context: b, .. }) => {
                a == b && os(self.io_error()) == os(other.io_error())
            }
            (Poison::NoSpace(a), Poison::NoSpace(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Poison {}

impl std::error::Error for Poison {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error().map(|e| e as _)
    }
}

impl Poison {
    /// A failure that is no OS error (a panic, a broken invariant).
    pub(crate) fn failed(context: impl Into<String>) -> Poison {
        Poison::Failed {
            context: context.into(),
            io: None,
        }
    }

    /// Classify a failure: ENOSPC keeps its own, actionable variant; an
    /// I/O error keeps its OS error.
    pub(crate) fn from_error(what: &str, err: Error) -> Poison {
        match err {
            Error::NoSpace { path } => Poison::NoSpace(path),
            Error::Io { path, source } => Poison::Failed {
                context: format!("{what}: {}", path.display()),
                io: Some(Arc::new(source)),
            },
            other => Poison::failed(format!("{what}: {other}")),
        }
    }

    /// The OS error behind the failure, if it was one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Poison::Failed { io, .. } => io.as_deref(),
            Poison::NoSpace(_) => None,
        }
    }

    /// The error every call on the log returns once it is poisoned:
    /// [`Error::Poisoned`] with this cause, or [`Error::NoSpace`]. Cost: one
    /// clone of the message or path.
    pub fn error(&self) -> Error {
        match self {
            Poison::Failed { .. } => Error::Poisoned {
                cause: self.clone(),
            },
            Poison::NoSpace(path) => Error::NoSpace { path: path.clone() },
        }
    }
}

/// ringwal's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The message followed by each cause in the `source()` chain, each
    /// after `": "`: what a program shows an operator, since the message
    /// names the file and leaves the OS error (`No such file or
    /// directory`) to the source. `to_string()` is the message alone. A
    /// cause whose text is already shown (sources that print their own
    /// causes) is left out. Cost: nothing until it is formatted, then
    /// one allocation for the text.
    ///
    /// ```
    /// # use ringwal::{Config, Wal};
    /// let file = tempfile::NamedTempFile::new()?;
    /// let e = Wal::open(file.path().join("log"), Config::default()).unwrap_err();
    /// assert!(!e.to_string().contains("directory"));
    /// assert!(e.chain().to_string().starts_with(&format!("{e}: ")));
    /// assert!(e.chain().to_string().contains("Not a directory"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn chain(&self) -> impl std::fmt::Display + '_ {
        struct Chain<'a>(&'a Error);
        impl std::fmt::Display for Chain<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut text = self.0.to_string();
                let mut cause = std::error::Error::source(self.0);
                while let Some(c) = cause {
                    // Some sources (an object store's, an HTTP client's)
                    // already print their own causes: once is enough.
                    let c_text = c.to_string();
                    if !text.contains(&c_text) {
                        text.push_str(": ");
                        text.push_str(&c_text);
                    }
                    cause = c.source();
                }
                f.write_str(&text)
            }
        }
        Chain(self)
    }

    /// Wrap an I/O error with the path it concerns, turning a full disk
    /// into [`Error::NoSpace`] so callers can match on it.
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        let path = path.into();
        debug_assert!(!path.as_os_str().is_empty(), "an I/O error names its path");
        if source.kind() == io::ErrorKind::StorageFull {
            return Error::NoSpace { path };
        }
        Error::Io { path, source }
    }

    pub(crate) fn corrupt(file: impl Into<PathBuf>, offset: u64, reason: Corruption) -> Error {
        let file = file.into();
        debug_assert!(!file.as_os_str().is_empty(), "damage names its file");
        Error::Corrupt {
            file,
            offset,
            reason,
        }
    }
}

/// Why a segment's payloads cannot be decrypted, or a key file used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyProblem {
    /// No key with the segment's key id was given.
    Missing,
    /// A key with that id was given, but not the one the segment was
    /// written with (the header's key check does not match).
    Wrong,
    /// A key file that holds neither 32 bytes nor 64 hex digits.
    Unusable,
    /// A key file that group or others may read or write (its mode):
    /// refused unless explicitly allowed.
    Exposed {
        /// The file's permission bits.
        mode: u32,
    },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyProblem::Missing => "no key with that id was given",
            KeyProblem::Wrong => "the key given is not the one it was written with",
            KeyProblem::Unusable => "a key file holds 32 bytes or 64 hex digits",
            KeyProblem::Exposed { mode } => {
                return write!(
                    f,
                    "the key file's mode {mode:04o} lets others read or change the key: \
                     make it 0600, or allow it explicitly"
                )
            }
        })
    }
}

/// Why bytes are not a checkpoint file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Shorter than its header, or than the length the header declares
    /// (`have` of `want` bytes): cut short.
    Torn {
        /// Bytes present.
        have: u64,
        /// Bytes the header declares (header included).
        want: u64,
    },
    /// Not a checkpoint file (another file under the name).
    Magic,
    /// A later version than this reader knows.
    Version(u32),
    /// The CRC does not match: damaged.
    Crc,
    /// Longer than its header declares: something was appended.
    Trailing {
        /// Bytes present.
        have: u64,
        /// Bytes the header declares (header included).
        want: u64,
    },
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Torn { have, want } => {
                write!(f, "torn checkpoint file: {have} of {want} bytes")
            }
            CheckpointError::Magic => f.write_str("not a ringwal checkpoint file"),
            CheckpointError::Version(v) => write!(f, "checkpoint file version {v} is unknown"),
            CheckpointError::Crc => f.write_str("checkpoint file CRC mismatch"),
            CheckpointError::Trailing { have, want } => write!(
                f,
                "checkpoint file is {have} bytes, longer than the {want} it declares"
            ),
        }
    }
}

/// An archive error's message: the object by its URL and what is wrong
/// with it; a restore target by its path, since it is no archive object.
fn archive_message(object: &str, problem: &ArchiveProblem) -> String {
    match problem {
        ArchiveProblem::TargetHoldsLog => format!("{object}: {problem}"),
        _ => format!("archive object {object}: {problem}"),
    }
}

/// A lock's message: who holds it, by the lock file's name (the writer's
/// or the archiver's), and the holder's process id when known.
fn locked_message(path: &std::path::Path, pid: Option<u32>) -> String {
    let by = pid.map_or(String::new(), |p| format!(", process {p}"));
    let archiver = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".archive.lock"));
    if archiver {
        format!(
            "{}: the log's archive is locked by another archiver{by} (one archiver per log)",
            path.display()
        )
    } else {
        format!(
            "{}: log is locked by another writer{by} (one writer per directory and node)",
            path.display()
        )
    }
}
