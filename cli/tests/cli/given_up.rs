//! A point-in-time repair that gives up an LSN, then an append: every
//! reading command steps over the LSN given up, exits 0 and counts the
//! same records.

use std::process::Output;

use crate::common::{json_lsns, p, run, segments};

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The `"records"` of the first node of a `--json` document.
fn json_records(doc: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(doc).unwrap();
    v["nodes"][0]["records"].as_u64().unwrap()
}

#[test]
fn cat_dump_verify_and_stat_agree_past_an_lsn_given_up() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let d = p(&dir);
    let lines: String = (1..=50).map(|i| format!("record-{i}\n")).collect();
    ok(&run(&["append", "-q", d], lines.as_bytes()), "append");

    // Damage the payload of the last record, LSN 50, of the closed log.
    let last = ok(&run(&["dump", "--json", d], b""), "dump")
        .lines()
        .last()
        .unwrap()
        .to_string();
    let last: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["lsn"], 50);
    let seg = dir.join(last["segment"].as_str().unwrap());
    assert_eq!(segments(&dir), std::slice::from_ref(&seg));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[last["offset"].as_u64().unwrap() as usize + 24] ^= 0x5a;
    std::fs::write(&seg, bytes).unwrap();
    assert!(
        !run(&["verify", d], b"").status.success(),
        "the damage is seen"
    );

    let repaired = ok(
        &run(&["recover", "--point-in-time", "--apply", d], b""),
        "recover",
    );
    assert!(repaired.contains("give up LSNs 50..=50"), "{repaired}");
    assert_eq!(
        ok(&run(&["append", d], b"after\n"), "append after").trim(),
        "51"
    );

    let want: Vec<String> = (1..50)
        .map(|i| format!("record-{i}"))
        .chain(["after".to_string()])
        .collect();
    let cat = ok(&run(&["cat", d], b""), "cat");
    assert_eq!(cat.lines().collect::<Vec<_>>(), want);
    let dump = ok(&run(&["dump", d], b""), "dump");
    assert_eq!(dump.lines().count(), 50, "{dump}");
    assert!(
        dump.lines().last().unwrap().starts_with("lsn=51 "),
        "{dump}"
    );
    let json = ok(&run(&["dump", "--json", d], b""), "dump --json");
    let lsns = json_lsns(&json);
    assert_eq!(lsns, (1..50).chain([51]).collect::<Vec<u64>>());

    let verify = ok(&run(&["verify", d], b""), "verify");
    assert!(verify.contains("LSN 1..=51 (50 records)"), "{verify}");
    let stat = ok(&run(&["stat", d], b""), "stat");
    assert!(stat.contains("LSN 1..=51 (50 records)"), "{stat}");
    assert_eq!(
        json_records(&ok(&run(&["verify", "--json", d], b""), "verify --json")),
        50
    );
    assert_eq!(
        json_records(&ok(&run(&["stat", "--json", d], b""), "stat --json")),
        50
    );
}
