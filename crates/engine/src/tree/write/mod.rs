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
//!
//! - `lock`: leaf and node locks
//! - `lookup`: the writer's one pass over its locked leaf
//! - `append`: the fast path, a log-block append (Honeycomb's LogBlock)
//! - `merge`: the common slow path, a leaf merged with its log in place
//! - `split`: structure changes (splits, root growth), planned and published
//! - `node_merge`: merging an underfull node into a neighbour

mod append;
mod fault;
mod lock;
mod lookup;
mod merge;
mod node_merge;
mod split;

use std::borrow::Cow;
use std::sync::atomic::Ordering as CoreOrdering;

use super::epoch::Guard;
use super::node::{self, ItemRef, Lid, NodePtr, STATE_LOCKED, STATE_OBSOLETE, state_size};
use super::read::{published, route};
use super::{LogEntry, Tree};
use crate::sync::backoff;
use crate::types::Now;
use lock::LockedLeaf;
use lookup::lookup;

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

/// New out-of-line value bytes after which a thread's next write collects
/// (see `Tree::maybe_collect`).
const COLLECT_AFTER_VALUE_BYTES: u64 = 8 << 20;

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
    /// thread-local count: a shared counter would be a contended line), and
    /// so does a write after `COLLECT_AFTER_VALUE_BYTES` of new out-of-line
    /// values: overwrites of a 1 MB value left hundreds of MB waiting, and
    /// each new value then came from fresh pages that the kernel had to
    /// fault in and zero.
    fn maybe_collect(&self) {
        thread_local! {
            static WRITES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let n = WRITES.with(|w| {
            let n = w.get().wrapping_add(1);
            w.set(n);
            n
        });
        if node::value::created() >= COLLECT_AFTER_VALUE_BYTES {
            node::value::reset_created();
            // The buffers this thread replaced wait in its own epoch bag,
            // which crossbeam hands on only when 64 deferrals fill it: 64
            // replaced leaves holding 1 MB values each. Handed on now, they
            // are graced and unlinked here, and freed by the next flush.
            self.flush_epochs();
            self.collect(false);
            self.flush_epochs();
        } else if n.is_multiple_of(256) {
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
        // Unlocked again when dropped, on every way out from here (a panic
        // in `decide` included) but the ones that publish a change.
        let Some(locked) = LockedLeaf::try_lock(leaf.buf, leaf.state) else {
            return Attempt::Restart;
        };
        // Validate the path: every interior buffer is still current and
        // unlocked, so the routing to this leaf holds now.
        for s in &path[..path.len() - 1] {
            crate::sync::schedule_point();
            if s.buf.header().state.load(CoreOrdering::Acquire) != s.state {
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
        match op {
            WriteOp::Noop => self.unchanged(locked, r),
            WriteOp::Delete if current.is_none_or(|c| c.is_tombstone()) => {
                self.unchanged(locked, r)
            }
            _ => {
                let key_delta = key_delta(&op, current);
                // A delete that empties its leaf restructures at once, so the
                // empty leaf merges away instead of waiting for its log to fill.
                let empties = matches!(op, WriteOp::Delete) && look.live_estimate <= 1;
                let appended = if empties {
                    Err(locked)
                } else {
                    self.append(leaf.buf, locked, key, &op, &look, mode.logged)
                };
                let done = |v| {
                    Attempt::Done(Written {
                        result: r,
                        version: Some(v),
                        wait_for: v,
                    })
                };
                // Each path consumes the lock: the append publishes with
                // it, the merge and the structure change mark the leaf
                // obsolete (or hand it back unlocked if they restart).
                let locked = match appended {
                    Ok(v) => {
                        self.keys.add(key_delta);
                        return done(v.complete());
                    }
                    Err(locked) => locked,
                };
                if let Some((p, new_at)) = self.merge_stream(leaf, key, &op, &look) {
                    let v = self.next_version(log_entry(key, &op, mode.logged));
                    self.keys.add(key_delta);
                    let v_num = v.get();
                    self.publish_merge(guard, leaf, locked, p, new_at, v);
                    return done(v_num);
                }
                match self.restructure(guard, path, locked, key, &op, mode.logged) {
                    Some(v) => {
                        self.keys.add(key_delta);
                        done(v)
                    }
                    None => Attempt::Restart,
                }
            }
        }
    }

    /// A write that changes nothing (a no-op, or a delete of an absent
    /// key): unlocks, and answers once every write the decision may have
    /// read is released.
    #[inline(always)]
    fn unchanged<R>(&self, locked: LockedLeaf, r: R) -> Attempt<R> {
        // The decision read items whose writes may not be released yet;
        // answer only once they are.
        let seen = self.clock.write_version();
        drop(locked);
        Attempt::Done(Written {
            result: r,
            version: None,
            wait_for: seen,
        })
    }
}

/// How a write changes the count of stored keys: by one when a put creates
/// a key (an expired item still counts as stored until it is swept) or a
/// delete removes one. `current` is the key's newest item, any version.
#[inline(always)]
fn key_delta(op: &WriteOp<'_>, current: Option<ItemRef<'_>>) -> i64 {
    let present = current.is_some_and(|c| !c.is_tombstone());
    match op {
        WriteOp::Put { .. } if !present => 1,
        WriteOp::Delete => -1,
        _ => 0,
    }
}

#[cfg(test)]
pub(crate) mod tests;
