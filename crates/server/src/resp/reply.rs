//! RESP reply encoding, RESP2 or RESP3 as the connection negotiated (HELLO).
//! Every reply a command sends is built from these functions.

use crate::turn::{SEND_SHARED_FROM, SendShared};

/// A reply writer over the connection's output buffer.
pub(crate) struct Reply<'a> {
    pub out: &'a mut Vec<u8>,
    pub resp3: bool,
}

impl Reply<'_> {
    /// A type byte, a decimal integer and CRLF: every length and count
    /// header (`itoa`: the formatting machinery costs more than the reply
    /// on a pipelined GET).
    fn header(&mut self, kind: u8, n: impl itoa::Integer) {
        self.out.push(kind);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn simple(&mut self, s: &str) {
        self.out.push(b'+');
        self.out.extend_from_slice(s.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// An error reply; `msg` starts with its code (`ERR ...`, `NOAUTH ...`).
    /// Newlines cannot appear in an error line, so they become spaces.
    pub fn error(&mut self, msg: &str) {
        self.out.push(b'-');
        for b in msg.bytes() {
            self.out
                .push(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    /// `header` for a count or length: those below 100 (keys, small
    /// values, small arrays) are written as fixed-size pieces, which compile
    /// to plain stores instead of a formatting call and a copy.
    #[inline]
    fn count(&mut self, kind: u8, n: usize) {
        if n < 10 {
            self.out
                .extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']);
        } else if n < 100 {
            let (tens, ones) = (b'0' + (n / 10) as u8, b'0' + (n % 10) as u8);
            self.out
                .extend_from_slice(&[kind, tens, ones, b'\r', b'\n']);
        } else {
            self.header(kind, n);
        }
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.count(b'$', b.len());
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    /// A bulk string of a value the store shares (`shared`): left in
    /// `send` to be sent from its own bytes if it is large and `send` is
    /// free, copied otherwise.
    pub fn bulk_shared(&mut self, shared: &bytes::Bytes, send: Option<&SendShared>) {
        let Some(send) = send.filter(|_| shared.len() >= SEND_SHARED_FROM) else {
            return self.bulk(shared);
        };
        let mut send = send.borrow_mut();
        if send.is_some() {
            return self.bulk(shared);
        }
        self.count(b'$', shared.len());
        *send = Some((self.out.len(), shared.clone()));
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn bulk_str(&mut self, s: &str) {
        self.bulk(s.as_bytes());
    }

    /// A null where a bulk string was expected.
    pub fn null(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// A null where an array was expected.
    pub fn null_array(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    pub fn array(&mut self, n: usize) {
        self.count(b'*', n);
    }

    /// A map of `n` pairs (a flat array of 2n in RESP2).
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n);
        } else {
            self.header(b'*', 2 * n);
        }
    }

    /// A double: RESP3's `,`, a bulk string in RESP2, written as Redis
    /// 7.0's `addReplyDouble` does (C's `%.17g`).
    pub fn double(&mut self, d: f64) {
        let text = g17(d);
        if self.resp3 {
            self.out.push(b',');
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk_str(&text);
        }
    }

    /// A set of `n` members (an array in RESP2).
    pub fn set(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'~', n);
        } else {
            self.header(b'*', n);
        }
    }

    /// Text for humans (INFO): a verbatim string in RESP3.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.header(b'=', text.len() + 4);
            self.out.extend_from_slice(b"txt:");
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_encodings() {
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: false,
        };
        r.null();
        r.null_array();
        r.map(1);
        r.bulk(b"ab");
        r.int(-3);
        r.error("ERR x\ny");
        r.verbatim("hi");
        assert_eq!(
            out,
            b"$-1\r\n*-1\r\n*2\r\n$2\r\nab\r\n:-3\r\n-ERR x y\r\n$2\r\nhi\r\n"
        );
        // Lengths on each of `count`'s paths (one digit, two, the general
        // one), then the integer extremes and counts on each path.
        for len in [0, 1, 9, 10, 11, 63, 64, 65, 99, 100, 101, 1000, 100_000] {
            let mut out = Vec::new();
            let b = vec![b'x'; len];
            Reply {
                out: &mut out,
                resp3: false,
            }
            .bulk(&b);
            let mut want = format!("${len}\r\n").into_bytes();
            want.extend_from_slice(&b);
            want.extend_from_slice(b"\r\n");
            assert_eq!(out, want, "bulk of {len}");
        }
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: false,
        };
        r.int(i64::MIN);
        r.int(i64::MAX);
        r.array(usize::MAX);
        for n in [0, 9, 10, 99, 100] {
            r.array(n);
        }
        assert_eq!(
            out,
            format!(
                ":{}\r\n:{}\r\n*{}\r\n*0\r\n*9\r\n*10\r\n*99\r\n*100\r\n",
                i64::MIN,
                i64::MAX,
                usize::MAX
            )
            .into_bytes()
        );
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: true,
        };
        r.null();
        r.map(1);
        r.set(2);
        r.verbatim("hi");
        assert_eq!(out, b"_\r\n%1\r\n~2\r\n=6\r\ntxt:hi\r\n");
    }
}

/// C's `printf("%.17g", d)` for a finite double: 17 significant digits,
/// fixed notation for exponents from -4 to 16, trailing zeros dropped.
fn g17(d: f64) -> String {
    if !d.is_finite() {
        return d.to_string();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{d:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("an exponent");
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let body = if (-4..17).contains(&exp) {
        if exp < 0 {
            trim(format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits))
        } else {
            let (int, frac) = digits.split_at(exp as usize + 1);
            trim(format!("{int}.{frac}"))
        }
    } else {
        let m = trim(format!("{}.{}", &digits[..1], &digits[1..]));
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    };
    if neg { format!("-{body}") } else { body }
}

#[cfg(test)]
mod g17_tests {
    #[test]
    fn seventeen_significant_digits_as_c_writes_them() {
        for (d, want) in [
            (0.003, "0.0030000000000000001"),
            (0.015, "0.014999999999999999"),
            (1.5, "1.5"),
            (12.0, "12"),
            (1e20, "1e+20"),
            (1.25e-7, "1.2499999999999999e-07"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(super::g17(d), want, "{d}");
        }
    }
}
