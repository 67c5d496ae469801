//! Reading ops back, borrowing keys and values from the bytes: the
//! inverse of `op_encode`, family by family.

use std::borrow::Cow;
use std::ops::Bound;

use combkv::op::{Arith, Check, CmpOp, Cond, ExpireWhen, OnMissing, Op, ScanWhat, Watch};
use combkv::{AtomicWrite, Expiry, Flags, Version};

use super::op_encode::CMP_OPS;
use super::wire::Reader;
use super::{DecodeError, Decoded};

impl<'a> Reader<'a> {
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
    fn arith(&mut self) -> Decoded<Arith> {
        Ok(match self.u8()? {
            0 => Arith::Signed(self.u64()? as i64),
            1 => Arith::Unsigned {
                delta: self.u64()?,
                decrement: self.bool()?,
            },
            _ => return Err(DecodeError("arith")),
        })
    }
    fn atomic_write(&mut self) -> Decoded<AtomicWrite<'a>> {
        Ok(match self.u8()? {
            0 => AtomicWrite::Put {
                key: self.bytes()?,
                value: self.bytes()?,
                expiry: self.expiry()?,
            },
            1 => AtomicWrite::Delete { key: self.bytes()? },
            _ => return Err(DecodeError("atomic write")),
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

    pub(super) fn op(&mut self) -> Decoded<Op<'a>> {
        match self.u8()? {
            tag @ 1..=4 => self.key_write(tag),
            tag @ (5 | 8 | 11 | 13 | 14 | 15) => self.key_edit(tag),
            tag @ (6 | 7 | 9 | 10 | 16) => self.multi_key(tag),
            12 => Ok(Op::Check(self.check()?)),
            _ => Err(DecodeError("op tag")),
        }
    }

    /// Put (1), Delete (2), Append (3), Incr (4), after the tag.
    fn key_write(&mut self, tag: u8) -> Decoded<Op<'a>> {
        Ok(match tag {
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
            4 => Op::Incr {
                key: self.bytes()?,
                arith: self.arith()?,
                on_missing: self.on_missing()?,
                cond: self.cond()?,
                expiry: self.expiry()?,
            },
            _ => unreachable!("tag {tag} is no single-key write"),
        })
    }

    /// Expire (5), Reap (8), Move (11), SetRange (13), SetBit (14),
    /// IncrFloat (15), after the tag.
    fn key_edit(&mut self, tag: u8) -> Decoded<Op<'a>> {
        Ok(match tag {
            5 => self.expire()?,
            8 => Op::Reap {
                key: self.bytes()?,
                version: Version(self.u64()?),
            },
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
            _ => unreachable!("tag {tag} is no single-key edit"),
        })
    }

    /// An Expire op (5), after the tag.
    fn expire(&mut self) -> Decoded<Op<'a>> {
        let key = self.bytes()?;
        let expiry = self.expiry()?;
        let bits = self.u8()?;
        if bits >> 6 != 0 {
            return Err(DecodeError("expire bits"));
        }
        let bit = |i: u8| bits >> i & 1 == 1;
        Ok(Op::Expire {
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
        })
    }

    /// Atomic (6), Clear (7), Read (9), Txn (10), Scan (16), after the tag.
    fn multi_key(&mut self, tag: u8) -> Decoded<Op<'a>> {
        Ok(match tag {
            6 => {
                let n = self.count()?;
                let mut writes = Vec::with_capacity(n);
                for _ in 0..n {
                    writes.push(self.atomic_write()?);
                }
                Op::Atomic(Cow::Owned(writes))
            }
            7 => Op::Clear,
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
            10 => self.txn()?,
            16 => self.scan()?,
            _ => unreachable!("tag {tag} is no op over many keys"),
        })
    }

    /// A Txn op (10), after the tag.
    fn txn(&mut self) -> Decoded<Op<'a>> {
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
        Ok(Op::Txn {
            watch: Cow::Owned(watch),
            ops: Cow::Owned(ops),
        })
    }

    /// A Scan op (16), after the tag.
    fn scan(&mut self) -> Decoded<Op<'a>> {
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
        Ok(Op::Scan {
            range: Cow::Owned(range),
            what,
            max_bytes: self.u64()?,
        })
    }

    /// The check of a Check op (12), after its tag.
    fn check(&mut self) -> Decoded<Check<'a>> {
        Ok(match self.u8()? {
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
        })
    }
}
