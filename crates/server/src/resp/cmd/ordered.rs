//! combkv's ordered and versioned reads (`docs/protocol.md`): RANGE FLOOR CEIL,
//! SNAPSHOT CREATE/RELEASE/LIST, GETAT, RANGEAT.

use std::ops::Bound;
use std::time::Duration;

use combkv::op::ScanWhat;
use combkv::{ItemView, Range, SnapshotId};

use super::{ArgList, Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::reply::Reply;

/// A parsed RANGE: the engine range and the reply shape.
#[derive(Debug, Clone)]
pub(crate) struct RangeSpec {
    pub range: Range,
    pub keys_only: bool,
    pub with_versions: bool,
    /// The bounds admit no key (`+` as start, `-` as end, or an empty
    /// inclusive end): the reply is empty without reading anything.
    pub empty: bool,
}

impl RangeSpec {
    /// A spec that holds no buffers (a slot to parse into).
    pub(crate) fn none() -> RangeSpec {
        RangeSpec {
            range: Range::all(),
            keys_only: false,
            with_versions: false,
            empty: false,
        }
    }

    /// Bound keys within the key-length limit (the engine refuses longer).
    pub(crate) fn valid_keys(&self, max_key: usize) -> bool {
        [&self.range.start, &self.range.end]
            .iter()
            .all(|b| match b {
                Bound::Included(k) | Bound::Excluded(k) => k.len() <= max_key,
                Bound::Unbounded => true,
            })
            && !self.empty
    }
}

fn bad_bound() -> CmdError {
    CmdError::err("min or max not valid string range item")
}

enum Lex {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

/// Reads a bound, copying its key into `buf` (a buffer to reuse).
fn lex(b: &[u8], mut buf: Vec<u8>) -> Result<Lex, CmdError> {
    let mut key = |b: &[u8]| {
        buf.clear();
        buf.extend_from_slice(b);
        std::mem::take(&mut buf)
    };
    match b.first() {
        Some(b'-') if b.len() == 1 => Ok(Lex::Min),
        Some(b'+') if b.len() == 1 => Ok(Lex::Max),
        Some(b'[') => Ok(Lex::Incl(key(&b[1..]))),
        Some(b'(') => Ok(Lex::Excl(key(&b[1..]))),
        _ => Err(bad_bound()),
    }
}

/// The key buffer of a bound, to reuse.
fn into_buf(b: Bound<Vec<u8>>) -> Vec<u8> {
    match b {
        Bound::Included(v) | Bound::Excluded(v) => v,
        Bound::Unbounded => Vec::new(),
    }
}

/// A bound longer than the longest key, cut to `max_key` bytes (`T`) with
/// the same meaning. No stored key is longer than `T`, so a key `k` is
/// `>= B` (or `> B`) exactly when `k > T`, and `<= B` (or `< B`) exactly
/// when `k <= T`. A FLOOR start stays inclusive: the greatest key `<= B`
/// is the greatest key `<= T`.
fn clamp(k: Vec<u8>, is_start: bool, floor: bool, max_key: usize) -> Bound<Vec<u8>> {
    let mut t = k;
    t.truncate(max_key);
    match (is_start, floor) {
        (true, true) => Bound::Included(t),
        (true, false) => Bound::Excluded(t),
        (false, _) => Bound::Included(t),
    }
}

/// Parses `start end [LIMIT count] [REV] [FLOOR] [KEYSONLY] [WITHVERSIONS]`.
/// Bounds longer than `max_key` are valid (any string is a bound) and are
/// cut to an equivalent one the engine accepts.
pub(crate) fn parse_range(args: &[&[u8]], max_key: usize) -> Result<RangeSpec, CmdError> {
    let mut spec = RangeSpec::none();
    parse_range_into(args, 0, max_key, &mut spec)?;
    Ok(spec)
}

/// `parse_range` of `args[from..]` into `spec` (one done with), copying
/// the bounds into its key buffers rather than allocating: pipelined
/// RANGEs reuse them. On an error `spec` holds no range worth reading.
pub(crate) fn parse_range_into<'a>(
    args: impl ArgList<'a>,
    from: usize,
    max_key: usize,
    spec: &mut RangeSpec,
) -> Result<(), CmdError> {
    let b0 = into_buf(std::mem::replace(&mut spec.range.start, Bound::Unbounded));
    let b1 = into_buf(std::mem::replace(&mut spec.range.end, Bound::Unbounded));
    let (start, end) = (lex(args.get(from), b0)?, lex(args.get(from + 1), b1)?);
    spec.range.limit = None;
    spec.range.reverse = false;
    spec.keys_only = false;
    spec.with_versions = false;
    spec.empty = false;
    let mut floor = false;
    let mut i = from + 2;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "limit") {
            if i + 1 >= args.len() {
                return Err(CmdError::Syntax);
            }
            let n = parse_i64(args.get(i + 1)).ok_or(CmdError::NotInteger)?;
            // A negative count means no limit, as in ZRANGEBYLEX.
            spec.range.limit = (n >= 0).then_some(n as usize);
            i += 1;
        } else if eq_ic(a, "rev") {
            spec.range.reverse = true;
        } else if eq_ic(a, "floor") {
            floor = true;
        } else if eq_ic(a, "keysonly") {
            spec.keys_only = true;
        } else if eq_ic(a, "withversions") {
            spec.with_versions = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if floor && !matches!(start, Lex::Incl(_)) {
        return Err(CmdError::err("FLOOR needs an inclusive start"));
    }
    spec.range.floor_start = floor;
    spec.range.start = match start {
        Lex::Min => Bound::Unbounded,
        Lex::Max => {
            spec.empty = true;
            Bound::Unbounded
        }
        // Keys are never empty: `[` and `(` with no key start before them all.
        Lex::Incl(k) | Lex::Excl(k) if k.is_empty() => Bound::Unbounded,
        Lex::Incl(k) | Lex::Excl(k) if k.len() > max_key => clamp(k, true, floor, max_key),
        Lex::Incl(k) => Bound::Included(k),
        Lex::Excl(k) => Bound::Excluded(k),
    };
    spec.range.end = match end {
        Lex::Max => Bound::Unbounded,
        Lex::Min => {
            spec.empty = true;
            Bound::Unbounded
        }
        Lex::Incl(k) | Lex::Excl(k) if k.is_empty() => {
            spec.empty = true;
            Bound::Unbounded
        }
        Lex::Incl(k) | Lex::Excl(k) if k.len() > max_key => clamp(k, false, floor, max_key),
        Lex::Incl(k) => Bound::Included(k),
        Lex::Excl(k) => Bound::Excluded(k),
    };
    if spec.range.limit == Some(0) {
        spec.empty = true;
    }
    Ok(())
}

fn too_big() -> CmdError {
    CmdError::err("range reply exceeds max-reply-bytes; use LIMIT")
}

/// Reply bytes of one item, an upper bound.
fn item_bytes(spec: &RangeSpec, it: &ItemView<'_>) -> usize {
    let mut n = it.key.len() + 16;
    if !spec.keys_only {
        n += it.value.len() + 16;
    }
    if spec.with_versions {
        n += 24;
    }
    n
}

fn write_item(r: &mut Reply<'_>, spec: &RangeSpec, key: &[u8], value: &[u8], version: u64) {
    r.bulk(key);
    if !spec.keys_only {
        r.bulk(value);
    }
    if spec.with_versions {
        r.int(version as i64);
    }
}

fn per_item(spec: &RangeSpec) -> usize {
    1 + (!spec.keys_only) as usize + spec.with_versions as usize
}

/// Writes a RANGE reply from already-read items (the batch path), or the
/// reply-limit error if it would be too large.
pub(crate) fn reply_items(
    r: &mut Reply<'_>,
    spec: &RangeSpec,
    res: &combkv::readexec::BatchResults,
    i: usize,
    max_reply: usize,
) {
    let items = || res.items(i);
    if spec.empty {
        r.array(0);
        return;
    }
    let total: usize = items().map(|it| item_bytes(spec, &it)).sum();
    if total > max_reply {
        r.error(&too_big().line());
        return;
    }
    r.array(items().len() * per_item(spec));
    for it in items() {
        write_item(r, spec, it.key, it.value, it.version.get());
    }
}

/// Runs a RANGE (at a snapshot if `at`) with the reply limit checked while
/// the items are gathered.
fn range_generic(cx: &mut Ctx<'_, '_>, spec: &RangeSpec, at: Option<SnapshotId>) -> CmdResult {
    // A user with key patterns may read the range only if one of them
    // covers all of it (a FLOOR start reaches below the start key).
    let bound = |b: &Bound<Vec<u8>>| match b {
        Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
        Bound::Unbounded => None,
    };
    let start = (!spec.range.floor_start)
        .then(|| bound(&spec.range.start))
        .flatten();
    let end = bound(&spec.range.end);
    super::acl::check_range(cx, start.as_deref(), end.as_deref())?;
    if spec.empty {
        if let Some(id) = at {
            // An unknown snapshot is still an error.
            cx.keyspace().get_at(id, b"\0")?;
        }
        cx.r.array(0);
        return Ok(());
    }
    let max_reply = cx.shared.live.max_reply_bytes();
    let mut bytes = 0usize;
    let mut over = false;
    let mut items: Vec<(Vec<u8>, Vec<u8>, u64)> = Vec::new();
    let visit = |it: ItemView<'_>| {
        bytes += item_bytes(spec, &it);
        if bytes > max_reply {
            over = true;
            return false;
        }
        let value = if spec.keys_only {
            Vec::new()
        } else {
            it.value.to_vec()
        };
        items.push((it.key.to_vec(), value, it.version.get()));
        true
    };
    match at {
        None => {
            let what = if spec.keys_only {
                ScanWhat::Keys
            } else {
                ScanWhat::Items
            };
            cx.scan_with(&spec.range, what, max_reply as u64, visit)?;
        }
        Some(id) => {
            cx.keyspace().scan_at(id, &spec.range, visit)?;
        }
    }
    if over {
        return Err(too_big());
    }
    cx.r.array(items.len() * per_item(spec));
    for (k, v, ver) in items {
        write_item(&mut cx.r, spec, &k, &v, ver);
    }
    Ok(())
}

