//! RESP request framing: multibulk arrays of bulk strings (what client
//! libraries send) and inline commands (what telnet and `redis-cli` piping
//! send). The parser never allocates from a length prefix: declared lengths
//! are checked against limits first, and bytes are only ever taken from the
//! input that has arrived.

/// Where an argument lies: in its request's input, or (inline commands,
/// whose quotes and escapes are undone) in the scratch arena of [`Frames`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// At an offset from the start of the request.
    Input {
        at: u32,
        len: u32,
    },
    Scratch {
        at: u32,
        len: u32,
    },
    /// The large bulk string received into a buffer of its own
    /// ([`Frames::splice`]).
    Spliced,
}

/// The arguments of the requests parsed since the last [`Frames::clear`]:
/// a request's arguments stay valid while later requests are parsed, so a
/// request waiting in a read batch keeps them, inline ones included. The
/// connection keeps one `Frames` and clears it when no parsed request is
/// held (its buffers are reused, not allocated per request).
#[derive(Debug, Default)]
pub(crate) struct Frames {
    args: Vec<Arg>,
    /// The unescaped arguments of inline requests.
    scratch: Vec<u8>,
    /// After `parse` found a multibulk request incomplete inside a bulk
    /// string whose header arrived: the bytes the request needs at least,
    /// from its start (0: not known). The connection sizes its input
    /// buffer by it once, instead of doubling it while a large value
    /// arrives.
    wanted: usize,
    /// After `parse` found a multibulk request incomplete inside a bulk
    /// string of at least `SPLICE_MIN` bytes, most of which is still to
    /// come: where its data starts from the request's start, and its
    /// length. The connection may then read it into a buffer of its own.
    large: Option<(usize, usize)>,
    /// A large bulk string of the request at the input's start, received
    /// into a buffer of its own: the offset from the request's start where
    /// its data would be (the input holds the `\r\n` after it there), and
    /// the value. It stays until the connection takes it back, whatever
    /// `clear` does.
    spliced: Option<(usize, combkv::ReceivedValue)>,
}

/// Bulk strings from this size on may be received into a buffer of their
/// own, which a write stores as it is (Redis's `PROTO_MBULK_BIG_ARG` is
/// 32 KiB).
pub(crate) const SPLICE_MIN: usize = 32 * 1024;

/// One parsed request: its arguments are entries `first..end` of the
/// [`Frames`] it was parsed into, and it used `consumed` input bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub consumed: usize,
    pub first: usize,
    pub end: usize,
}

impl Frames {
    /// Forgets every parsed request's arguments.
    pub(crate) fn clear(&mut self) {
        self.args.clear();
        self.scratch.clear();
    }

    /// Argument entry `i`, of a request whose input starts at `input`.
    /// Always inlined: a read's planning slices each of its arguments.
    #[inline(always)]
    pub(crate) fn arg<'a>(&'a self, input: &'a [u8], i: usize) -> &'a [u8] {
        match self.args[i] {
            Arg::Input { at, len } => &input[at as usize..(at + len) as usize],
            Arg::Scratch { at, len } => &self.scratch[at as usize..(at + len) as usize],
            Arg::Spliced => self.spliced_bytes(),
        }
    }

    /// The spliced value's bytes: out of line, so that `arg` stays small
    /// enough to inline on every argument of every request.
    #[cold]
    #[inline(never)]
    fn spliced_bytes(&self) -> &[u8] {
        match &self.spliced {
            Some((_, v)) => v.as_bytes(),
            None => unreachable!("a spliced argument is parsed only while its value is kept"),
        }
    }

    /// The received value spliced into argument entries `first..end`, if
    /// one was (looked for only while a value is spliced).
    pub(crate) fn spliced_among(&self, first: usize, end: usize) -> Option<&combkv::ReceivedValue> {
        let (_, value) = self.spliced.as_ref()?;
        self.args[first..end]
            .contains(&Arg::Spliced)
            .then_some(value)
    }

    /// See `large`: set by the last `parse` that returned `Ok(None)`.
    pub(crate) fn large(&self) -> Option<(usize, usize)> {
        self.large
    }

    /// The large bulk string `large` announced, received whole: the
    /// request at the input's start takes it as its argument from now on
    /// (the input holds what follows its data).
    pub(crate) fn splice(&mut self, at: usize, value: combkv::ReceivedValue) {
        self.spliced = Some((at, value));
    }

