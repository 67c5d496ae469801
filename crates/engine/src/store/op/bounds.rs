//! Whether an op stays inside a key range. Where the keyspace is cut into
//! ranges, each served by a store of its own, a store refuses an op that
//! would read or write a key outside its range: it does not hold that
//! key's current value, and must never answer for it.

use std::ops::Bound;

use super::{Check, Op};
use crate::types::AtomicWrite;

/// `[lo, hi)`, `hi` none: to the end of the keyspace.
#[derive(Clone, Copy)]
struct Span<'s> {
    lo: &'s [u8],
    hi: Option<&'s [u8]>,
}

impl Span<'_> {
    fn key(&self, k: &[u8]) -> bool {
        k >= self.lo && self.hi.is_none_or(|hi| k < hi)
    }

    /// Whether every key between `start` and `end` lies inside.
    fn bounds(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
        let low = match start {
            Bound::Included(s) | Bound::Excluded(s) => s >= self.lo,
            Bound::Unbounded => self.lo.is_empty(),
        };
        let high = match (end, self.hi) {
            (_, None) => true,
            (Bound::Included(e), Some(hi)) => e < hi,
            (Bound::Excluded(e), Some(hi)) => e <= hi,
            (Bound::Unbounded, Some(_)) => false,
        };
        low && high
    }
}

impl Op<'_> {
    /// Whether every key this op reads or writes lies in `[lo, hi)` (`hi`
    /// none: to the end of the keyspace). A scan's or a check's whole
    /// range must lie inside; a scan from the floor of its start reaches
    /// below that key, so it lies inside only where `lo` is the start of
    /// the keyspace. `Clear` clears the store, which holds its range alone.
    pub fn keys_within(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        self.within(Span { lo, hi })
    }

    fn within(&self, s: Span<'_>) -> bool {
        match self {
            Op::Put { key, .. }
            | Op::Delete { key, .. }
            | Op::Append { key, .. }
            | Op::Incr { key, .. }
            | Op::Expire { key, .. }
            | Op::Reap { key, .. }
            | Op::SetRange { key, .. }
            | Op::SetBit { key, .. }
            | Op::IncrFloat { key, .. } => s.key(key),
            Op::Atomic(writes) => writes.iter().all(|w| match w {
                AtomicWrite::Put { key, .. } | AtomicWrite::Delete { key } => s.key(key),
            }),
            Op::Clear => true,
            Op::Move { from, to, .. } => s.key(from) && s.key(to),
            Op::Check(c) => match c {
                Check::Version { key, .. } | Check::Value { key, .. } => s.key(key),
                Check::Count { start, end, .. } | Check::MaxVersion { start, end, .. } => {
                    s.bounds(*start, *end)
                }
            },
            Op::Read { keys } => keys.iter().all(|k| s.key(k)),
            Op::Scan { range, .. } => {
                let start = range.start.as_ref().map(|k| k.as_slice());
                let end = range.end.as_ref().map(|k| k.as_slice());
                (!range.floor_start || s.lo.is_empty()) && s.bounds(start, end)
            }
            Op::Txn { watch, ops } => {
                watch.iter().all(|w| s.key(w.key)) && ops.iter().all(|op| op.within(s))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::Range;
    use crate::store::op::{Cond, ScanWhat, Watch};
    use crate::types::{Expiry, Flags};

    fn put(key: &[u8]) -> Op<'_> {
        Op::Put {
            key,
            value: b"v",
            expiry: Expiry::Never,
            flags: Flags::Set(0),
            cond: Cond::Any,
            return_old: false,
        }
    }

    fn scan(start: Bound<&[u8]>, end: Bound<&[u8]>, floor: bool) -> Op<'static> {
        let mut range = Range::new(start.map(|k| k.to_vec()), end.map(|k| k.to_vec()));
        range.floor_start = floor;
        Op::Scan {
            range: Cow::Owned(range),
            what: ScanWhat::Keys,
            max_bytes: 0,
        }
    }

    #[test]
    fn a_key_is_inside_from_its_start_up_to_but_not_at_its_end() {
        let (lo, hi) = (&b"c"[..], Some(&b"m"[..]));
        for (k, inside) in [
            (&b"b"[..], false),
            (b"c", true),
            (b"l\xff", true),
            (b"m", false),
        ] {
            assert_eq!(put(k).keys_within(lo, hi), inside, "{k:?}");
        }
        assert!(put(b"zzz").keys_within(b"c", None));
        assert!(put(b"").keys_within(b"", Some(b"a")));
        let moved = Op::Move {
            from: b"d",
            to: b"x",
            replace: false,
            keep_source: false,
        };
        assert!(!moved.keys_within(lo, hi));
        assert!(moved.keys_within(b"a", None));
        assert!(Op::Clear.keys_within(lo, hi));
        let read = Op::Read {
            keys: Cow::Owned(vec![&b"d"[..], b"m"]),
        };
        assert!(!read.keys_within(lo, hi));
        let atomic = Op::Atomic(Cow::Owned(vec![
            AtomicWrite::Delete { key: b"d" },
            AtomicWrite::Delete { key: b"l" },
        ]));
        assert!(atomic.keys_within(lo, hi));
    }

    #[test]
    fn a_scan_is_inside_when_its_whole_range_is() {
        let (lo, hi) = (&b"c"[..], Some(&b"m"[..]));
        let inc = |k: &'static [u8]| Bound::Included(k);
        let exc = |k: &'static [u8]| Bound::Excluded(k);
        assert!(scan(inc(b"c"), exc(b"m"), false).keys_within(lo, hi));
        assert!(scan(exc(b"c"), inc(b"l"), false).keys_within(lo, hi));
        assert!(!scan(inc(b"c"), inc(b"m"), false).keys_within(lo, hi));
        assert!(!scan(inc(b"b"), exc(b"d"), false).keys_within(lo, hi));
        assert!(!scan(Bound::Unbounded, exc(b"d"), false).keys_within(lo, hi));
        assert!(!scan(inc(b"d"), Bound::Unbounded, false).keys_within(lo, hi));
        assert!(scan(inc(b"d"), Bound::Unbounded, false).keys_within(lo, None));
        // A floor start reaches below its key: inside only from the start
        // of the keyspace.
        assert!(!scan(inc(b"d"), exc(b"e"), true).keys_within(lo, hi));
        assert!(scan(inc(b"d"), exc(b"e"), true).keys_within(b"", hi));
        let count = Op::Check(Check::Count {
            start: inc(b"c"),
            end: exc(b"n"),
            op: crate::store::op::CmpOp::Eq,
            n: 0,
        });
        assert!(!count.keys_within(lo, hi));
        assert!(count.keys_within(lo, Some(b"n")));
    }

    #[test]
    fn a_transaction_is_inside_when_its_watches_and_ops_are() {
        let txn = |watch: &'static [u8], key: &'static [u8]| Op::Txn {
            watch: Cow::Owned(vec![Watch {
                key: watch,
                version: None,
            }]),
            ops: Cow::Owned(vec![put(b"d"), put(key)]),
        };
        assert!(txn(b"e", b"f").keys_within(b"c", Some(b"m")));
        assert!(!txn(b"x", b"f").keys_within(b"c", Some(b"m")));
        assert!(!txn(b"e", b"x").keys_within(b"c", Some(b"m")));
    }
}
