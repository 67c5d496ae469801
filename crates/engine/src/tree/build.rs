//! Writing fresh node buffers: a merge or split lays items out into a sorted
//! block and picks the shortcut keys (Honeycomb section 3.4, "Sorted and log
//! block merge").

use std::sync::atomic::Ordering;

use super::node::{
    self, BufferCounter, INTERIOR_ITEM_FIXED, Lid, NodePtr, STATE_LOCKED, ValueRef, encode_item,
    item_len, key_prefix, leaf_item_key,
};
use crate::config::{Geometry, MAX_SHORTCUT_GROUPS, SHORTCUTS_PER_LINE};

/// A leaf item on its way into a new buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<'a> {
    pub key: &'a [u8],
    /// `Inline` values longer than the inline limit are moved out of line
    /// when written; `External` values are shared with the source buffer.
    pub value: ValueRef<'a>,
    pub version: u64,
    pub expiry: u64,
    /// Client flags; 0 = none.
    pub cflags: u32,
    /// The entry's encoding in a sorted block it comes from unchanged (else
    /// empty): copied as is.
    pub raw: &'a [u8],
}

impl Entry<'_> {
    /// Bytes this entry takes in a sorted block.
    pub(crate) fn sorted_len(&self, g: &Geometry) -> usize {
        if !self.raw.is_empty() {
            return self.raw.len();
        }
        item_len(
            self.key.len(),
            self.value.len(),
            out_of_line(g, self.value),
            self.version,
            self.expiry != 0,
            self.cflags != 0,
            false,
        )
    }
}

/// Whether a node stores the value out of line.
pub(crate) fn out_of_line(g: &Geometry, v: ValueRef<'_>) -> bool {
    !matches!(v, ValueRef::Inline(b) if b.len() <= g.inline_value_max)
}

/// The value as the node will store it, and the bytes it adds to what the
/// store holds (`BufferCounter::external_bytes`, which the caller adds):
/// an inline value is in the node; a long one gets an allocation of its
/// own, counted once; an external one gains a reference, counted already.
#[inline(always)]
pub(crate) fn own_value<'a>(g: &Geometry, v: ValueRef<'a>) -> (ValueRef<'a>, u64) {
    match v {
        // Most writes: nothing to do, and nothing out of line on the path.
        ValueRef::Inline(b) if b.len() <= g.inline_value_max => (v, 0),
        _ => own_out_of_line(v),
    }
}

/// `own_value` of a value that is or becomes out of line.
fn own_out_of_line(v: ValueRef<'_>) -> (ValueRef<'_>, u64) {
    match v {
        ValueRef::Inline(b) => {
            let p = node::value::create(b);
            (
                ValueRef::External(p, b.len()),
                node::value::allocation_bytes(b.len()),
            )
        }
        ValueRef::External(p, n) => {
            // SAFETY: `p` names a live value referenced by the source
            // buffer, which the caller keeps reachable while building.
            unsafe { node::value::share(p, n) };
            (v, 0)
        }
    }
}

/// An interior entry: the separator key (ignored for the first entry, whose
/// child becomes the leftmost child) and the child.
#[derive(Clone, Debug)]
pub(crate) struct Child<'a> {
    /// Borrowed from a buffer the writer holds (or the written key).
    pub key: &'a [u8],
    pub lid: Lid,
}

pub(crate) fn interior_item_len(key: &[u8]) -> usize {
    INTERIOR_ITEM_FIXED + key.len()
}

/// Segment starts: indexes of the items that begin a shortcut segment.
fn choose_segments(g: &Geometry, lens: impl Iterator<Item = usize>, total: usize) -> Vec<usize> {
    let target = g.segment_bytes.max(total / g.max_shortcuts().max(1) + 1);
    let mut starts = Vec::new();
    let mut since = 0usize;
    for (i, len) in lens.enumerate() {
        if i == 0 || (since >= target && starts.len() < g.max_shortcuts()) {
            starts.push(i);
            since = 0;
        }
        since += len;
    }
    starts
}

