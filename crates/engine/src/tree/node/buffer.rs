//! Node memory: buffers carved from huge-page chunks, reused through a
//! free list, and `NodePtr`, the accessors of one buffer.

use std::alloc::Layout;
#[cfg(not(target_os = "linux"))]
use std::alloc::{alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(feature = "shuttle")]
use super::header::NODE_POISONED;
use super::header::{Header, NODE_DEAD, NODE_EXTERNAL, state_log_count, state_size};
use super::item::{ItemRef, ValueRef, decode_item};
use super::log_block::{LOG_META_EXTERNAL, LogDirEntry, log_dir_entry};
use super::value;
use crate::config::{Geometry, HEADER_BYTES, LINE_BYTES, LOG_DIR_ENTRY_BYTES};
use crate::tree::count::ShardedCount;

/// A store's node buffers: where they come from, how many are live, and the
/// freed ones kept for reuse.
///
/// Buffers are carved from 2 MiB-aligned chunks advised as transparent huge
/// pages (`MADV_HUGEPAGE`): a read touches a page-table entry and a few
/// lines of each node on its path, and with 4 KiB pages nearly every one of
/// those is also a TLB miss (see docs/design.md, "Node memory"). Freed
/// buffers go to a free list and are reused (an 8 KiB malloc/free per merge
/// was ~15% of insert time); chunks return to the system when the store is
/// dropped. A reused buffer holds initialised bytes from its previous life:
/// `alloc` rewrites the header, and every other byte is written before it
/// is read.
///
/// Size classes: a buffer is as long as what its node needs, rounded up to
/// a 32nd of the node size (`class_unit`), not a whole node. A
/// node is never written past what it was built with except by log
/// appends, and those stay within `Geometry::log_bytes` past the sorted
/// block, so a leaf is allocated with exactly that room behind its items
/// and a leaf that is 70% full (what random inserts leave) takes 70% of a
/// node plus its log room, not all of it (docs/experiments.md, "Bytes per
/// record"). Each class has its own free list; the header records the
/// class (`Header::class`), which `free` and the append check read.
#[derive(Debug)]
pub(crate) struct BufferCounter {
    pub live: AtomicUsize,
    /// Bytes of the live buffers (each its class's size).
    live_bytes: AtomicUsize,
    /// Bytes of the out-of-line values the live buffers reference, each
    /// counted once (`value::allocation_bytes`): with `live_bytes`, what
    /// the store holds (`Store::memory`). Added when a
    /// write creates a value, taken away when the last buffer referencing
    /// it is freed; sharded, since every write of a long value adds to it.
    pub external_bytes: ShardedCount,
    node_size: usize,
    arena: parking_lot::Mutex<Arena>,
}

#[derive(Debug, Default)]
struct Arena {
    chunks: Vec<NonNull<u8>>,
    /// Next unused byte of the newest chunk.
    bump: usize,
    /// Bytes of the buffers carved so far (without the lines between them).
    carved: usize,
    /// Freed buffers by size class (index `class - 1`).
    free: [Vec<NodePtr>; SIZE_CLASSES],
}

/// What the arena holds (`BufferCounter::arena_bytes`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArenaBytes {
    /// Chunks mapped.
    pub mapped: u64,
    /// Buffers carved from them, live or free.
    pub carved: u64,
    /// Freed buffers waiting for reuse.
    pub free: u64,
}

// SAFETY: the chunk pointers are owned allocations, only touched under the
// arena's mutex.
unsafe impl Send for Arena {}

/// Size (and alignment) of an arena chunk: one huge page.
const CHUNK_BYTES: usize = 2 << 20;

/// Most buffer size classes: class `c` (from 1) is `c` units of
/// `class_unit` bytes, up to the node size. A 32nd of the node wastes half
/// of one (128 B of an 8 KiB node) per buffer on average; 16 classes
/// measured 2 B/record more (docs/experiments.md, "Bytes per record").
pub(crate) const SIZE_CLASSES: usize = 32;

