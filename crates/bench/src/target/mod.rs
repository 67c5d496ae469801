//! The key-value structures under test, behind one trait.
//!
//! Each target hands values back the way its own API makes cheapest for a
//! caller that needs to look at them: every target copies into a
//! caller-owned buffer (or shows borrowed slices to a visitor) while holding
//! its read lock, epoch guard or pin (the engine through `Store::get_with`
//! and `Store::scan`).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;

use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;

#[cfg(feature = "engine")]
use crate::BenchError;
use crate::Result;

/// A concurrent ordered key-value map that the driver can measure.
pub trait Target: Send + Sync {
    /// Stores `value` under `key`, replacing any previous value.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Looks `key` up. On a hit, replaces the contents of `out` with the value
    /// and returns `true`; on a miss returns `false` and leaves `out` alone.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;

    /// Visits, in ascending key order, the first `n` items whose key is `>=
    /// start`, and returns how many it visited.
    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize>;
}

/// The targets the driver knows, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// `combkv::Store` with `Config::default()`.
    Engine,
    /// `parking_lot::RwLock<BTreeMap<Vec<u8>, Vec<u8>>>`.
    BTreeMap,
    /// `crossbeam_skiplist::SkipMap<Vec<u8>, Vec<u8>>`.
    SkipMap,
}

impl TargetKind {
    /// Every target, in table order.
    pub const ALL: [TargetKind; 3] = [
        TargetKind::Engine,
        TargetKind::BTreeMap,
        TargetKind::SkipMap,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Engine => "engine",
            TargetKind::BTreeMap => "btreemap",
            TargetKind::SkipMap => "skipmap",
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
        TargetKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown target {s:?} (known: engine, btreemap, skipmap)"))
    }
}

/// `combkv::Store` with the default configuration.
#[cfg(feature = "engine")]
pub struct EngineTarget {
    store: combkv::Store,
}

#[cfg(feature = "engine")]
impl EngineTarget {
    /// A store made with `Config::default()`.
    pub fn new() -> Result<Self> {
        let store = combkv::Store::new(combkv::Config::default())
            .map_err(|e| BenchError(format!("Store::new: {e}")))?;
        Ok(EngineTarget { store })
    }
}

#[cfg(feature = "engine")]
impl fmt::Debug for EngineTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineTarget").finish_non_exhaustive()
    }
}

#[cfg(feature = "engine")]
impl Target for EngineTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store
            .put(key, value)
            .map(drop)
            .map_err(|e| BenchError(format!("engine put: {e}")))
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.store
            .get_with(key, |item| match item {
                Some(it) => {
                    out.clear();
                    out.extend_from_slice(it.value);
                    true
                }
                None => false,
            })
            .map_err(|e| BenchError(format!("engine get: {e}")))
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let range =
            combkv::Range::new(Bound::Included(start.to_vec()), Bound::Unbounded).with_limit(n);
        self.store
            .scan(&range, |it| {
                visit(it.key, it.value);
                true
            })
            .map_err(|e| BenchError(format!("engine range: {e}")))
    }
}

/// A `BTreeMap` behind a `parking_lot::RwLock`.
#[derive(Debug, Default)]
pub struct BTreeMapTarget {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BTreeMapTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for BTreeMapTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        // Allocate outside the lock.
        let (key, value) = (key.to_vec(), value.to_vec());
        self.map.write().insert(key, value);
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let map = self.map.read();
        match map.get(key) {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let map = self.map.read();
        let mut count = 0;
        for (k, v) in map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            visit(k, v);
            count += 1;
        }
        Ok(count)
    }
}

/// A `crossbeam_skiplist::SkipMap`.
#[derive(Debug, Default)]
pub struct SkipMapTarget {
    map: SkipMap<Vec<u8>, Vec<u8>>,
}

impl SkipMapTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for SkipMapTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.map.get(key) {
            Some(e) => {
                out.clear();
                out.extend_from_slice(e.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let mut count = 0;
        for e in self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            visit(e.key(), e.value());
            count += 1;
        }
        Ok(count)
    }
}
