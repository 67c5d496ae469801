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
//!    tokens) and TTLs. A Clear record empties the tree.
//! 4. The first damaged record (torn, bad checksum, version not above the
//!    previous one) ends the log. If a crash can have left it (a torn tail:
//!    `cut`'s module documentation says exactly when), its segment is cut
//!    there. Otherwise it is corruption: recovery refuses
//!    (`RecoveryError::CorruptLog`) and changes nothing, unless
//!    `truncate_corrupt` asks for the cut, which then keeps a copy of the
//!    segment and sets later segments aside as `.discarded`. A whole record
//!    of a kind this version does not know is not damage (a newer combkv
//!    wrote it): recovery refuses (`Error::Corrupt`) and changes nothing.
//! 5. The clock restarts above every version seen (checkpoint, records,
//!    segment start versions) and above the version floor: a cut that drops
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
use super::error::{CheckpointError, IoError, ItemRefused, RecordRefused, RecoveryError};
use super::file::Storage;
use super::record::{CkptItem, Record};
use super::segments::{SegmentScan, list_segments, read_all, scan_segment};
use super::wal::{Existing, SegmentMeta};
use super::{LoadedCheckpoint, RecoveryProgress, RecoveryReport};
use crate::config::Geometry;
use crate::tree::Tree;
use crate::tree::load::BulkLoader;
use crate::tree::write::{WriteMode, WriteOp};

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

/// Loads the newest valid checkpoint chain into a fresh tree: a base,
/// newest first, merged as it streams with the delta runs that follow it
/// (`compact::load_chain`). Returns the tree and the version it reached.
fn load_checkpoint(
    g: &Geometry,
    max_value_len: usize,
    storage: &dyn Storage,
    dir: &Path,
    report: &mut RecoveryReport,
    loaded: &mut LoadedChain,
    progress: Option<&RecoveryProgress>,
) -> Result<(Tree, u64), RecoveryError> {
    let deltas = delta::list(storage, dir).map_err(io("listing the data directory"))?;
    for (version, path) in
        checkpoint::list(storage, dir).map_err(io("listing the data directory"))?
    {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let chain = compact::load_chain(
            storage,
            version,
            &deltas,
            max_value_len,
            &mut report.skipped_checkpoints,
        );
        let mut loader = BulkLoader::new(g);
        let mut merge = chain.overlay.merge();
        let mut items = 0u64;
        let mut push = |it: &CkptItem<'_>| {
            items += 1;
            if let Some(p) = progress {
                p.add((it.key.len() + it.value.len()) as u64);
            }
            loader
                .push(it.key, it.value, it.version, it.expiry, it.client_flags)
                .map_err(ItemRefused::from)
        };
        let read = checkpoint::read(storage, &path, |it| {
            compact::check_item(it, version, max_value_len)?;
            merge.base(it, &mut push)
        });
        let read = read.and_then(|r| {
            merge
                .finish(&mut push)
                .map_err(|refused| CheckpointError::Item {
                    index: r.1,
                    refused,
                })?;
            Ok(r)
        });
        match read {
            Ok((v, _)) if v == version => {
                let (tree, max_item_version) = loader.finish();
                report.checkpoint = Some(LoadedCheckpoint {
                    file: name,
                    version: chain.end,
                    items,
                    deltas: chain.used.iter().map(|d| d.name()).collect(),
                });
                debug_assert!(max_item_version <= chain.end);
                loaded.base = Some((version, storage.len(&path).unwrap_or(0)));
                loaded.deltas = chain
                    .used
                    .iter()
                    .map(|d| (d.from, d.to, storage.len(&d.path).unwrap_or(0)))
                    .collect();
                return Ok((tree, chain.end));
            }
            Ok((v, _)) => report.skipped_checkpoints.push((
                name,
                CheckpointError::VersionMismatch { header: v }.to_string(),
            )),
            Err(why) => report.skipped_checkpoints.push((name, why.to_string())),
        }
    }
    Ok((Tree::new(*g), 0))
}

