//! The RESP listener's protocol: bytes -> request frames (`frame`) ->
//! commands (`cmd`) -> replies (`reply`). Consecutive GET, MGET, GETV and
//! bounded RANGE requests of one read are answered by one read-engine batch.

pub(crate) mod cmd;
pub(crate) mod error;
pub(crate) mod frame;
pub mod fuzzing;
pub(crate) mod glob;
pub(crate) mod reply;

use std::time::{Duration, Instant};

use crate::pipeline::{Cx, Processed as Outcome};
use crate::shared::Stats;
use cmd::{Batchable, Ctx};
use frame::{Limits, Request};
use reply::Reply;

/// A RESP connection's state.
#[derive(Debug, Default)]
pub(crate) struct RespConn {
    /// RESP3 after `HELLO 3`.
    pub resp3: bool,
    pub authenticated: bool,
    req: Request,
    /// Reads waiting to run as one batch: (input range of the request, what
    /// it asks). Their replies are due before any later request's.
    pending: Vec<(usize, usize, Batchable)>,
    /// Argument offsets of pending requests (`pending` indexes into it).
    pending_args: Vec<(usize, usize)>,
    /// The pending RANGEs' specs (slots reused across batches).
    ranges: cmd::RangeSlots,
    /// This connection wrote through the session since its last commit: a
    /// read must commit first to see its own writes.
    wrote: bool,
    /// The slow log's stopwatch for this turn.
    laps: Laps,
}

/// Times commands for the slow log with one clock read per command, not
/// two: a command's time runs from the end of the one before it in the same
/// turn (its parse included, a few hundred nanoseconds) or from its own
/// start if it is the turn's first. A clock read was 3% of a pipelined
/// SET's samples.
#[derive(Debug, Default)]
struct Laps {
    last: Option<Instant>,
}

impl Laps {
    /// Marks a command's start (reads the clock only if no lap is open).
    fn start(&mut self) {
        if self.last.is_none() {
            self.last = Some(Instant::now());
        }
    }

    /// Closes the open lap without timing it: the next `start` reads the
    /// clock afresh.
    fn restart(&mut self) {
        self.last = None;
    }

    /// The time since the open lap began; the next lap begins now.
    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let took = self.last.map_or(Duration::ZERO, |t| now - t);
        self.last = Some(now);
        took
    }
}

impl RespConn {
    pub(crate) fn new(needs_auth: bool) -> RespConn {
        RespConn {
            authenticated: !needs_auth,
            ..Default::default()
        }
    }

