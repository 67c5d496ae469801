//! The seam between a connection and its protocol: a protocol turns the
//! bytes a connection has read into replies, executing every complete request
//! it finds. Requests that only read are gathered into one read-engine batch
//! (`docs/design.md`, "A turn"); replies are appended in request order.

use std::net::SocketAddr;
use std::time::Instant;

use combkv::Session;
use combkv::readexec::BatchResults;

use crate::memcache::McConn;
use crate::resp::RespConn;
use crate::shared::Shared;

/// Per-connection facts every protocol may need.
#[derive(Debug)]
pub(crate) struct Client {
    pub id: u64,
    pub addr: SocketAddr,
    pub name: Option<String>,
    pub connected_at: Instant,
}

/// What a protocol works with while processing one connection's input.
pub(crate) struct Cx<'a> {
    pub shared: &'a Shared,
    /// Writes go through the turn's session: their replies are written at
    /// once, but leave only after the event loop commits the session (one
    /// group commit per turn). A read after this connection's own writes
    /// commits first (`commit_before_read`).
    pub session: &'a Session<'a>,
    /// The event loop's reusable result buffers for read batches.
    pub batch: &'a mut BatchResults,
    pub client: &'a mut Client,
}

impl Cx<'_> {
    /// Commits the turn's session if the connection wrote since its last
    /// commit (`wrote`, cleared here), so its next read sees its own writes.
    /// False: the commit failed and the turn must be aborted.
    pub(crate) fn commit_own_writes(&self, wrote: &mut bool) -> bool {
        if !std::mem::take(wrote) {
            return true;
        }
        match self.session.commit() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(client = self.client.id, "commit failed: {e}");
                false
            }
        }
    }
}

/// The result of processing a connection's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Input bytes used (complete requests); the rest waits for more data.
    pub consumed: usize,
    /// Close the connection once the replies are written (QUIT, or framing
    /// lost after a protocol error).
    pub close: bool,
    /// A commit failed (the store turned read-only): the replies of this
    /// turn must not be sent, since they may acknowledge writes that are not
    /// durable. The connection is closed without them.
    pub abort: bool,
}

/// A connection's protocol state.
#[derive(Debug)]
pub(crate) enum ProtoState {
    Resp(RespConn),
    Memcache(McConn),
}

impl ProtoState {
    /// Executes every complete request in `input`, appending replies to `out`.
    /// Stops early (leaving input unconsumed) once `out` holds more than
    /// `reply_budget` bytes, so a slow reader cannot make replies pile up.
    pub(crate) fn process(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
    ) -> Outcome {
        match self {
            ProtoState::Resp(c) => c.process(cx, input, out, reply_budget),
            ProtoState::Memcache(c) => c.process(cx, input, out, reply_budget),
        }
    }

    /// The reply sent before closing a connection whose request hit a bug.
    pub(crate) fn internal_error(&self) -> &'static [u8] {
        match self {
            ProtoState::Resp(_) => b"-ERR internal error; closing connection\r\n",
            ProtoState::Memcache(_) => b"SERVER_ERROR internal error; closing connection\r\n",
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            ProtoState::Resp(_) => "resp",
            ProtoState::Memcache(_) => "memcached",
        }
    }
}
