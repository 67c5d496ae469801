//! Writes: each takes its key's leaf lock in the tree, lets a decision
//! see the key's live item, and is acknowledged once released (and, with a
//! log, durable), at once or at a session's commit.

use std::borrow::Cow;
use std::cell::Cell;

use super::{Store, op};
use crate::durable::WalError;
use crate::error::{Error, Result};
use crate::tree::node::ItemRef;
use crate::tree::write::{WriteMode, WriteOp};
use crate::types::{AtomicWrite, Expiry, ItemView, Now, Version, Write, now_ms};

/// How a write is made: when its answer may go out, and the clock its
/// decision judges expiry against.
#[derive(Clone, Copy)]
pub(super) struct Ack<'s> {
    /// `None`: wait for its release (and durability) now. `Some`: at the
    /// session's commit; note the version to wait for here.
    defer: Option<&'s Cell<u64>>,
    /// Unix ms the write judges expiry against; 0: the wall clock, read
    /// when needed. A replicated write carries its entry's clock, so that
    /// every replica decides alike.
    clock_ms: u64,
    /// The caller holds the transaction lock (`Store::txn_lock`, shared or
    /// exclusive) and has an atomic group open: a write inside takes
    /// neither again.
    inside: bool,
}

impl<'s> Ack<'s> {
    /// Acknowledged now, at the wall clock.
    pub(super) const NOW: Ack<'static> = Ack {
        defer: None,
        clock_ms: 0,
        inside: false,
    };

    /// Acknowledged at the session's commit.
    pub(super) fn defer(pending: &'s Cell<u64>) -> Ack<'s> {
        Ack {
            defer: Some(pending),
            clock_ms: 0,
            inside: false,
        }
    }

    /// The same, judging expiry at `ms` instead of the wall clock.
    pub(super) fn at(self, ms: u64) -> Ack<'s> {
        Ack {
            clock_ms: ms,
            ..self
        }
    }

    /// Deferred to `pending`, at this write's clock, inside a group that
    /// holds the transaction lock (an atomic group's or a transaction's
    /// writes).
    pub(super) fn inside_group(self, pending: &Cell<u64>) -> Ack<'_> {
        Ack {
            defer: Some(pending),
            clock_ms: self.clock_ms,
            inside: true,
        }
    }

    /// Whether the caller holds the transaction lock and an open group.
    pub(super) fn inside(&self) -> bool {
        self.inside
    }

    /// The clock of one write.
    pub(super) fn now(&self) -> Now {
        if self.clock_ms == 0 {
            Now::lazy()
        } else {
            Now::at(self.clock_ms)
        }
    }
}

impl Store {
    pub(super) fn expiry_ms(e: Expiry, current: Option<&ItemRef<'_>>) -> u64 {
        e.resolve(current.map(|c| c.expiry))
    }

    /// Refuses writes after a durability failure or shutdown.
    pub(super) fn admit(&self) -> Result<()> {
        match &self.durable {
            Some(d) => d.wal.admit().map_err(Error::ReadOnly),
            None => Ok(()),
        }
    }

    /// Waits until every write up to `v` is released, and with a log, as
    /// durable as the mode promises: then an answer resting on them may go out.
    pub(super) fn wait_acknowledgeable(&self, v: u64) -> Result<()> {
        if let Some(d) = &self.durable {
            d.wal.wait_durable(v).map_err(Error::ReadOnly)?;
        }
        if !self.tree.wait_released(v) {
            let cause = self
                .durable
                .as_ref()
                .and_then(|d| d.wal.failure())
                .unwrap_or(WalError::Poisoned);
            return Err(Error::ReadOnly(cause));
        }
        Ok(())
    }

    pub(super) fn acknowledge(&self, ack: Ack<'_>, v: u64) -> Result<()> {
        match ack.defer {
            None => self.wait_acknowledgeable(v),
            Some(pending) => {
                pending.set(pending.get().max(v));
                Ok(())
            }
        }
    }

