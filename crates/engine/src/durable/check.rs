//! Offline verification of a data directory (`combkv check --data-dir DIR`):
//! reads every checkpoint and log segment with the same decoders recovery
//! uses, changes nothing, and says what recovery would do.

use std::fmt;
use std::path::Path;

use super::error::{CheckpointError, IoError, ItemRefused};
use super::file::{FsStorage, Storage};
use super::record::Damage;
use super::recovery::{self, SegmentScan};
use super::{checkpoint, record};

/// One checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointCheck {
    pub file: String,
    pub version: u64,
    pub bytes: u64,
    /// Ok(items) or why it is invalid.
    pub status: Result<u64, CheckpointError>,
}

/// One log segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentCheck {
    pub file: String,
    pub bytes: u64,
    pub start_version: u64,
    pub records: u64,
    pub first_version: Option<u64>,
    pub last_version: Option<u64>,
    /// Where the valid records end and why, if before the end of the file.
    pub cut: Option<(u64, String)>,
    /// The records end at one of a kind this version does not know:
    /// recovery refuses the directory there instead of cutting it.
    pub refused: bool,
}

/// What `check` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Newest first.
    pub checkpoints: Vec<CheckpointCheck>,
    /// Oldest first.
    pub segments: Vec<SegmentCheck>,
    /// Other files (unfinished `.tmp` checkpoints, `.discarded` segments).
    pub other_files: Vec<String>,
}

impl CheckReport {
    /// The checkpoint recovery would load.
    pub fn usable_checkpoint(&self) -> Option<&CheckpointCheck> {
        self.checkpoints.iter().find(|c| c.status.is_ok())
    }

    /// True if every checkpoint and segment is intact (a torn tail in the
    /// newest segment, which recovery cuts, counts as damage here).
    pub fn is_clean(&self) -> bool {
        self.checkpoints.iter().all(|c| c.status.is_ok())
            && self.segments.iter().all(|s| s.cut.is_none())
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "checkpoints ({}):", self.checkpoints.len())?;
        for c in &self.checkpoints {
            match &c.status {
                Ok(items) => writeln!(
                    f,
                    "  {}  version {}  {} bytes  {} items  ok",
                    c.file, c.version, c.bytes, items
                )?,
                Err(why) => writeln!(
                    f,
                    "  {}  version {}  {} bytes  CORRUPT: {}",
                    c.file, c.version, c.bytes, why
                )?,
            }
        }
        writeln!(f, "log segments ({}):", self.segments.len())?;
        for s in &self.segments {
            let versions = match (s.first_version, s.last_version) {
                (Some(a), Some(b)) => format!("versions {a}..={b}"),
                _ => "no records".to_string(),
            };
            write!(
                f,
                "  {}  {} bytes  starts after version {}  {} valid records  {}",
                s.file, s.bytes, s.start_version, s.records, versions
            )?;
            match &s.cut {
                None => writeln!(f, "  ok")?,
                Some((offset, why)) if s.refused => writeln!(
                    f,
                    "  REFUSED at offset {offset}: {why}; recovery stops and changes nothing"
                )?,
                Some((offset, why)) => writeln!(
                    f,
                    "  CUT at offset {offset}: {why} ({} bytes after it)",
                    s.bytes - offset
                )?,
            }
        }
        if !self.other_files.is_empty() {
            writeln!(f, "other files: {}", self.other_files.join(", "))?;
        }
        match self.usable_checkpoint() {
            Some(c) => write!(
                f,
                "recovery would load {} and replay the log after version {}",
                c.file, c.version
            ),
            None => write!(f, "recovery would start empty and replay the whole log"),
        }
    }
}

/// Verifies every checkpoint and log segment in `dir`. Fails only if a
/// file cannot be read; damage is what the report is for.
pub fn check(dir: &Path) -> Result<CheckReport, IoError> {
    check_with(&FsStorage, dir)
}

/// `check` through any storage.
pub fn check_with(storage: &dyn Storage, dir: &Path) -> Result<CheckReport, IoError> {
    let io = |e: std::io::Error| IoError::new(dir.display().to_string(), e);
    let mut report = CheckReport::default();
    for (version, path) in checkpoint::list(storage, dir).map_err(io)? {
        let mut last: Option<Vec<u8>> = None;
        let status = checkpoint::read(storage, &path, |it| {
            if last.as_deref().is_some_and(|l| l >= it.key) {
                return Err(ItemRefused::OutOfOrder);
            }
            last = Some(it.key.to_vec());
            Ok(())
        })
        .and_then(|(v, items)| {
            if v == version {
                Ok(items)
            } else {
                Err(CheckpointError::VersionMismatch { header: v })
            }
        });
        report.checkpoints.push(CheckpointCheck {
            file: name_of(&path),
            version,
            bytes: storage.len(&path).unwrap_or(0),
            status,
        });
    }
    let mut after = 0;
    let segments = recovery::list_segments(storage, dir).map_err(io)?;
    let group_cut = recovery::unfinished_group(storage, &segments).map_err(io)?;
    for (i, (seq, path)) in segments.into_iter().enumerate() {
        let bytes = recovery::read_all(storage, &path).map_err(io)?;
        let stop = recovery::GroupCut::stop_in(group_cut, i);
        let scan: SegmentScan = recovery::scan_segment(seq, &bytes, after, stop, |_, _| {});
        if let Some(v) = scan.last_version {
            after = v;
        }
        report.segments.push(SegmentCheck {
            file: name_of(&path),
            bytes: scan.total_bytes,
            start_version: scan.start_version,
            records: scan.records,
            first_version: scan.first_version,
            last_version: scan.last_version,
            refused: matches!(scan.damage, Some((_, Damage::UnknownKind(_)))),
            cut: scan.damage.map(|(o, d)| (o, d.to_string())),
        });
    }
    for name in storage.list(dir).map_err(io)? {
        let known = record::parse_name(&name, "ckpt-", ".ckpt").is_some()
            || record::parse_name(&name, "wal-", ".log").is_some();
        if !known {
            report.other_files.push(name);
        }
    }
    Ok(report)
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
