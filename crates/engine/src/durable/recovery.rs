//! Recovery: the newest valid checkpoint is bulk loaded, then the log is
//! replayed from it in version order.
//!
//! Rules (docs/design.md, Durability):
//! 1. Checkpoints are tried newest first; one that fails any check (header,
//!    block checksum, item order, footer, item count) is skipped and
//!    reported, and the next older one is tried. None valid: start empty.
//! 2. The log must reach back to the loaded version: the first segment's
//!    start version is at most the checkpoint version, else records are
//!    missing and recovery refuses (`Error::Corrupt`).
//! 3. Records at or below the checkpoint version are skipped; later ones are
//!    applied with their own versions, so items keep their versions (CAS
//!    tokens) and TTLs. A Clear record empties the tree. They are applied
//!    as a bulk load (`replay`): sorted by key, each key's last merged into
//!    the checkpoint chain's stream, one pass for both.
//! 4. The first damaged record (torn, bad checksum, version not above the
//!    previous one) ends the log. If a crash can have left it (a torn tail:
//!    `cut`'s module documentation says exactly when), its segment is cut
//!    there. Otherwise it is corruption: recovery refuses
//!    (`RecoveryError::CorruptLog`) and changes nothing, unless
//!    `truncate_corrupt` asks for the cut, which then keeps a copy of the
//!    segment and sets later segments aside as `.discarded`. A whole record
//!    of a kind this version does not know is not damage (a newer combkv
//!    wrote it): recovery refuses (`Error::Corrupt`) and changes nothing.
//! 5. The clock restarts above every version seen (checkpoint, its items,
//!    records, segment start versions) and above the version floor: a cut that drops
//!    well-formed records first writes the highest version they carry to
//!    the `version-floor` file, and every later recovery honours it.
//! 6. An atomic group (MSET) whose GROUP_BEGIN has no GROUP_END in the
//!    valid log was never acknowledged, nor (with `Always`) was anything
//!    logged after its begin: the read version stays below the group's
//!    floor until its end is durable. The log is cut at the earliest such
//!    begin, as at a damaged record, so a group comes back whole or not at
//!    all. (`EverySec`/`None` acknowledge before durability; what the cut
//!    drops is within what they may lose.)

use std::path::Path;
use std::time::Instant;

use super::checkpoint;
use super::compact;
use super::cut::{self, GroupCut};
use super::deletes::DeleteLog;
use super::delta;
use super::error::{CheckpointError, IoError, ItemRefused, RecoveryError};
use super::file::Storage;
use super::record::CkptItem;
use super::replay::{LogOps, Merge};
use super::segments::{SegmentScan, list_segments, read_all, scan_segment};
use super::wal::{Existing, SegmentMeta};
use super::{LoadedCheckpoint, RecoveryProgress, RecoveryReport};
use crate::config::Geometry;
use crate::tree::Tree;
use crate::tree::load::LoadError;

/// The recovered tree, the log it continues, and the report.
pub(crate) struct Recovered {
    pub tree: Tree,
    pub log: Existing,
    pub report: RecoveryReport,
    pub chain: LoadedChain,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> RecoveryError + '_ {
    move |e| RecoveryError::Io(IoError::new(what, e))
}

/// The checkpoint chain recovery loaded: the base, the delta runs after
/// it, and whether the next checkpoint must be a full one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LoadedChain {
    /// (version, bytes) of the base.
    pub base: Option<(u64, u64)>,
    /// (from, to, bytes) of each run, in order.
    pub deltas: Vec<(u64, u64, u64)>,
    /// A clear was replayed above the chain's end: the tree's buffers no
    /// longer tell what changed since it, so only a full checkpoint is
    /// correct.
    pub needs_full: bool,
}

