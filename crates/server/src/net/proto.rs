//! The seam between a connection and its protocol: a connection's protocol
//! is one of the two [`Pipeline`]s, and the pipeline turns the bytes the
//! connection has read into replies (`pipeline.rs`).

use crate::memcache::Memcache;
use crate::pipeline::Pipeline;
use crate::resp::Resp;
use crate::turn::{Cx, Processed, Protocol};

/// A connection's protocol state.
#[derive(Debug)]
pub(crate) enum ProtoState {
    Resp(Pipeline<Resp>),
    Memcache(Pipeline<Memcache>),
}

impl ProtoState {
    /// Executes every complete request in `input`, appending replies to `out`
    /// (see [`Pipeline::process`]).
    pub(crate) fn process(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
    ) -> Processed {
        match self {
            ProtoState::Resp(p) => p.process(cx, input, out, reply_budget),
            ProtoState::Memcache(p) => p.process(cx, input, out, reply_budget),
        }
    }

    /// See [`Protocol::splice`].
    pub(crate) fn splice(&mut self, at: usize, value: combkv::ReceivedValue) {
        match self {
            ProtoState::Resp(p) => p.proto.splice(at, value),
            ProtoState::Memcache(p) => p.proto.splice(at, value),
        }
    }

    /// See [`Protocol::unsplice`].
    pub(crate) fn unsplice(&mut self) {
        match self {
            ProtoState::Resp(p) => p.proto.unsplice(),
            ProtoState::Memcache(p) => p.proto.unsplice(),
        }
    }

    /// The reply sent before closing a connection whose request hit a bug.
    pub(crate) fn internal_error(&self) -> &'static [u8] {
        match self {
            ProtoState::Resp(_) => Resp::INTERNAL_ERROR,
            ProtoState::Memcache(_) => Memcache::INTERNAL_ERROR,
        }
    }

    /// The reply sent before closing a connection refused for
    /// `max-total-query-bytes`.
    pub(crate) fn query_limit_error(&self) -> &'static [u8] {
        match self {
            ProtoState::Resp(_) => {
                b"-ERR client query buffers are at max-total-query-bytes; closing connection\r\n"
            }
            // memcached's reply when it cannot buffer a request.
            ProtoState::Memcache(_) => b"SERVER_ERROR out of memory reading request\r\n",
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            ProtoState::Resp(_) => Resp::NAME,
            ProtoState::Memcache(_) => Memcache::NAME,
        }
    }
}
