//! A linearizability checker for combkv histories.
//!
//! It is independent of the engine (it only knows byte strings and `u64`
//! versions), so it is unit-tested on its own with small hand-made histories
//! at the bottom of this file.
//!
//! # What it verifies
//!
//! A history is a set of [`Op`]s, each with an invocation and a response
//! timestamp taken from one global counter (`a.respond < b.invoke` means `a`
//! finished before `b` started), its arguments and its result. Every
//! successful write reports the version it created. The checker uses those
//! versions as the witness order and verifies:
//!
//! 1. successful writes have distinct versions above `base_version`, and their
//!    version order agrees with real time (`w1` responded before `w2` was
//!    invoked ⇒ `v1 < v2`);
//! 2. replaying the successful writes in version order gives the model state
//!    at every version, and each write's outcome agrees with the state just
//!    before its version (a successful insert found the key absent, update,
//!    delete found it present, cas found the expected item version); a write
//!    that returned `None` changed nothing and is checked like a read of the
//!    key's presence;
//! 3. every read (get, get_item, range, floor/ceil as ranges, a failed
//!    conditional write, the creation of a snapshot, `read_version()`)
//!    observed the model state at some version `v` inside its real-time
//!    window (for the last two: returned such a `v`): `v` is at least the
//!    version of every write that responded before the read was invoked, and
//!    below the version of every write invoked after the read responded. Reads
//!    are assigned the smallest such `v` greedily in invocation order, and a
//!    read must not go back before a read that finished before it started
//!    (`r1` responded before `r2` was invoked ⇒ `v1 <= v2`); symmetrically a
//!    write invoked after a read responded must have a version above the
//!    read's. A range result must equal the model's answer exactly: keys,
//!    values, item versions, order, limit, reverse and floor_start;
//! 4. reads through a snapshot (get_at, range_at) equal the model state at
//!    exactly the snapshot's version, whatever happened afterwards; the
//!    creation of the snapshot is a read whose version is the snapshot id;
//! 5. a group (`write_atomically`) is seen whole or not at all: no read is
//!    assigned a version inside the group's span, from its first write
//!    version up to (not including) the end of the span, so any write by
//!    others that took a version in between is seen only with the whole
//!    group; the spans of two groups do not interleave. The span ends at the
//!    group's last write version, or later where the group's deletes that
//!    did not apply need it: they found their keys absent, all at one
//!    version from just before the group's first write on (a group begins
//!    with a put, so every later write of the group runs after the first
//!    took its version) and below the group's real-time bound, and the
//!    smallest such version ends the span. A delete may have seen another
//!    writer's delete whose version is above all of the group's: the group
//!    stands after it, so no read may see the group without it.
//!
//! Passing is a proof that the history is linearizable with this witness:
//! order writes by version, put each read right after the write whose version
//! it was assigned (reads at the same version in invocation order). Every
//! real-time edge is respected by construction of the checks above, and every
//! op returns what the sequential model returns at its place. A group stands
//! at one point of that order: the writes by others with versions inside its
//! span each touch one key, so each goes before or after the group as that
//! key's version order says (before it if the group does not touch the key),
//! and no read sees a state between.
//!
//! # Efficiency
//!
//! The model is persistent: for each key a sorted list of `(version, state)`
//! changes, so "state of key at v" is a binary search. A key read scans only
//! that key's changes inside its window. A range first narrows its candidate
//! versions with the returned values (values are unique per write, so each
//! returned value names the write that produced it: `v` is at least that
//! write's version and below the key's next change), then tries the lower
//! bound and each later version whose write touched a key the range can see,
//! comparing lazily so a wrong candidate is rejected at its first difference.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::ops::Bound;

pub type Key = Vec<u8>;
pub type Value = Vec<u8>;

/// An item as the store returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Key,
    pub value: Value,
    pub version: u64,
}

/// A range query, mirroring `combkv::Range`.
#[derive(Clone, Debug)]
pub struct Query {
    pub start: Bound<Key>,
    pub end: Bound<Key>,
    pub limit: Option<usize>,
    pub reverse: bool,
    pub floor_start: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// Unconditional upsert: always succeeds.
    Put,
    /// Only if absent.
    Insert,
    /// Only if present.
    Update,
    /// Only if present.
    Delete,
    /// Only if the item's version equals `expected` (0: only if absent).
    Cas { expected: u64 },
}

/// One write of an atomic group (`write_atomically`): a put if `value` is
/// `Some`, else a delete; `result` as for [`Action::Write`].
#[derive(Clone, Debug)]
pub struct GroupWrite {
    pub key: Key,
    pub value: Option<Value>,
    pub result: Option<u64>,
}

#[derive(Clone, Debug)]
pub enum Action {
    /// `value` is `None` only for deletes. `result` is the version created,
    /// `None` if the write did not apply (always `Some` for puts).
    Write {
        kind: WriteKind,
        key: Key,
        value: Option<Value>,
        result: Option<u64>,
    },
    Get {
        key: Key,
        result: Option<Value>,
    },
    GetItem {
        key: Key,
        result: Option<Entry>,
    },
    Range {
        query: Query,
        result: Vec<Entry>,
    },
    /// `write_atomically`: puts and deletes of distinct keys, at least one
    /// of which applied, that no read may see in part.
    Group {
        writes: Vec<GroupWrite>,
    },
    /// Creation of a snapshot; `id` is the pinned version.
    Snapshot {
        id: u64,
    },
    /// `read_version()`: checked like the creation of a snapshot (the
    /// version must lie in the op's window and respect read order).
    ReadVersion {
        version: u64,
    },
    GetAt {
        snap: u64,
        key: Key,
        result: Option<Entry>,
    },
    RangeAt {
        snap: u64,
        query: Query,
        result: Vec<Entry>,
    },
}

#[derive(Clone, Debug)]
pub struct Op {
    pub thread: usize,
    pub invoke: u64,
    pub respond: u64,
    pub action: Action,
}

/// Counts of what was checked.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub ops: usize,
    pub writes_applied: usize,
    pub writes_not_applied: usize,
    pub gets: usize,
    pub ranges: usize,
    pub range_items: usize,
    /// Snapshot creations and `read_version()` calls.
    pub snapshots: usize,
    pub snapshot_reads: usize,
    /// Range candidate versions compared beyond the first.
    pub extra_range_candidates: usize,
    /// Reads (of any kind, snapshot creation included) whose real-time
    /// window contained at least one write: they had a choice of versions.
    pub concurrent_reads: usize,
    /// Groups with at least one applied write.
    pub groups: usize,
}

/// The outcome of a passing check.
#[derive(Clone, Debug)]
pub struct Report {
    /// Model state after every write: key -> (value, item version).
    pub final_state: BTreeMap<Key, (Value, u64)>,
    /// Highest write version (or `base_version` if no write applied).
    pub max_version: u64,
    pub stats: Stats,
}

/// At most this many violations are described in detail.
const MAX_REPORTED: usize = 20;

/// Checks `history` against the sequential model, starting from `initial`
/// (key -> (value, item version)), the quiescent state at `base_version`.
/// Every op of the history must have started after that state was reached.
/// Values written by the history must be unique and distinct from the
/// initial values (so a read identifies the write it saw).
pub fn check(
    initial: &BTreeMap<Key, (Value, u64)>,
    base_version: u64,
    history: &[Op],
) -> Result<Report, Vec<String>> {
    let mut v = Violations::default();
    let mut model = Model::build(initial, base_version, history, &mut v);
    let rt = RealTime::of(&model, history);
    model.spans = model.group_spans(history, &rt, &mut v);
    let stats = model.check_all(history, base_version, &rt, &mut v);
    if v.count > 0 {
        let mut out = v.list;
        if v.count > out.len() {
            out.push(format!("... and {} more violations", v.count - out.len()));
        }
        return Err(out);
    }
    let max_version = model.writes.last().map_or(base_version, |w| w.version);
    let mut final_state = BTreeMap::new();
    for (k, h) in &model.keys {
        if let Some(c) = h.at(u64::MAX) {
            final_state.insert(k.to_vec(), (c.value.to_vec(), c.item_version));
        }
    }
    Ok(Report {
        final_state,
        max_version,
        stats,
    })
}

#[derive(Default)]
struct Violations {
    count: usize,
    list: Vec<String>,
}

impl Violations {
    fn push(&mut self, msg: impl FnOnce() -> String) {
        self.count += 1;
        if self.list.len() < MAX_REPORTED {
            self.list.push(msg());
        }
    }
}

/// The value of a key at some version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cell<'a> {
    value: &'a [u8],
    item_version: u64,
}

type State<'a> = Option<Cell<'a>>;

type Bounds<'q> = (Bound<&'q [u8]>, Bound<&'q [u8]>);

