//! What a write asks for.

use super::item::{Expiry, Flags};

/// One write of [`Store::write_atomically`](crate::Store::write_atomically).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicWrite<'a> {
    /// Store `value` under `key` (insert or overwrite).
    Put {
        key: &'a [u8],
        value: &'a [u8],
        expiry: Expiry,
    },
    /// Remove `key` if present.
    Delete { key: &'a [u8] },
}

/// What [`Store::write_with`](crate::Store::write_with) does with a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Leave it as it is.
    Keep,
    /// Store this value with this expiry ([`Expiry::Keep`] keeps the live
    /// item's expiry, none if absent) and client flags ([`Flags::Keep`]
    /// keeps the live item's flags, 0 if absent).
    Put {
        value: Vec<u8>,
        expiry: Expiry,
        flags: Flags,
    },
    /// Remove it (nothing happens if it is absent).
    Delete,
}
