//! Writes from any node, each sent to the group of the range that holds
//! its keys (`docs/design.md`, "Ranges").
//!
//! A batch of decided writes (an event loop's turn) is cut by the range
//! map into one proposal per range, proposed side by side, and answered
//! in the order the writes came. A range this node holds a replica of is
//! proposed through it (its group forwards to its leader); any other is
//! forwarded to a node the map names for it, and on to its leader. A
//! write whose keys lie in more than one range is refused before anything
//! is proposed (`Error::CrossRange`), never applied in part.
//!
//! The map a write was routed by may be out of date: a split the map
//! recorded may not have reached the range's group yet (its new group is
//! not started: the write waits and goes again), or the range applied a
//! split this node's copy of the map has not (the group refuses the write
//! with `Error::WrongRange` at apply, on every replica alike, so nothing
//! changed): the map is brought up to date with a read index on the meta
//! group and the write routed again. A range the map has merged refuses
//! the keys it gains until it has taken them (`ranges::merge`): the write
//! is routed again after a pause. Either way it is retried here, never
//! answered wrong, until `REQUEST_TIMEOUT`.

use combkv::Error;
use combkv::op::{Op, Outcome};
use openraft::error::{ClientWriteError, RaftError};
use tokio::time::Instant;

use super::Host;
use crate::client::{NO_LEADER_RETRY, REQUEST_TIMEOUT, Results};
use crate::codec::OpList;
use crate::error::ClusterError;
use crate::group_commit::ProposeError;
use crate::ranges::{RangeId, RangeMap};
use crate::rpc::{Request, Response};
use crate::types::{Batch, GroupId, NodeId};

/// How many times a write refused for its range is routed again.
const REROUTES: usize = 8;

/// The range whose group applies `op`: the one holding its keys, or
/// `Error::CrossRange` if they lie in more than one. An op that names no
/// key (a FLUSHALL's `Clear`) belongs to the one range of a map of one.
pub fn route_op(map: &RangeMap, op: &Op<'_>) -> Result<RangeId, Error> {
    let Some(key) = op.some_key() else {
        let first = map.route(b"");
        return match op {
            Op::Clear if map.len() > 1 => Err(Error::CrossRange),
            _ => Ok(first.id),
        };
    };
    let r = map.route(key);
    if op.keys_within(&r.start, r.end.as_deref()) {
        Ok(r.id)
    } else {
        Err(Error::CrossRange)
    }
}

/// Decided writes, cut by range: one encoded list per range, and where
/// each of its ops came in the batch.
#[derive(Debug, Default)]
pub struct Routed {
    parts: Vec<Part>,
    len: usize,
    /// Ops refused as they were added ([`Routed::push_or_refuse`]), by
    /// batch position: answered in their place, never proposed.
    refused: Vec<(usize, Error)>,
    /// The map the batch is routed by ([`Routed::route`]), taken once.
    map: Option<std::sync::Arc<RangeMap>>,
}

#[derive(Debug)]
struct Part {
    group: GroupId,
    ops: OpList,
    /// The batch position of each op of `ops`, in order.
    slots: Vec<usize>,
}

impl Routed {
    /// Adds `op`, routed by `map`; refused, adding nothing, if its keys
    /// lie in more than one range.
    pub fn push(&mut self, map: &RangeMap, op: &Op<'_>) -> Result<(), Error> {
        let group = route_op(map, op)?;
        self.push_to(group, op, self.len);
        self.len += 1;
        Ok(())
    }

    /// Adds `op`, routed by `map`, or, if its keys lie in more than one
    /// range, its refusal in its place: its answer comes back among the
    /// others', in order (a pipeline's replies keep their order).
    pub fn push_or_refuse(&mut self, map: &RangeMap, op: &Op<'_>) {
        if let Err(e) = self.push(map, op) {
            self.refused.push((self.len, e));
            self.len += 1;
        }
    }

