//! `ringwal`: the command-line tool for ringwal logs.
//!
//! `append` and `import` write records from stdin; `cat`, `dump`,
//! `verify` and `stat` inspect a log read-only (safe beside a live
//! writer); `recover` and `checkpoint` are the operator's repairs; `bench`
//! measures append-to-acknowledgement latency under closed-loop load.
//! Errors print one line, `ringwal: <message>`, on stderr (and with
//! `--json` one error object on stdout); the exit statuses are the table
//! in `exit.rs`, which `ringwal --help` and `ringwal man` show.
//!
//! This file holds the arguments and dispatch. The output formats and
//! exit statuses are a contract that scripts and other tests check from
//! outside; change them only on purpose.

mod append;
mod archive;
mod bench;
mod docs;
mod exit;
mod inspect;
mod neighbour;
mod ops;
mod progress;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use ringwal::{
    Backend, Codec, Config, ConfigBuilder, Level, Lsn, StaticKeys, SyncMethod, WhenFull,
};

pub(crate) use exit::{CmdResult, Failure};

/// A write-ahead log engine: append, read, verify, repair and benchmark logs.
#[derive(Debug, Parser)]
#[command(name = "ringwal", version, about, after_help = exit::help_text())]
pub(crate) struct Cli {
    /// Show no progress bars (they are only ever shown when stdout is a
    /// terminal).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Append each line of stdin as one record; print each LSN once the
    /// record reaches the level.
    Append(AppendArgs),
    /// Print each record's payload, one per line, in LSN order (read-only).
    Cat(CatArgs),
    /// Print each record with its LSN, stream, kind and location (read-only).
    Dump(DumpArgs),
    /// Check every segment without modifying anything; exit 1 on damage.
    Verify(VerifyArgs),
    /// Summarise nodes, segments, LSN ranges and sizes (read-only).
    Stat(StatArgs),
    /// Show (--dry-run) or perform (--apply) what opening the log does:
    /// cut a torn tail, discard incomplete files; with --point-in-time,
    /// recover a damaged log up to its first damage.
    Recover(RecoverArgs),
    /// Remove whole segments whose records are all at or below an LSN
    /// (--dry-run: show which).
    Checkpoint(CheckpointArgs),
    /// Append the records of `ringwal dump --json` (stdin) to a new or
    /// empty log, batches as atomic batches.
    Import(ImportArgs),
    /// Ship a log to object storage until stopped (SIGINT, SIGTERM):
    /// sealed segments as they seal, the durable tail every --interval;
    /// `archive ls URL` lists what an archive holds.
    Archive(archive::ArchiveArgs),
    /// Build a log from an archive alone, up to an LSN or a time; with
    /// --follow, keep it current as a standby until stopped.
    Restore(archive::RestoreArgs),
    /// Closed-loop load: producers append and wait, latency per record.
    Bench(BenchArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
    /// Print the manual page (roff).
    Man,
}

/// Arguments of `ringwal append`.
#[derive(Debug, clap::Args)]
pub(crate) struct AppendArgs {
    /// Log directory (created if missing, unless --no-create).
    pub dir: PathBuf,
    /// Fail if DIR holds no log of the node, instead of creating one.
    #[arg(long)]
    pub no_create: bool,
    /// Print each LSN as a JSON object, `{"lsn": N}`, and a failure as
    /// an error object (see docs/cli.md).
    #[arg(long)]
    pub json: bool,
    /// Records are separated by NUL bytes instead of newlines (so a
    /// payload may hold newlines), as `find -print0` writes them.
    #[arg(short = '0', long = "null")]
    pub null: bool,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// Stream id given to every record.
    #[arg(long, default_value_t = 0)]
    pub stream: u16,
    /// Level a record must reach before its LSN is printed.
    #[arg(long, default_value = "durable", value_parser = named::<Level>(Level::NAMES))]
    pub level: Level,
    /// Append each N consecutive lines as one atomic batch (recovered all
    /// or nothing); a shorter last batch at EOF is one batch too, and a
    /// batch of one line is a record alone. 1 appends every line alone.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    #[command(flatten)]
    pub key: KeyArg,
    /// I/O backend (default: auto, io_uring where the kernel allows it).
    #[arg(long, default_value = "auto", value_parser = named::<Backend>(Backend::NAMES))]
    pub backend: Backend,
    /// Compress each record of at least 256 bytes with this codec when
    /// that makes it smaller (records are read back whatever the codec).
    #[arg(long, default_value = "none", value_parser = named::<Codec>(Codec::NAMES))]
    pub compress: Codec,
    /// Size of each segment file the log creates, a multiple of 4096
    /// (default 64 MiB).
    #[arg(long, value_name = "N")]
    pub segment_bytes: Option<u64>,
    /// Largest record accepted, in bytes; it must fit a segment. Default
    /// 1 MiB, or, with a --segment-bytes too small for that, the segment
    /// less 64 KiB, and at least half of it.
    #[arg(long, value_name = "N")]
    pub max_record_bytes: Option<usize>,
    /// Permission bits (octal) of the files the log creates, whatever the
    /// umask (default 600; e.g. 640 for a group of readers, whose
    /// directories then get the matching 750).
    #[arg(long, value_name = "OCTAL", value_parser = octal_mode)]
    pub file_mode: Option<u32>,
    /// Hard limit on the bytes of the log's segments (at least two
    /// segments); see --on-full.
    #[arg(long, value_name = "N")]
    pub max_log_bytes: Option<u64>,
    /// At the limit: `block` waits (up to --full-timeout-ms) for a
    /// checkpoint, then fails; `drop-oldest` deletes the oldest segments
    /// and says on stderr which LSNs went.
    #[arg(long, value_enum, default_value_t = OnFullArg::Block, requires = "max_log_bytes")]
    pub on_full: OnFullArg,
    /// With --on-full block: how long a record waits for room, in ms.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub full_timeout_ms: u64,
}

/// `--on-full` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnFullArg {
    /// Wait for a checkpoint, then fail.
    Block,
    /// Delete the oldest segments.
    DropOldest,
}

