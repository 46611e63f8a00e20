//! Failures and exit statuses: what a command's outcome becomes on
//! stderr, on stdout (`--json`) and in `$?`. Scripts branch on the
//! status and on the kind, so both come from one table, [`TABLE`]: the
//! `EXIT STATUS` section of `ringwal --help` and of the manual page is
//! rendered from it, every failure is classified into one of its rows,
//! and the tests hold the binary to it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What went wrong, as a script can act on it: the `kind` of a `--json`
/// error object. Each has exactly one row in [`TABLE`], which gives its
/// exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Corrupt,
    Gap,
    Lost,
    Usage,
    NoLog,
    Released,
    Key,
    Input,
    Config,
    NotFound,
    Other,
    Locked,
    Io,
    NoSpace,
    LogFull,
    Poisoned,
    ArchiveDamaged,
    ArchiveRefused,
    ArchiveUnreachable,
    NoArchive,
}

/// One row of the exit-status table: a kind of outcome, its status, and
/// when it happens.
pub(crate) struct Row {
    /// `None` for success (no failure has it).
    pub kind: Option<Kind>,
    /// The kind's name in `--json` error objects and in the help text.
    pub name: &'static str,
    pub status: u8,
    pub when: &'static str,
}

/// Every outcome of every command, by exit status. The one source of the
/// statuses: [`Kind::status`], the help text and the manual page read it.
pub(crate) const TABLE: &[Row] = &[
    Row {
        kind: None,
        name: "ok",
        status: 0,
        when: "Success. verify: the log is consistent (a torn tail is not damage); \
               stat: its headers and manifest show nothing wrong; recover --dry-run: \
               the open or the point-in-time recovery it shows can be done.",
    },
    Row {
        kind: Some(Kind::Corrupt),
        name: "corrupt",
        status: 1,
        when: "Damaged data no crash explains: a bad frame, segment header or manifest, \
               a file under a segment name that is no segment of this log.",
    },
    Row {
        kind: Some(Kind::Gap),
        name: "gap",
        status: 1,
        when: "LSNs missing from the log: a segment missing before, between or after the others.",
    },
    Row {
        kind: Some(Kind::Lost),
        name: "lost",
        status: 1,
        when: "Acknowledged records missing: the log ends below the LSN its manifest says \
               was durable (a segment cut short).",
    },
    Row {
        kind: Some(Kind::ArchiveDamaged),
        name: "archive-damaged",
        status: 1,
        when: "An archive object is missing or is not what the archive manifest says \
               (length, CRC, frames); the message names the object.",
    },
    Row {
        kind: Some(Kind::Usage),
        name: "usage",
        status: 2,
        when: "Bad arguments (cat --since with neither a duration nor an RFC 3339 time, \
               checkpoint --up-to past the end of the log without --force), \
               or arguments that contradict each other (cat --from 5 --to 3, \
               --since after --until).",
    },
    Row {
        kind: Some(Kind::NoLog),
        name: "no-log",
        status: 2,
        when: "No log of the node at DIR: the path does not exist, is not a directory, \
               or holds no segment of the node (--node).",
    },
    Row {
        kind: Some(Kind::Released),
        name: "released",
        status: 2,
        when: "A read of LSNs the log no longer holds: below the oldest LSN kept \
               (checkpointed away), given up by a point-in-time recovery, or released \
               while cat --follow was on its way to them.",
    },
    Row {
        kind: Some(Kind::Key),
        name: "key",
        status: 2,
        when: "The payloads are encrypted and --key-file is missing, not their key, or unusable.",
    },
    Row {
        kind: Some(Kind::Input),
        name: "input",
        status: 2,
        when: "stdin holds what cannot be appended: a line import cannot parse, \
               a record over the size limit.",
    },
    Row {
        kind: Some(Kind::Config),
        name: "config",
        status: 2,
        when: "A setting out of range, or a backend this kernel refuses.",
    },
    Row {
        kind: Some(Kind::NotFound),
        name: "not-found",
        status: 2,
        when: "A file named on the command line (--key-file) does not exist.",
    },
    Row {
        kind: Some(Kind::Other),
        name: "other",
        status: 2,
        when: "Any other error.",
    },
    Row {
        kind: Some(Kind::NoArchive),
        name: "no-archive",
        status: 2,
        when: "No archive of the node at the URL: the store holds no archive manifest there \
               (check the URL and --node).",
    },
    Row {
        kind: Some(Kind::ArchiveRefused),
        name: "archive-refused",
        status: 2,
        when: "The object store refused the credentials or holds another log's archive, \
               or restore's DIR already holds a log.",
    },
    Row {
        kind: Some(Kind::Locked),
        name: "locked",
        status: 3,
        when: "Another writer holds the log's lock (the message names its process id): \
               retry once it has closed. recover --dry-run says so too.",
    },
    Row {
        kind: Some(Kind::Io),
        name: "io",
        status: 4,
        when: "An I/O error.",
    },
    Row {
        kind: Some(Kind::NoSpace),
        name: "no-space",
        status: 4,
        when: "The file system is full.",
    },
    Row {
        kind: Some(Kind::LogFull),
        name: "log-full",
        status: 4,
        when: "The log is at its --max-log-bytes limit and no checkpoint made room in time.",
    },
    Row {
        kind: Some(Kind::Poisoned),
        name: "poisoned",
        status: 4,
        when: "An earlier I/O failure stopped the log.",
    },
    Row {
        kind: Some(Kind::ArchiveUnreachable),
        name: "archive-unreachable",
        status: 4,
        when: "The object store did not answer: retry once it is back.",
    },
];

