//! Users' permissions on the memcached listener. memcached has no ACL of
//! its own: each request is checked as the RESP command that does the
//! same thing, against the same users (`docs/security.md` has the table):
//!
//! | memcached | checked as | key needs |
//! |---|---|---|
//! | get, gets, mg, binary get | `get` | read |
//! | gat, gats, mg with T, binary gat | `getex` | read and write |
//! | touch, binary touch | `expire` | write |
//! | set, add, replace, cas, ms, binary set/add/replace | `set` | write |
//! | append, prepend, binary append/prepend | `append` | write |
//! | delete, md, binary delete | `del` | write |
//! | incr, decr, ma, binary increment/decrement | `incrby` | read and write |
//! | flush_all, binary flush | `flushall` | - |
//! | stats, verbosity, me | `info` | - |
//! | lru_crawler metadump, stats cachedump | `keys` | - |
//! | shutdown | `shutdown` | - |
//!
//! `version`, `quit`, `mn` and the authentication itself need nothing.

use super::binary::BinCmd;
use super::parse::{GetKind, Request, keys};
use super::types::StoreCmd;
use crate::state::acl::{Acl, Denied, READ, User, WRITE};

/// A request as ACL sees it: the RESP command it is checked as, and its
/// keys with the permission (READ, WRITE) each needs.
pub(crate) type AsResp<'a> = (&'static str, Vec<(&'a [u8], u8)>);

/// How a request is checked; None: nothing to check.
pub(crate) fn as_resp<'a>(req: &'a Request<'a>) -> Option<AsResp<'a>> {
    let rw = READ | WRITE;
    let one = |name, key: &'a [u8], need| Some((name, vec![(key, need)]));
    match req {
        Request::Get { kind, keys: k, .. } => {
            let (name, need) = match kind {
                GetKind::Get | GetKind::Gets => ("get", READ),
                GetKind::Gat | GetKind::Gats => ("getex", rw),
            };
            Some((name, keys(k).map(|key| (key, need)).collect()))
        }
        Request::Store { cmd, key, .. } => one(store_name(*cmd), key, WRITE),
        Request::Delete { key, .. } => one("del", key, WRITE),
        Request::Arith { key, .. } => one("incrby", key, rw),
        Request::Touch { key, .. } => one("expire", key, WRITE),
        Request::FlushAll { .. } => Some(("flushall", Vec::new())),
        Request::Stats { .. } | Request::Verbosity { .. } | Request::MetaDebug { .. } => {
            Some(("info", Vec::new()))
        }
        Request::Shutdown { .. } => Some(("shutdown", Vec::new())),
        // It lists every key, as KEYS does.
        Request::MetaDump { .. } | Request::MetaDumpBadClass => Some(("keys", Vec::new())),
        Request::MetaGet { key, flags } => match flags.ttl {
            None => one("get", key.bytes(), READ),
            Some(_) => one("getex", key.bytes(), rw),
        },
        Request::MetaSet { key, .. } => one("set", key.bytes(), WRITE),
        Request::MetaDelete { key, .. } => one("del", key.bytes(), WRITE),
        Request::MetaArith { key, .. } => one("incrby", key.bytes(), rw),
        Request::Binary(b) => match &b.cmd {
            BinCmd::Get { key, .. } => one("get", key, READ),
            BinCmd::Touch { key, value, .. } => {
                if *value {
                    one("getex", key, rw)
                } else {
                    one("expire", key, WRITE)
                }
            }
            BinCmd::Store { cmd, key, .. } => one(store_name(*cmd), key, WRITE),
            BinCmd::Delete { key, .. } => one("del", key, WRITE),
            BinCmd::Arith { key, .. } => one("incrby", key, rw),
            BinCmd::Flush { .. } => Some(("flushall", Vec::new())),
            BinCmd::Stat { .. } | BinCmd::Verbosity => Some(("info", Vec::new())),
            _ => None,
        },
        _ => None,
    }
}

fn store_name(cmd: StoreCmd) -> &'static str {
    match cmd {
        StoreCmd::Append | StoreCmd::Prepend => "append",
        _ => "set",
    }
}

/// Whether `user` may run `req`; a denial is logged and counted as a
/// RESP one is.
pub(crate) fn permitted(
    acl: &Acl,
    user: &User,
    req: &Request<'_>,
    client_info: impl FnOnce() -> String,
) -> bool {
    if user.unrestricted() {
        return true;
    }
    let Some((name, keys)) = as_resp(req) else {
        return true;
    };
    let c = acl.catalog();
    let Some(id) = c.id(name) else {
        return true;
    };
    let mut denied = Denied::Command;
    let mut object = name.to_string();
    for s in user.all_selectors() {
        if !s.allows_command(id, None) {
            continue;
        }
        match keys.iter().find(|(k, need)| !s.allows_key(k, *need)) {
            None => return true,
            Some((k, _)) => {
                denied = Denied::Key;
                object = String::from_utf8_lossy(k).into_owned();
            }
        }
    }
    acl.deny(denied, false, &object, &user.name, client_info());
    false
}
