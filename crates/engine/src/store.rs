//! The public store API: what the server, the bench and embedders call.

pub mod op;

use std::borrow::Cow;
use std::ops::Bound;
use std::time::{Duration, Instant};

use bytes::Bytes;

use std::cell::Cell;
use std::sync::Arc;

use crate::config::{Config, Geometry};
use crate::durable::runtime::Durable;
use crate::durable::{CheckpointInfo, DurableConfig, PersistenceStats, RecoveryReport};
use crate::error::{Error, Result};
use crate::readexec::{BatchResults, CpuBackend, ReadBackend, ReadRequest, TreeView};
use crate::tree::Tree;
use crate::tree::epoch;
use crate::tree::node::ItemRef;
use crate::tree::write::{WriteMode, WriteOp};
use crate::types::Now;
use crate::types::{
    AtomicWrite, Expiry, Item, ItemView, NodeCounts, Range, SnapshotId, Version, Write, now_ms,
};

/// When a write's answer may go out.
#[derive(Clone, Copy)]
enum Ack<'s> {
    /// Now: wait for its release (and durability).
    Now,
    /// At the session's commit: note the version to wait for.
    Defer(&'s Cell<u64>),
}

/// An in-memory, ordered, multi-version key-value store.
///
/// Reads never lock, wait or retry; every read (and every range) sees one
/// consistent version of the store. Writes are linearizable and return once
/// visible to every read that starts after them.
///
/// ```
/// use std::ops::Bound;
/// use combkv::{Config, Expiry, Range, Store};
///
/// let store = Store::new(Config::default()).unwrap();
/// let v1 = store.put(b"apple", b"red").unwrap();
/// store.put(b"banana", b"yellow").unwrap();
/// assert_eq!(store.get(b"apple").unwrap().unwrap(), &b"red"[..]);
///
/// // Compare-and-swap on the item version.
/// assert!(store.cas(b"apple", v1.get(), b"green", Expiry::Keep).unwrap().is_some());
/// assert!(store.cas(b"apple", v1.get(), b"blue", Expiry::Keep).unwrap().is_none());
///
/// // A snapshot keeps seeing the store as it was.
/// let snap = store.snapshot(std::time::Duration::from_secs(10)).unwrap();
/// store.delete(b"banana").unwrap();
/// assert!(store.get(b"banana").unwrap().is_none());
/// assert!(store.get_at(snap, b"banana").unwrap().is_some());
/// store.release_snapshot(snap);
///
/// // Ordered ranges.
/// let items = store.range(&Range::new(Bound::Included(b"a".to_vec()), Bound::Unbounded)).unwrap();
/// assert_eq!(items.len(), 1);
/// assert_eq!(items[0].value, &b"green"[..]);
/// ```
#[derive(Debug)]
pub struct Store {
    tree: Arc<Tree>,
    config: Config,
    geometry: Geometry,
    /// Where the next `sweep_expired` call resumes.
    sweep_cursor: parking_lot::Mutex<Option<Vec<u8>>>,
    /// The read engine's backend.
    backend: Box<dyn ReadBackend>,
    /// Log, checkpoints and background work of a store opened with `open`.
    durable: Option<Durable>,
}

impl Drop for Store {
    fn drop(&mut self) {
        // A failure here is already recorded (the store was read-only).
        let _ = self.shutdown();
    }
}

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
    store: &'s Store,
    /// The newest version an answer so far rests on.
    pending: Cell<u64>,
}

