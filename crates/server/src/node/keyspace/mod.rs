//! The keys this node serves, as reads see them (`docs/cluster.md`,
//! "Ranges"): one store (a single node, or a cluster whose keyspace is
//! one range: every read takes the turn's store, as it always has), or,
//! once the keyspace is cut into ranges, the stores of the ranges this
//! node holds replicas of, in key order. A read of one key goes to its
//! range's store; a read of a span of keys (RANGE, SCAN, KEYS, DBSIZE,
//! FLOOR, CEIL, a batch of GETs) visits each range's store in key order
//! and answers as one store would. The map leads the ranges: a split it
//! records is read from the range that still holds the keys until the new
//! range's group has started here. A range this node holds no replica of
//! is read at a node that holds one (`Host::read_remote`), which answers
//! after a read index of its own. What a read waits for (another node's
//! answer, the ranges settling at a timestamp) it waits for in one place,
//! [`Keyspace::wait`]: with the connection's parking, the connection parks
//! instead and the request runs again once the answer lands
//! (`node::park`), so the event loop serves others meanwhile.
//!
//! A read inside one range is read at that range's read index; a read
//! that crosses ranges is read at one timestamp across them all
//! (`at_timestamp`), one snapshot of them, as one store's read is.
//! A snapshot of a split keyspace is one timestamp every range pins
//! (`Cluster::snapshot`), read as reads across ranges are.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Error, ItemView, Range, Result, SnapshotId, SnapshotInfo, Store};
use combkv_replica::ranges::{RangeDesc, RangeMap};
use combkv_replica::{At, RemoteItem, RemoteRead, Replica};

use crate::cluster::{Change, Cluster, ReadMark, ReadScope, Settled};
use crate::node::park::{Parking, Retry};
use crate::state::Shared;

mod at_timestamp;

use at_timestamp::{Got, at_one_timestamp, at_snapshot, settled, with_timestamp};

/// How long a read waits for a range's group to start on this node after
/// its split applied here (it starts within milliseconds).
const GROUP_START_WAIT: Duration = Duration::from_secs(2);

/// How long a read waits before it looks again for a range's group to
/// start.
const START_PAUSE: Duration = Duration::from_millis(2);

/// See the module's documentation.
pub(crate) enum Keyspace<'a> {
    /// One store holds every key.
    One(&'a Store),
    /// The keyspace is cut into ranges, each its own group's store; reads
    /// inside one range are linearizable for requests that arrived before
    /// `since`, when a read index over some of them began (`Cluster::is_fresh`).
    /// With `parking`, a read that would wait parks its connection instead.
    Ranges {
        cluster: &'a Cluster,
        since: Option<Instant>,
        parking: Option<Parking<'a>>,
    },
}

/// Where a range's keys are read.
enum Source {
    /// In this node's store that holds them, of that replica (told of the
    /// reads it serves, for splits by load).
    Local(Arc<Store>, Replica),
    /// At another node: this node holds no replica of the range.
    Remote(u64),
}

