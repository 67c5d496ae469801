//! The memcached listener's protocol, text and meta commands, as the
//! pipeline's [`Protocol`]: bytes -> requests (`parse`) -> store operations
//! and replies (`cmd`). `get`, `gets` and `mg` (without `T`) are batchable
//! reads; replies leave in request order. A connection whose first byte is
//! `0x80` speaks the binary protocol instead (`binary`), as in memcached.
//! `udp` serves get and gets over UDP, when enabled.

mod acl;
mod auth;
pub mod binary;
pub(crate) mod cmd;
mod dump;
pub mod error;
mod monitor;
pub(crate) mod names;
pub mod parse;
pub(crate) mod stats;
pub mod types;
pub(crate) mod udp;

use combkv::readexec::{BatchResults, ReadRequest};
use std::time::Duration;

use crate::state::{Shared, Stats};
use crate::turn::{Class, Cx, Protocol, Ran, Reads, Render, Step};
use binary::{BinCmd, BinParsed, BinRequest};
use error::McError;
use parse::{GetKind, Limits, Parsed, Request};

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
    /// After `parse` found a storage command's data block incomplete: the
    /// bytes the request needs (`Protocol::wanted`; 0: not known).
    wanted: usize,
    /// The input starts inside a retrieval line whose first parts were
    /// parsed: the rest of its keys come next.
    cont: Option<Cont>,
    /// False until the connection authenticates, where the server has a
    /// password (`auth`).
    authenticated: bool,
    /// The user it authenticated as (ACL; the default user until then).
    user: crate::state::acl::ConnUser,
    /// Which protocol the connection speaks, decided by its first byte.
    mode: Mode,
    /// An `lru_crawler metadump` being answered in parts.
    dump: Option<dump::Dump>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    #[default]
    Undecided,
    Text,
    Binary,
}

/// The rest of a retrieval line being answered in parts.
#[derive(Debug, Clone, Copy)]
struct Cont {
    kind: GetKind,
    exptime: i64,
    /// The line's bytes left, its newline included.
    left: usize,
}

/// A request answered by an error alone.
#[derive(Debug)]
pub(crate) enum Rejected {
    Text {
        err: McError,
        /// memcached's `noreply` hides error replies too.
        noreply: bool,
    },
    Binary {
        head: binary::Head,
        status: binary::Status,
    },
    /// Not even a binary header: closed without a reply.
    Silent,
}

/// The request limits of a server.
pub(crate) fn limits(shared: &Shared) -> Limits {
    Limits {
        max_key_len: shared.current_store().max_key_len(),
        max_value_len: shared.current_store().max_value_len(),
        max_request_bytes: usize::try_from(shared.live.max_request_bytes()).unwrap_or(usize::MAX),
        max_body: shared.body_room(),
    }
}

impl Memcache {
    /// A connection's state; `needs_auth`: the server has a password.
    pub(crate) fn new(needs_auth: bool) -> Memcache {
        Memcache {
            authenticated: !needs_auth,
            ..Memcache::default()
        }
    }