/// A key's changes, sorted by version. Initial state sits at version 0.
#[derive(Default)]
struct KeyHist<'a> {
    changes: Vec<(u64, State<'a>)>,
}

impl<'a> KeyHist<'a> {
    /// Number of changes at versions <= v.
    fn count_at(&self, v: u64) -> usize {
        self.changes.partition_point(|(ver, _)| *ver <= v)
    }

    fn at(&self, v: u64) -> State<'a> {
        match self.count_at(v) {
            0 => None,
            i => self.changes[i - 1].1,
        }
    }

    /// The version of the first change after `v` (`u64::MAX` if none).
    fn next_change_after(&self, v: u64) -> u64 {
        self.changes
            .get(self.count_at(v))
            .map_or(u64::MAX, |(ver, _)| *ver)
    }
}

struct WriteRec<'a> {
    version: u64,
    key: &'a [u8],
    kind: WriteKind,
    /// What the write stored (`None`: a delete).
    value: Option<&'a [u8]>,
    op: usize,
}

/// Applied writes by invocation, with suffix minima of their versions: the
/// upper bound of an op's window (no version at or above the first write
/// invoked after the op responded).
struct RealTime {
    w_inv: Vec<(u64, u64)>,
    suffix_min: Vec<u64>,
}

impl RealTime {
    fn of(model: &Model<'_>, history: &[Op]) -> RealTime {
        let mut w_inv: Vec<(u64, u64)> = model
            .writes
            .iter()
            .map(|w| (history[w.op].invoke, w.version))
            .collect();
        w_inv.sort_unstable();
        let mut suffix_min = vec![u64::MAX; w_inv.len() + 1];
        for i in (0..w_inv.len()).rev() {
            suffix_min[i] = suffix_min[i + 1].min(w_inv[i].1);
        }
        RealTime { w_inv, suffix_min }
    }

    fn hi_for(&self, respond: u64) -> u64 {
        self.suffix_min[self.w_inv.partition_point(|(inv, _)| *inv <= respond)]
    }
}

/// A group's span: no read stands in `[first, last)` (`first`: its first
/// write version; `last`: its last, or later, see check 5).
struct Span {
    first: u64,
    last: u64,
    op: usize,
}

struct Model<'a> {
    keys: BTreeMap<&'a [u8], KeyHist<'a>>,
    /// Successful writes sorted by version.
    writes: Vec<WriteRec<'a>>,
    /// value -> (key, version of the change that stored it in the model).
    values: HashMap<&'a [u8], (&'a [u8], u64)>,
    /// Groups' spans, sorted, disjoint (else a violation was reported).
    spans: Vec<Span>,
}

/// How an op takes part in the real-time sweep.
enum Class<'a> {
    /// A write that applied, at version `first` (`first == last`), or a
    /// group whose writes applied at versions `first..=last`.
    Applied { first: u64, last: u64 },
    /// Something that observes the state at one version.
    Read(ReadKind<'a>),
    /// Snapshot reads: checked at the snapshot's version, outside the sweep.
    AtSnapshot,
    /// A group none of whose writes applied (a violation, reported).
    Nothing,
}

enum ReadKind<'a> {
    Key {
        key: &'a [u8],
        pred: KeyPred<'a>,
    },
    Range {
        query: &'a Query,
        result: &'a [Entry],
    },
    Snapshot(u64),
}

#[derive(Clone, Copy)]
enum KeyPred<'a> {
    /// `get`: the value (or absence).
    Value(Option<&'a [u8]>),
    /// `get_item`: value and item version (or absence).
    Item(Option<(&'a [u8], u64)>),
    Present,
    Absent,
    /// A cas that did not apply: the state was not `expected`.
    NotVersion(u64),
}

impl KeyPred<'_> {
    fn matches(&self, s: State<'_>) -> bool {
        match *self {
            KeyPred::Value(v) => s.map(|c| c.value) == v,
            KeyPred::Item(i) => s.map(|c| (c.value, c.item_version)) == i,
            KeyPred::Present => s.is_some(),
            KeyPred::Absent => s.is_none(),
            KeyPred::NotVersion(expected) => !cas_applies(expected, s),
        }
    }

    fn describe(&self) -> String {
        match *self {
            KeyPred::Value(v) => format!("returned {}", fmt_opt(v)),
            KeyPred::Item(i) => match i {
                Some((v, ver)) => format!("returned item {} @{ver}", fmt_bytes(v)),
                None => "returned no item".to_string(),
            },
            KeyPred::Present => "did not apply: key must have been present".to_string(),
            KeyPred::Absent => "did not apply: key must have been absent".to_string(),
            KeyPred::NotVersion(e) => {
                format!("did not apply: item version must not have been {e}")
            }
        }
    }
}

fn cas_applies(expected: u64, s: State<'_>) -> bool {
    match s {
        None => expected == 0,
        Some(c) => expected != 0 && c.item_version == expected,
    }
}

fn classify(op: &Op) -> Class<'_> {
    match &op.action {
        Action::Write {
            kind, key, result, ..
        } => match result {
            Some(v) => Class::Applied {
                first: *v,
                last: *v,
            },
            None => Class::Read(ReadKind::Key {
                key,
                pred: match kind {
                    // A put always applies; a `None` is flagged in `build`.
                    WriteKind::Put | WriteKind::Update | WriteKind::Delete => KeyPred::Absent,
                    WriteKind::Insert => KeyPred::Present,
                    WriteKind::Cas { expected } => KeyPred::NotVersion(*expected),
                },
            }),
        },
        Action::Get { key, result } => Class::Read(ReadKind::Key {
            key,
            pred: KeyPred::Value(result.as_deref()),
        }),
        Action::GetItem { key, result } => Class::Read(ReadKind::Key {
            key,
            pred: KeyPred::Item(result.as_ref().map(|e| (&e.value[..], e.version))),
        }),
        Action::Range { query, result } => Class::Read(ReadKind::Range { query, result }),
        Action::Group { writes } => {
            let versions = || writes.iter().filter_map(|w| w.result);
            match (versions().min(), versions().max()) {
                (Some(first), Some(last)) => Class::Applied { first, last },
                _ => Class::Nothing,
            }
        }
        Action::Snapshot { id } => Class::Read(ReadKind::Snapshot(*id)),
        Action::ReadVersion { version } => Class::Read(ReadKind::Snapshot(*version)),
        Action::GetAt { .. } | Action::RangeAt { .. } => Class::AtSnapshot,
    }
}

