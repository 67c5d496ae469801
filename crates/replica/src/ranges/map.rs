//! The range map: which range serves which keys, on which nodes.
//!
//! The keyspace is cut into ranges `[start, end)` that cover it exactly:
//! the first starts at the empty key, each starts where the one before it
//! ends, and the last has no end. Each range is one Raft group. The map is
//! the state of the meta group: every change to it is a [`MapChange`]
//! applied in log order on every replica, so every replica holds the same
//! map at the same index, and a change made against an old view of a range
//! is refused rather than applied to bounds it did not see.
//!
//! Nodes cache the map to route requests. A request names the range and
//! the epoch it routed by; the range checks both ([`RangeDesc::admits`])
//! and refuses a request routed by an older view of its bounds, so that a
//! key is never served by a range that no longer holds it (TiKV's region
//! epoch, CockroachDB's range descriptor generation).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A node's id (`types::NodeId`). Said again here, so that the map
/// imports nothing of the crate and the codec, which the entry types
/// themselves use, can carry its changes.
pub type NodeId = u64;

/// A range's id: never reused, the same on every node, and the id of the
/// Raft group that serves it (`GroupId`): range 0, the first, is served by
/// group 0, the group a cluster of one keyspace has always had.
pub type RangeId = u64;

/// What a range's bounds and replicas were decided by. `version` counts the
/// splits and merges that changed its bounds, `conf_ver` the changes of its
/// replicas; neither ever goes back. A request routed by bounds checks
/// `version` (its replicas may change under it without changing who holds
/// the key); a change of the range itself checks both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Epoch {
    /// Bumped by every split and merge.
    pub version: u64,
    /// Bumped by every change of the range's replicas.
    pub conf_ver: u64,
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.version, self.conf_ver)
    }
}

/// One range: its keys, its replicas and its epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeDesc {
    /// The range's id.
    pub id: RangeId,
    /// The first key it holds (the empty key is the start of the keyspace).
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    /// The first key past it; none: the end of the keyspace.
    #[serde(with = "serde_bytes")]
    pub end: Option<Vec<u8>>,
    /// The nodes holding a replica: voters, then learners catching up.
    pub voters: Vec<NodeId>,
    /// Replicas being brought up to date before they vote (a move adds a
    /// learner, lets it catch up, then promotes it).
    pub learners: Vec<NodeId>,
    /// What its bounds and replicas were decided by.
    pub epoch: Epoch,
}

impl RangeDesc {
    /// Whether `key` lies in `[start, end)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        holds(&self.start, self.end.as_deref(), key)
    }

    /// Whether a request for `key`, routed to this range by a map in which
    /// it had `epoch`, may be served here: the range must still have the
    /// bounds the router saw, and they must hold the key. A refusal names
    /// what the router should learn before it retries.
    pub fn admits(&self, key: &[u8], epoch: Epoch) -> Result<(), Misrouted> {
        if epoch.version != self.epoch.version {
            return Err(Misrouted::StaleEpoch {
                range: self.id,
                current: self.epoch,
            });
        }
        if !self.contains(key) {
            return Err(Misrouted::KeyNotInRange { range: self.id });
        }
        Ok(())
    }

    fn check_epoch(&self, seen: Epoch) -> Result<(), MapError> {
        if seen != self.epoch {
            return Err(MapError::StaleEpoch {
                range: self.id,
                seen,
                current: self.epoch,
            });
        }
        Ok(())
    }
}

/// Whether `key` lies in `[start, end)` (`end` none: to the end).
fn holds(start: &[u8], end: Option<&[u8]>, key: &[u8]) -> bool {
    key >= start && end.is_none_or(|e| key < e)
}

/// `range ID [START, END) epoch V.C`, as an operator reads a range.
fn write_bounds(
    f: &mut fmt::Formatter<'_>,
    id: RangeId,
    start: &[u8],
    end: Option<&[u8]>,
    epoch: Epoch,
) -> fmt::Result {
    write!(f, "range {id} [{}, ", Key(start))?;
    match end {
        Some(e) => write!(f, "{})", Key(e))?,
        None => f.write_str("end)")?,
    }
    write!(f, " epoch {epoch}")
}

