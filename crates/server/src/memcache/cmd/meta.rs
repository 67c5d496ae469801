//! memcached's meta commands: mg (with T; plain mg is in the read batch),
//! ms, md, ma, me. Return flags follow the order the client gave them.

use std::io::Write as _;

use combkv::{Expiry, Flags, Write};

use super::{Found, error_line, expiry, expiry_ms, line, stored_number, touch_item, ttl_secs};
use crate::memcache::error::McError;
use crate::memcache::parse::{Key, MetaFlags, encode_base64};
use crate::pipeline::Cx;
use crate::shared::Stats;

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
    let ttl = flags.ttl.unwrap_or(0);
    let exp = expiry(ttl, now);
    match touch_item(cx, key.bytes(), exp, |value, cflags| {
        (value.to_vec(), cflags)
    }) {
        Err(e) => error_line(cx, out, &e),
        Ok(None) => {
            Stats::add(&mc.touch_misses, 1);
            write_miss(out, b"EN", key, flags);
        }
        Ok(Some(((value, cflags), version))) => {
            Stats::add(&mc.touch_hits, 1);
            let f = Found {
                value: &value,
                version,
                flags: cflags,
                expires_at_ms: expiry_ms(ttl, now),
            };
            write_get_hit(out, key, flags, &f, now);
        }
    }
}

/// What ms, md and ma decided.
enum Outcome {
    /// HD (or VA for ma with `v`).
    Done,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NonNumeric,
}

