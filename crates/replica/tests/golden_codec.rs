//! Golden bytes of what a cluster writes to its Raft log and sends between
//! nodes, as combkv 0.1 writes them: every op and outcome kind of
//! `codec` (and the errors it carries), `join_ops`/`split_results`, the
//! postcard encoding of `Batch` and `Applied`, the entries openraft keeps
//! (postcard) and the log's record framing (`[length u32 LE][CRC-32 u32
//! LE][entry]`), the vote and commit files, and the log of a v0.1 cluster
//! (`crates/cli/tests/fixtures/v0.1-cluster`) opened with today's
//! `LogStore`.
//!
//! THESE BYTES ARE THE LOG'S FORMAT. Logs on disk hold them, and nodes of
//! different versions exchange them: they must never change without a
//! migration (a new tag for a new meaning, a reader for the old bytes).
//! A test here that fails means the format changed, not that the expected
//! bytes need updating. The hex was produced once by the code of b5c9103
//! (the last commit before the issue 36 redesign) and frozen here.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use combkv::op::{
    Arith, Check, CmpOp, Cond, ExpireWhen, Number, OnMissing, Op, Outcome, ScanWhat, Status, Watch,
};
use combkv::{AtomicWrite, Error, Expiry, Flags, Item, Range, Version};
use combkv_replica::codec::{self, OpList};
use combkv_replica::{Applied, Batch, LogOptions, LogStore, TypeConfig};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership, RaftLogReader};

type Entry = openraft::Entry<TypeConfig>;

