//! The `ringwal` binary, run as a user would: real processes, real
//! directories. These pin the command-line contract (output formats and
//! exit statuses) that scripts rely on.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{exit_statuses, json_lsns, p, ringwal, run, segments, spawn};
use base64::Engine as _;
use ringwal::{Config, Level, Wal};

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit status 2 and exactly one line, `ringwal: ...`, on stderr.
fn assert_one_line_error(o: &Output) {
    assert_one_line_error_with(o, 2);
}

/// Exit status `code` and exactly one line, `ringwal: ...`, on stderr.
fn assert_one_line_error_with(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "{o:?}");
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "stderr: {err:?}");
    assert!(err.starts_with("ringwal: "), "stderr: {err:?}");
    assert!(err.ends_with('\n'));
}

fn lsns(o: &Output) -> Vec<u64> {
    stdout(o).lines().map(|l| l.parse().unwrap()).collect()
}

/// Small segments, so a few thousand records roll several times. The
/// CLI has no segment-size flag; such logs are made with the library.
fn small_segments() -> Config {
    // The record cap must fit a segment along with its staging slack.
    Config::builder()
        .segment_bytes(64 << 10)
        .max_record_bytes(16 << 10)
        .build()
}

/// A closed log in `dir` with 64 KiB segments, rolled several times.
fn small_segment_log(dir: &Path, records: u64) {
    let cfg = small_segments();
    let (wal, _) = Wal::open(dir, cfg).unwrap();
    let mut last = None;
    for i in 1..=records {
        let payload = format!("record {i} ").repeat(1 + (i % 20) as usize);
        last = Some(wal.append((i % 2) as u16, payload.as_bytes()).unwrap());
    }
    last.unwrap().wait(Level::Durable).unwrap();
    wal.close().unwrap();
}

#[test]
fn append_then_cat_returns_the_same_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let lines: Vec<String> = (0..500)
        .map(|i| match i % 7 {
            0 => String::new(),
            1 => "x".repeat(3000),
            _ => format!("line {i}: héllo \t tab"),
        })
        .collect();
    let mut input = lines.join("\n");
    input.push('\n');

    let o = run(&["append", p(&log)], input.as_bytes());
    assert!(o.status.success(), "{o:?}");
    assert_eq!(lsns(&o), (1..=500).collect::<Vec<u64>>());

    let o = run(&["cat", p(&log)], b"");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(o.stdout, input.as_bytes());

    // A last line without its newline is still a record.
    let o = run(&["append", p(&log)], b"tail-a\ntail-b");
    assert_eq!(lsns(&o), vec![501, 502]);
    let o = run(&["cat", p(&log), "--from", "500"], b"");
    assert_eq!(stdout(&o), format!("{}\ntail-a\ntail-b\n", lines[499]));
}

#[test]
fn append_levels_streams_and_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    let o = run(
        &["append", log, "--level", "written", "--stream", "7"],
        b"w1\nw2\n",
    );
    assert_eq!(lsns(&o), vec![1, 2], "{o:?}");
    let o = run(&["append", log, "--level", "accepted"], b"a1\n");
    assert_eq!(lsns(&o), vec![3], "{o:?}");
    let o = run(
        &["append", log, "--level", "durable", "--stream", "7"],
        b"d1\n",
    );
    assert_eq!(lsns(&o), vec![4], "{o:?}");
    let o = run(&["append", log, "--node", "9"], b"other node\n");
    assert_eq!(lsns(&o), vec![1], "{o:?}");

    assert_eq!(stdout(&run(&["cat", log], b"")), "w1\nw2\na1\nd1\n");
    assert_eq!(
        stdout(&run(&["cat", log, "--stream", "7"], b"")),
        "w1\nw2\nd1\n"
    );
    assert_eq!(stdout(&run(&["cat", log, "--stream", "0"], b"")), "a1\n");
    assert_eq!(
        stdout(&run(&["cat", log, "--node", "9"], b"")),
        "other node\n"
    );
    // Everything written in written mode was synced at close.
    let o = run(&["verify", log], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn append_prints_each_lsn_before_stdin_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(
        ringwal()
            .args(["append", p(dir.path())])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdin = child.stdin.take().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let wait = Duration::from_secs(20);
    for (i, rec) in ["first", "second", "third"].iter().enumerate() {
        writeln!(stdin, "{rec}").unwrap();
        stdin.flush().unwrap();
        let got = rx.recv_timeout(wait).expect("an LSN while stdin is open");
        assert_eq!(got, (i + 1).to_string());
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn dump_json_fields_are_right() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    let lines = ["alpha", "", "gamma \u{1F600} \"quoted\""];
    let input = lines.join("\n") + "\n";
    let o = run(&["append", log, "--stream", "3"], input.as_bytes());
    assert!(o.status.success(), "{o:?}");

    let o = run(&["dump", log, "--json"], b"");
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 3);
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut prev_end = 0;
    for (i, line) in out.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let payload = b64.decode(v["payload_b64"].as_str().unwrap()).unwrap();
        assert_eq!(payload, lines[i].as_bytes());
        assert_eq!(v["lsn"].as_u64(), Some(i as u64 + 1));
        assert_eq!(v["stream"].as_u64(), Some(3));
        assert_eq!(v["kind"].as_str(), Some("data"));
        assert_eq!(v["len"].as_u64(), Some(lines[i].len() as u64));
        assert_eq!(
            v["segment"].as_str(),
            Some("00001-00000000000000000001.wal")
        );
        // Frames sit back to back after the 4 KiB header, 8-aligned.
        let offset = v["offset"].as_u64().unwrap();
        assert!(offset >= 4096 && offset.is_multiple_of(8) && offset >= prev_end);
        prev_end = offset + 24 + (lines[i].len() as u64).next_multiple_of(8);
    }

    let o = run(&["dump", log, "--json", "--from", "3"], b"");
    assert_eq!(stdout(&o).lines().count(), 1);

    let o = run(&["dump", log], b"");
    assert!(o.status.success());
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 3);
    assert!(text.lines().next().unwrap().contains("alpha"), "{text}");
}

#[test]
fn verify_passes_a_good_log_and_names_damage_by_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 3000);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "{segs:?}");

    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("node 1: ok"), "{o:?}");
    let o = run(&["verify", p(dir.path()), "--node", "1"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // Flip a payload byte of a record in the middle of the first (sealed)
    // segment.
    let first_name = segs[0].file_name().unwrap().to_str().unwrap();
    let in_first: Vec<_> = ringwal::verify::records(dir.path(), &Config::default(), 0)
        .unwrap()
        .map(|r| r.unwrap())
        .filter(|r| r.segment == first_name)
        .collect();
    let victim = &in_first[in_first.len() / 2];
    assert!(victim.len > 0);
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    bytes[victim.offset as usize + 24] ^= 0x20;
    std::fs::write(&segs[0], &bytes).unwrap();
    let before: Vec<Vec<u8>> = segs.iter().map(|s| std::fs::read(s).unwrap()).collect();

    for args in [
        vec!["verify", p(dir.path())],
        vec!["verify", p(dir.path()), "--node", "1"],
    ] {
        let o = run(&args, b"");
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        let want = format!("{}:{}: ", segs[0].display(), victim.offset);
        assert!(
            stdout(&o).lines().any(|l| l.starts_with(&want)),
            "want a line starting {want:?} in {o:?}"
        );
        assert!(!stderr(&o).is_empty(), "a summary on stderr");
    }
    // verify modified nothing.
    let after: Vec<Vec<u8>> = segs.iter().map(|s| std::fs::read(s).unwrap()).collect();
    assert!(before == after);
    assert_eq!(segments(dir.path()), segs);

    // Reading up to the damage works, then fails with the location
    // (status 1: damage found).
    let o = run(&["cat", p(dir.path())], b"");
    assert_one_line_error_with(&o, 1);
    assert!(stderr(&o).contains(&format!("{}:{}", segs[0].display(), victim.offset)));
    assert!(!o.stdout.is_empty());
}

#[test]
fn stat_lists_nodes_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 2000);
    let o = run(&["append", p(dir.path()), "--node", "42"], b"x\ny\n");
    assert!(o.status.success(), "{o:?}");

    let o = run(&["stat", p(dir.path())], b"");
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("node 1:"), "{out}");
    assert!(out.contains("LSN 1..=2000"), "{out}");
    assert!(out.contains("node 42:"), "{out}");
    assert!(out.contains("LSN 1..=2"), "{out}");
    for s in segments(dir.path()) {
        let name = s.file_name().unwrap().to_str().unwrap();
        assert!(out.contains(name), "{name} missing from {out}");
    }
}

