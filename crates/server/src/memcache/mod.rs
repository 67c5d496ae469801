//! The memcached listener's protocol, text and meta commands: bytes ->
//! requests (`parse`) -> store operations and replies (`cmd`). Consecutive
//! `get`, `gets` and `mg` requests of one read are answered by one
//! read-engine batch; replies leave in request order.

pub(crate) mod cmd;
pub mod error;
pub mod fuzzing;
pub mod parse;
pub(crate) mod stats;

use crate::proto::{Cx, Outcome};
use crate::shared::{Shared, Stats};
use parse::{Limits, Parsed, Request};

pub use stats::McShared;

/// A memcached connection's state between reads.
#[derive(Debug, Default)]
pub(crate) struct McConn {
    /// Bytes of a rejected storage command's data block still to skip.
    swallow: usize,
    /// Leading input bytes known to hold no newline (a parse hint, so a
    /// long multi-key line arriving in pieces is scanned once).
    scanned: usize,
    /// Wrote since the session's last commit (a read commits first).
    wrote: bool,
}

/// The request limits of a server.
pub(crate) fn limits(shared: &Shared) -> Limits {
    Limits {
        max_key_len: shared.store.max_key_len(),
        max_value_len: shared.store.max_value_len(),
        max_request_bytes: usize::try_from(shared.config.max_request_bytes.0).unwrap_or(usize::MAX),
    }
}

impl McConn {
    pub(crate) fn process(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
    ) -> Outcome {
        let limits = limits(cx.shared);
        let mut at = self.skip(input.len());
        let mut pending = cmd::Pending::new();
        let mut close = false;
        let abort = |at| Outcome {
            consumed: at,
            close: true,
            abort: true,
        };
        while self.swallow == 0 && out.len() <= reply_budget {
            match parse::parse(&input[at..], &limits, self.scanned) {
                Parsed::Incomplete { scanned } => {
                    self.scanned = scanned;
                    break;
                }
                Parsed::Close { err } => {
                    if !self.run_batch(cx, &mut pending, out) {
                        return abort(at);
                    }
                    Stats::add(&cx.shared.stats.protocol_errors, 1);
                    cmd::error_line(cx, out, &err);
                    tracing::debug!(client = cx.client.id, "closing: {err}");
                    return Outcome {
                        consumed: input.len(),
                        close: true,
                        abort: false,
                    };
                }
                Parsed::Error {
                    err,
                    noreply,
                    consumed,
                    swallow,
                } => {
                    self.scanned = 0;
                    if !self.run_batch(cx, &mut pending, out) {
                        return abort(at);
                    }
                    if !noreply {
                        cmd::error_line(cx, out, &err);
                    }
                    at += consumed;
                    self.swallow = swallow;
                    at += self.skip(input.len() - at);
                }
                Parsed::Request { req, consumed } => {
                    self.scanned = 0;
                    at += consumed;
                    Stats::add(&cx.shared.stats.commands_processed, 1);
                    if cmd::batchable(&req) {
                        pending.push(req);
                        continue;
                    }
                    if !self.run_batch(cx, &mut pending, out) {
                        return abort(at);
                    }
                    if matches!(req, Request::Quit) {
                        close = true;
                        break;
                    }
                    if cmd::writes(&req) {
                        self.wrote = true;
                    } else if cmd::reads(&req) && !self.commit_before_read(cx) {
                        return abort(at);
                    }
                    cmd::execute(cx, req, out);
                }
            }
        }
        if !self.run_batch(cx, &mut pending, out) {
            return abort(at);
        }
        Outcome {
            consumed: at,
            close,
            abort: false,
        }
    }

    /// Skips up to `available` bytes of a rejected data block; returns how many.
    fn skip(&mut self, available: usize) -> usize {
        let n = self.swallow.min(available);
        self.swallow -= n;
        n
    }

    /// Commits the session if this connection wrote since its last commit,
    /// so a read sees the connection's own writes. False: the commit failed
    /// and the turn must be aborted.
    fn commit_before_read(&mut self, cx: &Cx<'_>) -> bool {
        cx.commit_own_writes(&mut self.wrote)
    }

    /// Answers the pending reads (one batch). False: abort the turn.
    fn run_batch(
        &mut self,
        cx: &mut Cx<'_>,
        pending: &mut cmd::Pending<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        if pending.is_empty() {
            return true;
        }
        if !self.commit_before_read(cx) {
            return false;
        }
        cmd::run_batch(cx, pending, out);
        true
    }
}
