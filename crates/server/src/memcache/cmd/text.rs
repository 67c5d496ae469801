//! memcached's classic text commands (the ones not in the read batch).
//! Each write decides an [`Op`] (exptime resolved against one clock
//! reading), the session applies it, and the reply comes from its
//! [`Outcome`].

use combkv::op::{Arith, Cond, Number, OnMissing, Op, Outcome, Status};
use combkv::{Expiry, Flags, Version};

use super::{Found, error_line, expiry, line, store_over_maxmemory, write_value};
use crate::memcache::error::McError;
use crate::memcache::parse::{self, GetKind, RELATIVE_EXPTIME_MAX, StoreCmd};
use crate::node::park::Written;
use crate::state::Stats;
use crate::turn::Cx;

fn reply(cx: &Cx<'_>, out: &mut Vec<u8>, noreply: bool, r: Result<&str, McError>) {
    if noreply {
        return;
    }
    match r {
        Ok(s) => line(out, s),
        Err(e) => error_line(cx, out, &e),
    }
}

/// The op of a storage command: set, add, replace and cas store `data`
/// (under their condition); append and prepend grow a present item,
/// keeping its flags and expiry (memcached ignores theirs). A non-zero
/// `cas` on any other command (the binary protocol's) makes it a
/// compare-and-swap too, add included, as in memcached; the text
/// protocol's `cas` command compares whatever it is given.
pub(crate) fn store_op<'a>(
    cmd: StoreCmd,
    key: &'a [u8],
    data: &'a [u8],
    flags: u32,
    exp: Expiry,
    cas: u64,
) -> Op<'a> {
    let put = |cond| Op::Put {
        key,
        value: data,
        expiry: exp,
        flags: Flags::Set(flags),
        cond,
        return_old: false,
    };
    match cmd {
        StoreCmd::Set => put(cas_cond(cas, Cond::Any)),
        StoreCmd::Add => put(cas_cond(cas, Cond::Absent)),
        StoreCmd::Replace => put(cas_cond(cas, Cond::Present)),
        StoreCmd::Cas => put(Cond::Version(Version(cas))),
        StoreCmd::Append | StoreCmd::Prepend => Op::Append {
            key,
            value: data,
            front: cmd == StoreCmd::Prepend,
            on_missing: OnMissing::Fail,
            cond: cas_cond(cas, Cond::Any),
        },
    }
}

/// A write's condition: the item's version is `cas`, or with none (0),
/// `otherwise`.
pub(crate) fn cas_cond(cas: u64, otherwise: Cond) -> Cond {
    match cas {
        0 => otherwise,
        v => Cond::Version(Version(v)),
    }
}

/// set, add, replace, append, prepend, cas: one op.
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
    if store_over_maxmemory(cx) {
        return reply(cx, out, noreply, Err(McError::OutOfMemoryStoring));
    }
    let op = store_op(
        cmd,
        key,
        data,
        flags,
        expiry(exptime, combkv::now_ms()),
        cas,
    );
    cx.write(&op, out, move |cx, r, out| stored(cx, cmd, r, noreply, out));
}

/// A storage command's reply, from its write's outcome.
fn stored(
    cx: &mut Cx<'_>,
    cmd: StoreCmd,
    r: combkv::Result<Outcome>,
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let r = count_store(cx, cmd == StoreCmd::Cas, r).map(|o| match (o.status(), cmd) {
        (Status::Done, _) => "STORED",
        (Status::Mismatch, _) => "EXISTS",
        (Status::Missing, StoreCmd::Cas) => "NOT_FOUND",
        _ => "NOT_STORED",
    });
    reply(cx, out, noreply, r);
}

/// Counts a storage command's outcome in memcached's stats, alike for the
/// text and the binary protocol: `compared` (a CAS) counts a hit, a bad
/// value or a miss; a stored item counts; a value too large counts.
pub(crate) fn count_store(
    cx: &Cx<'_>,
    compared: bool,
    r: combkv::Result<Outcome>,
) -> Result<Outcome, McError> {
    let mc = &cx.shared.memcache.stats;
    let o = r.map_err(McError::from).inspect_err(|e| {
        if *e == McError::TooLarge {
            Stats::add(&mc.store_too_large, 1);
        }
    })?;
    let status = o.status();
    if compared {
        let c = match status {
            Status::Done => &mc.cas_hits,
            Status::Mismatch => &mc.cas_badval,
            _ => &mc.cas_misses,
        };
        Stats::add(c, 1);
    }
    if status == Status::Done {
        Stats::add(&mc.total_items, 1);
    }
    Ok(o)
}

