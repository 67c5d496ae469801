//! memcached text and meta request parsing: bytes -> [`Request`], borrowing
//! from the input (nothing is copied, and nothing is allocated: a base64
//! key decodes into a fixed buffer inside the request).
//!
//! Framing follows memcached 1.6's `proto_text.c`: a command line ends at
//! `\n` (a `\r` before it is dropped), tokens are separated by spaces, and a
//! storage command's data block is exactly `<bytes>` bytes followed by
//! `\r\n`. A declared length is checked against the limits before the
//! parser waits for the block, so a length prefix never makes the server
//! buffer more than `max-value-len` (or `max-request-bytes`) for a request.

use super::error::McError;

/// Longest command line memcached waits for without a newline; a longer one
/// closes the connection. Multi-key retrievals may be longer (up to
/// `max_request_bytes`).
pub const MAX_LINE_BYTES: usize = 2048;
/// memcached's key length limit.
pub const MEMCACHED_MAX_KEY: usize = 250;
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

/// The limits a request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// The store's longest key (the memcached limit of 250 applies as well).
    pub max_key_len: usize,
    pub max_value_len: usize,
    /// A whole request: line and data block.
    pub max_request_bytes: usize,
}

/// What the parser made of the start of the input.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a request holds a decoded key buffer; boxing would allocate per request"
)]
pub enum Parsed<'a> {
    /// No whole request yet. Input bytes `[0, scanned)` hold no newline:
    /// pass `scanned` back with the same input start to avoid rescanning.
    Incomplete { scanned: usize },
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// A request line (with its data block), borrowing from the input.
#[derive(Debug)]
pub enum Request<'a> {
    Get {
        kind: GetKind,
        /// Gat/gats only.
        exptime: i64,
        /// Space-separated keys (see [`keys`]); each checked against the limits.
        keys: &'a [u8],
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
    Verbosity {
        noreply: bool,
    },
    /// `stats [args]`: the words after `stats`.
    Stats {
        args: &'a [u8],
    },
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

/// Space-separated words of a line (memcached splits on spaces only).
pub fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// The keys of a retrieval request, in order.
pub fn keys(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    words(line)
}

/// The first tokens of a line, as memcached's tokenizer splits them.
struct Tokens<'a> {
    t: [&'a [u8]; MAX_TOKENS],
    /// Real tokens (at most `MAX_TOKENS - 1`).
    n: usize,
}

impl<'a> Tokens<'a> {
    fn split(line: &'a [u8]) -> Tokens<'a> {
        let mut t: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        for w in words(line) {
            if n == MAX_TOKENS - 1 {
                break;
            }
            t[n] = w;
            n += 1;
        }
        Tokens { t, n }
    }

    /// memcached's `ntokens`: real tokens plus the terminal one.
    fn ntokens(&self) -> usize {
        self.n + 1
    }

    fn last(&self) -> &'a [u8] {
        if self.n == 0 { &[] } else { self.t[self.n - 1] }
    }
}

/// The part of `line` after its first `skip` words.
fn after_words(line: &[u8], skip: usize) -> &[u8] {
    let mut at = 0;
    for _ in 0..skip {
        while at < line.len() && line[at] == b' ' {
            at += 1;
        }
        while at < line.len() && line[at] != b' ' {
            at += 1;
        }
    }
    &line[at..]
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
            b'e' => meta_debug(&toks),
            b'g' | b'd' | b'a' => meta_line(cmd[1], line, &toks, limits),
            b's' => return meta_set(input, line, &toks, line_len, limits),
            _ => error(McError::UnknownCommand),
        }
    } else {
        match cmd {
            b"get" | b"gets" | b"gat" | b"gats" => retrieval(cmd, line, &toks, limits),
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                return storage(input, &toks, line_len, limits);
            }
            b"delete" => delete(&toks, limits),
            b"incr" | b"decr" => arith(cmd == b"incr", &toks, limits),
            b"touch" => touch(&toks, limits),
            b"flush_all" => flush_all(&toks),
            b"version" => Ok(Request::Version),
            b"quit" => Ok(Request::Quit),
            b"verbosity" => verbosity(&toks),
            b"stats" => Ok(Request::Stats {
                args: after_words(line, 1),
            }),
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

fn retrieval<'a>(cmd: &[u8], line: &'a [u8], toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() < 3 {
        return error(McError::UnknownCommand);
    }
    let kind = match cmd {
        b"get" => GetKind::Get,
        b"gets" => GetKind::Gets,
        b"gat" => GetKind::Gat,
        _ => GetKind::Gats,
    };
    let (exptime, keys) = if matches!(kind, GetKind::Gat | GetKind::Gats) {
        let Some(e) = parse_i32(toks.t[1]) else {
            return error(McError::InvalidExptime);
        };
        (i64::from(e), after_words(line, 2))
    } else {
        (0, after_words(line, 1))
    };
    // memcached answers a retrieval with a too-long key by an error alone.
    if words(keys).any(|k| !key_ok(k, limits)) {
        return error(McError::KeyTooLong);
    }
    Ok(Request::Get {
        kind,
        exptime,
        keys,
    })
}