#[test]
fn bench_writes_parseable_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = run(
        &[
            "bench",
            "--secs",
            "1",
            "--producers",
            "2",
            "--json",
            p(&json),
        ],
        b"",
    );
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for key in [
        "records_per_s",
        "mb_per_s",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "device_write_p50_us",
        "device_write_p99_us",
    ] {
        let x = v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!(x > 0.0, "{key} = {x}");
    }
    let out = stdout(&o);
    assert!(out.contains("records/s"), "{out}");
    assert!(out.contains("p99.9"), "{out}");
    assert!(out.contains("device µs:   write p50="), "{out}");
    // The temporary log directory is gone.
    let tmp = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("dir="))
        .expect("the config line names the directory");
    assert!(!Path::new(tmp).exists(), "{tmp} left behind");
}

/// `bench` and `append` say the backend, direct I/O, sync method and
/// file system the log really has, and warn where it is on memory. The
/// temporary directory is whatever it is here, so the test asks the
/// library; tmpfs and ramfs (ramfs also refuses O_DIRECT) need root to
/// mount and are skipped with a reason without it.
#[test]
fn bench_and_append_say_what_the_log_really_does() {
    let dir = tempfile::tempdir().unwrap();
    let here = {
        let (wal, _) = Wal::open(dir.path().join("probe"), Config::default()).unwrap();
        let st = wal.stats();
        wal.close().unwrap();
        st
    };
    let bench = |log: &Path| {
        let o = run(
            &[
                "bench",
                "--dir",
                p(log),
                "--secs",
                "0.2",
                "--producers",
                "1",
            ],
            b"",
        );
        assert!(o.status.success(), "{o:?}");
        stdout(&o)
    };
    let out = bench(&dir.path().join("log"));
    let line = out.lines().find(|l| l.starts_with("log:")).expect(&out);
    let fs = here.file_system.to_string().replace(' ', "_");
    assert!(line.ends_with(&format!("file_system={fs}")), "{line}");
    assert!(
        line.contains(&format!("direct_io={}", here.direct_io)),
        "{line}"
    );
    assert_eq!(
        out.contains("warning:"),
        !here.file_system.survives_power_loss(),
        "{out}"
    );
    for fs in ["tmpfs", "ramfs"] {
        let root = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", fs, fs])
            .arg(root.path())
            .output();
        if !mounted.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("bench_and_append: skipped {fs}: cannot mount: {mounted:?}");
            continue;
        }
        let out = bench(&root.path().join("bench"));
        let o = run(&["append", p(&root.path().join("append"))], b"x\n");
        Command::new("umount").arg(root.path()).status().unwrap();
        assert!(out.contains(&format!("file_system={fs}")), "{out}");
        assert!(out.contains("warning:     the log is on"), "{out}");
        assert!(o.status.success(), "{o:?}");
        let err = stderr(&o);
        assert!(err.contains("nothing survives a power loss"), "{err}");
        // ramfs refuses O_DIRECT: the fallback is said.
        assert_eq!(err.contains("direct_io=false"), fs == "ramfs", "{err}");
    }
}

#[test]
fn bench_in_a_given_directory_keeps_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "bench",
            "--dir",
            p(dir.path()),
            "--secs",
            "0.3",
            "--producers",
            "3",
            "--size",
            "100",
            "--level",
            "written",
            "--backend",
            "threaded",
        ],
        b"",
    );
    assert!(o.status.success(), "{o:?}");
    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn bad_arguments_and_errors_are_one_line_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does-not-exist");
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["cat"],
        vec!["cat", "a", "b"],
        vec!["cat", p(dir.path()), "--bogus"],
        vec!["cat", p(dir.path()), "--node", "x"],
        vec!["append", p(dir.path()), "--level", "eventually"],
        vec!["bench", "--producers", "0", "--secs", "1"],
        vec!["bench", "--secs", "-1"],
        vec!["bench", "--backend", "carrier-pigeon"],
        vec!["cat", p(&missing)],
        vec!["stat", p(&missing)],
        vec!["verify", p(&missing)],
    ] {
        let o = run(&args, b"");
        assert_one_line_error(&o);
    }
    assert!(run(&["--help"], b"").status.success());
    // A usage error points at the help of the command it was given.
    let o = run(&["checkpoint", p(dir.path())], b"");
    assert_one_line_error(&o);
    assert!(
        stderr(&o).contains("(see 'ringwal checkpoint --help')"),
        "{o:?}"
    );
    let o = run(&["frobnicate"], b"");
    assert!(stderr(&o).contains("(see 'ringwal --help')"), "{o:?}");
}

#[test]
fn append_to_a_locked_log_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), Config::default()).unwrap();
    let o = run(&["append", p(dir.path())], b"x\n");
    // Status 3: locked, retry later; the message names the holder.
    assert_one_line_error_with(&o, 3);
    assert!(stderr(&o).contains("locked"), "{o:?}");
    let holder = format!("process {}", std::process::id());
    assert!(stderr(&o).contains(&holder), "want {holder:?} in {o:?}");
    let o = run(&["recover", p(dir.path()), "--apply"], b"");
    assert_one_line_error_with(&o, 3);
    let o = run(&["checkpoint", p(dir.path()), "--up-to", "1"], b"");
    assert_one_line_error_with(&o, 3);
    assert!(o.stdout.is_empty());
    // Reading needs no lock, even beside the writer.
    wal.append(0, b"live")
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    assert_eq!(stdout(&run(&["cat", p(dir.path())], b"")), "live\n");
    assert_eq!(run(&["verify", p(dir.path())], b"").status.code(), Some(0));
    wal.close().unwrap();
}

/// A read below the oldest LSN kept is of kind `released`, and its
/// message says so (never "LSN gap", the message of damage, another kind
/// with another status): the same words on stderr and in the `--json`
/// error object, and the status `--help` gives the kind.
#[test]
fn reading_below_the_oldest_lsn_says_a_checkpoint_released_it() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 2000);
    let (wal, _) = Wal::open(dir.path(), small_segments()).unwrap();
    assert!(wal.checkpoint(1000).unwrap() > 0);
    let oldest = wal.oldest_lsn();
    wal.close().unwrap();
    let o = run(&["cat", p(dir.path()), "--from", "1"], b"");
    assert_one_line_error(&o);
    let want = format!(
        "ringwal: {}: LSN 1 was released by a checkpoint; the oldest LSN kept is {oldest}\n",
        p(dir.path())
    );
    assert_eq!(stderr(&o), want);
    let o = run(&["cat", p(dir.path()), "--from", "1", "--json"], b"");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["error"]["kind"], "released", "{v}");
    assert_eq!(v["error"]["message"], want["ringwal: ".len()..].trim_end());
    assert_eq!(o.status.code(), Some(exit_statuses()["released"]), "{o:?}");
    assert_eq!(v["error"]["status"], exit_statuses()["released"], "{v}");
    let from = oldest.to_string();
    let o = run(&["dump", p(dir.path()), "--json", "--from", &from], b"");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o).lines().count() as u64, 2000 - oldest + 1);
}

