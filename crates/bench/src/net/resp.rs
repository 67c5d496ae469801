//! The client side of RESP2: commands out, reply frames in.
//!
//! Replies are parsed in place from the connection's read buffer, in two
//! steps as in mini-redis: [`frame_len`] says whether a whole frame has
//! arrived (and how long it is) without building anything, then [`parse`]
//! reads the complete frame, lending out slices of the buffer. Arrays are
//! not collected: [`Items`] walks their elements lazily, so a 100-item
//! range answer costs no allocation.

use std::fmt;

/// Deepest array nesting accepted (the bench's replies nest at most once).
const DEPTH_MAX: usize = 8;
/// Longest bulk string accepted: Redis's `proto-max-bulk-len` default.
const BULK_LEN_MAX: usize = 512 << 20;
/// Most elements in one array: far above the bench's largest reply (an
/// MGET of 100 keys), low enough that a corrupt length fails fast.
const ARRAY_LEN_MAX: usize = 1 << 24;

/// A reply that is not well-formed RESP2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad RESP reply: {}", self.0)
    }
}

fn bad<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// One reply, borrowing the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `+OK`
    Simple(&'a [u8]),
    /// `-ERR ...` (the text after the `-`).
    Error(&'a [u8]),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`
    Bulk(&'a [u8]),
    /// `$-1` or `*-1`.
    Null,
    /// `*N` and its elements.
    Array(Items<'a>),
}

impl fmt::Display for Frame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            Frame::Simple(b) => write!(f, "+{}", s(b)),
            Frame::Error(b) => write!(f, "-{}", s(b)),
            Frame::Integer(n) => write!(f, ":{n}"),
            Frame::Bulk(b) => write!(f, "{:?}", s(b)),
            Frame::Null => f.write_str("(nil)"),
            Frame::Array(items) => write!(f, "array of {}", items.len()),
        }
    }
}

/// The elements of an array frame, parsed one at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Items<'a> {
    /// The bytes of the remaining elements (all complete: checked by
    /// [`frame_len`] before the array was parsed).
    buf: &'a [u8],
    left: usize,
}

impl Items<'_> {
    /// Elements not yet taken.
    pub fn len(&self) -> usize {
        self.left
    }

    /// Whether every element has been taken.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Checked complete and well-formed by `frame_len`: cannot fail.
        let (frame, used) = parse_at(self.buf).expect("array elements were checked");
        self.buf = &self.buf[used..];
        Some(frame)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// The line at the start of `buf` (without its CRLF) and the bytes it takes
/// with the CRLF; `None` if its end has not arrived.
#[inline]
fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let text = buf[..nl].strip_suffix(b"\r")?;
    Some((text, nl + 1))
}

/// Like [`line`], but a line with a bare LF is an error.
#[inline]
fn checked_line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match buf.iter().position(|&b| b == b'\n') {
        None => Ok(None),
        Some(nl) if nl == 0 || buf[nl - 1] != b'\r' => bad("line ends in LF without CR"),
        Some(nl) => Ok(Some((&buf[..nl - 1], nl + 1))),
    }
}

fn integer(text: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .map_or_else(
            || {
                bad(format!(
                    "not an integer: {:?}",
                    String::from_utf8_lossy(text)
                ))
            },
            Ok,
        )
}

/// A length header: `-1` (null) or `0..=max`.
fn length(text: &[u8], max: usize) -> Result<Option<usize>, ProtocolError> {
    match integer(text)? {
        -1 => Ok(None),
        n if n >= 0 && n as u64 <= max as u64 => Ok(Some(n as usize)),
        n => bad(format!("length {n} out of range")),
    }
}

/// The length of the complete frame at the start of `buf`, `None` if more
/// bytes are needed; an error if the bytes are not RESP2.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    frame_len_at(buf, 0)
}

fn frame_len_at(buf: &[u8], depth: usize) -> Result<Option<usize>, ProtocolError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((text, head)) = checked_line(&buf[1..])? else {
        return Ok(None);
    };
    let head = head + 1;
    match kind {
        b'+' | b'-' => Ok(Some(head)),
        b':' => integer(text).map(|_| Some(head)),
        b'$' => match length(text, BULK_LEN_MAX)? {
            None => Ok(Some(head)),
            Some(n) => {
                let end = head + n + 2;
                if buf.len() < end {
                    Ok(None)
                } else if &buf[end - 2..end] != b"\r\n" {
                    bad("bulk string not followed by CRLF")
                } else {
                    Ok(Some(end))
                }
            }
        },
        b'*' => {
            if depth >= DEPTH_MAX {
                return bad("arrays nested too deep");
            }
            let Some(n) = length(text, ARRAY_LEN_MAX)? else {
                return Ok(Some(head));
            };
            let mut at = head;
            for _ in 0..n {
                match frame_len_at(&buf[at..], depth + 1)? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        other => bad(format!("unknown reply type byte {:?}", other as char)),
    }
}

/// The complete frame at the start of `buf` and its length, `None` if more
/// bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, ProtocolError> {
    let Some(len) = frame_len(buf)? else {
        return Ok(None);
    };
    let (frame, used) = parse_at(&buf[..len]).ok_or_else(|| ProtocolError("parse".into()))?;
    debug_assert_eq!(used, len);
    Ok(Some((frame, used)))
}

