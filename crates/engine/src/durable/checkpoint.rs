//! Checkpoints: every live item, written while writers keep going, as
//! checksummed blocks in key order (format in `record.rs`). The file is
//! written as `.tmp`, synced, renamed and the directory synced, so a
//! checkpoint file is either complete or absent (a corrupt one is detected
//! by its checksums and skipped by recovery).
//!
//! The scan runs in chunks of one block, each pinning the epoch only while
//! it reads. A store's own base advances its version chunk by chunk
//! (`Versions::Advancing`): each chunk pins the read version when it
//! begins and lets it go when it ends, so the checkpoint holds back only
//! the buffers writers replace during one chunk, not all they replace
//! while it runs. Such a file is exact at no one version: an item is its
//! key's state at its chunk's version, at or above the first chunk's,
//! which names the file. The log from that version on holds every later
//! write, so recovery, replaying each key's last record above it, comes
//! to the same state as from a file taken at one version; the log is made
//! durable through the last chunk's version before the file is published,
//! whatever the durability mode, so no item is in the file without its
//! record. A backup has no log beside it, so its chunks share one pinned
//! version (`Versions::One`). A delta run pins one version throughout:
//! it writes only what changed since the chain's end and takes a fraction
//! of a base's time (its peak memory with a writer running is measured
//! beside the base's in `durable_figures`).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::blocks::{BlockFile, publish, read_blocks};
use super::deletes::DeleteLog;
use super::error::{CheckpointError, ItemRefused, WalError};
use super::file::Storage;
use super::record::{self, CkptItem};
use crate::tree::Tree;
use crate::tree::snapshots::VersionPin;
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
    /// The checkpoint's version: it holds every write `<=` it, and with the
    /// log's records above it the store's whole state (a base written at
    /// advancing versions may hold later writes too; a backup and a delta
    /// run hold exactly the writes `<=` it).
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

/// How a base's chunks take their versions (see the module documentation).
#[derive(Clone, Copy)]
pub(crate) enum Versions<'a> {
    /// All at one version, pinned throughout: a backup.
    One,
    /// Each at the read version when it begins; the function makes the
    /// store's log durable through a version.
    Advancing(&'a dyn Fn(u64) -> Result<(), WalError>),
}

/// Pins the current read version, taken under `clear_lock` so that no
/// clear is half done at it (an engine pin: no client can release it).
fn pin_version(tree: &Tree, clear_lock: &Mutex<()>) -> VersionPin {
    let _clearing = clear_lock.lock();
    tree.pin_version()
}

/// Writes a checkpoint of `tree` into `dir`: a delta run from version
/// `since` when given (the chain's end; nothing if no write came since),
/// with the deleted keys `deletes` recorded, else a base whose chunks take
/// their versions as `versions` says. `on_snapshot` runs once the
/// checkpoint's version is pinned.
pub(crate) fn write(
    tree: &Tree,
    storage: &dyn Storage,
    dir: &Path,
    clear_lock: &Mutex<()>,
    (since, deletes): (Option<u64>, &DeleteLog),
    versions: Versions<'_>,
    on_snapshot: impl FnOnce(u64),
) -> Result<CheckpointInfo, CheckpointError> {
    let started = Instant::now();
    let info = |file: String, kind, version, (items, bytes)| CheckpointInfo {
        file,
        kind,
        version,
        items,
        bytes,
        duration: started.elapsed(),
        finished_unix_ms: crate::types::now_ms(),
    };
    let pin = pin_version(tree, clear_lock);
    let version = pin.version();
    on_snapshot(version);
    let written = match since {
        Some(from) => {
            let run = if from >= version {
                Ok(info(
                    String::new(),
                    CheckpointKind::Unchanged,
                    version,
                    (0, 0),
                ))
            } else {
                let deleted = deletes.between(from, version);
                super::delta::write(tree, storage, dir, (from, version), deleted.as_deref())
                    .map(|w| {
                        info(
                            super::delta::delta_name(from, version),
                            CheckpointKind::Delta { from },
                            version,
                            (w.entries, w.bytes),
                        )
                    })
                    .map_err(CheckpointError::Io)
            };
            drop(pin);
            run
        }
        None => {
            let name = record::checkpoint_name(version);
            let tmp = dir.join(format!("{name}.tmp"));
            // `write_base` drops the pin, or moves it on chunk by chunk.
            let written =
                write_base(tree, storage, &tmp, clear_lock, pin, versions).and_then(|r| {
                    publish(storage, dir, &tmp, &name)
                        .map_err(CheckpointError::Io)
                        .map(|()| r)
                });
            if written.is_err() {
                let _ = storage.remove(&tmp);
            }
            written.map(|r| info(name, CheckpointKind::Full, version, r))
        }
    };
    tree.collect(false);
    written
}

/// Writes a base into `path`, its first chunk at `pin`'s version, and
/// syncs it: (items, bytes). An advancing base's log is durable through
/// its last chunk's version when this returns.
fn write_base(
    tree: &Tree,
    storage: &dyn Storage,
    path: &Path,
    clear_lock: &Mutex<()>,
    mut pin: VersionPin,
    versions: Versions<'_>,
) -> Result<(u64, u64), CheckpointError> {
    let magic = match versions {
        Versions::One => record::CKPT_MAGIC,
        Versions::Advancing(_) => record::CKPT_ADVANCING_MAGIC,
    };
    let mut out = BlockFile::create(storage, path, magic, pin.version(), crate::types::now_ms())?;
    let mut from: Option<Vec<u8>> = None;
    loop {
        if from.is_some() && matches!(versions, Versions::Advancing(_)) {
            // The last chunk's version goes, and with it what writers
            // replaced since.
            pin = pin_version(tree, clear_lock);
            tree.collect(false);
        }
        let version = pin.version();
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
    let newest = pin.version();
    drop(pin);
    let written = out.finish()?;
    if let Versions::Advancing(sync) = versions {
        sync(newest).map_err(CheckpointError::Log)?;
    }
    Ok(written)
}

/// What `read` found in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The version its header names.
    pub version: u64,
    /// Written at advancing versions (its items may be newer than
    /// `version`, and only the log from `version` on completes it).
    pub advancing: bool,
    pub items: u64,
}

/// Reads and verifies a checkpoint, handing each item to `f` in order.
/// Any damage, a missing footer, an item count that does not match, an
/// item newer than the version of a checkpoint taken at one version, or
/// an item `f` refuses fails it.
pub(crate) fn read(
    storage: &dyn Storage,
    path: &Path,
    mut f: impl FnMut(&CkptItem<'_>) -> Result<(), ItemRefused>,
) -> Result<Summary, CheckpointError> {
    const MAGICS: [&[u8; 8]; 2] = [record::CKPT_MAGIC, record::CKPT_ADVANCING_MAGIC];
    let mut items = 0u64;
    let (header, count) = read_blocks(storage, path, &MAGICS, |header, payload, offset| {
        let block = |damage| CheckpointError::Block { offset, damage };
        let one_version = MAGICS[header.magic] == record::CKPT_MAGIC;
        let mut at = 0;
        let mut n = 0;
        while at < payload.len() {
            let (it, next) = record::decode_ckpt_item(payload, at).map_err(block)?;
            let checked = if one_version && it.version > header.a {
                Err(ItemRefused::VersionAbove {
                    version: it.version,
                })
            } else {
                f(&it)
            };
            checked.map_err(|refused| CheckpointError::Item {
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
    Ok(Summary {
        version: header.a,
        advancing: MAGICS[header.magic] == record::CKPT_ADVANCING_MAGIC,
        items,
    })
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

#[cfg(test)]
mod tests;