pub(super) fn range(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let spec = parse_range(&cx.args[1..], cx.store().max_key_len())?;
    range_generic(cx, &spec, None)
}

/// A snapshot id is the pinned read version: 0 on a store that has not
/// been written yet, so 0 is a valid id.
fn snapshot_id(raw: &[u8]) -> Result<SnapshotId, CmdError> {
    match parse_i64(raw) {
        Some(n) if n >= 0 => Ok(SnapshotId(n as u64)),
        Some(_) => Err(combkv::Error::NoSuchSnapshot.into()),
        None => Err(CmdError::NotInteger),
    }
}

pub(super) fn rangeat(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let id = snapshot_id(cx.args[1])?;
    let spec = parse_range(&cx.args[2..], cx.store().max_key_len())?;
    range_generic(cx, &spec, Some(id))
}

pub(super) fn getat(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let id = snapshot_id(cx.args[1])?;
    match cx.keyspace().get_at(id, cx.args[2])? {
        Some(it) => cx.r.bulk(&it.value),
        None => cx.r.null(),
    }
    Ok(())
}

fn pair(cx: &mut Ctx<'_, '_>, item: Option<combkv::Item>) {
    match item {
        Some(it) => {
            cx.r.array(2);
            cx.r.bulk(&it.key);
            cx.r.bulk(&it.value);
        }
        None => cx.r.null_array(),
    }
}

