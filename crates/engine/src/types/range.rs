//! Range reads.

use std::ops::Bound;

/// A range read: bounds (low first, also when reversed), an optional limit,
/// direction, and Honeycomb's floor start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The low bound (also when `reverse`): where an ascending read starts.
    pub start: Bound<Vec<u8>>,
    /// The high bound: where an ascending read stops.
    pub end: Bound<Vec<u8>>,
    /// At most this many items, so a client can page through a large range.
    pub limit: Option<usize>,
    /// Descending key order; `limit` then takes the highest keys.
    pub reverse: bool,
    /// With an inclusive start: begin at the greatest key `<= start` if one
    /// exists (Honeycomb's SCAN), so a range over file offsets finds the chunk
    /// covering its first byte.
    pub floor_start: bool,
}

impl Range {
    /// Every key.
    pub fn all() -> Range {
        Range::new(Bound::Unbounded, Bound::Unbounded)
    }
    /// Keys between `start` and `end` (low first), ascending, with no limit:
    /// the plain range that the builder methods below refine.
    pub fn new(start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Range {
        Range {
            start,
            end,
            limit: None,
            reverse: false,
            floor_start: false,
        }
    }
    /// The same range, reading at most `n` items.
    pub fn with_limit(mut self, n: usize) -> Range {
        self.limit = Some(n);
        self
    }
    /// The same range in descending key order (ZREVRANGE-like reads); the
    /// bounds stay low first.
    pub fn reversed(mut self) -> Range {
        self.reverse = true;
        self
    }
    /// The same range, beginning at the greatest key `<= start` (see
    /// `floor_start`).
    pub fn with_floor_start(mut self) -> Range {
        self.floor_start = true;
        self
    }

    /// The bounds as borrowed slices.
    #[inline]
    pub(crate) fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (
            self.start.as_ref().map(|k| &k[..]),
            self.end.as_ref().map(|k| &k[..]),
        )
    }
}
