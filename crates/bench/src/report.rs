//! Results: the child-to-parent line format, JSON lines and the table.

use std::fmt::Write as _;

use crate::keys::{KEY_LEN, VALUE_LEN};
use crate::target::TargetKind;
use crate::{BenchError, Result};

/// Operations completed in a measured stretch of wall-clock time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throughput {
    /// Operations completed (by all threads together).
    pub ops: u64,
    /// Wall-clock seconds.
    pub secs: f64,
}

impl Throughput {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Everything measured for one target at one thread count.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The target.
    pub target: TargetKind,
    /// Worker threads in every phase.
    pub threads: usize,
    /// Records loaded.
    pub records: u64,
    /// Loading all records (random key order).
    pub load: Throughput,
    /// Uniform random gets.
    pub get: Throughput,
    /// Ranges of 3 items from a uniform random existing key.
    pub range3: Throughput,
    /// Ranges of 100 items from a uniform random existing key.
    pub range100: Throughput,
    /// Process resident bytes before the target was created.
    pub rss_before: u64,
    /// Process resident bytes after loading.
    pub rss_after: u64,
}

/// Key plus value bytes of one record.
pub const RAW_BYTES_PER_RECORD: usize = KEY_LEN + VALUE_LEN;

pub use crate::child::LINE_PREFIX;

impl Report {
    /// Resident bytes the target added per record.
    pub fn resident_bytes_per_record(&self) -> f64 {
        (self.rss_after as f64 - self.rss_before as f64) / self.records as f64
    }

    /// One line of `key=value` fields, for a child to hand to its parent.
    pub fn to_line(&self) -> String {
        let mut s = format!(
            "{LINE_PREFIX} target={} threads={} records={} rss_before={} rss_after={}",
            self.target, self.threads, self.records, self.rss_before, self.rss_after
        );
        for (name, t) in self.phases() {
            write!(s, " {name}_ops={} {name}_secs={}", t.ops, t.secs).unwrap();
        }
        s
    }

    /// Parses [`Report::to_line`]'s output.
    pub fn from_line(line: &str) -> Result<Report> {
        let bad = |what: &str| BenchError(format!("bad report line ({what}): {line}"));
        let rest = line
            .strip_prefix(LINE_PREFIX)
            .ok_or_else(|| bad("prefix"))?;
        let fields: Vec<(&str, &str)> = rest
            .split_whitespace()
            .map(|f| f.split_once('=').ok_or_else(|| bad(f)))
            .collect::<Result<_>>()?;
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| bad(name))
        };
        let num = |name: &str| field(name)?.parse::<u64>().map_err(|_| bad(name));
        let phase = |name: &str| -> Result<Throughput> {
            Ok(Throughput {
                ops: num(&format!("{name}_ops"))?,
                secs: field(&format!("{name}_secs"))?
                    .parse()
                    .map_err(|_| bad(name))?,
            })
        };
        Ok(Report {
            target: field("target")?.parse().map_err(|e: String| bad(&e))?,
            threads: num("threads")? as usize,
            records: num("records")?,
            load: phase("load")?,
            get: phase("get")?,
            range3: phase("range3")?,
            range100: phase("range100")?,
            rss_before: num("rss_before")?,
            rss_after: num("rss_after")?,
        })
    }

    /// One JSON object (no trailing newline).
    pub fn to_json(&self, secs_per_measurement: f64) -> String {
        let mut s = format!(
            "{{\"target\":\"{}\",\"threads\":{},\"records\":{},\"secs_per_measurement\":{}",
            self.target, self.threads, self.records, secs_per_measurement
        );
        for (name, t) in self.phases() {
            write!(
                s,
                ",\"{name}_ops\":{},\"{name}_secs\":{},\"{name}_ops_per_sec\":{:.1}",
                t.ops,
                t.secs,
                t.ops_per_sec()
            )
            .unwrap();
        }
        write!(
            s,
            ",\"rss_before_bytes\":{},\"rss_after_bytes\":{},\"resident_bytes_per_record\":{:.2},\"raw_bytes_per_record\":{}}}",
            self.rss_before,
            self.rss_after,
            self.resident_bytes_per_record(),
            RAW_BYTES_PER_RECORD
        )
        .unwrap();
        s
    }

    fn phases(&self) -> [(&'static str, Throughput); 4] {
        [
            ("load", self.load),
            ("get", self.get),
            ("range3", self.range3),
            ("range100", self.range100),
        ]
    }
}

