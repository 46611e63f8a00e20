//! `ringwal`: the command-line tool for ringwal logs.
//!
//! `append` writes records from stdin; `cat`, `dump`, `verify` and `stat`
//! inspect a log read-only (safe beside a live writer); `bench` measures
//! append-to-acknowledgement latency under closed-loop load. Errors print
//! one line, `ringwal: <message>`, on stderr and exit with status 2;
//! `verify` exits with 1 when it finds damage.
//!
//! This file holds argument parsing, error reporting and dispatch. The
//! output formats and exit statuses are a contract that scripts and other
//! tests check from outside; change them only on purpose.

mod append;
mod bench;
mod inspect;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use ringwal::{Backend, Level, Lsn};

/// Exit status for any error (bad arguments included).
const EXIT_ERROR: u8 = 2;

/// A write-ahead log engine: append, read, verify and benchmark logs.
#[derive(Debug, Parser)]
#[command(name = "ringwal", version, about)]
struct Cli {
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
    /// Closed-loop load: producers append and wait, latency per record.
    Bench(BenchArgs),
}

/// Arguments of `ringwal append`.
#[derive(Debug, clap::Args)]
pub(crate) struct AppendArgs {
    /// Log directory (created if missing).
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// Stream id given to every record.
    #[arg(long, default_value_t = 0)]
    pub stream: u16,
    /// Level a record must reach before its LSN is printed.
    #[arg(long, value_enum, default_value_t = LevelArg::Durable)]
    pub level: LevelArg,
    /// Append each N consecutive lines as one atomic batch (recovered all
    /// or nothing); a shorter last batch at EOF is one batch too, and a
    /// batch of one line is a record alone. 1 appends every line alone.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
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
    /// record appended alone), payload_b64.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ringwal verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Node id (default: every node found in the directory).
    #[arg(long)]
    pub node: Option<u32>,
}

/// Arguments of `ringwal stat`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatArgs {
    /// Log directory.
    pub dir: PathBuf,
}

/// Arguments of `ringwal bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Log directory (default: a temporary directory, deleted afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Producer threads, each with one record outstanding.
    #[arg(long, default_value_t = 16)]
    pub producers: usize,
    /// Payload bytes per record (up to the default record size limit).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Level each append waits for.
    #[arg(long, value_enum, default_value_t = LevelArg::Durable)]
    pub level: LevelArg,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// I/O backend (default: uring on Linux, threaded elsewhere).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// How durable writes are made durable.
    #[arg(long, value_enum, default_value_t = SyncMethodArg::Dsync)]
    pub sync_method: SyncMethodArg,
    /// Writes the ring keeps in flight.
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// Largest record the log accepts, in bytes (raise it for --size above 1 MiB).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_record: usize,
    /// Segment size in MiB (smaller segments roll more often: the cost of
    /// a roll shows in the tail).
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// How producers append: `append` (call, then wait on the ticket) or
    /// `channel` (each producer is a collector thread with a sender and an
    /// acknowledgement receiver; latency is from send to acknowledgement).
    #[arg(long, value_enum, default_value_t = ApiArg::Append)]
    pub api: ApiArg,
    /// With `--api channel`: records each producer keeps outstanding
    /// (1 is closed loop, as with `append`).
    #[arg(long, default_value_t = 1)]
    pub window: usize,
    /// Background sync interval in milliseconds for `--level written` (the
    /// collector's setting: durability within this bound, off the ack path).
    #[arg(long)]
    pub sync_interval_ms: Option<u64>,
}

/// `--api` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApiArg {
    /// `Wal::append` and a blocking wait on the ticket.
    Append,
    /// `ringwal::channel`: send, and read acknowledgements off a channel.
    Channel,
}

impl ApiArg {
    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ApiArg::Append => "append",
            ApiArg::Channel => "channel",
        }
    }
}

/// `--sync-method` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SyncMethodArg {
    /// One write with RWF_DSYNC.
    Dsync,
    /// A plain write linked to an fdatasync.
    Fdatasync,
}

