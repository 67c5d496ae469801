//! String commands: GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX
//! GETRANGE (SUBSTR) MGET MSET MSETNX APPEND STRLEN INCR DECR INCRBY DECRBY,
//! and combkv's GETV and CAS. Each write parses and checks
//! its arguments, decides an [`Op`] (relative expiry times resolved with
//! one clock reading), has the session apply it, and replies from the
//! [`Outcome`].

use std::borrow::Cow;

use combkv::op::{Arith, Cond, ExpireWhen, Number, OnMissing, Op, Outcome, Status, Watch};
use combkv::{AtomicWrite, Expiry, Flags, Version, now_ms};

use super::batch::{self, BatchRead};
use super::{Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};

/// GET, MGET and GETV are read-engine batches (`batch`): a request that
/// did not join one (an invalid key) runs as a batch of one.
pub(super) fn get(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch_read(cx, BatchRead::Get)
}

pub(super) fn getv(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch_read(cx, BatchRead::Getv)
}

pub(super) fn mget(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch_read(cx, BatchRead::Mget)
}

fn batch_read(cx: &mut Ctx<'_, '_>, kind: BatchRead) -> CmdResult {
    match cx.txn {
        Some(_) => super::multi::batch_read(cx, kind),
        None => batch::run_one(cx, kind),
    }
}

/// An expiry option's deadline in unix ms. `unit_ms` 1000 for seconds;
/// `absolute` for EXAT/PXAT, else relative to the command's one clock
/// reading (taken here, and only then). Redis refuses values <= 0 and
/// overflows.
pub(super) fn deadline_ms(
    raw: &[u8],
    unit_ms: i64,
    absolute: bool,
    cmd: &str,
) -> Result<u64, CmdError> {
    let n = parse_i64(raw).ok_or(CmdError::NotInteger)?;
    let invalid = || CmdError::err(format!("invalid expire time in '{cmd}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = n.checked_mul(unit_ms).ok_or_else(invalid)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(now_ms() as i64).ok_or_else(invalid)?
    };
    Ok(at as u64)
}

/// SET's expiry option as parsed: KEEPTTL, or EX/PX/EXAT/PXAT with its
/// (not yet checked) argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetTtl<'a> {
    None,
    Keep,
    /// (option name, ms per unit, absolute, raw argument)
    At(&'static str, i64, bool, &'a [u8]),
}

/// SET's options: its condition, GET, and its expiry.
struct SetOptions<'a> {
    cond: Cond,
    get_old: bool,
    ttl: SetTtl<'a>,
}

