//! Results: the structures written to JSON, the table printed on stdout,
//! and the targets the grid is held to, computed from them: five, and two
//! more for a run beside a busy neighbour.

use std::fmt::Write as _;

use serde::Serialize;

use crate::grid::Grid;
use crate::machine::Machine;
use crate::measure::Sample;
use crate::neighbour::Spent;
use crate::recovery::{Filled, Pass};
use crate::systems::System;

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Timer slack set to 1 ns for the harness's threads.
    pub tight_timer_slack: bool,
    /// The harness's nice value (bench.sh runs it at -10 as root).
    pub nice: i64,
    pub reps: usize,
    pub secs: f64,
    pub warmup_secs: f64,
    pub sla_ms: f64,
    pub probe_secs: f64,
    pub open_workers: usize,
    /// Whether logs with a pipelined API (ringwal) were driven by the
    /// worker threads too, instead of a dispatcher and a completion thread.
    pub open_threads_only: bool,
    pub baseline_file_mib: u64,
    pub floor_file_mib: u64,
    pub command: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct SysResult {
    pub system: System,
    pub name: &'static str,
    pub description: &'static str,
    /// One sample per repetition, in run order.
    pub reps: Vec<Sample>,
    /// Median of each figure across repetitions.
    pub median: Option<Sample>,
    /// Latency percentile curve of all repetitions merged: (quantile, µs).
    pub curve: Vec<(f64, u64)>,
    /// Throughput divided by the case's reference floor's.
    pub ops_vs_floor: Option<f64>,
    /// Throughput divided by ringwal-uring's.
    pub ops_vs_ringwal: Option<f64>,
    pub p99_vs_floor: Option<f64>,
    pub p99_vs_ringwal: Option<f64>,
    pub errors: Vec<String>,
    /// With `--busy-neighbour`: what the neighbour did in each run that
    /// succeeded, in run order (its CPU share shows it really spun).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub neighbour: Vec<Spent>,
}

impl SysResult {
    /// `system` with no run measured yet (`reps` empty, no ratios).
    pub fn unmeasured(system: System, description: &'static str) -> SysResult {
        SysResult {
            system,
            name: system.name(),
            description,
            reps: Vec::new(),
            median: None,
            curve: Vec::new(),
            ops_vs_floor: None,
            ops_vs_ringwal: None,
            p99_vs_floor: None,
            p99_vs_ringwal: None,
            errors: Vec::new(),
            neighbour: Vec::new(),
        }
    }

    /// The median share of a CPU the busy neighbour got across the runs
    /// (`None`: no neighbour).
    pub fn neighbour_share(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.neighbour.iter().map(|n| n.cpu_share).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub size: usize,
    pub producers: usize,
    pub reference_floor: System,
    pub systems: Vec<SysResult>,
    /// The CPU a busy neighbour spun on during every run of the case.
    pub busy_neighbour: Option<usize>,
}

impl CaseResult {
    pub fn get(&self, s: System) -> Option<&SysResult> {
        self.systems.iter().find(|r| r.system == s)
    }

    pub fn median(&self, s: System) -> Option<&Sample> {
        self.get(s).and_then(|r| r.median.as_ref())
    }

    /// Fill in the ratio columns once every system has been measured.
    pub fn compute_ratios(&mut self) {
        let floor = self.median(self.reference_floor).cloned();
        let rw = self.median(System::RingwalUring).cloned();
        let div = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        for r in &mut self.systems {
            let Some(m) = &r.median else { continue };
            if let Some(f) = &floor {
                r.ops_vs_floor = div(m.ops_per_s, f.ops_per_s);
                r.p99_vs_floor = div(m.p99_us as f64, f.p99_us as f64);
            }
            if let Some(w) = &rw {
                r.ops_vs_ringwal = div(m.ops_per_s, w.ops_per_s);
                r.p99_vs_ringwal = div(m.p99_us as f64, w.p99_us as f64);
            }
        }
    }

