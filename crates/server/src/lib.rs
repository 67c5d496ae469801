//! combkv's server: a Redis RESP listener and a memcached text/meta listener
//! over one [`combkv::Store`] (`docs/design.md`, "Server"; `docs/protocol.md`).
//!
//! The modules form layers, and imports point down only: a module uses its
//! own layer and the ones below it, never one above. From the top:
//!
//! 1. `net/`: listeners and connections. `server` starts and stops the
//!    server (store, listeners, threads, housekeeping), `event_loop` and
//!    `connection` run the thread-per-core `mio` loops and their buffers,
//!    `proto` is a listener's pipeline (RESP or memcached), `metrics`
//!    serves Prometheus and the readiness probes.
//!    Beside it, `fuzzing/` holds the fuzz entry points, which drive a
//!    parser or a whole pipeline without a socket.
//! 2. `pipeline`: the request pipeline both protocols run
//!    (`Pipeline`: classify, batch reads, commit before reads,
//!    the turn's rules).
//! 3. `resp/` and `memcache/`: the protocols: parsing (frame -> command),
//!    the commands (`cmd/`) and their replies and error texts.
//! 4. `turn`: the contract between the pipeline and the protocols: the
//!    `Protocol` trait they implement and the `Cx` they work with (`Step`,
//!    `Class`, `Ran`, `Processed`, `Client`, `Render`). It lies below the
//!    protocols so that they import it downward.
//! 5. `node/`: what a protocol asks of this node beyond the store's own
//!    API: `park` (a write or a read that reaches the local store or the
//!    cluster's log, and how a connection waits for the log), `admin`
//!    (SAVE, BGSAVE, closing the store), `info` (INFO's sections).
//! 6. `state/`: what every layer above shares: `shared` (`Shared`, `Stats`,
//!    `Counter`, the clients, memory figures), `slowlog`, and `memcache`
//!    (memcached's counters and delayed flush, part of `Shared`).
//! 7. `cluster`: the Raft node this process runs, which `Shared` holds.
//! 8. `config`: defaults, TOML file, flags, every limit, and `StartError`.

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
pub use net::server::{Reloader, Server, Stopper};
pub use node::info;
pub use state::live::{LogLevelHook, on_log_level};
