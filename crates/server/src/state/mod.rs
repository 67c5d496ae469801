//! The state every layer above shares: [`Shared`] (the store, the cluster
//! node, the configuration, counters, clients, memory figures), the slow
//! log, and the memcached listener's own shared state.

pub(crate) mod acl;
pub(crate) mod clients;
pub mod cmdstats;
pub(crate) mod counter;
pub(crate) mod fdlimit;
pub(crate) mod glob;
pub mod latency;
pub mod live;
pub(crate) mod memcache;
pub mod monitor;
pub(crate) mod ratelimit;
pub(crate) mod readiness;
pub(crate) mod shared;
pub(crate) mod slowlog;
pub(crate) mod tls;

pub use clients::ClientEntry;
pub use counter::Counter;
pub use shared::{Node, Shared, Stats};
