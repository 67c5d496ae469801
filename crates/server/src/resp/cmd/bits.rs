//! SETRANGE, SETBIT, GETBIT, BITCOUNT, BITPOS: values as byte and bit
//! arrays, with Redis 7's offsets, index rules and errors. The writes are
//! one decided op each (`Op::SetRange`, `Op::SetBit`); the reads go
//! through `Ctx::get_with`, so all five work inside MULTI.

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
    cx.write(&op, move |cx, o| {
        let Outcome::Append { len, .. } = o else {
            unreachable!("a set-range's outcome");
        };
        cx.r.int(len as i64);
        Ok(())
    })
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
    cx.write(&op, move |cx, o| {
        let Outcome::SetBit { old, .. } = o else {
            unreachable!("a set-bit's outcome");
        };
        cx.r.int(old as i64);
        Ok(())
    })
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

/// A range's unit: BIT (true) or BYTE, the default.
fn in_bits(unit: Option<&&[u8]>) -> Result<bool, CmdError> {
    match unit {
        None => Ok(false),
        Some(a) if eq_ic(a, "bit") => Ok(true),
        Some(a) if eq_ic(a, "byte") => Ok(false),
        Some(_) => Err(CmdError::Syntax),
    }
}

/// Redis's index rules for a range over `total` units: negative indexes
/// count from the end, both are clamped into the value; None when
/// nothing is left.
fn clamp(mut start: i64, mut end: i64, total: i64) -> Option<(i64, i64)> {
    if start < 0 {
        start = start.saturating_add(total);
    }
    if end < 0 {
        end = end.saturating_add(total);
    }
    start = start.max(0);
    end = end.max(0).min(total - 1);
    (start <= end).then_some((start, end))
}

/// BITCOUNT key [start end [BYTE | BIT]]: Redis's `bitcountCommand`
/// (negative indexes from the end, clamped; BIT counts in bits).
pub(super) fn bitcount(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let range = match cx.args.len() {
        2 => None,
        4 | 5 => {
            let (start, end) = (cx.int(2)?, cx.int(3)?);
            Some((start, end, in_bits(cx.args.get(4))?))
        }
        _ => return Err(CmdError::Syntax),
    };
    let n = cx.get_with(cx.args[1], |it| {
        it.map_or(0, |it| count_bits(it.value, range))
    })?;
    cx.r.int(n as i64);
    Ok(())
}

/// BITPOS key bit [start [end [BYTE | BIT]]]: the first bit set to `bit`.
pub(super) fn bitpos(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let want = match cx.int(2)? {
        0 => false,
        1 => true,
        _ => return Err(CmdError::err("The bit argument must be 1 or 0.")),
    };
    // Parsed before the key is looked at (Redis 7.2 does), so a missing
    // key gets the same errors.
    let range = match cx.args.len() {
        3 => None,
        4..=6 => {
            let start = cx.int(3)?;
            let end = if cx.args.len() >= 5 {
                Some(cx.int(4)?)
            } else {
                None
            };
            Some((start, end, in_bits(cx.args.get(5))?))
        }
        _ => return Err(CmdError::Syntax),
    };
    let pos = cx.get_with(cx.args[1], |it| match it {
        Some(it) => find_bit(it.value, want, range),
        // An absent key is an endless run of zero bits.
        None => {
            if want {
                -1
            } else {
                0
            }
        }
    })?;
    cx.r.int(pos);
    Ok(())
}