    /// The peer with the highest median throughput.
    pub fn best_peer(&self) -> Option<(System, &Sample)> {
        self.systems
            .iter()
            .filter(|r| r.system.is_peer())
            .filter_map(|r| r.median.as_ref().map(|m| (r.system, m)))
            .max_by(|a, b| a.1.ops_per_s.total_cmp(&b.1.ops_per_s))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub rate: f64,
    pub sample: Sample,
    pub pass: bool,
    /// With `--busy-neighbour`: what the neighbour did during the probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbour: Option<Spent>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepRep {
    /// Highest offered rate that met the SLA (0: none did).
    pub best: f64,
    /// Highest rate probed (on the way to `best`) whose p99 met the looser
    /// second SLA; coarser, since the search did not aim at it.
    pub best_alt: f64,
    /// The highest rate tried met it: the true limit may be higher.
    pub capped: bool,
    pub probes: Vec<Probe>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub system: System,
    pub name: &'static str,
    pub size: usize,
    pub sla_us: u64,
    pub alt_sla_us: u64,
    pub reps: Vec<SweepRep>,
    /// Median across repetitions of the best rate.
    pub median_best: Option<f64>,
    pub median_best_alt: Option<f64>,
    pub capped: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryResult {
    pub filled: Filled,
    pub passes: Vec<Pass>,
    pub cache_dropped: bool,
    /// Medians across passes.
    pub raw_mb_s: f64,
    /// Log bytes (frames, padding, headers) per second of open + replay.
    pub replay_mb_s: f64,
    pub replay_payload_mb_s: f64,
    pub open_secs: f64,
    pub replay_secs: f64,
    /// Medians of the CPU time of each (see [`Pass`]).
    pub raw_cpu_secs: f64,
    pub open_cpu_secs: f64,
    pub replay_cpu_secs: f64,
    pub replay_vs_raw: f64,
    /// Median over passes of each pass's own replay / raw ratio: the two
    /// reads of one pass ran seconds apart, so this is less exposed to the
    /// machine changing between passes.
    pub replay_vs_raw_paired: f64,
    /// With `--busy-neighbour`: what the neighbour did during each timed
    /// read (two per pass).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub neighbour: Vec<Spent>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub id: u32,
    pub what: String,
    pub measured: String,
    pub ratio: Option<f64>,
    pub goal: String,
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub settings: Settings,
    pub systems: Vec<(System, &'static str)>,
    pub unavailable: Vec<(String, String)>,
    pub cases: Vec<CaseResult>,
    pub sweeps: Vec<SweepResult>,
    pub recovery: Option<RecoveryResult>,
    pub recovery_error: Option<String>,
    pub targets: Vec<Target>,
    /// With `--grid`: the five standard cells as one table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<Grid>,
    pub total_secs: f64,
}

/// ` · busy neighbour on CPU N` for a run beside one, else nothing: for
/// every title, so that a table from such a run cannot be taken for one
/// from a quiet machine.
pub fn beside(cpu: Option<usize>) -> String {
    cpu.map_or_else(String::new, |c| format!(" · busy neighbour on CPU {c}"))
}

/// `12345.6` as `12,346`.
pub fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// How far apart the repetitions' throughputs were: (max - min) / median.
fn spread(reps: &[Sample]) -> String {
    if reps.len() < 2 {
        return "-".into();
    }
    let mut v: Vec<f64> = reps.iter().map(|s| s.ops_per_s).collect();
    v.sort_by(f64::total_cmp);
    let med = v[v.len() / 2];
    if med <= 0.0 {
        return "-".into();
    }
    format!("{:.0}%", (v[v.len() - 1] - v[0]) / med * 100.0)
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
}

pub fn human_size(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

impl Report {
    pub fn case(&self, size: usize, producers: usize) -> Option<&CaseResult> {
        self.cases
            .iter()
            .find(|c| c.size == size && c.producers == producers)
    }

    pub fn sweep(&self, s: System) -> Option<&SweepResult> {
        self.sweeps.iter().find(|r| r.system == s)
    }

    /// The whole report as text: machine, one table per case, the sweep,
    /// recovery and the targets.
    pub fn table(&self) -> String {
        let mut o = String::new();
        let st = &self.settings;
        let _ = writeln!(o, "ringwal harness · {}", self.machine.summary());
        let _ = writeln!(o, "dir: {}", self.machine.dir);
        let _ = writeln!(
            o,
            "every figure is the median of {} runs ({:.1} s measured after {:.1} s warm-up); latencies in µs; each system in a fresh directory; runs interleaved",
            st.reps, st.secs, st.warmup_secs
        );
        let _ = writeln!(
            o,
            "ops = records (floors: device writes); CPU/op = harness process CPU µs per op; spread = (max-min)/median of ops/s across runs; bg, bgMB/s = CPUs used and MB/s written by other processes during the run (noise; 2 CPUs = this machine fully taken)"
        );
        if let Some(cpu) = self.machine.busy_neighbour {
            let _ = writeln!(
                o,
                "busy neighbour on CPU {cpu}: another process spun there (pinned, no syscalls) through every measured run, warm-up included, and not between runs; nb = the share of a CPU it got (median of the runs); bg leaves it out"
            );
        }
        for (name, why) in &self.unavailable {
            let _ = writeln!(o, "not measured: {name}: {why}");
        }
        for c in &self.cases {
            let _ = writeln!(o);
            o.push_str(&case_table(c));
        }
        // After the cases it sums up, before the targets read off it.
        if let Some(g) = &self.grid {
            let _ = writeln!(o);
            o.push_str(&g.table());
        }
        if !self.sweeps.is_empty() {
            let sla = self.sweeps[0].sla_us;
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "== open loop: highest {} durable rate with p99 < {} µs (latency from each record's intended send time; median of {} sweeps){} ==",
                human_size(self.sweeps[0].size),
                thousands(sla as f64),
                st.reps,
                beside(self.machine.busy_neighbour)
            );
            let driver = if st.open_threads_only {
                format!("every system: {} worker threads, each sending the next due record and waiting for it", st.open_workers)
            } else {
                format!("ringwal: one dispatcher thread appends each record when due, one completion thread waits on the tickets in order; the others (blocking appends): {} worker threads, each sending the next due record and waiting for it", st.open_workers)
            };
            let _ = writeln!(o, "driven by {driver}");
            let rw = self
                .sweep(System::RingwalUring)
                .and_then(|s| s.median_best)
                .filter(|&b| b > 0.0);
            let alt = self.sweeps[0].alt_sla_us;
            let _ = writeln!(
                o,
                "{:<17} {:>12} {:>8} {:>12}  each sweep: best rate (µs at it)",
                "system",
                "records/s",
                "vs rw",
                format!("p99<{}ms", alt / 1000)
            );
            for s in &self.sweeps {
                let best = s.median_best.map_or_else(
                    || "failed".to_string(),
                    |b| {
                        if b == 0.0 {
                            "none".to_string()
                        } else {
                            format!("{}{}", thousands(b), if s.capped { "+" } else { "" })
                        }
                    },
                );
                let vs = match (s.median_best, rw) {
                    (Some(b), Some(r)) => format!("{:.2}x", b / r),
                    _ => "-".into(),
                };
                let detail: Vec<String> = s
                    .reps
                    .iter()
                    .map(|r| match &r.error {
                        Some(e) => format!("error: {e}"),
                        None => {
                            let at = r.probes.iter().find(|p| p.pass && p.rate == r.best);
                            match at {
                                Some(p) => format!(
                                    "{} (p99 {}, of which harness lateness p99 {})",
                                    thousands(r.best),
                                    thousands(p.sample.p99_us as f64),
                                    p.sample
                                        .late_p99_us
                                        .map_or_else(|| "-".into(), |l| thousands(l as f64))
                                ),
                                None => "none".into(),
                            }
                        }
                    })
                    .collect();
                let alt = s.median_best_alt.map_or_else(
                    || "-".into(),
                    |b| {
                        if b == 0.0 {
                            "none".into()
                        } else {
                            thousands(b)
                        }
                    },
                );
                let _ = writeln!(
                    o,
                    "{:<17} {:>12} {:>8} {:>12}  {}",
                    s.name,
                    best,
                    vs,
                    alt,
                    detail.join(", ")
                );
            }
            let _ = writeln!(
                o,
                "('none': p99 over the SLA, or records left behind, at every rate tried, from the system's best closed-loop rate down to 1/64 of it; '+': met the SLA at the highest rate tried; p99<{}ms: highest rate among the same probes that met the looser SLA)",
                alt / 1000
            );
        }
        if let Some(r) = &self.recovery {
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "== recovery: {} records of {} B, {:.2} GB of log in {} segments; median of {} passes{}{} ==",
                thousands(r.filled.records as f64),
                r.filled.payload_bytes / r.filled.records.max(1),
                r.filled.log_bytes as f64 / 1e9,
                r.filled.segments,
                r.passes.len(),
                if r.cache_dropped {
                    ", page cache dropped before each"
                } else {
                    "; page cache NOT dropped (not root): reads may come from memory"
                },
                beside(self.machine.busy_neighbour)
            );
            let _ = writeln!(
                o,
                "raw sequential read of the segment files: {:>8.0} MB/s",
                r.raw_mb_s
            );
            let _ = writeln!(
                o,
                "Wal::open + reader_from(0) full pass:     {:>8.0} MB/s of log ({:.0} MB/s of payload); open {:.2} s, open + replay {:.2} s; {:.2}x raw (per pass: {:.2}x)",
                r.replay_mb_s,
                r.replay_payload_mb_s,
                r.open_secs,
                r.replay_secs,
                r.replay_vs_raw,
                r.replay_vs_raw_paired
            );
            let _ = writeln!(
                o,
                "CPU time (all threads): raw read {:.2} s; open {:.2} s; open + replay {:.2} s",
                r.raw_cpu_secs, r.open_cpu_secs, r.replay_cpu_secs
            );
        } else if let Some(e) = &self.recovery_error {
            let _ = writeln!(o);
            let _ = writeln!(o, "== recovery failed: {e} ==");
        }
        if !self.targets.is_empty() {
            let _ = writeln!(o);
            let _ = writeln!(o, "== targets{} ==", beside(self.machine.busy_neighbour));
            for t in &self.targets {
                let verdict = match t.met {
                    Some(true) => "MET",
                    Some(false) => "MISSED",
                    None => "not measured",
                };
                let _ = writeln!(
                    o,
                    "{}. {}: {} (goal {}) -> {}",
                    t.id, t.what, t.measured, t.goal, verdict
                );
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "total run time: {:.0} s", self.total_secs);
        o
    }

    /// The targets the grid is held to, from whatever this run measured:
    /// five, and beside a busy neighbour two more of its own.
    pub fn compute_targets(&mut self, size: usize, max_p: usize, large: (usize, usize)) {
        let mut t = Vec::new();
        // 1. Closed loop, many producers.
        let what = format!(
            "durable {}, {max_p} producers, closed loop: ringwal records/s vs best peer, p99 no higher",
            human_size(size)
        );
        let one = self.case(size, max_p).and_then(|c| {
            let rw = c.median(System::RingwalUring)?;
            let (peer, pm) = c.best_peer()?;
            let r = rw.ops_per_s / pm.ops_per_s;
            Some(Target {
                id: 1,
                what: what.clone(),
                measured: format!(
                    "{} vs {} {} records/s = {r:.2}x; p99 {} vs {} µs",
                    thousands(rw.ops_per_s),
                    peer.name(),
                    thousands(pm.ops_per_s),
                    thousands(rw.p99_us as f64),
                    thousands(pm.p99_us as f64)
                ),
                ratio: Some(r),
                goal: ">= 3x, p99 <= peer's".into(),
                met: Some(r >= 3.0 && rw.p99_us <= pm.p99_us),
            })
        });
        t.push(one.unwrap_or_else(|| unmeasured(1, what)));
        // 2. One producer against the QD1 floor.
        let what = format!(
            "durable {}, 1 producer: ringwal p99 / floor QD1 p99",
            human_size(size)
        );
        let two = self.case(size, 1).and_then(|c| {
            let rw = c.median(System::RingwalUring)?;
            let fl = c.median(System::FloorQd1)?;
            let r = rw.p99_us as f64 / fl.p99_us.max(1) as f64;
            Some(Target {
                id: 2,
                what: what.clone(),
                measured: format!(
                    "{} vs {} µs = {r:.2}x",
                    thousands(rw.p99_us as f64),
                    thousands(fl.p99_us as f64)
                ),
                ratio: Some(r),
                goal: "<= 1.5x".into(),
                met: Some(r <= 1.5),
            })
        });
        t.push(two.unwrap_or_else(|| unmeasured(2, what)));
        // 3. Bandwidth with large records.
        let what = format!(
            "durable {}, {} producers: ringwal MB/s / floor MB/s ({} writes, {} in flight)",
            human_size(large.0),
            large.1,
            human_size(large.0),
            large.1
        );
        let three = self.case(large.0, large.1).and_then(|c| {
            let rw = c.median(System::RingwalUring)?;
            let fl = c.median(System::Floor1m)?;
            let r = rw.mb_per_s / fl.mb_per_s;
            Some(Target {
                id: 3,
                what: what.clone(),
                measured: format!("{:.0} vs {:.0} MB/s = {r:.2}x", rw.mb_per_s, fl.mb_per_s),
                ratio: Some(r),
                goal: ">= 0.8x".into(),
                met: Some(r >= 0.8),
            })
        });
        t.push(three.unwrap_or_else(|| unmeasured(3, what)));
        // 4. Open loop under the SLA.
        let what = "open loop: highest durable rate with p99 under the SLA, ringwal vs best peer"
            .to_string();
        let four = self.sweep(System::RingwalUring).and_then(|rw| {
            let rwb = rw.median_best?;
            let best = self
                .sweeps
                .iter()
                .filter(|s| s.system.is_peer())
                .filter_map(|s| s.median_best.map(|b| (s, b)))
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            let ratio = (best.1 > 0.0).then(|| rwb / best.1);
            Some(Target {
                id: 4,
                what: what.clone(),
                measured: format!(
                    "{}{} vs {} {}{} records/s (p99 < {} µs) = {}",
                    thousands(rwb),
                    if rw.capped { "+" } else { "" },
                    best.0.name,
                    thousands(best.1),
                    if best.0.capped { "+" } else { "" },
                    thousands(rw.sla_us as f64),
                    ratio.map_or_else(
                        || "infinite: no peer met the SLA at any rate tried".into(),
                        |r| format!("{r:.2}x")
                    )
                ),
                ratio,
                goal: ">= 3x".into(),
                met: Some(rwb > 0.0 && ratio.is_none_or(|r| r >= 3.0)),
            })
        });
        t.push(four.unwrap_or_else(|| unmeasured(4, what)));
        // 5. Recovery.
        let what = "recovery replay (Wal::open + full reader pass)".to_string();
        let five = self.recovery.as_ref().map(|r| Target {
            id: 5,
            what: what.clone(),
            measured: format!(
                "{:.0} MB/s vs raw read {:.0} MB/s = {:.2}x{}",
                r.replay_mb_s,
                r.raw_mb_s,
                r.replay_vs_raw,
                if r.cache_dropped {
                    ""
                } else {
                    " (page cache not dropped)"
                }
            ),
            ratio: Some(r.replay_vs_raw),
            goal: ">= 1000 MB/s or >= 0.7x raw".into(),
            met: Some(r.replay_mb_s >= 1000.0 || r.replay_vs_raw >= 0.7),
        });
        t.push(five.unwrap_or_else(|| unmeasured(5, what)));
        if let Some(cpu) = self.machine.busy_neighbour {
            t.extend(self.neighbour_targets(size, cpu));
        }
        self.targets = t;
    }

    /// The two targets of a run beside a busy neighbour on `cpu`: the
    /// CPU taken must cost ringwal no more than it costs the peers.
    fn neighbour_targets(&self, size: usize, cpu: usize) -> [Target; 2] {
        // 6. One producer against okaywal.
        let what_six = format!(
            "durable {}, 1 producer, busy neighbour on CPU {cpu}: ringwal records/s vs okaywal",
            human_size(size)
        );
        let six = self.case(size, 1).and_then(|c| {
            let rw = c.median(System::RingwalUring)?;
            let ok = c.median(System::Okaywal)?;
            let r = rw.ops_per_s / ok.ops_per_s;
            Some(Target {
                id: 6,
                what: what_six.clone(),
                measured: format!(
                    "{} vs {} records/s = {r:.2}x",
                    thousands(rw.ops_per_s),
                    thousands(ok.ops_per_s)
                ),
                ratio: Some(r),
                goal: ">= 0.9x".into(),
                met: Some(r >= 0.9),
            })
        });
        // 7. Sixteen producers against the best peer.
        let what_seven = format!(
            "durable {}, 16 producers, busy neighbour on CPU {cpu}: ringwal records/s vs best peer",
            human_size(size)
        );
        let seven = self.case(size, 16).and_then(|c| {
            let rw = c.median(System::RingwalUring)?;
            let (peer, pm) = c.best_peer()?;
            let r = rw.ops_per_s / pm.ops_per_s;
            Some(Target {
                id: 7,
                what: what_seven.clone(),
                measured: format!(
                    "{} vs {} {} records/s = {r:.2}x",
                    thousands(rw.ops_per_s),
                    peer.name(),
                    thousands(pm.ops_per_s)
                ),
                ratio: Some(r),
                goal: ">= 1.5x".into(),
                met: Some(r >= 1.5),
            })
        });
        [
            six.unwrap_or_else(|| unmeasured(6, what_six)),
            seven.unwrap_or_else(|| unmeasured(7, what_seven)),
        ]
    }
}

/// One case as a table: a row per system.
pub fn case_table(c: &CaseResult) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "== {} (reference floor: {}) ==",
        c.name,
        c.reference_floor.name()
    );
    let _ = writeln!(
        o,
        "{:<17} {:>9} {:>6} {:>8} {:>7} {:>7} {:>8} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>5} {:>6}{}  note",
        "system",
        "ops/s",
        "spread",
        "MB/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "CPU/op",
        "ops/floor",
        "ops/rw",
        "p99/floor",
        "p99/rw",
        "bg",
        "bgMB/s",
        // Only beside a neighbour: a quiet run's table stays as it was.
        if c.busy_neighbour.is_some() {
            format!(" {:>5}", "nb")
        } else {
            String::new()
        }
    );
    for r in &c.systems {
        match &r.median {
            Some(m) => {
                let _ = writeln!(
                    o,
                    "{:<17} {:>9} {:>6} {:>8.1} {:>7} {:>7} {:>8} {:>8} {:>7.1} {:>9} {:>8} {:>9} {:>8} {:>5.2} {:>6.1}{}  {}",
                    r.name,
                    thousands(m.ops_per_s),
                    spread(&r.reps),
                    m.mb_per_s,
                    thousands(m.p50_us as f64),
                    thousands(m.p99_us as f64),
                    thousands(m.p999_us as f64),
                    thousands(m.max_us as f64),
                    m.cpu_us_per_op,
                    ratio(r.ops_vs_floor),
                    ratio(r.ops_vs_ringwal),
                    ratio(r.p99_vs_floor),
                    ratio(r.p99_vs_ringwal),
                    m.background_cpus,
                    m.background_write_mb_s,
                    match (c.busy_neighbour, r.neighbour_share()) {
                        (Some(_), Some(share)) => format!(" {share:>5.2}"),
                        (Some(_), None) => format!(" {:>5}", "-"),
                        (None, _) => String::new(),
                    },
                    m.note.clone().unwrap_or_default()
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "{:<17} failed: {}",
                    r.name,
                    r.errors.first().cloned().unwrap_or_default()
                );
            }
        }
        if r.median.is_some() && !r.errors.is_empty() {
            let _ = writeln!(
                o,
                "{:<17} ({} of {} runs failed: {})",
                "",
                r.errors.len(),
                r.errors.len() + r.reps.len(),
                r.errors[0]
            );
        }
    }
    o
}

fn unmeasured(id: u32, what: String) -> Target {
    Target {
        id,
        what,
        measured: "not measured in this run".into(),
        ratio: None,
        goal: String::new(),
        met: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234.0), "1,234");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(human_size(1024), "1 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(100), "100 B");
    }

