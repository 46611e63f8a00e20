//! `ringwal-otlp bench`: export bodies per second and the latency of the
//! 200, for the receiver on the log at `written` and at `durable`, and for
//! the same receiver writing each body straight to a file with an
//! `fdatasync` before its 200 (the baseline a collector author writes
//! first). Same HTTP stack, same checks, same load; only the sink differs.
//!
//! Each run starts a receiver on a fresh directory, on 127.0.0.1 with an
//! ephemeral port, and drives it from closed-loop clients in the same
//! process: each client keeps one HTTP/1.1 connection and posts the next
//! body as soon as the previous one is answered. A client counts a body
//! only if it was sent after the warm-up and answered 200 before the end.
//! The sinks take turns within each run, so drift on a shared machine
//! touches all of them; the report gives the median over the runs.

use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use ringwal::Level;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::blocks::{Out, Sealing};
use crate::receiver::{Options, Receiver};
use crate::server::{self, App, Sink};

/// What one benchmark invocation measures.
#[derive(Clone, Debug)]
pub struct Plan {
    pub dir: PathBuf,
    pub sizes: Vec<usize>,
    pub clients: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub runs: usize,
}

/// The sinks compared, in the order they take turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Written,
    Durable,
    FsyncFile,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Written, Kind::Durable, Kind::FsyncFile];

    fn name(self) -> &'static str {
        match self {
            Kind::Written => "ringwal, written",
            Kind::Durable => "ringwal, durable",
            Kind::FsyncFile => "file + fdatasync",
        }
    }
}

/// One run of one sink at one size.
#[derive(Clone, Copy, Debug)]
struct Sample {
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Answers other than 200 (503 when the log was full, say).
    refused: u64,
}

/// Run the plan and print a table (Markdown) of medians to stdout.
pub fn run(plan: &Plan) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    println!(
        "| body | sink | bodies/s | p50 of the 200 (ms) | p99 of the 200 (ms) | bodies/s vs file | p99 vs file | refused |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for &size in &plan.sizes {
        let body = Bytes::from(traces_body(size));
        let mut samples: Vec<(Kind, Vec<Sample>)> =
            Kind::ALL.iter().map(|&k| (k, Vec::new())).collect();
        for _ in 0..plan.runs {
            for (kind, runs) in &mut samples {
                let scratch = tempfile::Builder::new()
                    .prefix("otlp-bench")
                    .tempdir_in(&plan.dir)
                    .map_err(|e| format!("{}: {e}", plan.dir.display()))?;
                let sample = rt.block_on(one_run(*kind, scratch.path(), plan, body.clone()))?;
                runs.push(sample);
            }
        }
        let medians: Vec<(Kind, Sample)> =
            samples.iter().map(|(k, runs)| (*k, median(runs))).collect();
        let base = medians
            .iter()
            .find(|(k, _)| *k == Kind::FsyncFile)
            .map(|(_, s)| *s)
            .ok_or("no baseline")?;
        for (kind, s) in medians {
            println!(
                "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2}x | {:.2}x | {} |",
                human(size),
                kind.name(),
                s.per_sec,
                s.p50_ms,
                s.p99_ms,
                s.per_sec / base.per_sec,
                s.p99_ms / base.p99_ms,
                s.refused
            );
        }
    }
    Ok(())
}

fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// The per-field median over runs (each field on its own).
fn median(runs: &[Sample]) -> Sample {
    let mid = |f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut refused: Vec<u64> = runs.iter().map(|s| s.refused).collect();
    refused.sort_unstable();
    Sample {
        per_sec: mid(|s| s.per_sec),
        p50_ms: mid(|s| s.p50_ms),
        p99_ms: mid(|s| s.p99_ms),
        refused: refused[refused.len() / 2],
    }
}

