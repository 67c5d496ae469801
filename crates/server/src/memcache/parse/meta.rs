//! The meta commands' lines: mg, ms (with its data block), md, ma, me,
//! and their flags (memcached's `_meta_flag_preparse`).

use super::text::{data_block, no_room, too_large};
use super::token::{Tokens, after_words, decode_key, parse_i32, parse_u32, parse_u64, words};
use super::{
    Key, Limits, LineResult, MAX_OPAQUE, MEMCACHED_MAX_KEY, META_MAX_TOKENS, MetaFlags, Parsed,
    Request, error, key_ok,
};
use crate::memcache::error::McError;

pub(super) fn meta_debug<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() < 3 || toks.t[1].len() > MEMCACHED_MAX_KEY {
        return error(McError::BadFormat);
    }
    let mut key = Key::text(toks.t[1]);
    if toks.ntokens() >= 4 && toks.t[2] == b"b" {
        match decode_key(toks.t[1]) {
            Some(k) => key = k,
            None => return error(McError::BadFormat),
        }
    }
    Ok(Request::MetaDebug { key })
}

/// Which meta command a flag list belongs to (the flags each accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meta {
    Get,
    Set,
    Delete,
    Arith,
}

/// memcached's `_meta_flag_preparse`: every flag once, known flags only,
/// numeric tokens parsed. Flags combkv does not implement (stale items and
/// leases: `mg N R`, `ms I`, `md I`, `E`) are refused as invalid rather
/// than silently ignored. Returns the key (decoded for `b`).
fn meta_flags<'a>(
    which: Meta,
    key: &'a [u8],
    tokens: &'a [u8],
) -> Result<(Key<'a>, MetaFlags<'a>), McError> {
    let mut f = MetaFlags {
        tokens,
        ..MetaFlags::default()
    };
    let mut k = Key::text(key);
    let mut seen = [false; 128];
    let mut err = None;
    for t in words(tokens) {
        let o = t[0];
        if o >= 127 || seen[o as usize] {
            return Err(McError::DuplicateFlag);
        }
        seen[o as usize] = true;
        let arg = &t[1..];
        match o {
            b'b' => match decode_key(key) {
                Some(d) => k = d,
                None => err = Some(McError::KeyDecode),
            },
            b'N' if matches!(which, Meta::Set | Meta::Arith) => match parse_i32(arg) {
                Some(v) => f.vivify = Some(i64::from(v)),
                None => err = Some(McError::BadToken),
            },
            b'T' => match parse_i32(arg) {
                Some(v) => f.ttl = Some(i64::from(v)),
                None => err = Some(McError::BadToken),
            },
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' | b'u' => {}
            b'v' => f.value = true,
            b'q' => f.quiet = true,
            b'F' => match parse_u32(arg) {
                Some(v) => f.client_flags = Some(v),
                None => err = Some(McError::BadFormat),
            },
            b'C' => match parse_u64(arg) {
                Some(v) => f.compare_cas = Some(v),
                None => err = Some(McError::BadToken),
            },
            b'M' => {
                if t.len() != 2 {
                    err = Some(McError::MTokenLength);
                } else {
                    f.mode = Some(t[1]);
                }
            }
            b'J' => match parse_u64(arg) {
                Some(v) => f.initial = Some(v),
                None => err = Some(McError::InitialValue),
            },
            b'D' => match parse_u64(arg) {
                Some(v) => f.delta = Some(v),
                None => err = Some(McError::MetaDelta),
            },
            _ => return Err(McError::InvalidFlag),
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok((k, f)),
    }
}

/// The opaque tokens must be short (memcached checks while replying).
fn check_opaque(f: &MetaFlags<'_>) -> Result<(), McError> {
    if f.iter().any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE) {
        return Err(McError::OpaqueTooLong);
    }
    Ok(())
}

