//! The log block's directory (Honeycomb's LogBlock, as this layout keeps
//! it): one 6-byte entry per log item, in the line after the header.

use crate::config::{HEADER_BYTES, LOG_DIR_ENTRY_BYTES};

/// Order-hint bits of a log directory entry's `meta` byte; the rest are flags.
pub(crate) const LOG_META_HINT: u8 = 0x0f;
/// `meta` flag: the log item replaces a sorted item (`ITEM_REPLACES`).
pub(crate) const LOG_META_REPLACES: u8 = 0x10;
/// `meta` flag: an earlier log item has the same key (`ITEM_DUP`).
pub(crate) const LOG_META_DUP: u8 = 0x20;
/// `meta` flag: the log item is a delete marker.
pub(crate) const LOG_META_TOMBSTONE: u8 = 0x40;
/// `meta` flag: the log item holds its value out of line (`free` opens
/// only these log items).
pub(crate) const LOG_META_EXTERNAL: u8 = 0x80;

/// One log directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogDirEntry {
    /// Offset of the log item.
    pub at: u16,
    /// Its back pointer into the sorted block.
    pub bp: u16,
    /// `key_fp` of its key.
    pub fp: u8,
    /// Order hint (low bits) and `LOG_META_*` flags.
    pub meta: u8,
}

impl LogDirEntry {
    pub(crate) fn hint(&self) -> usize {
        (self.meta & LOG_META_HINT) as usize
    }

    pub(crate) fn encode(&self) -> [u8; LOG_DIR_ENTRY_BYTES] {
        let [a0, a1] = self.at.to_le_bytes();
        let [b0, b1] = self.bp.to_le_bytes();
        [a0, a1, b0, b1, self.fp, self.meta]
    }
}

/// Entry `i` of a leaf's log directory (`i` below the published count).
#[inline(always)]
pub(crate) fn log_dir_entry(buf: &[u8], i: usize) -> LogDirEntry {
    let at = HEADER_BYTES + i * LOG_DIR_ENTRY_BYTES;
    // The whole entry in one read (one bounds check).
    let e: &[u8; LOG_DIR_ENTRY_BYTES] = buf[at..at + LOG_DIR_ENTRY_BYTES]
        .try_into()
        .expect("entry bytes");
    LogDirEntry {
        at: u16::from_le_bytes([e[0], e[1]]),
        bp: u16::from_le_bytes([e[2], e[3]]),
        fp: e[4],
        meta: e[5],
    }
}

/// The key fingerprint of log directory entry `i` (the only byte a point
/// read needs from entries that do not match).
#[inline]
pub(crate) fn log_dir_fp(buf: &[u8], i: usize) -> u8 {
    buf[HEADER_BYTES + i * LOG_DIR_ENTRY_BYTES + 4]
}