pub(super) fn delete(cx: &mut Cx<'_>, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
    let op = Op::Delete {
        key,
        cond: Cond::Any,
        return_old: false,
    };
    cx.write(&op, out, move |cx, r, out| deleted(cx, r, noreply, out));
}

/// delete's reply, from its write's outcome.
fn deleted(cx: &mut Cx<'_>, r: combkv::Result<Outcome>, noreply: bool, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    let r = match r.map(|o| o.status()) {
        Ok(Status::Done) => {
            Stats::add(&mc.delete_hits, 1);
            Ok("DELETED")
        }
        Ok(_) => {
            Stats::add(&mc.delete_misses, 1);
            Ok("NOT_FOUND")
        }
        Err(e) => Err(McError::from(e)),
    };
    reply(cx, out, noreply, r);
}

/// incr and decr: memcached's number rules (`Arith::Unsigned`: increments
/// wrap at 2^64, decrements stop at 0); flags and expiry kept.
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
    let op = Op::Incr {
        key,
        arith: Arith::Unsigned {
            delta,
            decrement: !incr,
        },
        on_missing: OnMissing::Fail,
        cond: Cond::Any,
        expiry: Expiry::Keep,
    };
    cx.write(&op, out, move |cx, r, out| {
        counted(cx, incr, r, noreply, out)
    });
}

/// incr's and decr's reply, from the write's outcome.
fn counted(
    cx: &mut Cx<'_>,
    incr: bool,
    r: combkv::Result<Outcome>,
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let (hits, misses) = if incr {
        (&mc.incr_hits, &mc.incr_misses)
    } else {
        (&mc.decr_hits, &mc.decr_misses)
    };
    let mut text = itoa::Buffer::new();
    let r = match r {
        Err(e) => Err(McError::from(e)),
        Ok(Outcome::Incr {
            status: Status::Done,
            number: Number::Unsigned(n),
            ..
        }) => {
            Stats::add(hits, 1);
            Ok(text.format(n))
        }
        Ok(_) => {
            Stats::add(misses, 1);
            Ok("NOT_FOUND")
        }
    };
    reply(cx, out, noreply, r);
}

/// The op that sets a present key's expiry (touch, gat, mg T): the item is
/// rewritten with it, keeping value and flags. memcached's touch keeps the
/// CAS unique; combkv's is the item version, which every write renews.
pub(crate) fn touch_op(key: &[u8], exp: Expiry, return_item: bool) -> Op<'_> {
    Op::Expire {
        key,
        expiry: exp,
        when: Default::default(),
        past: false,
        return_item,
    }
}

pub(super) fn touch(cx: &mut Cx<'_>, key: &[u8], exptime: i64, noreply: bool, out: &mut Vec<u8>) {
    Stats::add(&cx.shared.memcache.stats.cmd_touch, 1);
    let op = touch_op(key, expiry(exptime, combkv::now_ms()), false);
    cx.write(&op, out, move |cx, r, out| touched(cx, r, noreply, out));
}

