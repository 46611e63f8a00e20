//! The exit-status contract, run as a user would meet it: every command
//! against every kind of trouble (a missing path, a file, an empty
//! directory, a wrong node, damage of each kind, a live writer, a
//! missing key, bad arguments), each checked for its status, its message
//! and (when it fails) that it changed nothing; the same failures as
//! `--json` error objects; and point-in-time recovery of a log every
//! strict open refuses. The damaged logs are built once and copied per
//! run.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{exit_statuses, p, run, segments};

use ringwal::{Config, Level, Wal};

const RECORDS: u64 = 3000;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// 64 KiB segments, so that 3000 small records take three of them.
fn small() -> Config {
    Config::builder()
        .segment_bytes(64 << 10)
        .max_record_bytes(4 << 10)
        .build()
}

/// A cleanly closed log of `RECORDS` records, "record N", on node 1.
fn base_log(dir: &Path) {
    let (wal, _) = Wal::open(dir, small()).unwrap();
    let mut last = None;
    for i in 1..=RECORDS {
        last = Some(wal.append(0, format!("record {i}").as_bytes()).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
}

/// The frame boundary in segment `file` nearest `near`: a cut there leaves
/// whole frames before it. Where frames fall depends on how the appends
/// happened to group into writes, so a fixed offset may fall inside one.
fn a_frame_boundary_near(file: &Path, near: u64) -> u64 {
    use ringwal::format::{self, Decoded, SegmentHeader};
    let bytes = std::fs::read(file).unwrap();
    let header = SegmentHeader::decode(&bytes).unwrap();
    let mut at = format::HEADER_BYTES;
    let mut best = at;
    while let Decoded::Frame(f) =
        format::decode_frame(&bytes[at..], header.salt, format::MAX_PAYLOAD)
    {
        at += f.len;
        if (at as u64).abs_diff(near) < (best as u64).abs_diff(near) {
            best = at;
        }
    }
    best as u64
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Every file under `path` but lock files, with its bytes; what a
/// refused command must leave as it was (a writer that takes the lock
/// writes its process id into the lock file, no part of the log).
fn snapshot(path: &Path) -> Vec<(String, Vec<u8>)> {
    if path.is_file() {
        return vec![(String::new(), std::fs::read(path).unwrap())];
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut v: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|e| e != "lock"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// The kinds of trouble, each a log (or a path) to run a command on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    MissingPath,
    AFile,
    EmptyDir,
    WrongNode,
    TruncatedNewest,
    TruncatedSealed,
    Garbage,
    ForeignShortFile,
    Locked,
    MissingKey,
    BadArguments,
}

const CASES: [Case; 11] = [
    Case::MissingPath,
    Case::AFile,
    Case::EmptyDir,
    Case::WrongNode,
    Case::TruncatedNewest,
    Case::TruncatedSealed,
    Case::Garbage,
    Case::ForeignShortFile,
    Case::Locked,
    Case::MissingKey,
    Case::BadArguments,
];

/// Every command the matrix runs, with the arguments after DIR.
const COMMANDS: [(&str, &[&str]); 10] = [
    ("append", &[]),
    ("cat", &[]),
    ("cat", &["--from", "2990"]),
    ("dump", &[]),
    ("verify", &[]),
    ("stat", &[]),
    ("recover", &["--dry-run"]),
    ("recover", &["--apply"]),
    ("checkpoint", &["--up-to", "1000"]),
    ("import", &[]),
];

/// What a run must give: its status and a piece of what it prints
/// (stdout or stderr).
struct Want {
    status: i32,
    says: &'static str,
}

const fn want(status: i32, says: &'static str) -> Want {
    Want { status, says }
}

const NO_LOG: &str = ": no log of node 1 here";
const LOST: &str = "acknowledged records lost: LSNs up to 3000 were durable";
const GAP: &str = "LSN gap";
const BAD_MAGIC: &str = "corrupt: segment header: bad magic";
const NO_SEGMENT: &str = "corrupt: a file of 6 bytes is no segment";
const LOCKED: &str = "locked by another writer, process ";
const NO_KEY: &str = "key id 1: no key with that id was given";
const BAD_ARG: &str = "unexpected argument '--bogus'";
const HOLDS: &str = "already holds LSNs";

/// The contract: what each command does in each case. `i` is the index
/// in [`COMMANDS`].
fn expected(case: Case, i: usize) -> Want {
    let (cmd, rest) = COMMANDS[i];
    let writer = matches!(cmd, "append" | "import");
    match case {
        Case::MissingPath | Case::EmptyDir if cmd == "append" => want(0, "1\n"),
        Case::MissingPath | Case::EmptyDir if cmd == "import" => want(0, "imported 1 record"),
        Case::MissingPath => want(2, "(no such directory)"),
        Case::AFile => want(2, "(not a directory)"),
        Case::EmptyDir if matches!(cmd, "verify" | "stat") => want(2, ": no log here\n"),
        Case::EmptyDir => want(2, NO_LOG),
        Case::WrongNode if cmd == "append" => want(0, "1\n"),
        Case::WrongNode if cmd == "import" => want(0, "imported 1 record"),
        Case::WrongNode => want(2, ": no log of node 2 here (nodes found: 1)"),
        Case::TruncatedNewest | Case::TruncatedSealed | Case::Garbage | Case::ForeignShortFile
            if cmd == "import" =>
        {
            want(2, HOLDS)
        }
        Case::TruncatedNewest => want(1, LOST),
        // Nothing from LSN 2990 on is damaged; stat reads no frame of an
        // older segment, but its size shows the cut: the same status.
        Case::TruncatedSealed if rest == ["--from", "2990"] => want(0, "record 3000\n"),
        Case::TruncatedSealed if cmd == "stat" => want(1, "LSN gap"),
        Case::TruncatedSealed => want(1, GAP),
        Case::Garbage => want(1, BAD_MAGIC),
        Case::ForeignShortFile => want(1, NO_SEGMENT),
        Case::Locked if cmd == "import" => want(2, HOLDS),
        Case::Locked if writer || cmd == "recover" || cmd == "checkpoint" => want(3, LOCKED),
        Case::Locked if cmd == "cat" && rest.is_empty() => want(0, "record 3000\n"),
        Case::Locked => want(0, ""),
        Case::MissingKey if cmd == "import" => want(2, HOLDS),
        Case::MissingKey if matches!(cmd, "append" | "cat" | "dump") => want(2, NO_KEY),
        Case::MissingKey if cmd == "verify" => want(0, "were not decrypted: no key was given"),
        Case::MissingKey if cmd == "checkpoint" => want(2, "is past the end of the log"),
        Case::MissingKey => want(0, ""),
        Case::BadArguments => want(2, BAD_ARG),
    }
}

/// The logs every case starts from, built once.
struct Fixtures {
    root: tempfile::TempDir,
}

impl Fixtures {
    fn build() -> Fixtures {
        let root = tempfile::tempdir().unwrap();
        let at = |n: &str| root.path().join(n);
        base_log(&at("base"));
        let newest = segments(&at("base")).pop().unwrap();
        let segs = segments(&at("base"));
        assert!(segs.len() >= 3, "{segs:?}");

        copy_dir(&at("base"), &at("truncated-newest"));
        let f = at("truncated-newest").join(newest.file_name().unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(8192)
            .unwrap();

        copy_dir(&at("base"), &at("truncated-sealed"));
        let f = at("truncated-sealed").join(segs[1].file_name().unwrap());
        let cut = a_frame_boundary_near(&f, 16 << 10);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(cut)
            .unwrap();

        copy_dir(&at("base"), &at("garbage"));
        let name = ringwal::format::segment_file_name(1, 9999);
        let noise: Vec<u8> = (0..64u32 << 10)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(at("garbage").join(name), noise).unwrap();

        copy_dir(&at("base"), &at("foreign-short"));
        let name = ringwal::format::segment_file_name(1, RECORDS + 1);
        std::fs::write(at("foreign-short").join(name), b"hello\n").unwrap();

        std::fs::write(at("key"), [7u8; 32]).unwrap();
        // Key files must be private to be accepted.
        std::fs::set_permissions(
            at("key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let lines: String = (1..=300).map(|i| format!("secret {i}\n")).collect();
        let o = run(
            &[
                "append",
                p(&at("encrypted")),
                "--key-file",
                p(&at("key")),
                "--segment-bytes",
                "65536",
                "--max-record-bytes",
                "4096",
            ],
            lines.as_bytes(),
        );
        assert!(o.status.success(), "{o:?}");
        std::fs::create_dir(at("empty")).unwrap();
        std::fs::write(at("a-file"), b"not a log").unwrap();
        Fixtures { root }
    }

    /// A fresh copy of the case's log (or path) under `scratch`, and the
    /// path to give the command.
    fn scratch(&self, case: Case, scratch: &Path) -> PathBuf {
        let from = |n: &str| self.root.path().join(n);
        let dir = scratch.join("log");
        match case {
            Case::MissingPath => return dir,
            Case::AFile => {
                std::fs::copy(from("a-file"), &dir).unwrap();
                return dir;
            }
            Case::EmptyDir => std::fs::create_dir(&dir).unwrap(),
            Case::WrongNode | Case::Locked | Case::BadArguments => copy_dir(&from("base"), &dir),
            Case::TruncatedNewest => copy_dir(&from("truncated-newest"), &dir),
            Case::TruncatedSealed => copy_dir(&from("truncated-sealed"), &dir),
            Case::Garbage => copy_dir(&from("garbage"), &dir),
            Case::ForeignShortFile => copy_dir(&from("foreign-short"), &dir),
            Case::MissingKey => copy_dir(&from("encrypted"), &dir),
        }
        dir
    }
}

/// The arguments of command `i` in `case` on `dir`, and its stdin.
fn args_of(case: Case, i: usize, dir: &Path, json: bool) -> (Vec<String>, Vec<u8>) {
    let (cmd, rest) = COMMANDS[i];
    let mut args = vec![cmd.to_string(), p(dir).to_string()];
    args.extend(rest.iter().map(|s| s.to_string()));
    if case == Case::WrongNode {
        args.extend(["--node".into(), "2".into()]);
    }
    if case == Case::MissingKey && rest == ["--from", "2990"] {
        // Inside the smaller encrypted log.
        args[3] = "290".into();
    }
    if case == Case::BadArguments {
        args.push("--bogus".into());
    }
    if json {
        args.push("--json".into());
    }
    let input: &[u8] = match cmd {
        "append" => b"x\n",
        "import" => b"{\"lsn\":1,\"stream\":0,\"payload_b64\":\"eA==\"}\n",
        _ => b"",
    };
    (args, input.to_vec())
}

/// Run command `i` in `case` on a fresh copy; with a live writer on it
/// for `Locked`.
fn run_case(fx: &Fixtures, case: Case, i: usize, cell: &Path, json: bool) -> (Output, PathBuf) {
    std::fs::create_dir_all(cell).unwrap();
    let dir = fx.scratch(case, cell);
    let (args, input) = args_of(case, i, &dir, json);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let writer = (case == Case::Locked).then(|| Wal::open(&dir, small()).unwrap().0);
    let before = snapshot(&dir);
    let o = run(&args, &input);
    // A live writer changes its log itself (spares, the manifest).
    if o.status.code() != Some(0) && case != Case::Locked {
        assert!(
            snapshot(&dir) == before,
            "{case:?} {args:?}: a refused command changed the log"
        );
        assert_eq!(dir.exists(), !before.is_empty() || case == Case::EmptyDir);
    }
    if let Some(w) = writer {
        w.close().unwrap();
    }
    (o, dir)
}

#[test]
fn every_command_meets_every_kind_of_trouble_with_its_status_and_message() {
    let fx = Fixtures::build();
    let cells = fx.root.path().join("cells");
    let mut failures = Vec::new();
    let mut n = 0;
    for case in CASES {
        for (i, cmd) in COMMANDS.iter().enumerate() {
            n += 1;
            let (o, _) = run_case(&fx, case, i, &cells.join(n.to_string()), false);
            let w = expected(case, i);
            let (out, err) = text(&o);
            let status = o.status.code().unwrap_or(-1);
            let says = out.contains(w.says) || err.contains(w.says);
            // A failure is exactly one line on stderr, `ringwal: ...`.
            let one_line = status == 0
                || matches!(cmd.0, "verify" | "stat" | "recover") && !out.is_empty()
                || (err.lines().count() == 1 && err.starts_with("ringwal: "));
            if status != w.status || !says || !one_line {
                failures.push(format!(
                    "{case:?} x {cmd:?}: want {} {:?}, got {status}\n  stdout: {}\n  stderr: {}",
                    w.status,
                    w.says,
                    out.lines().take(3).collect::<Vec<_>>().join(" | "),
                    err.trim_end()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--json`: a command that fails prints one error object on stdout, the
/// same kind and status for every command; `verify`, `stat` and `recover`
/// name the damage in their documents instead.
#[test]
fn json_failures_are_one_error_object_with_kind_status_path_offset_and_message() {
    let fx = Fixtures::build();
    let cells = fx.root.path().join("cells");
    let mut n = 0;
    let help = exit_statuses();
    for (case, kind, status) in [
        (Case::MissingPath, "no-log", 2),
        (Case::AFile, "no-log", 2),
        (Case::TruncatedNewest, "lost", 1),
        (Case::Garbage, "corrupt", 1),
        (Case::BadArguments, "usage", 2),
    ] {
        for (i, &cmd) in COMMANDS.iter().enumerate() {
            n += 1;
            let (o, dir) = run_case(&fx, case, i, &cells.join(n.to_string()), true);
            let (out, _) = text(&o);
            let expect = expected(case, i);
            assert_eq!(
                o.status.code(),
                Some(expect.status),
                "{case:?} {cmd:?}: {o:?}"
            );
            if expect.says == HOLDS || expect.status == 0 {
                continue;
            }
            if case == Case::Garbage && cmd == ("cat", &["--from", "2990"][..]) {
                // The records first, then the error that ended them.
                assert_eq!(out.lines().count(), 12, "{out}");
            }
            let documents = matches!(cmd, ("verify" | "stat", _) | ("recover", ["--dry-run"]));
            // Damage they find is in their documents; a failure to run
            // at all is an error object, as for every command.
            if documents && expect.status == 1 {
                let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
                let reason = doc["problems"][0]["reason"].as_str();
                assert!(
                    reason.is_some_and(|r| r.contains(expect.says)),
                    "{cmd:?}: {doc}"
                );
                continue;
            }
            let last = out
                .lines()
                .last()
                .unwrap_or_else(|| panic!("{case:?} {cmd:?}: no stdout"));
            let v: serde_json::Value = serde_json::from_str(last).unwrap();
            let e = &v["error"];
            assert_eq!(e["kind"], kind, "{case:?} {cmd:?}: {v}");
            assert_eq!(e["status"], status, "{case:?} {cmd:?}: {v}");
            // The status the help text gives the kind.
            assert_eq!(help.get(kind), Some(&status), "{kind}: {help:?}");
            assert!(e["message"].as_str().unwrap().contains(expect.says), "{v}");
            match case {
                Case::AFile | Case::MissingPath => assert_eq!(e["path"], p(&dir), "{v}"),
                Case::BadArguments => assert!(e["path"].is_null(), "{v}"),
                _ => assert!(e["path"].as_str().unwrap().ends_with(".wal"), "{v}"),
            }
            let offset = e["offset"].as_u64();
            assert_eq!(offset.is_some(), case == Case::Garbage, "{v}");
        }
    }
}

/// A sealed segment cut short where its frames were is damage to `stat`
/// as to `verify`, found the same way (its records end below the next
/// segment's base, named there): one log, one status and one problem,
/// with text output or JSON, the status the table gives damage.
#[test]
fn stat_and_verify_give_a_sealed_segment_cut_short_one_status() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    base_log(&dir);
    let segs = segments(&dir);
    assert!(segs.len() >= 3, "{segs:?}");
    let sealed = &segs[0];
    let len = std::fs::metadata(sealed).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(sealed)
        .unwrap()
        .set_len(len - 3 * 4096)
        .unwrap();
    let damaged = exit_statuses()["corrupt"];
    let mut named = Vec::new();
    for cmd in ["verify", "stat"] {
        let o = run(&[cmd, p(&dir)], b"");
        assert_eq!(o.status.code(), Some(damaged), "{cmd}: {o:?}");
        let o = run(&[cmd, p(&dir), "--json"], b"");
        assert_eq!(o.status.code(), Some(damaged), "{cmd} --json: {o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let problems = v["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{cmd}: {v}");
        // A cut inside a frame is found in the sealed segment, one at a
        // frame boundary where the next segment's base shows the gap.
        let file = problems[0]["file"].as_str().unwrap().to_string();
        assert!(
            file == p(sealed) || file == p(&segs[1]),
            "{cmd} names another file: {v}"
        );
        named.push((file, problems[0]["reason"].clone()));
    }
    assert_eq!(
        named[0], named[1],
        "verify and stat describe the damage differently"
    );
    // The newest segment's file may end early (a torn tail is no damage):
    // neither command calls that damage.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    base_log(&dir);
    let newest = segments(&dir).pop().unwrap();
    let len = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    for cmd in ["verify", "stat"] {
        let o = run(&[cmd, p(&dir)], b"");
        assert_eq!(o.status.code(), Some(0), "{cmd}: {o:?}");
    }
}

#[test]
fn help_and_man_page_list_every_kind_under_one_status() {
    let kinds = exit_statuses();
    for (kind, status) in [
        ("ok", 0),
        ("corrupt", 1),
        ("gap", 1),
        ("lost", 1),
        ("usage", 2),
        ("no-log", 2),
        ("released", 2),
        ("key", 2),
        ("input", 2),
        ("locked", 3),
        ("io", 4),
        ("no-space", 4),
        ("log-full", 4),
    ] {
        assert_eq!(kinds.get(kind), Some(&status), "{kind}: {kinds:?}");
    }
    let (man, _) = text(&run(&["man"], b""));
    let section = man
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .expect("a man section");
    for (kind, status) in &kinds {
        let entry = format!(".TP\n\\fB{status}\\fR {}\n", kind.replace('-', "\\-"));
        assert!(section.contains(&entry), "{entry:?} not in {section}");
    }
}

#[test]
fn contradictory_bounds_are_a_usage_error() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    base_log(&dir);
    for cmd in ["cat", "dump"] {
        let o = run(&[cmd, p(&dir), "--from", "5", "--to", "3"], b"");
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let (out, err) = text(&o);
        assert!(out.is_empty(), "{out}");
        assert_eq!(
            err,
            "ringwal: --to 3 is below --from 5: there is nothing to print\n"
        );
    }
    // A single record is no contradiction.
    let o = run(&["cat", p(&dir), "--from", "5", "--to", "5"], b"");
    assert_eq!(text(&o).0, "record 5\n", "{o:?}");
}

/// `stat` counts what the headers say: garbage under a segment name is
/// reported by file and not counted; the numbers say where they are from.
#[test]
fn stat_counts_what_the_headers_say_and_reports_the_rest() {
    let fx = Fixtures::build();
    let dir = fx.scratch(Case::Garbage, fx.root.path());
    let o = run(&["stat", p(&dir), "--json"], b"");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["nodes"][0]["records"], RECORDS, "{v}");
    assert_eq!(v["nodes"][0]["last_lsn"], RECORDS, "{v}");
    assert_eq!(v["nodes"][0]["checked"], "headers", "{v}");
    assert_eq!(v["nodes"][0]["durable_lsn"], RECORDS, "{v}");
    let rows = v["segments"].as_array().unwrap();
    let n = segments(&dir).len() - 1;
    assert_eq!(rows.len(), n, "the garbage is no segment: {v}");
    let from: Vec<&str> = rows
        .iter()
        .map(|r| r["last_lsn_from"].as_str().unwrap())
        .collect();
    let mut want = vec!["next-header"; n - 1];
    want.push("walk");
    assert_eq!(from, want);
    let problem = &v["problems"][0];
    let junk = dir.join(ringwal::format::segment_file_name(1, 9999));
    assert_eq!(problem["file"], p(&junk), "{v}");
    assert_eq!(problem["reason"], "corrupt: segment header: bad magic");
    let (out, _) = text(&run(&["stat", p(&dir)], b""));
    assert!(out.contains("LSN 1..=3000 (3000 records)"), "{out}");
    assert!(out.contains("payloads were not checked"), "{out}");
}

#[test]
fn import_is_all_or_nothing() {
    let root = tempfile::tempdir().unwrap();
    let good = "{\"lsn\":1,\"payload_b64\":\"eA==\"}\n";
    let input = format!("{good}{good}not json\n{good}");
    // Into a new directory: nothing is created.
    let fresh = root.path().join("new");
    let o = run(&["import", p(&fresh)], input.as_bytes());
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(text(&o).1.contains("stdin line 3: "), "{o:?}");
    assert!(
        !fresh.exists(),
        "a failed import left {} behind",
        fresh.display()
    );
    // A record over the size limit is found before anything is written too.
    let big = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        vec![1u8; (1 << 20) + 1],
    );
    let o = run(
        &["import", p(&fresh)],
        format!("{good}{{\"payload_b64\":\"{big}\"}}\n").as_bytes(),
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(text(&o).1.contains("stdin line 2: a payload of"), "{o:?}");
    assert!(!fresh.exists());
    // Into an existing empty log: it stays as it was.
    let empty = root.path().join("empty");
    assert!(run(&["append", p(&empty)], b"").status.success());
    let before = snapshot(&empty);
    let o = run(&["import", p(&empty), "--json"], input.as_bytes());
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "input", "{v}");
    assert!(
        snapshot(&empty) == before,
        "a failed import changed the log"
    );
    // And a good input goes in whole.
    let o = run(&["import", p(&empty), "--json"], good.repeat(3).as_bytes());
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["imported"].as_u64(), v["last_lsn"].as_u64()),
        (Some(3), Some(3))
    );
}

#[test]
fn checkpoint_past_the_end_is_refused_unless_forced() {
    let fx = Fixtures::build();
    let dir = fx.scratch(Case::WrongNode, fx.root.path());
    let before = snapshot(&dir);
    // One digit too many removes nothing, dry run or not.
    for dry in [true, false] {
        let mut args = vec!["checkpoint", p(&dir), "--up-to", "99999", "--json"];
        if dry {
            args.push("--dry-run");
        }
        let o = run(&args, b"");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["error"]["kind"], "usage", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("up_to 99999 is past the end of the log (last LSN 3000)"),
            "{message}"
        );
        assert!(snapshot(&dir) == before, "{args:?} changed the log");
    }
    let dry = run(
        &[
            "checkpoint",
            p(&dir),
            "--up-to",
            "99999",
            "--dry-run",
            "--force",
        ],
        b"",
    );
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    assert!(snapshot(&dir) == before, "--dry-run changed the log");
    let (out, err) = text(&dry);
    let segs = segments(&dir);
    let shown: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("would remove "))
        .collect();
    assert_eq!(shown.len(), segs.len() - 1, "all but the newest: {out}");
    assert!(shown[0].starts_with(&format!("would remove {} (LSN 1..=", p(&segs[0]))));
    assert!(out.ends_with("nothing was changed\n"), "{out}");
    let warning = "ringwal: warning: --up-to 99999 is past the end of the log (LSN 3000)";
    assert!(err.starts_with(warning), "{err}");

    let o = run(
        &[
            "checkpoint",
            p(&dir),
            "--up-to",
            "99999",
            "--json",
            "--force",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(text(&o).1.starts_with(warning), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["warning"].as_str().unwrap().contains("past the end"),
        "{v}"
    );
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    // What went is what the dry run said would go.
    let said: Vec<String> = shown
        .iter()
        .map(|l| {
            l["would remove ".len()..]
                .split(" (")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(removed, said);
    assert_eq!(segments(&dir), segs[segs.len() - 1..]);
    // Within the log: no warning.
    let o = run(
        &["checkpoint", p(&dir), "--up-to", "2990", "--dry-run"],
        b"",
    );
    assert!(text(&o).1.is_empty(), "{o:?}");
}

#[test]
fn recover_dry_run_beside_a_running_writer_names_its_process() {
    let fx = Fixtures::build();
    let dir = fx.scratch(Case::WrongNode, fx.root.path());
    let (wal, _) = Wal::open(&dir, small()).unwrap();
    for args in [
        vec!["recover", p(&dir), "--dry-run"],
        vec!["recover", p(&dir), "--dry-run", "--point-in-time"],
        vec!["checkpoint", p(&dir), "--up-to", "5", "--dry-run"],
    ] {
        let o = run(&args, b"");
        assert_eq!(o.status.code(), Some(3), "{args:?}: {o:?}");
        let (out, err) = text(&o);
        assert!(out.is_empty(), "{args:?}: a plan of a moving log: {out}");
        let holder = format!("locked by another writer, process {}", std::process::id());
        assert!(err.contains(&holder), "want {holder:?} in {err}");
    }
    wal.close().unwrap();
    let o = run(&["recover", p(&dir), "--dry-run"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// Flip one bit in the payload of the record at `lsn`; returns its
/// segment and the offset of its frame.
fn damage_record(dir: &Path, lsn: u64) -> (PathBuf, u64) {
    let rec = ringwal::verify::records(dir, &Config::default(), lsn)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(rec.lsn, lsn);
    let seg = dir.join(&rec.segment);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[rec.offset as usize + 26] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    (seg, rec.offset)
}

fn lines(o: &Output) -> Vec<String> {
    text(o).0.lines().map(String::from).collect()
}

/// The last record of a cleanly closed log damaged: every open refuses it
/// (a later write vouches for it), and `recover --point-in-time` brings
/// the log back: the dry run shows the plan and changes nothing, the
/// apply does what it showed, keeps the segment's old bytes, and the log
/// verifies, reads back and appends above every LSN it ever held.
#[test]
fn point_in_time_recovery_brings_back_a_log_every_open_refuses() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    base_log(&dir);
    let (seg, offset) = damage_record(&dir, RECORDS);
    // Every damage message ends with the next step, for this log.
    let next = format!(
        "to see what recovery would do, run: ringwal recover {} --dry-run\n",
        p(&dir)
    );
    for args in [
        vec!["verify", p(&dir)],
        vec!["recover", p(&dir), "--dry-run"],
        vec!["recover", p(&dir), "--apply"],
        vec!["cat", p(&dir)],
        vec!["append", p(&dir)],
    ] {
        let o = run(&args, b"x\n");
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        if args[0] != "recover" {
            assert!(text(&o).1.ends_with(&next), "{args:?}: {o:?}");
        }
    }
    let before = snapshot(&dir);
    let damaged = std::fs::read(&seg).unwrap();

    let dry = run(&["recover", p(&dir), "--point-in-time", "--dry-run"], b"");
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    assert!(snapshot(&dir) == before, "--dry-run changed a file");
    let shown = lines(&dry);
    let copy = PathBuf::from(format!("{}.corrupt", p(&seg)));
    let want_start = [
        format!("node 1: recovery point: {}:{offset}: corrupt: ", p(&seg)),
        format!(
            "node 1: copy {} to {} first (the bytes the cut zeroes are kept there)",
            p(&seg),
            p(&copy)
        ),
        format!("node 1: cut {}:{offset} (", p(&seg)),
        "node 1: give up LSNs 3000..=3000: never to be handed out again".to_string(),
        "node 1: 2999 records, next LSN 3001".to_string(),
        "dry run: nothing was changed".to_string(),
    ];
    assert_eq!(shown.len(), want_start.len(), "{shown:#?}");
    for (line, want) in shown.iter().zip(&want_start) {
        assert!(
            line.starts_with(want.as_str()),
            "want {want:?}, got {line:?}"
        );
    }

    let applied = run(&["recover", p(&dir), "--point-in-time", "--apply"], b"");
    assert_eq!(applied.status.code(), Some(0), "{applied:?}");
    let done = lines(&applied);
    // What was printed before it was done is the dry run's plan.
    assert_eq!(done[..done.len() - 1], shown[..shown.len() - 1]);
    assert_eq!(done.last().unwrap(), "applied");
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        damaged,
        "the old bytes are kept"
    );

    let o = run(&["verify", p(&dir)], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let o = run(&["cat", p(&dir), "--to", "2999"], b"");
    let want: String = (1..RECORDS).map(|i| format!("record {i}\n")).collect();
    assert_eq!(text(&o).0, want, "the records before the damage");
    let o = run(&["append", p(&dir)], b"after\n");
    assert_eq!(text(&o).0, "3001\n", "{o:?}");
    let o = run(&["cat", p(&dir), "--from", "3001"], b"");
    assert_eq!(text(&o).0, "after\n");
    // The LSN given up is never read as a record: readers step over it.
    let o = run(&["cat", p(&dir), "--from", "2999", "--json"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let lsns: Vec<u64> = lines(&o)
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["lsn"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(lsns, [2999, 3001], "{o:?}");
}

/// The copy point-in-time recovery keeps of the segment it cuts holds
/// the log's records: it gets the log's file mode (the default, or the
/// one the log was made with), never the umask's, so `verify` finds no
/// file of the log that others may read.
#[test]
fn the_copy_kept_before_a_cut_has_the_logs_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for file_mode in [None, Some(0o640)] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let mut cfg = Config::builder()
            .segment_bytes(64 << 10)
            .max_record_bytes(4 << 10);
        if let Some(m) = file_mode {
            cfg = cfg.file_mode(m);
        }
        let (wal, _) = Wal::open(&dir, cfg.build()).unwrap();
        let mut last = None;
        for i in 1..=100 {
            last = Some(wal.append(0, format!("record {i}").as_bytes()).unwrap());
        }
        last.unwrap().wait(Level::Durable).unwrap();
        wal.close().unwrap();
        let (seg, _) = damage_record(&dir, 100);
        let want = file_mode.unwrap_or(0o600);
        assert_eq!(mode(&seg), want);

        let o = run(&["recover", p(&dir), "--point-in-time", "--apply"], b"");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let copy = PathBuf::from(format!("{}.corrupt", p(&seg)));
        assert_eq!(mode(&copy), want, "{file_mode:?}: {o:?}");
        let o = run(&["verify", p(&dir)], b"");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        assert!(!text(&o).1.contains("warning"), "{o:?}");
    }
}

/// Damage in a middle segment: the segments after it are set aside under
/// names no file has (never deleted), with their LSNs and bytes shown
/// first; a second recovery of the same segment never overwrites the
/// first one's evidence; the JSON plan says the same.
#[test]
fn point_in_time_recovery_sets_later_segments_aside_and_never_overwrites() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    base_log(&dir);
    let segs = segments(&dir);
    let (seg, _) = damage_record(&dir, 2000);
    // The newest segment is after the damaged one (a log of three or more).
    assert_ne!(&seg, segs.last().unwrap());
    let newest = segs.last().unwrap().clone();
    let newest_base = base_of(&newest);
    let newest_bytes = std::fs::read(&newest).unwrap();
    let aside = PathBuf::from(format!("{}.corrupt", p(&newest)));

    let o = run(
        &["recover", p(&dir), "--point-in-time", "--dry-run", "--json"],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["mode"].as_str(), v["applied"].as_bool()),
        (Some("point-in-time"), Some(false))
    );
    assert_eq!(v["recovery_point"][0]["file"], p(&seg), "{v}");
    assert_eq!(v["cut"]["file"], p(&seg), "{v}");
    let last = v["set_aside"].as_array().unwrap().last().unwrap();
    assert_eq!(last["file"], p(&newest), "{v}");
    assert_eq!(last["to"], p(&aside), "{v}");
    assert_eq!(last["first_lsn"], newest_base, "{v}");
    assert_eq!(last["last_lsn"], RECORDS, "{v}");
    assert_eq!(last["bytes"], newest_bytes.len(), "{v}");
    assert_eq!(v["skipped"]["first"], 2000, "{v}");
    assert_eq!(v["skipped"]["last"], RECORDS, "{v}");
    assert_eq!(v["next_lsn"], RECORDS + 1, "{v}");

    let o = run(&["recover", p(&dir), "--point-in-time", "--apply"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let shown = lines(&o);
    let set_aside = format!(
        "node 1: set aside {} as {} (LSN {newest_base}..=3000, {} bytes)",
        p(&newest),
        p(&aside),
        newest_bytes.len()
    );
    assert!(shown.contains(&set_aside), "{shown:#?}");
    assert!(shown
        .contains(&"node 1: give up LSNs 2000..=3000: never to be handed out again".to_string()));
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        newest_bytes,
        "set aside, not deleted"
    );
    assert!(!newest.exists());
    assert_eq!(run(&["verify", p(&dir)], b"").status.code(), Some(0));
    let o = run(&["append", p(&dir)], b"after\n");
    assert_eq!(
        text(&o).0,
        "3001\n",
        "above every LSN the log ever held: {o:?}"
    );

    // The same segment damaged again: its first copy stays as it was.
    let first_copy = PathBuf::from(format!("{}.corrupt", p(&seg)));
    let kept = std::fs::read(&first_copy).unwrap();
    damage_record(&dir, 1500);
    let o = run(&["recover", p(&dir), "--point-in-time", "--apply"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let second_copy = PathBuf::from(format!("{}.corrupt.1", p(&seg)));
    assert!(second_copy.exists(), "{o:?}");
    assert_eq!(std::fs::read(&first_copy).unwrap(), kept);
    assert_eq!(run(&["verify", p(&dir)], b"").status.code(), Some(0));
    let o = run(&["append", p(&dir)], b"again\n");
    assert_eq!(text(&o).0, "3002\n", "{o:?}");
}

/// Lost records (the newest segment cut short): point-in-time recovery
/// accepts the loss it shows, and LSNs resume above the lost ones.
#[test]
fn point_in_time_recovery_accepts_lost_records_it_names() {
    let fx = Fixtures::build();
    let dir = fx.scratch(Case::TruncatedNewest, fx.root.path());
    let o = run(&["recover", p(&dir), "--point-in-time", "--apply"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let shown = lines(&o);
    assert!(shown[0].contains(LOST), "{shown:#?}");
    let newest_base = base_of(segments(&dir).last().unwrap());
    let give_up =
        format!("node 1: give up LSNs {newest_base}..=3000: never to be handed out again");
    assert!(shown.contains(&give_up), "{shown:#?}");
    assert_eq!(run(&["verify", p(&dir)], b"").status.code(), Some(0));
    assert_eq!(text(&run(&["append", p(&dir)], b"x\n")).0, "3001\n");
}

/// The base LSN a segment's file name gives.
fn base_of(seg: &Path) -> u64 {
    let name = seg.file_name().unwrap().to_str().unwrap();
    ringwal::format::parse_segment_file_name(name).unwrap().1
}
