//! RESP commands: what a command runs with ([`Ctx`]), dispatch (the checks
//! Redis runs before a command, then its handler) and the argument helpers.
//! The table of commands is `table`, what COMMAND says of each `docs`,
//! the batched reads `batch`; one file per command family: `strings` (GET
//! SET ... CAS), `keys` (DEL EXISTS EXPIRE TTL ... SCAN), `ordered` (RANGE
//! FLOOR CEIL SNAPSHOT GETAT RANGEAT), `server` (PING HELLO AUTH INFO
//! CONFIG CLIENT COMMAND SLOWLOG ...).

pub(crate) mod acl;
pub(crate) mod batch;
mod bits;
mod client;
mod cluster;
mod compare;
mod keys;
mod latency;
mod lcs;
mod memory;
pub(crate) mod multi;
mod object;
pub(crate) mod ordered;
mod server;
mod spec;
mod strings;
pub(crate) mod table;

use combkv::op::{Op, Outcome};
use combkv::readexec::BatchResults;

use super::RespConn;
use super::error::{CmdError, CmdResult};
use super::reply::Reply;
use crate::node::park::Written;
use crate::state::{Shared, Stats};
use crate::turn::Client;

pub(crate) use spec::{Kind, Spec};
pub(crate) use table::lookup_request;

/// What a command runs with.
pub(crate) struct Ctx<'a, 'b> {
    pub shared: &'a Shared,
    /// Writes go through the turn's session (see `pipeline::Cx`).
    pub session: &'a combkv::Session<'a>,
    /// How the connection waits for the log on a cluster node.
    pub parking: Option<crate::node::park::Parking<'a>>,
    /// The event loop's result buffers, for a read answered on its own.
    pub batch: &'a mut BatchResults,
    pub conn: &'a mut RespConn,
    pub client: &'a mut Client,
    pub args: &'a [&'b [u8]],
    pub r: Reply<'a>,
    /// The node does not serve yet (its turn began so): only commands
    /// with Redis's `loading` flag run.
    pub loading: bool,
    /// The event loop's per-command counts (errors by code here).
    pub stats: &'a crate::state::cmdstats::LoopStats,
    /// The read index this call's reads were let through on (see
    /// `Cx::read_mark`).
    pub read_mark: Option<crate::cluster::ReadMark>,
    /// Close the connection after this reply (QUIT).
    pub close: bool,
    /// Inside EXEC: how the command's writes and reads run (`multi`).
    pub txn: Option<&'a std::cell::RefCell<multi::TxnStep>>,
    /// The reply of this command's write, held until the write lands (on
    /// a cluster node, see `park`).
    pub held: Option<Held>,
    /// The command answered nothing yet: its connection parked (WAIT on a
    /// cluster node), and the request runs again once the answer lands.
    pub parked: bool,
}

/// A held write's reply: renders it from the write's outcome, with the
/// connection as it is when the outcome lands.
pub(crate) type Held = Box<dyn for<'x, 'y> FnOnce(&mut Ctx<'x, 'y>, Outcome) -> CmdResult + Send>;

impl<'a> Ctx<'a, '_> {
    /// How this command's reads park the connection: not inside EXEC.
    pub(crate) fn read_parking(&self) -> Option<crate::node::park::Parking<'a>> {
        self.parking.filter(|_| self.txn.is_none())
    }
}

impl Ctx<'_, '_> {
    /// Argument `i` as a signed integer (Redis's strict parsing).
    pub(crate) fn int(&self, i: usize) -> Result<i64, CmdError> {
        parse_i64(self.args[i]).ok_or(CmdError::NotInteger)
    }

    pub(crate) fn store(&self) -> &combkv::Store {
        self.session.store()
    }