impl<'a> SetOptions<'a> {
    /// Redis's `parseExtendedStringArgumentsOrReply`: an option may repeat
    /// (`NX NX`, `EX 1 EX 2`: the last wins) but not meet a conflicting one
    /// (NX with XX; any two different expiry options); the expiry argument
    /// is only checked once every option has parsed.
    fn parse(opts: &[&'a [u8]]) -> Result<SetOptions<'a>, CmdError> {
        let mut o = SetOptions {
            cond: Cond::Any,
            get_old: false,
            ttl: SetTtl::None,
        };
        let mut i = 0;
        while i < opts.len() {
            let a = opts[i];
            let next = opts.get(i + 1);
            let expiry_free = |name: &str| match o.ttl {
                SetTtl::None => true,
                SetTtl::Keep => false,
                SetTtl::At(n, ..) => n == name,
            };
            if eq_ic(a, "nx") && o.cond != Cond::Present {
                o.cond = Cond::Absent;
            } else if eq_ic(a, "xx") && o.cond != Cond::Absent {
                o.cond = Cond::Present;
            } else if eq_ic(a, "get") {
                o.get_old = true;
            } else if eq_ic(a, "keepttl") && matches!(o.ttl, SetTtl::None | SetTtl::Keep) {
                o.ttl = SetTtl::Keep;
            } else if let (Some((name, unit, abs)), Some(n)) = (expiry_opt(a), next) {
                if !expiry_free(name) {
                    return Err(CmdError::Syntax);
                }
                o.ttl = SetTtl::At(name, unit, abs, n);
                i += 1;
            } else {
                return Err(CmdError::Syntax);
            }
            i += 1;
        }
        Ok(o)
    }

    /// The expiry, a relative time resolved to an absolute one.
    fn expiry(&self) -> Result<Expiry, CmdError> {
        Ok(match self.ttl {
            SetTtl::None => Expiry::Never,
            SetTtl::Keep => Expiry::Keep,
            SetTtl::At(_, unit, abs, n) => Expiry::AtMs(deadline_ms(n, unit, abs, "set")?),
        })
    }
}

pub(super) fn set(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (key, value) = (cx.args[1], cx.args[2]);
    let opts = SetOptions::parse(&cx.args[3..])?;
    let expiry = opts.expiry()?;
    let op = Op::Put {
        key,
        value,
        expiry,
        flags: Flags::NONE,
        cond: opts.cond,
        return_old: opts.get_old,
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Put { status, old, .. } = o else {
            unreachable!("a put's outcome");
        };
        if opts.get_old {
            match old {
                Some(it) => cx.r.bulk(&it.value),
                None => cx.r.null(),
            }
        } else if status == Status::Done {
            cx.r.ok();
        } else {
            cx.r.null();
        }
        Ok(())
    })
}

/// EX/PX/EXAT/PXAT: (name, ms per unit, absolute).
fn expiry_opt(a: &[u8]) -> Option<(&'static str, i64, bool)> {
    if eq_ic(a, "ex") {
        Some(("ex", 1000, false))
    } else if eq_ic(a, "px") {
        Some(("px", 1, false))
    } else if eq_ic(a, "exat") {
        Some(("exat", 1000, true))
    } else if eq_ic(a, "pxat") {
        Some(("pxat", 1, true))
    } else {
        None
    }
}

pub(super) fn setnx(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let op = Op::Put {
        key: cx.args[1],
        value: cx.args[2],
        expiry: Expiry::Never,
        flags: Flags::NONE,
        cond: Cond::Absent,
        return_old: false,
    };
    cx.write(&op, move |cx, o| {
        let done = o.status() == Status::Done;
        cx.r.int(done as i64);
        Ok(())
    })
}

/// SETEX key seconds value: SET with EX, the time before the value.
pub(super) fn setex(cx: &mut Ctx<'_, '_>) -> CmdResult {
    set_expiring(cx, 1000, "setex")
}

/// PSETEX key milliseconds value: SET with PX.
pub(super) fn psetex(cx: &mut Ctx<'_, '_>) -> CmdResult {
    set_expiring(cx, 1, "psetex")
}

fn set_expiring(cx: &mut Ctx<'_, '_>, unit_ms: i64, name: &str) -> CmdResult {
    let at = deadline_ms(cx.args[2], unit_ms, false, name)?;
    let op = Op::Put {
        key: cx.args[1],
        value: cx.args[3],
        expiry: Expiry::AtMs(at),
        flags: Flags::NONE,
        cond: Cond::Any,
        return_old: false,
    };
    cx.write(&op, |cx, _| {
        cx.r.ok();
        Ok(())
    })
}

/// GETSET key value: SET key value GET (the old value or nil; any time to
/// live is cleared, as by SET).
pub(super) fn getset(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let op = Op::Put {
        key: cx.args[1],
        value: cx.args[2],
        expiry: Expiry::Never,
        flags: Flags::NONE,
        cond: Cond::Any,
        return_old: true,
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Put { old, .. } = o else {
            unreachable!("a put's outcome");
        };
        match old {
            Some(it) => cx.r.bulk(&it.value),
            None => cx.r.null(),
        }
        Ok(())
    })
}

pub(super) fn getdel(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let op = Op::Delete {
        key: cx.args[1],
        cond: Cond::Any,
        return_old: true,
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Delete { old, .. } = o else {
            unreachable!("a delete's outcome");
        };
        match old {
            Some(it) => cx.r.bulk(&it.value),
            None => cx.r.null(),
        }
        Ok(())
    })
}

pub(super) fn mset(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.args.len() % 2 != 1 {
        return Err(CmdError::Arity("mset".into()));
    }
    // One atomic group: no reader sees part of it (`docs/protocol.md`,
    // MSET). The store checks every pair first, so a bad one changes
    // nothing.
    let writes: Vec<AtomicWrite<'_>> = cx.args[1..]
        .chunks(2)
        .map(|pair| AtomicWrite::Put {
            key: pair[0],
            value: pair[1],
            expiry: Expiry::Never,
        })
        .collect();
    cx.write(&Op::Atomic(Cow::Owned(writes)), |cx, _| {
        cx.r.ok();
        Ok(())
    })
}