/// Recovers the store in `dir`. `truncate_corrupt`: cut a corrupt log
/// rather than refuse it (rule 4).
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
    let mut chain = LoadedChain::default();
    let deletes = DeleteLog::default();
    let (mut tree, ckpt_version) = load_checkpoint(
        g,
        max_value_len,
        storage,
        dir,
        &mut report,
        &mut chain,
        progress,
    )?;
    report.load_time = started.elapsed();
    let started = Instant::now();

    let floor = cut::read_floor(storage, dir)?;
    let survey = cut::survey(storage, dir).map_err(io("reading the log"))?;
    // Refusals come first: nothing is changed before the plan holds.
    let plan = survey.plan(storage, dir, truncate_corrupt)?;
    let segments = &survey.segments;
    let mut kept = Vec::new();
    let mut floor = floor;
    let mut max_version = ckpt_version;
    let mut last = 0u64;
    for (i, (seq, path)) in segments.iter().enumerate() {
        let name = name_of(path);
        let bytes = read_all(storage, path).map_err(io(&name))?;
        let stop = GroupCut::stop_in(survey.group, i);
        let replay = Replay {
            g,
            max_value_len,
            after: ckpt_version,
            cleared: std::cell::Cell::new(false),
            deletes: &deletes,
        };
        let scan = replay.segment(&mut tree, *seq, &name, &bytes, last, stop, &mut report)?;
        chain.needs_full |= replay.cleared.get();
        let has_header = scan.damage.as_ref().is_none_or(|d| d.0 > 0);
        if i == 0 && has_header && scan.start_version > ckpt_version {
            return Err(RecoveryError::MissingRecords {
                segment: name,
                log_start: scan.start_version,
                checkpoint: ckpt_version,
            });
        }
        max_version = max_version.max(scan.start_version);
        if let Some(v) = scan.last_version {
            last = v;
            max_version = max_version.max(v);
        }
        report.segments_replayed += 1;
        if let Some(p) = progress {
            p.add(bytes.len() as u64);
        }
        let meta = SegmentMeta {
            seq: *seq,
            start_version: scan.start_version,
            bytes: scan.valid_bytes,
        };
        if let Some(c) = plan.as_ref().filter(|c| c.segment == i) {
            debug_assert_eq!(scan.damage.map(|d| d.0), Some(c.offset), "{name}");
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
    tree.reset_clock(max_version);
    report.max_version = max_version.max(floor);
    report.replay_time = started.elapsed();
    Ok(Recovered {
        tree,
        log: Existing {
            segments: kept,
            floor,
            deletes: std::sync::Arc::new(deletes),
        },
        report,
        chain,
    })
}

/// How records are replayed: above version `after` (the checkpoint's),
/// within the limits of geometry `g` and `max_value_len`.
struct Replay<'g> {
    g: &'g Geometry,
    max_value_len: usize,
    after: u64,
    /// Set once a CLEAR record is applied.
    cleared: std::cell::Cell<bool>,
    /// The keys of the deletes applied.
    deletes: &'g DeleteLog,
}

impl Replay<'_> {
    /// Replays segment `seq` (named `name`, bytes `bytes`) into `tree`, up
    /// to the first damage or `stop`; `last` is the version of the record
    /// before it. Err if a valid record cannot be applied.
    #[expect(
        clippy::too_many_arguments,
        reason = "a segment, where it starts and stops, and what it goes into"
    )]
    fn segment(
        &self,
        tree: &mut Tree,
        seq: u64,
        name: &str,
        bytes: &[u8],
        last: u64,
        stop: Option<(u64, u64)>,
        report: &mut RecoveryReport,
    ) -> Result<SegmentScan, RecoveryError> {
        let mut apply_err = None;
        let scan = scan_segment(seq, bytes, last, stop, |_, rec| {
            if apply_err.is_some() {
                return;
            }
            if rec.version() <= self.after {
                report.records_skipped += 1;
                return;
            }
            match *rec {
                Record::Clear { version } => {
                    self.cleared.set(true);
                    self.deletes.lose_upto(version);
                }
                Record::Delete { version, key } => self.deletes.record(version, key),
                _ => {}
            }
            if let Err(e) = apply(tree, self.g, self.max_value_len, rec) {
                apply_err = Some((rec.version(), e));
            }
            report.records_replayed += 1;
        });
        match apply_err {
            Some((version, refused)) => Err(RecoveryError::BadRecord {
                segment: name.to_string(),
                version,
                refused,
            }),
            None => Ok(scan),
        }
    }
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

/// Applies one record with its own version.
fn apply(
    tree: &mut Tree,
    g: &Geometry,
    max_value_len: usize,
    rec: &Record<'_>,
) -> Result<(), RecordRefused> {
    let v = rec.version();
    let mode = WriteMode {
        now: None,
        logged: false,
    };
    let check_key = |key: &[u8]| {
        if key.is_empty() || key.len() > g.max_key_len {
            Err(RecordRefused::KeyLength {
                len: key.len(),
                max: g.max_key_len,
            })
        } else {
            Ok(())
        }
    };
    match *rec {
        Record::Put {
            key,
            value,
            expiry,
            client_flags,
            ..
        } => {
            check_key(key)?;
            if value.len() > max_value_len {
                return Err(RecordRefused::ValueTooLarge { len: value.len() });
            }
            tree.reset_clock(v - 1);
            let w = tree.write(key, mode, |_| {
                (
                    WriteOp::Put {
                        value: std::borrow::Cow::Borrowed(value),
                        expiry,
                        flags: client_flags,
                    },
                    (),
                )
            });
            debug_assert_eq!(w.version, Some(v), "replay keeps the record's version");
        }
        Record::Delete { key, .. } => {
            check_key(key)?;
            tree.reset_clock(v - 1);
            let w = tree.write(key, mode, |_| (WriteOp::Delete, ()));
            debug_assert!(w.version.is_none_or(|got| got == v));
        }
        Record::Clear { .. } => {
            *tree = Tree::new(*g);
            tree.reset_clock(v);
        }
        // Markers only: by rule 6 every group replayed is whole. The next
        // record sets the clock to its own version.
        Record::GroupBegin { .. } | Record::GroupEnd { .. } => {}
    }
    Ok(())
}