    /// The keys reads see (see `node::keyspace`). A read that would wait
    /// for another node or the ranges' logs parks the connection instead
    /// (the command runs again once the answer lands), except inside EXEC,
    /// which runs whole.
    pub(crate) fn keyspace(&self) -> crate::node::keyspace::Keyspace<'_> {
        crate::node::keyspace::Keyspace::of(
            self.shared,
            self.session.store(),
            self.read_mark,
            self.read_parking(),
        )
    }

    /// Applies a decided write and renders its reply with `render`: now,
    /// or, on a cluster node, once the log gives its outcome (the reply
    /// is held; see `park`). Inside EXEC the write is recorded, or its
    /// result replayed (`multi`). An error is the command's error.
    pub(crate) fn write(
        &mut self,
        op: &Op<'_>,
        render: impl for<'x, 'y> FnOnce(&mut Ctx<'x, 'y>, Outcome) -> CmdResult + Send + 'static,
    ) -> CmdResult {
        let written = match self.txn {
            Some(step) => Written::Now(multi::apply(step, op)),
            None => crate::node::park::write(self.shared, self.session, self.parking, op),
        };
        match written {
            Written::Now(r) => render(self, r?),
            Written::Held => {
                self.held = Some(Box::new(render));
                Ok(())
            }
        }
    }

    /// Reads a key's live item, for a read command that a transaction may
    /// hold: inside EXEC the item as the transaction's earlier ops left it.
    pub(crate) fn get_with<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<combkv::ItemView<'_>>) -> T,
    ) -> combkv::Result<T> {
        match self.txn {
            Some(step) => multi::get_with(step, key, f),
            None => self.keyspace().get_with(key, f),
        }
    }

    /// Visits a range's live items (see `Store::scan`); inside EXEC the
    /// range as the transaction's earlier ops left it, `what` saying what
    /// the visitor needs and the read stopping once past `max_bytes` of
    /// keys and values. The number of items in the range (outside EXEC,
    /// of those visited).
    pub(crate) fn scan_with(
        &self,
        range: &combkv::Range,
        what: combkv::op::ScanWhat,
        max_bytes: u64,
        f: impl FnMut(combkv::ItemView<'_>) -> bool,
    ) -> combkv::Result<u64> {
        match self.txn {
            Some(step) => multi::scan_with(step, range, what, max_bytes, f),
            None => self.keyspace().scan(range, f).map(|n| n as u64),
        }
    }

    /// Refuses a write above `maxmemory`.
    pub(crate) fn check_memory(&self) -> CmdResult {
        if self.shared.over_maxmemory() {
            Stats::add(&self.shared.stats.writes_refused_oom, 1);
            return Err(CmdError::Oom);
        }
        Ok(())
    }
}

/// A request's arguments (the command name first), wherever they lie: a
/// slice of slices for a command's handler, or a request's entries in the
/// turn's frames for the batch path (sliced on demand, so a batch builds no
/// list of them).
pub(crate) trait ArgList<'a>: Copy {
    fn len(&self) -> usize;
    fn get(&self, i: usize) -> &'a [u8];
}

impl<'a> ArgList<'a> for &[&'a [u8]] {
    #[inline]
    fn len(&self) -> usize {
        <[&[u8]]>::len(self)
    }
    #[inline]
    fn get(&self, i: usize) -> &'a [u8] {
        self[i]
    }
}

/// A `HELP` subcommand's reply, Redis's shape (`addReplyHelp`): the lines
/// given, then the closing "HELP / Print this help." pair's second line
/// (Redis 7.2's words; 7.0 says "Prints").
pub(crate) fn help_reply(r: &mut Reply<'_>, lines: &[&str]) {
    r.array(lines.len() + 1);
    for line in lines {
        r.simple(line);
    }
    r.simple("    Print this help.");
}

/// The full name (`client|list`) at a documentation index CLIENT LIST
/// keeps for a connection's last command (`table::full_name_index`).
pub(crate) fn command_full_name(i: u32) -> Option<&'static str> {
    table::full_name(i)
}

/// Redis's error for a subcommand `cmd` does not have.
pub(crate) fn unknown_subcommand(sub: &[u8], cmd: &str) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand '{}'. Try {cmd} HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// Redis's integer syntax: optional '-', digits, no '+', no spaces, no
/// leading zeros, within i64 (the engine's, which INCR's stored values
/// follow too).
pub(crate) use combkv::op::parse_signed as parse_i64;

pub(crate) fn eq_ic(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// How a command ended, for its statistics (Redis's `calls`,
/// `rejected_calls`, `failed_calls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Dispatched {
    #[default]
    Ran,
    /// Refused before it ran: arity, authentication, permissions,
    /// loading, memory.
    Rejected,
    /// Ran and answered an error.
    Failed,
}

/// Runs one command (`spec`: its table entry, from `lookup`, looked up
/// once per request by the caller) and writes its reply.
pub(crate) fn dispatch(cx: &mut Ctx<'_, '_>, spec: Option<&'static Spec>) -> Dispatched {
    match run(cx, spec) {
        Ok(()) => Dispatched::Ran,
        // A read that parked the connection: no reply now, the command
        // runs again once its answer lands.
        Err((CmdError::Store(e), _)) if crate::node::park::is_parked(&e) => {
            cx.parked = true;
            Dispatched::Ran
        }
        Err((e, ran)) => {
            error_reply(cx, &e);
            if ran {
                Dispatched::Failed
            } else {
                Dispatched::Rejected
            }
        }
    }
}

