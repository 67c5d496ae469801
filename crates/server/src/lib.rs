//! combkv's server: a Redis RESP listener and a memcached text/meta listener
//! over one [`combkv::Store`] (`docs/design.md`, "Server"; `docs/protocol.md`).
//!
//! - `config`: defaults, TOML file, flags; every limit
//! - `server`: start/stop, acceptor, housekeeping
//! - `event_loop`, `connection`: thread-per-core `mio` loops, buffers
//! - `pipeline`: the request pipeline both protocols run (classify, batch
//!   reads, commit before reads, the turn's rules); `proto`: a connection's
//!   pipeline, RESP or memcached; `park`: how a cluster node's connection
//!   waits for the log without blocking its loop
//! - `resp/`: frame -> command -> reply; `memcache/`: text and meta commands
//! - `info`, `metrics`, `slowlog`, `admin`: observability and whole-store ops

mod admin;
pub mod cluster;
pub mod config;
mod connection;
mod event_loop;
mod fdlimit;
pub mod info;
mod memcache;
mod metrics;
mod park;
mod pipeline;
mod proto;
mod resp;
/// Entry points for the memcached fuzz target and fuzz tests; not an API.
#[doc(hidden)]
pub use memcache::fuzzing as memcache_fuzzing;
/// Entry points for the RESP fuzz target and fuzz tests; not an API.
#[doc(hidden)]
pub use resp::fuzzing as resp_fuzzing;
mod server;
mod shared;
mod slowlog;

pub use config::{ByteSize, DurabilityMode, Listen, ServerConfig, StartError};
pub use server::{Server, Stopper};