/// The data block of a storage command whose line is `line_len` bytes and
/// whose declared length is `vlen`. `Ok(None)`: not all there yet.
fn data_block(input: &[u8], line_len: usize, vlen: usize) -> Result<Option<&[u8]>, McError> {
    let need = line_len + vlen + 2;
    if input.len() < need {
        return Ok(None);
    }
    if &input[line_len + vlen..need] != b"\r\n" {
        return Err(McError::BadDataChunk);
    }
    Ok(Some(&input[line_len..line_len + vlen]))
}

fn too_large(line_len: usize, vlen: usize, limits: &Limits) -> bool {
    vlen > limits.max_value_len || line_len.saturating_add(vlen + 2) > limits.max_request_bytes
}

fn storage<'a>(input: &'a [u8], toks: &Tokens<'a>, line_len: usize, limits: &Limits) -> Parsed<'a> {
    let cmd = match toks.t[0] {
        b"set" => StoreCmd::Set,
        b"add" => StoreCmd::Add,
        b"replace" => StoreCmd::Replace,
        b"append" => StoreCmd::Append,
        b"prepend" => StoreCmd::Prepend,
        _ => StoreCmd::Cas,
    };
    let want = if cmd == StoreCmd::Cas { 7 } else { 6 };
    let fail = |err, noreply, swallow| Parsed::Error {
        err,
        noreply,
        consumed: line_len,
        swallow,
    };
    if toks.ntokens() != want && toks.ntokens() != want + 1 {
        return fail(McError::UnknownCommand, false, 0);
    }
    let noreply = noreply_of(toks);
    let vlen = parse_i32(toks.t[4]).and_then(|v| usize::try_from(v).ok());
    // Once the length parses, a rejected command's data block is skipped,
    // so the data is never read as commands (memcached does this for
    // too-large values only).
    let skip = vlen.map_or(0, |v| v + 2);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return fail(McError::KeyTooLong, noreply, skip);
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_u32(toks.t[2]), parse_i32(toks.t[3]), vlen)
    else {
        return fail(McError::BadFormat, noreply, skip);
    };
    let cas = if cmd == StoreCmd::Cas {
        match parse_u64(toks.t[5]) {
            Some(c) => c,
            None => return fail(McError::BadFormat, noreply, skip),
        }
    } else {
        0
    };
    if too_large(line_len, vlen, limits) {
        return fail(McError::TooLarge, noreply, skip);
    }
    match data_block(input, line_len, vlen) {
        Ok(None) => Parsed::Incomplete { scanned: 0 },
        Err(err) => Parsed::Error {
            err,
            noreply,
            consumed: line_len + vlen + 2,
            swallow: 0,
        },
        Ok(Some(data)) => Parsed::Request {
            req: Request::Store {
                cmd,
                key,
                flags,
                exptime: i64::from(exptime),
                cas,
                data,
                noreply,
            },
            consumed: line_len + vlen + 2,
        },
    }
}