    pub(crate) fn process(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
    ) -> Outcome {
        let mut at = 0;
        let mut close = false;
        self.pending.clear();
        self.pending_args.clear();
        self.ranges.clear();
        self.laps = Laps::default();
        while out.len() <= reply_budget {
            // Per request: an AUTH earlier in the same read lifts the
            // unauthenticated limits for the requests after it.
            let limits = Limits {
                max_request_bytes: cx.shared.config.max_request_bytes.0 as usize,
                authenticated: self.authenticated,
            };
            let mut req = std::mem::take(&mut self.req);
            let parsed = frame::parse(&input[at..], limits, &mut req);
            match parsed {
                Ok(false) => {
                    self.req = req;
                    break;
                }
                Err(e) => {
                    self.req = req;
                    if !self.run_batch(cx, input, out) {
                        return Outcome {
                            consumed: at,
                            close: true,
                            abort: true,
                        };
                    }
                    Stats::add(&cx.shared.stats.protocol_errors, 1);
                    let mut r = Reply {
                        out,
                        resp3: self.resp3,
                    };
                    r.error(&format!("ERR {}", e.message()));
                    tracing::debug!(
                        client = cx.client.id,
                        "closing after protocol error: {}",
                        e.message()
                    );
                    // Framing is lost: nothing after this can be trusted.
                    return Outcome {
                        consumed: input.len(),
                        close: true,
                        abort: false,
                    };
                }
                Ok(true) => {}
            }
            let base = at;
            at += req.consumed;
            if req.args.is_empty() {
                self.req = req;
                continue;
            }
            // Most requests have a few arguments: keep them on the stack.
            let mut small: [&[u8]; 8] = [&[]; 8];
            let heap: Vec<&[u8]>;
            let args: &[&[u8]] = if req.args.len() <= small.len() {
                for (i, slot) in small.iter_mut().enumerate().take(req.args.len()) {
                    *slot = req.arg(&input[base..], i);
                }
                &small[..req.args.len()]
            } else {
                heap = (0..req.args.len())
                    .map(|i| req.arg(&input[base..], i))
                    .collect();
                &heap
            };
            Stats::add(&cx.shared.stats.commands_processed, 1);
            if tracing::enabled!(tracing::Level::DEBUG) {
                tracing::debug!(
                    client = cx.client.id,
                    "resp request: {}",
                    String::from_utf8_lossy(args[0])
                );
            }
            let spec = cmd::lookup(args[0]);
            // Inline requests' arguments live in the parser's scratch
            // buffer, which the next request reuses: they run unbatched.
            let from_input = req
                .args
                .iter()
                .all(|a| matches!(a, frame::Arg::Input { .. }));
            if self.authenticated
                && from_input
                && let Some(b) = cmd::batchable(spec, args, cx.shared, &mut self.ranges)
            {
                // Offsets of a batched request's arguments, absolute in `input`.
                let first = self.pending_args.len();
                for a in args {
                    let off = a.as_ptr() as usize - input.as_ptr() as usize;
                    self.pending_args.push((off, a.len()));
                }
                self.pending.push((first, self.pending_args.len(), b));
                self.req = req;
                continue;
            }
            if !self.run_batch(cx, input, out) {
                return Outcome {
                    consumed: at,
                    close: true,
                    abort: true,
                };
            }
            let write = spec.is_some_and(|s| s.write);
            if write {
                self.wrote = true;
            } else if !self.commit_before_read(cx) {
                return Outcome {
                    consumed: at,
                    close: true,
                    abort: true,
                };
            }
            self.laps.start();
            let mut ctx = Ctx {
                shared: cx.shared,
                session: cx.session,
                conn: self,
                client: cx.client,
                args,
                r: Reply { out, resp3: false },
                close: false,
            };
            ctx.r.resp3 = ctx.conn.resp3;
            cmd::dispatch(&mut ctx, spec);
            close = ctx.close;
            let took = self.laps.lap();
            if cx.shared.slowlog.wants(took) {
                let name = cx.client.name.clone().unwrap_or_default();
                cx.shared.slowlog.record(
                    took,
                    &slowlog_args(args),
                    &cx.client.addr.to_string(),
                    &name,
                );
            }
            self.req = req;
            if close {
                break;
            }
        }
        if !self.run_batch(cx, input, out) {
            return Outcome {
                consumed: at,
                close: true,
                abort: true,
            };
        }
        Outcome {
            consumed: at,
            close,
            abort: false,
        }
    }

    /// Commits the session if this connection wrote since its last commit,
    /// so a read sees the connection's own writes. False: the commit failed
    /// and the turn must be aborted.
    fn commit_before_read(&mut self, cx: &Cx<'_>) -> bool {
        if self.wrote {
            // The commit (an fsync with `durability always`) is nobody's
            // command: the next lap starts after it.
            self.laps.restart();
        }
        cx.commit_own_writes(&mut self.wrote)
    }

    /// Runs the pending reads as one batch and writes their replies.
    /// False: a commit failed (abort the turn).
    fn run_batch(&mut self, cx: &mut Cx<'_>, input: &[u8], out: &mut Vec<u8>) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        if !self.commit_before_read(cx) {
            return false;
        }
        self.laps.start();
        let pending = std::mem::take(&mut self.pending);
        let args = cmd::Args {
            input,
            offs: &self.pending_args,
        };
        let mut r = Reply {
            out,
            resp3: self.resp3,
        };
        cmd::run_batch(cx, &pending, args, &self.ranges, &mut r);
        let took = self.laps.lap();
        if cx.shared.slowlog.wants(took) {
            let name = cx.client.name.clone().unwrap_or_default();
            let (first, end, _) = pending[0];
            let logged: Vec<&[u8]> = (first..end).map(|i| args.get(i)).collect();
            cx.shared
                .slowlog
                .record(took, &logged, &cx.client.addr.to_string(), &name);
        }
        self.pending = pending;
        self.pending.clear();
        self.pending_args.clear();
        self.ranges.clear();
        true
    }
}

/// A request's arguments as the slow log keeps them: AUTH's and HELLO's
/// carry the password, so only their name is kept, as Redis redacts them.
fn slowlog_args<'a>(args: &[&'a [u8]]) -> Vec<&'a [u8]> {
    if cmd::eq_ic(args[0], "auth") || cmd::eq_ic(args[0], "hello") {
        let mut kept = vec![args[0]];
        kept.resize(args.len(), b"(redacted)");
        kept
    } else {
        args.to_vec()
    }
}
