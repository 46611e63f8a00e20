//! What the CLI's tests share: running the real binary, and the
//! library's own test helpers (its SIGKILL crash loop among them).
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The library's test helpers (`tests/common`), once for this binary, so
/// that every test here shares their lock between spawning processes and
/// opening logs.
#[path = "../../../tests/common/mod.rs"]
pub mod library;

/// The `ringwal` binary under test.
pub fn ringwal() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ringwal"))
}

/// Spawn `cmd` with every other spawn of this test process, and every
/// open of a log through [`library::opening_logs`], held off. A forked
/// child holds copies of the parent's descriptors until it execs, a
/// log's `flock` among them: a test that closes a log and runs the
/// binary on it (or opens it again) at once could find it still locked
/// by another test's child in that window. Serialising spawns (which
/// return once the child has exec'd) closes it. The lock is the
/// library's (`library::spawning_processes`), which its crash loop holds
/// too.
pub fn spawn(cmd: &mut Command) -> Child {
    let _spawning = library::spawning_processes();
    cmd.spawn().expect("spawn")
}

/// Run the binary with `args`, feeding `input` on stdin.
pub fn run(args: &[&str], input: &[u8]) -> Output {
    let mut child = spawn(
        ringwal()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// `path` as an argument.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The segment files in `dir`, in name (so LSN) order.
pub fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// The EXIT STATUS section of `ringwal --help`: each kind by name, with
/// its status.
pub fn exit_statuses() -> std::collections::HashMap<String, i32> {
    let help = String::from_utf8(run(&["--help"], b"").stdout).unwrap();
    let section = help
        .split("EXIT STATUS")
        .nth(1)
        .expect("an EXIT STATUS section");
    let mut kinds = std::collections::HashMap::new();
    let mut status = -1;
    for line in section.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let named = |w: &str| {
            w.strip_suffix(':')
                .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .map(str::to_string)
        };
        match words.as_slice() {
            [code, name, ..] if code.parse::<i32>().is_ok() && named(name).is_some() => {
                status = code.parse().unwrap();
                kinds.insert(named(name).unwrap(), status);
            }
            // A kind under the status above it: indented by the status
            // column, not the continuation's deeper indent.
            [name, ..] if line.starts_with("     ") && !line.starts_with("      ") => {
                if let Some(n) = named(name) {
                    kinds.insert(n, status);
                }
            }
            _ => {}
        }
    }
    kinds
}

/// The `lsn` of each line of a `--json` listing (`cat`, `dump`).
pub fn json_lsns(out: &str) -> Vec<u64> {
    out.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["lsn"]
                .as_u64()
                .unwrap()
        })
        .collect()
}
