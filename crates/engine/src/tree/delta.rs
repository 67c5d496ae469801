//! The tree's side of incremental checkpoints (`durable::delta`): which
//! leaves changed between two read versions, and what they hold.
//!
//! A leaf whose buffer is older than `since` changed only by log appends,
//! every one with its write's version, delete markers included; so exactly
//! the keys whose newest item at `rv` is newer than `since` changed
//! (`LeafDelta::Keys`). Leaves without a log item newer than `since` are
//! skipped after reading their directory. A leaf whose buffer was created
//! after `since` (a split, node merge, log merge or root change since
//! then, each published at its write's version) keeps every item's
//! version, but may have dropped delete markers: it reports its keys newer
//! than `since` when the caller knows the deleted keys by other means,
//! else the whole leaf, its fence range and every live item in it
//! (`LeafDelta::Range`).
//!
//! The fences come from the descent: at one read version the tree is
//! immutable, and a leaf's range is `[separator that routes to it, next
//! separator)`, the deepest level's being the tightest.

use std::cmp::Ordering as Cmp;

use super::Tree;
use super::node::{self, ItemRef, NodePtr, decode_interior, decode_item, key_cmp, log_dir_entry};
use super::read::{published, published_leaf};
use crate::types::Now;

/// What changed in one leaf since a version.
#[derive(Debug)]
pub(crate) enum LeafDelta {
    /// Every key in `[lo, hi)` (None: unbounded) not among `items` is
    /// absent at the read version; `items` are the live ones, ascending.
    Range {
        lo: Option<&'static [u8]>,
        hi: Option<&'static [u8]>,
        items: Vec<ItemRef<'static>>,
    },
    /// The keys whose newest item at the read version is newer than the
    /// base version: the item (None: absent, deleted or expired).
    Keys(Vec<(&'static [u8], Option<ItemRef<'static>>)>),
}

impl Tree {
    /// The leaf whose range holds `key` at `rv`, with its low and high
    /// fences (None: unbounded). The caller holds an epoch pin.
    pub(crate) fn descend_fenced(
        &self,
        key: &[u8],
        rv: u64,
    ) -> (NodePtr, Option<&'static [u8]>, Option<&'static [u8]>) {
        let mut p = self.resolve(super::node::Lid::ROOT, rv);
        let (mut lo, mut hi) = (None, None);
        while !p.is_leaf() {
            let buf = published(p);
            let h = p.header();
            let end = h.sorted_end as usize;
            // The last separator <= key routes it; the one after it (if
            // any) bounds the child's range from above.
            let mut child = node::Lid(h.link);
            let mut at = node::sorted_start_of(h);
            while at < end {
                let (k, lid, len) = decode_interior(buf, at);
                if key_cmp(k, key) == Cmp::Greater {
                    hi = Some(k);
                    break;
                }
                child = lid;
                lo = Some(k);
                at += len;
            }
            p = self.resolve(child, rv);
        }
        (p, lo, hi)
    }

    /// What changed in the leaf holding `key` at `rv` since version
    /// `since`, and the leaf's high fence (where the next leaf starts).
    /// None for the change: nothing did. `keys_only`: the caller knows
    /// every key deleted since `since` (`durable::deletes`), so a rewritten
    /// leaf too reports only its keys newer than `since`. The caller holds
    /// an epoch pin.
    pub(crate) fn leaf_delta(
        &self,
        key: &[u8],
        rv: u64,
        since: u64,
        now: &Now,
        keys_only: bool,
    ) -> (Option<LeafDelta>, Option<&'static [u8]>) {
        let (leaf, lo, hi) = self.descend_fenced(key, rv);
        let in_range = |k: &[u8]| {
            lo.is_none_or(|l| key_cmp(k, l) != Cmp::Less)
                && hi.is_none_or(|h| key_cmp(k, h) == Cmp::Less)
        };
        let rewritten = leaf.version() > since;
        if rewritten && !keys_only {
            let mut items = Vec::new();
            super::read::leaf_walk(leaf, rv, super::read::WalkFrom::First, |it| {
                debug_assert!(in_range(it.key), "a leaf's key outside its fences");
                if it.is_live(now) {
                    items.push(it);
                }
                true
            });
            return (Some(LeafDelta::Range { lo, hi, items }), hi);
        }
        let (buf, nlog) = published_leaf(leaf);
        let newer = (0..nlog.min(crate::config::LOG_DIR_MAX)).any(|i| {
            let v = decode_item(buf, log_dir_entry(buf, i).at as usize, true).version;
            v > since && v <= rv
        });
        if !rewritten && !newer {
            return (None, hi);
        }
        let mut keys = Vec::new();
        super::read::leaf_walk(leaf, rv, super::read::WalkFrom::First, |it| {
            debug_assert!(in_range(it.key), "a leaf's key outside its fences");
            if it.version > since {
                keys.push((it.key, it.is_live(now).then_some(it)));
            }
            true
        });
        (Some(LeafDelta::Keys(keys)), hi)
    }
}
