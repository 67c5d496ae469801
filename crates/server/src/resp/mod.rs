//! The RESP listener's protocol, as the pipeline's [`Protocol`]: bytes ->
//! request frames (`frame`) -> commands (`cmd`: the table says each one's
//! kind; GET, MGET, GETV and bounded RANGEs are batchable reads) ->
//! replies (`reply`).

pub(crate) mod cmd;
pub(crate) mod error;
pub(crate) mod frame;
pub(crate) use crate::state::glob;
pub(crate) mod reply;

use std::time::Duration;

use combkv::Result as StoreResult;
use combkv::op::Outcome;
use combkv::readexec::BatchResults;

use crate::state::Stats;
use crate::turn::{Class, Cx, Protocol, Ran, Reads, Step};
use cmd::batch::{self, Hits, Planned, RangeSlots};
use cmd::{ArgList, Ctx, Spec};
use error::CmdError;
use frame::{Discard, FrameError, Frames, Limits};
use reply::Reply;

/// What RESP commands change about a connection.
#[derive(Debug, Default)]
pub(crate) struct RespConn {
    /// RESP3 after `HELLO 3`.
    pub resp3: bool,
    pub authenticated: bool,
    /// The user the connection runs as (ACL).
    pub user: crate::state::acl::ConnUser,
    /// After MULTI: the transaction being queued.
    pub multi: Option<cmd::multi::Multi>,
    /// WATCHed keys, until EXEC, DISCARD or UNWATCH.
    pub watched: cmd::multi::Watches,
}

/// A RESP connection's protocol state: the connection's, and the buffers
/// its parsed requests keep.
#[derive(Debug, Default)]
pub(crate) struct Resp {
    pub conn: RespConn,
    /// The arguments of the requests parsed since no request was held
    /// (inline requests' arguments included, so they batch too).
    frames: Frames,
    /// The pending RANGEs' specs (slots reused across batches).
    ranges: RangeSlots,
    /// The rest of a request refused for `maxmemory`, being skipped.
    discard: Option<Discard>,
    /// How the last request `execute` ran ended, for its statistics.
    last: cmd::Dispatched,
}

/// A parsed RESP request: its command and where its arguments are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RespRequest {
    /// The command's table entry (`None`: unknown).
    spec: Option<&'static Spec>,
    /// What it runs, by its full name's documentation index (`get`,
    /// `client|list`): CLIENT LIST's `cmd=` and the statistics' id.
    id: u32,
    /// Where the request starts in the input.
    base: usize,
    /// Its arguments: entries `first..end` of the connection's frames.
    first: usize,
    end: usize,
    /// Planned into a read batch.
    planned: Option<Planned>,
}

/// A request's arguments in the frames, sliced on demand.
#[derive(Clone, Copy)]
struct FrameArgs<'a> {
    /// The input from the request's start.
    input: &'a [u8],
    frames: &'a Frames,
    first: usize,
    len: usize,
}

impl<'a> ArgList<'a> for FrameArgs<'a> {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    #[inline(always)]
    fn get(&self, i: usize) -> &'a [u8] {
        debug_assert!(i < self.len);
        self.frames.arg(self.input, self.first + i)
    }
}

