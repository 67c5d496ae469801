//! Node buffers: the fixed-size byte layout of Honeycomb section 3.1.
//!
//! ```text
//!  0        64         128 (leaf)                        sorted_start        sorted_end        size   node_size
//!  +--------+----------+---------------------------------+-------------------+-----------------+------+
//!  | header | log dir  | shortcut block                  | sorted block      | log block       | free |
//!  |        | (leaves) |                                 |                   | (leaves)        |      |
//!  +--------+----------+---------------------------------+-------------------+-----------------+------+
//! ```
//!
//! The layout is planned in cache lines, because on a CPU a lookup costs
//! about one memory access per distinct line it touches (see docs/design.md,
//! "Node layout for a CPU"):
//!
//! - **Log directory** (leaves, the line after the header): one 6-byte entry
//!   per log item in arrival order: offset, back pointer, a one-byte key
//!   fingerprint, and the order hint with the item's REPLACES/DUP/TOMBSTONE
//!   flags. A point read checks fingerprints and opens only the log items
//!   that match; a scan orders the log from the directory alone. Its entry
//!   count is published in the state word with the size.
//! - **Shortcut block**: groups of up to six shortcuts, one group per line
//!   (six 8-byte key prefixes, then six 2-byte offsets). With more than one
//!   group, a top line before them holds each group's first prefix, so a
//!   search reads the top line, one group line and one segment.
//!
//! This module is the one place raw node bytes are read and written. The
//! invariants that make that sound:
//!
//! 1. A buffer is written only by the thread that allocated it until it is
//!    published (a release store into the page table or an `old` pointer).
//! 2. After publication, header fields other than `state`, `old` and
//!    `replaced_at` never change, and bytes below the published size (the low
//!    24 bits of `state`) never change, except log directory entries at or
//!    past the published log count (bits 24..32). A log append writes its
//!    item beyond the published size and its directory entry past the
//!    published count while holding the node lock, then publishes size and
//!    count with one release store; readers load `state` with acquire and
//!    read only below the size and count they loaded.
//! 3. A buffer is freed only through `tree::reclaim`, after no reader can
//!    reach it (see docs/design.md, "Why reclamation is safe").

use std::alloc::Layout;
#[cfg(not(target_os = "linux"))]
use std::alloc::{alloc_zeroed, dealloc};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::config::{
    CFLAGS_BYTES, Geometry, HEADER_BYTES, ITEM_HEADER_BYTES, LINE_BYTES, LOG_DIR_BYTES,
    LOG_DIR_ENTRY_BYTES, LOG_EXTRA_BYTES, SHORTCUTS_PER_LINE, TTL_BYTES,
};
use crate::types::{Item, ItemView, Now, Version};

/// A logical node id: the index of a page-table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Lid(pub u64);

impl Lid {
    /// "No node": the right sibling of the rightmost leaf.
    pub(crate) const NONE: Lid = Lid(u64::MAX);
    /// The root keeps its LID forever; growth and shrinkage replace its buffer.
    pub(crate) const ROOT: Lid = Lid(0);
}

/// The node header, at offset 0 of every buffer. Its atomics are core atomics
/// on purpose: they live inside raw buffers and need a fixed layout (see
/// `crate::sync` for the schedule points shuttle tests add around them).
#[repr(C)]
pub(crate) struct Header {
    /// Packed: published size (bits 0..24), log directory entries (24..32),
    /// sequence number (32..62), lock bit (62), obsolete bit (63). One word
    /// so that a log append publishes size, entry, sequence and unlock with
    /// a single store.
    pub state: AtomicU64,
    /// The write version that created this buffer.
    pub version: u64,
    /// The buffer this one replaced (the previous version of the node), or null.
    pub old: AtomicPtr<u8>,
    /// The version of the write that replaced this buffer; 0 while current.
    pub replaced_at: AtomicU64,
    pub lid: u64,
    /// Leaf: right sibling LID (`Lid::NONE` if rightmost). Interior: leftmost child.
    pub link: u64,
    /// End of the sorted block (start of the log block).
    pub sorted_end: u32,
    /// 0 for leaves.
    pub level: u8,
    pub flags: u8,
    pub nshortcuts: u16,
    /// Number of items in the sorted block.
    pub nitems: u32,
    /// Offset of the first sorted-block byte (after the shortcut block;
    /// nodes are at most 64 KiB).
    pub sorted_start: u16,
    /// Length of the prefix every sorted-block key shares. Shortcut
    /// prefixes hold the 8 key bytes after it, so they tell keys apart even
    /// when all keys start alike (`user:000000...`).
    pub prefix_skip: u16,
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER_BYTES);