/// An `ExportTraceServiceRequest` of about `size` bytes: spans of some
/// 250 bytes each, with ids, times and a few attributes, as an SDK sends.
pub fn traces_body(size: usize) -> Vec<u8> {
    let attr = |k: &str, v: String| KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v)),
        }),
        ..KeyValue::default()
    };
    let mut spans = Vec::new();
    let mut len = 0;
    for i in 0u64.. {
        if len >= size {
            break;
        }
        let span = Span {
            trace_id: u128::from(i).to_be_bytes().to_vec(),
            span_id: i.to_be_bytes().to_vec(),
            name: format!("GET /api/items/{i}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + i * 1000,
            end_time_unix_nano: 1_700_000_000_000_000_000 + i * 1000 + 250_000,
            attributes: vec![
                attr("http.request.method", "GET".into()),
                attr("url.path", format!("/api/items/{i}")),
                attr("server.address", "items.internal.example".into()),
                attr("user_agent.original", "bench-client/1.0 (linux)".into()),
            ],
            ..Span::default()
        };
        // A repeated message field: one tag byte, the length, the span.
        let one = span.encoded_len();
        len += 1 + prost::length_delimiter_len(one) + one;
        spans.push(span);
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    };
    request.encode_to_vec()
}

/// A fresh sink of `kind` in `dir`.
async fn sink(kind: Kind, dir: &Path, max_body: usize) -> Result<Sink, String> {
    Ok(match kind {
        Kind::FsyncFile => {
            let path = dir.join("bodies");
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Sink::FsyncFile(Mutex::new(file))
        }
        Kind::Written | Kind::Durable => {
            let opts = Options {
                wal: dir.join("wal"),
                out: Out::Dir(dir.join("out")),
                level: if kind == Kind::Written {
                    Level::Written
                } else {
                    Level::Durable
                },
                sealing: Sealing {
                    bytes: 4 << 20,
                    age: Duration::from_secs(1),
                },
                max_body,
                segment_bytes: 64 << 20,
                max_log_bytes: 4 << 30,
            };
            let (receiver, _) = tokio::task::spawn_blocking(move || Receiver::open(&opts))
                .await
                .map_err(|e| e.to_string())??;
            Sink::Log(receiver)
        }
    })
}

async fn one_run(kind: Kind, dir: &Path, plan: &Plan, body: Bytes) -> Result<Sample, String> {
    let max_body = (body.len() * 2).max(1 << 20);
    let sink = sink(kind, dir, max_body).await?;
    let (fatal, _) = watch::channel(false);
    let app = Arc::new(App {
        sink,
        max_body,
        token: None,
        fatal,
    });
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = tokio::spawn(
        axum::serve(listener, server::router(app.clone()))
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            })
            .into_future(),
    );
    let start = Instant::now() + Duration::from_millis(50);
    let (from, until) = (start + plan.warmup, start + plan.warmup + plan.measure);
    let mut clients = Vec::new();
    for _ in 0..plan.clients {
        clients.push(tokio::spawn(client(addr, body.clone(), from, until)));
    }
    let (mut latencies, mut refused) = (Vec::new(), 0u64);
    for c in clients {
        let (l, r) = c.await.map_err(|e| e.to_string())??;
        latencies.extend(l);
        refused += r;
    }
    latencies.sort_unstable();
    let quantile = |q: f64| {
        let last = latencies.len().saturating_sub(1);
        let at = ((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1);
        latencies
            .get(at.min(last))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let _ = stop_tx.send(true);
    server
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let app = server::into_app(app).await?;
    if let Sink::Log(receiver) = app.sink {
        tokio::task::spawn_blocking(move || receiver.finish())
            .await
            .map_err(|e| e.to_string())??;
    }
    Ok(Sample {
        per_sec: latencies.len() as f64 / plan.measure.as_secs_f64(),
        p50_ms: quantile(0.50),
        p99_ms: quantile(0.99),
        refused,
    })
}

/// One closed-loop client: post `body` to `/v1/traces` until `until`;
/// the latencies of the 200s to bodies sent from `from` on and answered
/// by `until`, and how many such bodies were refused.
async fn client(
    addr: std::net::SocketAddr,
    body: Bytes,
    from: Instant,
    until: Instant,
) -> Result<(Vec<Duration>, u64), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let (mut latencies, mut refused) = (Vec::new(), 0);
    let uri = format!("http://{addr}/v1/traces");
    loop {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        let request = Request::post(&uri)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let ok = response.status().is_success();
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let answered = Instant::now();
        if sent < from || answered > until {
            continue;
        }
        if ok {
            latencies.push(answered.duration_since(sent));
        } else {
            refused += 1;
        }
    }
    drop(sender);
    let _ = conn.await;
    Ok((latencies, refused))
}