/// Bytes of one size-class unit: a 32nd of the node, and at least a cache
/// line, so that every buffer starts on a line (1 KiB and 2 KiB nodes have
/// 16 and 32 lines, so fewer classes).
pub(crate) fn class_unit(node_size: usize) -> usize {
    (node_size / SIZE_CLASSES).max(LINE_BYTES)
}

fn chunk_layout() -> Layout {
    Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("valid layout")
}

impl BufferCounter {
    pub(crate) fn new(node_size: usize) -> BufferCounter {
        BufferCounter {
            live: AtomicUsize::new(0),
            live_bytes: AtomicUsize::new(0),
            external_bytes: ShardedCount::default(),
            node_size,
            arena: parking_lot::Mutex::new(Arena {
                bump: CHUNK_BYTES,
                ..Arena::default()
            }),
        }
    }

    /// The smallest size class of at least `bytes` bytes.
    pub(crate) fn class_for(&self, bytes: usize) -> u8 {
        assert!(bytes <= self.node_size, "a buffer is at most a node");
        let unit = class_unit(self.node_size);
        bytes.div_ceil(unit).clamp(1, self.node_size / unit) as u8
    }

    /// Bytes of a buffer of size class `class`.
    pub(crate) fn class_bytes(&self, class: u8) -> usize {
        class as usize * class_unit(self.node_size)
    }

    /// A buffer of size class `class` or larger and its class: the
    /// smallest freed one that is large enough, or one carved from a chunk.
    /// A larger freed buffer is taken whole rather than carving a new one:
    /// random inserts fill leaves in waves, so the classes in demand move
    /// while the freed buffers of the last wave wait in other classes
    /// (docs/experiments.md, "Bytes per record"), and a leaf holds its
    /// buffer only until its next merge.
    fn take(&self, class: u8) -> (NodePtr, u8, bool) {
        let mut a = self.arena.lock();
        for c in class..=(self.node_size / class_unit(self.node_size)) as u8 {
            if let Some(p) = a.free[c as usize - 1].pop() {
                return (p, c, true);
            }
        }
        let bytes = self.class_bytes(class);
        if a.bump + bytes > CHUNK_BYTES {
            a.chunks.push(map_chunk());
            a.bump = 0;
        }
        let chunk = *a.chunks.last().expect("a chunk");
        // SAFETY: `bump + bytes <= CHUNK_BYTES`, inside the chunk.
        let p = unsafe { chunk.add(a.bump) };
        // Buffers are one line apart beyond their size, so that the same
        // offset in different nodes (headers, top lines, directories) falls
        // in different cache sets instead of all in the few sets a
        // node-size stride would give them.
        a.bump += bytes + LINE_BYTES;
        a.carved += bytes;
        debug_assert_eq!(
            p.as_ptr() as usize % LINE_BYTES,
            0,
            "buffers start on a line"
        );
        (NodePtr(p), class, false)
    }

    /// Bytes of the buffers allocated and not freed.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed) as u64
    }

    /// Mapped, carved and free bytes of the arena.
    pub(crate) fn arena_bytes(&self) -> ArenaBytes {
        let a = self.arena.lock();
        ArenaBytes {
            mapped: (a.chunks.len() * CHUNK_BYTES) as u64,
            carved: a.carved as u64,
            free: (1..=SIZE_CLASSES)
                .map(|c| (a.free[c - 1].len() * self.class_bytes(c as u8)) as u64)
                .sum(),
        }
    }

    #[cfg(not(feature = "shuttle"))]
    fn give_back(&self, p: NodePtr, class: u8) {
        self.arena.lock().free[class as usize - 1].push(p);
    }
}