/// Bytes from hex digits; whitespace (a `\` line continuation leaves none,
/// but a space may part fields) is skipped.
fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd hex {s:?}");
    digits
        .chunks(2)
        .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).expect("hex digits"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `got` is exactly the frozen bytes `want`.
#[track_caller]
fn assert_bytes(what: &str, got: &[u8], want: &str) {
    let want = unhex(want);
    assert!(
        got == want,
        "{what}: the bytes changed (the log's format!)\n   now: {}\nfrozen: {}",
        hex(got),
        hex(&want)
    );
}

/// One op, as a list of one: its frozen bytes, and the op they decode to.
/// (`'static`: an op and the ops decoded from the frozen bytes compare
/// only at one lifetime, `Op` being invariant in it.)
#[track_caller]
fn op(op: Op<'static>, want: &str) {
    let mut buf = Vec::new();
    codec::encode_ops(std::slice::from_ref(&op), &mut buf);
    assert_bytes(&format!("{op:?}"), &buf, want);
    let frozen: &'static [u8] = unhex(want).leak();
    assert_eq!(codec::decode_ops(frozen).unwrap(), [op]);
    assert_eq!(codec::op_count(frozen), Ok(1));
}

/// One result: its frozen bytes, and the result they decode to.
#[track_caller]
fn result(r: Result<Outcome, Error>, want: &str) {
    let mut buf = Vec::new();
    codec::encode_result(&r, &mut buf);
    assert_bytes(&format!("{r:?}"), &buf, want);
    assert_eq!(codec::decode_results(&unhex(want)).unwrap(), [r]);
}

fn put<'a>(key: &'a [u8], value: &'a [u8]) -> Op<'a> {
    Op::Put {
        key,
        value,
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond: Cond::Any,
        return_old: false,
    }
}

/// 2100-01-01T00:00:00Z in unix ms.
const FAR_MS: u64 = 4_102_444_800_000;

#[test]
fn an_empty_op_list() {
    let mut buf = Vec::new();
    codec::encode_ops(&[], &mut buf);
    assert_bytes("no ops", &buf, "0000000000000000");
    assert_bytes(
        "no ops, one at a time",
        &OpList::default().finish(),
        "0000000000000000",
    );
    assert_eq!(codec::decode_ops(&buf).unwrap(), []);
}

#[test]
fn put_ops() {
    // The op count (u64 LE), then the op: tag 1 (Put), the key and the
    // value (each a u64 LE length and the bytes), the expiry (0: Never; 1
    // and u64: AtMs; 2: Keep), the flags (0 and u64: Set; 1: Keep), the
    // condition (0 Any, 1 Absent, 2 Present, 3 and u64: Version), and
    // return_old (0 or 1).
    op(
        put(b"k", b"v"),
        "0100000000000000 01 0100000000000000 6b 0100000000000000 76 00 00 0000000000000000 00 00",
    );
    op(
        Op::Put {
            key: b"",
            value: b"",
            expiry: Expiry::AtMs(FAR_MS),
            flags: Flags::Keep,
            cond: Cond::Absent,
            return_old: true,
        },
        "010000000000000001000000000000000000000000000000000100d8c32cbb030000010101",
    );
    op(
        Op::Put {
            key: b"key",
            value: b"\x00\xff\r\n",
            expiry: Expiry::Keep,
            flags: Flags::Set(u32::MAX),
            cond: Cond::Present,
            return_old: false,
        },
        "01000000000000000103000000000000006b6579040000000000000000ff0d0a0200ffffffff000000000200",
    );
    op(
        Op::Put {
            key: b"cas",
            value: b"value",
            expiry: Expiry::AtMs(u64::MAX),
            flags: Flags::Set(42),
            cond: Cond::Version(Version(0x0102_0304_0506_0708)),
            return_old: true,
        },
        "0100000000000000010300000000000000636173050000000000000076616c75\
            6501ffffffffffffffff002a0000000000000003080706050403020101",
    );
    op(
        Op::Put {
            key: b"v1",
            value: b"x",
            expiry: Expiry::AtMs(1),
            flags: Flags::Set(1),
            cond: Cond::Version(Version(1)),
            return_old: false,
        },
        "0100000000000000010200000000000000763101000000000000007801010000\
            000000000000010000000000000003010000000000000000",
    );
}

/// Lengths are fixed 8-byte little-endian words at every size (no varint
/// whose width changes at 128, 16384, ...).
#[test]
fn lengths_are_eight_bytes_at_every_size() {
    for len in [
        0usize,
        1,
        127,
        128,
        255,
        256,
        16_383,
        16_384,
        65_535,
        65_536,
        1 << 20,
    ] {
        let key = vec![b'k'; len.min(1000)];
        let value: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let o = put(&key, &value);
        let mut buf = Vec::new();
        codec::encode_ops(std::slice::from_ref(&o), &mut buf);
        // count, tag, key length, key, value length, value, expiry, flags
        // (tag + u64), cond, return_old.
        let mut want = 1u64.to_le_bytes().to_vec();
        want.push(1);
        want.extend_from_slice(&(key.len() as u64).to_le_bytes());
        want.extend_from_slice(&key);
        want.extend_from_slice(&(len as u64).to_le_bytes());
        want.extend_from_slice(&value);
        want.extend_from_slice(&unhex("00 00 0000000000000000 00 00"));
        assert!(buf == want, "a put of a {len}-byte value");
        assert_eq!(codec::decode_ops(&buf).unwrap(), [o]);
    }
}

#[test]
fn delete_ops() {
    op(
        Op::Delete {
            key: b"k",
            cond: Cond::Any,
            return_old: true,
        },
        "01000000000000000201000000000000006b0001",
    );
    op(
        Op::Delete {
            key: b"",
            cond: Cond::Version(Version(7)),
            return_old: false,
        },
        "010000000000000002000000000000000003070000000000000000",
    );
    op(
        Op::Delete {
            key: b"gone",
            cond: Cond::Present,
            return_old: false,
        },
        "0100000000000000020400000000000000676f6e650200",
    );
}

#[test]
fn append_ops() {
    op(
        Op::Append {
            key: b"a",
            value: b"tail",
            front: false,
            on_missing: OnMissing::Fail,
            cond: Cond::Any,
        },
        "01000000000000000301000000000000006104000000000000007461696c000000",
    );
    op(
        Op::Append {
            key: b"a",
            value: b"",
            front: true,
            on_missing: OnMissing::Empty,
            cond: Cond::Present,
        },
        "0100000000000000030100000000000000610000000000000000010102",
    );
    op(
        Op::Append {
            key: b"mc",
            value: b"more",
            front: false,
            on_missing: OnMissing::Create {
                value: b"init",
                expiry: Expiry::AtMs(FAR_MS),
                flags: u32::MAX,
            },
            cond: Cond::Version(Version(9)),
        },
        "01000000000000000302000000000000006d6304000000000000006d6f726500\
            020400000000000000696e69740100d8c32cbb030000ffffffff000000000309\
            00000000000000",
    );
    op(
        Op::Append {
            key: b"mc",
            value: b"x",
            front: true,
            on_missing: OnMissing::Create {
                value: b"",
                expiry: Expiry::Never,
                flags: 0,
            },
            cond: Cond::Absent,
        },
        "01000000000000000302000000000000006d6301000000000000007801020000\
            00000000000000000000000000000001",
    );
}

#[test]
fn incr_ops() {
    op(
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(1),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        },
        "01000000000000000401000000000000006e000100000000000000010002",
    );
    op(
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(-1),
            on_missing: OnMissing::Fail,
            cond: Cond::Present,
            expiry: Expiry::Never,
        },
        "01000000000000000401000000000000006e00ffffffffffffffff000200",
    );
    op(
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(i64::MIN),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::AtMs(FAR_MS),
        },
        "01000000000000000401000000000000006e00000000000000008001000100d8c32cbb030000",
    );
    op(
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(i64::MAX),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        },
        "01000000000000000401000000000000006e00ffffffffffffff7f010002",
    );
    op(
        Op::Incr {
            key: b"mc",
            arith: Arith::Unsigned {
                delta: 42,
                decrement: false,
            },
            on_missing: OnMissing::Create {
                value: b"10",
                expiry: Expiry::Keep,
                flags: 3,
            },
            cond: Cond::Version(Version(5)),
            expiry: Expiry::Keep,
        },
        "01000000000000000402000000000000006d63012a0000000000000000020200\
            000000000000313002030000000000000003050000000000000002",
    );
    op(
        Op::Incr {
            key: b"mc",
            arith: Arith::Unsigned {
                delta: u64::MAX,
                decrement: true,
            },
            on_missing: OnMissing::Fail,
            cond: Cond::Absent,
            expiry: Expiry::AtMs(1),
        },
        "01000000000000000402000000000000006d6301ffffffffffffffff010001010100000000000000",
    );
}

