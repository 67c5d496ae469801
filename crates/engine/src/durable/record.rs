//! Byte formats of the log and of checkpoints (docs/design.md, Durability).
//! Integers are little-endian; every checksum is CRC-32 (crc32fast).
//!
//! ```text
//! WAL segment  wal-<seq, 20 digits>.log
//!   header (32 B)  "CKVWAL01" | u64 seq | u64 start_version | u32 0 | u32 crc(bytes 0..28)
//!   records        u32 body_len | u32 crc(body_len bytes ++ body) | body
//!   body           u8 kind | u64 version | ...
//!     PUT    (1)   u64 expiry_ms | u32 client_flags | u16 key_len | u32 value_len | key | value
//!     DELETE (2)   u16 key_len | key
//!     CLEAR  (3)   (nothing): every item with a smaller version is gone
//!     GROUP_BEGIN (4)  (nothing): an atomic group (MSET) starts
//!     GROUP_END   (5)  u64 begin: the group whose GROUP_BEGIN has version `begin`
//!                  is whole; a group with no end was never acknowledged, and
//!                  recovery cuts the log at its GROUP_BEGIN
//!
//! Checkpoint   ckpt-<version, 20 digits>.ckpt   (written as .tmp, renamed when complete)
//!   header (32 B)  "CKVCKP01" | u64 version | u64 created_unix_ms | u32 0 | u32 crc(bytes 0..28)
//!   blocks         u32 len (< 0xFFFF_FFFF) | u32 crc(len bytes ++ payload) | payload
//!   payload        items, ascending keys:
//!                  u64 version | u64 expiry_ms | u32 client_flags | u16 key_len | u32 value_len | key | value
//!   footer (24 B)  u32 0xFFFF_FFFF | "CKVEND01" | u64 items | u32 crc(the 20 bytes before it)
//!
//! Advancing checkpoint: as above with "CKVCKP02" in the header. It was
//! written chunk by chunk, each chunk at the read version when it began,
//! and `version` is the first chunk's: an item is its key's state at its
//! chunk's version, at or above `version`, and the log from `version` on
//! holds every write after it (so items may be newer than `version`).
//! ```

use super::frame::{self, FrameError, Framing};

/// Bytes of a segment or checkpoint header.
pub(crate) const HEADER_BYTES: usize = 32;
pub(crate) const WAL_MAGIC: &[u8; 8] = b"CKVWAL01";
pub(crate) const CKPT_MAGIC: &[u8; 8] = b"CKVCKP01";
/// A checkpoint written at advancing versions (see the format above).
pub(crate) const CKPT_ADVANCING_MAGIC: &[u8; 8] = b"CKVCKP02";
const END_MAGIC: &[u8; 8] = b"CKVEND01";
/// Bytes of a record's or block's frame (length and checksum).
pub(crate) const FRAME_BYTES: usize = frame::HEADER_BYTES;
/// Bytes of a checkpoint footer.
pub(crate) const FOOTER_BYTES: usize = 24;
/// Largest record or block body accepted: anything larger is corruption.
pub(crate) const MAX_BODY_BYTES: usize = 1 << 31;
/// The framing of log records and checkpoint blocks: the checksum covers
/// the length too.
pub(crate) const FRAMING: Framing = Framing {
    checksum_covers_length: true,
    max_body: MAX_BODY_BYTES,
};

const PUT: u8 = 1;
const DELETE: u8 = 2;
const CLEAR: u8 = 3;
const GROUP_BEGIN: u8 = 4;
const GROUP_END: u8 = 5;

/// One log record, borrowed from the bytes it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Put {
        version: u64,
        key: &'a [u8],
        value: &'a [u8],
        expiry: u64,
        client_flags: u32,
    },
    Delete {
        version: u64,
        key: &'a [u8],
    },
    Clear {
        version: u64,
    },
    /// The writes of an atomic group follow (interleaved with others').
    GroupBegin {
        version: u64,
    },
    /// The group begun at version `begin` is complete.
    GroupEnd {
        version: u64,
        begin: u64,
    },
}

