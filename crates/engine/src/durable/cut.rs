//! Where the log ends, whether a crash can have left it that way, and what
//! cutting it there drops (docs/design.md, Durability, "Torn tail or
//! corruption").
//!
//! The log's valid records end at the first one that does not decode in
//! sequence (torn, bad checksum or lengths, version not above the one
//! before). What lies after that point decides what it is:
//!
//! - **Torn tail**: the damage is in the *last* segment, and a resync scan
//!   of every byte from the damaged record to the end of the file finds no
//!   well-formed record (frame, lengths and checksum holding, version above
//!   the last valid one and below `PLAUSIBLE_VERSIONS`). That is all a crash
//!   can leave: the flusher appends whole buffers to the last segment and
//!   nothing else (no preallocation, no rewriting in place), so a crash
//!   leaves a prefix of the last write, and after a power loss the bytes of
//!   the unsynced writes may also read as zeros or as stale blocks, none of
//!   which is a well-formed record continuing the log. Recovery cuts it
//!   there automatically: nothing after it was acknowledged (`Always`).
//! - **Corruption**: a well-formed record follows the damage in its
//!   segment, or the damaged segment is not the last. A segment is synced
//!   before the next one is created (`Wal::maybe_rotate`), so a crash never
//!   tears a segment that has a successor. Cutting there would drop what
//!   follows, acknowledged writes among it: recovery refuses, and changes
//!   nothing, unless the operator asked for the cut
//!   (`DurableConfig::truncate_corrupt`, `combkv check --repair`).
//!
//! One crash can look like corruption: after a power loss with `EverySec`
//! or `None` (or within the last group commit with `Always`), the OS may
//! have written back a later page of unsynced records but not an earlier
//! one. Everything after such a hole was written after the last completed
//! fsync, so a cut there drops only what the mode may lose; but the log
//! cannot tell it from a flipped byte, and recovery refuses it too.
//!
//! A cut never lets versions come back: before it changes a file, it writes
//! the highest version the dropped bytes may have handed out to the
//! `version-floor` file (when that is above what the kept log holds), and
//! recovery restarts the clock above it, on this start and every later one.
//! A corrupt cut keeps a copy of the whole segment it cuts, and every later
//! segment, as `.discarded` files.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::error::{CorruptLog, IoError, RecoveryError};
use super::file::{FsStorage, Storage};
use super::record::{self, Damage, Record};
use super::segments::{list_segments, read_all, scan_segment};
use super::{Dropped, TailCut};

/// The file that holds the version floor: 32 bytes,
/// `"CKVFLR01" | u64 floor | u64 0 | u32 0 | u32 crc(bytes 0..28)`.
pub const FLOOR_FILE: &str = "version-floor";
const FLOOR_MAGIC: &[u8; 8] = b"CKVFLR01";

/// Well-formed records a resync scan found.
#[derive(Debug, Clone, Copy, Default)]
struct Found {
    records: u64,
    versions: Option<(u64, u64)>,
}

impl Found {
    fn add(&mut self, v: u64) {
        self.records += 1;
        self.versions = Some(match self.versions {
            None => (v, v),
            Some((lo, hi)) => (lo.min(v), hi.max(v)),
        });
    }
}

/// Resync scan of `bytes` from `from`: at every offset, a well-formed
/// record (`record::probe_record`) with a version above `after` counts, and
/// the scan goes on after it; anything else, one byte further.
fn salvage(bytes: &[u8], from: usize, after: u64, found: &mut Found) {
    let mut at = from;
    while at < bytes.len() {
        match record::probe_record(&bytes[at..]) {
            Some((rec, used)) if rec.version() > after => {
                found.add(rec.version());
                at += used;
            }
            _ => at += 1,
        }
    }
}

/// Where the log's valid records end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogEnd {
    /// Index of the segment in the listing.
    pub segment: usize,
    pub offset: u64,
    pub damage: Damage,
    /// The version of the last valid record before it (0: none).
    pub last: u64,
    /// Well-formed records after it in its segment (resync scan).
    pub records_after: u64,
    /// Corruption, not a torn tail (see the module documentation).
    pub corrupt: bool,
}