#[test]
fn expire_ops() {
    let when = |nx, xx, gt, lt| ExpireWhen { nx, xx, gt, lt };
    let expire = |expiry, when, past, return_item| Op::Expire {
        key: b"e",
        expiry,
        when,
        past,
        return_item,
    };
    op(
        expire(
            Expiry::AtMs(FAR_MS),
            when(false, false, false, false),
            false,
            false,
        ),
        "0100000000000000050100000000000000650100d8c32cbb03000000",
    );
    op(
        expire(Expiry::Never, when(true, false, false, false), false, false),
        "0100000000000000050100000000000000650001",
    );
    op(
        expire(
            Expiry::AtMs(1),
            when(false, true, false, false),
            false,
            false,
        ),
        "01000000000000000501000000000000006501010000000000000002",
    );
    op(
        expire(
            Expiry::AtMs(2),
            when(false, false, true, false),
            false,
            false,
        ),
        "01000000000000000501000000000000006501020000000000000004",
    );
    op(
        expire(
            Expiry::AtMs(3),
            when(false, false, false, true),
            false,
            false,
        ),
        "01000000000000000501000000000000006501030000000000000008",
    );
    op(
        expire(
            Expiry::AtMs(4),
            when(false, false, false, false),
            true,
            false,
        ),
        "01000000000000000501000000000000006501040000000000000010",
    );
    op(
        expire(Expiry::Keep, when(false, false, false, false), false, true),
        "0100000000000000050100000000000000650220",
    );
    op(
        expire(Expiry::AtMs(5), when(true, true, true, true), true, true),
        "0100000000000000050100000000000000650105000000000000003f",
    );
}

#[test]
fn atomic_clear_and_reap_ops() {
    op(
        Op::Atomic(Cow::Owned(vec![])),
        "0100000000000000060000000000000000",
    );
    op(
        Op::Atomic(Cow::Owned(vec![
            AtomicWrite::Put {
                key: b"a",
                value: b"1",
                expiry: Expiry::Never,
            },
            AtomicWrite::Delete { key: b"b" },
            AtomicWrite::Put {
                key: b"c",
                value: b"",
                expiry: Expiry::AtMs(FAR_MS),
            },
            AtomicWrite::Put {
                key: b"d",
                value: b"4",
                expiry: Expiry::Keep,
            },
        ])),
        "0100000000000000060400000000000000000100000000000000610100000000\
            0000003100010100000000000000620001000000000000006300000000000000\
            000100d8c32cbb0300000001000000000000006401000000000000003402",
    );
    op(Op::Clear, "010000000000000007");
    op(
        Op::Reap {
            key: b"old",
            version: Version(41),
        },
        "01000000000000000803000000000000006f6c642900000000000000",
    );
}

#[test]
fn move_set_range_set_bit_and_incr_float_ops() {
    for (replace, keep_source, want) in [
        (
            false,
            false,
            "01000000000000000b0300000000000000737263030000000000000064737400",
        ),
        (
            true,
            false,
            "01000000000000000b0300000000000000737263030000000000000064737401",
        ),
        (
            false,
            true,
            "01000000000000000b0300000000000000737263030000000000000064737402",
        ),
        (
            true,
            true,
            "01000000000000000b0300000000000000737263030000000000000064737403",
        ),
    ] {
        op(
            Op::Move {
                from: b"src",
                to: b"dst",
                replace,
                keep_source,
            },
            want,
        );
    }
    op(
        Op::SetRange {
            key: b"r",
            offset: 0,
            value: b"",
        },
        "01000000000000000d01000000000000007200000000000000000000000000000000",
    );
    op(
        Op::SetRange {
            key: b"r",
            offset: 1 << 40,
            value: b"patch",
        },
        "01000000000000000d010000000000000072000000000001000005000000000000007061746368",
    );
    op(
        Op::SetBit {
            key: b"b",
            bit: 77,
            on: true,
        },
        "01000000000000000e0100000000000000624d0000000000000001",
    );
    op(
        Op::SetBit {
            key: b"b",
            bit: u64::MAX,
            on: false,
        },
        "01000000000000000e010000000000000062ffffffffffffffff00",
    );
    op(
        Op::IncrFloat {
            key: b"f",
            by: b"-1.5e3",
        },
        "01000000000000000f01000000000000006606000000000000002d312e356533",
    );
}