impl<'a> Model<'a> {
    /// Replays the applied writes in version order (check 1's uniqueness and
    /// check 2).
    fn build(
        initial: &'a BTreeMap<Key, (Value, u64)>,
        base_version: u64,
        history: &'a [Op],
        viol: &mut Violations,
    ) -> Model<'a> {
        let mut keys: BTreeMap<&'a [u8], KeyHist<'a>> = BTreeMap::new();
        let mut values: HashMap<&'a [u8], (&'a [u8], u64)> = HashMap::new();
        for (k, (val, ver)) in initial {
            keys.entry(k).or_default().changes.push((
                0,
                Some(Cell {
                    value: val,
                    item_version: *ver,
                }),
            ));
            values.insert(val, (k, 0));
        }
        let mut writes = Vec::new();
        for (i, op) in history.iter().enumerate() {
            assert!(
                op.invoke < op.respond,
                "harness bug: op {i} responds before it is invoked"
            );
            match &op.action {
                Action::Write {
                    kind,
                    key,
                    value,
                    result,
                } => {
                    assert_eq!(
                        value.is_none(),
                        *kind == WriteKind::Delete,
                        "harness bug: op {i}: only deletes have no value"
                    );
                    match result {
                        Some(version) => writes.push(WriteRec {
                            version: *version,
                            key,
                            kind: *kind,
                            value: value.as_deref(),
                            op: i,
                        }),
                        None if *kind == WriteKind::Put => {
                            viol.push(|| format!("put did not apply: {}", fmt_op(history, i)))
                        }
                        None => {}
                    }
                }
                Action::Group { writes: group } => {
                    assert!(
                        group.first().is_some_and(|w| w.value.is_some()),
                        "harness bug: op {i}: a group begins with a put"
                    );
                    for (j, w) in group.iter().enumerate() {
                        assert!(
                            group[..j].iter().all(|o| o.key != w.key),
                            "harness bug: op {i}: a group writes a key twice"
                        );
                        match w.result {
                            Some(version) => writes.push(WriteRec {
                                version,
                                key: &w.key,
                                kind: if w.value.is_some() {
                                    WriteKind::Put
                                } else {
                                    WriteKind::Delete
                                },
                                value: w.value.as_deref(),
                                op: i,
                            }),
                            None if w.value.is_some() => viol.push(|| {
                                format!("put in a group did not apply: {}", fmt_op(history, i))
                            }),
                            None => {}
                        }
                    }
                }
                _ => {}
            }
        }
        writes.sort_by_key(|w| w.version);
        for pair in writes.windows(2) {
            if pair[0].version == pair[1].version {
                viol.push(|| {
                    format!(
                        "two writes created version {}:\n  {}\n  {}",
                        pair[0].version,
                        fmt_op(history, pair[0].op),
                        fmt_op(history, pair[1].op)
                    )
                });
            }
        }
        for w in &writes {
            if w.version <= base_version {
                viol.push(|| {
                    format!(
                        "write version {} is not above the base version {base_version}: {}",
                        w.version,
                        fmt_op(history, w.op)
                    )
                });
            }
            let hist = keys.entry(w.key).or_default();
            let before = hist.changes.last().and_then(|c| c.1);
            let ok = match w.kind {
                WriteKind::Put => true,
                WriteKind::Insert => before.is_none(),
                WriteKind::Update | WriteKind::Delete => before.is_some(),
                WriteKind::Cas { expected } => cas_applies(expected, before),
            };
            if !ok {
                viol.push(|| {
                    format!(
                        "write applied although the state before its version was {}: {}",
                        fmt_state(before),
                        fmt_op(history, w.op)
                    )
                });
            }
            let after = w.value.map(|value| Cell {
                value,
                item_version: w.version,
            });
            hist.changes.push((w.version, after));
            if let Some(val) = w.value
                && let Some(prev) = values.insert(val, (w.key, w.version))
            {
                panic!(
                    "harness bug: value {} written twice (versions {} and {})",
                    fmt_bytes(val),
                    prev.1,
                    w.version
                );
            }
        }
        Model {
            keys,
            writes,
            values,
            spans: Vec::new(),
        }
    }

    /// Every group's span (check 5), sorted; reports groups whose deletes
    /// saw no common absence and spans that interleave.
    fn group_spans(&self, history: &[Op], rt: &RealTime, viol: &mut Violations) -> Vec<Span> {
        let mut spans = Vec::new();
        for (i, op) in history.iter().enumerate() {
            let Action::Group { writes } = &op.action else {
                continue;
            };
            let Class::Applied { first, last } = classify(op) else {
                continue;
            };
            let absent: Vec<&[u8]> = writes
                .iter()
                .filter(|w| w.value.is_none() && w.result.is_none())
                .map(|w| &w.key[..])
                .collect();
            let hi = rt.hi_for(op.respond);
            let end = match self.first_all_absent(&absent, first - 1, hi) {
                Some(v) => last.max(v),
                None => {
                    viol.push(|| {
                        let hists: Vec<String> = absent
                            .iter()
                            .map(|k| {
                                format!(
                                    "\n  {}: {}",
                                    fmt_bytes(k),
                                    self.fmt_key_hist(history, k, first - 1, hi)
                                )
                            })
                            .collect();
                        format!(
                            "deletes in a group did not apply, but at no version in [{}, {}) \
                             were all their keys absent: {}{}",
                            first - 1,
                            fmt_ver(hi),
                            fmt_op(history, i),
                            hists.concat()
                        )
                    });
                    last
                }
            };
            spans.push(Span {
                first,
                last: end,
                op: i,
            });
        }
        spans.sort_by_key(|s| s.first);
        for pair in spans.windows(2) {
            if pair[1].first < pair[0].last {
                viol.push(|| {
                    format!(
                        "the spans of two groups interleave:\n  {}\n  {}",
                        fmt_op(history, pair[0].op),
                        fmt_op(history, pair[1].op)
                    )
                });
            }
        }
        spans
    }

    /// The smallest version in `[lb, hi)` at which every one of `keys` is
    /// absent.
    fn first_all_absent(&self, keys: &[&[u8]], lb: u64, hi: u64) -> Option<u64> {
        let mut v = lb;
        loop {
            let mut next = v;
            for k in keys {
                next = next.max(self.first_key_match(k, KeyPred::Absent, v, hi)?);
            }
            if next == v {
                return (v < hi).then_some(v);
            }
            v = next;
        }
    }

    /// If `v` lies inside a group's span, the first version past it.
    fn inside_span(&self, v: u64) -> Option<u64> {
        let i = self.spans.partition_point(|s| s.first <= v);
        let s = self.spans.get(i.checked_sub(1)?)?;
        (v < s.last).then_some(s.last)
    }

    /// The smallest version from `lb` that `find` accepts and no group's
    /// span holds. `find(lb)` gives the smallest accepted version from `lb`
    /// (within the caller's bound).
    fn first_outside_spans(
        &self,
        mut lb: u64,
        mut find: impl FnMut(u64) -> Option<u64>,
    ) -> Option<u64> {
        loop {
            let v = find(lb)?;
            match self.inside_span(v) {
                None => return Some(v),
                Some(past) => lb = past,
            }
        }
    }

    fn state(&self, key: &[u8], v: u64) -> State<'a> {
        self.keys.get(key).and_then(|h| h.at(v))
    }

    /// The smallest version in `[lb, hi)` at which `pred` holds for `key`.
    fn first_key_match(&self, key: &[u8], pred: KeyPred<'_>, lb: u64, hi: u64) -> Option<u64> {
        if lb >= hi {
            return None;
        }
        let Some(h) = self.keys.get(key) else {
            return pred.matches(None).then_some(lb);
        };
        let i = h.count_at(lb);
        let at_lb = if i == 0 { None } else { h.changes[i - 1].1 };
        if pred.matches(at_lb) {
            return Some(lb);
        }
        h.changes[i..]
            .iter()
            .take_while(|(ver, _)| *ver < hi)
            .find(|(_, s)| pred.matches(*s))
            .map(|(ver, _)| *ver)
    }

    /// The bounds the model scans for `q` at version `v`, or `None` if empty.
    fn bounds<'q>(&self, q: &'q Query, v: u64) -> Option<Bounds<'q>>
    where
        'a: 'q,
    {
        let start = as_ref(&q.start);
        let end = as_ref(&q.end);
        if bounds_empty(start, end) {
            return None;
        }
        if let (true, Bound::Included(s)) = (q.floor_start, start) {
            let floor = self
                .keys
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(s)))
                .rev()
                .find(|(_, h)| h.at(v).is_some());
            if let Some((k, _)) = floor {
                return Some((Bound::Included(*k), end));
            }
        }
        Some((start, end))
    }

    /// The model's answer to `q` at version `v`, lazily.
    fn range_iter<'s>(
        &'s self,
        q: &'s Query,
        v: u64,
    ) -> Box<dyn Iterator<Item = (&'a [u8], Cell<'a>)> + 's> {
        let Some(b) = self.bounds(q, v) else {
            return Box::new(std::iter::empty());
        };
        let it = self.keys.range::<[u8], _>(b);
        let it: Box<dyn Iterator<Item = (&&'a [u8], &KeyHist<'a>)> + 's> = if q.reverse {
            Box::new(it.rev())
        } else {
            Box::new(it)
        };
        Box::new(
            it.filter_map(move |(k, h)| h.at(v).map(|c| (*k, c)))
                .take(q.limit.unwrap_or(usize::MAX)),
        )
    }

    fn range_matches(&self, q: &Query, v: u64, result: &[Entry]) -> bool {
        let mut n = 0;
        for (k, c) in self.range_iter(q, v) {
            match result.get(n) {
                Some(e) if e.key == k && e.value == c.value && e.version == c.item_version => {
                    n += 1
                }
                _ => return false,
            }
        }
        n == result.len()
    }

    fn range_entries(&self, q: &Query, v: u64) -> Vec<Entry> {
        self.range_iter(q, v)
            .map(|(k, c)| Entry {
                key: k.to_vec(),
                value: c.value.to_vec(),
                version: c.item_version,
            })
            .collect()
    }

    /// Whether a write to `key` can change the answer to `q` (over-approximate).
    fn relevant(q: &Query, key: &[u8]) -> bool {
        let below_end = match &q.end {
            Bound::Included(e) => key <= &e[..],
            Bound::Excluded(e) => key < &e[..],
            Bound::Unbounded => true,
        };
        let above_start = q.floor_start
            || match &q.start {
                Bound::Included(s) => key >= &s[..],
                Bound::Excluded(s) => key > &s[..],
                Bound::Unbounded => true,
            };
        below_end && above_start
    }

    /// The smallest version in `[lb, hi)` at which the model answers `q`
    /// with exactly `result`.
    fn first_range_match(
        &self,
        q: &Query,
        result: &[Entry],
        lb: u64,
        hi: u64,
        extra: &mut usize,
    ) -> Option<u64> {
        let mut lo = lb;
        let mut up = hi;
        // Each returned value names its write: v >= that write's version and
        // v < the next change of the key.
        for e in result {
            let (k, ver) = *self.values.get(&e.value[..])?;
            if k != &e.key[..] {
                return None;
            }
            lo = lo.max(ver);
            up = up.min(self.keys[k].next_change_after(ver));
        }
        if lo >= up {
            return None;
        }
        if self.range_matches(q, lo, result) {
            return Some(lo);
        }
        let pos = self.writes.partition_point(|w| w.version <= lo);
        for w in &self.writes[pos..] {
            if w.version >= up {
                break;
            }
            if Self::relevant(q, w.key) {
                *extra += 1;
                if self.range_matches(q, w.version, result) {
                    return Some(w.version);
                }
            }
        }
        None
    }

    /// Checks 1 (real time), 3 and 4.
    fn check_all(
        &self,
        history: &'a [Op],
        base_version: u64,
        rt: &RealTime,
        viol: &mut Violations,
    ) -> Stats {
        let n = history.len();
        let mut stats = Stats {
            ops: n,
            writes_applied: self.writes.len(),
            ..Stats::default()
        };
        let mut by_invoke: Vec<usize> = (0..n).collect();
        by_invoke.sort_by_key(|&i| history[i].invoke);
        let mut by_respond: Vec<usize> = (0..n).collect();
        by_respond.sort_by_key(|&i| history[i].respond);
        let classes: Vec<Class<'a>> = history.iter().map(classify).collect();

        let hi_for = |respond: u64| rt.hi_for(respond);

        let mut point: Vec<Option<u64>> = vec![None; n];
        // Highest write version / read point among ops that responded
        // before the current op was invoked, and which op set it.
        let (mut lbw, mut lbw_op) = (base_version, None::<usize>);
        let (mut lbr, mut lbr_op) = (0u64, None::<usize>);
        let mut p = 0;
        for &x in &by_invoke {
            let inv = history[x].invoke;
            while p < n && history[by_respond[p]].respond < inv {
                let y = by_respond[p];
                match classes[y] {
                    Class::Applied { last, .. } if last > lbw => (lbw, lbw_op) = (last, Some(y)),
                    _ => {
                        if let Some(pt) = point[y]
                            && pt > lbr
                        {
                            (lbr, lbr_op) = (pt, Some(y));
                        }
                    }
                }
                p += 1;
            }
            match &classes[x] {
                Class::Applied { first, .. } => {
                    if let Action::Group { .. } = &history[x].action {
                        stats.groups += 1;
                    }
                    if let Some(w) = lbw_op.filter(|_| *first <= lbw) {
                        viol.push(|| {
                            format!(
                                "write versions contradict real time: {}\n  was invoked after this \
                                 write responded: {}",
                                fmt_op(history, x),
                                fmt_op(history, w)
                            )
                        });
                    }
                }
                Class::Read(kind) => {
                    let lb = lbw.max(lbr);
                    let hi = hi_for(history[x].respond);
                    let next = self.writes.partition_point(|w| w.version <= lb);
                    if self.writes.get(next).is_some_and(|w| w.version < hi) {
                        stats.concurrent_reads += 1;
                    }
                    let found = match kind {
                        ReadKind::Key { key, pred } => {
                            stats.gets += 1;
                            self.first_outside_spans(lb, |lb| {
                                self.first_key_match(key, *pred, lb, hi)
                            })
                        }
                        ReadKind::Range { query, result } => {
                            stats.ranges += 1;
                            stats.range_items += result.len();
                            let extra = &mut stats.extra_range_candidates;
                            self.first_outside_spans(lb, |lb| {
                                self.first_range_match(query, result, lb, hi, extra)
                            })
                        }
                        ReadKind::Snapshot(id) => {
                            stats.snapshots += 1;
                            (lb <= *id && *id < hi && self.inside_span(*id).is_none())
                                .then_some(*id)
                        }
                    };
                    match found {
                        Some(v) => point[x] = Some(v),
                        None => viol
                            .push(|| self.explain_read(history, x, kind, (lb, lbw_op, lbr_op), hi)),
                    }
                }
                Class::AtSnapshot => {
                    stats.snapshot_reads += 1;
                    self.check_at_snapshot(history, x, viol);
                }
                Class::Nothing => {}
            }
        }
        stats.writes_not_applied = history
            .iter()
            .map(|op| match &op.action {
                Action::Write { result: None, .. } => 1,
                Action::Group { writes } => writes.iter().filter(|w| w.result.is_none()).count(),
                _ => 0,
            })
            .sum();
        stats
    }

    fn check_at_snapshot(&self, history: &[Op], x: usize, viol: &mut Violations) {
        match &history[x].action {
            Action::GetAt { snap, key, result } => {
                let want = self.state(key, *snap);
                let ok = match result {
                    None => want.is_none(),
                    Some(e) => {
                        e.key == *key
                            && want.is_some_and(|c| {
                                c.value == &e.value[..] && c.item_version == e.version
                            })
                    }
                };
                if !ok {
                    viol.push(|| {
                        format!(
                            "snapshot get differs from the state at version {snap}: {}\n  \
                             expected {}\n  key history: {}",
                            fmt_op(history, x),
                            fmt_state(want),
                            self.fmt_key_hist(history, key, 0, u64::MAX)
                        )
                    });
                }
            }
            Action::RangeAt {
                snap,
                query,
                result,
            } => {
                if !self.range_matches(query, *snap, result) {
                    viol.push(|| {
                        format!(
                            "snapshot range differs from the state at version {snap}: {}\n  \
                             expected {}",
                            fmt_op(history, x),
                            fmt_entries(&self.range_entries(query, *snap))
                        )
                    });
                }
            }
            _ => unreachable!(),
        }
    }

    fn explain_read(
        &self,
        history: &[Op],
        x: usize,
        kind: &ReadKind<'_>,
        (lb, lbw_op, lbr_op): (u64, Option<usize>, Option<usize>),
        hi: u64,
    ) -> String {
        let mut s = String::new();
        let what = match kind {
            ReadKind::Key { pred, .. } => pred.describe(),
            ReadKind::Range { .. } => "range result".to_string(),
            ReadKind::Snapshot(id) => format!("version {id}"),
        };
        let _ = write!(
            s,
            "no version in the op's window [{lb}, {}) matches ({what}): {}",
            fmt_ver(hi),
            fmt_op(history, x)
        );
        if let Some(w) = lbw_op {
            let _ = write!(
                s,
                "\n  last write responded before invocation: {}",
                fmt_op(history, w)
            );
        }
        if let Some(r) = lbr_op {
            let _ = write!(
                s,
                "\n  latest read responded before invocation: {}",
                fmt_op(history, r)
            );
        }
        for sp in self.spans.iter().filter(|sp| sp.last > lb && sp.first < hi) {
            let _ = write!(
                s,
                "\n  no read stands in [{}, {}), a group's span: {}",
                sp.first,
                sp.last,
                fmt_op(history, sp.op)
            );
        }
        match kind {
            ReadKind::Key { key, .. } => {
                let _ = write!(
                    s,
                    "\n  state at {lb}: {}\n  key history: {}",
                    fmt_state(self.state(key, lb)),
                    self.fmt_key_hist(history, key, lb, hi)
                );
            }
            ReadKind::Range { query, result } => {
                let _ = write!(
                    s,
                    "\n  model at {lb}: {}",
                    fmt_entries(&self.range_entries(query, lb))
                );
                for e in result.iter() {
                    match self.values.get(&e.value[..]) {
                        None => {
                            let _ =
                                write!(s, "\n  value {} was never written", fmt_bytes(&e.value));
                        }
                        Some((k, ver)) if *k != &e.key[..] => {
                            let _ = write!(
                                s,
                                "\n  value {} was written to key {} (version {ver}), returned \
                                 for key {}",
                                fmt_bytes(&e.value),
                                fmt_bytes(k),
                                fmt_bytes(&e.key)
                            );
                        }
                        Some(_) => {}
                    }
                }
                let changed: Vec<u64> = self
                    .writes
                    .iter()
                    .filter(|w| w.version > lb && w.version < hi && Self::relevant(query, w.key))
                    .map(|w| w.version)
                    .take(20)
                    .collect();
                let _ = write!(s, "\n  relevant write versions in window: {changed:?}");
                if let Some(&v) = changed.last() {
                    let _ = write!(
                        s,
                        "\n  model at {v}: {}",
                        fmt_entries(&self.range_entries(query, v))
                    );
                }
            }
            ReadKind::Snapshot(_) => {}
        }
        s
    }

    fn fmt_key_hist(&self, history: &[Op], key: &[u8], lb: u64, hi: u64) -> String {
        let Some(h) = self.keys.get(key) else {
            return "never written".to_string();
        };
        let from = h.count_at(lb).saturating_sub(1);
        let mut s = String::new();
        for (ver, st) in h.changes[from..]
            .iter()
            .take_while(|(v, _)| *v < hi)
            .take(30)
        {
            let op = self
                .writes
                .binary_search_by_key(ver, |w| w.version)
                .ok()
                .map(|i| &history[self.writes[i].op]);
            let _ = write!(s, "\n    @{ver}: {}", fmt_state(*st));
            if let Some(op) = op {
                let _ = write!(s, " (thread {} [{}, {}])", op.thread, op.invoke, op.respond);
            }
        }
        s
    }
}

