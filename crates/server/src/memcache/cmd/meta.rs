//! memcached's meta commands: mg (with T; plain mg is in the read batch),
//! ms, md, ma, me. Return flags follow the order the client gave them.
//! Each write decides an [`Op`], the session applies it, and the reply
//! comes from its [`Outcome`].

use std::io::Write as _;

use combkv::op::{Arith, Cond, Number, OnMissing, Op, Outcome, Status};
use combkv::{Expiry, Flags, Version};

use super::text::touch_op;
use super::{Found, error_line, expiry, line, store_over_maxmemory, ttl_secs};
use crate::memcache::error::McError;
use crate::memcache::parse::{HeldMeta, Key, MetaFlags, encode_base64};
use crate::node::park::Written;
use crate::state::Stats;
use crate::turn::Cx;

/// ` k<key>`, base64 and followed by ` b` for a binary key.
fn key_flag(out: &mut Vec<u8>, key: &Key<'_>) {
    out.extend_from_slice(b" k");
    if key.is_binary() {
        encode_base64(key.bytes(), out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key.bytes());
    }
}

/// The opaque token echoed as sent.
fn opaque_flag(out: &mut Vec<u8>, token: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(token);
}

/// A status code with the `O` and `k` flags (misses, failures).
pub(super) fn write_miss(out: &mut Vec<u8>, code: &[u8], key: &Key<'_>, flags: &MetaFlags<'_>) {
    if flags.quiet && code == b"EN" {
        return;
    }
    out.extend_from_slice(code);
    for t in flags.iter() {
        match t[0] {
            b'O' => opaque_flag(out, t),
            b'k' => key_flag(out, key),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `VA <size> <flags>*` and the value, or `HD <flags>*`.
pub(super) fn write_get_hit(
    out: &mut Vec<u8>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    f: &Found<'_>,
    now_ms: u64,
) {
    if flags.value {
        let _ = write!(out, "VA {}", f.value.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    for t in flags.iter() {
        // Writes into a Vec cannot fail.
        let _ = match t[0] {
            b's' => write!(out, " s{}", f.value.len()),
            b't' => write!(out, " t{}", ttl_secs(f.expires_at_ms, now_ms)),
            b'c' => write!(out, " c{}", f.version),
            b'f' => write!(out, " f{}", f.flags),
            // combkv keeps no access history: never fetched, just accessed.
            b'l' => write!(out, " l0"),
            b'h' => write!(out, " h0"),
            b'O' => {
                opaque_flag(out, t);
                Ok(())
            }
            b'k' => {
                key_flag(out, key);
                Ok(())
            }
            _ => Ok(()),
        };
    }
    out.extend_from_slice(b"\r\n");
    if flags.value {
        out.extend_from_slice(f.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// mg with `T`: touch and return (a write, so not in the read batch).
pub(super) fn get_touch(cx: &mut Cx<'_>, key: &Key<'_>, flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    Stats::add(&mc.cmd_meta, 1);
    Stats::add(&mc.cmd_touch, 1);
    let now = combkv::now_ms();
    let op = touch_op(key.bytes(), expiry(flags.ttl.unwrap_or(0), now), true);
    write(cx, &op, key, flags, out, move |cx, key, flags, r, out| {
        got_touched(cx, key, flags, r, now, out);
    });
}

/// Applies a meta command's write and renders its reply with `render`,
/// from the request's key and flags: now, or, on a cluster node, once the
/// outcome lands, from a copy of them ([`HeldMeta`]) made only then.
fn write(
    cx: &mut Cx<'_>,
    op: &Op<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    out: &mut Vec<u8>,
    render: impl Fn(&mut Cx<'_>, &Key<'_>, &MetaFlags<'_>, combkv::Result<Outcome>, &mut Vec<u8>)
    + Send
    + 'static,
) {
    match cx.write_op(op) {
        Written::Now(r) => render(cx, key, flags, r, out),
        Written::Held => {
            let held = HeldMeta::new(key, flags);
            cx.write_held(move |cx, r, out| render(cx, &held.key(), &held.flags(), r, out));
        }
    }
}

/// mg T's reply, from its write's outcome.
fn got_touched(
    cx: &mut Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    r: combkv::Result<Outcome>,
    now: u64,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    match r {
        Err(e) => error_line(cx, out, &McError::from(e)),
        Ok(Outcome::Expire {
            status: Status::Done,
            item: Some(it),
            ..
        }) => {
            Stats::add(&mc.touch_hits, 1);
            write_get_hit(out, key, flags, &Found::from(&it), now);
        }
        Ok(_) => {
            Stats::add(&mc.touch_misses, 1);
            write_miss(out, b"EN", key, flags);
        }
    }
}

/// The status code of a meta write that did not happen: `EX` for a CAS
/// mismatch, `NF` for a key that had to be present (`nf`), `NS` otherwise.
fn miss_code(status: Status, nf: bool) -> &'static [u8] {
    match status {
        Status::Mismatch => b"EX",
        Status::Missing if nf => b"NF",
        _ => b"NS",
    }
}

/// `C`: the write holds only for an item of this version.
fn cas_cond(flags: &MetaFlags<'_>) -> Option<Cond> {
    flags.compare_cas.map(|c| Cond::Version(Version(c)))
}

/// ms: mode S (set, default), E (add), A (append), P (prepend), R
/// (replace); `C` turns set and replace into cas; `N` creates on an
/// append/prepend miss.
pub(super) fn set(
    cx: &mut Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    Stats::add(&mc.cmd_meta, 1);
    if store_over_maxmemory(cx) {
        return error_line(cx, out, &McError::OutOfMemoryStoring);
    }
    let now = combkv::now_ms();
    let mode = flags.mode.unwrap_or(b'S').to_ascii_uppercase();
    let put = |cond| Op::Put {
        key: key.bytes(),
        value: data,
        expiry: expiry(flags.ttl.unwrap_or(0), now),
        flags: Flags::Set(flags.client_flags.unwrap_or(0)),
        cond,
        return_old: false,
    };
    let op = match mode {
        b'S' => put(cas_cond(flags).unwrap_or(Cond::Any)),
        b'R' => put(cas_cond(flags).unwrap_or(Cond::Present)),
        b'E' => put(Cond::Absent),
        // An absent key is created with `N` whatever `C` says: the op's
        // condition only applies to a present item.
        _ => Op::Append {
            key: key.bytes(),
            value: data,
            front: mode == b'P',
            on_missing: match flags.vivify {
                Some(ttl) => OnMissing::Create {
                    value: data,
                    expiry: expiry(ttl, now),
                    flags: flags.client_flags.unwrap_or(0),
                },
                None => OnMissing::Fail,
            },
            cond: cas_cond(flags).unwrap_or(Cond::Any),
        },
    };
    // A set or replace with `C` wants its item present: `NF` when absent.
    let nf = matches!(mode, b'S' | b'R') && flags.compare_cas.is_some();
    write(cx, &op, key, flags, out, move |cx, key, flags, r, out| {
        set_done(cx, key, flags, r, nf, out);
    });
}

/// ms's reply, or its error, from its write's outcome.
fn set_done(
    cx: &mut Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    r: combkv::Result<Outcome>,
    nf: bool,
    out: &mut Vec<u8>,
) {
    let outcome = match r {
        Err(e) => {
            let e = McError::from(e);
            if e == McError::TooLarge {
                // An append or prepend past max-value-bytes.
                Stats::add(&cx.shared.memcache.stats.store_too_large, 1);
            }
            return error_line(cx, out, &e);
        }
        Ok(o) => o,
    };
    set_reply(cx, key, flags, outcome.status(), outcome.version(), nf, out);
}

/// ms's reply: `HD` (hidden by `q`), or why not, with the return flags.
fn set_reply(
    cx: &Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    status: Status,
    version: Option<Version>,
    nf: bool,
    out: &mut Vec<u8>,
) {
    let code: &[u8] = if status == Status::Done {
        Stats::add(&cx.shared.memcache.stats.total_items, 1);
        if flags.quiet {
            return;
        }
        b"HD"
    } else {
        miss_code(status, nf)
    };
    out.extend_from_slice(code);
    for t in flags.iter() {
        match t[0] {
            b'O' => opaque_flag(out, t),
            b'k' => key_flag(out, key),
            b'c' => {
                let _ = write!(out, " c{}", version.map_or(0, |v| v.get()));
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// md: delete, only if the CAS unique matches when `C` is given.
pub(super) fn delete(cx: &mut Cx<'_>, key: &Key<'_>, flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    Stats::add(&mc.cmd_meta, 1);
    let op = Op::Delete {
        key: key.bytes(),
        cond: cas_cond(flags).unwrap_or(Cond::Any),
        return_old: false,
    };
    write(cx, &op, key, flags, out, deleted);
}

/// md's reply, from its write's outcome.
fn deleted(
    cx: &mut Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    r: combkv::Result<Outcome>,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let status = match r {
        Err(e) => return error_line(cx, out, &McError::from(e)),
        Ok(o) => o.status(),
    };
    if status == Status::Done {
        Stats::add(&mc.delete_hits, 1);
        if flags.quiet {
            return;
        }
        return write_miss(out, b"HD", key, flags);
    }
    Stats::add(&mc.delete_misses, 1);
    write_miss(out, miss_code(status, true), key, flags);
}

/// ma: incr (default) or decr by `D` (default 1); `N` creates a missing
/// item with `J` (default 0); `T` sets the TTL of an updated item.
pub(super) fn arith(cx: &mut Cx<'_>, key: &Key<'_>, flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    let shared = cx.shared;
    let mc = &shared.memcache.stats;
    Stats::add(&mc.cmd_meta, 1);
    if shared.over_maxmemory() {
        Stats::add(&shared.stats.writes_refused_oom, 1);
        return error_line(cx, out, &McError::OutOfMemory);
    }
    let incr = !matches!(flags.mode, Some(b'D' | b'd' | b'-'));
    let now = combkv::now_ms();
    let mut initial = itoa::Buffer::new();
    let op = Op::Incr {
        key: key.bytes(),
        arith: Arith::Unsigned {
            delta: flags.delta.unwrap_or(1),
            decrement: !incr,
        },
        on_missing: match flags.vivify {
            Some(ttl) => OnMissing::Create {
                value: initial.format(flags.initial.unwrap_or(0)).as_bytes(),
                expiry: expiry(ttl, now),
                flags: 0,
            },
            None => OnMissing::Fail,
        },
        cond: cas_cond(flags).unwrap_or(Cond::Any),
        expiry: flags.ttl.map_or(Expiry::Keep, |t| expiry(t, now)),
    };
    write(cx, &op, key, flags, out, move |cx, key, flags, r, out| {
        arith_done(cx, key, flags, incr, r, now, out);
    });
}

/// What ma did.
struct ArithDone {
    status: Status,
    version: Option<Version>,
    /// The number stored afterwards.
    n: u64,
    created: bool,
    /// The item's expiry afterwards.
    expires_at_ms: Option<u64>,
}

/// ma's reply, or its error, from its write's outcome.
fn arith_done(
    cx: &mut Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    incr: bool,
    r: combkv::Result<Outcome>,
    now: u64,
    out: &mut Vec<u8>,
) {
    let done = match r {
        Err(e) => return error_line(cx, out, &McError::from(e)),
        Ok(Outcome::Incr {
            status,
            version,
            number: Number::Unsigned(n),
            created,
            expires_at_ms,
        }) => ArithDone {
            status,
            version,
            n,
            created,
            expires_at_ms,
        },
        Ok(other) => unreachable!("an unsigned increment's outcome: {other:?}"),
    };
    arith_reply(cx, key, flags, incr, &done, now, out);
}

fn arith_reply(
    cx: &Cx<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    incr: bool,
    done: &ArithDone,
    now: u64,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let (hits, misses) = if incr {
        (&mc.incr_hits, &mc.incr_misses)
    } else {
        (&mc.decr_hits, &mc.decr_misses)
    };
    if done.status != Status::Done {
        Stats::add(misses, 1);
        let code: &[u8] = if done.status == Status::Mismatch {
            b"EX"
        } else {
            b"NF"
        };
        return write_miss(out, code, key, flags);
    }
    Stats::add(hits, 1);
    // memcached's quiet mode hides a plain success, not a creation.
    if flags.quiet && !done.created {
        return;
    }
    let number = done.n.to_string();
    if flags.value {
        let _ = write!(out, "VA {}", number.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    for t in flags.iter() {
        let _ = match t[0] {
            b'c' => write!(out, " c{}", done.version.map_or(0, |v| v.get())),
            b't' => write!(out, " t{}", ttl_secs(done.expires_at_ms, now)),
            b'O' => {
                opaque_flag(out, t);
                Ok(())
            }
            b'k' => {
                key_flag(out, key);
                Ok(())
            }
            _ => Ok(()),
        };
    }
    out.extend_from_slice(b"\r\n");
    if flags.value {
        out.extend_from_slice(number.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// me: what combkv knows of an item, in memcached's `key=value` form.
/// combkv keeps no access history or slab classes: `la` is 0, `fetch` is
/// `no`, `cls` is 1, `size` is key plus value bytes.
pub(super) fn debug(cx: &mut Cx<'_>, key: &Key<'_>, out: &mut Vec<u8>) {
    let now = combkv::now_ms();
    let r = cx.keyspace().get_with(key.bytes(), |it| {
        it.map(|it| {
            let mut l = b"ME ".to_vec();
            if key.is_binary() {
                encode_base64(key.bytes(), &mut l);
            } else {
                l.extend_from_slice(key.bytes());
            }
            let _ = write!(
                l,
                " exp={} la=0 cas={} fetch=no cls=1 size={}",
                ttl_secs(it.expires_at_ms, now),
                it.version,
                it.key.len() + it.value.len()
            );
            l
        })
    });
    if r.as_ref().is_err_and(crate::node::park::is_parked) {
        // Its key's range is read at another node: it runs again, and
        // answers (and is counted) then.
        return;
    }
    Stats::add(&cx.shared.memcache.stats.cmd_meta, 1);
    match r {
        Err(e) => error_line(cx, out, &McError::from(e)),
        Ok(None) => line(out, "EN"),
        Ok(Some(l)) => {
            out.extend_from_slice(&l);
            out.extend_from_slice(b"\r\n");
        }
    }
}
