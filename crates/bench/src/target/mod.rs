//! The key-value structures under test, behind one trait.
//!
//! Each target hands values to a visitor while holding its read lock, epoch
//! guard or pin, so the driver can check what it got without copying (the
//! engine through `Store::get_with` and `Store::scan`).

use std::fmt;
use std::str::FromStr;

use crate::Result;

#[cfg(feature = "engine")]
mod engine;
mod peers;

#[cfg(feature = "engine")]
pub use engine::EngineTarget;
pub use peers::{BTreeMapTarget, SccTarget, SkipMapTarget};

/// A concurrent ordered key-value map that the driver can measure.
pub trait Target: Send + Sync {
    /// Stores `value` under `key`, replacing any previous value.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Looks `key` up. On a hit, shows the value to `visit` (borrowed, while
    /// the target still protects it) and returns `true`; on a miss returns
    /// `false` without calling `visit`.
    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool>;

    /// Looks `key` up. On a hit, replaces the contents of `out` with the value
    /// and returns `true`; on a miss returns `false` and leaves `out` alone.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.read(key, &mut |v| {
            out.clear();
            out.extend_from_slice(v);
        })
    }

    /// Visits, in ascending key order, the first `n` items whose key is `>=
    /// start`, and returns how many it visited.
    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize>;

    /// Honeycomb's `RANGE [lo [hi FLOOR`: visits, in ascending key order, the
    /// items from the greatest key `<= lo` (or the first key `>= lo` when
    /// there is none) up to and including `hi`; returns how many it visited.
    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
}

/// The in-process targets the driver knows, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// `combkv::Store` with `Config::default()`.
    Engine,
    /// `parking_lot::RwLock<BTreeMap<Vec<u8>, Vec<u8>>>`.
    BTreeMap,
    /// `crossbeam_skiplist::SkipMap<Vec<u8>, RwLock<Vec<u8>>>` (see [`SkipMapTarget`]).
    SkipMap,
    /// `scc::TreeIndex<Vec<u8>, Vec<u8>>`.
    Scc,
}

/// Targets of WORKLOADS.md that talk to a server over the network; the
/// in-process driver refuses them by name.
pub const NETWORK_TARGETS: [&str; 4] = ["combkv-resp", "combkv-memcached", "redis", "memcached"];

impl TargetKind {
    /// Every in-process target, in table order.
    pub const ALL: [TargetKind; 4] = [
        TargetKind::Engine,
        TargetKind::BTreeMap,
        TargetKind::SkipMap,
        TargetKind::Scc,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Engine => "engine",
            TargetKind::BTreeMap => "btreemap",
            TargetKind::SkipMap => "skipmap",
            TargetKind::Scc => "scc",
        }
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TargetKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if NETWORK_TARGETS.contains(&s) {
            return Err(format!(
                "target {s:?} is a network target: it needs the combkv server (or {s} itself) \
                 running, which this in-process bench does not start; in-process targets are \
                 engine, btreemap, skipmap, scc"
            ));
        }
        TargetKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown target {s:?} (known: engine, btreemap, skipmap, scc)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_network_targets_are_refused() {
        for k in TargetKind::ALL {
            assert_eq!(k.name().parse::<TargetKind>(), Ok(k));
        }
        for n in NETWORK_TARGETS {
            let e = n.parse::<TargetKind>().unwrap_err();
            assert!(e.contains("needs the combkv server"), "{e}");
        }
        assert!("lmdb".parse::<TargetKind>().is_err());
    }

    /// Every target agrees with the others on a small floor range, including
    /// the cases with no floor item and a `lo` between two keys.
    #[test]
    fn range_floor_agrees_across_targets() {
        let targets: Vec<Box<dyn Target>> = vec![
            #[cfg(feature = "engine")]
            Box::new(EngineTarget::new().unwrap()),
            Box::new(BTreeMapTarget::new()),
            Box::new(SkipMapTarget::new()),
            Box::new(SccTarget::new()),
        ];
        for t in &targets {
            for k in [b"b", b"d", b"f", b"h"] {
                t.insert(k, k).unwrap();
            }
            let mut got = Vec::new();
            let mut collect = |lo: &[u8], hi: &[u8]| {
                got.clear();
                let n = t.range_floor(lo, hi, &mut |k, _| got.push(k[0])).unwrap();
                assert_eq!(n, got.len());
                String::from_utf8(got.clone()).unwrap()
            };
            assert_eq!(collect(b"c", b"f"), "bdf");
            assert_eq!(collect(b"d", b"e"), "d");
            assert_eq!(collect(b"a", b"d"), "bd");
            assert_eq!(collect(b"z", b"zz"), "h");
        }
    }
}
