//! A busy neighbour: another process spinning on one CPU while a benchmark
//! measures (`ringwal bench --busy-neighbour`, `harness --busy-neighbour`).
//! A node runs its log beside the work that produces the records, not on
//! an otherwise idle machine, so figures taken with every CPU free flatter
//! a design that needs them all.
//!
//! The neighbour is the calling executable again, started with [`ENV`] in
//! its environment, which its `main` hands to [`serve_if_asked`] first
//! thing: a process of its own, so that its CPU time is not the
//! benchmark's and its one thread is scheduled as any other program's
//! would be, and no subcommand or flag that help or completions would
//! offer. It pins itself to the CPU, says so on stdout, then spins in a
//! loop that makes no syscalls. A [`Neighbour`] kills and reaps it when
//! stopped or dropped (a run that fails or panics included); and the
//! neighbour exits by itself once its stdin (a pipe the benchmark holds)
//! closes, so a benchmark killed outright (SIGKILL, where no destructor
//! runs) takes it along too. Linux only (it reads `/proc`); elsewhere
//! [`Neighbour::start`] fails with the reason.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

/// The environment variable that makes an executable the neighbour: the
/// CPU to pin to and spin on.
pub const ENV: &str = "RINGWAL_BUSY_NEIGHBOUR_CPU";

/// What the neighbour prints once pinned, just before it starts spinning.
const READY: &str = "spinning";

/// The CPU a neighbour takes: the last one this process may run on (its
/// affinity mask, which a container's cpuset narrows; not merely the
/// machine's highest CPU number, which may be out of reach). Cost: one
/// `sched_getaffinity`.
///
/// Errors, as a message naming `--busy-neighbour`: fewer than two CPUs
/// allowed. A neighbour spinning on the only CPU would not sit beside the
/// load but take turns with it, which measures the scheduler's time slice
/// instead.
pub fn last_cpu() -> Result<usize, String> {
    let cpus = crate::cpu::allowed();
    match cpus.as_slice() {
        [] => Err("--busy-neighbour: cannot tell which CPUs this process may run on".into()),
        [only] => Err(format!(
            "--busy-neighbour needs at least 2 CPUs: this process may run only on CPU {only}, \
             and a neighbour spinning there would take turns with the load measured instead \
             of running beside it"
        )),
        [.., last] => Ok(*last),
    }
}

/// In a process started as a neighbour ([`ENV`] set): be one, pinned to
/// its CPU, spinning until stdin closes, and never return but with the
/// reason it could not start. `None` in every other process. Cost: one
/// environment lookup.
pub fn serve_if_asked() -> Option<io::Error> {
    let cpu = std::env::var_os(ENV)?;
    let Some(cpu) = cpu.to_str().and_then(|c| c.parse::<usize>().ok()) else {
        return Some(io::Error::other(format!(
            "busy neighbour: {ENV}={} is not a CPU number",
            cpu.to_string_lossy()
        )));
    };
    match spin(cpu) {
        Ok(never) => match never {},
        Err(e) => Some(io::Error::new(e.kind(), format!("busy neighbour: {e}"))),
    }
}

fn spin(cpu: usize) -> io::Result<std::convert::Infallible> {
    crate::cpu::pin_current(cpu)?;
    // The spinning thread makes no syscall, so it cannot notice that the
    // benchmark has gone; this thread, asleep in a read, can: the pipe's
    // write end closes when the benchmark exits, however it exits.
    // Spawned after the pin, so it inherits the CPU and takes no other.
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
}

/// What a neighbour did while it ran.
#[derive(Clone, Debug, PartialEq)]
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
}

impl Spent {
    /// The share of one CPU it got: near 1 when it really spun, lower
    /// when the load's threads took turns on its CPU. Cost: none.
    pub fn share(&self) -> f64 {
        self.cpu_secs / self.wall_secs.max(f64::MIN_POSITIVE)
    }
}

impl Neighbour {
    /// Start a neighbour on `cpu` (this executable again, whose `main`
    /// calls [`serve_if_asked`]) and wait until it is pinned and about to
    /// spin. Cost: a process spawned and a line read from it, and two
    /// reads of `/proc`.
    ///
    /// Errors: the executable cannot be run again, the neighbour could
    /// not pin itself (its message), or `/proc` does not show its CPU
    /// time.
    pub fn start(cpu: usize) -> io::Result<Neighbour> {
        let exe = std::env::current_exe()?;
        let child = Command::new(&exe)
            .env(ENV, cpu.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("busy neighbour: {}: {e}", exe.display()))
            })?;
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
    /// Cost: a read of `/proc`, a `kill` and a `wait`.
    ///
    /// Errors: it had exited before (so it did not spin the whole run),
    /// or `/proc` no longer shows its CPU time.
    pub fn stop(mut self) -> io::Result<Spent> {
        let wall_secs = self.started.elapsed().as_secs_f64();
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            let said = self.end();
            return Err(io::Error::other(format!(
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
            cpu_secs: ticks.saturating_sub(self.ticks_at_start) as f64 / clock_ticks() as f64,
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

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times;
/// 100 where `sysconf` does not say, which is what Linux reports on every
/// common architecture.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a configuration value; it takes no pointers
    // and has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_not_started_as_a_neighbour_is_not_one() {
        // The test process was not started with ENV (no test sets it).
        assert!(std::env::var_os(ENV).is_none());
        assert!(serve_if_asked().is_none());
    }

    #[test]
    fn cpu_time_is_read_from_proc_for_this_process() {
        if !cfg!(target_os = "linux") {
            return;
        }
        // Spin until the CPU time shows a tick more: within seconds
        // however loaded the machine (the clock ticks 100 times a second
        // where the thread runs at all).
        let t0 = cpu_ticks(std::process::id()).unwrap();
        let until = Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        let mut t1 = t0;
        while t1 == t0 && Instant::now() < until {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            t1 = cpu_ticks(std::process::id()).unwrap();
        }
        assert!(
            t1 > t0,
            "10 s of spinning never showed in /proc: {t0} -> {t1}"
        );
        assert!(clock_ticks() >= 1);
        assert_ne!(cpus_allowed(std::process::id()), "?");
    }
}