    /// Before authentication only the authenticating `set` is read; every
    /// other line is refused.
    fn parse_unauthenticated<'a>(&mut self, input: &'a [u8]) -> Step<Request<'a>, Rejected> {
        let refused = |err| Rejected::Text {
            err,
            noreply: false,
        };
        match auth::parse(input) {
            auth::AuthStep::Incomplete => Step::Incomplete,
            auth::AuthStep::Close => Step::Close(refused(McError::Unauthenticated)),
            auth::AuthStep::Refused {
                err,
                consumed,
                swallow,
            } => {
                self.swallow = swallow;
                Step::Reject(refused(err), consumed)
            }
            auth::AuthStep::Credentials {
                user,
                pass,
                consumed,
            } => Step::Request(Request::Auth { user, pass }, consumed),
        }
    }

    /// Answers the authenticating `set`.
    fn authenticate(&mut self, cx: &Cx<'_>, user: &[u8], pass: &[u8], out: &mut Vec<u8>) {
        if let Some(u) = auth::check(cx, user, pass) {
            *cx.client.live.user.lock() = u.name.clone();
            self.user.set(u, &cx.shared.acl);
            self.authenticated = true;
            cmd::line(out, "STORED");
        } else {
            cmd::error_line(cx, out, &McError::AuthFailure);
        }
    }

    /// The part of a retrieval line whose keys, `keys`, start `keys_at`
    /// bytes into the rest of the line (`cont.left` bytes with its
    /// newline): its next `GET_CHUNK_KEYS` keys, or all of them if no more
    /// follow.
    fn part<'a>(
        &mut self,
        keys_at: usize,
        keys: &'a [u8],
        cont: Cont,
        first: bool,
    ) -> Step<Request<'a>, Rejected> {
        // The end of the `GET_CHUNK_KEYS`-th key, if another key follows.
        let mut end = None;
        let mut n = 0;
        let mut i = 0;
        while i < keys.len() {
            while i < keys.len() && keys[i] == b' ' {
                i += 1;
            }
            if i == keys.len() {
                break;
            }
            if n == parse::GET_CHUNK_KEYS {
                end = Some(keys_at + i);
                break;
            }
            while i < keys.len() && keys[i] != b' ' {
                i += 1;
            }
            n += 1;
        }
        let (consumed, last) = match end {
            Some(e) => (e, false),
            None => (cont.left, true),
        };
        self.cont = (!last).then_some(Cont {
            left: cont.left - consumed,
            ..cont
        });
        let part = match end {
            Some(e) => &keys[..e - keys_at],
            None => keys,
        };
        let req = Request::Get {
            kind: cont.kind,
            exptime: cont.exptime,
            keys: part,
            first,
            last,
            line_left: if first { 0 } else { cont.left },
        };
        Step::Request(req, consumed)
    }

    /// The next part of a retrieval line whose first part was parsed: its
    /// keys run to the newline `cont.left` bytes on (the line arrived whole
    /// and its keys were checked when its first part was parsed).
    fn next_part<'a>(
        &mut self,
        input: &'a [u8],
        at: usize,
        cont: Cont,
    ) -> Step<Request<'a>, Rejected> {
        let rest = &input[at..at + cont.left];
        let mut keys = &rest[..rest.len() - 1];
        if let [head @ .., b'\r'] = keys {
            keys = head;
        }
        self.part(0, keys, cont, false)
    }
}

impl Memcache {
    /// Parses the next request (the permission check follows, in
    /// `Protocol::parse`).
    fn parse_request<'a>(&mut self, input: &'a [u8], at: usize) -> Step<Request<'a>, Rejected> {
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
        if self.mode == Mode::Undecided {
            let Some(&first) = input.get(at) else {
                return Step::Incomplete;
            };
            self.mode = match first {
                binary::REQUEST_MAGIC => Mode::Binary,
                _ => Mode::Text,
            };
        }
        if self.mode == Mode::Binary {
            return self.parse_binary(&input[at..]);
        }
        if let Some(cont) = self.cont {
            return self.next_part(input, at, cont);
        }
        if let Some(d) = &self.dump {
            let step = d.next_step();
            if d.finished() {
                self.dump = None;
            }
            return step;
        }
        if !self.authenticated {
            return self.parse_unauthenticated(&input[at..]);
        }
        match parse::parse(&input[at..], &self.limits, self.scanned) {
            Parsed::Incomplete { scanned, wanted } => {
                self.scanned = scanned;
                self.wanted = wanted;
                Step::Incomplete
            }
            Parsed::Close { err } => Step::Close(Rejected::Text {
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
                Step::Reject(Rejected::Text { err, noreply }, consumed)
            }
            Parsed::Request { req, consumed } => {
                self.scanned = 0;
                match req {
                    Request::Get {
                        kind,
                        exptime,
                        keys,
                        ..
                    } => {
                        // The keys start inside the line, which starts at `at`.
                        let keys_at = keys.as_ptr() as usize - input[at..].as_ptr() as usize;
                        let cont = Cont {
                            kind,
                            exptime,
                            left: consumed,
                        };
                        self.part(keys_at, keys, cont, true)
                    }
                    Request::MetaDump {
                        class_one,
                        cachedump,
                    } => {
                        let d = dump::Dump::new(class_one, cachedump, consumed);
                        let step = d.next_step();
                        self.dump = Some(d);
                        step
                    }
                    req => Step::Request(req, consumed),
                }
            }
        }
    }

    /// Parses a binary packet. Before authentication only SASL and
    /// `version` are served; anything else is refused and the connection
    /// closed, as memcached does.
    fn parse_binary<'a>(&mut self, input: &'a [u8]) -> Step<Request<'a>, Rejected> {
        // Refused from the header, before a body is read (memcached's order).
        if !self.authenticated
            && let Some(head) = binary::peek_head(input)
            && !binary::open_before_auth(head.opcode)
        {
            let status = binary::Status::AuthError;
            return Step::Close(Rejected::Binary { head, status });
        }
        match binary::parse(input, &self.limits) {
            BinParsed::Incomplete => Step::Incomplete,
            BinParsed::Close(None) => Step::Close(Rejected::Silent),
            BinParsed::Close(Some((head, status))) => {
                Step::Close(Rejected::Binary { head, status })
            }
            BinParsed::Error {
                head,
                status,
                consumed,
                swallow,
            } => {
                self.swallow = swallow;
                Step::Reject(Rejected::Binary { head, status }, consumed)
            }
            BinParsed::Request(req, len) => Step::Request(Request::Binary(req), len),
        }
    }
}

