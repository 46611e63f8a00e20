//! Where the ring performs a durable write: in place, blocking the ring
//! thread (`IoQueue::set_lone`), or through io_uring with others in
//! flight. Pure decisions over the latencies the ring measured; no I/O,
//! no locks.
//!
//! Why there is a choice: on a disk without FUA, a durable direct write
//! submitted through io_uring completes on a kernel worker bound to the
//! CPU that took the disk's interrupt, which flushes and only then posts
//! the completion. In place, the ring thread flushes itself. So:
//!
//! - A flush-bound write (below [`FLUSH_BOUND_BYTES`]) gains nothing
//!   from the ring, since the flushes of this disk do not overlap, and
//!   pays the worker's hand-off: it always goes in place when nothing
//!   else is in the kernel.
//! - A large write gains from several in flight, so it goes through the
//!   ring, unless the ring's completions have become much slower than
//!   the same writes done in place. That is what a busy interrupt CPU
//!   does: the worker waits for the scheduler's next tick, 4 ms a write
//!   in `ringwal bench --busy-neighbour`, against 0.1-0.7 ms in place.
//!   Then large writes go in place too, one at a time, until the ring is
//!   measured fast again.
//!
//! Both ways are sampled: through the ring, every [`PROBE_EVERY`]th large
//! write is done alone in place (the ring drains first); in place, every
//! `PROBE_EVERY`th goes through the ring.

use std::time::Duration;

/// Writes below this many bytes are bound by the device's flush, not its
/// bandwidth (see `ring::SUBMIT_FIRST_BYTES`, the same measure: 128 KiB
/// take about 40 us to transfer at this disk's 3 GB/s, as long as a few
/// wake-ups). Measured with `ringwal bench`, four alternating rounds,
/// 64 KiB records from 8 producers (writes of 64-512 KiB): in place below
/// 128 KiB 39,189-40,602 records/s, in place at every size 36,380-39,107.
pub(crate) const FLUSH_BOUND_BYTES: usize = 128 << 10;

/// Large writes before the first probe of the way not taken, and after
/// every change of way. Each probe that confirms the way taken doubles
/// the interval, up to [`PROBE_EVERY_MAX`]: a change (a neighbour that
/// starts) is noticed within a fraction of a second at the large-write
/// rates seen here (2,000-6,000 a second), while a steady state pays for
/// few probes: a probe through a stalled ring holds the writes queued with
/// it 4-8 ms, which at one probe per 256 writes put 64 KiB x 8's p99 at
/// 8 ms beside a busy neighbour.
pub(crate) const PROBE_EVERY: u32 = 256;
pub(crate) const PROBE_EVERY_MAX: u32 = 16 * 1024;
const _: () = assert!(PROBE_EVERY <= PROBE_EVERY_MAX);

/// How much more time per write (a write's latency over the writes in
/// flight with it) the ring must take than writes in place before large
/// writes go in place, and how much less before they go back, in
/// quarters. On a quiet machine the ring's writes overlap and take
/// 0.3-1.0x the time of one alone; a stalled worker makes it 2-9x (4-8 ms
/// a write, four in flight, against 0.3-0.6 ms alone). The gap between the
/// two keeps the choice from flapping on noise.
const SLOWER_TO_LEAVE: u64 = 8;
const FASTER_TO_RETURN: u64 = 5;
const _: () = assert!(FASTER_TO_RETURN < SLOWER_TO_LEAVE);

/// Weight of a new sample in a mean, as a shift: 1/8 for the way in use
/// (a sample per write), 1/2 for a probe of the other (a sample per
/// interval, so that a few probes decide).
const EWMA_SHIFT: u32 = 3;
const PROBE_SHIFT: u32 = 1;