/// Header flag: the node was removed from the tree by the write at `version`;
/// the buffer only anchors the LID's chain of older buffers.
pub(crate) const NODE_DEAD: u8 = 1;
/// Header flag (leaves): some sorted-block item holds its value out of
/// line. Set before the buffer is published; `free` walks the sorted block
/// for values to release only when it is set.
pub(crate) const NODE_EXTERNAL: u8 = 2;
/// Shuttle builds never return buffers to the allocator: `free` sets this
/// flag instead, and every reader access asserts it is clear, so a schedule
/// that lets a reader touch a freed buffer fails deterministically.
#[cfg(feature = "shuttle")]
pub(crate) const NODE_POISONED: u8 = 0x80;

pub(crate) const STATE_LOCKED: u64 = 1 << 62;
pub(crate) const STATE_OBSOLETE: u64 = 1 << 63;
const SEQ_SHIFT: u32 = 32;
const SEQ_MASK: u64 = (1 << 30) - 1;

const LOG_COUNT_SHIFT: u32 = 24;

pub(crate) fn state_size(state: u64) -> usize {
    (state & 0xff_ffff) as usize
}
/// Published log directory entries (log items).
pub(crate) fn state_log_count(state: u64) -> usize {
    ((state >> LOG_COUNT_SHIFT) & 0xff) as usize
}
pub(crate) fn state_seq(state: u64) -> u64 {
    (state >> SEQ_SHIFT) & SEQ_MASK
}
/// The unlocked state word that follows a log append: new size, one more
/// log item, sequence + 1.
pub(crate) fn state_appended(state: u64, new_size: usize) -> u64 {
    let seq = (state_seq(state) + 1) & SEQ_MASK;
    let count = state_log_count(state) as u64 + 1;
    (seq << SEQ_SHIFT) | (count << LOG_COUNT_SHIFT) | new_size as u64
}

// ---- items ------------------------------------------------------------------

/// Item flag: the value lives outside the node (an `Arc<[u8]>` pointer).
pub(crate) const ITEM_EXTERNAL: u8 = 1;
/// Item flag: an expiry time (unix ms) follows the fixed header.
pub(crate) const ITEM_TTL: u8 = 2;
/// Item flag: a delete marker (log block only).
pub(crate) const ITEM_TOMBSTONE: u8 = 4;
/// Log item flag: the back pointer names a sorted item with the same key.
pub(crate) const ITEM_REPLACES: u8 = 8;
/// Log item flag: an earlier log item has the same key (and is not in the
/// sorted block); items with equal keys are adjacent in order-hint order.
pub(crate) const ITEM_DUP: u8 = 16;
/// Item flag: non-zero client flags (4 bytes) follow the expiry, if any.
/// Absent for most items, so they cost nothing when unused.
pub(crate) const ITEM_CFLAGS: u8 = 32;

/// A value as a node stores it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ValueRef<'a> {
    Inline(&'a [u8]),
    /// Data pointer and length of an `Arc<[u8]>` owned by the buffer(s) holding the item.
    External(*const u8, usize),
}

impl<'a> ValueRef<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            ValueRef::Inline(v) => v.len(),
            ValueRef::External(_, n) => *n,
        }
    }

    /// The value's bytes. The returned slice lives as long as the buffer.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        match *self {
            ValueRef::Inline(v) => v,
            // SAFETY: an external pointer comes from `Arc::into_raw` of an
            // `Arc<[u8]>` of exactly this length; the buffer holding the item
            // owns one strong count, so the allocation outlives the buffer,
            // which outlives `self` (invariant 3).
            ValueRef::External(p, n) => unsafe { std::slice::from_raw_parts(p, n) },
        }
    }

    /// An owned handle: zero-copy for external values.
    pub(crate) fn to_bytes(self) -> bytes::Bytes {
        match self {
            ValueRef::Inline(v) => bytes::Bytes::copy_from_slice(v),
            ValueRef::External(p, n) => {
                let raw = ptr::slice_from_raw_parts(p, n);
                // SAFETY: as in `bytes`; we add a strong count for the new owner.
                let arc = unsafe {
                    Arc::increment_strong_count(raw);
                    Arc::from_raw(raw)
                };
                bytes::Bytes::from_owner(arc)
            }
        }
    }
}

