//! The batched read engine: the software form of Honeycomb's accelerator
//! (paper section 4; DPA-Store section 3.1). A batch of GET and RANGE
//! requests is stamped with one read version and handed to a backend, which
//! may execute the requests in any order and interleaved, and writes one
//! result per request into the batch's result buffers.
//!
//! The boundary does not assume a CPU: a backend receives the requests (keys
//! and bounds as bytes), the read version, a view of the page table, and the
//! result buffers, which are flat byte arenas with offsets, the shape a device
//! would fill by DMA. Only the CPU backend (`cpu`) exists now.

mod cpu;
mod hot;

pub use cpu::CpuBackend;
pub(crate) use hot::Probe;
pub use hot::{DEFAULT_HOT_CACHE_ENTRIES, HOT_KEY_MAX, HotCache, HotCacheStats};

use crate::tree::Tree;
use crate::tree::node::{ItemRef, ValueRef};
use crate::types::{ItemView, Now, Range, Version};

/// One request of a batch.
#[derive(Debug, Clone, Copy)]
pub enum ReadRequest<'a> {
    /// The item of a key.
    Get(&'a [u8]),
    /// The items of a range (any `Range` options).
    Range(&'a Range),
}

/// Where one returned item's bytes lie in the result arena: its key at
/// `key_at`, its value right after the key, or, for a value shared rather
/// than copied (`SHARE_FROM`), in `BatchResults::shared`.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    version: u64,
    /// Unix ms; 0 = never.
    expiry: u64,
    key_at: u32,
    key_len: u32,
    value_len: u32,
    /// Client flags; 0 = none.
    flags: u32,
    /// 0: the value is in the arena; `n`: it is `shared[n - 1]`.
    shared: u32,
}

/// Out-of-line values this long or longer are handed over by reference (a
/// count on the value's own allocation) instead of copied into the arena:
/// a GET of a 1 MB value copied it once here and once more into the reply.
/// Shorter ones are copied, which is cheaper than the count's two atomic
/// operations and keeps the arena the one place a small batch reads from.
const SHARE_FROM: usize = 16 * 1024;

/// The results of a batch: request `i`'s items are `items(i)`. Reused
/// across batches to keep allocations out of the hot path, and so the
/// place for a thread's hot-entry cache (`with_hot_cache`).
#[derive(Debug, Default)]
pub struct BatchResults {
    /// Keys and values, back to back.
    arena: Vec<u8>,
    /// Large out-of-line values of this batch's items, shared with the
    /// store (see `SHARE_FROM`), until the next batch or `shrink`.
    shared: Vec<bytes::Bytes>,
    slots: Vec<Slot>,
    /// Per request: first slot and number of slots.
    spans: Vec<(u32, u32)>,
    read_version: u64,
    /// The thread's hot-entry cache, if it has one.
    hot: Option<Box<HotCache>>,
    /// Requests answered before the backend ran (from the hot cache);
    /// empty when none was.
    answered: Vec<bool>,
}

impl BatchResults {
    /// Empty results, to be filled by a backend's batch read and reused
    /// across batches so that their buffers are allocated once.
    pub fn new() -> BatchResults {
        BatchResults::default()
    }

    /// Result buffers with a hot-entry cache of `entries` slots in front
    /// of the read engine: the batches read into them (`Store::read_batch`)
    /// answer GETs of hot keys from the cache (see `HotCache`).
    pub fn with_hot_cache(entries: usize) -> BatchResults {
        BatchResults {
            hot: Some(Box::new(HotCache::new(entries))),
            ..BatchResults::default()
        }
    }

    /// The hot-entry cache, if there is one.
    pub fn hot_cache(&self) -> Option<&HotCache> {
        self.hot.as_deref()
    }

    /// The hot-entry cache, if there is one, for changes.
    pub fn hot_cache_mut(&mut self) -> Option<&mut HotCache> {
        self.hot.as_deref_mut()
    }