fn delete<'a>(toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    let n = toks.ntokens();
    if !(3..=5).contains(&n) {
        return error(McError::UnknownCommand);
    }
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = toks.t[2] == b"0";
        noreply = noreply_of(toks);
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            return Err((McError::DeleteUsage, noreply, 0));
        }
    }
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    Ok(Request::Delete { key, noreply })
}

fn arith<'a>(incr: bool, toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() != 4 && toks.ntokens() != 5 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    let Some(delta) = parse_u64(toks.t[2]) else {
        return Err((McError::InvalidDelta, noreply, 0));
    };
    Ok(Request::Arith {
        incr,
        key,
        delta,
        noreply,
    })
}

fn touch<'a>(toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() != 4 && toks.ntokens() != 5 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    let Some(exptime) = parse_i32(toks.t[2]) else {
        return Err((McError::InvalidExptime, noreply, 0));
    };
    Ok(Request::Touch {
        key,
        exptime: i64::from(exptime),
        noreply,
    })
}

fn flush_all<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    let n = toks.ntokens();
    if !(2..=4).contains(&n) {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let mut delay = 0;
    if n != if noreply { 3 } else { 2 } {
        match parse_i32(toks.t[1]) {
            Some(d) => delay = i64::from(d),
            None => return Err((McError::InvalidExptime, noreply, 0)),
        }
    }
    Ok(Request::FlushAll { delay, noreply })
}

fn verbosity<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() != 3 && toks.ntokens() != 4 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    if parse_u32(toks.t[1]).is_none() {
        return Err((McError::BadFormat, noreply, 0));
    }
    Ok(Request::Verbosity { noreply })
}

fn meta_debug<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() < 3 || toks.t[1].len() > MEMCACHED_MAX_KEY {
        return error(McError::BadFormat);
    }
    let mut key = Key::text(toks.t[1]);
    if toks.ntokens() >= 4 && toks.t[2] == b"b" {
        match decode_key(toks.t[1]) {
            Some(k) => key = k,
            None => return error(McError::BadFormat),
        }
    }
    Ok(Request::MetaDebug { key })
}

/// Which meta command a flag list belongs to (the flags each accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meta {
    Get,
    Set,
    Delete,
    Arith,
}

/// memcached's `_meta_flag_preparse`: every flag once, known flags only,
/// numeric tokens parsed. Flags combkv does not implement (stale items and
/// leases: `mg N R`, `ms I`, `md I`, `E`) are refused as invalid rather
/// than silently ignored. Returns the key (decoded for `b`).
fn meta_flags<'a>(
    which: Meta,
    key: &'a [u8],
    tokens: &'a [u8],
) -> Result<(Key<'a>, MetaFlags<'a>), McError> {
    let mut f = MetaFlags {
        tokens,
        ..MetaFlags::default()
    };
    let mut k = Key::text(key);
    let mut seen = [false; 128];
    let mut err = None;
    for t in words(tokens) {
        let o = t[0];
        if o >= 127 || seen[o as usize] {
            return Err(McError::DuplicateFlag);
        }
        seen[o as usize] = true;
        let arg = &t[1..];
        match o {
            b'b' => match decode_key(key) {
                Some(d) => k = d,
                None => err = Some(McError::KeyDecode),
            },
            b'N' if matches!(which, Meta::Set | Meta::Arith) => match parse_i32(arg) {
                Some(v) => f.vivify = Some(i64::from(v)),
                None => err = Some(McError::BadToken),
            },
            b'T' => match parse_i32(arg) {
                Some(v) => f.ttl = Some(i64::from(v)),
                None => err = Some(McError::BadToken),
            },
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' | b'u' => {}
            b'v' => f.value = true,
            b'q' => f.quiet = true,
            b'F' => match parse_u32(arg) {
                Some(v) => f.client_flags = Some(v),
                None => err = Some(McError::BadFormat),
            },
            b'C' => match parse_u64(arg) {
                Some(v) => f.compare_cas = Some(v),
                None => err = Some(McError::BadToken),
            },
            b'M' => {
                if t.len() != 2 {
                    err = Some(McError::MTokenLength);
                } else {
                    f.mode = Some(t[1]);
                }
            }
            b'J' => match parse_u64(arg) {
                Some(v) => f.initial = Some(v),
                None => err = Some(McError::InitialValue),
            },
            b'D' => match parse_u64(arg) {
                Some(v) => f.delta = Some(v),
                None => err = Some(McError::MetaDelta),
            },
            _ => return Err(McError::InvalidFlag),
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok((k, f)),
    }
}

/// The opaque tokens must be short (memcached checks while replying).
fn check_opaque(f: &MetaFlags<'_>) -> Result<(), McError> {
    if f.iter().any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE) {
        return Err(McError::OpaqueTooLong);
    }
    Ok(())
}

