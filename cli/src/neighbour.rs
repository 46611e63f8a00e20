//! `ringwal bench --busy-neighbour`: the neighbour of
//! `ringwal_platform::neighbour` (another process spinning on the last CPU
//! while the bench measures), with the command's errors and JSON.

use ringwal_platform::neighbour::{self as platform, Neighbour, Spent};

use super::{CmdResult, Failure};
use crate::exit::Kind;

/// If this process was started as a neighbour, be one (see
/// `ringwal_platform::neighbour::serve_if_asked`): `main` asks first
/// thing. `None` for every other run.
pub(crate) fn spin_if_asked() -> Option<CmdResult> {
    platform::serve_if_asked().map(|e| Err(Failure::other(e.to_string())))
}

/// The CPU the neighbour takes. Errors (kind `config`, before anything
/// is opened): fewer than two CPUs allowed.
pub(crate) fn last_cpu() -> Result<usize, Failure> {
    platform::last_cpu().map_err(|m| Failure::new(Kind::Config, m))
}

/// Start the neighbour on `cpu`, pinned and spinning when this returns.
pub(crate) fn start(cpu: usize) -> Result<Neighbour, Failure> {
    Neighbour::start(cpu).map_err(|e| Failure::io("busy neighbour", e))
}

/// Stop it and say what it spent.
pub(crate) fn stop(nb: Neighbour) -> Result<Spent, Failure> {
    nb.stop().map_err(|e| Failure::io("busy neighbour", e))
}

/// The `busy_neighbour` object of `bench --json`.
pub(crate) fn json(s: &Spent) -> serde_json::Value {
    serde_json::json!({
        "pid": s.pid,
        "cpu": s.cpu,
        "cpus_allowed": s.cpus_allowed,
        "cpu_secs": s.cpu_secs,
        "wall_secs": s.wall_secs,
        "cpu_share": s.share(),
    })
}
