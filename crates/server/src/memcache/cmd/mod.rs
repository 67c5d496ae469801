//! Executing memcached requests against the store: the read batch's
//! replies (`get`, `gets`, `mg`), the text commands (`text`) and the meta
//! commands (`meta`). Every reply line is built here or in those two files.

mod meta;
pub(crate) mod text;

use std::io::Write as _;

use combkv::readexec::BatchResults;
use combkv::{Expiry, Item, ItemView};

use super::binary;
use super::error::McError;
use super::parse::{self, RELATIVE_EXPTIME_MAX, Request};
use crate::state::Stats;
use crate::turn::Cx;

/// A found item as a reply needs it (from a batch result or a write).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'v> {
    pub value: &'v [u8],
    pub version: u64,
    pub flags: u32,
    pub expires_at_ms: Option<u64>,
}

impl<'v> From<&'v Item> for Found<'v> {
    fn from(it: &'v Item) -> Found<'v> {
        Found {
            value: &it.value,
            version: it.version.get(),
            flags: it.flags,
            expires_at_ms: it.expires_at_ms,
        }
    }
}

impl<'v> From<&ItemView<'v>> for Found<'v> {
    fn from(it: &ItemView<'v>) -> Found<'v> {
        Found {
            value: it.value,
            version: it.version.get(),
            flags: it.flags,
            expires_at_ms: it.expires_at_ms,
        }
    }
}

/// memcached exptime -> expiry time (unix ms): 0 never; up to 30 days
/// seconds from now; larger a unix time; negative already expired.
pub(crate) fn expiry_ms(exptime: i64, now_ms: u64) -> Option<u64> {
    if exptime == 0 {
        None
    } else if exptime < 0 {
        Some(1)
    } else if exptime <= RELATIVE_EXPTIME_MAX {
        Some(now_ms + exptime as u64 * 1000)
    } else {
        Some(exptime as u64 * 1000)
    }
}

pub(crate) fn expiry(exptime: i64, now_ms: u64) -> Expiry {
    expiry_ms(exptime, now_ms).map_or(Expiry::Never, Expiry::AtMs)
}

/// Seconds an item has left (`-1`: no expiry), as `mg t` reports it.
pub(crate) fn ttl_secs(expires_at_ms: Option<u64>, now_ms: u64) -> i64 {
    match expires_at_ms {
        None => -1,
        Some(t) => (t.saturating_sub(now_ms).div_ceil(1000)) as i64,
    }
}

/// Counts a storage command (`cmd_set`) and says whether it is refused
/// for `maxmemory`, counting the refusal (text, meta and binary stores).
pub(crate) fn store_over_maxmemory(cx: &Cx<'_>) -> bool {
    let shared = cx.shared;
    let mc = &shared.memcache.stats;
    Stats::add(&mc.cmd_set, 1);
    let over = shared.over_maxmemory();
    if over {
        Stats::add(&mc.store_no_memory, 1);
        Stats::add(&shared.stats.writes_refused_oom, 1);
    }
    over
}

pub(crate) fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn error_line(cx: &Cx<'_>, out: &mut Vec<u8>, err: &McError) {
    Stats::add(&cx.shared.stats.errors_replied, 1);
    line(out, &err.line());
}