impl Session<'_> {
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
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Expiry::Never)
    }
    pub fn put_with(&self, key: &[u8], value: &[u8], expiry: Expiry) -> Result<Version> {
        self.store.put_in(self.ack(), key, value, expiry)
    }
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.store.insert_in(self.ack(), key, value)
    }
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
        self.store.update_in(self.ack(), key, value)
    }
    pub fn delete(&self, key: &[u8]) -> Result<Option<Version>> {
        self.store.delete_in(self.ack(), key)
    }
    pub fn cas(
        &self,
        key: &[u8],
        expected: u64,
        value: &[u8],
        expiry: Expiry,
    ) -> Result<Option<Version>> {
        self.store.cas_in(self.ack(), key, expected, value, expiry)
    }
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        self.store.incr_by_in(self.ack(), key, delta)
    }
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<usize> {
        self.store.append_in(self.ack(), key, value)
    }
    pub fn expire(&self, key: &[u8], expiry: Expiry) -> Result<Option<Version>> {
        self.store.expire_in(self.ack(), key, expiry)
    }
    pub fn clear(&self) -> Result<()> {
        self.store.clear_in(self.ack())
    }
    pub fn write_atomically(&self, writes: &[AtomicWrite<'_>]) -> Result<Vec<Option<Version>>> {
        self.store.write_atomically_in(self.ack(), writes)
    }
    pub fn write_with<R>(
        &self,
        key: &[u8],
        decide: impl FnMut(Option<ItemView<'_>>) -> (Write, R),
    ) -> Result<(R, Option<Version>)> {
        self.store.write_with_in(self.ack(), key, decide)
    }
    fn ack(&self) -> Ack<'_> {
        Ack::Defer(&self.pending)
    }
}

impl Store {
    /// Creates an empty store.
    pub fn new(config: Config) -> Result<Store> {
        let geometry = config.validate()?;
        Ok(Store {
            tree: Arc::new(Tree::new(geometry)),
            config,
            geometry,
            sweep_cursor: Default::default(),
            backend: Box::new(CpuBackend::default()),
            durable: None,
        })
    }

    /// Longest key accepted: 460 bytes with nodes of 8 KiB and more.
    pub fn max_key_len(&self) -> usize {
        self.geometry.max_key_len
    }

