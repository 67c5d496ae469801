//! String commands: GET SET SETNX GETDEL MGET MSET APPEND STRLEN INCR DECR
//! INCRBY DECRBY, and combkv's GETV and CAS.

use combkv::{AtomicWrite, Expiry, Flags, Write, now_ms};

use super::batch::{self, BatchRead};
use super::{Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};

/// GET, MGET and GETV are read-engine batches (`batch`): a request that
/// did not join one (an invalid key) runs as a batch of one.
pub(super) fn get(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch::run_one(cx, BatchRead::Get)
}

pub(super) fn getv(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch::run_one(cx, BatchRead::Getv)
}

pub(super) fn mget(cx: &mut Ctx<'_, '_>) -> CmdResult {
    batch::run_one(cx, BatchRead::Mget)
}

/// An expiry option's deadline in unix ms. `unit_ms` 1000 for seconds;
/// `absolute` for EXAT/PXAT. Redis refuses values <= 0 and overflows.
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Any,
    Nx,
    Xx,
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

pub(super) fn set(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (key, value) = (cx.args[1], cx.args[2]);
    let mut cond = Cond::Any;
    let mut get_old = false;
    let mut ttl = SetTtl::None;
    // Redis's `parseExtendedStringArgumentsOrReply`: an option may repeat
    // (`NX NX`, `EX 1 EX 2`: the last wins) but not meet a conflicting one
    // (NX with XX; any two different expiry options); the expiry argument is
    // only checked once every option has parsed.
    let mut i = 3;
    while i < cx.args.len() {
        let a = cx.args[i];
        let next = cx.args.get(i + 1);
        let expiry_free = |name: &str| match ttl {
            SetTtl::None => true,
            SetTtl::Keep => false,
            SetTtl::At(n, ..) => n == name,
        };
        if eq_ic(a, "nx") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if eq_ic(a, "xx") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if eq_ic(a, "get") {
            get_old = true;
        } else if eq_ic(a, "keepttl") && matches!(ttl, SetTtl::None | SetTtl::Keep) {
            ttl = SetTtl::Keep;
        } else if let (Some((name, unit, abs)), Some(n)) = (expiry_opt(a), next) {
            if !expiry_free(name) {
                return Err(CmdError::Syntax);
            }
            ttl = SetTtl::At(name, unit, abs, n);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let expiry = match ttl {
        SetTtl::None => Expiry::Never,
        SetTtl::Keep => Expiry::Keep,
        SetTtl::At(_, unit, abs, n) => Expiry::AtMs(deadline_ms(n, unit, abs, "set")?),
    };
    if cond == Cond::Any && !get_old {
        cx.session.put_with(key, value, expiry)?;
        cx.r.ok();
        return Ok(());
    }
    let (old, written) = cx.session.write_with(key, |cur| {
        let old = cur.map(|it| it.value.to_vec());
        let ok = match cond {
            Cond::Any => true,
            Cond::Nx => cur.is_none(),
            Cond::Xx => cur.is_some(),
        };
        if ok {
            (
                Write::Put {
                    value: value.to_vec(),
                    expiry,
                    flags: Flags::NONE,
                },
                old,
            )
        } else {
            (Write::Keep, old)
        }
    })?;
    if get_old {
        match old {
            Some(v) => cx.r.bulk(&v),
            None => cx.r.null(),
        }
    } else if written.is_some() {
        cx.r.ok();
    } else {
        cx.r.null();
    }
    Ok(())
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
    let done = cx.session.insert(cx.args[1], cx.args[2])?;
    cx.r.int(done.is_some() as i64);
    Ok(())
}

pub(super) fn getdel(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (old, _) = cx.session.write_with(cx.args[1], |cur| match cur {
        Some(it) => (Write::Delete, Some(it.value.to_vec())),
        None => (Write::Keep, None),
    })?;
    match old {
        Some(v) => cx.r.bulk(&v),
        None => cx.r.null(),
    }
    Ok(())
}

pub(super) fn mset(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.args.len() % 2 != 1 {
        return Err(CmdError::Arity("mset".into()));
    }
    // Check every pair first, so a bad one changes nothing.
    let (max_key, max_value) = (cx.store().max_key_len(), cx.store().max_value_len());
    for pair in cx.args[1..].chunks(2) {
        if pair[0].is_empty() {
            return Err(combkv::Error::KeyEmpty.into());
        }
        if pair[0].len() > max_key {
            return Err(combkv::Error::KeyTooLong {
                len: pair[0].len(),
                max: max_key,
            }
            .into());
        }
        if pair[1].len() > max_value {
            return Err(combkv::Error::ValueTooLarge {
                len: pair[1].len(),
                max: max_value,
            }
            .into());
        }
    }
    // One atomic group: no reader sees part of it (`docs/protocol.md`, MSET).
    let writes: Vec<AtomicWrite<'_>> = cx.args[1..]
        .chunks(2)
        .map(|pair| AtomicWrite::Put {
            key: pair[0],
            value: pair[1],
            expiry: Expiry::Never,
        })
        .collect();
    cx.session.write_atomically(&writes)?;
    cx.r.ok();
    Ok(())
}

pub(super) fn append(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let len = cx.session.append(cx.args[1], cx.args[2])?;
    cx.r.int(len as i64);
    Ok(())
}

pub(super) fn strlen(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let n = cx
        .store()
        .get_with(cx.args[1], |it| it.map_or(0, |it| it.value.len()))?;
    cx.r.int(n as i64);
    Ok(())
}

fn incr_by(cx: &mut Ctx<'_, '_>, delta: i64) -> CmdResult {
    let n = cx.session.incr_by(cx.args[1], delta)?;
    cx.r.int(n);
    Ok(())
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
    match cx.session.cas(cx.args[1], expected, cx.args[3], expiry)? {
        Some(v) => cx.r.int(v.get() as i64),
        None => cx.r.null(),
    }
    Ok(())
}
