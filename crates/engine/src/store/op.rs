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

use std::borrow::Cow;

use super::{Ack, Session, Store};
use crate::error::{Error, Result};
use crate::tree::node::ItemRef;
use crate::tree::write::WriteOp;
use crate::types::{AtomicWrite, Expiry, Flags, Item, Version};

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
        decrement: bool,
    },
}

/// A number an [`Op::Incr`] left in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    Signed(i64),
    Unsigned(u64),
}

/// What [`Op::Incr`] and [`Op::Append`] do when the key is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissing<'a> {
    /// Nothing: the result is [`Status::Missing`].
    Fail,
    /// Work on an empty value (APPEND) or on 0 (INCR), with no expiry.
    Empty,
    /// Store this value with this expiry and no flags, and apply no delta
    /// (memcached meta `N` flag: the value is the initial one).
    Create { value: &'a [u8], expiry: Expiry },
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
        key: &'a [u8],
        value: &'a [u8],
        expiry: Expiry,
        flags: Flags,
        cond: Cond,
        return_old: bool,
    },
    /// Remove `key` if `cond` holds (and it is present).
    Delete {
        key: &'a [u8],
        cond: Cond,
        return_old: bool,
    },
    /// Add `value` after (or with `front`, before) the current value,
    /// keeping the item's expiry and flags, if `cond` holds.
    Append {
        key: &'a [u8],
        value: &'a [u8],
        front: bool,
        on_missing: OnMissing<'a>,
        cond: Cond,
    },
    /// Change the number stored at `key`, if `cond` holds. `expiry` is the
    /// updated item's expiry ([`Expiry::Keep`] for INCR).
    Incr {
        key: &'a [u8],
        arith: Arith,
        on_missing: OnMissing<'a>,
        cond: Cond,
        expiry: Expiry,
    },
    /// Set (`Expiry::AtMs`) or remove (`Expiry::Never`) the expiry of a
    /// present key if `when` holds. `past`: the deadline had passed when
    /// the op was decided, so the key is deleted instead (as Redis does).
    /// `return_item`: the outcome carries the item as it is afterwards
    /// (memcached gat).
    Expire {
        key: &'a [u8],
        expiry: Expiry,
        when: ExpireWhen,
        past: bool,
        return_item: bool,
    },
    /// Several puts and deletes as one atomic step (MSET, multi-key DEL).
    Atomic(Cow<'a, [AtomicWrite<'a>]>),
    /// Remove every key (FLUSHALL).
    Clear,
}

/// What applying an [`Op`] did. `version` is the version of the write it
/// made (`None`: it wrote nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    Put {
        status: Status,
        version: Option<Version>,
        /// With `return_old`: the item before the write.
        old: Option<Item>,
    },
    Delete {
        status: Status,
        version: Option<Version>,
        /// With `return_old`: the item deleted.
        old: Option<Item>,
    },
    Append {
        status: Status,
        version: Option<Version>,
        /// The value's length afterwards.
        len: usize,
    },
    Incr {
        status: Status,
        version: Option<Version>,
        /// The number stored afterwards (meaningful when `Done`).
        number: Number,
        /// `OnMissing::Create` made the item.
        created: bool,
        /// The item's expiry afterwards (unix ms).
        expires_at_ms: Option<u64>,
    },
    Expire {
        /// `Done`: the expiry changed (or the key was deleted as past);
        /// `Missing`: absent; `Mismatch`: a condition of `when` failed.
        status: Status,
        version: Option<Version>,
        /// With `return_item`: the item as it is afterwards.
        item: Option<Item>,
    },
    /// One result per write: the version it took, or `None` for a delete
    /// whose key was absent.
    Atomic {
        versions: Vec<Option<Version>>,
    },
    Clear,
}

impl Outcome {
    /// The status of a single-key op (`Done` for `Atomic` and `Clear`).
    pub fn status(&self) -> Status {
        match self {
            Outcome::Put { status, .. }
            | Outcome::Delete { status, .. }
            | Outcome::Append { status, .. }
            | Outcome::Incr { status, .. }
            | Outcome::Expire { status, .. } => *status,
            Outcome::Atomic { .. } | Outcome::Clear => Status::Done,
        }
    }