impl AppendArgs {
    /// The limit policy as the library takes it.
    pub fn when_full(&self) -> WhenFull {
        match self.on_full {
            OnFullArg::Block => WhenFull::Block {
                timeout: Duration::from_millis(self.full_timeout_ms),
            },
            OnFullArg::DropOldest => WhenFull::DropOldest,
        }
    }
}

/// A point in time: a duration meaning that long ago (`10m`, `2h30m`,
/// `90s`, `1d`) or an RFC 3339 time (`2026-12-05T10:00:00Z`,
/// `2026-12-05T11:00:00+01:00`).
fn when(s: &str) -> Result<SystemTime, String> {
    if let Ok(ago) = humantime::parse_duration(s) {
        return SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("{s} ago is before the clock's range"));
    }
    rfc3339(s).map_err(|_| {
        format!(
            "{s:?} is neither a duration such as 10m, 2h or 1d nor an RFC 3339 \
             time such as 2026-12-05T10:00:00Z or 2026-12-05T11:00:00+01:00"
        )
    })
}

/// An RFC 3339 time with any UTC offset (`Z`, `+01:00`, `-05:30`), with
/// or without fractional seconds.
pub(crate) fn rfc3339(s: &str) -> Result<SystemTime, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(SystemTime::from)
        .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-12-05T10:00:00Z ({e})"))
}

/// An octal mode such as `640` or `0640`.
fn octal_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode such as 640"))
}

/// `--key-file`, for every command that writes or reads payloads.
#[derive(Debug, clap::Args)]
pub(crate) struct KeyArg {
    /// The log's key: a file holding 32 bytes, raw or as 64 hex digits
    /// (key id 1). `append` encrypts with it; readers decrypt with it.
    /// A key file that group or others may read is refused.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Accept a --key-file that group or others may read or write (a
    /// secrets mount whose modes cannot be made private).
    #[arg(long, requires = "key_file")]
    pub allow_readable_key: bool,
}

/// A configuration of `node` for a command that opens the log as its
/// writer but appends nothing (`recover`, `checkpoint`): with an empty
/// key provider, which says it seals nothing. The library opens an
/// encrypted log for it without the key (recovering or releasing
/// segments needs none), where it refuses a writer with no provider at
/// all, whose appends would be plaintext in an encrypted log.
pub(crate) fn appending_nothing(node: u32) -> ConfigBuilder {
    Config::builder()
        .node(node)
        .encryption(Arc::new(StaticKeys::new()))
}

impl KeyArg {
    /// A configuration of `node` with the key, if one was given.
    pub fn config(&self, node: u32) -> Result<ConfigBuilder, Failure> {
        let b = Config::builder().node(node);
        let read = if self.allow_readable_key {
            StaticKeys::from_exposed_key_file
        } else {
            StaticKeys::from_key_file
        };
        Ok(match &self.key_file {
            Some(path) => b.encryption(Arc::new(read(path, 1)?)),
            None => b,
        })
    }
}

