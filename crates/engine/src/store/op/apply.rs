//! Applying a decided write: each op is one `Store::write_key` whose
//! decision is a pure function of the op and the key's live item.

use std::borrow::Cow;

use super::float::{self, FloatError};
use super::{
    Arith, Cond, ExpireWhen, Number, OnMissing, Op, Outcome, Status, parse_signed, parse_unsigned,
};
use crate::error::{Error, Result};
use crate::store::{Ack, Session, Store};
use crate::tree::write::{WriteMode, WriteOp};
use crate::types::{Expiry, Flags, Version};

impl Store {
    /// Applies a decided write and waits for its acknowledgement (durable
    /// per the mode, and visible). A refused op (a key or value over the
    /// limits, a number that is not one) changes nothing.
    pub fn apply(&self, op: &Op<'_>) -> Result<Outcome> {
        self.apply_in(Ack::NOW, op)
    }

    /// [`Store::apply`] judging expiry at `now_ms` (unix ms) instead of the
    /// wall clock: what a replica does with an entry, at the clock the
    /// leader put in it, so that every replica decides alike.
    pub fn apply_at(&self, op: &Op<'_>, now_ms: u64) -> Result<Outcome> {
        self.apply_in(Ack::NOW.at(now_ms.max(1)), op)
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
            &Op::Reap { key, version } => self.apply_reap(ack, key, version),
            Op::Read { keys } => self.apply_read(ack, keys),
            Op::Scan {
                range,
                what,
                max_bytes,
            } => self.apply_scan(ack, range, *what, *max_bytes),
            &Op::SetRange { key, offset, value } => self.apply_set_range(ack, key, offset, value),
            &Op::SetBit { key, bit, on } => self.apply_set_bit(ack, key, bit, on),
            &Op::IncrFloat { key, by } => self.apply_incr_float(ack, key, by),
            // Checks are taken by the transaction they open.
            Op::Check(_) => Err(Error::NotInTransaction(
                "a check runs first in a transaction".into(),
            )),
            Op::Txn { watch, ops } => self.apply_txn(ack, watch, ops),
            &Op::Move {
                from,
                to,
                replace,
                keep_source,
            } => self.apply_move(ack, from, to, replace, keep_source),
        }
    }

    /// The length a write at `offset` of `len` bytes makes a value reach,
    /// refused over the limit before the key is looked at (as Redis does).
    fn patched_len(&self, offset: u64, len: usize) -> Result<usize> {
        let max = self.max_value_len();
        match offset.checked_add(len as u64) {
            Some(end) if end <= max as u64 => Ok(end as usize),
            end => Err(Error::ValueTooLarge {
                len: end.map_or(usize::MAX, |e| usize::try_from(e).unwrap_or(usize::MAX)),
                max,
            }),
        }
    }

    fn apply_set_range(
        &self,
        ack: Ack<'_>,
        key: &[u8],
        offset: u64,
        value: &[u8],
    ) -> Result<Outcome> {
        self.check_key(key)?;
        let end = if value.is_empty() {
            0
        } else {
            self.patched_len(offset, value.len())?
        };
        let (r, version) = self.write_key(ack, key, |cur| {
            let (old, expiry, flags) = match cur {
                Some(c) => (c.value.bytes(), c.expiry, c.cflags),
                None if value.is_empty() => return (WriteOp::Noop, (Status::Missing, 0)),
                None => (&[][..], 0, 0),
            };
            if value.is_empty() {
                return (WriteOp::Noop, (Status::Done, old.len()));
            }
            let mut v = old.to_vec();
            if v.len() < end {
                v.resize(end, 0);
            }
            v[offset as usize..end].copy_from_slice(value);
            let len = v.len();
            let op = WriteOp::Put {
                value: Cow::Owned(v),
                expiry,
                flags,
            };
            (op, (Status::Done, len))
        })?;
        let (status, len) = r;
        Ok(Outcome::Append {
            status,
            version,
            len,
        })
    }

    fn apply_set_bit(&self, ack: Ack<'_>, key: &[u8], bit: u64, on: bool) -> Result<Outcome> {
        self.check_key(key)?;
        let byte = (bit >> 3) as usize;
        self.patched_len(bit >> 3, 1)?;
        let mask = 0x80u8 >> (bit & 7);
        let (old, version) = self.write_key(ack, key, |cur| {
            let (old, expiry, flags) = match cur {
                Some(c) => (c.value.bytes(), c.expiry, c.cflags),
                None => (&[][..], 0, 0),
            };
            let mut v = old.to_vec();
            if v.len() <= byte {
                v.resize(byte + 1, 0);
            }
            let was = v[byte] & mask != 0;
            if on {
                v[byte] |= mask;
            } else {
                v[byte] &= !mask;
            }
            let op = WriteOp::Put {
                value: Cow::Owned(v),
                expiry,
                flags,
            };
            (op, was)
        })?;
        Ok(Outcome::SetBit { old, version })
    }

    fn apply_incr_float(&self, ack: Ack<'_>, key: &[u8], by: &[u8]) -> Result<Outcome> {
        self.check_key(key)?;
        // `add` reads both numbers: a bad increment is refused there, with
        // nothing written, as a bad value is.
        let (r, version) = self.write_key(ack, key, |cur| {
            let (old, expiry, flags) = match cur {
                Some(c) => (c.value.bytes(), c.expiry, c.cflags),
                None => (&b"0"[..], 0, 0),
            };
            let value = match float::add(old, by) {
                Ok(v) => v,
                Err(FloatError::NotAFloat) => return (WriteOp::Noop, Err(Error::NotAFloat)),
                Err(FloatError::NanOrInfinity) => return (WriteOp::Noop, Err(Error::NotFinite)),
            };
            if let Err(e) = self.check_value(value.len()) {
                return (WriteOp::Noop, Err(e));
            }
            let op = WriteOp::Put {
                value: Cow::Owned(value.clone()),
                expiry,
                flags,
            };
            (op, Ok(value))
        })?;
        Ok(Outcome::IncrFloat { value: r?, version })
    }

    /// `Op::Move`: a transaction of its own (the lock held exclusively,
    /// its writes one group), or a part of the one it is in.
    fn apply_move(
        &self,
        ack: Ack<'_>,
        from: &[u8],
        to: &[u8],
        replace: bool,
        keep_source: bool,
    ) -> Result<Outcome> {
        self.check_key(from)?;
        self.check_key(to)?;
        let status = self.exclusively(ack, |inner, group| {
            let Some(item) = self.newest_live(inner, from)? else {
                return Ok(Status::Missing);
            };
            if from == to {
                return Ok(if replace {
                    Status::Done
                } else {
                    Status::Present
                });
            }
            if !replace && self.newest_live(inner, to)?.is_some() {
                return Ok(Status::Present);
            }
            group.open();
            let put = Op::Put {
                key: to,
                value: &item.value,
                expiry: item.expires_at_ms.map_or(Expiry::Never, Expiry::AtMs),
                flags: Flags::Set(item.flags),
                cond: Cond::Any,
                return_old: false,
            };
            self.apply_in(inner, &put)?;
            if !keep_source {
                self.apply_in(
                    inner,
                    &Op::Delete {
                        key: from,
                        cond: Cond::Any,
                        return_old: false,
                    },
                )?;
            }
            Ok(Status::Done)
        })?;
        Ok(Outcome::Move { status })
    }

    fn apply_reap(&self, ack: Ack<'_>, key: &[u8], version: Version) -> Result<Outcome> {
        self.check_key(key)?;
        self.admit()?;
        let now = ack.now();
        // Expired items are what this op is for: the write sees them.
        let mode = WriteMode {
            now: None,
            logged: true,
        };
        let shared = self.lock_out_transactions(ack);
        let w = self.tree.write(key, mode, |cur| match cur {
            None => (WriteOp::Noop, Status::Missing),
            Some(c) if c.version == version.0 && c.expiry != 0 && c.expiry <= now.ms() => {
                (WriteOp::Delete, Status::Done)
            }
            Some(_) => (WriteOp::Noop, Status::Mismatch),
        });
        drop(shared);
        self.acknowledge(ack, w.wait_for)?;
        Ok(Outcome::Reap {
            status: w.result,
            version: w.version.map(Version),
        })
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
        if cond == Cond::Any && !return_old && flags == Flags::NONE {
            // SET's path: nothing to decide, nothing to hand back.
            let v = self.put_in(ack, key, value, expiry)?;
            return Ok(Outcome::Put {
                status: Status::Done,
                version: Some(v),
                old: None,
            });
        }
        if cond == Cond::Any {
            self.check_value(value.len())?;
        }
        // With a condition, the value's length is refused only when the
        // write would happen (SET NX of an oversized value on a present
        // key answers null, as before).
        let too_long = value.len() > self.config.max_value_len;
        let ((status, old), version) = self.write_key(ack, key, |cur| {
            let status = Status::of(cond, cur);
            let old = if return_old {
                cur.map(|c| c.to_item())
            } else {
                None
            };
            if status != Status::Done || too_long {
                return (WriteOp::Noop, (status, old));
            }
            let op = WriteOp::Put {
                value: Cow::Borrowed(value),
                expiry: Self::expiry_ms(expiry, cur),
                flags: flags.resolve(cur.map(|c| c.cflags)),
            };
            (op, (status, old))
        })?;
        if too_long && status == Status::Done {
            return Err(Error::ValueTooLarge {
                len: value.len(),
                max: self.config.max_value_len,
            });
        }
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
            if cur.is_some() {
                let status = Status::of(cond, cur);
                if status != Status::Done {
                    return (WriteOp::Noop, Ok((status, 0)));
                }
            }
            let (old, expiry, flags) = match (cur, on_missing) {
                (Some(c), _) => (c.value.bytes(), c.expiry, c.cflags),
                (None, OnMissing::Fail) => return (WriteOp::Noop, Ok((Status::Missing, 0))),
                (None, OnMissing::Empty) => (&[][..], 0, 0),
                (
                    None,
                    OnMissing::Create {
                        value,
                        expiry,
                        flags,
                    },
                ) => {
                    if let Err(e) = self.check_value(value.len()) {
                        return (WriteOp::Noop, Err(e));
                    }
                    let op = WriteOp::Put {
                        value: Cow::Borrowed(value),
                        expiry: Self::expiry_ms(expiry, None),
                        flags,
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
            let zero = match arith {
                Arith::Signed(_) => Number::Signed(0),
                Arith::Unsigned { .. } => Number::Unsigned(0),
            };
            if cur.is_some() {
                let status = Status::of(cond, cur);
                if status != Status::Done {
                    return (WriteOp::Noop, Ok((status, zero, false, None)));
                }
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
            if let Err(e) = self.check_value(text.len()) {
                return (WriteOp::Noop, Err(e));
            }
            let flags = match (cur, on_missing) {
                (Some(c), _) => c.cflags,
                (None, OnMissing::Create { flags, .. }) => flags,
                (None, _) => 0,
            };
            let op = WriteOp::Put {
                value: Cow::Owned(text.into_bytes()),
                expiry,
                flags,
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
        let (r, version) = self.write_key(ack, key, |cur| {
            let Some(c) = cur else {
                return (WriteOp::Noop, Ok((Status::Missing, None)));
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
            // With `return_item`, an item that stays as it was, or is
            // deleted, is returned as it was (GETEX answers its value).
            if !holds {
                return (
                    WriteOp::Noop,
                    Ok((Status::Mismatch, return_item.then(|| c.to_item()))),
                );
            }
            if past {
                return (
                    WriteOp::Delete,
                    Ok((Status::Done, return_item.then(|| c.to_item()))),
                );
            }
            // Rewritten, the value meets today's limit (it may have been
            // lowered since the value was stored).
            if let Err(e) = self.check_value(c.value.bytes().len()) {
                return (WriteOp::Noop, Err(e));
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
            (op, Ok((Status::Done, item)))
        })?;
        let (status, item) = r?;
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
