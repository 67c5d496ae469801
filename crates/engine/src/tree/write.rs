//! Writes (Honeycomb 3.4, 3.5): optimistic traversal of the newest buffers,
//! leaf lock by compare-and-swap on the state word, then either the fast path
//! (append to the log block) or a structure change built copy-on-write and
//! published with versions.
//!
//! A write completes its version but does not wait for the release: the
//! caller does (`Written::wait_for`), so a session can defer it and a durable
//! store can make it wait for the log. Buffers a write replaced are retired
//! once its version is released (`retire_after`).
//!
//! Lock order: a writer locks its leaf first, then only *tries* further locks
//! (a sibling, the parent, ancestors and their siblings) and on any failure
//! unlocks everything and restarts. Nobody waits for a lock while holding
//! one, and nobody holds a lock while waiting for release.

use std::borrow::Cow;
use std::sync::atomic::Ordering as CoreOrdering;

use super::build::{
    self, Child, Entry, LeafWriter, interior_item_len, own_value, stored_value_len,
};
use super::epoch::Guard;
use super::node::{
    ITEM_DUP, ITEM_REPLACES, ITEM_TOMBSTONE, ItemRef, LOG_META_DUP, LOG_META_EXTERNAL,
    LOG_META_HINT, LOG_META_REPLACES, LOG_META_TOMBSTONE, Lid, LogDirEntry, NodePtr, STATE_LOCKED,
    STATE_OBSOLETE, ValueRef, decode_interior, decode_item, encode_item, item_len, key_cmp, key_fp,
    leaf_item_key, log_dir_entry, state_appended, state_log_count, state_size,
};
use super::read::{
    LogOrder, MAX_LOG_ITEMS, WalkFrom, find_segment, leaf_walk, published, published_leaf, route,
    scan_segment,
};
use super::{LogEntry, Tree};
use crate::config::LOG_EXTRA_BYTES;
use crate::sync::backoff;
use crate::types::Now;

/// What a write does to its key, decided with the leaf locked.
#[derive(Debug, Clone)]
pub(crate) enum WriteOp<'a> {
    /// Leave the key as it is.
    Noop,
    /// Store this value with this expiry (unix ms, 0 = never) and client
    /// flags (0 = none).
    Put {
        value: Cow<'a, [u8]>,
        expiry: u64,
        flags: u32,
    },
    /// Remove the key.
    Delete,
}

/// A node a structure change has locked, with the state word to restore.
#[derive(Clone, Copy)]
struct Held {
    buf: NodePtr,
    state: u64,
}

fn try_lock(buf: NodePtr, expect: u64) -> bool {
    if expect & (STATE_LOCKED | STATE_OBSOLETE) != 0 {
        return false;
    }
    crate::sync::schedule_point();
    buf.header()
        .state
        .compare_exchange(
            expect,
            expect | STATE_LOCKED,
            CoreOrdering::Acquire,
            CoreOrdering::Relaxed,
        )
        .is_ok()
}

fn unlock_all(held: &[Held]) {
    for h in held.iter().rev() {
        crate::sync::schedule_point();
        h.buf.header().state.store(h.state, CoreOrdering::Release);
    }
}

/// One node of the writer's path: the buffer and the state it had.
#[derive(Clone, Copy)]
struct Step {
    buf: NodePtr,
    state: u64,
    lid: Lid,
}

/// Tallest tree a writer's path holds. A node holds at least two children
/// after a split and a page table at most 2^28 LIDs, so 2^28 leaves need 28
/// levels even at the worst fan-out; 32 leaves room.
const MAX_HEIGHT: usize = 32;

/// The nodes from the root to a leaf, on the stack (one per write).
#[derive(Clone, Copy)]
struct Path {
    steps: [Step; MAX_HEIGHT],
    len: usize,
}

impl Default for Path {
    fn default() -> Path {
        let none = Step {
            buf: NodePtr::dangling(),
            state: 0,
            lid: Lid::NONE,
        };
        Path {
            steps: [none; MAX_HEIGHT],
            len: 0,
        }
    }
}

impl Path {
    fn push(&mut self, s: Step) {
        assert!(
            self.len < MAX_HEIGHT,
            "tree taller than {MAX_HEIGHT} levels"
        );
        self.steps[self.len] = s;
        self.len += 1;
    }
}

impl std::ops::Deref for Path {
    type Target = [Step];
    fn deref(&self) -> &[Step] {
        &self.steps[..self.len]
    }
}

/// The children of an interior buffer; the first entry's key is unused.
fn children_of(p: NodePtr) -> Vec<Child<'static>> {
    let buf = published(p);
    let h = p.header();
    let mut out = Vec::with_capacity(h.nitems as usize + 1);
    out.push(Child {
        key: &[],
        lid: Lid(h.link),
    });
    let mut at = h.sorted_start as usize;
    while at < h.sorted_end as usize {
        let (k, lid, len) = decode_interior(buf, at);
        out.push(Child { key: k, lid });
        at += len;
    }
    out
}

/// The newest state of every key of a locked leaf, delete markers dropped.
fn leaf_entries(leaf: NodePtr) -> Vec<Entry<'static>> {
    let mut out = Vec::with_capacity(leaf.header().nitems as usize + 32);
    leaf_walk(leaf, u64::MAX, WalkFrom::First, |it| {
        if !it.is_tombstone() {
            out.push(Entry {
                key: it.key,
                value: it.value,
                version: it.version,
                expiry: it.expiry,
                cflags: it.cflags,
                raw: it.raw,
            });
        }
        true
    });
    out
}

