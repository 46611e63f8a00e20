//! `ringwal bench --busy-neighbour`: the neighbour is a real process,
//! pinned to the CPU the report names, that really spun, and is gone
//! once the bench is; on a single CPU the flag is refused, clearly.

use std::path::Path;

use crate::common::{p, run};

#[test]
fn bench_busy_neighbour_spins_on_the_last_cpu_and_is_gone_after() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = run(
        &[
            "bench",
            "--busy-neighbour",
            "--secs",
            "1",
            "--producers",
            "1",
            "--json",
            p(&json),
        ],
        b"",
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // The CPUs the binary may run on: this process's, which it inherits.
    let cpus = ringwal_platform::cpu::allowed();
    if cpus.len() < 2 {
        // Nowhere to put a neighbour: a `config` failure (status 2) that
        // says why, before any log is opened or result written.
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(
            stderr.contains("--busy-neighbour needs at least 2 CPUs"),
            "{stderr}"
        );
        assert!(!json.exists(), "results written after a refusal");
        return;
    }
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON results")).unwrap();
    let nb = &v["busy_neighbour"];
    let pid = nb["pid"].as_u64().unwrap_or_else(|| panic!("a pid in {v}"));
    let cpu = nb["cpu"].as_u64().unwrap_or_else(|| panic!("a cpu in {v}"));
    assert_eq!(Some(&(cpu as usize)), cpus.last(), "the last CPU: {v}");
    // The kernel's word that it was pinned, read while it ran.
    assert_eq!(nb["cpus_allowed"], cpu.to_string(), "{v}");
    // It spun: a neighbour that only slept, or never ran, would show
    // next to nothing (0 or 1 clock tick). Beside the other tests' busy
    // threads on its CPU it may get much less than a whole CPU, but a
    // spinning thread gets its share: five ticks of a second at least.
    let share = nb["cpu_share"].as_f64().unwrap();
    let wall = nb["wall_secs"].as_f64().unwrap();
    assert!(wall >= 0.9, "the neighbour ran {wall} s of a 1 s load: {v}");
    assert!(share > 0.05, "the neighbour got {share} of a CPU: {v}");
    assert!(
        share < 1.2,
        "one pinned thread cannot use {share} CPUs: {v}"
    );
    // The report says the same.
    assert!(
        stdout.contains(&format!(" busy_neighbour=cpu{cpu} dir=")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "neighbour:   pid {pid} spinning on CPU {cpu} (allowed: {cpu}) got "
        )),
        "{stdout}"
    );
    // Killed and reaped: no process of that id, or (the id reused in
    // the meantime) none that is a neighbour.
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let still_spinning = std::fs::read(proc_dir.join("environ"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("RINGWAL_BUSY_NEIGHBOUR_CPU="));
    assert!(!still_spinning, "neighbour {pid} left running");
}

/// Without the flag nothing is started and the JSON says so.
#[test]
fn bench_without_busy_neighbour_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = run(
        &[
            "bench",
            "--secs",
            "0.2",
            "--producers",
            "1",
            "--json",
            p(&json),
        ],
        b"",
    );
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["busy_neighbour"].is_null(), "{v}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("busy_neighbour"), "{stdout}");
    assert!(!stdout.contains("neighbour:"), "{stdout}");
}
