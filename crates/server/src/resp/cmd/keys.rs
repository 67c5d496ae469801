//! Keyspace commands: DEL UNLINK EXISTS TOUCH EXPIRE PEXPIRE EXPIREAT
//! PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME PERSIST TYPE RENAME RENAMENX
//! COPY DBSIZE FLUSHDB FLUSHALL KEYS SCAN. The writes (DEL, UNLINK, the
//! EXPIRE family, PERSIST, RENAME, RENAMENX, COPY, FLUSHALL) decide an
//! [`Op`] that the session applies.

use std::borrow::Cow;
use std::ops::Bound;

use combkv::op::{ExpireWhen, Op, Outcome, ScanWhat, Status};
use combkv::{AtomicWrite, Expiry, Range, now_ms};

use super::{Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::glob;

/// Every key is one the store takes (a multi-key write refuses them all
/// before it is decided).
fn check_keys(cx: &Ctx<'_, '_>, keys: &[&[u8]]) -> CmdResult {
    let max = cx.store().max_key_len();
    for k in keys {
        combkv::check_key(k, max)?;
    }
    Ok(())
}

pub(super) fn del(cx: &mut Ctx<'_, '_>) -> CmdResult {
    check_keys(cx, &cx.args[1..])?;
    // Several keys go as one atomic group, as in Redis.
    let writes: Vec<AtomicWrite<'_>> = cx.args[1..]
        .iter()
        .map(|k| AtomicWrite::Delete { key: k })
        .collect();
    cx.write(&Op::Atomic(Cow::Owned(writes)), move |cx, o| {
        let Outcome::Atomic { versions } = o else {
            unreachable!("an atomic group's outcome");
        };
        cx.r.int(versions.iter().filter(|v| v.is_some()).count() as i64);
        Ok(())
    })
}

pub(super) fn exists(cx: &mut Ctx<'_, '_>) -> CmdResult {
    check_keys(cx, &cx.args[1..])?;
    let mut n = 0;
    for k in &cx.args[1..] {
        n += cx.get_with(k, |it| it.is_some())? as i64;
    }
    cx.r.int(n);
    Ok(())
}

/// The EXPIRE family's options, checked before the time argument (as
/// Redis does).
fn expire_when(opts: &[&[u8]]) -> Result<ExpireWhen, CmdError> {
    let mut when = ExpireWhen::default();
    for opt in opts {
        if eq_ic(opt, "nx") {
            when.nx = true;
        } else if eq_ic(opt, "xx") {
            when.xx = true;
        } else if eq_ic(opt, "gt") {
            when.gt = true;
        } else if eq_ic(opt, "lt") {
            when.lt = true;
        } else {
            return Err(CmdError::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if when.nx && (when.xx || when.gt || when.lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if when.gt && when.lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(when)
}

/// EXPIRE family: the argument in `unit_ms` units, an absolute unix time
/// or relative to one clock reading. A deadline that has passed deletes the
/// key, as in Redis.
fn expire_generic(cx: &mut Ctx<'_, '_>, name: &str, unit_ms: i64, absolute: bool) -> CmdResult {
    let when = expire_when(&cx.args[3..])?;
    let n = parse_i64(cx.args[2]).ok_or(CmdError::NotInteger)?;
    let invalid = || CmdError::err(format!("invalid expire time in '{name}' command"));
    // One clock reading: the deadline and whether it has passed.
    let now = now_ms() as i64;
    let ms = n.checked_mul(unit_ms).ok_or_else(invalid)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(now).ok_or_else(invalid)?
    };
    // A deadline at or before the epoch compares as the earliest one; the
    // key is deleted (`past`) whatever it is.
    let op = Op::Expire {
        key: cx.args[1],
        expiry: Expiry::AtMs(at.max(1) as u64),
        when,
        past: at <= now,
        return_item: false,
    };
    cx.write(&op, move |cx, o| {
        let changed = o.status() == Status::Done;
        cx.r.int(changed as i64);
        Ok(())
    })
}

pub(super) fn expire(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expire_generic(cx, "expire", 1000, false)
}
pub(super) fn pexpire(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expire_generic(cx, "pexpire", 1, false)
}
pub(super) fn expireat(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expire_generic(cx, "expireat", 1000, true)
}
pub(super) fn pexpireat(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expire_generic(cx, "pexpireat", 1, true)
}

fn ttl_generic(cx: &mut Ctx<'_, '_>, ms: bool) -> CmdResult {
    let now = now_ms();
    let t = cx.get_with(cx.args[1], |it| match it {
        None => -2,
        Some(it) => match it.expires_at_ms {
            None => -1,
            Some(at) => {
                let left = at.saturating_sub(now) as i64;
                if ms { left } else { (left + 500) / 1000 }
            }
        },
    })?;
    cx.r.int(t);
    Ok(())
}

pub(super) fn ttl(cx: &mut Ctx<'_, '_>) -> CmdResult {
    ttl_generic(cx, false)
}
pub(super) fn pttl(cx: &mut Ctx<'_, '_>) -> CmdResult {
    ttl_generic(cx, true)
}

pub(super) fn persist(cx: &mut Ctx<'_, '_>) -> CmdResult {
    // Only a key with an expiry changes.
    let op = Op::Expire {
        key: cx.args[1],
        expiry: Expiry::Never,
        when: ExpireWhen {
            xx: true,
            ..ExpireWhen::default()
        },
        past: false,
        return_item: false,
    };
    cx.write(&op, move |cx, o| {
        let changed = o.status() == Status::Done;
        cx.r.int(changed as i64);
        Ok(())
    })
}

pub(super) fn type_(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let present = cx.get_with(cx.args[1], |it| it.is_some())?;
    cx.r.simple(if present { "string" } else { "none" });
    Ok(())
}

pub(super) fn dbsize(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let n = match cx.txn {
        None => cx.keyspace().len()?,
        // Inside EXEC: counted, as the transaction's earlier ops left it.
        Some(_) => cx.scan_with(&Range::all(), ScanWhat::Count, 0, |_| true)?,
    };
    cx.r.int(n as i64);
    Ok(())
}

pub(super) fn flushall(cx: &mut Ctx<'_, '_>) -> CmdResult {
    match &cx.args[1..] {
        [] => {}
        [m] if eq_ic(m, "sync") || eq_ic(m, "async") => {}
        _ => return Err(CmdError::Syntax),
    }
    cx.write(&Op::Clear, |cx, _| {
        cx.r.ok();
        Ok(())
    })
}

/// The literal prefix of a glob pattern (up to its first special byte):
/// every match starts with it, so KEYS and SCAN only visit that key range.
fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|&b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// The smallest key greater than every key starting with `prefix`, if any.
fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Bound::Excluded(p);
        }
    }
    Bound::Unbounded
}

pub(super) fn keys(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let pattern = cx.args[1];
    let prefix = literal_prefix(pattern);
    let range = if prefix.is_empty() {
        Range::all()
    } else {
        Range::new(Bound::Included(prefix.to_vec()), prefix_end(prefix))
    };
    let max_reply = cx.shared.live.max_reply_bytes();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0usize;
    let mut too_big = false;
    cx.scan_with(&range, ScanWhat::Keys, max_reply as u64, |it| {
        if glob::matches(pattern, it.key) {
            bytes += it.key.len() + 16;
            if bytes > max_reply {
                too_big = true;
                return false;
            }
            keys.push(it.key.to_vec());
        }
        true
    })?;
    if too_big {
        return Err(CmdError::err(
            "keys reply exceeds max-reply-bytes; use SCAN",
        ));
    }
    cx.r.array(keys.len());
    for k in keys {
        cx.r.bulk(&k);
    }
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`, in key order. The
/// cursor names the last key returned (server-side, see `ScanCursors`), so
/// every key present for the whole iteration comes back exactly once.
pub(super) fn scan(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let cursor: u64 = std::str::from_utf8(cx.args[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| CmdError::err("invalid cursor"))?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut type_ok = true;
    let mut i = 2;
    while i < cx.args.len() {
        let (opt, val) = (cx.args[i], cx.args.get(i + 1));
        let Some(val) = val else {
            return Err(CmdError::Syntax);
        };
        if eq_ic(opt, "match") {
            pattern = Some(val);
        } else if eq_ic(opt, "count") {
            let n = parse_i64(val).ok_or(CmdError::NotInteger)?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            count = (n as usize).min(100_000);
        } else if eq_ic(opt, "type") {
            type_ok = eq_ic(val, "string");
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let after = if cursor == 0 {
        None
    } else {
        Some(
            cx.shared
                .scan_cursors
                .lock()
                .take(cursor)
                .ok_or_else(|| CmdError::err("invalid cursor"))?,
        )
    };
    let start = match after {
        Some(k) => Bound::Excluded(k),
        None => Bound::Unbounded,
    };
    let mut range = Range::new(start, Bound::Unbounded).with_limit(count);
    if let Some(p) = pattern {
        let prefix = literal_prefix(p);
        if !prefix.is_empty() {
            range.end = prefix_end(prefix);
            if let Bound::Unbounded = range.start {
                range.start = Bound::Included(prefix.to_vec());
            }
        }
    }
    let mut visited = 0usize;
    let mut last: Option<Vec<u8>> = None;
    let mut found: Vec<Vec<u8>> = Vec::new();
    cx.keyspace().scan(&range, |it| {
        visited += 1;
        last = Some(it.key.to_vec());
        if type_ok && pattern.is_none_or(|p| glob::matches(p, it.key)) {
            found.push(it.key.to_vec());
        }
        true
    })?;
    let next = match last {
        Some(k) if visited == count => cx.shared.scan_cursors.lock().put(k),
        _ => 0,
    };
    cx.r.array(2);
    cx.r.bulk_str(&next.to_string());
    cx.r.array(found.len());
    for k in found {
        cx.r.bulk(&k);
    }
    Ok(())
}

/// TOUCH key...: how many exist (counted once per argument, as EXISTS).
/// combkv keeps no access times, so nothing else changes.
pub(super) fn touch(cx: &mut Ctx<'_, '_>) -> CmdResult {
    exists(cx)
}

/// EXPIRETIME / PEXPIRETIME: the absolute unix time (s, rounded as Redis
/// rounds, or ms) the key expires at; -1 none, -2 absent.
fn expiretime_generic(cx: &mut Ctx<'_, '_>, ms: bool) -> CmdResult {
    let t = cx.get_with(cx.args[1], |it| match it {
        None => -2,
        Some(it) => match it.expires_at_ms {
            None => -1,
            Some(at) if ms => at as i64,
            Some(at) => (at as i64 + 500) / 1000,
        },
    })?;
    cx.r.int(t);
    Ok(())
}

pub(super) fn expiretime(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expiretime_generic(cx, false)
}

pub(super) fn pexpiretime(cx: &mut Ctx<'_, '_>) -> CmdResult {
    expiretime_generic(cx, true)
}

/// RENAME, RENAMENX, COPY: one `Op::Move` of the first two arguments, the
/// reply rendered from its status.
fn move_key(
    cx: &mut Ctx<'_, '_>,
    replace: bool,
    keep_source: bool,
    render: impl for<'x, 'y> FnOnce(&mut Ctx<'x, 'y>, Status) -> CmdResult + Send + 'static,
) -> CmdResult {
    let op = Op::Move {
        from: cx.args[1],
        to: cx.args[2],
        replace,
        keep_source,
    };
    cx.write(&op, move |cx, o| render(cx, o.status()))
}

pub(super) fn rename(cx: &mut Ctx<'_, '_>) -> CmdResult {
    move_key(cx, true, false, |cx, status| {
        match status {
            Status::Missing => return Err(CmdError::err("no such key")),
            _ => cx.r.ok(),
        }
        Ok(())
    })
}

pub(super) fn renamenx(cx: &mut Ctx<'_, '_>) -> CmdResult {
    move_key(cx, false, false, |cx, status| {
        match status {
            Status::Missing => return Err(CmdError::err("no such key")),
            Status::Done => cx.r.int(1),
            _ => cx.r.int(0),
        }
        Ok(())
    })
}

/// COPY source destination [DB 0] [REPLACE]: 1 copied, 0 not (absent
/// source, or an existing destination without REPLACE).
pub(super) fn copy(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let mut replace = false;
    let mut i = 3;
    while i < cx.args.len() {
        let a = cx.args[i];
        if eq_ic(a, "replace") {
            replace = true;
        } else if eq_ic(a, "db") && i + 1 < cx.args.len() {
            i += 1;
            match parse_i64(cx.args[i]) {
                Some(0) => {}
                Some(_) => return Err(CmdError::err("DB index is out of range")),
                None => return Err(CmdError::NotInteger),
            }
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if cx.args[1] == cx.args[2] {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    move_key(cx, replace, true, |cx, status| {
        cx.r.int((status == Status::Done) as i64);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_bound_the_visited_range() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"*x"), b"");
        assert_eq!(literal_prefix(b"a\\*"), b"a");
        assert_eq!(prefix_end(b"ab"), Bound::Excluded(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Bound::Excluded(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), Bound::Unbounded);
    }
}