impl fmt::Display for RangeDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bounds(f, self.id, &self.start, self.end.as_deref(), self.epoch)?;
        write!(f, " voters {:?}", self.voters)?;
        if !self.learners.is_empty() {
            write!(f, " learners {:?}", self.learners)?;
        }
        Ok(())
    }
}

/// A key as an operator reads it: printable ASCII as it is, other bytes as
/// `\xNN`.
struct Key<'a>(&'a [u8]);

impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for &b in self.0 {
            if b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ' {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        f.write_str("\"")
    }
}

/// Why a range refused a request: the router's map is out of date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misrouted {
    /// The range was split or merged since the router's map: refresh it.
    StaleEpoch {
        /// The range that refused.
        range: RangeId,
        /// Its epoch now.
        current: Epoch,
    },
    /// The key is not in the range's bounds (the router's map is wrong).
    KeyNotInRange {
        /// The range that refused.
        range: RangeId,
    },
}

/// A change to the map, as the meta group's log carries it. Each names the
/// epoch of every range it changes as the proposer saw it, and is refused
/// if any has changed since: two changes decided from one view cannot both
/// apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapChange {
    /// Cut `range` at `at`: the range keeps `[start, at)`, and a new range
    /// `new_id` with the same replicas takes `[at, end)`.
    Split {
        /// The range cut.
        range: RangeId,
        /// Its epoch as the proposer saw it.
        epoch: Epoch,
        /// The first key of the right half; strictly inside the range.
        #[serde(with = "serde_bytes")]
        at: Vec<u8>,
        /// The right half's id, never used before.
        new_id: RangeId,
    },
    /// Join `right` into `left`, its neighbour before it, on the same
    /// replicas; `right` is gone.
    Merge {
        /// The range that takes the union.
        left: RangeId,
        /// Its epoch as the proposer saw it.
        left_epoch: Epoch,
        /// The range that ends.
        right: RangeId,
        /// Its epoch as the proposer saw it.
        right_epoch: Epoch,
    },
    /// Set `range`'s replicas (a move is several of these: add a learner,
    /// promote it, remove a voter).
    Replicas {
        /// The range changed.
        range: RangeId,
        /// Its epoch as the proposer saw it.
        epoch: Epoch,
        /// The voters after the change; never empty.
        voters: Vec<NodeId>,
        /// The learners after the change.
        learners: Vec<NodeId>,
    },
    /// Range `range`'s group has carried out its merge (taken the keys of
    /// the range merged into it): its bounds and nodes may change again.
    Merged {
        /// The range.
        range: RangeId,
        /// The epoch version the merge gave it: a report of an earlier
        /// merge of the same range changes nothing.
        version: u64,
    },
}

/// Why a [`MapChange`] was refused; the map is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// No range has this id (merged away, or never was).
    NoSuchRange(RangeId),
    /// The range changed since the proposer saw it.
    StaleEpoch {
        /// The range.
        range: RangeId,
        /// The epoch the change was decided by.
        seen: Epoch,
        /// Its epoch now.
        current: Epoch,
    },
    /// A split key on or outside the range's bounds.
    SplitKeyOutside {
        /// The range.
        range: RangeId,
    },
    /// A new range's id is taken, or was used before.
    IdUsed(RangeId),
    /// A merge of ranges that are not neighbours in this order.
    NotAdjacent {
        /// The left range named.
        left: RangeId,
        /// The right range named.
        right: RangeId,
    },
    /// A merge of ranges on different replicas (the scheduler moves them
    /// onto the same nodes first).
    ReplicasDiffer {
        /// The left range named.
        left: RangeId,
        /// The right range named.
        right: RangeId,
    },
    /// A replica set with no voter, or a node twice.
    BadReplicas(RangeId),
    /// The range has merged with its neighbour in the map, and its group
    /// has not taken the neighbour's keys yet: its bounds and replicas
    /// stay as they are until then.
    Merging(RangeId),
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::NoSuchRange(id) => write!(f, "no range {id}"),
            MapError::StaleEpoch {
                range,
                seen,
                current,
            } => write!(
                f,
                "range {range} changed since the change was decided (epoch {seen}, now {current})"
            ),
            MapError::SplitKeyOutside { range } => {
                write!(f, "the split key is not strictly inside range {range}")
            }
            MapError::IdUsed(id) => write!(f, "range id {id} was used before"),
            MapError::NotAdjacent { left, right } => {
                write!(f, "range {right} does not start where range {left} ends")
            }
            MapError::ReplicasDiffer { left, right } => {
                write!(f, "ranges {left} and {right} are not on the same replicas")
            }
            MapError::BadReplicas(id) => write!(
                f,
                "range {id}: a replica set needs a voter, and no node twice"
            ),
            MapError::Merging(id) => write!(
                f,
                "range {id} is merging with the range after it: try again once it has"
            ),
        }
    }
}

