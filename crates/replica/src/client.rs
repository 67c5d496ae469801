//! Serving clients from any node: writes are proposed by the leader (a
//! follower forwards them), acknowledged once committed on a quorum and
//! applied; linearizable reads wait for a read index, one quorum round for
//! every read queued before it (etcd's read loop).
//!
//! A write whose answer is lost (a timeout, a connection that broke after
//! the request left, a leader that crashed) may or may not have happened:
//! the error says so, and the write is never retried behind the client's
//! back. A write refused before it entered any log (this node is no leader,
//! or the leader truncated it away) is retried with the leader.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use tokio::sync::oneshot;

use crate::error::ClusterError;
use crate::group_commit::ProposeError;
use crate::ranges::clock::wall_ms;
use crate::ranges::{Bounds, MapChange, RangeId, RangeMap, SplitRange};
use crate::replica::Replica;
use crate::rpc::{RaftResult, Request, Response};
use crate::types::{Batch, LogId, NodeId};

/// The results of a proposal's ops, in order.
pub type Results = Vec<Result<combkv::op::Outcome, combkv::Error>>;

/// How long a write or a read waits for a leader and a quorum.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait before asking again when no leader is known.
pub(crate) const NO_LEADER_RETRY: Duration = Duration::from_millis(50);

impl Replica {
    /// The clock for a batch this node proposes: its wall clock, but never
    /// below the last applied batch's clock or its own last proposal, so
    /// the log's clock never goes back.
    pub fn clock_ms(&self) -> u64 {
        let floor = self
            .inner
            .sm
            .now_ms()
            .max(self.inner.last_proposed_ms.load(Ordering::Relaxed));
        let now = wall_ms().max(floor);
        self.inner
            .last_proposed_ms
            .fetch_max(now, Ordering::Relaxed);
        now
    }

    /// Sets the cluster setting `name` (the ACL table, say) to `value` on
    /// every node: proposed through the log as a write is (a follower
    /// forwards it), as an entry of its own, answered once it commits.
    /// Each node sees it through [`Replica::settings`] as it applies it.
    pub async fn set_setting(&self, name: &str, value: &[u8]) -> Result<(), ClusterError> {
        let now = self.clock_ms();
        self.write(now, crate::codec::encode_setting(name, value))
            .await
            .map(|_| ())
    }

