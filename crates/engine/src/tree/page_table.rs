//! The page table: LID -> current buffer (Honeycomb section 3.1). Replacing a
//! node is one release store into its entry. Two levels of lazily allocated
//! chunks, so readers never lock and entries never move.

use super::node::{Lid, NodePtr};
use crate::sync::{AtomicPtr, Mutex, Ordering};

#[cfg(not(feature = "shuttle"))]
const CHUNK_BITS: u32 = 12;
#[cfg(feature = "shuttle")]
const CHUNK_BITS: u32 = 4;
const CHUNK: usize = 1 << CHUNK_BITS;
#[cfg(not(feature = "shuttle"))]
const DIR: usize = 1 << 16;
#[cfg(feature = "shuttle")]
const DIR: usize = 1 << 8;

type Chunk = [AtomicPtr<u8>];

/// Most LIDs a store can name at once (2^28 with the default build: 2 TiB of 8 KiB nodes).
pub(crate) const MAX_LIDS: usize = CHUNK * DIR;

pub(crate) struct PageTable {
    dir: Box<[AtomicPtr<AtomicPtr<u8>>]>,
    alloc: Mutex<LidAlloc>,
}

struct LidAlloc {
    next: u64,
    free: Vec<Lid>,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("lids", &self.alloc.lock().next)
            .finish()
    }
}

impl PageTable {
    pub(crate) fn new() -> PageTable {
        let dir = (0..DIR)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        PageTable {
            dir,
            alloc: Mutex::new(LidAlloc {
                next: 1,
                free: Vec::new(),
            }),
        }
    }

    fn slot(&self, lid: Lid) -> Option<&AtomicPtr<u8>> {
        let i = lid.0 as usize;
        let chunk = self.dir.get(i >> CHUNK_BITS)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: chunks are allocated once with CHUNK entries, published with
        // release, and freed only when the table is dropped.
        Some(unsafe { &*chunk.add(i & (CHUNK - 1)) })
    }

    /// Address of `lid`'s entry, for prefetching (the read engine).
    pub(crate) fn slot_addr(&self, lid: Lid) -> Option<*const u8> {
        self.slot(lid)
            .map(|s| s as *const AtomicPtr<u8> as *const u8)
    }

    /// The current buffer of `lid`.
    pub(crate) fn get(&self, lid: Lid) -> Option<NodePtr> {
        crate::sync::schedule_point();
        NodePtr::from_raw(self.slot(lid)?.load(Ordering::Acquire))
    }

    /// Publishes `p` as the current buffer of `lid`.
    pub(crate) fn set(&self, lid: Lid, p: Option<NodePtr>) {
        let raw = p.map_or(std::ptr::null_mut(), NodePtr::as_raw);
        self.slot(lid)
            .expect("LID allocated")
            .store(raw, Ordering::Release);
    }

    /// A fresh LID (its entry is empty until `set`). The root LID is 0 and is
    /// never allocated here.
    pub(crate) fn allocate(&self) -> Lid {
        let mut a = self.alloc.lock();
        if let Some(l) = a.free.pop() {
            return l;
        }
        let lid = Lid(a.next);
        a.next += 1;
        assert!((lid.0 as usize) < MAX_LIDS, "page table full");
        self.ensure_chunk(lid);
        lid
    }

    pub(crate) fn ensure_chunk(&self, lid: Lid) {
        let d = &self.dir[lid.0 as usize >> CHUNK_BITS];
        if d.load(Ordering::Acquire).is_null() {
            let chunk: Box<Chunk> = (0..CHUNK)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect();
            d.store(
                Box::into_raw(chunk) as *mut AtomicPtr<u8>,
                Ordering::Release,
            );
        }
    }

    /// Returns a LID whose entry is empty and unreachable to the free list.
    pub(crate) fn recycle(&self, lid: Lid) {
        debug_assert!(self.get(lid).is_none());
        self.alloc.lock().free.push(lid);
    }

    /// Bytes the table holds: its directory and the chunks allocated.
    pub(crate) fn bytes(&self) -> usize {
        let chunks = self
            .dir
            .iter()
            .filter(|d| !d.load(Ordering::Acquire).is_null())
            .count();
        (DIR + chunks * CHUNK) * std::mem::size_of::<AtomicPtr<u8>>()
    }

    /// Every LID with a buffer: (lid, current buffer).
    pub(crate) fn entries(&self) -> Vec<(Lid, NodePtr)> {
        let next = self.alloc.lock().next;
        (0..next)
            .filter_map(|i| self.get(Lid(i)).map(|p| (Lid(i), p)))
            .collect()
    }
}

impl Drop for PageTable {
    fn drop(&mut self) {
        for d in self.dir.iter() {
            let chunk = d.load(Ordering::Acquire);
            if !chunk.is_null() {
                let raw = std::ptr::slice_from_raw_parts_mut(chunk, CHUNK);
                // SAFETY: allocated by `ensure_chunk` as a boxed slice of CHUNK
                // entries; the table is being dropped, nobody else holds it.
                drop(unsafe { Box::from_raw(raw) });
            }
        }
    }
}
