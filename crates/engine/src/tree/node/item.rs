//! Item encoding: leaf items (sorted and log block) and interior items.
//!
//! A log item has a fixed header: flags (1), key length (2), value length
//! (4), version (8), then its back pointer (4) and order hint (1); an
//! append fills the version in after encoding the rest. A sorted-block
//! item's header is sized to what it holds (docs/design.md, "Item
//! encoding"): with `ITEM_SHORT_LENS` the key and value lengths take one
//! byte each, and with `ITEM_VERSION32` the version takes four bytes. A
//! sorted item whose version is filled in after it is built (the write
//! that a merge or split publishes) is encoded with version 0 and so with
//! the eight-byte field. The expiry, client flags, key and value follow,
//! as in a log item.

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

/// Sorted-item flag: the key and value lengths take one byte each (a key
/// and an inline value of at most 255 bytes), not two and four. Never set
/// on a log item.
pub(crate) const ITEM_SHORT_LENS: u8 = 64;
/// Sorted-item flag: the version takes four bytes (it is in `1..2^32`),
/// not eight. Never set on a log item.
pub(crate) const ITEM_VERSION32: u8 = 128;

/// Offset and width of the version field of a sorted-block item with
/// these flags.
#[inline(always)]
pub(crate) fn sorted_version_field(flags: u8) -> (usize, usize) {
    let at = if flags & ITEM_SHORT_LENS != 0 { 3 } else { 7 };
    (at, if flags & ITEM_VERSION32 != 0 { 4 } else { 8 })
}

/// Whether a sorted item takes the short lengths and the four-byte version.
#[inline(always)]
fn compact(key_len: usize, value_len: usize, external: bool, version: u64) -> (bool, bool) {
    (
        key_len <= 255 && value_len <= 255 && !external,
        version != 0 && version <= u64::from(u32::MAX),
    )
}

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

/// Encoded length of a leaf item. `value_len` is the value's length and
/// `external` says it is stored out of line (as an 8-byte address);
/// `version` matters only to sorted items (0: filled in later).
pub(crate) fn item_len(
    key_len: usize,
    value_len: usize,
    external: bool,
    version: u64,
    ttl: bool,
    cflags: bool,
    log: bool,
) -> usize {
    let head = if log {
        ITEM_HEADER_BYTES + LOG_EXTRA_BYTES
    } else {
        let (short, v32) = compact(key_len, value_len, external, version);
        1 + if short { 2 } else { 6 } + if v32 { 4 } else { 8 }
    };
    head + if ttl { TTL_BYTES } else { 0 }
        + if cflags { CFLAGS_BYTES } else { 0 }
        + key_len
        + if external { 8 } else { value_len }
}

/// The length the log item at `offset` takes once a merge moves it into a
/// sorted block (`LeafWriter::push_log_item`).
pub(crate) fn log_item_sorted_len(buf: &[u8], offset: usize) -> usize {
    let flags = buf[offset];
    item_len(
        rd_u16(buf, offset + 1) as usize,
        rd_u32(buf, offset + 3) as usize,
        flags & ITEM_EXTERNAL != 0,
        rd_u64(buf, offset + 7),
        flags & ITEM_TTL != 0,
        flags & ITEM_CFLAGS != 0,
        false,
    )
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
    let (flags, klen, key_from, vlen) = item_fields(buf, offset, log);
    let (vat, vwidth) = sorted_version_field(flags);
    let version = if vwidth == 4 {
        u64::from(rd_u32(buf, offset + vat))
    } else {
        rd_u64(buf, offset + vat)
    };
    let mut at = offset + key_from
        - if flags & ITEM_CFLAGS != 0 {
            CFLAGS_BYTES
        } else {
            0
        };
    let expiry = if flags & ITEM_TTL != 0 {
        rd_u64(buf, at - TTL_BYTES)
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
        flags: flags & !(ITEM_SHORT_LENS | ITEM_VERSION32),
        key,
        value,
        version,
        expiry,
        cflags,
        len: (at - offset) as u32,
        raw: if log { &[] } else { &buf[offset..at] },
    }
}

