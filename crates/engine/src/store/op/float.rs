//! INCRBYFLOAT's numbers ([`super::Op::IncrFloat`]): Redis's float syntax,
//! added exactly in decimal, printed as Redis prints them (17 decimal
//! places, trailing zeros trimmed).
//!
//! Redis adds in the C `long double`, whose precision differs between
//! platforms (80-bit on x86-64, 128-bit on arm64), so its last digits are
//! the platform's. Replicas must agree to the byte, so the sum here is
//! exact and only the printed result is rounded (half to even, at the 17th
//! decimal place). Where the `long double` holds the value to 17 places
//! (10.5 + 0.1 = "10.6", 17179869184 + 1.5 = "17179869185.5") both give
//! the same text; where it does not (large integer parts with fractions)
//! Redis prints binary noise and this prints the exact sum.

use std::cmp::Ordering;

/// Redis reads a float of at most this many bytes (`MAX_LONG_DOUBLE_CHARS`
/// less its terminating zero).
const MAX_CHARS: usize = 5 * 1024 - 1;
/// Decimal places printed, as Redis's `%.17Lf`.
const PLACES: i64 = 17;
/// The decimal exponents of the x86 `long double`'s range, which Redis's
/// parse enforces: above its largest (1.1897e4932) is overflow, below its
/// smallest subnormal (3.6e-4951) underflow; both "not a valid float".
const MAX_EXP10: i64 = 4932;
const MIN_EXP10: i64 = -4951;
/// The `long double`'s largest finite value, 1.18973...e4932, by digits.
const MAX_DIGITS: &[u8] = b"118973149535723176502";

/// Why a sum could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatError {
    /// The value or the increment is not a float Redis reads.
    NotAFloat,
    /// The sum is infinite or not a number.
    NanOrInfinity,
}

/// A parsed float: finite, or an infinity (which Redis reads and then
/// refuses as a result).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Float {
    Finite(Decimal),
    Infinite,
}

/// `(-1)^neg × digits × 10^exp`; `digits` (values 0..=9, most significant
/// first) has no leading zero, so zero is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// `value + by` as INCRBYFLOAT stores it.
pub(crate) fn add(value: &[u8], by: &[u8]) -> Result<Vec<u8>, FloatError> {
    let a = parse(value).ok_or(FloatError::NotAFloat)?;
    let b = parse(by).ok_or(FloatError::NotAFloat)?;
    let (Float::Finite(a), Float::Finite(b)) = (a, b) else {
        return Err(FloatError::NanOrInfinity);
    };
    let sum = round(sum(a, b));
    if too_large(&sum) {
        return Err(FloatError::NanOrInfinity);
    }
    Ok(print(&sum))
}

/// Whether Redis reads `s` as a float (INCRBYFLOAT's increment is checked
/// before its write is proposed).
pub fn is_float(s: &[u8]) -> bool {
    parse(s).is_some()
}

/// Redis's `string2ld`: C's `strtold` syntax for the whole string (sign,
/// digits with an optional point, an optional exponent, or `inf` /
/// `infinity`), no leading space, not NaN, not beyond the `long double`'s
/// range. Hexadecimal floats, which `strtold` also reads, are refused.
fn parse(s: &[u8]) -> Option<Float> {
    if s.is_empty() || s.len() > MAX_CHARS {
        return None;
    }
    let (neg, rest) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(Float::Infinite);
    }
    let (mantissa, exponent) = match rest.iter().position(|&c| c == b'e' || c == b'E') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = match mantissa.iter().position(|&c| c == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &[][..]),
    };
    let all_digits = |p: &[u8]| p.iter().all(u8::is_ascii_digit);
    if int.len() + frac.len() == 0 || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let mut exp = match exponent {
        None => 0,
        Some(e) => {
            let (eneg, ed) = match e.first() {
                Some(b'-') => (true, &e[1..]),
                Some(b'+') => (false, &e[1..]),
                _ => (false, e),
            };
            if ed.is_empty() || !all_digits(ed) {
                return None;
            }
            // Saturated: any exponent this large is out of range anyway.
            let n = ed
                .iter()
                .fold(0i64, |n, &d| (n * 10 + i64::from(d - b'0')).min(1 << 40));
            if eneg { -n } else { n }
        }
    };
    exp -= frac.len() as i64;
    let digits: Vec<u8> = int
        .iter()
        .chain(frac)
        .map(|d| d - b'0')
        .skip_while(|&d| d == 0)
        .collect();
    let d = trim(Decimal { neg, digits, exp });
    if too_large(&d) || exp10(&d).is_some_and(|e| e < MIN_EXP10) {
        return None;
    }
    Some(Float::Finite(d))
}

