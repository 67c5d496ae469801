//! Moving the node toward serving, and noticing when it can no longer
//! (`state/readiness.rs`): a cluster node catches up with its leader's
//! commit index before it serves; storage that failed for good (a log
//! write refused: a full disk) marks the node failed, which `/readyz`,
//! `/healthz` and the service manager's watchdog report.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::node::service;
use crate::state::Shared;
use crate::state::readiness::State;

/// Ticks between checks of the storage (a second at housekeeping's pace).
const FAILURE_CHECK_EVERY: u64 = 10;

/// Runs on every housekeeping tick (and once when the node opens).
pub(crate) fn check(shared: &Arc<Shared>, tick: u64) {
    count_leader_changes(shared);
    match shared.readiness.state() {
        State::Loading => service::loading(shared, tick),
        State::CatchingUp => catch_up(shared),
        State::Ready => {
            if !shared.readiness.announced.swap(true, Ordering::AcqRel) {
                service::ready();
            }
            crate::node::peers::publish(shared);
            if tick.is_multiple_of(FAILURE_CHECK_EVERY)
                && let Some(why) = failure(shared)
            {
                fail(shared, &why);
            }
        }
        State::Failed(_) => return,
    }
    service::watchdog(tick);
}

/// Counts a change of leader this node sees (metrics'
/// `combkv_raft_leader_changes_total`).
fn count_leader_changes(shared: &Shared) {
    let Some(c) = shared.cluster() else {
        return;
    };
    let now = c.status().leader.unwrap_or(0);
    let before = shared.last_leader.swap(now, Ordering::Relaxed);
    if before != u64::MAX && before != now {
        crate::state::Stats::add(&shared.stats.raft_leader_changes, 1);
    }
}

/// Asks the leader for a read index, once at a time: when this node has
/// applied up to it, it has caught up with what was committed when it
/// asked (the same round a linearizable read waits for).
fn catch_up(shared: &Arc<Shared>) {
    let Some(c) = shared.cluster() else {
        return;
    };
    if let Some(why) = failure(shared) {
        fail(shared, &why);
        return;
    }
    if shared.readiness.asking.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(shared);
    c.read_barrier_then(
        crate::cluster::ReadScope::All,
        move |result: Result<_, _>| {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            shared.readiness.asking.store(false, Ordering::Release);
            if result.is_ok() {
                shared.readiness.caught_up();
                tracing::info!("caught up with the cluster's leader: serving");
            }
        },
    );
}

/// Whether the node serves, as `/readyz` and `combkv_ready` say: it is
/// ready, and (a cluster node) its cluster has not removed it. Why not
/// otherwise.
pub(crate) fn serving(shared: &Shared) -> Result<(), String> {
    if let Some(why) = shared.cluster().and_then(|c| c.removed()) {
        return Err(format!("removed: {why}"));
    }
    match shared.readiness.state() {
        State::Ready => Ok(()),
        _ => Err(shared.readiness.describe()),
    }
}

/// Why the node's storage cannot go on without a restart, if so.
fn failure(shared: &Shared) -> Option<String> {
    match shared.cluster() {
        Some(c) => c
            .status()
            .fatal
            .map(|e| format!("the Raft node stopped: {e}")),
        None => shared
            .current_store()
            .persistence()
            .read_only
            .map(|e| format!("the write-ahead log failed, writes are refused: {e}")),
    }
}

fn fail(shared: &Shared, why: &str) {
    if shared.readiness.fail(why) {
        tracing::error!(
            "not ready: {why}; restart the node once the cause is fixed \
             (under systemd, its watchdog restarts it)"
        );
        service::failed(why);
    }
}