/// Arguments of `ringwal cat`.
#[derive(Debug, clap::Args)]
pub(crate) struct CatArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// First LSN to print (default: the oldest on disk).
    #[arg(long, default_value_t = 0)]
    pub from: Lsn,
    /// Print only records of this stream.
    #[arg(long)]
    pub stream: Option<u16>,
    /// At the end of the data, wait for more and print records as they
    /// are written (across segment rolls) until interrupted. Ends with an
    /// error if a checkpoint removes records before they are printed.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: how often to look for new records, in milliseconds.
    #[arg(long, default_value_t = 100, requires = "follow")]
    pub poll_ms: u64,
    /// One JSON object per record: lsn, stream, written_at (its write
    /// time, RFC 3339, or null), and payload (the text) or payload_b64 (a
    /// payload that is not UTF-8); a failure as an error object.
    #[arg(long)]
    pub json: bool,
    /// Print only records written at or after WHEN: a duration meaning
    /// that long ago (10m, 2h30m, 90s, 1d) or an RFC 3339 time in UTC
    /// (2026-12-05T10:00:00Z). A record's write time is when the writer
    /// submitted its write, by the writer's clock. Records of logs written
    /// before format version 3 have none and never match; cat says on
    /// stderr how many it left out.
    #[arg(long, value_name = "WHEN", value_parser = when)]
    pub since: Option<SystemTime>,
    /// Print only records written at or before WHEN (as --since).
    #[arg(long, value_name = "WHEN", value_parser = when)]
    pub until: Option<SystemTime>,
    #[command(flatten)]
    pub bounds: Bounds,
    #[command(flatten)]
    pub key: KeyArg,
}

/// Where `cat` and `dump` stop.
#[derive(Debug, clap::Args)]
pub(crate) struct Bounds {
    /// Last LSN to print (stop after it, even with --follow).
    #[arg(long, value_name = "LSN")]
    pub to: Option<Lsn>,
    /// Print at most N records (those --stream lets through).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// Arguments of `ringwal dump`.
#[derive(Debug, clap::Args)]
pub(crate) struct DumpArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// First LSN to print (default: the oldest on disk).
    #[arg(long, default_value_t = 0)]
    pub from: Lsn,
    /// One JSON object per line: lsn, stream, kind, len, segment, offset,
    /// batch (the first LSN of the record's atomic batch, or null for a
    /// record appended alone), written_at (when its write was submitted,
    /// RFC 3339, or null before format version 3), payload_b64.
    #[arg(long)]
    pub json: bool,
    /// Print only records of this stream.
    #[arg(long)]
    pub stream: Option<u16>,
    #[command(flatten)]
    pub bounds: Bounds,
    #[command(flatten)]
    pub key: KeyArg,
}

/// Arguments of `ringwal verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Node id (default: every node found in the directory).
    #[arg(long)]
    pub node: Option<u32>,
    /// One JSON document: nodes, segments, problems and totals.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub key: KeyArg,
}

/// Arguments of `ringwal stat`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Node id (default: every node found in the directory).
    #[arg(long)]
    pub node: Option<u32>,
    /// One JSON document: nodes, segments, problems and totals.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub key: KeyArg,
}