/// Rule 6's cut: the earliest GROUP_BEGIN whose GROUP_END is not in the
/// valid log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupCut {
    /// Index of the segment in the listing.
    pub segment: usize,
    pub offset: u64,
    pub begin: u64,
    /// The version of the record before the begin (0: none).
    pub before: u64,
}

impl GroupCut {
    /// `scan_segment`'s `stop` for segment `i` of the listing.
    pub(crate) fn stop_in(cut: Option<GroupCut>, i: usize) -> Option<(u64, u64)> {
        cut.filter(|c| c.segment == i).map(|c| (c.offset, c.begin))
    }
}

/// One pass over the log, read as replay reads it (to the first damage).
#[derive(Debug, Clone)]
pub(crate) struct Survey {
    /// (seq, path), oldest first.
    pub segments: Vec<(u64, PathBuf)>,
    /// Each scanned segment's start version, if its header is valid.
    starts: Vec<Option<u64>>,
    pub end: Option<LogEnd>,
    pub group: Option<GroupCut>,
}

/// Reads the log in `dir`: where its valid records end, whether that is a
/// torn tail or corruption, and the earliest unfinished group.
pub(crate) fn survey(storage: &dyn Storage, dir: &Path) -> io::Result<Survey> {
    let segments = list_segments(storage, dir)?;
    let mut open: BTreeMap<u64, (usize, u64, u64)> = BTreeMap::new();
    let mut starts = Vec::new();
    let mut after = 0;
    let mut end = None;
    for (i, (seq, path)) in segments.iter().enumerate() {
        let bytes = read_all(storage, path)?;
        let mut prev = after;
        let scan = scan_segment(*seq, &bytes, after, None, |at, rec| {
            match *rec {
                Record::GroupBegin { version } => {
                    open.insert(version, (i, at, prev));
                }
                Record::GroupEnd { begin, .. } => {
                    open.remove(&begin);
                }
                _ => {}
            }
            prev = rec.version();
        });
        let header_ok = scan.damage.as_ref().is_none_or(|d| d.0 > 0);
        starts.push(header_ok.then_some(scan.start_version));
        if let Some(v) = scan.last_version {
            after = v;
        }
        if let Some((offset, damage)) = scan.damage {
            let mut found = Found::default();
            salvage(&bytes, offset as usize, after, &mut found);
            end = Some(LogEnd {
                segment: i,
                offset,
                damage,
                last: after,
                records_after: found.records,
                corrupt: found.records > 0 || i + 1 < segments.len(),
            });
            break;
        }
    }
    // Begins ascend in log order, so the smallest is the earliest.
    let group = open
        .into_iter()
        .next()
        .map(|(begin, (segment, offset, before))| GroupCut {
            segment,
            offset,
            begin,
            before,
        });
    Ok(Survey {
        segments,
        starts,
        end,
        group,
    })
}

/// A cut the log needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Index of the segment in the listing.
    pub segment: usize,
    /// Where the segment is cut: it keeps the bytes before.
    pub offset: u64,
    /// Why (`Damage::Unfinished` for rule 6's cut).
    pub damage: Damage,
    /// Corruption lies in what it drops.
    pub corrupt: bool,
    pub dropped: Dropped,
    /// The highest version the log keeps (records and segment start
    /// versions; the checkpoint aside).
    pub kept_max: u64,
}

impl Cut {
    /// Why, for reports: the damage, and whether it is a torn tail.
    pub(crate) fn reason(&self) -> String {
        match &self.damage {
            Damage::Unfinished(_) => self.damage.to_string(),
            d if self.corrupt => d.to_string(),
            d => format!("a torn tail: {d}"),
        }
    }
}

