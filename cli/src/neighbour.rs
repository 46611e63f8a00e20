//! `ringwal bench --busy-neighbour`: another process spinning on one CPU
//! while the bench measures. A node runs its log beside the work that
//! produces the records, not on an otherwise idle machine, so figures
//! taken with every CPU free flatter a design that needs them all.
//!
//! The neighbour is this executable again, run with
//! `RINGWAL_BUSY_NEIGHBOUR_CPU=N` in its environment: a process of its own, so that its CPU
//! time is not the bench's and its one thread is scheduled as any other
//! program's would be. It pins itself to the CPU, says so on stdout,
//! then spins in a loop that makes no syscalls. A [`Neighbour`] kills and
//! reaps it when stopped or dropped, so an error or a panic in the bench
//! never leaves it spinning; and the neighbour exits by itself once its
//! stdin (a pipe the bench holds) closes, so a bench killed outright
//! (SIGKILL, where no destructor runs) takes it along too.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

use super::{CmdResult, Failure};
use crate::exit::Kind;

/// The environment variable that makes this executable the neighbour:
/// the CPU to pin to and spin on.
const ENV: &str = "RINGWAL_BUSY_NEIGHBOUR_CPU";

/// What the neighbour prints once pinned, just before it starts spinning.
const READY: &str = "spinning";

/// If this process was started as a neighbour ([`ENV`] set), be one:
/// spin until stdin closes. `None` for every other run. Cost: one
/// environment lookup.
pub(crate) fn spin_if_asked() -> Option<CmdResult> {
    let cpu = std::env::var_os(ENV)?;
    Some(match cpu.to_str().and_then(|c| c.parse::<usize>().ok()) {
        Some(cpu) => spin(cpu),
        None => Err(Failure::other(format!(
            "busy neighbour: {ENV}={} is not a CPU number",
            cpu.to_string_lossy()
        ))),
    })
}

/// The CPU a neighbour takes: the last one this process may run on (its
/// affinity mask, which a container's cpuset narrows; not merely the
/// machine's highest CPU number, which may be out of reach).
///
/// Errors (kind `config`): fewer than two CPUs allowed. A neighbour
/// spinning on the only CPU would not sit beside the bench but take
/// turns with it, which measures the scheduler's time slice instead.
pub(crate) fn last_cpu() -> Result<usize, Failure> {
    let cpus = ringwal_platform::cpu::allowed();
    match cpus.as_slice() {
        [] => Err(Failure::new(
            Kind::Config,
            "--busy-neighbour: cannot tell which CPUs this process may run on",
        )),
        [only] => Err(Failure::new(
            Kind::Config,
            format!(
                "--busy-neighbour needs at least 2 CPUs: this process may run only on CPU {only}, \
                 and a neighbour spinning there would take turns with the bench instead of \
                 running beside it"
            ),
        )),
        [.., last] => Ok(*last),
    }
}

/// Pin to `cpu`, say so, then spin until stdin closes. Returns only on
/// failure to start.
fn spin(cpu: usize) -> CmdResult {
    ringwal_platform::cpu::pin_current(cpu)
        .map_err(|e| Failure::other(format!("busy neighbour: {e}")))?;
    // The spinning thread makes no syscall, so it cannot notice that the
    // bench has gone; this thread, asleep in a read, can: the pipe's
    // write end closes when the bench exits, however it exits. Spawned
    // after the pin, so it inherits the CPU and takes no other.
    std::thread::Builder::new()
        .name("neighbour-stdin".into())
        .spawn(|| {
            let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
            std::process::exit(0);
        })
        .map_err(|e| Failure::io("busy neighbour: starting its stdin watch", e))?;
    let mut out = io::stdout().lock();
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::io("busy neighbour: stdout", e))?;
    drop(out);
    // Arithmetic the optimiser must keep (`black_box`), no memory traffic
    // beyond a register, no pause instruction: the CPU is taken as a
    // compute-bound program takes it.
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
}

/// A running neighbour, killed and reaped when stopped or dropped.
pub(crate) struct Neighbour {
    /// `None` once killed and reaped.
    child: Option<Child>,
    /// Held open: the neighbour exits when it closes.
    stdin: Option<ChildStdin>,
    pid: u32,
    cpu: usize,
    /// `Cpus_allowed_list` of the neighbour as the kernel has it: the
    /// proof it was pinned.
    cpus_allowed: String,
    started: Instant,
    /// Its user + system CPU time when it was ready, in clock ticks.
    ticks_at_start: u64,
    ticks_per_s: u64,
}

/// What a neighbour did while it ran.
pub(crate) struct Spent {
    /// Its process id.
    pub pid: u32,
    /// The CPU it was pinned to.
    pub cpu: usize,
    /// Its `Cpus_allowed_list`, as `/proc` showed it.
    pub cpus_allowed: String,
    /// User + system CPU seconds it used (resolution: one clock tick).
    pub cpu_secs: f64,
    /// Wall seconds from when it was ready to when it was stopped.
    pub wall_secs: f64,
}