    fn sample(ops_per_s: f64) -> Sample {
        Sample {
            ops: ops_per_s as u64,
            secs: 1.0,
            ops_per_s,
            mb_per_s: ops_per_s / 1000.0,
            p50_us: 100,
            p99_us: 200,
            p999_us: 300,
            max_us: 400,
            cpu_us_per_op: 1.0,
            background_cpus: 0.0,
            background_write_mb_s: 0.0,
            missed: 0,
            note: None,
            late_p99_us: None,
        }
    }

    fn case(producers: usize, figures: &[(System, f64)]) -> CaseResult {
        CaseResult {
            name: String::new(),
            size: 1024,
            producers,
            reference_floor: System::FloorQd1,
            systems: figures
                .iter()
                .map(|&(system, ops)| SysResult {
                    reps: vec![sample(ops)],
                    median: Some(sample(ops)),
                    ..SysResult::unmeasured(system, "")
                })
                .collect(),
            busy_neighbour: Some(1),
        }
    }

    fn report(busy_neighbour: Option<usize>, cases: Vec<CaseResult>) -> Report {
        let mut machine = Machine::probe(std::path::Path::new("/"));
        machine.busy_neighbour = busy_neighbour;
        Report {
            machine,
            settings: Settings {
                tight_timer_slack: false,
                nice: 0,
                reps: 1,
                secs: 1.0,
                warmup_secs: 0.0,
                sla_ms: 1.0,
                probe_secs: 1.0,
                open_workers: 1,
                open_threads_only: false,
                baseline_file_mib: 1,
                floor_file_mib: 1,
                command: String::new(),
            },
            systems: Vec::new(),
            unavailable: Vec::new(),
            cases,
            sweeps: Vec::new(),
            recovery: None,
            recovery_error: None,
            targets: Vec::new(),
            grid: None,
            total_secs: 0.0,
        }
    }