impl Resp {
    pub(crate) fn new(needs_auth: bool) -> Resp {
        Resp {
            conn: RespConn {
                authenticated: !needs_auth,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[inline]
    fn args<'a>(&'a self, input: &'a [u8], req: &RespRequest) -> FrameArgs<'a> {
        FrameArgs::of(&self.frames, input, req)
    }
}

impl<'a> FrameArgs<'a> {
    #[inline]
    fn of(frames: &'a Frames, input: &'a [u8], req: &RespRequest) -> FrameArgs<'a> {
        FrameArgs {
            input: &input[req.base..],
            frames,
            first: req.first,
            len: req.end - req.first,
        }
    }
}

impl Protocol for Resp {
    type Request<'a> = RespRequest;
    type Error = FrameError;
    type Held = cmd::Held;
    const NAME: &'static str = "resp";
    const INTERNAL_ERROR: &'static [u8] = b"-ERR internal error; closing connection\r\n";
    const TIMED: bool = true;

    fn wanted(&self) -> usize {
        // A request being skipped is not kept: it needs no room.
        if self.discard.is_some() {
            0
        } else {
            self.frames.wanted()
        }
    }

    fn large(&self) -> Option<(usize, usize)> {
        if self.discard.is_some() {
            None
        } else {
            self.frames.large()
        }
    }

    fn splice(&mut self, at: usize, value: combkv::ReceivedValue) {
        self.frames.splice(at, value);
    }

    fn unsplice(&mut self) {
        self.frames.unsplice();
    }

    #[inline]
    fn parse(
        &mut self,
        cx: &Cx<'_>,
        input: &[u8],
        at: usize,
        fresh: bool,
    ) -> Step<RespRequest, FrameError> {
        if fresh {
            self.frames.clear();
            self.ranges.clear();
        }
        // Per request: an AUTH earlier in the same read lifts the
        // unauthenticated limits for the requests after it.
        let limits = Limits {
            max_request_bytes: cx.shared.live.max_request_bytes() as usize,
            authenticated: self.conn.authenticated,
            max_body: cx.shared.body_room(),
        };
        if let Some(d) = &mut self.discard {
            let step = match frame::discard(&input[at..], d, limits) {
                Ok(Some(n)) => Step::Skip(n),
                Ok(None) => Step::Incomplete,
                Err(e) => Step::Close(e),
            };
            if d.bytes == 0 && d.args == 0 {
                self.discard = None;
            }
            return step;
        }
        let f = match frame::parse_request(&input[at..], limits, &mut self.frames, at == 0) {
            Ok(Some(f)) => f,
            Ok(None) => return Step::Incomplete,
            Err(FrameError::NoRoom {
                header_end,
                discard,
            }) => {
                self.discard = Some(discard);
                let e = FrameError::NoRoom {
                    header_end,
                    discard,
                };
                return Step::Reject(e, header_end);
            }
            Err(e) => return Step::Close(e),
        };
        if f.first == f.end {
            return Step::Skip(f.consumed);
        }
        let mut req = RespRequest {
            spec: None,
            id: 0,
            base: at,
            first: f.first,
            end: f.end,
            planned: None,
        };
        let args = FrameArgs::of(&self.frames, input, &req);
        let name = args.get(0);
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(
                client = cx.client.id,
                "resp request: {}",
                String::from_utf8_lossy(name)
            );
        }
        req.spec = cmd::lookup_request(name);
        // CLIENT LIST's `cmd=` (one store, read only by CLIENT LIST) and
        // the command statistics' id: subcommands count on their own.
        let sub = (args.len > 1).then(|| args.get(1));
        req.id = cmd::table::full_name_index(req.spec, sub);
        cx.client
            .live
            .cmd
            .store(req.id, std::sync::atomic::Ordering::Relaxed);
        // After MULTI a read is queued, not batched.
        if let Some(spec) = req.spec
            && let cmd::Kind::BatchRead(kind) = spec.kind
            && self.conn.authenticated
            && self.conn.multi.is_none()
            && !cx.loading
            && spec.arity_ok(args.len)
            // A user with limits has each read checked by the dispatcher.
            && self.conn.user.unrestricted(&cx.shared.acl)
        {
            let max_key = cx.store().max_key_len();
            req.planned = kind.plan(args, max_key, &mut self.ranges);
        }
        Step::Request(req, f.consumed)
    }

    #[inline]
    fn class(&self, req: &RespRequest) -> Class {
        match (req.planned, req.spec) {
            (Some(_), _) => Class::BatchRead,
            // Queuing after MULTI touches no data.
            (None, Some(spec)) if self.conn.multi.is_some() && !spec.in_multi_now => Class::Control,
            (None, Some(spec)) => spec.class_of(req.end - req.first),
            // An unknown command: its error alone.
            (None, None) => Class::Control,
        }
    }

    #[inline]
    fn reads(&self, req: &RespRequest) -> usize {
        match req.planned {
            Some(Planned::Mget) => req.end - req.first - 1,
            _ => 1,
        }
    }

    fn read_keys<'s>(
        &'s self,
        input: &'s [u8],
        req: &RespRequest,
        into: &mut smallvec::SmallVec<[&'s [u8]; 4]>,
    ) -> bool {
        // The keys its table entry names (first to last, as COMMAND gives
        // them; a negative last counts from the end).
        let Some(spec) = req.spec.filter(|s| s.first_key > 0) else {
            return false;
        };
        let n = (req.end - req.first) as i64;
        let first = i64::from(spec.first_key);
        let last = match spec.last_key {
            l if l < 0 => n + i64::from(l),
            l => i64::from(l),
        };
        if last < first || last >= n {
            return false;
        }
        let input = &input[req.base..];
        for i in first..=last {
            into.push(self.frames.arg(input, req.first + i as usize));
        }
        true
    }

    #[inline]
    fn read_requests<'s>(&'s self, input: &'s [u8], req: &'s RespRequest, into: &mut Reads<'s>) {
        let planned = req.planned.expect("a batched request is planned");
        batch::read_requests(planned, self.args(input, req), &self.ranges, into);
    }