/// Loads the newest valid checkpoint chain merged with the log's records
/// above its end (`replay`): a base, newest first, merged as it streams
/// with the delta runs that follow it (`compact::load_chain`) and with the
/// records, in one bulk load. None valid: the records alone. Returns what
/// it built; None if the base it loads is older than the records `log`
/// gathered reach back to.
#[expect(
    clippy::too_many_arguments,
    reason = "the directory, the log read, and what the load reports"
)]
fn load(
    g: &Geometry,
    max_value_len: usize,
    storage: &dyn Storage,
    dir: &Path,
    log: &LogOps<'_>,
    report: &mut RecoveryReport,
    loaded: &mut LoadedChain,
    progress: Option<&RecoveryProgress>,
) -> Result<Option<Loaded>, RecoveryError> {
    let deltas = delta::list(storage, dir).map_err(io("listing the data directory"))?;
    for (version, path) in
        checkpoint::list(storage, dir).map_err(io("listing the data directory"))?
    {
        let name = name_of(&path);
        let chain = compact::load_chain(
            storage,
            version,
            &deltas,
            max_value_len,
            &mut report.skipped_checkpoints,
        );
        if chain.end < log.gathered_above() {
            // A newer base failed, or a damaged run ended this chain
            // short: the records between are needed.
            return Ok(None);
        }
        let mut loader = Merge::new(g, log, chain.end);
        let mut merge = chain.overlay.merge();
        let mut items = 0u64;
        let mut push = |it: &CkptItem<'_>| {
            items += 1;
            if let Some(p) = progress {
                p.add((it.key.len() + it.value.len()) as u64);
            }
            loader
                .base(it.key, it.value, it.version, it.expiry, it.client_flags)
                .map_err(ItemRefused::from)
        };
        // `read` bounds the item versions of a base taken at one version;
        // one taken at advancing versions is bounded by the log alone.
        let read = checkpoint::read(storage, &path, |it| {
            compact::check_value(it, max_value_len)?;
            merge.base(it, &mut push)
        });
        let read = read.and_then(|r| {
            merge
                .finish(&mut push)
                .map_err(|refused| CheckpointError::Item {
                    index: r.items,
                    refused,
                })?;
            Ok(r)
        });
        match read {
            Ok(r) if r.version == version => {
                let (tree, newest, needs_full) = loader.finish().map_err(log_refused)?;
                report.checkpoint = Some(LoadedCheckpoint {
                    file: name,
                    version: chain.end,
                    items,
                    deltas: chain.used.iter().map(|d| d.name()).collect(),
                });
                loaded.base = Some((version, storage.len(&path).unwrap_or(0)));
                loaded.deltas = chain
                    .used
                    .iter()
                    .map(|d| (d.from, d.to, storage.len(&d.path).unwrap_or(0)))
                    .collect();
                return Ok(Some(Loaded {
                    tree,
                    end: chain.end,
                    newest,
                    needs_full,
                }));
            }
            Ok(r) => report.skipped_checkpoints.push((
                name,
                CheckpointError::VersionMismatch { header: r.version }.to_string(),
            )),
            Err(why) => report.skipped_checkpoints.push((name, why.to_string())),
        }
    }
    if log.gathered_above() > 0 {
        return Ok(None);
    }
    let (tree, newest, needs_full) = Merge::new(g, log, 0).finish().map_err(log_refused)?;
    Ok(Some(Loaded {
        tree,
        end: 0,
        newest,
        needs_full,
    }))
}

/// What `load` built.
struct Loaded {
    tree: Tree,
    /// The chain's end (0: none).
    end: u64,
    /// The largest item version in the tree.
    newest: u64,
    /// A full checkpoint must follow.
    needs_full: bool,
}

/// The log's records were checked against the limits the loader keeps, and
/// sorted: the loader refusing one is a fault in recovery itself.
fn log_refused(e: LoadError) -> RecoveryError {
    RecoveryError::Io(IoError::new(
        "bulk loading the log",
        std::io::Error::other(e.to_string()),
    ))
}