impl Memcache {
    /// Runs a request that is not batched. True: close the connection.
    fn run(&mut self, cx: &mut Cx<'_>, req: &Request<'_>, out: &mut Vec<u8>) -> bool {
        match *req {
            Request::Quit => return true,
            // memcached's replies: closed when it shuts down.
            Request::Shutdown { valid } => {
                if !cx.shared.config.memcached_shutdown {
                    out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                } else if !valid {
                    out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
                } else {
                    tracing::info!(client = cx.client.id, "memcached shutdown: stopping");
                    cx.shared.stop();
                    return true;
                }
                return false;
            }
            Request::Auth { user, pass } => {
                self.authenticate(cx, user, pass, out);
                return false;
            }
            Request::MetaDump { .. } => {
                if let Some(d) = &mut self.dump {
                    d.part(cx, out);
                }
                return false;
            }
            Request::Binary(ref b) => {
                return match b.cmd {
                    BinCmd::SaslListMechs | BinCmd::SaslAuth { .. } | BinCmd::SaslStep => {
                        self.sasl(cx, b, out);
                        false
                    }
                    _ => binary::cmd::execute(cx, b, out),
                };
            }
            _ => {}
        }
        cmd::execute(cx, req, out);
        false
    }
}

/// A request refused before it runs: a binary request gets `status`, a
/// text one `err`'s line (even with `noreply`, as memcached's errors).
/// Shows a request that ran to the MONITOR clients (see `monitor`).
fn feed_monitors(cx: &Cx<'_>, req: &Request<'_>) {
    if let Some(words) = monitor::words(req) {
        let words: Vec<&[u8]> = words.iter().map(|w| &**w).collect();
        cx.shared.monitors.feed(&cx.client.live.addr_text(), &words);
    }
}

fn refusal(req: &Request<'_>, status: binary::Status, err: McError) -> Rejected {
    match req {
        Request::Binary(b) => Rejected::Binary {
            head: b.head,
            status,
        },
        _ => Rejected::Text {
            err,
            noreply: false,
        },
    }
}

/// Whether `req` reads or writes stored data: refused while the node
/// loads (version, stats, verbosity, authentication and quit run).
fn touches_data(req: &Request<'_>) -> bool {
    match req {
        Request::Version
        | Request::Quit
        | Request::Shutdown { .. }
        | Request::Verbosity { .. }
        | Request::Stats { .. }
        | Request::MetaNoop
        | Request::Auth { .. } => false,
        Request::Binary(b) => !matches!(
            b.cmd,
            BinCmd::Quit
                | BinCmd::Noop
                | BinCmd::Version
                | BinCmd::Verbosity
                | BinCmd::Stat { .. }
                | BinCmd::SaslListMechs
                | BinCmd::SaslAuth { .. }
                | BinCmd::SaslStep
        ),
        _ => true,
    }
}

