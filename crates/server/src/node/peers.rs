//! Where clients reach the other nodes: each node publishes its RESP
//! address as a cluster setting (`resp-addr/<id>`, through the log) once
//! it serves, so that ROLE, INFO replication and a "not the leader" answer
//! name the address a Redis tool connects to, not the Raft address.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

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

/// Publishes this node's RESP address if the log does not hold it yet
/// (housekeeping, once the node serves; tried again on a later tick if
/// the cluster could not take it).
pub(crate) fn publish(shared: &Shared) {
    let (Some(c), Some(addr)) = (shared.cluster(), advertised(shared)) else {
        return;
    };
    if shared.readiness.published.swap(true, Ordering::AcqRel) {
        return;
    }
    let name = setting(c.id());
    let value = addr.to_string();
    if c.setting(&name).as_deref() == Some(value.as_bytes()) {
        return;
    }
    match c.set_setting(&name, value.as_bytes()) {
        Ok(()) => tracing::debug!("published this node's RESP address {value}"),
        Err(e) => {
            tracing::debug!("RESP address not published yet: {e}");
            shared.readiness.published.store(false, Ordering::Release);
        }
    }
}

/// Node `id`'s RESP address, if it has published one.
pub(crate) fn resp_addr(c: &Cluster, id: u64) -> Option<String> {
    c.setting(&setting(id))
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}