/// Writes the shortcuts of an unpublished buffer at `level`.
fn write_shortcuts(
    g: &Geometry,
    p: NodePtr,
    level: u8,
    prefixes: &[u64],
    offsets: &[usize],
    sorted_end: usize,
) {
    let sc = node::ShortcutBlock {
        base: node::shortcut_base(level),
        n: prefixes.len(),
    };
    // SAFETY: the buffer is unpublished and owned by this thread; the
    // shortcut block ends where the sorted block starts.
    let out = unsafe { p.bytes_mut(0, node::sorted_start(g, level)) };
    sc.write(out, prefixes, offsets, sorted_end);
}

/// Fills in the header of a fresh buffer: published size `size`, locked.
fn init_header(
    g: &Geometry,
    p: NodePtr,
    version: u64,
    lid: Lid,
    link: Lid,
    level: u8,
    sorted_end: usize,
) {
    // SAFETY: unpublished buffer owned by this thread.
    let h = unsafe { p.header_mut() };
    h.sorted_start = node::sorted_start(g, level) as u16;
    h.prefix_skip = 0;
    h.state
        .store(STATE_LOCKED | sorted_end as u64, Ordering::Relaxed);
    h.version = version;
    h.lid = lid.0;
    h.link = link.0;
    h.level = level;
    h.sorted_end = sorted_end as u32;
}

/// Lays a leaf's sorted block out item by item, choosing shortcut keys as it
/// goes; merges stream into it. Shortcut prefixes are written in place, and
/// offsets go to the far end of the shortcut block until `finish` knows how
/// many there are.
pub(crate) struct LeafWriter<'g> {
    g: &'g Geometry,
    p: NodePtr,
    at: usize,
    /// Bytes since the current segment started.
    since: usize,
    /// Target segment size.
    target: usize,
    /// Most shortcuts the geometry allows (read once per item).
    max_shortcuts: usize,
    nitems: usize,
    /// Offsets of the items that start a segment.
    starts: [usize; MAX_SHORTCUTS],
    nshortcuts: usize,
    /// Offset of the last item written.
    last_at: usize,
    /// Most sorted-block bytes the buffer holds: the leaf capacity, or
    /// less in a buffer of a smaller size class, which keeps
    /// `Geometry::log_bytes` free behind them for the log.
    room: usize,
    /// Some item holds its value out of line (`NODE_EXTERNAL`).
    external: bool,
    /// Bytes of the out-of-line values created for this buffer
    /// (`own_value`), added to the store's figure by `finish`.
    external_bytes: u64,
}

/// Most shortcuts any geometry has.
const MAX_SHORTCUTS: usize = SHORTCUTS_PER_LINE * MAX_SHORTCUT_GROUPS;

