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

    /// A key this op reads or writes, the low end of its range for a scan
    /// or a check of a range (the empty key when it has none): where a
    /// router looks the op up. The op belongs to the range holding this
    /// key if it lies wholly inside it (`keys_within`), and to no single
    /// range otherwise. None for an op that names no key: `Clear`, or a
    /// read, an atomic write or a transaction of nothing.
    pub fn some_key(&self) -> Option<&[u8]> {
        match self {
            Op::Put { key, .. }
            | Op::Delete { key, .. }
            | Op::Append { key, .. }
            | Op::Incr { key, .. }
            | Op::Expire { key, .. }
            | Op::Reap { key, .. }
            | Op::SetRange { key, .. }
            | Op::SetBit { key, .. }
            | Op::IncrFloat { key, .. } => Some(key),
            Op::Atomic(writes) => writes.first().map(|w| match w {
                AtomicWrite::Put { key, .. } | AtomicWrite::Delete { key } => &key[..],
            }),
            Op::Clear => None,
            Op::Move { from, .. } => Some(from),
            Op::Check(c) => Some(match c {
                Check::Version { key, .. } | Check::Value { key, .. } => key,
                Check::Count { start, .. } | Check::MaxVersion { start, .. } => low_end(*start),
            }),
            Op::Read { keys } => keys.first().map(|k| &k[..]),
            Op::Scan { range, .. } => Some(low_end(range.start.as_ref().map(|k| k.as_slice()))),
            Op::Txn { watch, ops } => watch
                .first()
                .map(|w| w.key)
                .or_else(|| ops.iter().find_map(|op| op.some_key())),
        }
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

/// A bound's key, the empty key (the keyspace's start) for none.
fn low_end(b: Bound<&[u8]>) -> &[u8] {
    match b {
        Bound::Included(k) | Bound::Excluded(k) => k,
        Bound::Unbounded => &[],
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

    /// A router looks an op up by `some_key`: wherever the op lies wholly
    /// inside a range, that key must lie in it too, or the op would be
    /// sent to a range that refuses it.
    #[test]
    fn some_key_lies_in_every_range_that_holds_the_op() {
        let inc = |k: &'static [u8]| Bound::Included(k);
        let exc = |k: &'static [u8]| Bound::Excluded(k);
        let ops = [
            put(b"d"),
            put(b""),
            Op::Move {
                from: b"d",
                to: b"e",
                replace: false,
                keep_source: false,
            },
            Op::Read {
                keys: Cow::Owned(vec![&b"k"[..], b"d"]),
            },
            Op::Atomic(Cow::Owned(vec![
                AtomicWrite::Delete { key: b"l" },
                AtomicWrite::Delete { key: b"d" },
            ])),
            scan(inc(b"d"), exc(b"m"), false),
            scan(exc(b"c"), Bound::Unbounded, false),
            scan(Bound::Unbounded, exc(b"c"), false),
            Op::Check(Check::Count {
                start: exc(b"c"),
                end: exc(b"f"),
                op: crate::store::op::CmpOp::Eq,
                n: 0,
            }),
            Op::Txn {
                watch: Cow::Owned(vec![]),
                ops: Cow::Owned(vec![put(b"e")]),
            },
        ];
        let spans: [(&[u8], Option<&[u8]>); 6] = [
            (b"", None),
            (b"", Some(b"c")),
            (b"c", Some(b"m")),
            (b"d", Some(b"e")),
            (b"e", None),
            (b"m", None),
        ];
        for op in &ops {
            let key = op.some_key().expect("each names a key");
            for (lo, hi) in spans {
                if op.keys_within(lo, hi) {
                    assert!(
                        Span { lo, hi }.key(key),
                        "{op:?} lies in [{lo:?}, {hi:?}) but its key {key:?} does not"
                    );
                }
            }
        }
        assert_eq!(Op::Clear.some_key(), None);
        assert_eq!(
            Op::Read {
                keys: Cow::Owned(vec![])
            }
            .some_key(),
            None
        );
    }
}
