//! The combkv engine, through its zero-copy visitors.

use std::fmt;
use std::ops::Bound;

use super::Target;
use crate::{BenchError, Result};

/// `combkv::Store` with the default configuration.
pub struct EngineTarget {
    store: combkv::Store,
}

impl EngineTarget {
    /// A store made with `Config::default()`.
    pub fn new() -> Result<Self> {
        let store = combkv::Store::new(combkv::Config::default())
            .map_err(|e| BenchError(format!("Store::new: {e}")))?;
        Ok(EngineTarget { store })
    }
}

impl fmt::Debug for EngineTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineTarget").finish_non_exhaustive()
    }
}

impl Target for EngineTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store
            .put(key, value)
            .map(drop)
            .map_err(|e| BenchError(format!("engine put: {e}")))
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.store
            .get_with(key, |item| match item {
                Some(it) => {
                    visit(it.value);
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

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let range = combkv::Range::new(Bound::Included(lo.to_vec()), Bound::Included(hi.to_vec()))
            .with_floor_start();
        self.store
            .scan(&range, |it| {
                visit(it.key, it.value);
                true
            })
            .map_err(|e| BenchError(format!("engine range floor: {e}")))
    }
}
