//! The memcached listener's protocol, text and meta commands, as the
//! pipeline's [`Protocol`]: bytes -> requests (`parse`) -> store operations
//! and replies (`cmd`). `get`, `gets` and `mg` (without `T`) are batchable
//! reads; replies leave in request order.

pub(crate) mod cmd;
pub mod error;
pub mod fuzzing;
pub mod parse;
pub(crate) mod stats;

use combkv::readexec::{BatchResults, ReadRequest};

use crate::pipeline::{Class, Cx, Protocol, Reads, Step};
use crate::shared::{Shared, Stats};
use error::McError;
use parse::{GetKind, Limits, Parsed, Request};

pub use stats::McShared;

/// A memcached connection's state between requests.
#[derive(Debug, Default)]
pub(crate) struct Memcache {
    /// Bytes of a rejected storage command's data block still to skip.
    swallow: usize,
    /// Leading input bytes known to hold no newline (a parse hint, so a
    /// long multi-key line arriving in pieces is scanned once).
    scanned: usize,
    /// The server's request limits, read once per `process`.
    limits: Limits,
}

/// A request answered by an error alone.
#[derive(Debug)]
pub(crate) struct Rejected {
    err: McError,
    /// memcached's `noreply` hides error replies too.
    noreply: bool,
}

/// The request limits of a server.
pub(crate) fn limits(shared: &Shared) -> Limits {
    Limits {
        max_key_len: shared.store.max_key_len(),
        max_value_len: shared.store.max_value_len(),
        max_request_bytes: usize::try_from(shared.config.max_request_bytes.0).unwrap_or(usize::MAX),
    }
}

impl Protocol for Memcache {
    type Request<'a> = Request<'a>;
    type Error = Rejected;
    const NAME: &'static str = "memcached";
    const INTERNAL_ERROR: &'static [u8] = b"SERVER_ERROR internal error; closing connection\r\n";
    const TIMED: bool = false;

    fn begin(&mut self, cx: &Cx<'_>) {
        self.limits = limits(cx.shared);
    }

    fn parse<'a>(
        &mut self,
        cx: &Cx<'_>,
        input: &'a [u8],
        at: usize,
        _fresh: bool,
    ) -> Step<Request<'a>, Rejected> {
        if self.swallow > 0 {
            // The data block of a rejected storage command, however it
            // arrives.
            let n = self.swallow.min(input.len() - at);
            self.swallow -= n;
            return if n == 0 {
                Step::Incomplete
            } else {
                Step::Skip(n)
            };
        }
        match parse::parse(&input[at..], &self.limits, self.scanned) {
            Parsed::Incomplete { scanned } => {
                self.scanned = scanned;
                Step::Incomplete
            }
            Parsed::Close { err } => Step::Close(Rejected {
                err,
                noreply: false,
            }),
            Parsed::Error {
                err,
                noreply,
                consumed,
                swallow,
            } => {
                self.scanned = 0;
                self.swallow = swallow;
                Step::Reject(Rejected { err, noreply }, consumed)
            }
            Parsed::Request { req, consumed } => {
                self.scanned = 0;
                Stats::add(&cx.shared.stats.commands_processed, 1);
                Step::Request(req, consumed)
            }
        }
    }

    fn class(&self, req: &Request<'_>) -> Class {
        match req {
            Request::Get { kind, .. } => match kind {
                GetKind::Get | GetKind::Gets => Class::BatchRead,
                // Touches: a write.
                GetKind::Gat | GetKind::Gats => Class::Write,
            },
            Request::MetaGet { flags, .. } => match flags.ttl {
                None => Class::BatchRead,
                Some(_) => Class::Write,
            },
            Request::Store { .. }
            | Request::Delete { .. }
            | Request::Arith { .. }
            | Request::Touch { .. }
            | Request::FlushAll { .. }
            | Request::MetaSet { .. }
            | Request::MetaDelete { .. }
            | Request::MetaArith { .. } => Class::Write,
            Request::MetaDebug { .. } | Request::Stats { .. } => Class::Read,
            Request::Version | Request::Verbosity { .. } | Request::Quit | Request::MetaNoop => {
                Class::Control
            }
        }
    }

    fn read_requests<'s>(&'s self, _input: &'s [u8], req: &'s Request<'_>, into: &mut Reads<'s>) {
        match req {
            Request::Get { keys, .. } => into.extend(parse::keys(keys).map(ReadRequest::Get)),
            Request::MetaGet { key, .. } => into.push(ReadRequest::Get(key.bytes())),
            _ => unreachable!("only get, gets and mg are batched"),
        }
    }

    fn reply_batch(
        &self,
        cx: &Cx<'_>,
        _input: &[u8],
        pending: &[Request<'_>],
        results: &BatchResults,
        out: &mut Vec<u8>,
    ) {
        cmd::reply_batch(cx, pending, results, out);
    }

    fn batch_failed(
        &self,
        cx: &Cx<'_>,
        err: combkv::Error,
        pending: &[Request<'_>],
        out: &mut Vec<u8>,
    ) {
        let err = McError::from(err);
        for _ in pending {
            cmd::error_line(cx, out, &err);
        }
    }

    fn execute(
        &mut self,
        cx: &mut Cx<'_>,
        _input: &[u8],
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        if matches!(req, Request::Quit) {
            return true;
        }
        cmd::execute(cx, req, out);
        false
    }

    fn reject(&mut self, cx: &Cx<'_>, err: Rejected, out: &mut Vec<u8>) {
        if !err.noreply {
            cmd::error_line(cx, out, &err.err);
        }
    }

    fn protocol_error(&mut self, cx: &Cx<'_>, err: Rejected, out: &mut Vec<u8>) {
        cmd::error_line(cx, out, &err.err);
        tracing::debug!(client = cx.client.id, "closing: {}", err.err);
    }
}