#[test]
fn verify_notes_a_torn_tail_and_still_passes() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["append", p(dir.path())], b"one\ntwo\nthree\n");
    assert!(o.status.success(), "{o:?}");
    let report = ringwal::verify::verify(dir.path(), &Config::default()).unwrap();
    let seg = &report.segments[0];
    let end = ringwal::format::HEADER_BYTES as u64 + seg.valid_bytes;
    // Half a frame header where the next write would have gone: what a
    // crash during that write leaves.
    let mut bytes = std::fs::read(&seg.path).unwrap();
    bytes[end as usize..end as usize + 12].fill(0x5a);
    std::fs::write(&seg.path, &bytes).unwrap();

    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let note = format!("note: {}:{}: torn tail", seg.path.display(), end);
    assert!(stdout(&o).contains(&note), "want {note:?} in {o:?}");
    // Readers stop quietly at the tail.
    assert_eq!(
        stdout(&run(&["cat", p(dir.path())], b"")),
        "one\ntwo\nthree\n"
    );
    // Untouched by verify: a writer still finds the tail and cuts it.
    assert_eq!(std::fs::read(&seg.path).unwrap(), bytes);
    let o = run(&["append", p(dir.path())], b"four\n");
    assert_eq!(lsns(&o), vec![4], "{o:?}");
    assert_eq!(run(&["verify", p(dir.path())], b"").status.code(), Some(0));
}

/// `ringwal bench --api channel` drives the channel API and says so.
#[test]
fn bench_runs_the_channel_api() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = ringwal()
        .args([
            "bench",
            "--secs",
            "0.3",
            "--producers",
            "3",
            "--level",
            "written",
        ])
        .args([
            "--sync-interval-ms",
            "20",
            "--api",
            "channel",
            "--window",
            "4",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("api=channel window=4"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["api"], "channel");
    assert_eq!(v["window"], 4);
    assert!(v["records_per_s"].as_f64().unwrap() > 0.0, "{v}");
}

/// Runs `ringwal bench --api API` for a fraction of a second at the
/// durable level with `extra` arguments; returns the JSON report.
fn bench_api(api: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = ringwal()
        .args(["bench", "--secs", "0.3", "--level", "durable", "--api", api])
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("api={api} window=1")), "{text}");
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// `--api claim` appends through `Wal::append_with`, and the records it
/// leaves hold the same payload the other APIs send (the pattern), not
/// the zeroed slot.
#[test]
fn bench_runs_the_claim_api_and_writes_the_payload() {
    let log = tempfile::tempdir().unwrap();
    let v = bench_api(
        "claim",
        &["--producers", "4", "--size", "300", "--dir", p(log.path())],
    );
    assert_eq!(v["api"], "claim");
    let records = v["records"].as_u64().unwrap();
    assert!(records > 0, "{v}");
    let want: Vec<u8> = (0..300).map(|i| (i % 251) as u8).collect();
    let mut seen = 0;
    for r in ringwal::verify::records(log.path(), &Config::default(), 0).unwrap() {
        let r = r.unwrap();
        assert_eq!(r.payload, want, "record {}", r.lsn);
        seen += 1;
    }
    assert!(
        seen >= records,
        "{seen} records in the log, {records} acknowledged"
    );
}

/// `--api batch` appends atomic batches of `--batch` records and counts
/// every member: the log holds whole batches, at least as many records as
/// were acknowledged.
#[test]
fn bench_runs_the_batch_api_and_counts_every_member() {
    let log = tempfile::tempdir().unwrap();
    let v = bench_api(
        "batch",
        &[
            "--batch",
            "5",
            "--producers",
            "2",
            "--size",
            "100",
            "--dir",
            p(log.path()),
        ],
    );
    assert_eq!(
        (v["api"].as_str(), v["batch"].as_u64()),
        (Some("batch"), Some(5))
    );
    let records = v["records"].as_u64().unwrap();
    assert!(records > 0 && records.is_multiple_of(5), "{v}");
    let seen = ringwal::verify::records(log.path(), &Config::default(), 0)
        .unwrap()
        .count() as u64;
    assert!(
        seen >= records && seen.is_multiple_of(5),
        "{seen} records in the log, {records} acknowledged, in batches of 5"
    );
}

/// `--api async` runs its producers as tokio tasks, many more than the
/// runtime has threads, and reports the records they had acknowledged.
#[test]
fn bench_runs_the_async_api_with_many_tasks() {
    let v = bench_api("async", &["--producers", "64", "--size", "100"]);
    assert_eq!(v["api"], "async");
    assert_eq!(v["producers"], 64);
    assert!(v["records"].as_u64().unwrap() > 0, "{v}");
    assert!(v["records_per_s"].as_f64().unwrap() > 0.0, "{v}");
}

/// A flipped bit in the first record of the newest (here the only)
/// segment of a log written by three cleanly closed runs is damage, not a
/// torn tail: later writes vouch for that record. `verify` names the file
/// and offset and exits 1, `append` refuses to open the log, nothing is
/// modified, and no LSN is handed out again.
#[test]
fn a_flipped_bit_in_the_newest_segment_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    for lines in [&b"one\ntwo\n"[..], b"three\nfour\n", b"five\nsix\n"] {
        let o = run(&["append", p(dir.path())], lines);
        assert!(o.status.success(), "{o:?}");
    }
    let first = ringwal::verify::records(dir.path(), &Config::default(), 0)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!((first.lsn, first.payload.as_slice()), (1, &b"one"[..]));
    let seg = dir.path().join(&first.segment);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[first.offset as usize + 24] ^= 0x01; // one bit of "one"
    std::fs::write(&seg, &bytes).unwrap();
    let before = std::fs::read(&seg).unwrap();

    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let want = format!("{}:{}: ", seg.display(), first.offset);
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with(&want) && l.contains("vouches")),
        "want a line starting {want:?} naming the vouch in {o:?}"
    );
    assert!(!stdout(&o).contains("torn tail"), "{o:?}");

    let o = run(&["append", p(dir.path())], b"seven\n");
    // Status 1: the log is damaged, not the arguments.
    assert_one_line_error_with(&o, 1);
    assert!(
        stderr(&o).contains(&format!("{}:{}", seg.display(), first.offset)),
        "{o:?}"
    );
    assert!(o.stdout.is_empty(), "no LSN handed out: {o:?}");
    assert_eq!(std::fs::read(&seg).unwrap(), before, "the log was modified");
}

#[test]
fn append_batch_prints_every_lsn_and_cat_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    let lines: Vec<String> = (0..7).map(|i| format!("line {i}")).collect();
    let input = lines.join("\n") + "\n";
    let o = run(&["append", log, "--batch", "3"], input.as_bytes());
    assert!(o.status.success(), "{o:?}");
    assert_eq!(lsns(&o), (1..=7).collect::<Vec<u64>>());

    let o = run(&["cat", log], b"");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), input);
}

#[test]
fn dump_json_shows_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    // Two batches of 3, then a last line alone; then one record appended alone.
    let o = run(&["append", log, "--batch", "3"], b"a\nb\nc\nd\ne\nf\ng\n");
    assert!(o.status.success(), "{o:?}");
    let o = run(&["append", log], b"h\n");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(lsns(&o), [8]);

    let o = run(&["dump", log, "--json"], b"");
    assert!(o.status.success(), "{o:?}");
    let batches: Vec<Option<u64>> = stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v.get("batch").is_some(), "no batch field: {l}");
            v["batch"].as_u64()
        })
        .collect();
    let (b1, b4) = (Some(1), Some(4));
    assert_eq!(batches, [b1, b1, b1, b4, b4, b4, None, None]);

    // Reading from inside a batch still names its first LSN.
    let o = run(&["dump", log, "--json", "--from", "5"], b"");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!((v["lsn"].as_u64(), v["batch"].as_u64()), (Some(5), Some(4)));
}

#[test]
fn append_batch_must_be_positive() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["append", p(dir.path()), "--batch", "0"], b"x\n");
    assert_one_line_error(&o);
    assert!(o.stdout.is_empty());
}