/// What a writer learns about its key in one pass over the locked leaf.
struct Lookup {
    /// The key's newest item, any version.
    current: Option<ItemRef<'static>>,
    /// Where a log item for the key points into the sorted block.
    backptr: u32,
    /// The back pointer names an item with this key.
    replaces: bool,
    /// Order hint: log items whose key sorts at or before this one.
    hint: usize,
    /// A log item already has this key (and it is not in the sorted block).
    dup: bool,
    /// Estimated live keys in the leaf: sorted items, plus keys the log
    /// added, minus delete markers (exact unless a key was deleted twice).
    live_estimate: isize,
}

fn lookup(leaf: NodePtr, key: &[u8]) -> Lookup {
    let (buf, nlog) = published_leaf(leaf);
    let h = leaf.header();
    // The sorted-block segment is found now and scanned last: its lines
    // arrive while the log (prefetched by `traverse`) is searched.
    let seg = find_segment(buf, h, key, false);
    if let Some((from, to)) = seg {
        super::node::prefetch_range(leaf, from, to);
    }
    // One pass over the log in arrival order: the order hint is the number
    // of log keys at or before this one, and of equal keys the last to
    // arrive is the newest. (At most a dozen items: comparing each costs
    // less than putting the log in key order to binary-search it.)
    let mut hint = 0;
    let mut newest = None;
    let mut live_estimate = h.nitems as isize;
    for i in 0..nlog {
        let e = log_dir_entry(buf, i);
        if e.meta & LOG_META_TOMBSTONE != 0 {
            live_estimate -= 1;
        } else if e.meta & (LOG_META_REPLACES | LOG_META_DUP) == 0 {
            live_estimate += 1;
        }
        match key_cmp(leaf_item_key(buf, e.at as usize, true).0, key) {
            std::cmp::Ordering::Greater => {}
            std::cmp::Ordering::Less => hint += 1,
            std::cmp::Ordering::Equal => {
                hint += 1;
                newest = Some(e.at as usize);
            }
        }
    }
    let found = seg.and_then(|(from, to)| scan_segment(buf, true, from, to, key, false));
    let (mut current, backptr, replaces) = match found {
        Some((off, _, true)) => (Some(decode_item(buf, off, false)), off as u32, true),
        Some((off, len, false)) => (None, (off + len) as u32, false),
        None => (None, h.sorted_start as u32, false),
    };
    if let Some(at) = newest {
        current = Some(decode_item(buf, at, true));
    }
    Lookup {
        current,
        backptr,
        replaces,
        hint,
        dup: newest.is_some(),
        live_estimate,
    }
}

/// Marks the item being written among the log items of a streaming merge.
const NEW_ITEM: u32 = u32::MAX;

/// One key's log items in a streaming merge: at sorted offset `bp`,
/// replacing the sorted item there (`replaced`: its length; 0 for a new
/// key), the group's `newest` item (a log offset or `NEW_ITEM`) is written,
/// `len` bytes as a sorted item (0: a delete marker, nothing written).
#[derive(Clone, Copy, Default)]
struct MergeGroup {
    bp: usize,
    replaced: usize,
    newest: u32,
    len: usize,
}

/// Content of a node being rebuilt.
enum Content<'a> {
    Leaf(Vec<Entry<'a>>),
    /// Children and level.
    Interior(Vec<Child<'a>>, u8),
}

/// Whether a split closes its current part before an item that would
/// bring the part to `with` bytes. Parts close near `target`, except that
/// the last of the `parts` planned takes the rest: closing every part a
/// little under the target (whole items) would otherwise leave a tiny
/// extra part, a nearly empty node, at the end. A part never passes `cap`.
fn close_part(with: usize, target: usize, cap: usize, closed: usize, parts: usize) -> bool {
    with > cap || (with > target && closed + 1 < parts)
}

impl<'a> Content<'a> {
    fn bytes(&self, t: &Tree) -> usize {
        match self {
            Content::Leaf(e) => e.iter().map(|e| e.sorted_len(&t.g)).sum(),
            Content::Interior(c, _) => c.iter().skip(1).map(|c| interior_item_len(c.key)).sum(),
        }
    }
    fn capacity(&self, t: &Tree) -> usize {
        match self {
            Content::Leaf(_) => t.g.leaf_capacity,
            Content::Interior(..) => t.g.interior_capacity,
        }
    }
    fn level(&self) -> u8 {
        match self {
            Content::Leaf(_) => 0,
            Content::Interior(_, l) => *l,
        }
    }
    /// Splits into parts that each fit; each part's separator is its first key.
    fn split(self, t: &Tree) -> Vec<(&'a [u8], Content<'a>)> {
        let cap = self.capacity(t);
        let total = self.bytes(t);
        let parts = total.div_ceil(cap * 3 / 4).max(1);
        let target = total / parts;
        match self {
            Content::Leaf(entries) => {
                let mut out: Vec<(&'a [u8], Content<'a>)> = Vec::new();
                let mut cur: Vec<Entry<'a>> = Vec::new();
                let mut bytes = 0;
                for e in entries {
                    let len = e.sorted_len(&t.g);
                    if !cur.is_empty() && close_part(bytes + len, target, cap, out.len(), parts) {
                        let key = cur[0].key;
                        out.push((key, Content::Leaf(std::mem::take(&mut cur))));
                        bytes = 0;
                    }
                    bytes += len;
                    cur.push(e);
                }
                if !cur.is_empty() {
                    out.push((cur[0].key, Content::Leaf(cur)));
                }
                out
            }
            Content::Interior(children, level) => {
                let mut out = Vec::new();
                let mut cur: Vec<Child<'a>> = Vec::new();
                let mut bytes = 0;
                for c in children {
                    let len = interior_item_len(c.key);
                    if !cur.is_empty() && close_part(bytes + len, target, cap, out.len(), parts) {
                        let key = cur[0].key;
                        out.push((key, Content::Interior(std::mem::take(&mut cur), level)));
                        bytes = 0;
                    }
                    bytes += len;
                    cur.push(c);
                }
                if !cur.is_empty() {
                    out.push((cur[0].key, Content::Interior(cur, level)));
                }
                out
            }
        }
    }
}

/// A node to write: its LID (existing or fresh), content, and the buffer it replaces.
struct NewNode<'a> {
    lid: Lid,
    content: Content<'a>,
    replaces: Option<NodePtr>,
    /// Leaves: right sibling.
    right: Lid,
}

