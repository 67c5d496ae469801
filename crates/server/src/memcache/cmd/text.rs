//! memcached's classic text commands (the ones not in the read batch).

use combkv::{Expiry, Flags, Write};

use super::{Found, error_line, expiry, expiry_ms, line, stored_number, touch_item, write_value};
use crate::memcache::error::McError;
use crate::memcache::parse::{self, GetKind, RELATIVE_EXPTIME_MAX, StoreCmd};
use crate::pipeline::Cx;
use crate::shared::Stats;

/// What a storage command did.
enum Effect {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
}

fn reply(cx: &Cx<'_>, out: &mut Vec<u8>, noreply: bool, r: Result<&str, McError>) {
    if noreply {
        return;
    }
    match r {
        Ok(s) => line(out, s),
        Err(e) => error_line(cx, out, &e),
    }
}

/// `a` then `b`, unless longer than `max`.
fn concat(a: &[u8], b: &[u8], max: usize) -> Option<Vec<u8>> {
    let len = a.len() + b.len();
    if len > max {
        return None;
    }
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    Some(v)
}

/// set, add, replace, append, prepend, cas: one atomic decide-and-write.
#[expect(clippy::too_many_arguments, reason = "the fields of one request")]
pub(super) fn store(
    cx: &mut Cx<'_>,
    cmd: StoreCmd,
    key: &[u8],
    flags: u32,
    exptime: i64,
    cas: u64,
    data: &[u8],
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let shared = cx.shared;
    let mc = &shared.memcache.stats;
    Stats::add(&mc.cmd_set, 1);
    if shared.over_maxmemory() {
        Stats::add(&mc.store_no_memory, 1);
        Stats::add(&shared.stats.writes_refused_oom, 1);
        return reply(cx, out, noreply, Err(McError::OutOfMemoryStoring));
    }
    let max = shared.store.max_value_len();
    let exp = expiry(exptime, combkv::now_ms());
    let put = |value: Vec<u8>| Write::Put {
        value,
        expiry: exp,
        flags: Flags::Set(flags),
    };
    // append/prepend keep the item's flags and expiry (memcached ignores
    // theirs).
    let grow = |value: Vec<u8>| Write::Put {
        value,
        expiry: Expiry::Keep,
        flags: Flags::Keep,
    };
    let r = cx.session.write_with(key, |cur| match (cmd, cur) {
        (StoreCmd::Set, _) | (StoreCmd::Add, None) => (put(data.to_vec()), Effect::Stored),
        (StoreCmd::Replace, Some(_)) => (put(data.to_vec()), Effect::Stored),
        (StoreCmd::Add, Some(_))
        | (StoreCmd::Replace | StoreCmd::Append | StoreCmd::Prepend, None) => {
            (Write::Keep, Effect::NotStored)
        }
        (StoreCmd::Append, Some(it)) => match concat(it.value, data, max) {
            Some(v) => (grow(v), Effect::Stored),
            None => (Write::Keep, Effect::TooLarge),
        },
        (StoreCmd::Prepend, Some(it)) => match concat(data, it.value, max) {
            Some(v) => (grow(v), Effect::Stored),
            None => (Write::Keep, Effect::TooLarge),
        },
        (StoreCmd::Cas, None) => (Write::Keep, Effect::NotFound),
        (StoreCmd::Cas, Some(it)) if it.version.get() != cas => (Write::Keep, Effect::Exists),
        (StoreCmd::Cas, Some(_)) => (put(data.to_vec()), Effect::Stored),
    });
    let r = match r {
        Err(e) => Err(McError::from(e)),
        Ok((s, _)) => {
            if cmd == StoreCmd::Cas {
                let c = match s {
                    Effect::Stored => &mc.cas_hits,
                    Effect::Exists => &mc.cas_badval,
                    _ => &mc.cas_misses,
                };
                Stats::add(c, 1);
            }
            match s {
                Effect::Stored => {
                    Stats::add(&mc.total_items, 1);
                    Ok("STORED")
                }
                Effect::NotStored => Ok("NOT_STORED"),
                Effect::Exists => Ok("EXISTS"),
                Effect::NotFound => Ok("NOT_FOUND"),
                Effect::TooLarge => Err(McError::TooLarge),
            }
        }
    };
    if matches!(r, Err(McError::TooLarge)) {
        Stats::add(&mc.store_too_large, 1);
    }
    reply(cx, out, noreply, r);
}

pub(super) fn delete(cx: &mut Cx<'_>, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    let r = match cx.session.delete(key) {
        Ok(Some(_)) => {
            Stats::add(&mc.delete_hits, 1);
            Ok("DELETED")
        }
        Ok(None) => {
            Stats::add(&mc.delete_misses, 1);
            Ok("NOT_FOUND")
        }
        Err(e) => Err(McError::from(e)),
    };
    reply(cx, out, noreply, r);
}

