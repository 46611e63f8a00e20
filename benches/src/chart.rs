//! The SVG chart: latency percentile curves of the main case, throughput
//! against producers, and open-loop p99 against offered rate.

use std::path::Path;

use plotters::prelude::*;

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
