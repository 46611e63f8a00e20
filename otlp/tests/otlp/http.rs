//! The receiver's HTTP contract, against the binary: what it refuses and
//! what it stores, malformed, oversized and compressed bodies, a full
//! log, and a restart after SIGKILL.

use std::io::Write;
use std::path::Path;

use crate::common::{self, blocks, files, frames, post, request, start};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;

const LOOPBACK: &str = "127.0.0.1:0";

/// A logs request with one record whose body is `padding` bytes long.
fn log_of(padding: usize) -> Vec<u8> {
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("x".repeat(padding))),
                    }),
                    ..LogRecord::default()
                }],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
    .encode_to_vec()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// The span names in `out`'s trace blocks, each block decoded whole.
fn span_names(out: &Path) -> Vec<String> {
    blocks(out, "traces")
        .iter()
        .flat_map(|(_, b)| {
            ExportTraceServiceRequest::decode(&b[..])
                .expect("a block is one request")
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .map(|s| s.name)
        .collect()
}

#[test]
fn malformed_bodies_are_refused_with_400_and_nothing_of_them_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let server = start(&wal, &out, LOOPBACK, &["--block-age-ms", "50"]);
    let good = common::traces(&["kept"], 0);
    let malformed: [&[u8]; 4] = [
        // A varint where the resource list (a message) belongs.
        &[0x08, 0x01],
        // A length running past the end of the body.
        &[0x0a, 0x10, 0x01],
        // A request cut short in the middle.
        &good[..good.len() - 3],
        b"{\"resourceSpans\": []}",
    ];
    for signal in ["/v1/traces", "/v1/metrics", "/v1/logs"] {
        for body in malformed {
            let r = post(server.addr, signal, &[], body);
            assert_eq!(r.status, 400, "{signal} {body:?}");
            assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
            assert!(!r.body.is_empty(), "a google.rpc.Status explains it");
        }
    }
    let r = post(server.addr, "/v1/traces", &[], &good);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "an empty ExportTraceServiceResponse");
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(span_names(&out), ["kept"]);
    assert!(blocks(&out, "metrics").is_empty() && blocks(&out, "logs").is_empty());
    assert_eq!(
        frames(&wal),
        [(1, good)],
        "only the good body reached the log"
    );
}

#[test]
fn wrong_types_encodings_methods_and_paths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let server = start(&wal, &out, LOOPBACK, &[]);
    let body = common::traces(&["x"], 0);
    let json = request(
        server.addr,
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(json.status, 415);
    let none = request(server.addr, "POST", "/v1/traces", &[], &body);
    assert_eq!(none.status, 415);
    let br = post(
        server.addr,
        "/v1/traces",
        &[("Content-Encoding", "br")],
        &body,
    );
    assert_eq!(br.status, 415);
    let get = request(server.addr, "GET", "/v1/traces", &[], b"");
    assert_eq!(get.status, 405);
    assert_eq!(post(server.addr, "/v1/profiles", &[], &body).status, 404);
    // A parameter on the media type is fine.
    let with_param = post(
        server.addr,
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf; charset=binary")],
        &body,
    );
    assert_eq!(with_param.status, 200);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(frames(&wal).len(), 1);
}

#[test]
fn bodies_over_the_limit_are_413_before_and_after_decompression() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let server = start(&wal, &out, LOOPBACK, &["--max-body-bytes", "4096"]);
    let big = log_of(5000);
    assert_eq!(post(server.addr, "/v1/logs", &[], &big).status, 413);
    // Small on the wire, over the limit once inflated.
    let bomb = gzip(&log_of(1 << 20));
    assert!(bomb.len() < 4096);
    let r = post(
        server.addr,
        "/v1/logs",
        &[("Content-Encoding", "gzip")],
        &bomb,
    );
    assert_eq!(r.status, 413);
    let fits = log_of(3000);
    assert_eq!(post(server.addr, "/v1/logs", &[], &fits).status, 200);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(frames(&wal), [(3, fits.clone())]);
    let stored: Vec<Vec<u8>> = blocks(&out, "logs").into_iter().map(|(_, b)| b).collect();
    assert_eq!(stored, [fits]);
}