    /// [`Routed::push_or_refuse`] by the map `map` gives the first time it
    /// is called for this batch: a turn's writes take the map once (a
    /// change meanwhile is met by rerouting, as any out-of-date map is).
    pub fn route(&mut self, map: impl FnOnce() -> std::sync::Arc<RangeMap>, op: &Op<'_>) {
        let map = self.map.take().unwrap_or_else(map);
        self.push_or_refuse(&map, op);
        self.map = Some(map);
    }

    fn push_to(&mut self, group: GroupId, op: &Op<'_>, slot: usize) {
        let part = match self.parts.iter().position(|p| p.group == group) {
            Some(i) => &mut self.parts[i],
            None => {
                self.parts.push(Part {
                    group,
                    ops: OpList::default(),
                    slots: Vec::new(),
                });
                self.parts.last_mut().expect("just pushed")
            }
        };
        part.ops.push(op);
        part.slots.push(slot);
    }

    /// How many ops the batch holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no op.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The groups the batch goes to, in the order they were first met.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.parts.iter().map(|p| p.group)
    }
}

/// What became of one range's proposal.
type PartAnswer = Result<(u64, Results), ClusterError>;

impl Host {
    /// Proposes `routed` (decided at `now_ms`): each range's ops as one
    /// entry of its group, all ranges at once, and answers one result per
    /// op in the batch's order, with the log index of group 0's entry if
    /// the batch went to group 0 alone (what WAIT counts replicas of).
    /// A range's failure (no leader, a lost answer) is the result of each
    /// of its ops; the other ranges' ops are unaffected.
    pub async fn propose_routed(
        &self,
        now_ms: u64,
        mut routed: Routed,
    ) -> (Option<u64>, Vec<Result<Outcome, Error>>) {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut out: Vec<Option<Result<Outcome, Error>>> = vec![None; routed.len];
        for (slot, e) in std::mem::take(&mut routed.refused) {
            out[slot] = Some(Err(e));
        }
        // Where each op of this round's batch stands in the caller's.
        let mut origin: Vec<usize> = (0..routed.len).collect();
        let mut index = None;
        for round in 0..=REROUTES {
            let only_meta = routed.parts.len() == 1 && routed.parts[0].group == 0;
            let parts = std::mem::take(&mut routed.parts);
            let mut sends = Vec::with_capacity(parts.len());
            // A copy of each list, kept to route refused ops again: a map
            // of one range may be out of date too (a split just made).
            let lists: Vec<(Part, Vec<u8>)> = parts
                .into_iter()
                .map(|mut p| {
                    let bytes = std::mem::take(&mut p.ops).finish();
                    sends.push((p.group, bytes.clone()));
                    (p, bytes)
                })
                .collect();
            let answers = self.propose_parts(now_ms, sends, deadline).await;
            let mut again = Routed::default();
            let mut again_origin = Vec::new();
            let map = self.fresh_map_if(&answers, round < REROUTES).await;
            for ((part, bytes), answer) in lists.iter().zip(answers) {
                match answer {
                    Ok((i, results)) => {
                        if only_meta {
                            index = Some(i);
                        }
                        // Decoded only to route refused ops again.
                        let ops = map
                            .as_ref()
                            .filter(|_| {
                                results
                                    .iter()
                                    .any(|r| matches!(r, Err(Error::WrongRange(_))))
                            })
                            .and_then(|_| crate::codec::decode_ops(bytes).ok());
                        for (k, (slot, r)) in part.slots.iter().zip(results).enumerate() {
                            let refused = matches!(r, Err(Error::WrongRange(_)));
                            let answer = match (refused, &map, ops.as_ref().and_then(|o| o.get(k)))
                            {
                                (false, _, _) => r,
                                (true, Some(map), Some(op)) => match route_op(map, op) {
                                    Ok(g) => {
                                        again.push_to(g, op, again.len);
                                        again.len += 1;
                                        again_origin.push(origin[*slot]);
                                        continue;
                                    }
                                    Err(e) => Err(e),
                                },
                                // Nothing was applied; the map to route it
                                // again by could not be had in time.
                                (true, _, _) => Err(Error::Unavailable(
                                    "routed by an out-of-date range map, which could not be \
                                     brought up to date"
                                        .into(),
                                )),
                            };
                            out[origin[*slot]] = Some(answer);
                        }
                    }
                    Err(e) => {
                        let e = Error::from(e);
                        for slot in &part.slots {
                            out[origin[*slot]] = Some(Err(e.clone()));
                        }
                    }
                }
            }
            if again.is_empty() {
                break;
            }
            // Routed again at once (the map was behind), then after a
            // growing pause: a range the map has merged takes a moment to
            // carry the merge out, and refuses its new keys until then.
            if round > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(2 << round.min(6))).await;
            }
            routed = again;
            origin = again_origin;
        }
        // Every slot is answered: the last round routes nothing again.
        let results = out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Unavailable("unanswered".into()))))
            .collect();
        (index, results)
    }

    /// Each list's proposal (group, encoded ops), all at once; the answers
    /// in the lists' order.
    async fn propose_parts(
        &self,
        now_ms: u64,
        mut lists: Vec<(GroupId, Vec<u8>)>,
        deadline: Instant,
    ) -> Vec<PartAnswer> {
        if lists.len() == 1 {
            // One range (every batch of a keyspace not split): no task.
            let (group, bytes) = lists.pop().expect("one list");
            return vec![self.propose_part(now_ms, group, bytes, deadline).await];
        }
        let n = lists.len();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (group, bytes)) in lists.into_iter().enumerate() {
            let host = self.clone();
            tasks
                .spawn(async move { (i, host.propose_part(now_ms, group, bytes, deadline).await) });
        }
        let mut answers: Vec<Option<PartAnswer>> = (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, a)) => answers[i] = Some(a),
                Err(e) => tracing::error!("a range's proposal task failed: {e}"),
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(ClusterError::Unknown("its proposal task failed".into())))
            })
            .collect()
    }

    /// The range map, brought up to date with a read index on the meta
    /// group, if `wanted` and some op of `answers` was refused for its
    /// range (else None: nothing is routed again).
    async fn fresh_map_if(&self, answers: &[PartAnswer], wanted: bool) -> Option<RangeMap> {
        let refused = answers.iter().any(|a| {
            a.as_ref()
                .is_ok_and(|(_, r)| r.iter().any(|r| matches!(r, Err(Error::WrongRange(_)))))
        });
        if !(wanted && refused) {
            return None;
        }
        let meta = self.group(0)?;
        meta.read_barrier().await.ok()?;
        meta.range_map()
    }

    /// A snapshot of the whole keyspace for `ttl`: a timestamp every range
    /// raises its floor to and pins on its replicas ([`Host::pin_at`], all
    /// at once), returned once every range has. The ranges are those of
    /// the map as committed when the snapshot starts (a read index on the
    /// meta group) and, checked again once they have pinned, still the
    /// same: a range split off before its parent's floor would have no
    /// floor of its own, so a map that changed meanwhile takes the
    /// snapshot again at a new timestamp. (A split after the floor hands
    /// the parent's pins to its new range, on each replica that applied
    /// both: `Past::inherit`.) No merge may be under way either: the
    /// merging range's group would pin its store while it holds its own
    /// half only, and the absorb that follows inserts the right range's
    /// keys, with their old versions, after that hold, so the snapshot's
    /// reads of the merged range would miss them; the snapshot waits for
    /// the merge to be carried out. (An automatic merge decided after the
    /// pins finds them on its ranges' voters and waits for the snapshot
    /// instead; one asked by hand is refused, unless forced,
    /// `Host::merge`.)
    pub async fn snapshot(&self, ttl: std::time::Duration) -> Result<u64, ClusterError> {
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        let merges_until = Instant::now() + REQUEST_TIMEOUT;
        let merging = |m: &RangeMap| m.ranges().any(|r| m.is_merging(r.id));
        for _ in 0..4 {
            meta.read_barrier().await?;
            let mut map = self.range_map();
            while merging(&map) {
                if Instant::now() >= merges_until {
                    return Err(ClusterError::Refused(
                        "a merge of ranges is still being carried out; try again".into(),
                    ));
                }
                tokio::time::sleep(NO_LEADER_RETRY).await;
                meta.read_barrier().await?;
                map = self.range_map();
            }
            let at = crate::ranges::read_timestamp().0;
            let mut pins = tokio::task::JoinSet::new();
            for r in map.ranges() {
                let (host, range) = (self.clone(), r.id);
                pins.spawn(async move { host.pin_at(range, at, ttl).await });
            }
            // A range whose leader could not pin the timestamp (its store
            // is newer: split off just now) is read at a later one.
            let mut unpinned = false;
            let mut failed = None;
            while let Some(pinned) = pins.join_next().await {
                match pinned {
                    Ok(Err(ClusterError::Refused(why))) if why.contains(crate::past::PAST_GONE) => {
                        unpinned = true;
                    }
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failed = Some(e),
                    Err(e) => {
                        failed = Some(ClusterError::Unknown(format!("a pin's task failed: {e}")))
                    }
                }
            }
            // An attempt given up: the ranges it pinned let go of it now,
            // not at the end of the snapshot's life.
            let abandon = |at: u64| {
                let host = self.clone();
                tokio::spawn(async move { host.release(at, ttl).await });
            };
            if let Some(e) = failed {
                abandon(at);
                return Err(e);
            }
            if unpinned {
                abandon(at);
                continue;
            }
            let after = match meta.read_barrier().await {
                Ok(()) => self.range_map(),
                Err(e) => {
                    abandon(at);
                    return Err(e);
                }
            };
            let shape = |m: &RangeMap| -> Vec<(GroupId, u64)> {
                m.ranges().map(|r| (r.id, r.epoch.version)).collect()
            };
            if shape(&map) == shape(&after) && !merging(&after) {
                return Ok(at);
            }
            abandon(at);
        }
        Err(ClusterError::Refused(
            "the ranges kept splitting while the snapshot was taken; try again".into(),
        ))
    }

    /// Raises range `range`'s read floor to `at` and pins it on its
    /// replicas for `pin` (a snapshot across ranges, `read_at`), through
    /// the range's log from any node; answered once it has applied.
    pub async fn pin_at(
        &self,
        range: GroupId,
        at: u64,
        pin: std::time::Duration,
    ) -> Result<(), ClusterError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let now = self.group(0).map_or(0, |g| g.clock_ms());
        let bytes = crate::codec::encode_floor(at, pin.as_millis() as u64);
        let (_, results) = self.propose_part(now, range, bytes, deadline).await?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(ClusterError::Refused(e.to_string())),
            None => Err(ClusterError::Unknown(
                "a read floor without a result".into(),
            )),
        }
    }

    /// Releases the snapshot of the keyspace at `at`, taken for `ttl`,
    /// before its end: every range of the map drops its replicas' pin of
    /// it through its log, all at once, so that they no longer keep the
    /// store's past for it (and ranges it held from merging may merge). A range split off
    /// since holds no pin and drops none; one that cannot be reached now
    /// keeps its pin until the snapshot's end, as before. How many ranges
    /// could not be told.
    pub async fn release(&self, at: u64, ttl: std::time::Duration) -> usize {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let now = self.group(0).map_or(0, |g| g.clock_ms());
        let mut unpins = tokio::task::JoinSet::new();
        for r in self.range_map().ranges() {
            let (host, range) = (self.clone(), r.id);
            let bytes = crate::codec::encode_unpin(at, ttl.as_millis() as u64);
            unpins.spawn(async move { host.propose_part(now, range, bytes, deadline).await });
        }
        let mut failed = 0;
        while let Some(done) = unpins.join_next().await {
            match done {
                Ok(Ok((_, results))) if matches!(results.first(), Some(Ok(_))) => {}
                other => {
                    tracing::debug!("a snapshot's release did not reach a range: {other:?}");
                    failed += 1;
                }
            }
        }
        failed
    }

    /// One range's proposal: through this node's replica of it if the map
    /// names one here, else forwarded to a node that has one.
    async fn propose_part(
        &self,
        now_ms: u64,
        group: GroupId,
        ops: Vec<u8>,
        deadline: Instant,
    ) -> PartAnswer {
        // A replica the map no longer names here (the range moved away,
        // and this one is not deleted yet) is out of its group: forwarded.
        if let Some(r) = self.serving(group) {
            return r.write_indexed(now_ms, ops).await;
        }
        self.forward(group, Batch { now_ms, ops }, deadline).await
    }

    /// Sends `batch` to range `group`'s leader on another node: to a node
    /// the map names for the range first, then to the leader it names.
    /// A node that does not host the group yet (a split on its way to
    /// it), or knows no leader, is asked again after a pause, the next
    /// one in turn; a range the map no longer has answers each op
    /// `WrongRange`, to be routed again.
    async fn forward(&self, group: GroupId, batch: Batch, deadline: Instant) -> PartAnswer {
        let count = crate::codec::list_count(&batch.ops)
            .map_err(|e| ClusterError::Refused(format!("a malformed write: {e}")))?;
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        let addrs = super::member_addrs(&meta);
        let mut hint: Option<NodeId> = None;
        let mut turn = 0usize;
        loop {
            turn += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClusterError::NoLeader);
            }
            let Some(desc) = meta.range_map().and_then(|m| m.get(group).cloned()) else {
                let gone = Error::WrongRange(format!("range {group} is no longer in the map"));
                return Ok((0, vec![Err(gone); count]));
            };
            let Some(target) = hint
                .take()
                .or_else(|| desc.voters.get(turn % desc.voters.len().max(1)).copied())
            else {
                return Err(ClusterError::NoLeader);
            };
            let Some(addr) = addrs.get(&target) else {
                tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                continue;
            };
            let req = Request::for_group(group, Request::Forward(batch.clone()));
            match self.0.transport.call(target, addr, req, left).await {
                Ok(Response::Forward(Ok((log_id, bytes)))) => {
                    let results = crate::codec::decode_results(&bytes).map_err(|e| {
                        ClusterError::Unknown(format!("the leader's answer is unreadable: {e}"))
                    })?;
                    if results.len() != count {
                        return Err(ClusterError::Unknown(format!(
                            "the log answered {} results for {count} writes",
                            results.len()
                        )));
                    }
                    return Ok((log_id.index, results));
                }
                // Not the leader: it names the one it knows, if any.
                Ok(Response::Forward(Err(ProposeError::Raft(RaftError::APIError(
                    ClientWriteError::ForwardToLeader(f),
                ))))) => match f.leader_id {
                    Some(l) if l != target => hint = Some(l),
                    _ => tokio::time::sleep(NO_LEADER_RETRY.min(left)).await,
                },
                Ok(Response::Forward(Err(e))) => return Err(e.into_cluster_error()),
                // Not started there yet, or never sent: safe to try again.
                Ok(Response::NoSuchGroup(_)) => tokio::time::sleep(NO_LEADER_RETRY.min(left)).await,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                }
                Ok(_) => return Err(ClusterError::Unknown("a confused peer".into())),
                Err(e) => {
                    return Err(ClusterError::Unknown(format!(
                        "forwarding to node {target}: {e}"
                    )));
                }
            }
        }
    }
}
