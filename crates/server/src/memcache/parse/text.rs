//! The classic text commands' lines: retrievals, storage commands (with
//! their data block), delete, incr/decr, touch, flush_all, verbosity.

use super::token::{Tokens, after_words, parse_i32, parse_u32, parse_u64, words};
use super::{GetKind, Limits, LineResult, Parsed, Request, StoreCmd, error, key_ok, noreply_of};
use crate::memcache::error::McError;

pub(super) fn retrieval<'a>(
    cmd: &[u8],
    line: &'a [u8],
    toks: &Tokens<'a>,
    limits: &Limits,
) -> LineResult<'a> {
    if toks.ntokens() < 3 {
        return error(McError::UnknownCommand);
    }
    let kind = match cmd {
        b"get" => GetKind::Get,
        b"gets" => GetKind::Gets,
        b"gat" => GetKind::Gat,
        _ => GetKind::Gats,
    };
    let (exptime, keys) = if matches!(kind, GetKind::Gat | GetKind::Gats) {
        let Some(e) = parse_i32(toks.t[1]) else {
            return error(McError::InvalidExptime);
        };
        (i64::from(e), after_words(line, 2))
    } else {
        (0, after_words(line, 1))
    };
    // memcached answers a retrieval with a too-long key by an error alone.
    if words(keys).any(|k| !key_ok(k, limits)) {
        return error(McError::KeyTooLong);
    }
    Ok(Request::Get {
        kind,
        exptime,
        keys,
        first: true,
        last: true,
        line_left: 0,
    })
}

/// The data block of a storage command whose line is `line_len` bytes and
/// whose declared length is `vlen`. `Ok(None)`: not all there yet.
pub(super) fn data_block(
    input: &[u8],
    line_len: usize,
    vlen: usize,
) -> Result<Option<&[u8]>, McError> {
    let need = line_len + vlen + 2;
    if input.len() < need {
        return Ok(None);
    }
    if &input[line_len + vlen..need] != b"\r\n" {
        return Err(McError::BadDataChunk);
    }
    Ok(Some(&input[line_len..line_len + vlen]))
}

pub(super) fn too_large(line_len: usize, vlen: usize, limits: &Limits) -> bool {
    vlen > limits.max_value_len || line_len.saturating_add(vlen + 2) > limits.max_request_bytes
}

/// A data block larger than `maxmemory` leaves room for.
pub(super) fn no_room(vlen: usize, limits: &Limits) -> bool {
    vlen > limits.max_body && vlen > super::BIG_BODY
}

pub(super) fn storage<'a>(
    input: &'a [u8],
    toks: &Tokens<'a>,
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let cmd = match toks.t[0] {
        b"set" => StoreCmd::Set,
        b"add" => StoreCmd::Add,
        b"replace" => StoreCmd::Replace,
        b"append" => StoreCmd::Append,
        b"prepend" => StoreCmd::Prepend,
        _ => StoreCmd::Cas,
    };
    let want = if cmd == StoreCmd::Cas { 7 } else { 6 };
    let fail = |err, noreply, swallow| Parsed::Error {
        err,
        noreply,
        consumed: line_len,
        swallow,
    };
    if toks.ntokens() != want && toks.ntokens() != want + 1 {
        return fail(McError::UnknownCommand, false, 0);
    }
    let noreply = noreply_of(toks);
    let vlen = parse_i32(toks.t[4]).and_then(|v| usize::try_from(v).ok());
    // Once the length parses, a rejected command's data block is skipped,
    // so the data is never read as commands (memcached does this for
    // too-large values only).
    let skip = vlen.map_or(0, |v| v + 2);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return fail(McError::KeyTooLong, noreply, skip);
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_u32(toks.t[2]), parse_i32(toks.t[3]), vlen)
    else {
        return fail(McError::BadFormat, noreply, skip);
    };
    let cas = if cmd == StoreCmd::Cas {
        match parse_u64(toks.t[5]) {
            Some(c) => c,
            None => return fail(McError::BadFormat, noreply, skip),
        }
    } else {
        0
    };
    if too_large(line_len, vlen, limits) {
        return fail(McError::TooLarge, noreply, skip);
    }
    if no_room(vlen, limits) {
        return fail(McError::OutOfMemoryStoring, noreply, skip);
    }
    match data_block(input, line_len, vlen) {
        Ok(None) => Parsed::Incomplete {
            scanned: 0,
            wanted: line_len + vlen + 2,
        },
        Err(err) => Parsed::Error {
            err,
            noreply,
            consumed: line_len + vlen + 2,
            swallow: 0,
        },
        Ok(Some(data)) => Parsed::Request {
            req: Request::Store {
                cmd,
                key,
                flags,
                exptime: i64::from(exptime),
                cas,
                data,
                noreply,
            },
            consumed: line_len + vlen + 2,
        },
    }
}

