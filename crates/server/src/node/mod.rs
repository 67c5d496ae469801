//! What the protocols ask of this node beyond the store's own API: a write
//! or a read that reaches the local store or the cluster's log (`park`),
//! the whole-store operations (`admin`: SAVE, BGSAVE, closing the store),
//! the keys reads see, one store or the ranges' (`keyspace`),
//! changes to the users (`acl`), whether it serves (`readiness`, and what
//! a service manager is told: `service`), and the INFO sections over all
//! of it (`info`).

pub(crate) mod acl;
pub(crate) mod admin;
pub mod info;
pub(crate) mod keyspace;
pub(crate) mod park;
pub(crate) mod peers;
pub(crate) mod readiness;
pub(crate) mod service;
pub(crate) mod settings;
