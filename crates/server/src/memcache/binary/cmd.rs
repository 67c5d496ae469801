//! The binary protocol's commands: each write decides the same [`Op`] its
//! text command does (with the request's CAS as the condition), and the
//! reply is a response packet built from the [`Outcome`]. Quiet commands
//! answer only failures (quiet gets: nothing on a miss either).

use combkv::Version;
use combkv::op::{Arith, Cond, Number, OnMissing, Op, Outcome, Status as OpStatus};

use super::{BinCmd, BinRequest, Head, Status, error, packet};
use crate::memcache::cmd::text::{cas_cond, count_store, flush, store_op, touch_op};
use crate::memcache::cmd::{Found, expiry, store_over_maxmemory};
use crate::memcache::error::{McError, store_error_text};
use crate::memcache::parse::StoreCmd;
use crate::memcache::stats::{VERSION, stat_lines};
use crate::node::park::Written;
use crate::state::Stats;
use crate::turn::Cx;

/// The SASL mechanism served: `\0user\0password` checked against
/// `requirepass` (user `default`), as the text protocol's `set` is.
pub const SASL_MECHS: &str = "PLAIN";

/// The status a refusal is answered with.
pub fn status_of(err: &McError) -> Status {
    match err {
        McError::TooLarge => Status::TooLarge,
        McError::NonNumeric => Status::NonNumeric,
        McError::OutOfMemory | McError::OutOfMemoryStoring => Status::OutOfMemory,
        McError::UnknownCommand => Status::UnknownCommand,
        McError::Unauthenticated | McError::AuthFailure | McError::NoPermission => {
            Status::AuthError
        }
        McError::Store(combkv::Error::Unavailable(_) | combkv::Error::Uncertain(_))
        | McError::Loading => Status::TemporaryFailure,
        McError::Store(_) => Status::Internal,
        _ => Status::InvalidArguments,
    }
}

/// Answers a refusal; an engine refusal carries its own text, the others
/// memcached's message for the status.
pub fn refuse(cx: &Cx<'_>, out: &mut Vec<u8>, head: Head, err: &McError) {
    Stats::add(&cx.shared.stats.errors_replied, 1);
    match err {
        McError::Store(e) => {
            let text = store_error_text(e);
            packet(out, head, status_of(err), 0, &[], &[], text.as_bytes());
        }
        _ => error(out, head, status_of(err)),
    }
}

/// A hit: flags as extras, the key for the `k` variants, the value unless
/// `value` is false (touch).
fn write_item(out: &mut Vec<u8>, head: Head, f: &Found<'_>, key: Option<&[u8]>, value: bool) {
    let flags = f.flags.to_be_bytes();
    let key = key.unwrap_or_default();
    let value = if value { f.value } else { &[] };
    packet(out, head, Status::Success, f.version, &flags, key, value);
}

/// A get's miss: nothing for the quiet ones, the key for getk.
fn write_miss(out: &mut Vec<u8>, head: Head, quiet: bool, key: &[u8], with_key: bool) {
    if quiet {
        return;
    }
    if with_key {
        packet(out, head, Status::KeyNotFound, 0, &[], key, &[]);
    } else {
        error(out, head, Status::KeyNotFound);
    }
}

/// The reply of a batched get (get, getq, getk, getkq).
pub(crate) fn reply_get(out: &mut Vec<u8>, req: &BinRequest<'_>, found: Option<&Found<'_>>) {
    let BinCmd::Get { key, with_key } = req.cmd else {
        unreachable!("only binary gets are batched");
    };
    match found {
        Some(f) => write_item(out, req.head, f, with_key.then_some(key), true),
        None => write_miss(out, req.head, req.quiet, key, with_key),
    }
}

/// Executes a binary request that is not part of a read batch. Returns
/// true when the connection is to close (quit).
pub(crate) fn execute(cx: &mut Cx<'_>, req: &BinRequest<'_>, out: &mut Vec<u8>) -> bool {
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!(client = cx.client.id, "memcached binary request: {req:?}");
    }
    let ok = |out: &mut Vec<u8>, cas: u64, value: &[u8]| {
        if !req.quiet {
            packet(out, req.head, Status::Success, cas, &[], &[], value);
        }
    };
    match req.cmd {
        BinCmd::Get { .. } => unreachable!("binary gets are batched"),
        BinCmd::Store {
            cmd,
            key,
            flags,
            exptime,
            cas,
            data,
        } => store(cx, req, cmd, key, flags, exptime, cas, data, out),
        BinCmd::Delete { key, cas } => delete(cx, req, key, cas, out),
        BinCmd::Arith {
            incr,
            key,
            delta,
            initial,
            exptime,
            cas,
        } => arith(cx, req, incr, key, delta, initial, exptime, cas, out),
        BinCmd::Touch {
            key,
            exptime,
            value,
            with_key,
        } => touch(cx, req, key, exptime, value, with_key, out),
        BinCmd::Flush { delay } => {
            let (head, quiet) = (req.head, req.quiet);
            flush(cx, delay, out, move |cx, r, out| match r {
                Ok(()) if quiet => {}
                Ok(()) => packet(out, head, Status::Success, 0, &[], &[], &[]),
                Err(e) => refuse(cx, out, head, &e),
            });
        }
        BinCmd::Stat { group } => stat(cx, req.head, group, out),
        BinCmd::Noop | BinCmd::Verbosity => ok(out, 0, &[]),
        BinCmd::Version => ok(out, 0, VERSION.as_bytes()),
        BinCmd::Quit => {
            ok(out, 0, &[]);
            return true;
        }
        BinCmd::SaslListMechs | BinCmd::SaslAuth { .. } | BinCmd::SaslStep => {
            unreachable!("the protocol answers authentication")
        }
    }
    false
}

