//! Request distributions (YCSB's generators): uniform, scrambled zipfian and
//! latest, each choosing a record number below a limit that may grow as
//! inserts land.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::keys::fnv1a64;

/// YCSB's zipfian constant.
pub const ZIPFIAN_THETA: f64 = 0.99;
/// Item space of YCSB's ScrambledZipfianGenerator: draws are zipfian over
/// this many items, then hashed onto the records.
pub const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// zeta(SCRAMBLED_ITEMS, 0.99), precomputed by YCSB (summing 10^10 terms
/// takes minutes).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_202_183_02;

/// A request distribution, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Uniform over the existing records.
    Uniform,
    /// YCSB's ScrambledZipfian, theta 0.99.
    Zipfian,
    /// YCSB's SkewedLatest: zipfian over recency, newest most popular.
    Latest,
}

impl Distribution {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [
            Distribution::Uniform,
            Distribution::Zipfian,
            Distribution::Latest,
        ]
        .into_iter()
        .find(|d| d.name() == s)
        .ok_or_else(|| format!("unknown distribution {s:?} (known: uniform, zipfian, latest)"))
    }
}

/// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record
/// synthetic databases"): item 0 is the most popular. The item count may
/// grow; zeta is then extended incrementally, as YCSB does.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2theta: f64,
    eta: f64,
    half_pow_theta: f64,
}

/// zeta(n, theta) extended from `from` items (whose zeta is `sum`) to `to`.
fn zeta(from: u64, to: u64, theta: f64, mut sum: f64) -> f64 {
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// Zipfian over `items` items (computes zeta: O(items)).
    pub fn new(items: u64) -> Self {
        Self::with_zetan(items, zeta(0, items, ZIPFIAN_THETA, 0.0))
    }

    /// Zipfian over `items` items whose zeta is already known.
    pub fn with_zetan(items: u64, zetan: f64) -> Self {
        assert!(items >= 1, "a zipfian needs at least one item");
        let theta = ZIPFIAN_THETA;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            zeta2theta,
            eta: 0.0,
            half_pow_theta: 0.5f64.powf(theta),
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// The probability of item 0.
    pub fn top_probability(&self) -> f64 {
        1.0 / self.zetan
    }

    /// A draw in `0..items`, growing the item count to `items` first if it is
    /// larger than before.
    #[inline]
    pub fn next(&mut self, rng: &mut impl Rng, items: u64) -> u64 {
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.eta_for(items);
        }
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(items - 1);
        }
        let ret = (items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        ret.min(items - 1)
    }
}

/// One thread's chooser of record numbers.
#[derive(Clone, Debug)]
pub enum Chooser {
    /// Uniform below the limit.
    Uniform,
    /// Zipfian over [`SCRAMBLED_ITEMS`], hashed (FNV-1a-64, as YCSB's
    /// `fnvhash64`) onto the records below the limit.
    Scrambled(Zipfian),
    /// `limit - 1 - zipfian(limit)`: the newest record is the most popular.
    Latest(Zipfian),
}

impl Chooser {
    /// A chooser for `d` over an initial `records` records.
    pub fn new(d: Distribution, records: u64) -> Self {
        match d {
            Distribution::Uniform => Chooser::Uniform,
            Distribution::Zipfian => {
                Chooser::Scrambled(Zipfian::with_zetan(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN))
            }
            Distribution::Latest => Chooser::Latest(Zipfian::new(records.max(1))),
        }
    }