/// Recovers the store in `dir`. `truncate_corrupt`: cut a corrupt log
/// rather than refuse it (rule 4). The valid log is read and sorted first,
/// then loaded with the checkpoint chain in one pass (`replay`).
pub(crate) fn recover(
    g: &Geometry,
    max_value_len: usize,
    storage: &dyn Storage,
    dir: &Path,
    truncate_corrupt: bool,
    progress: Option<&RecoveryProgress>,
) -> Result<Recovered, RecoveryError> {
    storage
        .create_dir_all(dir)
        .map_err(io("creating the data directory"))?;
    if let Some(p) = progress {
        p.set_total(files_bytes(storage, dir).map_err(io("listing the data directory"))?);
    }
    let mut report = RecoveryReport::default();
    let started = Instant::now();
    let floor = cut::read_floor(storage, dir)?;
    let survey = cut::survey(storage, dir).map_err(io("reading the log"))?;
    // Refusals come first: nothing is changed before the plan holds.
    let plan = survey.plan(storage, dir, truncate_corrupt)?;
    // Segments after a cut are set aside unread.
    let upto = plan
        .as_ref()
        .map_or(survey.segments.len(), |c| c.segment + 1);
    let bytes = survey.segments[..upto]
        .iter()
        .map(|(_, path)| read_all(storage, path).map_err(io(&name_of(path))))
        .collect::<Result<Vec<_>, _>>()?;
    // The records the newest chain holds are only counted; if it does not
    // load as far as its files' names reach, the log is read again from
    // its start.
    let mut above = chain_reach(storage, dir).map_err(io("listing the data directory"))?;
    let mut chain = LoadedChain::default();
    report.replay_time = started.elapsed();
    let (log, scans, loaded) = loop {
        let started = Instant::now();
        let (log, scans) = read_log(g, max_value_len, &survey, &bytes, above, progress);
        report.replay_time += started.elapsed();
        let started = Instant::now();
        report.skipped_checkpoints.clear();
        let loaded = load(
            g,
            max_value_len,
            storage,
            dir,
            &log,
            &mut report,
            &mut chain,
            progress,
        )?;
        report.load_time += started.elapsed();
        match loaded {
            Some(loaded) => break (log, scans, loaded),
            None => above = 0,
        }
    };
    let Loaded {
        tree,
        end: ckpt_version,
        newest,
        needs_full: emptied,
    } = loaded;
    (report.records_skipped, report.records_replayed) = log.split_count(ckpt_version);
    if let Some(&(i, version, ref refused)) = log.refused_above(ckpt_version) {
        return Err(RecoveryError::BadRecord {
            segment: name_of(&survey.segments[i].1),
            version,
            refused: refused.clone(),
        });
    }
    let deletes = replayed_deletes(&log, ckpt_version, &mut chain);
    chain.needs_full |= emptied;
    drop(log);
    drop(bytes);
    let log = cut_and_close(
        storage,
        dir,
        &survey,
        plan,
        &scans,
        ckpt_version,
        floor,
        &mut report,
    )?;
    // Above the items too: a base written at advancing versions holds
    // items above its own version, whose records a cut may have dropped.
    report.max_version = report.max_version.max(newest);
    tree.reset_clock(report.max_version);
    report.max_version = report.max_version.max(log.floor);
    Ok(Recovered {
        tree,
        log: Existing {
            deletes: std::sync::Arc::new(deletes),
            ..log
        },
        report,
        chain,
    })
}

/// The deletes replayed above the chain's end (`end`), for the next delta
/// run, as the write path records them. A replayed clear makes the next
/// checkpoint a full one.
fn replayed_deletes(log: &LogOps<'_>, end: u64, chain: &mut LoadedChain) -> DeleteLog {
    let deletes = DeleteLog::default();
    for (version, key) in log.events_above(end) {
        match key {
            Some(key) => deletes.record(version, key),
            None => {
                // The tree's buffers no longer tell what changed since the
                // chain's end.
                chain.needs_full = true;
                deletes.lose_upto(version);
            }
        }
    }
    deletes
}

/// Scans the read segments (`bytes`, in order) to the first damage or
/// unfinished group, gathering their records above version `above`.
fn read_log<'b>(
    g: &Geometry,
    max_value_len: usize,
    survey: &cut::Survey,
    bytes: &'b [Vec<u8>],
    above: u64,
    progress: Option<&RecoveryProgress>,
) -> (LogOps<'b>, Vec<SegmentScan>) {
    let mut log = LogOps::above(above);
    let mut scans = Vec::with_capacity(bytes.len());
    let mut last = 0u64;
    for (i, ((seq, _), bytes)) in survey.segments.iter().zip(bytes).enumerate() {
        let stop = GroupCut::stop_in(survey.group, i);
        let scan = scan_segment(*seq, bytes, last, stop, |_, rec| {
            log.add(i, rec, g.max_key_len, max_value_len);
        });
        last = scan.last_version.unwrap_or(last);
        if let Some(p) = progress {
            p.add(bytes.len() as u64);
        }
        scans.push(scan);
    }
    log.seal();
    (log, scans)
}