/// What incr/decr found.
pub(super) enum Arith {
    NotFound,
    NonNumeric,
    Value(u64),
}

pub(super) fn arith(
    cx: &mut Cx<'_>,
    incr: bool,
    key: &[u8],
    delta: u64,
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let shared = cx.shared;
    if shared.over_maxmemory() {
        Stats::add(&shared.stats.writes_refused_oom, 1);
        return reply(cx, out, noreply, Err(McError::OutOfMemory));
    }
    let r = cx.session.write_with(key, |cur| match cur {
        None => (Write::Keep, Arith::NotFound),
        Some(it) => match stored_number(it.value) {
            None => (Write::Keep, Arith::NonNumeric),
            Some(old) => {
                let n = super::apply_delta(old, incr, delta);
                let w = Write::Put {
                    value: n.to_string().into_bytes(),
                    expiry: Expiry::Keep,
                    flags: Flags::Keep,
                };
                (w, Arith::Value(n))
            }
        },
    });
    let mc = &shared.memcache.stats;
    let (hits, misses) = if incr {
        (&mc.incr_hits, &mc.incr_misses)
    } else {
        (&mc.decr_hits, &mc.decr_misses)
    };
    let text;
    let r = match r {
        Err(e) => Err(McError::from(e)),
        Ok((Arith::NotFound, _)) => {
            Stats::add(misses, 1);
            Ok("NOT_FOUND")
        }
        Ok((Arith::NonNumeric, _)) => Err(McError::NonNumeric),
        Ok((Arith::Value(n), _)) => {
            Stats::add(hits, 1);
            text = n.to_string();
            Ok(text.as_str())
        }
    };
    reply(cx, out, noreply, r);
}

pub(super) fn touch(cx: &mut Cx<'_>, key: &[u8], exptime: i64, noreply: bool, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    Stats::add(&mc.cmd_touch, 1);
    let exp = expiry(exptime, combkv::now_ms());
    let r = match touch_item(cx, key, exp, |_, _| ()) {
        Err(e) => Err(e),
        Ok(Some(_)) => {
            Stats::add(&mc.touch_hits, 1);
            Ok("TOUCHED")
        }
        Ok(None) => {
            Stats::add(&mc.touch_misses, 1);
            Ok("NOT_FOUND")
        }
    };
    reply(cx, out, noreply, r);
}

/// gat and gats: touch each key, then return it as get/gets would.
pub(super) fn get_and_touch(
    cx: &mut Cx<'_>,
    kind: GetKind,
    exptime: i64,
    keys: &[u8],
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let now = combkv::now_ms();
    let exp = expiry(exptime, now);
    let mark = out.len();
    for key in parse::keys(keys) {
        Stats::add(&mc.cmd_touch, 1);
        match touch_item(cx, key, exp, |v, f| (v.to_vec(), f)) {
            Err(e) => {
                // memcached answers a failed multi-key request by the error alone.
                out.truncate(mark);
                return error_line(cx, out, &e);
            }
            Ok(None) => Stats::add(&mc.touch_misses, 1),
            Ok(Some(((value, flags), version))) => {
                Stats::add(&mc.touch_hits, 1);
                let f = Found {
                    value: &value,
                    version,
                    flags,
                    expires_at_ms: expiry_ms(exptime, now),
                };
                write_value(out, key, &f, kind.with_cas());
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// flush_all [delay]: everything now, or everything written before the
/// delay ends (a later flush_all replaces a pending one).
pub(super) fn flush_all(cx: &mut Cx<'_>, delay: i64, noreply: bool, out: &mut Vec<u8>) {
    let shared = cx.shared;
    Stats::add(&shared.memcache.stats.cmd_flush, 1);
    let now = combkv::now_ms();
    let at = if delay > RELATIVE_EXPTIME_MAX {
        (delay as u64 * 1000).max(now)
    } else {
        now + delay.max(0) as u64 * 1000
    };
    let r = if at > now {
        shared.memcache.flush.schedule(&shared.store, at);
        Ok("OK")
    } else {
        shared.memcache.flush.cancel();
        match cx.session.clear() {
            Ok(()) => Ok("OK"),
            Err(e) => Err(McError::from(e)),
        }
    };
    reply(cx, out, noreply, r);
}

pub(super) fn stats(cx: &mut Cx<'_>, args: &[u8], out: &mut Vec<u8>) {
    let mut words = parse::words(args);
    match words.next() {
        None => crate::memcache::stats::write_stats(cx.shared, out),
        Some(b"reset") => {
            cx.shared.memcache.stats.reset();
            line(out, "RESET");
        }
        Some(_) => error_line(cx, out, &McError::UnknownCommand),
    }
}
