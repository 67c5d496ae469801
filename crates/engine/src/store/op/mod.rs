//! Decided writes: what a write command does, as data, and its application.
//!
//! A protocol turns a write command into an [`Op`] (the *decision*): it
//! validates the arguments and resolves everything that depends on the
//! moment it is decided, relative expiry times above all, into absolute
//! values. Applying the op ([`Store::apply`], [`Session::apply`]) is then a
//! deterministic function of the op and the key's current item: the same op
//! applied to the same state gives the same result and the same new state.
//! That is what lets an op travel, in a replicated log for instance, and be
//! applied again elsewhere.
//!
//! Each op is one atomic step: the condition is checked and the write made
//! with the key locked against other writers.

mod apply;
mod bounds;
mod float;
#[cfg(test)]
mod tests;
mod txn;
#[cfg(test)]
mod txn_tests;

use std::borrow::Cow;

pub use float::is_float;

use crate::Error;
use crate::tree::node::ItemRef;
use crate::types::{AtomicWrite, Expiry, Flags, Item, Version};
#[cfg(doc)]
use crate::{Session, Store};

/// The condition a single-key write holds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cond {
    /// Whatever the key holds.
    #[default]
    Any,
    /// Only if the key is absent (SET NX, memcached add).
    Absent,
    /// Only if the key is present (SET XX, memcached replace).
    Present,
    /// Only if the key's item has this version (compare-and-swap).
    Version(Version),
}

/// Why a conditional write did nothing, or that it did its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The write happened (or, for a delete, found its key).
    Done,
    /// The key is absent, and the op needed it present.
    Missing,
    /// The key is present, and the op needed it absent.
    Present,
    /// The key is present with another version than the op's condition.
    Mismatch,
}

impl Status {
    /// What `cond` says of the item `cur` (`Done`: it holds).
    fn of(cond: Cond, cur: Option<&ItemRef<'_>>) -> Status {
        match (cond, cur) {
            (Cond::Any, _) | (Cond::Absent, None) => Status::Done,
            (Cond::Present, Some(_)) => Status::Done,
            (Cond::Version(v), Some(c)) if c.version == v.0 => Status::Done,
            (Cond::Absent, Some(_)) => Status::Present,
            (Cond::Present | Cond::Version(_), None) => Status::Missing,
            (Cond::Version(_), Some(_)) => Status::Mismatch,
        }
    }
}

/// What an [`Op::Scan`] keeps of each item it visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanWhat {
    /// The whole item.
    Items,
    /// The item without its value (left empty).
    Keys,
    /// Nothing: only the count.
    Count,
}

/// How [`Op::Incr`] reads and changes a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// Redis: the value is a signed 64-bit decimal in Redis's strict syntax
    /// (an absent key reads as 0); a result outside `i64` is
    /// [`Error::Overflow`], a value that is no such number
    /// [`Error::NotAnInteger`].
    Signed(i64),
    /// memcached: the value is an unsigned 64-bit decimal
    /// ([`parse_unsigned`]); increments wrap at 2^64, decrements stop at 0.
    /// A value that is no such number is [`Error::NotAnInteger`].
    Unsigned {
        /// How much to add, or with `decrement`, to take away.
        delta: u64,
        /// Subtract `delta` (memcached decr, stopping at 0) instead of
        /// adding it (incr, wrapping at 2^64).
        decrement: bool,
    },
}

/// A number an [`Op::Incr`] left in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// The result of an [`Arith::Signed`] change (Redis INCR family).
    Signed(i64),
    /// The result of an [`Arith::Unsigned`] change (memcached incr/decr).
    Unsigned(u64),
}

/// What [`Op::Incr`] and [`Op::Append`] do when the key is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissing<'a> {
    /// Nothing: the result is [`Status::Missing`].
    Fail,
    /// Work on an empty value (APPEND) or on 0 (INCR), with no expiry.
    Empty,
    /// Store this value with this expiry and client flags, and apply no
    /// delta (memcached meta `N` flag: the value is the initial one).
    Create {
        /// The initial value, stored as it is.
        value: &'a [u8],
        /// The new item's expiry.
        expiry: Expiry,
        /// The new item's client flags (memcached's opaque 32 bits).
        flags: u32,
    },
}