#[test]
fn read_and_scan_ops() {
    op(
        Op::Read {
            keys: Cow::Owned(vec![]),
        },
        "0100000000000000090000000000000000",
    );
    op(
        Op::Read {
            keys: Cow::Owned(vec![&b"r1"[..], b"", b"r3"]),
        },
        "0100000000000000090300000000000000020000000000000072310000000000\
            00000002000000000000007233",
    );
    let scan = |range, what, max_bytes| Op::Scan {
        range: Cow::Owned(range),
        what,
        max_bytes,
    };
    op(
        scan(Range::all(), ScanWhat::Items, 0),
        "0100000000000000100000000000000000000000000000000000000000",
    );
    op(
        scan(
            Range::new(
                Bound::Included(b"a".to_vec()),
                Bound::Excluded(b"z".to_vec()),
            )
            .with_limit(5),
            ScanWhat::Keys,
            1 << 20,
        ),
        "010000000000000010010100000000000000610201000000000000007a060000\
            000000000000010000100000000000",
    );
    op(
        scan(
            Range::new(
                Bound::Excluded(b"".to_vec()),
                Bound::Included(b"m".to_vec()),
            )
            .with_limit(0)
            .reversed(),
            ScanWhat::Count,
            u64::MAX,
        ),
        "0100000000000000100200000000000000000101000000000000006d01000000\
            000000000102ffffffffffffffff",
    );
    op(
        scan(
            Range::new(Bound::Included(b"f".to_vec()), Bound::Unbounded)
                .with_floor_start()
                .reversed(),
            ScanWhat::Items,
            7,
        ),
        "0100000000000000100101000000000000006600000000000000000003000700000000000000",
    );
}

#[test]
fn check_ops() {
    let cmps = [
        (
            CmpOp::Eq,
            "01000000000000000c0001000000000000006b000900000000000000",
        ),
        (
            CmpOp::Ne,
            "01000000000000000c0001000000000000006b010900000000000000",
        ),
        (
            CmpOp::Lt,
            "01000000000000000c0001000000000000006b020900000000000000",
        ),
        (
            CmpOp::Le,
            "01000000000000000c0001000000000000006b030900000000000000",
        ),
        (
            CmpOp::Gt,
            "01000000000000000c0001000000000000006b040900000000000000",
        ),
        (
            CmpOp::Ge,
            "01000000000000000c0001000000000000006b050900000000000000",
        ),
    ];
    for (cmp, want) in cmps {
        op(
            Op::Check(Check::Version {
                key: b"k",
                op: cmp,
                version: 9,
            }),
            want,
        );
    }
    op(
        Op::Check(Check::Value {
            key: b"k",
            op: CmpOp::Ne,
            value: b"x",
        }),
        "01000000000000000c0101000000000000006b01010000000000000078",
    );
    op(
        Op::Check(Check::Count {
            start: Bound::Included(b"a"),
            end: Bound::Unbounded,
            op: CmpOp::Eq,
            n: 3,
        }),
        "01000000000000000c020101000000000000006100000300000000000000",
    );
    op(
        Op::Check(Check::MaxVersion {
            start: Bound::Unbounded,
            end: Bound::Excluded(b"z"),
            op: CmpOp::Le,
            version: 77,
        }),
        "01000000000000000c03000201000000000000007a034d00000000000000",
    );
}

#[test]
fn txn_ops() {
    op(
        Op::Txn {
            watch: Cow::Owned(vec![]),
            ops: Cow::Owned(vec![]),
        },
        "01000000000000000a00000000000000000000000000000000",
    );
    let inner = vec![
        Op::Check(Check::Version {
            key: b"w1",
            op: CmpOp::Eq,
            version: 3,
        }),
        put(b"k", b"v"),
        Op::Read {
            keys: Cow::Owned(vec![&b"k"[..]]),
        },
        Op::Txn {
            watch: Cow::Owned(vec![]),
            ops: Cow::Owned(vec![Op::Delete {
                key: b"d",
                cond: Cond::Any,
                return_old: false,
            }]),
        },
    ];
    op(
        Op::Txn {
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
        },
        "01000000000000000a0200000000000000020000000000000077310300000000\
            00000002000000000000007732000000000000000004000000000000000c0002\
            0000000000000077310003000000000000000101000000000000006b01000000\
            0000000076000000000000000000000000090100000000000000010000000000\
            00006b0a00000000000000000100000000000000020100000000000000640000",
    );
}

/// A list of several ops: the count, then each op's bytes as above; built
/// at once or one op at a time (`OpList`), the same bytes.
#[test]
fn a_list_of_ops() {
    let ops = [
        put(b"a", b"1"),
        Op::Delete {
            key: b"b",
            cond: Cond::Any,
            return_old: false,
        },
        Op::Incr {
            key: b"n",
            arith: Arith::Signed(1),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        },
    ];
    let mut buf = Vec::new();
    codec::encode_ops(&ops, &mut buf);
    let want = "0300000000000000010100000000000000610100000000000000310000000000\
        000000000000000201000000000000006200000401000000000000006e000100\
        000000000000010002";
    assert_bytes("three ops", &buf, want);
    let mut list = OpList::default();
    for o in &ops {
        list.push(o);
    }
    assert_bytes("three ops, one at a time", &list.finish(), want);
    assert_eq!(codec::decode_ops(&unhex(want)).unwrap(), ops);
    assert_eq!(codec::op_count(&unhex(want)), Ok(3));
}

