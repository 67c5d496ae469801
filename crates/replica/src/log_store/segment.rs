//! The log's files: segments of checksummed records, and the small files
//! that hold the vote and the purge point, the commit point, and how much
//! of the last segment is synced.
//!
//! A segment `seg-<first index, 20 digits>.log` is a sequence of records
//! `[payload length: u32 LE][CRC-32 of the payload: u32 LE][payload]`, the
//! payload being one postcard-encoded entry (never empty), then zeros: the
//! writer zeroes a segment ahead of its appends (see `io_thread`), so that
//! appends overwrite allocated space and their syncs write no metadata.
//! The records end at the end of the file or at an all-zero header with
//! only zeros after it; a zero header with anything else after it is
//! damage. A reader stops at the first record that is incomplete or fails
//! its checksum; what that means (a torn tail, or corruption) is decided by
//! the caller, who knows whether valid records follow.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use combkv::durable::Storage;
use combkv::durable::frame::{self, FrameError, Framing};
use serde::{Deserialize, Serialize};

use crate::types::{Entry, LogId, Vote};

/// Bytes of a record's header.
pub(crate) const RECORD_HEADER_BYTES: usize = frame::HEADER_BYTES;
/// The largest payload a record may claim: a larger claim is damage, not an
/// entry (a batch carries at most a turn's writes; values are at most 64 MiB
/// each, and a turn never holds more than the request limit).
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 30;
/// The framing of a segment's records: the engine's shared framing, with
/// the checksum over the payload alone (the write-ahead log's covers the
/// length too; each keeps its own so that neither format's bytes change).
const FRAMING: Framing = Framing {
    checksum_covers_length: false,
    max_body: MAX_RECORD_BYTES,
};

/// The file name of the segment whose first entry has index `first`.
pub(crate) fn segment_name(first: u64) -> String {
    format!("seg-{first:020}.log")
}

/// The first index named by a segment's file name.
pub(crate) fn segment_first(name: &str) -> Option<u64> {
    name.strip_prefix("seg-")?
        .strip_suffix(".log")
        .filter(|d| d.len() == 20)?
        .parse()
        .ok()
}

/// Appends one record holding `entry` to `buf`.
pub(crate) fn encode_record(entry: &Entry, buf: &mut Vec<u8>) -> io::Result<()> {
    let payload = postcard::to_stdvec(entry).map_err(io::Error::other)?;
    if payload.len() > MAX_RECORD_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a log entry of {} bytes is too large", payload.len()),
        ));
    }
    FRAMING.encode(buf, &payload);
    Ok(())
}

/// One segment as read from disk.
#[derive(Debug)]
pub(crate) struct ReadSegment {
    /// The byte offset of each valid record and its entry's log id (each
    /// entry is decoded whole, then dropped: opening a log holds no more
    /// than one segment's bytes at a time).
    pub entries: Vec<(u64, LogId)>,
    /// Where the valid records end.
    pub valid_bytes: u64,
    /// The file's length.
    pub file_bytes: u64,
    /// Why reading stopped before the end of the file, if it did.
    pub damage: Option<String>,
}

/// Reads every valid record of a segment.
pub(crate) fn read_segment(storage: &dyn Storage, path: &Path) -> io::Result<ReadSegment> {
    let file_bytes = storage.len(path)?;
    let mut bytes = Vec::with_capacity(file_bytes as usize);
    storage.open_read(path)?.read_to_end(&mut bytes)?;
    let mut entries = Vec::new();
    let mut at = 0usize;
    let damage = loop {
        if at == bytes.len() {
            break None;
        }
        // No record has an all-zero header (its length is at least 1).
        let head = &bytes[at..bytes.len().min(at + RECORD_HEADER_BYTES)];
        if head.iter().all(|&b| b == 0) {
            if bytes[at..].iter().all(|&b| b == 0) {
                break None;
            }
            break Some(format!(
                "a zero record header at byte {at}, with data after it"
            ));
        }
        match decode_record(&bytes, at) {
            Ok((e, next)) => {
                entries.push((at as u64, e.log_id));
                at = next;
            }
            Err(why) => break Some(why),
        }
    };
    Ok(ReadSegment {
        entries,
        valid_bytes: at as u64,
        file_bytes,
        damage,
    })
}

/// Decodes the record at byte `at` of `bytes`: its entry and where the
/// next record begins, or why it is no valid record.
fn decode_record(bytes: &[u8], at: usize) -> Result<(Entry, usize), String> {
    let rest = bytes.get(at..).unwrap_or(&[]);
    let payload = FRAMING.decode(rest).map_err(|e| match e {
        FrameError::TornHeader => format!("an incomplete record header at byte {at}"),
        FrameError::TooLong(len) => format!("a record at byte {at} claims {len} bytes"),
        FrameError::TornBody => format!("an incomplete record at byte {at}"),
        FrameError::ChecksumMismatch => format!("a record at byte {at} fails its checksum"),
    })?;
    let next = at + RECORD_HEADER_BYTES + payload.len();
    match postcard::from_bytes::<Entry>(payload) {
        Ok(e) => Ok((e, next)),
        Err(e) => Err(format!("a record at byte {at} does not decode: {e}")),
    }
}