/// `cat --follow` run beside a writer: the lines on its stdout as they
/// come, and the child to stop.
struct FollowingCat {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl FollowingCat {
    fn start(dir: &Path) -> FollowingCat {
        let mut child = spawn(
            ringwal()
                .args(["cat", p(dir), "--follow", "--poll-ms", "5"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                if tx.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        FollowingCat { child, lines }
    }

    /// The next line. The wait is a liveness guard (a healthy follower
    /// prints within a few polls), not a performance assertion.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("cat --follow printed the next record")
    }
}

impl Drop for FollowingCat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn cat_follow_prints_records_as_they_are_written_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_segments()).unwrap();
    let before: Vec<String> = (0..50).map(|i| format!("before {i}")).collect();
    for l in &before {
        let _ = wal.append(0, l.as_bytes()).unwrap();
    }
    wal.sync().unwrap();
    let cat = FollowingCat::start(dir.path());
    for l in &before {
        assert_eq!(&cat.line(), l);
    }
    // Written while it waits, in several rounds and batches, across rolls:
    // every record exactly once, in order.
    let rolls = wal.stats().rolls;
    for round in 0..5 {
        let lines: Vec<String> = (0..400)
            .map(|i| format!("round {round} record {i} {}", "x".repeat(i % 300)))
            .collect();
        for chunk in lines.chunks(4) {
            let parts: Vec<(u16, &[u8])> = chunk.iter().map(|l| (0, l.as_bytes())).collect();
            let _ = wal.append_batch(&parts).unwrap();
        }
        wal.sync().unwrap();
        for l in &lines {
            assert_eq!(&cat.line(), l);
        }
    }
    assert!(wal.stats().rolls >= rolls + 3, "the follower crossed rolls");
    wal.close().unwrap();
    assert!(
        cat.lines.recv_timeout(Duration::from_millis(200)).is_err(),
        "nothing printed twice"
    );
}

#[test]
fn cat_follow_overtaken_by_a_checkpoint_says_it_was_released() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_segments()).unwrap();
    let _ = wal.append(0, b"first").unwrap();
    wal.sync().unwrap();
    let mut cat = FollowingCat::start(dir.path());
    assert_eq!(cat.line(), "first");
    // Stopped while records it has not read are written and checkpointed
    // away: when it runs again, it must say it missed them.
    let signal = |sig: &str| {
        let pid = cat.child.id().to_string();
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    // A signal is delivered when the child is next scheduled: wait until
    // it is really stopped before writing what it must not see.
    let stat = format!("/proc/{}/stat", cat.child.id());
    let stopped = || {
        let s = std::fs::read_to_string(&stat).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    };
    for _ in 0..3_000 {
        if stopped() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(stopped(), "cat --follow did not stop");
    let mut last = None;
    for i in 0..3_000 {
        let line = format!("missed {i} {}", "y".repeat(100));
        last = Some(wal.append(0, line.as_bytes()).unwrap());
    }
    let last = last.unwrap();
    last.wait(Level::Durable).unwrap();
    assert!(wal.checkpoint(last.lsn() - 1).unwrap() >= 3);
    signal("-CONT");
    // A liveness guard, not a timing assertion: it ends at its next poll.
    let mut status = None;
    for _ in 0..3_000 {
        status = cat.child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    wal.close().unwrap();
    let status = status.expect("cat --follow ended after the checkpoint");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut cat.child.stderr.take().unwrap(), &mut err).unwrap();
    let out = (status, err);
    assert_eq!(out.0.code(), Some(2), "{out:?}");
    // It may have read on, through its open file, what that file still
    // held when it woke (genuine records, in order: their CRCs are salted
    // per segment), but never past the hole: it stops with the gap
    // instead of jumping to the records still kept.
    let printed: Vec<String> = cat.lines.try_iter().collect();
    for (i, l) in printed.iter().enumerate() {
        assert!(l.starts_with(&format!("missed {i} ")), "line {i}: {l:?}");
    }
    assert!(
        printed.len() < 3_000,
        "it skipped nothing, so it was not overtaken"
    );
    // Its message says what its kind (`released`, the status above) says,
    // whether the checkpoint went by before or while it read.
    assert!(out.1.contains("was released by a checkpoint"), "{out:?}");
    assert!(out.1.contains("the oldest LSN kept is"), "{out:?}");
}

/// Every file of the log in `dir` (all but the lock file) by name, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        // Not the lock file: a writer that takes the lock writes its
        // process id there, and that is no change to the log.
        .filter(|p| p.extension().is_none_or(|e| e != "lock"))
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// A torn tail in the only segment of a three-record log (what a crash
/// during the next write leaves); returns the segment and the offset.
fn tear_the_tail(dir: &Path) -> (PathBuf, u64) {
    let o = run(&["append", p(dir)], b"one\ntwo\nthree\n");
    assert!(o.status.success(), "{o:?}");
    let report = ringwal::verify::verify(dir, &Config::default()).unwrap();
    let seg = &report.segments[0];
    let end = ringwal::format::HEADER_BYTES as u64 + seg.valid_bytes;
    let mut bytes = std::fs::read(&seg.path).unwrap();
    bytes[end as usize..end as usize + 12].fill(0x5a);
    std::fs::write(&seg.path, &bytes).unwrap();
    (seg.path.clone(), end)
}

#[test]
fn recover_dry_run_changes_nothing_and_apply_does_what_it_showed() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, end) = tear_the_tail(dir.path());
    // A leftover spare (a crash while one was prepared): discarded.
    let spare = dir.path().join(ringwal::format::spare_file_name(1, 7));
    std::fs::write(&spare, vec![0u8; 64 << 10]).unwrap();
    let before = snapshot(dir.path());

    let dry = run(&["recover", p(dir.path()), "--dry-run"], b"");
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    assert!(snapshot(dir.path()) == before, "--dry-run changed a file");
    let shown: Vec<String> = stdout(&dry).lines().map(String::from).collect();
    let cut = format!("node 1: cut {}:{end} (", seg.display());
    assert!(shown[0].starts_with(&cut), "want {cut:?} in {shown:?}");
    assert!(
        shown[0].contains("bytes zeroed, 0 records dropped"),
        "{shown:?}"
    );
    assert!(shown.contains(&format!("node 1: discard {}", spare.display())));
    assert!(shown.contains(&"node 1: 3 records, next LSN 4".to_string()));
    assert_eq!(shown.last().unwrap(), "dry run: nothing was changed");

    let applied = run(&["recover", p(dir.path()), "--apply"], b"");
    assert_eq!(applied.status.code(), Some(0), "{applied:?}");
    let done: Vec<String> = stdout(&applied).lines().map(String::from).collect();
    assert_eq!(done.last().unwrap(), "applied");
    // What it did is, line for line, what the dry run said it would do.
    assert_eq!(done[..done.len() - 1], shown[..shown.len() - 1]);
    assert!(!spare.exists());
    assert_ne!(std::fs::read(&seg).unwrap(), before[0].1);

    let again = run(&["recover", p(dir.path()), "--dry-run"], b"");
    assert_eq!(
        stdout(&again),
        "node 1: nothing to do\nnode 1: 3 records, next LSN 4\ndry run: nothing was changed\n"
    );
    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(!stdout(&o).contains("torn"), "{o:?}");
    assert_eq!(
        stdout(&run(&["cat", p(dir.path())], b"")),
        "one\ntwo\nthree\n"
    );
}

#[test]
fn recover_refuses_damage_a_missing_log_and_a_missing_mode() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    for mode in ["--dry-run", "--apply"] {
        let o = run(&["recover", p(&missing), mode], b"");
        assert_one_line_error(&o);
        assert!(stderr(&o).contains("no log of node 1"), "{o:?}");
        assert!(!missing.exists(), "{mode} created the directory");
    }
    let o = run(&["recover", p(dir.path())], b"");
    assert_one_line_error(&o);
    let o = run(&["recover", p(dir.path()), "--dry-run", "--apply"], b"");
    assert_one_line_error(&o);

    // A flipped bit in an acknowledged record: the open would fail.
    let o = run(&["append", p(dir.path())], b"one\ntwo\n");
    assert!(o.status.success(), "{o:?}");
    let o = run(&["append", p(dir.path())], b"three\n");
    assert!(o.status.success(), "{o:?}");
    let first = ringwal::verify::records(dir.path(), &Config::default(), 0)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let seg = dir.path().join(&first.segment);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[first.offset as usize + 24] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let before = snapshot(dir.path());

    let o = run(&["recover", p(dir.path()), "--dry-run"], b"");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let want = format!("{}:{}: ", seg.display(), first.offset);
    assert!(stdout(&o).starts_with(&want), "want {want:?} in {o:?}");
    assert!(stdout(&o).contains("a strict open would fail"), "{o:?}");
    let o = run(&["recover", p(dir.path()), "--apply"], b"");
    assert_one_line_error_with(&o, 1);
    assert!(stderr(&o).contains(&want[..want.len() - 2]), "{o:?}");
    assert!(
        snapshot(dir.path()) == before,
        "a refused open changed a file"
    );
}

