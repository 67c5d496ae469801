//! The page table: LID -> current buffer (Honeycomb section 3.1). Replacing a
//! node is one release store into its entry. Two levels of lazily allocated
//! chunks, so readers never lock and entries never move.
//!
//! The directory of chunks starts small and doubles as LIDs are allocated,
//! so an empty store costs one chunk, not a directory sized for 2^28 LIDs
//! (512 KiB, when a node holds a store per range). A grown directory is a
//! copy, published with one pointer that carries its length too; the old
//! one is kept until the table drops, since a reader may still be looking
//! through it, and its entries stay valid (chunks never move). The
//! directories' sizes sum below twice the largest.

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

/// Entries of a new table's directory: 16 chunks, 2^16 LIDs (512 MiB of
/// 8 KiB nodes) before it first grows.
const FIRST_DIR: usize = 16;

type Chunk = [AtomicPtr<u8>];

/// A directory: the chunks' addresses, and (through the boxed slice) how
/// many it has, read together through one pointer.
struct Dir {
    chunks: Box<[AtomicPtr<AtomicPtr<u8>>]>,
}

/// Most LIDs a store can name at once (2^28 with the default build: 2 TiB of 8 KiB nodes).
pub(crate) const MAX_LIDS: usize = CHUNK * DIR;

pub(crate) struct PageTable {
    /// The current directory (owned by `alloc.dirs`).
    dir: AtomicPtr<Dir>,
    alloc: Mutex<LidAlloc>,
}

struct LidAlloc {
    next: u64,
    free: Vec<Lid>,
    /// Every directory the table has had, the current one last; the only
    /// owner of their memory. Boxed: `PageTable::dir` points at one, which
    /// must not move when the vector grows.
    #[allow(clippy::vec_box)]
    dirs: Vec<Box<Dir>>,
}

