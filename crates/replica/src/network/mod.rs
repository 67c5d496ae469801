//! Carrying requests between nodes. A [`Transport`] moves one request to a
//! node and brings its response back: over TCP in a real cluster (`tcp`),
//! through a simulated network with seeded faults in tests (`sim`). openraft
//! talks to peers through [`Network`], which turns transport failures into
//! the errors openraft acts on (back off from an unreachable node, retry
//! after a timeout).

pub mod sim;
pub(crate) mod tcp;
pub(crate) mod tls;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RPCTypes};

use crate::health::Health;
use crate::hold::Hold;
use crate::lease::Lease;
use crate::rpc::{Request, Response};
use crate::transfers::Transfers;
use crate::types::{GroupId, NodeId, TypeConfig};

/// A boxed future, for the object-safe traits below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Moves one request to the node `target` at `addr` and returns its
/// response, or fails within `timeout`.
pub(crate) trait Transport: Send + Sync + std::fmt::Debug + 'static {
    fn call(
        &self,
        target: NodeId,
        addr: &str,
        req: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, io::Result<Response>>;
}

/// Whether `e` says the node asked hung up on the request rather than
/// answer it: what a node does with a request it cannot decode (one of a
/// newer build's), unlike a node down (refused, timed out).
pub(crate) fn peer_hung_up(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// What a node does with a request that reached it.
pub(crate) trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> BoxFuture<'_, Response>;
}

/// The transport of one of the groups a node hosts: its requests travel
/// over the node's one transport as [`Request::ToGroup`] (group 0's bare,
/// as they always did), so every group shares each connection to a peer.
#[derive(Debug)]
pub(crate) struct GroupTransport {
    group: GroupId,
    inner: Arc<dyn Transport>,
}

impl GroupTransport {
    pub(crate) fn new(group: GroupId, inner: Arc<dyn Transport>) -> GroupTransport {
        GroupTransport { group, inner }
    }
}

impl Transport for GroupTransport {
    fn call(
        &self,
        target: NodeId,
        addr: &str,
        req: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, io::Result<Response>> {
        let req = Request::for_group(self.group, req);
        let call = self.inner.call(target, addr, req, timeout);
        let group = self.group;
        Box::pin(async move {
            match call.await? {
                // As from a node that is down: back off and try again (the
                // group may be starting there).
                Response::NoSuchGroup(_) => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("node {target} hosts no group {group}"),
                )),
                r => Ok(r),
            }
        })
    }
}

/// openraft's view of the peers: one [`Peer`] per target.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    transport: Arc<dyn Transport>,
    /// Where each request's fate is noted, for an operator's "why".
    health: Arc<Health>,
    /// Set while a leader hands its group over (`handover`).
    hold: Arc<Hold>,
    /// Told of each append a follower accepted (`lease`).
    lease: Arc<Lease>,
    /// Told of each snapshot chunk sent (`transfers`).
    transfers: Arc<Transfers>,
}

impl Network {
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        health: Arc<Health>,
        hold: Arc<Hold>,
        lease: Arc<Lease>,
        transfers: Arc<Transfers>,
    ) -> Network {
        Network {
            transport,
            health,
            hold,
            lease,
            transfers,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            transport: Arc::clone(&self.transport),
            health: Arc::clone(&self.health),
            hold: Arc::clone(&self.hold),
            lease: Arc::clone(&self.lease),
            transfers: Arc::clone(&self.transfers),
        }
    }
}

/// One peer, as openraft's replication and election tasks reach it.
#[derive(Debug)]
pub(crate) struct Peer {
    target: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
    health: Arc<Health>,
    hold: Arc<Hold>,
    lease: Arc<Lease>,
    transfers: Arc<Transfers>,
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Peer {
    /// An append or snapshot chunk withheld while this leader hands its
    /// group over: failed after a moment, as openraft retries a network
    /// error, and not counted against the peer's health.
    async fn withheld<T, E: std::error::Error>(&self) -> RpcResult<T, E> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(RPCError::Network(NetworkError::new(&io::Error::other(
            "withheld while the leadership is handed over",
        ))))
    }

    /// Sends `req` and hands the response to `pick`, which takes the kind
    /// it expects.
    async fn call<T, E: std::error::Error>(
        &self,
        action: RPCTypes,
        req: Request,
        option: &RPCOption,
        pick: impl FnOnce(Response) -> Option<Result<T, RaftError<NodeId, E>>>,
    ) -> RpcResult<T, E> {
        let timeout = option.hard_ttl();
        let got = match self
            .transport
            .call(self.target, &self.addr, req, timeout)
            .await
        {
            Ok(got) => got,
            Err(e) => {
                self.health.failed(self.target, &e);
                return Err(transport_error(action, self.target, timeout, e));
            }
        };
        match pick(got) {
            Some(Ok(v)) => {
                self.health.answered(self.target);
                Ok(v)
            }
            Some(Err(e)) => {
                self.health.failed(self.target, &e);
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            None => Err(RPCError::Network(NetworkError::new(&io::Error::other(
                "the peer answered another kind of request",
            )))),
        }
    }
}

/// A transport failure as openraft should act on it: a refused or broken
/// connection means back off; a timeout is retried.
fn transport_error<E: std::error::Error>(
    action: RPCTypes,
    target: NodeId,
    timeout: Duration,
    e: io::Error,
) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    match e.kind() {
        io::ErrorKind::TimedOut => RPCError::Timeout(Timeout {
            action,
            id: 0,
            target,
            timeout,
        }),
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::NotConnected
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        if self.hold.silent() {
            return self.withheld().await;
        }
        // Taken before the append leaves: the follower's lease, counted
        // from when it accepts it, cannot end before this one's.
        let (vote, sent) = (rpc.vote, tokio::time::Instant::now());
        let answer = self
            .call(
                RPCTypes::AppendEntries,
                Request::Append(rpc),
                &option,
                |r| match r {
                    Response::Append(r) => Some(r),
                    _ => None,
                },
            )
            .await;
        if let Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)) =
            &answer
        {
            self.lease.acked(self.target, &vote, sent);
        }
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        if self.hold.silent() {
            return self.withheld().await;
        }
        let last = rpc.done;
        self.transfers.sending(self.target);
        let answer = self
            .call(
                RPCTypes::InstallSnapshot,
                Request::Snapshot(rpc),
                &option,
                |r| match r {
                    Response::Snapshot(r) => Some(r),
                    _ => None,
                },
            )
            .await;
        self.transfers.sent(self.target, last, answer.is_ok());
        answer
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let resp = self
            .call(RPCTypes::Vote, Request::Vote(rpc), &option, |r| match r {
                Response::Vote(r) => Some(r),
                _ => None,
            })
            .await;
        if let Ok(v) = &resp {
            self.health.voted(self.target, v);
        }
        resp
    }
}
