//! The pieces every op and outcome is built of: u64s (little-endian),
//! byte strings (a u64 length, then the bytes) and versions (0: none), and
//! the `Reader` that takes them apart. The kinds' own decoders add methods
//! to `Reader` in their modules.

use combkv::Version;

use super::{DecodeError, Decoded};

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(super) fn put_version(out: &mut Vec<u8>, v: Option<Version>) {
    put_u64(out, v.map_or(0, Version::get));
}

/// The bytes not yet decoded; each method takes what it decodes off the
/// front.
pub(super) struct Reader<'a> {
    pub(super) b: &'a [u8],
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
    pub(super) fn u8(&mut self) -> Decoded<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn bool(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bool")),
        }
    }
    pub(super) fn u64(&mut self) -> Decoded<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A count of things that each take at least one byte.
    pub(super) fn count(&mut self) -> Decoded<usize> {
        let n = self.u64()?;
        if n > self.b.len() as u64 {
            return Err(DecodeError("count"));
        }
        Ok(n as usize)
    }
    pub(super) fn bytes(&mut self) -> Decoded<&'a [u8]> {
        let n = self.u64()?;
        if n > self.b.len() as u64 {
            return Err(DecodeError("length"));
        }
        self.take(n as usize)
    }
    pub(super) fn end(&self) -> Decoded<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
    pub(super) fn version(&mut self) -> Decoded<Option<Version>> {
        Ok(match self.u64()? {
            0 => None,
            v => Some(Version(v)),
        })
    }
}
