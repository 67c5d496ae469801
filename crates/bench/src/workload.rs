//! The workloads of `docs/workloads.md`: operation mixes and their default
//! distributions.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::generator::Distribution;

/// Longest scan of workload E (lengths are uniform in `1..=SCAN_LEN_MAX`).
pub const SCAN_LEN_MAX: usize = 100;
/// Items of the initial store a cloud range covers.
pub const CLOUD_RANGE_ITEMS: usize = 3;

/// A workload, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// 100% read.
    C,
    /// 95% read, 5% insert, latest.
    D,
    /// 95% scan, 5% insert.
    E,
    /// 50% read, 50% read-modify-write.
    F,
    /// Honeycomb's cloud storage: R% floor range, (100-R)% insert.
    Cloud,
}

/// One operation of a mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read one existing record.
    Read,
    /// Overwrite one existing record.
    Update,
    /// Insert a new record.
    Insert,
    /// `RANGE [start + LIMIT n` from an existing record.
    Scan,
    /// Read a record, then write it back with its counter advanced.
    ReadModifyWrite,
    /// `RANGE [lo [hi FLOOR` covering 3 items of the initial store.
    CloudRange,
}

/// Operation percentages of a workload (they sum to 100).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    pub read: u8,
    pub update: u8,
    pub insert: u8,
    pub scan: u8,
    pub rmw: u8,
    pub cloud_range: u8,
}

impl Mix {
    /// Draws one operation.
    #[inline]
    pub fn pick(&self, rng: &mut impl Rng) -> Op {
        let mut x = rng.random_range(0..100u8);
        for (pct, op) in [
            (self.read, Op::Read),
            (self.update, Op::Update),
            (self.insert, Op::Insert),
            (self.scan, Op::Scan),
            (self.rmw, Op::ReadModifyWrite),
        ] {
            if x < pct {
                return op;
            }
            x -= pct;
        }
        Op::CloudRange
    }

    /// Whether existing records ever change value.
    pub fn writes_existing(&self) -> bool {
        self.update > 0 || self.rmw > 0
    }
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 7] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
        Workload::Cloud,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::F => "f",
            Workload::Cloud => "cloud",
        }
    }

    /// The operation mix; `read_pct` is cloud's R (ranges), ignored elsewhere.
    pub fn mix(self, read_pct: u8) -> Mix {
        let m = Mix::default();
        match self {
            Workload::A => Mix {
                read: 50,
                update: 50,
                ..m
            },
            Workload::B => Mix {
                read: 95,
                update: 5,
                ..m
            },
            Workload::C => Mix { read: 100, ..m },
            Workload::D => Mix {
                read: 95,
                insert: 5,
                ..m
            },
            Workload::E => Mix {
                scan: 95,
                insert: 5,
                ..m
            },
            Workload::F => Mix {
                read: 50,
                rmw: 50,
                ..m
            },
            Workload::Cloud => Mix {
                cloud_range: read_pct,
                insert: 100 - read_pct,
                ..m
            },
        }
    }

    /// The table's distribution (cloud: uniform).
    pub fn default_distribution(self) -> Distribution {
        match self {
            Workload::D => Distribution::Latest,
            Workload::Cloud => Distribution::Uniform,
            _ => Distribution::Zipfian,
        }
    }

    /// One line for reports.
    pub fn describe(self, read_pct: u8) -> String {
        match self {
            Workload::A => "50% read, 50% update".into(),
            Workload::B => "95% read, 5% update".into(),
            Workload::C => "100% read".into(),
            Workload::D => "95% read, 5% insert".into(),
            Workload::E => format!("95% scan (1..={SCAN_LEN_MAX} items), 5% insert"),
            Workload::F => "50% read, 50% read-modify-write".into(),
            Workload::Cloud => format!(
                "{read_pct}% range [lo [hi FLOOR ({CLOUD_RANGE_ITEMS} items), {}% insert",
                100 - read_pct
            ),
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown workload {s:?} (known: a, b, c, d, e, f, cloud)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn mixes_sum_to_100_and_draw_their_shares() {
        let mut rng = SmallRng::seed_from_u64(5);
        for w in Workload::ALL {
            let m = w.mix(90);
            let total = m.read + m.update + m.insert + m.scan + m.rmw + m.cloud_range;
            assert_eq!(total, 100, "{w}");
            let draws = 100_000;
            let mut counts = [0usize; 6];
            for _ in 0..draws {
                counts[m.pick(&mut rng) as usize] += 1;
            }
            let want = [m.read, m.update, m.insert, m.scan, m.rmw, m.cloud_range];
            for (got, want) in counts.iter().zip(want) {
                let share = *got as f64 * 100.0 / draws as f64;
                assert!((share - f64::from(want)).abs() < 0.7, "{w}: {counts:?}");
            }
        }
    }
}
