//! The hot-entry cache (DPA-Store 3.1.2): a small cache of one thread's hot
//! keys in front of the read engine. An entry holds a key and its stamp
//! (`tree::read::HotStamp`: the key's leaf buffer, the item's place in it,
//! and how much of the buffer was published); a GET whose entry still holds
//! (the leaf's page-table entry names the same buffer, and no log item
//! appended since carries the key's fingerprint) is answered from the leaf
//! without a descent. A hit is therefore the newest version at the batch's
//! read version, never a stale value; it costs the page-table entry, the
//! leaf's header and log directory, and the item, where a descent also
//! reads every level's header, shortcuts and segment.
//!
//! The guard is a dense array of 32-bit words, one per slot (DPA-Store
//! keeps a Bloom filter in a line the thread keeps hot): the key's hash
//! tag, whether the slot holds an entry, and the entry's hit count. A miss
//! reads and writes only its word, never the 128-byte slot. Slots are
//! direct-mapped. A key is admitted on its second sighting (the first
//! leaves a ghost: its tag without an entry), and a resident keeps its
//! slot while it is hit more often than newcomers arrive there
//! (`AGE_EVERY`), so a uniform stream of keys seen once costs a tag compare
//! and seldom a descent for a stamp, and zipfian hot keys stay. An entry
//! that no longer holds is stamped again by the read that found it so (a
//! descent, the cost of the miss itself). Where too few GETs hit for the
//! probes to pay (a uniform stream), the cache bypasses itself and probes
//! only a sample of them until a hot set shows again (`MIN_HITS`).
//!
//! One cache belongs to one thread (it is `&mut` on every read) and to one
//! store at a time: used with another store it empties itself first.

use std::fmt;

use crate::tree::Tree;
use crate::tree::node::key_fp;
use crate::tree::read::{HotStamp, Proven};

/// Slots per thread a server gives its hot-entry caches unless told
/// otherwise (0: none). See docs/design.md, "Hot-entry cache", for the
/// measurement that chose it.
pub const DEFAULT_HOT_CACHE_ENTRIES: usize = 0;

/// Longest key the cache holds; longer keys are always read from the tree.
pub const HOT_KEY_MAX: usize = 72;

/// A slot's word in the guard: the key's hash tag (bits 8..32, never 0
/// in a used slot), whether the slot holds the key's entry (a resident)
/// or only remembers that the key was seen (a ghost), and the resident's
/// hit count (bits 0..4).
const TAG_SHIFT: u32 = 8;
const RESIDENT: u32 = 0x80;
const FREQ_MASK: u32 = 0x0f;

/// A newcomer ages the resident of its slot one time in this many, so a
/// key keeps its slot while it is hit more often than one newcomer in
/// eight arrives there (with 4,096 slots, about the 4,000 hottest keys
/// of a zipfian stream); the count saturates at `FREQ_MASK`, so a key
/// gone cold yields after at most 120 newcomers.
const AGE_EVERY: u32 = 8;

/// GETs per window of the bypass decision.
const WINDOW: u32 = 4096;
/// Below this many hits per window the cache is bypassed: a hit saves a
/// descent (about 15 times the cost of a missed probe), so it pays from
/// about a 7% hit rate; under it the probes are a loss.
const MIN_HITS: u32 = WINDOW / 10;
/// While bypassed, one GET in this many still probes (and admits), so the
/// cache sees a hot set form and turns itself back on.
const SAMPLE_EVERY: u32 = 16;

/// One direct-mapped slot: two cache lines, key included. Read only when
/// the guard names a resident with the key's tag.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    stamp: Option<HotStamp>,
    key_len: u8,
    key: [u8; HOT_KEY_MAX],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 128);

const EMPTY: Slot = Slot {
    stamp: None,
    key_len: 0,
    key: [0; HOT_KEY_MAX],
};