/// The ring's choice of where large durable writes go, from what it has
/// measured.
#[derive(Debug)]
pub(crate) struct Placement {
    /// Large writes go in place (the ring measured itself stalled).
    in_place: bool,
    /// Mean time per large durable write each way, in microseconds: a
    /// write's latency over the writes that were in flight with it (0:
    /// none measured yet).
    ring_us: u64,
    alone_us: u64,
    /// Large writes since the last probe, and how many the next waits for.
    since_probe: u32,
    probe_every: u32,
    /// A probe is due: the next large write goes the other way.
    probe: bool,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            in_place: false,
            ring_us: 0,
            alone_us: 0,
            since_probe: 0,
            probe_every: PROBE_EVERY,
            probe: false,
        }
    }
}

/// Which way a large write should go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Through the ring, several in flight.
    Ring,
    /// In place, once nothing else is in the kernel.
    InPlace,
}

impl Placement {
    /// Where a durable write of `len` bytes goes now (`durable`: it is
    /// made durable by itself; other writes always go through the ring,
    /// which completes them without a worker). Cost: none.
    pub fn way(&self, len: usize, durable: bool) -> Way {
        if !durable {
            return Way::Ring;
        }
        if len < FLUSH_BOUND_BYTES || self.in_place != self.probe {
            Way::InPlace
        } else {
            Way::Ring
        }
    }

    /// Whether the ring should take no more batches until its writes in
    /// flight are done: a probe of writing in place is due, and it must
    /// run alone to be a fair sample. Cost: none.
    pub fn drain_for_probe(&self) -> bool {
        self.probe && !self.in_place
    }

    /// A durable write of `len` bytes completed after `took`, in place or
    /// through the ring with `depth` writes in flight (itself included):
    /// fold its time per write into that way's mean, end a probe, count
    /// toward the next, and choose again.
    pub fn completed(&mut self, len: usize, in_place: bool, took: Duration, depth: usize) {
        if len < FLUSH_BOUND_BYTES {
            return;
        }
        let depth = if in_place { 1 } else { depth.max(1) as u64 };
        let us = (u64::try_from(took.as_micros()).unwrap_or(u64::MAX) / depth).max(1);
        let probed = in_place != self.in_place;
        let shift = if probed { PROBE_SHIFT } else { EWMA_SHIFT };
        let mean = if in_place {
            &mut self.alone_us
        } else {
            &mut self.ring_us
        };
        *mean = match *mean {
            0 => us,
            m => m - (m >> shift) + (us >> shift),
        };
        let was = self.in_place;
        self.choose();
        if self.probe && probed {
            self.probe = false;
            self.probe_every = if self.in_place == was {
                self.probe_every.saturating_mul(2).min(PROBE_EVERY_MAX)
            } else {
                PROBE_EVERY
            };
        }
        self.since_probe += 1;
        if self.since_probe >= self.probe_every && !self.probe {
            self.since_probe = 0;
            self.probe = true;
        }
    }

    fn choose(&mut self) {
        if self.ring_us == 0 || self.alone_us == 0 {
            return;
        }
        let (ring, alone) = (self.ring_us * 4, self.alone_us);
        if !self.in_place && ring > alone * SLOWER_TO_LEAVE {
            self.in_place = true;
        } else if self.in_place && ring < alone * FASTER_TO_RETURN {
            self.in_place = false;
        }
    }