/// Flags, key length, offset of the key from the item's start, and value
/// length (its length, even when it is stored out of line) of the leaf
/// item at `offset`: its fixed fields, in one read. A log item never has
/// the compact flags set, so only they choose the layout.
#[inline(always)]
fn item_fields(buf: &[u8], offset: usize, log: bool) -> (u8, usize, usize, usize) {
    // The shortest header (flags, two one-byte lengths, four-byte
    // version) is 7 bytes, so these are always the item's own bytes.
    let head: &[u8; 7] = buf[offset..offset + 7].try_into().expect("7 bytes");
    let flags = head[0];
    let (klen, vlen) = if flags & ITEM_SHORT_LENS != 0 {
        (head[1] as usize, head[2] as usize)
    } else {
        (
            u16::from_le_bytes([head[1], head[2]]) as usize,
            u32::from_le_bytes([head[3], head[4], head[5], head[6]]) as usize,
        )
    };
    let key_from = KEY_FROM[flags as usize] as usize + if log { LOG_EXTRA_BYTES } else { 0 };
    (flags, klen, key_from, vlen)
}

/// Bytes from a leaf item's start to its key, by flags byte, less a log
/// item's back pointer and hint: one load in place of four flag tests on
/// the scan's hot path.
static KEY_FROM: [u8; 256] = key_from_table();

const fn key_from_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut f = 0;
    while f < 256 {
        let flags = f as u8;
        let lens = if flags & ITEM_SHORT_LENS != 0 { 3 } else { 7 };
        let version = if flags & ITEM_VERSION32 != 0 { 4 } else { 8 };
        let ttl = if flags & ITEM_TTL != 0 { TTL_BYTES } else { 0 };
        let cflags = if flags & ITEM_CFLAGS != 0 {
            CFLAGS_BYTES
        } else {
            0
        };
        table[f] = (lens + version + ttl + cflags) as u8;
        f += 1;
    }
    table
}