/// The figures table: one row per thread count and metric, one column per
/// target, then `engine/peer` ratio columns when the engine was measured.
pub fn table(reports: &[Report], targets: &[TargetKind], threads: &[usize]) -> String {
    type Metric = (&'static str, fn(&Report) -> f64, fn(f64) -> String);
    let mops = |x: f64| format!("{:.3}", x / 1e6);
    let metrics: [Metric; 5] = [
        ("load, random insert", |r| r.load.ops_per_sec(), mops),
        ("get", |r| r.get.ops_per_sec(), mops),
        ("range 3", |r| r.range3.ops_per_sec(), mops),
        ("range 100", |r| r.range100.ops_per_sec(), mops),
        (
            "resident B/record (raw 32)",
            Report::resident_bytes_per_record,
            |x| format!("{x:.1}"),
        ),
    ];
    let peers: Vec<TargetKind> = if targets.contains(&TargetKind::Engine) {
        targets
            .iter()
            .copied()
            .filter(|&t| t != TargetKind::Engine)
            .collect()
    } else {
        Vec::new()
    };

    let mut header = vec!["threads".to_string(), "metric".to_string()];
    header.extend(targets.iter().map(|t| t.to_string()));
    header.extend(peers.iter().map(|p| format!("engine/{p}")));
    let mut rows = vec![header];
    for &n in threads {
        for (label, get, fmt) in &metrics {
            let find = |t: TargetKind| {
                reports
                    .iter()
                    .find(|r| r.target == t && r.threads == n)
                    .map(get)
            };
            let mut row = vec![n.to_string(), label.to_string()];
            row.extend(targets.iter().map(|&t| find(t).map_or("-".into(), fmt)));
            let engine = find(TargetKind::Engine);
            row.extend(peers.iter().map(|&p| match (engine, find(p)) {
                (Some(e), Some(q)) if q != 0.0 => format!("{:.2}x", e / q),
                _ => "-".into(),
            }));
            rows.push(row);
        }
    }

    crate::results::align_columns(&rows, 1, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(target: TargetKind, threads: usize) -> Report {
        let t = |ops| Throughput { ops, secs: 0.5 };
        Report {
            target,
            threads,
            records: 1000,
            load: t(1000),
            get: t(2_000_000),
            range3: t(1_000_000),
            range100: t(100_000),
            rss_before: 1 << 20,
            rss_after: (1 << 20) + 64_000,
        }
    }

    #[test]
    fn line_round_trips() {
        let r = sample(TargetKind::SkipMap, 2);
        assert_eq!(Report::from_line(&r.to_line()).unwrap(), r);
        assert!(Report::from_line("COMBKV-BENCH-REPORT target=skipmap").is_err());
    }

    #[test]
    fn table_has_ratios() {
        let targets = [TargetKind::Engine, TargetKind::BTreeMap];
        let mut e = sample(TargetKind::Engine, 1);
        e.get.ops = 4_000_000;
        let t = table(&[e, sample(TargetKind::BTreeMap, 1)], &targets, &[1]);
        assert!(t.contains("engine/btreemap"), "{t}");
        assert!(t.contains("2.00x"), "{t}");
        assert!(t.contains("64.0"), "{t}");
        let j = sample(TargetKind::Engine, 1).to_json(1.0);
        assert!(
            j.starts_with('{') && j.ends_with('}') && j.contains("\"get_ops_per_sec\":4000000.0")
        );
    }
}
