//! The tree's side of the hot-entry cache (DPA-Store 3.1.2, `readexec::hot`):
//! a stamp records where a key's newest item lies in its leaf buffer and
//! how much of that buffer was published; a later read at a newer version
//! may take the item from the stamp, without a descent, only if the tree
//! proves the stamp still holds.
//!
//! Why a valid stamp gives exactly what a descent would:
//! - a leaf's key range is fixed for the life of a buffer: every split,
//!   node merge and log merge publishes a new buffer for each leaf whose
//!   range or items it changes (a removed leaf gets a dead anchor), so a
//!   LID whose current buffer is the stamped one still holds the key's
//!   range, and a descent at any version that resolves to it reaches it;
//! - a published buffer changes only by log appends: the item past the
//!   published size and its directory entry (with its key's fingerprint)
//!   at the published log count, then both published by one store of the
//!   state word (size and count); items below the size and directory
//!   entries below the count never change. So if no entry appended since
//!   the stamp carries the key's fingerprint, the key's newest item in the
//!   buffer is still the stamped one;
//! - the stamp is taken only when that newest item (over every published
//!   version, not only those the stamping read saw) is visible at the
//!   stamping read version, and is used only at read versions at or above
//!   it, where the buffer (created no later) is what `resolve` returns.
//!
//! A buffer is named by its address and its creation version: an address
//! may be reused once the buffer is freed, but not with the same version
//! for the same LID. The stamp's address is compared, never dereferenced.

use std::cmp::Ordering as Cmp;

use super::search::segment_seek;
use super::{Seek, find_segment, log_fp_matches, published_leaf};
use crate::config::LOG_DIR_MAX;
use crate::tree::Tree;
use crate::tree::node::{ItemRef, Lid, decode_item, key_cmp, key_fp, log_dir_entry, log_dir_fp};

/// `at` of a stamp that records the key's absence from its leaf.
const ABSENT: u32 = u32::MAX;

/// Where a key's newest item lay in its leaf buffer, and how much of the
/// buffer was published when that was last proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HotStamp {
    lid: Lid,
    /// The buffer's address: compared with the page table's, never read.
    buf: usize,
    /// The buffer's creation version.
    created: u64,
    /// The read version of the stamping read: the stamp serves no older one.
    since: u64,
    /// Published log items when last proven.
    nlog: u32,
    /// The item's offset (`ABSENT`: the key has no item in the leaf).
    at: u32,
    in_log: bool,
}

/// What a stamp proves at a read version.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Proven {
    /// The key's newest item visible at that version (maybe a delete
    /// marker or expired: the caller decides, as after a descent).
    Item(ItemRef<'static>),
    /// The key has no item at that version.
    Absent,
}

impl Tree {
    /// Reads `key` at `rv` by a descent and stamps what it found. None when
    /// it cannot be stamped: the key's newest item in its leaf is not
    /// visible at `rv` yet (a write in flight). (The check of the log count
    /// against the directory's size is a defence: appends stop there.)
    /// The caller holds the epoch pin `rv` was taken under.
    pub(crate) fn hot_stamp(&self, key: &[u8], rv: u64) -> Option<(HotStamp, Proven)> {
        let (leaf, _) = self.descend(Seek::Key(key), rv);
        let (buf, nlog) = published_leaf(leaf);
        if nlog > LOG_DIR_MAX {
            return None;
        }
        let seg = find_segment(buf, leaf.header(), key, false);
        // The newest item over every published version: the log is in
        // arrival order, which is version order.
        let mut found = seg
            .map(|(from, to)| segment_seek(buf, from, to, key))
            .and_then(|(at, hit)| hit.then_some((at, false)));
        let mut m = log_fp_matches(buf, nlog, key_fp(key));
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let at = log_dir_entry(buf, i).at as usize;
            if key_cmp(decode_item(buf, at, true).key, key) == Cmp::Equal {
                found = Some((at, true));
            }
        }
        let (at, in_log, proven) = match found {
            Some((at, in_log)) => {
                let it = decode_item(buf, at, in_log);
                if it.version > rv {
                    return None;
                }
                (at as u32, in_log, Proven::Item(it))
            }
            None => (ABSENT, false, Proven::Absent),
        };
        let stamp = HotStamp {
            lid: Lid(leaf.header().lid),
            buf: leaf.as_raw() as usize,
            created: leaf.version(),
            since: rv,
            nlog: nlog as u32,
            at,
            in_log,
        };
        Some((stamp, proven))
    }

    /// What `stamp` (of a key with fingerprint `fp`) proves at read version
    /// `rv`, if it still holds; the stamp then covers the log items
    /// appended since. None: the stamp no longer holds (read the tree).
    /// The caller holds the epoch pin `rv` was taken under. `fp` None skips
    /// the check of appended log items: a planted bug for the tests
    /// (`HotCache::plant_stale_hits_for_tests`); the buffer is still checked
    /// to be current, so what is read stays allocated.
    pub(crate) fn hot_check(
        &self,
        stamp: &mut HotStamp,
        fp: Option<u8>,
        rv: u64,
    ) -> Option<Proven> {
        if rv < stamp.since {
            return None;
        }
        let p = self.pages().get(stamp.lid)?;
        if p.as_raw() as usize != stamp.buf || p.version() != stamp.created {
            return None;
        }
        let (buf, nlog) = published_leaf(p);
        let seen = stamp.nlog as usize;
        if nlog < seen || nlog > LOG_DIR_MAX {
            return None;
        }
        if let Some(fp) = fp
            && (seen..nlog).any(|i| log_dir_fp(buf, i) == fp)
        {
            return None;
        }
        stamp.nlog = nlog as u32;
        Some(if stamp.at == ABSENT {
            Proven::Absent
        } else {
            Proven::Item(decode_item(buf, stamp.at as usize, stamp.in_log))
        })
    }
}
