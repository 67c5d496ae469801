//! `lru_crawler metadump` and `stats cachedump`: one line of metadata per
//! live item, in memcached's formats, then `END` (`memcdump` lists keys
//! with `stats cachedump`, other tools with metadump).
//!
//! memcached's crawler walks its LRUs in the background while the
//! connection waits; here the keyspace is read in key order, `PART_ITEMS`
//! items per part, each part a short read of its own that resumes after the
//! last key the previous part wrote. The request line stays unconsumed
//! until the last part: the pipeline stops between parts once the replies
//! pass the reply budget and resumes when the client has read them, so a
//! dump of any size holds at most one budget of lines. As memcached's
//! crawl, it is not one snapshot: an item written or deleted during the
//! dump may or may not be listed. On a cluster node a part across ranges
//! reads them at one timestamp, and one that waits for ranges held elsewhere
//! parks its connection, as any read that waits for another node does.

use std::io::Write as _;
use std::ops::Bound;

use combkv::{ItemView, Range};

use super::Rejected;
use super::parse::Request;
use crate::turn::{Cx, Step};

/// Items per part: one read of the tree, a few tens of KiB of lines.
const PART_ITEMS: usize = 512;

/// A dump being answered.
#[derive(Debug)]
pub(super) struct Dump {
    /// The classes named hold class 1, where every item is (see
    /// `stats::write_items`); otherwise the dump is empty.
    class_one: bool,
    /// `stats cachedump`'s format and the items it may still list (`None`:
    /// no limit); `None`: metadump's.
    cachedump: Option<Option<u32>>,
    /// The request line's bytes, its newline included: consumed after the
    /// last part.
    line: usize,
    /// The last key a part wrote; the next part starts after it.
    after: Option<Vec<u8>>,
    /// `END` was written.
    done: bool,
}

impl Dump {
    pub(super) fn new(class_one: bool, cachedump: Option<u32>, line: usize) -> Dump {
        Dump {
            class_one,
            cachedump: cachedump.map(|limit| (limit > 0).then_some(limit)),
            line,
            after: None,
            done: false,
        }
    }

    /// What the parser answers while this dump is on: its next part (no
    /// input consumed), or, once it ended, the request line, skipped.
    pub(super) fn next_step<'a>(&self) -> Step<Request<'a>, Rejected> {
        if self.done {
            Step::Skip(self.line)
        } else {
            Step::Request(
                Request::MetaDump {
                    class_one: self.class_one,
                    cachedump: None,
                },
                0,
            )
        }
    }

    pub(super) fn finished(&self) -> bool {
        self.done
    }

    /// Writes the next part's lines, and `END` after the last item.
    pub(super) fn part(&mut self, cx: &Cx<'_>, out: &mut Vec<u8>) {
        if !self.class_one {
            return self.end(out);
        }
        let start = match &self.after {
            Some(k) => Bound::Excluded(k.clone()),
            None => Bound::Unbounded,
        };
        let range = Range::new(start, Bound::Unbounded).with_limit(PART_ITEMS);
        let mut last = Vec::new();
        let mut limit_hit = false;
        // On a cluster node a part that reads ranges held elsewhere parks
        // the connection (its items are visited only once every range
        // answered) and runs again, from the same key, when they have.
        let seen = cx.keyspace().scan(&range, |it| {
            match &mut self.cachedump {
                None => write_line(out, &it),
                Some(left) => {
                    if write_item(out, &it) {
                        *left = left.map(|n| n - 1);
                    }
                    limit_hit = *left == Some(0);
                }
            }
            last.clear();
            last.extend_from_slice(it.key);
            !limit_hit
        });
        match seen {
            Err(e) if crate::node::park::is_parked(&e) => {}
            Ok(n) if n == PART_ITEMS && !limit_hit => self.after = Some(last),
            Ok(_) => self.end(out),
            Err(e) => {
                // Not expected (the bounds are keys the store holds): the
                // dump ends with the error instead of `END`.
                super::cmd::error_line(cx, out, &super::error::McError::from(e));
                self.done = true;
            }
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"END\r\n");
        self.done = true;
    }
}

/// One item's line, as memcached's `crawler_metadump_eval` writes it (a
/// bare `\n` ends it). combkv keeps no last-access time (`la=0`) and no
/// fetched bit (`fetch=no`); `size` is the key's and value's bytes, where
/// memcached counts its item header too.
fn write_line(out: &mut Vec<u8>, it: &ItemView<'_>) {
    out.extend_from_slice(b"key=");
    uri_encode(out, it.key);
    let exp = it.expires_at_ms.map_or(-1, |ms| (ms / 1000) as i64);
    let _ = writeln!(
        out,
        " exp={exp} la=0 cas={} fetch=no cls=1 size={}",
        it.version.get(),
        it.key.len() + it.value.len()
    );
}

/// One item's `stats cachedump` line, as memcached's `item_cachedump`
/// writes it: the key as it is, the value's bytes, the expiry as a unix
/// time (0: none). A key the text protocol cannot carry (a space or a
/// control byte in it, or longer than memcached's 250 bytes: one written
/// over RESP) is left out, as it would break the reply's framing; false
/// then. metadump lists it, URL-encoded.
fn write_item(out: &mut Vec<u8>, it: &ItemView<'_>) -> bool {
    let printable = it.key.iter().all(|&b| b > b' ' && b != 0x7f);
    if !printable || it.key.len() > super::parse::MEMCACHED_MAX_KEY {
        return false;
    }
    out.extend_from_slice(b"ITEM ");
    out.extend_from_slice(it.key);
    let exp = it.expires_at_ms.map_or(0, |ms| ms / 1000);
    let _ = write!(out, " [{} b; {exp} s]\r\n", it.value.len());
    true
}

/// memcached's `uriencode`: letters, digits and `-._~` as they are, every
/// other byte as `%XX` (upper-case hex).
pub(crate) fn uri_encode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        uri_encode(&mut out, b"a%b c/\xff-._~Z9\r\n");
        assert_eq!(out, b"a%25b%20c%2F%FF-._~Z9%0D%0A");
    }

    #[test]
    fn a_cachedump_line_is_memcacheds_and_skips_keys_it_cannot_carry() {
        let item = |key: &'static [u8]| ItemView {
            key,
            value: b"abc",
            version: combkv::Version(1),
            expires_at_ms: None,
            flags: 0,
        };
        let mut out = Vec::new();
        assert!(write_item(&mut out, &item(b"k%1")));
        assert!(!write_item(&mut out, &item(b"a b")));
        assert!(!write_item(&mut out, &item(b"a\nb")));
        let long = [b'x'; 251];
        let long_item = ItemView {
            key: &long,
            ..item(b"")
        };
        assert!(!write_item(&mut out, &long_item));
        assert_eq!(out, b"ITEM k%1 [3 b; 0 s]\r\n");
    }

    #[test]
    fn a_line_has_memcacheds_fields() {
        let mut out = Vec::new();
        let it = ItemView {
            key: b"k 1",
            value: b"vv",
            version: combkv::Version(7),
            expires_at_ms: Some(1_700_000_000_999),
            flags: 0,
        };
        write_line(&mut out, &it);
        assert_eq!(
            out,
            b"key=k%201 exp=1700000000 la=0 cas=7 fetch=no cls=1 size=5\n"
        );
    }
}