    /// Whether large writes go in place now (the tests' view of `way`).
    #[cfg(test)]
    fn large_in_place(&self) -> bool {
        self.in_place
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LARGE: usize = 1 << 20;
    const US: fn(u64) -> Duration = Duration::from_micros;

    /// Run `n` large writes the way the placement sends them, each taking
    /// `ring` through the ring or `alone` in place; returns how many went
    /// in place.
    fn run(p: &mut Placement, n: u32, ring: u64, alone: u64) -> u32 {
        let mut in_place = 0;
        for _ in 0..n {
            let way = p.way(LARGE, true);
            let took = if way == Way::InPlace { alone } else { ring };
            in_place += u32::from(way == Way::InPlace);
            p.completed(LARGE, way == Way::InPlace, US(took), 1);
        }
        in_place
    }

    #[test]
    fn small_and_written_mode_writes_are_decided_by_size_and_mode_alone() {
        let p = Placement::default();
        assert_eq!(p.way(FLUSH_BOUND_BYTES - 4096, true), Way::InPlace);
        assert_eq!(p.way(FLUSH_BOUND_BYTES, true), Way::Ring);
        assert_eq!(p.way(4096, false), Way::Ring, "not durable alone");
        assert_eq!(p.way(LARGE, false), Way::Ring);
    }

    #[test]
    fn a_quiet_machine_keeps_large_writes_in_the_ring_probing_rarely() {
        let mut p = Placement::default();
        // Through the ring 1.5x slower than alone at depth one.
        let alone = run(&mut p, 16 * PROBE_EVERY, 750, 500);
        assert!(!p.large_in_place());
        // The probes grow apart: 1, 2, 4 and 8 intervals.
        assert_eq!(
            alone, 4,
            "probes after 1, 3, 7 and 15 intervals of {PROBE_EVERY}"
        );
    }

    #[test]
    fn a_stalled_ring_sends_large_writes_in_place_until_it_is_fast_again() {
        let mut p = Placement::default();
        run(&mut p, PROBE_EVERY + 1, 600, 500);
        assert!(!p.large_in_place());
        // The interrupt CPU gets busy: through the ring 4 ms a write.
        run(&mut p, 2 * PROBE_EVERY, 4_000, 600);
        assert!(p.large_in_place(), "left the ring once probed");
        let alone = run(&mut p, 4 * PROBE_EVERY, 4_000, 600);
        assert!(p.large_in_place());
        assert!(
            alone >= 4 * PROBE_EVERY - 4,
            "probes only through the ring: {alone}"
        );
        // The neighbour leaves: a few probes find the ring fast again,
        // however far apart they had grown.
        run(&mut p, 2 * PROBE_EVERY_MAX, 4_000, 600);
        assert!(p.large_in_place());
        run(&mut p, 8 * PROBE_EVERY_MAX, 550, 500);
        assert!(!p.large_in_place(), "back to the ring");
    }

    /// Four writes in flight, each taking 1.6 ms through the ring, move as
    /// many bytes as one alone taking 0.4 ms: no reason to leave. Each
    /// taking 4 ms (the stalled worker), they move fewer: leave.
    #[test]
    fn the_ring_is_judged_by_its_time_per_write_in_flight() {
        let mut p = Placement::default();
        p.completed(LARGE, true, US(400), 1);
        for _ in 0..64 {
            p.completed(LARGE, false, US(1_600), 4);
        }
        assert!(!p.large_in_place());
        for _ in 0..64 {
            p.completed(LARGE, false, US(4_000), 4);
        }
        assert!(p.large_in_place());
    }

    #[test]
    fn a_probe_of_in_place_drains_the_ring_first_and_ends_once_sampled() {
        let mut p = Placement::default();
        run(&mut p, PROBE_EVERY - 1, 600, 500);
        assert!(!p.drain_for_probe());
        p.completed(LARGE, false, US(600), 1);
        assert!(p.drain_for_probe(), "due after {PROBE_EVERY} large writes");
        assert_eq!(p.way(LARGE, true), Way::InPlace);
        // Writes already in flight through the ring complete meanwhile.
        p.completed(LARGE, false, US(600), 1);
        assert!(p.drain_for_probe(), "still due: not sampled yet");
        p.completed(LARGE, true, US(500), 1);
        assert!(!p.drain_for_probe());
        assert_eq!(p.way(LARGE, true), Way::Ring);
    }

    #[test]
    fn means_follow_their_samples() {
        let mut p = Placement::default();
        p.completed(LARGE, true, US(800), 1);
        assert_eq!(p.alone_us, 800, "the first sample is the mean");
        for _ in 0..64 {
            p.completed(LARGE, true, US(400), 1);
        }
        assert!((400..=410).contains(&p.alone_us), "{}", p.alone_us);
        p.completed(FLUSH_BOUND_BYTES - 1, true, US(1), 1);
        assert!(p.alone_us >= 400, "small writes are not sampled");
    }
}
