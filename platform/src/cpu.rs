//! Pinning the calling thread to one CPU (the ring thread's option).
//!
//! Through `core_affinity`, but never with a CPU index it would pass
//! unchecked to the kernel's CPU set macros: an index past the set's size
//! aborts the process inside a function that cannot unwind. Every pin is
//! checked against the CPUs this process may run on first.

use std::io;

/// The CPUs this process may run on (its affinity mask), ascending.
///
/// Cost: one `sched_getaffinity` on Linux. Empty where the platform does
/// not say (pinning is then refused).
pub fn allowed() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}

/// Pin the calling thread to `cpu`, one of [`allowed`].
///
/// Errors: `InvalidInput` for a CPU the process may not run on; `Other`
/// when the kernel refuses. Cost: two syscalls.
pub fn pin_current(cpu: usize) -> io::Result<()> {
    if !allowed().contains(&cpu) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is not one this process may run on"),
        ));
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(io::Error::other(format!("could not pin to CPU {cpu}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_only_to_allowed_cpus() {
        let cpus = allowed();
        assert!(!cpus.is_empty());
        let err = pin_current(1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        // On a thread of its own: pinning is for the thread's lifetime.
        let first = cpus[0];
        std::thread::spawn(move || pin_current(first).unwrap())
            .join()
            .unwrap();
    }
}
