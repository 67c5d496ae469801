//! A node's Raft groups behind its one address. A node hosts one group per
//! range it holds a replica of; they share the node's listener, its
//! connections to each peer (a request names its group, `rpc::Request::
//! ToGroup`) and its peer TLS. Each group is a [`Replica`] of its own: its
//! log, state machine, elections and clients' requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::StartError;
use crate::network::tls::{PeerGuard, PeerTlsFiles};
use crate::network::{BoxFuture, GroupTransport, Handler, Transport};
use crate::node::ReplicaConfig;
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::types::{GroupId, NodeId};

type Groups = Arc<RwLock<HashMap<GroupId, Replica>>>;

/// The groups one node hosts, and what they share.
#[derive(Debug, Clone)]
pub struct Host {
    id: NodeId,
    groups: Groups,
    transport: Arc<dyn Transport>,
    guard: Arc<PeerGuard>,
}

/// Hands each request that reaches the node to the group it names.
struct Dispatch(Groups);

impl Handler for Dispatch {
    fn handle(&self, req: Request) -> BoxFuture<'_, Response> {
        let (group, req) = match req {
            Request::ToGroup(g, inner) => (g, *inner),
            bare => (0, bare),
        };
        // Cloned out, so that no lock is held while the group works.
        let replica = self.0.read().get(&group).cloned();
        Box::pin(async move {
            match replica {
                Some(r) => r.handle(req).await,
                None => Response::NoSuchGroup(group),
            }
        })
    }
}

impl Host {
    /// A node `id` that talks TCP: binds `raft_addr` (sending from its IP)
    /// and serves its groups' peers there, with mutual TLS when `peer_tls`
    /// names the files. Runs inside the current tokio runtime.
    pub async fn bind(
        id: NodeId,
        raft_addr: SocketAddr,
        peer_tls: Option<PeerTlsFiles>,
    ) -> Result<Host, StartError> {
        let guard = Arc::new(PeerGuard::new(peer_tls).map_err(StartError::Config)?);
        let listener = tokio::net::TcpListener::bind(raft_addr).await?;
        let transport = Arc::new(crate::network::tcp::TcpTransport::new(
            Some(raft_addr.ip()),
            Arc::clone(&guard),
        ));
        let groups = Groups::default();
        let handler: Arc<dyn Handler> = Arc::new(Dispatch(Arc::clone(&groups)));
        tokio::spawn(crate::network::tcp::serve(
            listener,
            handler,
            Arc::clone(&guard),
        ));
        Ok(Host {
            id,
            groups,
            transport,
            guard,
        })
    }

    /// A node `id` on a simulated network (tests); it replaces whatever
    /// answered for `id` there before (a restart).
    pub fn simulated(id: NodeId, net: &crate::network::sim::SimNet) -> Host {
        let groups = Groups::default();
        net.register(id, Arc::new(Dispatch(Arc::clone(&groups))));
        Host {
            id,
            groups,
            transport: net.transport(id),
            guard: Arc::new(PeerGuard::default()),
        }
    }

    /// Starts this node's replica of `group`, set up by `config` (its own
    /// directory; `config.id` must be this node's). Refused if the node
    /// hosts that group already.
    pub async fn start_group(
        &self,
        group: GroupId,
        config: &ReplicaConfig,
    ) -> Result<Replica, StartError> {
        if config.id != self.id {
            return Err(StartError::Config(format!(
                "group {group} is set up for node {}, on node {}",
                config.id, self.id
            )));
        }
        if self.groups.read().contains_key(&group) {
            return Err(StartError::Config(format!(
                "node {} hosts group {group} already",
                self.id
            )));
        }
        let transport = Arc::new(GroupTransport::new(group, Arc::clone(&self.transport)));
        let replica =
            Replica::start_with(config, group, transport, Arc::clone(&self.guard)).await?;
        self.groups.write().insert(group, replica.clone());
        Ok(replica)
    }

    /// Stops serving `group`'s peers and hands its replica back (for the
    /// caller to shut down); requests for it are answered as for a group
    /// the node never had.
    pub fn remove_group(&self, group: GroupId) -> Option<Replica> {
        self.groups.write().remove(&group)
    }

    /// The replica of `group`, if this node hosts one.
    pub fn group(&self, group: GroupId) -> Option<Replica> {
        self.groups.read().get(&group).cloned()
    }

    /// The groups this node hosts.
    pub fn groups(&self) -> Vec<GroupId> {
        let mut ids: Vec<GroupId> = self.groups.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

impl Replica {
    /// Starts a node of one group (group 0) that talks TCP: binds
    /// `config.raft_addr` and serves peers there. Runs inside the current
    /// tokio runtime.
    pub async fn start(config: &ReplicaConfig) -> Result<Replica, StartError> {
        Host::bind(config.id, config.raft_addr, config.peer_tls.clone())
            .await?
            .start_group(0, config)
            .await
    }

    /// Starts a node of one group (group 0) on a simulated network (tests):
    /// inside the current runtime, usually a single-threaded one with its
    /// clock paused.
    pub async fn start_simulated(
        config: &ReplicaConfig,
        net: &crate::network::sim::SimNet,
    ) -> Result<Replica, StartError> {
        Host::simulated(config.id, net).start_group(0, config).await
    }
}
