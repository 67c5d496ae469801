//! memcached text and meta request parsing: bytes -> [`Request`], borrowing
//! from the input (nothing is copied, and nothing is allocated: a base64
//! key decodes into a fixed buffer inside the request). This file holds the
//! request types and the framing of a line; `text` parses the classic
//! commands, `meta` the meta commands, `token` the tokens, numbers and
//! base64 keys they are made of.
//!
//! Framing follows memcached 1.6's `proto_text.c`: a command line ends at
//! `\n` (a `\r` before it is dropped), tokens are separated by spaces, and a
//! storage command's data block is exactly `<bytes>` bytes followed by
//! `\r\n`. A declared length is checked against the limits before the
//! parser waits for the block, so a length prefix never makes the server
//! buffer more than `max-value-len` (or `max-request-bytes`) for a request.

mod meta;
mod text;
mod token;

use super::error::McError;
pub use super::types::{BIG_BODY, Limits, MEMCACHED_MAX_KEY, StoreCmd};
use token::{Tokens, after_words};

pub(crate) use token::encode_base64;

/// Keys per part of a retrieval line (see [`Request::Get`]).
pub const GET_CHUNK_KEYS: usize = 4;
pub use token::{keys, words};

/// Longest command line memcached waits for without a newline; a longer one
/// closes the connection. Multi-key retrievals may be longer (up to
/// `max_request_bytes`).
pub const MAX_LINE_BYTES: usize = 2048;
/// memcached's `MAX_TOKENS`: at most 23 tokens are split off a line (the
/// count includes a terminal token, as `ntokens` does in memcached).
const MAX_TOKENS: usize = 24;
/// memcached's `MFLAG_MAX_OPT_LENGTH`: meta commands take at most this many
/// tokens (command, key, flags, terminal).
const META_MAX_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH` (the `O` included).
const MAX_OPAQUE: usize = 32;
/// Exptimes above this many seconds are unix times (memcached: 30 days).
pub const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;

/// What the parser made of the start of the input.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a request holds a decoded key buffer; boxing would allocate per request"
)]
pub enum Parsed<'a> {
    /// No whole request yet. Input bytes `[0, scanned)` hold no newline:
    /// pass `scanned` back with the same input start to avoid rescanning.
    /// `wanted`: the bytes the request needs, once a storage command's
    /// line gave its data block's length (0: not known).
    Incomplete { scanned: usize, wanted: usize },
    /// A request, `consumed` bytes long (line and data block).
    Request { req: Request<'a>, consumed: usize },
    /// A request that is answered with an error: the line (and a bad data
    /// block) is `consumed` bytes; the next `swallow` bytes are the data
    /// block of a rejected storage command and are skipped unread, however
    /// they arrive. `noreply` suppresses the error (memcached's
    /// `noreply` applies to error replies too).
    Error {
        err: McError,
        noreply: bool,
        consumed: usize,
        swallow: usize,
    },
    /// Framing is lost (a line past the limits): reply and close.
    Close { err: McError },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKind {
    Get,
    Gets,
    /// Get and touch.
    Gat,
    Gats,
}

impl GetKind {
    pub fn with_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats)
    }
}

/// A request line (with its data block), borrowing from the input.
#[derive(Debug)]
pub enum Request<'a> {
    /// A retrieval line, or a part of one: a line with more than
    /// `GET_CHUNK_KEYS` keys is answered in parts, so that its replies can
    /// stop at the reply budget between parts (see `Memcache::parse`).
    Get {
        kind: GetKind,
        /// Gat/gats only.
        exptime: i64,
        /// Space-separated keys (see [`keys`]); each checked against the limits.
        keys: &'a [u8],
        /// The line's first part (counted as a command).
        first: bool,
        /// The line's last part: `END` follows its values.
        last: bool,
        /// For a part after the first: the line's bytes left from where the
        /// part starts, its newline included.
        line_left: usize,
    },
    Store {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        /// Cas only.
        cas: u64,
        data: &'a [u8],
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        /// Seconds (or a unix time), as an exptime; 0 or less: now.
        delay: i64,
        noreply: bool,
    },
    Version,
    Quit,
    /// `shutdown [graceful]` (both graceful here); `Err`: another mode.
    Shutdown {
        valid: bool,
    },
    Verbosity {
        noreply: bool,
    },
    /// `stats [args]`: the words after `stats`.
    Stats {
        args: &'a [u8],
    },
    /// `lru_crawler metadump <classes>` and `stats cachedump <class>
    /// <limit>`: every item's metadata, streamed in parts
    /// (`Memcache::parse` turns the line into parts).
    MetaDump {
        /// The classes named hold class 1, which holds every item here.
        class_one: bool,
        /// `stats cachedump`'s format, with its limit (0: none);
        /// `None`: metadump's.
        cachedump: Option<u32>,
    },
    /// `lru_crawler metadump` naming a class that cannot exist: memcached's
    /// `BADCLASS` reply.
    MetaDumpBadClass,
    MetaNoop,
    MetaDebug {
        key: Key<'a>,
    },
    MetaGet {
        key: Key<'a>,
        flags: MetaFlags<'a>,
    },
    MetaSet {
        key: Key<'a>,
        flags: MetaFlags<'a>,
        data: &'a [u8],
    },
    MetaDelete {
        key: Key<'a>,
        flags: MetaFlags<'a>,
    },
    MetaArith {
        key: Key<'a>,
        flags: MetaFlags<'a>,
    },
    /// The authenticating `set` of a connection that must authenticate
    /// (`memcache::auth`; never returned by [`parse`]).
    Auth {
        user: &'a [u8],
        pass: &'a [u8],
    },
    /// A binary protocol request (`memcache::binary`; never returned by
    /// [`parse`]).
    Binary(crate::memcache::binary::BinRequest<'a>),
}