    #[test]
    fn busy_neighbour_titles_and_targets() {
        assert_eq!(beside(Some(3)), " · busy neighbour on CPU 3");
        assert_eq!(beside(None), "");

        // A quiet run: the five targets, no word of a neighbour.
        let mut quiet = report(None, Vec::new());
        quiet.compute_targets(1024, 16, (1 << 20, 4));
        assert_eq!(quiet.targets.len(), 5);
        assert!(!quiet.table().contains("neighbour"));

        // Beside a neighbour, nothing measured: seven, the last two
        // unmeasured.
        let mut none = report(Some(1), Vec::new());
        none.compute_targets(1024, 16, (1 << 20, 4));
        let ids: Vec<u32> = none.targets.iter().map(|t| t.id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
        assert!(none.targets[5..].iter().all(|t| t.met.is_none()));
        assert!(none
            .table()
            .contains("== targets · busy neighbour on CPU 1 =="));

        // Both cells measured: 6 against okaywal alone, 7 against the
        // best peer, each against its goal.
        let mut both = report(
            Some(1),
            vec![
                case(
                    1,
                    &[(System::RingwalUring, 850.0), (System::Okaywal, 1000.0)],
                ),
                case(
                    16,
                    &[
                        (System::RingwalUring, 16_000.0),
                        (System::Okaywal, 9_000.0),
                        (System::RaftEngine, 10_000.0),
                    ],
                ),
            ],
        );
        both.compute_targets(1024, 16, (1 << 20, 4));
        let six = &both.targets[5];
        assert_eq!((six.id, six.met), (6, Some(false)), "{six:?}");
        assert!((six.ratio.unwrap() - 0.85).abs() < 1e-9, "{six:?}");
        let seven = &both.targets[6];
        assert_eq!((seven.id, seven.met), (7, Some(true)), "{seven:?}");
        assert!((seven.ratio.unwrap() - 1.6).abs() < 1e-9, "{seven:?}");
        assert!(seven.measured.contains("raft-engine"), "{seven:?}");
        // A case beside a neighbour has the neighbour's column.
        let table = case_table(&both.cases[0]);
        assert!(table.contains(" nb "), "{table}");
    }
}
