//! The SVG charts: latency percentile curves of the main case, throughput
//! against producers, and open-loop p99 against offered rate; and with
//! `--grid`, the grid's cells side by side (`grid.svg`).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::grid::{span, Fig, Grid, Row};
use crate::report::{human_size, thousands, Report};
use crate::systems::System;

fn color(s: System) -> RGBColor {
    match s {
        System::RingwalUring => RGBColor(214, 39, 40),
        System::RingwalThreaded => RGBColor(255, 127, 14),
        System::Okaywal => RGBColor(31, 119, 180),
        System::RaftEngine => RGBColor(44, 160, 44),
        System::Walrus => RGBColor(148, 103, 189),
        System::GroupCommit => RGBColor(140, 86, 75),
        System::TokioUring => RGBColor(227, 119, 194),
        System::FloorQd1 => RGBColor(90, 90, 90),
        System::FloorQd1Ring => RGBColor(60, 60, 60),
        System::FloorQd8 => RGBColor(0, 0, 0),
        System::Floor1m => RGBColor(127, 127, 127),
    }
}

/// Percentile `q` on an axis of "nines": p90 at 1, p99 at 2, p99.9 at 3.
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-6).log10()
}

fn nines_label(x: &f64) -> String {
    match x.round() as i64 {
        0 => "p0".into(),
        1 => "p90".into(),
        2 => "p99".into(),
        3 => "p99.9".into(),
        4 => "p99.99".into(),
        n => format!("{n}"),
    }
}

