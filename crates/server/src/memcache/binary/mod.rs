//! memcached's binary protocol: framing and request parsing (this file) and
//! the commands' replies (`cmd`). A connection speaks it when its first
//! byte is the request magic `0x80`, as memcached decides per connection.
//!
//! Every packet starts with a 24-byte header (all numbers big-endian):
//!
//! ```text
//! request:  magic 0x80 | opcode | key length (2) | extras length | data type
//!           | vbucket (2) | body length (4) | opaque (4) | cas (8)
//! response: magic 0x81 | opcode | key length (2) | extras length | data type
//!           | status (2)  | body length (4) | opaque (4) | cas (8)
//! ```
//!
//! and the body is extras, key, value in that order. A request's shape (its
//! extras, key and value lengths) is checked from the header alone, before
//! the parser waits for the body, so a length never makes the server buffer
//! more than the limits allow. As in memcached, a malformed header is
//! answered `Invalid arguments` and closes the connection (framing cannot be
//! trusted); an unknown opcode or a value over the limits is answered and
//! its body skipped.

pub(crate) mod cmd;

use super::types::{BIG_BODY, Limits, MEMCACHED_MAX_KEY, StoreCmd};

/// The first byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
pub const HEADER_LEN: usize = 24;
/// An arithmetic request's expiration that means "do not create".
const NO_CREATE: u32 = 0xffff_ffff;
/// The longest SASL body read (mechanism and credentials); a longer one is
/// refused from its header, so an unauthenticated client cannot make the
/// server buffer more (the text protocol's login line has the same bound).
pub const MAX_SASL_BODY: usize = 1024;