impl SyncMethodArg {
    pub(crate) fn method(self) -> ringwal::SyncMethod {
        match self {
            SyncMethodArg::Dsync => ringwal::SyncMethod::Dsync,
            SyncMethodArg::Fdatasync => ringwal::SyncMethod::WriteThenFdatasync,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SyncMethodArg::Dsync => "dsync",
            SyncMethodArg::Fdatasync => "fdatasync",
        }
    }
}

/// `--level` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LevelArg {
    /// Sequenced and in the log's memory.
    Accepted,
    /// Written to the file.
    Written,
    /// On stable storage.
    Durable,
}

impl LevelArg {
    /// The library level.
    pub fn level(self) -> Level {
        match self {
            LevelArg::Accepted => Level::Accepted,
            LevelArg::Written => Level::Written,
            LevelArg::Durable => Level::Durable,
        }
    }

    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LevelArg::Accepted => "accepted",
            LevelArg::Written => "written",
            LevelArg::Durable => "durable",
        }
    }
}

/// `--backend` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendArg {
    /// io_uring (Linux).
    Uring,
    /// One blocking I/O thread.
    Threaded,
}

impl BackendArg {
    /// The library backend.
    pub fn backend(self) -> Backend {
        match self {
            BackendArg::Uring => Backend::Uring,
            BackendArg::Threaded => Backend::Threaded,
        }
    }

    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendArg::Uring => "uring",
            BackendArg::Threaded => "threaded",
        }
    }

    /// The backend `Config::default()` picks on this platform.
    pub fn platform_default() -> BackendArg {
        if cfg!(target_os = "linux") {
            BackendArg::Uring
        } else {
            BackendArg::Threaded
        }
    }
}

/// A failure to report: printed as `ringwal: <message>`, exit status 2.
#[derive(Debug)]
pub(crate) struct Failure(String, bool);

impl Failure {
    /// A failure with this message.
    pub fn msg(m: impl Into<String>) -> Failure {
        Failure(m.into(), false)
    }

    /// An I/O failure on something that is not a path (stdin, stdout).
    pub fn io(what: &str, e: io::Error) -> Failure {
        let pipe = e.kind() == io::ErrorKind::BrokenPipe;
        Failure(format!("{what}: {e}"), pipe)
    }

    /// True when the failure is a write to a closed pipe, as when the
    /// output of `ringwal cat` goes to `head`.
    pub fn is_broken_pipe(&self) -> bool {
        self.1
    }
}

impl From<ringwal::Error> for Failure {
    fn from(e: ringwal::Error) -> Failure {
        Failure(e.to_string(), false)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The contract is one line on stderr, whatever the message holds.
        let mut parts = self.0.lines().map(str::trim).filter(|l| !l.is_empty());
        if let Some(first) = parts.next() {
            f.write_str(first)?;
        }
        for p in parts {
            write!(f, "; {p}")?;
        }
        Ok(())
    }
}

/// What a command returns: its exit status, or a failure to report.
pub(crate) type CmdResult = Result<ExitCode, Failure>;

/// Parse the arguments, run the command, and turn the outcome into an
/// exit status (0 ok, 1 verify found damage, 2 any error).
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_failure(e),
    };
    let result = match cli.command {
        Command::Append(a) => append::run(a),
        Command::Cat(a) => inspect::cat(a),
        Command::Dump(a) => inspect::dump(a),
        Command::Verify(a) => inspect::verify(a),
        Command::Stat(a) => inspect::stat(a),
        Command::Bench(a) => bench::run(a),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("ringwal: {f}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// `--help` and `--version` print as clap renders them and succeed; every
/// other parse error becomes one line on stderr and status 2.
fn parse_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!(
                "ringwal: a command is required: append, cat, dump, verify, stat or bench \
                 (see 'ringwal --help')"
            );
            ExitCode::from(EXIT_ERROR)
        }
        _ => {
            // clap's first paragraph is the message (with details such as
            // the missing argument or the possible values on its following
            // lines); usage and tips come after a blank line.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            let message = if message.is_empty() {
                "invalid arguments"
            } else {
                message
            };
            eprintln!("ringwal: {message} (see 'ringwal --help')");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