    /// Drops the spliced value: its request was consumed.
    pub(crate) fn unsplice(&mut self) {
        self.spliced = None;
    }

    /// Bytes in the scratch arena.
    pub(crate) fn scratch_len(&self) -> usize {
        self.scratch.len()
    }

    /// See `wanted`: set by the last `parse` that returned `Ok(None)`.
    pub(crate) fn wanted(&self) -> usize {
        self.wanted
    }
}

/// Framing errors: the connection gets this reply and is closed, since the
/// position of the next request is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    InvalidMultibulkLength,
    InvalidBulkLength,
    ExpectedDollar(u8),
    UnbalancedQuotes,
    TooBigInline,
    TooBigCount,
    TooBigBulkCount,
    /// Before AUTH: more arguments than `UNAUTH_MAX_ARGS`.
    UnauthenticatedMultibulkLength,
    /// Before AUTH: a bulk string longer than `UNAUTH_MAX_BULK_BYTES`.
    UnauthenticatedBulkLength,
    /// A bulk string larger than `maxmemory` leaves room for (past
    /// `BIG_BODY`): the request is refused with the OOM error once the
    /// header is read, and the rest of it (`discard`) is skipped unread.
    NoRoom {
        header_end: usize,
        discard: Discard,
    },
}

/// What is left to skip of a request refused for `maxmemory`: the rest of
/// the bulk string being skipped, then `args` more bulk strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Discard {
    pub bytes: usize,
    pub args: usize,
}

/// Bulk strings up to this size are read whatever `max_body` says: the
/// command itself then refuses them above `maxmemory`.
pub(crate) const BIG_BODY: usize = 64 * 1024;

impl FrameError {
    /// Redis's error text for the condition.
    pub(crate) fn message(&self) -> String {
        match self {
            FrameError::InvalidMultibulkLength => "Protocol error: invalid multibulk length".into(),
            FrameError::InvalidBulkLength => "Protocol error: invalid bulk length".into(),
            FrameError::ExpectedDollar(b) => {
                format!("Protocol error: expected '$', got '{}'", *b as char)
            }
            FrameError::UnbalancedQuotes => "Protocol error: unbalanced quotes in request".into(),
            FrameError::TooBigInline => "Protocol error: too big inline request".into(),
            FrameError::TooBigCount => "Protocol error: too big mbulk count string".into(),
            FrameError::TooBigBulkCount => "Protocol error: too big bulk count string".into(),
            FrameError::UnauthenticatedMultibulkLength => {
                "Protocol error: unauthenticated multibulk length".into()
            }
            FrameError::UnauthenticatedBulkLength => {
                "Protocol error: unauthenticated bulk length".into()
            }
            FrameError::NoRoom { .. } => {
                "OOM command not allowed when used memory > 'maxmemory'.".into()
            }
        }
    }
}

/// Limits the parser enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest whole request and largest single bulk string.
    pub max_request_bytes: usize,
    /// False before AUTH (with `requirepass`): requests are held to
    /// `UNAUTH_MAX_ARGS` arguments of `UNAUTH_MAX_BULK_BYTES`, as Redis 7
    /// does, so a client without the password cannot make the server buffer
    /// a large request.
    pub authenticated: bool,
    /// The largest bulk string `maxmemory` leaves room for
    /// (`Shared::body_room`).
    pub max_body: usize,
}

/// Arguments per request at most. Redis 7 allows up to INT_MAX; a bound
/// this low keeps re-parsing an incomplete request (done on every read)
/// cheap: the parser keeps no state between reads.
const MAX_ARGS: i64 = 1024 * 1024;
/// Redis 7's limits before AUTH.
const UNAUTH_MAX_ARGS: i64 = 10;
const UNAUTH_MAX_BULK_BYTES: i64 = 16 * 1024;
/// Longest inline command line and longest length line (Redis: 64 KiB).
const MAX_INLINE: usize = 64 * 1024;

/// Parses the request at the start of `input`, appending its arguments to
/// `frames`. `Ok(None)`: not complete yet (nothing consumed, `frames` as it
/// was). An empty inline line, `*0` or `*-1` is consumed with no arguments
/// (Redis ignores them).
pub(crate) fn parse(
    input: &[u8],
    limits: Limits,
    frames: &mut Frames,
) -> Result<Option<Frame>, FrameError> {
    parse_request(input, limits, frames, false)
}

