//! `--grid`: the project's standard grid, five closed-loop cells measured
//! in one run and set out as one table (`table.txt`, stdout, the `grid`
//! key of `results.json`), one markdown table (`grid.md`, for the docs)
//! and one chart (`grid.svg`, drawn by `chart::draw_grid`).
//!
//! The cells took three invocations before, and figures from three runs
//! minutes apart put side by side what the device did at different
//! times; here every figure of a grid is from the same run.

use std::fmt::Write as _;

use serde::Serialize;

use crate::measure::Sample;
use crate::report::{beside, human_size, thousands, CaseResult};
use crate::systems::System;

/// Durable records of one size from a number of producers, closed loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub size: usize,
    pub producers: usize,
}

/// The standard grid: small records from one producer (latency), from
/// many (group commit), and two large sizes (bandwidth).
pub const CELLS: [Cell; 5] = [
    Cell {
        size: 1024,
        producers: 1,
    },
    Cell {
        size: 1024,
        producers: 16,
    },
    Cell {
        size: 1024,
        producers: 64,
    },
    Cell {
        size: 64 << 10,
        producers: 8,
    },
    Cell {
        size: 1 << 20,
        producers: 4,
    },
];

/// What `--grid` measures when `--systems` does not say: ringwal's two
/// backends, the two peers the docs compare with, and every floor some
/// cell needs.
pub const SYSTEMS: [System; 8] = [
    System::RingwalUring,
    System::RingwalThreaded,
    System::Okaywal,
    System::RaftEngine,
    System::FloorQd1,
    System::FloorQd1Ring,
    System::FloorQd8,
    System::Floor1m,
];

/// The peers a cell's best peer is chosen from. Others that `--systems`
/// adds (walrus, the hand-written baselines) appear in the case tables but
/// not here, so that "best peer" means the same in every grid.
pub const PEERS: [System; 2] = [System::Okaywal, System::RaftEngine];

/// How ringwal is set against a cell's floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    /// One producer: nothing to batch, so the question is how much the
    /// log adds to one durable write's latency: p99 over the floor's.
    P99,
    /// Small records from many producers: records/s over the floor's
    /// 4 KiB writes/s, i.e. how many records group commit makes of one
    /// device write.
    Writes,
    /// Large records: the device's bandwidth is the ceiling; MB/s over
    /// the floor's.
    Bandwidth,
}

impl Compare {
    /// The figure compared (ringwal's over the floor's).
    fn figure(self, f: &Fig) -> f64 {
        match self {
            Compare::P99 => f.p99_us as f64,
            Compare::Writes => f.ops_per_s,
            Compare::Bandwidth => f.mb_per_s,
        }
    }

    /// `1.20x` as the tables say it.
    fn say(self, r: f64) -> String {
        match self {
            Compare::P99 => format!("p99 {r:.2}x"),
            Compare::Writes => format!("{r:.2}x writes"),
            Compare::Bandwidth => format!("{r:.2}x MB/s"),
        }
    }
}

impl Cell {
    /// `1 KiB, 16 producers`, as the docs name a cell.
    pub fn name(self) -> String {
        format!(
            "{}, {} producer{}",
            human_size(self.size),
            self.producers,
            if self.producers == 1 { "" } else { "s" }
        )
    }

    /// `1 KiB × 16`, for the chart's axis.
    pub fn short(self) -> String {
        format!("{} × {}", human_size(self.size), self.producers)
    }

    pub fn compare(self) -> Compare {
        if self.size > 4096 {
            Compare::Bandwidth
        } else if self.producers == 1 {
            Compare::P99
        } else {
            Compare::Writes
        }
    }

    /// The floor ringwal is held to in this cell.
    pub fn floor(self) -> System {
        match self.compare() {
            Compare::P99 => System::FloorQd1,
            Compare::Writes => System::FloorQd8,
            // `Floor1m` writes the cell's record size at its producers'
            // depth (harness.rs, `Run::closed`): 64 KiB at 8 here.
            Compare::Bandwidth => System::Floor1m,
        }
    }

