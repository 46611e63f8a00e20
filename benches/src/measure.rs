//! What one measurement produces, and how repeated measurements are
//! summarised: latency histograms, process CPU time, medians.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency tracked exactly, in microseconds (one hour).
const MAX_US: u64 = 3_600_000_000;

/// Quantiles written to the JSON file and drawn on the chart.
pub const CURVE_QUANTILES: [f64; 12] = [
    0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0,
];

/// A latency histogram in microseconds.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

/// Record one latency; sub-microsecond values count as 1 µs.
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    h.saturating_record(us.clamp(1, MAX_US));
}

/// User plus system CPU time of this whole process (every thread, live or
/// exited), from `/proc/self/stat`. Resolution: one clock tick (10 ms).
pub fn process_cpu() -> Duration {
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name (field 2) may contain spaces; fields after the last
    // ')' are plain numbers: state is field 3, utime 14, stime 15.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => Duration::from_secs_f64((u + s) as f64 / clock_ticks() as f64),
        _ => Duration::ZERO,
    }
}

/// Busy clock ticks of the whole machine (user, nice, system and steal
/// from `/proc/stat`; interrupts left out).
fn machine_ticks() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    [0, 1, 2, 7].iter().filter_map(|&i| v.get(i)).sum()
}

/// Per process other than this one: kernel thread or not, its CPU ticks
/// (user + system), and the bytes it caused to be written to storage.
fn processes() -> HashMap<u32, (bool, u64, u64)> {
    let me = std::process::id();
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
            continue;
        };
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // After the state: ppid pgrp session tty tpgid flags minflt
        // cminflt majflt cmajflt utime stime.
        const PF_KTHREAD: u64 = 0x0020_0000;
        if f.len() < 12 {
            continue;
        }
        let written = std::fs::read_to_string(e.path().join("io"))
            .ok()
            .and_then(|io| {
                io.lines()
                    .find(|l| l.starts_with("write_bytes:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0);
        out.insert(pid, (f[5] & PF_KTHREAD != 0, f[10] + f[11], written));
    }
    out
}

/// CPU used during a window by this process, and by the other user
/// processes of the machine (the whole machine's busy time less ours and
/// less kernel threads', some of which complete I/O for the system under
/// test), with the bytes those others wrote to storage: the noise from
/// outside the benchmark.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub own: Duration,
    pub others: Duration,
    pub others_written: u64,
}

/// Readings at the start of a window.
pub struct CpuMark {
    own: Duration,
    machine: u64,
    procs: HashMap<u32, (bool, u64, u64)>,
}

impl CpuMark {
    pub fn now() -> CpuMark {
        CpuMark {
            own: process_cpu(),
            machine: machine_ticks(),
            procs: processes(),
        }
    }

    pub fn since(&self) -> CpuUse {
        let own = process_cpu().saturating_sub(self.own);
        let machine = machine_ticks().saturating_sub(self.machine);
        let (mut kernel, mut written) = (0u64, 0u64);
        for (pid, (kthread, t, w)) in processes() {
            let (_, t0, w0) = self.procs.get(&pid).copied().unwrap_or((kthread, 0, 0));
            if kthread {
                kernel += t.saturating_sub(t0);
            } else {
                written += w.saturating_sub(w0);
            }
        }
        let tick = 1.0 / clock_ticks() as f64;
        let others = (machine.saturating_sub(kernel) as f64 * tick - own.as_secs_f64()).max(0.0);
        CpuUse {
            own,
            others: Duration::from_secs_f64(others),
            others_written: written,
        }
    }
}

/// Wait (at most `limit`) until the other processes on the machine are
/// nearly idle: under a quarter of a CPU over a 200 ms sample. Returns how
/// busy they were at the last sample, in CPUs.
pub fn wait_for_quiet(limit: Duration) -> f64 {
    let give_up = Instant::now() + limit;
    loop {
        let mark = CpuMark::now();
        std::thread::sleep(Duration::from_millis(200));
        let busy = mark.since().others.as_secs_f64() / 0.2;
        if busy < 0.25 || Instant::now() >= give_up {
            return busy;
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`, asked of `getconf` once (no libc call needed);
/// 100 where that fails, which is what Linux reports on every common
/// architecture.
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// The raw outcome of one run of one system in one case.
pub struct Raw {
    /// Operations (records, or device writes for a floor) completed in the
    /// measured window.
    pub ops: u64,
    /// Payload bytes of those operations.
    pub bytes: u64,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// CPU time spent during the window, by the harness process and by
    /// other user processes.
    pub cpu: CpuUse,
    /// Latency of each operation counted.
    pub hist: Histogram<u64>,
    /// Open loop only: scheduled operations that had not completed when
    /// the run gave up on them (the system could not keep up).
    pub missed: u64,
    /// A system-specific note (e.g. ringwal's records per device write).
    pub note: Option<String>,
    /// Open loop only: how late the harness itself started each record
    /// (from its intended time to the call), which every latency includes.
    pub late: Option<Histogram<u64>>,
}

/// One run, summarised.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub ops: u64,
    pub secs: f64,
    pub ops_per_s: f64,
    /// Payload megabytes (10^6 bytes) per second.
    pub mb_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub cpu_us_per_op: f64,
    /// CPUs kept busy by other user processes during the window: noise
    /// from outside the benchmark.
    pub background_cpus: f64,
    /// MB/s those other processes wrote to storage meanwhile.
    pub background_write_mb_s: f64,
    pub missed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Open loop only: p99 of the harness's own dispatch lateness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_p99_us: Option<u64>,
}

impl Raw {
    pub fn sample(&self) -> Sample {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let q = |x: f64| {
            if self.hist.is_empty() {
                0
            } else {
                self.hist.value_at_quantile(x)
            }
        };
        Sample {
            ops: self.ops,
            secs,
            ops_per_s: self.ops as f64 / secs,
            mb_per_s: self.bytes as f64 / 1e6 / secs,
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: self.hist.max(),
            cpu_us_per_op: if self.ops == 0 {
                0.0
            } else {
                self.cpu.own.as_secs_f64() * 1e6 / self.ops as f64
            },
            background_cpus: self.cpu.others.as_secs_f64() / secs,
            background_write_mb_s: self.cpu.others_written as f64 / 1e6 / secs,
            missed: self.missed,
            note: self.note.clone(),
            late_p99_us: self
                .late
                .as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(0.99)),
        }
    }
}

/// The median of each figure across repeated runs (each figure on its
/// own, so the median p99 and the median throughput may come from
/// different runs).
pub fn median(samples: &[Sample]) -> Sample {
    fn med<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN in measurements"));
        v[v.len() / 2]
    }
    assert!(!samples.is_empty(), "median of no samples");
    let f = |g: fn(&Sample) -> f64| med(samples.iter().map(g).collect());
    let u = |g: fn(&Sample) -> u64| med(samples.iter().map(g).collect());
    let mid = samples
        .iter()
        .min_by(|a, b| {
            let m = f(|s| s.ops_per_s);
            (a.ops_per_s - m)
                .abs()
                .partial_cmp(&(b.ops_per_s - m).abs())
                .expect("no NaN")
        })
        .expect("non-empty");
    Sample {
        ops: u(|s| s.ops),
        secs: f(|s| s.secs),
        ops_per_s: f(|s| s.ops_per_s),
        mb_per_s: f(|s| s.mb_per_s),
        p50_us: u(|s| s.p50_us),
        p99_us: u(|s| s.p99_us),
        p999_us: u(|s| s.p999_us),
        max_us: u(|s| s.max_us),
        cpu_us_per_op: f(|s| s.cpu_us_per_op),
        background_cpus: f(|s| s.background_cpus),
        background_write_mb_s: f(|s| s.background_write_mb_s),
        missed: u(|s| s.missed),
        note: mid.note.clone(),
        late_p99_us: mid.late_p99_us,
    }
}

/// Latency at each of [`CURVE_QUANTILES`], in microseconds.
pub fn curve(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    CURVE_QUANTILES
        .iter()
        .map(|&q| {
            let v = if h.is_empty() {
                0
            } else if q >= 1.0 {
                h.max()
            } else {
                h.value_at_quantile(q)
            };
            (q, v)
        })
        .collect()
}

/// A fixed measurement schedule: warm up until `start`, measure until
/// `end`. Work that began before `start` or finished after `end` is not
/// counted, so every system is judged on the same window.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn after(warmup: Duration, secs: Duration) -> Window {
        let start = Instant::now() + warmup;
        Window {
            start,
            end: start + secs,
        }
    }

    /// Whether an operation that began at `t0` and finished at `t1` counts.
    pub fn counts(&self, t0: Instant, t1: Instant) -> bool {
        t0 >= self.start && t1 <= self.end
    }

    pub fn len(&self) -> Duration {
        self.end - self.start
    }

    /// Sleep until `start`, read the CPU clocks, sleep until `end`, read
    /// them again: the CPU time used inside the window.
    pub fn cpu_during(&self) -> CpuUse {
        sleep_until(self.start);
        let mark = CpuMark::now();
        sleep_until(self.end);
        mark.since()
    }
}

pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Merge per-thread histograms.
pub fn merge(parts: impl IntoIterator<Item = Histogram<u64>>) -> Histogram<u64> {
    let mut all = histogram();
    for h in parts {
        all.add(&h).expect("same histogram bounds");
    }
    all
}