    /// Sets cluster setting `name` to `value` only if it still holds
    /// `expect` (None: no value) when the entry applies: true if it
    /// applied, false if the setting had changed (another node's change
    /// came first; this node has applied it by then, as everything the
    /// log holds before this entry). Proposed as [`Replica::set_setting`].
    pub async fn set_setting_if(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, ClusterError> {
        let change = crate::codec::SettingIf {
            name: name.to_string(),
            expect: expect.map(<[u8]>::to_vec),
            value: value.to_vec(),
        };
        let now = self.clock_ms();
        let results = self
            .write(now, crate::codec::encode_setting_if(&change))
            .await?;
        match one_result(results, "setting") {
            Ok(()) => Ok(true),
            Err(ClusterError::Refused(why)) if why == crate::codec::SETTING_CHANGED => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The value of cluster setting `name` as this node has applied it.
    pub fn setting(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.sm.settings().borrow().get(name).cloned()
    }

    /// Changes the range map (a split, a merge, a range's replicas)
    /// through the meta group's log, as a setting is changed: answered once
    /// it has applied here, or refused with the map unchanged (a range
    /// moved since the change was decided, a split key outside its range,
    /// this node's group keeps no map). Only group 0 keeps the map.
    pub async fn change_ranges(&self, change: &MapChange) -> Result<(), ClusterError> {
        let now = self.clock_ms();
        let results = self
            .write(now, crate::codec::encode_map_change(change))
            .await?;
        one_result(results, "change")
    }

    /// Splits the range this group serves at `at` (see
    /// [`crate::ranges::SplitRange`]): through the group's log, so that
    /// every replica cuts it at the same index, and each node hosting a
    /// replica starts group `new_id` with the keys from `at` on. Decided
    /// by the bounds this node has applied; refused, changing nothing, if
    /// they moved before the split applied, or `at` is not strictly inside
    /// them. In group 0, the range map records the split in the same
    /// entry.
    pub(crate) async fn split_range(&self, at: &[u8], new_id: RangeId) -> Result<(), ClusterError> {
        let split = SplitRange {
            epoch: self.inner.sm.bounds().epoch,
            at: at.to_vec(),
            new_id,
        };
        let now = self.clock_ms();
        let results = self.write(now, crate::codec::encode_split(&split)).await?;
        one_result(results, "split")
    }

    /// The bounds of the range this group serves, as this node applied
    /// them.
    pub fn bounds(&self) -> Bounds {
        self.inner.sm.bounds()
    }

    /// The range map as this node has applied it (None: its group keeps
    /// no map, or has no membership yet).
    pub fn range_map(&self) -> Option<RangeMap> {
        self.inner.sm.range_map()
    }

    /// [`Replica::range_map`], shared rather than copied: what a router
    /// reads for every request.
    pub fn shared_range_map(&self) -> Option<Arc<RangeMap>> {
        self.inner.sm.shared_range_map()
    }

    /// Follows the cluster settings this node has applied (from the log
    /// or a snapshot, after a restart too).
    pub fn settings(
        &self,
    ) -> tokio::sync::watch::Receiver<std::collections::BTreeMap<String, Vec<u8>>> {
        self.inner.sm.settings()
    }

    /// Proposes encoded ops (see [`crate::codec`]) decided at `now_ms` as
    /// one entry, through the leader, and returns their results, exactly
    /// one per op, once the entry is committed and applied here or on the
    /// leader. Each answered write is timed (see
    /// [`Replica::proposal_durations`]); one that failed is not, so that a
    /// refusal's or a timeout's wait does not read as commit latency.
    pub async fn write(&self, now_ms: u64, ops: Vec<u8>) -> Result<Results, ClusterError> {
        self.write_indexed(now_ms, ops).await.map(|(_, r)| r)
    }

    /// [`Replica::write`], with the index of the log entry that holds the
    /// ops (what WAIT waits for the followers to hold).
    pub async fn write_indexed(
        &self,
        now_ms: u64,
        ops: Vec<u8>,
    ) -> Result<(u64, Results), ClusterError> {
        let started = Instant::now();
        let r = self.propose_and_wait(now_ms, ops).await;
        if r.is_ok() {
            self.inner.proposals.observe(started.elapsed());
        }
        r
    }

    /// [`Replica::write_indexed`], untimed.
    pub(crate) async fn propose_and_wait(
        &self,
        now_ms: u64,
        ops: Vec<u8>,
    ) -> Result<(u64, Results), ClusterError> {
        // Whichever way the answer comes (this node's group commit, or a
        // leader's encoded reply), it holds one result per op, or it is
        // not an answer to these ops.
        let count = crate::codec::list_count(&ops)
            .map_err(|e| ClusterError::Refused(format!("a malformed write: {e}")))?;
        let _place = self
            .inner
            .in_flight
            .acquire()
            .await
            .map_err(|_| ClusterError::Stopped)?;
        let batch = Batch { now_ms, ops };
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClusterError::NoLeader);
            }
            // Refused before it is proposed or forwarded: it was not made.
            if let Some(why) = self.removed() {
                return Err(ClusterError::Refused(why));
            }
            let r = match self.leader_addr() {
                Some((leader, _)) if leader == self.inner.id => {
                    match tokio::time::timeout(left, self.inner.group.propose(batch.clone())).await
                    {
                        Ok(r) => r,
                        Err(_) => {
                            return Err(ClusterError::Unknown("no quorum answered in time".into()));
                        }
                    }
                }
                Some((leader, addr)) => {
                    let req = Request::Forward(batch.clone());
                    match self.inner.transport.call(leader, &addr, req, left).await {
                        Ok(Response::Forward(Ok((log_id, bytes)))) => {
                            match crate::codec::decode_results(&bytes) {
                                Ok(results) => Ok((log_id, results)),
                                Err(e) => {
                                    return Err(ClusterError::Unknown(format!(
                                        "the leader's answer is unreadable: {e}"
                                    )));
                                }
                            }
                        }
                        Ok(Response::Forward(Err(e))) => Err(e),
                        Ok(_) => return Err(ClusterError::Unknown("a confused peer".into())),
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            // Never sent: safe to try again.
                            tokio::time::sleep(NO_LEADER_RETRY).await;
                            continue;
                        }
                        Err(e) => {
                            return Err(ClusterError::Unknown(format!(
                                "forwarding to node {leader}: {e}"
                            )));
                        }
                    }
                }
                None => {
                    tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                    continue;
                }
            };
            match r {
                Ok((_, results)) if results.len() != count => {
                    return Err(ClusterError::Unknown(format!(
                        "the log answered {} results for {count} writes",
                        results.len()
                    )));
                }
                Ok((log_id, results)) => {
                    // A forwarded write is applied on the leader; wait until
                    // it is here too, so that this node's next read sees it.
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.wait_applied(log_id.index, left.max(Duration::from_secs(1)))
                        .await;
                    return Ok((log_id.index, results));
                }
                // Refused before it entered the log, or truncated from it:
                // not applied, so it may go again.
                Err(ProposeError::Raft(RaftError::APIError(
                    ClientWriteError::ForwardToLeader(_),
                ))) => {
                    tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                }
                Err(e) => return Err(e.into_cluster_error()),
            }
        }
    }

    /// Waits until a read on this node is linearizable: this node has
    /// applied everything committed before the call (a read index, asked
    /// of the leader). Every read queued before a round starts shares it.
    pub async fn read_barrier(&self) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.inner.reads.queue.lock().push(tx);
        self.inner.reads.wake.notify_one();
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ClusterError::Stopped),
            Err(_) => Err(ClusterError::NoLeader),
        }
    }

    /// The last index this node knows committed (WAIT's target for a
    /// client that wrote nothing).
    pub fn commit_index(&self) -> u64 {
        crate::replica::index_of(self.inner.log.committed())
    }

    /// On the leader: how many voters besides it hold the log up to
    /// `index`, by the indexes replication has matched on each. None on
    /// any other node: only the leader tracks its followers.
    pub fn replicas_at(&self, index: u64) -> Option<usize> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        if m.current_leader != Some(self.inner.id) {
            return None;
        }
        let matched = m.replication.as_ref()?;
        let voters = m.membership_config.membership().voter_ids();
        let held = voters.filter(|id| {
            *id != self.inner.id
                && matched
                    .get(id)
                    .is_some_and(|l| crate::replica::index_of(*l) >= index)
        });
        Some(held.count())
    }

    /// WAIT: waits until `want` voters besides this leader hold the log up
    /// to `index`, for at most `timeout` (None: no limit) or until `stop`
    /// ends; then answers how many do (`replicas_at`). Woken by every
    /// change of openraft's metrics, which replication reports as each
    /// follower's matched index grows.
    pub async fn wait_replicas(
        &self,
        index: u64,
        want: usize,
        timeout: Option<Duration>,
        stop: impl std::future::Future<Output = ()>,
    ) -> Option<usize> {
        let mut rx = self.inner.raft.metrics();
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline, stop);
        loop {
            rx.borrow_and_update();
            match self.replicas_at(index) {
                Some(n) if n < want => {}
                done => return done,
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // Raft stopped: nothing more will be matched.
                        return self.replicas_at(index);
                    }
                }
                () = &mut deadline => return self.replicas_at(index),
                () = &mut stop => return self.replicas_at(index),
            }
        }
    }

    /// The read loop: one read index per round for every waiting read.
    pub(crate) fn spawn_read_loop(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let wake = Arc::clone(&inner.reads.wake);
                drop(inner);
                wake.notified().await;
                let Some(inner) = weak.upgrade() else { return };
                let me = Replica { inner };
                let waiting = std::mem::take(&mut *me.inner.reads.queue.lock());
                if waiting.is_empty() {
                    continue;
                }
                let r = me.read_index_round().await;
                for w in waiting {
                    let _ = w.send(r.clone());
                }
            }
        });
    }

    async fn read_index_round(&self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let index = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClusterError::NoLeader);
            }
            if let Some(why) = self.removed() {
                return Err(ClusterError::Refused(why));
            }
            let got: RaftResult<Option<LogId>, CheckIsLeaderError<NodeId, openraft::BasicNode>> =
                match self.leader_addr() {
                    Some((leader, _)) if leader == self.inner.id => {
                        match tokio::time::timeout(left, self.read_index_here()).await {
                            Ok(r) => r,
                            Err(_) => return Err(ClusterError::NoLeader),
                        }
                    }
                    Some((leader, addr)) => {
                        match self
                            .inner
                            .transport
                            .call(leader, &addr, Request::ReadIndex, left)
                            .await
                        {
                            Ok(Response::ReadIndex(r)) => r,
                            // A read index asked again changes nothing.
                            _ => {
                                tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                                continue;
                            }
                        }
                    }
                    None => {
                        tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                        continue;
                    }
                };
            match got {
                Ok(read) => break crate::replica::index_of(read),
                Err(RaftError::Fatal(_)) => return Err(ClusterError::Stopped),
                Err(_) => tokio::time::sleep(NO_LEADER_RETRY.min(left)).await,
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if self.wait_applied(index, left).await {
            Ok(())
        } else {
            Err(ClusterError::NoLeader)
        }
    }
}