impl Spent {
    /// The share of one CPU it got: near 1 when it really spun, lower
    /// when the bench's threads took turns on its CPU.
    pub fn share(&self) -> f64 {
        self.cpu_secs / self.wall_secs.max(f64::MIN_POSITIVE)
    }

    /// The `busy_neighbour` object of `bench --json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "pid": self.pid,
            "cpu": self.cpu,
            "cpus_allowed": self.cpus_allowed,
            "cpu_secs": self.cpu_secs,
            "wall_secs": self.wall_secs,
            "cpu_share": self.share(),
        })
    }
}

impl Neighbour {
    /// Start a neighbour on `cpu` and wait until it is pinned and about
    /// to spin. Errors: the executable cannot be run again, the
    /// neighbour could not pin itself (its message), or `/proc` does not
    /// show its CPU time.
    pub(crate) fn start(cpu: usize) -> Result<Neighbour, Failure> {
        // Asked before the neighbour runs: `getconf` is a process too.
        let ticks_per_s = clock_ticks();
        let exe = std::env::current_exe()
            .map_err(|e| Failure::io("busy neighbour: this executable's path", e))?;
        let child = Command::new(&exe)
            .env(ENV, cpu.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::io(&format!("busy neighbour: {}", exe.display()), e))?;
        let pid = child.id();
        // From here on a failure drops `nb`, which kills the neighbour.
        let mut nb = Neighbour {
            child: Some(child),
            stdin: None,
            pid,
            cpu,
            cpus_allowed: String::new(),
            started: Instant::now(),
            ticks_at_start: 0,
            ticks_per_s,
        };
        let (stdin, stdout) = match nb.child.as_mut() {
            Some(c) => (c.stdin.take(), c.stdout.take()),
            None => (None, None),
        };
        nb.stdin = stdin;
        let mut said = String::new();
        if let Some(out) = stdout {
            BufReader::new(out)
                .read_line(&mut said)
                .map_err(|e| Failure::io("busy neighbour: its stdout", e))?;
        }
        if said.trim_end() != READY {
            return Err(Failure::other(format!(
                "busy neighbour (pid {pid}) did not start: {}",
                nb.end()
            )));
        }
        nb.cpus_allowed = cpus_allowed(pid);
        nb.ticks_at_start = cpu_ticks(pid)?;
        nb.started = Instant::now();
        Ok(nb)
    }

    /// Stop the neighbour: read the CPU time it used, kill it, reap it.
    /// Errors: it had exited before (so it did not spin the whole run).
    pub(crate) fn stop(mut self) -> Result<Spent, Failure> {
        let wall_secs = self.started.elapsed().as_secs_f64();
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            let said = self.end();
            return Err(Failure::other(format!(
                "busy neighbour (pid {}) exited during the run ({status}): {said}",
                self.pid
            )));
        }
        let ticks = cpu_ticks(self.pid)?;
        self.end();
        Ok(Spent {
            pid: self.pid,
            cpu: self.cpu,
            cpus_allowed: std::mem::take(&mut self.cpus_allowed),
            cpu_secs: ticks.saturating_sub(self.ticks_at_start) as f64 / self.ticks_per_s as f64,
            wall_secs,
        })
    }

    /// Kill and reap the neighbour (once); what it said on stderr.
    fn end(&mut self) -> String {
        drop(self.stdin.take());
        let Some(mut child) = self.child.take() else {
            return String::new();
        };
        // Killed before the wait: it never exits on its own while its
        // stdin is open, and the pipe may close only after a moment.
        let _ = child.kill();
        let status = child.wait();
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        match (err.trim(), status) {
            ("", Ok(s)) => format!("it ended with {s}"),
            ("", Err(e)) => format!("waiting for it: {e}"),
            (said, _) => said.to_string(),
        }
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        self.end();
    }
}

/// User + system CPU time of process `pid`, in clock ticks (fields 14
/// and 15 of `/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> Result<u64, Failure> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failure::io(&format!("busy neighbour: {path}"), e))?;
    // The command name (field 2) may hold spaces and parentheses; the
    // fields after the last ')' are plain: state is the first of them.
    let fields: Vec<&str> = text
        .rfind(')')
        .map(|i| text[i + 1..].split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok(user + system),
        _ => Err(Failure::other(format!(
            "busy neighbour: {path} does not show its CPU time"
        ))),
    }
}

/// `Cpus_allowed_list` of process `pid` (`?` where `/proc` does not say).
fn cpus_allowed(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), asked of `getconf`
/// since this crate makes no libc calls of its own; 100 where that fails,
/// which is what Linux reports on every common architecture.
fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}
