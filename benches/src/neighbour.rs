//! `--busy-neighbour`: another process spinning on one CPU during every
//! measured run. A node runs its log beside the work that produces the
//! records, not on an otherwise idle machine, so figures taken with every
//! CPU free flatter a design that needs them all.
//!
//! The neighbour is the harness again, run with the hidden flag
//! `--neighbour-spin CPU`: a process of its own, so that its CPU time is
//! not the harness's (the CPU/op column) and its one thread is scheduled
//! as any other program's would be. It pins itself to the CPU, says so on
//! stdout, then spins in a loop that makes no syscalls. A [`Neighbour`]
//! kills and reaps it when stopped or dropped (a run that fails or panics
//! included); and the neighbour exits by itself once its stdin (a pipe
//! the harness holds) closes, so a harness killed outright (SIGKILL,
//! where no destructor runs) takes it along too.
//!
//! `ringwal bench --busy-neighbour` has the same neighbour (the CLI's
//! `neighbour.rs`); the two workspaces share no code, hence two copies.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The hidden flag that makes the harness the neighbour.
pub const FLAG: &str = "--neighbour-spin";

/// What the neighbour prints once pinned, just before it starts spinning.
const READY: &str = "spinning";

/// The CPU a neighbour takes: the last one this process may run on (its
/// affinity mask, which a container's cpuset narrows; not merely the
/// machine's highest CPU number, which may be out of reach).
///
/// Errors: fewer than two CPUs allowed. A neighbour spinning on the only
/// CPU would not sit beside the systems measured but take turns with
/// them, which measures the scheduler's time slice instead.
pub fn last_cpu() -> Result<usize, String> {
    let cpus = ringwal_platform::cpu::allowed();
    match cpus.as_slice() {
        [] => Err("--busy-neighbour: cannot tell which CPUs this process may run on".into()),
        [only] => Err(format!(
            "--busy-neighbour needs at least 2 CPUs: this process may run only on CPU {only}, \
             and a neighbour spinning there would take turns with the systems measured \
             instead of running beside them"
        )),
        [.., last] => Ok(*last),
    }
}

/// The harness run as `--neighbour-spin CPU`: pin to the CPU, say so,
/// then spin until stdin closes. Returns only on failure to start.
pub fn serve(cpu: usize) -> ExitCode {
    match spin(cpu) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("harness: busy neighbour: {e}");
            ExitCode::FAILURE
        }
    }
}

fn spin(cpu: usize) -> io::Result<std::convert::Infallible> {
    ringwal_platform::cpu::pin_current(cpu)?;
    // The spinning thread makes no syscall, so it cannot notice that the
    // harness has gone; this thread, asleep in a read, can: the pipe's
    // write end closes when the harness exits, however it exits. Spawned
    // after the pin, so it inherits the CPU and takes no other.
    std::thread::Builder::new()
        .name("neighbour-stdin".into())
        .spawn(|| {
            let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
            std::process::exit(0);
        })?;
    let mut out = io::stdout().lock();
    writeln!(out, "{READY}")?;
    out.flush()?;
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
pub struct Neighbour {
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

/// What a neighbour did while it ran (one per measured run in
/// results.json).
#[derive(Clone, Debug, Serialize)]
pub struct Spent {
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
    /// `cpu_secs / wall_secs`: the share of one CPU it got, near 1 when
    /// it really spun, lower when the systems measured took turns on its
    /// CPU.
    pub cpu_share: f64,
}

impl Spent {
    /// The CPU time it would have used over `window` at the rate it
    /// spun: what to take out of the window's background CPU, which
    /// counts every process but the harness and so counts it too.
    pub fn over(&self, window: Duration) -> Duration {
        Duration::from_secs_f64((self.cpu_share * window.as_secs_f64()).max(0.0))
    }
}

impl Neighbour {
    /// Start a neighbour on `cpu` and wait until it is pinned and about
    /// to spin. Errors: the executable cannot be run again, the
    /// neighbour could not pin itself (its message), or `/proc` does not
    /// show its CPU time.
    pub fn start(cpu: usize) -> io::Result<Neighbour> {
        // Asked before the neighbour runs: `getconf` is a process too.
        let ticks_per_s = clock_ticks();
        let exe = std::env::current_exe()?;
        let child = Command::new(&exe)
            .args([FLAG, &cpu.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", exe.display())))?;
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
            BufReader::new(out).read_line(&mut said)?;
        }
        if said.trim_end() != READY {
            let why = nb.end();
            return Err(io::Error::other(format!(
                "busy neighbour (pid {pid}) did not start: {why}"
            )));
        }
        nb.cpus_allowed = cpus_allowed(pid);
        nb.ticks_at_start = cpu_ticks(pid)?;
        nb.started = Instant::now();
        Ok(nb)
    }

    /// Stop the neighbour: read the CPU time it used, kill it, reap it.
    /// Errors: it had exited before (so it did not spin the whole run).
    pub fn stop(mut self) -> io::Result<Spent> {
        let wall_secs = self.started.elapsed().as_secs_f64();
        if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
            let said = self.end();
            return Err(io::Error::other(format!(
                "busy neighbour (pid {}) exited during the run ({status}): {said}",
                self.pid
            )));
        }
        let ticks = cpu_ticks(self.pid)?;
        self.end();
        let cpu_secs = ticks.saturating_sub(self.ticks_at_start) as f64 / self.ticks_per_s as f64;
        Ok(Spent {
            pid: self.pid,
            cpu: self.cpu,
            cpus_allowed: std::mem::take(&mut self.cpus_allowed),
            cpu_secs,
            wall_secs,
            cpu_share: cpu_secs / wall_secs.max(f64::MIN_POSITIVE),
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

/// Run `f` beside a neighbour on `cpu` (or alone, for `None`): started
/// just before, stopped just after, so the settle and quiet-wait phases
/// around a run see a machine without it.
pub fn beside<T>(
    cpu: Option<usize>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<(T, Option<Spent>)> {
    let Some(cpu) = cpu else {
        return Ok((f()?, None));
    };
    let nb = Neighbour::start(cpu)?;
    // A failure or a panic in `f` drops `nb`, which kills the neighbour.
    let out = f()?;
    Ok((out, Some(nb.stop()?)))
}

/// User + system CPU time of process `pid`, in clock ticks (fields 14
/// and 15 of `/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> io::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("busy neighbour: {path}: {e}")))?;
    // The command name (field 2) may hold spaces and parentheses; the
    // fields after the last ')' are plain: state is the first of them.
    let fields: Vec<&str> = text
        .rfind(')')
        .map(|i| text[i + 1..].split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok(user + system),
        _ => Err(io::Error::other(format!(
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
/// as `measure.rs` asks it; 100 where that fails, which is what Linux
/// reports on every common architecture.
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
