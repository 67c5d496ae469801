//! The bytes of decided writes and of their outcomes, as log entries and
//! replies carry them. A small tagged format of its own: fixed-width
//! little-endian integers and length-prefixed byte strings, so that a
//! decoded op borrows its keys and values from the entry it came from.
//!
//! The format is part of the log: a change to it needs a new tag, never a
//! new meaning for an old one.

use std::borrow::Cow;

use std::ops::Bound;

use combkv::op::{
    Arith, Check, CmpOp, Cond, ExpireWhen, Number, OnMissing, Op, Outcome, ScanWhat, Status, Watch,
};
use combkv::{AtomicWrite, Error, Expiry, Flags, Item, Version};

/// Why bytes could not be decoded (a damaged or foreign entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable replicated data: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

type Decoded<T> = Result<T, DecodeError>;

/// Appends the encoding of `ops` to `out`.
pub fn encode_ops(ops: &[Op<'_>], out: &mut Vec<u8>) {
    put_u64(out, ops.len() as u64);
    crate::tally::ops_encoded(ops.len());
    for op in ops {
        encode_op(op, out);
    }
}

/// An encoded op list built one op at a time, as [`encode_ops`] writes it
/// (an event loop's turn of writes, without a buffer per op).
#[derive(Debug, Default)]
pub struct OpList {
    bytes: Vec<u8>,
    count: u64,
}

impl OpList {
    pub fn push(&mut self, op: &Op<'_>) {
        if self.bytes.is_empty() {
            // Room for the count, written by `finish`.
            self.bytes.extend_from_slice(&[0; 8]);
        }
        encode_op(op, &mut self.bytes);
        crate::tally::ops_encoded(1);
        self.count += 1;
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded list.
    pub fn finish(mut self) -> Vec<u8> {
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&[0; 8]);
        }
        self.bytes[..8].copy_from_slice(&self.count.to_le_bytes());
        self.bytes
    }
}

/// The ops `bytes` holds, borrowing from it.
pub fn decode_ops(bytes: &[u8]) -> Decoded<Vec<Op<'_>>> {
    let mut r = Reader { b: bytes };
    let n = r.count()?;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        ops.push(r.op()?);
    }
    r.end()?;
    crate::tally::ops_decoded(n);
    Ok(ops)
}

/// Appends the encoding of one op's result.
pub fn encode_result(result: &Result<Outcome, Error>, out: &mut Vec<u8>) {
    crate::tally::results_encoded(1);
    match result {
        Ok(o) => {
            out.push(0);
            encode_outcome(o, out);
        }
        Err(e) => {
            out.push(1);
            encode_error(e, out);
        }
    }
}

/// The results `bytes` holds.
pub fn decode_results(bytes: &[u8]) -> Decoded<Vec<Result<Outcome, Error>>> {
    let mut r = Reader { b: bytes };
    let mut out = Vec::new();
    while !r.b.is_empty() {
        out.push(match r.u8()? {
            0 => Ok(r.outcome()?),
            1 => Err(r.error()?),
            _ => return Err(DecodeError("result tag")),
        });
    }
    crate::tally::results_decoded(out.len());
    Ok(out)
}

/// How many ops an encoded list says it holds, from its header alone (the
/// ops are decoded where the entry is applied; one that does not decode is
/// skipped there by every replica alike). A list too short to hold its
/// ops' tags is refused.
pub fn list_count(bytes: &[u8]) -> Decoded<usize> {
    let head: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError("op count"))?;
    let n = u64::from_le_bytes(head);
    if n > (bytes.len() - 8) as u64 {
        return Err(DecodeError("op count"));
    }
    Ok(n as usize)
}

/// How many ops an encoded list holds, checking that every one decodes
/// (a malformed list in an entry would stop every replica applying it).
pub fn op_count(bytes: &[u8]) -> Decoded<usize> {
    decode_ops(bytes).map(|ops| ops.len())
}