#[test]
fn checkpoint_removes_whole_segments_and_says_what_it_freed() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 2000);
    let segs = segments(dir.path());
    let o = run(&["checkpoint", p(dir.path()), "--up-to", "1000"], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    let removed: Vec<&str> = out.lines().filter(|l| l.starts_with("removed ")).collect();
    assert!(!removed.is_empty(), "{out}");
    for (line, seg) in removed.iter().zip(&segs) {
        // Oldest first, each wholly at or below the LSN.
        assert!(
            line.starts_with(&format!("removed {} (LSN ", seg.display())),
            "{line}"
        );
        let last: u64 = line
            .split("..=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(last <= 1000, "{line}");
        assert!(!seg.exists(), "{} still there", seg.display());
    }
    let summary = format!("checkpoint: {} segments removed (", removed.len());
    assert!(out.lines().last().unwrap().starts_with(&summary), "{out}");
    assert!(out.contains("bytes freed on disk"), "{out}");
    assert_eq!(segments(dir.path()), segs[removed.len()..]);

    // The records below are gone (a gap), the rest read back.
    let o = run(&["cat", p(dir.path()), "--from", "1"], b"");
    assert_one_line_error(&o);
    let o = run(&["verify", p(dir.path())], b"");
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // A typo'd path is "no log", and nothing is created there.
    let missing = dir.path().join("typo");
    let o = run(&["checkpoint", p(&missing), "--up-to", "5"], b"");
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("no log"), "{o:?}");
    assert!(!missing.exists());
}

#[test]
fn stat_and_verify_json_describe_nodes_segments_problems_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 2000);
    let o = run(&["append", p(dir.path()), "--node", "42"], b"x\ny\n");
    assert!(o.status.success(), "{o:?}");
    let segs = segments(dir.path());

    for cmd in ["stat", "verify"] {
        let o = run(&[cmd, p(dir.path()), "--json"], b"");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["command"], cmd);
        let nodes: Vec<u64> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["node"].as_u64().unwrap())
            .collect();
        assert_eq!(nodes, [1, 42]);
        assert_eq!(v["nodes"][0]["last_lsn"], 2000);
        assert_eq!(v["nodes"][1]["records"], 2);
        let rows = v["segments"].as_array().unwrap();
        assert_eq!(rows.len(), segs.len());
        let on_disk: u64 = segs.iter().map(|s| s.metadata().unwrap().len()).sum();
        for (row, seg) in rows.iter().zip(&segs) {
            assert_eq!(row["file"], seg.to_str().unwrap());
            assert_eq!(row["format_version"], ringwal::format::FORMAT_VERSION);
            assert_eq!(row["created_from"], "header");
            assert!(row["created_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
            assert!(row["bytes"].as_u64().unwrap() > 0);
            assert!(row["last_lsn"].as_u64() >= row["base_lsn"].as_u64());
        }
        assert_eq!(v["problems"].as_array().unwrap().len(), 0);
        let t = &v["totals"];
        assert_eq!(
            (t["nodes"].as_u64(), t["records"].as_u64()),
            (Some(2), Some(2002))
        );
        assert_eq!(t["segments"].as_u64(), Some(segs.len() as u64));
        assert_eq!(t["bytes"].as_u64(), Some(on_disk));
    }

    // --node narrows stat to one node.
    let o = run(&["stat", p(dir.path()), "--node", "42"], b"");
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("node 42:") && !stdout(&o).contains("node 1:"));

    // Damage: verify --json names it by file, offset and reason; status 1.
    let victim = ringwal::verify::records(dir.path(), &Config::default(), 0)
        .unwrap()
        .nth(5)
        .unwrap()
        .unwrap();
    let seg = dir.path().join(&victim.segment);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[victim.offset as usize + 24] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();
    let o = run(&["verify", p(dir.path()), "--json"], b"");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let problem = &v["problems"][0];
    assert_eq!(problem["node"], 1);
    assert_eq!(problem["file"], seg.to_str().unwrap());
    assert_eq!(problem["offset"], victim.offset);
    assert!(problem["reason"].as_str().unwrap().starts_with("corrupt"));
    assert_eq!(v["totals"]["problems"], 1);
    assert_eq!(v["nodes"][0]["consistent"], false);
}

#[test]
fn nothing_to_check_is_never_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["verify", "stat"] {
        for json in [false, true] {
            let mut args = vec![cmd, p(dir.path())];
            if json {
                args.push("--json");
            }
            let o = run(&args, b"");
            assert_one_line_error(&o);
            let want = format!("ringwal: {}: no log here\n", p(dir.path()));
            assert_eq!(stderr(&o), want, "{o:?}");
            // With --json, the failure is one error object on stdout.
            assert_eq!(o.stdout.is_empty(), !json, "{o:?}");
        }
    }
    let o = run(&["append", p(dir.path()), "--node", "3"], b"x\n");
    assert!(o.status.success(), "{o:?}");
    for cmd in ["verify", "stat"] {
        let o = run(&[cmd, p(dir.path()), "--node", "9"], b"");
        assert_one_line_error(&o);
        assert!(
            stderr(&o).contains("no log of node 9 here (nodes found: 3)"),
            "{o:?}"
        );
    }

    // append --no-create: no log, nothing created.
    let fresh = dir.path().join("fresh");
    let o = run(&["append", p(&fresh), "--no-create"], b"x\n");
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("no log of node 1"), "{o:?}");
    assert!(!fresh.exists());
    let o = run(
        &["append", p(dir.path()), "--no-create", "--node", "3"],
        b"y\n",
    );
    assert_eq!(lsns(&o), [2], "{o:?}");

    // A regular file where a directory should be.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"not a log").unwrap();
    for args in [
        vec!["append", p(&file)],
        vec!["verify", p(&file)],
        vec!["stat", p(&file)],
        vec!["import", p(&file)],
    ] {
        let o = run(&args, b"");
        assert_one_line_error(&o);
        assert!(
            stderr(&o).contains(": no log ") && stderr(&o).contains("(not a directory)"),
            "{args:?}: {o:?}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a log");
}

/// An I/O error is printed with its OS cause after the path (here
/// ENOTDIR: a log directory under a regular file), by every command
/// that meets one, in the one format `ringwal-otlp` prints too.
#[test]
fn an_io_error_names_its_os_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let log = file.join("log");
    for args in [
        vec!["append", p(&log)],
        vec!["bench", "--dir", p(&log), "--secs", "0.1"],
    ] {
        let o = run(&args, b"x\n");
        assert_one_line_error_with(&o, exit_statuses()["io"]);
        let want = format!(
            "ringwal: I/O error on {}: Not a directory (os error",
            p(&log)
        );
        assert!(stderr(&o).starts_with(&want), "{args:?}: {o:?}");
    }
}

