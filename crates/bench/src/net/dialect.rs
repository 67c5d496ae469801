//! What each network target is sent for each operation of the workloads (`docs/workloads.md`),
//! and how its replies read.
//!
//! | operation | combkv-resp | redis | memcached, combkv-memcached |
//! |---|---|---|---|
//! | read | `GET k` | `GET k` | `get k` |
//! | update, load | `SET k v` | `SET k v` (+ `ZADD idx 0 k` at load when indexed) | `set k 0 0 n` |
//! | insert | `SET k v` | `SET k v` (+ `ZADD idx 0 k` when indexed) | `set k 0 0 n` |
//! | scan (e) | `RANGE [k + LIMIT n` | `ZRANGEBYLEX idx [k + LIMIT 0 n`, then `MGET` of its keys | skipped |
//! | cloud | `RANGE [lo [hi FLOOR` | `ZREVRANGEBYLEX idx [lo - LIMIT 0 1` and `ZRANGEBYLEX idx (lo [hi` (one round trip), then `MGET` of the floor and range keys | skipped |
//!
//! Redis keeps the index sorted set only in workloads that scan (e, cloud):
//! a Redis user who never orders keys would not pay for one.

use std::fmt;

use super::memcache::{self, Expect};
use super::resp::{self, Frame, Items};

/// The sorted set holding every key, for Redis scans. Bench keys are hex
/// digits (and a `-combkv-padding-` suffix), so no record key collides.
pub const INDEX_KEY: &[u8] = b"combkv-bench:index";

/// How the bench speaks to one network target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// combkv over RESP: GET/SET, and RANGE for both kinds of scan.
    Combkv,
    /// redis-server: GET/SET; with `index`, every key is also a member of
    /// the sorted set [`INDEX_KEY`], which scans read.
    Redis { index: bool },
    /// The memcached text protocol (memcached and combkv's memcached
    /// listener): get/set only.
    Memcache,
}

/// One reply, in either protocol.
#[derive(Debug)]
pub enum Reply<'a> {
    Resp(Frame<'a>),
    Memcache(memcache::Reply<'a>),
}

impl fmt::Display for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Resp(r) => write!(f, "{r}"),
            Reply::Memcache(r) => write!(f, "{r}"),
        }
    }
}

impl<'a> Reply<'a> {
    /// The answer to a read: the value, or `None` for a miss.
    pub fn value(self) -> Result<Option<&'a [u8]>, String> {
        match self {
            Reply::Resp(Frame::Bulk(v)) | Reply::Memcache(memcache::Reply::Value(v)) => Ok(Some(v)),
            Reply::Resp(Frame::Null) | Reply::Memcache(memcache::Reply::Miss) => Ok(None),
            other => Err(format!("a read got {other}")),
        }
    }

    /// The answer to a write: `+OK` or `STORED`.
    pub fn stored(&self) -> Result<(), String> {
        match self {
            Reply::Resp(Frame::Simple(b"OK")) | Reply::Memcache(memcache::Reply::Stored) => Ok(()),
            other => Err(format!("a write got {other}")),
        }
    }

    /// The answer to `ZADD` of a new member: `:1`.
    pub fn added(&self) -> Result<(), String> {
        match self {
            Reply::Resp(Frame::Integer(1)) => Ok(()),
            other => Err(format!("ZADD of a new key got {other}")),
        }
    }

    /// The elements of an array answer.
    pub fn items(self) -> Result<Items<'a>, String> {
        match self {
            Reply::Resp(Frame::Array(items)) => Ok(items),
            other => Err(format!("expected an array, got {other}")),
        }
    }
}

/// A bulk string element of an array answer.
pub fn bulk<'a>(f: Frame<'a>) -> Result<&'a [u8], String> {
    match f {
        Frame::Bulk(b) => Ok(b),
        other => Err(format!("expected a bulk string in the array, got {other}")),
    }
}

impl Dialect {
    /// Whether replies are RESP.
    #[inline]
    pub fn is_resp(self) -> bool {
        !matches!(self, Dialect::Memcache)
    }

    /// Parses the reply at the start of `buf` to a request that `expect`s
    /// a memcached `get` or `set` answer (RESP needs no hint); `None` if
    /// more bytes are needed.
    #[inline]
    pub fn parse(self, buf: &[u8], expect: Expect) -> Result<Option<(Reply<'_>, usize)>, String> {
        if self.is_resp() {
            resp::parse(buf)
                .map(|r| r.map(|(f, n)| (Reply::Resp(f), n)))
                .map_err(|e| e.to_string())
        } else {
            memcache::parse(buf, expect)
                .map(|r| r.map(|(f, n)| (Reply::Memcache(f), n)))
                .map_err(|e| e.to_string())
        }
    }

    /// A read of `key`.
    #[inline]
    pub fn get(self, out: &mut Vec<u8>, key: &[u8]) {
        match self {
            Dialect::Memcache => memcache::get(out, key),
            _ => resp::command(out, &[b"GET", key]),
        }
    }

    /// An overwrite of an existing `key`; one reply.
    #[inline]
    pub fn set(self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        match self {
            Dialect::Memcache => memcache::set(out, key, value),
            _ => resp::command(out, &[b"SET", key, value]),
        }
    }

