//! Delta runs (incremental checkpoints, after the compaction-offload
//! paper's delta runs; `docs/design.md`, "Incremental checkpoints"): what
//! changed between two checkpoint versions, leaf by leaf, in key order.
//!
//! ```text
//! delta-<from, 20 digits>-<to, 20 digits>.delta   (written as .tmp, renamed when complete)
//!   header (32 B)  "CKVDLT01" | u64 to | u64 from | u32 0 | u32 crc(bytes 0..28)
//!   blocks         as in a checkpoint; payload: entries in key order
//!     PUT   (1)    a checkpoint item: the key's item at `to`
//!     DEL   (2)    u16 key_len | key: the key is absent at `to`
//!     RANGE (3)    u16 lo_len | lo | u8 bounded | u16 hi_len | hi: every key in
//!                  [lo, hi) (lo empty: from the first; bounded 0: to the last)
//!                  is absent at `to` unless a PUT of this run names it
//!   footer         as in a checkpoint, counting entries
//! ```
//!
//! Applied in order over the state at `from` (a base checkpoint, or the
//! state an earlier run reached), a run gives the state at `to`. A leaf
//! rewritten since `from` comes as a RANGE and its live items; any other
//! changed leaf as PUTs and DELs of the keys newer than `from`
//! (`Tree::leaf_delta`).

use std::cmp::Ordering as Cmp;
use std::path::{Path, PathBuf};

use super::blocks::{self, BlockFile};
use super::error::{CheckpointError, IoError};
use super::file::Storage;
use super::record::{self, CkptItem, Damage};
use crate::tree::Tree;
use crate::tree::delta::LeafDelta;
use crate::tree::node::{ItemRef, key_cmp};
use crate::types::Now;

pub(crate) const DELTA_MAGIC: &[u8; 8] = b"CKVDLT01";
const PUT: u8 = 1;
const DEL: u8 = 2;
const RANGE: u8 = 3;
/// Leaves visited per epoch pin.
const LEAVES_PER_PIN: usize = 64;

/// `delta-<from>-<to>.delta`
pub(crate) fn delta_name(from: u64, to: u64) -> String {
    format!("delta-{from:020}-{to:020}.delta")
}

/// (from, to) of a delta file name.
pub(crate) fn parse_delta_name(name: &str) -> Option<(u64, u64)> {
    let mid = name.strip_prefix("delta-")?.strip_suffix(".delta")?;
    let (a, b) = mid.split_once('-')?;
    let num = |d: &str| {
        (d.len() == 20 && d.bytes().all(|c| c.is_ascii_digit()))
            .then(|| d.parse().ok())
            .flatten()
    };
    let (from, to) = (num(a)?, num(b)?);
    (from < to).then_some((from, to))
}

/// A delta file in the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeltaFile {
    pub from: u64,
    pub to: u64,
    pub path: PathBuf,
}

impl DeltaFile {
    pub(crate) fn name(&self) -> String {
        delta_name(self.from, self.to)
    }
}

/// Delta files in `dir`, by `from` then `to`.
pub(crate) fn list(storage: &dyn Storage, dir: &Path) -> std::io::Result<Vec<DeltaFile>> {
    let mut out: Vec<DeltaFile> = storage
        .list(dir)?
        .into_iter()
        .filter_map(|n| {
            let (from, to) = parse_delta_name(&n)?;
            Some(DeltaFile {
                from,
                to,
                path: dir.join(n),
            })
        })
        .collect();
    out.sort_by_key(|d| (d.from, d.to));
    Ok(out)
}

/// One entry of a run, borrowed from its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    Put(CkptItem<'a>),
    Del(&'a [u8]),
    Range { lo: &'a [u8], hi: Option<&'a [u8]> },
}

fn encode(out: &mut Vec<u8>, e: &Entry<'_>) {
    match *e {
        Entry::Put(ref it) => {
            out.push(PUT);
            record::encode_ckpt_item(out, it);
        }
        Entry::Del(key) => {
            out.push(DEL);
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
        }
        Entry::Range { lo, hi } => {
            out.push(RANGE);
            out.extend_from_slice(&(lo.len() as u16).to_le_bytes());
            out.extend_from_slice(lo);
            let hi_bytes = hi.unwrap_or_default();
            out.push(u8::from(hi.is_some()));
            out.extend_from_slice(&(hi_bytes.len() as u16).to_le_bytes());
            out.extend_from_slice(hi_bytes);
        }
    }
}