    pub(crate) fn take_hot_cache(&mut self) -> Option<Box<HotCache>> {
        self.hot.take()
    }

    pub(crate) fn put_hot_cache(&mut self, hot: Option<Box<HotCache>>) {
        if hot.is_some() {
            self.hot = hot;
        }
    }

    /// Gives back the memory a large batch grew, keeping the cache.
    pub fn shrink(&mut self) {
        let hot = self.hot.take();
        *self = BatchResults {
            hot,
            ..BatchResults::default()
        };
    }

    /// Number of requests answered.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether no request is answered (clippy pairs it with `len`).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The read version every request of the batch saw.
    pub fn read_version(&self) -> Version {
        Version(self.read_version)
    }

    /// The items request `i` returned, in its order (a GET returns zero or
    /// one item).
    pub fn items(&self, i: usize) -> impl ExactSizeIterator<Item = ItemView<'_>> + '_ {
        let (first, n) = self.spans[i];
        self.slots[first as usize..(first + n) as usize]
            .iter()
            .map(move |s| {
                let value_at = s.key_at + s.key_len;
                let value = match s.shared {
                    0 => &self.arena[value_at as usize..(value_at + s.value_len) as usize],
                    n => &self.shared[n as usize - 1][..],
                };
                ItemView {
                    key: &self.arena[s.key_at as usize..value_at as usize],
                    value,
                    version: Version(s.version),
                    expires_at_ms: (s.expiry != 0).then_some(s.expiry),
                    flags: s.flags,
                }
            })
    }