    /// Longest value accepted (`Config::max_value_len`).
    pub fn max_value_len(&self) -> usize {
        self.config.max_value_len
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::KeyEmpty);
        }
        if key.len() > self.geometry.max_key_len {
            return Err(Error::KeyTooLong {
                len: key.len(),
                max: self.geometry.max_key_len,
            });
        }
        Ok(())
    }

    fn check_value(&self, len: usize) -> Result<()> {
        if len > self.config.max_value_len {
            return Err(Error::ValueTooLarge {
                len,
                max: self.config.max_value_len,
            });
        }
        Ok(())
    }

    /// Keys stored, counted as writes create and delete them (O(1)). Keys
    /// that have expired count until the background sweep removes them, as
    /// Redis's DBSIZE counts them; exact once writers are quiescent.
    pub fn len(&self) -> u64 {
        self.tree.key_count()
    }

    /// True when no key is stored (see [`Store::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The read version: every read that starts now sees exactly the writes
    /// with versions up to it.
    pub fn read_version(&self) -> Version {
        Version(self.tree.read_version())
    }

    // ---- reads -----------------------------------------------------------

    /// The tree, for the engine's own layout tests.
    #[cfg(test)]
    pub(crate) fn tree(&self) -> &Tree {
        &self.tree
    }

    fn read<T>(&self, f: impl FnOnce(u64, &Now) -> T) -> T {
        // Pin before taking the read version: see tree::reclaim.
        let guard = self.tree.pin();
        let rv = self.tree.read_version();
        let out = f(rv, &Now::lazy());
        drop(guard);
        out
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.get_item(key)?.map(|i| i.value))
    }

    /// The item of `key`: value, version and expiry.
    pub fn get_item(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| self.item_at(key, rv, now)))
    }

    fn item_at(&self, key: &[u8], rv: u64, now: &Now) -> Option<Item> {
        self.tree
            .get_at(key, rv)
            .filter(|it| it.is_live(now))
            .map(|it| it.to_item())
    }

    /// Looks `key` up and hands the item (if live) to `f` without copying.
    /// `f` runs while the reader holds its epoch pin: keep it short (copy or
    /// serialise what it needs).
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(Option<ItemView<'_>>) -> T) -> Result<T> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| {
            let it = self.tree.get_at(key, rv).filter(|it| it.is_live(now));
            f(it.as_ref().map(ItemRef::view))
        }))
    }

    /// Visits the items of a range in order, as one consistent snapshot,
    /// without copying, until `f` returns false or the range (or its limit)
    /// ends; returns how many items `f` saw. Like `get_with`, `f` runs pinned.
    pub fn scan(&self, r: &Range, mut f: impl FnMut(ItemView<'_>) -> bool) -> Result<usize> {
        self.check_range(r)?;
        Ok(self.read(|rv, now| self.visit_at_version(r, rv, now, |it| f(it.view()))))
    }

    /// The items of a range, as one consistent snapshot.
    pub fn range(&self, r: &Range) -> Result<Vec<Item>> {
        self.check_range(r)?;
        Ok(self.read(|rv, now| self.range_at_version(r, rv, now)))
    }

    fn check_range(&self, r: &Range) -> Result<()> {
        for b in [&r.start, &r.end] {
            if let Bound::Included(k) | Bound::Excluded(k) = b
                && k.len() > self.geometry.max_key_len
            {
                return Err(Error::KeyTooLong {
                    len: k.len(),
                    max: self.geometry.max_key_len,
                });
            }
        }
        Ok(())
    }

    fn range_at_version(&self, r: &Range, rv: u64, now: &Now) -> Vec<Item> {
        let mut out = Vec::new();
        self.visit_at_version(r, rv, now, |it| {
            out.push(it.to_item());
            true
        });
        out
    }

    /// Calls `f` with the range's items at `rv` (respecting the limit) until
    /// it returns false; returns how many it saw.
    fn visit_at_version(
        &self,
        r: &Range,
        rv: u64,
        now: &Now,
        mut f: impl FnMut(&ItemRef<'_>) -> bool,
    ) -> usize {
        self.tree.visit_range(r, rv, now, &mut |it| f(&it))
    }

    /// The item with the greatest key `<= key`.
    pub fn floor(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| self.tree.floor_at(key, rv, now).map(|it| it.to_item())))
    }

    /// The item with the smallest key `>= key`.
    pub fn ceil(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        let r = Range::new(Bound::Included(key.to_vec()), Bound::Unbounded).with_limit(1);
        Ok(self
            .read(|rv, now| self.range_at_version(&r, rv, now))
            .pop())
    }

    /// Executes a batch of reads on the read engine: every request sees the
    /// same read version; results land in `out` (request `i`'s items are
    /// `out.items(i)`), exactly what the plain reads would return at that
    /// version. Invalid keys or bounds fail the whole batch before anything runs.
    pub fn read_batch(&self, requests: &[ReadRequest<'_>], out: &mut BatchResults) -> Result<()> {
        self.check_batch(requests)?;
        self.read(|rv, now| self.execute_batch(requests, rv, now, out));
        Ok(())
    }

    /// As `read_batch`, at a snapshot's version.
    pub fn read_batch_at(
        &self,
        id: SnapshotId,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) -> Result<()> {
        self.check_batch(requests)?;
        self.at_snapshot(id, |rv, now| self.execute_batch(requests, rv, now, out))
    }

    fn check_batch(&self, requests: &[ReadRequest<'_>]) -> Result<()> {
        for r in requests {
            match r {
                ReadRequest::Get(k) => self.check_key(k)?,
                ReadRequest::Range(r) => self.check_range(r)?,
            }
        }
        Ok(())
    }

    fn execute_batch(
        &self,
        requests: &[ReadRequest<'_>],
        rv: u64,
        now: &Now,
        out: &mut BatchResults,
    ) {
        out.reset(requests.len(), rv);
        // One clock reading stamps the batch, as one read version does.
        let tree = TreeView::new(&self.tree);
        self.backend.execute(tree, rv, now.ms(), requests, out);
    }

    // ---- writes ----------------------------------------------------------

    fn expiry_ms(e: Expiry, current: Option<&ItemRef<'_>>) -> u64 {
        e.resolve(current.map(|c| c.expiry))
    }

    /// Refuses writes after a durability failure or shutdown.
    fn admit(&self) -> Result<()> {
        match &self.durable {
            Some(d) => d.wal.admit().map_err(Error::ReadOnly),
            None => Ok(()),
        }
    }

    /// Waits until every write up to `v` is released, and with a log, as
    /// durable as the mode promises: then an answer resting on them may go out.
    fn wait_acknowledgeable(&self, v: u64) -> Result<()> {
        if let Some(d) = &self.durable {
            d.wal.wait_durable(v).map_err(Error::ReadOnly)?;
        }
        if !self.tree.wait_released(v) {
            let cause = self
                .durable
                .as_ref()
                .and_then(|d| d.wal.failure())
                .unwrap_or_else(|| "the write-ahead log failed".into());
            return Err(Error::ReadOnly(cause));
        }
        Ok(())
    }

    fn acknowledge(&self, ack: Ack<'_>, v: u64) -> Result<()> {
        match ack {
            Ack::Now => self.wait_acknowledgeable(v),
            Ack::Defer(pending) => {
                pending.set(pending.get().max(v));
                Ok(())
            }
        }
    }

    /// One logged write of `key`: `decide` sees the newest live item.
    fn write_key<'v, R>(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        decide: impl FnMut(Option<&ItemRef<'_>>) -> (WriteOp<'v>, R),
    ) -> Result<(R, Option<Version>)> {
        self.admit()?;
        let now = Now::lazy();
        let mode = WriteMode {
            now: Some(&now),
            logged: true,
        };
        let w = self.tree.write(key, mode, decide);
        self.acknowledge(ack, w.wait_for)?;
        Ok((w.result, w.version.map(Version)))
    }

    /// A session: writes whose acknowledgement waits for `Session::commit`.
    pub fn session(&self) -> Session<'_> {
        Session {
            store: self,
            pending: Cell::new(0),
        }
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
        self.write_with_in(Ack::Now, key, decide)
    }

    fn write_with_in<R>(
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
        self.put_in(Ack::Now, key, value, expiry)
    }

    fn put_in(&self, ack: Ack<'_>, key: &[u8], value: &[u8], expiry: Expiry) -> Result<Version> {
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
        self.insert_in(Ack::Now, key, value)
    }

    fn insert_in(&self, ack: Ack<'_>, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
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
        self.update_in(Ack::Now, key, value)
    }

    fn update_in(&self, ack: Ack<'_>, key: &[u8], value: &[u8]) -> Result<Option<Version>> {
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
        self.write_atomically_in(Ack::Now, writes)
    }

    fn write_atomically_in(
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
        if let [w] = writes {
            return Ok(vec![match *w {
                AtomicWrite::Put { key, value, expiry } => {
                    Some(self.put_in(ack, key, value, expiry)?)
                }
                AtomicWrite::Delete { key } => self.delete_in(ack, key)?,
            }]);
        }
        self.admit()?;
        // Closed on every way out (see `Group`): a group that does not
        // finish never becomes visible in part.
        let mut group = self.tree.open_group();
        // Each write's acknowledgement waits for the group's end: nothing
        // inside may wait for a release, which the open group holds back.
        let wait = Cell::new(0);
        let mut out = Vec::with_capacity(writes.len());
        for w in writes {
            let v = match *w {
                AtomicWrite::Put { key, value, expiry } => {
                    Some(self.put_in(Ack::Defer(&wait), key, value, expiry)?)
                }
                AtomicWrite::Delete { key } => self.delete_in(Ack::Defer(&wait), key)?,
            };
            // The span reaches every version the group's writes took or
            // their decisions saw (`Group::extend`).
            group.extend(wait.get());
            out.push(v);
        }
        // Closing hands the turn on: this group's acknowledgement (a
        // release, perhaps an fsync) is waited for without holding it.
        let last = group.close();
        self.acknowledge(ack, last)?;
        Ok(out)
    }

    /// Removes `key`. `None`: it was absent.
    pub fn delete(&self, key: &[u8]) -> Result<Option<Version>> {
        self.delete_in(Ack::Now, key)
    }

    fn delete_in(&self, ack: Ack<'_>, key: &[u8]) -> Result<Option<Version>> {
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
        self.cas_in(Ack::Now, key, expected, value, expiry)
    }

    fn cas_in(
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
        self.incr_by_in(Ack::Now, key, delta)
    }

    fn incr_by_in(&self, ack: Ack<'_>, key: &[u8], delta: i64) -> Result<i64> {
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
        self.append_in(Ack::Now, key, value)
    }

    fn append_in(&self, ack: Ack<'_>, key: &[u8], value: &[u8]) -> Result<usize> {
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
        self.expire_in(Ack::Now, key, expiry)
    }

    fn expire_in(&self, ack: Ack<'_>, key: &[u8], expiry: Expiry) -> Result<Option<Version>> {
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
        self.clear_in(Ack::Now)
    }

    fn clear_in(&self, ack: Ack<'_>) -> Result<()> {
        self.admit()?;
        // A checkpoint never sees a half-done clear.
        let clearing = self
            .durable
            .as_ref()
            .map(|d| d.checkpoints.clear_lock.lock());
        // Every item older than the clear is visible once its version is
        // acknowledgeable; the tree then deletes them.
        let last = self.tree.clear(|c| self.wait_acknowledgeable(c))?;
        drop(clearing);
        self.acknowledge(ack, last)
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
        if self.admit().is_err() || !self.tree.has_expiring() {
            return 0;
        }
        let max_items = max_items.max(1);
        let cursor = self.sweep_cursor.lock().clone();
        let (expired, last) = self.read(|rv, now| {
            self.tree
                .expired_after(rv, now, cursor.as_deref(), max_items)
        });
        *self.sweep_cursor.lock() = last;
        let now = now_ms();
        let mut deleted = 0;
        let mut wait_for = 0;
        for key in expired {
            let mode = WriteMode {
                now: None,
                logged: true,
            };
            let w = self.tree.write(&key, mode, |cur| match cur {
                Some(c) if c.expiry != 0 && c.expiry <= now => (WriteOp::Delete, ()),
                _ => (WriteOp::Noop, ()),
            });
            wait_for = wait_for.max(w.wait_for);
            deleted += usize::from(w.version.is_some());
        }
        // One wait (one group commit) for the whole sweep.
        match self.wait_acknowledgeable(wait_for) {
            Ok(()) => deleted,
            Err(_) => 0,
        }
    }

    // ---- durability ------------------------------------------------------

    /// Opens (or creates) a durable store in `durable.dir`: loads the newest
    /// valid checkpoint, replays the log after it, and starts the log
    /// flusher and the background executor. `Store::new` stays in-memory.
    pub fn open(config: Config, durable: DurableConfig) -> Result<(Store, RecoveryReport)> {
        let geometry = config.validate()?;
        let (tree, d) = Durable::open(&geometry, config.max_value_len, durable)?;
        let report = d.report().clone();
        let store = Store {
            tree,
            config,
            geometry,
            sweep_cursor: Default::default(),
            backend: Box::new(CpuBackend::default()),
            durable: Some(d),
        };
        Ok((store, report))
    }

    /// SAVE: writes a checkpoint now (on the background executor) and waits
    /// for it. Writers keep going meanwhile.
    pub fn checkpoint(&self) -> Result<CheckpointInfo> {
        self.durable.as_ref().ok_or(Error::NotDurable)?.checkpoint()
    }

    /// BGSAVE: starts a checkpoint in the background. False if one is
    /// already queued or running.
    pub fn checkpoint_in_background(&self) -> Result<bool> {
        self.durable
            .as_ref()
            .ok_or(Error::NotDurable)?
            .checkpoint_in_background()
    }

    /// Durability figures (INFO persistence). `enabled` is false for an
    /// in-memory store.
    pub fn persistence(&self) -> PersistenceStats {
        self.durable
            .as_ref()
            .map_or_else(PersistenceStats::default, |d| d.stats())
    }

    /// Clean shutdown: finishes queued background work, writes and fsyncs
    /// the log, stops the background threads. Writes are refused afterwards
    /// (`Error::ReadOnly`). Idempotent; dropping the store does it too.
    pub fn shutdown(&self) -> Result<()> {
        match &self.durable {
            Some(d) => d.shutdown(),
            None => Ok(()),
        }
    }

    // ---- snapshots -------------------------------------------------------

    /// Pins the current read version for `ttl`. Reads at the snapshot see the
    /// store exactly as of that version.
    pub fn snapshot(&self, ttl: Duration) -> Result<SnapshotId> {
        if ttl > self.config.max_snapshot_age {
            return Err(Error::SnapshotTooLong {
                max_secs: self.config.max_snapshot_age.as_secs(),
            });
        }
        self.tree
            .pin_snapshot(ttl, Some(self.config.max_snapshots))
            .map(SnapshotId)
            .ok_or(Error::TooManySnapshots)
    }

    /// Releases one creation of a snapshot. False if unknown or expired.
    pub fn release_snapshot(&self, id: SnapshotId) -> bool {
        self.tree.release_snapshot(id.0)
    }

    /// Live snapshots and the time each has left.
    pub fn list_snapshots(&self) -> Vec<(SnapshotId, Duration)> {
        self.tree
            .list_snapshots()
            .into_iter()
            .map(|(v, left)| (SnapshotId(v), left))
            .collect()
    }

    /// Runs `f` at the snapshot's version, holding the snapshot against
    /// release and expiry meanwhile.
    fn at_snapshot<T>(&self, id: SnapshotId, f: impl FnOnce(u64, &Now) -> T) -> Result<T> {
        self.tree
            .at_snapshot(id.0, |rv| f(rv, &Now::lazy()))
            .ok_or(Error::NoSuchSnapshot)
    }

    /// The item of `key` as of a snapshot.
    pub fn get_at(&self, id: SnapshotId, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        self.at_snapshot(id, |rv, now| self.item_at(key, rv, now))
    }

    /// A range as of a snapshot.
    pub fn range_at(&self, id: SnapshotId, r: &Range) -> Result<Vec<Item>> {
        self.check_range(r)?;
        self.at_snapshot(id, |rv, now| self.range_at_version(r, rv, now))
    }

    /// As [`Store::scan`], as of a snapshot: `f` sees the range's items at
    /// the snapshot's version until it returns false.
    pub fn scan_at(
        &self,
        id: SnapshotId,
        r: &Range,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        self.check_range(r)?;
        self.at_snapshot(id, |rv, now| {
            self.visit_at_version(r, rv, now, |it| f(it.view()))
        })
    }

    // ---- introspection ---------------------------------------------------

    /// Runs pending reclamation work now: frees what no reader or snapshot
    /// can reach any more. Writers do this on their own every few hundred
    /// writes; tests and shutdown call it to reach a quiescent state.
    ///
    /// The epoch is process-wide, so other threads' pins can delay the grace
    /// periods; this keeps pushing until this store's deferred work has run,
    /// for at most two seconds.
    pub fn collect(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            epoch::flush_reclamation();
            self.tree.flush_epochs();
            self.tree.collect(true);
            if self.tree.drained() || Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Allocated vs reachable node buffers.
    pub fn node_counts(&self) -> NodeCounts {
        let (live_buffers, reachable_buffers) = self.tree.node_counts();
        NodeCounts {
            live_buffers,
            reachable_buffers,
        }
    }
}