/// [`parse`], of the request at the input's start (`first`): a large
/// bulk string spliced into it ([`Frames::splice`]) is taken from its own
/// buffer, the input holding only what follows it.
pub(crate) fn parse_request(
    input: &[u8],
    limits: Limits,
    frames: &mut Frames,
    first: bool,
) -> Result<Option<Frame>, FrameError> {
    let (first_arg, scratch) = (frames.args.len(), frames.scratch.len());
    frames.wanted = 0;
    frames.large = None;
    let spliced = match &frames.spliced {
        Some((at, v)) if first => Some((*at, v.as_bytes().len())),
        _ => None,
    };
    let parsed = if input.is_empty() {
        Ok(None)
    } else if input[0] == b'*' {
        parse_multibulk(input, limits, frames, spliced)
    } else {
        parse_inline(input, frames)
    };
    match parsed {
        Ok(Some(consumed)) => Ok(Some(Frame {
            consumed,
            first: first_arg,
            end: frames.args.len(),
        })),
        other => {
            frames.args.truncate(first_arg);
            frames.scratch.truncate(scratch);
            other.map(|_| None)
        }
    }
}

/// A multibulk header line (a count or a bulk length) as Redis 7 reads it
/// (`processMultibulkBuffer`): it ends at the first `\r`, which must have
/// one more byte after it (Redis skips that byte unchecked). A line ending
/// in a bare LF has no end there: its `\r` is found later, inside what
/// follows, and the number does not parse (`invalid multibulk length`,
/// `invalid bulk length`); with no `\r` at all the request waits, up to the
/// inline limit. `None`: not complete.
fn header_line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &input[at..];
    let cr = rest.iter().position(|&b| b == b'\r')?;
    if cr + 1 >= rest.len() {
        return None;
    }
    Some((&rest[..cr], at + cr + 2))
}

/// An inline line starting at `at` (without CRLF) and the offset after its
/// LF: inline commands may end in LF alone.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &input[at..];
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let body = &rest[..nl];
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    Some((body, at + nl + 1))
}

/// Redis's `string2ll`: no '+', no leading zeros, no spaces.
fn parse_int(b: &[u8]) -> Option<i64> {
    super::cmd::parse_i64(b)
}

/// The usual count or length line, read in one pass: 1 to 18 digits without
/// a leading zero, then CRLF, all arrived. `None` for anything else (a sign,
/// a bare LF, a bad byte, a partial line), which the general path (`line`
/// then `parse_int`) answers, with the same result wherever both answer.
#[inline]
fn fast_int_line(input: &[u8], at: usize) -> Option<(i64, usize)> {
    let rest = input.get(at..)?;
    let mut n: i64 = 0;
    for (i, &b) in rest.iter().enumerate().take(19) {
        match b {
            b'0'..=b'9' if i < 18 && !(i == 1 && rest[0] == b'0') => {
                n = n * 10 + i64::from(b - b'0');
            }
            b'\r' if i > 0 && rest.get(i + 1) == Some(&b'\n') => return Some((n, at + i + 2)),
            _ => return None,
        }
    }
    None
}