pub(super) fn floor(cx: &mut Ctx<'_, '_>) -> CmdResult {
    // The answer may be any key below this one.
    super::acl::check_range(cx, None, Some(cx.args[1]))?;
    let it = match cx.txn {
        None => cx.keyspace().floor(cx.args[1])?,
        Some(_) => {
            let key = Bound::Included(cx.args[1].to_vec());
            first_in(cx, Range::new(Bound::Unbounded, key).reversed())?
        }
    };
    pair(cx, it);
    Ok(())
}

pub(super) fn ceil(cx: &mut Ctx<'_, '_>) -> CmdResult {
    // The answer may be any key above this one.
    super::acl::check_range(cx, Some(cx.args[1]), None)?;
    let it = match cx.txn {
        None => cx.keyspace().ceil(cx.args[1])?,
        Some(_) => {
            let key = Bound::Included(cx.args[1].to_vec());
            first_in(cx, Range::new(key, Bound::Unbounded))?
        }
    };
    pair(cx, it);
    Ok(())
}

/// FLOOR and CEIL inside EXEC: the first item of a range, as the
/// transaction's earlier ops left it.
fn first_in(cx: &Ctx<'_, '_>, range: Range) -> Result<Option<combkv::Item>, CmdError> {
    let mut first = None;
    cx.scan_with(&range.with_limit(1), ScanWhat::Items, u64::MAX, |it| {
        first = Some(it.to_item());
        false
    })?;
    Ok(first)
}

/// Default snapshot lifetime (`docs/protocol.md`).
const SNAPSHOT_DEFAULT_SECS: u64 = 60;

