//! The errors an apply answers, by code, both ways.

use combkv::Error;

use super::wire::{Reader, put_bytes, put_u64};
use super::{DecodeError, Decoded};

/// Errors an apply can answer, by code (a range's refusal of a key outside
/// it, and of a split or map change, among them); anything else travels as
/// its text under code 255 and reads back as `Error::Corrupt` with that
/// text (it cannot happen in apply, which only refuses what the values in
/// the store, or the group's bounds, make impossible).
pub(super) fn encode_error(e: &Error, out: &mut Vec<u8>) {
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
        // A key outside the group's range (route again).
        Error::WrongRange(why) => {
            out.push(9);
            put_bytes(out, why.as_bytes());
        }
        // A range split or map change refused.
        Error::InvalidConfig(why) => {
            out.push(10);
            put_bytes(out, why.as_bytes());
        }
        // Refused by a router before any log saw it; carried for a node
        // that forwards a routed batch's answers.
        Error::CrossRange => out.push(11),
        // A leader above its memory limit refused a write that adds data.
        Error::NoMemory => out.push(12),
        other => {
            out.push(255);
            put_bytes(out, other.to_string().as_bytes());
        }
    }
}

impl Reader<'_> {
    pub(super) fn error(&mut self) -> Decoded<Error> {
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
            9 => Error::WrongRange(String::from_utf8_lossy(self.bytes()?).into_owned()),
            10 => Error::InvalidConfig(String::from_utf8_lossy(self.bytes()?).into_owned()),
            11 => Error::CrossRange,
            12 => Error::NoMemory,
            255 => Error::Corrupt(String::from_utf8_lossy(self.bytes()?).into_owned()),
            _ => return Err(DecodeError("error code")),
        })
    }
}