/// Answers a command's error.
pub(crate) fn error_reply(cx: &mut Ctx<'_, '_>, e: &CmdError) {
    if matches!(e, CmdError::Closed) {
        cx.close = true;
        return;
    }
    Stats::add(&cx.shared.stats.errors_replied, 1);
    let line = e.line();
    cx.stats.resp.error(&line);
    cx.r.error(&line);
}

/// The checks run in Redis 7's order (`processCommand`): the command
/// exists, its arity, authentication, the user's permissions (ACL), that
/// it may run while the dataset loads, then `maxmemory` for writes. So an
/// unknown command before AUTH is "unknown command", not NOAUTH.
///
/// After MULTI a command that passes them is queued instead (`multi`), and
/// one that fails them fails the transaction.
/// Err: the error, and whether the command ran (false: refused by the
/// checks).
fn run(cx: &mut Ctx<'_, '_>, spec: Option<&'static Spec>) -> Result<(), (CmdError, bool)> {
    let checked = check(cx, spec);
    let ran = |r: CmdResult| r.map_err(|e| (e, true));
    let refused = |e: CmdError| Err((e, false));
    if cx.conn.multi.is_none() {
        return match checked {
            Ok(spec) => ran((spec.handler)(cx)),
            Err(e) => refused(e),
        };
    }
    match checked {
        Ok(spec) if spec.in_multi_now => {
            if spec.name == "exec" {
                table::acl::recheck_queued(cx);
            }
            ran((spec.handler)(cx))
        }
        Ok(spec) if spec.no_multi => {
            multi::fail(cx);
            refused(CmdError::err("Command not allowed inside a transaction"))
        }
        Ok(spec) => ran(multi::queue(cx, spec)),
        // EXEC itself refused (Redis's `execCommandAbort`): the
        // transaction ends with the reason.
        Err(e) if spec.is_some_and(|s| s.name == "exec") => {
            cx.conn.multi = None;
            cx.conn.watched = multi::Watches::default();
            refused(CmdError::Other(format!(
                "EXECABORT Transaction discarded because of: {}",
                e.line()
            )))
        }
        Err(e) => {
            multi::fail(cx);
            refused(e)
        }
    }
}

fn check(cx: &mut Ctx<'_, '_>, spec: Option<&'static Spec>) -> Result<&'static Spec, CmdError> {
    let Some(spec) = spec else {
        return Err(CmdError::Other(unknown_command(cx.args)));
    };
    if !spec.arity_ok(cx.args.len()) {
        return Err(CmdError::Arity(spec.name.to_string()));
    }
    if !cx.conn.authenticated && !spec.no_auth {
        return Err(CmdError::NoAuth);
    }
    table::acl::check(cx, spec)?;
    if cx.loading && !table::runs_while_loading(spec, cx.args) {
        return Err(CmdError::Loading);
    }
    if spec.denyoom {
        cx.check_memory()?;
    }
    Ok(spec)
}

/// Redis 7's text: `ERR unknown command 'x', with args beginning with: 'a' 'b' `.
fn unknown_command(args: &[&[u8]]) -> String {
    let mut shown = String::new();
    for a in &args[1..] {
        if shown.len() >= 128 {
            break;
        }
        let room = 128 - shown.len();
        let s = String::from_utf8_lossy(a);
        let s: String = s.chars().take(room).collect();
        shown.push_str(&format!("'{s}' "));
    }
    let name: String = String::from_utf8_lossy(args[0]).chars().take(128).collect();
    format!("ERR unknown command '{name}', with args beginning with: {shown}")
}

#[cfg(test)]
mod tests {
    use super::parse_i64;

    /// Redis's `string2ll` rules: optional '-', digits, no leading zeros,
    /// no "-0", no '+' or spaces, in range.
    #[test]
    fn parse_i64_follows_string2ll() {
        let good: [(&[u8], i64); 8] = [
            (b"0", 0),
            (b"7", 7),
            (b"-7", -7),
            (b"16", 16),
            (b"1000000", 1_000_000),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
            (b"-1", -1),
        ];
        for (s, n) in good {
            assert_eq!(parse_i64(s), Some(n), "{s:?}");
        }
        let bad: [&[u8]; 14] = [
            b"",
            b"-",
            b"-0",
            b"00",
            b"01",
            b"-01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1-",
        ];
        for s in bad {
            assert_eq!(parse_i64(s), None, "{s:?}");
        }
        for n in (-100_000i64..100_000).chain([i64::MAX - 1, i64::MIN + 1]) {
            assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }
    }
}