impl std::error::Error for MapError {}

/// The ranges, in key order, covering the keyspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeMap {
    /// By start key.
    ranges: BTreeMap<Vec<u8>, RangeDesc>,
    /// Above every id ever used: ids are never reused, so a request for a
    /// range merged away cannot reach a new range by its old id.
    next_id: RangeId,
    /// Bumped by every change applied: a cached copy at a lower generation
    /// may be out of date.
    generation: u64,
    /// Ranges merged with their right neighbour here whose groups have not
    /// taken its keys yet (`MapChange::Merged` clears them): no split,
    /// merge or move of them is taken meanwhile, so the group carries out
    /// the merge on the bounds and nodes the map merged.
    merging: std::collections::BTreeSet<RangeId>,
}

impl RangeMap {
    /// A map of one range, id 0, holding the whole keyspace on `voters`.
    pub fn new(voters: Vec<NodeId>) -> RangeMap {
        let first = RangeDesc {
            id: 0,
            start: Vec::new(),
            end: None,
            voters,
            learners: Vec::new(),
            epoch: Epoch::default(),
        };
        RangeMap {
            ranges: BTreeMap::from([(Vec::new(), first)]),
            next_id: 1,
            generation: 0,
            merging: Default::default(),
        }
    }

    /// Whether range `id` has merged here and its group has not carried
    /// the merge out yet.
    pub fn is_merging(&self, id: RangeId) -> bool {
        self.merging.contains(&id)
    }

    /// A map from its parts, as snapshots written before merges hold it.
    pub(crate) fn from_parts(
        ranges: BTreeMap<Vec<u8>, RangeDesc>,
        next_id: RangeId,
        generation: u64,
    ) -> RangeMap {
        RangeMap {
            ranges,
            next_id,
            generation,
            merging: Default::default(),
        }
    }

    /// The range holding `key`.
    pub fn route(&self, key: &[u8]) -> &RangeDesc {
        // The first range starts at the empty key, so one always starts at
        // or before any key.
        let (_, r) = self
            .ranges
            .range::<[u8], _>((std::ops::Bound::Unbounded, std::ops::Bound::Included(key)))
            .next_back()
            .expect("the first range starts at the empty key");
        r
    }

    /// The ranges holding any key between `start` and `end`, in key
    /// order.
    pub fn spanning(
        &self,
        start: std::ops::Bound<&[u8]>,
        end: std::ops::Bound<&[u8]>,
    ) -> impl Iterator<Item = &RangeDesc> + '_ {
        use std::ops::Bound;
        let lo = match start {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let first = self.route(lo).start.clone();
        let end = end.map(<[u8]>::to_vec);
        self.ranges
            .range(first..)
            .map(|(_, r)| r)
            .take_while(move |r| match &end {
                Bound::Included(k) => r.start <= *k,
                Bound::Excluded(k) => r.start < *k,
                Bound::Unbounded => true,
            })
    }

    /// The range with this id.
    pub fn get(&self, id: RangeId) -> Option<&RangeDesc> {
        self.ranges.values().find(|r| r.id == id)
    }

    /// Every range, in key order.
    pub fn ranges(&self) -> impl Iterator<Item = &RangeDesc> {
        self.ranges.values()
    }

    /// How many ranges there are.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Never: a map covers the keyspace with at least one range.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The number of changes applied to the map.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// An id no range has ever had, for a split's right half.
    pub fn next_id(&self) -> RangeId {
        self.next_id
    }

