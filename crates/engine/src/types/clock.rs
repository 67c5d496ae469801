//! The clock TTLs are checked against.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the unix epoch: the clock TTLs are checked against.
/// A request reads it at most once, and only when it looks at an item that
/// has an expiry.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The clock of one request: read at most once, and only when an item with
/// an expiry is examined (most requests never pay for a clock read).
#[derive(Debug, Default)]
pub(crate) struct Now(std::cell::Cell<u64>);

impl Now {
    /// A clock that reads the system clock on first use.
    pub(crate) fn lazy() -> Now {
        Now(std::cell::Cell::new(0))
    }
    /// A clock fixed at `ms` (unix milliseconds, > 0).
    pub(crate) fn at(ms: u64) -> Now {
        Now(std::cell::Cell::new(ms.max(1)))
    }
    /// Unix milliseconds, read once.
    pub(crate) fn ms(&self) -> u64 {
        let v = self.0.get();
        if v != 0 {
            return v;
        }
        let v = now_ms().max(1);
        self.0.set(v);
        v
    }
}
