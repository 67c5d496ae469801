//! Writing ops: a tag byte per kind, then its fields in order. The kinds
//! are grouped by family (single-key writes, single-key edits, ops over
//! many keys, checks), each family's function writing its own tags.

use std::ops::Bound;

use combkv::op::{Arith, Check, CmpOp, Cond, OnMissing, Op, ScanWhat};
use combkv::{AtomicWrite, Expiry, Flags};

use super::wire::{put_bytes, put_u64, put_version};

fn put_expiry(out: &mut Vec<u8>, e: Expiry) {
    match e {
        Expiry::Never => out.push(0),
        Expiry::AtMs(t) => {
            out.push(1);
            put_u64(out, t);
        }
        Expiry::Keep => out.push(2),
    }
}

fn put_flags(out: &mut Vec<u8>, f: Flags) {
    match f {
        Flags::Set(v) => {
            out.push(0);
            put_u64(out, u64::from(v));
        }
        Flags::Keep => out.push(1),
    }
}

fn put_cond(out: &mut Vec<u8>, c: Cond) {
    match c {
        Cond::Any => out.push(0),
        Cond::Absent => out.push(1),
        Cond::Present => out.push(2),
        Cond::Version(v) => {
            out.push(3);
            put_u64(out, v.get());
        }
    }
}

fn put_on_missing(out: &mut Vec<u8>, m: OnMissing<'_>) {
    match m {
        OnMissing::Fail => out.push(0),
        OnMissing::Empty => out.push(1),
        OnMissing::Create {
            value,
            expiry,
            flags,
        } => {
            out.push(2);
            put_bytes(out, value);
            put_expiry(out, expiry);
            put_u64(out, u64::from(flags));
        }
    }
}

fn put_arith(out: &mut Vec<u8>, arith: Arith) {
    match arith {
        Arith::Signed(d) => {
            out.push(0);
            put_u64(out, d as u64);
        }
        Arith::Unsigned { delta, decrement } => {
            out.push(1);
            put_u64(out, delta);
            out.push(u8::from(decrement));
        }
    }
}

fn put_atomic_write(out: &mut Vec<u8>, w: &AtomicWrite<'_>) {
    match *w {
        AtomicWrite::Put { key, value, expiry } => {
            out.push(0);
            put_bytes(out, key);
            put_bytes(out, value);
            put_expiry(out, expiry);
        }
        AtomicWrite::Delete { key } => {
            out.push(1);
            put_bytes(out, key);
        }
    }
}

/// The comparisons, in the order of their codes.
pub(super) const CMP_OPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

fn cmp_code(op: CmpOp) -> u8 {
    CMP_OPS
        .iter()
        .position(|&o| o == op)
        .expect("every comparison has a code") as u8
}

fn put_bound(out: &mut Vec<u8>, b: Bound<&[u8]>) {
    match b {
        Bound::Unbounded => out.push(0),
        Bound::Included(k) => {
            out.push(1);
            put_bytes(out, k);
        }
        Bound::Excluded(k) => {
            out.push(2);
            put_bytes(out, k);
        }
    }
}

pub(super) fn encode_op(op: &Op<'_>, out: &mut Vec<u8>) {
    match op {
        Op::Put { .. } | Op::Delete { .. } | Op::Append { .. } | Op::Incr { .. } => {
            encode_key_write(op, out);
        }
        Op::Expire { .. }
        | Op::Reap { .. }
        | Op::Move { .. }
        | Op::SetRange { .. }
        | Op::SetBit { .. }
        | Op::IncrFloat { .. } => encode_key_edit(op, out),
        Op::Atomic(_) | Op::Clear | Op::Read { .. } | Op::Scan { .. } | Op::Txn { .. } => {
            encode_multi_key(op, out);
        }
        Op::Check(c) => {
            out.push(12);
            encode_check(c, out);
        }
        // `Op` is non-exhaustive: a new kind needs a tag here before it
        // can be replicated.
        _ => unreachable!("an op kind without an encoding: {op:?}"),
    }
}

