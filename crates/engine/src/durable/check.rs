//! Offline verification of a data directory (`combkv check --data-dir DIR`):
//! reads every checkpoint and log segment with the same decoders recovery
//! uses, changes nothing, and says what recovery would do: cut a torn tail,
//! or refuse a corrupt log (which `combkv check --repair`, `cut::repair`,
//! then cuts).

use std::fmt;
use std::path::Path;

use super::cut::{self, GroupCut};
use super::error::{CheckpointError, IoError, ItemRefused, RecoveryError};
use super::file::{FsStorage, Storage};
use super::record::Damage;
use super::segments::{self, SegmentScan};
use super::{TailCut, checkpoint, delta, record};

/// One checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointCheck {
    /// Its file name in the data directory.
    pub file: String,
    /// The version it holds every write up to.
    pub version: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// Written at advancing versions: it holds some writes above `version`
    /// too, and only with the log's records above `version` is it a whole
    /// state (a store's own; a backup is taken at one version).
    pub advancing: bool,
    /// Ok(items) or why it is invalid.
    pub status: Result<u64, CheckpointError>,
}

/// One delta run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaCheck {
    /// Its file name in the data directory.
    pub file: String,
    /// The checkpoint version it leads from.
    pub from: u64,
    /// The snapshot version it leads to.
    pub to: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// Ok(entries) or why it is invalid.
    pub status: Result<u64, CheckpointError>,
}

/// One log segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentCheck {
    /// Its file name in the data directory.
    pub file: String,
    /// Its size on disk.
    pub bytes: u64,
    /// The start version its header records (no record in it is at or
    /// below a version the previous segments handed out before it).
    pub start_version: u64,
    /// Valid records, up to the cut if there is one.
    pub records: u64,
    /// The version of its first valid record (`None`: none).
    pub first_version: Option<u64>,
    /// The version of its last valid record (`None`: none).
    pub last_version: Option<u64>,
    /// Where the valid records end and why, if before the end of the file.
    pub cut: Option<(u64, String)>,
    /// The records end at one of a kind this version does not know:
    /// recovery refuses the directory there instead of cutting it.
    pub refused: bool,
    /// The log's valid records end in this segment, and it is corruption,
    /// not a torn tail: recovery refuses it unless told to cut it.
    pub corrupt: bool,
    /// Well-formed records after the cut in this segment (resync scan).
    pub records_after: u64,
}

/// What `check` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Newest first.
    pub checkpoints: Vec<CheckpointCheck>,
    /// Delta runs, by the version they lead from.
    pub deltas: Vec<DeltaCheck>,
    /// Oldest first.
    pub segments: Vec<SegmentCheck>,
    /// Other files (unfinished `.tmp` checkpoints, `.discarded` segments).
    pub other_files: Vec<String>,
    /// The version floor a cut set (the `version-floor` file), if any.
    pub version_floor: Option<u64>,
    /// Why recovery would refuse the directory (a corrupt log, a record of
    /// an unknown kind, a damaged floor file); nothing would be changed.
    pub refused: Option<RecoveryError>,
    /// The cut recovery would make (a torn tail, an unfinished group), or
    /// that `--repair` would make of a corrupt log.
    pub log_cut: Option<TailCut>,
}

impl CheckReport {
    /// The checkpoint recovery would load.
    pub fn usable_checkpoint(&self) -> Option<&CheckpointCheck> {
        self.checkpoints.iter().find(|c| c.status.is_ok())
    }

    /// The delta runs recovery would apply on the usable checkpoint, in
    /// order: from its version, each step the valid run reaching furthest.
    pub fn usable_deltas(&self) -> Vec<&DeltaCheck> {
        let mut out = Vec::new();
        let Some(mut at) = self.usable_checkpoint().map(|c| c.version) else {
            return out;
        };
        while let Some(d) = self
            .deltas
            .iter()
            .filter(|d| d.from == at && d.status.is_ok())
            .max_by_key(|d| d.to)
        {
            out.push(d);
            at = d.to;
        }
        out
    }

    /// True if every checkpoint, delta run and segment is intact (a torn
    /// tail in the newest segment, which recovery cuts, counts as damage
    /// here).
    pub fn is_clean(&self) -> bool {
        self.checkpoints.iter().all(|c| c.status.is_ok())
            && self.deltas.iter().all(|d| d.status.is_ok())
            && self.segments.iter().all(|s| s.cut.is_none())
            && self.refused.is_none()
    }