/// The EXPIRE family's conditions on the current expiry (Redis 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpireWhen {
    /// Only if the key has no expiry.
    pub nx: bool,
    /// Only if the key has an expiry.
    pub xx: bool,
    /// Only if the new expiry is later than the current one (none counts
    /// as infinitely late).
    pub gt: bool,
    /// Only if the new expiry is earlier than the current one.
    pub lt: bool,
}

/// A decided write: the data of one write command, every relative time
/// already resolved. Borrows its keys and values (from a request buffer, or
/// from a log record it was decoded from).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op<'a> {
    /// Store `value` under `key` if `cond` holds. `return_old`: the outcome
    /// carries the item the key held (SET ... GET).
    Put {
        /// The key written.
        key: &'a [u8],
        /// The value stored, replacing the whole current value.
        value: &'a [u8],
        /// The stored item's expiry ([`Expiry::Keep`]: the current one).
        expiry: Expiry,
        /// The stored item's client flags ([`Flags::Keep`]: the current
        /// ones).
        flags: Flags,
        /// What the key must hold for the write to happen.
        cond: Cond,
        /// Return the item the key held, written or not.
        return_old: bool,
    },
    /// Remove `key` if `cond` holds (and it is present).
    Delete {
        /// The key removed.
        key: &'a [u8],
        /// What the key must hold for the delete to happen.
        cond: Cond,
        /// Return the item deleted.
        return_old: bool,
    },
    /// Add `value` after (or with `front`, before) the current value,
    /// keeping the item's expiry and flags, if `cond` holds of the present
    /// item; an absent key is handled by `on_missing` alone, whatever
    /// `cond` says (memcached creates with `N` even under a CAS `C`).
    Append {
        /// The key whose value grows.
        key: &'a [u8],
        /// The bytes added.
        value: &'a [u8],
        /// Add `value` before the current value (memcached prepend)
        /// instead of after it.
        front: bool,
        /// What to do when the key is absent.
        on_missing: OnMissing<'a>,
        /// What a present key's item must satisfy.
        cond: Cond,
    },
    /// Change the number stored at `key`, if `cond` holds of the present
    /// item (an absent key: `on_missing` alone decides). `expiry` is the
    /// updated item's expiry ([`Expiry::Keep`] for INCR).
    Incr {
        /// The key holding the number.
        key: &'a [u8],
        /// How the number is read and by how much it changes.
        arith: Arith,
        /// What to do when the key is absent.
        on_missing: OnMissing<'a>,
        /// What a present key's item must satisfy.
        cond: Cond,
        /// The updated item's expiry.
        expiry: Expiry,
    },
    /// Set (`Expiry::AtMs`) or remove (`Expiry::Never`) the expiry of a
    /// present key if `when` holds. `past`: the deadline had passed when
    /// the op was decided, so the key is deleted instead (as Redis does).
    /// `return_item`: the outcome carries the item as it is afterwards
    /// (memcached gat), or as it was if `when` failed or the key was
    /// deleted as past (GETEX).
    Expire {
        /// The key whose expiry changes.
        key: &'a [u8],
        /// The new expiry: [`Expiry::AtMs`] or [`Expiry::Never`].
        expiry: Expiry,
        /// Conditions on the current expiry (EXPIRE NX/XX/GT/LT).
        when: ExpireWhen,
        /// The deadline had passed when decided: delete the key instead.
        past: bool,
        /// Return the item (see above for which state of it).
        return_item: bool,
    },
    /// Several puts and deletes as one atomic step (MSET, multi-key DEL).
    Atomic(Cow<'a, [AtomicWrite<'a>]>),
    /// Remove every key (FLUSHALL).
    Clear,
    /// Remove `key` if its item still has `version` and has expired at the
    /// op's clock: the expiry sweep of a replicated store, proposed by its
    /// leader so that every replica deletes the same items.
    Reap {
        /// The key of the expired item.
        key: &'a [u8],
        /// The version the leader saw expired; another means the key was
        /// written since, and the reap does nothing.
        version: Version,
    },
    /// Copy the item of `from` (value, expiry, client flags) to `to`, and
    /// unless `keep_source` delete `from`, as one atomic, isolated step
    /// (RENAME, RENAMENX, COPY). An existing `to` is overwritten only with
    /// `replace`. `Missing`: `from` is absent; `Present`: `to` exists and
    /// `replace` is not set (also when `from` = `to`, which is otherwise
    /// `Done` without a write).
    Move {
        /// The source key.
        from: &'a [u8],
        /// The destination key.
        to: &'a [u8],
        /// Overwrite an existing `to` (RENAME, COPY ... REPLACE) rather
        /// than refuse with `Present` (RENAMENX, COPY).
        replace: bool,
        /// Leave `from` in place (COPY) instead of deleting it (RENAME).
        keep_source: bool,
    },
    /// Overwrite the value from byte `offset` with `value`, zero bytes
    /// filling any gap, keeping expiry and flags (SETRANGE). An absent key
    /// is created without expiry, unless `value` is empty: then nothing is
    /// written (`Missing`, or `Done` with the present length). Outcome:
    /// [`Outcome::Append`] with the length afterwards.
    SetRange {
        /// The key whose value is overwritten.
        key: &'a [u8],
        /// The byte at which `value` starts.
        offset: u64,
        /// The bytes written from `offset` on.
        value: &'a [u8],
    },
    /// Set (`on`) or clear bit `bit` of the value (bit 0 is the most
    /// significant bit of byte 0), growing it with zero bytes, keeping
    /// expiry and flags (SETBIT).
    SetBit {
        /// The key whose value holds the bit.
        key: &'a [u8],
        /// The bit's offset, counted from the most significant bit of
        /// byte 0.
        bit: u64,
        /// Set the bit (1) rather than clear it (0).
        on: bool,
    },
    /// Add the decimal float `by` to the value (an absent key reads as 0),
    /// keeping expiry and flags (INCRBYFLOAT; exact decimal arithmetic,
    /// the result printed to 17 decimal places: see `float`). A value or
    /// increment that is no such float is [`Error::NotAFloat`], an
    /// infinite result [`Error::NotFinite`].
    IncrFloat {
        /// The key holding the float.
        key: &'a [u8],
        /// The increment, as the client's decimal text.
        by: &'a [u8],
    },
    /// A condition of the transaction it opens ([`Op::Txn`]; only there,
    /// before every other op): checked with the transaction's other
    /// conditions, and if it fails nothing is applied (the outcome is a
    /// transaction without results, as for a changed watched key).
    Check(Check<'a>),
    /// Read the newest live item of each key: only inside [`Op::Txn`],
    /// where it sees the state the transaction's earlier ops left.
    Read {
        /// The keys read, in the order of the outcome's items.
        keys: Cow<'a, [&'a [u8]]>,
    },
    /// Read a range's newest live items, in the range's order, direction
    /// and limit: only inside [`Op::Txn`], like [`Op::Read`]. `what` says
    /// what is kept of each; the read stops once the keys and values kept
    /// pass `max_bytes` (the item that passes it included, so a caller
    /// that bounds its reply by the same number sees it passed).
    Scan {
        /// The keys read, with the read's direction and limit.
        range: Cow<'a, crate::Range>,
        /// What is kept of each item visited.
        what: ScanWhat,
        /// The budget of key and value bytes kept, after which the read
        /// stops.
        max_bytes: u64,
    },
    /// A transaction (Redis's EXEC): if every watched key's live item
    /// still has the version given (`None`: absent), apply `ops` in order
    /// as one atomic, isolated step: no other write lands between them,
    /// and no reader, scan, snapshot or recovery sees part of them. An op
    /// refused for what it asked ([`Error::is_refusal`]) reports its error
    /// and the others still apply, as in Redis. It may not hold
    /// [`Op::Clear`]; a `Txn` inside one (MSETNX inside MULTI) checks its
    /// watches and applies its ops within the outer one.
    Txn {
        /// The keys whose versions must be unchanged for anything to apply.
        watch: Cow<'a, [Watch<'a>]>,
        /// The ops applied, in order: [`Op::Check`]s first, then writes
        /// and reads.
        ops: Cow<'a, [Op<'a>]>,
    },
}