/// Beyond the `long double`'s largest finite value.
fn too_large(d: &Decimal) -> bool {
    match exp10(d) {
        Some(e) if e == MAX_EXP10 => d
            .digits
            .iter()
            .map(|x| x + b'0')
            .gt(MAX_DIGITS.iter().copied()),
        Some(e) => e > MAX_EXP10,
        None => false,
    }
}

/// Drops trailing zero digits into the exponent (and the sign of zero).
fn trim(mut d: Decimal) -> Decimal {
    while d.digits.last() == Some(&0) {
        d.digits.pop();
        d.exp += 1;
    }
    if d.digits.is_empty() {
        d.neg = false;
        d.exp = 0;
    }
    d
}

/// The decimal exponent of the most significant digit (None for zero).
fn exp10(d: &Decimal) -> Option<i64> {
    (!d.digits.is_empty()).then(|| d.exp + d.digits.len() as i64 - 1)
}

/// The exact sum.
fn sum(a: Decimal, b: Decimal) -> Decimal {
    let exp = a.exp.min(b.exp);
    let widen = |d: &Decimal| -> Vec<u8> {
        let mut v = d.digits.clone();
        v.resize(v.len() + (d.exp - exp) as usize, 0);
        v
    };
    let (x, y) = (widen(&a), widen(&b));
    let (neg, digits) = if a.neg == b.neg {
        (a.neg, add_mag(&x, &y))
    } else {
        match cmp_mag(&x, &y) {
            Ordering::Less => (b.neg, sub_mag(&y, &x)),
            _ => (a.neg, sub_mag(&x, &y)),
        }
    };
    let digits = digits.into_iter().skip_while(|&d| d == 0).collect();
    trim(Decimal { neg, digits, exp })
}

fn cmp_mag(x: &[u8], y: &[u8]) -> Ordering {
    // Zero widens to zeros alone: compare without leading zeros, where
    // longer is larger.
    let strip = |v: &[u8]| v.iter().position(|&d| d != 0).map_or(0, |i| v.len() - i);
    let (x, y) = (&x[x.len() - strip(x)..], &y[y.len() - strip(y)..]);
    x.len().cmp(&y.len()).then_with(|| x.cmp(y))
}

/// `x + y`, digit vectors aligned at their last digit.
fn add_mag(x: &[u8], y: &[u8]) -> Vec<u8> {
    let n = x.len().max(y.len());
    let mut out = vec![0u8; n + 1];
    let mut carry = 0u8;
    for i in 0..n {
        let dx = if i < x.len() { x[x.len() - 1 - i] } else { 0 };
        let dy = if i < y.len() { y[y.len() - 1 - i] } else { 0 };
        let s = dx + dy + carry;
        out[n - i] = s % 10;
        carry = s / 10;
    }
    out[0] = carry;
    out
}

/// `x - y` for `x >= y`, aligned at their last digit.
fn sub_mag(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = x.to_vec();
    let mut borrow = 0u8;
    for i in 0..x.len() {
        let dy = if i < y.len() { y[y.len() - 1 - i] } else { 0 } + borrow;
        let j = x.len() - 1 - i;
        if out[j] >= dy {
            out[j] -= dy;
            borrow = 0;
        } else {
            out[j] = out[j] + 10 - dy;
            borrow = 1;
        }
    }
    out
}

