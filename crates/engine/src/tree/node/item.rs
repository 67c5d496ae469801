//! Item encoding: leaf items (sorted and log block) and interior items.

use super::header::Lid;
use super::{rd_u16, rd_u32, rd_u64};
use crate::config::{CFLAGS_BYTES, ITEM_HEADER_BYTES, LOG_EXTRA_BYTES, TTL_BYTES};
use crate::types::{Item, ItemView, Now, Version};

/// Item flag: the value lives outside the node (the address of its
/// bytes, `node::value`).
pub(crate) const ITEM_EXTERNAL: u8 = 1;
/// Item flag: an expiry time (unix ms) follows the fixed header.
pub(crate) const ITEM_TTL: u8 = 2;
/// Item flag: a delete marker (log block only).
pub(crate) const ITEM_TOMBSTONE: u8 = 4;
/// Log item flag: the back pointer names a sorted item with the same key.
pub(crate) const ITEM_REPLACES: u8 = 8;
/// Log item flag: an earlier log item has the same key (and is not in the
/// sorted block); items with equal keys are adjacent in order-hint order.
pub(crate) const ITEM_DUP: u8 = 16;
/// Item flag: non-zero client flags (4 bytes) follow the expiry, if any.
/// Absent for most items, so they cost nothing when unused.
pub(crate) const ITEM_CFLAGS: u8 = 32;

/// A value as a node stores it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ValueRef<'a> {
    Inline(&'a [u8]),
    /// Address and length of an out-of-line value (`node::value`), which
    /// the buffer(s) holding the item reference.
    External(*const u8, usize),
}

impl<'a> ValueRef<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            ValueRef::Inline(v) => v.len(),
            ValueRef::External(_, n) => *n,
        }
    }

    /// The value's bytes. The returned slice lives as long as the buffer.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        match *self {
            ValueRef::Inline(v) => v,
            // SAFETY: an external pointer comes from `value::create` with
            // exactly this length; the buffer holding the item owns one
            // reference, so the allocation outlives the buffer, which
            // outlives `self` (invariant 3).
            ValueRef::External(p, n) => unsafe { std::slice::from_raw_parts(p, n) },
        }
    }

    /// An owned handle: zero-copy for external values.
    pub(crate) fn to_bytes(self) -> bytes::Bytes {
        match self {
            ValueRef::Inline(v) => bytes::Bytes::copy_from_slice(v),
            // SAFETY: as in `bytes`: the buffer holding the item references
            // the value and outlives `self`.
            ValueRef::External(p, n) => unsafe { super::value::to_bytes(p, n) },
        }
    }
}

/// A decoded leaf item (sorted or log block).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ItemRef<'a> {
    pub flags: u8,
    pub key: &'a [u8],
    pub value: ValueRef<'a>,
    pub version: u64,
    /// Unix ms; 0 = never.
    pub expiry: u64,
    /// Client flags (memcached); 0 = none.
    pub cflags: u32,
    /// Encoded length.
    pub len: u32,
    /// The encoded bytes of a sorted-block item (empty for log items): a
    /// merge copies them as they are.
    pub raw: &'a [u8],
}

impl<'a> ItemRef<'a> {
    pub(crate) fn is_tombstone(&self) -> bool {
        self.flags & ITEM_TOMBSTONE != 0
    }
    /// Live at `now_ms`: not a delete marker and not expired.
    pub(crate) fn is_live(&self, now: &Now) -> bool {
        !self.is_tombstone() && (self.expiry == 0 || self.expiry > now.ms())
    }

    /// The item as a read returns it (key and value copied, or for an
    /// out-of-line value, shared).
    #[inline]
    pub(crate) fn to_item(self) -> Item {
        Item {
            key: bytes::Bytes::copy_from_slice(self.key),
            value: self.value.to_bytes(),
            version: Version(self.version),
            expires_at_ms: (self.expiry != 0).then_some(self.expiry),
            flags: self.cflags,
        }
    }

    /// The item as a visitor sees it, borrowed from the buffer.
    #[inline]
    pub(crate) fn view(&self) -> ItemView<'a> {
        ItemView {
            key: self.key,
            value: self.value.bytes(),
            version: Version(self.version),
            expires_at_ms: (self.expiry != 0).then_some(self.expiry),
            flags: self.cflags,
        }
    }
}

/// Encoded length of a leaf item.
pub(crate) fn item_len(
    key_len: usize,
    value_stored_len: usize,
    ttl: bool,
    cflags: bool,
    log: bool,
) -> usize {
    ITEM_HEADER_BYTES
        + if log { LOG_EXTRA_BYTES } else { 0 }
        + if ttl { TTL_BYTES } else { 0 }
        + if cflags { CFLAGS_BYTES } else { 0 }
        + key_len
        + value_stored_len
}

/// Length and flags byte of the sorted-block item at `offset`, from its
/// fixed header alone (`leaf_item_key` without the key slice).
#[inline(always)]
pub(crate) fn sorted_item_len(buf: &[u8], offset: usize) -> (usize, u8) {
    let (flags, klen, key_from, value_len) = item_head(buf, offset, false);
    (key_from + klen + value_len, flags)
}

