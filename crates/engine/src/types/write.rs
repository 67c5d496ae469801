//! What a write asks for.

use super::item::{Expiry, Flags};

/// One write of [`Store::write_atomically`](crate::Store::write_atomically).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicWrite<'a> {
    /// Store `value` under `key` (insert or overwrite).
    Put {
        /// The key to write.
        key: &'a [u8],
        /// Its new value.
        value: &'a [u8],
        /// When the new item expires.
        expiry: Expiry,
    },
    /// Remove `key` if present.
    Delete {
        /// The key to remove.
        key: &'a [u8],
    },
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
        /// The new value.
        value: Vec<u8>,
        /// Its expiry.
        expiry: Expiry,
        /// Its client flags.
        flags: Flags,
    },
    /// Remove it (nothing happens if it is absent).
    Delete,
}