    fn start_of(&self, id: RangeId) -> Result<Vec<u8>, MapError> {
        self.get(id)
            .map(|r| r.start.clone())
            .ok_or(MapError::NoSuchRange(id))
    }

    /// Applies `change`, or refuses it and leaves the map as it was.
    /// Deterministic: every replica of the meta group answers alike.
    pub fn apply(&mut self, change: &MapChange) -> Result<(), MapError> {
        match change {
            MapChange::Split {
                range,
                epoch,
                at,
                new_id,
            } => {
                let key = self.start_of(*range)?;
                let r = &self.ranges[&key];
                r.check_epoch(*epoch)?;
                self.not_merging(*range)?;
                if at.as_slice() <= r.start.as_slice() || !r.contains(at) {
                    return Err(MapError::SplitKeyOutside { range: *range });
                }
                if *new_id < self.next_id {
                    return Err(MapError::IdUsed(*new_id));
                }
                let r = self.ranges.get_mut(&key).expect("found above");
                let version = r.epoch.version + 1;
                r.epoch.version = version;
                let right = RangeDesc {
                    id: *new_id,
                    start: at.clone(),
                    end: r.end.replace(at.clone()),
                    voters: r.voters.clone(),
                    learners: r.learners.clone(),
                    epoch: Epoch {
                        version,
                        conf_ver: r.epoch.conf_ver,
                    },
                };
                self.ranges.insert(at.clone(), right);
                self.next_id = new_id + 1;
            }
            MapChange::Merge {
                left,
                left_epoch,
                right,
                right_epoch,
            } => {
                let lkey = self.start_of(*left)?;
                let rkey = self.start_of(*right)?;
                let (l, r) = (&self.ranges[&lkey], &self.ranges[&rkey]);
                l.check_epoch(*left_epoch)?;
                r.check_epoch(*right_epoch)?;
                self.not_merging(*left)?;
                self.not_merging(*right)?;
                if l.end.as_deref() != Some(r.start.as_slice()) {
                    return Err(MapError::NotAdjacent {
                        left: *left,
                        right: *right,
                    });
                }
                if sorted(&l.voters) != sorted(&r.voters)
                    || sorted(&l.learners) != sorted(&r.learners)
                {
                    return Err(MapError::ReplicasDiffer {
                        left: *left,
                        right: *right,
                    });
                }
                let r = self.ranges.remove(&rkey).expect("found above");
                let l = self.ranges.get_mut(&lkey).expect("found above");
                l.end = r.end;
                // Above both halves' versions: a request routed by either
                // half's old bounds is refused by the merged range.
                l.epoch.version = l.epoch.version.max(r.epoch.version) + 1;
                l.epoch.conf_ver = l.epoch.conf_ver.max(r.epoch.conf_ver);
                self.merging.insert(*left);
            }
            MapChange::Merged { range, version } => {
                let key = self.start_of(*range)?;
                if self.ranges[&key].epoch.version != *version || !self.merging.contains(range) {
                    return Err(MapError::StaleEpoch {
                        range: *range,
                        seen: Epoch {
                            version: *version,
                            conf_ver: self.ranges[&key].epoch.conf_ver,
                        },
                        current: self.ranges[&key].epoch,
                    });
                }
                self.merging.remove(range);
            }
            MapChange::Replicas {
                range,
                epoch,
                voters,
                learners,
            } => {
                let key = self.start_of(*range)?;
                self.ranges[&key].check_epoch(*epoch)?;
                self.not_merging(*range)?;
                let mut all: Vec<NodeId> = voters.iter().chain(learners).copied().collect();
                all.sort_unstable();
                all.dedup();
                if voters.is_empty() || all.len() != voters.len() + learners.len() {
                    return Err(MapError::BadReplicas(*range));
                }
                let r = self.ranges.get_mut(&key).expect("found above");
                r.voters = voters.clone();
                r.learners = learners.clone();
                r.epoch.conf_ver += 1;
            }
        }
        self.generation += 1;
        Ok(())
    }