/// Checks that the log reaches back to the checkpoint (rule 2), makes the
/// planned cut, and returns the segments kept. Sets the report's segment
/// count, cut, floor and largest version seen (the floor aside).
#[expect(
    clippy::too_many_arguments,
    reason = "the survey, its plan and scans, and what they are checked against"
)]
fn cut_and_close(
    storage: &dyn Storage,
    dir: &Path,
    survey: &cut::Survey,
    plan: Option<cut::Cut>,
    scans: &[SegmentScan],
    ckpt_version: u64,
    mut floor: u64,
    report: &mut RecoveryReport,
) -> Result<Existing, RecoveryError> {
    let segments = &survey.segments;
    let mut kept = Vec::new();
    let mut max_version = ckpt_version;
    for (i, scan) in scans.iter().enumerate() {
        let name = name_of(&segments[i].1);
        let has_header = scan.damage.as_ref().is_none_or(|d| d.0 > 0);
        if i == 0 && has_header && scan.start_version > ckpt_version {
            return Err(RecoveryError::MissingRecords {
                segment: name,
                log_start: scan.start_version,
                checkpoint: ckpt_version,
            });
        }
        max_version = max_version.max(scan.start_version);
        max_version = max_version.max(scan.last_version.unwrap_or(0));
        report.segments_replayed += 1;
        let meta = SegmentMeta {
            seq: scan.seq,
            start_version: scan.start_version,
            bytes: scan.valid_bytes,
        };
        if let Some(c) = plan.as_ref().filter(|c| c.segment == i) {
            debug_assert_eq!(scan.damage.as_ref().map(|d| d.0), Some(c.offset), "{name}");
            let done = cut::make_cut(storage, dir, segments, c, floor)?;
            if done.kept {
                kept.push(meta);
            }
            floor = floor.max(done.floor.unwrap_or(0));
            report.tail_cut = Some(done.tail);
            report.discarded_segments = done.discarded;
            break;
        }
        debug_assert!(scan.damage.is_none(), "{name}: damage the survey missed");
        kept.push(meta);
    }
    if floor > 0 {
        report.version_floor = Some(floor);
    }
    report.max_version = max_version;
    Ok(Existing {
        segments: kept,
        floor,
        deletes: Default::default(),
    })
}

/// The version the newest checkpoint chain reaches by its files' names:
/// the newest base's, then each run's that starts where the chain has
/// reached, the furthest first (as `compact::load_chain` picks); 0 without
/// a base. Recovery gathers the log above it.
fn chain_reach(storage: &dyn Storage, dir: &Path) -> std::io::Result<u64> {
    let Some((mut end, _)) = checkpoint::list(storage, dir)?.into_iter().next() else {
        return Ok(0);
    };
    let deltas = delta::list(storage, dir)?;
    while let Some(to) = deltas.iter().filter(|d| d.from == end).map(|d| d.to).max() {
        if to <= end {
            break;
        }
        end = to;
    }
    Ok(end)
}

/// Bytes of the newest checkpoint chain's files and of the log: what
/// recovery will read (older checkpoints are read only if the newest
/// fails, so they are left out).
fn files_bytes(storage: &dyn Storage, dir: &Path) -> std::io::Result<u64> {
    let base = checkpoint::list(storage, dir)?.into_iter().next();
    let mut bytes = 0;
    if let Some((version, path)) = base {
        bytes += storage.len(&path).unwrap_or(0);
        for d in delta::list(storage, dir)? {
            if d.from >= version {
                bytes += storage.len(&d.path).unwrap_or(0);
            }
        }
    }
    for (_, path) in list_segments(storage, dir)? {
        bytes += storage.len(&path).unwrap_or(0);
    }
    Ok(bytes)
}

/// A file's name, for reports.
fn name_of(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
