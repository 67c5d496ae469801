//! A full check of every node's layout against the rules `node` states:
//! shortcuts (offsets, prefixes, top line, group ends), the shared prefix,
//! and a leaf's log directory against its log items. Tests run it on
//! quiescent trees after randomized writes; the readers' unsafe byte
//! accesses rely on exactly these rules.

use super::Tree;
use super::node::{
    self, Header, ITEM_DUP, ITEM_EXTERNAL, ITEM_REPLACES, ITEM_TOMBSTONE, LOG_META_DUP,
    LOG_META_EXTERNAL, LOG_META_REPLACES, LOG_META_TOMBSTONE, Lid, Model, NODE_LEARNED, NodePtr,
    ShortcutBlock, decode_interior, decode_item, key_fp, key_prefix, leaf_item_key, log_dir_entry,
};
use super::node::{ITEM_SHORT_LENS, ITEM_VERSION32};
use super::read::{
    LogOrder, WalkFrom, find_segment, first_bp_from, leaf_walk, published_leaf, scan_segment,
};
use crate::config::{ITEM_HEADER_BYTES, SHORTCUTS_PER_LINE};

/// A rule of the node layout that a buffer breaks.
#[derive(Debug)]
pub(crate) struct LayoutViolation {
    node: u64,
    level: u8,
    what: String,
}

impl std::fmt::Display for LayoutViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} (level {}): {}",
            self.node, self.level, self.what
        )
    }
}

impl std::error::Error for LayoutViolation {}

type Checked = Result<(), LayoutViolation>;

impl Tree {
    /// Checks every current buffer. The tree must be quiescent.
    pub(crate) fn check_layout(&self) -> Checked {
        for (lid, p) in self.pages.entries() {
            let h = p.header();
            if h.flags & node::NODE_DEAD != 0 {
                continue;
            }
            let (buf, nlog) = published_leaf(p);
            let mut c = NodeCheck {
                g: &self.g,
                lid,
                p,
                h,
                buf,
                nlog,
                leaf: h.level == 0,
                items: Vec::new(),
            };
            c.buffer_size()?;
            c.sorted_block()?;
            c.shortcuts()?;
            if !c.leaf {
                if nlog != 0 || buf.len() != h.sorted_end as usize {
                    return c.fail("interior node with a log".into());
                }
                continue;
            }
            c.log_directory()?;
            c.log_groups()?;
            c.walks()?;
        }
        Ok(())
    }
}

/// One buffer under check, and its sorted items (offset, key) once read.
struct NodeCheck<'a> {
    g: &'a crate::config::Geometry,
    lid: Lid,
    p: NodePtr,
    h: &'a Header,
    buf: &'a [u8],
    nlog: usize,
    leaf: bool,
    items: Vec<(usize, &'a [u8])>,
}

impl<'a> NodeCheck<'a> {
    fn fail(&self, what: String) -> Checked {
        Err(LayoutViolation {
            node: self.lid.0,
            level: self.h.level,
            what,
        })
    }

    /// The buffer's size class holds what the node published, and a leaf's
    /// whole log room behind its sorted block: log appends write up to
    /// `log_bytes` past `sorted_end` without looking at more than the
    /// capacity (`node::buffer`, "Size classes").
    fn buffer_size(&self) -> Checked {
        let h = self.h;
        let cap = self.p.capacity(self.g);
        if h.class == 0 || h.class as usize * node::class_unit(self.g.node_size) > self.g.node_size
        {
            return self.fail(format!("size class {}", h.class));
        }
        let needed = h.sorted_end as usize + if self.leaf { self.g.log_bytes } else { 0 };
        if self.buf.len() > cap || needed > cap {
            return self.fail(format!(
                "buffer of {cap} bytes under size {} and room {needed}",
                self.buf.len()
            ));
        }
        Ok(())
    }