/// The longest key a base64 token of `MEMCACHED_MAX_KEY` bytes decodes to.
const DECODED_KEY_MAX: usize = MEMCACHED_MAX_KEY / 4 * 3 + 3;

/// A meta command's key: as sent, or decoded from base64 (`b` flag).
#[derive(Clone, Copy)]
pub struct Key<'a> {
    raw: &'a [u8],
    decoded: Option<([u8; DECODED_KEY_MAX], u8)>,
}

impl std::fmt::Debug for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?}", String::from_utf8_lossy(self.bytes()))?;
        if self.is_binary() {
            write!(f, ", base64")?;
        }
        write!(f, ")")
    }
}

impl<'a> Key<'a> {
    pub fn text(raw: &'a [u8]) -> Key<'a> {
        Key { raw, decoded: None }
    }

    /// The key as stored.
    pub fn bytes(&self) -> &[u8] {
        match &self.decoded {
            Some((buf, len)) => &buf[..*len as usize],
            None => self.raw,
        }
    }

    /// The key came base64-encoded (and is returned that way).
    pub fn is_binary(&self) -> bool {
        self.decoded.is_some()
    }
}

/// A meta command's flags: the ones that change what it does, parsed, and
/// the raw tokens, walked again in order to build the return flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaFlags<'a> {
    /// The flag tokens, space-separated, as sent.
    pub tokens: &'a [u8],
    pub quiet: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `T`: new TTL (an exptime).
    pub ttl: Option<i64>,
    /// `N`: create on miss with this TTL (ms append mode, ma).
    pub vivify: Option<i64>,
    /// `F`: client flags (ms).
    pub client_flags: Option<u32>,
    /// `C`: compare against this CAS unique.
    pub compare_cas: Option<u64>,
    /// `M`: mode switch (ms, ma).
    pub mode: Option<u8>,
    /// `J`: initial value (ma).
    pub initial: Option<u64>,
    /// `D`: delta (ma).
    pub delta: Option<u64>,
}

impl<'a> MetaFlags<'a> {
    /// The flag tokens in request order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        words(self.tokens)
    }
}

/// A meta request's key and flags, copied to outlive the request: what a
/// held reply renders with (on a cluster node, see `park`).
#[derive(Debug)]
pub struct HeldMeta {
    raw: Vec<u8>,
    decoded: Option<([u8; DECODED_KEY_MAX], u8)>,
    tokens: Vec<u8>,
    flags: MetaFlags<'static>,
}

impl HeldMeta {
    pub fn new(key: &Key<'_>, flags: &MetaFlags<'_>) -> HeldMeta {
        HeldMeta {
            raw: key.raw.to_vec(),
            decoded: key.decoded,
            tokens: flags.tokens.to_vec(),
            flags: MetaFlags {
                tokens: &[],
                ..*flags
            },
        }
    }

    pub fn key(&self) -> Key<'_> {
        Key {
            raw: &self.raw,
            decoded: self.decoded,
        }
    }

    pub fn flags(&self) -> MetaFlags<'_> {
        MetaFlags {
            tokens: &self.tokens,
            ..self.flags
        }
    }
}

/// A retrieval line may be longer than `MAX_LINE_BYTES` (memcached allows
/// this for `get` and `gets` after at most 100 leading spaces; combkv also
/// for `gat` and `gats`).
fn is_retrieval_prefix(input: &[u8]) -> bool {
    let spaces = input.iter().take_while(|&&b| b == b' ').count();
    if spaces > 100 {
        return false;
    }
    let rest = &input[spaces..];
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|p| rest.starts_with(p))
}