/// Flags, key length, offset of the key and stored value length of the
/// leaf item at `offset` (an out-of-line value stores its 8-byte address).
#[inline(always)]
fn item_head(buf: &[u8], offset: usize, log: bool) -> (u8, usize, usize, usize) {
    let (flags, klen, key_from, vlen) = item_fields(buf, offset, log);
    let stored = if flags & ITEM_EXTERNAL != 0 { 8 } else { vlen };
    (flags, klen, key_from, stored)
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
    let external = matches!(value, ValueRef::External(..));
    let (short, v32) = match log {
        Some(_) => (false, false),
        None => compact(key.len(), value.len(), external, version),
    };
    let flags = (flags
        & !(ITEM_TTL | ITEM_EXTERNAL | ITEM_CFLAGS | ITEM_SHORT_LENS | ITEM_VERSION32))
        | if expiry != 0 { ITEM_TTL } else { 0 }
        | if cflags != 0 { ITEM_CFLAGS } else { 0 }
        | if external { ITEM_EXTERNAL } else { 0 }
        | if short { ITEM_SHORT_LENS } else { 0 }
        | if v32 { ITEM_VERSION32 } else { 0 };
    out[0] = flags;
    let mut at = if short {
        out[1] = key.len() as u8;
        out[2] = value.len() as u8;
        3
    } else {
        out[1..3].copy_from_slice(&(key.len() as u16).to_le_bytes());
        out[3..7].copy_from_slice(&(value.len() as u32).to_le_bytes());
        7
    };
    if v32 {
        out[at..at + 4].copy_from_slice(&(version as u32).to_le_bytes());
        at += 4;
    } else {
        out[at..at + 8].copy_from_slice(&version.to_le_bytes());
        at += 8;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field comes back as written, at the lengths' and version's
    /// width boundaries, and `item_len` is the encoded length: a width off
    /// by one (a 256-byte key in one byte, 2^32 in four) fails here.
    #[test]
    fn sorted_items_round_trip_at_the_width_boundaries() {
        let big = vec![b'v'; 300];
        let ext = [0u8; 1];
        for klen in [1usize, 255, 256, 460] {
            let key = vec![b'k'; klen];
            for (value, vlen_case) in [
                (ValueRef::Inline(&big[..0]), 0),
                (ValueRef::Inline(&big[..255]), 1),
                (ValueRef::Inline(&big[..256]), 2),
                (ValueRef::External(ext.as_ptr(), 100_000), 3),
            ] {
                for version in [0u64, 1, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX] {
                    for (expiry, cflags) in [(0u64, 0u32), (1_700_000_000_000, 7)] {
                        let external = vlen_case == 3;
                        let len = item_len(
                            klen,
                            value.len(),
                            external,
                            version,
                            expiry != 0,
                            cflags != 0,
                            false,
                        );
                        let mut out = vec![0xee; len + 3];
                        let n =
                            encode_item(&mut out, 0, &key, value, version, expiry, cflags, None);
                        assert_eq!(n, len, "{klen} {vlen_case} {version}");
                        let it = decode_item(&out, 0, false);
                        assert_eq!(it.len as usize, len);
                        assert_eq!(it.key, &key[..]);
                        assert_eq!(it.value.len(), value.len());
                        assert_eq!(it.version, version);
                        assert_eq!((it.expiry, it.cflags), (expiry, cflags));
                        assert_eq!(it.flags & (ITEM_SHORT_LENS | ITEM_VERSION32), 0);
                        assert_eq!(sorted_item_len(&out, 0).0, len);
                        assert_eq!(leaf_item_key(&out, 0, false), (&key[..], len));
                        let short = klen <= 255 && value.len() <= 255 && !external;
                        assert_eq!(out[0] & ITEM_SHORT_LENS != 0, short);
                        let v32 = version != 0 && version <= u32::MAX as u64;
                        assert_eq!(out[0] & ITEM_VERSION32 != 0, v32);
                        assert_eq!(
                            len,
                            1 + if short { 2 } else { 6 }
                                + if v32 { 4 } else { 8 }
                                + if expiry != 0 { 8 } else { 0 }
                                + if cflags != 0 { 4 } else { 0 }
                                + klen
                                + if external { 8 } else { value.len() }
                        );
                    }
                }
            }
        }
    }

    /// A version filled in after encoding (a merge's written item) lands
    /// where `sorted_version_field` says; a log item keeps the fixed
    /// header, and `log_item_sorted_len` is its length once encoded sorted.
    #[test]
    fn version_field_and_log_items() {
        let mut out = vec![0u8; 64];
        let len = encode_item(&mut out, 0, b"key", ValueRef::Inline(b"val"), 0, 0, 0, None);
        let (at, width) = sorted_version_field(out[0]);
        assert_eq!(width, 8);
        out[at..at + 8].copy_from_slice(&77u64.to_le_bytes());
        assert_eq!(decode_item(&out, 0, false).version, 77);
        assert_eq!(decode_item(&out, 0, false).len as usize, len);

        let mut log = vec![0u8; 64];
        let n = encode_item(
            &mut log,
            0,
            b"key",
            ValueRef::Inline(b"val"),
            0,
            9,
            0,
            Some((5, 1)),
        );
        assert_eq!(n, ITEM_HEADER_BYTES + LOG_EXTRA_BYTES + TTL_BYTES + 6);
        assert_eq!(log[0] & (ITEM_SHORT_LENS | ITEM_VERSION32), 0);
        log[7..15].copy_from_slice(&12u64.to_le_bytes());
        let it = decode_item(&log, 0, true);
        assert_eq!((it.version, it.expiry, it.len as usize), (12, 9, n));
        let mut sorted = vec![0u8; 64];
        let m = encode_item(
            &mut sorted,
            0,
            it.key,
            it.value,
            it.version,
            it.expiry,
            0,
            None,
        );
        assert_eq!(log_item_sorted_len(&log, 0), m);
        assert_eq!(m, 1 + 2 + 4 + 8 + 6);
    }
}
