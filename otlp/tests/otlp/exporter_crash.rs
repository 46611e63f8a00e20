//! The receiver under SIGKILL, driven by a client nobody here wrote: the
//! OpenTelemetry Python SDK's own OTLP/HTTP exporters
//! (`tests/exporter/export.py`) export spans, metrics and logs while the
//! receiver is killed and restarted on the same directories and port. At
//! the end every item of every export the exporter reported as a success
//! must be in the blocks, nothing the exporter did not send may be, and
//! duplicates are counted. Once with blocks as files in a directory, once
//! as objects in a `file://` store (fewer kills: the store's path through
//! the flusher is the same one, only its writes differ).
//!
//! The SDK comes from the Python package registry, into a virtual
//! environment made by `tests/exporter/setup.sh` (which `.ci/run` runs
//! first): `$RINGWAL_OTLP_VENV`, else `<target>/tmp/otlp-venv`. The test
//! skips, saying so, only when python3 or its venv module is missing, and
//! not even then with `RINGWAL_OTLP_REQUIRE_EXPORTER=1` (CI sets it).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{blocks, files, start, Server};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

/// The exporter's Python, after making its environment if needed; `None`
/// (with the reason) when this machine has no python3 or venv module.
fn exporter_python() -> Result<PathBuf, String> {
    let venv = std::env::var_os("RINGWAL_OTLP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("otlp-venv"));
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exporter/setup.sh");
    let out = Command::new("sh")
        .arg(&setup)
        .arg(&venv)
        .stdin(Stdio::null())
        .output()
        .expect("running sh");
    match out.status.code() {
        Some(0) => Ok(venv.join("bin/python")),
        Some(3) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        _ => panic!(
            "{} {} failed: {}\n{}",
            setup.display(),
            venv.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A small xorshift, seeded from the clock (and printed), for the kills.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn item_id(attributes: &[KeyValue]) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == "item.id")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// Every `item.id` in the blocks under `out`, with how often it occurs;
/// each block decoded whole, as one request.
fn stored_items(out: &Path) -> HashMap<String, usize> {
    let mut ids = Vec::new();
    for (path, block) in blocks(out, "traces") {
        let req = ExportTraceServiceRequest::decode(&block[..])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let spans = req.resource_spans.into_iter().flat_map(|r| r.scope_spans);
        ids.extend(spans.flat_map(|s| s.spans).map(|s| item_id(&s.attributes)));
    }
    for (path, block) in blocks(out, "metrics") {
        let req = ExportMetricsServiceRequest::decode(&block[..])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let metrics = req
            .resource_metrics
            .into_iter()
            .flat_map(|r| r.scope_metrics);
        for m in metrics.flat_map(|s| s.metrics) {
            let Some(Data::Sum(sum)) = m.data else {
                panic!("{}: a metric that is no sum", path.display());
            };
            ids.extend(sum.data_points.iter().map(|p| item_id(&p.attributes)));
        }
    }
    for (path, block) in blocks(out, "logs") {
        let req = ExportLogsServiceRequest::decode(&block[..])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let logs = req.resource_logs.into_iter().flat_map(|r| r.scope_logs);
        ids.extend(
            logs.flat_map(|s| s.log_records)
                .map(|l| item_id(&l.attributes)),
        );
    }
    let mut counts = HashMap::new();
    for id in ids {
        *counts
            .entry(id.expect("every item has an item.id"))
            .or_default() += 1;
    }
    counts
}

/// A loopback port free right now (the receiver binds it again after
/// every kill).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn every_export_the_sdk_saw_succeed_is_in_the_blocks_after_sigkills() {
    sigkills(Out::Dir, 8, 150);
}

#[test]
fn every_export_the_sdk_saw_succeed_is_in_a_file_store_after_sigkills() {
    sigkills(Out::FileUrl, 4, 80);
}

/// How a run passes its block directory to `--out`.
#[derive(Clone, Copy)]
enum Out {
    /// As a path.
    Dir,
    /// As `file:///...`: an object store, whose objects are files laid
    /// out as the directory's are, so the blocks are read back alike.
    FileUrl,
}

/// Export `exports` requests per signal through the SDK while killing
/// the receiver up to `max_kills` times, then check the blocks.
fn sigkills(how: Out, max_kills: u32, exports_per_signal: usize) {
    let python = match exporter_python() {
        Ok(p) => p,
        Err(why) if std::env::var_os("RINGWAL_OTLP_REQUIRE_EXPORTER").is_none() => {
            eprintln!("skipped: the OpenTelemetry Python exporter cannot be set up here: {why}");
            return;
        }
        Err(why) => panic!("RINGWAL_OTLP_REQUIRE_EXPORTER is set, but: {why}"),
    };
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let out_arg = match how {
        Out::Dir => out.clone().into_os_string(),
        Out::FileUrl => format!("file://{}", out.display()).into(),
    };
    let report = tmp.path().join("report.json");
    let listen = format!("127.0.0.1:{}", free_port());
    // Small blocks, segments and a short age, so the kills land between
    // appends, seals, publishes and truncations alike.
    let flags = [
        "--block-bytes",
        "32768",
        "--block-age-ms",
        "100",
        "--segment-bytes",
        "1048576",
        "--max-body-bytes",
        "262144",
    ];
    let mut server: Server = start(&wal, &out_arg, &listen, &flags);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exporter/export.py");
    let mut driver = Command::new(&python)
        .arg(&script)
        .args(["--endpoint", &format!("http://{listen}")])
        .args(["--exports", &exports_per_signal.to_string()])
        .args(["--items", "20", "--pause-ms", "15"])
        .arg("--report")
        .arg(&report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the exporter");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill schedule seed {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(150);
    while driver.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the exporter did not finish");
        if kills < max_kills {
            std::thread::sleep(Duration::from_millis(300 + rng.below(700)));
            if driver.try_wait().unwrap().is_some() {
                break;
            }
            server.kill();
            kills += 1;
            server = start(&wal, &out_arg, &listen, &flags);
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let finished = driver.wait_with_output().unwrap();
    assert!(
        finished.status.success(),
        "the exporter failed: {}",
        String::from_utf8_lossy(&finished.stderr)
    );
    let (status, stderr) = server.terminate();
    assert!(status.success(), "SIGTERM: {status}: {stderr}");
    assert!(kills >= 3, "only {kills} kills landed during the export");

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let exports = report["exports"].as_array().unwrap();
    let (mut sent, mut acked) = (HashSet::new(), HashSet::new());
    let mut failed_exports = 0;
    for e in exports {
        let ok = e["ok"].as_bool().unwrap();
        failed_exports += usize::from(!ok);
        for id in e["items"].as_array().unwrap() {
            let id = id.as_str().unwrap().to_string();
            if ok {
                acked.insert(id.clone());
            }
            sent.insert(id);
        }
    }
    let stored = stored_items(&out);
    let lost: Vec<&String> = acked
        .iter()
        .filter(|id| !stored.contains_key(*id))
        .collect();
    let invented: Vec<&String> = stored.keys().filter(|id| !sent.contains(*id)).collect();
    let duplicates: usize = stored.values().map(|n| n - 1).sum();
    let unacked_stored = stored.keys().filter(|id| !acked.contains(*id)).count();
    eprintln!(
        "kills {kills}; exports {} ({failed_exports} reported failed); items sent {}, \
         acknowledged {}, stored {} distinct, lost {}, invented {}, duplicates {duplicates}, \
         stored without acknowledgement {unacked_stored}; blocks {}, other files {}",
        exports.len(),
        sent.len(),
        acked.len(),
        stored.len(),
        lost.len(),
        invented.len(),
        ["traces", "metrics", "logs"]
            .iter()
            .map(|s| blocks(&out, s).len())
            .sum::<usize>(),
        ["traces", "metrics", "logs"]
            .iter()
            .map(|s| files(&out, s).len() - blocks(&out, s).len())
            .sum::<usize>()
    );
    assert!(lost.is_empty(), "acknowledged items lost: {lost:?}");
    assert!(invented.is_empty(), "items nobody sent: {invented:?}");
    assert_eq!(
        exports.len(),
        3 * exports_per_signal,
        "every export was reported"
    );
}