impl Replica {
    /// Serves reads sent by a node that holds no replica of this range
    /// (`Request::Read`): after a read index, so they are linearizable as
    /// a local read is, and only for keys inside the range's bounds as
    /// this replica applied them (else the asker's map is out of date, and
    /// it is told so).
    /// At a timestamp (`read_at`), the range's floor is raised to it first
    /// instead of a read index, or, pinned by a snapshot, nothing is.
    pub(crate) async fn serve_remote_reads(
        &self,
        reads: &[crate::rpc::RemoteRead],
        at: crate::rpc::At,
    ) -> crate::rpc::RemoteAnswer {
        use crate::rpc::At;
        use crate::rpc::{RemoteItem, RemoteRead};
        use combkv::readexec::{BatchResults, ReadRequest};
        use std::ops::Bound;
        if !self.is_voter() {
            return Err("this replica is a learner still catching up".into());
        }
        match at {
            At::Now => self.read_barrier().await,
            At::Settle(t) => self.settle_at(t).await,
            At::Pinned(_) => Ok(()),
        }
        .map_err(|e| e.to_string())?;
        let bounds = self.bounds();
        if bounds.retired {
            return Err(format!(
                "{bounds}: the range map has changed; route the reads again"
            ));
        }
        // A bound inside the range (an upper one may be its end), or
        // unbounded where the range is.
        let within = |b: &Bound<Vec<u8>>, low: bool| match b {
            Bound::Included(k) | Bound::Excluded(k) => {
                bounds.contains(k) || (!low && bounds.end.as_deref() == Some(k.as_slice()))
            }
            Bound::Unbounded if low => bounds.start.is_empty(),
            Bound::Unbounded => bounds.end.is_none(),
        };
        let ranges: Vec<Option<combkv::Range>> = reads
            .iter()
            .map(|r| match r {
                RemoteRead::Range {
                    start,
                    end,
                    limit,
                    reverse,
                } => {
                    let mut range = combkv::Range::new(start.clone(), end.clone());
                    range.limit = limit.map(|l| l as usize);
                    range.reverse = *reverse;
                    Some(range)
                }
                _ => None,
            })
            .collect();
        let mut requests = Vec::with_capacity(reads.len());
        for (r, range) in reads.iter().zip(&ranges) {
            match (r, range) {
                (RemoteRead::Get(k), _) if bounds.contains(k) => requests.push(ReadRequest::Get(k)),
                (RemoteRead::Range { start, end, .. }, Some(range))
                    if within(start, true) && within(end, false) =>
                {
                    requests.push(ReadRequest::Range(range));
                }
                (RemoteRead::Count { start, end }, _)
                    if bounds.start.as_slice() <= start.as_slice()
                        && match (&bounds.end, end) {
                            (None, _) => true,
                            (Some(_), None) => false,
                            (Some(b), Some(e)) => e <= b,
                        } => {}
                _ => {
                    return Err(format!(
                        "range {} does not hold what was asked (its bounds are {bounds}): \
                         the range map has changed",
                        bounds.id
                    ));
                }
            }
        }
        match at {
            At::Settle(t) => return self.serve_reads_at(t, false, reads, &ranges),
            At::Pinned(t) => return self.serve_reads_at(t, true, reads, &ranges),
            At::Now => {}
        }
        let store = self.current_store();
        if let Some(ReadRequest::Get(k)) = requests.first() {
            self.note_reads(requests.len() as u64, k);
        }
        let mut out = BatchResults::new();
        store
            .read_batch(&requests, &mut out)
            .map_err(|e| e.to_string())?;
        let mut served = out.len();
        let mut answers = Vec::with_capacity(reads.len());
        for r in reads.iter().rev() {
            answers.push(match r {
                RemoteRead::Count { start, end } => vec![RemoteItem {
                    key: Vec::new(),
                    value: Vec::new(),
                    version: count_within(&store, &bounds, start, end.as_deref())
                        .map_err(|e| e.to_string())?,
                    expires_at_ms: None,
                    flags: 0,
                }],
                _ => {
                    served -= 1;
                    out.items(served)
                        .map(|it| RemoteItem {
                            key: it.key.to_vec(),
                            value: it.value.to_vec(),
                            version: it.version.get(),
                            expires_at_ms: it.expires_at_ms,
                            flags: it.flags,
                        })
                        .collect()
                }
            });
        }
        answers.reverse();
        Ok(answers)
    }
}

