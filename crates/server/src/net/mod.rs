//! Listeners and connections: starting and stopping the server, the
//! acceptor, the event loops and their connections, the metrics listener.
//! A connection hands its input to its listener's [`proto::ProtoState`]
//! (a `crate::pipeline::Pipeline`), and writes back what it answered.

pub(crate) mod acceptor;
pub(crate) mod connection;
pub(crate) mod event_loop;
pub(crate) mod exposition;
pub(crate) mod heap;
pub(crate) mod metrics;
pub(crate) mod proto;
pub(crate) mod server;
pub(crate) mod stream;
pub(crate) mod tls;