impl<'a> Keyspace<'a> {
    /// The keyspace a read on `shared` sees, `store` being the turn's, for
    /// requests let through on read index `mark` (None: one over every
    /// range, taken before); with `parking`, its reads park the connection
    /// rather than wait.
    pub(crate) fn of(
        shared: &'a Shared,
        store: &'a Store,
        mark: Option<ReadMark>,
        parking: Option<Parking<'a>>,
    ) -> Keyspace<'a> {
        if let Some(cluster) = shared.cluster()
            && (cluster.is_split()
                || !std::ptr::eq(store, &*cluster.store())
                || mark.is_some_and(|m| !m.all))
        {
            // Split, or the turn's store replaced since the turn took it (a
            // merge into range 0 makes its store anew): read where the
            // keys are now. Or the request's read index covered only some
            // ranges of a keyspace that has merged back into one since:
            // range 0 is read after a read index of its own if none since
            // covered it (`Cluster::is_fresh`).
            return Keyspace::Ranges {
                cluster,
                since: mark.map(|m| m.since),
                parking,
            };
        }
        Keyspace::One(store)
    }

    /// How this keyspace's reads park their connection, if they may
    /// (not while the loop drains at shutdown).
    fn parking(&self) -> Option<Parking<'a>> {
        match self {
            Keyspace::Ranges { parking, .. } => parking.filter(Parking::can_park),
            Keyspace::One(_) => None,
        }
    }

    /// Everything a read waits for: `Cluster::settle_at` (ranges settled
    /// at a timestamp, reads run at other nodes, `how`). With parking, the
    /// answer of the round that asked this if it landed; else the round is
    /// sent in the background and the connection parks ([`park::parked`]
    /// is returned: the request answers nothing and runs again). Without,
    /// the event loop waits for the answer.
    ///
    /// [`park::parked`]: crate::node::park::parked
    fn wait(
        &self,
        cluster: &Cluster,
        how: combkv_replica::At,
        local: Vec<Replica>,
        remote: Vec<(u64, Vec<RemoteRead>)>,
    ) -> Result<Settled> {
        let asks_here = match how {
            combkv_replica::At::Settle(_) => true,
            combkv_replica::At::Now => !local.is_empty(),
            combkv_replica::At::Pinned(_) => false,
        };
        if remote.is_empty() && !asks_here {
            // Nothing to wait for: no floor to raise, no read index, nothing
            // read elsewhere (a snapshot's ranges all pinned here).
            return Ok(Vec::new());
        }
        if let Some(p) = self.parking() {
            if let Some(answer) = p.landed_round(how, &local, &remote) {
                return answer;
            }
            if p.park_round(cluster, how, local.clone(), remote.clone(), None) {
                return Err(crate::node::park::parked());
            }
        }
        cluster.settle_at(how, &local, remote)
    }

    /// SNAPSHOT CREATE: the one store's snapshot, or, the keyspace split,
    /// one timestamp every range pins (`Change::Snapshot`): with parking,
    /// taken while the connection parks (one log round per range).
    pub(crate) fn snapshot(&self, ttl: Duration) -> Result<SnapshotId> {
        let (cluster, parking) = match self {
            Keyspace::One(s) => return s.snapshot(ttl),
            Keyspace::Ranges {
                cluster, parking, ..
            } => (cluster, parking),
        };
        // Checked before it is asked; run again with its answer landed,
        // `add_snapshot` checks the count again (and releases the pins).
        if !parking.is_some_and(|p| p.change_asked()) {
            cluster.snapshot_check(ttl)?;
        }
        let change = Change::Snapshot { ttl };
        let pinned = crate::node::park::change(*parking, cluster, change)
            .ok_or_else(crate::node::park::parked)?;
        match pinned {
            Ok(Some(at)) => cluster.add_snapshot(at, ttl).map(SnapshotId),
            Ok(None) => Err(Error::Corrupt("a snapshot without a timestamp".into())),
            Err(e) => Err(e.into()),
        }
    }

    /// SNAPSHOT RELEASE.
    pub(crate) fn release_snapshot(&self, id: SnapshotId) -> bool {
        match self {
            Keyspace::One(s) => s.release_snapshot(id),
            Keyspace::Ranges { cluster, .. } => cluster.release_snapshot(id.0),
        }
    }

    /// SNAPSHOT LIST.
    pub(crate) fn list_snapshots(&self) -> Vec<SnapshotInfo> {
        match self {
            Keyspace::One(s) => s.list_snapshots(),
            Keyspace::Ranges { cluster, .. } => cluster.list_snapshots(),
        }
    }

    /// GETAT: the item of `key` as of snapshot `id`.
    pub(crate) fn get_at(&self, id: SnapshotId, key: &[u8]) -> Result<Option<combkv::Item>> {
        let cluster = match self {
            Keyspace::One(s) => return s.get_at(id, key),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        let at = cluster.snapshot_at(id.0)?;
        combkv::check_key(key, cluster.max_key_len())?;
        let found = at_snapshot(self, cluster, at, |map| {
            Ok(vec![(
                map.route(key).clone(),
                RemoteRead::Get(key.to_vec()),
                (),
            )])
        })?;
        match found.into_iter().next() {
            Some((Got::Local(past, _), ())) => past.get(key),
            Some((Got::Remote(items), ())) => Ok(items.first().map(|it| view(it).to_item())),
            None => Ok(None),
        }
    }

    /// RANGEAT: [`Keyspace::scan`] as of snapshot `id`.
    pub(crate) fn scan_at(
        &self,
        id: SnapshotId,
        r: &Range,
        f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        let cluster = match self {
            Keyspace::One(s) => return s.scan_at(id, r, f),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        let at = cluster.snapshot_at(id.0)?;
        let mut r = r.clone();
        if r.floor_start {
            if let Bound::Included(k) = &r.start {
                let below = Range::new(Bound::Unbounded, Bound::Included(k.clone()))
                    .reversed()
                    .with_limit(1);
                let mut floor = None;
                self.scan_at_timestamp(cluster, &below, Some(at), |it| {
                    floor = Some(it.key.to_vec());
                    false
                })?;
                if let Some(k) = floor {
                    r.start = Bound::Included(k);
                }
            }
            r.floor_start = false;
        }
        self.scan_at_timestamp(cluster, &r, Some(at), f)
    }

    /// Where range `r`'s keys are read: this node's replica of it, or,
    /// while a split the map records is not carried out here yet (the
    /// range's group not started), the replica whose own bounds still hold
    /// them; a new group starts a moment after its split applies, and a
    /// read in that moment waits for it (up to `GROUP_START_WAIT`). A
    /// range the map names no replica of here is read remotely.
    fn source(&self, cluster: &Cluster, r: &RangeDesc) -> Result<Source> {
        let source = Self::place(cluster, self.parking(), r)?;
        if let Source::Local(_, replica) = source {
            let since = match self {
                Keyspace::Ranges { since, .. } => *since,
                Keyspace::One(_) => None,
            };
            // A replica no read index of this request covered takes one of
            // its own (`At::Now` on it), which marks it covered.
            if !cluster.is_fresh(&replica, since) {
                self.wait(cluster, At::Now, vec![replica.clone()], Vec::new())?;
            }
            // The read index may have brought a split or merge in: what
            // the group holds now is what the read sees, and its store is
            // taken now (a merge makes the store anew, and the writes the
            // read index covers may be in the new one only).
            if !covers(&replica.bounds(), r) {
                return Err(Error::WrongRange(format!(
                    "range {}: its group changed its bounds under the read",
                    r.id
                )));
            }
            return Ok(Source::Local(replica.current_store(), replica));
        }
        Ok(source)
    }

    /// [`Keyspace::source`] without the read index a local read takes (a
    /// read at a timestamp raises the range's floor instead).
    fn place(cluster: &Cluster, parking: Option<Parking<'_>>, r: &RangeDesc) -> Result<Source> {
        // Set at the first pause of a wait on the event loop.
        let mut deadline = None;
        let here = r.voters.contains(&cluster.id()) || r.learners.contains(&cluster.id());
        loop {
            match cluster
                .range_replica(r.id)
                .or_else(|| cluster.replica_holding(&r.start))
            {
                // A learner still catching up serves no read: one of the
                // range's voters does.
                Some(replica) if replica.is_voter() => {
                    let b = replica.bounds();
                    if covers(&b, r) {
                        return Ok(Source::Local(replica.current_store(), replica));
                    }
                    // A merge the map records that the group has not
                    // carried out yet (it takes a moment): the read waits.
                    // Otherwise the group applied a split this node's map
                    // does not have yet and holds less than the map says:
                    // the map is brought up to date and the read routed
                    // again.
                    let absorbing = !b.retired
                        && b.epoch.version < r.epoch.version
                        && b.start == r.start
                        && b.end
                            .as_ref()
                            .is_some_and(|e| r.end.as_ref().is_none_or(|re| re > e));
                    if !absorbing {
                        return Err(Error::WrongRange(format!(
                            "range {}: this node's range map is behind its groups",
                            r.id
                        )));
                    }
                }
                Some(_) => return Ok(Source::Remote(r.id)),
                None if !here => return Ok(Source::Remote(r.id)),
                None => {}
            }
            let late = || {
                Error::Unavailable(format!(
                    "range {} has not started or merged on this node yet",
                    r.id
                ))
            };
            if let Some(p) = parking
                && p.can_park()
            {
                // Parked for the pause (a round that asks nothing), and
                // placed again in the run after it.
                if p.tries(Retry::Start) * START_PAUSE.as_millis() as u64
                    >= GROUP_START_WAIT.as_millis() as u64
                {
                    return Err(late());
                }
                p.tried(Retry::Start);
                p.park_round(cluster, At::Now, Vec::new(), Vec::new(), Some(START_PAUSE));
                return Err(crate::node::park::parked());
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + GROUP_START_WAIT);
            if Instant::now() > deadline {
                return Err(late());
            }
            std::thread::sleep(START_PAUSE);
        }
    }

    /// `reads` of range `range` at a node that holds it, after a read
    /// index there.
    fn remote(
        &self,
        cluster: &Cluster,
        range: u64,
        reads: Vec<RemoteRead>,
    ) -> Result<Vec<Vec<RemoteItem>>> {
        let answer = self.wait(
            cluster,
            combkv_replica::At::Now,
            Vec::new(),
            vec![(range, reads)],
        );
        answer?
            .pop()
            .ok_or_else(|| Error::Unavailable("a remote read went unanswered".into()))
    }

    /// [`Store::get_with`], in the key's range.
    pub(crate) fn get_with<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemView<'_>>) -> T,
    ) -> Result<T> {
        let cluster = match self {
            Keyspace::One(s) => return s.get_with(key, f),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        match routed(cluster, self.parking(), |map| {
            self.source(cluster, map.route(key))
        })? {
            Source::Local(s, replica) => {
                replica.note_reads(1, key);
                s.get_with(key, f)
            }
            Source::Remote(id) => {
                combkv::check_key(key, cluster.max_key_len())?;
                let items = self.remote(cluster, id, vec![RemoteRead::Get(key.to_vec())])?;
                Ok(f(items.first().and_then(|i| i.first()).map(view)))
            }
        }
    }

    /// [`Store::item_memory`], in the key's range (this node's replicas
    /// only: what another node's store spends is its own).
    pub(crate) fn item_memory(&self, key: &[u8]) -> Result<Option<u64>> {
        let cluster = match self {
            Keyspace::One(s) => return s.item_memory(key),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        match routed(cluster, self.parking(), |map| {
            self.source(cluster, map.route(key))
        })? {
            Source::Local(s, _) => s.item_memory(key),
            Source::Remote(id) => Err(Error::Unavailable(format!(
                "range {id} holds the key and has no replica on this node: ask one of its nodes"
            ))),
        }
    }

    /// How many keys the keyspace holds: every range counted at one
    /// timestamp.
    pub(crate) fn len(&self) -> Result<u64> {
        let cluster = match self {
            Keyspace::One(s) => return Ok(s.len()),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        let found = at_one_timestamp(self, cluster, |map| {
            Ok(map
                .ranges()
                .map(|r| {
                    let count = RemoteRead::Count {
                        start: r.start.clone(),
                        end: r.end.clone(),
                    };
                    (r.clone(), count, (r.start.clone(), r.end.clone()))
                })
                .collect())
        })?;
        let mut n = 0;
        for (got, (start, end)) in found {
            n += match got {
                // The replica read may hold more than the range: the
                // range's parent, or the range itself before it has
                // applied a split the map records.
                Got::Local(view, _) => view.count(&start, end.as_deref())?,
                Got::Remote(items) => items.first().map_or(0, |it| it.version),
            };
        }
        Ok(n)
    }

    /// Visits range `part`'s items of `sub` (already cut to it), where
    /// they are, until `f` returns false; how many were visited.
    fn scan_part(
        &self,
        cluster: &Cluster,
        source: Source,
        sub: &Range,
        f: &mut dyn FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        match source {
            Source::Local(s, replica) => {
                if let Bound::Included(k) | Bound::Excluded(k) = &sub.start {
                    replica.note_reads(1, k);
                }
                s.scan(sub, f)
            }
            Source::Remote(id) => {
                let items = self.remote(cluster, id, vec![remote_range(sub)])?;
                let mut seen = 0;
                for it in items.iter().flatten() {
                    seen += 1;
                    if !f(view(it)) {
                        break;
                    }
                }
                Ok(seen)
            }
        }
    }

    /// [`Store::scan`] across the ranges `r` spans, in its order, its
    /// limit counted over them all. A floor start finds its floor first
    /// (it may lie in a range before the start's).
    pub(crate) fn scan(&self, r: &Range, mut f: impl FnMut(ItemView<'_>) -> bool) -> Result<usize> {
        let cluster = match self {
            Keyspace::One(s) => return s.scan(r, f),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        if r.floor_start {
            return self.scan_from_floor(cluster, r, f);
        }
        let r = r.clone();
        // Inside one range: that range's read at its read index. The
        // source is found by the map the plan is made by: a map found out
        // of date is brought up to date and the plan made again, and one
        // that then shows the span in two ranges is read across them.
        let plan = routed(cluster, self.parking(), |map| {
            let mut parts = spanned(map, &r);
            match (parts.next(), parts.next()) {
                (Some(part), None) => Ok(Some((clip(&r, part), self.source(cluster, part)?))),
                _ => Ok(None),
            }
        })?;
        let Some((mut sub, source)) = plan else {
            return self.scan_at_timestamp(cluster, &r, None, f);
        };
        sub.limit = r.limit;
        self.scan_part(cluster, source, &sub, &mut f)
    }

    /// [`Keyspace::scan`] of a range `r` that crosses ranges: each part
    /// read at one timestamp (at snapshot timestamp `snapshot` if given).
    fn scan_at_timestamp(
        &self,
        cluster: &Cluster,
        r: &Range,
        snapshot: Option<u64>,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        let plan = |map: &RangeMap| {
            let mut parts: Vec<&RangeDesc> = spanned(map, r).collect();
            if r.reverse {
                parts.reverse();
            }
            Ok(parts
                .into_iter()
                .map(|p| {
                    let sub = clip(r, p);
                    (p.clone(), remote_range(&sub), sub)
                })
                .collect())
        };
        let found = match snapshot {
            None => at_one_timestamp(self, cluster, plan)?,
            Some(at) => at_snapshot(self, cluster, at, plan)?,
        };
        Self::visit_parts(r.limit, found, &mut f)
    }

    /// A floor-start scan (Honeycomb's SCAN) on a split keyspace: the
    /// floor of its start found (in the start's range, else the nearest
    /// range before it that holds a key below) and the range scanned from
    /// it, all at one timestamp, so the floor is the floor of the state
    /// the scan reads.
    fn scan_from_floor(
        &self,
        cluster: &Cluster,
        r: &Range,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        let mut from = r.clone();
        from.floor_start = false;
        let Bound::Included(start) = &r.start else {
            // Only an inclusive start has a floor (the parser says so).
            return self.scan_at_timestamp(cluster, &from, None, f);
        };
        let below = Range::new(Bound::Unbounded, Bound::Included(start.clone()))
            .reversed()
            .with_limit(1);
        let found = with_timestamp(self, cluster, |at| {
            let map = cluster.shared_range_map();
            let mut fwd = from.clone();
            let mut parts: Vec<&RangeDesc> = spanned(&map, &below).collect();
            parts.reverse();
            for p in parts {
                let sub = clip(&below, p);
                let got = settled(
                    self,
                    cluster,
                    at,
                    vec![(p.clone(), remote_range(&sub), sub)],
                )?;
                let mut floor = None;
                Self::visit_parts(Some(1), got, &mut |it: ItemView<'_>| {
                    floor = Some(it.key.to_vec());
                    false
                })?;
                if let Some(k) = floor {
                    fwd.start = Bound::Included(k);
                    break;
                }
            }
            let mut parts: Vec<&RangeDesc> = spanned(&map, &fwd).collect();
            if fwd.reverse {
                parts.reverse();
            }
            let reads = parts
                .into_iter()
                .map(|p| {
                    let sub = clip(&fwd, p);
                    (p.clone(), remote_range(&sub), sub)
                })
                .collect();
            settled(self, cluster, at, reads)
        })?;
        Self::visit_parts(r.limit, found, &mut f)
    }

    /// Hands the items of `found` (each part's, in order) to `f` until it
    /// returns false or `limit` items were handed; how many were.
    fn visit_parts(
        limit: Option<usize>,
        found: Vec<(Got, Range)>,
        f: &mut dyn FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        let mut seen = 0usize;
        for (got, mut sub) in found {
            let left = limit.map(|l| l.saturating_sub(seen));
            if left == Some(0) {
                break;
            }
            sub.limit = left;
            let mut stopped = false;
            match got {
                Got::Local(past, replica) => {
                    if let Bound::Included(k) | Bound::Excluded(k) = &sub.start {
                        replica.note_reads(1, k);
                    }
                    seen += past.scan(&sub, |it| {
                        let go = f(it);
                        stopped |= !go;
                        go
                    })?;
                }
                Got::Remote(items) => {
                    for it in items.iter().take(left.unwrap_or(usize::MAX)) {
                        seen += 1;
                        if !f(view(it)) {
                            stopped = true;
                            break;
                        }
                    }
                }
            }
            if stopped {
                break;
            }
        }
        Ok(seen)
    }

    /// `r` with its floor start (Honeycomb's SCAN) resolved: the floor of
    /// its start found, which may lie in a range before the start's.
    fn floor_resolved(&self, r: &Range) -> Result<Range> {
        let mut r = r.clone();
        if r.floor_start {
            if let Bound::Included(k) = &r.start
                && let Some(floor) = self.floor(k)?
            {
                r.start = Bound::Included(floor.key.to_vec());
            }
            r.floor_start = false;
        }
        Ok(r)
    }

    /// The first item of `r` (cut to each range in turn), or none.
    fn first(&self, r: Range) -> Result<Option<combkv::Item>> {
        let mut found = None;
        self.scan(&r.with_limit(1), |it| {
            found = Some(it.to_item());
            false
        })?;
        Ok(found)
    }

    /// [`Store::floor`]: the greatest key `<= key`.
    pub(crate) fn floor(&self, key: &[u8]) -> Result<Option<combkv::Item>> {
        match self {
            Keyspace::One(s) => s.floor(key),
            Keyspace::Ranges { .. } => {
                self.first(Range::new(Bound::Unbounded, Bound::Included(key.to_vec())).reversed())
            }
        }
    }

    /// [`Store::ceil`]: the least key `>= key`.
    pub(crate) fn ceil(&self, key: &[u8]) -> Result<Option<combkv::Item>> {
        match self {
            Keyspace::One(s) => s.ceil(key),
            Keyspace::Ranges { .. } => {
                self.first(Range::new(Bound::Included(key.to_vec()), Bound::Unbounded))
            }
        }
    }

    /// [`Store::read_batch`]: on one store, or where every request lies in
    /// one range held here, that store's batch (its hot cache included);
    /// else each request read from the ranges it spans, where they are,
    /// gathered into `out` in request order.
    pub(crate) fn read_batch(
        &self,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) -> Result<()> {
        let cluster = match self {
            Keyspace::One(s) => return s.read_batch(requests, out),
            Keyspace::Ranges { cluster, .. } => cluster,
        };
        routed(cluster, self.parking(), |map| {
            self.read_batch_by(map, cluster, requests, out)
        })
    }

    /// The ranges a read index must cover before `requests` are read
    /// (`ReadScope`): a keyspace not split, its one range; a batch inside
    /// one range this node serves, that range; a batch of a range held
    /// elsewhere, or across ranges, none (the node holding it takes a read
    /// index of its own; a read across ranges is read at one timestamp).
    pub(crate) fn read_scope(&self, requests: &[ReadRequest<'_>]) -> ReadScope {
        let Keyspace::Ranges { cluster, .. } = self else {
            return ReadScope::All;
        };
        let map = cluster.shared_range_map();
        let Some(r) = one_range(&map, requests) else {
            return ReadScope::none();
        };
        // As `place` finds the replica the read goes to.
        match cluster
            .range_replica(r.id)
            .or_else(|| cluster.replica_holding(&r.start))
        {
            Some(replica) if replica.is_voter() => {
                ReadScope::Ranges(smallvec::smallvec![replica.group()])
            }
            _ => ReadScope::none(),
        }
    }

    /// The ranges a read index must cover before a command reads `keys`
    /// one by one, each at its range's read index: the ranges this node
    /// serves of them (one held elsewhere is read there).
    pub(crate) fn keys_scope(&self, keys: &[&[u8]]) -> ReadScope {
        let Keyspace::Ranges { cluster, .. } = self else {
            return ReadScope::All;
        };
        let map = cluster.shared_range_map();
        let mut scope = ReadScope::none();
        for key in keys {
            let r = map.route(key);
            if let Some(replica) = cluster
                .range_replica(r.id)
                .or_else(|| cluster.replica_holding(&r.start))
                .filter(Replica::is_voter)
            {
                scope.join(&ReadScope::Ranges(smallvec::smallvec![replica.group()]));
            }
        }
        scope
    }

    /// [`Keyspace::read_batch`] routed by `map`.
    fn read_batch_by(
        &self,
        map: &RangeMap,
        cluster: &Cluster,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) -> Result<()> {
        let Some(r) = one_range(map, requests) else {
            return self.read_batch_at_timestamp(cluster, requests, out);
        };
        match self.source(cluster, r)? {
            Source::Local(s, replica) => {
                if let Some(ReadRequest::Get(k)) = requests.first() {
                    replica.note_reads(requests.len() as u64, k);
                }
                s.read_batch(requests, out)
            }
            // One range held elsewhere: one remote read of all of them (no
            // request has a floor start: one would span every range).
            Source::Remote(id) => {
                let reads = remote_reads(cluster, requests)?;
                let answers = self.remote(cluster, id, reads)?;
                gather(&answers, requests.len(), out);
                Ok(())
            }
        }
    }

    /// [`Keyspace::read_batch`] of requests that lie in more than one
    /// range: every part of every request read at one timestamp, gathered
    /// into `out` in request order.
    fn read_batch_at_timestamp(
        &self,
        cluster: &Cluster,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) -> Result<()> {
        // Floor starts resolved and keys checked before anything is read.
        let mut resolved = Vec::with_capacity(requests.len());
        for req in requests {
            resolved.push(match req {
                ReadRequest::Get(k) => {
                    combkv::check_key(k, cluster.max_key_len())?;
                    None
                }
                ReadRequest::Range(r) => Some(self.floor_resolved(r)?),
            });
        }
        let found = at_one_timestamp(self, cluster, |map| {
            Ok(batch_plan(map, requests, &resolved))
        })?;
        gather_parts(found, &resolved, out)
    }
}

/// One part of a batch read across ranges: a GET, or a request's range cut
/// to one range (request index first).
enum Part {
    Get(usize, Vec<u8>),
    Range(usize, Range),
}

/// The plan of a batch across ranges by `map`: each GET in its range, each
/// range request cut to the ranges it spans, in its order.
fn batch_plan(
    map: &RangeMap,
    requests: &[ReadRequest<'_>],
    resolved: &[Option<Range>],
) -> Vec<(RangeDesc, RemoteRead, Part)> {
    let mut plan = Vec::new();
    for (i, (req, range)) in requests.iter().zip(resolved).enumerate() {
        match (req, range) {
            (ReadRequest::Get(k), _) => plan.push((
                map.route(k).clone(),
                RemoteRead::Get(k.to_vec()),
                Part::Get(i, k.to_vec()),
            )),
            (ReadRequest::Range(_), Some(r)) => {
                let mut parts: Vec<&RangeDesc> = spanned(map, r).collect();
                if r.reverse {
                    parts.reverse();
                }
                for p in parts {
                    let sub = clip(r, p);
                    plan.push((p.clone(), remote_range(&sub), Part::Range(i, sub)));
                }
            }
            (ReadRequest::Range(_), None) => {}
        }
    }
    plan
}

/// What a batch across ranges found, gathered into `out` in request order,
/// each range request's limit counted over its parts.
fn gather_parts(
    found: Vec<(Got, Part)>,
    resolved: &[Option<Range>],
    out: &mut BatchResults,
) -> Result<()> {
    let mut left: Vec<usize> = resolved
        .iter()
        .map(|r| r.as_ref().and_then(|r| r.limit).unwrap_or(usize::MAX))
        .collect();
    out.begin_gathering(resolved.len());
    for (got, part) in found {
        match (part, got) {
            (Part::Get(i, k), Got::Local(past, replica)) => {
                replica.note_reads(1, &k);
                if let Some(it) = past.get(&k)? {
                    out.gather_item(i, &it.view());
                }
            }
            (Part::Get(i, _), Got::Remote(items)) => {
                for it in &items {
                    out.gather_item(i, &view(it));
                }
            }
            (Part::Range(i, mut sub), Got::Local(past, _)) => {
                if left[i] == 0 {
                    continue;
                }
                sub.limit = Some(left[i]);
                past.scan(&sub, |it| {
                    out.gather_item(i, &it);
                    left[i] -= 1;
                    left[i] > 0
                })?;
            }
            (Part::Range(i, _), Got::Remote(items)) => {
                for it in items.iter().take(left[i]) {
                    out.gather_item(i, &view(it));
                    left[i] -= 1;
                }
            }
        }
    }
    Ok(())
}

/// Runs `op` by the range map as this node applied it; if a group here
/// shows the map to be behind it (`Error::WrongRange` from `source`), the
/// map is brought up to date ([`catch_up`]) and `op` runs again, up to 4
/// times over all runs of a request that parks.
fn routed<T>(
    cluster: &Cluster,
    parking: Option<Parking<'_>>,
    mut op: impl FnMut(&RangeMap) -> Result<T>,
) -> Result<T> {
    let first = parking.map_or(0, |p| p.tries(Retry::Map));
    for _ in first..4 {
        let map = cluster.shared_range_map();
        match op(&map) {
            Err(Error::WrongRange(_)) => {
                catch_up(cluster, parking)?;
                if let Some(p) = parking {
                    p.tried(Retry::Map);
                }
            }
            r => return r,
        }
    }
    Err(Error::Unavailable(
        "the range map kept changing under the read".into(),
    ))
}

/// Brings this node's range map up to date: a read index on the meta
/// group, waited for. With parking it is a round of its own (`At::Now` on
/// the meta group's replica), and the request parks ([`park::parked`])
/// until it lands; the run after finds its answer, once, so that a map
/// found behind again sends a new one.
///
/// [`park::parked`]: crate::node::park::parked
fn catch_up(cluster: &Cluster, parking: Option<Parking<'_>>) -> Result<()> {
    match parking {
        Some(p) if p.can_park() => match p.take_landed() {
            Some(caught_up) => caught_up.map(drop),
            None => {
                p.park_catch_up(cluster, cluster.meta_replica().clone());
                Err(crate::node::park::parked())
            }
        },
        _ => cluster
            .settle_at(At::Now, &[cluster.meta_replica().clone()], Vec::new())
            .map(drop),
    }
}

/// `requests` as reads sent to a node that holds their range.
fn remote_reads(cluster: &Cluster, requests: &[ReadRequest<'_>]) -> Result<Vec<RemoteRead>> {
    let mut reads = Vec::with_capacity(requests.len());
    for req in requests {
        reads.push(match req {
            ReadRequest::Get(k) => {
                combkv::check_key(k, cluster.max_key_len())?;
                RemoteRead::Get(k.to_vec())
            }
            ReadRequest::Range(r) => remote_range(r),
        });
    }
    Ok(reads)
}

/// The answers of `requests` reads at another node, into `out`.
fn gather(answers: &[Vec<RemoteItem>], requests: usize, out: &mut BatchResults) {
    out.begin_gathering(requests);
    for (i, items) in answers.iter().enumerate() {
        for it in items {
            out.gather_item(i, &view(it));
        }
    }
}

/// The one range every part of `requests` lies in, if they lie in one.
fn one_range<'m>(map: &'m RangeMap, requests: &[ReadRequest<'_>]) -> Option<&'m RangeDesc> {
    let mut one: Option<&RangeDesc> = None;
    for req in requests {
        for part in request_parts(map, req) {
            if one.is_some_and(|o| o.id != part.id) {
                return None;
            }
            one = Some(part);
        }
    }
    one
}

/// Whether a group's own bounds hold all of range `r` as the map gives it.
fn covers(bounds: &combkv_replica::ranges::Bounds, r: &RangeDesc) -> bool {
    let end_inside = match (&bounds.end, &r.end) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(b), Some(e)) => e <= b,
    };
    !bounds.retired && bounds.start <= r.start && end_inside
}

/// A remote item as the store's readers see one.
fn view(it: &RemoteItem) -> ItemView<'_> {
    ItemView {
        key: &it.key,
        value: &it.value,
        version: combkv::Version(it.version),
        expires_at_ms: it.expires_at_ms,
        flags: it.flags,
    }
}

/// A range read (cut to one range, its floor resolved) as sent to another
/// node.
fn remote_range(r: &Range) -> RemoteRead {
    RemoteRead::Range {
        start: r.start.clone(),
        end: r.end.clone(),
        limit: r.limit.map(|l| l as u64),
        reverse: r.reverse,
    }
}

/// The ranges a read request touches, in key order.
fn request_parts<'m>(
    map: &'m RangeMap,
    req: &ReadRequest<'_>,
) -> Box<dyn Iterator<Item = &'m RangeDesc> + 'm> {
    match req {
        ReadRequest::Get(k) => Box::new(std::iter::once(map.route(k))),
        // A floor start may reach into the ranges before: all of them.
        ReadRequest::Range(r) if r.floor_start => Box::new(map.ranges()),
        ReadRequest::Range(r) => Box::new(spanned(map, r)),
    }
}

/// The ranges holding any key of `r`, in key order (its floor start aside).
fn spanned<'m>(map: &'m RangeMap, r: &Range) -> impl Iterator<Item = &'m RangeDesc> + 'm {
    map.spanning(
        r.start.as_ref().map(Vec::as_slice),
        r.end.as_ref().map(Vec::as_slice),
    )
}

/// `r` cut to the keys of range `part`.
fn clip(r: &Range, part: &RangeDesc) -> Range {
    let mut sub = r.clone();
    let inside_start = match &r.start {
        Bound::Included(k) | Bound::Excluded(k) => k.as_slice() >= part.start.as_slice(),
        Bound::Unbounded => part.start.is_empty(),
    };
    if !inside_start {
        sub.start = Bound::Included(part.start.clone());
    }
    if let Some(end) = &part.end {
        let inside_end = match &r.end {
            Bound::Included(k) => k < end,
            Bound::Excluded(k) => k <= end,
            Bound::Unbounded => false,
        };
        if !inside_end {
            sub.end = Bound::Excluded(end.clone());
        }
    }
    sub
}