    fn reply_batch(
        &self,
        cx: &Cx<'_>,
        _input: &[u8],
        pending: &[RespRequest],
        results: &BatchResults,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> usize {
        let max_reply = cx.shared.live.max_reply_bytes();
        let mut r = Reply {
            out,
            resp3: self.conn.resp3,
        };
        let mut hits = Hits::default();
        let mut i = 0;
        let mut answered = 0;
        for req in pending {
            let planned = req.planned.expect("a batched request is planned");
            let n = req.end - req.first;
            i += batch::reply(
                planned,
                n,
                results,
                i,
                &self.ranges,
                max_reply,
                &mut hits,
                &mut r,
                cx.send_shared,
            );
            answered += 1;
            if r.out.len() > budget {
                break;
            }
        }
        hits.record(&cx.shared.stats);
        answered
    }

    fn batch_failed(
        &self,
        _cx: &Cx<'_>,
        err: combkv::Error,
        pending: &[RespRequest],
        out: &mut Vec<u8>,
    ) {
        let mut r = Reply {
            out,
            resp3: self.conn.resp3,
        };
        let line = CmdError::from(err).line();
        for _ in pending {
            r.error(&line);
        }
    }

    fn execute(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        req: &RespRequest,
        out: &mut Vec<u8>,
    ) -> Ran<cmd::Held> {
        let Resp { conn, frames, .. } = self;
        let input = &input[req.base..];
        let n = req.end - req.first;
        // Most requests have a few arguments: keep them on the stack.
        let mut small: [&[u8]; 8] = [&[]; 8];
        let heap: Vec<&[u8]>;
        let args: &[&[u8]] = if n <= small.len() {
            for (i, slot) in small.iter_mut().enumerate().take(n) {
                *slot = frames.arg(input, req.first + i);
            }
            &small[..n]
        } else {
            heap = (req.first..req.end).map(|i| frames.arg(input, i)).collect();
            &heap
        };
        // A value received into its own buffer goes to the store as it is
        // (`combkv::ReceivedValue::offer`) if the command stores it whole.
        let offer = frames.spliced_among(req.first, req.end).map(|v| v.offer());
        let resp3 = conn.resp3;
        let read_mark = cx.read_mark();
        let mut ctx = Ctx {
            shared: cx.shared,
            session: cx.session,
            parking: cx.parking,
            batch: cx.batch,
            conn,
            client: cx.client,
            args,
            r: Reply { out, resp3 },
            loading: cx.loading,
            stats: cx.stats,
            read_mark,
            close: false,
            txn: None,
            held: None,
            parked: false,
        };
        self.last = cmd::dispatch(&mut ctx, req.spec);
        if let Some(offer) = offer {
            Stats::add(&cx.shared.stats.large_values_received, 1);
            if offer.taken() {
                Stats::add(&cx.shared.stats.large_values_stored_uncopied, 1);
            }
        }
        let ran = Ran {
            close: ctx.close,
            held: ctx.held.map(|h| (h, 1)),
            parked: ctx.parked,
        };
        publish(conn, &cx.client.live);
        ran
    }

    /// A command waits while CLIENT PAUSE holds it back: every command
    /// with ALL; with WRITE those that write, and an EXEC whose queue
    /// writes (Redis 7's `is_may_replicate_command`); a write being queued
    /// after MULTI waits too, as in Redis. As in Redis, a request that
    /// fails the earlier checks (unknown command, arity, authentication)
    /// is answered at once.
    fn postponed(&self, cx: &Cx<'_>, req: &RespRequest) -> bool {
        use crate::state::clients::Paused;
        let paused = cx.shared.pause.now();
        if paused == Paused::No {
            return false;
        }
        let Some(spec) = req.spec else { return false };
        if !spec.arity_ok(req.end - req.first) || !self.conn.authenticated {
            return false;
        }
        paused == Paused::All
            || spec.writes()
            || (spec.name == "exec" && self.conn.multi.as_ref().is_some_and(|m| m.writes()))
    }

    fn land(
        &mut self,
        cx: &mut Cx<'_>,
        held: cmd::Held,
        mut outcomes: Vec<StoreResult<Outcome>>,
        out: &mut Vec<u8>,
    ) {
        let resp3 = self.conn.resp3;
        let read_mark = cx.read_mark();
        let mut ctx = Ctx {
            shared: cx.shared,
            session: cx.session,
            parking: cx.parking,
            batch: cx.batch,
            conn: &mut self.conn,
            client: cx.client,
            args: &[],
            r: Reply { out, resp3 },
            loading: cx.loading,
            stats: cx.stats,
            read_mark,
            close: false,
            txn: None,
            held: None,
            parked: false,
        };
        let r = match crate::turn::one(&mut outcomes) {
            Ok(o) => held(&mut ctx, o),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = r {
            cmd::error_reply(&mut ctx, &e);
        }
    }

    /// The one request RESP answers without running it: one whose bulk
    /// string `maxmemory` leaves no room for (its rest is being skipped).
    fn reject(&mut self, cx: &Cx<'_>, err: FrameError, out: &mut Vec<u8>) {
        Stats::add(&cx.shared.stats.commands_processed, 1);
        Stats::add(&cx.shared.stats.writes_refused_oom, 1);
        Stats::add(&cx.shared.stats.errors_replied, 1);
        let mut r = Reply {
            out,
            resp3: self.conn.resp3,
        };
        r.error(&err.message());
    }

    fn rewind(&mut self, _req: Option<&RespRequest>) {
        // Only a refused request sets `discard`, and it is parsed again.
        self.discard = None;
    }

    fn protocol_error(&mut self, cx: &Cx<'_>, err: FrameError, out: &mut Vec<u8>) {
        let mut r = Reply {
            out,
            resp3: self.conn.resp3,
        };
        r.error(&format!("ERR {}", err.message()));
        tracing::debug!(
            client = cx.client.id,
            "closing after protocol error: {}",
            err.message()
        );
    }

    fn timed(&mut self, cx: &Cx<'_>, input: &[u8], req: &RespRequest, took: Duration) {
        let stats = &cx.stats.resp;
        let id = req.id as usize;
        match self.last {
            // Unknown: no command to count it under (its error is counted).
            _ if req.spec.is_none() => {}
            cmd::Dispatched::Rejected => stats.rejected(id),
            cmd::Dispatched::Failed => {
                stats.call(id, took);
                stats.failed(id);
            }
            cmd::Dispatched::Ran => stats.call(id, took),
        }
        if cx.shared.monitors.active() && self.last != cmd::Dispatched::Rejected {
            self.monitor(cx, input, req);
        }
        let threshold = cx.shared.live.latency_monitor_threshold();
        if threshold > 0 && req.spec.is_some() && took.as_millis() as u64 >= threshold {
            let event = if cmd::table::is_fast(id) {
                "fast-command"
            } else {
                "command"
            };
            cx.shared.latency.record(event, took.as_millis() as u64);
        }
        if cx.shared.slowlog.wants(took) {
            self.slow(cx, input, req, took);
        }
    }

    fn timed_batch(&self, cx: &Cx<'_>, input: &[u8], pending: &[RespRequest], took: Duration) {
        let share = took / pending.len().max(1) as u32;
        for req in pending {
            cx.stats.resp.call(req.id as usize, share);
            if cx.shared.monitors.active() {
                self.monitor(cx, input, req);
            }
        }
        if cx.shared.slowlog.wants(took)
            && let Some(first) = pending.first()
        {
            self.slow(cx, input, first, took);
        }
    }

    fn slow(&self, cx: &Cx<'_>, input: &[u8], req: &RespRequest, took: Duration) {
        let args = self.args(input, req);
        let args: Vec<&[u8]> = (0..args.len).map(|i| args.get(i)).collect();
        let name = cx.client.name.clone().unwrap_or_default();
        cx.shared.slowlog.record(
            took,
            &slowlog_args(&args),
            &cx.client.addr.to_string(),
            &name,
        );
    }
}

impl Resp {
    /// Feeds a command that ran to the MONITOR clients, as Redis does:
    /// not admin commands (MONITOR, CONFIG, ...), and AUTH's and HELLO's
    /// secrets redacted.
    fn monitor(&self, cx: &Cx<'_>, input: &[u8], req: &RespRequest) {
        if req.spec.is_none() || cmd::table::is_admin(req.id as usize) {
            return;
        }
        let args = self.args(input, req);
        let args: Vec<&[u8]> = (0..args.len).map(|i| args.get(i)).collect();
        cx.shared
            .monitors
            .feed(&cx.client.live.addr_text(), &slowlog_args(&args));
    }
}

/// Publishes what CLIENT LIST shows of the connection's RESP state: its
/// transaction and protocol version (a few relaxed stores per command).
fn publish(conn: &RespConn, live: &crate::state::ClientEntry) {
    use std::sync::atomic::Ordering::Relaxed;
    let (n, bytes) = conn.multi.as_ref().map_or((-1, 0), |m| {
        let (n, b) = m.size();
        (n as i64, b as u64)
    });
    live.multi.store(n, Relaxed);
    live.multi_mem.store(bytes, Relaxed);
    live.resp.store(if conn.resp3 { 3 } else { 2 }, Relaxed);
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