impl Outcome {
    fn code(&self) -> &'static [u8] {
        match self {
            Outcome::Done => b"HD",
            Outcome::NotStored => b"NS",
            Outcome::Exists => b"EX",
            _ => b"NF",
        }
    }
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
    let shared = cx.shared;
    let mc = &shared.memcache.stats;
    Stats::add(&mc.cmd_meta, 1);
    Stats::add(&mc.cmd_set, 1);
    if shared.over_maxmemory() {
        Stats::add(&mc.store_no_memory, 1);
        Stats::add(&shared.stats.writes_refused_oom, 1);
        return error_line(cx, out, &McError::OutOfMemoryStoring);
    }
    let now = combkv::now_ms();
    let exp = expiry(flags.ttl.unwrap_or(0), now);
    let cflags = Flags::Set(flags.client_flags.unwrap_or(0));
    let mode = flags.mode.unwrap_or(b'S').to_ascii_uppercase();
    let max = shared.store.max_value_len();
    let put = |value: Vec<u8>| Write::Put {
        value,
        expiry: exp,
        flags: cflags,
    };
    let r = cx.session.write_with(key.bytes(), |cur| {
        let cas_ok = |v: u64| flags.compare_cas.is_none_or(|c| c == v);
        match (mode, cur) {
            (b'S' | b'R', None) if flags.compare_cas.is_some() => (Write::Keep, Outcome::NotFound),
            (b'S' | b'R', Some(it)) if !cas_ok(it.version.get()) => (Write::Keep, Outcome::Exists),
            (b'S', _) | (b'R', Some(_)) | (b'E', None) => (put(data.to_vec()), Outcome::Done),
            (b'R', None) | (b'E', Some(_)) => (Write::Keep, Outcome::NotStored),
            (_, None) => match flags.vivify {
                Some(ttl) => {
                    let w = Write::Put {
                        value: data.to_vec(),
                        expiry: expiry(ttl, now),
                        flags: cflags,
                    };
                    (w, Outcome::Done)
                }
                None => (Write::Keep, Outcome::NotStored),
            },
            (_, Some(it)) if !cas_ok(it.version.get()) => (Write::Keep, Outcome::Exists),
            (append_or_prepend, Some(it)) => {
                let (a, b) = if append_or_prepend == b'A' {
                    (it.value, data)
                } else {
                    (data, it.value)
                };
                if a.len() + b.len() > max {
                    return (Write::Keep, Outcome::TooLarge);
                }
                let w = Write::Put {
                    value: [a, b].concat(),
                    expiry: Expiry::Keep,
                    flags: Flags::Keep,
                };
                (w, Outcome::Done)
            }
        }
    });
    let (outcome, version) = match r {
        Err(e) => return error_line(cx, out, &McError::from(e)),
        Ok(r) => r,
    };
    match outcome {
        Outcome::TooLarge => {
            Stats::add(&mc.store_too_large, 1);
            return error_line(cx, out, &McError::TooLarge);
        }
        Outcome::Done => {
            Stats::add(&mc.total_items, 1);
            if flags.quiet {
                return;
            }
        }
        _ => {}
    }
    out.extend_from_slice(outcome.code());
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
    let r = cx.session.write_with(key.bytes(), |cur| match cur {
        None => (Write::Keep, Outcome::NotFound),
        Some(it) if flags.compare_cas.is_some_and(|c| c != it.version.get()) => {
            (Write::Keep, Outcome::Exists)
        }
        Some(_) => (Write::Delete, Outcome::Done),
    });
    let outcome = match r {
        Err(e) => return error_line(cx, out, &McError::from(e)),
        Ok((o, _)) => o,
    };
    if matches!(outcome, Outcome::Done) {
        Stats::add(&mc.delete_hits, 1);
        if flags.quiet {
            return;
        }
    } else {
        Stats::add(&mc.delete_misses, 1);
    }
    write_miss(out, outcome.code(), key, flags);
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
    let delta = flags.delta.unwrap_or(1);
    let now = combkv::now_ms();
    // (outcome, number, expiry after the write, created)
    let r = cx.session.write_with(key.bytes(), |cur| match cur {
        None => match flags.vivify {
            None => (Write::Keep, (Outcome::NotFound, 0, None, false)),
            Some(ttl) => {
                let n = flags.initial.unwrap_or(0);
                let w = Write::Put {
                    value: n.to_string().into_bytes(),
                    expiry: expiry(ttl, now),
                    flags: Flags::NONE,
                };
                (w, (Outcome::Done, n, expiry_ms(ttl, now), true))
            }
        },
        Some(it) if flags.compare_cas.is_some_and(|c| c != it.version.get()) => {
            (Write::Keep, (Outcome::Exists, 0, None, false))
        }
        Some(it) => match stored_number(it.value) {
            None => (Write::Keep, (Outcome::NonNumeric, 0, None, false)),
            Some(old) => {
                let n = super::apply_delta(old, incr, delta);
                let (exp, at) = match flags.ttl {
                    Some(t) => (expiry(t, now), expiry_ms(t, now)),
                    None => (Expiry::Keep, it.expires_at_ms),
                };
                let w = Write::Put {
                    value: n.to_string().into_bytes(),
                    expiry: exp,
                    flags: Flags::Keep,
                };
                (w, (Outcome::Done, n, at, false))
            }
        },
    });
    let ((outcome, n, at, created), version) = match r {
        Err(e) => return error_line(cx, out, &McError::from(e)),
        Ok(r) => r,
    };
    let (hits, misses) = if incr {
        (&mc.incr_hits, &mc.incr_misses)
    } else {
        (&mc.decr_hits, &mc.decr_misses)
    };
    match outcome {
        Outcome::NonNumeric => return error_line(cx, out, &McError::NonNumeric),
        Outcome::Done => {
            Stats::add(hits, 1);
            // memcached's quiet mode hides a plain success, not a creation.
            if flags.quiet && !created {
                return;
            }
        }
        _ => {
            Stats::add(misses, 1);
            return write_miss(out, outcome.code(), key, flags);
        }
    }
    let number = n.to_string();
    if flags.value {
        let _ = write!(out, "VA {}", number.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    for t in flags.iter() {
        let _ = match t[0] {
            b'c' => write!(out, " c{}", version.map_or(0, |v| v.get())),
            b't' => write!(out, " t{}", ttl_secs(at, now)),
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
    Stats::add(&cx.shared.memcache.stats.cmd_meta, 1);
    let now = combkv::now_ms();
    let r = cx.shared.store.get_with(key.bytes(), |it| {
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
    match r {
        Err(e) => error_line(cx, out, &McError::from(e)),
        Ok(None) => line(out, "EN"),
        Ok(Some(l)) => {
            out.extend_from_slice(&l);
            out.extend_from_slice(b"\r\n");
        }
    }
}