impl Record<'_> {
    pub(crate) fn version(&self) -> u64 {
        match *self {
            Record::Put { version, .. }
            | Record::Delete { version, .. }
            | Record::Clear { version }
            | Record::GroupBegin { version }
            | Record::GroupEnd { version, .. } => version,
        }
    }
}

/// Appends `rec`, framed, to `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, rec: &Record<'_>) {
    let start = FRAMING.begin(out);
    match *rec {
        Record::Put {
            version,
            key,
            value,
            expiry,
            client_flags,
        } => {
            out.push(PUT);
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&expiry.to_le_bytes());
            out.extend_from_slice(&client_flags.to_le_bytes());
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Record::Delete { version, key } => {
            out.push(DELETE);
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
        }
        Record::Clear { version } => {
            out.push(CLEAR);
            out.extend_from_slice(&version.to_le_bytes());
        }
        Record::GroupBegin { version } => {
            out.push(GROUP_BEGIN);
            out.extend_from_slice(&version.to_le_bytes());
        }
        Record::GroupEnd { version, begin } => {
            out.push(GROUP_END);
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&begin.to_le_bytes());
        }
    }
    FRAMING.finish(out, start);
}

/// Why bytes of a log segment or checkpoint could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The bytes end inside a frame: a torn write.
    Torn,
    /// The checksum or the contents are wrong.
    Corrupt(String),
    /// An atomic group begun at this version never ended: its writes (and
    /// every later one) were never acknowledged.
    Unfinished(u64),
    /// A whole record (its checksum holds) of a kind this version does not
    /// know: written by a newer combkv, not damaged. Recovery refuses it
    /// rather than cut the log there and drop acknowledged writes.
    UnknownKind(u8),
}

impl std::error::Error for Damage {}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Torn => write!(f, "torn (ends inside a record)"),
            Damage::Corrupt(why) => write!(f, "corrupt ({why})"),
            Damage::Unfinished(begin) => write!(
                f,
                "an atomic group begun at version {begin} never ended (not acknowledged)"
            ),
            Damage::UnknownKind(k) => write!(
                f,
                "a record of kind {k}, unknown to this version (written by a newer combkv?)"
            ),
        }
    }
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Checks a frame at the start of `buf`: Ok(body) with its length checked
/// against `buf` and its checksum verified.
pub(crate) fn decode_frame(buf: &[u8]) -> Result<&[u8], Damage> {
    FRAMING.decode(buf).map_err(|e| match e {
        FrameError::TornHeader | FrameError::TornBody => Damage::Torn,
        FrameError::TooLong(len) => Damage::Corrupt(format!("length {len}")),
        FrameError::ChecksumMismatch => Damage::Corrupt("checksum mismatch".into()),
    })
}

/// Decodes the record at the start of `buf`; Ok((record, bytes used)).
pub(crate) fn decode_record(buf: &[u8]) -> Result<(Record<'_>, usize), Damage> {
    let body = decode_frame(buf)?;
    let used = FRAME_BYTES + body.len();
    let bad = |why: &str| Damage::Corrupt(why.to_string());
    if body.len() < 9 {
        return Err(bad("short record"));
    }
    let version = u64_at(body, 1);
    if version == 0 {
        return Err(bad("version 0"));
    }
    let rec = match body[0] {
        PUT => {
            if body.len() < 9 + 18 {
                return Err(bad("short put"));
            }
            let expiry = u64_at(body, 9);
            let client_flags = u32_at(body, 17);
            let klen = u16_at(body, 21) as usize;
            let vlen = u32_at(body, 23) as usize;
            if body.len() != 27 + klen + vlen {
                return Err(bad("put lengths"));
            }
            Record::Put {
                version,
                key: &body[27..27 + klen],
                value: &body[27 + klen..],
                expiry,
                client_flags,
            }
        }
        DELETE => {
            if body.len() < 11 || body.len() != 11 + u16_at(body, 9) as usize {
                return Err(bad("delete lengths"));
            }
            Record::Delete {
                version,
                key: &body[11..],
            }
        }
        CLEAR if body.len() == 9 => Record::Clear { version },
        GROUP_BEGIN if body.len() == 9 => Record::GroupBegin { version },
        GROUP_END if body.len() == 17 => {
            let begin = u64_at(body, 9);
            if begin == 0 || begin >= version {
                return Err(bad("group end before its begin"));
            }
            Record::GroupEnd { version, begin }
        }
        k @ (CLEAR | GROUP_BEGIN | GROUP_END) => {
            return Err(bad(&format!("kind {k} lengths")));
        }
        k => return Err(Damage::UnknownKind(k)),
    };
    Ok((rec, used))
}

