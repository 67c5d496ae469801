//! What each node tells the others about itself, as cluster settings
//! (through the log) once it serves:
//! - its RESP address (`resp-addr/<id>`), so that ROLE, INFO replication
//!   and a "not the leader" answer name the address a Redis tool connects
//!   to, not the Raft address;
//! - its `cluster-max-clock-offset` (`clock-offset/<id>`), so that every
//!   node applies the largest the members set (`ClockOffset::adopt`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use combkv_replica::ranges::CLOCK_OFFSET_SETTING;

use crate::cluster::Cluster;
use crate::config::Listen;
use crate::state::Shared;

fn setting(id: u64) -> String {
    format!("resp-addr/{id}")
}

/// The RESP address others reach this node at: the bound one, or, bound
/// to every interface, the Raft address's host with the RESP port.
fn advertised(shared: &Shared) -> Option<SocketAddr> {
    let Listen::At(resp) = shared.config.resp else {
        return None;
    };
    if !resp.ip().is_unspecified() {
        return Some(resp);
    }
    let raft = shared.config.raft_advertise.or(shared.config.raft_addr)?;
    Some(SocketAddr::new(raft.ip(), resp.port()))
}

/// Publishes this node's RESP address and clock offset bound where the
/// log does not hold them yet (housekeeping, once the node serves; tried
/// again on a later tick if the cluster could not take them).
pub(crate) fn publish(shared: &Shared) {
    let Some(c) = shared.cluster() else {
        return;
    };
    if shared.readiness.published.swap(true, Ordering::AcqRel) {
        return;
    }
    let offset = format!("{CLOCK_OFFSET_SETTING}{}", c.id());
    let bound = shared.config.cluster_max_clock_offset.to_string();
    let mut all = vec![("clock offset bound", offset, bound)];
    if let Some(addr) = advertised(shared) {
        all.push(("RESP address", setting(c.id()), addr.to_string()));
    }
    for (what, name, value) in all {
        if c.setting(&name).as_deref() == Some(value.as_bytes()) {
            continue;
        }
        match c.set_setting(&name, value.as_bytes()) {
            Ok(()) => tracing::debug!("published this node's {what} {value}"),
            Err(e) => {
                tracing::debug!("{what} not published yet: {e}");
                shared.readiness.published.store(false, Ordering::Release);
                return;
            }
        }
    }
}

/// Node `id`'s RESP address, if it has published one.
pub(crate) fn resp_addr(c: &Cluster, id: u64) -> Option<String> {
    c.setting(&setting(id))
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}