/// A segment size given alone picks a record limit that fits it (the
/// library's default of 1 MiB does not fit a 64 KiB segment): half the
/// segment there, encrypted or not, and a record over it is refused as
/// input, naming the limit; `bench --segment-mib 1` runs.
#[test]
fn a_segment_size_alone_picks_a_record_limit_that_fits() {
    let root = tempfile::tempdir().unwrap();
    let key = root.path().join("key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // The library's own pick for the segment size, sealed or not.
    let keys = ringwal::StaticKeys::new();
    keys.insert(1, ringwal::Key::new([7; 32]), true);
    let sealed = ringwal::Config::builder().encryption(std::sync::Arc::new(keys));
    let limits = [
        ringwal::Config::builder().segment_bytes(65536).build(),
        sealed.segment_bytes(65536).build(),
    ]
    .map(|c| c.max_record_bytes());
    assert!(
        limits.iter().all(|&l| l > 32 << 10 && l < 64 << 10),
        "{limits:?}"
    );
    for (i, extra) in [vec![], vec!["--key-file", p(&key)]].iter().enumerate() {
        let limit = limits[i];
        let dir = root.path().join(format!("log{i}"));
        let mut a = vec!["append", p(&dir), "--segment-bytes", "65536"];
        a.extend(extra);
        let line = |n: usize| format!("{}\n", "x".repeat(n)).into_bytes();
        let o = run(&a, &line(limit));
        assert!(o.status.success(), "{extra:?}: {o:?}");
        assert_eq!(stdout(&o), "1\n");
        let o = run(&a, &line(limit + 1));
        assert_one_line_error_with(&o, exit_statuses()["input"]);
        assert!(
            stderr(&o).contains(&format!("the limit of {limit} bytes")),
            "{extra:?}: {o:?}"
        );
    }
    let o = run(
        &[
            "bench",
            "--segment-mib",
            "1",
            "--secs",
            "0.1",
            "--producers",
            "1",
        ],
        b"",
    );
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn exit_statuses_are_documented_and_io_errors_are_4() {
    let o = run(&["--help"], b"");
    assert!(o.status.success());
    let help = stdout(&o);
    assert!(help.contains("EXIT STATUS"), "{help}");
    for code in ["0  ", "1  ", "2  ", "3  ", "4  "] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(code)),
            "{code}: {help}"
        );
    }
    // A segment name that is a directory: reading it is an I/O error.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("00001-00000000000000000001.wal")).unwrap();
    let o = run(&["verify", p(dir.path())], b"");
    assert_one_line_error_with(&o, 4);
}

#[test]
fn mistyped_commands_and_flags_keep_clap_suggestions() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["catt"], b"");
    assert_one_line_error(&o);
    let err = stderr(&o);
    assert!(err.contains("unrecognized subcommand 'catt'"), "{err}");
    assert!(err.contains("tip:") && err.contains("'cat'"), "{err}");
    let o = run(&["cat", p(dir.path()), "--nod", "1"], b"");
    assert_one_line_error(&o);
    let err = stderr(&o);
    assert!(err.contains("'--nod'"), "{err}");
    assert!(
        err.contains("tip: a similar argument exists: '--node'"),
        "{err}"
    );
}

#[test]
fn dump_then_import_round_trips_records_streams_and_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    let o = run(
        &["append", p(&src), "--batch", "3"],
        b"a\nb\nc\nd\ne\nf\ng\n",
    );
    assert!(o.status.success(), "{o:?}");
    let o = run(&["append", p(&src), "--stream", "9"], b"h\n\ni\n");
    assert!(o.status.success(), "{o:?}");
    // NUL-separated records may hold newlines.
    let o = run(&["append", p(&src), "-0"], b"multi\nline\0second\n\0");
    assert_eq!(lsns(&o), [11, 12], "{o:?}");
    // A checkpoint marker (the library writes those) comes back as one.
    let (wal, _) = Wal::open(&src, Config::default()).unwrap();
    wal.checkpoint_marker(7)
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    wal.close().unwrap();

    let fields = |log: &Path| -> Vec<serde_json::Value> {
        let o = run(&["dump", p(log), "--json"], b"");
        assert!(o.status.success(), "{o:?}");
        stdout(&o)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                serde_json::json!([
                    v["lsn"],
                    v["stream"],
                    v["kind"],
                    v["batch"],
                    v["payload_b64"]
                ])
            })
            .collect()
    };
    let dumped = run(&["dump", p(&src), "--json"], b"");
    let o = run(&["import", p(&dst)], &dumped.stdout);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o), "imported 13 records (LSN 1..=13)\n");
    assert!(stderr(&o).is_empty(), "no progress off a terminal: {o:?}");
    let want = fields(&src);
    assert_eq!(want.len(), 13);
    assert_eq!(fields(&dst), want);
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(want[10][4], b64.encode(b"multi\nline"));
    assert_eq!(want[11][4], b64.encode(b"second\n"));
    assert_eq!(want[12][2], "checkpoint");
    let (wal, report) = Wal::open(&dst, Config::default()).unwrap();
    assert_eq!(
        report.last_checkpoint.map(|m| (m.lsn, m.snapshot_lsn)),
        Some((13, 7))
    );
    wal.close().unwrap();

    // Only into a new or empty log.
    let o = run(&["import", p(&dst)], &dumped.stdout);
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("already holds"), "{o:?}");
    // Bad input names its line.
    let o = run(
        &["import", p(&dir.path().join("bad"))],
        b"{\"payload_b64\":\"eA==\"}\nnot json\n",
    );
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("stdin line 2"), "{o:?}");
}

#[test]
fn cat_and_dump_take_a_stream_a_last_lsn_and_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    let o = run(&["append", log], b"a0\na1\na2\n");
    assert!(o.status.success(), "{o:?}");
    let o = run(&["append", log, "--stream", "5"], b"b3\nb4\n");
    assert!(o.status.success(), "{o:?}");
    let o = run(&["append", log], b"a5\n");
    assert!(o.status.success(), "{o:?}");

    let cat = |args: &[&str]| {
        let mut all = vec!["cat", log];
        all.extend_from_slice(args);
        let o = run(&all, b"");
        assert!(o.status.success(), "{o:?}");
        stdout(&o)
    };
    assert_eq!(cat(&["--to", "2"]), "a0\na1\n");
    assert_eq!(cat(&["--limit", "4"]), "a0\na1\na2\nb3\n");
    assert_eq!(
        cat(&["--from", "2", "--to", "5", "--limit", "2"]),
        "a1\na2\n"
    );
    assert_eq!(cat(&["--stream", "0", "--limit", "4"]), "a0\na1\na2\na5\n");
    assert_eq!(cat(&["--limit", "0"]), "");
    // --follow ends by itself once --to is printed.
    assert_eq!(
        cat(&["--follow", "--poll-ms", "5", "--to", "3"]),
        "a0\na1\na2\n"
    );

    let o = run(&["dump", log, "--json", "--stream", "5"], b"");
    let got = json_lsns(&stdout(&o));
    assert_eq!(got, [4, 5]);
    let o = run(&["dump", log, "--to", "3", "--limit", "2"], b"");
    assert_eq!(stdout(&o).lines().count(), 2, "{o:?}");
}

#[test]
fn completions_and_man_page_name_every_command() {
    for args in [
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["completions", "fish"],
        vec!["man"],
    ] {
        let o = run(&args, b"");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let out = stdout(&o);
        for cmd in ["append", "verify", "recover", "checkpoint", "import"] {
            assert!(out.contains(cmd), "{args:?} lacks {cmd}");
        }
    }
    assert!(stdout(&run(&["man"], b"")).contains(".TH"));
    let o = run(&["completions", "tcsh-9000"], b"");
    assert_one_line_error(&o);
}

#[test]
fn quiet_verify_and_import_print_no_progress() {
    let root = tempfile::tempdir().unwrap();
    // A log the command creates, private; a readable one draws a warning.
    let dir = root.path().join("log");
    let o = run(&["-q", "import", p(&dir)], b"{\"payload_b64\":\"eA==\"}\n");
    assert!(o.status.success(), "{o:?}");
    assert!(stderr(&o).is_empty(), "{o:?}");
    let o = run(&["verify", p(&dir), "--quiet"], b"");
    assert!(o.status.success(), "{o:?}");
    assert!(stderr(&o).is_empty(), "{o:?}");
}

#[test]
fn a_header_without_a_creation_time_falls_back_to_the_mtime_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["append", p(dir.path())], b"x\n");
    assert!(o.status.success(), "{o:?}");
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mut header = ringwal::format::SegmentHeader::decode(&bytes).unwrap();
    header.created_unix_ms = 0;
    let n = header.header_bytes() as usize;
    header.encode_blocks(&mut bytes[..n]);
    std::fs::write(&seg, &bytes).unwrap();
    let mtime = seg
        .metadata()
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for cmd in ["stat", "verify"] {
        let o = run(&[cmd, p(dir.path()), "--json"], b"");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let row = &v["segments"][0];
        assert_eq!(row["created_from"], "mtime", "{cmd}: {row}");
        assert_eq!(row["created_unix_ms"].as_u64(), Some(mtime), "{cmd}: {row}");
    }
}

/// `Some(())` if `tool` is on the `PATH`.
fn which(tool: &str) -> Option<()> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .any(|d| d.join(tool).is_file())
        .then_some(())
}

