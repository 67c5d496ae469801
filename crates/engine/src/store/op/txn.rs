//! Transactions and their reads: `Op::Txn` (its watches and checks, then
//! its ops as one step under the transaction lock, in one atomic group)
//! and the `Op::Read` and `Op::Scan` a transaction's reads record.

use std::cell::Cell;

use bytes::Bytes;

use super::{Check, Op, Outcome, ScanWhat, Watch};
use crate::error::{Error, Result};
use crate::store::{Ack, Store};
use crate::tree::write::WriteOp;
use crate::tree::{Group, Tree};
use crate::types::Item;

/// A transaction's atomic group (see `Store::exclusively`): opened before
/// its first write, so that one that aborts or only reads logs no group;
/// none inside another transaction, whose group it is part of.
pub(super) struct TxnGroup<'t> {
    tree: Option<&'t Tree>,
    group: Option<Group<'t>>,
}

impl TxnGroup<'_> {
    pub(super) fn open(&mut self) {
        if let Some(tree) = self.tree
            && self.group.is_none()
        {
            self.group = Some(tree.open_group());
        }
    }
}
impl Store {
    /// The newest live item of each key, items the transaction's own
    /// earlier writes made included (they are not released yet).
    pub(super) fn apply_read(&self, ack: Ack<'_>, keys: &[&[u8]]) -> Result<Outcome> {
        if !ack.inside() {
            return Err(Error::NotInTransaction(
                "a read op runs inside a transaction".into(),
            ));
        }
        let mut items = Vec::with_capacity(keys.len());
        for key in keys {
            items.push(self.newest_live(ack, key)?);
        }
        Ok(Outcome::Read { items })
    }

    /// The key's newest live item, under its leaf lock (a write that
    /// writes nothing; its answer waits for the version it saw).
    pub(super) fn newest_live(&self, ack: Ack<'_>, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        let (item, _) =
            self.write_key(ack, key, |cur| (WriteOp::Noop, cur.map(|c| c.to_item())))?;
        Ok(item)
    }

    /// `Op::Scan`: a range at the newest version handed out, which inside
    /// a transaction (the lock held exclusively: no other write under way)
    /// is the state its earlier ops left, their unreleased writes included.
    pub(super) fn apply_scan(
        &self,
        ack: Ack<'_>,
        range: &crate::Range,
        what: ScanWhat,
        max_bytes: u64,
    ) -> Result<Outcome> {
        if !ack.inside() {
            return Err(Error::NotInTransaction(
                "a scan op runs inside a transaction".into(),
            ));
        }
        self.check_range(range)?;
        let guard = self.tree.pin();
        let v = self.tree.write_version();
        let (mut items, mut count, mut bytes) = (Vec::new(), 0u64, 0u64);
        self.visit_at_version(range, v, &ack.now(), |it| {
            count += 1;
            let item = match what {
                ScanWhat::Count => return true,
                ScanWhat::Keys => {
                    let view = it.view();
                    Item {
                        key: Bytes::copy_from_slice(view.key),
                        value: Bytes::new(),
                        version: view.version,
                        expires_at_ms: view.expires_at_ms,
                        flags: view.flags,
                    }
                }
                ScanWhat::Items => it.to_item(),
            };
            bytes += (item.key.len() + item.value.len()) as u64;
            items.push(item);
            bytes <= max_bytes
        });
        drop(guard);
        // The answer rests on every version up to `v`.
        self.acknowledge(ack, v)?;
        Ok(Outcome::Scan { items, count })
    }

