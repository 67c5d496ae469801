//! Chains of checkpoints and their compaction (`docs/design.md`,
//! "Incremental checkpoints"): a base checkpoint and the delta runs that
//! follow it, each starting at the version the one before it reached.
//! Recovery loads a chain (the base merged with its runs as it streams);
//! the background executor merges a chain into a new base, so that the
//! runs never pile up.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::blocks::{self, BlockFile};
use super::checkpoint::{self, CheckpointInfo, CheckpointKind};
use super::delta::{self, DeltaFile, Entry};
use super::error::{CheckpointError, IoError, ItemRefused};
use super::file::Storage;
use super::overlay::{Overlay, Run};
use super::record::{self, CkptItem};

/// Reads `file` whole into a run, checking each item against the limits.
pub(crate) fn read_run(
    storage: &dyn Storage,
    file: &DeltaFile,
    max_value_len: usize,
) -> Result<Run, CheckpointError> {
    let mut run = Run::default();
    delta::read(storage, file, |e| {
        if let Entry::Put(it) = e {
            check_item(it, file.to, max_value_len)?;
        }
        run.push(e);
        Ok(())
    })?;
    Ok(run)
}

/// An item of a file at `version` must be no newer than it and within the
/// value limit.
pub(crate) fn check_item(
    it: &CkptItem<'_>,
    version: u64,
    max_value_len: usize,
) -> Result<(), ItemRefused> {
    check_value(it, max_value_len)?;
    if it.version > version {
        return Err(ItemRefused::VersionAbove {
            version: it.version,
        });
    }
    Ok(())
}

/// An item's value must be within the limit.
pub(crate) fn check_value(it: &CkptItem<'_>, max_value_len: usize) -> Result<(), ItemRefused> {
    if it.value.len() > max_value_len {
        return Err(ItemRefused::ValueTooLarge {
            len: it.value.len(),
        });
    }
    Ok(())
}

/// The runs that follow a base, loaded.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    pub overlay: Overlay,
    /// The runs applied, in order.
    pub used: Vec<DeltaFile>,
    /// The version the chain reaches.
    pub end: u64,
}

/// Follows the runs from version `from` among `deltas`: at each step the
/// run starting there that reaches furthest and reads whole (an older,
/// damaged attempt may share its start). `skipped` receives each run that
/// failed, with why.
pub(crate) fn load_chain(
    storage: &dyn Storage,
    from: u64,
    deltas: &[DeltaFile],
    max_value_len: usize,
    skipped: &mut Vec<(String, String)>,
) -> Chain {
    let mut chain = Chain {
        end: from,
        ..Chain::default()
    };
    loop {
        let mut next: Vec<&DeltaFile> = deltas.iter().filter(|d| d.from == chain.end).collect();
        next.sort_by_key(|d| std::cmp::Reverse(d.to));
        let mut applied = false;
        for d in next {
            match read_run(storage, d, max_value_len) {
                Ok(run) => {
                    chain.overlay.apply(run);
                    chain.used.push(d.clone());
                    chain.end = d.to;
                    applied = true;
                    break;
                }
                Err(why) => {
                    let entry = (d.name(), why.to_string());
                    if !skipped.contains(&entry) {
                        skipped.push(entry);
                    }
                }
            }
        }
        if !applied {
            return chain;
        }
    }
}

/// Merges the base at `base` (its path) with the runs `runs` (a chain from
/// its version, in order) into a new base at the last run's version,
/// written as `.tmp`, synced and renamed. Every run must read whole.
pub(crate) fn merge(
    storage: &dyn Storage,
    dir: &Path,
    base: (u64, &Path),
    runs: &[DeltaFile],
    max_value_len: usize,
) -> Result<CheckpointInfo, CheckpointError> {
    let started = Instant::now();
    let mut overlay = Overlay::default();
    let mut end = base.0;
    for d in runs {
        if d.from != end {
            return Err(CheckpointError::Io(IoError::new(
                format!("merging {}", d.name()),
                std::io::Error::other(format!("the chain breaks at version {end}")),
            )));
        }
        overlay.apply(read_run(storage, d, max_value_len)?);
        end = d.to;
    }
    let name = record::checkpoint_name(end);
    // Not the full checkpoint's `.tmp`: one of the same version may be
    // written meanwhile (same contents, its own file).
    let tmp: PathBuf = dir.join(format!("{name}.merge.tmp"));
    let result = write_merged(storage, &tmp, base, end, &overlay, max_value_len).and_then(
        |(items, bytes)| {
            blocks::publish(storage, dir, &tmp, &name).map_err(CheckpointError::Io)?;
            Ok((items, bytes))
        },
    );
    match result {
        Ok((items, bytes)) => Ok(CheckpointInfo {
            file: name,
            kind: CheckpointKind::Merged { runs: runs.len() },
            version: end,
            items,
            bytes,
            duration: started.elapsed(),
            finished_unix_ms: crate::types::now_ms(),
        }),
        Err(e) => {
            let _ = storage.remove(&tmp);
            Err(e)
        }
    }
}

fn write_merged(
    storage: &dyn Storage,
    tmp: &Path,
    base: (u64, &Path),
    end: u64,
    overlay: &Overlay,
    max_value_len: usize,
) -> Result<(u64, u64), CheckpointError> {
    let mut out = BlockFile::create(
        storage,
        tmp,
        record::CKPT_MAGIC,
        end,
        crate::types::now_ms(),
    )
    .map_err(CheckpointError::Io)?;
    // A write error is carried out of the reader's callback in `failed`.
    let mut failed: Option<IoError> = None;
    let mut emit = |it: &CkptItem<'_>| -> Result<(), ItemRefused> {
        out.add(|p| record::encode_ckpt_item(p, it));
        if failed.is_none()
            && let Err(e) = out.write_if_full()
        {
            failed = Some(e);
        }
        Ok(())
    };
    let mut m = overlay.merge();
    // The merged base is one version's, `end`'s; a base written at
    // advancing versions holds items above its own, never above `end`.
    let read = checkpoint::read(storage, base.1, |it| {
        check_item(it, end, max_value_len)?;
        m.base(it, &mut emit)
    })?;
    if read.version != base.0 {
        return Err(CheckpointError::VersionMismatch {
            header: read.version,
        });
    }
    m.finish(&mut emit)
        .map_err(|refused| CheckpointError::Item { index: 0, refused })?;
    if let Some(e) = failed {
        return Err(CheckpointError::Io(e));
    }
    out.finish().map_err(CheckpointError::Io)
}