fn new_dir(len: usize) -> Box<Dir> {
    Box::new(Dir {
        chunks: (0..len)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect(),
    })
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
        let first = new_dir(FIRST_DIR.min(DIR));
        PageTable {
            dir: AtomicPtr::new(&*first as *const Dir as *mut Dir),
            alloc: Mutex::new(LidAlloc {
                next: 1,
                free: Vec::new(),
                dirs: vec![first],
            }),
        }
    }

    /// The directory entry of chunk `c`, if the directory reaches it.
    fn dir_entry(&self, c: usize) -> Option<&AtomicPtr<AtomicPtr<u8>>> {
        // SAFETY: `dir` always points at a directory that `alloc.dirs` owns
        // until the table drops (a replaced one is kept, not freed), and a
        // directory never changes its length.
        let dir = unsafe { &*self.dir.load(Ordering::Acquire) };
        dir.chunks.get(c)
    }

    /// Entries of the current directory.
    #[cfg(test)]
    fn dir_len(&self) -> usize {
        self.alloc.lock().dirs.last().map_or(0, |d| d.chunks.len())
    }

    fn slot(&self, lid: Lid) -> Option<&AtomicPtr<u8>> {
        let i = lid.0 as usize;
        let chunk = self.dir_entry(i >> CHUNK_BITS)?.load(Ordering::Acquire);
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
        self.ensure_chunk_locked(&mut a, lid);
        lid
    }

    /// Makes `lid`'s entry exist (empty until `set`).
    pub(crate) fn ensure_chunk(&self, lid: Lid) {
        let mut a = self.alloc.lock();
        self.ensure_chunk_locked(&mut a, lid);
    }

    fn ensure_chunk_locked(&self, a: &mut LidAlloc, lid: Lid) {
        let c = lid.0 as usize >> CHUNK_BITS;
        let old = &a.dirs.last().expect("a first directory").chunks;
        if c >= old.len() {
            let grown = new_dir((c + 1).next_power_of_two().clamp(old.len() * 2, DIR));
            for (to, from) in grown.chunks.iter().zip(old.iter()) {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            // Released with the copied entries: a reader that sees the new
            // directory sees them.
            self.dir
                .store(&*grown as *const Dir as *mut Dir, Ordering::Release);
            a.dirs.push(grown);
        }
        let d = &a.dirs.last().expect("grown above").chunks[c];
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

    /// Bytes the table holds: its directories (every one it has had: a
    /// replaced one is kept) and the chunks allocated.
    pub(crate) fn bytes(&self) -> usize {
        let a = self.alloc.lock();
        let dirs: usize = a.dirs.iter().map(|d| d.chunks.len()).sum();
        let chunks = a.dirs.last().map_or(0, |d| {
            d.chunks
                .iter()
                .filter(|c| !c.load(Ordering::Acquire).is_null())
                .count()
        });
        (dirs + chunks * CHUNK) * std::mem::size_of::<AtomicPtr<u8>>()
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
        let dirs = std::mem::take(&mut self.alloc.lock().dirs);
        for d in dirs.last().into_iter().flat_map(|d| d.chunks.iter()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake buffer address for `lid` (never dereferenced).
    fn addr(lid: Lid) -> NodePtr {
        NodePtr::from_raw(((lid.0 as usize + 1) * 64) as *mut u8).unwrap()
    }

    #[test]
    fn the_directory_starts_small_and_grows_to_every_lid_allocated() {
        let t = PageTable::new();
        t.ensure_chunk(Lid::ROOT);
        assert_eq!(t.dir_len(), FIRST_DIR);
        // Past the first directory three times over: it grows by doubling.
        let n = (FIRST_DIR * 3 + 1) * CHUNK;
        let lids: Vec<Lid> = (0..n).map(|_| t.allocate()).collect();
        for &l in &lids {
            t.set(l, Some(addr(l)));
        }
        assert_eq!(t.dir_len(), FIRST_DIR * 4);
        assert_eq!(t.alloc.lock().dirs.len(), 3);
        for &l in &lids {
            assert_eq!(t.get(l), Some(addr(l)));
        }
        // A LID past the directory has no entry.
        assert_eq!(t.get(Lid((FIRST_DIR * 4 * CHUNK) as u64)), None);
        assert_eq!(t.entries().len(), n);
        for &l in &lids {
            t.set(l, None);
        }
    }

    /// Readers look up LIDs published before them while a writer allocates
    /// through several growths of the directory: each is found.
    #[cfg(not(feature = "shuttle"))]
    #[test]
    fn readers_find_every_published_lid_while_the_directory_grows() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicU64;
        let t = Arc::new(PageTable::new());
        let published = Arc::new(AtomicU64::new(0));
        let n = (FIRST_DIR * 8) * CHUNK;
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (t, published) = (t.clone(), published.clone());
                std::thread::spawn(move || {
                    let mut i = r as u64;
                    loop {
                        let upto = published.load(Ordering::Acquire);
                        if upto > 0 {
                            let l = Lid(1 + (i * 7919) % upto);
                            assert_eq!(t.get(l), Some(addr(l)), "lid {} of {upto}", l.0);
                        }
                        if upto as usize == n {
                            break;
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        for _ in 0..n {
            let l = t.allocate();
            t.set(l, Some(addr(l)));
            published.store(l.0, Ordering::Release);
        }
        for r in readers {
            r.join().unwrap();
        }
        for i in 1..=n as u64 {
            t.set(Lid(i), None);
        }
    }

    /// The same under shuttle's schedules, a lookup ahead of publication
    /// included. Run: `cargo test -p combkv --features shuttle --lib shuttle_`.
    #[cfg(feature = "shuttle")]
    #[test]
    fn shuttle_lookups_across_a_directory_growth() {
        use shuttle::sync::Arc;
        use shuttle::thread;
        shuttle::check_pct(
            || {
                let t = Arc::new(PageTable::new());
                // Fill the first directory but for the last LID, so the
                // writer's few allocations below grow it.
                let before = FIRST_DIR * CHUNK - 2;
                for _ in 0..before {
                    let l = t.allocate();
                    t.set(l, Some(addr(l)));
                }
                let published = Arc::new(crate::sync::AtomicU64::new(before as u64));
                let writer = {
                    let (t, published) = (t.clone(), published.clone());
                    thread::spawn(move || {
                        for _ in 0..3 {
                            let l = t.allocate();
                            t.set(l, Some(addr(l)));
                            published.store(l.0, Ordering::Release);
                        }
                    })
                };
                // The first LID of the grown part, looked up before it is
                // published, as a speculative prefetch of a LID read from a
                // node being rewritten may: no entry, or its own.
                let ahead = Lid((FIRST_DIR * CHUNK) as u64);
                for _ in 0..4 {
                    let upto = published.load(Ordering::Acquire);
                    for l in [upto, upto.saturating_sub(CHUNK as u64)] {
                        assert_eq!(t.get(Lid(l)), Some(addr(Lid(l))));
                    }
                    let got = t.get(ahead);
                    assert!(got.is_none() || got == Some(addr(ahead)), "{got:?}");
                    thread::yield_now();
                }
                writer.join().unwrap();
                assert!(t.dir_len() > FIRST_DIR);
                for i in 1..=(before as u64 + 3) {
                    t.set(Lid(i), None);
                }
            },
            2000,
            3,
        );
    }
}