/// touch's reply, from its write's outcome.
fn touched(cx: &mut Cx<'_>, r: combkv::Result<Outcome>, noreply: bool, out: &mut Vec<u8>) {
    let mc = &cx.shared.memcache.stats;
    let r = match r.map(|o| o.status()) {
        Err(e) => Err(McError::from(e)),
        Ok(Status::Done) => {
            Stats::add(&mc.touch_hits, 1);
            Ok("TOUCHED")
        }
        Ok(_) => {
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
    last: bool,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let exp = expiry(exptime, combkv::now_ms());
    let keys: Vec<&[u8]> = parse::keys(keys).collect();
    let mut outcomes = Vec::with_capacity(keys.len());
    let mut held = 0;
    for &key in &keys {
        Stats::add(&mc.cmd_touch, 1);
        match cx.write_op(&touch_op(key, exp, true)) {
            Written::Now(r) => {
                let failed = r.is_err();
                outcomes.push(r);
                if failed {
                    break;
                }
            }
            Written::Held => held += 1,
        }
    }
    if held == 0 {
        return touched_values(cx, &keys, kind, outcomes, last, out);
    }
    let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    cx.hold(held, move |cx, outcomes, out| {
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        touched_values(cx, &keys, kind, outcomes, last, out);
    });
}

/// gat's and gats's reply, from the outcomes of their touches (one per
/// key, up to the first that failed).
fn touched_values(
    cx: &mut Cx<'_>,
    keys: &[&[u8]],
    kind: GetKind,
    outcomes: Vec<combkv::Result<Outcome>>,
    last: bool,
    out: &mut Vec<u8>,
) {
    let mc = &cx.shared.memcache.stats;
    let mark = out.len();
    for (key, r) in keys.iter().zip(outcomes) {
        match r {
            Err(e) => {
                // memcached answers a failed multi-key request by the error alone.
                out.truncate(mark);
                return error_line(cx, out, &McError::from(e));
            }
            Ok(Outcome::Expire {
                status: Status::Done,
                item: Some(it),
                ..
            }) => {
                Stats::add(&mc.touch_hits, 1);
                write_value(out, key, &Found::from(&it), kind.with_cas());
            }
            Ok(_) => Stats::add(&mc.touch_misses, 1),
        }
    }
    if last {
        out.extend_from_slice(b"END\r\n");
    }
}

/// flush_all [delay]: everything now, or everything written before the
/// delay ends (a later flush_all replaces a pending one).
pub(super) fn flush_all(cx: &mut Cx<'_>, delay: i64, noreply: bool, out: &mut Vec<u8>) {
    flush(cx, delay, out, move |cx, r, out| {
        reply(cx, out, noreply, r.map(|()| "OK"));
    });
}

/// Flushes now, or schedules the flush (text `flush_all`, binary `flush`),
/// the reply rendered by `render`.
pub(crate) fn flush(
    cx: &mut Cx<'_>,
    delay: i64,
    out: &mut Vec<u8>,
    render: impl for<'c> FnOnce(&mut Cx<'c>, Result<(), McError>, &mut Vec<u8>) + Send + 'static,
) {
    let shared = cx.shared;
    Stats::add(&shared.memcache.stats.cmd_flush, 1);
    let now = combkv::now_ms();
    let at = if delay > RELATIVE_EXPTIME_MAX {
        (delay as u64 * 1000).max(now)
    } else {
        now + delay.max(0) as u64 * 1000
    };
    if at > now && shared.config.clustered() {
        // A timer on one node would clear only its own replica.
        let e = McError::Store(combkv::Error::Unavailable(
            "flush_all with a delay is not supported on a cluster node".into(),
        ));
        render(cx, Err(e), out);
    } else if at > now {
        shared.memcache.flush.schedule(&shared.current_store(), at);
        render(cx, Ok(()), out);
    } else {
        shared.memcache.flush.cancel();
        cx.write(&Op::Clear, out, move |cx, r, out| {
            render(cx, r.map(|_| ()).map_err(McError::from), out);
        });
    }
}

/// `stats [subcommand]`: as memcached, only the first word after `stats`
/// counts; an unknown subcommand is `ERROR`.
pub(super) fn stats(cx: &mut Cx<'_>, args: &[u8], out: &mut Vec<u8>) {
    use crate::memcache::stats as st;
    let mut words = parse::words(args);
    let shared = cx.shared;
    match words.next() {
        None => st::write_stats(shared, out),
        Some(b"reset") => {
            shared.memcache.stats.reset();
            line(out, "RESET");
        }
        Some(b"settings") => st::write_settings(shared, out),
        Some(b"items") => st::write_items(shared, out),
        Some(b"slabs") => st::write_slabs(shared, out),
        Some(b"sizes") => st::write_sizes(out),
        Some(b"conns") => st::write_conns(shared, cx.client.id, out),
        Some(_) => error_line(cx, out, &McError::UnknownCommand),
    }
}
