//! `--out` as an object store URL: blocks as objects on a real S3 server
//! (a Garage node), named and laid out as the files are, held while the
//! store is down and published once it is back; and the URLs refused at
//! the start, with what is wrong and where.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use ringwal::archive::{Store, StoreOptions};

use crate::common::garage::Garage;
use crate::common::{self, post, start_with_env, Server};

const LOOPBACK: &str = "127.0.0.1:0";

/// This process's own client for `url` on `garage`, its settings given
/// rather than taken from the environment.
fn client(garage: &Garage, url: &str) -> Store {
    let mut opts = StoreOptions::default();
    opts.endpoint = Some(garage.endpoint().to_string());
    opts.region = Some(garage.region().to_string());
    opts.access_key_id = Some(garage.key_id().to_string());
    opts.secret_access_key = Some(garage.secret().to_string());
    Store::open(url, &opts).expect("a client for Garage")
}

/// One published traces block: the LSNs its name claims and the span
/// names it holds.
struct Block {
    first: u64,
    watermark: u64,
    spans: Vec<String>,
}

/// The traces blocks under `store`'s prefix, by first LSN, each read
/// back whole as one request. Anything else there fails the test.
fn blocks(store: &Store) -> Vec<Block> {
    let mut found: Vec<Block> = store
        .list("traces")
        .expect("listing the blocks")
        .into_iter()
        .map(|name| {
            let parsed = name.strip_suffix(".pb").and_then(|n| {
                let (first, watermark) = n.split_once('-')?;
                Some((first.parse().ok()?, watermark.parse().ok()?))
            });
            let (first, watermark) =
                parsed.unwrap_or_else(|| panic!("traces/{name} is not a block"));
            let bytes = store
                .get_existing(&format!("traces/{name}"))
                .expect("reading a block");
            let request = ExportTraceServiceRequest::decode(&bytes[..])
                .unwrap_or_else(|e| panic!("traces/{name} is not one request: {e}"));
            let spans = request
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .map(|s| s.name)
                .collect();
            Block {
                first,
                watermark,
                spans,
            }
        })
        .collect();
    found.sort_by_key(|b| b.first);
    found
}

/// The span names of every block in LSN order, after checking what the
/// names claim: each block's bodies fit below its watermark, and no
/// block starts below the watermark of the one before.
fn published(store: &Store) -> Vec<String> {
    let blocks = blocks(store);
    for b in &blocks {
        let bodies = b.spans.len() as u64;
        assert!(
            b.first + bodies <= b.watermark,
            "block {}-{} claims fewer LSNs than its {bodies} bodies",
            b.first,
            b.watermark
        );
    }
    for pair in blocks.windows(2) {
        assert!(
            pair[1].first >= pair[0].watermark,
            "block {}-{} overlaps {}-{}",
            pair[1].first,
            pair[1].watermark,
            pair[0].first,
            pair[0].watermark
        );
    }
    blocks.into_iter().flat_map(|b| b.spans).collect()
}