impl Survey {
    /// The cut the log needs, if any. Refuses (changing nothing) a record
    /// of a kind this version does not know, and corruption unless
    /// `truncate_corrupt`.
    pub(crate) fn plan(
        &self,
        storage: &dyn Storage,
        dir: &Path,
        truncate_corrupt: bool,
    ) -> Result<Option<Cut>, RecoveryError> {
        let io_err = |e| RecoveryError::Io(IoError::new("reading the log", e));
        if let Some(end) = &self.end
            && let Damage::UnknownKind(kind) = end.damage
        {
            // Not damage: a newer combkv wrote it. Cutting here would drop
            // acknowledged writes.
            return Err(RecoveryError::UnknownRecordKind {
                segment: self.name(end.segment),
                offset: end.offset,
                kind,
            });
        }
        let (segment, offset, damage, after) = match (&self.group, &self.end) {
            // The group's begin is in the valid log, so before any damage.
            (Some(g), _) => (g.segment, g.offset, Damage::Unfinished(g.begin), g.before),
            (None, Some(e)) => (e.segment, e.offset, e.damage.clone(), e.last),
            (None, None) => return Ok(None),
        };
        let corrupt = self.end.as_ref().is_some_and(|e| e.corrupt);
        // Nothing else bounds the damaged record's version when nothing
        // well-formed follows it: its own field is the best guess.
        let damaged = self
            .end
            .as_ref()
            .filter(|e| e.corrupt)
            .map(|e| (e.segment, e.offset));
        let dropped = self
            .dropped(storage, segment, offset, after, damaged)
            .map_err(io_err)?;
        // Segment start versions count too: versions without records (a
        // clear's deletes) may lie between the last record and a start.
        let kept_starts = if offset > 0 { segment + 1 } else { segment };
        let kept_max = self.starts[..kept_starts]
            .iter()
            .flatten()
            .fold(after, |m, &s| m.max(s));
        if corrupt && !truncate_corrupt {
            let end = self.end.as_ref().expect("corruption is a log end");
            return Err(RecoveryError::CorruptLog(Box::new(CorruptLog {
                dir: dir.to_path_buf(),
                segment: self.name(end.segment),
                offset: end.offset,
                damage: end.damage.clone(),
                dropped,
            })));
        }
        Ok(Some(Cut {
            segment,
            offset,
            damage,
            corrupt,
            dropped,
            kept_max,
        }))
    }

    /// The file name of segment `i`.
    pub(crate) fn name(&self, i: usize) -> String {
        name_of(&self.segments[i].1)
    }

    /// What a cut of segment `segment` at `offset` drops; `after` is the
    /// last version kept. `damaged`: the damaged record of a corrupt log,
    /// whose own version field counts when nothing else bounds it.
    fn dropped(
        &self,
        storage: &dyn Storage,
        segment: usize,
        offset: u64,
        after: u64,
        damaged: Option<(usize, u64)>,
    ) -> io::Result<Dropped> {
        let mut d = Dropped::default();
        let mut found = Found::default();
        let mut highest = 0;
        let mut guess = None;
        for (i, (seq, path)) in self.segments.iter().enumerate().skip(segment) {
            let bytes = read_all(storage, path)?;
            let from = if i == segment {
                d.bytes += (bytes.len() as u64).saturating_sub(offset);
                offset as usize
            } else {
                d.segments.push(name_of(path));
                d.bytes += bytes.len() as u64;
                match record::decode_header(record::WAL_MAGIC, &bytes) {
                    Ok((h, start)) if h == *seq && start < record::PLAUSIBLE_VERSIONS => {
                        highest = highest.max(start);
                        record::HEADER_BYTES
                    }
                    _ => 0,
                }
            };
            if let Some((s, at)) = damaged
                && s == i
                && at >= record::HEADER_BYTES as u64
            {
                guess = bytes.get(at as usize..).and_then(record::unchecked_version);
            }
            salvage(&bytes, from, after, &mut found);
        }
        d.records = found.records;
        d.versions = found.versions;
        highest = highest.max(found.versions.map_or(0, |v| v.1));
        if highest <= after
            && let Some(v) = guess.filter(|&v| v > after)
        {
            highest = v;
        }
        d.highest_version = if highest > after { highest } else { 0 };
        Ok(d)
    }
}

