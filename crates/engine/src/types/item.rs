//! Items and the versions they carry.

use bytes::Bytes;

/// The version of a write: a positive integer, increasing in the order writes
/// take effect. An item's version is the version of the write that produced
/// it; it stays the same until the key is written again, so it serves as a
/// compare-and-swap token (memcached's CAS unique).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(
    /// The number the store's clock handed out.
    pub u64,
);

impl Version {
    /// The version as a number, for a protocol that sends it (a CAS token, a
    /// log position).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A client snapshot's handle: a unique id, never reused by a store. Two
/// snapshots of the same version have different ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId(
    /// The number, as a client sends it back.
    pub u64,
);

/// A live snapshot, as [`crate::Store::list_snapshots`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The handle a client names it by.
    pub id: SnapshotId,
    /// The read version it pins.
    pub version: Version,
    /// Time until it expires.
    pub left: std::time::Duration,
}

/// Expiry of a written item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiry {
    /// No expiry (clears an existing one).
    #[default]
    Never,
    /// Expires at this unix time in milliseconds (> 0). A time in the past
    /// makes the item invisible at once.
    AtMs(u64),
    /// Keep the expiry the item has now (none if absent).
    Keep,
}

impl Expiry {
    /// The expiry to store (unix ms, 0 = never), given the live item's
    /// (`None`: the key is absent).
    #[inline]
    pub(crate) fn resolve(self, current: Option<u64>) -> u64 {
        match self {
            Expiry::Never => 0,
            Expiry::AtMs(t) => t.max(1),
            Expiry::Keep => current.unwrap_or(0),
        }
    }
}

/// Client flags of a written item: memcached's opaque 32-bit per-item
/// flags. Writes that do not name them (`Store::put`, RESP SET) store 0,
/// as Redis has no such thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flags {
    /// Store these flags (0: none; costs no space).
    Set(u32),
    /// Keep the flags the item has now (0 if absent).
    #[default]
    Keep,
}

impl Flags {
    /// No flags.
    pub const NONE: Flags = Flags::Set(0);

    /// The flags to store, given the live item's (`None`: the key is absent).
    #[inline]
    pub(crate) fn resolve(self, current: Option<u32>) -> u32 {
        match self {
            Flags::Set(f) => f,
            Flags::Keep => current.unwrap_or(0),
        }
    }
}

/// One stored item as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The key.
    pub key: Bytes,
    /// The value (inline or external, copied out of the tree).
    pub value: Bytes,
    /// The version of the write that stored it: its CAS token.
    pub version: Version,
    /// Unix time in milliseconds at which the item expires.
    pub expires_at_ms: Option<u64>,
    /// Client flags (memcached); 0 = none.
    pub flags: u32,
}

impl Item {
    /// The item as a visitor sees it.
    pub fn view(&self) -> ItemView<'_> {
        ItemView {
            key: &self.key,
            value: &self.value,
            version: self.version,
            expires_at_ms: self.expires_at_ms,
            flags: self.flags,
        }
    }
}

/// A borrowed view of an item, handed to the visitors of
/// `Store::get_with` and `Store::scan`. Valid only inside the visitor.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// The version of the write that stored it: its CAS token.
    pub version: Version,
    /// Unix time in milliseconds at which the item expires.
    pub expires_at_ms: Option<u64>,
    /// Client flags (memcached); 0 = none.
    pub flags: u32,
}

impl ItemView<'_> {
    /// The item, copied out of the store (to keep past the visitor).
    pub fn to_item(&self) -> Item {
        Item {
            key: self.key.to_vec().into(),
            value: self.value.to_vec().into(),
            version: self.version,
            expires_at_ms: self.expires_at_ms,
            flags: self.flags,
        }
    }
}

/// What a store holds in memory (`Store::memory`): what `maxmemory` is
/// judged by. Counted as buffers are allocated and freed, so it falls as
/// soon as deleted data is reclaimed, unlike the process's resident size:
/// freed node buffers stay mapped for reuse, and the allocator keeps what
/// values freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// Node buffers allocated and not freed (current ones, older versions
    /// that readers or snapshots may still need, and replaced ones whose
    /// grace period has not passed yet).
    pub node_buffers: usize,
    /// Their bytes (each buffer its size class's size, at most the node
    /// size): keys, inline values and the tree's own structure.
    pub node_bytes: u64,
    /// Bytes of the values stored out of line (longer than the inline
    /// limit) that those buffers reference, each with its 16-byte header;
    /// a value referenced by a buffer and by the buffer that replaced it
    /// counts twice until the old one is freed.
    pub value_bytes: u64,
}

impl MemoryUsage {
    /// Everything: node and value bytes.
    pub fn total(&self) -> u64 {
        self.node_bytes + self.value_bytes
    }
}

/// Node buffer counts, for reclamation tests and INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCounts {
    /// Buffers allocated and not freed.
    pub live_buffers: usize,
    /// Buffers reachable from the page table (current ones and old-version chains).
    pub reachable_buffers: usize,
}