pub(super) fn append(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let op = Op::Append {
        key: cx.args[1],
        value: cx.args[2],
        front: false,
        on_missing: OnMissing::Empty,
        cond: Cond::Any,
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Append { len, .. } = o else {
            unreachable!("an append's outcome");
        };
        cx.r.int(len as i64);
        Ok(())
    })
}

pub(super) fn strlen(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let n = cx.get_with(cx.args[1], |it| it.map_or(0, |it| it.value.len()))?;
    cx.r.int(n as i64);
    Ok(())
}

/// INCR and its kin: Redis's number rules (`Arith::Signed`), an absent key
/// read as 0, the expiry and flags kept.
fn incr_by(cx: &mut Ctx<'_, '_>, delta: i64) -> CmdResult {
    let op = Op::Incr {
        key: cx.args[1],
        arith: Arith::Signed(delta),
        on_missing: OnMissing::Empty,
        cond: Cond::Any,
        expiry: Expiry::Keep,
    };
    cx.write(&op, move |cx, o| {
        match o {
            Outcome::Incr {
                number: Number::Signed(n),
                ..
            } => cx.r.int(n),
            other => unreachable!("a signed increment's outcome: {other:?}"),
        }
        Ok(())
    })
}

pub(super) fn incr(cx: &mut Ctx<'_, '_>) -> CmdResult {
    incr_by(cx, 1)
}

pub(super) fn decr(cx: &mut Ctx<'_, '_>) -> CmdResult {
    incr_by(cx, -1)
}

pub(super) fn incrby(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let d = cx.int(2)?;
    incr_by(cx, d)
}

pub(super) fn decrby(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let d = cx.int(2)?;
    let d = d
        .checked_neg()
        .ok_or_else(|| CmdError::err("decrement would overflow"))?;
    incr_by(cx, d)
}

/// INCRBYFLOAT key increment: the value afterwards, as stored (exact
/// decimal arithmetic printed to 17 places: see `Op::IncrFloat`).
pub(super) fn incrbyfloat(cx: &mut Ctx<'_, '_>) -> CmdResult {
    // Refused before a write is proposed (on a cluster, before the log).
    if !combkv::op::is_float(cx.args[2]) {
        return Err(CmdError::err("value is not a valid float"));
    }
    let op = Op::IncrFloat {
        key: cx.args[1],
        by: cx.args[2],
    };
    cx.write(&op, move |cx, o| {
        let Outcome::IncrFloat { value, .. } = o else {
            unreachable!("a float increment's outcome");
        };
        cx.r.bulk(&value);
        Ok(())
    })
}

/// `CAS key version value [EX seconds | PX ms]`: the new version, or null.
pub(super) fn cas(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let expected = match parse_i64(cx.args[2]) {
        Some(v) if v >= 0 => v as u64,
        _ => return Err(CmdError::NotInteger),
    };
    let expiry = match &cx.args[4..] {
        [] => Expiry::Never,
        [opt, n] if eq_ic(opt, "ex") => Expiry::AtMs(deadline_ms(n, 1000, false, "cas")?),
        [opt, n] if eq_ic(opt, "px") => Expiry::AtMs(deadline_ms(n, 1, false, "cas")?),
        _ => return Err(CmdError::Syntax),
    };
    // CAS refuses an oversized value before it looks at the version (an
    // `Op::Put` with a condition refuses it only when it would write).
    let max = cx.store().max_value_len();
    if cx.args[3].len() > max {
        let len = cx.args[3].len();
        return Err(combkv::Error::ValueTooLarge { len, max }.into());
    }
    // Version 0: only if absent (no item has version 0).
    let cond = match expected {
        0 => Cond::Absent,
        v => Cond::Version(Version(v)),
    };
    let op = Op::Put {
        key: cx.args[1],
        value: cx.args[3],
        expiry,
        flags: Flags::NONE,
        cond,
        return_old: false,
    };
    cx.write(&op, move |cx, o| {
        match o.version() {
            Some(v) => cx.r.int(v.get() as i64),
            None => cx.r.null(),
        }
        Ok(())
    })
}

/// GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]: the value, and
/// the expiry changed as asked. Options parse as SET's do (a repeated one
/// is fine, two different ones a syntax error). With none, a plain read.
pub(super) fn getex(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let mut ttl = SetTtl::None;
    let mut persist = false;
    let opts = &cx.args[2..];
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i];
        if eq_ic(a, "persist") && ttl == SetTtl::None {
            persist = true;
        } else if let (Some((name, unit, abs)), Some(n), false) =
            (expiry_opt(a), opts.get(i + 1), persist)
        {
            if matches!(ttl, SetTtl::At(other, ..) if other != name) {
                return Err(CmdError::Syntax);
            }
            ttl = SetTtl::At(name, unit, abs, n);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let key = cx.args[1];
    let op = match ttl {
        SetTtl::At(_, unit, abs, n) => {
            let at = deadline_ms(n, unit, abs, "getex")?;
            Op::Expire {
                key,
                expiry: Expiry::AtMs(at),
                when: ExpireWhen::default(),
                past: abs && at <= now_ms(),
                return_item: true,
            }
        }
        // Only a key with an expiry is rewritten (no new version for one
        // without, as Redis leaves it untouched).
        _ if persist => Op::Expire {
            key,
            expiry: Expiry::Never,
            when: ExpireWhen {
                xx: true,
                ..ExpireWhen::default()
            },
            past: false,
            return_item: true,
        },
        _ => {
            // A plain read: classed as one (the table's `r`), it passed
            // the read gate after the connection's own writes, as GET
            // does; inside EXEC it reads through the transaction's entry.
            let v = cx.get_with(key, |it| it.map(|it| it.value.to_vec()))?;
            match v {
                Some(v) => cx.r.bulk(&v),
                None => cx.r.null(),
            }
            return Ok(());
        }
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Expire { item, .. } = o else {
            unreachable!("an expire's outcome");
        };
        match item {
            Some(it) => cx.r.bulk(&it.value),
            None => cx.r.null(),
        }
        Ok(())
    })
}

/// GETRANGE key start end (and SUBSTR, its old name): Redis's
/// `getrangeCommand` index rules; a missing key is the empty string.
pub(super) fn getrange(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (start, end) = (cx.int(2)?, cx.int(3)?);
    let part = cx.get_with(cx.args[1], |it| {
        let v = it.map_or(&[][..], |it| it.value);
        range_of(v.len(), start, end).map(|(s, e)| v[s..=e].to_vec())
    })?;
    cx.r.bulk(part.as_deref().unwrap_or(b""));
    Ok(())
}

/// The inclusive byte range GETRANGE answers for a value of `len` bytes,
/// or `None` for the empty string.
fn range_of(len: usize, mut start: i64, mut end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    if start < 0 {
        start = start.saturating_add(len);
    }
    if end < 0 {
        end = end.saturating_add(len);
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

/// MSETNX key value [key value ...]: all of them, only if none of the keys
/// exists; 1 or 0. A transaction watching each key as absent, so the check
/// and the writes are one step (inside MULTI, at its place in it).
pub(super) fn msetnx(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.args.len() % 2 != 1 {
        return Err(CmdError::Arity("msetnx".into()));
    }
    let pairs: Vec<(&[u8], &[u8])> = cx.args[1..].chunks(2).map(|p| (p[0], p[1])).collect();
    let watch: Vec<Watch<'_>> = pairs
        .iter()
        .map(|&(key, _)| Watch { key, version: None })
        .collect();
    let writes: Vec<AtomicWrite<'_>> = pairs
        .iter()
        .map(|&(key, value)| AtomicWrite::Put {
            key,
            value,
            expiry: Expiry::Never,
        })
        .collect();
    let op = Op::Txn {
        watch: Cow::Owned(watch),
        ops: Cow::Owned(vec![Op::Atomic(Cow::Owned(writes))]),
    };
    cx.write(&op, move |cx, o| {
        let Outcome::Txn { results } = o else {
            unreachable!("a transaction's outcome");
        };
        match results {
            None => cx.r.int(0),
            Some(mut r) => {
                // The one op's refusal (a key or value over the limits).
                r.pop().expect("one op")?;
                cx.r.int(1);
            }
        }
        Ok(())
    })
}