/// How many live keys `store` (a replica with `bounds`) holds from `start`
/// up to `end`: its count when those are its bounds, else counted (a
/// replica that has not applied a split yet still holds the new range's
/// keys, which its count would include).
pub fn count_within(
    store: &combkv::Store,
    bounds: &Bounds,
    start: &[u8],
    end: Option<&[u8]>,
) -> combkv::Result<u64> {
    if bounds.start == start && bounds.end.as_deref() == end {
        return Ok(store.len());
    }
    use std::ops::Bound;
    let range = combkv::Range::new(
        Bound::Included(start.to_vec()),
        end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec())),
    );
    let mut n = 0;
    store.scan(&range, |_| {
        n += 1;
        true
    })?;
    Ok(n)
}

/// The first result of a one-op entry (a map change, a split, a step of
/// a merge): applied, or why not.
pub(crate) fn one_result(results: Results, what: &str) -> Result<(), ClusterError> {
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(()),
        Some(Err(combkv::Error::InvalidConfig(why))) => Err(ClusterError::Refused(why)),
        Some(Err(e)) => Err(ClusterError::Refused(e.to_string())),
        None => Err(ClusterError::Unknown(format!(
            "the {what}'s entry answered nothing"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica's count of a range is its store's count only when the
    /// range is its whole bounds; a range inside them (the asker's map
    /// records a split the replica has not applied) is counted.
    #[test]
    fn a_count_is_cut_to_the_range_asked() {
        let store = combkv::Store::new(combkv::Config::default()).unwrap();
        for k in [b"a", b"b", b"c", b"d"] {
            store.put(k, b"v").unwrap();
        }
        let whole = Bounds::whole(1);
        assert_eq!(count_within(&store, &whole, b"", None).unwrap(), 4);
        assert_eq!(count_within(&store, &whole, b"", Some(b"c")).unwrap(), 2);
        assert_eq!(count_within(&store, &whole, b"c", None).unwrap(), 2);
        assert_eq!(count_within(&store, &whole, b"b", Some(b"d")).unwrap(), 2);
    }
}