impl Op<'_> {
    /// Whether the op can leave the store holding more than before: what
    /// a node above its memory limit refuses ([`Error::NoMemory`]), as
    /// Redis refuses its `denyoom` commands (SET, APPEND, INCR, SETRANGE,
    /// SETBIT, INCRBYFLOAT, MSET, COPY; a transaction holding any of them,
    /// whole). Deletes, expiries, RENAME (it moves an item), reads and
    /// FLUSHALL go through.
    pub fn may_add_data(&self) -> bool {
        match self {
            Op::Put { .. }
            | Op::Append { .. }
            | Op::Incr { .. }
            | Op::SetRange { .. }
            | Op::SetBit { .. }
            | Op::IncrFloat { .. } => true,
            Op::Move { keep_source, .. } => *keep_source,
            Op::Atomic(writes) => writes.iter().any(|w| matches!(w, AtomicWrite::Put { .. })),
            Op::Txn { ops, .. } => ops.iter().any(Op::may_add_data),
            Op::Delete { .. }
            | Op::Expire { .. }
            | Op::Clear
            | Op::Reap { .. }
            | Op::Check(_)
            | Op::Read { .. }
            | Op::Scan { .. } => false,
        }
    }
}

/// How an [`Op::Check`] compares what the store holds (left) with the
/// check's operand (right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
}