    /// Sets range `id`'s replicas to its group's membership as applied at
    /// log index `at`, which becomes its `conf_ver`: the map follows a
    /// membership change of the group where that change commits, and
    /// every replica, whatever path it took to the same index (the log, a
    /// snapshot, an older snapshot without a map), holds the same epoch.
    /// A membership at or below the one recorded changes nothing.
    pub fn follow_membership(
        &mut self,
        id: RangeId,
        voters: Vec<NodeId>,
        learners: Vec<NodeId>,
        at: u64,
    ) -> Result<(), MapError> {
        let key = self.start_of(id)?;
        let r = self.ranges.get_mut(&key).expect("found above");
        if at < r.epoch.conf_ver
            || (at == r.epoch.conf_ver && r.voters == voters && r.learners == learners)
        {
            return Ok(());
        }
        r.voters = voters;
        r.learners = learners;
        r.epoch.conf_ver = at;
        self.generation += 1;
        Ok(())
    }

    fn not_merging(&self, id: RangeId) -> Result<(), MapError> {
        if self.merging.contains(&id) {
            return Err(MapError::Merging(id));
        }
        Ok(())
    }

    /// Checks that the ranges cover the keyspace exactly once, in order,
    /// with distinct ids below `next_id`: what every change must keep.
    pub fn validate(&self) -> Result<(), String> {
        let mut expect_start: Option<&[u8]> = Some(&[]);
        let mut ids = std::collections::BTreeSet::new();
        for (key, r) in &self.ranges {
            if key.as_slice() != r.start.as_slice() {
                return Err(format!("{r} is filed under another start key"));
            }
            match expect_start {
                Some(s) if s == r.start.as_slice() => {}
                Some(_) => return Err(format!("{r} does not start where its neighbour ends")),
                None => return Err(format!("{r} follows a range that ends the keyspace")),
            }
            if r.end
                .as_ref()
                .is_some_and(|e| e.as_slice() <= r.start.as_slice())
            {
                return Err(format!("{r} is empty"));
            }
            if !ids.insert(r.id) || r.id >= self.next_id {
                return Err(format!("{r}: id taken twice or not below {}", self.next_id));
            }
            expect_start = r.end.as_deref();
        }
        if expect_start.is_some() {
            return Err("the last range does not reach the end of the keyspace".into());
        }
        if let Some(id) = self.merging.iter().find(|id| !ids.contains(id)) {
            return Err(format!("range {id} is merging but not in the map"));
        }
        Ok(())
    }
}

fn sorted(v: &[NodeId]) -> Vec<NodeId> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// What a group knows of the range it serves: its id, its bounds and
/// epoch. It refuses ops on keys outside its bounds, and splits only as a
/// split decided by its current epoch says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// The range's id (and its group's).
    pub id: RangeId,
    /// Its first key.
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    /// The first key past it; none: the end of the keyspace.
    #[serde(with = "serde_bytes")]
    pub end: Option<Vec<u8>>,
    /// Its epoch (the version moves with its splits; replica changes are
    /// its group's membership).
    pub epoch: Epoch,
    /// Merged into the range on its left (`ranges::merge`): the range
    /// serves nothing any more, and its keys, as they stood when it was
    /// retired, are what that range takes. The bounds stay those it had.
    pub retired: bool,
}

impl Bounds {
    /// Range `id` over the whole keyspace, as group 0 starts.
    pub fn whole(id: RangeId) -> Bounds {
        Bounds {
            id,
            start: Vec::new(),
            end: None,
            epoch: Epoch::default(),
            retired: false,
        }
    }

    /// Whether `key` lies inside (never, once retired).
    pub fn contains(&self, key: &[u8]) -> bool {
        !self.retired && holds(&self.start, self.end.as_deref(), key)
    }

    /// Applies `split` to these bounds: they keep the left part, and the
    /// right part's bounds are returned. Refused, changing nothing, if the
    /// split was decided by another epoch or its key is not strictly
    /// inside.
    pub fn split(&mut self, split: &SplitRange) -> Result<Bounds, MapError> {
        if split.epoch != self.epoch || self.retired {
            return Err(MapError::StaleEpoch {
                range: self.id,
                seen: split.epoch,
                current: self.epoch,
            });
        }
        if split.at.as_slice() <= self.start.as_slice() || !self.contains(&split.at) {
            return Err(MapError::SplitKeyOutside { range: self.id });
        }
        if split.new_id <= self.id {
            return Err(MapError::IdUsed(split.new_id));
        }
        self.epoch.version += 1;
        let right = Bounds {
            id: split.new_id,
            start: split.at.clone(),
            end: self.end.replace(split.at.clone()),
            epoch: self.epoch,
            retired: false,
        };
        Ok(right)
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bounds(f, self.id, &self.start, self.end.as_deref(), self.epoch)?;
        if self.retired {
            f.write_str(" (retired: merged into the range on its left)")?;
        }
        Ok(())
    }
}