/// `VALUE <key> <flags> <bytes>[ <cas>]` and the data block.
pub(crate) fn write_value(out: &mut Vec<u8>, key: &[u8], f: &Found<'_>, with_cas: bool) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let _ = write!(out, " {} {}", f.flags, f.value.len());
    if with_cas {
        let _ = write!(out, " {}", f.version);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(f.value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the replies of a read batch (`get`, `gets`, `mg`) from its
/// results, in request order, until `out` passes `budget`. Returns the
/// requests answered.
pub(crate) fn reply_batch(
    cx: &Cx<'_>,
    pending: &[Request<'_>],
    res: &BatchResults,
    out: &mut Vec<u8>,
    budget: usize,
) -> usize {
    let shared = cx.shared;
    let stats = &shared.stats;
    let mc = &shared.memcache.stats;
    let now = combkv::now_ms();
    let (mut hits, mut misses) = (0u64, 0u64);
    let mut i = 0;
    let mut answered = 0;
    for r in pending {
        match r {
            Request::Get {
                kind, keys, last, ..
            } => {
                for key in parse::keys(keys) {
                    match res.items(i).next() {
                        Some(it) => {
                            hits += 1;
                            write_value(out, key, &Found::from(&it), kind.with_cas());
                        }
                        None => misses += 1,
                    }
                    i += 1;
                }
                if *last {
                    out.extend_from_slice(b"END\r\n");
                }
            }
            Request::MetaGet { key, flags } => {
                Stats::add(&mc.cmd_meta, 1);
                match res.items(i).next() {
                    Some(it) => {
                        hits += 1;
                        meta::write_get_hit(out, key, flags, &Found::from(&it), now);
                    }
                    None => {
                        misses += 1;
                        meta::write_miss(out, b"EN", key, flags);
                    }
                }
                i += 1;
            }
            Request::Binary(b) => {
                match res.items(i).next() {
                    Some(it) => {
                        hits += 1;
                        binary::cmd::reply_get(out, b, Some(&Found::from(&it)));
                    }
                    None => {
                        misses += 1;
                        binary::cmd::reply_get(out, b, None);
                    }
                }
                i += 1;
            }
            _ => unreachable!("only get, gets, mg and binary gets are batched"),
        }
        answered += 1;
        if out.len() > budget {
            break;
        }
    }
    Stats::add(&mc.cmd_get, hits + misses);
    Stats::add(&mc.get_hits, hits);
    Stats::add(&mc.get_misses, misses);
    Stats::add(&stats.keyspace_hits, hits);
    Stats::add(&stats.keyspace_misses, misses);
    answered
}

/// Executes one request that is not part of a read batch.
pub(crate) fn execute(cx: &mut Cx<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!(client = cx.client.id, "memcached request: {req:?}");
    }
    match *req {
        Request::Get {
            kind,
            exptime,
            keys,
            last,
            ..
        } => text::get_and_touch(cx, kind, exptime, keys, last, out),
        Request::Store {
            cmd,
            key,
            flags,
            exptime,
            cas,
            data,
            noreply,
        } => text::store(cx, cmd, key, flags, exptime, cas, data, noreply, out),
        Request::Delete { key, noreply } => text::delete(cx, key, noreply, out),
        Request::Arith {
            incr,
            key,
            delta,
            noreply,
        } => text::arith(cx, incr, key, delta, noreply, out),
        Request::Touch {
            key,
            exptime,
            noreply,
        } => text::touch(cx, key, exptime, noreply, out),
        Request::FlushAll { delay, noreply } => text::flush_all(cx, delay, noreply, out),
        Request::Version => line(out, &format!("VERSION {}", super::stats::VERSION)),
        Request::Verbosity { noreply } => {
            if !noreply {
                line(out, "OK");
            }
        }
        Request::Stats { args } => text::stats(cx, args, out),
        Request::MetaDumpBadClass => line(out, "BADCLASS invalid class id"),
        Request::Quit | Request::Shutdown { .. } => {}
        Request::MetaNoop => line(out, "MN"),
        Request::MetaDebug { key } => meta::debug(cx, &key, out),
        Request::MetaGet { key, flags } => meta::get_touch(cx, &key, &flags, out),
        Request::MetaSet { key, flags, data } => meta::set(cx, &key, &flags, data, out),
        Request::MetaDelete { key, flags } => meta::delete(cx, &key, &flags, out),
        Request::MetaArith { key, flags } => meta::arith(cx, &key, &flags, out),
        Request::Auth { .. } | Request::Binary(_) | Request::MetaDump { .. } => {
            unreachable!("the protocol answers authentication, binary requests and metadump")
        }
    }
}