/// Joins encoded op lists, each checked by [`op_count`], into one, in
/// order (group commit: many proposals, one entry).
pub fn join_ops<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![0u8; 8];
    let mut total = 0u64;
    for part in parts {
        let (count, ops) = part.split_at(8);
        total += u64::from_le_bytes(count.try_into().expect("8 bytes"));
        out.extend_from_slice(ops);
    }
    out[..8].copy_from_slice(&total.to_le_bytes());
    out
}

/// Cuts the results of a joined entry (see [`join_ops`]) back into each
/// part's results: `counts[i]` results for part `i`.
pub fn split_results(bytes: &[u8], counts: &[usize]) -> Decoded<Vec<Vec<u8>>> {
    let mut r = Reader { b: bytes };
    let mut out = Vec::with_capacity(counts.len());
    for &n in counts {
        let start = bytes.len() - r.b.len();
        for _ in 0..n {
            match r.u8()? {
                0 => {
                    r.outcome()?;
                }
                1 => {
                    r.error()?;
                }
                _ => return Err(DecodeError("result tag")),
            }
        }
        out.push(bytes[start..bytes.len() - r.b.len()].to_vec());
    }
    r.end()?;
    Ok(out)
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

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

fn encode_op(op: &Op<'_>, out: &mut Vec<u8>) {
    match op {
        &Op::Put {
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
        &Op::Delete {
            key,
            cond,
            return_old,
        } => {
            out.push(2);
            put_bytes(out, key);
            put_cond(out, cond);
            out.push(u8::from(return_old));
        }
        &Op::Append {
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
        &Op::Incr {
            key,
            arith,
            on_missing,
            cond,
            expiry,
        } => {
            out.push(4);
            put_bytes(out, key);
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
            put_on_missing(out, on_missing);
            put_cond(out, cond);
            put_expiry(out, expiry);
        }
        &Op::Expire {
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
        Op::Atomic(writes) => {
            out.push(6);
            put_u64(out, writes.len() as u64);
            for w in writes.iter() {
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
        }
        Op::Clear => out.push(7),
        &Op::Reap { key, version } => {
            out.push(8);
            put_bytes(out, key);
            put_u64(out, version.get());
        }
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
        &Op::Move {
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
        &Op::SetRange { key, offset, value } => {
            out.push(13);
            put_bytes(out, key);
            put_u64(out, offset);
            put_bytes(out, value);
        }
        &Op::SetBit { key, bit, on } => {
            out.push(14);
            put_bytes(out, key);
            put_u64(out, bit);
            out.push(u8::from(on));
        }
        &Op::IncrFloat { key, by } => {
            out.push(15);
            put_bytes(out, key);
            put_bytes(out, by);
        }
        Op::Check(c) => {
            out.push(12);
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
        // `Op` is non-exhaustive: a new kind needs a tag here before it
        // can be replicated.
        _ => unreachable!("an op kind without an encoding: {op:?}"),
    }
}

const CMP_OPS: [CmpOp; 6] = [
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

fn put_status(out: &mut Vec<u8>, s: Status) {
    out.push(match s {
        Status::Done => 0,
        Status::Missing => 1,
        Status::Present => 2,
        Status::Mismatch => 3,
    });
}

fn put_version(out: &mut Vec<u8>, v: Option<Version>) {
    put_u64(out, v.map_or(0, Version::get));
}

fn put_item(out: &mut Vec<u8>, item: Option<&Item>) {
    match item {
        None => out.push(0),
        Some(it) => {
            out.push(1);
            put_bytes(out, &it.key);
            put_bytes(out, &it.value);
            put_u64(out, it.version.get());
            put_u64(out, it.expires_at_ms.unwrap_or(0));
            put_u64(out, u64::from(it.flags));
        }
    }
}

fn encode_outcome(o: &Outcome, out: &mut Vec<u8>) {
    match o {
        Outcome::Put {
            status,
            version,
            old,
        } => {
            out.push(1);
            put_status(out, *status);
            put_version(out, *version);
            put_item(out, old.as_ref());
        }
        Outcome::Delete {
            status,
            version,
            old,
        } => {
            out.push(2);
            put_status(out, *status);
            put_version(out, *version);
            put_item(out, old.as_ref());
        }
        Outcome::Append {
            status,
            version,
            len,
        } => {
            out.push(3);
            put_status(out, *status);
            put_version(out, *version);
            put_u64(out, *len as u64);
        }
        Outcome::Incr {
            status,
            version,
            number,
            created,
            expires_at_ms,
        } => {
            out.push(4);
            put_status(out, *status);
            put_version(out, *version);
            match number {
                Number::Signed(n) => {
                    out.push(0);
                    put_u64(out, *n as u64);
                }
                Number::Unsigned(n) => {
                    out.push(1);
                    put_u64(out, *n);
                }
            }
            out.push(u8::from(*created));
            put_u64(out, expires_at_ms.unwrap_or(0));
        }
        Outcome::Expire {
            status,
            version,
            item,
        } => {
            out.push(5);
            put_status(out, *status);
            put_version(out, *version);
            put_item(out, item.as_ref());
        }
        Outcome::Atomic { versions } => {
            out.push(6);
            put_u64(out, versions.len() as u64);
            for v in versions {
                put_version(out, *v);
            }
        }
        Outcome::Clear => out.push(7),
        Outcome::Reap { status, version } => {
            out.push(8);
            put_status(out, *status);
            put_version(out, *version);
        }
        Outcome::Read { items } => {
            out.push(9);
            put_u64(out, items.len() as u64);
            for it in items {
                put_item(out, it.as_ref());
            }
        }
        Outcome::Scan { items, count } => {
            out.push(15);
            put_u64(out, items.len() as u64);
            for it in items {
                put_item(out, Some(it));
            }
            put_u64(out, *count);
        }
        Outcome::Txn { results } => {
            out.push(10);
            match results {
                None => out.push(0),
                Some(results) => {
                    out.push(1);
                    put_u64(out, results.len() as u64);
                    for r in results {
                        encode_result(r, out);
                    }
                }
            }
        }
        Outcome::Move { status } => {
            out.push(11);
            put_status(out, *status);
        }
        Outcome::Check => out.push(12),
        Outcome::SetBit { old, version } => {
            out.push(13);
            out.push(u8::from(*old));
            put_version(out, *version);
        }
        Outcome::IncrFloat { value, version } => {
            out.push(14);
            put_bytes(out, value);
            put_version(out, *version);
        }
        _ => unreachable!("an outcome kind without an encoding: {o:?}"),
    }
}

/// Errors an apply can answer, by code; anything else travels as its text
/// under [`Error::InvalidConfig`]'s neighbour code 255 and reads back as
/// `Error::Corrupt` with that text (it cannot happen in apply, which only
/// refuses what the values in the store make impossible).
fn encode_error(e: &Error, out: &mut Vec<u8>) {
    match e {
        Error::KeyEmpty => out.push(1),
        Error::KeyTooLong { len, max } => {
            out.push(2);
            put_u64(out, *len as u64);
            put_u64(out, *max as u64);
        }
        Error::ValueTooLarge { len, max } => {
            out.push(3);
            put_u64(out, *len as u64);
            put_u64(out, *max as u64);
        }
        Error::NotAnInteger => out.push(4),
        Error::Overflow => out.push(5),
        Error::NotInTransaction(why) => {
            out.push(6);
            put_bytes(out, why.as_bytes());
        }
        Error::NotAFloat => out.push(7),
        Error::NotFinite => out.push(8),
        other => {
            out.push(255);
            put_bytes(out, other.to_string().as_bytes());
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        if self.b.len() < n {
            return Err(DecodeError("truncated"));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Decoded<u8> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bool")),
        }
    }
    fn u64(&mut self) -> Decoded<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A count of things that each take at least one byte.
    fn count(&mut self) -> Decoded<usize> {
        let n = self.u64()?;
        if n > self.b.len() as u64 {
            return Err(DecodeError("count"));
        }
        Ok(n as usize)
    }
    fn bytes(&mut self) -> Decoded<&'a [u8]> {
        let n = self.u64()?;
        if n > self.b.len() as u64 {
            return Err(DecodeError("length"));
        }
        self.take(n as usize)
    }
    fn end(&self) -> Decoded<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
    fn expiry(&mut self) -> Decoded<Expiry> {
        match self.u8()? {
            0 => Ok(Expiry::Never),
            1 => Ok(Expiry::AtMs(self.u64()?)),
            2 => Ok(Expiry::Keep),
            _ => Err(DecodeError("expiry")),
        }
    }
    fn flags(&mut self) -> Decoded<Flags> {
        match self.u8()? {
            0 => u32::try_from(self.u64()?)
                .map(Flags::Set)
                .map_err(|_| DecodeError("flags")),
            1 => Ok(Flags::Keep),
            _ => Err(DecodeError("flags")),
        }
    }
    fn cond(&mut self) -> Decoded<Cond> {
        match self.u8()? {
            0 => Ok(Cond::Any),
            1 => Ok(Cond::Absent),
            2 => Ok(Cond::Present),
            3 => Ok(Cond::Version(Version(self.u64()?))),
            _ => Err(DecodeError("condition")),
        }
    }
    fn on_missing(&mut self) -> Decoded<OnMissing<'a>> {
        match self.u8()? {
            0 => Ok(OnMissing::Fail),
            1 => Ok(OnMissing::Empty),
            2 => Ok(OnMissing::Create {
                value: self.bytes()?,
                expiry: self.expiry()?,
                flags: u32::try_from(self.u64()?).map_err(|_| DecodeError("flags"))?,
            }),
            _ => Err(DecodeError("on missing")),
        }
    }
    fn op(&mut self) -> Decoded<Op<'a>> {
        Ok(match self.u8()? {
            1 => Op::Put {
                key: self.bytes()?,
                value: self.bytes()?,
                expiry: self.expiry()?,
                flags: self.flags()?,
                cond: self.cond()?,
                return_old: self.bool()?,
            },
            2 => Op::Delete {
                key: self.bytes()?,
                cond: self.cond()?,
                return_old: self.bool()?,
            },
            3 => Op::Append {
                key: self.bytes()?,
                value: self.bytes()?,
                front: self.bool()?,
                on_missing: self.on_missing()?,
                cond: self.cond()?,
            },
            4 => {
                let key = self.bytes()?;
                let arith = match self.u8()? {
                    0 => Arith::Signed(self.u64()? as i64),
                    1 => Arith::Unsigned {
                        delta: self.u64()?,
                        decrement: self.bool()?,
                    },
                    _ => return Err(DecodeError("arith")),
                };
                Op::Incr {
                    key,
                    arith,
                    on_missing: self.on_missing()?,
                    cond: self.cond()?,
                    expiry: self.expiry()?,
                }
            }
            5 => {
                let key = self.bytes()?;
                let expiry = self.expiry()?;
                let bits = self.u8()?;
                if bits >> 6 != 0 {
                    return Err(DecodeError("expire bits"));
                }
                let bit = |i: u8| bits >> i & 1 == 1;
                Op::Expire {
                    key,
                    expiry,
                    when: ExpireWhen {
                        nx: bit(0),
                        xx: bit(1),
                        gt: bit(2),
                        lt: bit(3),
                    },
                    past: bit(4),
                    return_item: bit(5),
                }
            }
            6 => {
                let n = self.count()?;
                let mut writes = Vec::with_capacity(n);
                for _ in 0..n {
                    writes.push(match self.u8()? {
                        0 => AtomicWrite::Put {
                            key: self.bytes()?,
                            value: self.bytes()?,
                            expiry: self.expiry()?,
                        },
                        1 => AtomicWrite::Delete { key: self.bytes()? },
                        _ => return Err(DecodeError("atomic write")),
                    });
                }
                Op::Atomic(Cow::Owned(writes))
            }
            7 => Op::Clear,
            8 => Op::Reap {
                key: self.bytes()?,
                version: Version(self.u64()?),
            },
            9 => {
                let n = self.count()?;
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    keys.push(self.bytes()?);
                }
                Op::Read {
                    keys: Cow::Owned(keys),
                }
            }
            10 => {
                let n = self.count()?;
                let mut watch = Vec::with_capacity(n);
                for _ in 0..n {
                    watch.push(Watch {
                        key: self.bytes()?,
                        version: self.version()?,
                    });
                }
                let n = self.count()?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    ops.push(self.op()?);
                }
                Op::Txn {
                    watch: Cow::Owned(watch),
                    ops: Cow::Owned(ops),
                }
            }
            11 => {
                let (from, to) = (self.bytes()?, self.bytes()?);
                let bits = self.u8()?;
                if bits > 3 {
                    return Err(DecodeError("move flags"));
                }
                Op::Move {
                    from,
                    to,
                    replace: bits & 1 != 0,
                    keep_source: bits & 2 != 0,
                }
            }
            12 => Op::Check(match self.u8()? {
                0 => Check::Version {
                    key: self.bytes()?,
                    op: self.cmp()?,
                    version: self.u64()?,
                },
                1 => Check::Value {
                    key: self.bytes()?,
                    op: self.cmp()?,
                    value: self.bytes()?,
                },
                2 => Check::Count {
                    start: self.bound()?,
                    end: self.bound()?,
                    op: self.cmp()?,
                    n: self.u64()?,
                },
                3 => Check::MaxVersion {
                    start: self.bound()?,
                    end: self.bound()?,
                    op: self.cmp()?,
                    version: self.u64()?,
                },
                _ => return Err(DecodeError("check kind")),
            }),
            13 => Op::SetRange {
                key: self.bytes()?,
                offset: self.u64()?,
                value: self.bytes()?,
            },
            14 => Op::SetBit {
                key: self.bytes()?,
                bit: self.u64()?,
                on: self.bool()?,
            },
            15 => Op::IncrFloat {
                key: self.bytes()?,
                by: self.bytes()?,
            },
            16 => {
                let owned = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
                let mut range = combkv::Range::new(owned(self.bound()?), owned(self.bound()?));
                range.limit = match self.u64()? {
                    0 => None,
                    n => Some(usize::try_from(n - 1).map_err(|_| DecodeError("limit"))?),
                };
                let flags = self.u8()?;
                range.reverse = flags & 1 != 0;
                range.floor_start = flags & 2 != 0;
                let what = match self.u8()? {
                    0 => ScanWhat::Items,
                    1 => ScanWhat::Keys,
                    2 => ScanWhat::Count,
                    _ => return Err(DecodeError("scan kind")),
                };
                Op::Scan {
                    range: Cow::Owned(range),
                    what,
                    max_bytes: self.u64()?,
                }
            }
            _ => return Err(DecodeError("op tag")),
        })
    }
    fn cmp(&mut self) -> Decoded<CmpOp> {
        CMP_OPS
            .get(usize::from(self.u8()?))
            .copied()
            .ok_or(DecodeError("comparison"))
    }
    fn bound(&mut self) -> Decoded<Bound<&'a [u8]>> {
        Ok(match self.u8()? {
            0 => Bound::Unbounded,
            1 => Bound::Included(self.bytes()?),
            2 => Bound::Excluded(self.bytes()?),
            _ => return Err(DecodeError("bound")),
        })
    }
    fn status(&mut self) -> Decoded<Status> {
        Ok(match self.u8()? {
            0 => Status::Done,
            1 => Status::Missing,
            2 => Status::Present,
            3 => Status::Mismatch,
            _ => return Err(DecodeError("status")),
        })
    }
    fn version(&mut self) -> Decoded<Option<Version>> {
        Ok(match self.u64()? {
            0 => None,
            v => Some(Version(v)),
        })
    }
    fn item(&mut self) -> Decoded<Option<Item>> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(Item {
                key: self.bytes()?.to_vec().into(),
                value: self.bytes()?.to_vec().into(),
                version: Version(self.u64()?),
                expires_at_ms: Some(self.u64()?).filter(|&t| t != 0),
                flags: u32::try_from(self.u64()?).map_err(|_| DecodeError("item flags"))?,
            }),
            _ => return Err(DecodeError("item")),
        })
    }
    fn outcome(&mut self) -> Decoded<Outcome> {
        Ok(match self.u8()? {
            1 => Outcome::Put {
                status: self.status()?,
                version: self.version()?,
                old: self.item()?,
            },
            2 => Outcome::Delete {
                status: self.status()?,
                version: self.version()?,
                old: self.item()?,
            },
            3 => Outcome::Append {
                status: self.status()?,
                version: self.version()?,
                len: self.u64()? as usize,
            },
            4 => {
                let status = self.status()?;
                let version = self.version()?;
                let number = match self.u8()? {
                    0 => Number::Signed(self.u64()? as i64),
                    1 => Number::Unsigned(self.u64()?),
                    _ => return Err(DecodeError("number")),
                };
                Outcome::Incr {
                    status,
                    version,
                    number,
                    created: self.bool()?,
                    expires_at_ms: Some(self.u64()?).filter(|&t| t != 0),
                }
            }
            5 => Outcome::Expire {
                status: self.status()?,
                version: self.version()?,
                item: self.item()?,
            },
            6 => {
                let n = self.count()?;
                let mut versions = Vec::with_capacity(n);
                for _ in 0..n {
                    versions.push(self.version()?);
                }
                Outcome::Atomic { versions }
            }
            7 => Outcome::Clear,
            8 => Outcome::Reap {
                status: self.status()?,
                version: self.version()?,
            },
            9 => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.item()?);
                }
                Outcome::Read { items }
            }
            15 => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.item()?.ok_or(DecodeError("scanned item"))?);
                }
                Outcome::Scan {
                    items,
                    count: self.u64()?,
                }
            }
            10 => match self.u8()? {
                0 => Outcome::Txn { results: None },
                1 => {
                    let n = self.count()?;
                    let mut results = Vec::with_capacity(n);
                    for _ in 0..n {
                        results.push(match self.u8()? {
                            0 => Ok(self.outcome()?),
                            1 => Err(self.error()?),
                            _ => return Err(DecodeError("result tag")),
                        });
                    }
                    Outcome::Txn {
                        results: Some(results),
                    }
                }
                _ => return Err(DecodeError("transaction outcome")),
            },
            11 => Outcome::Move {
                status: self.status()?,
            },
            12 => Outcome::Check,
            13 => Outcome::SetBit {
                old: self.bool()?,
                version: self.version()?,
            },
            14 => Outcome::IncrFloat {
                value: self.bytes()?.to_vec(),
                version: self.version()?,
            },
            _ => return Err(DecodeError("outcome tag")),
        })
    }
    fn error(&mut self) -> Decoded<Error> {
        Ok(match self.u8()? {
            1 => Error::KeyEmpty,
            2 => Error::KeyTooLong {
                len: self.u64()? as usize,
                max: self.u64()? as usize,
            },
            3 => Error::ValueTooLarge {
                len: self.u64()? as usize,
                max: self.u64()? as usize,
            },
            4 => Error::NotAnInteger,
            5 => Error::Overflow,
            6 => Error::NotInTransaction(String::from_utf8_lossy(self.bytes()?).into_owned()),
            7 => Error::NotAFloat,
            8 => Error::NotFinite,
            255 => Error::Corrupt(String::from_utf8_lossy(self.bytes()?).into_owned()),
            _ => return Err(DecodeError("error code")),
        })
    }
}

#[cfg(test)]
mod tests {
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
        let ops = vec![
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
            Op::Atomic(Cow::Borrowed(&writes)),
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
        ];
        let mut ops = ops;
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
        let item = Item {
            key: b"k".to_vec().into(),
            value: b"v".to_vec().into(),
            version: Version(4),
            expires_at_ms: Some(8),
            flags: 3,
        };
        let read = item.clone();
        let results = vec![
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
            Ok(Outcome::Scan {
                items: vec![read.clone()],
                count: 3,
            }),
        ];
        let mut results = results;
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
}
