//! What one measurement produces, and how repeated measurements are
//! summarised: latency histograms, process CPU time, medians.

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

/// CPU time all processes spent busy since boot (user, nice, system, irq,
/// softirq and steal from `/proc/stat`): with [`process_cpu`], tells how
/// much of the machine something other than the harness used.
pub fn machine_busy() -> Duration {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return Duration::ZERO;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return Duration::ZERO;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    Duration::from_secs_f64(busy as f64 / clock_ticks() as f64)
}

/// CPU time used during a window: by this process, and by everything else
/// on the machine (other processes, interrupts, the hypervisor's steal).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub own: Duration,
    pub others: Duration,
}

impl CpuUse {
    pub fn since(own0: Duration, all0: Duration) -> CpuUse {
        let own = process_cpu().saturating_sub(own0);
        let all = machine_busy().saturating_sub(all0);
        CpuUse {
            own,
            others: all.saturating_sub(own),
        }
    }
}

/// Wait (at most `limit`) until the rest of the machine is nearly idle:
/// under a quarter of a CPU busy over a 100 ms sample. Returns how busy it
/// was at the last sample, in CPUs.
pub fn wait_for_quiet(limit: Duration) -> f64 {
    let give_up = Instant::now() + limit;
    loop {
        let (own0, all0) = (process_cpu(), machine_busy());
        std::thread::sleep(Duration::from_millis(100));
        let u = CpuUse::since(own0, all0);
        let busy = u.others.as_secs_f64() / 0.1;
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
    /// the rest of the machine.
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
    /// CPUs kept busy by everything but the harness during the window
    /// (other processes, interrupts, steal): noise from outside.
    pub background_cpus: f64,
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
        let (own0, all0) = (process_cpu(), machine_busy());
        sleep_until(self.end);
        CpuUse::since(own0, all0)
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