/// A decoded leaf item (sorted or log block).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ItemRef<'a> {
    pub flags: u8,
    pub key: &'a [u8],
    pub value: ValueRef<'a>,
    pub version: u64,
    /// Unix ms; 0 = never.
    pub expiry: u64,
    /// Client flags (memcached); 0 = none.
    pub cflags: u32,
    /// Encoded length.
    pub len: u32,
    /// The encoded bytes of a sorted-block item (empty for log items): a
    /// merge copies them as they are.
    pub raw: &'a [u8],
}

impl<'a> ItemRef<'a> {
    pub(crate) fn is_tombstone(&self) -> bool {
        self.flags & ITEM_TOMBSTONE != 0
    }
    /// Live at `now_ms`: not a delete marker and not expired.
    pub(crate) fn is_live(&self, now: &Now) -> bool {
        !self.is_tombstone() && (self.expiry == 0 || self.expiry > now.ms())
    }

    /// The item as a read returns it (key and value copied, or for an
    /// out-of-line value, shared).
    #[inline]
    pub(crate) fn to_item(self) -> Item {
        Item {
            key: bytes::Bytes::copy_from_slice(self.key),
            value: self.value.to_bytes(),
            version: Version(self.version),
            expires_at_ms: (self.expiry != 0).then_some(self.expiry),
            flags: self.cflags,
        }
    }

    /// The item as a visitor sees it, borrowed from the buffer.
    #[inline]
    pub(crate) fn view(&self) -> ItemView<'a> {
        ItemView {
            key: self.key,
            value: self.value.bytes(),
            version: Version(self.version),
            expires_at_ms: (self.expiry != 0).then_some(self.expiry),
            flags: self.cflags,
        }
    }
}

/// Encoded length of a leaf item.
pub(crate) fn item_len(
    key_len: usize,
    value_stored_len: usize,
    ttl: bool,
    cflags: bool,
    log: bool,
) -> usize {
    ITEM_HEADER_BYTES
        + if log { LOG_EXTRA_BYTES } else { 0 }
        + if ttl { TTL_BYTES } else { 0 }
        + if cflags { CFLAGS_BYTES } else { 0 }
        + key_len
        + value_stored_len
}

/// Length and flags byte of the sorted-block item at `offset`, from its
/// fixed header alone (`leaf_item_key` without the key slice).
#[inline(always)]
pub(crate) fn sorted_item_len(buf: &[u8], offset: usize) -> (usize, u8) {
    let (flags, klen, key_from, value_len) = item_head(buf, offset, false);
    (key_from + klen + value_len, flags)
}

fn rd_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes the leaf item at `offset` of `buf` (the published bytes of a node).
#[inline(always)]
pub(crate) fn decode_item(buf: &[u8], offset: usize, log: bool) -> ItemRef<'_> {
    let flags = buf[offset];
    let klen = rd_u16(buf, offset + 1) as usize;
    let vlen = rd_u32(buf, offset + 3) as usize;
    let version = rd_u64(buf, offset + 7);
    let mut at = offset + ITEM_HEADER_BYTES;
    if log {
        at += LOG_EXTRA_BYTES;
    }
    let expiry = if flags & ITEM_TTL != 0 {
        let e = rd_u64(buf, at);
        at += TTL_BYTES;
        e
    } else {
        0
    };
    let cflags = if flags & ITEM_CFLAGS != 0 {
        let c = rd_u32(buf, at);
        at += CFLAGS_BYTES;
        c
    } else {
        0
    };
    let key = &buf[at..at + klen];
    at += klen;
    let value = if flags & ITEM_EXTERNAL != 0 {
        let p = rd_u64(buf, at) as usize as *const u8;
        at += 8;
        ValueRef::External(p, vlen)
    } else {
        let v = &buf[at..at + vlen];
        at += vlen;
        ValueRef::Inline(v)
    };
    ItemRef {
        flags,
        key,
        value,
        version,
        expiry,
        cflags,
        len: (at - offset) as u32,
        raw: if log { &[] } else { &buf[offset..at] },
    }
}