/// Rounded half to even at the 17th decimal place.
fn round(d: Decimal) -> Decimal {
    let cut = -PLACES - d.exp;
    if cut <= 0 {
        return d;
    }
    let cut = cut as usize;
    let keep = d.digits.len().saturating_sub(cut);
    let (kept, dropped) = d.digits.split_at(keep);
    // What is dropped against half a unit of the last kept place.
    let half = if dropped.len() < cut {
        Ordering::Less // leading dropped places are zeros
    } else {
        match dropped[0].cmp(&5) {
            Ordering::Equal if dropped[1..].iter().any(|&x| x != 0) => Ordering::Greater,
            o => o,
        }
    };
    let odd = kept.last().is_some_and(|&x| x % 2 == 1);
    let up = half == Ordering::Greater || (half == Ordering::Equal && odd);
    let mut digits = kept.to_vec();
    if up {
        digits = add_mag(&digits, &[1])
            .into_iter()
            .skip_while(|&x| x == 0)
            .collect();
    }
    trim(Decimal {
        neg: d.neg,
        digits,
        exp: -PLACES,
    })
}

/// Plain notation: no exponent, no trailing zeros after the point, no
/// point without a fraction, no "-0".
fn print(d: &Decimal) -> Vec<u8> {
    if d.digits.is_empty() {
        return b"0".to_vec();
    }
    let mut out = Vec::with_capacity(d.digits.len() + 4);
    if d.neg {
        out.push(b'-');
    }
    let ascii = d.digits.iter().map(|x| x + b'0');
    if d.exp >= 0 {
        out.extend(ascii);
        out.resize(out.len() + d.exp as usize, b'0');
        return out;
    }
    let frac = (-d.exp) as usize;
    let n = d.digits.len();
    if n > frac {
        let digits: Vec<u8> = ascii.collect();
        out.extend_from_slice(&digits[..n - frac]);
        out.push(b'.');
        out.extend_from_slice(&digits[n - frac..]);
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + frac - n, b'0');
        out.extend(ascii);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{FloatError, add, is_float};
    use proptest::prelude::*;

    fn sum(a: &str, b: &str) -> Result<String, FloatError> {
        add(a.as_bytes(), b.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn redis_examples_and_tests() {
        // The command reference's example, then Redis's own tests.
        assert_eq!(sum("10.50", "0.1").unwrap(), "10.6");
        assert_eq!(sum("10.6", "-5").unwrap(), "5.6");
        assert_eq!(sum("5.0e3", "2.0e2").unwrap(), "5200");
        assert_eq!(sum("0", "1").unwrap(), "1");
        assert_eq!(sum("1", "0.25").unwrap(), "1.25");
        assert_eq!(sum("1.5", "1.5").unwrap(), "3");
        assert_eq!(sum("17179869184", "1.5").unwrap(), "17179869185.5");
        assert_eq!(sum("17179869184", "17179869184").unwrap(), "34359738368");
        // No negative zero.
        let third = "0.0243902439024390243902439";
        let back = format!("-{third}");
        assert_eq!(sum(&sum("0", third).unwrap(), &back).unwrap(), "0");
        assert_eq!(sum("-0.0", "0").unwrap(), "0");
        assert_eq!(sum("1", "+inf"), Err(FloatError::NanOrInfinity));
        assert_eq!(sum("-inf", "1"), Err(FloatError::NanOrInfinity));
        assert_eq!(sum("Infinity", "-INF"), Err(FloatError::NanOrInfinity));
    }

    #[test]
    fn the_syntax_is_strtolds_with_redis_limits() {
        for ok in [
            "1",
            "-1",
            "+1",
            ".5",
            "5.",
            "-.5e1",
            "1e5",
            "1E+5",
            "1e-5",
            "007",
            "0.000",
            "1e4932",
            "-1e-4950",
            "0e999999999999",
        ] {
            assert!(is_float(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            " 1",
            "1 ",
            "1a",
            "nan",
            "NaN",
            "-nan",
            ".",
            "-",
            "e5",
            "1e",
            "1e+",
            "1.2.3",
            "0x10",
            "1,5",
            "2e4933",
            "1.2e4932",
            "1e-4952",
            "1e99999999999999999999",
        ] {
            assert!(!is_float(bad.as_bytes()), "{bad:?}");
        }
        let long = "1".repeat(5119);
        assert!(!is_float(long.as_bytes()), "over 4932 digits");
        let long = format!("0.{}", "1".repeat(5117));
        assert!(is_float(long.as_bytes()));
        let long = format!("0.{}", "1".repeat(5118));
        assert!(!is_float(long.as_bytes()), "5120 bytes");
    }

    #[test]
    fn results_print_plainly_at_seventeen_places() {
        assert_eq!(sum("0", "1e-17").unwrap(), "0.00000000000000001");
        assert_eq!(sum("0", "1e-18").unwrap(), "0");
        // Half to even at the 17th place.
        assert_eq!(sum("0", "5e-18").unwrap(), "0");
        assert_eq!(sum("0", "1.5e-17").unwrap(), "0.00000000000000002");
        assert_eq!(sum("0", "2.5e-17").unwrap(), "0.00000000000000002");
        assert_eq!(sum("0", "2.5000001e-17").unwrap(), "0.00000000000000003");
        assert_eq!(
            sum("0.99999999999999999", "0.000000000000000009").unwrap(),
            "1"
        );
        assert_eq!(
            sum("-0.99999999999999999", "-0.000000000000000009").unwrap(),
            "-1"
        );
        assert_eq!(sum("1e20", "0").unwrap(), "100000000000000000000");
        assert_eq!(sum("1e20", "-1e20").unwrap(), "0");
        assert_eq!(sum("-3", "1").unwrap(), "-2");
        assert_eq!(sum("1", "-3").unwrap(), "-2");
        assert_eq!(sum("100", "-0.001").unwrap(), "99.999");
        assert_eq!(sum("1e4932", "1e4931").unwrap().len(), 4933);
        assert_eq!(sum("1e4932", "1e4932"), Err(FloatError::NanOrInfinity));
        assert_eq!(sum("1.1e4932", "1e4932"), Err(FloatError::NanOrInfinity));
        assert_eq!(sum("abc", "1"), Err(FloatError::NotAFloat));
        assert_eq!(sum("1", "abc"), Err(FloatError::NotAFloat));
    }

    proptest! {
        /// Against exact integer arithmetic: a / 10^i + b / 10^j.
        #[test]
        fn sums_are_exact(a in -10i64.pow(15)..10i64.pow(15), i in 0u32..=15,
                          b in -10i64.pow(15)..10i64.pow(15), j in 0u32..=15) {
            let text = |n: i128, k: u32| {
                let s = format!("{}", n.unsigned_abs());
                let s = format!("{s:0>width$}", width = k as usize + 1);
                let (int, frac) = s.split_at(s.len() - k as usize);
                let sign = if n < 0 { "-" } else { "" };
                if k == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") }
            };
            let scale = 10i128.pow(15);
            let exact = i128::from(a) * scale / 10i128.pow(i) + i128::from(b) * scale / 10i128.pow(j);
            let mut want = text(exact.abs(), 15);
            if want.contains('.') {
                want = want.trim_end_matches('0').trim_end_matches('.').to_string();
            }
            if exact < 0 {
                want.insert(0, '-');
            }
            prop_assert_eq!(sum(&text(a.into(), i), &text(b.into(), j)).unwrap(), want);
        }
    }
}