    /// One logged write of `key`: `decide` sees the newest live item.
    pub(super) fn write_key<'v, R>(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        decide: impl FnMut(Option<&ItemRef<'_>>) -> (WriteOp<'v>, R),
    ) -> Result<(R, Option<Version>)> {
        self.admit()?;
        let now = ack.now();
        let mode = WriteMode {
            now: Some(&now),
            logged: true,
        };
        let shared = self.lock_out_transactions(ack);
        let w = self.tree.write(key, mode, decide);
        drop(shared);
        self.acknowledge(ack, w.wait_for)?;
        Ok((w.result, w.version.map(Version)))
    }

    /// The general conditional write: `decide` sees the key's live item (or
    /// `None`) with the key locked against other writers and returns what to
    /// do and a result for the caller. The decision and the write are one
    /// atomic step, so read-then-write commands (SET with NX/XX/GET, GETDEL,
    /// EXPIRE with NX/XX/GT/LT) need no retry loop. `decide` may run more
    /// than once (the write restarts if a structure change intervenes) and
    /// must only depend on its argument. Returns the result and the write's
    /// version (`None` for [`Write::Keep`]).
    pub fn write_with<R>(
        &self,
        key: &[u8],
        decide: impl FnMut(Option<ItemView<'_>>) -> (Write, R),
    ) -> Result<(R, Option<Version>)> {
        self.write_with_in(Ack::NOW, key, decide)
    }

    pub(super) fn write_with_in<R>(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        mut decide: impl FnMut(Option<ItemView<'_>>) -> (Write, R),
    ) -> Result<(R, Option<Version>)> {
        self.check_key(key)?;
        let mut refused = None;
        let (r, v) = self.write_key(ack, key, |cur| {
            let (w, r) = decide(cur.map(ItemRef::view));
            let op = match w {
                Write::Keep => WriteOp::Noop,
                Write::Delete => WriteOp::Delete,
                Write::Put {
                    value,
                    expiry,
                    flags,
                } => {
                    if let Err(e) = self.check_value(value.len()) {
                        refused = Some(e);
                        return (WriteOp::Noop, Some(r));
                    }
                    refused = None;
                    WriteOp::Put {
                        value: Cow::Owned(value),
                        expiry: Self::expiry_ms(expiry, cur),
                        flags: flags.resolve(cur.map(|c| c.cflags)),
                    }
                }
            };
            (op, Some(r))
        })?;
        if let Some(e) = refused {
            return Err(e);
        }
        Ok((r.expect("decide ran"), v))
    }

    /// Stores `value` under `key` (insert or overwrite) with no expiry.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Expiry::Never)
    }

    /// Stores `value` under `key` with an expiry.
    pub fn put_with(&self, key: &[u8], value: &[u8], expiry: Expiry) -> Result<Version> {
        self.put_in(Ack::NOW, key, value, expiry)
    }

    pub(super) fn put_in(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        value: &[u8],
        expiry: Expiry,
    ) -> Result<Version> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        let ((), v) = self.write_key(ack, key, |cur| {
            let expiry = Self::expiry_ms(expiry, cur);
            (
                WriteOp::Put {
                    value: Cow::Borrowed(value),
                    expiry,
                    flags: 0,
                },
                (),
            )
        })?;
        Ok(v.expect("a put always writes"))
    }

    /// Stores `value` only if `key` is absent. `None`: it was present.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.insert_in(Ack::NOW, key, value)
    }

    pub(super) fn insert_in(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Version>> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        let ((), v) = self.write_key(ack, key, |cur| match cur {
            Some(_) => (WriteOp::Noop, ()),
            None => (
                WriteOp::Put {
                    value: Cow::Borrowed(value),
                    expiry: 0,
                    flags: 0,
                },
                (),
            ),
        })?;
        Ok(v)
    }

    /// Overwrites the value of `key` only if present (keeps no expiry).
    /// `None`: it was absent.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.update_in(Ack::NOW, key, value)
    }

    pub(super) fn update_in(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Version>> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        let ((), v) = self.write_key(ack, key, |cur| match cur {
            None => (WriteOp::Noop, ()),
            Some(_) => (
                WriteOp::Put {
                    value: Cow::Borrowed(value),
                    expiry: 0,
                    flags: 0,
                },
                (),
            ),
        })?;
        Ok(v)
    }

    /// Applies `writes` in order as one atomic step (MSET, multi-key DEL):
    /// a reader, a scan or a snapshot sees all of them or none, and none is
    /// acknowledged before all are. Every key and value is checked first; a
    /// bad one changes nothing. One result per write: a put's version, a
    /// delete's version or `None` if the key was absent.
    ///
    /// Each write takes its own version, in order; the read version jumps
    /// over the group's versions at once (`VersionClock` groups, which take
    /// turns). Writes by others that land in between are released with the
    /// group. A single write is atomic already and goes without a group.
    pub fn write_atomically(&self, writes: &[AtomicWrite<'_>]) -> Result<Vec<Option<Version>>> {
        self.write_atomically_in(Ack::NOW, writes)
    }

    pub(super) fn write_atomically_in(
        &self,
        ack: Ack<'_>,
        writes: &[AtomicWrite<'_>],
    ) -> Result<Vec<Option<Version>>> {
        for w in writes {
            match *w {
                AtomicWrite::Put { key, value, .. } => {
                    self.check_key(key)?;
                    self.check_value(value.len())?;
                }
                AtomicWrite::Delete { key } => self.check_key(key)?,
            }
        }
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        if ack.inside() {
            // A transaction's group is this group.
            return writes.iter().map(|w| self.atomic_write(ack, w)).collect();
        }
        if let [w] = writes {
            return Ok(vec![match *w {
                AtomicWrite::Put { key, value, expiry } => {
                    Some(self.put_in(ack, key, value, expiry)?)
                }
                AtomicWrite::Delete { key } => self.delete_in(ack, key)?,
            }]);
        }
        self.admit()?;
        // No transaction runs while the group is open (a transaction
        // opening its group would wait for this one's turn).
        let shared = self.lock_out_transactions(ack);
        // Closed on every way out (see `Group`): a group that does not
        // finish never becomes visible in part.
        let mut group = self.tree.open_group();
        // Each write's acknowledgement waits for the group's end: nothing
        // inside may wait for a release, which the open group holds back.
        let wait = Cell::new(0);
        let mut out = Vec::with_capacity(writes.len());
        for w in writes {
            let v = self.atomic_write(ack.inside_group(&wait), w)?;
            // The span reaches every version the group's writes took or
            // their decisions saw (`Group::extend`).
            group.extend(wait.get());
            out.push(v);
        }
        // Closing hands the turn on: this group's acknowledgement (a
        // release, perhaps an fsync) is waited for without holding it.
        let last = group.close();
        drop(shared);
        self.acknowledge(ack, last)?;
        Ok(out)
    }

    fn atomic_write(&self, ack: Ack<'_>, w: &AtomicWrite<'_>) -> Result<Option<Version>> {
        match *w {
            AtomicWrite::Put { key, value, expiry } => {
                Ok(Some(self.put_in(ack, key, value, expiry)?))
            }
            AtomicWrite::Delete { key } => self.delete_in(ack, key),
        }
    }

    /// The transaction lock held shared for one write or group, so that no
    /// transaction runs meanwhile; nothing when the caller holds it
    /// already (`Ack::inside`). Held only while writing, never while
    /// waiting for an acknowledgement.
    pub(super) fn lock_out_transactions(
        &self,
        ack: Ack<'_>,
    ) -> Option<crate::sync::SharedGuard<'_>> {
        if ack.inside() {
            return None;
        }
        Some(self.txn_lock.shared())
    }

    /// Removes `key`. `None`: it was absent.
    pub fn delete(&self, key: &[u8]) -> Result<Option<Version>> {
        self.delete_in(Ack::NOW, key)
    }

    pub(super) fn delete_in(&self, ack: Ack<'_>, key: &[u8]) -> Result<Option<Version>> {
        self.check_key(key)?;
        let ((), v) = self.write_key(ack, key, |cur| match cur {
            None => (WriteOp::Noop, ()),
            Some(_) => (WriteOp::Delete, ()),
        })?;
        Ok(v)
    }

    /// Stores `value` only if the item's version is `expected` (0: only if
    /// absent). `None`: the version did not match.
    pub fn cas(
        &self,
        key: &[u8],
        expected: u64,
        value: &[u8],
        expiry: Expiry,
    ) -> Result<Option<Version>> {
        self.cas_in(Ack::NOW, key, expected, value, expiry)
    }

    pub(super) fn cas_in(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        expected: u64,
        value: &[u8],
        expiry: Expiry,
    ) -> Result<Option<Version>> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        let ((), v) = self.write_key(ack, key, |cur| {
            let matches = match cur {
                None => expected == 0,
                Some(c) => c.version == expected,
            };
            if matches {
                let expiry = Self::expiry_ms(expiry, cur);
                (
                    WriteOp::Put {
                        value: Cow::Borrowed(value),
                        expiry,
                        flags: 0,
                    },
                    (),
                )
            } else {
                (WriteOp::Noop, ())
            }
        })?;
        Ok(v)
    }

    /// Adds `delta` to the decimal integer stored at `key` (absent = 0) and
    /// returns the result. Keeps the expiry.
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        self.incr_by_in(Ack::NOW, key, delta)
    }

    pub(super) fn incr_by_in(&self, ack: Ack<'_>, key: &[u8], delta: i64) -> Result<i64> {
        self.check_key(key)?;
        let (r, _) = self.write_key(ack, key, |cur| {
            let old = match cur {
                None => 0,
                Some(c) => match op::parse_signed(c.value.bytes()) {
                    Some(n) => n,
                    None => return (WriteOp::Noop, Err(Error::NotAnInteger)),
                },
            };
            match old.checked_add(delta) {
                None => (WriteOp::Noop, Err(Error::Overflow)),
                Some(n) => {
                    let expiry = cur.map_or(0, |c| c.expiry);
                    let flags = cur.map_or(0, |c| c.cflags);
                    let value = Cow::Owned(n.to_string().into_bytes());
                    let op = WriteOp::Put {
                        value,
                        expiry,
                        flags,
                    };
                    (op, Ok(n))
                }
            }
        })?;
        r
    }

    /// Appends `value` to the value at `key` (absent = empty) and returns the
    /// new length. Keeps the expiry.
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<usize> {
        self.append_in(Ack::NOW, key, value)
    }

    pub(super) fn append_in(&self, ack: Ack<'_>, key: &[u8], value: &[u8]) -> Result<usize> {
        self.check_key(key)?;
        let (r, _) = self.write_key(ack, key, |cur| {
            let old = cur.map_or(&[][..], |c| c.value.bytes());
            let len = old.len() + value.len();
            if let Err(e) = self.check_value(len) {
                return (WriteOp::Noop, Err(e));
            }
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(old);
            v.extend_from_slice(value);
            let expiry = cur.map_or(0, |c| c.expiry);
            (
                WriteOp::Put {
                    value: Cow::Owned(v),
                    expiry,
                    flags: cur.map_or(0, |c| c.cflags),
                },
                Ok(len),
            )
        })?;
        r
    }

    /// Sets or clears the expiry of an existing key (a write: the item gets a
    /// new version). `None`: absent.
    pub fn expire(&self, key: &[u8], expiry: Expiry) -> Result<Option<Version>> {
        self.expire_in(Ack::NOW, key, expiry)
    }

    pub(super) fn expire_in(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        expiry: Expiry,
    ) -> Result<Option<Version>> {
        self.check_key(key)?;
        let ((), v) = self.write_key(ack, key, |cur| match cur {
            None => (WriteOp::Noop, ()),
            Some(c) => {
                let expiry = Self::expiry_ms(expiry, Some(c));
                (
                    WriteOp::Put {
                        value: Cow::Owned(c.value.bytes().to_vec()),
                        expiry,
                        flags: c.cflags,
                    },
                    (),
                )
            }
        })?;
        Ok(v)
    }

    /// Removes every key (FLUSHALL). Logged as one Clear record.
    ///
    /// Not atomic for concurrent readers: the clear takes a version `c`,
    /// waits until every write before it is released (and, with a log,
    /// durable), then deletes every item older than `c` leaf by leaf, so a
    /// reader meanwhile may see some of those items gone and others not yet.
    /// Writes concurrent with the clear (versions above `c`) survive it, as
    /// if they came after it. When `clear` returns, every item written
    /// before it began is gone, and recovery reproduces exactly that.
    pub fn clear(&self) -> Result<()> {
        self.clear_in(Ack::NOW)
    }

    pub(super) fn clear_in(&self, ack: Ack<'_>) -> Result<()> {
        if ack.inside() {
            // The clear waits for every version before its own to be
            // released, which the open group holds back.
            return Err(Error::NotInTransaction("FLUSHALL".into()));
        }
        self.admit()?;
        let shared = self.lock_out_transactions(ack);
        // A checkpoint or backup never sees a half-done clear.
        let clearing = self.clear_lock().lock();
        // Every item older than the clear is visible once its version is
        // acknowledgeable; the tree then deletes them.
        let last = self.tree.clear(|c| self.wait_acknowledgeable(c))?;
        // And a checkpoint takes its version either before the clear or
        // after its last delete: a delta run from inside the clear would
        // miss deletes no log record names, a backup would hold half a
        // clear.
        self.wait_acknowledgeable(last)?;
        drop(clearing);
        drop(shared);
        let acked = self.acknowledge(ack, last);
        // The buffers the clear replaced wait in this thread's own epoch
        // bag, which only a later pin that fills it would hand on: hand it
        // on now, so that reclamation (`reclaim`) frees them, and the
        // store's memory falls, whether or not this thread writes again.
        self.tree.flush_epochs();
        acked
    }

    /// Deletes expired items, visiting at most `max_items` items per call and
    /// resuming where the previous call stopped (wrapping around at the end).
    /// Expired items are invisible already; this reclaims their space through
    /// the normal write path. Returns how many it deleted. The server calls it
    /// periodically. A read-only store deletes nothing, and neither does a
    /// store that never held an item with an expiry: it visits nothing and
    /// its cursor stays put (a sweep of a large store that uses no TTL would
    /// otherwise decode every item over and over).
    pub fn sweep_expired(&self, max_items: usize) -> usize {
        if self.admit().is_err() {
            return 0;
        }
        let expired = self.expired_items(max_items);
        let now = now_ms();
        let mut deleted = 0;
        let mut wait_for = 0;
        for (key, _) in expired {
            let mode = WriteMode {
                now: None,
                logged: true,
            };
            let shared = self.lock_out_transactions(Ack::NOW);
            let w = self.tree.write(&key, mode, |cur| match cur {
                Some(c) if c.expiry != 0 && c.expiry <= now => (WriteOp::Delete, ()),
                _ => (WriteOp::Noop, ()),
            });
            drop(shared);
            wait_for = wait_for.max(w.wait_for);
            deleted += usize::from(w.version.is_some());
        }
        // One wait (one group commit) for the whole sweep.
        match self.wait_acknowledgeable(wait_for) {
            Ok(()) => deleted,
            Err(_) => 0,
        }
    }

    /// The expired items among the next `max_items` items from where the
    /// previous call (of this or [`Store::sweep_expired`]) stopped,
    /// wrapping around at the end: (key, version) each. Deletes nothing: a
    /// replicated store's leader proposes [`crate::op::Op::Reap`] for them,
    /// so every replica deletes the same items. A store that never held an
    /// item with an expiry visits nothing.
    pub fn expired_items(&self, max_items: usize) -> Vec<(Vec<u8>, Version)> {
        if !self.tree.has_expiring() {
            return Vec::new();
        }
        let max_items = max_items.max(1);
        let cursor = self.sweep_cursor.lock().clone();
        let (expired, last) = self.read(|rv, now| {
            self.tree
                .expired_after(rv, now, cursor.as_deref(), max_items)
        });
        *self.sweep_cursor.lock() = last;
        expired.into_iter().map(|(k, v)| (k, Version(v))).collect()
    }
}