#[test]
fn compressed_bodies_are_stored_decompressed_and_broken_ones_are_400() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let server = start(&wal, &out, LOOPBACK, &[]);
    let a = common::traces(&["gzipped"], 0);
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Content-Encoding", "gzip")],
        &gzip(&a),
    );
    assert_eq!(r.status, 200);
    let b = common::traces(&["deflated"], 0);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&b).unwrap();
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Content-Encoding", "deflate")],
        &z.finish().unwrap(),
    );
    assert_eq!(r.status, 200);
    let mut broken = gzip(&common::traces(&["broken"], 0));
    let mid = broken.len() / 2;
    broken[mid] ^= 0xff;
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Content-Encoding", "gzip")],
        &broken,
    );
    assert_eq!(r.status, 400);
    // Not gzip at all.
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Content-Encoding", "gzip")],
        &a,
    );
    assert_eq!(r.status, 400);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(span_names(&out), ["gzipped", "deflated"]);
    assert_eq!(frames(&wal), [(1, a), (1, b)]);
}

#[test]
fn a_full_log_answers_503_with_retry_after_and_keeps_every_acknowledged_body() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    // Nothing is sealed while it runs, so nothing is truncated: the log
    // fills at two segments of 64 KiB.
    let never = [
        "--segment-bytes",
        "65536",
        "--max-log-bytes",
        "131072",
        "--block-age-ms",
        "3600000",
        "--block-bytes",
        "1000000000",
        "--max-body-bytes",
        "16384",
    ];
    let server = start(&wal, &out, LOOPBACK, &never);
    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0..200 {
        let body = log_of(8000 + i);
        let r = post(server.addr, "/v1/logs", &[], &body);
        match r.status {
            200 => acked.push(body),
            503 => {
                assert_eq!(r.header("retry-after"), Some("1"));
                refused += 1;
                if refused == 2 {
                    break;
                }
            }
            s => panic!("status {s}"),
        }
    }
    assert_eq!(refused, 2, "the log never filled");
    assert!(acked.len() >= 8, "only {} bodies fit", acked.len());
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    let stored: Vec<Vec<u8>> = blocks(&out, "logs").into_iter().map(|(_, b)| b).collect();
    assert_eq!(
        stored.concat(),
        acked.concat(),
        "every 200, nothing refused"
    );

    // Published, the log is truncated at the next start and takes bodies again.
    let server = start(&wal, &out, LOOPBACK, &never);
    for i in 0..3 {
        let r = post(server.addr, "/v1/logs", &[], &log_of(8000 + i));
        assert_eq!(r.status, 200, "after a restart");
    }
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        !stderr.contains("replayed"),
        "nothing was left to replay: {stderr}"
    );
}

#[test]
fn after_sigkill_the_next_start_puts_every_acknowledged_body_in_a_block_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let hold = ["--block-age-ms", "3600000"];
    let server = start(&wal, &out, LOOPBACK, &hold);
    let names = ["a", "b", "c", "d", "e"];
    for n in &names[..3] {
        assert_eq!(
            post(server.addr, "/v1/traces", &[], &common::traces(&[n], 0)).status,
            200
        );
    }
    server.kill();
    assert!(
        files(&out, "traces").is_empty(),
        "nothing was sealed before the kill"
    );

    let server = start(&wal, &out, LOOPBACK, &hold);
    // The replay sealed them before the server took a request.
    assert_eq!(span_names(&out), ["a", "b", "c"]);
    for n in &names[3..] {
        assert_eq!(
            post(server.addr, "/v1/traces", &[], &common::traces(&[n], 0)).status,
            200
        );
    }
    server.kill();

    let server = start(&wal, &out, LOOPBACK, &hold);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(span_names(&out), names, "each body once, in order");
    for name in files(&out, "traces") {
        assert!(
            name.ends_with(".pb") && !name.starts_with('.'),
            "a leftover: {name}"
        );
    }
}

/// A log that cannot be opened: the message names the path and the OS
/// error under it (here ENOTDIR, a path under a regular file), the cause
/// an operator needs, and the receiver never listens.
#[test]
fn a_log_that_cannot_be_opened_is_reported_with_its_os_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let wal = file.join("wal");
    let run = std::process::Command::new(common::BIN)
        .args(["--listen", LOOPBACK, "--wal"])
        .arg(&wal)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(run.stdout.is_empty(), "it must not listen");
    let message = format!("ringwal-otlp: I/O error on {}: ", wal.display());
    assert!(stderr.starts_with(&message), "{stderr}");
    assert!(stderr.contains("Not a directory (os error"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