/// Run `ringwal ARGS` with its stdout and stderr on a pseudo-terminal
/// (through `script`), returning what the terminal showed; `None` where
/// `script` is not installed.
fn on_a_terminal(args: &str) -> Option<String> {
    let cmd = format!("{} {args}", env!("CARGO_BIN_EXE_ringwal"));
    which("script")?;
    let o = spawn(
        Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .wait_with_output()
    .ok()?;
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A log directory or file other users may read draws a warning from
/// `verify` and `stat` (path and mode), in `--json` too, and the status
/// stays what the log's state makes it.
#[test]
fn a_log_others_can_read_is_reported_without_changing_the_status() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let o = run(&["append", p(&dir)], b"a\nb\n");
    assert!(o.status.success(), "{o:?}");
    for cmd in ["verify", "stat"] {
        let o = run(&[cmd, p(&dir)], b"");
        assert_eq!(
            (o.status.code(), stderr(&o)),
            (Some(0), String::new()),
            "{cmd}"
        );
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "wal"))
        .unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A file beside the log that is no part of it is not the log's to
    // warn about.
    let readme = dir.join("README.txt");
    std::fs::write(&readme, b"notes").unwrap();
    std::fs::set_permissions(&readme, std::fs::Permissions::from_mode(0o644)).unwrap();
    for cmd in ["verify", "stat"] {
        let o = run(&[cmd, p(&dir)], b"");
        assert_eq!(o.status.code(), Some(0), "{cmd}: {o:?}");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("{} has mode 0755", dir.display())),
            "{err}"
        );
        assert!(
            err.contains(&format!("{} has mode 0644", seg.display())),
            "{err}"
        );
        assert!(!err.contains("README"), "{err}");
        let o = run(&[cmd, p(&dir), "--json"], b"");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let exposed = doc["exposed"].as_array().unwrap();
        assert_eq!(exposed.len(), 2, "{cmd}: {doc}");
        assert!(exposed.iter().any(|e| e["mode"] == "0644"), "{doc}");
    }
}

#[test]
fn file_mode_widens_what_append_creates() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("shared").join("log");
    let o = run(&["append", p(&dir), "--file-mode", "640"], b"a\n");
    assert!(o.status.success(), "{o:?}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o750);
    assert_eq!(mode(dir.parent().unwrap()), 0o750);
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap().path();
        assert_eq!(mode(&e), 0o640, "{}", e.display());
    }
    for bad in ["9", "400", "1640"] {
        let o = run(
            &["append", p(&root.path().join(bad)), "--file-mode", bad],
            b"a\n",
        );
        assert_one_line_error(&o);
        assert!(!root.path().join(bad).exists(), "{bad}: nothing created");
    }
}

#[test]
fn progress_shows_on_a_terminal_unless_quiet() {
    let dir = tempfile::tempdir().unwrap();
    small_segment_log(dir.path(), 200);
    // Private, as a log the library creates is: no warning on stderr.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let Some(shown) = on_a_terminal(&format!("verify {}", p(dir.path()))) else {
        eprintln!("skipped: no `script` to make a terminal with");
        return;
    };
    assert!(shown.contains("verifying node 1"), "{shown:?}");
    assert!(shown.contains("node 1: ok"), "{shown:?}");
    let quiet = on_a_terminal(&format!("-q verify {}", p(dir.path()))).unwrap();
    assert!(!quiet.contains("verifying"), "{quiet:?}");
    assert!(quiet.contains("node 1: ok"), "{quiet:?}");
    // Off a terminal nothing but the result (the other tests pipe
    // stdout: see quiet_verify_and_import_print_no_progress).
    let o = run(&["verify", p(dir.path())], b"");
    assert!(stderr(&o).is_empty(), "{o:?}");
}

// Data at rest: `--key-file` on every command that touches payloads,
// `append --compress`, and `append --max-log-bytes --on-full`.

/// Telemetry lines, each holding a marker no encrypted log may show.
fn telemetry_lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"secret\":\"PLAINTEXT-{i}\",\"host\":\"node-{}\",\"cpu\":{}}}\n",
                i % 3,
                i % 90
            )
        })
        .collect()
}

