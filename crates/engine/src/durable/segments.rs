//! Reading the write-ahead log's segment files: listing them, reading one
//! whole, and scanning its records up to the end or the first damage.
//!
//! Recovery, `cut` (which trims a damaged tail) and `check` all read
//! segments the same way. The reading lives here, below all three, because
//! recovery calls `cut` and `cut` scans segments: with the scan in
//! `recovery.rs` the two would import each other.

use std::path::Path;

use super::file::Storage;
use super::record::{self, Damage, Record};

/// What one pass over a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentScan {
    pub seq: u64,
    pub start_version: u64,
    pub records: u64,
    pub first_version: Option<u64>,
    pub last_version: Option<u64>,
    /// Bytes up to the end of the last valid record (header included).
    pub valid_bytes: u64,
    pub total_bytes: u64,
    /// Where and why the segment stops being valid.
    pub damage: Option<(u64, Damage)>,
}

/// Reads a segment's records in order, handing each to `f` with its offset,
/// until the end or the first damage. `after` is the last version seen
/// before it: every record's version must exceed it and the previous one.
/// `stop`: (offset, begin) of an unfinished group's begin in this segment,
/// where the scan ends as at damage.
pub(crate) fn scan_segment<'b>(
    seq: u64,
    bytes: &'b [u8],
    mut after: u64,
    stop: Option<(u64, u64)>,
    mut f: impl FnMut(u64, &Record<'b>),
) -> SegmentScan {
    let mut scan = SegmentScan {
        seq,
        start_version: 0,
        records: 0,
        first_version: None,
        last_version: None,
        valid_bytes: 0,
        total_bytes: bytes.len() as u64,
        damage: None,
    };
    match record::decode_header(record::WAL_MAGIC, bytes) {
        Ok((hseq, start)) if hseq == seq => scan.start_version = start,
        Ok((hseq, _)) => {
            scan.damage = Some((0, Damage::Corrupt(format!("header names segment {hseq}"))));
            return scan;
        }
        Err(d) => {
            scan.damage = Some((0, d));
            return scan;
        }
    }
    let mut at = record::HEADER_BYTES;
    scan.valid_bytes = at as u64;
    while at < bytes.len() {
        if let Some((offset, begin)) = stop
            && at as u64 == offset
        {
            scan.damage = Some((offset, Damage::Unfinished(begin)));
            return scan;
        }
        match record::decode_record(&bytes[at..]) {
            Ok((rec, used)) => {
                let v = rec.version();
                if v <= after {
                    scan.damage = Some((
                        at as u64,
                        Damage::Corrupt(format!("version {v} not above {after}")),
                    ));
                    return scan;
                }
                f(at as u64, &rec);
                after = v;
                scan.records += 1;
                scan.first_version.get_or_insert(v);
                scan.last_version = Some(v);
                at += used;
                scan.valid_bytes = at as u64;
            }
            Err(d) => {
                scan.damage = Some((at as u64, d));
                return scan;
            }
        }
    }
    scan
}

/// WAL segments in `dir`, oldest first: (seq, path).
pub(crate) fn list_segments(
    storage: &dyn Storage,
    dir: &Path,
) -> std::io::Result<Vec<(u64, std::path::PathBuf)>> {
    let mut out: Vec<(u64, std::path::PathBuf)> = storage
        .list(dir)?
        .into_iter()
        .filter_map(|n| Some((record::parse_name(&n, "wal-", ".log")?, dir.join(n))))
        .collect();
    out.sort();
    Ok(out)
}

/// The whole of the file at `path`: a log segment is scanned in memory.
pub(crate) fn read_all(storage: &dyn Storage, path: &Path) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut storage.open_read(path)?, &mut out)?;
    Ok(out)
}
