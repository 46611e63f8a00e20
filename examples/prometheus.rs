//! Serve a log's `Stats` to Prometheus: a writer appends in the
//! background while `/metrics` on 127.0.0.1:9464 answers with the text
//! format, published through the `metrics` facade at each scrape.
//!
//! Run: `cargo run --release --features metrics --example prometheus
//! [DIR] [SECONDS]` (DIR defaults to a temporary directory; SECONDS to
//! serve, default 30), then `curl 127.0.0.1:9464/metrics`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use ringwal::{Config, Wal};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = args
        .get(1)
        .map_or_else(|| tmp.path().join("log"), std::path::PathBuf::from);
    let secs: u64 = args.get(2).map_or(30, |s| s.parse().expect("SECONDS"));
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("no other recorder");

    let (wal, _) = Wal::open(&dir, Config::default()).expect("open");
    let wal = Arc::new(wal);
    let until = Instant::now() + Duration::from_secs(secs);
    let writer = {
        let wal = wal.clone();
        std::thread::spawn(move || {
            while Instant::now() < until {
                let t = wal.append(0, &[b'x'; 1024]).expect("append");
                t.wait(ringwal::Level::Durable).expect("durable");
            }
        })
    };

    let listener = TcpListener::bind("127.0.0.1:9464").expect("bind 127.0.0.1:9464");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    println!("serving http://127.0.0.1:9464/metrics for {secs} s");
    while Instant::now() < until {
        let Ok((stream, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        stream.set_nonblocking(false).expect("blocking stream");
        // The request line and headers are read and ignored: every path
        // gets the metrics.
        let mut reader = BufReader::new(&stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        wal.publish_metrics();
        let body = handle.render();
        let mut out = &stream;
        let _ = write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    writer.join().expect("writer");
    Arc::try_unwrap(wal)
        .expect("sole owner")
        .close()
        .expect("close");
}