fn log_range(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let lo = 10f64.powf(lo.max(1.0).log10().floor());
    let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
    lo..hi
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// Draw what `r` holds into an SVG file at `path`.
pub fn draw(r: &Report, path: &Path, main_size: usize, main_producers: usize) -> Res {
    let root = SVGBackend::new(path, (1100, 1560)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "ringwal harness · {} · {} CPUs · {} · {}",
        r.machine.date_utc, r.machine.nproc, r.machine.disk, r.machine.kernel
    );
    let root = root.titled(&title, ("sans-serif", 18))?;
    let panels = root.split_evenly((3, 1));
    percentiles(r, &panels[0], main_size, main_producers)?;
    scaling(r, &panels[1], main_size)?;
    sweep(r, &panels[2])?;
    root.present()?;
    Ok(())
}

fn percentiles(
    r: &Report,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    size: usize,
    producers: usize,
) -> Res {
    let Some(case) = r.case(size, producers) else {
        return Ok(());
    };
    let curves: Vec<(System, Vec<(f64, f64)>)> = case
        .systems
        .iter()
        .filter(|s| !s.curve.is_empty())
        .map(|s| {
            let pts = s
                .curve
                .iter()
                .filter(|(q, v)| *q < 1.0 && *v > 0)
                .map(|&(q, v)| (nines(q), v as f64))
                .collect();
            (s.system, pts)
        })
        .collect();
    let (lo, hi) = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold((f64::MAX, 1.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Latency percentiles: durable {} records, {producers} producers, closed loop (all runs merged)",
                human_size(size)
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..4.2f64, log_range(lo, hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs, log)")
        .x_labels(5)
        .x_label_formatter(&nines_label)
        .y_label_formatter(&|y| thousands(*y))
        .draw()?;
    for (sys, pts) in curves {
        let c = color(sys);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(sys.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn scaling(r: &Report, area: &DrawingArea<SVGBackend, plotters::coord::Shift>, size: usize) -> Res {
    let mut cases: Vec<_> = r.cases.iter().filter(|c| c.size == size).collect();
    cases.sort_by_key(|c| c.producers);
    if cases.is_empty() {
        return Ok(());
    }
    let max_p = cases.last().map_or(1, |c| c.producers).max(2) as f64;
    let mut lines: Vec<(System, Vec<(f64, f64)>)> = Vec::new();
    for c in &cases {
        for s in &c.systems {
            let Some(m) = &s.median else { continue };
            let pt = (c.producers as f64, m.ops_per_s.max(1.0));
            match lines.iter_mut().find(|(sys, _)| *sys == s.system) {
                Some((_, v)) => v.push(pt),
                None => lines.push((s.system, vec![pt])),
            }
        }
    }
    let (lo, hi) = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold((f64::MAX, 1.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Throughput against producers: durable {} records, closed loop (median of runs)",
                human_size(size)
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (0.8f64..max_p * 1.25).log_scale(),
            log_range(lo, hi).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("producers (log)")
        .y_desc("records/s (floors: writes/s), log")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| thousands(*y))
        .draw()?;
    for (sys, pts) in lines {
        let c = color(sys);
        let style = if sys.is_floor() {
            c.stroke_width(1)
        } else {
            c.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(sys.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart.draw_series(pts.into_iter().map(move |p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn sweep(r: &Report, area: &DrawingArea<SVGBackend, plotters::coord::Shift>) -> Res {
    if r.sweeps.is_empty() {
        return Ok(());
    }
    let sla = r.sweeps[0].sla_us as f64;
    let mut pts: Vec<(System, f64, f64)> = Vec::new();
    for s in &r.sweeps {
        for rep in &s.reps {
            for p in &rep.probes {
                // A probe that fell behind has no meaningful p99: draw it at
                // the top of the chart.
                let y = if p.sample.missed > 0 {
                    f64::INFINITY
                } else {
                    p.sample.p99_us.max(1) as f64
                };
                pts.push((s.system, p.rate, y));
            }
        }
    }
    if pts.is_empty() {
        return Ok(());
    }
    let finite = pts.iter().filter(|p| p.2.is_finite());
    let y_hi = finite.clone().map(|p| p.2).fold(sla * 2.0, f64::max);
    let y_lo = finite.map(|p| p.2).fold(sla / 2.0, f64::min);
    let yr = log_range(y_lo, y_hi);
    let top = yr.end;
    let (x_lo, x_hi) = pts
        .iter()
        .fold((f64::MAX, 1.0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Open loop: p99 against offered rate, every sweep probe (SLA {} µs; top edge = fell behind)",
                thousands(sla)
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(log_range(x_lo, x_hi).log_scale(), yr.log_scale())?;
    chart
        .configure_mesh()
        .x_desc("offered records/s (log)")
        .y_desc("p99 from intended send time (µs, log)")
        .x_label_formatter(&|x| thousands(*x))
        .y_label_formatter(&|y| thousands(*y))
        .draw()?;
    let xr = log_range(x_lo, x_hi);
    chart.draw_series(LineSeries::new(
        vec![(xr.start, sla), (xr.end, sla)],
        BLACK.stroke_width(1),
    ))?;
    for s in &r.sweeps {
        let c = color(s.system);
        let mine: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.0 == s.system)
            .map(|p| (p.1, if p.2.is_finite() { p.2 } else { top * 0.95 }))
            .collect();
        chart
            .draw_series(mine.into_iter().map(move |p| Circle::new(p, 4, c.filled())))?
            .label(s.name)
            .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// One bar of the grid's chart.
struct Bar {
    /// Index of its cell (the x position of its group).
    cell: usize,
    /// Its place in the group: ringwal, threaded, best peer, floor.
    slot: usize,
    system: System,
    value: f64,
}

/// A cell's systems in the order of its bars.
fn slots(r: &Row) -> [Option<&Fig>; 4] {
    [
        r.ringwal.as_ref(),
        r.threaded.as_ref(),
        r.best_peer.as_ref(),
        r.floor.as_ref(),
    ]
}

/// The bars of every cell, `value` of each system measured in it.
fn grid_bars(g: &Grid, value: impl Fn(&Row, &Fig) -> Option<f64>) -> Vec<Bar> {
    let mut v = Vec::new();
    for (cell, r) in g.rows.iter().enumerate() {
        for (slot, f) in slots(r).into_iter().enumerate() {
            let Some(f) = f else { continue };
            if let Some(value) = value(r, f) {
                v.push(Bar {
                    cell,
                    slot,
                    system: f.system,
                    value,
                });
            }
        }
    }
    v
}

/// The left and right edges of a bar: four slots share 0.8 of the unit
/// a cell has on the axis, its centre at the cell's index.
fn bar_x(b: &Bar) -> (f64, f64) {
    let left = b.cell as f64 - 0.4 + b.slot as f64 * 0.2;
    (left + 0.015, left + 0.185)
}

/// What the legend calls a bar: the peer says it is the best one, and the
/// large-record floor, which writes a different size in each large cell,
/// says so instead of one cell's name.
fn bar_legend(slot: usize, s: System) -> String {
    match (slot, s) {
        (2, _) => format!("{} (best peer)", s.name()),
        (_, System::Floor1m) => "floor at the record size, producers in flight".into(),
        _ => s.name().into(),
    }
}

/// The bars, one series per system and slot (a colour and a legend entry
/// each), each bar labelled above its top with `text` of its value.
fn draw_bars<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
    bars: &[Bar],
    base: f64,
    text: impl Fn(f64) -> String,
) -> Res
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let mut keys: Vec<(usize, System)> = bars.iter().map(|b| (b.slot, b.system)).collect();
    keys.sort();
    keys.dedup();
    for (slot, sys) in keys {
        let c = color(sys);
        let mine = bars.iter().filter(|b| b.slot == slot && b.system == sys);
        chart
            .draw_series(mine.map(|b| {
                let (x0, x1) = bar_x(b);
                Rectangle::new([(x0, base), (x1, b.value)], c.filled())
            }))?
            .label(bar_legend(slot, sys))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
    }
    let style =
        TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().map(|b| {
        let (x0, x1) = bar_x(b);
        Text::new(text(b.value), ((x0 + x1) / 2.0, b.value), style.clone())
    }))?;
    if bars.is_empty() {
        // An empty legend would be a stray box.
        return Ok(());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The x axis of the grid: a unit per cell, its centre at the cell's
/// index. (A coordinate with the cells as its only key points cannot
/// take a label formatter in plotters 0.3.7: the labels come from
/// [`cell_name`], asked for as many as there are cells.)
fn cell_axis(g: &Grid) -> std::ops::Range<f64> {
    -0.5..g.rows.len().max(1) as f64 - 0.5
}

/// The cell centred at `x`; nothing between cells, should plotters put a
/// label there.
fn cell_name(g: &Grid, x: f64) -> String {
    if (x - x.round()).abs() > 1e-6 || x < -0.1 {
        return String::new();
    }
    g.rows
        .get(x.round() as usize)
        .map_or_else(String::new, Row::short)
}

/// The grid's chart at `path`: throughput relative to the best peer, and
/// p99, of each system in each cell.
pub fn draw_grid(g: &Grid, path: &Path) -> Res {
    let root = SVGBackend::new(path, (1100, 1100)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "ringwal {} · {} · commit {}",
        g.title(),
        span(&g.head.started_utc, &g.head.finished_utc),
        g.head.commit
    );
    let root = root.titled(&title, ("sans-serif", 18))?;
    let panels = root.split_evenly((2, 1));
    grid_throughput(g, &panels[0])?;
    grid_p99(g, &panels[1])?;
    root.present()?;
    Ok(())
}

/// Relative to the best peer rather than to the floor: the floor's unit
/// changes from cell to cell (4 KiB writes one at a time, at depth 8,
/// then the record's size), a peer's is always the cell's own records.
fn grid_throughput(g: &Grid, area: &DrawingArea<SVGBackend, Shift>) -> Res {
    let bars = grid_bars(g, |r, f| {
        let peer = r.best_peer.as_ref()?.ops_per_s;
        (peer > 0.0).then(|| f.ops_per_s / peer)
    });
    // Bars in the lower 60%: the legend takes the top right.
    let top = bars.iter().map(|b| b.value).fold(1.0f64, f64::max) / 0.6;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Throughput relative to the best peer (okaywal or raft-engine) in each cell; median of {} runs of {:.1} s",
                g.head.reps, g.head.secs
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(cell_axis(g), 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(g.rows.len())
        .x_desc("durable closed loop: record size × producers")
        .y_desc("records/s ÷ best peer's (floors: writes/s)")
        .x_label_formatter(&|x| cell_name(g, *x))
        .y_label_formatter(&|y| format!("{y:.1}x"))
        .draw()?;
    // The best peer's level, which every bar is read against.
    let n = g.rows.len() as f64;
    chart.draw_series(LineSeries::new(
        vec![(-0.5, 1.0), (n - 0.5, 1.0)],
        BLACK.stroke_width(1),
    ))?;
    draw_bars(&mut chart, &bars, 0.0, |v| format!("{v:.2}x"))?;
    // A cell without a peer has no bars here: say why, not leave it blank.
    let note =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(
        g.rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.best_peer.is_none())
            .map(|(i, _)| Text::new("no peer measured", (i as f64, top * 0.05), note.clone())),
    )?;
    Ok(())
}

fn grid_p99(g: &Grid, area: &DrawingArea<SVGBackend, Shift>) -> Res {
    let bars = grid_bars(g, |_, f| Some(f.p99_us.max(1) as f64));
    let (lo, hi) = bars.iter().fold((f64::MAX, 1.0f64), |(a, b), x| {
        (a.min(x.value), b.max(x.value))
    });
    // Decades above the highest bar until it is in the lower 60%: the
    // legend takes the top right.
    let mut yr = log_range(lo, hi);
    while (hi / yr.start).log10() > 0.6 * (yr.end / yr.start).log10() {
        yr.end *= 10.0;
    }
    let base = yr.start;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "p99 latency of each system in each cell (µs, log scale)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(cell_axis(g), yr.log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(g.rows.len())
        .x_desc("durable closed loop: record size × producers")
        .y_desc("p99 (µs, log)")
        .x_label_formatter(&|x| cell_name(g, *x))
        .y_label_formatter(&|y| thousands(*y))
        .draw()?;
    draw_bars(&mut chart, &bars, base, thousands)?;
    Ok(())
}