impl<'g> LeafWriter<'g> {
    /// A writer for at most `total` bytes of items, in a buffer of the
    /// smallest size class that holds them and the log room.
    pub(crate) fn new(g: &'g Geometry, counter: &BufferCounter, total: usize) -> LeafWriter<'g> {
        let start = node::sorted_start(g, 0);
        let p = NodePtr::alloc(g, counter, start + total.min(g.leaf_capacity) + g.log_bytes);
        let room = g.leaf_capacity.min(p.capacity(g) - start - g.log_bytes);
        let target = g.segment_bytes.max(total / g.max_shortcuts().max(1) + 1);
        LeafWriter {
            g,
            p,
            at: node::sorted_start(g, 0),
            since: 0,
            target,
            max_shortcuts: g.max_shortcuts(),
            nitems: 0,
            starts: [0; MAX_SHORTCUTS],
            nshortcuts: 0,
            last_at: 0,
            room,
            external: false,
            external_bytes: 0,
        }
    }

    /// Sorted-block bytes written so far.
    pub(crate) fn bytes(&self) -> usize {
        self.at - node::sorted_start(self.g, 0)
    }

    fn start_item(&mut self, len: usize) -> usize {
        assert!(self.bytes() + len <= self.room, "leaf overfull");
        self.mark_item(len)
    }

    /// `start_item` once the room is known: counts the item at `self.at`
    /// (starting a segment when the current one is full) and moves past it.
    #[inline(always)]
    fn mark_item(&mut self, len: usize) -> usize {
        if self.nitems == 0 || (self.since >= self.target && self.nshortcuts < self.max_shortcuts) {
            self.starts[self.nshortcuts] = self.at;
            self.nshortcuts += 1;
            self.since = 0;
        }
        let at = self.at;
        self.last_at = at;
        self.at += len;
        self.since += len;
        self.nitems += 1;
        at
    }

    /// Appends an entry (in key order); returns its offset.
    pub(crate) fn push(&mut self, e: &Entry<'_>) -> usize {
        if !e.raw.is_empty() {
            return self.push_raw(e.raw);
        }
        let len = e.sorted_len(self.g);
        let at = self.start_item(len);
        let value = self.own(e.value);
        // SAFETY: unpublished buffer owned by this thread.
        let out = unsafe { self.p.bytes_mut(at, at + len) };
        let written = encode_item(out, 0, e.key, value, e.version, e.expiry, e.cflags, None);
        debug_assert_eq!(written, len);
        at
    }

    /// Appends a sorted-block item unchanged (its encoded bytes); the new
    /// buffer takes its own strong count of an out-of-line value.
    pub(crate) fn push_raw(&mut self, raw: &[u8]) -> usize {
        let at = self.start_item(raw.len());
        // SAFETY: unpublished buffer owned by this thread.
        unsafe { self.p.bytes_mut(at, at + raw.len()) }.copy_from_slice(raw);
        if raw[0] & node::ITEM_EXTERNAL != 0 {
            self.share(node::decode_item(raw, 0, false).value);
        }
        at
    }

    /// Appends a run of unchanged sorted-block items (whole items, back to
    /// back) with one copy; each still counts for the shortcuts.
    pub(crate) fn push_raw_run(&mut self, raw: &[u8]) {
        assert!(self.bytes() + raw.len() <= self.room, "leaf overfull");
        let first = self.at;
        let mut off = 0;
        while off < raw.len() {
            let (len, flags) = node::sorted_item_len(raw, off);
            if flags & node::ITEM_EXTERNAL != 0 {
                self.share(node::decode_item(raw, off, false).value);
            }
            self.mark_item(len);
            off += len;
        }
        debug_assert_eq!(off, raw.len(), "a run holds whole items");
        // SAFETY: unpublished buffer owned by this thread; the assertion
        // above checked that the run fits.
        unsafe { self.p.bytes_mut(first, first + raw.len()) }.copy_from_slice(raw);
    }

    /// Appends a log item (`raw`, its encoded bytes) as a sorted-block
    /// item: the same fields, encoded again in the sorted block's compact
    /// form (`node::item`), without the log fields and log-only flags.
    pub(crate) fn push_log_item(&mut self, raw: &[u8]) -> usize {
        let item = node::decode_item(raw, 0, true);
        let len = node::log_item_sorted_len(raw, 0);
        let at = self.start_item(len);
        if item.flags & node::ITEM_EXTERNAL != 0 {
            self.share(item.value);
        }
        // SAFETY: unpublished buffer owned by this thread.
        let out = unsafe { self.p.bytes_mut(at, at + len) };
        let written = encode_item(
            out,
            0,
            item.key,
            item.value,
            item.version,
            item.expiry,
            item.cflags,
            None,
        );
        debug_assert_eq!(written, len);
        at
    }

    /// `own_value` for this buffer: notes an out-of-line value, and what
    /// it adds to the store's figure.
    #[inline]
    fn own<'v>(&mut self, value: ValueRef<'v>) -> ValueRef<'v> {
        let (value, added) = own_value(self.g, value);
        self.external |= matches!(value, ValueRef::External(..));
        self.external_bytes += added;
        value
    }

    /// An item copied as it is encoded, flagged as holding its value out
    /// of line: this buffer shares the value (a merge does this for every
    /// such item of its leaf, so it is kept to the two atomic adds).
    #[inline(always)]
    fn share(&mut self, value: ValueRef<'_>) {
        if let ValueRef::External(p, n) = value {
            self.external = true;
            // SAFETY: `p` names a live value referenced by the source
            // buffer the item is copied from, which the caller keeps
            // reachable while building.
            unsafe { node::value::share(p, n) };
        }
    }

    /// Frees the buffer without publishing it (an abandoned bulk load).
    pub(crate) fn discard(self, counter: &BufferCounter) {
        let g = self.g;
        // The header must describe the items for `free` to find the
        // out-of-line values they own (and take back what `finish` counts).
        let p = self.finish(counter, 0, Lid::NONE, Lid::NONE);
        // SAFETY: never published, so only this thread has seen it.
        unsafe { p.free(g, counter) };
    }

    /// Writes the shortcut offsets and the header (locked, see `build`),
    /// and counts the out-of-line values the buffer holds in `counter`,
    /// the one `free` will take them back from.
    pub(crate) fn finish(
        self,
        counter: &BufferCounter,
        version: u64,
        lid: Lid,
        right: Lid,
    ) -> NodePtr {
        counter.external_bytes.add(self.external_bytes as i64);
        let n = self.nshortcuts;
        let skip = self.write_prefixes(n);
        init_header(self.g, self.p, version, lid, right, 0, self.at);
        // SAFETY: unpublished.
        let h = unsafe { self.p.header_mut() };
        h.nshortcuts = n as u8;
        h.nitems = self.nitems as u32;
        h.prefix_skip = skip as u16;
        if self.external {
            h.flags |= node::NODE_EXTERNAL;
        }
        self.p
    }

    /// Once every key is written: the prefix all keys share (that of the
    /// first and last, since they are sorted), and the shortcuts, each with
    /// the 8-byte prefix taken after it. Returns the shared length.
    fn write_prefixes(&self, n: usize) -> usize {
        if self.nitems == 0 {
            return 0;
        }
        let start = node::sorted_start(self.g, 0);
        let mut prefixes = [0u64; MAX_SHORTCUTS];
        let skip = {
            // SAFETY: unpublished buffer owned by this thread; the items
            // below `self.at` are written.
            let buf = unsafe { self.p.bytes(self.at) };
            let first = leaf_item_key(buf, start, false).0;
            let skip = node::prefix_skip(first, leaf_item_key(buf, self.last_at, false).0);
            for (pre, &off) in prefixes.iter_mut().zip(&self.starts[..n]) {
                *pre = key_prefix(&leaf_item_key(buf, off, false).0[skip..]);
            }
            skip
        };
        write_shortcuts(
            self.g,
            self.p,
            0,
            &prefixes[..n],
            &self.starts[..n],
            self.at,
        );
        skip
    }
}

