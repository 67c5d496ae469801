//! Backups: a full checkpoint of one consistent snapshot, written into a
//! directory of its own while writers go on. The directory is then a data
//! directory by itself: `Store::open` on it recovers exactly the snapshot.
//!
//! The checkpoint writer is the one the store's own checkpoints use (one
//! file format), with one difference: a store's base advances its version
//! chunk by chunk and leans on the log for the rest, and a backup has no
//! log, so all its chunks read one pinned version. That version holds back
//! the buffers writers replace while the backup runs. It shares nothing on
//! disk with the store's data directory, so the background executor
//! (merges, retention) never touches it.
//!
//! The directory's `LOCK` is held while the backup is written (and stays,
//! as in every data directory).
//!
//! Completion: the checkpoint is written as `ckpt-<version>.ckpt.tmp`,
//! synced, renamed and the directory synced, the engine's convention for
//! every checkpoint. A backup that a crash interrupted holds no
//! `ckpt-*.ckpt` file; `combkv restore` refuses it, and `Store::open`
//! deletes the `.tmp` as it deletes any unfinished checkpoint.

use std::io;
use std::path::Path;

use super::Store;
use crate::durable::check::check_with;
use crate::durable::checkpoint::{self, Versions};
use crate::durable::deletes::DeleteLog;
use crate::durable::file::{FsStorage, Storage};
use crate::durable::{CheckpointInfo, IoError, LOCK_FILE, LockError};
use crate::error::{Error, Result};
use crate::types::{ItemView, Version};

impl Store {
    /// Writes a full checkpoint of the store at its current read version
    /// into `dir` (created if missing; it must hold nothing but a `LOCK`
    /// file, which the backup holds while it writes), fsynced (the file and
    /// the directory). Every write acknowledged before the call is in
    /// it; writes that race with it are in it or not, whole. Writers are
    /// not blocked; a clear (FLUSHALL) waits while the version is taken.
    ///
    /// A durable store writes through its configured storage; an in-memory
    /// store through the file system. Returns what was written: the file
    /// name, the version (the backup holds exactly the writes up to it),
    /// items and bytes.
    pub fn backup(&self, dir: &Path) -> Result<CheckpointInfo> {
        let fs = FsStorage;
        let storage: &dyn Storage = match &self.durable {
            Some(d) => d.storage(),
            None => &fs,
        };
        prepare_dir(storage, dir)?;
        // Held until the backup is written: a second backup, or a server
        // started on the directory meanwhile, is refused rather than
        // writing the same files.
        let _lock = storage.lock_dir(dir).map_err(|e| match e {
            LockError::InUse(d) => Error::InUse(d),
            LockError::Io(e) => Error::Io(e),
        })?;
        // One that began, and finished, between the check and the lock.
        if let Some(other) = storage
            .list_all(dir)
            .map_err(io_at(dir))?
            .iter()
            .find(|n| *n != LOCK_FILE)
        {
            return Err(not_empty(dir, other));
        }
        let no_deletes = DeleteLog::default();
        let info = checkpoint::write(
            &self.tree,
            storage,
            dir,
            self.clear_lock(),
            (None, &no_deletes),
            Versions::One,
            |_| {},
        )?;
        // The directory's own entry, if the backup created it.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::Io(IoError::new(parent.display().to_string(), e)))?;
        }
        Ok(info)
    }

    /// The lock a clear holds for its whole run: the durable store's
    /// checkpoints', or the in-memory store's own.
    pub(super) fn clear_lock(&self) -> &parking_lot::Mutex<()> {
        match &self.durable {
            Some(d) => d.clear_lock(),
            None => &self.clear_lock,
        }
    }
}

/// Reads the backup in `dir` (`Store::backup`'s: one checkpoint and
/// nothing else) without changing it: verifies the whole checkpoint first
/// (checksums, key order, item count), then hands each item to `f` in key
/// order, expired ones included. Returns the checkpoint's file name,
/// version and items. A directory that is no complete backup (no finished
/// checkpoint, or log segments and delta runs beside it: a data directory
/// a server ran on) is refused as `Error::Corrupt`, naming why.
pub fn read_backup(dir: &Path, mut f: impl FnMut(ItemView<'_>)) -> Result<(String, u64, u64)> {
    let report = check_with(&FsStorage, dir)?;
    let refuse = |why: String| Err(Error::Corrupt(format!("{}: {why}", dir.display())));
    if !report.segments.is_empty() || !report.deltas.is_empty() || report.checkpoints.len() > 1 {
        return refuse(format!(
            "not a backup: it holds {} checkpoints, {} delta runs and {} log segments \
             (a data directory a server has run on)",
            report.checkpoints.len(),
            report.deltas.len(),
            report.segments.len()
        ));
    }
    let Some(c) = report.checkpoints.first() else {
        return refuse(if report.other_files.is_empty() {
            "holds no checkpoint: it is no backup".into()
        } else {
            format!(
                "holds no finished checkpoint ({}): the backup did not complete",
                report.other_files.join(", ")
            )
        });
    };
    if let Err(e) = &c.status {
        return refuse(format!("its checkpoint {} is damaged: {e}", c.file));
    }
    if c.advancing {
        return refuse(format!(
            "its checkpoint {} is a data directory's, which needs the log beside it",
            c.file
        ));
    }
    let read = checkpoint::read(&FsStorage, &dir.join(&c.file), |it| {
        f(ItemView {
            key: it.key,
            value: it.value,
            version: Version(it.version),
            expires_at_ms: (it.expiry != 0).then_some(it.expiry),
            flags: it.client_flags,
        });
        Ok(())
    })?;
    Ok((c.file.clone(), read.version, read.items))
}

/// Creates `dir` if missing; refuses one that holds anything but a `LOCK`
/// (a backup never mixes with other files, and never overwrites an older
/// backup; a lock file is never removed, so a failed backup leaves one,
/// and the directory takes the next attempt).
fn prepare_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage.create_dir_all(dir).map_err(io_at(dir))?;
    let names = storage.list_all(dir).map_err(io_at(dir))?;
    match names.iter().find(|n| *n != LOCK_FILE) {
        Some(other) => Err(not_empty(dir, other)),
        None => Ok(()),
    }
}

fn io_at(dir: &Path) -> impl Fn(io::Error) -> Error + '_ {
    move |e| Error::Io(IoError::new(dir.display().to_string(), e))
}

fn not_empty(dir: &Path, holds: &str) -> Error {
    io_at(dir)(io::Error::new(
        io::ErrorKind::DirectoryNotEmpty,
        format!("the backup directory is not empty (it holds {holds})"),
    ))
}
