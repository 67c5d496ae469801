//! What the text/meta parser (`parse`) and the binary parser (`binary`)
//! share: the limits a request is parsed under and the storage commands.
//! It lies below both, so that `parse` (whose `Request` can carry a binary
//! request) imports `binary` and not the other way round.

/// memcached's key length limit.
pub const MEMCACHED_MAX_KEY: usize = 250;

/// The limits a request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// The store's longest key (the memcached limit of 250 applies as well).
    pub max_key_len: usize,
    pub max_value_len: usize,
    /// A whole request: line and data block.
    pub max_request_bytes: usize,
    /// The largest data block `maxmemory` leaves room for (see
    /// `Shared::body_room`); a larger one, past `BIG_BODY`, is refused with
    /// the out-of-memory error as soon as its line is read, and skipped.
    pub max_body: usize,
}

/// Data blocks up to this size are read whatever `max_body` says: the
/// storage command itself then refuses them above `maxmemory`.
pub const BIG_BODY: usize = 64 * 1024;

/// A storage command (text, meta and binary alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}