/// set, add, replace, append, prepend (and quiet): one op; memcached's
/// statuses (add of a present key and a failed CAS: exists; replace or a
/// CAS of an absent key: not found; append to an absent key: not stored).
/// A CAS makes any of them a compare-and-swap, add included, as in
/// memcached.
#[expect(clippy::too_many_arguments, reason = "the fields of one request")]
fn store(
    cx: &mut Cx<'_>,
    req: &BinRequest<'_>,
    cmd: StoreCmd,
    key: &[u8],
    flags: u32,
    exptime: i64,
    cas: u64,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    if store_over_maxmemory(cx) {
        return refuse(cx, out, req.head, &McError::OutOfMemoryStoring);
    }
    let op = store_op(
        cmd,
        key,
        data,
        flags,
        expiry(exptime, combkv::now_ms()),
        cas,
    );
    let (head, quiet) = (req.head, req.quiet);
    cx.write(&op, out, move |cx, r, out| {
        stored(cx, head, quiet, cmd, cas, r, out);
    });
}

/// A store's reply, from its write's outcome.
fn stored(
    cx: &mut Cx<'_>,
    head: Head,
    quiet: bool,
    cmd: StoreCmd,
    cas: u64,
    r: combkv::Result<Outcome>,
    out: &mut Vec<u8>,
) {
    let outcome = match count_store(cx, cas != 0, r) {
        Ok(o) => o,
        Err(e) => return refuse(cx, out, head, &e),
    };
    match outcome.status() {
        OpStatus::Done => {
            if !quiet {
                let version = outcome.version().map_or(0, Version::get);
                packet(out, head, Status::Success, version, &[], &[], &[]);
            }
        }
        OpStatus::Present | OpStatus::Mismatch => error(out, head, Status::KeyExists),
        OpStatus::Missing => {
            let status = match cmd {
                StoreCmd::Append | StoreCmd::Prepend => Status::NotStored,
                _ => Status::KeyNotFound,
            };
            error(out, head, status);
        }
    }
}

fn delete(cx: &mut Cx<'_>, req: &BinRequest<'_>, key: &[u8], cas: u64, out: &mut Vec<u8>) {
    let op = Op::Delete {
        key,
        cond: cas_cond(cas, Cond::Any),
        return_old: false,
    };
    let (head, quiet) = (req.head, req.quiet);
    cx.write(&op, out, move |cx, r, out| {
        let mc = &cx.shared.memcache.stats;
        match r.map(|o| o.status()) {
            Ok(OpStatus::Done) => {
                Stats::add(&mc.delete_hits, 1);
                if !quiet {
                    packet(out, head, Status::Success, 0, &[], &[], &[]);
                }
            }
            Ok(OpStatus::Mismatch) => error(out, head, Status::KeyExists),
            Ok(_) => {
                Stats::add(&mc.delete_misses, 1);
                error(out, head, Status::KeyNotFound);
            }
            Err(e) => refuse(cx, out, head, &McError::from(e)),
        }
    });
}