impl CmpOp {
    /// `a op b`.
    pub fn holds<T: Ord + ?Sized>(self, a: &T, b: &T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// What an [`Op::Check`] compares: a key's item version or value, or a
/// range's item count or newest item version, each as it stands when the
/// transaction begins (its own writes come after its checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<'a> {
    /// The key's live item version (0: absent).
    Version {
        /// The key whose item version is compared.
        key: &'a [u8],
        /// How the item's version compares with `version`.
        op: CmpOp,
        /// The right operand.
        version: u64,
    },
    /// The key's value, bytewise; an absent key fails every comparison.
    Value {
        /// The key whose value is compared.
        key: &'a [u8],
        /// How the stored value compares with `value`.
        op: CmpOp,
        /// The right operand.
        value: &'a [u8],
    },
    /// How many live items the range holds.
    Count {
        /// The range's lower bound.
        start: std::ops::Bound<&'a [u8]>,
        /// The range's upper bound.
        end: std::ops::Bound<&'a [u8]>,
        /// How the range's count compares with `n`.
        op: CmpOp,
        /// The right operand.
        n: u64,
    },
    /// The newest live item version in the range (0: none): with `Le` and
    /// a version read earlier, "no item in the range was written since"
    /// (a deletion shows in `Count`).
    MaxVersion {
        /// The range's lower bound.
        start: std::ops::Bound<&'a [u8]>,
        /// The range's upper bound.
        end: std::ops::Bound<&'a [u8]>,
        /// How the range's newest version compares with `version`.
        op: CmpOp,
        /// The right operand.
        version: u64,
    },
}

/// A key a transaction watches, and the version its live item had when
/// watched (`None`: absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch<'a> {
    /// The key watched.
    pub key: &'a [u8],
    /// Its live item's version when watched (`None`: absent).
    pub version: Option<Version>,
}

/// What applying an [`Op`] did. `version` is the version of the write it
/// made (`None`: it wrote nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Of an [`Op::Put`].
    Put {
        /// `Done`, or which part of `cond` failed.
        status: Status,
        /// The version written.
        version: Option<Version>,
        /// With `return_old`: the item before the write.
        old: Option<Item>,
    },
    /// Of an [`Op::Delete`].
    Delete {
        /// `Done` (deleted), or why not.
        status: Status,
        /// The version of the delete (its tombstone).
        version: Option<Version>,
        /// With `return_old`: the item deleted.
        old: Option<Item>,
    },
    /// Of an [`Op::Append`] or [`Op::SetRange`].
    Append {
        /// `Done`, or why nothing was written.
        status: Status,
        /// The version written.
        version: Option<Version>,
        /// The value's length afterwards.
        len: usize,
    },
    /// Of an [`Op::Incr`].
    Incr {
        /// `Done`, or why nothing was written.
        status: Status,
        /// The version written.
        version: Option<Version>,
        /// The number stored afterwards (meaningful when `Done`).
        number: Number,
        /// `OnMissing::Create` made the item.
        created: bool,
        /// The item's expiry afterwards (unix ms).
        expires_at_ms: Option<u64>,
    },
    /// Of an [`Op::Expire`].
    Expire {
        /// `Done`: the expiry changed (or the key was deleted as past);
        /// `Missing`: absent; `Mismatch`: a condition of `when` failed.
        status: Status,
        /// The version written.
        version: Option<Version>,
        /// With `return_item`: the item as it is afterwards (see
        /// `Op::Expire`).
        item: Option<Item>,
    },
    /// Of an [`Op::Atomic`].
    Atomic {
        /// One result per write: the version it took, or `None` for a
        /// delete whose key was absent.
        versions: Vec<Option<Version>>,
    },
    /// Of an [`Op::Clear`]: every key removed.
    Clear,
    /// Of an [`Op::Reap`].
    Reap {
        /// `Done`: deleted; `Mismatch`: another version, or not expired;
        /// `Missing`: absent.
        status: Status,
        /// The version of the delete.
        version: Option<Version>,
    },
    /// Of an [`Op::Read`].
    Read {
        /// Each key's live item (`None`: absent), in the op's order.
        items: Vec<Option<Item>>,
    },
    /// Of an [`Op::Scan`].
    Scan {
        /// The items kept, as the op's `what` asked (none for `Count`).
        items: Vec<Item>,
        /// How many live items the scan visited.
        count: u64,
    },
    /// Of an [`Op::Txn`].
    Txn {
        /// `None`: a watched key had changed or a check failed, and nothing
        /// was applied. Else one result per op, in order.
        results: Option<Vec<Result<Outcome, Error>>>,
    },
    /// Of an [`Op::Move`].
    Move {
        /// `Done`; `Missing`: `from` is absent; `Present`: `to` exists
        /// without `replace`.
        status: Status,
    },
    /// A check that held (one that fails ends its transaction).
    Check,
    /// Of an [`Op::SetBit`].
    SetBit {
        /// The bit before the write.
        old: bool,
        /// The version written.
        version: Option<Version>,
    },
    /// Of an [`Op::IncrFloat`].
    IncrFloat {
        /// The value stored, as decimal text.
        value: Vec<u8>,
        /// The version written.
        version: Option<Version>,
    },
}