/// `Ok(Some(n))`: a whole request of `n` bytes. `spliced`: the offset and
/// length of a bulk string of this request received into a buffer of its
/// own (the input goes on with its `\r\n` at that offset).
fn parse_multibulk(
    input: &[u8],
    limits: Limits,
    frames: &mut Frames,
    spliced: Option<(usize, usize)>,
) -> Result<Option<usize>, FrameError> {
    let (count, mut at) = match fast_int_line(input, 1) {
        Some(parsed) => parsed,
        None => {
            let Some((head, at)) = header_line(input, 1) else {
                if input.len() > MAX_INLINE {
                    return Err(FrameError::TooBigCount);
                }
                return Ok(None);
            };
            (
                parse_int(head).ok_or(FrameError::InvalidMultibulkLength)?,
                at,
            )
        }
    };
    if count > MAX_ARGS {
        return Err(FrameError::InvalidMultibulkLength);
    }
    if count > UNAUTH_MAX_ARGS && !limits.authenticated {
        return Err(FrameError::UnauthenticatedMultibulkLength);
    }
    if count <= 0 {
        // `*0` and `*-1` are empty requests, ignored as Redis does.
        return Ok(Some(at));
    }
    // Reserve by what can have arrived, never by the declared count.
    frames
        .args
        .reserve((count as usize).min(input.len() / 4 + 1));
    for i in 0..count {
        if at >= input.len() {
            return Ok(None);
        }
        let (len, data_at) = match fast_int_line(input, at + 1) {
            Some(parsed) if input[at] == b'$' => parsed,
            _ => {
                // As Redis: the line must be whole before its first byte
                // is checked.
                let Some((len_line, data_at)) = header_line(input, at) else {
                    if input.len() - at > MAX_INLINE {
                        return Err(FrameError::TooBigBulkCount);
                    }
                    return Ok(None);
                };
                if input[at] != b'$' {
                    return Err(FrameError::ExpectedDollar(input[at]));
                }
                (
                    parse_int(&len_line[1..]).ok_or(FrameError::InvalidBulkLength)?,
                    data_at,
                )
            }
        };
        if len < 0 || len as u64 > limits.max_request_bytes as u64 {
            return Err(FrameError::InvalidBulkLength);
        }
        if len > UNAUTH_MAX_BULK_BYTES && !limits.authenticated {
            return Err(FrameError::UnauthenticatedBulkLength);
        }
        let len = len as usize;
        if len > limits.max_body && len > BIG_BODY {
            return Err(FrameError::NoRoom {
                header_end: data_at,
                discard: Discard {
                    bytes: len + 2,
                    args: (count - i - 1) as usize,
                },
            });
        }
        if data_at > limits.max_request_bytes {
            return Err(FrameError::InvalidBulkLength);
        }
        if spliced.is_some_and(|s| s == (data_at, len)) {
            // The data is in its own buffer; the input has its CRLF.
            match spliced_end(input, data_at, frames)? {
                Some(end) => {
                    at = end;
                    continue;
                }
                None => return Ok(None),
            }
        }
        if input.len() < data_at + len + 2 {
            frames.wanted = data_at + len + 2;
            // Worth a buffer of its own while most of it is still to come
            // (the command name, the first argument, is always parsed here).
            if len >= SPLICE_MIN && i > 0 && spliced.is_none() && input.len() - data_at < len / 2 {
                frames.large = Some((data_at, len));
            }
            return Ok(None);
        }
        if &input[data_at + len..data_at + len + 2] != b"\r\n" {
            return Err(FrameError::InvalidBulkLength);
        }
        frames.args.push(Arg::Input {
            at: data_at as u32,
            len: len as u32,
        });
        at = data_at + len + 2;
    }
    Ok(Some(at))
}

/// A spliced bulk string's argument, once its CRLF (at `data_at`, where
/// its data would be) has arrived: the offset after it. Out of line: rare.
#[cold]
#[inline(never)]
fn spliced_end(
    input: &[u8],
    data_at: usize,
    frames: &mut Frames,
) -> Result<Option<usize>, FrameError> {
    if input.len() < data_at + 2 {
        return Ok(None);
    }
    if &input[data_at..data_at + 2] != b"\r\n" {
        return Err(FrameError::InvalidBulkLength);
    }
    frames.args.push(Arg::Spliced);
    Ok(Some(data_at + 2))
}

/// Skips what is left of a request refused for `maxmemory`, as it
/// arrives: `Ok(Some(n))` skips `n` bytes (none of them kept), `Ok(None)`
/// waits for a bulk header to arrive whole. The bulk headers are checked
/// as `parse` checks them.
pub(crate) fn discard(
    input: &[u8],
    d: &mut Discard,
    limits: Limits,
) -> Result<Option<usize>, FrameError> {
    if d.bytes > 0 {
        let n = d.bytes.min(input.len());
        d.bytes -= n;
        return Ok((n > 0).then_some(n));
    }
    let Some((len_line, data_at)) = header_line(input, 0) else {
        if input.len() > MAX_INLINE {
            return Err(FrameError::TooBigBulkCount);
        }
        return Ok(None);
    };
    if input[0] != b'$' {
        return Err(FrameError::ExpectedDollar(input[0]));
    }
    let len = parse_int(&len_line[1..]).ok_or(FrameError::InvalidBulkLength)?;
    if len < 0 || len as u64 > limits.max_request_bytes as u64 {
        return Err(FrameError::InvalidBulkLength);
    }
    d.args -= 1;
    d.bytes = len as usize + 2;
    Ok(Some(data_at))
}