/// increment and decrement: memcached's numbers (wrap at 2^64 up, stop at
/// 0 down); a miss stores `initial` with the request's expiry unless it
/// said not to create.
#[expect(clippy::too_many_arguments, reason = "the fields of one request")]
fn arith(
    cx: &mut Cx<'_>,
    req: &BinRequest<'_>,
    incr: bool,
    key: &[u8],
    delta: u64,
    initial: u64,
    exptime: Option<i64>,
    cas: u64,
    out: &mut Vec<u8>,
) {
    let shared = cx.shared;
    if shared.over_maxmemory() {
        Stats::add(&shared.stats.writes_refused_oom, 1);
        return refuse(cx, out, req.head, &McError::OutOfMemory);
    }
    let mut text = itoa::Buffer::new();
    // As in memcached, a miss creates even when the request has a CAS.
    let on_missing = match exptime {
        Some(exptime) => OnMissing::Create {
            value: text.format(initial).as_bytes(),
            expiry: expiry(exptime, combkv::now_ms()),
            flags: 0,
        },
        _ => OnMissing::Fail,
    };
    let op = Op::Incr {
        key,
        arith: Arith::Unsigned {
            delta,
            decrement: !incr,
        },
        on_missing,
        cond: cas_cond(cas, Cond::Any),
        expiry: combkv::Expiry::Keep,
    };
    let (head, quiet) = (req.head, req.quiet);
    cx.write(&op, out, move |cx, r, out| {
        counted(cx, head, quiet, incr, r, out)
    });
}

/// increment's and decrement's reply, from the write's outcome.
fn counted(
    cx: &mut Cx<'_>,
    head: Head,
    quiet: bool,
    incr: bool,
    r: combkv::Result<Outcome>,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let (hits, misses) = if incr {
        (&mc.incr_hits, &mc.incr_misses)
    } else {
        (&mc.decr_hits, &mc.decr_misses)
    };
    match r {
        Ok(Outcome::Incr {
            status: OpStatus::Done,
            number: Number::Unsigned(n),
            version,
            ..
        }) => {
            Stats::add(hits, 1);
            if !quiet {
                let cas = version.map_or(0, Version::get);
                packet(out, head, Status::Success, cas, &[], &[], &n.to_be_bytes());
            }
        }
        Ok(o) if o.status() == OpStatus::Mismatch => error(out, head, Status::KeyExists),
        Ok(_) => {
            Stats::add(misses, 1);
            error(out, head, Status::KeyNotFound);
        }
        Err(e) => refuse(cx, out, head, &McError::from(e)),
    }
}

/// touch, gat, gatq, gatk, gatkq: set the expiry, and (gat) return the item.
fn touch(
    cx: &mut Cx<'_>,
    req: &BinRequest<'_>,
    key: &[u8],
    exptime: i64,
    value: bool,
    with_key: bool,
    out: &mut Vec<u8>,
) {
    Stats::add(&cx.shared.memcache.stats.cmd_touch, 1);
    let (head, quiet) = (req.head, req.quiet);
    match cx.write_op(&touch_op(key, expiry(exptime, combkv::now_ms()), true)) {
        Written::Now(r) => touched(cx, head, quiet, key, value, with_key, r, out),
        Written::Held => {
            let key = key.to_vec();
            cx.write_held(move |cx, r, out| {
                touched(cx, head, quiet, &key, value, with_key, r, out);
            });
        }
    }
}

/// touch's and gat's reply, from the write's outcome.
#[expect(clippy::too_many_arguments, reason = "the fields of one request")]
fn touched(
    cx: &mut Cx<'_>,
    head: Head,
    quiet: bool,
    key: &[u8],
    value: bool,
    with_key: bool,
    r: combkv::Result<Outcome>,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    match r {
        Ok(Outcome::Expire {
            status: OpStatus::Done,
            item: Some(it),
            ..
        }) => {
            Stats::add(&mc.touch_hits, 1);
            write_item(out, head, &Found::from(&it), with_key.then_some(key), value);
        }
        Ok(_) => {
            Stats::add(&mc.touch_misses, 1);
            write_miss(out, head, quiet, key, with_key);
        }
        Err(e) => refuse(cx, out, head, &McError::from(e)),
    }
}

/// `stat`: one packet per statistic, then an empty one; `stat reset`
/// zeroes the counters. Other groups are not kept: not found.
fn stat(cx: &mut Cx<'_>, head: Head, group: &[u8], out: &mut Vec<u8>) {
    match group {
        b"" => {
            for (name, value) in stat_lines(cx.shared) {
                packet(
                    out,
                    head,
                    Status::Success,
                    0,
                    &[],
                    name.as_bytes(),
                    value.as_bytes(),
                );
            }
        }
        b"reset" => cx.shared.memcache.stats.reset(),
        _ => match crate::memcache::stats::group_lines(cx.shared, group) {
            Some(lines) => {
                for (name, value) in lines {
                    let (name, value) = (name.as_bytes(), value.as_bytes());
                    packet(out, head, Status::Success, 0, &[], name, value);
                }
            }
            None => return error(out, head, Status::KeyNotFound),
        },
    }
    packet(out, head, Status::Success, 0, &[], &[], &[]);
}

/// SASL PLAIN's message: `[authzid] \0 authcid \0 password`.
pub fn sasl_plain(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = data.splitn(3, |&b| b == 0);
    let (_authzid, user, pass) = (parts.next()?, parts.next()?, parts.next()?);
    Some((user, pass))
}