/// Redis's BITPOS over `v`: the first bit equal to `want` in `range`
/// (start, end if given, in bits if true), or -1. Looking for a clear bit
/// without an end, the bits past the value count as clear.
fn find_bit(v: &[u8], want: bool, range: Option<(i64, Option<i64>, bool)>) -> i64 {
    let len = v.len() as i64;
    let (first, last, end_given) = match range {
        None => (0, len * 8 - 1, false),
        Some((start, end, bits)) => {
            let total = if bits { len * 8 } else { len };
            let Some((start, last)) = clamp(start, end.unwrap_or(total - 1), total) else {
                return -1;
            };
            if bits {
                (start, last, end.is_some())
            } else {
                (start * 8, last * 8 + 7, end.is_some())
            }
        }
    };
    if first > last {
        return -1;
    }
    // A byte without the wanted bit is skipped whole.
    let skip = if want { 0x00 } else { 0xFF };
    let mut i = first;
    while i <= last {
        let byte = v[(i >> 3) as usize];
        if i & 7 == 0 && i + 7 <= last && byte == skip {
            i += 8;
            continue;
        }
        if (byte & (0x80u8 >> (i & 7)) != 0) == want {
            return i;
        }
        i += 1;
    }
    if want || end_given { -1 } else { len * 8 }
}

/// The set bits of `v`, in `range` (start, end, in bits) if given.
fn count_bits(v: &[u8], range: Option<(i64, i64, bool)>) -> u64 {
    let Some((start, end, bits)) = range else {
        return v.iter().map(|b| u64::from(b.count_ones())).sum();
    };
    // Redis's: both from the end and crossed is empty, even where
    // clamping would uncross them.
    if start < 0 && end < 0 && start > end {
        return 0;
    }
    let total = if bits {
        (v.len() as i64) << 3
    } else {
        v.len() as i64
    };
    let Some((start, end)) = clamp(start, end, total) else {
        return 0;
    };
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
    use super::{count_bits, find_bit};

    #[test]
    fn bitpos_follows_redis() {
        // Redis's documented examples.
        assert_eq!(find_bit(b"\xff\xf0\x00", false, None), 12);
        let v = b"\x00\xff\xf0";
        assert_eq!(find_bit(v, true, Some((0, None, false))), 8);
        assert_eq!(find_bit(v, true, Some((2, None, false))), 16);
        assert_eq!(find_bit(v, true, Some((2, Some(-1), false))), 16);
        assert_eq!(find_bit(v, true, Some((7, Some(15), true))), 8);
        assert_eq!(find_bit(b"\x00\x00\x00", true, None), -1);
        // Redis's tests: no clear bit: past the end without an end given,
        // -1 with one.
        assert_eq!(find_bit(b"\xff\xff\xff", false, None), 24);
        assert_eq!(find_bit(b"\xff\xff\xff", false, Some((0, None, false))), 24);
        assert_eq!(
            find_bit(b"\xff\xff\xff", false, Some((0, Some(-1), false))),
            -1
        );
        assert_eq!(find_bit(b"", false, None), -1);
        assert_eq!(find_bit(b"\x00", true, Some((1, Some(0), false))), -1);
        // Against a bit-by-bit search, over every range of a value.
        let v = b"\x5a\xff\x00\x80\x3c\xff";
        let total = (v.len() * 8) as i64;
        let bit = |i: i64| v[(i >> 3) as usize] & (0x80u8 >> (i & 7)) != 0;
        for want in [false, true] {
            for s in -total - 2..total + 2 {
                for e in [None, Some(-1), Some(0), Some(3), Some(9), Some(total + 5)]
                    .into_iter()
                    .chain((-total..total).map(Some))
                {
                    let (mut a, mut b) = (s, e.unwrap_or(total - 1));
                    if a < 0 {
                        a += total;
                    }
                    if b < 0 {
                        b += total;
                    }
                    let (a, b) = (a.max(0), b.max(0).min(total - 1));
                    let found = (a..=b).find(|&i| bit(i) == want);
                    let expect = match found {
                        _ if a > b => -1,
                        Some(i) => i,
                        None if !want && e.is_none() => total,
                        None => -1,
                    };
                    assert_eq!(
                        find_bit(v, want, Some((s, e, true))),
                        expect,
                        "{want} {s} {e:?}"
                    );
                }
            }
        }
    }

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
        assert_eq!(count_bits(v, Some((-10, -20, false))), 0);
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
