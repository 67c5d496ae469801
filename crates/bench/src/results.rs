//! The YCSB tables and JSON lines.

use std::fmt::Write as _;

use crate::target::TargetKind;
use crate::workload::Workload;
use crate::ycsb::RunResult;

/// One JSON object per (workload, target): the measured figures plus
/// `bytes_per_record` and `raw_bytes_per_record` (no trailing newline).
pub fn json_line(r: &RunResult) -> String {
    // Plain numbers, strings and a struct of counters: serialising cannot fail.
    serde_json::to_string(r).expect("a RunResult serialises")
}

/// The JSON object of a pair that did not run: `workload`, `target` and
/// `skipped` (why).
pub fn skipped_json_line(workload: Workload, target: TargetKind, why: &str) -> String {
    serde_json::json!({
        "workload": workload,
        "target": target,
        "skipped": why,
    })
    .to_string()
}

fn fmt_us(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// The table of one workload: one row per target (in `targets` order; a
/// target without a result shows as skipped, with the reason, or failed),
/// with ratios to the reference target (the engine in-process, combkv-resp
/// over the network).
pub fn table(workload: Workload, results: &[RunResult], targets: &[TargetKind]) -> String {
    let find = |t: TargetKind| {
        results
            .iter()
            .find(|r| r.workload == workload && r.target == t)
    };
    let reference = targets
        .first()
        .map_or(TargetKind::Engine, |t| t.reference());
    let engine = find(reference);
    let raw = results
        .iter()
        .find(|r| r.workload == workload)
        .map_or(0.0, |r| r.raw_bytes_per_record);
    let mut rows = vec![vec![
        "target".to_string(),
        "ops/s".into(),
        "p50 us".into(),
        "p99 us".into(),
        "p99.9 us".into(),
        format!("B/record (raw {raw:.0})"),
        format!("ops/s vs {reference}"),
        format!("B/record vs {reference}"),
    ]];
    let mut notes = String::new();
    for &t in targets {
        let Some(r) = find(t) else {
            let mark = match t.skips(workload) {
                Some(why) => {
                    writeln!(notes, "{t}: {why}").unwrap();
                    "skipped"
                }
                None => "FAILED",
            };
            rows.push(vec![t.to_string(), mark.into()]);
            continue;
        };
        let ratio = |x: f64, e: Option<f64>| match e {
            Some(e) if e > 0.0 => format!("{:.2}x", x / e),
            _ => "-".into(),
        };
        rows.push(vec![
            t.to_string(),
            format!("{:.0}", r.throughput_ops),
            fmt_us(r.p50_us),
            fmt_us(r.p99_us),
            fmt_us(r.p999_us),
            format!("{:.1}", r.bytes_per_record),
            ratio(r.throughput_ops, engine.map(|e| e.throughput_ops)),
            ratio(r.bytes_per_record, engine.map(|e| e.bytes_per_record)),
        ]);
    }
    align_columns(&rows, 0, false) + &notes
}

/// Lays `rows` out as text columns: every column padded to its widest cell
/// and right-aligned except `left`; columns are separated by two spaces, and
/// with `indent` the first column is too. Trailing spaces are trimmed.
pub fn align_columns(rows: &[Vec<String>], left: usize, indent: bool) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 || indent {
                line.push_str("  ");
            }
            if c == left {
                write!(line, "{cell:<w$}", w = widths[c]).unwrap();
            } else {
                write!(line, "{cell:>w$}", w = widths[c]).unwrap();
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(target: TargetKind, throughput_ops: f64) -> RunResult {
        RunResult {
            throughput_ops,
            ..RunResult::example(target)
        }
    }

    #[test]
    fn table_has_ratios_and_failures() {
        let rs = [
            sample(TargetKind::Engine, 2000.0),
            sample(TargetKind::BTreeMap, 1000.0),
        ];
        let targets = [TargetKind::Engine, TargetKind::BTreeMap, TargetKind::Scc];
        let t = table(Workload::A, &rs, &targets);
        assert!(t.contains("0.50x") && t.contains("1.00x"), "{t}");
        assert!(t.contains("raw 32") && t.contains("FAILED"), "{t}");
    }

    #[test]
    fn network_tables_compare_with_combkv_resp_and_show_skips() {
        let rs = [
            sample(TargetKind::CombkvResp, 4000.0),
            sample(TargetKind::Redis, 1000.0),
        ];
        let targets = [
            TargetKind::CombkvResp,
            TargetKind::Redis,
            TargetKind::Memcached,
        ];
        let rs: Vec<RunResult> = rs
            .into_iter()
            .map(|r| RunResult {
                workload: Workload::E,
                ..r
            })
            .collect();
        let t = table(Workload::E, &rs, &targets);
        assert!(
            t.contains("ops/s vs combkv-resp") && t.contains("0.25x"),
            "{t}"
        );
        assert!(
            t.contains("skipped: the memcached protocol has no ordered scans"),
            "{t}"
        );
        let j: serde_json::Value = serde_json::from_str(&skipped_json_line(
            Workload::E,
            TargetKind::Memcached,
            "why",
        ))
        .unwrap();
        assert_eq!(j["target"], "memcached");
        assert_eq!(j["workload"], "e");
        assert_eq!(j["skipped"], "why");
    }

    #[test]
    fn json_lines_carry_the_figures() {
        let j = json_line(&sample(TargetKind::Scc, 1234.5));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        for field in [
            "workload",
            "target",
            "threads",
            "throughput_ops",
            "p50_us",
            "p99_us",
            "p999_us",
            "bytes_per_record",
            "raw_bytes_per_record",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {j}");
        }
        assert_eq!(v["target"], "scc");
        assert_eq!(v["workload"], "a");
        let back: RunResult = serde_json::from_str(&j).unwrap();
        assert_eq!(back, sample(TargetKind::Scc, 1234.5));
    }
}
