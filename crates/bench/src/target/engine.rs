//! The combkv engine, through its zero-copy visitors.

use std::cell::RefCell;
use std::fmt;
use std::ops::Bound;

use combkv::readexec::{BatchResults, ReadRequest};

use super::Target;
use crate::{BenchError, Result};

/// `combkv::Store` with the default configuration.
pub struct EngineTarget {
    store: combkv::Store,
    /// None: GETs by `get_with`, zero-copy. Some(n): GETs as read-engine
    /// batches of one, as a server's event loop reads them, through a
    /// hot-entry cache of n slots per worker thread (0: none).
    hot_cache: Option<usize>,
}

thread_local! {
    /// A worker thread's read results and hot cache (the cache empties
    /// itself when it meets another store).
    static READS: RefCell<Option<BatchResults>> = const { RefCell::new(None) };
}

impl EngineTarget {
    /// A store made with `Config::default()`, read by `get_with`.
    pub fn new() -> Result<Self> {
        EngineTarget::with_hot_cache(None)
    }

    /// A store made with `Config::default()`. With `slots`, a GET is a
    /// read-engine batch of one, as a server's event loop reads, through a
    /// hot-entry cache of that many slots per worker thread (0: none).
    pub fn with_hot_cache(slots: Option<usize>) -> Result<Self> {
        let store = combkv::Store::new(combkv::Config::default())
            .map_err(|e| BenchError(format!("Store::new: {e}")))?;
        Ok(EngineTarget {
            store,
            hot_cache: slots,
        })
    }

    fn read_batched(&self, slots: usize, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        // As the cache rounds it, so that a worker's results are seen to fit.
        let capacity = (slots > 0).then(|| slots.max(16).next_power_of_two());
        READS.with(|reads| {
            let mut reads = reads.borrow_mut();
            let out = match &mut *reads {
                Some(out) if out.hot_cache().map(|c| c.capacity()) == capacity => out,
                other => other.insert(match capacity {
                    Some(n) => BatchResults::with_hot_cache(n),
                    None => BatchResults::new(),
                }),
            };
            self.store
                .read_batch(&[ReadRequest::Get(key)], out)
                .map_err(|e| BenchError(format!("engine get: {e}")))?;
            Ok(match out.value(0) {
                Some(v) => {
                    visit(v);
                    true
                }
                None => false,
            })
        })
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
        if let Some(slots) = self.hot_cache {
            return self.read_batched(slots, key, visit);
        }
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
