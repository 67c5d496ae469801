//! The block file format checkpoints, delta runs and merged bases share:
//! a header, checksummed blocks of entries, a footer with the number of
//! entries (frames in `record.rs`), written as `.tmp` and published by a
//! rename. Each kind of file only says what its entries are.
//!
//! It sits below `checkpoint.rs` and `delta.rs` rather than in the first:
//! a checkpoint writes delta runs, and a delta run is a block file, so
//! with the format in `checkpoint.rs` the two would import each other.

use std::io::Read;
use std::path::Path;

use super::error::{CheckpointError, IoError};
use super::file::{Storage, WritableFile};
use super::record;

/// Target payload bytes per block of a checkpoint, delta run or merged
/// base.
const BLOCK_BYTES: usize = 64 << 10;

/// A checkpoint-shaped file being written: header, checksummed blocks of
/// about `BLOCK_BYTES` of entries, and a footer with the number of
/// entries, then synced (a checkpoint, a delta run, a merged base).
/// Entries are gathered with `add` and written by `write_if_full` and
/// `finish`, so a writer can gather under an epoch pin and write after.
pub(crate) struct BlockFile {
    file: Box<dyn WritableFile>,
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

/// A block file's header, as `read_blocks` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Which of the accepted magics it carries (an index into them).
    pub magic: usize,
    /// Its two fields.
    pub a: u64,
    pub b: u64,
}

/// Reads a file `BlockFile` wrote with one of `magics`: verifies the
/// header, hands it and then each block's payload and offset to `f`
/// (which returns how many entries the block held), and checks the
/// footer's count against their sum and that nothing follows it. Returns
/// the header and the count.
pub(crate) fn read_blocks(
    storage: &dyn Storage,
    path: &Path,
    magics: &[&[u8; 8]],
    mut f: impl FnMut(&Header, &[u8], u64) -> Result<u64, CheckpointError>,
) -> Result<(Header, u64), CheckpointError> {
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
    // The first magic stands for all in the error when none matches.
    let magic = magics
        .iter()
        .position(|m| header.starts_with(&m[..]))
        .unwrap_or(0);
    let (a, b) = record::decode_header(magics[magic], &header).map_err(CheckpointError::Header)?;
    let header = Header { magic, a, b };
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
            return Ok((header, count));
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
        entries += f(&header, payload, offset)?;
        offset += frame.len() as u64;
    }
}