fn meta_line<'a>(which: u8, line: &'a [u8], toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() < 3 {
        return error(McError::UnknownCommand);
    }
    if !key_ok(toks.t[1], limits) {
        return error(McError::KeyTooLong);
    }
    let which = match which {
        b'g' => Meta::Get,
        b'd' => Meta::Delete,
        _ => Meta::Arith,
    };
    if toks.ntokens() > META_MAX_TOKENS {
        let e = if which == Meta::Get {
            McError::MgFlagsTooLong
        } else {
            McError::FlagsTooLong
        };
        return error(e);
    }
    let (key, flags) = match meta_flags(which, toks.t[1], after_words(line, 2)) {
        Ok(kf) => kf,
        // memcached reports md/ma flag errors with one text.
        Err(e) if which == Meta::Get => return error(e),
        Err(_) => return error(McError::InvalidOrDuplicateFlag),
    };
    if !key_ok(key.bytes(), limits) {
        return error(McError::KeyTooLong);
    }
    check_opaque(&flags).map_err(|e| (e, false, 0))?;
    Ok(match which {
        Meta::Get => Request::MetaGet { key, flags },
        Meta::Delete => Request::MetaDelete { key, flags },
        _ => {
            if let Some(m) = flags.mode
                && !matches!(m, b'I' | b'i' | b'+' | b'D' | b'd' | b'-')
            {
                return error(McError::MaMode);
            }
            Request::MetaArith { key, flags }
        }
    })
}

fn meta_set<'a>(
    input: &'a [u8],
    line: &'a [u8],
    toks: &Tokens<'a>,
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let fail = |err, swallow| Parsed::Error {
        err,
        noreply: false,
        consumed: line_len,
        swallow,
    };
    if toks.ntokens() < 3 {
        return fail(McError::UnknownCommand, 0);
    }
    let vlen = (toks.ntokens() > 3)
        .then(|| parse_i32(toks.t[2]).and_then(|v| usize::try_from(v).ok()))
        .flatten();
    let skip = vlen.map_or(0, |v| v + 2);
    if !key_ok(toks.t[1], limits) {
        return fail(McError::KeyTooLong, skip);
    }
    let Some(vlen) = vlen else {
        return fail(McError::BadFormat, 0);
    };
    if toks.ntokens() > META_MAX_TOKENS {
        return fail(McError::FlagsTooLong, 0);
    }
    let (key, flags) = match meta_flags(Meta::Set, toks.t[1], after_words(line, 3)) {
        Ok(kf) => kf,
        Err(e) => return fail(e, skip),
    };
    if !key_ok(key.bytes(), limits) {
        return fail(McError::KeyTooLong, skip);
    }
    if let Err(e) = check_opaque(&flags) {
        return fail(e, skip);
    }
    if let Some(m) = flags.mode
        && !b"EeAaPpRrSs".contains(&m)
    {
        return fail(McError::MsMode, skip);
    }
    if too_large(line_len, vlen, limits) {
        return fail(McError::TooLarge, skip);
    }
    match data_block(input, line_len, vlen) {
        Ok(None) => Parsed::Incomplete { scanned: 0 },
        Err(err) => Parsed::Error {
            err,
            noreply: false,
            consumed: line_len + vlen + 2,
            swallow: 0,
        },
        Ok(Some(data)) => Parsed::Request {
            req: Request::MetaSet { key, flags, data },
            consumed: line_len + vlen + 2,
        },
    }
}

// ---- numbers, as memcached's safe_strto* read them ---------------------------