    /// Every floor measured in this cell: the one it is held to, and at
    /// one producer also the same writes through io_uring, the path
    /// ringwal's own writes take.
    pub fn floors(self) -> &'static [System] {
        match self.compare() {
            Compare::P99 => &[System::FloorQd1, System::FloorQd1Ring],
            Compare::Writes => &[System::FloorQd8],
            Compare::Bandwidth => &[System::Floor1m],
        }
    }

    /// What the tables call `sys` in this cell: the large-record floor
    /// by what it wrote (`floor-64k-qd8`), since its own name says
    /// 1 MiB at depth 4 whatever the cell.
    pub fn label(self, sys: System) -> String {
        if sys != System::Floor1m {
            return sys.name().to_string();
        }
        let block = self.size.next_multiple_of(4096);
        let size = if block.is_multiple_of(1 << 20) {
            format!("{}m", block >> 20)
        } else {
            format!("{}k", block >> 10)
        };
        format!("floor-{size}-qd{}", self.producers)
    }
}

/// One system's medians in one cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig {
    pub system: System,
    /// Its name in the tables (see [`Cell::label`]).
    pub label: String,
    /// Records/s; a floor's device writes/s.
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    pub p99_us: u64,
}

impl Fig {
    fn new(cell: Cell, system: System, m: &Sample) -> Fig {
        Fig {
            system,
            label: cell.label(system),
            ops_per_s: m.ops_per_s,
            mb_per_s: m.mb_per_s,
            p99_us: m.p99_us,
        }
    }
}

/// The faster (median records/s) of the [`PEERS`] measured in `case`.
pub fn best_peer(case: &CaseResult) -> Option<(System, &Sample)> {
    PEERS
        .iter()
        .filter_map(|&s| case.median(s).map(|m| (s, m)))
        .max_by(|a, b| a.1.ops_per_s.total_cmp(&b.1.ops_per_s))
}

fn ratio(a: Option<&Fig>, b: Option<&Fig>, figure: impl Fn(&Fig) -> f64) -> Option<f64> {
    let (a, b) = (figure(a?), figure(b?));
    (b > 0.0).then(|| a / b)
}

/// One cell of the grid: each figure `None` where it was not measured (or
/// every run of it failed; the case's own table says why).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub cell: String,
    pub size: usize,
    pub producers: usize,
    pub compare: Compare,
    /// ringwal, io_uring backend.
    pub ringwal: Option<Fig>,
    pub threaded: Option<Fig>,
    /// ringwal's records/s over the threaded backend's.
    pub vs_threaded: Option<f64>,
    pub best_peer: Option<Fig>,
    /// ringwal's records/s over the best peer's.
    pub vs_best_peer: Option<f64>,
    pub floor: Option<Fig>,
    /// One producer: `floor-4k-qd1-ring`, if measured.
    pub floor_ring: Option<Fig>,
    /// ringwal against the floor, as [`Compare`] says.
    pub vs_floor: Option<f64>,
    pub vs_floor_ring: Option<f64>,
}

impl Row {
    pub fn of(cell: Cell, case: Option<&CaseResult>) -> Row {
        let fig = |s: System| case.and_then(|c| c.median(s)).map(|m| Fig::new(cell, s, m));
        let ringwal = fig(System::RingwalUring);
        let threaded = fig(System::RingwalThreaded);
        let best_peer = case.and_then(best_peer).map(|(s, m)| Fig::new(cell, s, m));
        let floor = fig(cell.floor());
        let floor_ring = match cell.compare() {
            Compare::P99 => fig(System::FloorQd1Ring),
            _ => None,
        };
        let ops = |f: &Fig| f.ops_per_s;
        let vs_floor = |f: Option<&Fig>| ratio(ringwal.as_ref(), f, |x| cell.compare().figure(x));
        Row {
            cell: cell.name(),
            size: cell.size,
            producers: cell.producers,
            compare: cell.compare(),
            vs_threaded: ratio(ringwal.as_ref(), threaded.as_ref(), ops),
            vs_best_peer: ratio(ringwal.as_ref(), best_peer.as_ref(), ops),
            vs_floor: vs_floor(floor.as_ref()),
            vs_floor_ring: vs_floor(floor_ring.as_ref()),
            ringwal,
            threaded,
            best_peer,
            floor,
            floor_ring,
        }
    }