/// Flags, key length, offset of the key from the item's start, and stored
/// value length of the leaf item at `offset`: its fixed fields, in one read.
#[inline(always)]
fn item_head(buf: &[u8], offset: usize, log: bool) -> (u8, usize, usize, usize) {
    let head: &[u8; 7] = buf[offset..offset + 7].try_into().expect("7 bytes");
    let flags = head[0];
    let klen = u16::from_le_bytes([head[1], head[2]]) as usize;
    let key_from = ITEM_HEADER_BYTES
        + if log { LOG_EXTRA_BYTES } else { 0 }
        + if flags & ITEM_TTL != 0 { TTL_BYTES } else { 0 }
        + if flags & ITEM_CFLAGS != 0 {
            CFLAGS_BYTES
        } else {
            0
        };
    let value_len = if flags & ITEM_EXTERNAL != 0 {
        8
    } else {
        u32::from_le_bytes([head[3], head[4], head[5], head[6]]) as usize
    };
    (flags, klen, key_from, value_len)
}

/// The key of the leaf item at `offset` and the item's encoded length,
/// reading only the fixed header (the hot path of segment and log scans).
#[inline(always)]
pub(crate) fn leaf_item_key(buf: &[u8], offset: usize, log: bool) -> (&[u8], usize) {
    let (_, klen, key_from, value_len) = item_head(buf, offset, log);
    let key_at = offset + key_from;
    (&buf[key_at..key_at + klen], key_from + klen + value_len)
}

/// Byte-wise key order, compared eight bytes at a time (keys are short; a
/// libc `memcmp` call costs more than the comparison). Always inlined: the
/// segment scans call it once per item, and the call itself cost more than
/// the first word's compare (batched GET 1,895 -> 1,850 instructions).
#[inline(always)]
pub(crate) fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a, mut b) = (a, b);
    while a.len() >= 8 && b.len() >= 8 {
        let x = u64::from_be_bytes(a[..8].try_into().expect("8 bytes"));
        let y = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        if x != y {
            return x.cmp(&y);
        }
        a = &a[8..];
        b = &b[8..];
    }
    if a.is_empty() || b.is_empty() {
        return a.len().cmp(&b.len());
    }
    // At least one side has fewer than 8 bytes left: compare up to 8 bytes
    // of each, zero padded; if those agree, the shorter key is a prefix of
    // the longer (padding is only ever compared against zero bytes).
    let x = key_prefix(a);
    let y = key_prefix(b);
    if x != y {
        return x.cmp(&y);
    }
    a.len().cmp(&b.len())
}

