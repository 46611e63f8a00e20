//! A real S3 server for the tests that ship segments to object storage: a
//! single Garage node on loopback, in a temporary directory of its own,
//! started and stopped by `scripts/garage.sh` (so that a person can run
//! the same server by hand). Tests stop it and bring it back to see what
//! an outage does; dropping the value kills it and removes its data.
//!
//! Without a `garage` binary on the PATH, [`Garage::start`] returns `None`
//! after a note on stderr, so that a developer without one can still run
//! the rest; with `RINGWAL_REQUIRE_GARAGE` set (CI sets it) it panics
//! instead, so that CI cannot pass by skipping.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running (or stopped, between [`Garage::stop`] and
/// [`Garage::restart`]) Garage node with one bucket and one access key
/// that may read, write and own it.
pub struct Garage {
    dir: tempfile::TempDir,
    script: PathBuf,
    pid: Option<u32>,
    endpoint: String,
    region: String,
    bucket: String,
    key_id: String,
    secret: String,
}

impl Garage {
    /// Start a fresh node: new directory, free ports, new bucket and key.
    /// Returns once S3 answers. `None` (after a note on stderr) when
    /// `garage` is not on the PATH and `RINGWAL_REQUIRE_GARAGE` is unset.
    ///
    /// # Panics
    /// When `garage` is missing and required, or the node fails to start.
    pub fn start() -> Option<Garage> {
        if !on_path("garage") {
            let required = std::env::var_os("RINGWAL_REQUIRE_GARAGE")
                .is_some_and(|v| !v.is_empty() && v != "0");
            assert!(
                !required,
                "RINGWAL_REQUIRE_GARAGE is set but no `garage` binary is on the PATH: \
                 install it with `cargo install garage --locked --version 2.5.0` \
                 (and put ~/.cargo/bin on the PATH)"
            );
            eprintln!(
                "\n********************************************************************\n\
                 NOTE: SKIPPING an S3 test: no `garage` binary on the PATH.\n\
                 Install it with `cargo install garage --locked --version 2.5.0`.\n\
                 (CI sets RINGWAL_REQUIRE_GARAGE=1, which makes this a failure.)\n\
                 ********************************************************************\n"
            );
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("ringwal-garage-")
            .tempdir()
            .expect("a temporary directory for Garage");
        let script = workspace_root().join("scripts/garage.sh");
        // Ports the kernel chose as free, released just before Garage binds
        // them: parallel tests and runs each get their own.
        let (s3, rpc) = free_ports();
        let vars = run(&script, &["start", dir_arg(dir.path()), &s3, &rpc]);
        let var = |name: &str| {
            vars.get(name)
                .unwrap_or_else(|| panic!("scripts/garage.sh printed no {name}"))
                .clone()
        };
        Some(Garage {
            pid: Some(parse_pid(&var("GARAGE_PID"))),
            endpoint: var("AWS_ENDPOINT_URL"),
            region: var("AWS_REGION"),
            bucket: var("RINGWAL_S3_BUCKET"),
            key_id: var("AWS_ACCESS_KEY_ID"),
            secret: var("AWS_SECRET_ACCESS_KEY"),
            script,
            dir,
        })
    }

    /// `http://127.0.0.1:PORT`, the S3 endpoint (plain HTTP).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The region the node's configuration names (requests must sign with it).
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The one bucket, empty at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The access key's id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The access key's secret.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `s3://BUCKET/PREFIX`, a location in the bucket as a user writes it.
    pub fn s3_url(&self, prefix: &str) -> String {
        format!("s3://{}/{}", self.bucket, prefix.trim_start_matches('/'))
    }

    /// The variables a child process needs to reach the bucket through
    /// the usual AWS environment (`object_store`'s `from_env` among the
    /// readers): endpoint, region, key, and `AWS_ALLOW_HTTP`, since the
    /// endpoint is plain HTTP.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", self.region()),
            ("AWS_DEFAULT_REGION", self.region()),
            ("AWS_ACCESS_KEY_ID", self.key_id()),
            ("AWS_SECRET_ACCESS_KEY", self.secret()),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Kill the server (SIGKILL: an outage, at once, whatever connections
    /// clients keep open) and return once it is gone: S3 refuses
    /// connections until [`Garage::restart`]. What it stored stays.
    pub fn stop(&mut self) {
        run(&self.script, &["stop", dir_arg(self.dir.path())]);
        self.pid = None;
    }

    /// Start the server again (stopping it first if it runs) on the same
    /// ports and data, with the same bucket, objects and key; returns once
    /// S3 answers.
    pub fn restart(&mut self) {
        let vars = run(&self.script, &["start", dir_arg(self.dir.path())]);
        let pid = vars
            .get("GARAGE_PID")
            .expect("scripts/garage.sh printed no GARAGE_PID");
        self.pid = Some(parse_pid(pid));
        assert_eq!(
            vars.get("AWS_ENDPOINT_URL").map(String::as_str),
            Some(self.endpoint()),
            "Garage came back on another endpoint"
        );
    }
}

impl Drop for Garage {
    /// Kill the server, whatever `pid` says (a restart that failed halfway
    /// may have left one running: the script knows it by its pid file);
    /// the directory goes with the `TempDir`. No panic here: a test
    /// already failing must report its own failure.
    fn drop(&mut self) {
        let child = {
            let _spawning = super::spawning_processes();
            Command::new(&self.script)
                .args(["stop", dir_arg(self.dir.path())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
        };
        let stopped = child.and_then(|mut c| c.wait());
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!("garage: could not stop the server in {:?}", self.dir.path());
        }
    }
}

/// Run `scripts/garage.sh` with `args` and the `NAME=VALUE` lines it
/// prints. The spawn itself holds the test process's spawn lock (see
/// `spawning_processes`), not the seconds the script takes.
fn run(script: &Path, args: &[&str]) -> HashMap<String, String> {
    let child = {
        let _spawning = super::spawning_processes();
        Command::new(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {script:?}: {e}"))
    };
    let out = child
        .wait_with_output()
        .expect("waiting for scripts/garage.sh");
    assert!(
        out.status.success(),
        "scripts/garage.sh {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}

fn parse_pid(s: &str) -> u32 {
    s.parse()
        .unwrap_or_else(|_| panic!("GARAGE_PID={s} is not a process id"))
}

fn dir_arg(dir: &Path) -> &str {
    dir.to_str().expect("a UTF-8 temporary directory")
}

/// Two loopback ports nobody listens on, as the kernel hands them out
/// (both held at once, so that they differ).
fn free_ports() -> (String, String) {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    let (a, b) = (bind(), bind());
    let port = |l: &TcpListener| l.local_addr().expect("its address").port().to_string();
    (port(&a), port(&b))
}

/// `name` is an executable somewhere on the PATH.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The workspace's root, where `scripts/` is: this file serves the root
/// crate's tests and the CLI's, whose manifests sit at different depths.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("scripts/garage.sh").is_file())
        .expect("scripts/garage.sh above the crate's manifest directory")
        .to_path_buf()
}