fn as_ref(b: &Bound<Key>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether the interval between `start` and `end` contains no key
/// (conservatively: exactly the cases `BTreeMap::range` rejects, plus
/// `start == end` with one side excluded).
fn bounds_empty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        _ => false,
    }
}

pub fn fmt_bytes(b: &[u8]) -> String {
    let s = b.escape_ascii().to_string();
    if s.len() > 48 {
        format!("\"{}..\"({} bytes)", &s[..40], b.len())
    } else {
        format!("\"{s}\"")
    }
}

fn fmt_opt(v: Option<&[u8]>) -> String {
    v.map_or_else(|| "absent".to_string(), fmt_bytes)
}

fn fmt_ver(v: u64) -> String {
    if v == u64::MAX {
        "inf".to_string()
    } else {
        v.to_string()
    }
}

fn fmt_state(s: State<'_>) -> String {
    match s {
        None => "absent".to_string(),
        Some(c) => format!("{} @{}", fmt_bytes(c.value), c.item_version),
    }
}

fn fmt_entries(es: &[Entry]) -> String {
    let mut s = format!("{} items [", es.len());
    for (i, e) in es.iter().enumerate() {
        if i == 12 {
            s.push_str(" ...");
            break;
        }
        let _ = write!(
            s,
            " {}={}@{}",
            fmt_bytes(&e.key),
            fmt_bytes(&e.value),
            e.version
        );
    }
    s.push_str(" ]");
    s
}

