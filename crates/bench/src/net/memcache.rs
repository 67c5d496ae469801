//! The client side of the memcached text protocol: `get` and `set`.
//!
//! A reply's shape depends on the command it answers, so the parser is told
//! which one it waits for. Parsing happens in place in the read buffer; an
//! incomplete reply reads as `None` until the rest arrives.

use std::fmt;

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_LEN_MAX: usize = 250;
/// Longest reply line accepted before its CRLF: a `VALUE` header carries a
/// key of at most 250 bytes and three numbers.
const LINE_LEN_MAX: usize = 512;
/// Largest value accepted in a `VALUE` header (memcached's `-I` maximum).
const VALUE_LEN_MAX: usize = 1 << 30;

/// A reply that is not what the protocol allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad memcached reply: {}", self.0)
    }
}

fn bad<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// One reply, borrowing the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `get` hit: the value's bytes.
    Value(&'a [u8]),
    /// `get` miss (`END` alone).
    Miss,
    /// `set` done (`STORED`).
    Stored,
    /// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...` or another line a
    /// `set` may get (`NOT_STORED`): the whole line.
    Failed(&'a [u8]),
}

impl fmt::Display for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Value(v) => write!(f, "VALUE {:?}", String::from_utf8_lossy(v)),
            Reply::Miss => f.write_str("END"),
            Reply::Stored => f.write_str("STORED"),
            Reply::Failed(line) => f.write_str(&String::from_utf8_lossy(line)),
        }
    }
}

/// Which command a reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Get,
    Set,
}

/// The line at the start of `buf` without its CRLF, and the bytes it takes.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match buf.iter().position(|&b| b == b'\n') {
        None if buf.len() > LINE_LEN_MAX => bad("reply line too long"),
        None => Ok(None),
        Some(nl) if nl == 0 || buf[nl - 1] != b'\r' => bad("line ends in LF without CR"),
        Some(nl) => Ok(Some((&buf[..nl - 1], nl + 1))),
    }
}

fn is_failure(text: &[u8]) -> bool {
    text == b"ERROR" || text.starts_with(b"CLIENT_ERROR") || text.starts_with(b"SERVER_ERROR")
}

/// The reply at the start of `buf` to the command `expect` and its length,
/// `None` if more bytes are needed.
pub fn parse(buf: &[u8], expect: Expect) -> Result<Option<(Reply<'_>, usize)>, ProtocolError> {
    let Some((text, head)) = line(buf)? else {
        return Ok(None);
    };
    if is_failure(text) {
        return Ok(Some((Reply::Failed(text), head)));
    }
    match expect {
        Expect::Set => match text {
            b"STORED" => Ok(Some((Reply::Stored, head))),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Ok(Some((Reply::Failed(text), head))),
            _ => bad(format!(
                "unexpected answer to set: {:?}",
                String::from_utf8_lossy(text)
            )),
        },
        Expect::Get => {
            if text == b"END" {
                return Ok(Some((Reply::Miss, head)));
            }
            // VALUE <key> <flags> <bytes> [<cas unique>]
            let mut words = text.split(|&b| b == b' ');
            let (Some(b"VALUE"), Some(_key), Some(_flags), Some(len)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return bad(format!(
                    "unexpected answer to get: {:?}",
                    String::from_utf8_lossy(text)
                ));
            };
            let len = std::str::from_utf8(len)
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&n| n <= VALUE_LEN_MAX)
                .map_or_else(|| bad("bad length in VALUE line"), Ok)?;
            let data_end = head + len;
            let end = data_end + b"\r\nEND\r\n".len();
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[data_end..end] != b"\r\nEND\r\n" {
                return bad("value not followed by CRLF END CRLF (more than one VALUE?)");
            }
            Ok(Some((Reply::Value(&buf[head..data_end]), end)))
        }
    }
}

/// Appends the decimal digits of `n`.
fn push_decimal(out: &mut Vec<u8>, n: usize) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// Appends `get <key>`.
#[inline]
pub fn get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"get ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends `set <key> 0 0 <bytes>` and the value (flags 0, no expiry).
#[inline]
pub fn set(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" 0 0 ");
    push_decimal(out, value.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8], expect: Expect) -> Reply<'_> {
        let (r, used) = parse(bytes, expect).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        r
    }

    #[test]
    fn commands_encode() {
        let mut out = Vec::new();
        get(&mut out, b"k1");
        set(&mut out, b"k2", b"hello");
        assert_eq!(out, b"get k1\r\nset k2 0 0 5\r\nhello\r\n");
    }

    #[test]
    fn replies_parse() {
        assert_eq!(one(b"END\r\n", Expect::Get), Reply::Miss);
        assert_eq!(
            one(b"VALUE k 0 5\r\nab\r\nc\r\nEND\r\n", Expect::Get),
            Reply::Value(b"ab\r\nc")
        );
        assert_eq!(
            one(b"VALUE k 0 0 77\r\n\r\nEND\r\n", Expect::Get),
            Reply::Value(b"")
        );
        assert_eq!(one(b"STORED\r\n", Expect::Set), Reply::Stored);
        assert_eq!(
            one(b"SERVER_ERROR out of memory\r\n", Expect::Set),
            Reply::Failed(b"SERVER_ERROR out of memory")
        );
        assert_eq!(one(b"ERROR\r\n", Expect::Get), Reply::Failed(b"ERROR"));
        assert_eq!(
            one(b"NOT_STORED\r\n", Expect::Set),
            Reply::Failed(b"NOT_STORED")
        );
    }

    #[test]
    fn split_reads_wait_for_the_whole_reply() {
        let cases: [(&[u8], Expect); 3] = [
            (
                b"VALUE 0123456789abcdef 0 16\r\n0123456789ABCDEF\r\nEND\r\n",
                Expect::Get,
            ),
            (b"END\r\n", Expect::Get),
            (b"STORED\r\n", Expect::Set),
        ];
        for (r, expect) in cases {
            for cut in 0..r.len() {
                assert_eq!(parse(&r[..cut], expect), Ok(None), "{r:?} cut at {cut}");
            }
            let mut two = r.to_vec();
            two.extend_from_slice(b"STORED\r\n");
            let (got, used) = parse(&two, expect).unwrap().unwrap();
            assert_eq!(used, r.len());
            assert_eq!(got, one(r, expect));
        }
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(parse(b"STORED\r\n", Expect::Get).is_err());
        assert!(parse(b"END\r\n", Expect::Set).is_err());
        assert!(parse(b"VALUE k 0 x\r\n", Expect::Get).is_err());
        assert!(parse(b"VALUE k 0 1\r\nab\r\nEND\r\n", Expect::Get).is_err());
        assert!(parse(b"END\n", Expect::Get).is_err());
        assert!(parse(&[b'x'; 600], Expect::Get).is_err());
    }
}
