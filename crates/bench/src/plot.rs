//! A hand-written SVG bar chart: for each workload, throughput and p99
//! latency per target, each panel on its own linear scale (the workloads'
//! throughputs differ by orders of magnitude, so one shared axis would hide
//! the scans).

use std::fmt::Write as _;

use crate::target::TargetKind;
use crate::workload::Workload;
use crate::ycsb::RunResult;

const PANEL_W: f64 = 170.0;
const PANEL_H: f64 = 170.0;
const MARGIN_L: f64 = 20.0;
const TITLE_H: f64 = 60.0;
const LABEL_H: f64 = 34.0;
const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

/// The reference target (the engine, combkv-resp) is red in both kinds of run.
fn color(t: TargetKind) -> &'static str {
    let i = TargetKind::ALL
        .iter()
        .position(|&k| k == t)
        .or_else(|| TargetKind::NETWORK.iter().position(|&k| k == t))
        .unwrap_or(0);
    COLORS[i % COLORS.len()]
}

fn short(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One panel's bars: a bar per target for workload `wl`, scaled to the
/// panel's largest value (a missing result marked `n/a` or `fail`).
fn bars(
    s: &mut String,
    results: &[RunResult],
    targets: &[TargetKind],
    wl: Workload,
    get: fn(&RunResult) -> f64,
    x0: f64,
    base: f64,
) {
    let vals: Vec<(TargetKind, Option<f64>)> = targets
        .iter()
        .map(|&t| {
            let v = results
                .iter()
                .find(|r| r.workload == wl && r.target == t)
                .map(get);
            (t, v)
        })
        .collect();
    let max = vals.iter().filter_map(|(_, v)| *v).fold(0.0f64, f64::max);
    let slot = (PANEL_W - 20.0) / targets.len().max(1) as f64;
    for (n, (t, v)) in vals.iter().enumerate() {
        let x = x0 + 10.0 + n as f64 * slot;
        let Some(v) = v else {
            let mark = if t.skips(wl).is_some() { "n/a" } else { "fail" };
            writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" fill="{}">{mark}</text>"#,
                x + slot / 2.0,
                base - 4.0,
                color(*t)
            )
            .unwrap();
            continue;
        };
        let h = if max > 0.0 {
            v / max * (PANEL_H - 16.0)
        } else {
            0.0
        };
        writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{wl} {t}: {v:.2}</title></rect>"#,
            base - h,
            slot - 4.0,
            color(*t)
        )
        .unwrap();
        writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
            x + (slot - 4.0) / 2.0,
            base - h - 3.0,
            short(*v)
        )
        .unwrap();
    }
}

/// The chart; `title` goes on top (it should carry the parameters).
pub fn svg(
    results: &[RunResult],
    workloads: &[Workload],
    targets: &[TargetKind],
    title: &str,
) -> String {
    type Metric = (&'static str, fn(&RunResult) -> f64);
    let metrics: [Metric; 2] = [
        ("throughput, ops/s (higher is better)", |r| r.throughput_ops),
        ("p99 latency, us (lower is better)", |r| r.p99_us),
    ];
    let width = MARGIN_L * 2.0 + PANEL_W * workloads.len().max(1) as f64;
    let height = TITLE_H + (PANEL_H + LABEL_H + 24.0) * metrics.len() as f64;
    let mut s = String::new();
    writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    )
    .unwrap();
    writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#).unwrap();
    writeln!(
        s,
        r#"<text x="{MARGIN_L}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        escape(title)
    )
    .unwrap();
    // Legend.
    for (n, &t) in targets.iter().enumerate() {
        let x = MARGIN_L + n as f64 * 110.0;
        writeln!(
            s,
            r#"<rect x="{x}" y="30" width="12" height="12" fill="{}"/><text x="{}" y="40">{t}</text>"#,
            color(t),
            x + 16.0
        )
        .unwrap();
    }
    for (m, (label, get)) in metrics.iter().enumerate() {
        let top = TITLE_H + m as f64 * (PANEL_H + LABEL_H + 24.0);
        writeln!(
            s,
            r#"<text x="{MARGIN_L}" y="{}" font-weight="bold">{label}</text>"#,
            top + 12.0
        )
        .unwrap();
        let base = top + 20.0 + PANEL_H;
        for (w, &wl) in workloads.iter().enumerate() {
            let x0 = MARGIN_L + w as f64 * PANEL_W;
            bars(&mut s, results, targets, wl, *get, x0, base);
            writeln!(
                s,
                r##"<line x1="{x0}" y1="{base}" x2="{}" y2="{base}" stroke="#444"/>"##,
                x0 + PANEL_W - 10.0
            )
            .unwrap();
            writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{wl}</text>"#,
                x0 + PANEL_W / 2.0,
                base + 16.0
            )
            .unwrap();
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_a_bar_per_result_and_marks_failures() {
        let mut r = crate::ycsb::RunResult::example(TargetKind::Engine);
        r.throughput_ops = 1_500_000.0;
        let targets = [TargetKind::Engine, TargetKind::Scc];
        let s = svg(&[r], &[Workload::A], &targets, "t <1>");
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<rect x=").count(), 2 + 2, "legend and two bars");
        assert!(s.contains("1.50M") && s.contains(">fail<") && s.contains("t &lt;1&gt;"));
    }
}
