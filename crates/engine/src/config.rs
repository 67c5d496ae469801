//! Store configuration and the limits derived from the node size.

use std::time::Duration;

/// How a store is built. `Config::default()` is the production shape
/// (8 KiB nodes); tests use small nodes so splits and merges happen constantly.
#[derive(Debug, Clone)]
pub struct Config {
    /// Node buffer size: a power of two in `1024..=65536`.
    pub node_size_bytes: usize,
    /// Largest value accepted (default 64 MiB).
    pub max_value_len: usize,
    /// Most snapshots alive at once (default 1024).
    pub max_snapshots: usize,
    /// Longest lifetime a snapshot may ask for (default one hour).
    pub max_snapshot_age: Duration,
    /// Learned search of interior nodes (default off): a node whose
    /// separators all have one length gets a piecewise-linear model from
    /// key to position with an error bound, searched in place of its
    /// shortcuts' top and group lines when the model's window is no
    /// larger than a shortcut segment (docs/design.md, "Learned node
    /// search").
    pub learned_search: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_size_bytes: 8192,
            max_value_len: 64 << 20,
            max_snapshots: 1024,
            max_snapshot_age: Duration::from_secs(3600),
            learned_search: false,
        }
    }
}

impl Config {
    /// The default configuration with another node size.
    pub fn with_node_size(node_size_bytes: usize) -> Self {
        Config {
            node_size_bytes,
            ..Config::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<Geometry, ConfigError> {
        let n = self.node_size_bytes;
        if !n.is_power_of_two() || !(1024..=65536).contains(&n) {
            return Err(ConfigError::NodeSize(n));
        }
        if self.max_value_len > u32::MAX as usize {
            return Err(ConfigError::ValueLimit(self.max_value_len));
        }
        if self.max_snapshots == 0 {
            return Err(ConfigError::NoSnapshots);
        }
        Ok(Geometry {
            learned: self.learned_search,
            ..Geometry::new(n)
        })
    }
}

/// Why a [`Config`] is not usable (`Error::InvalidConfig` carries its text).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ConfigError {
    /// The node size is not a power of two in `1024..=65536`.
    NodeSize(usize),
    /// The value limit does not fit in 32 bits.
    ValueLimit(usize),
    /// `max_snapshots` is 0.
    NoSnapshots,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::NodeSize(n) => write!(
                f,
                "node size must be a power of two between 1024 and 65536 bytes, not {n}"
            ),
            ConfigError::ValueLimit(_) => f.write_str("max value length must fit in 32 bits"),
            ConfigError::NoSnapshots => f.write_str("max snapshots must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Byte budgets of a node, all derived from its size. See docs/design.md.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub node_size: usize,
    /// Bytes reserved for the shortcut block: whole cache lines (see
    /// `tree::node`, "Shortcut block").
    pub shortcut_bytes: usize,
    /// Log block threshold: a leaf whose log would pass it is merged.
    pub log_bytes: usize,
    /// Most sorted-block bytes a leaf holds after a merge (the log always has
    /// `log_bytes` of room behind it).
    pub leaf_capacity: usize,
    /// Most sorted-block bytes an interior node holds.
    pub interior_capacity: usize,
    /// Largest encoded item. A quarter of the leaf capacity, so any overfull
    /// set of items splits into parts that each fit.
    pub max_item: usize,
    pub max_key_len: usize,
    /// Values up to this length are stored inline; longer ones out of line.
    pub inline_value_max: usize,
    /// Target sorted-block bytes per shortcut segment.
    pub segment_bytes: usize,
    /// Interior nodes get learned models where they pay
    /// (`Config::learned_search`).
    pub learned: bool,
}

/// Bytes of the node header.
pub(crate) const HEADER_BYTES: usize = 64;
/// A cache line: the unit the node layout is planned in.
pub(crate) const LINE_BYTES: usize = 64;
/// Shortcuts per group line: six 8-byte key prefixes and six 2-byte offsets.
pub(crate) const SHORTCUTS_PER_LINE: usize = 6;
/// Most group lines: the top line holds one 8-byte prefix per group.
pub(crate) const MAX_SHORTCUT_GROUPS: usize = 8;
/// Bytes of a leaf's log directory (the cache line after the header).
pub(crate) const LOG_DIR_BYTES: usize = LINE_BYTES;
/// Bytes per log directory entry: offset, back pointer, fingerprint, hint
/// and flags.
pub(crate) const LOG_DIR_ENTRY_BYTES: usize = 6;
/// Most items a leaf's log holds (the directory is full): a leaf is merged
/// when its log would pass this count or `Geometry::log_bytes`.
pub(crate) const LOG_DIR_MAX: usize = LOG_DIR_BYTES / LOG_DIR_ENTRY_BYTES;
/// Fixed bytes of a leaf item header: flags, key length, value length, version.
pub(crate) const ITEM_HEADER_BYTES: usize = 15;
/// Extra bytes a log item carries: back pointer and order hint.
pub(crate) const LOG_EXTRA_BYTES: usize = 5;
/// Extra bytes of an item with an expiry time.
pub(crate) const TTL_BYTES: usize = 8;
/// Extra bytes of an item with non-zero client flags (memcached's 32-bit flags).
pub(crate) const CFLAGS_BYTES: usize = 4;

impl Geometry {
    pub(crate) fn new(node_size: usize) -> Geometry {
        // One group line for small nodes; else a top line and up to
        // MAX_SHORTCUT_GROUPS group lines, about a sixteenth of the node.
        let lines = (node_size / 16 / LINE_BYTES).clamp(1, MAX_SHORTCUT_GROUPS + 1);
        let shortcut_bytes = lines * LINE_BYTES;
        let log_bytes = (node_size / 16).max(96);
        let leaf_capacity = node_size - HEADER_BYTES - LOG_DIR_BYTES - shortcut_bytes - log_bytes;
        let interior_capacity = node_size - HEADER_BYTES - shortcut_bytes;
        let max_item = leaf_capacity / 4;
        let fixed = ITEM_HEADER_BYTES + LOG_EXTRA_BYTES + TTL_BYTES + CFLAGS_BYTES;
        // Honeycomb's limits (460-byte keys, 469-byte inline values) for 8 KiB
        // and larger nodes; proportionally smaller for test-sized nodes.
        let max_key_len = 460.min((max_item - fixed) * 2 / 5);
        let inline_value_max = 469.min(max_item - fixed - max_key_len);
        // Smaller segments than Honeycomb's 256 B: on a CPU a shortcut probe is
        // cheaper than scanning items (see docs/experiments.md, "Branch-free
        // shortcut search").
        let segment_bytes = (node_size / 64).max(64);
        Geometry {
            node_size,
            shortcut_bytes,
            log_bytes,
            leaf_capacity,
            interior_capacity,
            max_item,
            max_key_len,
            inline_value_max,
            segment_bytes,
            learned: false,
        }
    }

    /// Most shortcut entries the shortcut block holds.
    pub(crate) fn max_shortcuts(&self) -> usize {
        let lines = self.shortcut_bytes / LINE_BYTES;
        // With more than one group line, the first line is the top line.
        let groups = if lines == 1 { 1 } else { lines - 1 };
        groups * SHORTCUTS_PER_LINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_of_default_and_small_nodes() {
        let g = Geometry::new(8192);
        assert_eq!(g.max_key_len, 460);
        assert_eq!(g.inline_value_max, 469);
        let fixed = ITEM_HEADER_BYTES + LOG_EXTRA_BYTES + TTL_BYTES + CFLAGS_BYTES;
        assert_eq!(g.max_shortcuts(), 42);
        for n in [1024, 2048, 4096, 8192, 65536] {
            let g = Geometry::new(n);
            assert!(
                fixed + g.max_key_len + g.inline_value_max <= g.max_item,
                "{n}"
            );
            assert!(fixed + g.max_key_len + 8 <= g.max_item, "{n}");
            assert!(10 + g.max_key_len <= g.interior_capacity / 4, "{n}");
            assert!(g.max_key_len >= 16, "{n}");
            assert!(g.max_shortcuts() >= SHORTCUTS_PER_LINE, "{n}");
            assert!(
                g.max_shortcuts() <= SHORTCUTS_PER_LINE * MAX_SHORTCUT_GROUPS,
                "{n}"
            );
        }
    }
}