/// Builds a leaf holding `entries` (ascending keys, no duplicates).
pub(crate) fn build_leaf(
    g: &Geometry,
    counter: &BufferCounter,
    entries: &[Entry<'_>],
    version: u64,
    lid: Lid,
    right: Lid,
) -> NodePtr {
    let total: usize = entries.iter().map(|e| e.sorted_len(g)).sum();
    let mut w = LeafWriter::new(g, counter, total);
    for e in entries {
        w.push(e);
    }
    w.finish(counter, version, lid, right)
}

/// Builds an interior node at `level` from its children (ascending separators).
pub(crate) fn build_interior(
    g: &Geometry,
    counter: &BufferCounter,
    children: &[Child<'_>],
    version: u64,
    lid: Lid,
    level: u8,
) -> NodePtr {
    debug_assert!(!children.is_empty() && level > 0);
    let rest = &children[1..];
    let total: usize = rest.iter().map(|c| interior_item_len(c.key)).sum();
    debug_assert!(total <= g.interior_capacity, "interior overfull");
    // Interior nodes are never appended to: a change builds a new one.
    let p = NodePtr::alloc(g, counter, node::sorted_start(g, level) + total);
    let starts = choose_segments(g, rest.iter().map(|c| interior_item_len(c.key)), total);
    let mut prefixes = Vec::with_capacity(starts.len());
    let mut offsets = Vec::with_capacity(starts.len());
    let mut at = node::sorted_start(g, level);
    let mut seg = 0;
    let skip = match (rest.first(), rest.last()) {
        (Some(a), Some(b)) => node::prefix_skip(a.key, b.key),
        _ => 0,
    };
    for (i, c) in rest.iter().enumerate() {
        if seg < starts.len() && starts[seg] == i {
            prefixes.push(key_prefix(&c.key[skip..]));
            offsets.push(at);
            seg += 1;
        }
        let len = interior_item_len(c.key);
        // SAFETY: unpublished buffer owned by this thread.
        let out = unsafe { p.bytes_mut(at, at + len) };
        out[0..2].copy_from_slice(&(c.key.len() as u16).to_le_bytes());
        out[2..10].copy_from_slice(&c.lid.0.to_le_bytes());
        out[10..].copy_from_slice(c.key);
        at += len;
    }
    write_shortcuts(g, p, level, &prefixes, &offsets, at);
    init_header(g, p, version, lid, children[0].lid, level, at);
    let learned = if g.learned {
        learned_model(g, rest, skip, prefixes.len())
    } else {
        None
    };
    if let Some(m) = learned {
        let base = node::shortcut_base(level);
        // SAFETY: unpublished buffer owned by this thread; the top line
        // lies inside the shortcut block.
        m.write(unsafe { p.bytes_mut(base, base + crate::config::LINE_BYTES) });
    }
    // SAFETY: unpublished.
    let h = unsafe { p.header_mut() };
    h.nshortcuts = prefixes.len() as u8;
    h.nitems = rest.len() as u32;
    h.prefix_skip = skip as u16;
    if learned.is_some() {
        h.flags |= node::NODE_LEARNED;
    }
    p
}

/// The learned model for an interior node's items `rest` (keys sharing
/// `skip` bytes), if it pays (`node::learned`): a top line to replace
/// (more than one group of `shortcuts`), items of one length, and a window
/// no larger than a shortcut segment.
fn learned_model(
    g: &Geometry,
    rest: &[Child<'_>],
    skip: usize,
    shortcuts: usize,
) -> Option<node::Model> {
    let sc = node::ShortcutBlock {
        base: 0,
        n: shortcuts,
    };
    let len = rest.first().map(|c| interior_item_len(c.key))?;
    if !sc.has_top() || rest.iter().any(|c| interior_item_len(c.key) != len) {
        return None;
    }
    // The window, 2 * err + 2 items, no larger than a segment.
    let max_err = (g.segment_bytes / len / 2).checked_sub(1)?;
    let xs: Vec<u64> = rest.iter().map(|c| key_prefix(&c.key[skip..])).collect();
    node::Model::fit(&xs, len, max_err)
}

/// Builds the buffer that anchors a removed node's LID: no items, flagged
/// dead, version `version`, obsolete (nobody may lock it).
pub(crate) fn build_dead(g: &Geometry, counter: &BufferCounter, version: u64, lid: Lid) -> NodePtr {
    let p = NodePtr::alloc(g, counter, node::sorted_start(g, 0));
    init_header(g, p, version, lid, Lid::NONE, 0, node::sorted_start(g, 0));
    // SAFETY: unpublished.
    let h = unsafe { p.header_mut() };
    h.flags = node::NODE_DEAD;
    h.state.store(
        node::STATE_OBSOLETE | node::STATE_LOCKED | node::sorted_start(g, 0) as u64,
        Ordering::Relaxed,
    );
    p
}