/// A split of a range, carried through the range's own group's log and
/// applied by each of its replicas at the same index: the range keeps the
/// keys below `at`, and a new range `new_id`, its own group on the same
/// nodes, starts with the keys from `at` on as they stood at that index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitRange {
    /// The range's epoch as the split was decided.
    pub epoch: Epoch,
    /// The new range's first key.
    #[serde(with = "serde_bytes")]
    pub at: Vec<u8>,
    /// The new range's id: above the splitting range's, never used before
    /// (the meta group's map hands them out).
    pub new_id: RangeId,
}

/// What the scheduler would change next for ranges to hold `replicas`
/// voters each, spread over `nodes` (the cluster's members) so that no
/// node holds two more replicas than another: one range's new voters,
/// or none when the placement is settled. Range 0 (the meta group,
/// on every member) is left as it is and not counted. Decided from the
/// map alone, so any node deciding from the same map decides alike; one
/// change at a time, each a step the range's leader then carries out.
pub fn next_placement(
    map: &RangeMap,
    nodes: &[NodeId],
    replicas: usize,
) -> Option<(RangeId, Vec<NodeId>)> {
    placement(map, nodes, replicas, true)
}

/// [`next_placement`]'s steps that keep each range's count of voters: a
/// replica off a node that is no member (or is down) replaced, one too
/// many dropped, one too few added; none that only evens the nodes out.
pub fn next_replacement(
    map: &RangeMap,
    nodes: &[NodeId],
    replicas: usize,
) -> Option<(RangeId, Vec<NodeId>)> {
    placement(map, nodes, replicas, false)
}

/// [`next_placement`], with the steps for balance or without.
fn placement(
    map: &RangeMap,
    nodes: &[NodeId],
    replicas: usize,
    balance: bool,
) -> Option<(RangeId, Vec<NodeId>)> {
    let replicas = replicas.min(nodes.len());
    if replicas == 0 {
        return None;
    }
    let mut load: BTreeMap<NodeId, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    let ranges: Vec<&RangeDesc> = map.ranges().filter(|r| r.id != 0).collect();
    for r in &ranges {
        for v in r.voters.iter().chain(&r.learners) {
            if let Some(l) = load.get_mut(v) {
                *l += 1;
            }
        }
    }
    // The most loaded node first (ties: the highest id), and the least.
    let busiest = |among: &mut dyn Iterator<Item = &NodeId>| {
        among
            .max_by_key(|n| (load.get(n).copied().unwrap_or(usize::MAX), **n))
            .copied()
    };
    let idlest = |except: &[NodeId]| {
        load.iter()
            .filter(|(n, _)| !except.contains(n))
            .min_by_key(|(n, l)| (**l, **n))
            .map(|(n, _)| *n)
    };
    for r in ranges.iter().filter(|r| !map.is_merging(r.id)) {
        // A replica on a node that is no member is replaced first.
        if let Some(gone) = r.voters.iter().find(|v| !load.contains_key(v)) {
            let mut voters: Vec<NodeId> = r.voters.iter().copied().filter(|v| v != gone).collect();
            if voters.len() < replicas
                && let Some(n) = idlest(&r.voters)
            {
                voters.push(n);
            }
            return Some((r.id, sorted(&voters)));
        }
        if r.voters.len() > replicas {
            let drop = busiest(&mut r.voters.iter())?;
            let voters: Vec<NodeId> = r.voters.iter().copied().filter(|&v| v != drop).collect();
            return Some((r.id, voters));
        }
        if r.voters.len() < replicas
            && let Some(n) = idlest(&r.voters)
        {
            let mut voters = r.voters.clone();
            voters.push(n);
            return Some((r.id, sorted(&voters)));
        }
    }
    if !balance {
        return None;
    }
    // Balance: move one replica from the busiest node to the idlest one,
    // of a range the one holds and the other does not; rather one whose
    // neighbours are on other nodes than one on the same nodes as a
    // neighbour (lined up to merge, or just split), so that a merge's
    // line-up is not undone while it waits.
    let most = busiest(&mut load.keys())?;
    let least = idlest(&[])?;
    if load[&most] <= load[&least] + 1 {
        return None;
    }
    let lined_up = |i: usize| {
        let same = |j: usize| {
            ranges
                .get(j)
                .is_some_and(|n| sorted(&n.voters) == sorted(&ranges[i].voters))
        };
        same(i + 1) || (i > 0 && same(i - 1))
    };
    let (_, r) = ranges
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            !map.is_merging(r.id) && r.voters.contains(&most) && !r.voters.contains(&least)
        })
        .min_by_key(|(i, _)| lined_up(*i))?;
    let mut voters: Vec<NodeId> = r.voters.iter().copied().filter(|&v| v != most).collect();
    voters.push(least);
    Some((r.id, sorted(&voters)))
}

