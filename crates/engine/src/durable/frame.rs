//! Checksummed framing of records in an append-only file, shared by the
//! write-ahead log and checkpoints (`record`) and by the Raft log's
//! segments (`combkv-replica`), so that the length and checksum checks, and
//! how a torn tail is told from a bad record, live in one place.
//!
//! ```text
//! frame   u32 body_len | u32 crc | body          (little-endian, CRC-32 IEEE)
//!         crc = crc32(body_len bytes ++ body)    with `checksum_covers_length`
//!         crc = crc32(body)                      without it
//! ```
//!
//! The two on-disk formats differ only in what the checksum covers and in
//! the largest body they accept, so a [`Framing`] names both; each format
//! keeps its own constant, and its golden tests pin its bytes.

/// Bytes of a frame's header: the body's length, then the checksum.
pub const HEADER_BYTES: usize = 8;

/// How one file format frames its records (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Whether the checksum covers the length's four bytes as well as the
    /// body (the write-ahead log and checkpoints), or the body alone (the
    /// Raft log). With it a flipped length bit is caught by the checksum
    /// even where the wrong length still fits in the file.
    pub checksum_covers_length: bool,
    /// The largest body a frame may claim: a larger length is damage, not a
    /// record, and the reader does not look for that many bytes.
    pub max_body: usize,
}

/// Why the bytes at some offset hold no valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes end inside the header: a torn write, if nothing valid
    /// follows (which only the caller can tell).
    TornHeader,
    /// The header is whole, the body is not: as [`FrameError::TornHeader`].
    TornBody,
    /// The length is over [`Framing::max_body`] (it is the length claimed).
    TooLong(u32),
    /// The body is all there but its checksum does not hold.
    ChecksumMismatch,
}

impl Framing {
    /// The checksum of a frame whose body is `body`.
    pub fn checksum(&self, body: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        if self.checksum_covers_length {
            h.update(&(body.len() as u32).to_le_bytes());
        }
        h.update(body);
        h.finalize()
    }

    /// Appends `body`, framed, to `out`.
    pub fn encode(&self, out: &mut Vec<u8>, body: &[u8]) {
        let start = self.begin(out);
        out.extend_from_slice(body);
        self.finish(out, start);
    }

    /// Starts a frame whose body the caller appends to `out` in place (no
    /// copy of it): reserves the header and returns where it starts, to be
    /// passed to [`Framing::finish`] once the body is written.
    pub fn begin(&self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_BYTES]);
        start
    }

    /// Fills in the header reserved at `start` by [`Framing::begin`], the
    /// body being every byte of `out` after that header.
    pub fn finish(&self, out: &mut [u8], start: usize) {
        let body = &out[start + HEADER_BYTES..];
        let len = body.len() as u32;
        let crc = self.checksum(body);
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    }

    /// The body of the frame at the start of `buf`, its length checked
    /// against `max_body` and `buf` and its checksum verified. Bytes of
    /// `buf` after the frame are not looked at; the frame takes
    /// `HEADER_BYTES + body.len()` bytes.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<&'a [u8], FrameError> {
        let Some(header) = buf.get(..HEADER_BYTES) else {
            return Err(FrameError::TornHeader);
        };
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        if len as usize > self.max_body {
            return Err(FrameError::TooLong(len));
        }
        let Some(body) = buf.get(HEADER_BYTES..HEADER_BYTES + len as usize) else {
            return Err(FrameError::TornBody);
        };
        if self.checksum(body) != crc {
            return Err(FrameError::ChecksumMismatch);
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [Framing; 2] = [
        Framing {
            checksum_covers_length: true,
            max_body: 1 << 31,
        },
        Framing {
            checksum_covers_length: false,
            max_body: 1 << 30,
        },
    ];

    /// The two checksums, byte for byte: `abc` framed each way.
    #[test]
    fn frame_bytes_are_pinned() {
        let mut with_len = Vec::new();
        BOTH[0].encode(&mut with_len, b"abc");
        assert_eq!(
            with_len,
            [3, 0, 0, 0, 0x33, 0x5d, 0xe1, 0x66, b'a', b'b', b'c']
        );
        let mut body_only = Vec::new();
        BOTH[1].encode(&mut body_only, b"abc");
        let crc = crc32fast::hash(b"abc").to_le_bytes();
        assert_eq!(body_only[4..8], crc);
        assert_eq!(body_only[..4], [3, 0, 0, 0]);
    }

    #[test]
    fn every_truncation_is_torn_and_every_flip_is_caught() {
        for f in BOTH {
            let mut buf = Vec::new();
            f.encode(&mut buf, b"some body");
            buf.extend_from_slice(b"after");
            assert_eq!(f.decode(&buf), Ok(&b"some body"[..]));
            let end = HEADER_BYTES + 9;
            for cut in 0..end {
                let want = if cut < HEADER_BYTES {
                    FrameError::TornHeader
                } else {
                    FrameError::TornBody
                };
                assert_eq!(f.decode(&buf[..cut]), Err(want), "cut {cut}");
            }
            for byte in 4..end {
                for bit in 0..8 {
                    let mut b = buf.clone();
                    b[byte] ^= 1 << bit;
                    assert!(f.decode(&b).is_err(), "flip {byte}.{bit}");
                }
            }
            let mut long = buf.clone();
            let claim = f.max_body as u32 + 1;
            long[..4].copy_from_slice(&claim.to_le_bytes());
            assert_eq!(f.decode(&long), Err(FrameError::TooLong(claim)));
        }
    }

    #[test]
    fn begin_and_finish_frame_in_place() {
        for f in BOTH {
            let mut a = vec![9];
            let start = f.begin(&mut a);
            a.extend_from_slice(b"xyz");
            f.finish(&mut a, start);
            let mut b = vec![9];
            f.encode(&mut b, b"xyz");
            assert_eq!(a, b);
        }
    }
}
