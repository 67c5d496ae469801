use std::borrow::Cow;
use std::ops::Bound;

use combkv::op::{
    Arith, Check, CmpOp, Cond, ExpireWhen, Number, OnMissing, Op, Outcome, ScanWhat, Status, Watch,
};
use combkv::{AtomicWrite, Error, Expiry, Flags, Item, Version};

use super::*;

#[test]
fn joined_ops_split_back_into_each_part_s_results() {
    let put = |k: &'static [u8]| Op::Put {
        key: k,
        value: b"v",
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond: Cond::Any,
        return_old: false,
    };
    let del = Op::Delete {
        key: b"z",
        cond: Cond::Present,
        return_old: false,
    };
    let parts: Vec<Vec<Op<'_>>> = vec![vec![put(b"a")], vec![put(b"b"), del], vec![]];
    let encoded: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| {
            let mut b = Vec::new();
            encode_ops(p, &mut b);
            b
        })
        .collect();
    let counts: Vec<usize> = encoded.iter().map(|b| op_count(b).unwrap()).collect();
    assert_eq!(counts, [1, 2, 0]);
    let joined = join_ops(encoded.iter().map(Vec::as_slice));
    let all: Vec<Op<'_>> = parts.concat();
    assert_eq!(decode_ops(&joined).unwrap(), all);
    // Built one op at a time, the same bytes.
    let mut list = OpList::default();
    for op in &all {
        list.push(op);
    }
    assert_eq!(list.len(), 3);
    assert_eq!(list.finish(), joined);
    assert_eq!(decode_ops(&OpList::default().finish()).unwrap(), []);
    // Results as apply writes them, one per op, distinct per op.
    let outcomes: Vec<Result<Outcome, Error>> = vec![
        Ok(Outcome::Put {
            status: Status::Done,
            version: Some(Version(1)),
            old: None,
        }),
        Ok(Outcome::Put {
            status: Status::Done,
            version: Some(Version(2)),
            old: None,
        }),
        Err(Error::Overflow),
    ];
    let mut results = Vec::new();
    for r in &outcomes {
        encode_result(r, &mut results);
    }
    let shares = split_results(&results, &counts).unwrap();
    let decoded: Vec<_> = shares.iter().map(|s| decode_results(s).unwrap()).collect();
    assert_eq!(decoded, [&outcomes[..1], &outcomes[1..], &[]]);
    // Too few results for the counts, or too many, is an error.
    assert!(split_results(&results, &[1, 3]).is_err());
    assert!(split_results(&results, &[1, 1]).is_err());
    assert!(op_count(&joined[..joined.len() - 1]).is_err());
}

#[test]
fn every_op_and_outcome_round_trips() {
    let writes = [
        AtomicWrite::Put {
            key: b"a",
            value: b"1",
            expiry: Expiry::AtMs(9),
        },
        AtomicWrite::Delete { key: b"b" },
    ];
    let mut ops = ops_of_one_key(&writes);
    ops.extend(checks_and_scans());
    let inner = ops.clone();
    ops.push(Op::Txn {
        watch: Cow::Owned(vec![
            Watch {
                key: b"w1",
                version: Some(Version(3)),
            },
            Watch {
                key: b"w2",
                version: None,
            },
        ]),
        ops: Cow::Owned(inner),
    });
    let mut buf = Vec::new();
    encode_ops(&ops, &mut buf);
    assert_eq!(decode_ops(&buf).unwrap(), ops);
    for cut in 0..buf.len() {
        assert!(
            decode_ops(&buf[..cut]).is_err(),
            "a prefix of {cut} decoded"
        );
    }
    let mut results = sample_results();
    let inner = results.clone();
    results.push(Ok(Outcome::Txn {
        results: Some(inner),
    }));
    let mut buf = Vec::new();
    for r in &results {
        encode_result(r, &mut buf);
    }
    assert_eq!(decode_results(&buf).unwrap(), results);
}

