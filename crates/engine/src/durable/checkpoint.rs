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

use super::deletes::DeleteLog;
use super::error::{CheckpointError, IoError, ItemRefused};
use super::file::Storage;
use super::record::{self, CkptItem};
use crate::tree::Tree;
use crate::types::Now;

/// Target payload bytes per block of a checkpoint, delta run or merged
/// base.
const BLOCK_BYTES: usize = 64 << 10;

/// Which kind of file a checkpoint wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointKind {
    /// Every live item: a new base.
    Full,
    /// A delta run: what changed since the checkpoint at `from`.
    Delta { from: u64 },
    /// A base that background compaction merged from the base and `runs`
    /// delta runs reaching `version`.
    Merged { runs: usize },
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
    pub kind: CheckpointKind,
    /// The snapshot version: the checkpoint holds exactly the writes `<=` it.
    pub version: u64,
    /// Items written (a delta run: entries).
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

/// A checkpoint-shaped file being written: header, checksummed blocks of
/// about `BLOCK_BYTES` of entries, and a footer with the number of
/// entries, then synced (a checkpoint, a delta run, a merged base).
/// Entries are gathered with `add` and written by `write_if_full` and
/// `finish`, so a writer can gather under an epoch pin and write after.
pub(crate) struct BlockFile {
    file: Box<dyn super::file::WritableFile>,
    what: String,
    /// Entries and bytes written.
    entries: u64,
    bytes: u64,
    /// The next block's entries, and how many.
    payload: Vec<u8>,
    gathered: u64,
    framed: Vec<u8>,
}

impl BlockFile {
    /// Creates `path` with a header of `magic` and fields `a`, `b`.
    pub(crate) fn create(
        storage: &dyn Storage,
        path: &Path,
        magic: &[u8; 8],
        a: u64,
        b: u64,
    ) -> Result<BlockFile, IoError> {
        let what = format!("writing {}", path.display());
        let mut file = storage.create(path).map_err(IoError::doing(what.clone()))?;
        let header = record::encode_header(magic, a, b);
        file.write_all(&header)
            .map_err(IoError::doing(what.clone()))?;
        Ok(BlockFile {
            file,
            what,
            entries: 0,
            bytes: header.len() as u64,
            payload: Vec::with_capacity(BLOCK_BYTES + 1024),
            gathered: 0,
            framed: Vec::with_capacity(BLOCK_BYTES + 1024),
        })
    }

    /// Gathers one entry, which `encode` appends.
    pub(crate) fn add(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.payload);
        self.gathered += 1;
    }

    /// Whether a block's worth is gathered.
    pub(crate) fn full(&self) -> bool {
        self.payload.len() >= BLOCK_BYTES
    }

    /// Writes what is gathered as a block once it is a block's worth.
    pub(crate) fn write_if_full(&mut self) -> Result<(), IoError> {
        if self.full() {
            self.write_block()
        } else {
            Ok(())
        }
    }

    fn write_block(&mut self) -> Result<(), IoError> {
        if self.payload.is_empty() {
            return Ok(());
        }
        self.framed.clear();
        record::encode_block(&mut self.framed, &self.payload);
        self.file
            .write_all(&self.framed)
            .map_err(IoError::doing(self.what.clone()))?;
        self.bytes += self.framed.len() as u64;
        self.entries += self.gathered;
        self.payload.clear();
        self.gathered = 0;
        Ok(())
    }

    /// Writes the rest, the footer, and syncs: (entries, bytes).
    pub(crate) fn finish(mut self) -> Result<(u64, u64), IoError> {
        self.write_block()?;
        let footer = record::encode_footer(self.entries);
        self.file
            .write_all(&footer)
            .and_then(|()| self.file.sync_data())
            .map_err(IoError::doing(self.what.clone()))?;
        Ok((self.entries, self.bytes + footer.len() as u64))
    }
}

/// Renames a finished `tmp` to `dir/name` and syncs the directory.
pub(crate) fn publish(
    storage: &dyn Storage,
    dir: &Path,
    tmp: &Path,
    name: &str,
) -> Result<(), IoError> {
    storage
        .rename(tmp, &dir.join(name))
        .and_then(|()| storage.sync_dir(dir))
        .map_err(IoError::doing(format!("publishing {name}")))
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

/// Reads a file `BlockFile` wrote with `magic`: verifies the header, hands
/// each block's payload and offset to `f` (which returns how many entries
/// it held), and checks the footer's count against their sum and that
/// nothing follows it. Returns the header's two fields and the count.
pub(crate) fn read_blocks(
    storage: &dyn Storage,
    path: &Path,
    magic: &[u8; 8],
    mut f: impl FnMut(&[u8], u64) -> Result<u64, CheckpointError>,
) -> Result<(u64, u64, u64), CheckpointError> {
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
    let (a, b) = record::decode_header(magic, &header).map_err(CheckpointError::Header)?;
    let mut entries = 0u64;
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
            if count != entries {
                return Err(CheckpointError::ItemCount {
                    footer: count,
                    blocks: entries,
                });
            }
            let mut rest = [0u8; 1];
            if r.read(&mut rest).map_err(io)? != 0 {
                return Err(CheckpointError::TrailingBytes);
            }
            return Ok((a, b, count));
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
        entries += f(payload, offset)?;
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
