//! What the protocols ask of this node beyond the store's own API: a write
//! or a read that reaches the local store or the cluster's log (`park`),
//! the whole-store operations (`admin`: SAVE, BGSAVE, closing the store),
//! changes to the users (`acl`), and the INFO sections over all of it
//! (`info`).

pub(crate) mod acl;
pub(crate) mod admin;
pub mod info;
pub(crate) mod park;