fn parse_inline(input: &[u8], frames: &mut Frames) -> Result<Option<usize>, FrameError> {
    let Some((body, next)) = line(input, 0) else {
        if input.len() > MAX_INLINE {
            return Err(FrameError::TooBigInline);
        }
        return Ok(None);
    };
    if body.len() > MAX_INLINE {
        return Err(FrameError::TooBigInline);
    }
    split_args(body, frames)?;
    Ok(Some(next))
}

/// C's `isspace`, which `sdssplitargs` uses between arguments.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Splits an inline line the way Redis's `sdssplitargs` does: whitespace
/// separates; "double quotes" take \n \r \t \b \a \\ \" and \xHH escapes;
/// 'single quotes' take \'; a closing quote must be followed by a space or
/// the end. A NUL byte ends the line, as it ends the C string Redis splits
/// (inside quotes that leaves them unbalanced).
fn split_args(line: &[u8], frames: &mut Frames) -> Result<(), FrameError> {
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i == n {
            return Ok(());
        }
        let start = frames.scratch.len();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i == n {
                    return Err(FrameError::UnbalancedQuotes);
                }
                let c = line[i];
                if c == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && line[i + 2].is_ascii_hexdigit()
                    && line[i + 3].is_ascii_hexdigit()
                {
                    let hex = |b: u8| (b as char).to_digit(16).expect("hex digit") as u8;
                    frames
                        .scratch
                        .push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                    i += 4;
                    continue;
                } else if c == b'\\' && i + 1 < n {
                    i += 1;
                    frames.scratch.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return Err(FrameError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                } else {
                    frames.scratch.push(c);
                }
                i += 1;
            } else if in_sq {
                if i == n {
                    return Err(FrameError::UnbalancedQuotes);
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    frames.scratch.push(b'\'');
                    i += 2;
                    continue;
                } else if c == b'\'' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return Err(FrameError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                } else {
                    frames.scratch.push(c);
                }
                i += 1;
            } else {
                if i == n {
                    break;
                }
                // Every byte that ends an argument here is skipped by the
                // `is_space` loop above, so each pass makes progress.
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => frames.scratch.push(c),
                }
                i += 1;
            }
        }
        frames.args.push(Arg::Scratch {
            at: start as u32,
            len: (frames.scratch.len() - start) as u32,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever the one-pass reader answers, the general path gives the
    /// same number and end; it answers the common lines.
    #[test]
    fn fast_int_lines_agree_with_the_general_path() {
        let general = |input: &[u8]| {
            header_line(input, 0).and_then(|(body, next)| parse_int(body).map(|n| (n, next)))
        };
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        let atoms: [&[u8]; 9] = [b"0", b"1", b"9", b"-", b"\r", b"\n", b"+", b" ", b"a"];
        // Every string of up to 5 atoms, then a tail.
        let mut frontier: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..5 {
            let mut next = Vec::new();
            for f in &frontier {
                for a in atoms {
                    let mut v = f.clone();
                    v.extend_from_slice(a);
                    next.push(v);
                }
            }
            inputs.extend(next.iter().cloned());
            frontier = next;
        }
        for n in [
            0u64,
            7,
            10,
            99,
            1_000_000,
            999_999_999_999_999_999,
            u64::MAX,
        ] {
            inputs.push(format!("{n}\r\n$").into_bytes());
            inputs.push(format!("{n}\r\n").into_bytes());
            inputs.push(format!("{n}\r").into_bytes());
            inputs.push(format!("0{n}\r\n").into_bytes());
        }
        inputs.push(b"1234567890123456789\r\n".to_vec());
        for input in &inputs {
            if let Some(fast) = fast_int_line(input, 0) {
                assert_eq!(
                    Some(fast),
                    general(input),
                    "{:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
        assert_eq!(fast_int_line(b"16\r\nx", 0), Some((16, 4)));
        assert_eq!(fast_int_line(b"*3\r\n", 1), Some((3, 4)));
        assert_eq!(fast_int_line(b"0\r\n", 0), Some((0, 3)));
        assert_eq!(fast_int_line(b"01\r\n", 0), None);
        assert_eq!(fast_int_line(b"-1\r\n", 0), None);
    }

    const L: Limits = Limits {
        max_request_bytes: 1 << 20,
        authenticated: true,
        max_body: usize::MAX,
    };

    type Parsed = Option<(Vec<Vec<u8>>, usize)>;

    fn args(input: &[u8]) -> Result<Parsed, FrameError> {
        let mut frames = Frames::default();
        let Some(f) = parse(input, L, &mut frames)? else {
            assert!(frames.args.is_empty() && frames.scratch.is_empty());
            return Ok(None);
        };
        let a = (f.first..f.end)
            .map(|i| frames.arg(input, i).to_vec())
            .collect();
        Ok(Some((a, f.consumed)))
    }

    /// Requests parsed one after another into one `Frames` keep their
    /// arguments, inline ones included, until it is cleared.
    #[test]
    fn earlier_requests_keep_their_arguments() {
        let input = b"MGET \"a b\" c\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nGET 'x y'\r\n";
        let mut frames = Frames::default();
        let mut at = 0;
        let mut parsed = Vec::new();
        while let Some(f) = parse(&input[at..], L, &mut frames).unwrap() {
            parsed.push((at, f));
            at += f.consumed;
        }
        assert_eq!(at, input.len());
        let all: Vec<Vec<&[u8]>> = parsed
            .iter()
            .map(|&(at, f)| {
                (f.first..f.end)
                    .map(|i| frames.arg(&input[at..], i))
                    .collect()
            })
            .collect();
        let want: Vec<Vec<&[u8]>> = vec![
            vec![b"MGET", b"a b", b"c"],
            vec![b"GET", b"k"],
            vec![b"GET", b"x y"],
        ];
        assert_eq!(all, want);
        // An incomplete request leaves nothing behind.
        let before = (frames.args.len(), frames.scratch.len());
        assert_eq!(parse(b"GET 'unfinished", L, &mut frames), Ok(None));
        assert_eq!(before, (frames.args.len(), frames.scratch.len()));
        frames.clear();
        assert!(frames.args.is_empty() && frames.scratch.is_empty());
    }

    #[test]
    fn multibulk_complete_partial_and_pipelined() {
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let (a, used) = args(full).unwrap().unwrap();
        assert_eq!(a, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(used, 20);
        assert_eq!(
            args(&full[used..]).unwrap().unwrap().0,
            vec![b"PING".to_vec()]
        );
        for cut in 1..20 {
            assert_eq!(args(&full[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    /// Once a bulk header is whole, an incomplete request says how many
    /// bytes it needs (the connection reserves them); before that, and
    /// after a complete request, it says nothing.
    #[test]
    fn an_incomplete_bulk_reports_the_bytes_its_request_needs() {
        let mut frames = Frames::default();
        let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nabc";
        assert_eq!(parse(input, L, &mut frames), Ok(None));
        assert_eq!(frames.wanted(), 26 + 100 + 2);
        assert_eq!(parse(&input[..24], L, &mut frames), Ok(None));
        assert_eq!(frames.wanted(), 0);
        assert!(
            parse(b"*1\r\n$4\r\nPING\r\n", L, &mut frames)
                .unwrap()
                .is_some()
        );
        assert_eq!(frames.wanted(), 0);
        // A declared length past the limit is an error, never a size.
        let over = format!("*1\r\n${}\r\n", L.max_request_bytes + 1);
        assert!(parse(over.as_bytes(), L, &mut frames).is_err());
        assert_eq!(frames.wanted(), 0);
    }

    #[test]
    fn binary_safe_bulk_strings() {
        let (a, _) = args(b"*1\r\n$4\r\na\r\nb\r\n").unwrap().unwrap();
        assert_eq!(a, vec![b"a\r\nb".to_vec()]);
    }

    #[test]
    fn framing_errors() {
        assert_eq!(args(b"*x\r\n"), Err(FrameError::InvalidMultibulkLength));
        assert_eq!(
            args(b"*99999999\r\n"),
            Err(FrameError::InvalidMultibulkLength)
        );
        assert_eq!(args(b"*1\r\n:3\r\n"), Err(FrameError::ExpectedDollar(b':')));
        assert_eq!(args(b"*1\r\n$-2\r\n"), Err(FrameError::InvalidBulkLength));
        // A huge declared length fails at once instead of waiting or allocating.
        assert_eq!(
            args(b"*1\r\n$999999999999\r\n"),
            Err(FrameError::InvalidBulkLength)
        );
        assert_eq!(
            args(b"*1\r\n$1\r\nab\r\n"),
            Err(FrameError::InvalidBulkLength)
        );
        assert_eq!(args(b"set \"a\"b c\r\n"), Err(FrameError::UnbalancedQuotes));
        assert_eq!(args(b"set \"abc\r\n"), Err(FrameError::UnbalancedQuotes));
        let long = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(args(&long), Err(FrameError::TooBigInline));
    }

    /// Header lines end at `\r`, as Redis 7 reads them (checked against
    /// redis-server 7.0: a bare LF waits, then fails where a `\r` shows up).
    #[test]
    fn header_lines_need_a_carriage_return() {
        assert_eq!(args(b"*1\n$4\nPING\n"), Ok(None));
        assert_eq!(
            args(b"*1\n$4\nPING\r\n"),
            Err(FrameError::InvalidMultibulkLength)
        );
        assert_eq!(
            args(b"*1\r\n$4\nPING\r\n"),
            Err(FrameError::InvalidBulkLength)
        );
        // Redis skips the byte after `\r` unchecked.
        let (a, used) = args(b"*1\rX$4\rYPING\r\n").unwrap().unwrap();
        assert_eq!((a, used), (vec![b"PING".to_vec()], 14));
        // The first byte of a bulk header is checked once its line is whole.
        assert_eq!(args(b"*1\r\n:3"), Ok(None));
        let mut long = b"*1\n".to_vec();
        long.resize(MAX_INLINE + 2, b'x');
        assert_eq!(args(&long), Err(FrameError::TooBigCount));
        let mut long = b"*1\r\n$1\n".to_vec();
        long.resize(MAX_INLINE + 8, b'x');
        assert_eq!(args(&long), Err(FrameError::TooBigBulkCount));
        for bad in [&b"*+1\r\n"[..], b"*01\r\n", b"* 1\r\n", b"*-0\r\n"] {
            assert_eq!(args(bad), Err(FrameError::InvalidMultibulkLength));
        }
        for bad in [&b"$+4\r\n"[..], b"$04\r\n", b"$ 4\r\n", b"$-0\r\n"] {
            let input = [&b"*1\r\n"[..], bad, b"PING\r\n"].concat();
            assert_eq!(args(&input), Err(FrameError::InvalidBulkLength));
        }
    }

    #[test]
    fn inline_commands_with_quotes_and_escapes() {
        let (a, used) = args(b"set k \"a b\\n\\x41\" 'it\\'s'\r\nnext")
            .unwrap()
            .unwrap();
        assert_eq!(
            a,
            vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"a b\nA".to_vec(),
                b"it's".to_vec()
            ]
        );
        assert_eq!(used, 27);
        let (a, _) = args(b"PING\n").unwrap().unwrap();
        assert_eq!(a, vec![b"PING".to_vec()]);
        let (a, used) = args(b"\r\n").unwrap().unwrap();
        assert!(a.is_empty());
        assert_eq!(used, 2);
        assert_eq!(args(b"set k v").unwrap(), None);
    }

    /// A NUL in an inline command once made the splitter push empty
    /// arguments forever (found by tests/fuzz_resp.rs): it ends the line.
    #[test]
    fn regression_nul_in_inline_command_ends_the_line() {
        let (a, used) = args(b"GET a\0b c\r\n").unwrap().unwrap();
        assert_eq!(a, vec![b"GET".to_vec(), b"a".to_vec()]);
        assert_eq!(used, 11);
        let (a, _) = args(b"\0\r\n").unwrap().unwrap();
        assert!(a.is_empty());
        assert_eq!(args(b"SET \"a\0b\"\r\n"), Err(FrameError::UnbalancedQuotes));
        // Vertical tab and form feed are skipped between arguments (C's
        // isspace) but, as in Redis, do not end one.
        let (a, _) = args(b"\x0bGET \x0ck\x0cz\r\n").unwrap().unwrap();
        assert_eq!(a, vec![b"GET".to_vec(), b"k\x0cz".to_vec()]);
    }
}
