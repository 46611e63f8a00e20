//! Closed-loop and open-loop load for thread-driven logs.
//!
//! Closed loop: each producer appends one record, waits until it is
//! durable, records the latency and repeats; throughput is what the system
//! sustains with that many records outstanding.
//!
//! Open loop: records are due on a fixed schedule (one every 1/rate
//! seconds) whatever the system does. A pool of worker threads takes the
//! next due slot, sleeps until its time and appends; latency runs from the
//! slot's *intended* time, so when the system stalls every record that
//! should have been sent meanwhile is charged with the wait (no coordinated
//! omission). A log with a pipelined API ([`Pipelined`]) is driven
//! instead by one dispatcher thread that submits each record when it is
//! due and one completion thread that waits for them in order
//! ([`open_pipelined`]): the same schedule and the same latency clock,
//! without a thread to wake per record.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::measure::{self, histogram, record, sleep_until, Raw, Window};
use crate::progress;
use crate::systems::{Log, Pending, Pipelined};

/// How long open-loop workers keep draining a backlog after the window
/// closes before the rest is counted as missed.
pub const GRACE: Duration = Duration::from_secs(1);

/// One thread's (or one runtime's) share of a run: latencies, harness
/// lateness, and the records counted.
pub struct Part {
    pub hist: Histogram<u64>,
    pub late: Histogram<u64>,
    pub ops: u64,
}

impl Part {
    pub fn new() -> Part {
        Part {
            hist: histogram(),
            late: histogram(),
            ops: 0,
        }
    }

    /// Open loop: slot `i`, due at `due` and sent at `sent`, is durable
    /// now; counted if the slot is inside the measured window.
    pub fn durable(&mut self, sched: &Schedule, i: u64, due: Instant, sent: Instant) {
        if sched.measured(i) {
            record(&mut self.late, sent - due);
            record(&mut self.hist, Instant::now() - due);
            self.ops += 1;
        }
        progress::tick(1);
    }
}

fn join_parts(parts: Vec<io::Result<Part>>) -> io::Result<(Histogram<u64>, Histogram<u64>, u64)> {
    let mut hists = Vec::new();
    let mut lates = Vec::new();
    let mut ops = 0;
    for p in parts {
        let p = p?;
        ops += p.ops;
        hists.push(p.hist);
        lates.push(p.late);
    }
    Ok((measure::merge(hists), measure::merge(lates), ops))
}

/// `producers` threads, each appending `payload` and waiting, for the
/// window `w`.
pub fn closed(log: &dyn Log, producers: usize, payload: &[u8], w: Window) -> io::Result<Raw> {
    let failed = AtomicBool::new(false);
    let (parts, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let failed = &failed;
                s.spawn(move || {
                    let mut part = Part::new();
                    loop {
                        let t0 = Instant::now();
                        if t0 >= w.end || failed.load(Ordering::Relaxed) {
                            return Ok(part);
                        }
                        if let Err(e) = log.append(p, payload) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        let t1 = Instant::now();
                        if w.counts(t0, t1) {
                            record(&mut part.hist, t1 - t0);
                            part.ops += 1;
                        }
                        progress::tick(1);
                    }
                })
            })
            .collect();
        let cpu = w.cpu_during();
        let parts: Vec<io::Result<Part>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("producer panicked")))
            })
            .collect();
        (parts, cpu)
    });
    let (hist, _, ops) = join_parts(parts)?;
    Ok(Raw {
        ops,
        bytes: ops * payload.len() as u64,
        elapsed: w.len(),
        cpu,
        hist,
        missed: 0,
        note: log.note(),
        late: None,
    })
}

/// The open-loop schedule: slot `i` is due at `base + i / rate`; slots
/// `first..last` fall inside the measured window.
#[derive(Clone, Copy)]
pub struct Schedule {
    pub base: Instant,
    pub rate: f64,
    pub window: Window,
    first: u64,
    last: u64,
}

impl Schedule {
    pub fn new(rate: f64, warmup: Duration, secs: Duration) -> Schedule {
        let window = Window::after(warmup + Duration::from_millis(20), secs);
        let base = window.start - warmup;
        let slot = |t: Instant| ((t - base).as_secs_f64() * rate).ceil() as u64;
        Schedule {
            base,
            rate,
            window,
            first: slot(window.start),
            last: slot(window.end),
        }
    }

    pub fn due(&self, i: u64) -> Instant {
        self.base + Duration::from_secs_f64(i as f64 / self.rate)
    }

    /// Slots due inside the measured window.
    pub fn expected(&self) -> u64 {
        self.last - self.first
    }