/// Wait until the blocks hold exactly `sent`, in order.
fn wait_for_blocks(store: &Store, sent: &[String], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = published(store);
        if now == sent {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {within:?}, {} of {} bodies published",
            now.len(),
            sent.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Export `count` bodies named `phase-N`, each answered 200, and note
/// them in `sent`.
fn export(server: &Server, phase: &str, count: usize, sent: &mut Vec<String>) {
    for i in 0..count {
        let name = format!("{phase}-{i}");
        let r = post(
            server.addr,
            "/v1/traces",
            &[],
            &common::traces(&[&name], 8000),
        );
        assert_eq!(r.status, 200, "{name}");
        sent.push(name);
    }
}

#[test]
fn blocks_are_s3_objects_held_through_an_outage_and_published_once_it_ends() {
    let Some(mut garage) = Garage::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join("wal");
    let url = garage.s3_url("otlp/blocks");
    let store = client(&garage, &url);
    let env = garage.env();
    let flags = [
        "--block-age-ms",
        "100",
        "--segment-bytes",
        "65536",
        "--max-body-bytes",
        "16384",
    ];
    let mut server = start_with_env(&wal, &url, LOOPBACK, &flags, &env);
    let mut sent = Vec::new();

    export(&server, "up", 10, &mut sent);
    wait_for_blocks(&store, &sent, Duration::from_secs(30));
    assert_eq!(blocks(&store)[0].first, 1, "named by LSNs, from the first");

    // Down: every body is still answered once it is in the log, and the
    // flusher holds the blocks it cannot put, for as long as it takes.
    garage.stop();
    export(&server, "down", 10, &mut sent);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the receiver stopped while the store was down"
    );
    garage.restart();
    wait_for_blocks(&store, &sent, Duration::from_secs(90));

    // Down again, and the receiver killed meanwhile: what it held was
    // still pending, so still in the log, and the next start publishes
    // it before it takes a request.
    garage.stop();
    export(&server, "killed", 10, &mut sent);
    server.kill();
    garage.restart();
    let server = start_with_env(&wal, &url, LOOPBACK, &flags, &env);
    assert_eq!(published(&store), sent, "the replay published them");
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(published(&store), sent, "each body once, in order");
}

/// Run the receiver on `out` and `extra` flags, expecting it to refuse
/// to start: non-zero exit, never listening, one line on stderr, which
/// is returned.
fn refused(out: &str, extra: &[&str], env: &[(String, String)]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let run = Command::new(common::BIN)
        .args(["--listen", LOOPBACK, "--wal"])
        .arg(tmp.path().join("wal"))
        .args(["--out", out])
        .args(extra)
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "{out} was taken: {stderr}");
    assert!(run.stdout.is_empty(), "it must not listen: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn an_unknown_scheme_or_a_relative_file_url_is_refused_at_the_start() {
    let e = refused("ftp://host/blocks", &[], &[]);
    assert!(
        e.contains("ftp://host/blocks") && e.contains("scheme"),
        "{e}"
    );
    let e = refused("file://relative/blocks", &[], &[]);
    assert!(
        e.contains("file://relative/blocks") && e.contains("absolute"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = refused(
        dir.path().to_str().unwrap(),
        &["--s3-endpoint", "http://127.0.0.1:1"],
        &[],
    );
    assert!(e.contains("--s3-endpoint") && e.contains("s3://"), "{e}");
    assert!(
        !Path::new(&dir.path().join("traces")).exists(),
        "nothing made"
    );
}

#[test]
fn a_missing_bucket_or_a_wrong_key_is_refused_at_the_start_naming_the_object() {
    let Some(garage) = Garage::start() else {
        return;
    };
    // The endpoint and region as flags, the key from the environment.
    let flags = [
        "--s3-endpoint",
        garage.endpoint(),
        "--s3-region",
        garage.region(),
    ];
    let env: Vec<(String, String)> = garage
        .env()
        .into_iter()
        .filter(|(k, _)| k.starts_with("AWS_") && !k.contains("REGION") && k != "AWS_ENDPOINT_URL")
        .collect();
    let e = refused("s3://no-such-bucket/otlp", &flags, &env);
    assert!(e.contains("s3://no-such-bucket/otlp/traces"), "{e}");
    assert!(e.contains("missing"), "{e}");

    let wrong: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_SECRET_ACCESS_KEY" => (k.clone(), "0".repeat(v.len())),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let e = refused(&garage.s3_url("otlp"), &flags, &wrong);
    assert!(e.contains(&garage.s3_url("otlp/traces")), "{e}");
    assert!(e.contains("refused"), "{e}");

    // With the right key the same flags reach the bucket.
    let tmp = tempfile::tempdir().unwrap();
    let wal = tmp.path().join("wal");
    let server = common::start_with_env(&wal, &garage.s3_url("otlp"), LOOPBACK, &flags, &env);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
}
