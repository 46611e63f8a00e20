//! Failures and exit statuses: what a command's outcome becomes on
//! stderr and in `$?`. Scripts branch on the status, so every value is
//! documented in `ringwal --help` ([`EXIT_STATUS`]) and pinned by tests.

use std::fmt;
use std::io;
use std::process::ExitCode;

/// The command did what was asked (`verify`: the log is consistent).
pub(crate) const OK: u8 = 0;
/// Damage found: corruption, a gap between segments, lost records.
pub(crate) const DAMAGED: u8 = 1;
/// Bad arguments (clap's own status), no log where one was named, or any
/// error without a status of its own.
pub(crate) const USAGE: u8 = 2;
/// Another writer holds the log's lock: retry once it has closed.
pub(crate) const LOCKED: u8 = 3;
/// An I/O error, or the file system is full.
pub(crate) const IO: u8 = 4;

/// The "EXIT STATUS" section of `ringwal --help`.
pub(crate) const EXIT_STATUS: &str = "\
EXIT STATUS:
  0  Success. verify: the log is consistent (a torn tail is not damage).
  1  Damage found: verify or recover --dry-run found corruption, a gap
     between segments or lost records; a command that opens the log
     (append, recover --apply, checkpoint, import) refused it for that;
     or a read met corrupt data.
  2  Usage error: bad arguments, no log in DIR (or none of --node), a
     path that does not exist or is not a directory, a read below the
     oldest LSN kept (gap), a missing or wrong --key-file; and any other
     error.
  3  The log is locked by another writer (the message names its process
     id when it can be read): retry once that writer has closed.
  4  I/O error, the file system is full, or the log is at its
     --max-log-bytes limit and no checkpoint made room in time.";

// Every status above is a distinct value.
const _: () = assert!(OK != DAMAGED && DAMAGED != USAGE && USAGE != LOCKED && LOCKED != IO);

/// A failure to report: printed as `ringwal: <message>` (one line),
/// ending the process with its status.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    code: u8,
    broken_pipe: bool,
}

impl Failure {
    /// A failure with this message and status 2.
    pub fn msg(m: impl Into<String>) -> Failure {
        Failure {
            message: m.into(),
            code: USAGE,
            broken_pipe: false,
        }
    }

    /// An I/O failure on something that is not a path (stdin, stdout):
    /// status 4.
    pub fn io(what: &str, e: io::Error) -> Failure {
        Failure {
            message: format!("{what}: {e}"),
            code: IO,
            broken_pipe: e.kind() == io::ErrorKind::BrokenPipe,
        }
    }

    /// A failure of opening a log for writing: damage that keeps it from
    /// opening (`Corrupt`, `Gap`, `Lost`) is status 1 here, where a `Gap`
    /// can only mean a missing segment; otherwise as [`From<Error>`].
    pub fn open(e: ringwal::Error) -> Failure {
        let damaged = matches!(
            e,
            ringwal::Error::Corrupt { .. }
                | ringwal::Error::Gap { .. }
                | ringwal::Error::Lost { .. }
        );
        let mut f = Failure::from(e);
        if damaged {
            f.code = DAMAGED;
        }
        f
    }

    /// The exit status this failure ends the process with.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// True when the failure is a write to a closed pipe, as when the
    /// output of `ringwal cat` goes to `head`.
    pub fn is_broken_pipe(&self) -> bool {
        self.broken_pipe
    }
}

impl From<ringwal::Error> for Failure {
    /// The status of a library error: `Locked` 3; `Io` (but a path that
    /// does not exist, 2), `NoSpace` and `Poisoned` (an earlier I/O
    /// failure) 4; `Corrupt` and `Lost` 1; everything else, `Gap` of a
    /// read below the oldest LSN included, 2.
    fn from(e: ringwal::Error) -> Failure {
        use ringwal::Error as E;
        let code = match &e {
            E::Locked { .. } => LOCKED,
            E::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => USAGE,
            E::Io { .. } | E::NoSpace { .. } | E::Poisoned { .. } | E::LogFull { .. } => IO,
            E::Corrupt { .. } | E::Lost { .. } => DAMAGED,
            _ => USAGE,
        };
        // The library's messages name the path and leave the OS error to
        // `source()`: an operator needs both, on the one line.
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message.push_str(&format!(": {c}"));
            cause = c.source();
        }
        Failure {
            message,
            code,
            broken_pipe: false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The contract is one line on stderr, whatever the message holds.
        let mut parts = self
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty());
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

/// The exit status of a command's outcome, printing a failure first.
pub(crate) fn report(result: CmdResult) -> ExitCode {
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`ringwal stat --json | head`):
        // it has what it wanted.
        Err(f) if f.is_broken_pipe() => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("ringwal: {f}");
            ExitCode::from(f.code())
        }
    }
}

/// `--help` and `--version` print as clap renders them and succeed; every
/// other parse error becomes one line on stderr and status 2: clap's
/// message, then its tips (`a similar subcommand exists: 'cat'`), then a
/// pointer to `--help`.
pub(crate) fn parse_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!(
                "ringwal: a command is required: append, cat, dump, verify, stat, recover, \
                 checkpoint, import, bench, completions or man (see 'ringwal --help')"
            );
            ExitCode::from(USAGE)
        }
        _ => {
            eprintln!("ringwal: {} (see 'ringwal --help')", parse_message(&e));
            ExitCode::from(USAGE)
        }
    }
}

/// clap's rendering as one line. Its first paragraph is the message (with
/// details such as the missing argument or the possible values on its
/// following lines); later paragraphs are tips, the usage and the pointer
/// to `--help`, of which only the tips are kept.
fn parse_message(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut paragraphs: Vec<Vec<&str>> = vec![Vec::new()];
    for line in rendered.lines().map(str::trim) {
        match (line.is_empty(), paragraphs.last_mut()) {
            (true, Some(p)) if p.is_empty() => {}
            (true, _) => paragraphs.push(Vec::new()),
            (false, Some(p)) => p.push(line),
            (false, None) => unreachable!("paragraphs is never empty"),
        }
    }
    let mut parts = paragraphs.into_iter().filter(|p| !p.is_empty());
    let first = parts.next().map(|p| p.join(" ")).unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(&first);
    let mut message = if first.is_empty() {
        "invalid arguments".to_string()
    } else {
        first.to_string()
    };
    for p in parts.filter(|p| p[0].starts_with("tip:")) {
        for tip in p {
            message.push_str("; ");
            message.push_str(tip);
        }
    }
    message
}