/// What `make_cut` did.
#[derive(Debug, Clone)]
pub(crate) struct CutDone {
    pub tail: TailCut,
    /// Files set aside, as they were named.
    pub discarded: Vec<String>,
    /// The cut segment keeps its first `cut.offset` bytes.
    pub kept: bool,
    /// The floor written, if the cut raised it.
    pub floor: Option<u64>,
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// Makes `cut` in the log of `dir` (segments as `survey` listed them;
/// `floor`: the version floor in force). In this order, so that a crash
/// midway leaves a log that the next recovery reads the same way or cuts
/// the same way, never one whose later segments follow a cut:
/// 1. the version floor, if the dropped bytes hold versions above it and
///    above everything the log keeps;
/// 2. a corrupt cut inside a segment copies the segment whole to
///    `<name>.discarded`;
/// 3. every later segment is renamed `<name>.discarded`, and the directory
///    synced;
/// 4. the cut segment is truncated (and synced), or, cut at offset 0, set
///    aside too (removed if it is a torn header of the last segment: it
///    holds nothing).
pub(crate) fn make_cut(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[(u64, PathBuf)],
    cut: &Cut,
    floor: u64,
) -> Result<CutDone, RecoveryError> {
    let (_, path) = &segments[cut.segment];
    let name = name_of(path);
    let io = |what: &str| {
        let what = what.to_string();
        move |e| RecoveryError::Io(IoError::new(what, e))
    };
    let mut raised = None;
    if cut.dropped.highest_version > floor.max(cut.kept_max) {
        write_floor(storage, dir, cut.dropped.highest_version).map_err(io(FLOOR_FILE))?;
        raised = Some(cut.dropped.highest_version);
    }
    let bytes = storage.len(path).map_err(io(&name))?;
    let mut copy = None;
    if cut.corrupt && cut.offset > 0 {
        copy = Some(copy_aside(storage, dir, path, &name).map_err(io(&name))?);
    }
    let mut discarded = Vec::new();
    for (_, later) in &segments[cut.segment + 1..] {
        let n = name_of(later);
        set_aside(storage, dir, later, &n).map_err(io(&n))?;
        discarded.push(n);
    }
    let is_last = cut.segment + 1 == segments.len();
    let kept = cut.offset > 0;
    if !kept {
        if is_last && cut.damage == Damage::Torn && !cut.corrupt {
            // Created but its header never became durable: it holds nothing.
            storage.remove(path).map_err(io(&name))?;
        } else {
            set_aside(storage, dir, path, &name).map_err(io(&name))?;
            discarded.insert(0, name.clone());
        }
    }
    storage
        .sync_dir(dir)
        .map_err(io("syncing the data directory"))?;
    if kept {
        storage.truncate(path, cut.offset).map_err(io(&name))?;
    }
    Ok(CutDone {
        tail: TailCut {
            segment: name,
            offset: cut.offset,
            dropped_bytes: bytes.saturating_sub(cut.offset),
            reason: cut.reason(),
            corrupt: cut.corrupt,
            dropped: cut.dropped.clone(),
            copy,
        },
        discarded,
        kept,
        floor: raised,
    })
}

/// A name in `dir` for a set-aside copy of `name` that no file has:
/// `<name>.discarded`, else `<name>.<n>.discarded`.
fn aside_name(storage: &dyn Storage, dir: &Path, name: &str) -> io::Result<String> {
    let taken = storage.list(dir)?;
    let mut candidate = format!("{name}.discarded");
    let mut n = 1;
    while taken.contains(&candidate) {
        n += 1;
        candidate = format!("{name}.{n}.discarded");
    }
    Ok(candidate)
}

/// Renames a segment after a cut to its set-aside name (the directory is
/// synced by the caller).
fn set_aside(storage: &dyn Storage, dir: &Path, path: &Path, name: &str) -> io::Result<()> {
    let aside = dir.join(aside_name(storage, dir, name)?);
    storage.rename(path, &aside)
}

/// Copies a segment whole to its set-aside name, durably. Returns the name.
fn copy_aside(storage: &dyn Storage, dir: &Path, path: &Path, name: &str) -> io::Result<String> {
    let aside = aside_name(storage, dir, name)?;
    let tmp = dir.join(format!("{aside}.tmp"));
    let bytes = read_all(storage, path)?;
    let mut f = storage.create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_data()?;
    drop(f);
    storage.rename(&tmp, &dir.join(&aside))?;
    storage.sync_dir(dir)?;
    Ok(aside)
}

/// The version floor in `dir` (0 if there is none). Err if the file is
/// damaged: the floor is then unknown.
pub(crate) fn read_floor(storage: &dyn Storage, dir: &Path) -> Result<u64, RecoveryError> {
    let path = dir.join(FLOOR_FILE);
    let bytes = match read_all(storage, &path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(RecoveryError::Io(IoError::new(FLOOR_FILE, e))),
    };
    let refused = |damage| RecoveryError::VersionFloor {
        file: FLOOR_FILE.to_string(),
        damage,
    };
    match record::decode_header(FLOOR_MAGIC, &bytes) {
        Ok(_) if bytes.len() != record::HEADER_BYTES => Err(refused(Damage::Corrupt(format!(
            "{} bytes, not {}",
            bytes.len(),
            record::HEADER_BYTES
        )))),
        Ok((floor, _)) => Ok(floor),
        Err(d) => Err(refused(d)),
    }
}

/// Writes the version floor `floor` to `dir` durably: a `.tmp` file,
/// synced, renamed, the directory synced.
fn write_floor(storage: &dyn Storage, dir: &Path, floor: u64) -> io::Result<()> {
    let tmp = dir.join(format!("{FLOOR_FILE}.tmp"));
    let mut f = storage.create(&tmp)?;
    f.write_all(&record::encode_header(FLOOR_MAGIC, floor, 0))?;
    f.sync_data()?;
    drop(f);
    storage.rename(&tmp, &dir.join(FLOOR_FILE))?;
    storage.sync_dir(dir)
}

/// What `combkv check --repair` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The data directory repaired.
    pub dir: PathBuf,
    /// The cut made; None if the log needed none.
    pub cut: Option<TailCut>,
    /// Segments set aside whole, as they were named (each is now
    /// `<name>.discarded`, or `<name>.<n>.discarded` if that was taken).
    pub discarded_segments: Vec<String>,
    /// The version floor written, if the cut raised it.
    pub version_floor: Option<u64>,
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.dir.display();
        let Some(cut) = &self.cut else {
            return write!(f, "nothing to repair in {dir}: the log ends cleanly");
        };
        writeln!(f, "repaired {dir}:")?;
        writeln!(f, "  {cut}")?;
        if !self.discarded_segments.is_empty() {
            writeln!(
                f,
                "  segments set aside as .discarded: {}",
                self.discarded_segments.join(", ")
            )?;
        }
        match (self.version_floor, cut.dropped.highest_version) {
            (Some(v), _) => write!(
                f,
                "  version floor {v} written to {FLOOR_FILE}: new writes take versions above it"
            ),
            (None, 0) => write!(f, "  the dropped bytes hold no version to keep"),
            (None, v) => write!(
                f,
                "  highest version dropped {v}: already below the versions the log keeps or the floor in force"
            ),
        }
    }
}