pub(super) fn snapshot(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    if eq_ic(sub, "create") {
        let secs = match &cx.args[2..] {
            [] => SNAPSHOT_DEFAULT_SECS,
            [ex, n] if eq_ic(ex, "ex") => match parse_i64(n) {
                Some(n) if n > 0 => n as u64,
                Some(_) => return Err(CmdError::err("invalid expire time in 'snapshot' command")),
                None => return Err(CmdError::NotInteger),
            },
            _ => return Err(CmdError::Syntax),
        };
        let id = cx.keyspace().snapshot(Duration::from_secs(secs))?;
        cx.r.int(id.0 as i64);
    } else if eq_ic(sub, "release") {
        let [_, _, id] = cx.args else {
            return Err(CmdError::Arity("snapshot|release".into()));
        };
        let id = match parse_i64(id) {
            Some(n) if n >= 0 => SnapshotId(n as u64),
            Some(_) => {
                cx.r.int(0);
                return Ok(());
            }
            None => return Err(CmdError::NotInteger),
        };
        let released = cx.keyspace().release_snapshot(id);
        cx.r.int(released as i64);
    } else if eq_ic(sub, "list") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("snapshot|list".into()));
        }
        let list = cx.keyspace().list_snapshots();
        cx.r.array(list.len());
        for snap in list {
            cx.r.array(3);
            cx.r.int(snap.id.0 as i64);
            cx.r.int(snap.version.get() as i64);
            cx.r.int(snap.left.as_millis() as i64);
        }
    } else if eq_ic(sub, "help") && cx.args.len() == 2 {
        const HELP: [&str; 8] = [
            "SNAPSHOT <subcommand> [<arg> ...]. Subcommands are:",
            "CREATE [EX <seconds>]",
            "    Pin the current state; returns a new snapshot id (default expiry 60 s).",
            "RELEASE <id>",
            "    End snapshot <id>; returns 1, or 0 if it was not live.",
            "LIST",
            "    Every live snapshot as [id, version, ms until expiry].",
            "HELP",
        ];
        super::help_reply(&mut cx.r, &HELP);
    } else {
        return Err(CmdError::err(format!(
            "unknown subcommand '{}'. Try SNAPSHOT HELP.",
            String::from_utf8_lossy(sub)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<RangeSpec, CmdError> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        parse_range(&a, 460)
    }

    #[test]
    fn bounds_and_options() {
        let s = p(&["[a", "(c", "LIMIT", "3", "rev"]).unwrap();
        assert_eq!(s.range.start, Bound::Included(b"a".to_vec()));
        assert_eq!(s.range.end, Bound::Excluded(b"c".to_vec()));
        assert_eq!(s.range.limit, Some(3));
        assert!(s.range.reverse && !s.empty);
        assert!(p(&["-", "+"]).unwrap().range.limit.is_none());
        assert!(p(&["+", "+"]).unwrap().empty);
        assert!(p(&["-", "-"]).unwrap().empty);
        assert!(p(&["-", "+", "LIMIT", "0"]).unwrap().empty);
        assert_eq!(p(&["-", "+", "LIMIT", "-1"]).unwrap().range.limit, None);
        assert_eq!(p(&["a", "+"]).unwrap_err(), bad_bound());
        assert_eq!(p(&["[a", "+", "LIMIT"]).unwrap_err(), CmdError::Syntax);
        assert_eq!(
            p(&["[a", "+", "LIMIT", "x"]).unwrap_err(),
            CmdError::NotInteger
        );
        assert_eq!(
            p(&["(a", "+", "FLOOR"]).unwrap_err().line(),
            "ERR FLOOR needs an inclusive start"
        );
        assert!(p(&["[a", "+", "FLOOR"]).unwrap().range.floor_start);
        assert_eq!(p(&["[a", "+", "BOGUS"]).unwrap_err(), CmdError::Syntax);
    }

    #[test]
    fn bounds_longer_than_a_key_are_cut_to_equivalent_ones() {
        let long = "x".repeat(470);
        let cut = b"x".repeat(460);
        let lo = format!("[{long}");
        let hi = format!("({long}");
        let s = p(&[lo.as_str(), hi.as_str()]).unwrap();
        assert_eq!(s.range.start, Bound::Excluded(cut.clone()));
        assert_eq!(s.range.end, Bound::Included(cut.clone()));
        let s = p(&[lo.as_str(), "+", "FLOOR"]).unwrap();
        assert_eq!(s.range.start, Bound::Included(cut));
        assert!(s.valid_keys(460));
    }
}