/// Counters of a cache since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotCacheStats {
    /// GETs answered from the cache.
    pub hits: u64,
    /// GETs read from the tree (stale entries and admissions included).
    pub misses: u64,
    /// Of the misses, GETs that did not probe: the cache was bypassed
    /// for want of hits, and they were not its samples.
    pub bypassed: u64,
    /// Entries that no longer held when a GET found them.
    pub stale: u64,
    /// Entries stamped (admissions and re-stamps of stale entries).
    pub fills: u64,
}

/// What a probe of the cache found.
pub(crate) enum Probe {
    /// The entry holds: the answer at the read version.
    Hit(Proven),
    /// Stamp the key into this slot (second sighting, or a stale entry).
    Fill(usize),
    /// Read the tree; nothing to stamp.
    Miss,
}

/// A hot-entry cache for one thread. See the module doc.
pub struct HotCache {
    /// The store whose entries it holds (`Store`'s id; 0: none yet).
    store: u64,
    /// The guard: one word per slot (`TAG_SHIFT`, `RESIDENT`, `FREQ_MASK`),
    /// 0 for an empty slot. A miss reads and writes only this.
    tags: Box<[u32]>,
    /// Newcomers so far, for `AGE_EVERY`.
    arrivals: u32,
    /// GETs and hits in the current window (`WINDOW`).
    window_gets: u32,
    window_hits: u32,
    /// The last window's hit rate was below `MIN_HITS`: only one GET in
    /// `SAMPLE_EVERY` probes.
    bypass: bool,
    /// GETs seen while bypassed, for `SAMPLE_EVERY`.
    skipped: u32,
    slots: Box<[Slot]>,
    stats: HotCacheStats,
    /// What `unpublished` returned so far, summed.
    published: HotCacheStats,
    /// Tests only: validation ignores log appends (a planted stale hit).
    ignore_appends: bool,
}