/// Whether any file in `dir` holds `needle`.
fn dir_holds(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let bytes = std::fs::read(e.unwrap().path()).unwrap_or_default();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

#[test]
fn key_file_encrypts_appends_and_every_reader_needs_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let key = root.path().join("k.hex");
    let other = root.path().join("other.key");
    std::fs::write(&key, format!("{}\n", "3c".repeat(32))).unwrap();
    std::fs::write(&other, [9u8; 32]).unwrap();
    // Key files must be private; a readable one needs --allow-readable-key.
    let private = |f: &Path| {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap()
    };
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = run(&["append", p(&dir), "--key-file", p(&key)], b"x\n");
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("mode 0644"), "{o:?}");
    assert!(!dir.exists(), "nothing written with a refused key");
    private(&key);
    private(&other);
    let input = telemetry_lines(50);
    let o = run(
        &["append", p(&dir), "--key-file", p(&key)],
        input.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir_holds(&dir, b"PLAINTEXT"), "plaintext on disk");

    // With the key: every line back, from cat and dump.
    let o = run(&["cat", p(&dir), "--key-file", p(&key)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), input);
    let o = run(&["dump", p(&dir), "--json", "--key-file", p(&key)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 50);

    // Without it, or with another: non-zero, a message naming the key
    // and the segment.
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(".wal"))
        .expect("a segment");
    for args in [
        vec!["cat", p(&dir)],
        vec!["dump", p(&dir)],
        vec!["cat", p(&dir), "--key-file", p(&other)],
        vec!["dump", p(&dir), "--key-file", p(&other)],
    ] {
        let o = run(&args, b"");
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = stderr(&o);
        assert!(e.contains("key") && e.contains(&segment), "{args:?}: {e}");
        assert!(
            !stdout(&o).contains("PLAINTEXT"),
            "{args:?} printed garbage"
        );
    }

    // verify without the key checks what it can and says so.
    let o = run(&["verify", p(&dir)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("encrypted") && stdout(&o).contains("node 1: ok"),
        "{}",
        stdout(&o)
    );
    let o = run(&["verify", p(&dir), "--key-file", p(&key)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("authenticated"), "{}", stdout(&o));
    // With a key that is not the log's: no success, a key problem.
    let o = run(&["verify", p(&dir), "--key-file", p(&other), "--json"], b"");
    assert_eq!(o.status.code(), Some(exit_statuses()["key"]), "{o:?}");
    assert!(
        stdout(&o).contains("encrypted, not decrypted: the key given"),
        "{}",
        stdout(&o)
    );
    let o = run(&["verify", p(&dir), "--key-file", p(&other)], b"");
    assert_eq!(o.status.code(), Some(exit_statuses()["key"]), "{o:?}");
    assert!(
        stdout(&o).contains("the key given is not the one it was written with"),
        "{}",
        stdout(&o)
    );
    let o = run(&["stat", p(&dir), "--key-file", p(&key)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("encrypted (key id 1; the key given fits)"),
        "{}",
        stdout(&o)
    );
    let o = run(&["stat", p(&dir), "--key-file", p(&other)], b"");
    assert!(stdout(&o).contains("is not its key"), "{}", stdout(&o));

    // A key file that is no key: a usage error naming the file.
    let o = run(&["cat", p(&dir), "--key-file", p(&dir.join("nope"))], b"");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    std::fs::write(root.path().join("bad.key"), "short").unwrap();
    std::fs::set_permissions(
        root.path().join("bad.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let o = run(
        &[
            "cat",
            p(&dir),
            "--key-file",
            p(&root.path().join("bad.key")),
        ],
        b"",
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("bad.key") && stderr(&o).contains("key"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compress_writes_smaller_logs_that_read_back_whatever_the_codec() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    // Long telemetry lines, so each is worth compressing.
    let input: String = (0..200)
        .map(|i| {
            format!(
                "{}\n",
                telemetry_lines(8).replace('\n', " ") + &format!("#{i}")
            )
        })
        .collect();
    let mut expected = String::new();
    for codec in ["lz4", "zstd", "none"] {
        let o = run(&["append", p(&dir), "--compress", codec], input.as_bytes());
        assert!(o.status.success(), "{codec}: {}", stderr(&o));
        expected.push_str(&input);
    }
    let o = run(&["cat", p(&dir)], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), expected);
    let o = run(&["verify", p(&dir)], b"");
    assert!(o.status.success(), "{}", stdout(&o));
    let o = run(&["append", p(&dir), "--compress", "brotli"], b"x\n");
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn max_log_bytes_drops_the_oldest_or_blocks_and_fails_cleanly() {
    let root = tempfile::tempdir().unwrap();
    let seg = (64 << 10).to_string();
    let max = (256 << 10).to_string();
    let input: String = (0..3000).map(|i| format!("{i:0>200}\n")).collect();

    let dir = root.path().join("drop");
    let o = run(
        &[
            "append",
            p(&dir),
            "--segment-bytes",
            &seg,
            "--max-record-bytes",
            "4096",
            "--max-log-bytes",
            &max,
            "--on-full",
            "drop-oldest",
        ],
        input.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let dropped: Vec<(u64, u64)> = stderr(&o)
        .lines()
        .filter_map(|l| l.split("dropped LSNs ").nth(1))
        .map(|r| {
            let (a, b) = r.split_once("..=").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(!dropped.is_empty(), "{}", stderr(&o));
    // The ranges run from LSN 1 with no hole, and cat starts right after.
    let mut next = 1;
    for &(a, b) in &dropped {
        assert_eq!(a, next);
        next = b + 1;
    }
    let o = run(&["cat", p(&dir)], b"");
    let cat = stdout(&o);
    let kept: Vec<&str> = cat.lines().collect();
    assert_eq!(
        kept.first().copied(),
        Some(format!("{:0>200}", next - 1).as_str())
    );
    assert_eq!(kept.len() as u64, 3000 - (next - 1));

    let dir = root.path().join("block");
    let o = run(
        &[
            "append",
            p(&dir),
            "--segment-bytes",
            &seg,
            "--max-record-bytes",
            "4096",
            "--max-log-bytes",
            &max,
            "--full-timeout-ms",
            "100",
        ],
        input.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("limit"), "{}", stderr(&o));
    let printed = stdout(&o).lines().count();
    assert!(printed > 0 && printed < 3000, "{printed}");
    // Every LSN printed is on disk, and the log is not damaged.
    let o = run(&["verify", p(&dir)], b"");
    assert!(o.status.success(), "{}", stdout(&o));
    let o = run(&["cat", p(&dir)], b"");
    assert!(stdout(&o).lines().count() >= printed);
}

/// A version-2 segment of node 1, base 1, as a version-2 writer laid it
/// out (its vouches carry no time): `payloads` in one write, then a clean
/// close's vouch block.
fn v2_log(dir: &Path, payloads: &[&[u8]]) {
    use ringwal::format::{self, Kind, SegmentHeader, Vouch};
    const SEG: u64 = 64 << 10;
    const SALT: u64 = 0x0123_4567_89ab_cdef;
    let mut buf = vec![0u8; SEG as usize];
    SegmentHeader {
        version: 2,
        log_id: 5,
        key_id: 0,
        key_check: 0,
        node: 1,
        base_lsn: 1,
        segment_bytes: SEG,
        salt: SALT,
        created_unix_ms: 0,
        torn_window: 0,
    }
    .encode_blocks(&mut buf);
    let untimed = |durable| Vouch {
        durable,
        submitted_unix_ns: None,
        nonce_salt: None,
    };
    let mut off = format::HEADER_BYTES;
    off += format::encode_vouch(&mut buf[off..], SALT, untimed(0));
    for (i, payload) in payloads.iter().enumerate() {
        off += format::encode_frame(&mut buf[off..], SALT, i as u64 + 1, 0, Kind::Data, payload);
    }
    let pad = format::padding_len(off as u64);
    format::encode_padding(&mut buf[off..], SALT, pad);
    off += pad;
    let n = format::encode_vouch(&mut buf[off..], SALT, untimed(payloads.len() as u64));
    format::encode_padding(&mut buf[off + n..], SALT, format::BLOCK - n);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format::segment_file_name(1, 1)), &buf).unwrap();
}

#[test]
fn cat_since_and_until_select_records_by_write_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = p(dir.path());
    let stamp = |t: std::time::SystemTime| humantime::format_rfc3339_nanos(t).to_string();
    let before = std::time::SystemTime::now();
    let o = run(&["append", log], b"a0\na1\na2\n");
    assert!(o.status.success(), "{o:?}");
    // The clock moves on between the two runs' writes.
    std::thread::sleep(Duration::from_millis(20));
    let mid = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_millis(20));
    let o = run(&["append", log], b"b0\nb1\n");
    assert!(o.status.success(), "{o:?}");
    let after = std::time::SystemTime::now();
    let cat = |args: &[&str]| {
        let o = run(&[&["cat", log], args].concat(), b"");
        assert!(o.status.success(), "{o:?}");
        assert_eq!(stderr(&o), "", "every record has a write time");
        stdout(&o)
    };
    assert_eq!(cat(&["--since", &stamp(mid)]), "b0\nb1\n");
    // The same instant written with another UTC offset.
    let plus_one = chrono::FixedOffset::east_opt(3600).unwrap();
    let offset = chrono::DateTime::<chrono::Utc>::from(mid)
        .with_timezone(&plus_one)
        .to_rfc3339();
    assert!(offset.ends_with("+01:00"), "{offset}");
    assert_eq!(cat(&["--since", &offset]), "b0\nb1\n");
    assert_eq!(cat(&["--until", &stamp(mid)]), "a0\na1\na2\n");
    assert_eq!(cat(&["--since", "1d"]), "a0\na1\na2\nb0\nb1\n");
    let window = ["--since", &stamp(before), "--until", &stamp(after)];
    assert_eq!(cat(&window), "a0\na1\na2\nb0\nb1\n");
    assert_eq!(cat(&["--until", "2000-01-01T00:00:00Z"]), "");
    // With the other bounds: the stream, --to and --limit still apply.
    assert_eq!(cat(&["--since", &stamp(mid), "--limit", "1"]), "b0\n");
    assert_eq!(cat(&["--until", &stamp(mid), "--to", "2"]), "a0\na1\n");
    // The write time in cat's and dump's JSON, within the bounds.
    for cmd in ["cat", "dump"] {
        let o = run(&[cmd, log, "--json"], b"");
        let times: Vec<std::time::SystemTime> = stdout(&o)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                humantime::parse_rfc3339(v["written_at"].as_str().unwrap()).unwrap()
            })
            .collect();
        assert_eq!(times.len(), 5, "{cmd}");
        assert!(times[..3].iter().all(|&t| before <= t && t <= mid), "{cmd}");
        assert!(times[3..].iter().all(|&t| mid <= t && t <= after), "{cmd}");
    }
    let o = run(&["dump", log], b"");
    assert!(
        stdout(&o).lines().all(|l| l.contains(" written=20")),
        "{o:?}"
    );
    // Values that are no time, or bounds that select nothing: usage.
    let usage = exit_statuses()["usage"];
    for args in [
        vec!["--since", "yesterday"],
        vec!["--until", "2026-13-01T00:00:00Z"],
        vec!["--since", "1h", "--until", "2h"],
    ] {
        let o = run(&[&["cat", log], &args[..]].concat(), b"");
        assert_eq!(o.status.code(), Some(usage), "{args:?}: {o:?}");
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    // A log written before format version 3: no record has a write time,
    // so none matches, and cat says how many it left out.
    let old = dir.path().join("v2");
    v2_log(&old, &[b"x", b"y", b"z"]);
    let o = run(&["cat", p(&old)], b"");
    assert_eq!(stdout(&o), "x\ny\nz\n", "{o:?}");
    let o = run(&["cat", p(&old), "--since", "1d"], b"");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("3 records left out"), "{o:?}");
    let o = run(&["cat", p(&old), "--json"], b"");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert!(v["written_at"].is_null(), "{v}");
    let o = run(&["dump", p(&old)], b"");
    assert!(
        stdout(&o).lines().all(|l| l.contains(" written=- ")),
        "{o:?}"
    );
}