/// C's `isspace`.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `strtoull` then memcached's checks: leading white space and a sign are
/// allowed, at least one digit, the number ends the text or is followed by
/// white space, no overflow, and a `-` only where the result stays
/// non-negative as a signed number (so `-0` reads as 0).
pub fn parse_c_u64(s: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
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
    if i == start || (i < s.len() && !is_c_space(s[i])) {
        return None;
    }
    if neg {
        v = v.wrapping_neg();
        if (v as i64) < 0 {
            return None;
        }
    }
    Some(v)
}

/// A 64-bit unsigned token (`safe_strtoull`).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    parse_c_u64(s)
}

/// A 32-bit unsigned token (`safe_strtoul`; larger values are refused
/// rather than truncated).
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_c_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// A 32-bit signed token (`safe_strtol`).
pub fn parse_i32(s: &[u8]) -> Option<i32> {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut v: i64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v * 10 + i64::from(s[i] - b'0');
        if v > i64::from(u32::MAX) {
            return None;
        }
        i += 1;
    }
    if i == start || (i < s.len() && !is_c_space(s[i])) {
        return None;
    }
    i32::try_from(if neg { -v } else { v }).ok()
}

// ---- base64 (keys of meta commands with the `b` flag) ------------------------

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes a padded base64 key; None if it is not valid base64 or decodes
/// to nothing.
fn decode_key(raw: &[u8]) -> Option<Key<'_>> {
    if raw.is_empty() || !raw.len().is_multiple_of(4) || raw.len() > MEMCACHED_MAX_KEY + 2 {
        return None;
    }
    let mut buf = [0u8; DECODED_KEY_MAX];
    let mut n = 0;
    for (ci, chunk) in raw.chunks(4).enumerate() {
        let last = (ci + 1) * 4 == raw.len();
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut acc: u32 = 0;
        for &c in &chunk[..4 - pad] {
            acc = (acc << 6) | u32::from(b64_value(c)?);
        }
        acc <<= 6 * pad as u32;
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        for &b in &bytes[..3 - pad] {
            buf[n] = b;
            n += 1;
        }
    }
    if n == 0 {
        return None;
    }
    Some(Key {
        raw,
        decoded: Some((buf, n as u8)),
    })
}

/// Appends the padded base64 encoding of `bytes`.
pub fn encode_base64(bytes: &[u8], out: &mut Vec<u8>) {
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let acc = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((acc >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        max_key_len: 250,
        max_value_len: 1024,
        max_request_bytes: 1 << 20,
    };

    fn req(input: &[u8]) -> Request<'_> {
        match parse(input, &LIM, 0) {
            Parsed::Request { req, .. } => req,
            other => panic!("{other:?}"),
        }
    }

    fn err(input: &[u8]) -> (McError, bool, usize, usize) {
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
    fn numbers_read_as_memcached_reads_them() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"12 junk"), Some(12));
        assert_eq!(parse_u64(b"12x"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"99999999999999999999"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
    }

    #[test]
    fn base64_round_trip() {
        for key in [&b"a"[..], b"ab", b"abc", b"\x00\xff\x10key"] {
            let mut enc = Vec::new();
            encode_base64(key, &mut enc);
            let k = decode_key(&enc).expect("decodes");
            assert_eq!(k.bytes(), key);
        }
        assert!(decode_key(b"a===").is_none());
        assert!(decode_key(b"ab=c").is_none());
        assert!(decode_key(b"abc").is_none());
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

    #[test]
    fn meta_flags_are_checked() {
        assert_eq!(err(b"mg k v v\r\n").0, McError::DuplicateFlag);
        assert_eq!(err(b"mg k z\r\n").0, McError::InvalidFlag);
        assert_eq!(err(b"md k z\r\n").0, McError::InvalidOrDuplicateFlag);
        assert_eq!(err(b"mg k Tx\r\n").0, McError::BadToken);
        match req(b"mg a2V5 b v k\r\n") {
            Request::MetaGet { key, flags } => {
                assert_eq!(key.bytes(), b"key");
                assert!(key.is_binary() && flags.value);
            }
            other => panic!("{other:?}"),
        }
    }
}