/// Ops of every kind up to Check (and the atomic ones, over `writes`).
fn ops_of_one_key<'a>(writes: &'a [AtomicWrite<'a>]) -> Vec<Op<'a>> {
    vec![
        Op::Put {
            key: b"k",
            value: b"v",
            expiry: Expiry::AtMs(77),
            flags: Flags::Set(5),
            cond: Cond::Version(Version(12)),
            return_old: true,
        },
        Op::Delete {
            key: b"k",
            cond: Cond::Present,
            return_old: false,
        },
        Op::Append {
            key: b"k",
            value: b"tail",
            front: true,
            on_missing: OnMissing::Create {
                value: b"x",
                expiry: Expiry::Keep,
                flags: 3,
            },
            cond: Cond::Absent,
        },
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(-3),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        },
        Op::Incr {
            key: b"n",
            arith: Arith::Unsigned {
                delta: u64::MAX,
                decrement: true,
            },
            on_missing: OnMissing::Fail,
            cond: Cond::Any,
            expiry: Expiry::Never,
        },
        Op::Expire {
            key: b"e",
            expiry: Expiry::AtMs(1),
            when: ExpireWhen {
                nx: false,
                xx: true,
                gt: false,
                lt: true,
            },
            past: true,
            return_item: false,
        },
        Op::Atomic(Cow::Borrowed(writes)),
        Op::Clear,
        Op::Reap {
            key: b"gone",
            version: Version(41),
        },
        Op::Read {
            keys: Cow::Owned(vec![&b"r1"[..], b"r2"]),
        },
        Op::Move {
            from: b"src",
            to: b"dst",
            replace: false,
            keep_source: true,
        },
        Op::Move {
            from: b"src",
            to: b"dst",
            replace: true,
            keep_source: false,
        },
    ]
}

/// Checks of every kind and scans.
fn checks_and_scans<'a>() -> Vec<Op<'a>> {
    vec![
        Op::Check(Check::Version {
            key: b"k",
            op: CmpOp::Ge,
            version: 9,
        }),
        Op::SetRange {
            key: b"r",
            offset: 1 << 40,
            value: b"patch",
        },
        Op::SetBit {
            key: b"b",
            bit: 77,
            on: true,
        },
        Op::IncrFloat {
            key: b"f",
            by: b"-1.5e3",
        },
        Op::Scan {
            range: Cow::Owned(
                combkv::Range::new(Bound::Excluded(b"a".to_vec()), Bound::Unbounded)
                    .with_limit(0)
                    .reversed(),
            ),
            what: ScanWhat::Keys,
            max_bytes: 1 << 20,
        },
        Op::Scan {
            range: Cow::Owned(combkv::Range::all().with_floor_start()),
            what: ScanWhat::Count,
            max_bytes: 0,
        },
        Op::Check(Check::Value {
            key: b"k",
            op: CmpOp::Ne,
            value: b"x",
        }),
        Op::Check(Check::Count {
            start: Bound::Included(b"a"),
            end: Bound::Unbounded,
            op: CmpOp::Eq,
            n: 3,
        }),
        Op::Check(Check::MaxVersion {
            start: Bound::Unbounded,
            end: Bound::Excluded(b"z"),
            op: CmpOp::Le,
            version: 77,
        }),
    ]
}

/// Outcomes of every kind, and errors.
fn sample_results() -> Vec<Result<Outcome, Error>> {
    let item = Item {
        key: b"k".to_vec().into(),
        value: b"v".to_vec().into(),
        version: Version(4),
        expires_at_ms: Some(8),
        flags: 3,
    };
    let read = item.clone();
    vec![
        Ok(Outcome::Put {
            status: Status::Mismatch,
            version: None,
            old: Some(item.clone()),
        }),
        Ok(Outcome::Incr {
            status: Status::Done,
            version: Some(Version(9)),
            number: Number::Signed(-7),
            created: true,
            expires_at_ms: None,
        }),
        Ok(Outcome::Atomic {
            versions: vec![Some(Version(1)), None],
        }),
        Ok(Outcome::Expire {
            status: Status::Done,
            version: Some(Version(2)),
            item: Some(item),
        }),
        Err(Error::ValueTooLarge { len: 5, max: 4 }),
        Err(Error::Overflow),
        Ok(Outcome::Read {
            items: vec![None, Some(read.clone())],
        }),
        Ok(Outcome::Txn { results: None }),
        Err(Error::NotInTransaction("FLUSHALL".into())),
        Ok(Outcome::Move {
            status: Status::Present,
        }),
        Ok(Outcome::Check),
        Ok(Outcome::SetBit {
            old: true,
            version: Some(Version(5)),
        }),
        Ok(Outcome::IncrFloat {
            value: b"10.6".to_vec(),
            version: Some(Version(6)),
        }),
        Err(Error::NotAFloat),
        Err(Error::NotFinite),
        Err(Error::WrongRange("a key outside range 0".into())),
        Err(Error::InvalidConfig("range 0 changed since".into())),
        Err(Error::CrossRange),
        Err(Error::NoMemory),
        Ok(Outcome::Scan {
            items: vec![read.clone()],
            count: 3,
        }),
    ]
}