    /// Item boundaries and keys of the sorted block, its flags and shared
    /// prefix.
    fn sorted_block(&mut self) -> Checked {
        let (h, buf, leaf) = (self.h, self.buf, self.leaf);
        if h.sorted_start as usize != node::sorted_start(self.g, h.level) {
            return self.fail(format!("sorted_start {}", h.sorted_start));
        }
        let mut at = h.sorted_start as usize;
        while at < h.sorted_end as usize {
            // The lengths read first, so that a corrupt one fails the check
            // instead of a slice.
            if leaf
                && (at + 7 > h.sorted_end as usize
                    || at + node::sorted_item_len(buf, at).0 > h.sorted_end as usize)
            {
                return self.fail(format!("sorted item at {at} runs past the sorted block"));
            }
            let (key, len) = if leaf {
                leaf_item_key(buf, at, false)
            } else {
                let (k, _, len) = decode_interior(buf, at);
                (k, len)
            };
            self.items.push((at, key));
            at += len;
        }
        let items = &self.items;
        if at != h.sorted_end as usize || items.len() != h.nitems as usize {
            return self.fail(format!("{} items end at {at}", items.len()));
        }
        // `free` releases sorted-block values only under this flag.
        // Log-only flags never reach the sorted block (merges copy log
        // items into it without encoding them again).
        if leaf
            && let Some(&(off, _)) = items
                .iter()
                .find(|&&(off, _)| buf[off] & (ITEM_REPLACES | ITEM_DUP) != 0)
        {
            return self.fail(format!("sorted item at {off} has log flags"));
        }
        if leaf {
            for &(off, _) in items {
                self.compact_header(off)?;
            }
        }
        let external = items.iter().any(|&(off, _)| buf[off] & ITEM_EXTERNAL != 0);
        if leaf && external && h.flags & node::NODE_EXTERNAL == 0 {
            return self.fail("out-of-line value without NODE_EXTERNAL".into());
        }
        let skip = h.prefix_skip as usize;
        if let (Some(first), Some(last)) = (items.first(), items.last())
            && skip != node::prefix_skip(first.1, last.1)
        {
            return self.fail(format!("prefix_skip {skip}"));
        }
        Ok(())
    }

    /// A sorted item's header is the one the encoder picks (`node::item`):
    /// one-byte lengths exactly when the key and an inline value fit them,
    /// never for an out-of-line value; a four-byte version never 0. (A
    /// version in eight bytes may fit four: the item a merge or split
    /// publishes is built before its version is known.)
    fn compact_header(&self, off: usize) -> Checked {
        let buf = self.buf;
        let flags = buf[off];
        let item = decode_item(buf, off, false);
        let external = flags & ITEM_EXTERNAL != 0;
        let fits = item.key.len() <= 255 && item.value.len() <= 255 && !external;
        if (flags & ITEM_SHORT_LENS != 0) != fits {
            return self.fail(format!(
                "sorted item at {off}: flags {flags:#x} for a {}-byte key and {}-byte value",
                item.key.len(),
                item.value.len()
            ));
        }
        if flags & ITEM_VERSION32 != 0 && item.version == 0 {
            return self.fail(format!("sorted item at {off}: version 0 in four bytes"));
        }
        Ok(())
    }