/// The status of damage found, by a check that reports it (`verify`,
/// `stat`, `recover --dry-run`) or by anything that met it.
pub(crate) const DAMAGED: u8 = Kind::Corrupt.status();

impl Kind {
    /// This kind's row of [`TABLE`].
    pub const fn row(self) -> &'static Row {
        let mut i = 0;
        while i < TABLE.len() {
            if let Some(k) = TABLE[i].kind
                && k as u8 == self as u8
            {
                return &TABLE[i];
            }
            i += 1;
        }
        panic!("every kind has a row in TABLE")
    }

    /// The exit status of a failure of this kind.
    pub const fn status(self) -> u8 {
        self.row().status
    }

    /// The name in `--json` error objects.
    pub fn name(self) -> &'static str {
        self.row().name
    }
}

/// The `EXIT STATUS` section of `ringwal --help`, from [`TABLE`]: each
/// status once, then its kinds, each with when it happens.
pub(crate) fn help_text() -> String {
    let mut s = String::from(
        "EXIT STATUS (and the \"kind\" of the error object that --json prints on stdout):",
    );
    let mut last = None;
    for row in TABLE {
        let status = if last == Some(row.status) {
            "   ".to_string()
        } else {
            format!("{:<3}", row.status)
        };
        last = Some(row.status);
        let mut line = format!("  {status}{}: ", row.name);
        let indent = " ".repeat(7);
        for word in row.when.split_whitespace() {
            if line.len() + word.len() > 78 {
                s.push('\n');
                s.push_str(line.trim_end());
                line = indent.clone();
            }
            line.push_str(word);
            line.push(' ');
        }
        s.push('\n');
        s.push_str(line.trim_end());
    }
    s
}

/// The `EXIT STATUS` section of the manual page (roff), from [`TABLE`].
pub(crate) fn man_section() -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('-', "\\-");
    let mut s = String::from(
        ".SH \"EXIT STATUS\"\nEach failure has a kind, which \\fB\\-\\-json\\fR prints in its error object.\n",
    );
    for row in TABLE {
        s.push_str(&format!(
            ".TP\n\\fB{}\\fR {}\n{}\n",
            row.status,
            esc(row.name),
            esc(row.when)
        ));
    }
    s
}

/// A failure to report: `ringwal: <message>` (one line) on stderr, with
/// `--json` also one error object on stdout, ending the process with its
/// kind's status.
#[derive(Debug)]
pub(crate) struct Failure {
    kind: Kind,
    message: String,
    /// The file or directory it is about, if any.
    path: Option<PathBuf>,
    /// The byte offset in `path` it is at, if any.
    offset: Option<u64>,
    broken_pipe: bool,
}