    /// The cell again, for the chart's axis.
    pub fn short(&self) -> String {
        Cell {
            size: self.size,
            producers: self.producers,
        }
        .short()
    }
}

/// When, where and how a grid was measured: what makes its figures
/// comparable (or not) with another grid's.
#[derive(Clone, Debug, Serialize)]
pub struct Head {
    pub started_utc: String,
    pub finished_utc: String,
    pub commit: String,
    /// The machine, without the date and commit (`Machine::hardware`).
    pub machine: String,
    pub reps: usize,
    pub secs: f64,
    pub warmup_secs: f64,
    pub busy_neighbour: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Grid {
    #[serde(flatten)]
    pub head: Head,
    /// The least and the most CPU other processes took during any run of
    /// the grid: how noisy the machine was.
    pub bg_cpus: Option<(f64, f64)>,
    pub rows: Vec<Row>,
}

/// `2026-12-02 14:23-14:30 UTC`; one stamp within a minute, both whole
/// across midnight.
pub fn span(started: &str, finished: &str) -> String {
    fn split(s: &str) -> Option<(&str, &str)> {
        s.strip_suffix(" UTC")?.split_once(' ')
    }
    match (split(started), split(finished)) {
        (Some((d0, t0)), Some((d1, t1))) if (d0, t0) == (d1, t1) => format!("{d0} {t0} UTC"),
        (Some((d0, t0)), Some((d1, t1))) if d0 == d1 => format!("{d0} {t0}-{t1} UTC"),
        _ => format!("{started} to {finished}"),
    }
}

/// A figure or `-`.
fn or_dash<T>(x: Option<T>, f: impl FnOnce(T) -> String) -> String {
    x.map_or_else(|| "-".into(), f)
}

impl Grid {
    /// The grid from its cases: `cases` holds a case per cell (any
    /// order; a cell with none is a row of dashes).
    pub fn new(head: Head, cases: &[CaseResult]) -> Grid {
        let find = |c: Cell| {
            cases
                .iter()
                .find(|r| r.size == c.size && r.producers == c.producers)
        };
        let rows = CELLS.iter().map(|&c| Row::of(c, find(c))).collect();
        let bg = cases
            .iter()
            .flat_map(|c| &c.systems)
            .flat_map(|s| &s.reps)
            .map(|s| s.background_cpus)
            .fold(None, |acc: Option<(f64, f64)>, b| {
                Some(acc.map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b))))
            });
        Grid {
            head,
            bg_cpus: bg,
            rows,
        }
    }

    fn bg(&self) -> String {
        or_dash(self.bg_cpus, |(lo, hi)| format!("{lo:.2}-{hi:.2}"))
    }

    /// The title of the table and of the chart.
    pub fn title(&self) -> String {
        format!(
            "grid · durable closed loop{}",
            beside(self.head.busy_neighbour)
        )
    }

    /// The grid as a text table, for `table.txt` and stdout.
    pub fn table(&self) -> String {
        let h = &self.head;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "== {} · median of {} interleaved runs of {:.1} s ==",
            self.title(),
            h.reps,
            h.secs
        );
        let _ = writeln!(
            o,
            "{} · commit {} · bg {} CPUs of other work · best peer: the faster of okaywal and raft-engine in the cell",
            span(&h.started_utc, &h.finished_utc),
            h.commit,
            self.bg()
        );
        let line = |o: &mut String, c: [&str; 16]| {
            let l = format!(
                "{:<19} {:>9} {:>7} {:>7} {:>10} {:>7} {:>6}  {:<11} {:>9} {:>7} {:>7}  {:<17} {:>9} {:>7} {:>7}  {}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]
            );
            let _ = writeln!(o, "{}", l.trim_end());
        };
        line(
            &mut o,
            [
                "cell",
                "rw rec/s",
                "MB/s",
                "p99",
                "thr rec/s",
                "p99",
                "rw/thr",
                "best peer",
                "rec/s",
                "p99",
                "rw/peer",
                "floor",
                "ops/s",
                "MB/s",
                "p99",
                "rw vs floor",
            ],
        );
        let n = |x: f64| thousands(x);
        let x = |r: Option<f64>| or_dash(r, |r| format!("{r:.2}x"));
        for r in &self.rows {
            let big = r.compare == Compare::Bandwidth;
            let mb = |f: Option<&Fig>| or_dash(f.filter(|_| big), |f| thousands(f.mb_per_s));
            let rw = r.ringwal.as_ref();
            let th = r.threaded.as_ref();
            let bp = r.best_peer.as_ref();
            let fl = r.floor.as_ref();
            let cells = [
                r.cell.clone(),
                or_dash(rw, |f| n(f.ops_per_s)),
                mb(rw),
                or_dash(rw, |f| n(f.p99_us as f64)),
                or_dash(th, |f| n(f.ops_per_s)),
                or_dash(th, |f| n(f.p99_us as f64)),
                x(r.vs_threaded),
                or_dash(bp, |f| f.label.clone()),
                or_dash(bp, |f| n(f.ops_per_s)),
                or_dash(bp, |f| n(f.p99_us as f64)),
                x(r.vs_best_peer),
                or_dash(fl, |f| f.label.clone()),
                or_dash(fl, |f| n(f.ops_per_s)),
                mb(fl),
                or_dash(fl, |f| n(f.p99_us as f64)),
                or_dash(r.vs_floor, |v| r.compare.say(v)),
            ];
            line(&mut o, cells.each_ref().map(String::as_str));
            if let Some(f) = &r.floor_ring {
                let mut more: [String; 16] = Default::default();
                more[11] = f.label.clone();
                more[12] = n(f.ops_per_s);
                more[13] = "-".into();
                more[14] = n(f.p99_us as f64);
                more[15] = or_dash(r.vs_floor_ring, |v| r.compare.say(v));
                line(&mut o, more.each_ref().map(String::as_str));
            }
        }
        let _ = writeln!(
            o,
            "rec/s = records/s; floors' ops/s = device writes/s; p99 in µs; MB/s for the large records only; rw/thr, rw/peer = ringwal's records/s over theirs; rw vs floor: at 1 producer ringwal's p99 over the floor's (lower is better), at 16 and 64 ringwal's records/s over the floor's 4 KiB writes/s, with large records ringwal's MB/s over the floor's (floor-64k-qd8: 64 KiB writes at depth 8)"
        );
        o
    }

    /// The same table in markdown, with a header line saying what it was
    /// measured on, to paste into the docs as it is.
    pub fn markdown(&self) -> String {
        let h = &self.head;
        let mut o = String::new();
        let neighbour = match h.busy_neighbour {
            Some(c) => format!("busy neighbour on CPU {c} (another process spinning there through every measured run)"),
            None => "no busy neighbour".into(),
        };
        let _ = writeln!(
            o,
            "**ringwal {}**: {}, commit `{}`, {}; durable writes only, medians of {} interleaved runs of {} s ({} s warm-up); {}; `bg` {} CPUs of other work. Best peer: the faster of okaywal and raft-engine in that cell.",
            self.title(),
            span(&h.started_utc, &h.finished_utc),
            h.commit,
            h.machine,
            h.reps,
            h.secs,
            h.warmup_secs,
            neighbour,
            self.bg()
        );
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "| cell | ringwal (io_uring) | threaded backend | vs threaded | best peer | vs best peer | device floor | vs floor |"
        );
        let _ = writeln!(o, "|---|---|---|---:|---|---:|---|---:|");
        let x = |r: Option<f64>| or_dash(r, |r| format!("{r:.2}x"));
        for r in &self.rows {
            let big = r.compare == Compare::Bandwidth;
            // Large records read in MB/s, as the floor and the ratio do.
            let fig = |f: &Fig, unit: &str| {
                let rate = if big {
                    format!(
                        "{} MB/s ({}/s)",
                        thousands(f.mb_per_s),
                        thousands(f.ops_per_s)
                    )
                } else {
                    format!("{} {unit}/s", thousands(f.ops_per_s))
                };
                format!("{rate}, p99 {} µs", thousands(f.p99_us as f64))
            };
            let named = |f: &Fig, unit: &str| format!("{} {}", f.label, fig(f, unit));
            let mut floor = or_dash(r.floor.as_ref(), |f| named(f, "writes"));
            if let Some(f) = &r.floor_ring {
                let _ = write!(floor, "; {}", named(f, "writes"));
            }
            let mut vs_floor = or_dash(r.vs_floor, |v| r.compare.say(v));
            if let Some(v) = r.vs_floor_ring {
                let _ = write!(vs_floor, " ({v:.2}x vs ring)");
            }
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.cell,
                or_dash(r.ringwal.as_ref(), |f| fig(f, "records")),
                or_dash(r.threaded.as_ref(), |f| fig(f, "records")),
                x(r.vs_threaded),
                or_dash(r.best_peer.as_ref(), |f| named(f, "records")),
                x(r.vs_best_peer),
                floor,
                vs_floor
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "\"vs\" columns are ringwal's records/s over the other's (for large records the same as MB/s), except vs floor: at one producer ringwal's p99 over the floor's (lower is better; in brackets over the same writes' through io_uring), at 16 and 64 producers ringwal's records/s over the floor's 4 KiB writes/s, and for large records ringwal's MB/s over the floor's, which writes the cell's record size at its number of producers in flight."
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::SysResult;

    fn sample(ops_per_s: f64, mb_per_s: f64, p99_us: u64, bg: f64) -> Sample {
        Sample {
            ops: ops_per_s as u64,
            secs: 1.0,
            ops_per_s,
            mb_per_s,
            p50_us: p99_us / 2,
            p99_us,
            p999_us: p99_us * 2,
            max_us: p99_us * 3,
            cpu_us_per_op: 1.0,
            background_cpus: bg,
            background_write_mb_s: 0.0,
            missed: 0,
            note: None,
            late_p99_us: None,
        }
    }

    /// A case of `cell` with each system's (records/s, MB/s, p99), bg 0.1.
    fn case(cell: Cell, figures: &[(System, f64, f64, u64)]) -> CaseResult {
        CaseResult {
            name: String::new(),
            size: cell.size,
            producers: cell.producers,
            reference_floor: cell.floor(),
            systems: figures
                .iter()
                .map(|&(system, ops, mb, p99)| SysResult {
                    reps: vec![sample(ops, mb, p99, 0.1)],
                    median: Some(sample(ops, mb, p99, 0.1)),
                    ..SysResult::unmeasured(system, "")
                })
                .collect(),
            busy_neighbour: None,
        }
    }

    fn head(busy_neighbour: Option<usize>) -> Head {
        Head {
            started_utc: "2026-12-02 14:23 UTC".into(),
            finished_utc: "2026-12-02 14:30 UTC".into(),
            commit: "9e8f112".into(),
            machine: "2 CPUs (test CPU) · 8 GiB".into(),
            reps: 3,
            secs: 3.0,
            warmup_secs: 0.5,
            busy_neighbour,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn cells_and_floors() {
        let names: Vec<String> = CELLS.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "1 KiB, 1 producer",
                "1 KiB, 16 producers",
                "1 KiB, 64 producers",
                "64 KiB, 8 producers",
                "1 MiB, 4 producers"
            ]
        );
        let floors: Vec<System> = CELLS.iter().map(|c| c.floor()).collect();
        use System::*;
        assert_eq!(floors, [FloorQd1, FloorQd8, FloorQd8, Floor1m, Floor1m]);
        assert_eq!(CELLS[0].floors(), [FloorQd1, FloorQd1Ring]);
        // Every cell's floors are among the grid's default systems.
        assert!(CELLS
            .iter()
            .flat_map(|c| c.floors())
            .all(|f| SYSTEMS.contains(f)));
        // The large floor is named by what it wrote in each cell.
        assert_eq!(CELLS[3].label(Floor1m), "floor-64k-qd8");
        assert_eq!(CELLS[4].label(Floor1m), "floor-1m-qd4");
        assert_eq!(CELLS[1].label(FloorQd8), "floor-4k-qd8");
    }

    #[test]
    fn best_peer_is_the_faster_of_the_two() {
        use System::*;
        let c = CELLS[1];
        let both = case(
            c,
            &[
                (Okaywal, 9_000.0, 9.0, 100),
                (RaftEngine, 10_000.0, 10.0, 200),
                // Faster, but not one of the grid's peers.
                (Walrus, 50_000.0, 50.0, 50),
            ],
        );
        assert_eq!(best_peer(&both).map(|(s, _)| s), Some(RaftEngine));
        let one = case(c, &[(Okaywal, 9_000.0, 9.0, 100)]);
        assert_eq!(best_peer(&one).map(|(s, _)| s), Some(Okaywal));
        let none = case(c, &[(RingwalUring, 9_000.0, 9.0, 100)]);
        assert!(best_peer(&none).is_none());
    }

    #[test]
    fn ratios_per_kind_of_cell() {
        use System::*;
        // One producer: p99 against both QD1 floors.
        let one = Row::of(
            CELLS[0],
            Some(&case(
                CELLS[0],
                &[
                    (RingwalUring, 4_000.0, 4.0, 1_200),
                    (RingwalThreaded, 3_200.0, 3.2, 1_500),
                    (Okaywal, 5_000.0, 5.0, 1_000),
                    (FloorQd1, 3_000.0, 12.0, 1_000),
                    (FloorQd1Ring, 3_100.0, 12.4, 600),
                ],
            )),
        );
        assert!(close(one.vs_threaded, 1.25), "{one:?}");
        assert!(close(one.vs_best_peer, 0.8), "{one:?}");
        assert!(close(one.vs_floor, 1.2), "{one:?}");
        assert!(close(one.vs_floor_ring, 2.0), "{one:?}");
        // Many producers: records/s over the floor's writes/s; no ring.
        let many = Row::of(
            CELLS[1],
            Some(&case(
                CELLS[1],
                &[
                    (RingwalUring, 30_000.0, 30.0, 2_000),
                    (FloorQd8, 12_000.0, 48.0, 900),
                    (FloorQd1Ring, 3_100.0, 12.4, 600),
                ],
            )),
        );
        assert!(close(many.vs_floor, 2.5), "{many:?}");
        assert!(many.floor_ring.is_none() && many.vs_floor_ring.is_none());
        assert!(many.vs_threaded.is_none() && many.best_peer.is_none());
        // Large records: MB/s, not writes/s, against the floor.
        let big = Row::of(
            CELLS[3],
            Some(&case(
                CELLS[3],
                &[
                    (RingwalUring, 2_700.0, 177.0, 20_000),
                    (Floor1m, 3_200.0, 210.0, 9_000),
                ],
            )),
        );
        assert!(close(big.vs_floor, 177.0 / 210.0), "{big:?}");
        assert_eq!(big.floor.as_ref().unwrap().label, "floor-64k-qd8");
        // An unmeasured cell is a row of nothing.
        let empty = Row::of(CELLS[4], None);
        assert!(empty.ringwal.is_none() && empty.vs_floor.is_none());
    }

    fn small_grid(busy_neighbour: Option<usize>) -> Grid {
        use System::*;
        let mut cases = vec![
            case(
                CELLS[0],
                &[
                    (RingwalUring, 3_781.0, 3.9, 1_435),
                    (RingwalThreaded, 3_204.0, 3.3, 1_600),
                    (Okaywal, 3_830.0, 3.9, 1_046),
                    (RaftEngine, 2_000.0, 2.0, 2_000),
                    (FloorQd1, 3_100.0, 12.7, 1_195),
                    (FloorQd1Ring, 3_300.0, 13.5, 729),
                ],
            ),
            case(
                CELLS[3],
                &[
                    (RingwalUring, 2_701.0, 177.0, 20_767),
                    (RingwalThreaded, 2_784.0, 182.4, 18_000),
                    (Okaywal, 2_319.0, 152.0, 7_143),
                    (Floor1m, 3_200.0, 210.0, 9_000),
                ],
            ),
        ];
        // The background range spans every run of every case.
        cases[1].systems[2].reps[0].background_cpus = 0.24;
        cases[0].systems[4].reps[0].background_cpus = 0.0;
        Grid::new(head(busy_neighbour), &cases)
    }

    #[test]
    fn markdown_of_a_small_grid() {
        let g = small_grid(None);
        assert_eq!(g.bg_cpus, Some((0.0, 0.24)));
        let md = g.markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "**ringwal grid · durable closed loop**: 2026-12-02 14:23-14:30 UTC, commit `9e8f112`, 2 CPUs (test CPU) · 8 GiB; durable writes only, medians of 3 interleaved runs of 3 s (0.5 s warm-up); no busy neighbour; `bg` 0.00-0.24 CPUs of other work. Best peer: the faster of okaywal and raft-engine in that cell."
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "| cell | ringwal (io_uring) | threaded backend | vs threaded | best peer | vs best peer | device floor | vs floor |"
        );
        assert_eq!(lines[3], "|---|---|---|---:|---|---:|---|---:|");
        assert_eq!(
            lines[4],
            "| 1 KiB, 1 producer | 3,781 records/s, p99 1,435 µs | 3,204 records/s, p99 1,600 µs | 1.18x | okaywal 3,830 records/s, p99 1,046 µs | 0.99x | floor-4k-qd1 3,100 writes/s, p99 1,195 µs; floor-4k-qd1-ring 3,300 writes/s, p99 729 µs | p99 1.20x (1.97x vs ring) |"
        );
        // Cells not measured keep their row, in the grid's order.
        assert_eq!(
            lines[5],
            "| 1 KiB, 16 producers | - | - | - | - | - | - | - |"
        );
        assert_eq!(
            lines[7],
            "| 64 KiB, 8 producers | 177 MB/s (2,701/s), p99 20,767 µs | 182 MB/s (2,784/s), p99 18,000 µs | 0.97x | okaywal 152 MB/s (2,319/s), p99 7,143 µs | 1.16x | floor-64k-qd8 210 MB/s (3,200/s), p99 9,000 µs | 0.84x MB/s |"
        );
        assert!(lines[8].starts_with("| 1 MiB, 4 producers | - |"));
        assert!(!md.contains("busy neighbour on"));
    }

    #[test]
    fn busy_neighbour_in_every_title() {
        let g = small_grid(Some(1));
        assert_eq!(
            g.title(),
            "grid · durable closed loop · busy neighbour on CPU 1"
        );
        assert!(g
            .table()
            .starts_with("== grid · durable closed loop · busy neighbour on CPU 1 · median of 3"));
        let md = g.markdown();
        assert!(md.starts_with("**ringwal grid · durable closed loop · busy neighbour on CPU 1**"));
        assert!(md.contains("; busy neighbour on CPU 1 (another process"));
    }

    #[test]
    fn text_table() {
        let t = small_grid(None).table();
        // Title, stamp line, header, 5 cells + the ring floor's line, key.
        assert_eq!(t.lines().count(), 10, "{t}");
        assert!(t.contains("bg 0.00-0.24 CPUs"), "{t}");
        let ring = t
            .lines()
            .find(|l| l.contains("floor-4k-qd1-ring"))
            .expect("ring floor line");
        assert!(ring.trim_end().ends_with("p99 1.97x"), "{ring}");
        let big = t
            .lines()
            .find(|l| l.starts_with("64 KiB"))
            .expect("64 KiB line");
        assert!(big.contains("floor-64k-qd8"), "{big}");
        assert!(big.contains("0.84x MB/s"), "{big}");
    }

    #[test]
    fn spans() {
        assert_eq!(
            span("2026-12-02 14:23 UTC", "2026-12-02 14:23 UTC"),
            "2026-12-02 14:23 UTC"
        );
        assert_eq!(
            span("2026-12-02 14:23 UTC", "2026-12-02 14:30 UTC"),
            "2026-12-02 14:23-14:30 UTC"
        );
        assert_eq!(
            span("2026-12-02 23:58 UTC", "2026-12-03 00:05 UTC"),
            "2026-12-02 23:58 UTC to 2026-12-03 00:05 UTC"
        );
    }
}