    /// Shortcuts (offsets, prefixes, top line, group ends), and that the
    /// search finds every sorted key.
    fn shortcuts(&self) -> Checked {
        let (h, buf, items) = (self.h, self.buf, &self.items);
        let skip = h.prefix_skip as usize;
        let sc = ShortcutBlock::of(h);
        if items.is_empty() != (sc.n == 0) || sc.n > self.g.max_shortcuts() {
            return self.fail(format!("{} shortcuts for {} items", sc.n, items.len()));
        }
        let mut prev = 0;
        for i in 0..sc.n {
            let (prefix, off) = sc.get(buf, i);
            let Some(&(_, key)) = items.iter().find(|(a, _)| *a == off) else {
                return self.fail(format!("shortcut {i} offset {off} is no item"));
            };
            if (i == 0 && off != h.sorted_start as usize) || (i > 0 && off <= prev) {
                return self.fail(format!("shortcut {i} offset {off} out of order"));
            }
            prev = off;
            if prefix != key_prefix(&key[skip..]) {
                return self.fail(format!("shortcut {i} prefix"));
            }
            let learned = h.flags & NODE_LEARNED != 0;
            if sc.has_top()
                && !learned
                && i % SHORTCUTS_PER_LINE == 0
                && sc.top_prefixes(buf)[i / SHORTCUTS_PER_LINE] != prefix
            {
                return self.fail(format!("top line entry of shortcut {i}"));
            }
        }
        for g in 0..sc.groups() {
            let end = if (g + 1) * SHORTCUTS_PER_LINE < sc.n {
                sc.get(buf, (g + 1) * SHORTCUTS_PER_LINE).1
            } else {
                h.sorted_end as usize
            };
            if sc.group(buf, g).offsets[SHORTCUTS_PER_LINE] as usize != end {
                return self.fail(format!("group {g} end"));
            }
        }
        if h.flags & NODE_LEARNED != 0 {
            let m = Model::of(buf, h);
            if self.leaf || !sc.has_top() || m.n != items.len() {
                return self.fail("a learned model on a node that cannot have one".into());
            }
            if !m.well_formed() || (2 * m.err + 2) * m.item_len > self.g.segment_bytes {
                return self.fail(format!("a learned model out of shape: {m:?}"));
            }
            if h.sorted_end as usize != h.sorted_start as usize + items.len() * m.item_len {
                return self.fail("a learned node's items do not fill its sorted block".into());
            }
            // Between keys and strict searches too: just above item i is
            // item i; strictly below it, item i - 1.
            for (i, &(off, key)) in items.iter().enumerate() {
                let above = [key, &[0]].concat();
                let hit = find_segment(buf, h, &above, false)
                    .and_then(|(from, to)| scan_segment(buf, false, from, to, &above, false));
                let below = find_segment(buf, h, key, true)
                    .and_then(|(from, to)| scan_segment(buf, false, from, to, key, true));
                let before = i.checked_sub(1).map(|j| items[j].0);
                if hit.map(|h| h.0) != Some(off) || below.map(|b| b.0) != before {
                    return self.fail(format!("a learned search misses around the item at {off}"));
                }
            }
            let at = |i: usize| h.sorted_start as usize + i * m.item_len;
            if items.iter().enumerate().any(|(i, &(off, _))| off != at(i)) {
                return self.fail("a learned node's items are not all one length".into());
            }
        }
        for &(off, key) in items {
            let hit = find_segment(buf, h, key, false)
                .and_then(|(from, to)| scan_segment(buf, self.leaf, from, to, key, false));
            if hit.map(|(o, _, eq)| (o, eq)) != Some((off, true)) {
                return self.fail(format!("search misses the item at {off}"));
            }
        }
        Ok(())
    }

    /// The log directory against the log items.
    fn log_directory(&self) -> Checked {
        let (h, buf, nlog) = (self.h, self.buf, self.nlog);
        let mut at = h.sorted_end as usize;
        let mut i = 0;
        while at < buf.len() {
            if i >= nlog {
                return self.fail(format!("more log items than the {nlog} published"));
            }
            let e = log_dir_entry(buf, i);
            let flags = buf[at];
            // A log item keeps the fixed header its append writes into.
            if flags & (ITEM_SHORT_LENS | ITEM_VERSION32) != 0 {
                return self.fail(format!("log item at {at} with compact flags {flags:#x}"));
            }
            let x = ITEM_HEADER_BYTES;
            let bp = u32::from_le_bytes(buf[at + x..at + x + 4].try_into().expect("4"));
            let hint = buf[at + x + 4] as usize;
            let (key, len) = leaf_item_key(buf, at, true);
            let meta_ok = (e.meta & LOG_META_REPLACES != 0) == (flags & ITEM_REPLACES != 0)
                && (e.meta & LOG_META_DUP != 0) == (flags & ITEM_DUP != 0)
                && (e.meta & LOG_META_TOMBSTONE != 0) == (flags & ITEM_TOMBSTONE != 0)
                && (e.meta & LOG_META_EXTERNAL != 0) == (flags & ITEM_EXTERNAL != 0);
            if e.at as usize != at
                || e.bp as u32 != bp
                || e.hint() != hint
                || e.fp != key_fp(key)
                || !meta_ok
            {
                return self.fail(format!("log directory entry {i}: {e:?}"));
            }
            at += len;
            i += 1;
        }
        if i != nlog {
            return self.fail(format!("{nlog} log entries published, {i} log items"));
        }
        Ok(())
    }

    /// A walk meets the log a back pointer's group at a time: the groups,
    /// chained, are the whole log order.
    fn log_groups(&self) -> Checked {
        let (buf, nlog) = (self.buf, self.nlog);
        let whole = LogOrder::of(buf, nlog);
        let mut chained = Vec::new();
        let mut bp = first_bp_from(buf, nlog, 0);
        while bp != u32::MAX {
            let (group, next) = LogOrder::at_bp(buf, nlog, bp);
            if next <= bp {
                return self.fail(format!("log group after {bp} at {next}"));
            }
            chained.extend((0..group.n).map(|j| (group.at(j), group.bp(j), group.flags(j))));
            bp = next;
        }
        let all: Vec<_> = (0..whole.n)
            .map(|j| (whole.at(j), whole.bp(j), whole.flags(j)))
            .collect();
        if chained != all {
            return self.fail(format!("log groups {chained:?}, log order {all:?}"));
        }
        Ok(())
    }