/// A read floor reads back as the timestamp it was written with, stands
/// alone, is told from every other entry, and a cut one is refused.
#[test]
fn a_read_floor_round_trips_and_stands_alone() {
    let at = (1_790_000_000_000u64 << 16) | 0xFFFF;
    let bytes = encode_floor(at, 60_000);
    assert_eq!(decode_floor(&bytes), Some(Ok((at, 60_000))));
    assert_eq!(decode_floor(&encode_floor(at, 0)), Some(Ok((at, 0))));
    assert!(stands_alone(&bytes));
    assert_eq!(list_count(&bytes), Ok(1));
    assert!(decode_split(&bytes).is_none());
    assert!(decode_map_change(&bytes).is_none());
    assert!(decode_setting(&bytes).is_none());
    assert!(decode_floor(&encode_setting("a", b"b")).is_none());
    assert!(decode_floor(&[0u8; 8]).is_none());
    assert!(matches!(decode_floor(&bytes[..12]), Some(Err(_))));
    assert!(matches!(decode_floor(&bytes[..17]), Some(Err(_))));
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(decode_floor(&longer), Some(Err(_))));
}

/// A snapshot's release reads back as the timestamp it was written with,
/// stands alone, is told from a read floor and every other entry, and a
/// cut or longer one is refused.
#[test]
fn a_snapshot_release_round_trips_and_stands_alone() {
    let at = (1_790_000_000_000u64 << 16) | 0xFFFF;
    let bytes = encode_unpin(at, 60_000);
    assert_eq!(decode_unpin(&bytes), Some(Ok((at, 60_000))));
    assert!(stands_alone(&bytes));
    assert_eq!(list_count(&bytes), Ok(1));
    assert!(decode_floor(&bytes).is_none());
    assert!(decode_unpin(&encode_floor(at, 60_000)).is_none());
    assert!(decode_split(&bytes).is_none());
    assert!(decode_map_change(&bytes).is_none());
    assert!(decode_setting(&bytes).is_none());
    assert!(decode_ops(&bytes).is_err());
    assert!(matches!(decode_unpin(&bytes[..12]), Some(Err(_))));
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(decode_unpin(&longer), Some(Err(_))));
}

/// The two steps of a merge read back as written, stand alone (one
/// result each), and are told from every other entry.
#[test]
fn merge_steps_round_trip_and_stand_alone() {
    use crate::ranges::{AbsorbRange, Bounds, MergedItem, RetireRange};
    let retire = RetireRange {
        start: b"k".to_vec(),
        end: None,
    };
    let bytes = encode_retire(&retire);
    assert_eq!(decode_retire(&bytes), Some(Ok(retire)));
    assert!(stands_alone(&bytes));
    assert_eq!(list_count(&bytes), Ok(1));
    assert!(decode_absorb(&bytes).is_none());
    assert!(decode_split(&bytes).is_none());
    assert!(decode_floor(&bytes).is_none());
    let absorb = AbsorbRange {
        expect: Bounds::whole(0),
        right: 3,
        end: Some(b"z".to_vec()),
        version: 9,
        clock: 1 << 40,
        items: vec![MergedItem {
            key: b"m".to_vec(),
            value: vec![0; 300],
            version: 77,
            expires_at_ms: Some(5),
            flags: 2,
        }],
    };
    let bytes = encode_absorb(&absorb);
    assert_eq!(decode_absorb(&bytes), Some(Ok(absorb)));
    assert!(stands_alone(&bytes));
    assert_eq!(list_count(&bytes), Ok(1));
    assert!(decode_retire(&bytes).is_none());
    assert!(decode_map_change(&bytes).is_none());
    assert!(matches!(decode_absorb(&bytes[..20]), Some(Err(_))));
    assert!(decode_retire(&encode_setting("a", b"b")).is_none());
}

/// A conditional setting reads back as written (with and without a value
/// to expect), stands alone, asks for one result, is told from a plain
/// setting and the other entries, and a cut one is refused.
#[test]
fn a_conditional_setting_round_trips_and_stands_alone() {
    for expect in [None, Some(b"user default on nopass\n".to_vec())] {
        let change = SettingIf {
            name: "acl".into(),
            expect,
            value: b"user alice on >p\n".to_vec(),
        };
        let bytes = encode_setting_if(&change);
        assert_eq!(decode_setting_if(&bytes), Some(Ok(change)));
        assert!(stands_alone(&bytes));
        assert_eq!(list_count(&bytes), Ok(1));
        assert!(decode_setting(&bytes).is_none());
        assert!(decode_map_change(&bytes).is_none());
        assert!(decode_floor(&bytes).is_none());
        assert!(decode_ops(&bytes).is_err());
        assert!(decode_setting_if(&encode_setting("acl", b"x")).is_none());
        assert!(matches!(decode_setting_if(&bytes[..12]), Some(Err(_))));
    }
}