    /// A record number in `0..limit` (`limit >= 1`).
    #[inline]
    pub fn next(&mut self, rng: &mut impl Rng, limit: u64) -> u64 {
        debug_assert!(limit >= 1);
        match self {
            Chooser::Uniform => rng.random_range(0..limit),
            Chooser::Scrambled(z) => {
                let item = z.next(rng, SCRAMBLED_ITEMS);
                // YCSB: Math.abs(fnvhash64(item)) % itemcount.
                (fnv1a64(&item.to_le_bytes()) as i64).unsigned_abs() % limit
            }
            Chooser::Latest(z) => limit - 1 - z.next(rng, limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const DRAWS: usize = 1_000_000;

    fn histogram(c: &mut Chooser, n: u64) -> Vec<u64> {
        let mut rng = SmallRng::seed_from_u64(42);
        let mut h = vec![0u64; n as usize];
        for _ in 0..DRAWS {
            h[c.next(&mut rng, n) as usize] += 1;
        }
        h
    }

    fn freq(count: u64) -> f64 {
        count as f64 / DRAWS as f64
    }

    #[test]
    fn uniform_is_flat() {
        let h = histogram(&mut Chooser::new(Distribution::Uniform, 100), 100);
        let want = DRAWS as f64 / 100.0;
        for (i, &c) in h.iter().enumerate() {
            let dev = (c as f64 - want).abs() / want;
            assert!(dev < 0.05, "item {i}: {c} draws, want about {want}");
        }
    }

    #[test]
    fn zipfian_item_frequencies_follow_theory() {
        // Unscrambled: P(i) = 1 / ((i+1)^theta * zeta(n)).
        let n = 1000;
        let mut z = Zipfian::new(n);
        let zetan = 1.0 / z.top_probability();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut h = vec![0u64; n as usize];
        for _ in 0..DRAWS {
            h[z.next(&mut rng, n) as usize] += 1;
        }
        // Items 0 and 1 are drawn exactly; later items follow Gray's
        // continuous approximation, so check them through the CDF.
        for i in [0usize, 1] {
            let want = 1.0 / ((i + 1) as f64).powf(ZIPFIAN_THETA) / zetan;
            let got = freq(h[i]);
            assert!(
                (got - want).abs() / want < 0.05,
                "item {i}: frequency {got:.5}, theory {want:.5}"
            );
        }
        for k in [10u64, 100, 500] {
            let want = zeta(0, k, ZIPFIAN_THETA, 0.0) / zetan;
            let got = freq(h[..k as usize].iter().sum());
            assert!(
                (got - want).abs() / want < 0.1,
                "items below {k}: share {got:.4}, theory {want:.4}"
            );
        }
        // The precomputed constant agrees with the formula's start.
        assert!((zeta(0, 1000, ZIPFIAN_THETA, 0.0) - zetan).abs() < 1e-9);
    }

    #[test]
    fn scrambled_zipfian_top_item_matches_theory() {
        // Item 0 of the 10^10 space has probability 1/zeta(10^10) = 3.78%;
        // hashing onto 1000 records adds the share of colliding items.
        let h = histogram(&mut Chooser::new(Distribution::Zipfian, 1000), 1000);
        let top = freq(*h.iter().max().unwrap());
        let theory = 1.0 / SCRAMBLED_ZETAN;
        assert!(
            top > theory * 0.95 && top < theory * 1.25,
            "top frequency {top:.4}, theory {theory:.4}"
        );
        // Popular items are spread, not clustered at the low record numbers.
        let low: u64 = h[..100].iter().sum();
        assert!(freq(low) < 0.3, "first 10% of records got {}", freq(low));
    }

    #[test]
    fn latest_skews_to_the_newest() {
        let n = 1000;
        let h = histogram(&mut Chooser::new(Distribution::Latest, n), n);
        let newest = freq(h[n as usize - 1]);
        let theory = Zipfian::new(n).top_probability();
        assert!(
            (newest - theory).abs() / theory < 0.05,
            "newest {newest:.4}, theory {theory:.4}"
        );
        assert!(h[999] > h[998] && h[998] > h[997] && h[997] > h[990]);
        let newest_tenth: u64 = h[900..].iter().sum();
        assert!(freq(newest_tenth) > 0.6);
        // Growing the limit moves the popularity to the new records.
        let mut c = Chooser::new(Distribution::Latest, n);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut at_new_top = 0;
        for _ in 0..100_000 {
            at_new_top += usize::from(c.next(&mut rng, 2000) == 1999);
        }
        let theory = Zipfian::new(2000).top_probability();
        let got = at_new_top as f64 / 100_000.0;
        assert!((got - theory).abs() / theory < 0.1, "{got} vs {theory}");
    }
}