/// Put (1), Delete (2), Append (3), Incr (4).
fn encode_key_write(op: &Op<'_>, out: &mut Vec<u8>) {
    match *op {
        Op::Put {
            key,
            value,
            expiry,
            flags,
            cond,
            return_old,
        } => {
            out.push(1);
            put_bytes(out, key);
            put_bytes(out, value);
            put_expiry(out, expiry);
            put_flags(out, flags);
            put_cond(out, cond);
            out.push(u8::from(return_old));
        }
        Op::Delete {
            key,
            cond,
            return_old,
        } => {
            out.push(2);
            put_bytes(out, key);
            put_cond(out, cond);
            out.push(u8::from(return_old));
        }
        Op::Append {
            key,
            value,
            front,
            on_missing,
            cond,
        } => {
            out.push(3);
            put_bytes(out, key);
            put_bytes(out, value);
            out.push(u8::from(front));
            put_on_missing(out, on_missing);
            put_cond(out, cond);
        }
        Op::Incr {
            key,
            arith,
            on_missing,
            cond,
            expiry,
        } => {
            out.push(4);
            put_bytes(out, key);
            put_arith(out, arith);
            put_on_missing(out, on_missing);
            put_cond(out, cond);
            put_expiry(out, expiry);
        }
        _ => unreachable!("not a single-key write: {op:?}"),
    }
}

/// Expire (5), Reap (8), Move (11), SetRange (13), SetBit (14),
/// IncrFloat (15).
fn encode_key_edit(op: &Op<'_>, out: &mut Vec<u8>) {
    match *op {
        Op::Expire {
            key,
            expiry,
            when,
            past,
            return_item,
        } => {
            out.push(5);
            put_bytes(out, key);
            put_expiry(out, expiry);
            let bits = u8::from(when.nx)
                | u8::from(when.xx) << 1
                | u8::from(when.gt) << 2
                | u8::from(when.lt) << 3
                | u8::from(past) << 4
                | u8::from(return_item) << 5;
            out.push(bits);
        }
        Op::Reap { key, version } => {
            out.push(8);
            put_bytes(out, key);
            put_u64(out, version.get());
        }
        Op::Move {
            from,
            to,
            replace,
            keep_source,
        } => {
            out.push(11);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(u8::from(replace) | u8::from(keep_source) << 1);
        }
        Op::SetRange { key, offset, value } => {
            out.push(13);
            put_bytes(out, key);
            put_u64(out, offset);
            put_bytes(out, value);
        }
        Op::SetBit { key, bit, on } => {
            out.push(14);
            put_bytes(out, key);
            put_u64(out, bit);
            out.push(u8::from(on));
        }
        Op::IncrFloat { key, by } => {
            out.push(15);
            put_bytes(out, key);
            put_bytes(out, by);
        }
        _ => unreachable!("not a single-key edit: {op:?}"),
    }
}

/// Atomic (6), Clear (7), Read (9), Txn (10), Scan (16).
fn encode_multi_key(op: &Op<'_>, out: &mut Vec<u8>) {
    match op {
        Op::Atomic(writes) => {
            out.push(6);
            put_u64(out, writes.len() as u64);
            for w in writes.iter() {
                put_atomic_write(out, w);
            }
        }
        Op::Clear => out.push(7),
        Op::Read { keys } => {
            out.push(9);
            put_u64(out, keys.len() as u64);
            for k in keys.iter() {
                put_bytes(out, k);
            }
        }
        Op::Scan {
            range,
            what,
            max_bytes,
        } => {
            out.push(16);
            put_bound(out, range.start.as_ref().map(Vec::as_slice));
            put_bound(out, range.end.as_ref().map(Vec::as_slice));
            put_u64(out, range.limit.map_or(0, |n| n as u64 + 1));
            out.push(u8::from(range.reverse) | u8::from(range.floor_start) << 1);
            out.push(match what {
                ScanWhat::Items => 0,
                ScanWhat::Keys => 1,
                ScanWhat::Count => 2,
            });
            put_u64(out, *max_bytes);
        }
        Op::Txn { watch, ops } => {
            out.push(10);
            put_u64(out, watch.len() as u64);
            for w in watch.iter() {
                put_bytes(out, w.key);
                put_version(out, w.version);
            }
            put_u64(out, ops.len() as u64);
            for op in ops.iter() {
                encode_op(op, out);
            }
        }
        _ => unreachable!("not an op over many keys: {op:?}"),
    }
}

/// The check of a Check op (12), after its tag.
fn encode_check(c: &Check<'_>, out: &mut Vec<u8>) {
    match *c {
        Check::Version { key, op, version } => {
            out.push(0);
            put_bytes(out, key);
            out.push(cmp_code(op));
            put_u64(out, version);
        }
        Check::Value { key, op, value } => {
            out.push(1);
            put_bytes(out, key);
            out.push(cmp_code(op));
            put_bytes(out, value);
        }
        Check::Count { start, end, op, n } => {
            out.push(2);
            put_bound(out, start);
            put_bound(out, end);
            out.push(cmp_code(op));
            put_u64(out, n);
        }
        Check::MaxVersion {
            start,
            end,
            op,
            version,
        } => {
            out.push(3);
            put_bound(out, start);
            put_bound(out, end);
            out.push(cmp_code(op));
            put_u64(out, version);
        }
    }
}