/// Parses a frame that [`frame_len`] found complete and well-formed.
fn parse_at(buf: &[u8]) -> Option<(Frame<'_>, usize)> {
    let kind = *buf.first()?;
    let (text, head) = line(&buf[1..])?;
    let head = head + 1;
    let frame = match kind {
        b'+' => (Frame::Simple(text), head),
        b'-' => (Frame::Error(text), head),
        b':' => (Frame::Integer(integer(text).ok()?), head),
        b'$' => match length(text, BULK_LEN_MAX).ok()? {
            None => (Frame::Null, head),
            Some(n) => (Frame::Bulk(buf.get(head..head + n)?), head + n + 2),
        },
        b'*' => match length(text, ARRAY_LEN_MAX).ok()? {
            None => (Frame::Null, head),
            Some(n) => {
                // The elements' extent: walk them once more (cheap: lines
                // and lengths only) so the iterator knows where the array ends.
                let body = &buf[head..];
                let mut at = 0;
                for _ in 0..n {
                    at += frame_len_at(&body[at..], 1).ok()??;
                }
                let items = Items {
                    buf: &body[..at],
                    left: n,
                };
                (Frame::Array(items), head + at)
            }
        },
        _ => return None,
    };
    Some(frame)
}

/// Appends the decimal digits of `n`.
#[inline]
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends the header of a command of `args` arguments; follow with
/// `args` calls of [`arg`].
#[inline]
pub fn command_header(out: &mut Vec<u8>, args: usize) {
    out.push(b'*');
    push_decimal(out, args);
    out.extend_from_slice(b"\r\n");
}

/// Appends one argument of a command.
#[inline]
pub fn arg(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    push_decimal(out, a.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// Appends a whole command.
#[inline]
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    command_header(out, args.len());
    for a in args {
        arg(out, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Frame<'_> {
        let (f, used) = parse(bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        f
    }

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &[b"SET", b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        out.clear();
        command_header(&mut out, 12);
        arg(&mut out, &[b'x'; 1234]);
        assert!(out.starts_with(b"*12\r\n$1234\r\nxx"));
    }

    #[test]
    fn every_reply_type_parses() {
        assert_eq!(one(b"+OK\r\n"), Frame::Simple(b"OK"));
        assert_eq!(
            one(b"-ERR no such key\r\n"),
            Frame::Error(b"ERR no such key")
        );
        assert_eq!(one(b":-42\r\n"), Frame::Integer(-42));
        assert_eq!(one(b"$5\r\nhe\r\no\r\n"), Frame::Bulk(b"he\r\no"));
        assert_eq!(one(b"$0\r\n\r\n"), Frame::Bulk(b""));
        assert_eq!(one(b"$-1\r\n"), Frame::Null);
        assert_eq!(one(b"*-1\r\n"), Frame::Null);
        let Frame::Array(items) = one(b"*4\r\n$1\r\na\r\n$-1\r\n:7\r\n*1\r\n+x\r\n") else {
            panic!("not an array");
        };
        assert_eq!(items.len(), 4);
        let got: Vec<String> = items.map(|f| f.to_string()).collect();
        assert_eq!(got, ["\"a\"", "(nil)", ":7", "array of 1"]);
        let Frame::Array(empty) = one(b"*0\r\n") else {
            panic!("not an array");
        };
        assert!(empty.is_empty());
    }

    /// A reply split at every byte boundary is incomplete until its last
    /// byte arrives, and then parses to the same frame; bytes of the next
    /// reply behind it are left alone.
    #[test]
    fn split_reads_wait_for_the_whole_frame() {
        let replies: [&[u8]; 5] = [
            b"+OK\r\n",
            b":1\r\n",
            b"$16\r\n0123456789abcdef\r\n",
            b"*4\r\n$2\r\nk1\r\n$2\r\nv1\r\n$2\r\nk2\r\n$-1\r\n",
            b"*2\r\n*1\r\n$1\r\na\r\n*0\r\n",
        ];
        for r in replies {
            for cut in 0..r.len() {
                assert_eq!(parse(&r[..cut]), Ok(None), "{r:?} cut at {cut}");
            }
            let mut two = r.to_vec();
            two.extend_from_slice(b"+NEXT\r\n");
            let (f, used) = parse(&two).unwrap().unwrap();
            assert_eq!(used, r.len());
            assert_eq!(f, one(r));
        }
    }

    #[test]
    fn malformed_replies_are_errors() {
        for bytes in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$3\r\nabcd\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"+OK\n",
            b"*1\r\n!\r\n",
        ] {
            assert!(parse(bytes).is_err(), "{bytes:?}");
        }
    }
}