    /// A write of a new `key` (load and insert); returns the number of
    /// replies: the write's, then `ZADD`'s when Redis keeps the index. The
    /// `SET` goes first, so a key the index lists always has its value.
    #[inline]
    pub fn insert(self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) -> u8 {
        self.set(out, key, value);
        if self == (Dialect::Redis { index: true }) {
            resp::command(out, &[b"ZADD", INDEX_KEY, b"0", key]);
            2
        } else {
            1
        }
    }

    /// The first request of a scan of `n` items from `start` (workload e);
    /// one reply.
    pub fn scan(self, out: &mut Vec<u8>, start: &[u8], n: usize, bound: &mut Vec<u8>) {
        bound.clear();
        bound.push(b'[');
        bound.extend_from_slice(start);
        let limit = n.to_string();
        match self {
            Dialect::Combkv => {
                resp::command(out, &[b"RANGE", bound, b"+", b"LIMIT", limit.as_bytes()]);
            }
            Dialect::Redis { .. } => resp::command(
                out,
                &[
                    b"ZRANGEBYLEX",
                    INDEX_KEY,
                    bound,
                    b"+",
                    b"LIMIT",
                    b"0",
                    limit.as_bytes(),
                ],
            ),
            Dialect::Memcache => unreachable!("memcached runs no scans"),
        }
    }

    /// The first requests of a cloud range from the floor of `lo` to `hi`;
    /// returns the number of replies.
    pub fn cloud(self, out: &mut Vec<u8>, lo: &[u8], hi: &[u8], bounds: &mut Vec<u8>) -> u8 {
        // bounds = "[lo" "(lo" "[hi", sliced below.
        bounds.clear();
        bounds.push(b'[');
        bounds.extend_from_slice(lo);
        bounds.push(b'(');
        bounds.extend_from_slice(lo);
        bounds.push(b'[');
        bounds.extend_from_slice(hi);
        let n = lo.len() + 1;
        let (incl_lo, rest) = bounds.split_at(n);
        let (excl_lo, incl_hi) = rest.split_at(n);
        match self {
            Dialect::Combkv => {
                resp::command(out, &[b"RANGE", incl_lo, incl_hi, b"FLOOR"]);
                1
            }
            Dialect::Redis { .. } => {
                // The floor: the greatest key <= lo (ZREVRANGEBYLEX takes the
                // upper bound first). Then the keys above lo up to hi. The
                // two answers together are what RANGE [lo [hi FLOOR returns.
                resp::command(
                    out,
                    &[
                        b"ZREVRANGEBYLEX",
                        INDEX_KEY,
                        incl_lo,
                        b"-",
                        b"LIMIT",
                        b"0",
                        b"1",
                    ],
                );
                resp::command(out, &[b"ZRANGEBYLEX", INDEX_KEY, excl_lo, incl_hi]);
                2
            }
            Dialect::Memcache => unreachable!("memcached runs no scans"),
        }
    }

    /// `MGET` of the keys `keys[ends[k-1]..ends[k]]` (Redis scans' second
    /// step); one reply.
    pub fn mget(out: &mut Vec<u8>, keys: &[u8], ends: &[usize]) {
        resp::command_header(out, 1 + ends.len());
        resp::arg(out, b"MGET");
        let mut at = 0;
        for &end in ends {
            resp::arg(out, &keys[at..end]);
            at = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: &[u8]) -> String {
        String::from_utf8_lossy(out).replace("\r\n", " ")
    }

    #[test]
    fn scans_are_range_on_combkv_and_index_reads_on_redis() {
        let (mut out, mut b) = (Vec::new(), Vec::new());
        Dialect::Combkv.scan(&mut out, b"k1", 7, &mut b);
        assert_eq!(text(&out), "*5 $5 RANGE $3 [k1 $1 + $5 LIMIT $1 7 ");
        out.clear();
        assert_eq!(Dialect::Combkv.cloud(&mut out, b"lo", b"hi", &mut b), 1);
        assert_eq!(text(&out), "*4 $5 RANGE $3 [lo $3 [hi $5 FLOOR ");
        out.clear();
        let redis = Dialect::Redis { index: true };
        redis.scan(&mut out, b"k1", 7, &mut b);
        assert!(
            text(&out)
                .contains("ZRANGEBYLEX $18 combkv-bench:index $3 [k1 $1 + $5 LIMIT $1 0 $1 7")
        );
        out.clear();
        assert_eq!(redis.cloud(&mut out, b"lo", b"hi", &mut b), 2);
        let t = text(&out);
        assert!(
            t.contains("ZREVRANGEBYLEX $18 combkv-bench:index $3 [lo $1 - $5 LIMIT $1 0 $1 1"),
            "{t}"
        );
        assert!(
            t.contains("ZRANGEBYLEX $18 combkv-bench:index $3 (lo $3 [hi "),
            "{t}"
        );
        out.clear();
        assert_eq!(redis.insert(&mut out, b"k", b"v"), 2);
        assert_eq!(
            Dialect::Redis { index: false }.insert(&mut out, b"k", b"v"),
            1
        );
        out.clear();
        Dialect::mget(&mut out, b"aabbb", &[2, 5]);
        assert_eq!(text(&out), "*3 $4 MGET $2 aa $3 bbb ");
    }
}
