//! The keyspace in ranges: the map of which range (Raft group) holds which
//! keys (`map`), and the hybrid logical clock whose timestamps let a read
//! that crosses ranges read them all at one point in time (`clock`).
//!
//! Both are plain data and logic, decided alike on every replica; the
//! groups that serve the ranges and the meta group that replicates the map
//! are built on them.

pub mod balance;
pub mod clock;
pub mod map;
pub mod merge;

#[cfg(test)]
mod tests;

pub use balance::next_byte_move;
pub use clock::{
    CLOCK_OFFSET_SETTING, Clock, ClockOffset, LOGICAL_BITS, MAX_CLOCK_OFFSET_MS, Timestamp,
    read_timestamp,
};
pub use map::{
    Bounds, Epoch, MapChange, MapError, Misrouted, RangeDesc, RangeId, RangeMap, SplitRange,
    line_up, next_placement, next_replacement,
};
pub use merge::{AbsorbRange, MergedItem, RetireRange};
