//! CLIENT: a connection's name and id, CLIENT LIST and INFO (Redis 7.0's
//! fields, in its order, from what each connection publishes: see
//! `state::clients`), CLIENT KILL in both forms, CLIENT PAUSE and UNPAUSE,
//! NO-EVICT and NO-TOUCH.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::{Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};
use crate::state::ClientEntry;
use crate::state::clients::{FLAG_BLOCKED, FLAG_NO_EVICT, FLAG_NO_TOUCH};

pub(super) fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

pub(super) fn name_error() -> CmdError {
    CmdError::err("Client names cannot contain spaces, newlines or special characters.")
}

pub(super) fn set_name(cx: &mut Ctx<'_, '_>, n: &[u8]) {
    let name = (!n.is_empty()).then(|| String::from_utf8_lossy(n).into_owned());
    cx.client.name.clone_from(&name);
    *cx.client.live.name.lock() = name;
}

/// CLIENT HELP: Redis 7.2's lines for the subcommands combkv has (KILL's
/// MAXAGE as Redis 7.4 words it).
const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "NO-TOUCH (ON|OFF)",
    "    Will not touch LRU/LFU stats when this mode is on.",
    "HELP",
];

pub(super) fn client(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    let arity = |n: usize, name: &str| -> CmdResult {
        if cx.args.len() != n {
            return Err(CmdError::Arity(format!("client|{name}")));
        }
        Ok(())
    };
    if eq_ic(sub, "id") {
        arity(2, "id")?;
        cx.r.int(cx.client.id as i64);
    } else if eq_ic(sub, "setname") {
        arity(3, "setname")?;
        let n = cx.args[2];
        if !valid_name(n) {
            return Err(name_error());
        }
        set_name(cx, n);
        cx.r.ok();
    } else if eq_ic(sub, "getname") {
        arity(2, "getname")?;
        match cx.client.name.clone() {
            Some(n) => cx.r.bulk_str(&n),
            None => cx.r.null(),
        }
    } else if eq_ic(sub, "list") {
        list(cx)?;
    } else if eq_ic(sub, "info") {
        arity(2, "info")?;
        let text = line(cx, &cx.client.live) + "\n";
        cx.r.verbatim(&text);
    } else if eq_ic(sub, "kill") {
        if cx.args.len() < 3 {
            return Err(CmdError::Arity("client|kill".into()));
        }
        kill(cx)?;
    } else if eq_ic(sub, "pause") {
        if cx.args.len() < 3 {
            return Err(CmdError::Arity("client|pause".into()));
        }
        pause(cx)?;
    } else if eq_ic(sub, "unpause") {
        arity(2, "unpause")?;
        cx.shared.pause.stop();
        // Held connections go on now, not at their loop's next timeout.
        for w in cx.shared.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
        cx.r.ok();
    } else if eq_ic(sub, "no-evict") || eq_ic(sub, "no-touch") {
        // Accepted and shown in `flags`: combkv evicts nothing, and keeps
        // no LRU/LFU statistics for a command to touch.
        let (name, flag) = if eq_ic(sub, "no-evict") {
            ("no-evict", FLAG_NO_EVICT)
        } else {
            ("no-touch", FLAG_NO_TOUCH)
        };
        arity(3, name)?;
        let on = on_off(cx.args[2])?;
        cx.client.live.set_flag(flag, on);
        cx.r.ok();
    } else if eq_ic(sub, "setinfo") {
        // Client libraries announce their name and version; accepted, not kept.
        arity(4, "setinfo")?;
        cx.r.ok();
    } else if eq_ic(sub, "help") {
        arity(2, "help")?;
        super::help_reply(&mut cx.r, CLIENT_HELP);
    } else {
        return Err(super::unknown_subcommand(sub, "CLIENT"));
    }
    Ok(())
}

fn on_off(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(arg, "on") {
        Ok(true)
    } else if eq_ic(arg, "off") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// Redis's client types (`getClientTypeByName`). Every combkv client is a
/// normal one: it has no replicas, masters or Pub/Sub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Normal,
    Other,
}

fn client_type(arg: &[u8]) -> Result<Type, CmdError> {
    if eq_ic(arg, "normal") {
        Ok(Type::Normal)
    } else if ["slave", "replica", "pubsub", "master"]
        .iter()
        .any(|t| eq_ic(arg, t))
    {
        Ok(Type::Other)
    } else {
        Err(CmdError::err(format!(
            "Unknown client type '{}'",
            String::from_utf8_lossy(arg)
        )))
    }
}