pub(super) fn meta_line<'a>(
    which: u8,
    line: &'a [u8],
    toks: &Tokens<'a>,
    limits: &Limits,
) -> LineResult<'a> {
    if toks.ntokens() < 3 {
        return error(McError::UnknownCommand);
    }
    if !key_ok(toks.t[1], limits) {
        return error(McError::KeyTooLong);
    }
    let which = match which {
        b'g' => Meta::Get,
        b'd' => Meta::Delete,
        _ => Meta::Arith,
    };
    if toks.ntokens() > META_MAX_TOKENS {
        let e = if which == Meta::Get {
            McError::MgFlagsTooLong
        } else {
            McError::FlagsTooLong
        };
        return error(e);
    }
    let (key, flags) = match meta_flags(which, toks.t[1], after_words(line, 2)) {
        Ok(kf) => kf,
        // memcached reports md/ma flag errors with one text.
        Err(e) if which == Meta::Get => return error(e),
        Err(_) => return error(McError::InvalidOrDuplicateFlag),
    };
    if !key_ok(key.bytes(), limits) {
        return error(McError::KeyTooLong);
    }
    check_opaque(&flags).map_err(|e| (e, false, 0))?;
    Ok(match which {
        Meta::Get => Request::MetaGet { key, flags },
        Meta::Delete => Request::MetaDelete { key, flags },
        _ => {
            if let Some(m) = flags.mode
                && !matches!(m, b'I' | b'i' | b'+' | b'D' | b'd' | b'-')
            {
                return error(McError::MaMode);
            }
            Request::MetaArith { key, flags }
        }
    })
}

pub(super) fn meta_set<'a>(
    input: &'a [u8],
    line: &'a [u8],
    toks: &Tokens<'a>,
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let fail = |err, swallow| Parsed::Error {
        err,
        noreply: false,
        consumed: line_len,
        swallow,
    };
    if toks.ntokens() < 3 {
        return fail(McError::UnknownCommand, 0);
    }
    let vlen = (toks.ntokens() > 3)
        .then(|| parse_i32(toks.t[2]).and_then(|v| usize::try_from(v).ok()))
        .flatten();
    let skip = vlen.map_or(0, |v| v + 2);
    if !key_ok(toks.t[1], limits) {
        return fail(McError::KeyTooLong, skip);
    }
    let Some(vlen) = vlen else {
        return fail(McError::BadFormat, 0);
    };
    if toks.ntokens() > META_MAX_TOKENS {
        return fail(McError::FlagsTooLong, 0);
    }
    let (key, flags) = match meta_flags(Meta::Set, toks.t[1], after_words(line, 3)) {
        Ok(kf) => kf,
        Err(e) => return fail(e, skip),
    };
    if !key_ok(key.bytes(), limits) {
        return fail(McError::KeyTooLong, skip);
    }
    if let Err(e) = check_opaque(&flags) {
        return fail(e, skip);
    }
    if let Some(m) = flags.mode
        && !b"EeAaPpRrSs".contains(&m)
    {
        return fail(McError::MsMode, skip);
    }
    if too_large(line_len, vlen, limits) {
        return fail(McError::TooLarge, skip);
    }
    if no_room(vlen, limits) {
        return fail(McError::OutOfMemoryStoring, skip);
    }
    match data_block(input, line_len, vlen) {
        Ok(None) => Parsed::Incomplete {
            scanned: 0,
            wanted: line_len + vlen + 2,
        },
        Err(err) => Parsed::Error {
            err,
            noreply: false,
            consumed: line_len + vlen + 2,
            swallow: 0,
        },
        Ok(Some(data)) => Parsed::Request {
            req: Request::MetaSet { key, flags, data },
            consumed: line_len + vlen + 2,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{err, req};
    use super::*;

    #[test]
    fn meta_flags_are_checked() {
        assert_eq!(err(b"mg k v v\r\n").0, McError::DuplicateFlag);
        assert_eq!(err(b"mg k z\r\n").0, McError::InvalidFlag);
        assert_eq!(err(b"md k z\r\n").0, McError::InvalidOrDuplicateFlag);
        assert_eq!(err(b"mg k Tx\r\n").0, McError::BadToken);
        match req(b"mg a2V5 b v k\r\n") {
            Request::MetaGet { key, flags } => {
                assert_eq!(key.bytes(), b"key");
                assert!(key.is_binary() && flags.value);
            }
            other => panic!("{other:?}"),
        }
    }
}