fn item(expires_at_ms: Option<u64>, flags: u32) -> Item {
    Item {
        key: b"key".to_vec().into(),
        value: b"val\x00".to_vec().into(),
        version: Version(0x1234),
        expires_at_ms,
        flags,
    }
}

#[test]
fn put_delete_and_append_outcomes() {
    // 0: Ok (1: Err, then the error's code), tag 1 (Put), the status (0
    // Done, 1 Missing, 2 Present, 3 Mismatch), the version (u64 LE, 0:
    // none), the old item (0: none; 1, then key, value, version, expiry ms
    // (0: none) and flags).
    result(
        Ok(Outcome::Put {
            status: Status::Done,
            version: Some(Version(1)),
            old: None,
        }),
        "00 01 00 0100000000000000 00",
    );
    result(
        Ok(Outcome::Put {
            status: Status::Done,
            version: Some(Version(u64::MAX)),
            old: Some(item(None, 0)),
        }),
        "000100ffffffffffffffff0103000000000000006b6579040000000000000076\
            616c00341200000000000000000000000000000000000000000000",
    );
    result(
        Ok(Outcome::Put {
            status: Status::Mismatch,
            version: None,
            old: Some(item(Some(FAR_MS), u32::MAX)),
        }),
        "00010300000000000000000103000000000000006b6579040000000000000076\
            616c00341200000000000000d8c32cbb030000ffffffff00000000",
    );
    result(
        Ok(Outcome::Put {
            status: Status::Present,
            version: None,
            old: None,
        }),
        "000102000000000000000000",
    );
    result(
        Ok(Outcome::Delete {
            status: Status::Missing,
            version: None,
            old: None,
        }),
        "000201000000000000000000",
    );
    result(
        Ok(Outcome::Delete {
            status: Status::Done,
            version: Some(Version(8)),
            old: Some(item(Some(1), 7)),
        }),
        "00020008000000000000000103000000000000006b6579040000000000000076\
            616c00341200000000000001000000000000000700000000000000",
    );
    result(
        Ok(Outcome::Append {
            status: Status::Done,
            version: Some(Version(2)),
            len: 0,
        }),
        "00030002000000000000000000000000000000",
    );
    result(
        Ok(Outcome::Append {
            status: Status::Missing,
            version: None,
            len: 1 << 33,
        }),
        "00030100000000000000000000000002000000",
    );
}

#[test]
fn incr_and_expire_outcomes() {
    result(
        Ok(Outcome::Incr {
            status: Status::Done,
            version: Some(Version(3)),
            number: Number::Signed(-7),
            created: false,
            expires_at_ms: None,
        }),
        "000400030000000000000000f9ffffffffffffff000000000000000000",
    );
    result(
        Ok(Outcome::Incr {
            status: Status::Done,
            version: Some(Version(4)),
            number: Number::Unsigned(u64::MAX),
            created: true,
            expires_at_ms: Some(FAR_MS),
        }),
        "000400040000000000000001ffffffffffffffff0100d8c32cbb030000",
    );
    result(
        Ok(Outcome::Incr {
            status: Status::Mismatch,
            version: None,
            number: Number::Signed(i64::MIN),
            created: false,
            expires_at_ms: None,
        }),
        "0004030000000000000000000000000000000080000000000000000000",
    );
    result(
        Ok(Outcome::Expire {
            status: Status::Done,
            version: Some(Version(5)),
            item: None,
        }),
        "000500050000000000000000",
    );
    result(
        Ok(Outcome::Expire {
            status: Status::Mismatch,
            version: None,
            item: Some(item(Some(FAR_MS), 2)),
        }),
        "00050300000000000000000103000000000000006b6579040000000000000076\
            616c00341200000000000000d8c32cbb0300000200000000000000",
    );
}

#[test]
fn atomic_clear_reap_move_check_set_bit_and_incr_float_outcomes() {
    result(
        Ok(Outcome::Atomic { versions: vec![] }),
        "00060000000000000000",
    );
    result(
        Ok(Outcome::Atomic {
            versions: vec![Some(Version(1)), None, Some(Version(2))],
        }),
        "00060300000000000000010000000000000000000000000000000200000000000000",
    );
    result(Ok(Outcome::Clear), "0007");
    result(
        Ok(Outcome::Reap {
            status: Status::Done,
            version: Some(Version(6)),
        }),
        "0008000600000000000000",
    );
    result(
        Ok(Outcome::Reap {
            status: Status::Mismatch,
            version: None,
        }),
        "0008030000000000000000",
    );
    for (status, want) in [
        (Status::Done, "000b00"),
        (Status::Missing, "000b01"),
        (Status::Present, "000b02"),
        (Status::Mismatch, "000b03"),
    ] {
        result(Ok(Outcome::Move { status }), want);
    }
    result(Ok(Outcome::Check), "000c");
    result(
        Ok(Outcome::SetBit {
            old: false,
            version: Some(Version(7)),
        }),
        "000d000700000000000000",
    );
    result(
        Ok(Outcome::SetBit {
            old: true,
            version: None,
        }),
        "000d010000000000000000",
    );
    result(
        Ok(Outcome::IncrFloat {
            value: b"10.5".to_vec(),
            version: Some(Version(8)),
        }),
        "000e040000000000000031302e350800000000000000",
    );
}

