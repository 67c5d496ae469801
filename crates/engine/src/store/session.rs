//! Sessions: writes acknowledged together.

use std::cell::Cell;

use super::{Ack, Store};
use crate::error::Result;
use crate::types::{AtomicWrite, Expiry, ItemView, Version, Write};

/// A batch of writes acknowledged together: every write method of `Store`,
/// with the same arguments and results, but the acknowledgement waits for
/// `commit`, so a pipeline of writes pays for one group commit.
///
/// Until `commit` returns Ok, the session's writes are not acknowledged:
/// they may not be visible to reads yet (with `Always`, not before they
/// are durable), and a crash may lose them. Reads, including the session's
/// own, do not see them before they are released; commit before reading
/// your own writes. A session dropped without `commit` leaves its writes
/// applied; they become durable and visible on their own.
#[derive(Debug)]
pub struct Session<'s> {
    pub(super) store: &'s Store,
    /// The newest version an answer so far rests on.
    pending: Cell<u64>,
}

impl<'s> Session<'s> {
    /// The store the session writes to.
    pub fn store(&self) -> &'s Store {
        self.store
    }

    /// Waits until every write of the session is durable (per the mode) and
    /// visible. Err(ReadOnly) if the log failed first: then none of the
    /// session's writes since the last commit may be taken as acknowledged.
    pub fn commit(&self) -> Result<()> {
        let v = self.pending.replace(0);
        if v == 0 {
            return Ok(());
        }
        self.store.wait_acknowledgeable(v)
    }

    /// [`Store::put`] in this session: stores `value` under `key` with no
    /// expiry and returns the write's version. Same errors as `Store::put`
    /// (a key or value out of bounds, a read-only store); the write is
    /// acknowledged only by the next [`Session::commit`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Expiry::Never)
    }

    /// [`Store::put_with`] in this session: `put` with an expiry. Same
    /// errors; acknowledged by the next [`Session::commit`].
    pub fn put_with(&self, key: &[u8], value: &[u8], expiry: Expiry) -> Result<Version> {
        self.store.put_in(self.ack(), key, value, expiry)
    }

    /// [`Store::insert`] in this session: stores `value` only if `key` has
    /// no live item (None if it has). Same errors; acknowledged by the next
    /// [`Session::commit`].
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.store.insert_in(self.ack(), key, value)
    }

    /// [`Store::update`] in this session: replaces `key`'s value only if it
    /// has a live item (None if not). Same errors; acknowledged by the next
    /// [`Session::commit`].
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.store.update_in(self.ack(), key, value)
    }

    /// [`Store::delete`] in this session: removes `key`, returning the
    /// delete's version, or None if there was no live item. Same errors;
    /// acknowledged by the next [`Session::commit`].
    pub fn delete(&self, key: &[u8]) -> Result<Option<Version>> {
        self.store.delete_in(self.ack(), key)
    }

    /// [`Store::cas`] in this session: writes `value` only if `key`'s
    /// current version is `expected` (0: only if absent; None if not), so a
    /// client's read-modify-write loses no concurrent update. Same errors;
    /// acknowledged by the next [`Session::commit`].
    pub fn cas(
        &self,
        key: &[u8],
        expected: u64,
        value: &[u8],
        expiry: Expiry,
    ) -> Result<Option<Version>> {
        self.store.cas_in(self.ack(), key, expected, value, expiry)
    }

    /// [`Store::incr_by`] in this session: adds `delta` to the decimal
    /// integer stored at `key` and returns the new value. Same errors (a
    /// value that is not an integer, an overflow); acknowledged by the next
    /// [`Session::commit`].
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        self.store.incr_by_in(self.ack(), key, delta)
    }

    /// [`Store::append`] in this session: appends `value` to `key`'s value
    /// and returns the new length. Same errors; acknowledged by the next
    /// [`Session::commit`].
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<usize> {
        self.store.append_in(self.ack(), key, value)
    }

    /// [`Store::expire`] in this session: sets `key`'s expiry without
    /// touching its value (None if it has no live item). Same errors;
    /// acknowledged by the next [`Session::commit`].
    pub fn expire(&self, key: &[u8], expiry: Expiry) -> Result<Option<Version>> {
        self.store.expire_in(self.ack(), key, expiry)
    }

    /// [`Store::clear`] in this session: removes every item. Same errors;
    /// acknowledged by the next [`Session::commit`].
    pub fn clear(&self) -> Result<()> {
        self.store.clear_in(self.ack())
    }

    /// [`Store::write_atomically`] in this session: applies `writes` as one
    /// group that readers see whole or not at all. Same errors;
    /// acknowledged by the next [`Session::commit`].
    pub fn write_atomically(&self, writes: &[AtomicWrite<'_>]) -> Result<Vec<Option<Version>>> {
        self.store.write_atomically_in(self.ack(), writes)
    }

    /// [`Store::write_with`] in this session: `decide` sees `key`'s current
    /// item under the key's lock and says what to write, so the decision
    /// and the write are one atomic step. Same errors; acknowledged by the
    /// next [`Session::commit`].
    pub fn write_with<R>(
        &self,
        key: &[u8],
        decide: impl FnMut(Option<ItemView<'_>>) -> (Write, R),
    ) -> Result<(R, Option<Version>)> {
        self.store.write_with_in(self.ack(), key, decide)
    }

    pub(super) fn ack(&self) -> Ack<'_> {
        Ack::defer(&self.pending)
    }
}

impl Store {
    /// A session: writes whose acknowledgement waits for `Session::commit`.
    pub fn session(&self) -> Session<'_> {
        Session {
            store: self,
            pending: Cell::new(0),
        }
    }
}