impl Protocol for Memcache {
    type Request<'a> = Request<'a>;
    type Error = Rejected;
    type Held = Render;
    const NAME: &'static str = "memcached";
    const INTERNAL_ERROR: &'static [u8] = b"SERVER_ERROR internal error; closing connection\r\n";
    const TIMED: bool = true;

    fn begin(&mut self, cx: &Cx<'_>) {
        self.limits = limits(cx.shared);
    }

    fn wanted(&self) -> usize {
        self.wanted
    }

    fn parse<'a>(
        &mut self,
        cx: &Cx<'_>,
        input: &'a [u8],
        at: usize,
        _fresh: bool,
    ) -> Step<Request<'a>, Rejected> {
        self.wanted = 0;
        let step = self.parse_request(input, at);
        let acl = &cx.shared.acl;
        let Step::Request(req, n) = step else {
            return step;
        };
        if cx.loading && touches_data(&req) {
            let refusal = refusal(&req, binary::Status::TemporaryFailure, McError::Loading);
            return Step::Reject(refusal, n);
        }
        if !self.authenticated || self.user.unrestricted(acl) {
            return Step::Request(req, n);
        }
        let Some(user) = self.user.current(acl).cloned() else {
            // Its user was deleted: closed, as RESP connections are.
            let err = McError::AuthFailure;
            return Step::Close(Rejected::Text {
                err,
                noreply: false,
            });
        };
        let info = || {
            format!(
                "id={} addr={} user={}",
                cx.client.id, cx.client.addr, user.name
            )
        };
        if acl::permitted(acl, &user, &req, info) {
            return Step::Request(req, n);
        }
        let refusal = refusal(&req, binary::Status::AuthError, McError::NoPermission);
        Step::Reject(refusal, n)
    }

    fn timed(&mut self, cx: &Cx<'_>, _input: &[u8], req: &Request<'_>, took: Duration) {
        if let Some(id) = names::of(req) {
            cx.stats.memcached.call(id, took);
        }
        if cx.shared.monitors.active() {
            feed_monitors(cx, req);
        }
    }

    fn timed_batch(&self, cx: &Cx<'_>, _input: &[u8], pending: &[Request<'_>], took: Duration) {
        let share = took / pending.len().max(1) as u32;
        for req in pending {
            if let Some(id) = names::of(req) {
                cx.stats.memcached.call(id, share);
            }
            if cx.shared.monitors.active() {
                feed_monitors(cx, req);
            }
        }
    }

    fn reads(&self, req: &Request<'_>) -> usize {
        match req {
            Request::Get { keys, .. } => parse::keys(keys).count(),
            _ => 1,
        }
    }

    fn rewind(&mut self, req: Option<&Request<'_>>) {
        self.swallow = 0;
        self.scanned = 0;
        self.cont = match req {
            Some(&Request::Get {
                kind,
                exptime,
                first: false,
                line_left,
                ..
            }) => Some(Cont {
                kind,
                exptime,
                left: line_left,
            }),
            _ => None,
        };
    }

    /// CLIENT PAUSE WRITE holds memcached's writes too, ALL every request.
    fn postponed(&self, cx: &Cx<'_>, req: &Request<'_>) -> bool {
        use crate::state::clients::Paused;
        match cx.shared.pause.now() {
            Paused::No => false,
            Paused::All => true,
            Paused::Writes => self.class(req) == Class::Write,
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
            Request::MetaDebug { .. } | Request::Stats { .. } | Request::MetaDump { .. } => {
                Class::Read
            }
            Request::Binary(b) => match b.cmd {
                BinCmd::Get { .. } => Class::BatchRead,
                BinCmd::Store { .. }
                | BinCmd::Delete { .. }
                | BinCmd::Arith { .. }
                | BinCmd::Touch { .. }
                | BinCmd::Flush { .. } => Class::Write,
                BinCmd::Stat { .. } => Class::Read,
                BinCmd::Quit
                | BinCmd::Noop
                | BinCmd::Version
                | BinCmd::Verbosity
                | BinCmd::SaslListMechs
                | BinCmd::SaslAuth { .. }
                | BinCmd::SaslStep => Class::Control,
            },
            Request::Version
            | Request::Verbosity { .. }
            | Request::Quit
            | Request::Shutdown { .. }
            | Request::MetaNoop
            | Request::MetaDumpBadClass
            | Request::Auth { .. } => Class::Control,
        }
    }

    fn read_requests<'s>(&'s self, _input: &'s [u8], req: &'s Request<'_>, into: &mut Reads<'s>) {
        match req {
            Request::Get { keys, .. } => into.extend(parse::keys(keys).map(ReadRequest::Get)),
            Request::MetaGet { key, .. } => into.push(ReadRequest::Get(key.bytes())),
            Request::Binary(BinRequest {
                cmd: BinCmd::Get { key, .. },
                ..
            }) => into.push(ReadRequest::Get(key)),
            _ => unreachable!("only get, gets, mg and binary gets are batched"),
        }
    }

    fn reply_batch(
        &self,
        cx: &Cx<'_>,
        _input: &[u8],
        pending: &[Request<'_>],
        results: &BatchResults,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> usize {
        cmd::reply_batch(cx, pending, results, out, budget)
    }

    fn batch_failed(
        &self,
        cx: &Cx<'_>,
        err: combkv::Error,
        pending: &[Request<'_>],
        out: &mut Vec<u8>,
    ) {
        let err = McError::from(err);
        for req in pending {
            match req {
                Request::Binary(b) => binary::cmd::refuse(cx, out, b.head, &err),
                _ => cmd::error_line(cx, out, &err),
            }
        }
    }

    fn execute(
        &mut self,
        cx: &mut Cx<'_>,
        _input: &[u8],
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Ran<Render> {
        let close = self.run(cx, req, out);
        Ran {
            close,
            held: cx.held.take(),
            parked: false,
        }
    }

    fn land(
        &mut self,
        cx: &mut Cx<'_>,
        held: Render,
        outcomes: Vec<combkv::Result<combkv::op::Outcome>>,
        out: &mut Vec<u8>,
    ) {
        held(cx, outcomes, out);
    }

    fn reject(&mut self, cx: &Cx<'_>, err: Rejected, out: &mut Vec<u8>) {
        let oom = matches!(
            err,
            Rejected::Text {
                err: McError::OutOfMemoryStoring,
                ..
            } | Rejected::Binary {
                status: binary::Status::OutOfMemory,
                ..
            }
        );
        if oom {
            // A data block refused for maxmemory before it was read.
            Stats::add(&cx.shared.memcache.stats.store_no_memory, 1);
            Stats::add(&cx.shared.stats.writes_refused_oom, 1);
        }
        match err {
            Rejected::Text { err, noreply } => {
                if !noreply {
                    cmd::error_line(cx, out, &err);
                }
            }
            Rejected::Binary { head, status } => {
                Stats::add(&cx.shared.stats.errors_replied, 1);
                binary::error(out, head, status);
            }
            Rejected::Silent => {}
        }
    }

    fn protocol_error(&mut self, cx: &Cx<'_>, err: Rejected, out: &mut Vec<u8>) {
        match err {
            Rejected::Text { err, .. } => {
                cmd::error_line(cx, out, &err);
                tracing::debug!(client = cx.client.id, "closing: {err}");
            }
            Rejected::Binary { head, status } => {
                Stats::add(&cx.shared.stats.errors_replied, 1);
                binary::error(out, head, status);
                tracing::debug!(client = cx.client.id, "closing: binary {status:?}");
            }
            Rejected::Silent => {
                tracing::debug!(client = cx.client.id, "closing: no binary request magic");
            }
        }
    }
}