    /// True if recovery would refuse the directory.
    pub fn would_refuse(&self) -> bool {
        self.refused.is_some()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "checkpoints ({}):", self.checkpoints.len())?;
        for c in &self.checkpoints {
            match &c.status {
                Ok(items) => writeln!(
                    f,
                    "  {}  version {}{}  {} bytes  {} items  ok",
                    c.file,
                    c.version,
                    if c.advancing {
                        " (and later, completed by the log)"
                    } else {
                        ""
                    },
                    c.bytes,
                    items
                )?,
                Err(why) => writeln!(
                    f,
                    "  {}  version {}  {} bytes  CORRUPT: {}",
                    c.file, c.version, c.bytes, why
                )?,
            }
        }
        if !self.deltas.is_empty() {
            writeln!(f, "delta runs ({}):", self.deltas.len())?;
        }
        for d in &self.deltas {
            match &d.status {
                Ok(entries) => writeln!(
                    f,
                    "  {}  versions {}..{}  {} bytes  {} entries  ok",
                    d.file, d.from, d.to, d.bytes, entries
                )?,
                Err(why) => writeln!(
                    f,
                    "  {}  versions {}..{}  {} bytes  CORRUPT: {}",
                    d.file, d.from, d.to, d.bytes, why
                )?,
            }
        }
        self.fmt_segments(f)?;
        if !self.other_files.is_empty() {
            writeln!(f, "other files: {}", self.other_files.join(", "))?;
        }
        if let Some(v) = self.version_floor {
            writeln!(
                f,
                "version floor: {v} (a cut dropped versions up to it; new writes take versions above)"
            )?;
        }
        self.fmt_cut(f)?;
        let deltas = self.usable_deltas();
        match (self.usable_checkpoint(), deltas.last()) {
            (Some(c), Some(last)) => write!(
                f,
                "recovery would load {} with {} delta runs and replay the log after version {}",
                c.file,
                deltas.len(),
                last.to
            ),
            (Some(c), None) => write!(
                f,
                "recovery would load {} and replay the log after version {}",
                c.file, c.version
            ),
            (None, _) => write!(f, "recovery would start empty and replay the whole log"),
        }
    }
}

impl CheckReport {
    /// The report's lines on the log segments.
    fn fmt_segments(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
                Some((offset, why)) if s.corrupt => writeln!(
                    f,
                    "  CORRUPT at offset {offset}: {why} ({} bytes after it, {} well-formed records among them)",
                    s.bytes - offset,
                    s.records_after
                )?,
                Some((offset, why)) => writeln!(
                    f,
                    "  CUT at offset {offset}: {why} ({} bytes after it)",
                    s.bytes - offset
                )?,
            }
        }
        Ok(())
    }

    /// What recovery would refuse, or cut, in the log.
    fn fmt_cut(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.refused {
            writeln!(f, "recovery would REFUSE to start: {why}")?;
            if let Some(c) = &self.log_cut {
                writeln!(
                    f,
                    "--repair would cut {} at offset {} and drop {}",
                    c.segment, c.offset, c.dropped
                )?;
            }
        } else if let Some(c) = &self.log_cut {
            writeln!(
                f,
                "recovery would cut {} at offset {} ({}) and drop {}",
                c.segment, c.offset, c.reason, c.dropped
            )?;
        }
        Ok(())
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
        .and_then(|r| {
            if r.version == version {
                Ok(r)
            } else {
                Err(CheckpointError::VersionMismatch { header: r.version })
            }
        });
        report.checkpoints.push(CheckpointCheck {
            file: name_of(&path),
            version,
            bytes: storage.len(&path).unwrap_or(0),
            advancing: status.as_ref().is_ok_and(|r| r.advancing),
            status: status.map(|r| r.items),
        });
    }
    for d in delta::list(storage, dir).map_err(io)? {
        let status = delta::read(storage, &d, |_| Ok(()));
        report.deltas.push(DeltaCheck {
            file: d.name(),
            from: d.from,
            to: d.to,
            bytes: storage.len(&d.path).unwrap_or(0),
            status,
        });
    }
    let survey = cut::survey(storage, dir).map_err(io)?;
    let end = survey.end.clone();
    let mut after = 0;
    for (i, (seq, path)) in survey.segments.iter().enumerate() {
        let bytes = segments::read_all(storage, path).map_err(io)?;
        let stop = GroupCut::stop_in(survey.group, i);
        let scan: SegmentScan = segments::scan_segment(*seq, &bytes, after, stop, |_, _| {});
        if let Some(v) = scan.last_version {
            after = v;
        }
        let at_end = end.as_ref().filter(|e| e.segment == i);
        report.segments.push(SegmentCheck {
            file: name_of(path),
            bytes: scan.total_bytes,
            start_version: scan.start_version,
            records: scan.records,
            first_version: scan.first_version,
            last_version: scan.last_version,
            refused: matches!(scan.damage, Some((_, Damage::UnknownKind(_)))),
            corrupt: at_end.is_some_and(|e| e.corrupt),
            records_after: at_end.map_or(0, |e| e.records_after),
            cut: scan.damage.map(|(o, d)| (o, d.to_string())),
        });
    }
    match cut::read_floor(storage, dir) {
        Ok(0) => {}
        Ok(v) => report.version_floor = Some(v),
        Err(e) => report.refused = Some(e),
    }
    let seg_bytes: Vec<u64> = report.segments.iter().map(|s| s.bytes).collect();
    let as_tail = |c: cut::Cut| TailCut {
        segment: survey.name(c.segment),
        offset: c.offset,
        dropped_bytes: seg_bytes[c.segment].saturating_sub(c.offset),
        reason: c.reason(),
        corrupt: c.corrupt,
        dropped: c.dropped,
        copy: None,
    };
    match survey.plan(storage, dir, false) {
        Ok(c) => report.log_cut = c.map(as_tail),
        Err(RecoveryError::Io(e)) => return Err(e),
        Err(e) => {
            report.refused.get_or_insert(e);
            // What --repair would cut (nothing, for a record of a kind
            // this version does not know).
            report.log_cut = survey.plan(storage, dir, true).ok().flatten().map(as_tail);
        }
    }
    for name in storage.list(dir).map_err(io)? {
        let known = record::parse_name(&name, "ckpt-", ".ckpt").is_some()
            || record::parse_name(&name, "wal-", ".log").is_some()
            || delta::parse_delta_name(&name).is_some()
            || name == cut::FLOOR_FILE
            || name == super::LOCK_FILE;
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