impl Failure {
    /// A failure of `kind` with this message.
    pub fn new(kind: Kind, m: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: m.into(),
            path: None,
            offset: None,
            broken_pipe: false,
        }
    }

    /// Bad or contradictory arguments: status 2.
    pub fn usage(m: impl Into<String>) -> Failure {
        Failure::new(Kind::Usage, m)
    }

    /// A failure of no kind of its own: status 2.
    pub fn other(m: impl Into<String>) -> Failure {
        Failure::new(Kind::Other, m)
    }

    /// No log of `node` at `dir` (`None`: of any node): the one "no log
    /// here" message, whatever the reason, with the reason after it when
    /// there is more to say than that (no such directory, not a
    /// directory, the nodes that are there). Cost: a `stat` and a
    /// `readdir` of `dir`, on this error path only.
    pub fn no_log(dir: &Path, node: Option<u32>) -> Failure {
        let mut m = match node {
            Some(n) => ringwal::Error::NoLog {
                dir: dir.to_path_buf(),
                node: n,
            }
            .to_string(),
            None => format!("{}: no log here", dir.display()),
        };
        let why = match std::fs::metadata(dir) {
            Err(_) => Some("no such directory".to_string()),
            Ok(md) if !md.is_dir() => Some("not a directory".to_string()),
            Ok(_) => {
                let others: Vec<String> = ringwal::verify::nodes(dir)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|&n| Some(n) != node)
                    .map(|n| n.to_string())
                    .collect();
                (!others.is_empty()).then(|| format!("nodes found: {}", others.join(", ")))
            }
        };
        if let Some(why) = why {
            m.push_str(&format!(" ({why})"));
        }
        Failure::new(Kind::NoLog, m).at(dir, None)
    }

    /// An I/O failure on something that is not a path (stdin, stdout):
    /// status 4.
    pub fn io(what: &str, e: io::Error) -> Failure {
        let mut f = Failure::new(Kind::Io, format!("{what}: {e}"));
        f.broken_pipe = e.kind() == io::ErrorKind::BrokenPipe;
        f
    }

    /// The same failure, about `path` at `offset`.
    pub fn at(mut self, path: &Path, offset: Option<u64>) -> Failure {
        self.path = Some(path.to_path_buf());
        self.offset = offset;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// True when the failure is a write to a closed pipe, as when the
    /// output of `ringwal cat` goes to `head`.
    pub fn is_broken_pipe(&self) -> bool {
        self.broken_pipe
    }

    /// The error object `--json` prints:
    /// `{"error": {"kind", "status", "path", "offset", "message"}}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "kind": self.kind.name(),
                "status": self.kind.status(),
                "path": self.path.as_ref().map(|p| p.display().to_string()),
                "offset": self.offset,
                "message": self.to_string(),
            }
        })
    }
}

/// The kind of an archive failure.
fn archive_kind(p: &ringwal::ArchiveProblem) -> Kind {
    use ringwal::ArchiveProblem as P;
    match p {
        P::Missing | P::Damaged(_) => Kind::ArchiveDamaged,
        P::Unreachable => Kind::ArchiveUnreachable,
        P::NoArchive => Kind::NoArchive,
        _ => Kind::ArchiveRefused,
    }
}

/// What to run next after damage (`corrupt`, `gap`, `lost`) found in a
/// file of a log: the dry run of the recovery that would repair it, for
/// the log directory the file is in and its node, which shows what an
/// open would cut or refuse and changes nothing. `None` for any other
/// kind, or a path that names no log's file or directory.
fn next_step(kind: Kind, path: &Path) -> Option<String> {
    if !matches!(kind, Kind::Corrupt | Kind::Gap | Kind::Lost) {
        return None;
    }
    let name = path.file_name()?.to_str()?;
    let node = ringwal::format::parse_segment_file_name(name)
        .map(|(node, _)| node)
        .or_else(|| name.strip_suffix(".manifest")?.parse().ok());
    let (dir, node) = match node {
        Some(node) => (path.parent()?, node),
        None if path.is_dir() => (path, 1),
        None => return None,
    };
    Some(recover_hint(dir, node))
}

/// The next step after damage in `dir`'s log of `node`, as every damage
/// message ends: the dry run of the recovery that would repair it.
pub(crate) fn recover_hint(dir: &Path, node: u32) -> String {
    let node = if node == 1 {
        String::new()
    } else {
        format!(" --node {node}")
    };
    format!(
        "to see what recovery would do, run: ringwal recover {} --dry-run{node}",
        dir.display()
    )
}