/// The opcodes served (memcached's `protocol_binary.h`).
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A response's status (memcached's `protocol_binary_response_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    NonNumeric = 0x06,
    AuthError = 0x20,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
    Internal = 0x84,
    TemporaryFailure = 0x86,
}

impl Status {
    /// The body memcached sends with an error status.
    pub fn message(self) -> &'static str {
        match self {
            Status::Success => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::TooLarge => "Too large.",
            Status::InvalidArguments => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::NonNumeric => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
            Status::Internal => "Internal error",
            Status::TemporaryFailure => "Temporary failure",
        }
    }
}

/// What a response echoes of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub opcode: u8,
    /// Echoed as sent (big-endian read, big-endian written).
    pub opaque: u32,
}

/// A binary request, borrowing from the input.
#[derive(Debug, Clone, Copy)]
pub struct BinRequest<'a> {
    pub head: Head,
    /// The quiet variant: no reply on success (for gets: none on a miss).
    pub quiet: bool,
    pub cmd: BinCmd<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinCmd<'a> {
    /// get, getq, getk, getkq.
    Get {
        key: &'a [u8],
        with_key: bool,
    },
    /// touch (no value returned), gat, gatq, gatk, gatkq.
    Touch {
        key: &'a [u8],
        exptime: i64,
        value: bool,
        with_key: bool,
    },
    /// set, add, replace, append, prepend and their quiet variants; a
    /// non-zero `cas` makes them compare-and-swap (add too, as in
    /// memcached).
    Store {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        cas: u64,
        data: &'a [u8],
    },
    Delete {
        key: &'a [u8],
        cas: u64,
    },
    /// increment and decrement: on a miss, `initial` is stored (and
    /// returned) unless `exptime` is None (the request said not to create).
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: Option<i64>,
        cas: u64,
    },
    Quit,
    Flush {
        delay: i64,
    },
    Noop,
    Version,
    Verbosity,
    /// `stat [group]`.
    Stat {
        group: &'a [u8],
    },
    SaslListMechs,
    SaslAuth {
        mech: &'a [u8],
        data: &'a [u8],
    },
    SaslStep,
}

impl BinRequest<'_> {
    /// The request's key, for commands that have one.
    pub fn key(&self) -> Option<&[u8]> {
        match self.cmd {
            BinCmd::Get { key, .. }
            | BinCmd::Touch { key, .. }
            | BinCmd::Store { key, .. }
            | BinCmd::Delete { key, .. }
            | BinCmd::Arith { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// What the parser made of the start of the input.
#[derive(Debug)]
pub enum BinParsed<'a> {
    /// No whole packet yet.
    Incomplete,
    /// A request, `usize` bytes long.
    Request(BinRequest<'a>, usize),
    /// A request answered by `status` alone: `consumed` bytes are read, the
    /// next `swallow` skipped however they arrive (a refused value).
    Error {
        head: Head,
        status: Status,
        consumed: usize,
        swallow: usize,
    },
    /// Framing is lost: answer (if a header was read) and close.
    Close(Option<(Head, Status)>),
}

/// A request header's fields.
#[derive(Debug, Clone, Copy)]
struct Header {
    head: Head,
    keylen: usize,
    extlen: usize,
    bodylen: usize,
    cas: u64,
}

impl Header {
    fn read(b: &[u8]) -> Header {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Header {
            head: Head {
                opcode: b[1],
                opaque: u32_at(12),
            },
            keylen: usize::from(u16_at(2)),
            extlen: usize::from(b[4]),
            bodylen: u32_at(8) as usize,
            cas: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
        }
    }

    fn vlen(&self) -> usize {
        self.bodylen - self.extlen - self.keylen
    }
}

/// The shapes a request's body may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Exactly these extras and a key, no value.
    KeyOnly(usize),
    /// These extras, a key and a value.
    KeyValue(usize),
    /// Nothing at all.
    Empty,
    /// No key and no value; extras of one of two lengths.
    ExtrasOnly(usize, usize),
    /// No extras; a key (maybe empty), no value.
    OptionalKey,
    /// No extras, a key and a value (SASL: mechanism and data).
    Sasl,
}

fn shape(opcode: u8) -> Option<Shape> {
    use opcode::*;
    Some(match opcode {
        GET | GETQ | GETK | GETKQ | DELETE | DELETEQ => Shape::KeyOnly(0),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => Shape::KeyValue(8),
        APPEND | APPENDQ | PREPEND | PREPENDQ => Shape::KeyValue(0),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => Shape::KeyOnly(20),
        TOUCH | GAT | GATQ | GATK | GATKQ => Shape::KeyOnly(4),
        QUIT | QUITQ | NOOP | VERSION | SASL_LIST_MECHS => Shape::Empty,
        FLUSH | FLUSHQ => Shape::ExtrasOnly(0, 4),
        VERBOSITY => Shape::ExtrasOnly(4, 4),
        STAT => Shape::OptionalKey,
        SASL_AUTH | SASL_STEP => Shape::Sasl,
        _ => return None,
    })
}

/// Whether the header's lengths fit the opcode's shape.
fn fits(h: &Header, shape: Shape) -> bool {
    let (k, e, v) = (h.keylen, h.extlen, h.vlen());
    match shape {
        Shape::KeyOnly(x) => k > 0 && e == x && v == 0,
        Shape::KeyValue(x) => k > 0 && e == x,
        Shape::Empty => k == 0 && e == 0 && v == 0,
        Shape::ExtrasOnly(a, b) => k == 0 && (e == a || e == b) && v == 0,
        Shape::OptionalKey => e == 0 && v == 0,
        Shape::Sasl => k > 0 && e == 0,
    }
}

/// The head of the packet at the start of `input`, once its header is
/// in: enough to refuse a request before its body is read.
pub fn peek_head(input: &[u8]) -> Option<Head> {
    (input.len() >= HEADER_LEN && input[0] == REQUEST_MAGIC).then(|| Header::read(input).head)
}

/// The opcodes served before a connection authenticates (memcached's).
pub fn open_before_auth(opcode: u8) -> bool {
    matches!(
        opcode,
        opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION
    )
}

/// Parses the packet at the start of `input` (whose first byte decided
/// that the connection speaks binary).
pub fn parse<'a>(input: &'a [u8], limits: &Limits) -> BinParsed<'a> {
    if input.len() < HEADER_LEN {
        return BinParsed::Incomplete;
    }
    if input[0] != REQUEST_MAGIC {
        // memcached closes without a reply: nothing here is a header.
        return BinParsed::Close(None);
    }
    let h = Header::read(input);
    let invalid = BinParsed::Close(Some((h.head, Status::InvalidArguments)));
    // Both are at most 16 bits wide: no overflow.
    if h.extlen + h.keylen > h.bodylen || h.keylen > MEMCACHED_MAX_KEY {
        return invalid;
    }
    let Some(shape) = shape(h.head.opcode) else {
        return BinParsed::Error {
            head: h.head,
            status: Status::UnknownCommand,
            consumed: HEADER_LEN,
            swallow: h.bodylen,
        };
    };
    if !fits(&h, shape) {
        return invalid;
    }
    let refuse = |status| BinParsed::Error {
        head: h.head,
        status,
        consumed: HEADER_LEN,
        swallow: h.bodylen,
    };
    if h.keylen > limits.max_key_len {
        return refuse(Status::InvalidArguments);
    }
    let len = HEADER_LEN.saturating_add(h.bodylen);
    if matches!(shape, Shape::KeyValue(_)) {
        if h.vlen() > limits.max_value_len || len > limits.max_request_bytes {
            return refuse(Status::TooLarge);
        }
        if h.bodylen > BIG_BODY && h.bodylen > limits.max_body {
            return refuse(Status::OutOfMemory);
        }
    } else if len > limits.max_request_bytes || (shape == Shape::Sasl && h.bodylen > MAX_SASL_BODY)
    {
        return refuse(Status::TooLarge);
    }
    if input.len() < len {
        return BinParsed::Incomplete;
    }
    let body = &input[HEADER_LEN..len];
    let (extras, rest) = body.split_at(h.extlen);
    let (key, value) = rest.split_at(h.keylen);
    BinParsed::Request(request(&h, extras, key, value), len)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// The request of a packet whose shape was checked.
fn request<'a>(h: &Header, extras: &[u8], key: &'a [u8], value: &'a [u8]) -> BinRequest<'a> {
    use opcode::*;
    let op = h.head.opcode;
    let quiet = matches!(
        op,
        GETQ | GETKQ
            | SETQ
            | ADDQ
            | REPLACEQ
            | DELETEQ
            | INCREMENTQ
            | DECREMENTQ
            | QUITQ
            | FLUSHQ
            | APPENDQ
            | PREPENDQ
            | GATQ
            | GATKQ
    );
    let cmd = match op {
        GET | GETQ | GETK | GETKQ => BinCmd::Get {
            key,
            with_key: matches!(op, GETK | GETKQ),
        },
        TOUCH | GAT | GATQ | GATK | GATKQ => BinCmd::Touch {
            key,
            exptime: i64::from(be32(extras)),
            value: op != TOUCH,
            with_key: matches!(op, GATK | GATKQ),
        },
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => {
            let cmd = match op {
                SET | SETQ => StoreCmd::Set,
                ADD | ADDQ => StoreCmd::Add,
                REPLACE | REPLACEQ => StoreCmd::Replace,
                APPEND | APPENDQ => StoreCmd::Append,
                _ => StoreCmd::Prepend,
            };
            let (flags, exptime) = match extras.len() {
                8 => (be32(extras), i64::from(be32(&extras[4..]))),
                _ => (0, 0),
            };
            BinCmd::Store {
                cmd,
                key,
                flags,
                exptime,
                cas: h.cas,
                data: value,
            }
        }
        DELETE | DELETEQ => BinCmd::Delete { key, cas: h.cas },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            let exp = be32(&extras[16..]);
            BinCmd::Arith {
                incr: matches!(op, INCREMENT | INCREMENTQ),
                key,
                delta: be64(extras),
                initial: be64(&extras[8..]),
                exptime: (exp != NO_CREATE).then_some(i64::from(exp)),
                cas: h.cas,
            }
        }
        QUIT | QUITQ => BinCmd::Quit,
        FLUSH | FLUSHQ => BinCmd::Flush {
            delay: if extras.len() == 4 {
                i64::from(be32(extras))
            } else {
                0
            },
        },
        NOOP => BinCmd::Noop,
        VERSION => BinCmd::Version,
        VERBOSITY => BinCmd::Verbosity,
        STAT => BinCmd::Stat { group: key },
        SASL_LIST_MECHS => BinCmd::SaslListMechs,
        SASL_AUTH => BinCmd::SaslAuth {
            mech: key,
            data: value,
        },
        SASL_STEP => BinCmd::SaslStep,
        _ => unreachable!("shape() knows every opcode served"),
    };
    BinRequest {
        head: h.head,
        quiet,
        cmd,
    }
}

/// Appends one response packet.
pub fn packet(
    out: &mut Vec<u8>,
    head: Head,
    status: Status,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    // Lengths fit: keys are at most 250 bytes, extras 4, and a value is
    // bounded by `max-value-len`, which is below 4 GiB.
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    out.push(RESPONSE_MAGIC);
    out.push(head.opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&(status as u16).to_be_bytes());
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&head.opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends an error response: the status and memcached's message.
pub fn error(out: &mut Vec<u8>, head: Head, status: Status) {
    packet(out, head, status, 0, &[], &[], status.message().as_bytes());
}

#[cfg(test)]
mod tests;