    /// The version of the write the op made, for single-key ops.
    pub fn version(&self) -> Option<Version> {
        match self {
            Outcome::Put { version, .. }
            | Outcome::Delete { version, .. }
            | Outcome::Append { version, .. }
            | Outcome::Incr { version, .. }
            | Outcome::Expire { version, .. } => *version,
            Outcome::Atomic { .. } | Outcome::Clear => None,
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

impl Store {
    /// Applies a decided write and waits for its acknowledgement (durable
    /// per the mode, and visible). A refused op (a key or value over the
    /// limits, a number that is not one) changes nothing.
    pub fn apply(&self, op: &Op<'_>) -> Result<Outcome> {
        self.apply_in(Ack::Now, op)
    }

    pub(super) fn apply_in(&self, ack: Ack<'_>, op: &Op<'_>) -> Result<Outcome> {
        match op {
            &Op::Put {
                key,
                value,
                expiry,
                flags,
                cond,
                return_old,
            } => self.apply_put(ack, key, value, expiry, flags, cond, return_old),
            &Op::Delete {
                key,
                cond,
                return_old,
            } => self.apply_delete(ack, key, cond, return_old),
            &Op::Append {
                key,
                value,
                front,
                on_missing,
                cond,
            } => self.apply_append(ack, key, value, front, on_missing, cond),
            &Op::Incr {
                key,
                arith,
                on_missing,
                cond,
                expiry,
            } => self.apply_incr(ack, key, arith, on_missing, cond, expiry),
            &Op::Expire {
                key,
                expiry,
                when,
                past,
                return_item,
            } => self.apply_expire(ack, key, expiry, when, past, return_item),
            Op::Atomic(writes) => Ok(Outcome::Atomic {
                versions: self.write_atomically_in(ack, writes)?,
            }),
            Op::Clear => {
                self.clear_in(ack)?;
                Ok(Outcome::Clear)
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of one op")]
    fn apply_put(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        value: &[u8],
        expiry: Expiry,
        flags: Flags,
        cond: Cond,
        return_old: bool,
    ) -> Result<Outcome> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        let ((status, old), version) = self.write_key(ack, key, |cur| {
            let status = Status::of(cond, cur);
            let old = if return_old {
                cur.map(|c| c.to_item())
            } else {
                None
            };
            if status != Status::Done {
                return (WriteOp::Noop, (status, old));
            }
            let op = WriteOp::Put {
                value: Cow::Borrowed(value),
                expiry: Self::expiry_ms(expiry, cur),
                flags: flags.resolve(cur.map(|c| c.cflags)),
            };
            (op, (status, old))
        })?;
        Ok(Outcome::Put {
            status,
            version,
            old,
        })
    }

    fn apply_delete(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        cond: Cond,
        return_old: bool,
    ) -> Result<Outcome> {
        self.check_key(key)?;
        let ((status, old), version) = self.write_key(ack, key, |cur| {
            let status = match Status::of(cond, cur) {
                Status::Done if cur.is_none() => Status::Missing,
                s => s,
            };
            let old = if return_old {
                cur.map(|c| c.to_item())
            } else {
                None
            };
            match status {
                Status::Done => (WriteOp::Delete, (status, old)),
                _ => (WriteOp::Noop, (status, old)),
            }
        })?;
        Ok(Outcome::Delete {
            status,
            version,
            old,
        })
    }

    fn apply_append(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        value: &[u8],
        front: bool,
        on_missing: OnMissing<'_>,
        cond: Cond,
    ) -> Result<Outcome> {
        self.check_key(key)?;
        let (r, version) = self.write_key(ack, key, |cur| {
            let status = Status::of(cond, cur);
            if status != Status::Done {
                return (WriteOp::Noop, Ok((status, 0)));
            }
            let (old, expiry, flags) = match (cur, on_missing) {
                (Some(c), _) => (c.value.bytes(), c.expiry, c.cflags),
                (None, OnMissing::Fail) => return (WriteOp::Noop, Ok((Status::Missing, 0))),
                (None, OnMissing::Empty) => (&[][..], 0, 0),
                (None, OnMissing::Create { value, expiry }) => {
                    if let Err(e) = self.check_value(value.len()) {
                        return (WriteOp::Noop, Err(e));
                    }
                    let op = WriteOp::Put {
                        value: Cow::Borrowed(value),
                        expiry: Self::expiry_ms(expiry, None),
                        flags: 0,
                    };
                    return (op, Ok((Status::Done, value.len())));
                }
            };
            let len = old.len() + value.len();
            if let Err(e) = self.check_value(len) {
                return (WriteOp::Noop, Err(e));
            }
            let mut v = Vec::with_capacity(len);
            let (a, b) = if front { (value, old) } else { (old, value) };
            v.extend_from_slice(a);
            v.extend_from_slice(b);
            let op = WriteOp::Put {
                value: Cow::Owned(v),
                expiry,
                flags,
            };
            (op, Ok((Status::Done, len)))
        })?;
        let (status, len) = r?;
        Ok(Outcome::Append {
            status,
            version,
            len,
        })
    }

    fn apply_incr(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        arith: Arith,
        on_missing: OnMissing<'_>,
        cond: Cond,
        expiry: Expiry,
    ) -> Result<Outcome> {
        self.check_key(key)?;
        let (r, version) = self.write_key(ack, key, |cur| {
            let status = Status::of(cond, cur);
            let zero = match arith {
                Arith::Signed(_) => Number::Signed(0),
                Arith::Unsigned { .. } => Number::Unsigned(0),
            };
            if status != Status::Done {
                return (WriteOp::Noop, Ok((status, zero, false, None)));
            }
            let created = cur.is_none() && matches!(on_missing, OnMissing::Create { .. });
            let number = match (cur, on_missing) {
                (None, OnMissing::Fail) => {
                    return (WriteOp::Noop, Ok((Status::Missing, zero, false, None)));
                }
                (None, OnMissing::Create { value, .. }) => match read_number(arith, value) {
                    Some(n) => Ok(n),
                    None => return (WriteOp::Noop, Err(Error::NotAnInteger)),
                },
                (None, OnMissing::Empty) => step(arith, zero),
                (Some(c), _) => match read_number(arith, c.value.bytes()) {
                    Some(n) => step(arith, n),
                    None => return (WriteOp::Noop, Err(Error::NotAnInteger)),
                },
            };
            let number = match number {
                Ok(n) => n,
                Err(e) => return (WriteOp::Noop, Err(e)),
            };
            let expiry = match (cur, on_missing) {
                (None, OnMissing::Create { expiry, .. }) => Self::expiry_ms(expiry, None),
                _ => Self::expiry_ms(expiry, cur),
            };
            let text = match number {
                Number::Signed(n) => n.to_string(),
                Number::Unsigned(n) => n.to_string(),
            };
            let op = WriteOp::Put {
                value: Cow::Owned(text.into_bytes()),
                expiry,
                flags: cur.map_or(0, |c| c.cflags),
            };
            let at = (expiry != 0).then_some(expiry);
            (op, Ok((Status::Done, number, created, at)))
        })?;
        let (status, number, created, expires_at_ms) = r?;
        Ok(Outcome::Incr {
            status,
            version,
            number,
            created,
            expires_at_ms,
        })
    }

    fn apply_expire(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        expiry: Expiry,
        when: ExpireWhen,
        past: bool,
        return_item: bool,
    ) -> Result<Outcome> {
        self.check_key(key)?;
        let ((status, item), version) = self.write_key(ack, key, |cur| {
            let Some(c) = cur else {
                return (WriteOp::Noop, (Status::Missing, None));
            };
            let current = (c.expiry != 0).then_some(c.expiry);
            let new = match expiry {
                Expiry::AtMs(t) => Some(t.max(1)),
                Expiry::Never => None,
                Expiry::Keep => current,
            };
            let later = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(a), Some(b)) => a < b,
            };
            let holds = (!when.nx || current.is_none())
                && (!when.xx || current.is_some())
                && (!when.gt || later(current, new))
                && (!when.lt || later(new, current));
            if !holds {
                return (WriteOp::Noop, (Status::Mismatch, None));
            }
            if past {
                return (WriteOp::Delete, (Status::Done, None));
            }
            let item = return_item.then(|| {
                let mut it = c.to_item();
                it.expires_at_ms = new;
                it
            });
            // The value is rewritten with the new expiry: the write's
            // buffer outlives the leaf the item is read from.
            let op = WriteOp::Put {
                value: Cow::Owned(c.value.bytes().to_vec()),
                expiry: new.unwrap_or(0),
                flags: c.cflags,
            };
            (op, (Status::Done, item))
        })?;
        // The item afterwards carries the version of the write that made it.
        let item = item.map(|mut it| {
            it.version = version.unwrap_or(it.version);
            it
        });
        Ok(Outcome::Expire {
            status,
            version,
            item,
        })
    }
}

/// The number `value` holds under `arith`'s rules.
fn read_number(arith: Arith, value: &[u8]) -> Option<Number> {
    match arith {
        Arith::Signed(_) => parse_signed(value).map(Number::Signed),
        Arith::Unsigned { .. } => {
            // memcached reads an empty value as no number.
            (!value.is_empty())
                .then(|| parse_unsigned(value))
                .flatten()
                .map(Number::Unsigned)
        }
    }
}

/// `n` changed by `arith`'s delta.
fn step(arith: Arith, n: Number) -> Result<Number> {
    match (arith, n) {
        (Arith::Signed(d), Number::Signed(n)) => {
            n.checked_add(d).map(Number::Signed).ok_or(Error::Overflow)
        }
        (Arith::Unsigned { delta, decrement }, Number::Unsigned(n)) => {
            Ok(Number::Unsigned(if decrement {
                n.saturating_sub(delta)
            } else {
                n.wrapping_add(delta)
            }))
        }
        _ => unreachable!("read_number reads the kind arith names"),
    }
}

impl Session<'_> {
    /// [`Store::apply`], acknowledged at the session's commit.
    pub fn apply(&self, op: &Op<'_>) -> Result<Outcome> {
        self.store.apply_in(self.ack(), op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn put(key: &[u8], value: &[u8], cond: Cond) -> Op<'static> {
        // Leaked so the op may borrow them for 'static in a test.
        let key: &'static [u8] = Box::leak(key.to_vec().into_boxed_slice());
        let value: &'static [u8] = Box::leak(value.to_vec().into_boxed_slice());
        Op::Put {
            key,
            value,
            expiry: Expiry::Never,
            flags: Flags::Set(0),
            cond,
            return_old: true,
        }
    }

    #[test]
    fn conditions_decide_put_and_delete() {
        let s = Store::new(Config::default()).unwrap();
        let r = s.apply(&put(b"k", b"1", Cond::Present)).unwrap();
        assert_eq!(r.status(), Status::Missing);
        let r = s.apply(&put(b"k", b"1", Cond::Absent)).unwrap();
        assert_eq!(r.status(), Status::Done);
        let v1 = r.version().unwrap();
        let r = s.apply(&put(b"k", b"2", Cond::Absent)).unwrap();
        assert_eq!(r.status(), Status::Present);
        let r = s
            .apply(&put(b"k", b"2", Cond::Version(Version(v1.0 + 100))))
            .unwrap();
        assert_eq!(r.status(), Status::Mismatch);
        let r = s.apply(&put(b"k", b"2", Cond::Version(v1))).unwrap();
        let Outcome::Put { status, old, .. } = r else {
            panic!("{r:?}")
        };
        assert_eq!(status, Status::Done);
        assert_eq!(old.unwrap().value.as_ref(), b"1");
        assert_eq!(s.get(b"k").unwrap().unwrap().as_ref(), b"2");
        let del = Op::Delete {
            key: b"k",
            cond: Cond::Any,
            return_old: true,
        };
        let r = s.apply(&del).unwrap();
        assert!(
            matches!(&r, Outcome::Delete { status: Status::Done, old: Some(o), .. } if o.value.as_ref() == b"2")
        );
        assert_eq!(s.apply(&del).unwrap().status(), Status::Missing);
    }

    #[test]
    fn incr_follows_each_protocols_rules() {
        let s = Store::new(Config::default()).unwrap();
        let incr = |arith, on_missing| Op::Incr {
            key: b"n",
            arith,
            on_missing,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        };
        let r = s.apply(&incr(Arith::Signed(5), OnMissing::Empty)).unwrap();
        assert!(matches!(
            r,
            Outcome::Incr {
                number: Number::Signed(5),
                ..
            }
        ));
        s.put(b"n", &i64::MAX.to_string().into_bytes()).unwrap();
        let e = s.apply(&incr(Arith::Signed(1), OnMissing::Empty));
        assert_eq!(e.unwrap_err(), Error::Overflow);
        s.put(b"n", b"+1").unwrap();
        let e = s.apply(&incr(Arith::Signed(1), OnMissing::Empty));
        assert_eq!(e.unwrap_err(), Error::NotAnInteger, "Redis refuses '+1'");
        let down = Arith::Unsigned {
            delta: 5,
            decrement: true,
        };
        s.put(b"n", b" 3 ").unwrap();
        let r = s.apply(&incr(down, OnMissing::Fail)).unwrap();
        assert!(matches!(
            r,
            Outcome::Incr {
                number: Number::Unsigned(0),
                ..
            }
        ));
        s.put(b"n", &u64::MAX.to_string().into_bytes()).unwrap();
        let up = Arith::Unsigned {
            delta: 2,
            decrement: false,
        };
        let r = s.apply(&incr(up, OnMissing::Fail)).unwrap();
        assert!(matches!(
            r,
            Outcome::Incr {
                number: Number::Unsigned(1),
                ..
            }
        ));
        s.delete(b"n").unwrap();
        let r = s.apply(&incr(up, OnMissing::Fail)).unwrap();
        assert_eq!(r.status(), Status::Missing);
        let create = OnMissing::Create {
            value: b"10",
            expiry: Expiry::Never,
        };
        let r = s.apply(&incr(up, create)).unwrap();
        assert!(matches!(
            r,
            Outcome::Incr {
                number: Number::Unsigned(10),
                created: true,
                ..
            }
        ));
    }

    #[test]
    fn expire_conditions_and_past_deadlines() {
        let s = Store::new(Config::default()).unwrap();
        s.put(b"k", b"v").unwrap();
        let at = crate::now_ms() + 60_000;
        let expire = |expiry, when, past| Op::Expire {
            key: b"k",
            expiry,
            when,
            past,
            return_item: true,
        };
        let xx = ExpireWhen {
            xx: true,
            ..ExpireWhen::default()
        };
        let r = s.apply(&expire(Expiry::AtMs(at), xx, false)).unwrap();
        assert_eq!(r.status(), Status::Mismatch, "XX needs an expiry");
        let r = s
            .apply(&expire(Expiry::AtMs(at), ExpireWhen::default(), false))
            .unwrap();
        let Outcome::Expire { item, version, .. } = r else {
            panic!()
        };
        let item = item.unwrap();
        assert_eq!(
            (item.expires_at_ms, Some(item.version)),
            (Some(at), version)
        );
        let gt = ExpireWhen {
            gt: true,
            ..ExpireWhen::default()
        };
        let r = s.apply(&expire(Expiry::AtMs(at - 1), gt, false)).unwrap();
        assert_eq!(r.status(), Status::Mismatch);
        let r = s.apply(&expire(Expiry::Never, gt, false)).unwrap();
        assert_eq!(r.status(), Status::Done, "no expiry is later than any");
        let r = s
            .apply(&expire(Expiry::AtMs(1), ExpireWhen::default(), true))
            .unwrap();
        assert_eq!(r.status(), Status::Done);
        assert_eq!(s.get(b"k").unwrap(), None, "a past deadline deletes");
    }

    #[test]
    fn append_creates_or_fails_on_a_missing_key() {
        let s = Store::new(Config::default()).unwrap();
        let app = |front, on_missing| Op::Append {
            key: b"a",
            value: b"xy",
            front,
            on_missing,
            cond: Cond::Any,
        };
        assert_eq!(
            s.apply(&app(false, OnMissing::Fail)).unwrap().status(),
            Status::Missing
        );
        let r = s.apply(&app(false, OnMissing::Empty)).unwrap();
        assert!(matches!(r, Outcome::Append { len: 2, .. }));
        s.apply(&app(true, OnMissing::Fail)).unwrap();
        assert_eq!(s.get(b"a").unwrap().unwrap().as_ref(), b"xyxy");
        let small = Store::new(Config {
            max_value_len: 3,
            ..Config::default()
        })
        .unwrap();
        let e = small.apply(&app(false, OnMissing::Empty)).unwrap();
        assert!(matches!(e, Outcome::Append { len: 2, .. }));
        let e = small.apply(&app(false, OnMissing::Empty)).unwrap_err();
        assert!(matches!(e, Error::ValueTooLarge { len: 4, max: 3 }));
    }

    #[test]
    fn number_parsers_follow_redis_and_memcached() {
        for (s, want) in [
            (&b"0"[..], Some(0)),
            (b"-1", Some(-1)),
            (b"+1", None),
            (b"01", None),
            (b"-0", None),
            (b" 1", None),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
        ] {
            assert_eq!(parse_signed(s), want, "{:?}", String::from_utf8_lossy(s));
        }
        for (s, want) in [
            (&b"0"[..], Some(0)),
            (b" 12 ", Some(12)),
            (b"+7", Some(7)),
            (b"-1", None),
            (b"1x", None),
            (b"", None),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
        ] {
            assert_eq!(parse_unsigned(s), want, "{:?}", String::from_utf8_lossy(s));
        }
    }
}