pub(super) fn delete<'a>(toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    let n = toks.ntokens();
    if !(3..=5).contains(&n) {
        return error(McError::UnknownCommand);
    }
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = toks.t[2] == b"0";
        noreply = noreply_of(toks);
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            return Err((McError::DeleteUsage, noreply, 0));
        }
    }
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    Ok(Request::Delete { key, noreply })
}

pub(super) fn arith<'a>(incr: bool, toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() != 4 && toks.ntokens() != 5 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    let Some(delta) = parse_u64(toks.t[2]) else {
        return Err((McError::InvalidDelta, noreply, 0));
    };
    Ok(Request::Arith {
        incr,
        key,
        delta,
        noreply,
    })
}

pub(super) fn touch<'a>(toks: &Tokens<'a>, limits: &Limits) -> LineResult<'a> {
    if toks.ntokens() != 4 && toks.ntokens() != 5 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let key = toks.t[1];
    if !key_ok(key, limits) {
        return Err((McError::KeyTooLong, noreply, 0));
    }
    let Some(exptime) = parse_i32(toks.t[2]) else {
        return Err((McError::InvalidExptime, noreply, 0));
    };
    Ok(Request::Touch {
        key,
        exptime: i64::from(exptime),
        noreply,
    })
}

pub(super) fn flush_all<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    let n = toks.ntokens();
    if !(2..=4).contains(&n) {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    let mut delay = 0;
    if n != if noreply { 3 } else { 2 } {
        match parse_i32(toks.t[1]) {
            Some(d) => delay = i64::from(d),
            None => return Err((McError::InvalidExptime, noreply, 0)),
        }
    }
    Ok(Request::FlushAll { delay, noreply })
}

pub(super) fn verbosity<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() != 3 && toks.ntokens() != 4 {
        return error(McError::UnknownCommand);
    }
    let noreply = noreply_of(toks);
    if parse_u32(toks.t[1]).is_none() {
        return Err((McError::BadFormat, noreply, 0));
    }
    Ok(Request::Verbosity { noreply })
}

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids run 1 to 63.
const SLAB_CLASSES: u32 = 64;

/// `lru_crawler metadump <all|hash|class[,class...]>`, the one
/// `lru_crawler` subcommand served (combkv has no LRU crawler to start,
/// stop or tune: the others answer `ERROR`, as memcached answers an
/// unknown one). memcached's `lru_crawler_crawl`: `all` and `hash` walk
/// everything; a list names classes 1 to 63, and anything else in it is a
/// bad class. Empty list entries are skipped, as `strtok_r` skips them.
pub(super) fn lru_crawler<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() != 4 || toks.t[1] != b"metadump" {
        return error(McError::UnknownCommand);
    }
    let classes = toks.t[2];
    if classes == b"all" || classes == b"hash" {
        return Ok(Request::MetaDump {
            class_one: true,
            cachedump: None,
        });
    }
    let mut class_one = false;
    for id in classes.split(|&b| b == b',').filter(|id| !id.is_empty()) {
        match parse_u32(id) {
            Some(n) if (1..SLAB_CLASSES).contains(&n) => class_one |= n == 1,
            _ => return Ok(Request::MetaDumpBadClass),
        }
    }
    Ok(Request::MetaDump {
        class_one,
        cachedump: None,
    })
}

/// `stats cachedump <class> <limit>` (memcached's `process_stat`): class 1
/// holds every item here, classes 0 and 2 to 63 none; a limit of 0 is no
/// limit. Tokens past the limit are ignored, as memcached ignores them.
pub(super) fn cachedump<'a>(toks: &Tokens<'a>) -> LineResult<'a> {
    if toks.ntokens() < 5 {
        return error(McError::BadCommandLine);
    }
    let (Some(id), Some(limit)) = (parse_u32(toks.t[2]), parse_u32(toks.t[3])) else {
        return error(McError::BadFormat);
    };
    if id >= SLAB_CLASSES {
        return error(McError::IllegalSlabId);
    }
    Ok(Request::MetaDump {
        class_one: id == 1,
        cachedump: Some(limit),
    })
}