/// The entry at `at` of a payload: (entry, next offset).
fn decode(p: &[u8], at: usize) -> Result<(Entry<'_>, usize), Damage> {
    let bad = |why: &str| Damage::Corrupt(format!("delta entry: {why}"));
    let key_at = |at: usize| -> Result<(&[u8], usize), Damage> {
        let len = record::u16_at(p.get(at..at + 2).ok_or_else(|| bad("short"))?, 0) as usize;
        let key = p.get(at + 2..at + 2 + len).ok_or_else(|| bad("lengths"))?;
        Ok((key, at + 2 + len))
    };
    match p.get(at) {
        Some(&PUT) => {
            let (it, next) = record::decode_ckpt_item(p, at + 1)?;
            Ok((Entry::Put(it), next))
        }
        Some(&DEL) => {
            let (key, next) = key_at(at + 1)?;
            Ok((Entry::Del(key), next))
        }
        Some(&RANGE) => {
            let (lo, next) = key_at(at + 1)?;
            let bounded = *p.get(next).ok_or_else(|| bad("short"))?;
            let (hi, next) = key_at(next + 1)?;
            let hi = match bounded {
                0 if hi.is_empty() => None,
                1 => Some(hi),
                _ => return Err(bad("range bound")),
            };
            Ok((Entry::Range { lo, hi }, next))
        }
        Some(k) => Err(bad(&format!("kind {k}"))),
        None => Err(bad("short")),
    }
}

/// Checks that a run's entries come in the order its writer keeps: keys
/// ascend strictly, ranges are non-empty and do not overlap, a key inside
/// a range is a PUT of it, and a range starts above every key before it.
#[derive(Default)]
struct Order {
    /// The next key must be above `min` (at or above, if `inclusive`);
    /// no bound before the first entry.
    min: Vec<u8>,
    has_min: bool,
    inclusive: bool,
    /// A range is open; `hi` is its high bound unless `unbounded`.
    open: bool,
    unbounded: bool,
    hi: Vec<u8>,
}

impl Order {
    fn above_min(&self, k: &[u8]) -> bool {
        !self.has_min
            || match key_cmp(k, &self.min) {
                Cmp::Greater => true,
                Cmp::Equal => self.inclusive,
                Cmp::Less => false,
            }
    }

    fn set_min(&mut self, k: &[u8], inclusive: bool) {
        self.min.clear();
        self.min.extend_from_slice(k);
        self.has_min = true;
        self.inclusive = inclusive;
    }

    fn check(&mut self, e: &Entry<'_>) -> Result<(), Damage> {
        let bad = |why: &str| Err(Damage::Corrupt(format!("delta order: {why}")));
        match *e {
            Entry::Range { lo, hi } => {
                if lo.is_empty() {
                    if self.has_min {
                        return bad("an unbounded range after other entries");
                    }
                } else if !self.above_min(lo) {
                    return bad("a range not above the entry before it");
                }
                if self.open && (self.unbounded || key_cmp(lo, &self.hi) == Cmp::Less) {
                    return bad("overlapping ranges");
                }
                if hi.is_some_and(|h| key_cmp(h, lo) != Cmp::Greater) {
                    return bad("an empty range");
                }
                self.open = true;
                self.unbounded = hi.is_none();
                self.hi.clear();
                self.hi.extend_from_slice(hi.unwrap_or_default());
                self.set_min(lo, true);
                Ok(())
            }
            Entry::Put(CkptItem { key, .. }) | Entry::Del(key) => {
                if key.is_empty() || !self.above_min(key) {
                    return bad("keys not ascending");
                }
                let inside = self.open && (self.unbounded || key_cmp(key, &self.hi) == Cmp::Less);
                if inside && matches!(e, Entry::Del(_)) {
                    return bad("a delete inside a range");
                }
                self.open = inside;
                self.set_min(key, false);
                Ok(())
            }
        }
    }
}

/// What a finished delta wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    pub entries: u64,
    pub bytes: u64,
    /// Leaves reported whole (rewritten since `from`) and by key.
    pub range_leaves: u64,
    pub key_leaves: u64,
    /// DEL entries for recorded deletes.
    pub deletes: u64,
}

/// Writes the run from `from` to `to` (a pinned read version) of `tree`
/// into `dir`, as `.tmp`, synced, renamed and the directory synced.
/// `deleted`: every key deleted at a version in `(from, to]`, sorted, when
/// known (`DeleteLog::between`); then no leaf is written whole.
pub(crate) fn write(
    tree: &Tree,
    storage: &dyn Storage,
    dir: &Path,
    (from, to): (u64, u64),
    deleted: Option<&[Vec<u8>]>,
) -> Result<Written, IoError> {
    let name = delta_name(from, to);
    let tmp = dir.join(format!("{name}.tmp"));
    let result = write_file(tree, storage, &tmp, from, to, deleted)
        .and_then(|w| blocks::publish(storage, dir, &tmp, &name).map(|()| w));
    if result.is_err() {
        let _ = storage.remove(&tmp);
    }
    result
}