/// Decodes the leaf item at `offset` of `buf` (the published bytes of a node).
#[inline(always)]
pub(crate) fn decode_item(buf: &[u8], offset: usize, log: bool) -> ItemRef<'_> {
    let flags = buf[offset];
    let klen = rd_u16(buf, offset + 1) as usize;
    let vlen = rd_u32(buf, offset + 3) as usize;
    let version = rd_u64(buf, offset + 7);
    let mut at = offset + ITEM_HEADER_BYTES;
    if log {
        at += LOG_EXTRA_BYTES;
    }
    let expiry = if flags & ITEM_TTL != 0 {
        let e = rd_u64(buf, at);
        at += TTL_BYTES;
        e
    } else {
        0
    };
    let cflags = if flags & ITEM_CFLAGS != 0 {
        let c = rd_u32(buf, at);
        at += CFLAGS_BYTES;
        c
    } else {
        0
    };
    let key = &buf[at..at + klen];
    at += klen;
    let value = if flags & ITEM_EXTERNAL != 0 {
        let p = rd_u64(buf, at) as usize as *const u8;
        at += 8;
        ValueRef::External(p, vlen)
    } else {
        let v = &buf[at..at + vlen];
        at += vlen;
        ValueRef::Inline(v)
    };
    ItemRef {
        flags,
        key,
        value,
        version,
        expiry,
        cflags,
        len: (at - offset) as u32,
        raw: if log { &[] } else { &buf[offset..at] },
    }
}

/// Flags, key length, offset of the key from the item's start, and stored
/// value length of the leaf item at `offset`: its fixed fields, in one read.
#[inline(always)]
fn item_head(buf: &[u8], offset: usize, log: bool) -> (u8, usize, usize, usize) {
    let head: &[u8; 7] = buf[offset..offset + 7].try_into().expect("7 bytes");
    let flags = head[0];
    let klen = u16::from_le_bytes([head[1], head[2]]) as usize;
    let key_from = ITEM_HEADER_BYTES
        + if log { LOG_EXTRA_BYTES } else { 0 }
        + if flags & ITEM_TTL != 0 { TTL_BYTES } else { 0 }
        + if flags & ITEM_CFLAGS != 0 {
            CFLAGS_BYTES
        } else {
            0
        };
    let value_len = if flags & ITEM_EXTERNAL != 0 {
        8
    } else {
        u32::from_le_bytes([head[3], head[4], head[5], head[6]]) as usize
    };
    (flags, klen, key_from, value_len)
}

/// The key of the leaf item at `offset` and the item's encoded length,
/// reading only the fixed header (the hot path of segment and log scans).
#[inline(always)]
pub(crate) fn leaf_item_key(buf: &[u8], offset: usize, log: bool) -> (&[u8], usize) {
    let (_, klen, key_from, value_len) = item_head(buf, offset, log);
    let key_at = offset + key_from;
    (&buf[key_at..key_at + klen], key_from + klen + value_len)
}

/// Encodes a leaf item into `out` (exactly `item_len` bytes). An external
/// value's pointer is copied as is: the caller accounts for the strong count.
#[expect(
    clippy::too_many_arguments,
    reason = "the fields of one item, written in one place"
)]
pub(crate) fn encode_item(
    out: &mut [u8],
    flags: u8,
    key: &[u8],
    value: ValueRef<'_>,
    version: u64,
    expiry: u64,
    cflags: u32,
    log: Option<(u32, u8)>,
) -> usize {
    let flags = (flags & !(ITEM_TTL | ITEM_EXTERNAL | ITEM_CFLAGS))
        | if expiry != 0 { ITEM_TTL } else { 0 }
        | if cflags != 0 { ITEM_CFLAGS } else { 0 }
        | if matches!(value, ValueRef::External(..)) {
            ITEM_EXTERNAL
        } else {
            0
        };
    out[0] = flags;
    out[1..3].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[3..7].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[7..15].copy_from_slice(&version.to_le_bytes());
    let mut at = ITEM_HEADER_BYTES;
    if let Some((bp, hint)) = log {
        out[at..at + 4].copy_from_slice(&bp.to_le_bytes());
        out[at + 4] = hint;
        at += LOG_EXTRA_BYTES;
    }
    if expiry != 0 {
        out[at..at + 8].copy_from_slice(&expiry.to_le_bytes());
        at += TTL_BYTES;
    }
    if cflags != 0 {
        out[at..at + 4].copy_from_slice(&cflags.to_le_bytes());
        at += CFLAGS_BYTES;
    }
    out[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    match value {
        ValueRef::Inline(v) => {
            out[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        }
        ValueRef::External(p, _) => {
            out[at..at + 8].copy_from_slice(&(p as usize as u64).to_le_bytes());
            at += 8;
        }
    }
    at
}

/// Interior item: key length, child LID, key.
pub(crate) const INTERIOR_ITEM_FIXED: usize = 10;

#[inline(always)]
pub(crate) fn decode_interior(buf: &[u8], offset: usize) -> (&[u8], Lid, usize) {
    let head: &[u8; INTERIOR_ITEM_FIXED] = buf[offset..offset + INTERIOR_ITEM_FIXED]
        .try_into()
        .expect("fixed fields");
    let klen = u16::from_le_bytes([head[0], head[1]]) as usize;
    let child = u64::from_le_bytes(head[2..].try_into().expect("8 bytes"));
    let key = &buf[offset + INTERIOR_ITEM_FIXED..offset + INTERIOR_ITEM_FIXED + klen];
    (key, Lid(child), INTERIOR_ITEM_FIXED + klen)
}