/// Every registered client, in id order (Redis's list is in connection
/// order).
fn all(cx: &Ctx<'_, '_>) -> Vec<Arc<ClientEntry>> {
    cx.shared.client_registry.lock().values().cloned().collect()
}

/// CLIENT LIST [TYPE type | ID id ...], Redis 7.0's checks in its order.
fn list(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let args = cx.args;
    let chosen: Vec<Arc<ClientEntry>> = if args.len() == 2 {
        all(cx)
    } else if args.len() == 4 && eq_ic(args[2], "type") {
        match client_type(args[3])? {
            Type::Normal => all(cx),
            Type::Other => Vec::new(),
        }
    } else if args.len() > 3 && eq_ic(args[2], "id") {
        let mut ids = Vec::with_capacity(args.len() - 3);
        for a in &args[3..] {
            ids.push(parse_i64(a).ok_or_else(|| CmdError::err("Invalid client ID"))?);
        }
        let registry = cx.shared.client_registry.lock();
        ids.iter()
            .filter_map(|&id| registry.get(&(id as u64)).cloned())
            .collect()
    } else {
        return Err(CmdError::Syntax);
    };
    let mut text = String::new();
    for c in &chosen {
        text.push_str(&line(cx, c));
        text.push('\n');
    }
    cx.r.verbatim(&text);
    Ok(())
}

/// Redis's fixed reply buffer per client (`PROTO_REPLY_CHUNK_BYTES`).
const REPLY_CHUNK: u64 = 16 * 1024;

