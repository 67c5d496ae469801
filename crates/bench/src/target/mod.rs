//! The key-value structures under test, behind one trait.
//!
//! Each target hands values to a visitor while holding its read lock, epoch
//! guard or pin, so the driver can check what it got without copying (the
//! engine through `Store::get_with` and `Store::scan`).

use std::fmt;
use std::str::FromStr;

use crate::Result;
use crate::workload::Workload;

#[cfg(feature = "engine")]
mod engine;
mod peers;

#[cfg(feature = "engine")]
pub use engine::EngineTarget;
pub use peers::{BTreeMapTarget, MasstreeTarget, SccTarget, SkipMapTarget};

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

/// The targets the driver knows, by name: in-process structures and
/// servers over loopback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TargetKind {
    /// `combkv::Store` with `Config::default()`.
    #[serde(rename = "engine")]
    Engine,
    /// `parking_lot::RwLock<BTreeMap<Vec<u8>, Vec<u8>>>`.
    #[serde(rename = "btreemap")]
    BTreeMap,
    /// `crossbeam_skiplist::SkipMap<Vec<u8>, RwLock<Vec<u8>>>` (see [`SkipMapTarget`]).
    #[serde(rename = "skipmap")]
    SkipMap,
    /// `scc::TreeIndex<Vec<u8>, Vec<u8>>`.
    #[serde(rename = "scc")]
    Scc,
    /// The `masstree` crate's `MassTree15<Vec<u8>>` (see [`MasstreeTarget`]).
    #[serde(rename = "masstree")]
    Masstree,
    /// `combkv serve`, over its RESP listener.
    #[serde(rename = "combkv-resp")]
    CombkvResp,
    /// `combkv serve`, over its memcached listener.
    #[serde(rename = "combkv-memcached")]
    CombkvMemcached,
    /// `redis-server`.
    #[serde(rename = "redis")]
    Redis,
    /// `memcached`.
    #[serde(rename = "memcached")]
    Memcached,
}

/// Names of the targets of `docs/workloads.md` that talk to a server over loopback.
pub const NETWORK_TARGETS: [&str; 4] = ["combkv-resp", "combkv-memcached", "redis", "memcached"];

impl TargetKind {
    /// Every in-process target, in table order.
    pub const ALL: [TargetKind; 5] = [
        TargetKind::Engine,
        TargetKind::BTreeMap,
        TargetKind::SkipMap,
        TargetKind::Scc,
        TargetKind::Masstree,
    ];

    /// Every network target, in table order.
    pub const NETWORK: [TargetKind; 4] = [
        TargetKind::CombkvResp,
        TargetKind::CombkvMemcached,
        TargetKind::Redis,
        TargetKind::Memcached,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Engine => "engine",
            TargetKind::BTreeMap => "btreemap",
            TargetKind::SkipMap => "skipmap",
            TargetKind::Scc => "scc",
            TargetKind::Masstree => "masstree",
            TargetKind::CombkvResp => "combkv-resp",
            TargetKind::CombkvMemcached => "combkv-memcached",
            TargetKind::Redis => "redis",
            TargetKind::Memcached => "memcached",
        }
    }

    /// Whether the target is a server over loopback.
    pub fn is_network(self) -> bool {
        TargetKind::NETWORK.contains(&self)
    }

    /// The target the others are compared with in a table: the engine
    /// in-process, combkv over RESP over the network.
    pub fn reference(self) -> TargetKind {
        if self.is_network() {
            TargetKind::CombkvResp
        } else {
            TargetKind::Engine
        }
    }

    /// Why the target cannot run `workload`, if it cannot: the memcached
    /// protocol has no ordered reads, so both memcached targets skip the
    /// workloads that scan.
    pub fn skips(self, workload: Workload) -> Option<&'static str> {
        let scans = matches!(workload, Workload::E | Workload::Cloud);
        let memcached = matches!(self, TargetKind::Memcached | TargetKind::CombkvMemcached);
        (scans && memcached).then_some("skipped: the memcached protocol has no ordered scans")
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
        TargetKind::ALL
            .into_iter()
            .chain(TargetKind::NETWORK)
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown target {s:?} (in-process: engine, btreemap, skipmap, scc, masstree; \
                     network: {})",
                    NETWORK_TARGETS.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in TargetKind::ALL.into_iter().chain(TargetKind::NETWORK) {
            assert_eq!(k.name().parse::<TargetKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(k.is_network(), NETWORK_TARGETS.contains(&k.name()));
        }
        assert!("lmdb".parse::<TargetKind>().is_err());
        assert_eq!(TargetKind::Memcached.skips(Workload::A), None);
        assert!(TargetKind::CombkvMemcached.skips(Workload::Cloud).is_some());
        assert_eq!(TargetKind::Redis.skips(Workload::E), None);
    }

    /// Every in-process target, holding the keys b, d, f and h.
    fn small_targets() -> Vec<Box<dyn Target>> {
        let targets: Vec<Box<dyn Target>> = vec![
            #[cfg(feature = "engine")]
            Box::new(EngineTarget::new().unwrap()),
            Box::new(BTreeMapTarget::new()),
            Box::new(SkipMapTarget::new()),
            Box::new(SccTarget::new()),
            Box::new(MasstreeTarget::new()),
        ];
        for t in &targets {
            for k in [b"b", b"d", b"f", b"h"] {
                t.insert(k, k).unwrap();
            }
        }
        targets
    }

    /// Every target agrees with the others on a small floor range, including
    /// the cases with no floor item and a `lo` between two keys.
    #[test]
    fn range_floor_agrees_across_targets() {
        for t in &small_targets() {
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

    /// Every target answers forward ranges the same, with starts below the
    /// smallest key (the case scc's adapter rewrites to an unbounded
    /// start), at a key, between keys and past the end.
    #[test]
    fn range_agrees_across_targets() {
        for t in &small_targets() {
            let mut got = Vec::new();
            let mut collect = |start: &[u8], n: usize| {
                got.clear();
                let c = t.range(start, n, &mut |k, _| got.push(k[0])).unwrap();
                assert_eq!(c, got.len());
                String::from_utf8(got.clone()).unwrap()
            };
            assert_eq!(collect(b"a", 2), "bd");
            assert_eq!(collect(b"", 10), "bdfh");
            assert_eq!(collect(b"b", 3), "bdf");
            assert_eq!(collect(b"c", 10), "dfh");
            assert_eq!(collect(b"i", 10), "");
        }
    }
}