/// Arguments of `ringwal recover`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["dry_run", "apply"])))]
pub(crate) struct RecoverArgs {
    /// Log directory (must hold a log of the node).
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// Show what an open would do; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do it: open the log (taking the writer lock) and close it.
    #[arg(long)]
    pub apply: bool,
    /// Recover a damaged log up to its first damage: keep every record
    /// before it, set the segments after it aside (renamed, never
    /// deleted), keep a copy of a segment whose tail is cut, and resume
    /// LSNs above every LSN the log ever held. What is given up (files,
    /// LSN ranges, bytes) is printed before anything is done.
    #[arg(long)]
    pub point_in_time: bool,
    /// Give up only what is damaged: keep every record whose frame
    /// verifies, give up exactly the LSNs of the frames damaged (a skip
    /// frame each run), keep a copy of each segment before it changes.
    /// For damage in the middle of a log, which a strict open refuses.
    #[arg(long, conflicts_with = "point_in_time")]
    pub salvage: bool,
    /// One JSON document: the plan (or what was done), or an error object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ringwal checkpoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckpointArgs {
    /// Log directory (must hold a log of the node).
    pub dir: PathBuf,
    /// Remove every whole segment whose records are all at or below this
    /// LSN (never the newest segment).
    #[arg(long, value_name = "LSN")]
    pub up_to: Lsn,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// Show the segments a checkpoint would remove; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Remove segments the log's archive does not hold yet too (by
    /// default an archived log keeps them until `ringwal archive` has
    /// shipped them).
    #[arg(long)]
    pub release_unarchived: bool,
    /// Take an --up-to past the end of the log as the last LSN: remove
    /// every segment but the newest. Without it such an --up-to is
    /// refused (status 2), since it covers records never written.
    #[arg(long)]
    pub force: bool,
    /// One JSON document: the segments removed (or that would be), the
    /// bytes freed and any warning; or an error object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ringwal import`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// Log directory: a new one, or one whose log of the node is empty.
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// One JSON object with the count and LSN range imported, or an
    /// error object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ringwal completions`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

/// Arguments of `ringwal bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Log directory (default: a temporary directory, deleted afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Producers, each with one record outstanding: threads, or with
    /// `--api async` tasks on a multi-threaded tokio runtime.
    #[arg(long, default_value_t = 16)]
    pub producers: usize,
    /// Payload bytes per record (up to the default record size limit).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Level each append waits for.
    #[arg(long, default_value = "durable", value_parser = named::<Level>(Level::NAMES))]
    pub level: Level,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// I/O backend (default: auto, io_uring where the kernel allows it).
    #[arg(long, value_parser = named::<Backend>(Backend::NAMES))]
    pub backend: Option<Backend>,
    /// How durable writes are made durable.
    #[arg(long, default_value = "dsync", value_parser = sync_method())]
    pub sync_method: SyncMethod,
    /// Writes the ring keeps in flight.
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// How long a lone waiting producer spins before it parks, in µs
    /// (`Config::wait_spin`; 0 never spins).
    #[arg(long, default_value_t = ringwal::DEFAULT_WAIT_SPIN.as_micros() as u64)]
    pub wait_spin_us: u64,
    /// Largest record the log accepts, in bytes (raise it for --size above
    /// 1 MiB). Default as `append --max-record-bytes`: 1 MiB, or less when
    /// --segment-mib 1 is too small for that.
    #[arg(long)]
    pub max_record: Option<usize>,
    /// Segment size in MiB (smaller segments roll more often: the cost of
    /// a roll shows in the tail).
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// How producers append: `append` (call, then wait on the ticket),
    /// `claim` (`Wal::append_with`: the record is written into its place
    /// in the staging buffer, then a wait on the ticket), `batch`
    /// (`Wal::append_batch` of `--batch` records, then a wait on its
    /// ticket; latency is per batch, records/s counts every member), `async`
    /// (`append_async`, then `Ticket::reached`, in tokio tasks on one
    /// worker thread per core) or `channel` (each producer is a collector
    /// thread with a sender and an acknowledgement receiver; latency is
    /// from send to acknowledgement).
    #[arg(long, value_enum, default_value_t = ApiArg::Append)]
    pub api: ApiArg,
    /// With `--api channel`: records each producer keeps outstanding
    /// (1 is closed loop, as with `append`).
    #[arg(long, default_value_t = 1)]
    pub window: usize,
    /// With `--api batch`: records in each atomic batch.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=4096))]
    pub batch: u32,
    /// Background sync interval in milliseconds for `--level written` (the
    /// collector's setting: durability within this bound, off the ack path).
    #[arg(long)]
    pub sync_interval_ms: Option<u64>,
    /// What each record holds: `pattern` (bytes 0..250 repeated) or
    /// `telemetry` (JSON metric lines, as a collector writes them).
    #[arg(long, value_enum, default_value_t = PayloadArg::Pattern)]
    pub payload: PayloadArg,
    /// Compress records of at least 256 bytes with this codec.
    #[arg(long, default_value = "none", value_parser = named::<Codec>(Codec::NAMES))]
    pub compress: Codec,
    #[command(flatten)]
    pub key: KeyArg,
    /// Also report the latency of the records acknowledged right after
    /// a segment roll (the first --producers LSNs of each new segment)
    /// beside the others'. Keeps one 16-byte sample per record; needs the
    /// default temporary directory (its checkpoints reveal the segments).
    #[arg(long, conflicts_with_all = ["dir", "api"])]
    pub roll_stall: bool,
    /// Measure beside a busy neighbour: before the load starts, start
    /// another process (this executable again) that spins in a loop
    /// making no syscalls, pinned to the last CPU this process may run
    /// on, and kill it when the load ends; as a node runs its log beside
    /// the work that produces the records. The report says which CPU and
    /// how much of it the neighbour got. Refused on a machine (or
    /// cpuset) with a single CPU, where it could only take turns with
    /// the bench.
    #[arg(long)]
    pub busy_neighbour: bool,
}