impl Outcome {
    /// The status of a single-key op (`Done` for the others).
    pub fn status(&self) -> Status {
        match self {
            Outcome::Put { status, .. }
            | Outcome::Delete { status, .. }
            | Outcome::Append { status, .. }
            | Outcome::Incr { status, .. }
            | Outcome::Expire { status, .. }
            | Outcome::Reap { status, .. }
            | Outcome::Move { status } => *status,
            Outcome::Atomic { .. }
            | Outcome::Clear
            | Outcome::Read { .. }
            | Outcome::Scan { .. }
            | Outcome::Txn { .. }
            | Outcome::Check
            | Outcome::SetBit { .. }
            | Outcome::IncrFloat { .. } => Status::Done,
        }
    }

    /// The version of the write the op made, for single-key ops.
    pub fn version(&self) -> Option<Version> {
        match self {
            Outcome::Put { version, .. }
            | Outcome::Delete { version, .. }
            | Outcome::Append { version, .. }
            | Outcome::Incr { version, .. }
            | Outcome::Expire { version, .. }
            | Outcome::Reap { version, .. }
            | Outcome::SetBit { version, .. }
            | Outcome::IncrFloat { version, .. } => *version,
            Outcome::Atomic { .. }
            | Outcome::Clear
            | Outcome::Read { .. }
            | Outcome::Scan { .. }
            | Outcome::Txn { .. }
            | Outcome::Move { .. }
            | Outcome::Check => None,
        }
    }
}

/// memcached's reading of a stored number (its `safe_strtoull`): optional
/// leading white space, an optional sign, decimal digits, and optional
/// trailing white space; within `u64`; a negative number is refused.
pub fn parse_unsigned(s: &[u8]) -> Option<u64> {
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let mut i = 0;
    while i < s.len() && space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut v: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add(u64::from(s[i] - b'0'))?;
        i += 1;
    }
    if i == start || (i < s.len() && !space(s[i])) {
        return None;
    }
    if neg {
        // strtoull negates; memcached refuses what then reads as negative.
        v = v.wrapping_neg();
        if (v as i64) < 0 {
            return None;
        }
    }
    Some(v)
}

/// Redis's integer syntax (`string2ll`): an optional '-', digits, no '+',
/// no spaces, no leading zeros, within `i64`.
pub fn parse_signed(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!neg).then_some(0),
        [b'0', ..] => return None,
        _ if digits.len() > 19 => return None,
        _ => {}
    }
    // Accumulate negatively so i64::MIN parses without overflow.
    let mut n: i64 = 0;
    for &d in digits {
        let v = d.wrapping_sub(b'0');
        if v > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(v))?;
    }
    if neg { Some(n) } else { n.checked_neg() }
}
