//! What MONITOR shows of a memcached request: the command's word and its
//! arguments as the text protocol would send them, so that a watcher sees
//! memcached clients beside RESP ones in one stream. Binary requests are
//! shown under the text command they match; authentication secrets are
//! redacted, as Redis redacts AUTH.

use std::borrow::Cow;

use super::binary::BinCmd;
use super::names;
use super::parse::{self, Request};

/// The words of `req` (its command word first); None for a part of a
/// retrieval line after its first (a line is shown once, with the keys of
/// its first part).
pub fn words<'r>(req: &'r Request<'_>) -> Option<Vec<Cow<'r, [u8]>>> {
    let id = names::of(req)?;
    let mut w: Vec<Cow<'r, [u8]>> = vec![Cow::Borrowed(names::NAMES[id].as_bytes())];
    let num = |n: i128| Cow::Owned(n.to_string().into_bytes());
    match req {
        Request::Get { exptime, keys, .. } => {
            if matches!(names::NAMES[id], "gat" | "gats") {
                w.push(num(*exptime as i128));
            }
            w.extend(parse::keys(keys).map(Cow::Borrowed));
        }
        Request::Store {
            key,
            flags,
            exptime,
            cas,
            data,
            ..
        } => {
            let cas = (names::NAMES[id] == "cas").then_some(*cas);
            store(&mut w, key, *flags, *exptime, cas, data);
        }
        Request::Delete { key, .. } => w.push(Cow::Borrowed(*key)),
        Request::Arith { key, delta, .. } => w.extend([Cow::Borrowed(*key), num(*delta as i128)]),
        Request::Touch { key, exptime, .. } => {
            w.extend([Cow::Borrowed(*key), num(*exptime as i128)]);
        }
        Request::FlushAll { delay, .. } => w.push(num(*delay as i128)),
        Request::Stats { args } => w.extend(parse::keys(args).map(Cow::Borrowed)),
        Request::MetaGet { key, flags }
        | Request::MetaDelete { key, flags }
        | Request::MetaArith { key, flags } => {
            w.push(Cow::Owned(key.bytes().to_vec()));
            w.extend(flags.iter().map(Cow::Borrowed));
        }
        Request::MetaSet { key, flags, data } => {
            w.push(Cow::Owned(key.bytes().to_vec()));
            w.extend(flags.iter().map(Cow::Borrowed));
            w.push(Cow::Borrowed(*data));
        }
        Request::MetaDebug { key } => w.push(Cow::Owned(key.bytes().to_vec())),
        Request::Auth { .. } => w.push(Cow::Borrowed(b"(redacted)")),
        Request::Binary(b) => binary(&b.cmd, &mut w),
        _ => {}
    }
    Some(w)
}

/// A storage command's words after its name, as its text line and data
/// block give them: key, flags, exptime, length, [cas], data.
fn store<'r>(
    w: &mut Vec<Cow<'r, [u8]>>,
    key: &'r [u8],
    flags: u32,
    exptime: i64,
    cas: Option<u64>,
    data: &'r [u8],
) {
    let num = |n: i128| Cow::Owned(n.to_string().into_bytes());
    w.extend([Cow::Borrowed(key), num(flags as i128)]);
    w.extend([num(exptime as i128), num(data.len() as i128)]);
    w.extend(cas.map(|c| num(c as i128)));
    w.push(Cow::Borrowed(data));
}

fn binary<'r>(cmd: &'r BinCmd<'_>, w: &mut Vec<Cow<'r, [u8]>>) {
    let num = |n: i128| Cow::Owned(n.to_string().into_bytes());
    match cmd {
        BinCmd::Get { key, .. } | BinCmd::Delete { key, .. } => w.push(Cow::Borrowed(*key)),
        BinCmd::Touch { key, exptime, .. } => {
            w.extend([Cow::Borrowed(*key), num(*exptime as i128)]);
        }
        BinCmd::Store {
            key,
            flags,
            exptime,
            cas,
            data,
            ..
        } => store(w, key, *flags, *exptime, (*cas != 0).then_some(*cas), data),
        BinCmd::Arith { key, delta, .. } => w.extend([Cow::Borrowed(*key), num(*delta as i128)]),
        BinCmd::Flush { delay } => w.push(num(*delay as i128)),
        BinCmd::Stat { group } if !group.is_empty() => w.push(Cow::Borrowed(*group)),
        BinCmd::SaslAuth { .. } => w.push(Cow::Borrowed(b"(redacted)")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::types::StoreCmd;

    fn text(req: &Request<'_>) -> Vec<String> {
        words(req)
            .unwrap()
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    }

    #[test]
    fn a_storage_command_shows_its_line_and_data() {
        let req = Request::Store {
            cmd: StoreCmd::Cas,
            key: b"k",
            flags: 5,
            exptime: -1,
            cas: 42,
            data: b"hello",
            noreply: false,
        };
        assert_eq!(text(&req), ["cas", "k", "5", "-1", "5", "42", "hello"]);
    }

    #[test]
    fn secrets_are_redacted_and_later_parts_not_shown() {
        let auth = Request::Auth {
            user: b"u",
            pass: b"secret",
        };
        assert_eq!(text(&auth), ["auth", "(redacted)"]);
        let part = Request::Get {
            kind: parse::GetKind::Get,
            exptime: 0,
            keys: b"a b",
            first: false,
            last: true,
            line_left: 4,
        };
        assert!(words(&part).is_none());
        let first = Request::Get {
            kind: parse::GetKind::Get,
            exptime: 0,
            keys: b"a b",
            first: true,
            last: true,
            line_left: 0,
        };
        assert_eq!(text(&first), ["get", "a", "b"]);
    }
}
