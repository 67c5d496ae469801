//! OBJECT ENCODING, REFCOUNT, IDLETIME, FREQ and HELP: what Redis 7 answers
//! for a string key, from what combkv stores. combkv keeps a value as its
//! bytes, with no object header, so each answer is derived or refused:
//!
//! - ENCODING: Redis's choice for a value SET stores (`tryObjectEncoding`):
//!   `int` for an integer of at most 20 characters in Redis's strict
//!   syntax, `embstr` up to 44 bytes, `raw` above. Redis also remembers how
//!   a value was made (APPEND, SETRANGE and SETBIT leave a short value
//!   `raw` until it is stored again); combkv does not, so it answers by the
//!   value's shape, as Redis does after a restart.
//! - REFCOUNT: 1. Each key holds its own copy of its value; combkv has no
//!   shared objects (Redis answers 2147483647 for the integers 0 to 9999
//!   it shares).
//! - FREQ: combkv's `maxmemory-policy` is `noeviction`, and it counts no
//!   accesses, so Redis's own error for a policy that is not LFU is the
//!   truthful answer.
//! - IDLETIME: combkv keeps no per-key access time, so it refuses rather
//!   than answer a number it does not have.
//!
//! A missing key is nil for every subcommand, checked first, as Redis does.

use super::{Ctx, eq_ic, parse_i64, unknown_subcommand};
use crate::resp::error::{CmdError, CmdResult};

/// OBJECT HELP: Redis 7's lines.
const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
];

/// Redis's error for FREQ when the policy is not LFU (combkv's is
/// `noeviction`).
const FREQ_NOT_TRACKED: &str = "An LFU maxmemory policy is not selected, access frequency not \
     tracked. Please note that when switching between policies at runtime LRU and LFU data will \
     take some time to adjust.";

/// IDLETIME's refusal: Redis has no wording for a server that keeps no
/// access time at all.
const IDLE_NOT_TRACKED: &str =
    "idle time not tracked: combkv keeps no per-key access time (maxmemory-policy is noeviction)";

/// Redis's `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`.
const EMBSTR_MAX_BYTES: usize = 44;

/// The longest integer Redis encodes as `int` (`tryObjectEncoding`'s
/// `len <= 20`, the characters of `i64::MIN`).
const INT_MAX_CHARS: usize = 20;

pub(super) fn object(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    let name = if eq_ic(sub, "help") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("object|help".into()));
        }
        super::help_reply(&mut cx.r, OBJECT_HELP);
        return Ok(());
    } else if eq_ic(sub, "encoding") {
        "encoding"
    } else if eq_ic(sub, "refcount") {
        "refcount"
    } else if eq_ic(sub, "idletime") {
        "idletime"
    } else if eq_ic(sub, "freq") {
        "freq"
    } else {
        return Err(unknown_subcommand(sub, "OBJECT"));
    };
    if cx.args.len() != 3 {
        return Err(CmdError::Arity(format!("object|{name}")));
    }
    let Some(encoding) = cx.get_with(cx.args[2], |it| it.map(|it| encoding(it.value)))? else {
        cx.r.null();
        return Ok(());
    };
    match name {
        "encoding" => cx.r.bulk(encoding.as_bytes()),
        "refcount" => cx.r.int(1),
        "idletime" => return Err(CmdError::err(IDLE_NOT_TRACKED)),
        _ => return Err(CmdError::err(FREQ_NOT_TRACKED)),
    }
    Ok(())
}

/// The encoding Redis gives a string value SET stores.
fn encoding(value: &[u8]) -> &'static str {
    if value.len() <= INT_MAX_CHARS && parse_i64(value).is_some() {
        "int"
    } else if value.len() <= EMBSTR_MAX_BYTES {
        "embstr"
    } else {
        "raw"
    }
}

#[cfg(test)]
mod tests {
    use super::encoding;

    /// The shapes at each boundary, as Redis 7 answers them after SET.
    #[test]
    fn encoding_follows_the_value_shape() {
        // 20 characters, in range.
        let long_int = format!("-{}", "1".repeat(19));
        let cases: [(&[u8], &str); 12] = [
            (b"0", "int"),
            (b"-5", "int"),
            (b"9223372036854775807", "int"),
            (b"-9223372036854775808", "int"),
            // Out of range, a leading zero, a space, a float: text.
            (b"12345678901234567890", "embstr"),
            (b"01", "embstr"),
            (b" 1", "embstr"),
            (b"1.5", "embstr"),
            (b"", "embstr"),
            (&[b'x'; 44], "embstr"),
            (&[b'x'; 45], "raw"),
            (long_int.as_bytes(), "int"),
        ];
        for (value, want) in cases {
            assert_eq!(
                encoding(value),
                want,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }
}
