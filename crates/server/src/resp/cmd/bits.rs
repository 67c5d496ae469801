//! SETRANGE, SETBIT, GETBIT, BITCOUNT: values as byte and bit arrays,
//! with Redis 7's offsets, index rules and errors. The writes are one
//! decided op each (`Op::SetRange`, `Op::SetBit`); the reads go through
//! `Ctx::get_with`, so all four work inside MULTI.

use combkv::op::{Op, Outcome};

use super::{Ctx, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};

/// Redis's largest bit offset: 2^32 - 1 (a 512 MB string).
const MAX_BIT: i64 = (1 << 32) - 1;

fn bit_offset(a: &[u8]) -> Result<u64, CmdError> {
    match parse_i64(a) {
        Some(n) if (0..=MAX_BIT).contains(&n) => Ok(n as u64),
        _ => Err(CmdError::err(
            "bit offset is not an integer or out of range",
        )),
    }
}

/// SETRANGE key offset value: the length afterwards.
pub(super) fn setrange(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let offset = cx.int(2)?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let op = Op::SetRange {
        key: cx.args[1],
        offset: offset as u64,
        value: cx.args[3],
    };
    let Outcome::Append { len, .. } = cx.apply(&op)? else {
        unreachable!("a set-range's outcome");
    };
    cx.r.int(len as i64);
    Ok(())
}

/// SETBIT key offset 0|1: the bit before.
pub(super) fn setbit(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let bit = bit_offset(cx.args[2])?;
    let on = match cx.args[3] {
        b"0" => false,
        b"1" => true,
        _ => return Err(CmdError::err("bit is not an integer or out of range")),
    };
    let op = Op::SetBit {
        key: cx.args[1],
        bit,
        on,
    };
    let Outcome::SetBit { old, .. } = cx.apply(&op)? else {
        unreachable!("a set-bit's outcome");
    };
    cx.r.int(old as i64);
    Ok(())
}

/// GETBIT key offset: 0 past the end or for a missing key.
pub(super) fn getbit(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let bit = bit_offset(cx.args[2])?;
    let byte = (bit >> 3) as usize;
    let mask = 0x80u8 >> (bit & 7);
    let on = cx.get_with(cx.args[1], |it| {
        it.and_then(|it| it.value.get(byte).copied())
            .is_some_and(|b| b & mask != 0)
    })?;
    cx.r.int(on as i64);
    Ok(())
}

/// BITCOUNT key [start end [BYTE | BIT]]: Redis's `bitcountCommand`
/// (negative indexes from the end, clamped; BIT counts in bits).
pub(super) fn bitcount(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let range = match cx.args.len() {
        2 => None,
        4 | 5 => {
            let (start, end) = (cx.int(2)?, cx.int(3)?);
            let bits = match cx.args.get(4) {
                None => false,
                Some(a) if eq_ic(a, "bit") => true,
                Some(a) if eq_ic(a, "byte") => false,
                Some(_) => return Err(CmdError::Syntax),
            };
            Some((start, end, bits))
        }
        _ => return Err(CmdError::Syntax),
    };
    let n = cx.get_with(cx.args[1], |it| {
        it.map_or(0, |it| count_bits(it.value, range))
    })?;
    cx.r.int(n as i64);
    Ok(())
}

/// The set bits of `v`, in `range` (start, end, in bits) if given.
fn count_bits(v: &[u8], range: Option<(i64, i64, bool)>) -> u64 {
    let Some((mut start, mut end, bits)) = range else {
        return v.iter().map(|b| u64::from(b.count_ones())).sum();
    };
    if start < 0 && end < 0 && start > end {
        return 0;
    }
    let total = if bits {
        (v.len() as i64) << 3
    } else {
        v.len() as i64
    };
    if start < 0 {
        start = start.saturating_add(total);
    }
    if end < 0 {
        end = end.saturating_add(total);
    }
    start = start.max(0);
    end = end.max(0).min(total - 1);
    if start > end {
        return 0;
    }
    let ones = |bytes: &[u8]| -> u64 { bytes.iter().map(|b| u64::from(b.count_ones())).sum() };
    if !bits {
        return ones(&v[start as usize..=end as usize]);
    }
    // Whole bytes between the edges; the edge bytes masked to the range
    // (bit 0 is a byte's top bit), as Redis does.
    let (first, last) = ((start >> 3) as usize, (end >> 3) as usize);
    let head = 0xFFu8 >> (start & 7);
    let tail = 0xFFu8 << (7 - (end & 7));
    if first == last {
        return u64::from((v[first] & head & tail).count_ones());
    }
    u64::from((v[first] & head).count_ones())
        + ones(&v[first + 1..last])
        + u64::from((v[last] & tail).count_ones())
}

#[cfg(test)]
mod tests {
    use super::count_bits;

    #[test]
    fn bitcount_ranges_follow_redis() {
        // "foobar": Redis's documented examples.
        let v = b"foobar";
        assert_eq!(count_bits(v, None), 26);
        assert_eq!(count_bits(v, Some((0, 0, false))), 4);
        assert_eq!(count_bits(v, Some((1, 1, false))), 6);
        assert_eq!(count_bits(v, Some((1, 1, true))), 1);
        assert_eq!(count_bits(v, Some((5, 30, true))), 17);
        assert_eq!(count_bits(v, Some((-1, -1, false))), 4);
        assert_eq!(count_bits(v, Some((-2, -1, false))), 7);
        assert_eq!(count_bits(v, Some((-1, -2, false))), 0);
        assert_eq!(count_bits(v, Some((0, 100, false))), 26);
        assert_eq!(count_bits(v, Some((10, 20, false))), 0);
        assert_eq!(count_bits(b"", Some((0, -1, false))), 0);
        // Bit ranges against counting bit by bit.
        let v = b"\x5a\xff\x01\x80\x3c";
        let total = (v.len() * 8) as i64;
        for s in 0..total {
            for e in s..total {
                let want = (s..=e)
                    .filter(|&i| v[(i >> 3) as usize] & (0x80u8 >> (i & 7)) != 0)
                    .count() as u64;
                assert_eq!(count_bits(v, Some((s, e, true))), want, "{s}..={e}");
            }
        }
    }
}