/// Parses the request at the start of `input`. `scanned` is a hint from an
/// earlier `Incomplete` on the same input start (0 when unknown).
pub fn parse<'a>(input: &'a [u8], limits: &Limits, scanned: usize) -> Parsed<'a> {
    let from = scanned.min(input.len());
    let long_ok = |len: usize| is_retrieval_prefix(input) && len <= limits.max_request_bytes;
    let Some(nl) = input[from..].iter().position(|&b| b == b'\n') else {
        if input.len() > MAX_LINE_BYTES && !long_ok(input.len()) {
            return Parsed::Close {
                err: McError::LineTooLong,
            };
        }
        return Parsed::Incomplete {
            scanned: input.len(),
            wanted: 0,
        };
    };
    let nl = from + nl;
    if nl > MAX_LINE_BYTES && !long_ok(nl) {
        return Parsed::Close {
            err: McError::LineTooLong,
        };
    }
    let mut line = &input[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    parse_line(input, line, nl + 1, limits)
}

fn error<'a>(err: McError) -> Result<Request<'a>, (McError, bool, usize)> {
    Err((err, false, 0))
}

/// Parses one line; `line_len` is its length with the newline.
fn parse_line<'a>(input: &'a [u8], line: &'a [u8], line_len: usize, limits: &Limits) -> Parsed<'a> {
    let toks = Tokens::split(line);
    let cmd = toks.t[0];
    let r = if toks.ntokens() < 2 || cmd.len() < 2 {
        error(McError::UnknownCommand)
    } else if cmd[0] == b'm' && cmd.len() == 2 {
        match cmd[1] {
            b'n' => Ok(Request::MetaNoop),
            b'e' => meta::meta_debug(&toks),
            b'g' | b'd' | b'a' => meta::meta_line(cmd[1], line, &toks, limits),
            b's' => return meta::meta_set(input, line, &toks, line_len, limits),
            _ => error(McError::UnknownCommand),
        }
    } else {
        match cmd {
            b"get" | b"gets" | b"gat" | b"gats" => text::retrieval(cmd, line, &toks, limits),
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                return text::storage(input, &toks, line_len, limits);
            }
            b"delete" => text::delete(&toks, limits),
            b"incr" | b"decr" => text::arith(cmd == b"incr", &toks, limits),
            b"touch" => text::touch(&toks, limits),
            b"flush_all" => text::flush_all(&toks),
            b"version" => Ok(Request::Version),
            b"quit" => Ok(Request::Quit),
            b"shutdown" => Ok(Request::Shutdown {
                // memcached's `ntokens` counts the terminal token.
                valid: toks.ntokens() == 2 || (toks.ntokens() == 3 && toks.t[1] == b"graceful"),
            }),
            b"verbosity" => text::verbosity(&toks),
            b"stats" if toks.t[1] == b"cachedump" => text::cachedump(&toks),
            b"stats" => Ok(Request::Stats {
                args: after_words(line, 1),
            }),
            b"lru_crawler" => text::lru_crawler(&toks),
            _ => error(McError::UnknownCommand),
        }
    };
    match r {
        Ok(req) => Parsed::Request {
            req,
            consumed: line_len,
        },
        Err((err, noreply, swallow)) => Parsed::Error {
            err,
            noreply,
            consumed: line_len,
            swallow,
        },
    }
}

type LineResult<'a> = Result<Request<'a>, (McError, bool, usize)>;

fn key_ok(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty() && key.len() <= MEMCACHED_MAX_KEY && key.len() <= limits.max_key_len
}

fn noreply_of(toks: &Tokens<'_>) -> bool {
    toks.last() == b"noreply"
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const LIM: Limits = Limits {
        max_key_len: 250,
        max_value_len: 1024,
        max_request_bytes: 1 << 20,
        max_body: usize::MAX,
    };

    pub(super) fn req(input: &[u8]) -> Request<'_> {
        match parse(input, &LIM, 0) {
            Parsed::Request { req, .. } => req,
            other => panic!("{other:?}"),
        }
    }

    pub(super) fn err(input: &[u8]) -> (McError, bool, usize, usize) {
        match parse(input, &LIM, 0) {
            Parsed::Error {
                err,
                noreply,
                consumed,
                swallow,
            } => (err, noreply, consumed, swallow),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn storage_waits_for_its_data_block() {
        assert!(matches!(
            parse(b"set k 0 0 5\r\nhel", &LIM, 0),
            Parsed::Incomplete { .. }
        ));
        match req(b"set k 1 2 5 noreply\r\nhello\r\nget k\r\n") {
            Request::Store {
                cmd: StoreCmd::Set,
                key: b"k",
                flags: 1,
                exptime: 2,
                data: b"hello",
                noreply: true,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oversize_value_is_skipped_not_buffered() {
        let (e, _, consumed, swallow) = err(b"set k 0 0 2000\r\n");
        assert_eq!(e, McError::TooLarge);
        assert_eq!((consumed, swallow), (16, 2002));
    }

    #[test]
    fn long_lines_close_unless_retrievals() {
        let junk = vec![b'x'; MAX_LINE_BYTES + 1];
        assert!(matches!(parse(&junk, &LIM, 0), Parsed::Close { .. }));
        let mut get = b"get ".to_vec();
        get.resize(MAX_LINE_BYTES + 100, b'k');
        assert!(matches!(parse(&get, &LIM, 0), Parsed::Incomplete { .. }));
    }
}