/// Everything one structure change publishes.
#[derive(Default)]
struct Plan<'a> {
    held: Vec<Held>,
    nodes: Vec<NewNode<'a>>,
    /// LIDs removed from the tree and their last buffer.
    kills: Vec<(Lid, NodePtr)>,
    fresh: Vec<Lid>,
}

enum Attempt<R> {
    Done(Written<R>),
    Restart,
}

/// How a write is taken.
#[derive(Clone, Copy)]
pub(crate) struct WriteMode<'n> {
    /// `decide` sees the newest item live at this clock; `None`: the newest
    /// item that is not deleted, even if expired (the TTL sweep).
    pub now: Option<&'n Now>,
    /// Log the write (false: recovery replay, and the deletes of a clear,
    /// which its Clear record covers).
    pub logged: bool,
}

/// What a write did. It has completed its version but not waited for the
/// release: the caller acknowledges only once `wait_for` is released.
pub(crate) struct Written<R> {
    pub result: R,
    /// The write's version; None if it changed nothing.
    pub version: Option<u64>,
    /// The answer rests on every write up to this version (its own, or for
    /// a no-op the newest it may have looked at).
    pub wait_for: u64,
}

/// The log record of a write, if it is logged.
fn log_entry<'a>(key: &'a [u8], op: &'a WriteOp<'_>, logged: bool) -> Option<LogEntry<'a>> {
    if !logged {
        return None;
    }
    match op {
        WriteOp::Put {
            value,
            expiry,
            flags,
        } => Some(LogEntry::Put {
            key,
            value,
            expiry: *expiry,
            flags: *flags,
        }),
        WriteOp::Delete => Some(LogEntry::Delete { key }),
        WriteOp::Noop => None,
    }
}