/// A fresh, zeroed, 2 MiB-aligned chunk. On Linux it is mapped directly and
/// advised as a huge page before anything touches it (memory from `malloc`
/// may already be faulted in as 4 KiB pages).
fn map_chunk() -> NonNull<u8> {
    #[cfg(target_os = "linux")]
    {
        let len = 2 * CHUNK_BYTES;
        // SAFETY: an anonymous private mapping; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(chunk_layout());
        }
        let base = raw as usize;
        let aligned = (base + CHUNK_BYTES - 1) & !(CHUNK_BYTES - 1);
        // SAFETY: the head and tail lie inside the mapping made above and
        // outside the aligned chunk kept; advice does not change contents.
        unsafe {
            if aligned > base {
                libc::munmap(raw, aligned - base);
            }
            let tail = aligned + CHUNK_BYTES;
            if base + len > tail {
                libc::munmap(tail as *mut libc::c_void, base + len - tail);
            }
            libc::madvise(
                aligned as *mut libc::c_void,
                CHUNK_BYTES,
                libc::MADV_HUGEPAGE,
            );
        }
        NonNull::new(aligned as *mut u8).expect("mmap returns non-null")
    }
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: non-zero size.
        let raw = unsafe { alloc_zeroed(chunk_layout()) };
        NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(chunk_layout()))
    }
}

impl Drop for BufferCounter {
    fn drop(&mut self) {
        for c in self.arena.get_mut().chunks.drain(..) {
            // SAFETY: mapped (or allocated) by `map_chunk`; every buffer in it
            // is unreachable once the store is dropped.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(c.as_ptr().cast(), CHUNK_BYTES);
            }
            // SAFETY: as above, allocated with this layout.
            #[cfg(not(target_os = "linux"))]
            unsafe {
                dealloc(c.as_ptr(), chunk_layout())
            };
        }
    }
}

static GLOBAL_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Node buffers allocated by every store in this process and not yet freed.
pub fn live_buffers_global() -> usize {
    GLOBAL_LIVE.load(Ordering::SeqCst)
}

/// Out-of-line values that node buffers of every store in this process
/// hold (old buffers included; a value shared by several buffers counts
/// once): tests check it returns to zero once the stores are dropped.
pub fn live_external_values_global() -> usize {
    value::held_globally()
}

/// A pointer to a node buffer. Copyable; the reclamation protocol, not the
/// type, decides when it may be dereferenced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct NodePtr(NonNull<u8>);

// SAFETY: a node buffer is shared memory whose concurrent access follows
// invariants 1-3 of this module; the pointer itself carries no thread affinity.
unsafe impl Send for NodePtr {}
// SAFETY: as above.
unsafe impl Sync for NodePtr {}

impl NodePtr {
    /// Allocates a buffer of at least `bytes` bytes (its size class's
    /// size, `capacity`) whose header is zeroed but for its class; the
    /// builder that asked for it fills in the rest before publishing it.
    pub(crate) fn alloc(g: &Geometry, counter: &BufferCounter, bytes: usize) -> NodePtr {
        debug_assert_eq!(g.node_size, counter.node_size);
        let (p, class, reused) = counter.take(counter.class_for(bytes.max(HEADER_BYTES)));
        counter.live.fetch_add(1, Ordering::Relaxed);
        counter
            .live_bytes
            .fetch_add(counter.class_bytes(class), Ordering::Relaxed);
        GLOBAL_LIVE.fetch_add(1, Ordering::Relaxed);
        if reused {
            // SAFETY: a reused buffer is unreachable and owned by this thread
            // now; its bytes are initialised. Reset the header to zero.
            unsafe { std::ptr::write_bytes(p.as_raw(), 0, HEADER_BYTES) };
        }
        // SAFETY: unpublished, owned by this thread (a fresh chunk is zeroed
        // by the system).
        unsafe { p.header_mut() }.class = class;
        p
    }

