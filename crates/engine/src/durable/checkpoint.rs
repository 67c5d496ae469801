//! Checkpoints: every live item at one MVCC snapshot version, written while
//! writers keep going, as checksummed blocks in key order (format in
//! `record.rs`). The file is written as `.tmp`, synced, renamed and the
//! directory synced, so a checkpoint file is either complete or absent
//! (a corrupt one is detected by its checksums and skipped by recovery).
//!
//! The scan runs in chunks of one block: each chunk pins the epoch only
//! while it reads, and the registered snapshot keeps the version's buffers
//! alive between chunks, so a long checkpoint holds back only the buffers
//! that writers replace meanwhile (no fork, no copy of the tree).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::blocks::{BlockFile, publish, read_blocks};
use super::deletes::DeleteLog;
use super::error::{CheckpointError, IoError, ItemRefused};
use super::file::Storage;
use super::record::{self, CkptItem};
use crate::tree::Tree;
use crate::types::Now;

/// Which kind of file a checkpoint wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointKind {
    /// Every live item: a new base.
    Full,
    /// A delta run: what changed since the checkpoint at `from`.
    Delta {
        /// The version of the checkpoint it follows.
        from: u64,
    },
    /// A base that background compaction merged from the base and `runs`
    /// delta runs reaching `version`.
    Merged {
        /// How many delta runs were merged into the new base.
        runs: usize,
    },
    /// Nothing changed since the checkpoint at `version`: nothing written.
    Unchanged,
}

impl std::fmt::Display for CheckpointKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckpointKind::Full => "full",
            CheckpointKind::Delta { .. } => "delta",
            CheckpointKind::Merged { .. } => "merged",
            CheckpointKind::Unchanged => "unchanged",
        })
    }
}

/// What a finished checkpoint wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The file name in the data directory.
    pub file: String,
    /// Whether it is a full base, a delta run, a merge, or nothing.
    pub kind: CheckpointKind,
    /// The snapshot version: the checkpoint holds exactly the writes `<=` it.
    pub version: u64,
    /// Items written (a delta run: entries).
    pub items: u64,
    /// The file's size.
    pub bytes: u64,
    /// How long it took, snapshot to rename.
    pub duration: Duration,
    /// Unix ms when it finished.
    pub finished_unix_ms: u64,
}

/// Pins the current read version while `f` runs (an engine pin: no client
/// can release it). The version is taken under `clear_lock`, so no clear is
/// half done at it.
fn with_snapshot<T>(tree: &Tree, clear_lock: &Mutex<()>, f: impl FnOnce(u64) -> T) -> T {
    let clearing = clear_lock.lock();
    let pin = tree.pin_version();
    drop(clearing);
    let out = f(pin.version());
    drop(pin);
    tree.collect(false);
    out
}

/// Writes a checkpoint of `tree` at its current read version into `dir`:
/// a delta run from version `since` when given (the chain's end; nothing
/// if no write came since), with the deleted keys `deletes` recorded, else
/// a full one. `on_snapshot` runs once the version is pinned.
pub(crate) fn write(
    tree: &Tree,
    storage: &dyn Storage,
    dir: &Path,
    clear_lock: &Mutex<()>,
    (since, deletes): (Option<u64>, &DeleteLog),
    on_snapshot: impl FnOnce(u64),
) -> Result<CheckpointInfo, CheckpointError> {
    let started = Instant::now();
    with_snapshot(tree, clear_lock, |version| {
        on_snapshot(version);
        let info = |file: String, kind, items, bytes| CheckpointInfo {
            file,
            kind,
            version,
            items,
            bytes,
            duration: started.elapsed(),
            finished_unix_ms: crate::types::now_ms(),
        };
        match since {
            Some(from) if from >= version => {
                Ok(info(String::new(), CheckpointKind::Unchanged, 0, 0))
            }
            Some(from) => {
                let deleted = deletes.between(from, version);
                let w =
                    super::delta::write(tree, storage, dir, (from, version), deleted.as_deref())?;
                let name = super::delta::delta_name(from, version);
                Ok(info(
                    name,
                    CheckpointKind::Delta { from },
                    w.entries,
                    w.bytes,
                ))
            }
            None => {
                let name = record::checkpoint_name(version);
                let tmp = dir.join(format!("{name}.tmp"));
                match write_file(tree, storage, &tmp, version)
                    .and_then(|r| publish(storage, dir, &tmp, &name).map(|()| r))
                {
                    Ok((items, bytes)) => Ok(info(name, CheckpointKind::Full, items, bytes)),
                    Err(e) => {
                        let _ = storage.remove(&tmp);
                        Err(CheckpointError::Io(e))
                    }
                }
            }
        }
    })
}

fn write_file(
    tree: &Tree,
    storage: &dyn Storage,
    path: &Path,
    version: u64,
) -> Result<(u64, u64), IoError> {
    let mut out = BlockFile::create(
        storage,
        path,
        record::CKPT_MAGIC,
        version,
        crate::types::now_ms(),
    )?;
    let mut from: Option<Vec<u8>> = None;
    loop {
        let mut last: Option<Vec<u8>> = None;
        {
            let _guard = tree.pin();
            let start = match &from {
                Some(k) => Bound::Excluded(&k[..]),
                None => Bound::Unbounded,
            };
            tree.scan(
                version,
                &Now::lazy(),
                start,
                Bound::Unbounded,
                false,
                |it| {
                    out.add(|p| {
                        record::encode_ckpt_item(
                            p,
                            &CkptItem {
                                version: it.version,
                                expiry: it.expiry,
                                client_flags: it.cflags,
                                key: it.key,
                                value: it.value.bytes(),
                            },
                        )
                    });
                    if out.full() {
                        last = Some(it.key.to_vec());
                        return false;
                    }
                    true
                },
            );
        }
        // Written with the epoch unpinned.
        out.write_if_full()?;
        match last {
            Some(k) => from = Some(k),
            None => break,
        }
    }
    out.finish()
}

/// Reads and verifies a checkpoint, handing each item to `f` in order.
/// Returns (version, items). Any damage, a missing footer, an item count
/// that does not match, or an item `f` refuses fails it.
pub(crate) fn read(
    storage: &dyn Storage,
    path: &Path,
    mut f: impl FnMut(&CkptItem<'_>) -> Result<(), ItemRefused>,
) -> Result<(u64, u64), CheckpointError> {
    let mut items = 0u64;
    let (version, _created, count) =
        read_blocks(storage, path, record::CKPT_MAGIC, |payload, offset| {
            let block = |damage| CheckpointError::Block { offset, damage };
            let mut at = 0;
            let mut n = 0;
            while at < payload.len() {
                let (it, next) = record::decode_ckpt_item(payload, at).map_err(block)?;
                f(&it).map_err(|refused| CheckpointError::Item {
                    index: items,
                    refused,
                })?;
                items += 1;
                n += 1;
                at = next;
            }
            Ok(n)
        })?;
    debug_assert_eq!(count, items);
    Ok((version, items))
}

/// Checkpoint files in `dir`, newest (highest version) first.
pub(crate) fn list(storage: &dyn Storage, dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out: Vec<(u64, PathBuf)> = storage
        .list(dir)?
        .into_iter()
        .filter_map(|n| Some((record::parse_name(&n, "ckpt-", ".ckpt")?, dir.join(n))))
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.0));
    Ok(out)
}