/// `--payload` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PayloadArg {
    /// Bytes 0..250, repeated.
    Pattern,
    /// JSON telemetry lines (host, metric, value, timestamp).
    Telemetry,
}

/// `--api` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApiArg {
    /// `Wal::append` and a blocking wait on the ticket.
    Append,
    /// `Wal::append_with`: the payload written into the claimed slot, then
    /// a blocking wait on the ticket.
    Claim,
    /// `Wal::append_batch` of `--batch` records, then a blocking wait on
    /// its ticket.
    Batch,
    /// `Wal::append_async`, then `Ticket::reached`, in tokio tasks.
    Async,
    /// `ringwal::channel`: send, and read acknowledgements off a channel.
    Channel,
}

impl ApiArg {
    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ApiArg::Append => "append",
            ApiArg::Channel => "channel",
            ApiArg::Claim => "claim",
            ApiArg::Batch => "batch",
            ApiArg::Async => "async",
        }
    }
}

/// A parser for a library enum by the names it prints and reads
/// (`NAMES`, `FromStr`): the command line keeps no mirror of the type,
/// and `--help` lists exactly the library's names.
fn named<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Debug,
{
    PossibleValuesParser::new(names).map(|s| s.parse::<T>().expect("one of the listed names"))
}

/// `--sync-method`: the library's names, and `fdatasync`, the name this
/// flag had before, for scripts that use it.
fn sync_method() -> impl TypedValueParser<Value = SyncMethod> {
    let values = SyncMethod::NAMES.iter().map(|&n| {
        let v = PossibleValue::new(n);
        if n == SyncMethod::WriteThenFdatasync.name() {
            v.alias("fdatasync")
        } else {
            v
        }
    });
    PossibleValuesParser::new(values).map(|s| s.parse::<SyncMethod>().expect("a listed name"))
}

impl Command {
    /// Whether the command prints JSON, and so its failures as error
    /// objects too.
    fn json(&self) -> bool {
        match self {
            Command::Append(a) => a.json,
            Command::Cat(a) => a.json,
            Command::Dump(a) => a.json,
            Command::Verify(a) => a.json,
            Command::Stat(a) => a.json,
            Command::Recover(a) => a.json,
            Command::Checkpoint(a) => a.json,
            Command::Import(a) => a.json,
            Command::Restore(a) => a.json,
            Command::Archive(a) => matches!(&a.ls, Some(archive::ArchiveCommand::Ls(l)) if l.json),
            // `bench --json FILE` writes its results to a file.
            Command::Bench(_) | Command::Completions(_) | Command::Man => false,
        }
    }
}

/// Whether arguments that did not parse asked for JSON: `--json` given to
/// any command but `bench` (whose `--json` names a file).
fn json_requested() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter().any(|a| a == "--json") && !args.iter().any(|a| a == "bench")
}

/// The help to point a usage error at: that of the command the arguments
/// name (`ringwal checkpoint --help`), else the program's.
fn help_pointer() -> String {
    use clap::CommandFactory;
    let cli = Cli::command();
    let command = std::env::args()
        .skip(1)
        .find(|a| cli.get_subcommands().any(|c| c.get_name() == a));
    match command {
        Some(c) => format!("ringwal {c} --help"),
        None => "ringwal --help".to_string(),
    }
}

/// Parse the arguments, run the command, and turn the outcome into an
/// exit status (see [`exit::TABLE`]).
fn main() -> ExitCode {
    // The process `bench --busy-neighbour` starts beside it is this
    // executable asked through its environment, not a subcommand, so
    // that no help, manual page or completion script offers it.
    if let Some(spun) = neighbour::spin_if_asked() {
        return exit::report(spun, false);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::parse_failure(e, json_requested(), &help_pointer()),
    };
    let quiet = cli.quiet;
    let json = cli.command.json();
    let result = match cli.command {
        Command::Append(a) => append::run(a),
        Command::Cat(a) => inspect::cat(a),
        Command::Dump(a) => inspect::dump(a),
        Command::Verify(a) => inspect::verify(a, quiet),
        Command::Stat(a) => inspect::stat(a),
        Command::Recover(a) => ops::recover(a, quiet),
        Command::Checkpoint(a) => ops::checkpoint(a),
        Command::Import(a) => ops::import(a, quiet),
        Command::Archive(a) => archive::run(a),
        Command::Restore(a) => archive::restore(a),
        Command::Bench(a) => bench::run(a),
        Command::Completions(a) => docs::completions(a),
        Command::Man => docs::man(),
    };
    exit::report(result, json)
}