/// Versions at or above this are not plausible: a store taking a billion
/// versions a second would need 146 years to reach one. A record claiming
/// one is not counted by `probe_record`, so bytes that only look like a
/// record cannot push the clock to the end of its range.
pub(crate) const PLAUSIBLE_VERSIONS: u64 = 1 << 62;

/// A well-formed record at the start of `buf`, if there is one: the frame
/// fits in `buf`, the kind is known, the kind's lengths agree with the
/// frame's, the version is plausible, and the checksum holds. The checks
/// before the checksum are cheap, so a resync scan can call it at every
/// offset of damaged bytes (`cut::salvage`) without hashing most of them.
pub(crate) fn probe_record(buf: &[u8]) -> Option<(Record<'_>, usize)> {
    if buf.len() < FRAME_BYTES + 9 {
        return None;
    }
    let len = u32_at(buf, 0) as usize;
    let body = buf.get(FRAME_BYTES..FRAME_BYTES.checked_add(len)?)?;
    if body.len() < 9 {
        return None;
    }
    let fits = match body[0] {
        PUT => {
            body.len() >= 27
                && body.len() == 27 + u16_at(body, 21) as usize + u32_at(body, 23) as usize
        }
        DELETE => body.len() >= 11 && body.len() == 11 + u16_at(body, 9) as usize,
        CLEAR | GROUP_BEGIN => body.len() == 9,
        GROUP_END => body.len() == 17,
        _ => false,
    };
    let version = u64_at(body, 1);
    if !fits || version == 0 || version >= PLAUSIBLE_VERSIONS {
        return None;
    }
    decode_record(buf).ok()
}

/// The version field of a record at the start of `buf` whose frame or
/// checksum does not hold, if its bytes are there and it is plausible: the
/// best guess at what a damaged record carried.
pub(crate) fn unchecked_version(buf: &[u8]) -> Option<u64> {
    let v = u64_at(buf.get(..FRAME_BYTES + 9)?, FRAME_BYTES + 1);
    (v > 0 && v < PLAUSIBLE_VERSIONS).then_some(v)
}

