//! Log replay as a bulk load: the records above the checkpoint are not
//! written into the tree one by one (a descent, a leaf lock, a log append
//! and now and then a log merge or split each) but sorted by key, reduced
//! to each key's last record, and merged with the checkpoint chain's
//! sorted stream into one `BulkLoader` pass.
//!
//! The result is the state the write path reaches by replaying the records
//! in file order:
//! - a key's last record decides it (a PUT or DELETE replaces what was
//!   there whatever it was), unless its version is at or below the chain's
//!   end, where the chain already holds the key's state at that version;
//! - a CLEAR at version `c` above the chain's end drops every base item and
//!   every record below `c`;
//! - items keep their record's version, expiry and client flags.
//!
//! Delta runs after the restart (`tree/delta.rs`) find what changed since
//! the chain's end by the leaves' buffer versions: a leaf with a replayed
//! record in its key range (a PUT it holds, or a DELETE of a key in its
//! range) is built at the largest such version, as a log merge would have
//! published it, and reports the keys newer than the chain's end (or its
//! whole range when the deleted keys were lost); a leaf without one keeps
//! version 0 and is skipped, as an untouched loaded leaf is.

use std::cmp::Ordering;

use super::error::RecordRefused;
use super::record::Record;
use crate::config::Geometry;
use crate::tree::Tree;
use crate::tree::load::{BulkLoader, LoadError};
use crate::tree::node::key_cmp;

/// A key's record: a PUT (with its item) or a DELETE.
#[derive(Debug, Clone, Copy)]
struct Op<'a> {
    key: &'a [u8],
    value: &'a [u8],
    version: u64,
    expiry: u64,
    client_flags: u32,
    put: bool,
}

/// The valid log above a version (`above`), read: each key's last record
/// in key order, and what must be applied in version order (deletes and
/// clears, for the delete log).
#[derive(Debug, Default)]
pub(crate) struct LogOps<'a> {
    /// Records at or below it are only counted: the checkpoint recovery
    /// expects to load (the newest base) holds them.
    above: u64,
    /// Records at or below `above`.
    below: u64,
    /// PUT and DELETE records; once sealed, each key's last, in key order.
    ops: Vec<Op<'a>>,
    /// Every record's version above `above`, in log (so version) order.
    versions: Vec<u64>,
    /// DELETE keys (`Some`) and CLEARs (`None`) in log order.
    events: Vec<(u64, Option<&'a [u8]>)>,
    /// The records that cannot be applied: (segment index, version, why),
    /// in log order.
    refused: Vec<(usize, u64, RecordRefused)>,
    /// The version of the last CLEAR (0: none).
    last_clear: u64,
}

impl<'a> LogOps<'a> {
    /// Gathers the records above version `above`.
    pub(crate) fn above(above: u64) -> LogOps<'a> {
        LogOps {
            above,
            ..LogOps::default()
        }
    }

    /// Records at or below this version were not gathered.
    pub(crate) fn gathered_above(&self) -> u64 {
        self.above
    }

    /// Takes record `rec` of segment `segment`, in log order; `max_key_len`
    /// and `max_value_len` are the limits a record must keep.
    pub(crate) fn add(
        &mut self,
        segment: usize,
        rec: &Record<'a>,
        max_key_len: usize,
        max_value_len: usize,
    ) {
        let v = rec.version();
        if v <= self.above {
            self.below += 1;
            return;
        }
        self.versions.push(v);
        let check_key = |key: &[u8]| {
            if key.is_empty() || key.len() > max_key_len {
                Err(RecordRefused::KeyLength {
                    len: key.len(),
                    max: max_key_len,
                })
            } else {
                Ok(())
            }
        };
        let op = match *rec {
            Record::Put {
                key,
                value,
                expiry,
                client_flags,
                ..
            } => match check_key(key) {
                Ok(()) if value.len() > max_value_len => {
                    Err(RecordRefused::ValueTooLarge { len: value.len() })
                }
                checked => checked.map(|()| Op {
                    key,
                    value,
                    version: v,
                    expiry,
                    client_flags,
                    put: true,
                }),
            },
            Record::Delete { key, .. } => check_key(key).map(|()| {
                self.events.push((v, Some(key)));
                Op {
                    key,
                    value: &[],
                    version: v,
                    expiry: 0,
                    client_flags: 0,
                    put: false,
                }
            }),
            Record::Clear { .. } => {
                self.events.push((v, None));
                self.last_clear = v;
                return;
            }
            Record::GroupBegin { .. } | Record::GroupEnd { .. } => return,
        };
        match op {
            Ok(op) => self.ops.push(op),
            Err(why) => self.refused.push((segment, v, why)),
        }
    }

    /// Sorts the records by key and keeps each key's last (versions are
    /// unique, so the order is total). Both cores sort: each half on its
    /// own thread; then std's stable sort, which finds runs already in
    /// order, merges the two halves in one pass.
    pub(crate) fn seal(&mut self) {
        let by_key =
            |a: &Op<'_>, b: &Op<'_>| key_cmp(a.key, b.key).then_with(|| b.version.cmp(&a.version));
        let mut ops = std::mem::take(&mut self.ops);
        if ops.len() < PARALLEL_SORT_MIN {
            ops.sort_unstable_by(by_key);
        } else {
            let mid = ops.len() / 2;
            let (lo, hi) = ops.split_at_mut(mid);
            std::thread::scope(|s| {
                s.spawn(|| lo.sort_unstable_by(by_key));
                hi.sort_unstable_by(by_key);
            });
            ops.sort_by(by_key);
        }
        // Newest first within a key: keep the first of each run.
        ops.dedup_by(|later, kept| later.key == kept.key);
        self.ops = ops;
    }

    /// Records at or below `end` (already in the checkpoint) and above it.
    /// `end` is at least `above`.
    pub(crate) fn split_count(&self, end: u64) -> (u64, u64) {
        debug_assert!(end >= self.above);
        let at_or_below = self.versions.partition_point(|&v| v <= end) as u64;
        (
            self.below + at_or_below,
            self.versions.len() as u64 - at_or_below,
        )
    }

    /// The first record above `end` that cannot be applied.
    pub(crate) fn refused_above(&self, end: u64) -> Option<&(usize, u64, RecordRefused)> {
        self.refused.iter().find(|r| r.1 > end)
    }

    /// Deletes (`Some(key)`) and clears (`None`) above `end`, in log order.
    pub(crate) fn events_above(&self, end: u64) -> impl Iterator<Item = (u64, Option<&'a [u8]>)> {
        let from = self.events.partition_point(|e| e.0 <= end);
        self.events[from..].iter().copied()
    }
}