    /// A walk from any sorted item is the whole walk past the item before
    /// it, at the newest version and at the buffer's own.
    fn walks(&self) -> Checked {
        let items = &self.items;
        for rv in [u64::MAX, self.h.version] {
            let walk = |from: WalkFrom<'_>| {
                let mut seen = Vec::new();
                leaf_walk(self.p, rv, from, |it| {
                    seen.push((it.key.to_vec(), it.version));
                    true
                });
                seen
            };
            let full = walk(WalkFrom::First);
            let ends = items
                .iter()
                .map(|&(off, _)| off)
                .chain([self.h.sorted_end as usize]);
            for (k, off) in ends.enumerate() {
                let after = k.checked_sub(1).map(|k| items[k].1);
                let want: Vec<_> = full
                    .iter()
                    .filter(|(key, _)| after.is_none_or(|a| &key[..] > a))
                    .cloned()
                    .collect();
                if walk(WalkFrom::Offset(off)) != want {
                    return self.fail(format!("walk from sorted offset {off} at version {rv}"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::{Config, Store};

    /// Keys of several shapes: random bytes, a long shared prefix with a
    /// counter, short keys, and keys that are prefixes of others.
    fn key(rng: &mut StdRng, shape: u32, max: usize) -> Vec<u8> {
        let n = rng.random_range(0..3000u32);
        let mut k = match shape {
            0 => (0..rng.random_range(1..=max.min(24)))
                .map(|_| rng.random())
                .collect(),
            1 => format!("user:000000{n:06}").into_bytes(),
            2 => format!("{n}").into_bytes(),
            _ => format!("k{}", n % 50)
                .repeat(1 + (n as usize % 3))
                .into_bytes(),
        };
        k.truncate(max);
        k
    }

    #[test]
    fn layout_holds_after_random_writes() {
        for node in [1024, 8192] {
            for shape in 0..4 {
                let store = Store::new(Config::with_node_size(node)).unwrap();
                let max = store.max_key_len();
                let mut rng = StdRng::seed_from_u64(u64::from(shape) * 7 + node as u64);
                let mut model = std::collections::BTreeMap::new();
                for round in 0..6 {
                    for _ in 0..4000 {
                        let k = key(&mut rng, shape, max);
                        if rng.random_bool(0.3) {
                            store.delete(&k).unwrap();
                            model.remove(&k);
                        } else {
                            // Some values too large to store inline, so
                            // the out-of-line flags get checked too.
                            let len = if rng.random_bool(0.05) {
                                store.tree().g.inline_value_max + 1
                            } else {
                                rng.random_range(0..40)
                            };
                            let v = vec![round as u8; len];
                            store.put(&k, &v).unwrap();
                            model.insert(k, v);
                        }
                    }
                    store.tree().check_layout().unwrap_or_else(|e| {
                        panic!("node {node}, shape {shape}, round {round}: {e}")
                    });
                    for (k, v) in &model {
                        assert_eq!(store.get(k).unwrap().as_deref(), Some(&v[..]));
                    }
                }
            }
        }
    }
}

/// A store of `node` byte nodes holding `n` 8-byte keys in scattered
/// order, each with `value`: leaves of every fill, after splits and merges.
#[cfg(test)]
fn scattered(node: usize, n: u64, value: &[u8]) -> crate::Store {
    let store = crate::Store::new(crate::Config::with_node_size(node)).unwrap();
    for i in 0..n {
        let k = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
        store.put(&k, value).unwrap();
    }
    store
}

/// A planted off-by-one in the size class fails the check: a leaf whose
/// header names one class less than the smallest that holds it no longer
/// has its log room. (Any leaf: which leaves sit in exactly the smallest
/// class varies from run to run, as a freed buffer of a larger class may
/// be reused for one, and buffers are freed as the process-wide epochs
/// allow, so other tests running beside this one change it.)
#[cfg(test)]
mod size_class {
    #[test]
    fn a_class_one_too_small_fails_the_check() {
        let store = super::scattered(8192, 20_000, &[7; 16]);
        let t = store.tree();
        t.check_layout().unwrap();
        let unit = super::node::class_unit(t.g.node_size);
        let (_, p) = t
            .pages
            .entries()
            .into_iter()
            .find(|(_, p)| p.header().level == 0 && p.header().nitems > 0)
            .expect("a leaf with items");
        let needed = p.header().sorted_end as usize + t.g.log_bytes;
        let smallest = needed.div_ceil(unit) as u8;
        assert!(p.header().class >= smallest && smallest > 1);
        // SAFETY: the tree is quiescent (this thread made every write and
        // none is in flight); the byte is put back before anything reads
        // the leaf again.
        let class = unsafe { &mut p.header_mut().class };
        let was = *class;
        *class = smallest - 1;
        let err = t.check_layout().map_err(|e| e.to_string());
        *class = was;
        let err = err.expect_err("a class one too small");
        assert!(err.contains("buffer of"), "{err}");
        t.check_layout().unwrap();
    }
}

/// Planted off-by-ones in the compact item header fail the check: a
/// one-byte key length one too long, and a four-byte version read as eight.
#[cfg(test)]
mod compact_items {
    use crate::Store;
    use crate::tree::node::{ITEM_SHORT_LENS, ITEM_VERSION32, NodePtr};

    /// The error `check_layout` gives with `f` applied to the first sorted
    /// item of a leaf with items (put back afterwards).
    fn check_with(store: &Store, at: impl Fn(usize) -> usize, f: impl Fn(&mut u8)) -> String {
        let t = store.tree();
        t.check_layout().unwrap();
        let (_, p): (_, NodePtr) = t
            .pages
            .entries()
            .into_iter()
            .find(|(_, p)| p.is_leaf() && p.header().nitems > 2)
            .expect("a leaf with items");
        let off = at(p.header().sorted_start as usize);
        // SAFETY: the tree is quiescent (this thread made every write and
        // none is in flight); the byte is put back before anything else
        // reads the leaf.
        let byte = unsafe { &mut p.bytes_mut(off, off + 1)[0] };
        let kept = *byte;
        f(byte);
        let err = t.check_layout().map_err(|e| e.to_string());
        *byte = kept;
        t.check_layout().unwrap();
        err.expect_err("a corrupted item header")
    }

    fn store() -> Store {
        super::scattered(1024, 2_000, &[1; 12])
    }

    #[test]
    fn a_short_key_length_one_too_long_fails_the_check() {
        let store = store();
        let err = check_with(&store, |start| start + 1, |klen| *klen += 1);
        println!("{err}");
    }

    #[test]
    fn a_version_width_flag_dropped_fails_the_check() {
        let store = store();
        let err = check_with(
            &store,
            |start| start,
            |flags| {
                assert!(*flags & ITEM_SHORT_LENS != 0 && *flags & ITEM_VERSION32 != 0);
                *flags &= !ITEM_VERSION32;
            },
        );
        println!("{err}");
    }
}

#[cfg(test)]
mod fill {
    use crate::{Config, Store};

    /// Splits must not leave nearly empty leaves behind. A split that closed
    /// every part a little under its target (whole items) left a one-item
    /// part at the end; with random inserts about half the leaves were
    /// under 1 KB and memory per record doubled.
    #[test]
    fn random_inserts_keep_leaves_well_filled() {
        let store = Store::new(Config::default()).unwrap();
        let mut x: u64 = 88_172_645_463_325_252;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = format!("{x:016x}");
            store.put(k.as_bytes(), k.as_bytes()).unwrap();
        }
        let t = store.tree();
        let cap = t.g.leaf_capacity;
        let (mut leaves, mut bytes, mut sparse) = (0usize, 0usize, 0usize);
        for (_, p) in t.pages.entries() {
            let h = p.header();
            if h.level != 0 {
                continue;
            }
            let sorted = h.sorted_end as usize - h.sorted_start as usize;
            leaves += 1;
            bytes += sorted;
            if sorted < cap / 4 {
                sparse += 1;
            }
        }
        // Splits leave halves of at least 3/8 of capacity that then grow:
        // B-tree leaves under random inserts average about 70%.
        assert!(
            bytes / leaves >= cap / 2,
            "average leaf {} of {cap} bytes",
            bytes / leaves
        );
        assert!(
            sparse * 100 < leaves,
            "{sparse} of {leaves} leaves under a quarter full"
        );
    }
}