/// Encodes a leaf item into `out` (exactly `item_len` bytes). An external
/// value's pointer is copied as is: the caller accounts for the strong count.
#[expect(
    clippy::too_many_arguments,
    reason = "the fields of one item, written in one place"
)]
pub(crate) fn encode_item(
    out: &mut [u8],
    flags: u8,
    key: &[u8],
    value: ValueRef<'_>,
    version: u64,
    expiry: u64,
    cflags: u32,
    log: Option<(u32, u8)>,
) -> usize {
    let flags = (flags & !(ITEM_TTL | ITEM_EXTERNAL | ITEM_CFLAGS))
        | if expiry != 0 { ITEM_TTL } else { 0 }
        | if cflags != 0 { ITEM_CFLAGS } else { 0 }
        | if matches!(value, ValueRef::External(..)) {
            ITEM_EXTERNAL
        } else {
            0
        };
    out[0] = flags;
    out[1..3].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[3..7].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[7..15].copy_from_slice(&version.to_le_bytes());
    let mut at = ITEM_HEADER_BYTES;
    if let Some((bp, hint)) = log {
        out[at..at + 4].copy_from_slice(&bp.to_le_bytes());
        out[at + 4] = hint;
        at += LOG_EXTRA_BYTES;
    }
    if expiry != 0 {
        out[at..at + 8].copy_from_slice(&expiry.to_le_bytes());
        at += TTL_BYTES;
    }
    if cflags != 0 {
        out[at..at + 4].copy_from_slice(&cflags.to_le_bytes());
        at += CFLAGS_BYTES;
    }
    out[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    match value {
        ValueRef::Inline(v) => {
            out[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        }
        ValueRef::External(p, _) => {
            out[at..at + 8].copy_from_slice(&(p as usize as u64).to_le_bytes());
            at += 8;
        }
    }
    at
}

/// Interior item: key length, child LID, key.
pub(crate) const INTERIOR_ITEM_FIXED: usize = 10;

#[inline(always)]
pub(crate) fn decode_interior(buf: &[u8], offset: usize) -> (&[u8], Lid, usize) {
    let head: &[u8; INTERIOR_ITEM_FIXED] = buf[offset..offset + INTERIOR_ITEM_FIXED]
        .try_into()
        .expect("fixed fields");
    let klen = u16::from_le_bytes([head[0], head[1]]) as usize;
    let child = u64::from_le_bytes(head[2..].try_into().expect("8 bytes"));
    let key = &buf[offset + INTERIOR_ITEM_FIXED..offset + INTERIOR_ITEM_FIXED + klen];
    (key, Lid(child), INTERIOR_ITEM_FIXED + klen)
}

// ---- buffers ----------------------------------------------------------------

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
#[derive(Debug)]
pub(crate) struct BufferCounter {
    pub live: AtomicUsize,
    node_size: usize,
    arena: parking_lot::Mutex<Arena>,
}

#[derive(Debug, Default)]
struct Arena {
    chunks: Vec<NonNull<u8>>,
    /// Next unused byte of the newest chunk.
    bump: usize,
    free: Vec<NodePtr>,
}

// SAFETY: the chunk pointers are owned allocations, only touched under the
// arena's mutex.
unsafe impl Send for Arena {}

/// Size (and alignment) of an arena chunk: one huge page.
const CHUNK_BYTES: usize = 2 << 20;

fn chunk_layout() -> Layout {
    Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("valid layout")
}

impl BufferCounter {
    pub(crate) fn new(node_size: usize) -> BufferCounter {
        BufferCounter {
            live: AtomicUsize::new(0),
            node_size,
            arena: parking_lot::Mutex::new(Arena {
                bump: CHUNK_BYTES,
                ..Arena::default()
            }),
        }
    }

    /// A buffer from the free list, or carved from a chunk.
    fn take(&self) -> (NodePtr, bool) {
        let mut a = self.arena.lock();
        if let Some(p) = a.free.pop() {
            return (p, true);
        }
        if a.bump + self.node_size > CHUNK_BYTES {
            a.chunks.push(map_chunk());
            a.bump = 0;
        }
        let chunk = *a.chunks.last().expect("a chunk");
        // SAFETY: `bump + node_size <= CHUNK_BYTES`, inside the chunk.
        let p = unsafe { chunk.add(a.bump) };
        // Buffers are one line apart beyond their size, so that the same
        // offset in different nodes (headers, top lines, directories) falls
        // in different cache sets instead of all in the few sets a
        // node-size stride would give them.
        a.bump += self.node_size + LINE_BYTES;
        (NodePtr(p), false)
    }

    #[cfg(not(feature = "shuttle"))]
    fn give_back(&self, p: NodePtr) {
        self.arena.lock().free.push(p);
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

/// Strong counts of out-of-line values that buffers hold (`own_value` takes
/// one per item written, `free` drops them): tests check it returns to zero.
pub(crate) static GLOBAL_EXTERNAL: AtomicUsize = AtomicUsize::new(0);

/// Out-of-line value references held by node buffers of every store in this
/// process (one per item, old buffers included).
pub fn live_external_values_global() -> usize {
    GLOBAL_EXTERNAL.load(Ordering::SeqCst)
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
    /// Allocates a zeroed buffer whose header says: unpublished size
    /// `HEADER_BYTES + shortcut_bytes`, locked (it is unlocked when the write
    /// that made it finishes its structure change).
    pub(crate) fn alloc(g: &Geometry, counter: &BufferCounter) -> NodePtr {
        debug_assert_eq!(g.node_size, counter.node_size);
        counter.live.fetch_add(1, Ordering::Relaxed);
        GLOBAL_LIVE.fetch_add(1, Ordering::Relaxed);
        let (p, reused) = counter.take();
        if reused {
            // SAFETY: a reused buffer is unreachable and owned by this thread
            // now; its bytes are initialised. Reset the header to zero.
            unsafe { std::ptr::write_bytes(p.as_raw(), 0, HEADER_BYTES) };
        }
        p
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
        if h.level == 0 && h.flags & NODE_DEAD == 0 {
            let state = h.state.load(Ordering::Acquire);
            // SAFETY: the buffer is unreachable, so its bytes are stable.
            let buf = unsafe { self.bytes(state_size(state)) };
            let release = |item: ItemRef<'_>| {
                if let ValueRef::External(p, n) = item.value {
                    GLOBAL_EXTERNAL.fetch_sub(1, Ordering::Relaxed);
                    // SAFETY: this buffer owns one strong count of the value.
                    unsafe { Arc::decrement_strong_count(ptr::slice_from_raw_parts(p, n)) };
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
        }
        counter.live.fetch_sub(1, Ordering::Relaxed);
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
            counter.give_back(self);
        }
    }
}

/// Offset of the shortcut block of a node at `level`: after the header, and
/// in leaves after the log directory.
pub(crate) fn shortcut_base(level: u8) -> usize {
    if level == 0 {
        HEADER_BYTES + LOG_DIR_BYTES
    } else {
        HEADER_BYTES
    }
}

/// Offset of the first sorted-block byte of a node at `level`.
pub(crate) fn sorted_start(g: &Geometry, level: u8) -> usize {
    shortcut_base(level) + g.shortcut_bytes
}

/// Offset of the first sorted-block byte of a published buffer.
pub(crate) fn sorted_start_of(h: &Header) -> usize {
    h.sorted_start as usize
}

/// The shortcut block of a node with `n` shortcuts: where its lines are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shortcuts {
    pub base: usize,
    pub n: usize,
}

impl Shortcuts {
    pub(crate) fn of(h: &Header) -> Shortcuts {
        Shortcuts {
            base: shortcut_base(h.level),
            n: h.nshortcuts as usize,
        }
    }

    /// Groups of shortcuts (lines after the top line, if any).
    pub(crate) fn groups(&self) -> usize {
        self.n.div_ceil(SHORTCUTS_PER_LINE)
    }

    /// Whether a top line precedes the groups (more than one group).
    pub(crate) fn has_top(&self) -> bool {
        self.n > SHORTCUTS_PER_LINE
    }

    /// Offset of group `g`'s line.
    pub(crate) fn group_line(&self, g: usize) -> usize {
        self.base + if self.has_top() { LINE_BYTES } else { 0 } + g * LINE_BYTES
    }

    /// Shortcuts in group `g`.
    pub(crate) fn group_len(&self, g: usize) -> usize {
        (self.n - g * SHORTCUTS_PER_LINE).min(SHORTCUTS_PER_LINE)
    }

    /// Group `g`'s line decoded in one read: its prefixes, and the
    /// sorted-block offsets of its segments followed by the group's end
    /// (so segment `i` runs from `offsets[i]` to `offsets[i + 1]`, for `i`
    /// below `group_len`). Entries past `group_len` are meaningless.
    #[inline]
    pub(crate) fn group(&self, buf: &[u8], g: usize) -> GroupLine {
        let at = self.group_line(g);
        let line: &[u8; LINE_BYTES] = buf[at..at + LINE_BYTES].try_into().expect("a whole line");
        let word = |i: usize| u64::from_le_bytes(line[i * 8..i * 8 + 8].try_into().expect("8"));
        let half = |at: usize| u16::from_le_bytes([line[at], line[at + 1]]);
        GroupLine {
            prefixes: std::array::from_fn(word),
            offsets: std::array::from_fn(|i| half(SHORTCUTS_PER_LINE * 8 + i * 2)),
        }
    }

    /// The top line's prefixes (entries past `groups` are meaningless).
    #[inline]
    pub(crate) fn top_prefixes(&self, buf: &[u8]) -> [u64; crate::config::MAX_SHORTCUT_GROUPS] {
        let line = &buf[self.base..self.base + crate::config::MAX_SHORTCUT_GROUPS * 8];
        std::array::from_fn(|i| rd_u64(line, i * 8))
    }

    /// Shortcut `i`: (8-byte key prefix, sorted-block offset).
    pub(crate) fn get(&self, buf: &[u8], i: usize) -> (u64, usize) {
        let line = self.group_line(i / SHORTCUTS_PER_LINE);
        let s = i % SHORTCUTS_PER_LINE;
        (
            rd_u64(buf, line + s * 8),
            rd_u16(buf, line + SHORTCUTS_PER_LINE * 8 + s * 2) as usize,
        )
    }

    /// Writes every shortcut (and the top line) into `out`, the bytes of
    /// an unpublished buffer from offset 0; `sorted_end` ends the last
    /// segment.
    pub(crate) fn write(
        &self,
        out: &mut [u8],
        prefixes: &[u64],
        offsets: &[usize],
        sorted_end: usize,
    ) {
        debug_assert_eq!(prefixes.len(), self.n);
        for g in 0..self.groups() {
            let end = offsets
                .get((g + 1) * SHORTCUTS_PER_LINE)
                .copied()
                .unwrap_or(sorted_end);
            let at = self.group_line(g) + GROUP_END_AT;
            out[at..at + 2].copy_from_slice(&(end as u16).to_le_bytes());
        }
        for (i, (&pre, &off)) in prefixes.iter().zip(offsets).enumerate() {
            let line = self.group_line(i / SHORTCUTS_PER_LINE);
            let s = i % SHORTCUTS_PER_LINE;
            out[line + s * 8..line + s * 8 + 8].copy_from_slice(&pre.to_le_bytes());
            let at = line + SHORTCUTS_PER_LINE * 8 + s * 2;
            out[at..at + 2].copy_from_slice(&(off as u16).to_le_bytes());
            if self.has_top() && s == 0 {
                let t = self.base + (i / SHORTCUTS_PER_LINE) * 8;
                out[t..t + 8].copy_from_slice(&pre.to_le_bytes());
            }
        }
    }
}

/// One group line, decoded (`Shortcuts::group`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupLine {
    pub prefixes: [u64; SHORTCUTS_PER_LINE],
    /// Segment starts, then the group's end.
    pub offsets: [u16; SHORTCUTS_PER_LINE + 1],
}

/// Offset in a group line of its end offset (after six prefixes and six
/// offsets).
const GROUP_END_AT: usize = SHORTCUTS_PER_LINE * 10;
const _: () = assert!(GROUP_END_AT + 2 <= LINE_BYTES);
// `GroupLine::offsets` reads the group end as the entry after the last offset.
const _: () = assert!(GROUP_END_AT == SHORTCUTS_PER_LINE * 8 + SHORTCUTS_PER_LINE * 2);

/// Bytes a search of any node reads first: the header, a leaf's log
/// directory and the shortcut block.
pub(crate) fn head_bytes(g: &Geometry) -> usize {
    HEADER_BYTES + LOG_DIR_BYTES + g.shortcut_bytes
}

/// Asks for the cache line holding `p`.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache lines of `[from, to)` of a buffer, all at once, so
/// that their misses overlap.
#[inline(always)]
pub(crate) fn prefetch_range(base: NodePtr, from: usize, to: usize) {
    let mut at = from & !(LINE_BYTES - 1);
    while at < to {
        prefetch(base.as_raw().wrapping_add(at));
        at += LINE_BYTES;
    }
}

// ---- log directory ----------------------------------------------------------

/// Order-hint bits of a log directory entry's `meta` byte; the rest are flags.
pub(crate) const LOG_META_HINT: u8 = 0x0f;
/// `meta` flag: the log item replaces a sorted item (`ITEM_REPLACES`).
pub(crate) const LOG_META_REPLACES: u8 = 0x10;
/// `meta` flag: an earlier log item has the same key (`ITEM_DUP`).
pub(crate) const LOG_META_DUP: u8 = 0x20;
/// `meta` flag: the log item is a delete marker.
pub(crate) const LOG_META_TOMBSTONE: u8 = 0x40;
/// `meta` flag: the log item holds its value out of line (`free` opens
/// only these log items).
pub(crate) const LOG_META_EXTERNAL: u8 = 0x80;

/// One log directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogDirEntry {
    /// Offset of the log item.
    pub at: u16,
    /// Its back pointer into the sorted block.
    pub bp: u16,
    /// `key_fp` of its key.
    pub fp: u8,
    /// Order hint (low bits) and `LOG_META_*` flags.
    pub meta: u8,
}

impl LogDirEntry {
    pub(crate) fn hint(&self) -> usize {
        (self.meta & LOG_META_HINT) as usize
    }

    pub(crate) fn encode(&self) -> [u8; LOG_DIR_ENTRY_BYTES] {
        let [a0, a1] = self.at.to_le_bytes();
        let [b0, b1] = self.bp.to_le_bytes();
        [a0, a1, b0, b1, self.fp, self.meta]
    }
}

/// Entry `i` of a leaf's log directory (`i` below the published count).
#[inline(always)]
pub(crate) fn log_dir_entry(buf: &[u8], i: usize) -> LogDirEntry {
    let at = HEADER_BYTES + i * LOG_DIR_ENTRY_BYTES;
    // The whole entry in one read (one bounds check).
    let e: &[u8; LOG_DIR_ENTRY_BYTES] = buf[at..at + LOG_DIR_ENTRY_BYTES]
        .try_into()
        .expect("entry bytes");
    LogDirEntry {
        at: u16::from_le_bytes([e[0], e[1]]),
        bp: u16::from_le_bytes([e[2], e[3]]),
        fp: e[4],
        meta: e[5],
    }
}

/// The key fingerprint of log directory entry `i` (the only byte a point
/// read needs from entries that do not match).
#[inline]
pub(crate) fn log_dir_fp(buf: &[u8], i: usize) -> u8 {
    buf[HEADER_BYTES + i * LOG_DIR_ENTRY_BYTES + 4]
}

/// A one-byte fingerprint of a key for the log directory: a multiplicative
/// hash of its 8-byte words, top byte.
#[inline]
pub(crate) fn key_fp(key: &[u8]) -> u8 {
    let mut h = (key.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    (h >> 56) as u8
}

/// The shared prefix length a node records (`Header::prefix_skip`) for keys
/// running from `first` to `last`: their common prefix if it is at least
/// `MIN_PREFIX_SKIP` bytes, else 0. A short shared prefix still leaves most
/// of the 8 shortcut bytes to tell keys apart, and skipping costs the search
/// a look at the node's first key (one more cache line).
pub(crate) fn prefix_skip(first: &[u8], last: &[u8]) -> usize {
    let n = first.iter().zip(last).take_while(|(x, y)| x == y).count();
    if n >= MIN_PREFIX_SKIP { n } else { 0 }
}

const MIN_PREFIX_SKIP: usize = 4;

/// The first 8 bytes of a key as a big-endian integer (zero padded), so that
/// integer order agrees with byte order wherever prefixes differ.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    // Shorter keys: a 4-, 2- and 1-byte read as the length's bits say (a
    // variable-length copy is a libc call, a byte loop up to seven steps).
    let n = key.len();
    let (mut p, mut at) = (0u64, 0);
    if n & 4 != 0 {
        p = u64::from(u32::from_be_bytes(key[..4].try_into().expect("4 bytes"))) << 32;
        at = 4;
    }
    if n & 2 != 0 {
        let half = u16::from_be_bytes(key[at..at + 2].try_into().expect("2 bytes"));
        p |= u64::from(half) << (48 - 8 * at);
        at += 2;
    }
    if n & 1 != 0 {
        p |= u64::from(key[at]) << (56 - 8 * at);
    }
    p
}

#[cfg(test)]
mod key_order_tests {
    use proptest::prelude::*;

    use super::{key_cmp, key_prefix};

    /// Short keys drawn from a tiny alphabet, so that shared prefixes, zero
    /// bytes and one key being a prefix of the other all come up often.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', 0xff]), 0..20)
    }

    proptest! {
        #[test]
        fn key_cmp_is_byte_order(a in key(), b in key()) {
            prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
        }

        #[test]
        fn key_prefix_is_the_zero_padded_big_endian_head(a in key()) {
            let mut head = [0u8; 8];
            let n = a.len().min(8);
            head[..n].copy_from_slice(&a[..n]);
            prop_assert_eq!(key_prefix(&a), u64::from_be_bytes(head));
        }

        #[test]
        fn key_prefix_order_agrees_with_key_order(a in key(), b in key()) {
            let (pa, pb) = (key_prefix(&a), key_prefix(&b));
            if pa != pb {
                prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
            }
        }
    }
}