/// A 32-byte header: magic, two u64 fields, checksum.
pub(crate) fn encode_header(magic: &[u8; 8], a: u64, b: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(magic);
    h[8..16].copy_from_slice(&a.to_le_bytes());
    h[16..24].copy_from_slice(&b.to_le_bytes());
    let crc = crc32fast::hash(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes a header written by `encode_header` with `magic`: (a, b).
pub(crate) fn decode_header(magic: &[u8; 8], h: &[u8]) -> Result<(u64, u64), Damage> {
    if h.len() < HEADER_BYTES {
        return Err(Damage::Torn);
    }
    if &h[0..8] != magic {
        return Err(Damage::Corrupt("bad magic".into()));
    }
    if crc32fast::hash(&h[..28]) != u32_at(h, 28) {
        return Err(Damage::Corrupt("header checksum mismatch".into()));
    }
    Ok((u64_at(h, 8), u64_at(h, 16)))
}

/// One checkpoint item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CkptItem<'a> {
    pub version: u64,
    pub expiry: u64,
    pub client_flags: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Bytes of an item in a checkpoint block, without key and value.
pub(crate) const CKPT_ITEM_FIXED: usize = 26;

pub(crate) fn encode_ckpt_item(out: &mut Vec<u8>, it: &CkptItem<'_>) {
    out.extend_from_slice(&it.version.to_le_bytes());
    out.extend_from_slice(&it.expiry.to_le_bytes());
    out.extend_from_slice(&it.client_flags.to_le_bytes());
    out.extend_from_slice(&(it.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(it.value.len() as u32).to_le_bytes());
    out.extend_from_slice(it.key);
    out.extend_from_slice(it.value);
}

/// Decodes the item at `at` of a block payload; Ok((item, next offset)).
pub(crate) fn decode_ckpt_item(p: &[u8], at: usize) -> Result<(CkptItem<'_>, usize), Damage> {
    let bad = || Damage::Corrupt("item lengths".into());
    let fixed = p.get(at..at + CKPT_ITEM_FIXED).ok_or_else(bad)?;
    let klen = u16_at(fixed, 20) as usize;
    let vlen = u32_at(fixed, 22) as usize;
    let kstart = at + CKPT_ITEM_FIXED;
    let end = kstart + klen + vlen;
    if end > p.len() {
        return Err(bad());
    }
    Ok((
        CkptItem {
            version: u64_at(fixed, 0),
            expiry: u64_at(fixed, 8),
            client_flags: u32_at(fixed, 16),
            key: &p[kstart..kstart + klen],
            value: &p[kstart + klen..end],
        },
        end,
    ))
}

/// Frames a block payload: length, checksum, payload.
pub(crate) fn encode_block(out: &mut Vec<u8>, payload: &[u8]) {
    FRAMING.encode(out, payload);
}

/// The footer that ends a complete checkpoint.
pub(crate) fn encode_footer(items: u64) -> [u8; FOOTER_BYTES] {
    let mut f = [0u8; FOOTER_BYTES];
    f[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    f[4..12].copy_from_slice(END_MAGIC);
    f[12..20].copy_from_slice(&items.to_le_bytes());
    let crc = crc32fast::hash(&f[..20]);
    f[20..24].copy_from_slice(&crc.to_le_bytes());
    f
}

/// True if a frame starting with `len_word` is the footer.
pub(crate) fn is_footer(len_word: u32) -> bool {
    len_word == u32::MAX
}

/// The item count of a footer.
pub(crate) fn decode_footer(f: &[u8]) -> Result<u64, Damage> {
    if f.len() < FOOTER_BYTES {
        return Err(Damage::Torn);
    }
    if &f[4..12] != END_MAGIC || crc32fast::hash(&f[..20]) != u32_at(f, 20) {
        return Err(Damage::Corrupt("bad footer".into()));
    }
    Ok(u64_at(f, 12))
}

/// `wal-<seq>.log`
pub(crate) fn segment_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

/// `ckpt-<version>.ckpt`
pub(crate) fn checkpoint_name(version: u64) -> String {
    format!("ckpt-{version:020}.ckpt")
}

/// The number in a `wal-` or `ckpt-` file name with the given suffix.
pub(crate) fn parse_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record<'static>> {
        vec![
            Record::Put {
                version: 7,
                key: b"key",
                value: b"value",
                expiry: 1_700_000_000_000,
                client_flags: 0xdead_beef,
            },
            Record::Put {
                version: 8,
                key: b"k",
                value: b"",
                expiry: 0,
                client_flags: 0,
            },
            Record::Delete {
                version: 9,
                key: b"gone",
            },
            Record::Clear { version: 10 },
            Record::GroupBegin { version: 11 },
            Record::GroupEnd {
                version: 12,
                begin: 11,
            },
        ]
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The record and block framing, byte for byte: length (u32 LE), then
    /// CRC-32 of the length's bytes and the body (u32 LE), then the body.
    /// Logs and checkpoints on disk are read with it, so it must not change.
    #[test]
    fn record_and_block_bytes_are_pinned() {
        let golden = [
            (
                samples()[0],
                "23000000 13570a23 01 0700000000000000 0068e5cf8b010000 efbeadde 0300 05000000 \
                 6b6579 76616c7565",
            ),
            (
                samples()[2],
                "0f000000 3fc30a27 02 0900000000000000 0400 676f6e65",
            ),
            (
                samples()[5],
                "11000000 eb77dc9b 05 0c00000000000000 0b00000000000000",
            ),
        ];
        for (rec, hex) in golden {
            let mut buf = Vec::new();
            encode_record(&mut buf, &rec);
            assert_eq!(buf, unhex(hex), "{rec:?}");
            assert_eq!(decode_record(&buf), Ok((rec, buf.len())));
        }
        let mut block = Vec::new();
        encode_block(&mut block, b"abc");
        assert_eq!(block, unhex("03000000 335de166 616263"));
    }

    #[test]
    fn a_group_end_must_follow_its_begin() {
        for begin in [0, 12, 13] {
            let mut buf = Vec::new();
            encode_record(&mut buf, &Record::GroupEnd { version: 12, begin });
            assert!(
                matches!(decode_record(&buf), Err(Damage::Corrupt(_))),
                "begin {begin}"
            );
        }
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        for r in samples() {
            encode_record(&mut buf, &r);
        }
        let mut at = 0;
        for want in samples() {
            let (got, used) = decode_record(&buf[at..]).unwrap();
            assert_eq!(got, want);
            at += used;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn every_truncation_is_torn_and_every_bit_flip_is_caught() {
        let mut buf = Vec::new();
        encode_record(&mut buf, &samples()[0]);
        for cut in 0..buf.len() {
            assert_eq!(decode_record(&buf[..cut]), Err(Damage::Torn), "cut {cut}");
        }
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                // A flipped length may also read as torn; never as valid.
                assert!(decode_record(&b).is_err(), "flip {byte}.{bit}");
            }
        }
    }

    #[test]
    fn probe_finds_whole_records_and_nothing_else() {
        let mut buf = Vec::new();
        for r in samples() {
            encode_record(&mut buf, &r);
        }
        // At record boundaries it agrees with decode_record.
        let mut at = 0;
        for want in samples() {
            let (got, used) = probe_record(&buf[at..]).unwrap();
            assert_eq!(got, want);
            at += used;
        }
        // Every flipped bit of the first record is refused.
        let first = FRAME_BYTES + decode_frame(&buf).unwrap().len();
        for byte in 0..first {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                assert!(probe_record(&b).is_none(), "flip {byte}.{bit}");
            }
        }
        // Zeros, and an implausible version with a valid checksum, are not records.
        assert!(probe_record(&[0u8; 64]).is_none());
        let mut big = Vec::new();
        encode_record(
            &mut big,
            &Record::Clear {
                version: PLAUSIBLE_VERSIONS,
            },
        );
        assert!(decode_record(&big).is_ok());
        assert!(probe_record(&big).is_none());
        assert_eq!(unchecked_version(&buf), Some(7));
        assert_eq!(unchecked_version(&buf[..FRAME_BYTES + 8]), None);
    }

    #[test]
    fn headers_footers_and_items_round_trip() {
        let h = encode_header(WAL_MAGIC, 3, 99);
        assert_eq!(decode_header(WAL_MAGIC, &h), Ok((3, 99)));
        assert!(decode_header(CKPT_MAGIC, &h).is_err());
        let mut bad = h;
        bad[9] ^= 1;
        assert!(decode_header(WAL_MAGIC, &bad).is_err());
        let f = encode_footer(12345);
        assert!(is_footer(u32::from_le_bytes(f[0..4].try_into().unwrap())));
        assert_eq!(decode_footer(&f), Ok(12345));
        let it = CkptItem {
            version: 5,
            expiry: 6,
            client_flags: 7,
            key: b"abc",
            value: b"defg",
        };
        let mut p = Vec::new();
        encode_ckpt_item(&mut p, &it);
        encode_ckpt_item(&mut p, &it);
        let (a, next) = decode_ckpt_item(&p, 0).unwrap();
        assert_eq!(a, it);
        assert_eq!(decode_ckpt_item(&p, next).unwrap().1, p.len());
        assert!(decode_ckpt_item(&p[..p.len() - 1], next).is_err());
        let mut block = Vec::new();
        encode_block(&mut block, &p);
        assert_eq!(decode_frame(&block), Ok(&p[..]));
    }

    #[test]
    fn names_parse() {
        assert_eq!(parse_name(&segment_name(42), "wal-", ".log"), Some(42));
        assert_eq!(parse_name(&checkpoint_name(7), "ckpt-", ".ckpt"), Some(7));
        assert_eq!(parse_name("wal-1.log", "wal-", ".log"), None);
    }
}