    /// Bytes of the buffer: its size class's size. Nothing is ever written
    /// at or past it.
    pub(crate) fn capacity(&self, g: &Geometry) -> usize {
        self.header().class as usize * class_unit(g.node_size)
    }

    /// A placeholder that is never dereferenced (fills unused path slots).
    pub(crate) fn dangling() -> NodePtr {
        NodePtr(NonNull::dangling())
    }

    pub(crate) fn as_raw(self) -> *mut u8 {
        self.0.as_ptr()
    }

    pub(crate) fn from_raw(p: *mut u8) -> Option<NodePtr> {
        NonNull::new(p).map(NodePtr)
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: every buffer starts with a `Header` (64-byte aligned, zeroed
        // then initialised before publication). Non-atomic fields are only
        // written before publication (invariant 1-2), so shared reads are sound.
        unsafe { &*(self.0.as_ptr() as *const Header) }
    }

    /// Mutable header of a buffer this thread is still building.
    ///
    /// # Safety
    /// The buffer must be unpublished (invariant 1).
    #[expect(
        clippy::mut_from_ref,
        reason = "unpublished buffer, exclusive by invariant 1"
    )]
    pub(crate) unsafe fn header_mut(&self) -> &mut Header {
        // SAFETY: unpublished, so this thread has exclusive access.
        unsafe { &mut *(self.0.as_ptr() as *mut Header) }
    }

    /// The bytes `[0, size)` of the buffer, where `size` is a published size
    /// (or any size for an unpublished buffer owned by this thread).
    ///
    /// # Safety
    /// `size` must not exceed a size loaded from this buffer's `state` (or the
    /// buffer is owned); the buffer must stay allocated for `'a` (the caller
    /// is pinned, invariant 3).
    pub(crate) unsafe fn bytes<'a>(self, size: usize) -> &'a [u8] {
        // SAFETY: bytes below a published size never change (invariant 2).
        // The header words inside this range are atomics; they are only read
        // through `header()`, never through this slice.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), size) }
    }

    /// Mutable bytes `[from, to)` of the buffer.
    ///
    /// # Safety
    /// Either the buffer is unpublished and owned by this thread, or the caller
    /// holds the node lock and `from` is at or beyond the published size
    /// (invariant 2: no reader reads there).
    #[expect(clippy::mut_from_ref, reason = "disjoint ranges, see invariant 2")]
    pub(crate) unsafe fn bytes_mut(&self, from: usize, to: usize) -> &mut [u8] {
        // SAFETY: per the contract, nobody else reads or writes these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr().add(from), to - from) }
    }

    /// Writes log directory entry `i` of a leaf.
    ///
    /// # Safety
    /// The caller holds the leaf's lock and `i` is its published log count
    /// (invariant 2: no reader reads entries at or past that count), or the
    /// buffer is unpublished and owned by this thread.
    pub(crate) unsafe fn write_log_dir_entry(&self, i: usize, e: LogDirEntry) {
        debug_assert!(self.is_leaf() && i < crate::config::LOG_DIR_MAX);
        let at = HEADER_BYTES + i * LOG_DIR_ENTRY_BYTES;
        // SAFETY: per the contract, nobody else reads or writes these bytes.
        unsafe { self.bytes_mut(at, at + LOG_DIR_ENTRY_BYTES) }.copy_from_slice(&e.encode());
    }

    pub(crate) fn load_state(&self) -> u64 {
        crate::sync::schedule_point();
        let state = self.header().state.load(Ordering::Acquire);
        self.assert_alive();
        state
    }

    /// Shuttle builds: panics if the buffer was freed (see `NODE_POISONED`).
    #[inline(always)]
    fn assert_alive(&self) {
        #[cfg(feature = "shuttle")]
        assert!(
            self.poison_flag() & NODE_POISONED == 0,
            "read of a freed node buffer"
        );
    }

    #[cfg(feature = "shuttle")]
    fn poison_flag(&self) -> u8 {
        // SAFETY: shuttle builds never deallocate buffers, so the flags byte
        // stays readable; it is written only by `free`, and shuttle runs one
        // thread at a time.
        unsafe { std::ptr::read_volatile(&self.header().flags) }
    }

    pub(crate) fn version(&self) -> u64 {
        crate::sync::schedule_point();
        self.assert_alive();
        self.header().version
    }

    pub(crate) fn old(&self) -> Option<NodePtr> {
        crate::sync::schedule_point();
        let old = NodePtr::from_raw(self.header().old.load(Ordering::Acquire));
        self.assert_alive();
        old
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.header().level == 0
    }

    /// Frees the buffer and drops the strong counts its external values hold.
    ///
    /// # Safety
    /// No thread can reach the buffer any more (invariant 3), and it is freed once.
    pub(crate) unsafe fn free(self, g: &Geometry, counter: &BufferCounter) {
        let h = self.header();
        let class = h.class;
        if h.level == 0 && h.flags & NODE_DEAD == 0 {
            let state = h.state.load(Ordering::Acquire);
            // SAFETY: the buffer is unreachable, so its bytes are stable.
            let buf = unsafe { self.bytes(state_size(state)) };
            let mut released = 0u64;
            let mut release = |item: ItemRef<'_>| {
                if let ValueRef::External(p, n) = item.value {
                    // SAFETY: this buffer owns one reference to the value.
                    if unsafe { value::release(p, n) } {
                        released += value::allocation_bytes(n);
                    }
                }
            };
            // Only items flagged as holding a value out of line are opened:
            // the buffer is cold by now, and most hold none.
            if h.flags & NODE_EXTERNAL != 0 {
                let mut at = h.sorted_start as usize;
                while at < h.sorted_end as usize {
                    let item = decode_item(buf, at, false);
                    at += item.len as usize;
                    release(item);
                }
            }
            for i in 0..state_log_count(state) {
                let e = log_dir_entry(buf, i);
                if e.meta & LOG_META_EXTERNAL != 0 {
                    release(decode_item(buf, e.at as usize, true));
                }
            }
            counter.external_bytes.add(-(released as i64));
        }
        counter.live.fetch_sub(1, Ordering::Relaxed);
        counter
            .live_bytes
            .fetch_sub(counter.class_bytes(class), Ordering::Relaxed);
        GLOBAL_LIVE.fetch_sub(1, Ordering::Relaxed);
        #[cfg(feature = "shuttle")]
        {
            let _ = g;
            // SAFETY: the buffer is unreachable (the property under test);
            // the flags byte is written in place of deallocation.
            unsafe {
                std::ptr::write_volatile(
                    &raw mut (*(self.0.as_ptr() as *mut Header)).flags,
                    NODE_POISONED,
                )
            };
        }
        #[cfg(not(feature = "shuttle"))]
        {
            let _ = g;
            counter.give_back(self, class);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BufferCounter, SIZE_CLASSES, class_unit};
    use crate::config::LINE_BYTES;

    /// The class of a size is the smallest that holds it, for every size
    /// up to a node: one unit less would not hold it. Units are whole
    /// lines, so buffers start on lines.
    #[test]
    fn class_for_is_the_smallest_class_that_holds_the_bytes() {
        for node in [1024, 2048, 8192, 65536] {
            let c = BufferCounter::new(node);
            let classes = node / class_unit(node);
            assert!(classes <= SIZE_CLASSES && class_unit(node).is_multiple_of(LINE_BYTES));
            for bytes in 1..=node {
                let class = c.class_for(bytes);
                assert!((1..=classes as u8).contains(&class));
                assert!(c.class_bytes(class) >= bytes, "{node} {bytes}");
                assert!(
                    class == 1 || c.class_bytes(class - 1) < bytes,
                    "{node} {bytes}"
                );
            }
            assert_eq!(c.class_bytes(classes as u8), node);
        }
    }
}