/// Cuts the log of `dir` where recovery would, torn tail or corruption
/// alike, offline (`combkv check --repair`): what `Store::open` with
/// `truncate_corrupt` would do to the log, without loading anything.
/// Refuses a record of an unknown kind (a newer combkv's) as recovery does,
/// and a directory another process holds the lock of (`RecoveryError::InUse`:
/// a server runs on it), changing nothing.
pub fn repair(dir: &Path) -> Result<RepairReport, RecoveryError> {
    repair_with(&FsStorage, dir)
}

/// `repair` through any storage.
pub fn repair_with(storage: &dyn Storage, dir: &Path) -> Result<RepairReport, RecoveryError> {
    let mut report = RepairReport {
        dir: dir.to_path_buf(),
        cut: None,
        discarded_segments: Vec::new(),
        version_floor: None,
    };
    // Held to the end of the repair: a server that started meanwhile would
    // replay the log while it is being cut (see `lock`).
    let _lock = match storage.lock_dir(dir) {
        Ok(l) => l,
        // No directory yet: nothing to repair (and nothing is created).
        Err(e) if e.is_not_found() => return Ok(report),
        Err(e) => return Err(e.into()),
    };
    let survey = match survey(storage, dir) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(RecoveryError::Io(IoError::new("reading the log", e))),
    };
    let floor = read_floor(storage, dir)?;
    let Some(cut) = survey.plan(storage, dir, true)? else {
        return Ok(report);
    };
    let done = make_cut(storage, dir, &survey.segments, &cut, floor)?;
    report.cut = Some(done.tail);
    report.discarded_segments = done.discarded;
    report.version_floor = done.floor;
    Ok(report)
}