    pub fn measured(&self, i: u64) -> bool {
        (self.first..self.last).contains(&i)
    }

    /// Past the schedule: nothing more is due.
    pub fn finished(&self, i: u64) -> bool {
        i >= self.last
    }

    /// Whether the backlog has been drained for [`GRACE`] past the window:
    /// what is still unsent now counts as missed.
    pub fn past_grace(&self) -> bool {
        Instant::now() >= self.window.end + GRACE
    }

    /// Whether a driver stops before slot `i`: the schedule is finished,
    /// or [`past_grace`](Self::past_grace).
    pub fn stops_at(&self, i: u64) -> bool {
        self.finished(i) || self.past_grace()
    }

    /// An open-loop run's result: `ops` records of `payload_len` bytes
    /// measured in this schedule's window, the slots not measured counted
    /// as missed.
    pub fn raw(
        &self,
        ops: u64,
        payload_len: usize,
        cpu: measure::CpuUse,
        hist: Histogram<u64>,
        late: Histogram<u64>,
    ) -> Raw {
        Raw {
            ops,
            bytes: ops * payload_len as u64,
            elapsed: self.window.len(),
            cpu,
            hist,
            missed: self.expected().saturating_sub(ops),
            note: None,
            late: Some(late),
        }
    }
}

/// Open loop at `rate` records/s with `workers` threads.
pub fn open(
    log: &dyn Log,
    rate: f64,
    workers: usize,
    payload: &[u8],
    warmup: Duration,
    secs: Duration,
) -> io::Result<Raw> {
    let sched = Schedule::new(rate, warmup, secs);
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let (parts, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|wk| {
                let (next, failed) = (&next, &failed);
                s.spawn(move || {
                    let mut part = Part::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let due = sched.due(i);
                        if sched.stops_at(i) || failed.load(Ordering::Relaxed) {
                            return Ok(part);
                        }
                        sleep_until(due);
                        let sent = Instant::now();
                        if let Err(e) = log.append(wk, payload) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        part.durable(&sched, i, due, sent);
                    }
                })
            })
            .collect();
        let cpu = sched.window.cpu_during();
        let parts: Vec<io::Result<Part>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("worker panicked")))
            })
            .collect();
        (parts, cpu)
    });
    let (hist, late, ops) = join_parts(parts)?;
    let mut raw = sched.raw(ops, payload.len(), cpu, hist, late);
    raw.note = log.note();
    Ok(raw)
}

/// Open loop at `rate` records/s through `log`'s pipelined API: one
/// dispatcher submits each slot when due (sleeping when the next slot is
/// ahead, catching up without sleeping when behind) and hands the pending
/// record to one completion thread, which waits for them in submission
/// order. A log acknowledges in order, so once one wait returns, the
/// records after it that are already durable are taken without blocking:
/// one wake-up per write, not per record. Latency runs from each slot's
/// intended time to the moment the completion thread sees it durable, so
/// a completion thread that falls behind only overstates it.
pub fn open_pipelined(
    log: &dyn Pipelined,
    rate: f64,
    payload: &[u8],
    warmup: Duration,
    secs: Duration,
) -> io::Result<Raw> {
    let sched = Schedule::new(rate, warmup, secs);
    let failed = AtomicBool::new(false);
    type Sent = (u64, Instant, Instant, Box<dyn Pending>);
    let (tx, rx) = std::sync::mpsc::channel::<Sent>();
    let (dispatched, part, cpu) = std::thread::scope(|s| {
        let failed = &failed;
        let completer = s.spawn(move || -> io::Result<Part> {
            let mut part = Part::new();
            for (i, due, sent, pending) in rx {
                if let Err(e) = pending.wait() {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                part.durable(&sched, i, due, sent);
            }
            Ok(part)
        });
        let dispatcher = s.spawn(move || -> io::Result<()> {
            let mut i = 0;
            while !sched.stops_at(i) && !failed.load(Ordering::Relaxed) {
                let due = sched.due(i);
                sleep_until(due);
                let sent = Instant::now();
                let pending = log.submit(payload).inspect_err(|_| {
                    failed.store(true, Ordering::Relaxed);
                })?;
                if tx.send((i, due, sent, pending)).is_err() {
                    // The completion thread stopped on an error of its own.
                    break;
                }
                i += 1;
            }
            Ok(())
        });
        let cpu = sched.window.cpu_during();
        let dispatched = dispatcher
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("dispatcher panicked")));
        let part = completer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("completion thread panicked")));
        (dispatched, part, cpu)
    });
    dispatched?;
    let (hist, late, ops) = join_parts(vec![part])?;
    Ok(sched.raw(ops, payload.len(), cpu, hist, late))
}
