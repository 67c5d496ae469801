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

use std::io::Read;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::error::{CheckpointError, IoError, ItemRefused};
use super::file::Storage;
use super::record::{self, CkptItem};
use crate::tree::Tree;
use crate::types::Now;

/// Target payload bytes per checkpoint block.
const BLOCK_BYTES: usize = 64 << 10;

/// What a finished checkpoint wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The file name in the data directory.
    pub file: String,
    /// The snapshot version: the checkpoint holds exactly the writes `<=` it.
    pub version: u64,
    pub items: u64,
    pub bytes: u64,
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

/// Writes a checkpoint of `tree` at its current read version into `dir`;
/// `on_snapshot` runs once the version is pinned.
pub(crate) fn write(
    tree: &Tree,
    storage: &dyn Storage,
    dir: &Path,
    clear_lock: &Mutex<()>,
    on_snapshot: impl FnOnce(u64),
) -> Result<CheckpointInfo, CheckpointError> {
    let started = Instant::now();
    with_snapshot(tree, clear_lock, |version| {
        on_snapshot(version);
        let name = record::checkpoint_name(version);
        let tmp = dir.join(format!("{name}.tmp"));
        let result = write_file(tree, storage, &tmp, version).and_then(|(items, bytes)| {
            storage
                .rename(&tmp, &dir.join(&name))
                .and_then(|()| storage.sync_dir(dir))
                .map_err(IoError::doing(format!("checkpoint {name}")))?;
            Ok((items, bytes))
        });
        match result {
            Ok((items, bytes)) => Ok(CheckpointInfo {
                file: name,
                version,
                items,
                bytes,
                duration: started.elapsed(),
                finished_unix_ms: crate::types::now_ms(),
            }),
            Err(e) => {
                let _ = storage.remove(&tmp);
                Err(CheckpointError::Io(e))
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
    let what = format!("checkpoint {}", path.display());
    let err = |e: std::io::Error| IoError::new(what.clone(), e);
    let mut f = storage.create(path).map_err(err)?;
    let header = record::encode_header(record::CKPT_MAGIC, version, crate::types::now_ms());
    f.write_all(&header).map_err(err)?;
    let mut bytes = header.len() as u64;
    let mut items = 0u64;
    let mut payload = Vec::with_capacity(BLOCK_BYTES + 1024);
    let mut framed = Vec::with_capacity(BLOCK_BYTES + 1024);
    let mut from: Option<Vec<u8>> = None;
    loop {
        payload.clear();
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
                    record::encode_ckpt_item(
                        &mut payload,
                        &CkptItem {
                            version: it.version,
                            expiry: it.expiry,
                            client_flags: it.cflags,
                            key: it.key,
                            value: it.value.bytes(),
                        },
                    );
                    items += 1;
                    if payload.len() >= BLOCK_BYTES {
                        last = Some(it.key.to_vec());
                        return false;
                    }
                    true
                },
            );
        }
        if !payload.is_empty() {
            framed.clear();
            record::encode_block(&mut framed, &payload);
            f.write_all(&framed).map_err(err)?;
            bytes += framed.len() as u64;
        }
        match last {
            Some(k) => from = Some(k),
            None => break,
        }
    }
    let footer = record::encode_footer(items);
    f.write_all(&footer).map_err(err)?;
    bytes += footer.len() as u64;
    f.sync_data().map_err(err)?;
    Ok((items, bytes))
}

/// Reads and verifies a checkpoint, handing each item to `f` in order.
/// Returns (version, items). Any damage, a missing footer, an item count
/// that does not match, or an item `f` refuses fails it.
pub(crate) fn read(
    storage: &dyn Storage,
    path: &Path,
    mut f: impl FnMut(&CkptItem<'_>) -> Result<(), ItemRefused>,
) -> Result<(u64, u64), CheckpointError> {
    let mut r = storage
        .open_read(path)
        .map_err(IoError::doing("cannot open"))?;
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            CheckpointError::Truncated
        } else {
            CheckpointError::Io(IoError::new("read error", e))
        }
    };
    let mut header = [0u8; record::HEADER_BYTES];
    r.read_exact(&mut header).map_err(io)?;
    let (version, _created) =
        record::decode_header(record::CKPT_MAGIC, &header).map_err(CheckpointError::Header)?;
    let mut items = 0u64;
    let mut frame = Vec::new();
    let mut offset = record::HEADER_BYTES as u64;
    loop {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(io)?;
        let word = u32::from_le_bytes(len);
        if record::is_footer(word) {
            let mut footer = [0u8; record::FOOTER_BYTES];
            footer[..4].copy_from_slice(&len);
            r.read_exact(&mut footer[4..]).map_err(io)?;
            let count = record::decode_footer(&footer)
                .map_err(|damage| CheckpointError::Footer { offset, damage })?;
            if count != items {
                return Err(CheckpointError::ItemCount {
                    footer: count,
                    blocks: items,
                });
            }
            let mut rest = [0u8; 1];
            if r.read(&mut rest).map_err(io)? != 0 {
                return Err(CheckpointError::TrailingBytes);
            }
            return Ok((version, items));
        }
        let block = |damage| CheckpointError::Block { offset, damage };
        if word as usize > record::MAX_BODY_BYTES {
            return Err(block(record::Damage::Corrupt(format!("length {word}"))));
        }
        frame.clear();
        frame.extend_from_slice(&len);
        frame.resize(record::FRAME_BYTES + word as usize, 0);
        r.read_exact(&mut frame[4..]).map_err(io)?;
        let payload = record::decode_frame(&frame).map_err(block)?;
        let mut at = 0;
        while at < payload.len() {
            let (it, next) = record::decode_ckpt_item(payload, at).map_err(block)?;
            f(&it).map_err(|refused| CheckpointError::Item {
                index: items,
                refused,
            })?;
            items += 1;
            at = next;
        }
        offset += frame.len() as u64;
    }
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

/// Keeps the `keep` newest checkpoints, removes older ones and unfinished
/// `.tmp` files. Returns the oldest kept version (the WAL must reach back
/// to it so recovery can fall back to it).
pub(crate) fn retain(storage: &dyn Storage, dir: &Path, keep: usize) -> std::io::Result<u64> {
    let all = list(storage, dir)?;
    let mut removed = false;
    for (_, path) in all.iter().skip(keep) {
        storage.remove(path)?;
        removed = true;
    }
    for name in storage.list(dir)? {
        if name.starts_with("ckpt-") && name.ends_with(".tmp") {
            storage.remove(&dir.join(name))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir)?;
    }
    Ok(all.iter().take(keep).next_back().map_or(0, |c| c.0))
}
