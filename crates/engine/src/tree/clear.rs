//! Clear (FLUSHALL, docs/design.md, "Clear"): a CLEAR record at version
//! `c`, then every item older than `c` deleted leaf by leaf. Not atomic for
//! concurrent readers; writes concurrent with it (versions above `c`)
//! survive it, in memory and in replay.

use std::ops::Bound;

use super::write::{WriteMode, WriteOp};
use super::{LogEntry, Tree};
use crate::types::Now;

/// Keys a clear deletes per scan.
const CLEAR_BATCH: usize = 1024;

impl Tree {
    /// Clears the tree: takes version `c` with a CLEAR record, calls
    /// `released(c)`, which must return once every write up to `c` is
    /// released (every older item is then visible), then deletes every
    /// item with a version below `c` with unlogged writes (the CLEAR record
    /// covers them). Returns the newest version the deletes rest on: once
    /// it is released, every item written before the clear began is gone.
    pub(crate) fn clear<E>(&self, released: impl FnOnce(u64) -> Result<(), E>) -> Result<u64, E> {
        let c = self.next_version(Some(LogEntry::Clear)).complete();
        released(c)?;
        let mut from: Option<Vec<u8>> = None;
        let mut last_version = c;
        // Expired items too: a reading clock at the epoch sees them.
        let epoch = Now::at(1);
        loop {
            let mut keys = Vec::new();
            let mut last_key = None;
            // Pin before taking the read version: see `reclaim`.
            let guard = self.epochs.pin();
            let rv = self.clock.read_version();
            let start = from.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            self.scan(rv, &epoch, start, Bound::Unbounded, false, |it| {
                if it.version < c {
                    keys.push(it.key.to_vec());
                }
                last_key = Some(it.key.to_vec());
                keys.len() < CLEAR_BATCH
            });
            drop(guard);
            for key in &keys {
                // Unlogged: the Clear record covers these deletes.
                let mode = WriteMode {
                    now: None,
                    logged: false,
                };
                let w = self.write(key, mode, |cur| match cur {
                    Some(it) if it.version < c => (WriteOp::Delete, ()),
                    _ => (WriteOp::Noop, ()),
                });
                last_version = last_version.max(w.wait_for);
            }
            match last_key {
                Some(k) => from = Some(k),
                None => break,
            }
        }
        Ok(last_version)
    }
}
