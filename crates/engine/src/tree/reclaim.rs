//! Reclamation of replaced buffers (`docs/design.md`, "Why reclamation is safe").
//!
//! A buffer replaced by the write at version `w` serves read versions in
//! `[its own version, w)`. It is retired only after `w` is released, so every
//! reader that pins afterwards reads at a version `>= w` and never follows a
//! chain down to it. Retirement defers through the epoch: once every guard
//! that was pinned at retirement is gone, the only readers that can still
//! reach the buffer are snapshot readers. Then:
//!
//! - if a live snapshot lies in the buffer's interval, it is *held* (it stays
//!   in its chain) until that snapshot is released or expires;
//! - otherwise it is *unlinked*: its newer neighbour's `old` pointer skips it,
//!   and after one more epoch (a snapshot reader may be standing on it) it is
//!   freed. Snapshot readers older than the interval pass the gap unharmed.
//!
//! A removed node's LID is anchored by a dead buffer until the chain behind
//! it is empty; then the anchor is freed and the LID recycled.
//!
//! All chain surgery happens under `Reclaimer::work`; writers only push new
//! chain heads, which never conflicts with surgery below the head.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering as CoreOrdering;
use std::time::Instant;

use super::epoch::{self, Guard};
use super::node::{Lid, NodePtr};
use super::{Shared, Tree};
use crate::sync::Mutex;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Retired {
    pub buf: NodePtr,
    pub lid: Lid,
    /// First read version the buffer serves.
    pub from: u64,
    /// First read version it no longer serves (the replacing write).
    pub to: u64,
    /// A dead anchor rather than a replaced buffer.
    pub anchor: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Reclaimer {
    /// Buffers replaced by writes not yet released (a session's, or a
    /// durable store's waiting for the log): retired once they are.
    pending: Mutex<Vec<Retired>>,
    /// Retired buffers whose epoch grace has passed, waiting for `collect`.
    graced: Mutex<Vec<Retired>>,
    /// Chain surgery and the lists below.
    work: Mutex<Work>,
}

#[derive(Debug, Default)]
struct Work {
    /// Buffers a snapshot still needs.
    held: Vec<Retired>,
    /// Dead anchors whose chain is not empty yet.
    anchors: Vec<Retired>,
}

impl Tree {
    /// Retires `buf` (of `lid`), replaced by the released write `to`.
    pub(crate) fn retire(&self, guard: &Guard, buf: NodePtr, lid: Lid, to: u64, anchor: bool) {
        debug_assert!(self.clock.read_version() >= to, "retire before release");
        buf.header().replaced_at.store(to, CoreOrdering::Release);
        let r = Retired {
            buf,
            lid,
            from: buf.version(),
            to,
            anchor,
        };
        let shared = Arc::clone(&self.shared);
        shared.deferred.fetch_add(1, CoreOrdering::Relaxed);
        epoch::defer(guard, move || {
            shared.reclaimer.graced.lock().push(r);
            shared.deferred.fetch_sub(1, CoreOrdering::Release);
        });
    }

    /// Retires `buf` once the write `to` that replaced it is released: now
    /// if it is, else at a later `collect`. Until then it stays linked in
    /// its chain, where readers below `to` need it.
    pub(crate) fn retire_after(
        &self,
        guard: &Guard,
        buf: NodePtr,
        lid: Lid,
        to: u64,
        anchor: bool,
    ) {
        if self.clock.is_released(to) {
            self.retire(guard, buf, lid, to, anchor);
            return;
        }
        self.shared.reclaimer.pending.lock().push(Retired {
            buf,
            lid,
            from: buf.version(),
            to,
            anchor,
        });
    }

    /// Retires the pending buffers whose replacing write is released now.
    fn retire_released(&self) {
        let rv = self.clock.read_version();
        let ready: Vec<Retired> = {
            let mut pending = self.shared.reclaimer.pending.lock();
            if pending.is_empty() {
                return;
            }
            let (ready, wait) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|r| r.to <= rv);
            *pending = wait;
            ready
        };
        // Pinned after the release was observed: every reader that pins
        // later reads at a version >= each `to` (see `retire`).
        let guard = self.epochs.pin();
        for r in ready {
            self.retire(&guard, r.buf, r.lid, r.to, r.anchor);
        }
    }

    /// Processes retired buffers whose grace has passed. Cheap when there is
    /// nothing to do; concurrent callers skip rather than wait.
    pub(crate) fn collect(&self, wait: bool) {
        self.retire_released();
        let shared = &self.shared;
        let mut work = if wait {
            shared.reclaimer.work.lock()
        } else {
            match shared.reclaimer.work.try_lock() {
                Some(w) => w,
                None => return,
            }
        };
        let graced = std::mem::take(&mut *shared.reclaimer.graced.lock());
        let mut snaps = shared.snapshots.lock();
        snaps.prune(Instant::now());
        let guard = self.epochs.pin();
        let held = std::mem::take(&mut work.held);
        // Unlinked per LID, one chain walk for all of a LID's buffers: one
        // walk per buffer is quadratic in the chain, and a hot leaf's chain
        // grows long while releases wait (a long atomic group, a snapshot):
        // collect then walked for seconds.
        let mut unlink: BTreeMap<Lid, Vec<NodePtr>> = BTreeMap::new();
        for r in held.into_iter().chain(graced) {
            if r.anchor {
                work.anchors.push(r);
            } else if snaps.any_in(r.from, r.to) {
                work.held.push(r);
            } else {
                unlink.entry(r.lid).or_default().push(r.buf);
            }
        }
        drop(snaps);
        for (lid, bufs) in unlink {
            self.unlink(&guard, lid, bufs);
        }
        let anchors = std::mem::take(&mut work.anchors);
        for a in anchors {
            if a.buf.old().is_some() {
                work.anchors.push(a);
                continue;
            }
            // Nothing older remains, so no snapshot sees this LID; every
            // non-snapshot reader that could was pinned before the grace.
            self.pages.set(a.lid, None);
            let shared = Arc::clone(&self.shared);
            let (buf, lid) = (a.buf, a.lid);
            shared.deferred.fetch_add(1, CoreOrdering::Relaxed);
            epoch::defer(&guard, move || {
                // SAFETY: unreachable: the page-table entry is empty and no
                // buffer names this LID at a version any reader can hold.
                unsafe { buf.free(&shared.geometry, &shared.counter) };
                shared.recycled.lock().push(lid);
                shared.deferred.fetch_sub(1, CoreOrdering::Release);
            });
        }
        let recycled = std::mem::take(&mut *self.shared.recycled.lock());
        for lid in recycled {
            self.pages.recycle(lid);
        }
    }

    /// True when no deferred closure is outstanding and nothing waits for
    /// `collect` (what snapshots hold, and anchors of chains they hold, stay).
    pub(crate) fn drained(&self) -> bool {
        self.shared.deferred.load(CoreOrdering::Acquire) == 0
            && self.shared.reclaimer.graced.lock().is_empty()
            && self.shared.reclaimer.pending.lock().is_empty()
    }

    /// Unlinks `bufs` from `lid`'s chain in one walk and frees each after an
    /// epoch.
    fn unlink(&self, guard: &Guard, lid: Lid, bufs: Vec<NodePtr>) {
        let mut wanted: std::collections::HashSet<usize> =
            bufs.iter().map(|b| b.as_raw() as usize).collect();
        let mut prev = self.pages.get(lid).expect("retired buffer's LID is mapped");
        while !wanted.is_empty() {
            let next = prev.old().expect("retired buffer is in its LID's chain");
            if !wanted.remove(&(next.as_raw() as usize)) {
                prev = next;
                continue;
            }
            let buf = next;
            // `prev` stays: its new `old` is looked at next.
            let below = buf.header().old.load(CoreOrdering::Acquire);
            crate::sync::schedule_point();
            prev.header().old.store(below, CoreOrdering::Release);
            let shared = Arc::clone(&self.shared);
            shared.deferred.fetch_add(1, CoreOrdering::Relaxed);
            epoch::defer(guard, move || {
                // SAFETY: unlinked from its chain; every reader that could
                // stand on it was pinned before this defer.
                unsafe { buf.free(&shared.geometry, &shared.counter) };
                shared.deferred.fetch_sub(1, CoreOrdering::Release);
            });
        }
    }
}

impl Shared {
    /// Drops every buffer still linked from the page table. Only at store drop.
    pub(crate) fn free_all(&self, pages: &super::page_table::PageTable) {
        for (lid, head) in pages.entries() {
            let mut cur = Some(head);
            while let Some(p) = cur {
                cur = p.old();
                // SAFETY: the store is being dropped; no reader or writer is
                // left, and each chain buffer appears in exactly one chain.
                unsafe { p.free(&self.geometry, &self.counter) };
            }
            pages.set(lid, None);
        }
    }
}