fn write_file(
    tree: &Tree,
    storage: &dyn Storage,
    path: &Path,
    from: u64,
    to: u64,
    deleted: Option<&[Vec<u8>]>,
) -> Result<Written, IoError> {
    let mut out = BlockFile::create(storage, path, DELTA_MAGIC, to, from)?;
    let now = Now::lazy();
    let (mut range_leaves, mut key_leaves) = (0, 0);
    let mut dels = Deleted {
        keys: deleted.unwrap_or_default(),
        at: 0,
        written: 0,
    };
    let item = |it: &ItemRef<'static>| {
        Entry::Put(CkptItem {
            version: it.version,
            expiry: it.expiry,
            client_flags: it.cflags,
            key: it.key,
            value: it.value.bytes(),
        })
    };
    // Leaf by leaf from the first: each leaf's high fence is where the
    // next one starts. The epoch is pinned a few dozen leaves at a time
    // (the pinned read version keeps `to`'s buffers between pins), and
    // blocks are written between pins.
    let mut start: Option<Vec<u8>> = Some(Vec::new());
    while let Some(mut key) = start.take() {
        {
            let _guard = tree.pin();
            for _ in 0..LEAVES_PER_PIN {
                let (change, hi) = tree.leaf_delta(&key, to, from, &now, deleted.is_some());
                match change {
                    Some(LeafDelta::Range { lo, hi, items }) => {
                        range_leaves += 1;
                        let lo = lo.unwrap_or_default();
                        out.add(|p| encode(p, &Entry::Range { lo, hi }));
                        for it in &items {
                            out.add(|p| encode(p, &item(it)));
                        }
                    }
                    Some(LeafDelta::Keys(keys)) => {
                        key_leaves += 1;
                        for (k, it) in &keys {
                            dels.below(tree, k, to, &now, &mut out);
                            match it {
                                Some(it) => out.add(|p| encode(p, &item(it))),
                                None => out.add(|p| encode(p, &Entry::Del(k))),
                            }
                        }
                    }
                    None => {}
                }
                // Deleted keys of this leaf after its last changed key.
                dels.below_fence(tree, hi, to, &now, &mut out);
                // The rightmost leaf has no high fence: done.
                let Some(hi) = hi else {
                    key.clear();
                    break;
                };
                key.clear();
                key.extend_from_slice(hi);
            }
        }
        out.write_if_full()?;
        if !key.is_empty() {
            start = Some(key);
        }
    }
    let (entries, bytes) = out.finish()?;
    Ok(Written {
        entries,
        bytes,
        range_leaves,
        key_leaves,
        deletes: dels.written,
    })
}

/// The deleted keys of a run (sorted), written as DEL entries in key order
/// among the leaves' entries, each only if the key is absent at the run's
/// version (a key written again since comes with its leaf's entries).
struct Deleted<'d> {
    keys: &'d [Vec<u8>],
    at: usize,
    written: u64,
}

impl Deleted<'_> {
    /// Writes the deleted keys below `key` (skipping `key` itself, which
    /// its leaf reports).
    fn below(&mut self, tree: &Tree, key: &[u8], to: u64, now: &Now, out: &mut BlockFile) {
        while let Some(d) = self.keys.get(self.at) {
            match key_cmp(d, key) {
                Cmp::Less => self.one(tree, to, now, out),
                Cmp::Equal => {
                    self.at += 1;
                    break;
                }
                Cmp::Greater => break,
            }
        }
    }

    /// Writes the deleted keys below the fence `hi` (None: all the rest).
    fn below_fence(
        &mut self,
        tree: &Tree,
        hi: Option<&[u8]>,
        to: u64,
        now: &Now,
        out: &mut BlockFile,
    ) {
        while let Some(d) = self.keys.get(self.at) {
            if hi.is_some_and(|h| key_cmp(d, h) != Cmp::Less) {
                break;
            }
            self.one(tree, to, now, out);
        }
    }

    /// The next deleted key: a DEL entry if it is absent at `to`.
    fn one(&mut self, tree: &Tree, to: u64, now: &Now, out: &mut BlockFile) {
        let d = &self.keys[self.at];
        self.at += 1;
        if !tree.get_at(d, to).is_some_and(|it| it.is_live(now)) {
            out.add(|p| encode(p, &Entry::Del(d)));
            self.written += 1;
        }
    }
}

/// Reads and verifies the run in `file`, handing each entry to `f` in
/// order. Returns the number of entries. Damage, a header that does not
/// match the name, entries out of order or refused by `f` fail it.
pub(crate) fn read(
    storage: &dyn Storage,
    file: &DeltaFile,
    mut f: impl FnMut(&Entry<'_>) -> Result<(), super::error::ItemRefused>,
) -> Result<u64, CheckpointError> {
    let mut order = Order::default();
    let mut index = 0u64;
    let (header, count) =
        blocks::read_blocks(storage, &file.path, &[DELTA_MAGIC], |_, payload, offset| {
            let block = |damage| CheckpointError::Block { offset, damage };
            let (mut at, mut n) = (0, 0);
            while at < payload.len() {
                let (e, next) = decode(payload, at).map_err(block)?;
                order.check(&e).map_err(block)?;
                f(&e).map_err(|refused| CheckpointError::Item { index, refused })?;
                index += 1;
                n += 1;
                at = next;
            }
            Ok(n)
        })?;
    if (header.b, header.a) != (file.from, file.to) {
        return Err(CheckpointError::VersionMismatch { header: header.a });
    }
    Ok(count)
}