    /// The value a GET request found.
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.value_and_handle(i).map(|(v, _)| v)
    }

    /// The value a GET request found, with the shared handle on it if the
    /// batch holds it shared with the store rather than copied (large
    /// out-of-line values): a reply can be sent from that without a copy.
    #[inline]
    pub fn value_and_handle(&self, i: usize) -> Option<(&[u8], Option<&bytes::Bytes>)> {
        let (first, n) = self.spans[i];
        if n == 0 {
            return None;
        }
        let s = &self.slots[first as usize];
        Some(match s.shared {
            0 => {
                let at = (s.key_at + s.key_len) as usize;
                (&self.arena[at..at + s.value_len as usize], None)
            }
            n => {
                let handle = &self.shared[n as usize - 1];
                (&handle[..], Some(handle))
            }
        })
    }

    pub(crate) fn reset(&mut self, requests: usize, rv: u64) {
        self.arena.clear();
        self.shared.clear();
        self.slots.clear();
        self.spans.clear();
        self.spans.resize(requests, (0, 0));
        self.answered.clear();
        self.read_version = rv;
    }

    /// Empties these results for `requests` requests whose items are then
    /// gathered from other batches' results ([`BatchResults::gather`]): a
    /// keyspace cut into ranges reads each range from its own store.
    pub fn begin_gathering(&mut self, requests: usize) {
        self.reset(requests, 0);
    }

    /// Appends up to `max` of request `j`'s items in `from` to request `i`
    /// of these results: the request gathered into last (requests are
    /// gathered one after another, each one's items together). Returns
    /// how many were appended. The read version becomes the newest of the
    /// batches gathered from.
    pub fn gather(&mut self, i: usize, from: &BatchResults, j: usize, max: usize) -> usize {
        if self.spans[i].1 == 0 {
            self.spans[i].0 = self.slots.len() as u32;
        }
        self.read_version = self.read_version.max(from.read_version);
        let (first, n) = from.spans[j];
        let mut added = 0;
        for s in &from.slots[first as usize..(first + n) as usize] {
            if added == max {
                break;
            }
            let key_at = self.arena.len() as u32;
            let key = &from.arena[s.key_at as usize..(s.key_at + s.key_len) as usize];
            self.arena.extend_from_slice(key);
            let shared = if s.shared == 0 {
                let at = (s.key_at + s.key_len) as usize;
                self.arena
                    .extend_from_slice(&from.arena[at..at + s.value_len as usize]);
                0
            } else {
                self.shared.push(from.shared[s.shared as usize - 1].clone());
                self.shared.len() as u32
            };
            self.slots.push(Slot {
                key_at,
                shared,
                ..*s
            });
            self.spans[i].1 += 1;
            added += 1;
        }
        added
    }

    /// Appends an item read elsewhere (another node's answer) to request
    /// `i`: the request gathered into last, as with
    /// [`BatchResults::gather`].
    pub fn gather_item(&mut self, i: usize, it: &ItemView<'_>) {
        if self.spans[i].1 == 0 {
            self.spans[i].0 = self.slots.len() as u32;
        }
        let key_at = self.arena.len() as u32;
        self.arena.extend_from_slice(it.key);
        self.arena.extend_from_slice(it.value);
        self.slots.push(Slot {
            version: it.version.get(),
            expiry: it.expires_at_ms.unwrap_or(0),
            key_at,
            key_len: it.key.len() as u32,
            value_len: it.value.len() as u32,
            flags: it.flags,
            shared: 0,
        });
        self.spans[i].1 += 1;
    }

    /// Whether request `i` was answered before the backend ran: a backend
    /// skips it.
    #[inline]
    pub fn answered(&self, i: usize) -> bool {
        self.answered.get(i).copied().unwrap_or(false)
    }

    /// Answers GET request `i` from what the hot cache proved.
    pub(crate) fn answer_proven(&mut self, i: usize, p: crate::tree::read::Proven, now: &Now) {
        if self.answered.is_empty() {
            self.answered.resize(self.spans.len(), false);
        }
        self.answered[i] = true;
        self.begin(i);
        if let crate::tree::read::Proven::Item(it) = p
            && it.is_live(now)
        {
            self.push(i, &it);
        }
    }

    /// Starts request `i`'s results (its items must be pushed next, together).
    pub(crate) fn begin(&mut self, i: usize) {
        self.spans[i] = (self.slots.len() as u32, 0);
    }

    /// Appends an item (as the tree stores it) to the request begun last.
    #[inline]
    pub(crate) fn push(&mut self, i: usize, it: &ItemRef<'_>) {
        let key = it.key;
        let key_at = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        let value_len = it.value.len();
        let shared = if matches!(it.value, ValueRef::External(..)) && value_len >= SHARE_FROM {
            self.shared.push(it.value.to_bytes());
            self.shared.len() as u32
        } else {
            self.arena.extend_from_slice(it.value.bytes());
            0
        };
        self.slots.push(Slot {
            version: it.version,
            expiry: it.expiry,
            key_at,
            key_len: key.len() as u32,
            value_len: value_len as u32,
            flags: it.cflags,
            shared,
        });
        self.spans[i].1 += 1;
    }
}

/// What a backend reads the tree through: the page table (LID -> buffer) and
/// the fixed root LID. Opaque outside the engine.
#[derive(Debug, Clone, Copy)]
pub struct TreeView<'a> {
    tree: &'a Tree,
}

impl<'a> TreeView<'a> {
    pub(crate) fn new(tree: &'a Tree) -> TreeView<'a> {
        TreeView { tree }
    }

    /// The tree read through this view.
    #[inline(always)]
    pub(crate) fn tree(self) -> &'a Tree {
        self.tree
    }
}

/// Executes batches. Implementations must return exactly what the plain read
/// path returns at the same read version (tests check it request by
/// request); they may order and interleave the work as they like. They
/// skip the requests already answered (`BatchResults::answered`: the hot
/// cache's hits).
pub trait ReadBackend: Send + Sync + std::fmt::Debug {
    /// Answers every request of `requests` at read version `rv` (and clock
    /// reading `now_ms` for expiry) into `out` (already reset).
    fn execute(
        &self,
        view: TreeView<'_>,
        rv: u64,
        now_ms: u64,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    );
}