impl From<ringwal::Error> for Failure {
    /// The kind of a library error (see [`TABLE`] for the statuses).
    fn from(e: ringwal::Error) -> Failure {
        use ringwal::Error as E;
        if let E::NoLog { dir, node } = &e {
            return Failure::no_log(dir, Some(*node));
        }
        let (kind, path, offset) = match &e {
            E::Locked { path, .. } => (Kind::Locked, Some(path), None),
            E::NoLog { dir, .. } => (Kind::NoLog, Some(dir), None),
            E::Corrupt { file, offset, .. } => (Kind::Corrupt, Some(file), Some(*offset)),
            E::Key { file, .. } => (Kind::Key, Some(file), None),
            E::LogFull { dir, .. } => (Kind::LogFull, Some(dir), None),
            E::BackendUnavailable { .. } | E::InvalidConfig(_) => (Kind::Config, None, None),
            E::Gap { file, .. } => (Kind::Gap, Some(file), None),
            E::Released { file, .. } => (Kind::Released, Some(file), None),
            E::Lost { file, .. } => (Kind::Lost, Some(file), None),
            E::GivenUp { file, .. } => (Kind::Released, Some(file), None),
            E::Poisoned { .. } => (Kind::Poisoned, None, None),
            E::TooLarge { .. } => (Kind::Input, None, None),
            E::PastEnd { .. } => (Kind::Usage, None, None),
            E::NoSpace { path } => (Kind::NoSpace, Some(path), None),
            E::Io { path, source } if source.kind() == io::ErrorKind::NotFound => {
                (Kind::NotFound, Some(path), None)
            }
            E::Io { path, .. } => (Kind::Io, Some(path), None),
            E::Archive { problem, .. } => (archive_kind(problem), None, None),
            _ => (Kind::Other, None, None),
        };
        let path = path.cloned();
        // The library's messages name the path and leave the OS error to
        // `source()`: an operator needs both, on the one line.
        let mut message = e.chain().to_string();
        if let Some(next) = path.as_deref().and_then(|p| next_step(kind, p)) {
            message.push_str("; ");
            message.push_str(&next);
        }
        Failure {
            kind,
            message,
            path,
            offset,
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

/// The exit status of a command's outcome, printing a failure first: on
/// stderr always, and with `json` as one error object on stdout too.
pub(crate) fn report(result: CmdResult, json: bool) -> ExitCode {
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`ringwal stat --json | head`):
        // it has what it wanted.
        Err(f) if f.is_broken_pipe() => ExitCode::SUCCESS,
        Err(f) => {
            if json {
                use std::io::Write;
                let mut out = io::stdout().lock();
                let _ = writeln!(out, "{}", f.json()).and_then(|()| out.flush());
            }
            eprintln!("ringwal: {f}");
            ExitCode::from(f.kind().status())
        }
    }
}

/// `--help` and `--version` print as clap renders them and succeed; every
/// other parse error becomes one line on stderr and status 2 (with
/// `json`, an error object of kind `usage` on stdout too): clap's
/// message, then its tips (`a similar subcommand exists: 'cat'`), then a
/// pointer to the help of the command it was given (`help`, such as
/// `ringwal checkpoint --help`).
pub(crate) fn parse_failure(e: clap::Error, json: bool, help: &str) -> ExitCode {
    use clap::error::ErrorKind;
    let message = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            "a command is required: append, cat, dump, verify, stat, recover, checkpoint, \
             import, bench, completions or man (see 'ringwal --help')"
                .to_string()
        }
        _ => format!("{} (see '{help}')", parse_message(&e)),
    };
    report(Err(Failure::usage(message)), json)
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

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [Kind; 20] = [
        Kind::Corrupt,
        Kind::Gap,
        Kind::Lost,
        Kind::Usage,
        Kind::NoLog,
        Kind::Released,
        Kind::Key,
        Kind::Input,
        Kind::Config,
        Kind::NotFound,
        Kind::Other,
        Kind::Locked,
        Kind::Io,
        Kind::NoSpace,
        Kind::LogFull,
        Kind::Poisoned,
        Kind::ArchiveDamaged,
        Kind::ArchiveRefused,
        Kind::ArchiveUnreachable,
        Kind::NoArchive,
    ];

    #[test]
    fn every_kind_has_one_row_and_the_table_is_by_status() {
        for k in KINDS {
            let rows = TABLE.iter().filter(|r| r.kind == Some(k)).count();
            assert_eq!(rows, 1, "{k:?}");
        }
        assert_eq!(TABLE.len(), KINDS.len() + 1);
        assert!(TABLE.windows(2).all(|w| w[0].status <= w[1].status));
        let mut names: Vec<&str> = TABLE.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TABLE.len());
        assert_eq!((TABLE[0].kind, TABLE[0].status, DAMAGED), (None, 0, 1));
    }

    #[test]
    fn help_and_man_page_show_every_row() {
        let help = help_text();
        let man = man_section();
        for row in TABLE {
            assert!(help.contains(&format!("{}: ", row.name)), "{help}");
            assert!(man.contains(&row.name.replace('-', "\\-")), "{man}");
        }
        assert!(help.lines().all(|l| l.len() <= 80), "{help}");
    }
}