    /// A transaction (`Op::Txn`): with the transaction lock held
    /// exclusively no other write runs, so the watches, the reads and the
    /// writes see one state that only the transaction changes; its writes
    /// are one atomic group (one release, one GROUP_BEGIN..GROUP_END span
    /// in the log). A transaction inside one runs within the outer one.
    pub(super) fn apply_txn(
        &self,
        ack: Ack<'_>,
        watch: &[Watch<'_>],
        ops: &[Op<'_>],
    ) -> Result<Outcome> {
        for w in watch {
            self.check_key(w.key)?;
        }
        let results = self.exclusively(ack, |inner, group| {
            if !self.watches_hold(inner, watch, ops)? {
                return Ok(None);
            }
            // Reads and checks write nothing: only writes need a group.
            if ops
                .iter()
                .any(|op| !matches!(op, Op::Read { .. } | Op::Check(_)))
            {
                group.open();
            }
            self.txn_ops(inner, ops).map(Some)
        })?;
        Ok(Outcome::Txn { results })
    }

    /// Runs `body` as one transaction: the transaction lock held
    /// exclusively, its writes one atomic group (once `body` opens it), and
    /// its answer acknowledged once every version it rests on is. Inside
    /// another transaction (`Ack::inside`), it runs within that one.
    pub(super) fn exclusively<R>(
        &self,
        ack: Ack<'_>,
        body: impl FnOnce(Ack<'_>, &mut TxnGroup<'_>) -> Result<R>,
    ) -> Result<R> {
        if ack.inside() {
            return body(
                ack,
                &mut TxnGroup {
                    tree: None,
                    group: None,
                },
            );
        }
        self.admit()?;
        let exclusive = self.txn_lock.exclusive();
        let wait = Cell::new(0);
        let mut scope = TxnGroup {
            tree: Some(&self.tree),
            group: None,
        };
        let r = body(ack.inside_group(&wait), &mut scope);
        let mut group = scope.group;
        // The span reaches every version the answers rest on. On an error
        // the group is dropped unclosed (see `Group`): a transaction that
        // does not finish is never visible in part, nor recovered in part.
        if let Some(g) = &mut group {
            g.extend(wait.get());
        }
        let r = r?;
        let last = group.map_or(wait.get(), Group::close);
        drop(exclusive);
        self.acknowledge(ack, last)?;
        Ok(r)
    }

    /// Every watched key's live item still has the version watched, and
    /// every check the ops begin with holds.
    fn watches_hold(&self, inner: Ack<'_>, watch: &[Watch<'_>], ops: &[Op<'_>]) -> Result<bool> {
        for w in watch {
            if self.newest_live(inner, w.key)?.map(|it| it.version) != w.version {
                return Ok(false);
            }
        }
        for op in ops {
            let Op::Check(c) = op else { break };
            if !self.check_holds(inner, c)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One check, against the newest state: with the transaction lock held
    /// exclusively no write is under way, so every version handed out is
    /// complete, and a range is read at the newest of them (released or
    /// not: the transaction's answer waits for them all).
    fn check_holds(&self, inner: Ack<'_>, c: &Check<'_>) -> Result<bool> {
        Ok(match *c {
            Check::Version { key, op, version } => {
                let v = self
                    .newest_live(inner, key)?
                    .map_or(0, |it| it.version.get());
                op.holds(&v, &version)
            }
            Check::Value { key, op, value } => self
                .newest_live(inner, key)?
                .is_some_and(|it| op.holds(&it.value[..], value)),
            Check::Count { start, end, op, n } => {
                let (count, _) = self.range_summary(inner, start, end)?;
                op.holds(&count, &n)
            }
            Check::MaxVersion {
                start,
                end,
                op,
                version,
            } => {
                let (_, newest) = self.range_summary(inner, start, end)?;
                op.holds(&newest, &version)
            }
        })
    }

    /// A range's live item count and newest item version, at the newest
    /// version handed out (see `check_holds`), judged at the op's clock.
    fn range_summary(
        &self,
        inner: Ack<'_>,
        start: std::ops::Bound<&[u8]>,
        end: std::ops::Bound<&[u8]>,
    ) -> Result<(u64, u64)> {
        let range = crate::Range::new(start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
        self.check_range(&range)?;
        let guard = self.tree.pin();
        let v = self.tree.write_version();
        let (mut count, mut newest) = (0u64, 0u64);
        self.visit_at_version(&range, v, &inner.now(), |it| {
            count += 1;
            newest = newest.max(it.version);
            true
        });
        drop(guard);
        // The answer rests on every version up to `v`.
        self.acknowledge(inner, v)?;
        Ok((count, newest))
    }

    /// A transaction's ops in order; a refusal is that op's result, any
    /// other error ends the transaction.
    fn txn_ops(&self, inner: Ack<'_>, ops: &[Op<'_>]) -> Result<Vec<Result<Outcome>>> {
        let mut results = Vec::with_capacity(ops.len());
        let mut leading = true;
        for op in ops {
            leading &= matches!(op, Op::Check(_));
            let r = match op {
                Op::Clear => Err(Error::NotInTransaction("FLUSHALL".into())),
                // Checked before any op ran (`watches_hold`).
                Op::Check(_) if leading => Ok(Outcome::Check),
                op => self.apply_in(inner, op),
            };
            match r {
                Err(e) if !e.is_refusal() => return Err(e),
                r => results.push(r),
            }
        }
        Ok(results)
    }
}
