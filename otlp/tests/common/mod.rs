//! The receiver as a child process, a plain HTTP/1.1 client, block
//! readers, and the workspace's S3 server (`garage`), shared by the
//! receiver's tests.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[path = "../../../tests/common/garage.rs"]
pub mod garage;

/// Taken by `garage` around each spawn of its script, as it is in the
/// workspace's tests, where spawns must not overlap the opening of logs.
/// Here nothing else takes it: every log is opened by a child process.
static SPAWNING: Mutex<()> = Mutex::new(());

/// Held while `garage` spawns a process (see [`SPAWNING`]).
pub fn spawning_processes() -> MutexGuard<'static, ()> {
    SPAWNING.lock().unwrap_or_else(|p| p.into_inner())
}

pub const BIN: &str = env!("CARGO_BIN_EXE_ringwal-otlp");

/// A running receiver.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Its standard error, collected by a thread until it exits.
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Start the receiver on `wal` and `out` (a directory or a URL) with
/// `extra` flags, listening on `listen`, and wait for its `listening on`
/// line.
pub fn start(
    wal: &Path,
    out: &(impl AsRef<OsStr> + ?Sized),
    listen: &str,
    extra: &[&str],
) -> Server {
    start_with_env(wal, out, listen, extra, &[])
}

/// As [`start`], with `env` added to the receiver's environment.
pub fn start_with_env(
    wal: &Path,
    out: &(impl AsRef<OsStr> + ?Sized),
    listen: &str,
    extra: &[&str],
    env: &[(String, String)],
) -> Server {
    let mut child = Command::new(BIN)
        .args(["--listen", listen, "--wal"])
        .arg(wal)
        .arg("--out")
        .arg(out)
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ringwal-otlp");
    let stderr = child.stderr.take().expect("piped");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    stdout.read_line(&mut line).expect("reading its stdout");
    let Some(addr) = line.trim().strip_prefix("listening on ") else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "no `listening on` line, got {line:?}; stderr: {}",
            stderr.join().unwrap_or_default()
        );
    };
    let addr = addr.parse().expect("an address");
    Server {
        child,
        addr,
        stderr: Some(stderr),
    }
}

impl Server {
    /// SIGTERM, and the exit status and standard error.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        // The shell's own `kill`: no unsafe code here, no procps needed.
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -TERM {}", self.child.id()))
            .status()
            .expect("running sh");
        assert!(status.success(), "kill -TERM failed");
        self.wait_exit()
    }

    /// SIGKILL: no drain, no publish.
    pub fn kill(mut self) -> String {
        self.child.kill().expect("SIGKILL");
        self.wait_exit().1
    }

    fn wait_exit(&mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting") {
                let err = self.stderr.take().map(|h| h.join().unwrap_or_default());
                return (status, err.unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "the receiver did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A response: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection (`Connection: close`).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = TcpStream::connect(addr).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let raw = exchange(&mut s, addr, method, path, headers, body).expect("reading the response");
    parse_response(&raw)
}

/// Write one request (`Connection: close`) on `s`, and read what comes
/// back until the peer closes: the raw bytes, HTTP or not.
pub fn exchange<S: Read + Write>(
    s: &mut S,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Vec<u8>> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    // The server may answer (413) before it has read everything.
    let _ = s.write_all(body);
    let _ = s.flush();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    Ok(raw)
}

pub fn parse_response(raw: &[u8]) -> Response {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = std::str::from_utf8(&raw[..end]).expect("an ASCII head");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = raw[end + 4..].to_vec();
    Response {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

/// POST a protobuf body to `path`, with extra headers.
pub fn post(addr: SocketAddr, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Response {
    let mut headers = vec![("Content-Type", "application/x-protobuf")];
    headers.extend_from_slice(extra);
    request(addr, "POST", path, &headers, body)
}

/// The blocks of `signal` ("traces", ...) under `out`, ordered by first LSN.
pub fn blocks(out: &Path, signal: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = out.join(signal);
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?.to_string();
                    let first = name.strip_suffix(".pb")?.split_once('-')?.0.parse().ok()?;
                    Some((first, p))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .into_iter()
        .map(|(_, p)| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Every file under `out/signal`, blocks or not.
pub fn files(out: &Path, signal: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(out.join(signal))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The data frames in the log at `wal`, with no watermark: what a replay
/// with no block would hand out, per stream.
pub fn frames(wal: &Path) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    ringwal::collector::replay(
        wal,
        &ringwal::Config::default(),
        &ringwal::Watermarks::new(),
        |stream, _, body| {
            out.push((stream, body.to_vec()));
            Ok(())
        },
    )
    .expect("replaying the log");
    out
}

/// A traces request (OTLP protobuf) with one span per name, each carrying
/// `pad` bytes of trace state (0: none), so that a few of them can fill a
/// small segment.
pub fn traces(names: &[&str], pad: usize) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let spans = names
        .iter()
        .map(|n| Span {
            name: n.to_string(),
            trace_state: "x".repeat(pad),
            span_id: vec![1; 8],
            trace_id: vec![2; 16],
            ..Span::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}