fn fmt_query(q: &Query) -> String {
    let b = |b: &Bound<Key>| match b {
        Bound::Included(k) => format!("[{}", fmt_bytes(k)),
        Bound::Excluded(k) => format!("({}", fmt_bytes(k)),
        Bound::Unbounded => "*".to_string(),
    };
    format!(
        "{} .. {}{} limit {:?}{}{}",
        b(&q.start),
        b(&q.end),
        match q.end {
            Bound::Included(_) => "]",
            Bound::Excluded(_) => ")",
            Bound::Unbounded => "",
        },
        q.limit,
        if q.reverse { " reverse" } else { "" },
        if q.floor_start { " floor_start" } else { "" },
    )
}

/// One line describing op `i`.
pub fn fmt_op(history: &[Op], i: usize) -> String {
    let op = &history[i];
    let body = match &op.action {
        Action::Write {
            kind,
            key,
            value,
            result,
        } => format!(
            "{kind:?}({}{}) -> {:?}",
            fmt_bytes(key),
            value
                .as_deref()
                .map_or_else(String::new, |v| format!(", {}", fmt_bytes(v))),
            result
        ),
        Action::Get { key, result } => {
            format!("get({}) -> {}", fmt_bytes(key), fmt_opt(result.as_deref()))
        }
        Action::GetItem { key, result } => format!(
            "get_item({}) -> {}",
            fmt_bytes(key),
            result.as_ref().map_or_else(
                || "absent".to_string(),
                |e| fmt_entries(std::slice::from_ref(e))
            )
        ),
        Action::Range { query, result } => {
            format!("range({}) -> {}", fmt_query(query), fmt_entries(result))
        }
        Action::Group { writes } => {
            let mut s = "group(".to_string();
            for (i, w) in writes.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = match &w.value {
                    Some(v) => write!(s, "{sep}put {} {}", fmt_bytes(&w.key), fmt_bytes(v)),
                    None => write!(s, "{sep}delete {}", fmt_bytes(&w.key)),
                };
            }
            let _ = write!(
                s,
                ") -> {:?}",
                writes.iter().map(|w| w.result).collect::<Vec<_>>()
            );
            s
        }
        Action::Snapshot { id } => format!("snapshot() -> {id}"),
        Action::ReadVersion { version } => format!("read_version() -> {version}"),
        Action::GetAt { snap, key, result } => format!(
            "get_at({snap}, {}) -> {}",
            fmt_bytes(key),
            result.as_ref().map_or_else(
                || "absent".to_string(),
                |e| fmt_entries(std::slice::from_ref(e))
            )
        ),
        Action::RangeAt {
            snap,
            query,
            result,
        } => format!(
            "range_at({snap}, {}) -> {}",
            fmt_query(query),
            fmt_entries(result)
        ),
    };
    format!(
        "#{i} thread {} [{}, {}] {body}",
        op.thread, op.invoke, op.respond
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        s.as_bytes().to_vec()
    }

    fn op(thread: usize, invoke: u64, respond: u64, action: Action) -> Op {
        Op {
            thread,
            invoke,
            respond,
            action,
        }
    }

    fn write(kind: WriteKind, key: &str, value: Option<&str>, result: Option<u64>) -> Action {
        Action::Write {
            kind,
            key: k(key),
            value: value.map(k),
            result,
        }
    }

    fn put(key: &str, value: &str, v: u64) -> Action {
        write(WriteKind::Put, key, Some(value), Some(v))
    }

    fn get(key: &str, result: Option<&str>) -> Action {
        Action::Get {
            key: k(key),
            result: result.map(k),
        }
    }

    fn e(key: &str, value: &str, version: u64) -> Entry {
        Entry {
            key: k(key),
            value: k(value),
            version,
        }
    }

    fn all() -> Query {
        Query {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
            limit: None,
            reverse: false,
            floor_start: false,
        }
    }

    fn range(query: Query, result: Vec<Entry>) -> Action {
        Action::Range { query, result }
    }

    /// A group: (key, value or None for a delete, result).
    fn group(writes: &[(&str, Option<&str>, Option<u64>)]) -> Action {
        Action::Group {
            writes: writes
                .iter()
                .map(|&(key, value, result)| GroupWrite {
                    key: k(key),
                    value: value.map(k),
                    result,
                })
                .collect(),
        }
    }

    fn run(h: &[Op]) -> Result<Report, Vec<String>> {
        check(&BTreeMap::new(), 0, h)
    }

    fn assert_fails(h: &[Op], needle: &str) {
        match run(h) {
            Ok(_) => panic!("history should not be linearizable"),
            Err(v) => assert!(
                v.iter().any(|m| m.contains(needle)),
                "expected a violation containing {needle:?}, got {v:#?}"
            ),
        }
    }

    #[test]
    fn linearizable_history_passes() {
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            // Concurrent with the update of a: either value is fine.
            op(1, 3, 8, get("a", Some("a1"))),
            op(0, 4, 7, write(WriteKind::Update, "a", Some("a2"), Some(2))),
            op(2, 5, 9, get("a", Some("a2"))),
            // Insert of an existing key does not apply: a read of presence.
            op(2, 10, 11, write(WriteKind::Insert, "a", Some("a3"), None)),
            op(
                0,
                12,
                15,
                write(WriteKind::Insert, "b", Some("b1"), Some(3)),
            ),
            op(
                1,
                13,
                14,
                range(all(), vec![e("a", "a2", 2)]), // before the insert of b
            ),
            op(
                1,
                16,
                17,
                range(all(), vec![e("a", "a2", 2), e("b", "b1", 3)]),
            ),
            op(1, 18, 19, Action::Snapshot { id: 3 }),
            op(0, 20, 21, write(WriteKind::Delete, "a", None, Some(4))),
            op(0, 22, 23, write(WriteKind::Delete, "a", None, None)),
            op(
                0,
                24,
                25,
                write(WriteKind::Cas { expected: 3 }, "b", Some("b2"), Some(5)),
            ),
            op(
                0,
                26,
                27,
                write(WriteKind::Cas { expected: 3 }, "b", Some("b3"), None),
            ),
            op(
                0,
                28,
                29,
                write(WriteKind::Cas { expected: 0 }, "a", Some("a4"), Some(6)),
            ),
            // The snapshot still sees version 3.
            op(
                1,
                30,
                31,
                Action::GetAt {
                    snap: 3,
                    key: k("b"),
                    result: Some(e("b", "b1", 3)),
                },
            ),
            op(
                1,
                32,
                33,
                Action::RangeAt {
                    snap: 3,
                    query: Query {
                        reverse: true,
                        ..all()
                    },
                    result: vec![e("b", "b1", 3), e("a", "a2", 2)],
                },
            ),
            op(
                2,
                34,
                35,
                Action::GetItem {
                    key: k("b"),
                    result: Some(e("b", "b2", 5)),
                },
            ),
        ];
        let r = run(&h).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_eq!(r.max_version, 6);
        assert_eq!(r.final_state.len(), 2);
        assert_eq!(r.final_state[&k("a")], (k("a4"), 6));
        assert_eq!(r.final_state[&k("b")], (k("b2"), 5));
        assert_eq!(r.stats.writes_applied, 6);
        assert_eq!(r.stats.writes_not_applied, 3);
    }

    #[test]
    fn concurrent_reads_may_see_either_side_of_a_write() {
        // A long write overlapping several reads: any read may see old or
        // new, as long as no read sees old after one that finished saw new.
        let h = vec![
            op(0, 1, 2, put("a", "old", 1)),
            op(0, 3, 20, put("a", "new", 2)),
            op(1, 4, 5, get("a", Some("old"))),
            op(2, 4, 6, get("a", Some("new"))),
            op(1, 7, 8, get("a", Some("new"))),
            op(3, 5, 30, get("a", Some("old"))),
        ];
        run(&h).unwrap_or_else(|v| panic!("{v:#?}"));
    }

    #[test]
    fn stale_read_fails() {
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(0, 3, 4, put("a", "a2", 2)),
            op(1, 5, 6, get("a", Some("a1"))),
        ];
        assert_fails(&h, "no version in the op's window [2, inf)");
        let h = vec![op(0, 1, 2, put("a", "a1", 1)), op(1, 3, 4, get("a", None))];
        assert_fails(&h, "returned absent");
    }

    #[test]
    fn read_of_a_future_write_fails() {
        let h = vec![
            op(1, 1, 2, get("a", Some("a1"))),
            op(0, 3, 4, put("a", "a1", 1)),
        ];
        assert_fails(&h, "window [0, 1)");
    }

    #[test]
    fn new_old_inversion_fails() {
        // r1 saw the new value, r2 started after r1 finished and saw the old
        // one, while the write was still in flight.
        let h = vec![
            op(0, 1, 2, put("a", "old", 1)),
            op(0, 3, 20, put("a", "new", 2)),
            op(1, 4, 5, get("a", Some("new"))),
            op(2, 6, 7, get("a", Some("old"))),
        ];
        assert_fails(&h, "latest read responded before invocation");
    }

    #[test]
    fn lost_write_fails() {
        // An acknowledged update disappears: later reads see the key absent.
        let h = vec![
            op(0, 1, 2, write(WriteKind::Insert, "a", Some("a1"), Some(1))),
            op(0, 3, 4, write(WriteKind::Update, "a", Some("a2"), Some(2))),
            op(1, 5, 6, get("a", Some("a2"))),
            op(1, 7, 8, range(all(), vec![])),
        ];
        assert_fails(&h, "range result");
        // An acknowledged insert is lost: a second insert of the key applies.
        let h = vec![
            op(0, 1, 2, write(WriteKind::Insert, "a", Some("a1"), Some(1))),
            op(1, 3, 4, write(WriteKind::Insert, "a", Some("a2"), Some(2))),
        ];
        assert_fails(
            &h,
            "write applied although the state before its version was",
        );
        // A delete of a key that exists does not apply.
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(1, 3, 4, write(WriteKind::Delete, "a", None, None)),
        ];
        assert_fails(&h, "key must have been absent");
    }

    #[test]
    fn torn_range_fails() {
        // Writes a then b (versions 1 < 2); a range overlapping both sees the
        // new b but the old a: no single version has that state.
        let h = vec![
            op(0, 1, 2, put("a", "a0", 1)),
            op(0, 3, 4, put("b", "b0", 2)),
            op(0, 10, 11, put("a", "a1", 3)),
            op(0, 12, 13, put("b", "b1", 4)),
            op(
                1,
                9,
                14,
                range(all(), vec![e("a", "a0", 1), e("b", "b1", 4)]),
            ),
        ];
        assert_fails(&h, "range result");
        // The same range returning a consistent state passes.
        let mut ok = h.clone();
        ok[4] = op(
            1,
            9,
            14,
            range(all(), vec![e("a", "a1", 3), e("b", "b0", 2)]),
        );
        run(&ok).unwrap_or_else(|v| panic!("{v:#?}"));
    }

    #[test]
    fn range_options_are_checked_exactly() {
        let mut h = vec![];
        for (i, key) in ["b", "d", "f", "h"].iter().enumerate() {
            h.push(op(
                0,
                2 * i as u64 + 1,
                2 * i as u64 + 2,
                put(key, &format!("{key}1"), i as u64 + 1),
            ));
        }
        let q = |start, end, limit, reverse, floor_start| Query {
            start,
            end,
            limit,
            reverse,
            floor_start,
        };
        let inc = |s: &str| Bound::Included(k(s));
        let exc = |s: &str| Bound::Excluded(k(s));
        let cases = vec![
            (
                q(inc("c"), inc("h"), Some(2), false, false),
                vec![e("d", "d1", 2), e("f", "f1", 3)],
            ),
            (
                q(inc("c"), exc("h"), Some(2), true, false),
                vec![e("f", "f1", 3), e("d", "d1", 2)],
            ),
            (
                q(inc("c"), inc("f"), None, false, true),
                vec![e("b", "b1", 1), e("d", "d1", 2), e("f", "f1", 3)],
            ),
            (
                q(inc("d"), Bound::Unbounded, Some(1), false, true),
                vec![e("d", "d1", 2)],
            ),
            (
                q(inc("a"), inc("c"), None, true, true),
                vec![e("b", "b1", 1)],
            ),
            (
                q(exc("d"), exc("h"), None, false, false),
                vec![e("f", "f1", 3)],
            ),
            (q(inc("g"), inc("c"), None, false, false), vec![]),
            (q(exc("d"), exc("d"), None, false, false), vec![]),
            (q(Bound::Unbounded, inc("z"), Some(0), false, false), vec![]),
        ];
        let mut t = 100;
        for (query, result) in &cases {
            h.push(op(1, t, t + 1, range(query.clone(), result.clone())));
            t += 2;
        }
        run(&h).unwrap_or_else(|v| panic!("{v:#?}"));
        // Wrong limit, wrong order, floor_start ignored, wrong item version.
        let wrong = vec![
            (
                q(inc("c"), inc("h"), Some(2), false, false),
                vec![e("d", "d1", 2)],
            ),
            (
                q(inc("c"), inc("h"), Some(2), true, false),
                vec![e("d", "d1", 2), e("f", "f1", 3)],
            ),
            (
                q(inc("c"), inc("f"), None, false, true),
                vec![e("d", "d1", 2), e("f", "f1", 3)],
            ),
            (
                q(inc("c"), inc("f"), None, false, false),
                vec![e("d", "d1", 2), e("f", "f1", 9)],
            ),
        ];
        for (query, result) in wrong {
            let mut bad = h.clone();
            bad.push(op(1, t, t + 1, range(query, result)));
            assert_fails(&bad, "range result");
        }
    }

    #[test]
    fn value_from_another_key_fails() {
        let h = vec![
            op(0, 1, 2, put("a", "x", 1)),
            op(1, 3, 4, range(all(), vec![e("b", "x", 1)])),
        ];
        assert_fails(&h, "was written to key");
        let h = vec![op(1, 3, 4, range(all(), vec![e("b", "zz", 1)]))];
        assert_fails(&h, "was never written");
    }

    #[test]
    fn write_versions_against_real_time_fail() {
        let h = vec![
            op(0, 1, 2, put("a", "a1", 2)),
            op(1, 3, 4, put("b", "b1", 1)),
        ];
        assert_fails(&h, "write versions contradict real time");
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(1, 3, 4, put("b", "b1", 1)),
        ];
        assert_fails(&h, "two writes created version 1");
        // A read saw version 2, then (after it finished) a write got version 1:
        // the read's window ends below 1.
        let h = vec![
            op(0, 1, 10, put("a", "a2", 2)),
            op(1, 2, 3, get("a", Some("a2"))),
            op(2, 4, 5, put("b", "b1", 1)),
        ];
        assert_fails(&h, "window [0, 1)");
    }

    /// `a` before; a group writes `b` at 2 and `c` at 4 while another
    /// thread's put of `d` takes version 3, inside the group's span.
    fn group_history(range_during: Vec<Entry>) -> Vec<Op> {
        vec![
            op(0, 1, 2, put("a", "a0", 1)),
            op(
                0,
                3,
                12,
                group(&[("b", Some("b1"), Some(2)), ("c", Some("c1"), Some(4))]),
            ),
            op(1, 4, 11, put("d", "d1", 3)),
            op(2, 5, 6, range(all(), range_during)),
            op(
                2,
                13,
                14,
                range(
                    all(),
                    vec![
                        e("a", "a0", 1),
                        e("b", "b1", 2),
                        e("c", "c1", 4),
                        e("d", "d1", 3),
                    ],
                ),
            ),
        ]
    }

    #[test]
    fn groups_seen_whole_pass() {
        let r = run(&group_history(vec![e("a", "a0", 1)])).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_eq!(r.stats.groups, 1);
        assert_eq!(r.max_version, 4);
        // Seeing the whole group during its op is fine too.
        run(&group_history(vec![
            e("a", "a0", 1),
            e("b", "b1", 2),
            e("c", "c1", 4),
            e("d", "d1", 3),
        ]))
        .unwrap_or_else(|v| panic!("{v:#?}"));
    }

    #[test]
    fn a_group_seen_in_part_fails() {
        // Version 2: b without c.
        assert_fails(
            &group_history(vec![e("a", "a0", 1), e("b", "b1", 2)]),
            "a group's span",
        );
        // Version 3: the put inside the span, with half of the group.
        assert_fails(
            &group_history(vec![e("a", "a0", 1), e("b", "b1", 2), e("d", "d1", 3)]),
            "a group's span",
        );
        // A single-key read inside the span: b's absence needs version 1,
        // but the read began after d (version 3) was acknowledged, and the
        // span pushes it to 4, where b is present.
        let mut h = group_history(vec![e("a", "a0", 1)]);
        h[1].respond = 20;
        h.push(op(3, 12, 13, get("b", None)));
        assert_fails(&h, "a group's span");
        // A snapshot cannot stand inside a span either.
        let mut h = group_history(vec![e("a", "a0", 1)]);
        h.push(op(3, 7, 8, Action::Snapshot { id: 3 }));
        assert_fails(&h, "a group's span");
    }

    #[test]
    fn interleaved_groups_fail() {
        let h = vec![
            op(
                0,
                1,
                10,
                group(&[("a", Some("a1"), Some(1)), ("b", Some("b1"), Some(3))]),
            ),
            op(
                1,
                2,
                9,
                group(&[("b", Some("b2"), Some(2)), ("a", Some("a2"), Some(4))]),
            ),
        ];
        assert_fails(&h, "the spans of two groups interleave");
    }

    #[test]
    fn group_deletes_that_did_not_apply_are_reads() {
        let h = |z_before: bool| {
            let mut h = vec![op(
                0,
                3,
                4,
                group(&[("a", Some("a1"), Some(2)), ("z", None, None)]),
            )];
            if z_before {
                h.push(op(1, 1, 2, put("z", "z0", 1)));
            } else {
                h.push(op(1, 1, 2, put("y", "y0", 1)));
            }
            h
        };
        run(&h(false)).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_fails(&h(true), "deletes in a group did not apply");
        // An applied delete needs the key present.
        let h = vec![op(
            0,
            1,
            2,
            group(&[("a", Some("a1"), Some(1)), ("z", None, Some(2))]),
        )];
        assert_fails(
            &h,
            "write applied although the state before its version was absent",
        );
    }

    /// A group's delete found its key already deleted by a write whose
    /// version is above all of the group's: the group stands after that
    /// write, so its span reaches it and no read sees the group without it.
    #[test]
    fn a_group_spans_the_writes_its_deletes_saw() {
        let h = |during: Vec<Entry>| {
            vec![
                op(0, 1, 2, put("z", "z0", 1)),
                op(
                    0,
                    3,
                    10,
                    group(&[("a", Some("a1"), Some(2)), ("z", None, None)]),
                ),
                op(1, 4, 9, write(WriteKind::Delete, "z", None, Some(3))),
                op(2, 5, 6, range(all(), during)),
                op(2, 11, 12, range(all(), vec![e("a", "a1", 2)])),
            ]
        };
        let r = run(&h(vec![e("z", "z0", 1)])).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_eq!(r.stats.groups, 1);
        // Version 2: the group's put without the delete it saw.
        assert_fails(&h(vec![e("a", "a1", 2), e("z", "z0", 1)]), "a group's span");
        // The delete it saw must have come before the group responded.
        let mut late = h(vec![e("z", "z0", 1)]);
        late[2].invoke = 11;
        late[2].respond = 12;
        late[4].invoke = 13;
        late[4].respond = 14;
        assert_fails(&late, "deletes in a group did not apply");
    }

    #[test]
    fn group_versions_against_real_time_fail() {
        let h = vec![
            op(0, 1, 2, put("a", "a1", 5)),
            op(
                1,
                3,
                4,
                group(&[("b", Some("b1"), Some(4)), ("c", Some("c1"), Some(6))]),
            ),
        ];
        assert_fails(&h, "write versions contradict real time");
    }

    #[test]
    fn snapshots_are_checked_at_their_version() {
        let base = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(1, 3, 4, Action::Snapshot { id: 1 }),
            op(0, 5, 6, put("a", "a2", 2)),
            op(0, 7, 8, write(WriteKind::Delete, "a", None, Some(3))),
        ];
        let read = |result: Option<Entry>| {
            op(
                1,
                9,
                10,
                Action::GetAt {
                    snap: 1,
                    key: k("a"),
                    result,
                },
            )
        };
        let mut ok = base.clone();
        ok.push(read(Some(e("a", "a1", 1))));
        run(&ok).unwrap_or_else(|v| panic!("{v:#?}"));
        for bad_result in [Some(e("a", "a2", 2)), None, Some(e("a", "a1", 7))] {
            let mut bad = base.clone();
            bad.push(read(bad_result));
            assert_fails(&bad, "snapshot get differs from the state at version 1");
        }
        let mut bad = base.clone();
        bad.push(op(
            1,
            9,
            10,
            Action::RangeAt {
                snap: 1,
                query: all(),
                result: vec![],
            },
        ));
        assert_fails(&bad, "snapshot range differs");
        // A snapshot id outside the creation window.
        let mut bad = base.clone();
        bad[1] = op(1, 3, 4, Action::Snapshot { id: 0 });
        assert_fails(&bad, "version 0)");
        let mut bad = base;
        bad[1] = op(1, 3, 4, Action::Snapshot { id: 2 });
        assert_fails(&bad, "version 2)");
    }

    #[test]
    fn read_version_is_checked_like_a_snapshot() {
        let h = |v| {
            vec![
                op(0, 1, 2, put("a", "a1", 1)),
                op(1, 3, 4, Action::ReadVersion { version: v }),
                op(0, 5, 6, put("a", "a2", 2)),
            ]
        };
        run(&h(1)).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_fails(&h(0), "read_version() -> 0");
        assert_fails(&h(2), "read_version() -> 2");
    }

    #[test]
    fn failed_conditional_writes_are_reads() {
        // Update of a key that was present throughout its window did not apply.
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(1, 3, 4, write(WriteKind::Update, "a", Some("a2"), None)),
        ];
        assert_fails(&h, "key must have been absent");
        // Concurrent with a delete: fine.
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(0, 3, 6, write(WriteKind::Delete, "a", None, Some(2))),
            op(1, 4, 5, write(WriteKind::Update, "a", Some("a2"), None)),
        ];
        run(&h).unwrap_or_else(|v| panic!("{v:#?}"));
        // A cas whose expected version matched did not apply.
        let h = vec![
            op(0, 1, 2, put("a", "a1", 1)),
            op(
                1,
                3,
                4,
                write(WriteKind::Cas { expected: 1 }, "a", Some("a2"), None),
            ),
        ];
        assert_fails(&h, "item version must not have been 1");
    }

    #[test]
    fn initial_state_and_base_version() {
        let mut initial = BTreeMap::new();
        initial.insert(k("a"), (k("a0"), 7));
        let h = vec![
            op(1, 1, 2, get("a", Some("a0"))),
            op(1, 3, 4, range(all(), vec![e("a", "a0", 7)])),
            op(0, 5, 6, write(WriteKind::Update, "a", Some("a1"), Some(8))),
            op(0, 7, 8, Action::Snapshot { id: 8 }),
        ];
        let r = check(&initial, 7, &h).unwrap_or_else(|v| panic!("{v:#?}"));
        assert_eq!(r.final_state[&k("a")], (k("a1"), 8));
        let h = vec![op(
            0,
            5,
            6,
            write(WriteKind::Insert, "b", Some("b1"), Some(7)),
        )];
        assert!(check(&initial, 7, &h).is_err());
    }

    /// A tiny deterministic generator (SplitMix64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Simulates `threads` clients against a sequential model: each op is
    /// invoked, takes effect at a later step and responds at a later step,
    /// with the steps of all threads interleaved at random. The result is
    /// linearizable by construction.
    fn simulate(seed: u64, threads: usize, ops: usize) -> Vec<Op> {
        #[derive(Clone)]
        enum Phase {
            Idle,
            Invoked(u64),
            Done(u64, Action),
        }
        let mut rng = Rng(seed);
        let mut model: BTreeMap<Key, (Value, u64)> = BTreeMap::new();
        let mut snaps: HashMap<u64, BTreeMap<Key, (Value, u64)>> = HashMap::new();
        let mut version = 0u64;
        let mut clock = 0u64;
        let mut phase = vec![Phase::Idle; threads];
        let mut held: Vec<Option<u64>> = vec![None; threads];
        let mut out = Vec::new();
        let mut seq = 0u64;
        let key = |rng: &mut Rng| vec![b'a' + rng.below(20) as u8];
        let model_range = |m: &BTreeMap<Key, (Value, u64)>, q: &Query| -> Vec<Entry> {
            let mut t: BTreeMap<&[u8], KeyHist<'_>> = BTreeMap::new();
            for (k, (v, ver)) in m {
                t.entry(k).or_default().changes.push((
                    0,
                    Some(Cell {
                        value: v,
                        item_version: *ver,
                    }),
                ));
            }
            let model = Model {
                keys: t,
                writes: vec![],
                values: HashMap::new(),
                spans: vec![],
            };
            model.range_entries(q, 0)
        };
        while out.len() < ops {
            let t = rng.below(threads as u64) as usize;
            clock += 1;
            phase[t] = match phase[t].clone() {
                Phase::Idle => Phase::Invoked(clock),
                Phase::Invoked(inv) => {
                    let k = key(&mut rng);
                    seq += 1;
                    let val = format!("v{seq}").into_bytes();
                    let cur = model.get(&k).cloned();
                    let mut apply = |model: &mut BTreeMap<Key, (Value, u64)>,
                                     new: Option<Value>| {
                        version += 1;
                        match new {
                            Some(v) => model.insert(k.clone(), (v, version)),
                            None => model.remove(&k),
                        };
                        Some(version)
                    };
                    let action = match rng.below(11) {
                        0 => Action::Write {
                            kind: WriteKind::Put,
                            key: k.clone(),
                            value: Some(val.clone()),
                            result: apply(&mut model, Some(val)),
                        },
                        1 => Action::Write {
                            kind: WriteKind::Insert,
                            key: k.clone(),
                            value: Some(val.clone()),
                            result: if cur.is_none() {
                                apply(&mut model, Some(val))
                            } else {
                                None
                            },
                        },
                        2 => Action::Write {
                            kind: WriteKind::Delete,
                            key: k.clone(),
                            value: None,
                            result: if cur.is_some() {
                                apply(&mut model, None)
                            } else {
                                None
                            },
                        },
                        3 => {
                            let expected = match &cur {
                                Some((_, v)) if rng.below(2) == 0 => *v,
                                _ => rng.below(3),
                            };
                            let ok = cas_applies(
                                expected,
                                cur.as_ref().map(|(v, ver)| Cell {
                                    value: v,
                                    item_version: *ver,
                                }),
                            );
                            Action::Write {
                                kind: WriteKind::Cas { expected },
                                key: k.clone(),
                                value: Some(val.clone()),
                                result: if ok {
                                    apply(&mut model, Some(val))
                                } else {
                                    None
                                },
                            }
                        }
                        4 => Action::Write {
                            kind: WriteKind::Update,
                            key: k.clone(),
                            value: Some(val.clone()),
                            result: if cur.is_some() {
                                apply(&mut model, Some(val))
                            } else {
                                None
                            },
                        },
                        5 | 6 => Action::Get {
                            key: k.clone(),
                            result: cur.map(|c| c.0),
                        },
                        7 => {
                            let (a, b) = (key(&mut rng), key(&mut rng));
                            let (a, b) = if a <= b { (a, b) } else { (b, a) };
                            let query = Query {
                                start: Bound::Included(a),
                                end: if rng.below(2) == 0 {
                                    Bound::Included(b)
                                } else {
                                    Bound::Unbounded
                                },
                                limit: (rng.below(2) == 0).then(|| rng.below(5) as usize),
                                reverse: rng.below(2) == 0,
                                floor_start: rng.below(2) == 0,
                            };
                            let result = model_range(&model, &query);
                            Action::Range { query, result }
                        }
                        10 => {
                            // A group applies at once: consecutive versions.
                            let mut keys = vec![k.clone()];
                            for _ in 0..rng.below(3) {
                                let other = key(&mut rng);
                                if !keys.contains(&other) {
                                    keys.push(other);
                                }
                            }
                            let writes = keys
                                .into_iter()
                                .enumerate()
                                .map(|(j, key)| {
                                    seq += 1;
                                    let value = (j == 0 || rng.below(2) == 0)
                                        .then(|| format!("v{seq}").into_bytes());
                                    let result = match &value {
                                        Some(v) => {
                                            version += 1;
                                            model.insert(key.clone(), (v.clone(), version));
                                            Some(version)
                                        }
                                        None => model.remove(&key).map(|_| {
                                            version += 1;
                                            version
                                        }),
                                    };
                                    GroupWrite { key, value, result }
                                })
                                .collect();
                            Action::Group { writes }
                        }
                        _ => match held[t].take() {
                            None => {
                                snaps.insert(version, model.clone());
                                held[t] = Some(version);
                                Action::Snapshot { id: version }
                            }
                            Some(snap) => {
                                let m = &snaps[&snap];
                                if rng.below(2) == 0 {
                                    Action::GetAt {
                                        snap,
                                        key: k.clone(),
                                        result: m.get(&k).map(|(v, ver)| Entry {
                                            key: k.clone(),
                                            value: v.clone(),
                                            version: *ver,
                                        }),
                                    }
                                } else {
                                    Action::RangeAt {
                                        snap,
                                        query: Query {
                                            limit: Some(3),
                                            ..all()
                                        },
                                        result: model_range(
                                            m,
                                            &Query {
                                                limit: Some(3),
                                                ..all()
                                            },
                                        ),
                                    }
                                }
                            }
                        },
                    };
                    Phase::Done(inv, action)
                }
                Phase::Done(invoke, action) => {
                    out.push(Op {
                        thread: t,
                        invoke,
                        respond: clock,
                        action,
                    });
                    Phase::Idle
                }
            };
        }
        out
    }

    #[test]
    fn simulated_linearizable_histories_pass() {
        for seed in 0..20 {
            let h = simulate(seed, 1 + seed as usize % 6, 3000);
            let r =
                check(&BTreeMap::new(), 0, &h).unwrap_or_else(|v| panic!("seed {seed}: {v:#?}"));
            assert!(r.stats.writes_applied > 0 && r.stats.ranges > 0 && r.stats.groups > 0);
        }
    }

    #[test]
    fn simulated_histories_with_a_stale_read_fail() {
        // Make one read that started after a write to its key finished
        // return the value from before that write.
        let mut failed = 0;
        for seed in 0..20 {
            let mut h = simulate(seed, 4, 2000);
            let Some(i) = (0..h.len()).rev().find(|&i| {
                let Action::Get { key, result } = &h[i].action else {
                    return false;
                };
                // The latest write of the key finished before this read began,
                // and an earlier write of the key exists.
                let writes: Vec<&Op> = h[..]
                    .iter()
                    .filter(|o| {
                        matches!(&o.action, Action::Write { key: k2, result: Some(_), .. } if k2 == key)
                            && o.respond < h[i].invoke
                    })
                    .collect();
                writes.len() >= 2
                    && result.is_some()
                    && h.iter().all(|o| {
                        !matches!(&o.action, Action::Write { key: k2, result: Some(_), .. } if k2 == key)
                            || o.respond < h[i].invoke
                            || o.invoke > h[i].respond
                    })
            }) else {
                continue;
            };
            let Action::Get { key, result } = &h[i].action else {
                unreachable!()
            };
            // Find a value of the key from an older write.
            let old = h.iter().find_map(|o| match &o.action {
                Action::Write {
                    key: k2,
                    value: Some(v),
                    result: Some(_),
                    ..
                } if k2 == key && Some(v) != result.as_ref() && o.respond < h[i].invoke => {
                    Some(v.clone())
                }
                _ => None,
            });
            let Some(old) = old else { continue };
            let key = key.clone();
            h[i].action = Action::Get {
                key,
                result: Some(old),
            };
            assert!(check(&BTreeMap::new(), 0, &h).is_err(), "seed {seed}");
            failed += 1;
        }
        assert!(failed >= 10, "only {failed} mutated histories");
    }
}