/// Splits `bytes`, whole records, into each record's byte range and its
/// entry's log id (the journal's copy of a log's appends).
pub(crate) fn split_records(bytes: &[u8]) -> io::Result<Vec<(std::ops::Range<usize>, LogId)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (e, next) = decode_record(bytes, at)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
        out.push((at..next, e.log_id));
        at = next;
    }
    Ok(out)
}

/// Reads the records that fill bytes `from..to` of a segment, each with
/// the offset it starts at: every one must be whole and valid (the caller
/// names a range the log wrote).
pub(crate) fn read_records(
    storage: &dyn Storage,
    path: &Path,
    from: u64,
    to: u64,
) -> io::Result<Vec<(u64, Entry)>> {
    let mut bytes = vec![0; (to - from) as usize];
    storage.read_at(path, from, &mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (e, next) = decode_record(&bytes, at).map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why} (read from byte {from})", path.display()),
            )
        })?;
        out.push((from + at as u64, e));
        at = next;
    }
    Ok(out)
}

/// The durable part of the log's state besides its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub vote: Option<Vote>,
    /// The newest entry purged after a snapshot covered it.
    pub purged: Option<LogId>,
}

/// The file holding [`Meta`].
pub(crate) const META_FILE: &str = "meta";
/// The file holding the commit point (see `save_committed`).
pub(crate) const COMMITTED_FILE: &str = "committed";
/// The file holding [`Synced`].
pub(crate) const SYNCED_FILE: &str = "synced";

/// How much of a segment is known to be synced: its first `bytes`. Saved
/// (lazily) only after those bytes were synced, and lowered durably before
/// a truncation cuts below it, so it never names bytes that are not on
/// disk. A bad record below it, in the last segment, is not a torn tail
/// (a crash during an append never acknowledged) but damage to entries
/// this node may have acknowledged, and the log refuses to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Synced {
    /// The segment, by its first index (its name).
    pub segment: u64,
    pub bytes: u64,
}

/// Replaces `dir/name` with `value`, checksummed: written to a temporary
/// file, synced, renamed over the old one, and the directory synced, so a
/// crash leaves the old value or the new one, never a mix. With `sync`
/// false (the commit point and the synced length, which may lag) it is
/// rewritten in place instead, unsynced: a crash may leave a mix, which
/// the checksum refuses as damaged, and the reader takes it as lost. A
/// ranged node rewrites one of these ten times a second for each log it
/// holds, and a new file and a rename each time cost it a tenth of its
/// CPU (inodes made and freed).
pub(crate) fn write_small<T: Serialize>(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    value: &T,
    sync: bool,
) -> io::Result<()> {
    let payload = postcard::to_stdvec(value).map_err(io::Error::other)?;
    let mut buf = Vec::with_capacity(payload.len() + 4);
    buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buf.extend_from_slice(&payload);
    if !sync {
        return storage.overwrite(&dir.join(name), &buf);
    }
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = storage.create(&tmp)?;
    f.write_all(&buf)?;
    f.sync_data()?;
    drop(f);
    storage.rename(&tmp, &dir.join(name))?;
    storage.sync_dir(dir)
}

/// Reads what [`write_small`] wrote: `Ok(None)` if the file is absent,
/// an error if it is damaged.
pub(crate) fn read_small<T: for<'de> Deserialize<'de>>(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
) -> io::Result<Option<T>> {
    let path: PathBuf = dir.join(name);
    if !storage.list(dir)?.iter().any(|n| n == name) {
        return Ok(None);
    }
    let mut buf = Vec::new();
    storage.open_read(&path)?.read_to_end(&mut buf)?;
    let damaged = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is damaged", path.display()),
        )
    };
    if buf.len() < 4 {
        return Err(damaged());
    }
    let crc = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
    if crc32fast::hash(&buf[4..]) != crc {
        return Err(damaged());
    }
    postcard::from_bytes(&buf[4..])
        .map(Some)
        .map_err(|_| damaged())
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    /// A record's bytes: payload length (u32 LE), CRC-32 of the payload
    /// alone (u32 LE), the postcard payload. The v0.1 cluster fixture's
    /// blank entry at index 1 (`tests/golden_codec.rs` pins the rest).
    #[test]
    fn record_bytes_are_pinned() {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Blank,
        };
        let mut buf = vec![0xaa];
        encode_record(&entry, &mut buf).unwrap();
        assert_eq!(buf, [0xaa, 4, 0, 0, 0, 0x0f, 0xe3, 0x21, 0x81, 1, 1, 1, 0]);
        let (back, next) = decode_record(&buf, 1).unwrap();
        assert_eq!((back, next), (entry, buf.len()));
    }

    /// Each way a record can be bad, and what the reader says of it.
    #[test]
    fn bad_records_are_named() {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Blank,
        };
        let mut buf = Vec::new();
        encode_record(&entry, &mut buf).unwrap();
        let why = |b: &[u8]| decode_record(b, 0).unwrap_err();
        assert_eq!(why(&buf[..7]), "an incomplete record header at byte 0");
        assert_eq!(why(&buf[..11]), "an incomplete record at byte 0");
        let mut flipped = buf.clone();
        flipped[10] ^= 1;
        assert_eq!(why(&flipped), "a record at byte 0 fails its checksum");
        let mut long = buf.clone();
        long[..4].copy_from_slice(&(MAX_RECORD_BYTES as u32 + 1).to_le_bytes());
        assert_eq!(
            why(&long),
            format!("a record at byte 0 claims {} bytes", MAX_RECORD_BYTES + 1)
        );
    }
}