#[test]
fn read_scan_and_txn_outcomes() {
    result(Ok(Outcome::Read { items: vec![] }), "00090000000000000000");
    result(
        Ok(Outcome::Read {
            items: vec![None, Some(item(None, 0))],
        }),
        "00090200000000000000000103000000000000006b6579040000000000000076\
            616c00341200000000000000000000000000000000000000000000",
    );
    result(
        Ok(Outcome::Scan {
            items: vec![],
            count: 0,
        }),
        "000f00000000000000000000000000000000",
    );
    result(
        Ok(Outcome::Scan {
            items: vec![item(Some(FAR_MS), 1), item(None, 0)],
            count: 9,
        }),
        "000f02000000000000000103000000000000006b657904000000000000007661\
            6c00341200000000000000d8c32cbb0300000100000000000000010300000000\
            0000006b6579040000000000000076616c003412000000000000000000000000\
            000000000000000000000900000000000000",
    );
    result(Ok(Outcome::Txn { results: None }), "000a00");
    result(
        Ok(Outcome::Txn {
            results: Some(vec![]),
        }),
        "000a010000000000000000",
    );
    result(
        Ok(Outcome::Txn {
            results: Some(vec![
                Ok(Outcome::Check),
                Ok(Outcome::Put {
                    status: Status::Done,
                    version: Some(Version(10)),
                    old: None,
                }),
                Err(Error::NotAnInteger),
                Ok(Outcome::Txn { results: None }),
            ]),
        }),
        "000a010400000000000000000c0001000a00000000000000000104000a00",
    );
}

#[test]
fn errors() {
    result(Err(Error::KeyEmpty), "0101");
    result(
        Err(Error::KeyTooLong {
            len: 70_000,
            max: 65_535,
        }),
        "01027011010000000000ffff000000000000",
    );
    result(
        Err(Error::ValueTooLarge {
            len: 1 << 27,
            max: 1 << 26,
        }),
        "010300000008000000000000000400000000",
    );
    result(Err(Error::NotAnInteger), "0104");
    result(Err(Error::Overflow), "0105");
    result(
        Err(Error::NotInTransaction("FLUSHALL".into())),
        "01060800000000000000464c555348414c4c",
    );
    result(
        Err(Error::NotInTransaction(String::new())),
        "01060000000000000000",
    );
    result(Err(Error::NotAFloat), "0107");
    result(Err(Error::NotFinite), "0108");
    // A leader above its memory limit (`MemoryGate`).
    result(Err(Error::NoMemory), "010c");
    // Any other error travels as code 255 and its text, and reads back as
    // `Error::Corrupt` with that text (apply never answers one).
    for (e, want) in [
        (
            Error::Unavailable("no leader".into()),
            "01ff220000000000000074686520777269746520776173206e6f742074616b65\
            6e3a206e6f206c6561646572",
        ),
        (
            Error::NoSuchSnapshot,
            "01ff2f000000000000006e6f207375636820736e617073686f742028756e6b6e\
            6f776e2c2072656c6561736564206f72206578706972656429",
        ),
    ] {
        let text = e.to_string();
        let mut buf = Vec::new();
        codec::encode_result(&Err(e), &mut buf);
        assert_bytes(&text, &buf, want);
        assert_eq!(
            codec::decode_results(&unhex(want)).unwrap(),
            [Err(Error::Corrupt(text))]
        );
    }
}

/// Several results, concatenated as an entry's `Applied` holds them.
#[test]
fn a_list_of_results() {
    let results = vec![
        Ok(Outcome::Put {
            status: Status::Done,
            version: Some(Version(1)),
            old: None,
        }),
        Err(Error::Overflow),
        Ok(Outcome::Clear),
    ];
    let mut buf = Vec::new();
    for r in &results {
        codec::encode_result(r, &mut buf);
    }
    let want = "00010001000000000000000001050007";
    assert_bytes("three results", &buf, want);
    assert_eq!(codec::decode_results(&unhex(want)).unwrap(), results);
    assert_eq!(codec::decode_results(&[]).unwrap(), []);
}

/// Group commit: proposals' op lists joined into one entry, and the
/// entry's results cut back into each proposal's share.
#[test]
fn joined_ops_and_split_results() {
    let lists: Vec<Vec<u8>> = [
        vec![put(b"a", b"1")],
        vec![],
        vec![put(b"b", b"2"), Op::Clear],
    ]
    .iter()
    .map(|ops| {
        let mut b = Vec::new();
        codec::encode_ops(ops, &mut b);
        b
    })
    .collect();
    let joined = codec::join_ops(lists.iter().map(Vec::as_slice));
    assert_bytes(
        "joined",
        &joined,
        "0300000000000000010100000000000000610100000000000000310000000000\
        0000000000000001010000000000000062010000000000000032000000000000\
        00000000000007",
    );
    let results = [
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
        Ok(Outcome::Clear),
    ];
    let mut all = Vec::new();
    for r in &results {
        codec::encode_result(r, &mut all);
    }
    let shares = codec::split_results(&all, &[1, 0, 2]).unwrap();
    assert_eq!(shares.len(), 3);
    assert_bytes("share 0", &shares[0], "000100010000000000000000");
    assert_bytes("share 1", &shares[1], "");
    assert_bytes("share 2", &shares[2], "0001000200000000000000000007");
}