/// Below this many records one thread sorts: a thread's start and the
/// merge cost more than they save.
const PARALLEL_SORT_MIN: usize = 1 << 16;

/// A bulk load of a checkpoint chain's stream merged with the log's
/// records above the chain's end (`end`).
pub(crate) struct Merge<'o, 'g> {
    ops: &'o [Op<'o>],
    at: usize,
    end: u64,
    /// The last CLEAR's version: records below it are gone, and if it is
    /// above `end`, so is every base item.
    last_clear: u64,
    /// A DELETE above `end` was applied.
    deleted: bool,
    loader: BulkLoader<'g>,
}

impl<'o, 'g> Merge<'o, 'g> {
    pub(crate) fn new(g: &'g Geometry, log: &'o LogOps<'o>, end: u64) -> Merge<'o, 'g> {
        Merge {
            ops: &log.ops,
            at: 0,
            end,
            last_clear: log.last_clear,
            deleted: false,
            loader: BulkLoader::new(g),
        }
    }

    /// The chain's next item, in ascending key order: the records of keys
    /// before it go first, and a record of its own key above `end`
    /// replaces it.
    pub(crate) fn base(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u64,
        expiry: u64,
        client_flags: u32,
    ) -> Result<(), LoadError> {
        while let Some(&op) = self.ops.get(self.at) {
            match key_cmp(op.key, key) {
                Ordering::Less => {
                    self.at += 1;
                    self.op(op)?;
                }
                Ordering::Equal if op.version > self.end => {
                    self.at += 1;
                    return self.op(op);
                }
                // At or below `end`: the chain's item is the key's state.
                Ordering::Equal => {
                    self.at += 1;
                    break;
                }
                Ordering::Greater => break,
            }
        }
        if self.last_clear > self.end {
            return Ok(());
        }
        self.loader.push(key, value, version, expiry, client_flags)
    }

    /// Applies a key's last record: nothing at or below `end` (the chain
    /// holds it); else a PUT after the last CLEAR is the key's item, and a
    /// DELETE (or a PUT a CLEAR dropped) marks the leaf whose range holds
    /// the key as changed.
    fn op(&mut self, op: Op<'_>) -> Result<(), LoadError> {
        if op.version <= self.end {
            return Ok(());
        }
        if op.put && op.version > self.last_clear {
            self.loader
                .push(op.key, op.value, op.version, op.expiry, op.client_flags)?;
        } else {
            self.deleted = true;
        }
        self.loader.changed_at(op.version);
        Ok(())
    }

    /// Applies the records after the chain's last key and builds the tree.
    /// Returns it, the largest item version and whether a full checkpoint
    /// must follow: a DELETE emptied the tree, so no leaf is left to show
    /// it (`Tree::new`'s root keeps version 0).
    pub(crate) fn finish(mut self) -> Result<(Tree, u64, bool), LoadError> {
        while let Some(&op) = self.ops.get(self.at) {
            self.at += 1;
            self.op(op)?;
        }
        let empty = self.loader.items() == 0;
        let (tree, max) = self.loader.finish();
        Ok((tree, max, empty && self.deleted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Enough records for the two-thread sort, with many overwrites: the
    /// sealed run is each key's last record, in key order.
    #[test]
    fn seal_keeps_each_keys_last_record_in_key_order() {
        let n = PARALLEL_SORT_MIN * 3;
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("k{}", (i * 7919) % (n / 3)).into_bytes())
            .collect();
        let mut log = LogOps::above(0);
        let mut model = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            let version = i as u64 + 1;
            let rec = if i % 5 == 0 {
                Record::Delete { version, key }
            } else {
                Record::Put {
                    version,
                    key,
                    value: b"v",
                    expiry: 0,
                    client_flags: 0,
                }
            };
            log.add(0, &rec, 64, 64);
            model.insert(key.clone(), (version, i % 5 != 0));
        }
        log.seal();
        let got: Vec<(Vec<u8>, (u64, bool))> = log
            .ops
            .iter()
            .map(|op| (op.key.to_vec(), (op.version, op.put)))
            .collect();
        assert_eq!(got, model.into_iter().collect::<Vec<_>>());
        assert_eq!(log.split_count(0), (0, n as u64));
    }
}
