//! What applying an op answered: a tag byte per kind, then its fields, both
//! ways. Grouped as the ops are: outcomes of single-key ops, and of ops
//! over many keys (with Check's, which carries nothing).

use combkv::op::{Number, Outcome, Status};
use combkv::{Item, Version};

use super::wire::{Reader, put_bytes, put_u64, put_version};
use super::{DecodeError, Decoded, encode_result};

fn put_status(out: &mut Vec<u8>, s: Status) {
    out.push(match s {
        Status::Done => 0,
        Status::Missing => 1,
        Status::Present => 2,
        Status::Mismatch => 3,
    });
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

fn put_number(out: &mut Vec<u8>, number: &Number) {
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
}

pub(super) fn encode_outcome(o: &Outcome, out: &mut Vec<u8>) {
    match o {
        Outcome::Put { .. }
        | Outcome::Delete { .. }
        | Outcome::Append { .. }
        | Outcome::Incr { .. }
        | Outcome::Expire { .. }
        | Outcome::Reap { .. }
        | Outcome::Move { .. }
        | Outcome::SetBit { .. }
        | Outcome::IncrFloat { .. } => encode_key_outcome(o, out),
        Outcome::Atomic { .. }
        | Outcome::Clear
        | Outcome::Read { .. }
        | Outcome::Scan { .. }
        | Outcome::Txn { .. }
        | Outcome::Check => encode_multi_outcome(o, out),
        _ => unreachable!("an outcome kind without an encoding: {o:?}"),
    }
}

/// Put (1), Delete (2), Append (3), Incr (4), Expire (5), Reap (8),
/// Move (11), SetBit (13), IncrFloat (14).
fn encode_key_outcome(o: &Outcome, out: &mut Vec<u8>) {
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
            put_number(out, number);
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
        Outcome::Reap { status, version } => {
            out.push(8);
            put_status(out, *status);
            put_version(out, *version);
        }
        Outcome::Move { status } => {
            out.push(11);
            put_status(out, *status);
        }
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
        _ => unreachable!("not a single-key outcome: {o:?}"),
    }
}

/// Atomic (6), Clear (7), Read (9), Txn (10), Check (12), Scan (15).
fn encode_multi_outcome(o: &Outcome, out: &mut Vec<u8>) {
    match o {
        Outcome::Atomic { versions } => {
            out.push(6);
            put_u64(out, versions.len() as u64);
            for v in versions {
                put_version(out, *v);
            }
        }
        Outcome::Clear => out.push(7),
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
        Outcome::Check => out.push(12),
        _ => unreachable!("not an outcome of an op over many keys: {o:?}"),
    }
}

impl Reader<'_> {
    fn status(&mut self) -> Decoded<Status> {
        Ok(match self.u8()? {
            0 => Status::Done,
            1 => Status::Missing,
            2 => Status::Present,
            3 => Status::Mismatch,
            _ => return Err(DecodeError("status")),
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
    fn number(&mut self) -> Decoded<Number> {
        Ok(match self.u8()? {
            0 => Number::Signed(self.u64()? as i64),
            1 => Number::Unsigned(self.u64()?),
            _ => return Err(DecodeError("number")),
        })
    }

    pub(super) fn outcome(&mut self) -> Decoded<Outcome> {
        match self.u8()? {
            tag @ (1..=5 | 8 | 11 | 13 | 14) => self.key_outcome(tag),
            tag @ (6 | 7 | 9 | 10 | 12 | 15) => self.multi_outcome(tag),
            _ => Err(DecodeError("outcome tag")),
        }
    }

    /// The outcome of a single-key op, after its tag.
    fn key_outcome(&mut self, tag: u8) -> Decoded<Outcome> {
        Ok(match tag {
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
            4 => Outcome::Incr {
                status: self.status()?,
                version: self.version()?,
                number: self.number()?,
                created: self.bool()?,
                expires_at_ms: Some(self.u64()?).filter(|&t| t != 0),
            },
            5 => Outcome::Expire {
                status: self.status()?,
                version: self.version()?,
                item: self.item()?,
            },
            8 => Outcome::Reap {
                status: self.status()?,
                version: self.version()?,
            },
            11 => Outcome::Move {
                status: self.status()?,
            },
            13 => Outcome::SetBit {
                old: self.bool()?,
                version: self.version()?,
            },
            14 => Outcome::IncrFloat {
                value: self.bytes()?.to_vec(),
                version: self.version()?,
            },
            _ => unreachable!("tag {tag} is no single-key outcome"),
        })
    }

    /// The outcome of an op over many keys, or of a check, after its tag.
    fn multi_outcome(&mut self, tag: u8) -> Decoded<Outcome> {
        Ok(match tag {
            6 => {
                let n = self.count()?;
                let mut versions = Vec::with_capacity(n);
                for _ in 0..n {
                    versions.push(self.version()?);
                }
                Outcome::Atomic { versions }
            }
            7 => Outcome::Clear,
            9 => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.item()?);
                }
                Outcome::Read { items }
            }
            10 => self.txn_outcome()?,
            12 => Outcome::Check,
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
            _ => unreachable!("tag {tag} is no outcome of an op over many keys"),
        })
    }

    /// A Txn outcome (10), after the tag.
    fn txn_outcome(&mut self) -> Decoded<Outcome> {
        Ok(match self.u8()? {
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
        })
    }
}