fn ops_bytes(ops: &[Op<'_>]) -> Vec<u8> {
    let mut b = Vec::new();
    codec::encode_ops(ops, &mut b);
    b
}

/// `Batch` and `Applied` as postcard writes them in log entries and
/// replies: varints for `now_ms` and the byte strings' lengths.
#[test]
fn batch_and_applied_postcard() {
    let batch = Batch {
        now_ms: 1_700_000_000_123,
        ops: ops_bytes(&[put(b"k", b"v")]),
    };
    let bytes = postcard::to_stdvec(&batch).unwrap();
    // now_ms (varint), the ops' length (varint), the ops (`codec`).
    assert_bytes(
        "a batch",
        &bytes,
        "fbd095ffbc31 27 \
         0100000000000000 01 0100000000000000 6b 0100000000000000 76 00 00 0000000000000000 00 00",
    );
    assert_eq!(postcard::from_bytes::<Batch>(&bytes).unwrap(), batch);
    let applied = Applied {
        results: vec![Ok(Outcome::Clear)],
    };
    let bytes = postcard::to_stdvec(&applied).unwrap();
    assert_bytes("applied", &bytes, "020007");
    assert_eq!(postcard::from_bytes::<Applied>(&bytes).unwrap(), applied);
    assert_bytes(
        "nothing applied",
        &postcard::to_stdvec(&Applied::default()).unwrap(),
        "00",
    );
    // The varints' widths change at 2^7, 2^14, ...: the prefix before the
    // op bytes (now_ms, then the ops' length).
    for (now_ms, len, prefix) in [
        (0u64, 0usize, "0000"),
        (127, 127, "7f7f"),
        (128, 128, "80018001"),
        (16_383, 16_383, "ff7fff7f"),
        (16_384, 16_384, "808001808001"),
        (u64::MAX, 2_097_152, "ffffffffffffffffff0180808001"),
    ] {
        let batch = Batch {
            now_ms,
            ops: (0..len).map(|i| i as u8).collect(),
        };
        let bytes = postcard::to_stdvec(&batch).unwrap();
        let p = varint_len(now_ms) + varint_len(len as u64);
        assert_bytes(&format!("the prefix of {batch}"), &bytes[..p], prefix);
        assert!(bytes[p..] == batch.ops[..], "{batch}: the op bytes follow");
        assert_eq!(postcard::from_bytes::<Batch>(&bytes).unwrap(), batch);
        // An answer is its encoded results as one byte string: a Clear's
        // result is two bytes.
        let applied = Applied {
            results: vec![Ok(Outcome::Clear); len / 2],
        };
        let bytes = postcard::to_stdvec(&applied).unwrap();
        let mut encoded = Vec::new();
        for r in &applied.results {
            codec::encode_result(r, &mut encoded);
        }
        assert_eq!(
            bytes,
            postcard::to_stdvec(&encoded).unwrap(),
            "{batch}: applied"
        );
        assert_eq!(postcard::from_bytes::<Applied>(&bytes).unwrap(), applied);
    }
}

/// The bytes of `n` as a postcard varint.
fn varint_len(n: u64) -> usize {
    let mut n = n;
    let mut w = 1;
    while n >= 0x80 {
        n >>= 7;
        w += 1;
    }
    w
}

fn log_id(term: u64, node: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

/// A record of a log segment: `[payload length u32 LE][CRC-32 (IEEE) of
/// the payload u32 LE][payload]`, the payload the entry in postcard.
fn record(entry: &Entry) -> Vec<u8> {
    let payload = postcard::to_stdvec(entry).unwrap();
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The first three entries of the v0.1 cluster fixture's log, as a fresh
/// three-node cluster writes them: the initial membership (index 0), the
/// new leader's blank entry, and the first batch (one SET of `s:000` to
/// the empty value).
fn first_entries() -> Vec<Entry> {
    let voters: BTreeSet<u64> = [1, 2, 3].into();
    let nodes: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|id| (id, BasicNode::new(format!("127.0.0.4{id}:7001"))))
        .collect();
    vec![
        Entry {
            log_id: log_id(0, 0, 0),
            payload: EntryPayload::Membership(Membership::new(vec![voters], nodes)),
        },
        Entry {
            log_id: log_id(1, 1, 1),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(1, 1, 2),
            payload: EntryPayload::Normal(Batch {
                now_ms: FIXTURE_FIRST_NOW_MS,
                ops: ops_bytes(&[put(b"s:000", b"")]),
            }),
        },
    ]
}

/// The leader's clock in the fixture's first batch.
const FIXTURE_FIRST_NOW_MS: u64 = 1_795_720_579_923;

/// The records of [`first_entries`], frozen, byte for byte what the v0.1
/// binary wrote at the start of the fixture's segment. Each: length and
/// CRC-32 (u32 LE), then the entry in postcard: the log id (term, leader
/// node, index: varints), the payload's tag (0 Blank, 1 Normal, 2
/// Membership) and its data: the voter sets, then each node's id and
/// address; or the batch (`now_ms` varint, the ops' length varint, the ops
/// as `codec` writes them).
const FIRST_RECORDS: &str = "\
    3d000000 823ace99 \
    000000 02 01 03 010203 03 \
    01 0f 3132372e302e302e34313a37303031 \
    02 0f 3132372e302e302e34323a37303031 \
    03 0f 3132372e302e302e34333a37303031 \
    04000000 0fe32181 010101 00 \
    35000000 efe49a04 010102 01 d396a6caa134 2a \
    0100000000000000 01 0500000000000000 733a303030 0000000000000000 00 00 0000000000000000 00 00";

#[test]
fn log_records_and_entries() {
    let entries = first_entries();
    let mut records = Vec::new();
    for e in &entries {
        records.extend_from_slice(&record(e));
    }
    assert_bytes("the first records", &records, FIRST_RECORDS);
    // Each entry's postcard payload decodes back.
    for e in &entries {
        let payload = postcard::to_stdvec(e).unwrap();
        assert_eq!(&postcard::from_bytes::<Entry>(&payload).unwrap(), e);
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("combkv-golden-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn open(dir: &Path) -> LogStore {
    let storage: Arc<dyn combkv::durable::Storage> = Arc::new(combkv::durable::FsStorage);
    LogStore::open(storage, dir, LogOptions::default())
        .unwrap_or_else(|e| panic!("opening the log in {}: {e}", dir.display()))
        .0
}

/// The log's small files, `[CRC-32 u32 LE][postcard]`: `meta` holds the
/// vote (Some: term 1, node 1, committed) and the purge point (None), as
/// in the v0.1 fixture; `committed` the commit point (Some: the log id of
/// term 1, node 1, index 2).
const META_VOTE_1_1_COMMITTED: &str = "bee2275b 01 01 01 01 00";
const COMMITTED_1_1_2: &str = "23822f6f 01 01 01 02";

/// A log directory of frozen bytes (the segment with the zeros the writer
/// puts ahead of its appends) opens with today's `LogStore` and reads back
/// the entries, the vote and the commit point.
#[tokio::test]
async fn a_log_of_frozen_bytes_opens() {
    let dir = temp_dir("frozen");
    let mut segment = unhex(FIRST_RECORDS);
    segment.resize(segment.len() + (1 << 20), 0);
    std::fs::write(dir.join("seg-00000000000000000000.log"), &segment).unwrap();
    std::fs::write(dir.join("meta"), unhex(META_VOTE_1_1_COMMITTED)).unwrap();
    std::fs::write(dir.join("committed"), unhex(COMMITTED_1_1_2)).unwrap();
    let mut log = open(&dir);
    assert_eq!(log.try_get_log_entries(0..).await.unwrap(), first_entries());
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(openraft::Vote::new_committed(1, 1))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1, 2)));
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The v0.1 cluster fixture's log (node 1), opened with today's
/// `LogStore`: it begins with the frozen records, and every batch in it
/// decodes.
#[tokio::test]
async fn the_v0_1_cluster_fixture_log_opens() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/v0.1-cluster/n1/cluster/log");
    let segment = std::fs::read(fixture.join("seg-00000000000000000000.log")).unwrap();
    let first = unhex(FIRST_RECORDS);
    assert_bytes(
        "the start of the fixture's segment",
        &segment[..first.len()],
        FIRST_RECORDS,
    );
    assert_bytes(
        "the fixture's meta",
        &std::fs::read(fixture.join("meta")).unwrap(),
        META_VOTE_1_1_COMMITTED,
    );
    // The commit point: term 1, node 1, index 558 (varint ae04).
    assert_bytes(
        "the fixture's commit point",
        &std::fs::read(fixture.join("committed")).unwrap(),
        "8186d575 01 01 01 ae04",
    );
    let dir = temp_dir("fixture");
    for f in ["seg-00000000000000000000.log", "meta", "committed"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    let mut log = open(&dir);
    let entries = log.try_get_log_entries(0..).await.unwrap();
    assert_eq!(entries[..3], first_entries()[..]);
    let mut ops = 0;
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.log_id.index, i as u64);
        if let EntryPayload::Normal(b) = &e.payload {
            ops += codec::decode_ops(&b.ops)
                .unwrap_or_else(|err| panic!("entry {i}: {err}"))
                .len();
        }
    }
    assert_eq!((entries.len(), ops), (FIXTURE_ENTRIES, FIXTURE_OPS));
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(openraft::Vote::new_committed(1, 1))
    );
    assert_eq!(
        log.read_committed().await.unwrap(),
        Some(log_id(1, 1, FIXTURE_ENTRIES as u64 - 1))
    );
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What node 1's log in the fixture holds.
const FIXTURE_ENTRIES: usize = 559;
const FIXTURE_OPS: usize = 557;
