//! The state every layer above shares: [`Shared`] (the store, the cluster
//! node, the configuration, counters, clients, memory figures), the slow
//! log, and the memcached listener's own shared state.

pub(crate) mod acl;
pub(crate) mod clients;
pub(crate) mod counter;
pub(crate) mod glob;
pub(crate) mod memcache;
pub(crate) mod ratelimit;
pub(crate) mod shared;
pub(crate) mod slowlog;
pub(crate) mod tls;

pub use clients::ClientEntry;
pub use counter::Counter;
pub use shared::{Shared, Stats};