impl Tree {
    /// Writes `key`: `decide` sees the key's newest item (see `WriteMode`)
    /// with the leaf locked and returns what to do and the caller's result.
    /// Completes the write's version but does not wait for its release.
    pub(crate) fn write<'v, R>(
        &self,
        key: &[u8],
        mode: WriteMode<'_>,
        mut decide: impl FnMut(Option<&ItemRef<'_>>) -> (WriteOp<'v>, R),
    ) -> Written<R> {
        let mut round = 0;
        // One path for every attempt, filled in place: it is hundreds of
        // bytes, and returning it by value copied it twice per write.
        let mut path = Path::default();
        loop {
            let guard = self.epochs.pin();
            if let Attempt::Done(w) = self.try_write(&guard, key, mode, &mut path, &mut decide) {
                drop(guard);
                if w.version.is_some() {
                    self.maybe_collect();
                }
                return w;
            }
            drop(guard);
            backoff(&mut round);
        }
    }

    /// Every 256th write of a thread runs a non-blocking `collect` (a
    /// thread-local count: a shared counter would be a contended line).
    fn maybe_collect(&self) {
        thread_local! {
            static WRITES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let n = WRITES.with(|w| {
            let n = w.get().wrapping_add(1);
            w.set(n);
            n
        });
        if n.is_multiple_of(256) {
            self.collect(false);
        }
    }

    /// Traverses the newest buffers to the leaf for `key`, into `path`. False
    /// if a node on the way is locked or replaced (a structure change is in
    /// progress).
    fn traverse(&self, key: &[u8], path: &mut Path) -> bool {
        path.len = 0;
        let mut lid = Lid::ROOT;
        loop {
            let Some(buf) = self.pages.get(lid) else {
                return false;
            };
            // The search reads several of the node's first lines: ask for
            // them at once so that their misses overlap.
            super::node::prefetch_range(buf, 0, super::node::head_bytes(&self.g));
            let state = buf.load_state();
            if state & (STATE_LOCKED | STATE_OBSOLETE) != 0 {
                return false;
            }
            path.push(Step { buf, state, lid });
            if buf.is_leaf() {
                // The writer's lookup searches the log block's keys (and a
                // merge reads them all): ask for the whole block now, with
                // the head still in flight, rather than item by item.
                let sorted_end = buf.header().sorted_end as usize;
                super::node::prefetch_range(buf, sorted_end, state_size(state));
                return true;
            }
            // The segment scan keeps the child as it goes (as the read
            // engine's does), rather than finding the item, then decoding it.
            lid = route(buf, published(buf), key);
        }
    }

    fn try_write<'v, R>(
        &self,
        guard: &Guard,
        key: &[u8],
        mode: WriteMode<'_>,
        path: &mut Path,
        decide: &mut impl FnMut(Option<&ItemRef<'_>>) -> (WriteOp<'v>, R),
    ) -> Attempt<R> {
        let now = mode.now;
        if !self.traverse(key, path) {
            return Attempt::Restart;
        }
        let path = &*path;
        let leaf = *path.last().expect("path ends at a leaf");
        if !try_lock(leaf.buf, leaf.state) {
            return Attempt::Restart;
        }
        // Validate the path: every interior buffer is still current and
        // unlocked, so the routing to this leaf holds now.
        for s in &path[..path.len() - 1] {
            crate::sync::schedule_point();
            if s.buf.header().state.load(CoreOrdering::Acquire) != s.state {
                unlock_all(&[Held {
                    buf: leaf.buf,
                    state: leaf.state,
                }]);
                return Attempt::Restart;
            }
        }
        let look = lookup(leaf.buf, key);
        let current = look.current;
        let live = current.filter(|it| match now {
            Some(now) => it.is_live(now),
            None => !it.is_tombstone(),
        });
        let (op, r) = decide(live.as_ref());
        if let WriteOp::Put { expiry, .. } = op
            && expiry != 0
        {
            self.note_expiring();
        }
        let held_leaf = Held {
            buf: leaf.buf,
            state: leaf.state,
        };
        match op {
            WriteOp::Noop => {
                // The decision read items whose writes may not be released
                // yet; answer only once they are.
                let seen = self.clock.write_version();
                unlock_all(&[held_leaf]);
                Attempt::Done(Written {
                    result: r,
                    version: None,
                    wait_for: seen,
                })
            }
            WriteOp::Delete if current.is_none_or(|c| c.is_tombstone()) => {
                let seen = self.clock.write_version();
                unlock_all(&[held_leaf]);
                Attempt::Done(Written {
                    result: r,
                    version: None,
                    wait_for: seen,
                })
            }
            _ => {
                // Stored keys change by one when a put creates a key (an
                // expired item still counts as stored until it is swept) or a
                // delete removes one.
                let present = current.is_some_and(|c| !c.is_tombstone());
                let key_delta = match op {
                    WriteOp::Put { .. } if !present => 1,
                    WriteOp::Delete => -1,
                    _ => 0,
                };
                // A delete that empties its leaf restructures at once, so the
                // empty leaf merges away instead of waiting for its log to fill.
                let empties = matches!(op, WriteOp::Delete) && look.live_estimate <= 1;
                let appended = if empties {
                    None
                } else {
                    self.append(leaf.buf, leaf.state, key, &op, &look, mode.logged)
                };
                let done = |v| {
                    Attempt::Done(Written {
                        result: r,
                        version: Some(v),
                        wait_for: v,
                    })
                };
                if let Some(v) = appended {
                    self.keys.add(key_delta);
                    self.clock.complete(v);
                    return done(v);
                }
                if let Some((p, new_at)) = self.merge_stream(leaf, key, &op, &look) {
                    let v = self.next_version(log_entry(key, &op, mode.logged));
                    self.keys.add(key_delta);
                    self.publish_merge(guard, leaf, p, new_at, v);
                    return done(v);
                }
                match self.restructure(guard, path, key, &op, mode.logged) {
                    Some(v) => {
                        self.keys.add(key_delta);
                        done(v)
                    }
                    None => Attempt::Restart,
                }
            }
        }
    }

    /// Fast path: appends the item to the locked leaf's log block, takes the
    /// write version and unlocks in one store. None if the log is full.
    fn append(
        &self,
        leaf: NodePtr,
        state: u64,
        key: &[u8],
        op: &WriteOp<'_>,
        look: &Lookup,
        logged: bool,
    ) -> Option<u64> {
        let g = &self.g;
        let (value, expiry, cflags, tomb) = match op {
            WriteOp::Put {
                value,
                expiry,
                flags,
            } => (&value[..], *expiry, *flags, 0),
            WriteOp::Delete => (&[][..], 0, 0, ITEM_TOMBSTONE),
            WriteOp::Noop => unreachable!("no-op writes return early"),
        };
        let size = state_size(state);
        let sorted_end = leaf.header().sorted_end as usize;
        let stored = stored_value_len(g, ValueRef::Inline(value));
        let len = item_len(key.len(), stored, expiry != 0, cflags != 0, true);
        debug_assert!(len <= g.max_item, "key and value limits keep items small");
        let nlog = state_log_count(state);
        if size + len > g.node_size
            || size - sorted_end + len > g.log_bytes
            || nlog >= crate::config::LOG_DIR_MAX
        {
            return None;
        }
        let (bp, replaces, hint, dup) = (look.backptr, look.replaces, look.hint, look.dup);
        let flags = tomb
            | if replaces { ITEM_REPLACES } else { 0 }
            | if dup && !replaces { ITEM_DUP } else { 0 };
        let value = own_value(g, ValueRef::Inline(value));
        // SAFETY: the leaf is locked by this thread and `size` is its published
        // size, so no reader looks at `[size, size + len)` (node invariant 2).
        let out = unsafe { leaf.bytes_mut(size, size + len) };
        encode_item(
            out,
            flags,
            key,
            value,
            0,
            expiry,
            cflags,
            Some((bp, hint as u8)),
        );
        let meta = hint as u8
            | if replaces { LOG_META_REPLACES } else { 0 }
            | if dup && !replaces { LOG_META_DUP } else { 0 }
            | if tomb != 0 { LOG_META_TOMBSTONE } else { 0 }
            | if matches!(value, ValueRef::External(..)) {
                LOG_META_EXTERNAL
            } else {
                0
            };
        debug_assert!(hint as u8 <= LOG_META_HINT);
        let entry = LogDirEntry {
            at: size as u16,
            bp: bp as u16,
            fp: key_fp(key),
            meta,
        };
        // SAFETY: the leaf is locked by this thread and `nlog` is its
        // published log count.
        unsafe { leaf.write_log_dir_entry(nlog, entry) };
        let v = self.next_version(log_entry(key, op, logged));
        out[7..15].copy_from_slice(&v.to_le_bytes());
        crate::sync::schedule_point();
        leaf.header()
            .state
            .store(state_appended(state, size + len), CoreOrdering::Release);
        Some(v)
    }

    /// The common slow path: the locked leaf's sorted block, its log and the
    /// write merge into one fresh buffer for the same LID, streamed item by
    /// item (unchanged sorted items copied as raw bytes). At the writer's view
    /// only each key's newest item counts, so no version comparison is
    /// needed. None when the result might not fit one node, or would be
    /// underfull (the planner then splits or merges nodes). Returns the
    /// buffer (version not yet set) and the new item's offset.
    fn merge_stream(
        &self,
        leaf: Step,
        key: &[u8],
        op: &WriteOp<'_>,
        look: &Lookup,
    ) -> Option<(NodePtr, Option<usize>)> {
        let g = &self.g;
        let (buf, nlog) = published_leaf(leaf.buf);
        let h = leaf.buf.header();
        let (sorted_start, sorted_end) = (h.sorted_start as usize, h.sorted_end as usize);
        let new_entry = match op {
            WriteOp::Put {
                value,
                expiry,
                flags,
            } => Some(Entry {
                key,
                value: ValueRef::Inline(value),
                version: 0,
                expiry: *expiry,
                cflags: *flags,
                raw: &[],
            }),
            WriteOp::Delete => None,
            WriteOp::Noop => unreachable!("no-op writes return early"),
        };
        // Log items in key order by order hint, the written item last in
        // arrival order (it is the newest), with back pointers and flags.
        let mut order = LogOrder::of(buf, nlog);
        let new_flags = if look.replaces {
            ITEM_REPLACES
        } else if look.dup {
            ITEM_DUP
        } else {
            0
        };
        order.insert(NEW_ITEM, look.hint, look.backptr, new_flags);
        let n = order.n;
        // Each key's log items are adjacent in key order (a group: a new
        // key's items, or those replacing one sorted item). The merge keeps
        // a group's newest, the last to arrive (nothing if a delete marker),
        // in place of the sorted item it replaces. One pass finds the
        // groups and the merged size exactly; a bound from the log's raw
        // size would send leaves near capacity to the slow path though their
        // merge fits.
        let mut groups = [MergeGroup::default(); MAX_LOG_ITEMS];
        let mut ngroups = 0;
        let mut size = sorted_end - sorted_start;
        let mut j = 0;
        while j < n {
            let (bp, replaces) = (order.bp(j) as usize, order.flags(j) & ITEM_REPLACES != 0);
            j += 1;
            while j < n
                && if replaces {
                    order.bp(j) as usize == bp && order.flags(j) & ITEM_REPLACES != 0
                } else {
                    order.flags(j) & ITEM_DUP != 0
                }
            {
                j += 1;
            }
            let newest = order.at(j - 1);
            let replaced = if replaces {
                leaf_item_key(buf, bp, false).1
            } else {
                0
            };
            let len = match newest {
                NEW_ITEM => new_entry.map_or(0, |e| e.sorted_len(g)),
                x if buf[x as usize] & ITEM_TOMBSTONE != 0 => 0,
                x => leaf_item_key(buf, x as usize, true).1 - LOG_EXTRA_BYTES,
            };
            size = size - replaced + len;
            groups[ngroups] = MergeGroup {
                bp,
                replaced,
                newest,
                len,
            };
            ngroups += 1;
        }
        if size > g.leaf_capacity {
            return None;
        }

        // Back pointers ascend with the groups: the sorted items between
        // two groups are copied as one run.
        let mut w = LeafWriter::new(g, &self.shared.counter, size);
        let mut new_at = None;
        let mut off = sorted_start;
        for gr in &groups[..ngroups] {
            debug_assert!(gr.bp >= off && gr.bp <= sorted_end, "back pointers ascend");
            if gr.bp > off {
                w.push_raw_run(&buf[off..gr.bp]);
                off = gr.bp;
            }
            match (gr.newest, &new_entry) {
                (NEW_ITEM, Some(e)) => new_at = Some(w.push(e)),
                (NEW_ITEM, None) => {}
                (x, _) if gr.len > 0 => {
                    let at = x as usize;
                    w.push_log_item(&buf[at..at + gr.len + LOG_EXTRA_BYTES]);
                }
                _ => {}
            }
            off += gr.replaced;
        }
        if off < sorted_end {
            w.push_raw_run(&buf[off..sorted_end]);
        }
        debug_assert_eq!(w.bytes(), size, "merged size as computed");
        let underfull = w.bytes() < g.leaf_capacity / 4 && leaf.lid != Lid::ROOT;
        let p = w.finish(0, leaf.lid, Lid(h.link));
        if underfull {
            // SAFETY: never published; `free` drops the strong counts the
            // writer took for out-of-line values.
            unsafe { p.free(g, &self.shared.counter) };
            return None;
        }
        Some((p, new_at))
    }

    /// Publishes a streamed merge at version `v`: the leaf's LID now maps to
    /// `p`, whose old-version pointer is the leaf.
    fn publish_merge(&self, guard: &Guard, leaf: Step, p: NodePtr, new_at: Option<usize>, v: u64) {
        // SAFETY: `p` is unpublished and owned by this thread.
        unsafe {
            p.header_mut().version = v;
            if let Some(at) = new_at {
                p.bytes_mut(at + 7, at + 15)
                    .copy_from_slice(&v.to_le_bytes());
            }
        }
        p.header()
            .old
            .store(leaf.buf.as_raw(), CoreOrdering::Relaxed);
        self.pages.set(leaf.lid, Some(p));
        crate::sync::schedule_point();
        leaf.buf.header().state.store(
            leaf.state | STATE_LOCKED | STATE_OBSOLETE,
            CoreOrdering::Release,
        );
        super::unlock_new(p);
        self.clock.complete(v);
        self.retire_after(guard, leaf.buf, leaf.lid, v, false);
    }

    /// Slow path: merge the leaf's log into a new buffer, splitting or
    /// merging nodes as needed, and publish the change under one version.
    /// None if a lock could not be taken (everything is unlocked again).
    fn restructure(
        &self,
        guard: &Guard,
        path: &[Step],
        key: &[u8],
        op: &WriteOp<'_>,
        logged: bool,
    ) -> Option<u64> {
        let leaf = *path.last().expect("leaf");
        let mut entries = leaf_entries(leaf.buf);
        let pos = entries.binary_search_by(|e| key_cmp(e.key, key));
        match (op, pos) {
            (
                WriteOp::Put {
                    value,
                    expiry,
                    flags,
                },
                Ok(i),
            ) => {
                entries[i] = Entry {
                    key,
                    value: ValueRef::Inline(value),
                    version: 0,
                    expiry: *expiry,
                    cflags: *flags,
                    raw: &[],
                }
            }
            (
                WriteOp::Put {
                    value,
                    expiry,
                    flags,
                },
                Err(i),
            ) => entries.insert(
                i,
                Entry {
                    key,
                    value: ValueRef::Inline(value),
                    version: 0,
                    expiry: *expiry,
                    cflags: *flags,
                    raw: &[],
                },
            ),
            (WriteOp::Delete, Ok(i)) => {
                entries.remove(i);
            }
            (WriteOp::Delete, Err(_)) | (WriteOp::Noop, _) => {}
        }
        let mut plan = Plan {
            held: vec![Held {
                buf: leaf.buf,
                state: leaf.state,
            }],
            ..Plan::default()
        };
        let ok = self.plan(path, Content::Leaf(entries), &mut plan);
        if !ok {
            unlock_all(&plan.held);
            for lid in plan.fresh.drain(..) {
                self.pages.recycle(lid);
            }
            return None;
        }
        let v = self.next_version(log_entry(key, op, logged));
        self.publish(guard, plan, v);
        Some(v)
    }

    /// Decides the change level by level, from the leaf (path's last step)
    /// up, taking the locks it needs. False if a lock failed.
    fn plan<'a>(&self, path: &[Step], content: Content<'a>, plan: &mut Plan<'a>) -> bool {
        let mut level_idx = path.len() - 1;
        let mut content = content;
        let mut node = path[level_idx];
        loop {
            let bytes = content.bytes(self);
            let cap = content.capacity(self);
            let is_root = node.lid == Lid::ROOT;
            let right = if content.level() == 0 {
                Lid(node.buf.header().link)
            } else {
                Lid::NONE
            };
            if is_root {
                if bytes <= cap {
                    plan.nodes.push(NewNode {
                        lid: Lid::ROOT,
                        content,
                        replaces: Some(node.buf),
                        right,
                    });
                    return true;
                }
                // Grow: the parts move to fresh LIDs under a new root.
                let level = content.level();
                let parts = content.split(self);
                let mut children = Vec::new();
                let n = parts.len();
                let lids: Vec<Lid> = (0..n).map(|_| self.fresh(plan)).collect();
                for (i, (sep, c)) in parts.into_iter().enumerate() {
                    let right = if i + 1 < n { lids[i + 1] } else { right };
                    children.push(Child {
                        key: sep,
                        lid: lids[i],
                    });
                    plan.nodes.push(NewNode {
                        lid: lids[i],
                        content: c,
                        replaces: None,
                        right,
                    });
                }
                plan.nodes.push(NewNode {
                    lid: Lid::ROOT,
                    content: Content::Interior(children, level + 1),
                    replaces: Some(node.buf),
                    right: Lid::NONE,
                });
                return true;
            }
            let parent = path[level_idx - 1];
            let underfull = bytes < cap / 4;
            if bytes <= cap && !underfull {
                // Fits: this node is the root of the change.
                plan.nodes.push(NewNode {
                    lid: node.lid,
                    content,
                    replaces: Some(node.buf),
                    right,
                });
                return true;
            }
            // The parent changes: lock it (its state was recorded on the way down).
            let mut siblings = children_of(parent.buf);
            let idx = siblings
                .iter()
                .position(|c| c.lid == node.lid)
                .expect("child in parent");
            let mut replace_from = idx;
            let mut replace_n = 1;
            let mut new_children: Vec<Child<'a>> = Vec::new();
            if bytes > cap {
                if !self.lock(plan, parent) {
                    return false;
                }
                let parts = content.split(self);
                let n = parts.len();
                let mut lids = vec![node.lid];
                lids.extend((1..n).map(|_| self.fresh(plan)));
                for (i, (sep, c)) in parts.into_iter().enumerate() {
                    let key = if i == 0 { siblings[idx].key } else { sep };
                    let r = if i + 1 < n { lids[i + 1] } else { right };
                    let replaces = if i == 0 { Some(node.buf) } else { None };
                    new_children.push(Child { key, lid: lids[i] });
                    plan.nodes.push(NewNode {
                        lid: lids[i],
                        content: c,
                        replaces,
                        right: r,
                    });
                }
            } else {
                // Underfull: merge with a neighbour under the same parent if
                // one can be locked and the result stays well under capacity.
                let merged = self.try_merge(plan, parent, &siblings, idx, node, content);
                match merged {
                    Err(c) => {
                        plan.nodes.push(NewNode {
                            lid: node.lid,
                            content: c,
                            replaces: Some(node.buf),
                            right,
                        });
                        return true;
                    }
                    Ok((from, child)) => {
                        replace_from = from;
                        replace_n = 2;
                        new_children.push(child);
                    }
                }
            }
            siblings.splice(replace_from..replace_from + replace_n, new_children);
            let level = parent.buf.header().level;
            content = Content::Interior(siblings, level);
            level_idx -= 1;
            node = parent;
            // A root left with one child we just built: the child becomes the root.
            if node.lid == Lid::ROOT
                && let Content::Interior(ch, _) = &content
                && ch.len() == 1
                && self.collapse_root(plan, ch[0].lid, node)
            {
                return true;
            }
        }
    }

    /// Tries to merge `content` (of `node`, child `idx` of `parent`) with a
    /// neighbour. On success the parent is locked, the merged node is planned
    /// and (first replaced index, its parent entry) is returned; otherwise the
    /// content comes back unchanged.
    fn try_merge<'a>(
        &self,
        plan: &mut Plan<'a>,
        parent: Step,
        siblings: &[Child<'a>],
        idx: usize,
        node: Step,
        content: Content<'a>,
    ) -> Result<(usize, Child<'a>), Content<'a>> {
        let cap = content.capacity(self);
        let bytes = content.bytes(self);
        // Prefer the right neighbour (this node survives), else the left one
        // (it survives): the survivor is always the left node, so no leaf
        // outside the parent ever points at the removed one.
        let (left_idx, other_idx) = if idx + 1 < siblings.len() {
            (idx, idx + 1)
        } else if idx > 0 {
            (idx - 1, idx)
        } else {
            return Err(content);
        };
        let other_lid = siblings[if other_idx == idx {
            left_idx
        } else {
            other_idx
        }]
        .lid;
        let Some(obuf) = self.pages.get(other_lid) else {
            return Err(content);
        };
        let ostate = obuf.load_state();
        let other_content = match &content {
            Content::Leaf(_) => Content::Leaf(leaf_entries(obuf)),
            Content::Interior(_, l) => Content::Interior(children_of(obuf), *l),
        };
        let obytes = other_content.bytes(self);
        let sep_bytes = interior_item_len(siblings[other_idx].key);
        // Merged nodes stay under three quarters full so the next few writes
        // do not split them again; a node with nothing in it (an empty leaf,
        // an interior node left with one child) merges whenever it fits, so
        // empty nodes and one-child parents go away.
        let limit = if bytes == 0 { cap } else { cap * 3 / 4 };
        if bytes + obytes + sep_bytes > limit {
            return Err(content);
        }
        let held_before = plan.held.len();
        if !try_lock(obuf, ostate) || {
            plan.held.push(Held {
                buf: obuf,
                state: ostate,
            });
            !self.lock(plan, parent)
        } {
            unlock_all(&plan.held[held_before..]);
            plan.held.truncate(held_before);
            return Err(content);
        }
        // Entries of the other node were read before the lock; the lock's
        // compare-and-swap on the same state proves they are unchanged.
        let (left, right_c, left_step, right_buf) = if other_idx == idx + 1 {
            (content, other_content, node, obuf)
        } else {
            (
                other_content,
                content,
                Step {
                    buf: obuf,
                    state: ostate,
                    lid: other_lid,
                },
                node.buf,
            )
        };
        let merged = match (left, right_c) {
            (Content::Leaf(mut a), Content::Leaf(b)) => {
                a.extend(b);
                Content::Leaf(a)
            }
            (Content::Interior(mut a, l), Content::Interior(mut b, _)) => {
                b[0].key = siblings[other_idx].key;
                a.extend(b);
                Content::Interior(a, l)
            }
            _ => unreachable!("siblings share a level"),
        };
        let right_lid = siblings[other_idx].lid;
        let right_link = if merged.level() == 0 {
            Lid(right_buf.header().link)
        } else {
            Lid::NONE
        };
        plan.nodes.push(NewNode {
            lid: left_step.lid,
            content: merged,
            replaces: Some(left_step.buf),
            right: right_link,
        });
        plan.kills.push((right_lid, right_buf));
        Ok((
            left_idx,
            Child {
                key: siblings[left_idx].key,
                lid: left_step.lid,
            },
        ))
    }

    /// The root has one child, which this plan builds: give its content to
    /// the root LID instead. True if done.
    fn collapse_root<'a>(&self, plan: &mut Plan<'a>, child: Lid, root: Step) -> bool {
        let Some(i) = plan.nodes.iter().position(|n| n.lid == child) else {
            return false;
        };
        if !self.lock(plan, root) {
            return false;
        }
        let mut n = plan.nodes.remove(i);
        match n.replaces {
            Some(old) => plan.kills.push((child, old)),
            None => {
                if let Some(f) = plan.fresh.iter().position(|&l| l == child) {
                    let lid = plan.fresh.swap_remove(f);
                    self.pages.recycle(lid);
                }
            }
        }
        n.lid = Lid::ROOT;
        n.replaces = Some(root.buf);
        n.right = Lid::NONE;
        plan.nodes.push(n);
        true
    }

    fn lock<'a>(&self, plan: &mut Plan<'a>, step: Step) -> bool {
        if plan.held.iter().any(|h| h.buf == step.buf) {
            return true;
        }
        if try_lock(step.buf, step.state) {
            plan.held.push(Held {
                buf: step.buf,
                state: step.state,
            });
            true
        } else {
            false
        }
    }

    fn fresh<'a>(&self, plan: &mut Plan<'a>) -> Lid {
        let lid = self.pages.allocate();
        plan.fresh.push(lid);
        lid
    }

    /// Builds every planned buffer at version `v`, publishes them, releases
    /// `v` and retires what they replaced.
    fn publish<'a>(&self, guard: &Guard, plan: Plan<'a>, v: u64) {
        let mut built = Vec::with_capacity(plan.nodes.len());
        for n in plan.nodes {
            let buf = match n.content {
                Content::Leaf(mut entries) => {
                    // The written item is the one entry without a version yet
                    // (versions start at 1).
                    for e in entries.iter_mut().filter(|e| e.version == 0) {
                        e.version = v;
                    }
                    build::build_leaf(&self.g, &self.shared.counter, &entries, v, n.lid, n.right)
                }
                Content::Interior(children, level) => {
                    build::build_interior(&self.g, &self.shared.counter, &children, v, n.lid, level)
                }
            };
            if let Some(old) = n.replaces {
                buf.header().old.store(old.as_raw(), CoreOrdering::Relaxed);
            }
            built.push((n.lid, buf, n.replaces));
        }
        let mut anchors = Vec::new();
        for &(lid, old) in &plan.kills {
            let d = build::build_dead(&self.g, &self.shared.counter, v, lid);
            d.header().old.store(old.as_raw(), CoreOrdering::Relaxed);
            anchors.push((lid, d, old));
        }
        // Fresh LIDs first (unreachable until a parent names them), then the
        // replaced ones; readers at versions < v never look past the old
        // buffers, and readers at >= v start only after the release below.
        for &(lid, buf, replaces) in built.iter().filter(|b| b.2.is_none()) {
            debug_assert!(replaces.is_none());
            self.pages.set(lid, Some(buf));
        }
        for &(lid, buf, _) in built.iter().filter(|b| b.2.is_some()) {
            self.pages.set(lid, Some(buf));
        }
        for &(lid, d, _) in &anchors {
            self.pages.set(lid, Some(d));
        }
        // Old buffers become obsolete (writers that reach them restart), then
        // the new ones open.
        for h in &plan.held {
            crate::sync::schedule_point();
            h.buf.header().state.store(
                h.state | STATE_LOCKED | STATE_OBSOLETE,
                CoreOrdering::Release,
            );
        }
        for &(_, buf, _) in &built {
            super::unlock_new(buf);
        }
        self.clock.complete(v);
        for (lid, _, replaces) in built {
            if let Some(old) = replaces {
                self.retire_after(guard, old, lid, v, false);
            }
        }
        for (lid, d, _) in anchors {
            // The anchor's older buffer is retired like any replaced buffer;
            // the anchor itself waits until nothing older remains.
            let old = d.old().expect("anchor has an older buffer");
            self.retire_after(guard, old, lid, v, false);
            self.retire_after(guard, d, lid, v, true);
        }
    }
}