impl fmt::Debug for HotCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotCache")
            .field("capacity", &self.capacity())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl HotCache {
    /// A cache of `entries` slots (rounded up to a power of two, at least
    /// 16); 128 bytes and a 4-byte tag each.
    pub fn new(entries: usize) -> HotCache {
        let n = entries.max(16).next_power_of_two();
        HotCache {
            store: 0,
            tags: vec![0; n].into_boxed_slice(),
            arrivals: 0,
            window_gets: 0,
            window_hits: 0,
            bypass: false,
            skipped: 0,
            slots: vec![EMPTY; n].into_boxed_slice(),
            stats: HotCacheStats::default(),
            published: HotCacheStats::default(),
            ignore_appends: false,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Hits, misses, stale entries and fills so far.
    pub fn stats(&self) -> HotCacheStats {
        self.stats
    }

    /// The counts since the last call (all of them at the first): for a
    /// server that adds every thread's to its own counters now and then.
    pub fn unpublished(&mut self) -> HotCacheStats {
        let (s, p) = (self.stats, self.published);
        self.published = s;
        HotCacheStats {
            hits: s.hits - p.hits,
            misses: s.misses - p.misses,
            bypassed: s.bypassed - p.bypassed,
            stale: s.stale - p.stale,
            fills: s.fills - p.fills,
        }
    }

    /// Plants a bug for the linearizability tests to catch: validation
    /// stops checking the log items appended to a leaf since an entry was
    /// stamped, so a key overwritten in place is served stale. Never call
    /// it outside a test.
    #[doc(hidden)]
    pub fn plant_stale_hits_for_tests(&mut self) {
        self.ignore_appends = true;
    }

    /// Makes the cache hold entries of store `id`, emptying it if it held
    /// another store's.
    pub(crate) fn attach(&mut self, id: u64) {
        if self.store != id {
            self.tags.fill(0);
            self.store = id;
        }
    }

    /// Looks `key` up for a read at `rv` (under the pin `rv` was taken
    /// under) and keeps the admission counts.
    #[inline]
    pub(crate) fn probe(&mut self, tree: &Tree, key: &[u8], rv: u64) -> Probe {
        if key.len() > HOT_KEY_MAX {
            self.stats.misses += 1;
            return Probe::Miss;
        }
        self.window_gets += 1;
        if self.window_gets == WINDOW {
            // While bypassed only the samples probed: scale their hits.
            let scale = if self.bypass { SAMPLE_EVERY } else { 1 };
            self.bypass = self.window_hits * scale < MIN_HITS;
            (self.window_gets, self.window_hits) = (0, 0);
        }
        if self.bypass {
            self.skipped = self.skipped.wrapping_add(1);
            if !self.skipped.is_multiple_of(SAMPLE_EVERY) {
                self.stats.misses += 1;
                self.stats.bypassed += 1;
                return Probe::Miss;
            }
        }
        let p = self.lookup(tree, key, rv);
        if matches!(p, Probe::Hit(_)) {
            self.stats.hits += 1;
            self.window_hits += 1;
        } else {
            self.stats.misses += 1;
        }
        p
    }

    /// `probe` without the bypass and the hit/miss counts.
    #[inline]
    fn lookup(&mut self, tree: &Tree, key: &[u8], rv: u64) -> Probe {
        let h = hash(key);
        let i = h as usize & (self.slots.len() - 1);
        let tag = ((h >> 40) as u32) << TAG_SHIFT | 1 << TAG_SHIFT;
        let word = self.tags[i];
        if word & !0xff == tag {
            if word & RESIDENT == 0 {
                // A ghost of this key: seen before, admit it.
                return Probe::Fill(i);
            }
            let s = &mut self.slots[i];
            if &s.key[..s.key_len as usize] == key {
                let stamp = s.stamp.as_mut().expect("a resident has a stamp");
                let fp = if self.ignore_appends {
                    None
                } else {
                    Some(key_fp(key))
                };
                if let Some(p) = tree.hot_check(stamp, fp, rv) {
                    if word & FREQ_MASK < FREQ_MASK {
                        self.tags[i] = word + 1;
                    }
                    return Probe::Hit(p);
                }
                self.stats.stale += 1;
                self.tags[i] = tag;
                return Probe::Fill(i);
            }
            // Another key with the same tag: a newcomer like any other.
        }
        if word & FREQ_MASK == 0 {
            // Empty, a ghost, or a resident gone cold: this key becomes
            // the slot's ghost.
            self.tags[i] = tag;
        } else {
            self.arrivals = self.arrivals.wrapping_add(1);
            if self.arrivals.is_multiple_of(AGE_EVERY) {
                self.tags[i] = word - 1;
            }
        }
        Probe::Miss
    }

    /// Makes `key` (for which `probe` returned slot `i`) resident with
    /// `stamp`.
    pub(crate) fn fill(&mut self, i: usize, key: &[u8], stamp: HotStamp) {
        let s = &mut self.slots[i];
        s.stamp = Some(stamp);
        s.key_len = key.len() as u8;
        s.key[..key.len()].copy_from_slice(key);
        self.tags[i] = (self.tags[i] & !0xff) | RESIDENT | 1;
        self.stats.fills += 1;
    }
}

/// A fast unkeyed hash of a key: 8 bytes at a time, multiply and rotate,
/// then murmur3's finalizer, so that every input bit reaches the low bits
/// the slot is chosen by (only slot choice and tags depend on it).
#[inline]
fn hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = K ^ key.len() as u64;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    h ^= u64::from_le_bytes(last);
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_spreads_similar_keys_over_slots_and_tags() {
        // Keys that differ in one byte anywhere, short and long.
        for fmt in [
            |i: u32| format!("user{i:019}"),
            |i| format!("k{i:05}"),
            |i| format!("{i:04}{}", "x".repeat(20)),
        ] {
            let mut slots = std::collections::HashSet::new();
            let mut tags = std::collections::HashSet::new();
            for i in 0..4096u32 {
                let h = hash(fmt(i).as_bytes());
                slots.insert(h & 4095);
                tags.insert((h >> 32) as u32);
            }
            // Random placement fills about 1 - 1/e of the slots.
            assert!(slots.len() > 2400, "{} slots used", slots.len());
            assert!(tags.len() > 4090, "{} tags", tags.len());
        }
    }
}