/// Two neighbours on different nodes, small enough together to merge:
/// which one is placed on the other's nodes first (its id and new
/// voters), so that they can merge; none where lining them up would leave
/// the placement unsettled, now or once merged (`next_placement` with
/// `nodes` and `replicas`; `replicas` 0: placement off, any move goes).
///
/// The right range goes onto the left one's nodes, or else the left onto
/// the right's, but never a range already on the same nodes as its other
/// neighbour: a move never undoes a line-up, so every move lines up one
/// more pair and the moves end. Without that rule a range could be pulled
/// back and forth for good, its left neighbour's leader lining it up with
/// that neighbour and its own leader with the range on its right, each
/// before the other's merge was taken. (Two leaders deciding from the same
/// map at once both name the range's epoch: the map takes the first.)
pub fn line_up(
    map: &RangeMap,
    left: RangeId,
    nodes: &[NodeId],
    replicas: usize,
) -> Option<(RangeId, Vec<NodeId>)> {
    let l = map.get(left)?;
    let r = map.route(l.end.as_deref()?);
    let settled = |m: &RangeMap| replicas == 0 || next_placement(m, nodes, replicas).is_none();
    let same_nodes = |a: &RangeDesc, b: &RangeDesc| sorted(&a.voters) == sorted(&b.voters);
    if same_nodes(l, r) || !settled(map) {
        return None;
    }
    // `range` placed on `to`'s nodes, then the pair (`a`, `b`) merged:
    // the new voters, if the placement is settled after both.
    let moved = |range: &RangeDesc, to: &RangeDesc, (a, b): (&RangeDesc, &RangeDesc)| {
        // Range 0 never moves, and nothing goes onto its nodes (every
        // member: more voters than the placement keeps).
        if range.id == 0 || to.id == 0 || !a.learners.is_empty() || !b.learners.is_empty() {
            return None;
        }
        let mut after = map.clone();
        after
            .apply(&MapChange::Replicas {
                range: range.id,
                epoch: range.epoch,
                voters: to.voters.clone(),
                learners: Vec::new(),
            })
            .ok()?;
        let (ae, be) = (after.get(a.id)?.epoch, after.get(b.id)?.epoch);
        after
            .apply(&MapChange::Merge {
                left: a.id,
                left_epoch: ae,
                right: b.id,
                right_epoch: be,
            })
            .ok()?;
        settled(&after).then(|| (range.id, to.voters.clone()))
    };
    let before = map
        .ranges()
        .find(|p| p.end.as_deref() == Some(l.start.as_slice()));
    let after = r.end.as_deref().map(|end| map.route(end));
    // The right range, unless it is lined up with the range after it.
    if !after.is_some_and(|n| same_nodes(r, n))
        && let Some(right_moves) = moved(r, l, (l, r))
    {
        return Some(right_moves);
    }
    // The left range, unless it is lined up with the range before it.
    if before.is_some_and(|p| same_nodes(p, l)) {
        return None;
    }
    moved(l, r, (l, r))
}
