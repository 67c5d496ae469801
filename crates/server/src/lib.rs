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

pub mod cluster;
pub mod config;
mod fuzzing;
mod memcache;
mod net;
mod node;
mod pipeline;
mod resp;
mod state;
mod turn;

pub use config::{ByteSize, DurabilityMode, Listen, ServerConfig, StartError};
/// Entry points for the memcached fuzz target and fuzz tests; not an API.
#[doc(hidden)]
pub use fuzzing::memcache as memcache_fuzzing;
/// Entry points for the RESP fuzz target and fuzz tests; not an API.
#[doc(hidden)]
pub use fuzzing::resp as resp_fuzzing;
pub use net::server::{Server, Stopper};
pub use node::info;