/// One client's line, Redis 7.0's `catClientInfoString`. combkv has one
/// output buffer per connection where Redis has a 16 KiB buffer and then a
/// list of 16 KiB blocks: `rbs` is the buffer's size and `rbp` the most it
/// held unsent; the unsent bytes are shown as Redis would hold them: up
/// to 16 KiB in `obl`, the rest in `omem`, as `oll` blocks.
fn line(cx: &Ctx<'_, '_>, c: &ClientEntry) -> String {
    let me = c.id == cx.client.id;
    // The arguments of the command running (only the caller's is).
    let argv_mem: usize = if me {
        cx.args.iter().map(|a| a.len()).sum()
    } else {
        0
    };
    let multi = c.multi.load(Relaxed);
    let mut flags = String::new();
    if multi >= 0 {
        flags.push('x');
    }
    if c.has_flag(FLAG_BLOCKED) {
        flags.push('b');
    }
    if c.has_flag(FLAG_NO_EVICT) {
        flags.push('e');
    }
    if c.has_flag(FLAG_NO_TOUCH) {
        flags.push('T');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let ibuf = c.ibuf_cap.load(Relaxed);
    let obuf = c.obuf_cap.load(Relaxed);
    let multi_mem = c.multi_mem.load(Relaxed);
    let unsent = c.obuf_used.load(Relaxed);
    let obl = unsent.min(REPLY_CHUNK);
    let omem = unsent - obl;
    let oll = omem.div_ceil(REPLY_CHUNK);
    let tot_mem = ibuf + obuf + argv_mem as u64 + multi_mem + c.fixed_mem.load(Relaxed);
    let cmd = super::command_full_name(c.cmd.load(Relaxed)).unwrap_or("NULL");
    let resp = if me {
        if cx.conn.resp3 { 3 } else { 2 }
    } else {
        c.resp.load(Relaxed)
    };
    format!(
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db=0 sub=0 psub=0 \
         ssub=0 multi={multi} qbuf={} qbuf-free={} argv-mem={argv_mem} multi-mem={multi_mem} \
         rbs={obuf} rbp={} obl={obl} oll={oll} omem={omem} tot-mem={tot_mem} events={} cmd={cmd} \
         user={} redir=-1 resp={resp}",
        c.id,
        c.addr_text(),
        c.laddr_text(),
        c.fd,
        c.name.lock().as_deref().unwrap_or(""),
        c.connected_at.elapsed().as_secs(),
        c.idle().as_secs(),
        c.qbuf.load(Relaxed),
        c.qbuf_free.load(Relaxed),
        c.obuf_peak.load(Relaxed),
        if c.writable.load(Relaxed) { "rw" } else { "r" },
        c.user.lock(),
    )
}

/// What CLIENT KILL's new form filters on (Redis 7.0's, and 7.4's MAXAGE).
#[derive(Default)]
struct Filter {
    addr: Option<String>,
    laddr: Option<String>,
    id: Option<u64>,
    normal: Option<bool>,
    user: Option<String>,
    skipme: bool,
    max_age: Option<i64>,
}

impl Filter {
    fn parse(cx: &Ctx<'_, '_>) -> Result<Filter, CmdError> {
        let args = cx.args;
        if args.len() == 3 {
            // The old form, CLIENT KILL addr:port, may kill the caller.
            return Ok(Filter {
                addr: Some(String::from_utf8_lossy(args[2]).into_owned()),
                ..Filter::default()
            });
        }
        let mut f = Filter {
            skipme: true,
            ..Filter::default()
        };
        let mut i = 2;
        while i < args.len() {
            let (opt, Some(&val)) = (args[i], args.get(i + 1)) else {
                return Err(CmdError::Syntax);
            };
            let text = || String::from_utf8_lossy(val).into_owned();
            if eq_ic(opt, "id") {
                match parse_i64(val) {
                    Some(id) if id >= 1 => f.id = Some(id as u64),
                    _ => return Err(CmdError::err("client-id should be greater than 0")),
                }
            } else if eq_ic(opt, "type") {
                f.normal = Some(client_type(val)? == Type::Normal);
            } else if eq_ic(opt, "addr") {
                f.addr = Some(text());
            } else if eq_ic(opt, "laddr") {
                f.laddr = Some(text());
            } else if eq_ic(opt, "user") {
                if cx.shared.acl.user(&text()).is_none() {
                    return Err(CmdError::err(format!("No such user '{}'", text())));
                }
                f.user = Some(text());
            } else if eq_ic(opt, "skipme") {
                f.skipme = on_off_yes_no(val)?;
            } else if eq_ic(opt, "maxage") {
                let age = parse_i64(val)
                    .ok_or_else(|| CmdError::err("maxage is not an integer or out of range"))?;
                f.max_age = (age != 0).then_some(age);
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
        Ok(f)
    }

    fn matches(&self, c: &ClientEntry, me: u64) -> bool {
        let laddr = c.laddr_text();
        self.addr.as_ref().is_none_or(|a| *a == c.addr_text())
            && self.laddr.as_ref().is_none_or(|a| *a == laddr)
            && self.normal.is_none_or(|n| n)
            && self.id.is_none_or(|id| id == c.id)
            && self.user.as_ref().is_none_or(|u| *u == *c.user.lock())
            && !(self.skipme && c.id == me)
            // Only clients older than MAXAGE seconds (Redis 7.4).
            && self
                .max_age
                .is_none_or(|m| c.connected_at.elapsed().as_secs() as i64 > m)
    }
}

fn on_off_yes_no(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(arg, "yes") {
        Ok(true)
    } else if eq_ic(arg, "no") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// CLIENT KILL: the matching clients are taken out of the registry at once
/// and closed by their event loops; the caller, if it matches, after this
/// reply. The old form answers OK or "No such client", the new the number
/// killed.
fn kill(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let filter = Filter::parse(cx)?;
    let me = cx.client.id;
    let chosen: Vec<Arc<ClientEntry>> = {
        let mut registry = cx.shared.client_registry.lock();
        let ids: Vec<u64> = registry
            .values()
            .filter(|c| filter.matches(c, me))
            .map(|c| c.id)
            .collect();
        ids.iter()
            .filter_map(|id| {
                if *id == me {
                    registry.get(id).cloned()
                } else {
                    registry.remove(id)
                }
            })
            .collect()
    };
    let mut killed = 0;
    let mut close_me = false;
    for c in &chosen {
        if c.id == me {
            close_me = true;
            killed += 1;
        } else if c.kill() {
            killed += 1;
        }
    }
    if cx.args.len() == 3 {
        if killed == 0 {
            return Err(CmdError::err("No such client"));
        }
        cx.r.ok();
    } else {
        cx.r.int(killed);
    }
    if close_me {
        cx.close = true;
    }
    Ok(())
}

/// CLIENT PAUSE timeout [WRITE|ALL]: Redis 7.0's checks in its order.
fn pause(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let args = cx.args;
    if args.len() > 4 {
        return Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(args[1])
        )));
    }
    let all = match args.get(3) {
        None => true,
        Some(m) if eq_ic(m, "write") => false,
        Some(m) if eq_ic(m, "all") => true,
        Some(_) => return Err(CmdError::err("CLIENT PAUSE mode must be WRITE or ALL")),
    };
    let ms = parse_i64(args[2])
        .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    cx.shared.pause.start(ms as u64, all);
    cx.r.ok();
    Ok(())
}
