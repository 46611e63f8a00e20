//! `--busy-neighbour`: another process spinning on one CPU during every
//! measured run, `ringwal_platform::neighbour`'s (the same one `ringwal
//! bench --busy-neighbour` starts). A node runs its log beside the work
//! that produces the records, not on an otherwise idle machine, so
//! figures taken with every CPU free flatter a design that needs them
//! all. Here: what results.json records of it, and a run beside it.

use std::io;
use std::time::Duration;

use ringwal_platform::neighbour::{self as platform, Neighbour};
use serde::Serialize;

pub use platform::{last_cpu, serve_if_asked};

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

impl From<platform::Spent> for Spent {
    fn from(s: platform::Spent) -> Spent {
        Spent {
            cpu_share: s.share(),
            pid: s.pid,
            cpu: s.cpu,
            cpus_allowed: s.cpus_allowed,
            cpu_secs: s.cpu_secs,
            wall_secs: s.wall_secs,
        }
    }
}

impl Spent {
    /// The CPU time it would have used over `window` at the rate it
    /// spun: what to take out of the window's background CPU, which
    /// counts every process but the harness and so counts it too.
    pub fn over(&self, window: Duration) -> Duration {
        Duration::from_secs_f64((self.cpu_share * window.as_secs_f64()).max(0.0))
    }
}

/// Start a neighbour on `cpu`, pinned and spinning when this returns.
pub fn start(cpu: usize) -> io::Result<Neighbour> {
    Neighbour::start(cpu)
}

/// Stop `nb` and say what it spent.
pub fn stop(nb: Neighbour) -> io::Result<Spent> {
    nb.stop().map(Spent::from)
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
    let nb = start(cpu)?;
    // A failure or a panic in `f` drops `nb`, which kills the neighbour.
    let out = f()?;
    Ok((out, Some(stop(nb)?)))
}
