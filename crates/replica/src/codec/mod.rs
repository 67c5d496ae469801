//! The bytes of decided writes and of their outcomes, as log entries and
//! replies carry them. A small tagged format of its own: fixed-width
//! little-endian integers and length-prefixed byte strings, so that a
//! decoded op borrows its keys and values from the entry it came from.
//!
//! The format is part of the log: a change to it needs a new tag, never a
//! new meaning for an old one.
//!
//! Laid out by direction and kind: `wire` holds the integers, byte strings
//! and versions everything is built of (and the `Reader` that takes them
//! apart); `op_encode` and `op_decode` the ops; `outcome` and `error` what
//! applying them answered.

mod error;
mod op_decode;
mod op_encode;
mod outcome;
#[cfg(test)]
mod tests;
mod wire;

use crate::ranges::{AbsorbRange, MapChange, RetireRange, SplitRange};
use combkv::Error;
use combkv::op::{Op, Outcome};

use error::encode_error;
use op_encode::encode_op;
use outcome::encode_outcome;
use wire::{Reader, put_u64};

/// Why bytes could not be decoded (a damaged or foreign entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable replicated data: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

type Decoded<T> = Result<T, DecodeError>;

/// Appends the encoding of `ops` to `out`.
pub fn encode_ops(ops: &[Op<'_>], out: &mut Vec<u8>) {
    put_u64(out, ops.len() as u64);
    crate::tally::ops_encoded(ops.len());
    for op in ops {
        encode_op(op, out);
    }
}

/// An encoded op list built one op at a time, as [`encode_ops`] writes it
/// (an event loop's turn of writes, without a buffer per op).
#[derive(Debug, Default)]
pub struct OpList {
    bytes: Vec<u8>,
    count: u64,
}

impl OpList {
    /// Appends one op's encoding.
    pub fn push(&mut self, op: &Op<'_>) {
        if self.bytes.is_empty() {
            // Room for the count, written by `finish`.
            self.bytes.extend_from_slice(&[0; 8]);
        }
        encode_op(op, &mut self.bytes);
        crate::tally::ops_encoded(1);
        self.count += 1;
    }

    /// How many ops the list holds.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the list holds no op.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded list.
    pub fn finish(mut self) -> Vec<u8> {
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&[0; 8]);
        }
        self.bytes[..8].copy_from_slice(&self.count.to_le_bytes());
        self.bytes
    }
}

/// The ops `bytes` holds, borrowing from it.
pub fn decode_ops(bytes: &[u8]) -> Decoded<Vec<Op<'_>>> {
    let mut r = Reader { b: bytes };
    let n = r.count()?;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        ops.push(r.op()?);
    }
    r.end()?;
    crate::tally::ops_decoded(n);
    Ok(ops)
}

/// Appends the encoding of one op's result.
pub fn encode_result(result: &Result<Outcome, Error>, out: &mut Vec<u8>) {
    crate::tally::results_encoded(1);
    match result {
        Ok(o) => {
            out.push(0);
            encode_outcome(o, out);
        }
        Err(e) => {
            out.push(1);
            encode_error(e, out);
        }
    }
}

/// The results `bytes` holds.
pub fn decode_results(bytes: &[u8]) -> Decoded<Vec<Result<Outcome, Error>>> {
    let mut r = Reader { b: bytes };
    let mut out = Vec::new();
    while !r.b.is_empty() {
        out.push(match r.u8()? {
            0 => Ok(r.outcome()?),
            1 => Err(r.error()?),
            _ => return Err(DecodeError("result tag")),
        });
    }
    crate::tally::results_decoded(out.len());
    Ok(out)
}

/// How many ops an encoded list says it holds, from its header alone (the
/// ops are decoded where the entry is applied; one that does not decode is
/// skipped there by every replica alike). A list too short to hold its
/// ops' tags is refused.
pub fn list_count(bytes: &[u8]) -> Decoded<usize> {
    let head: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError("op count"))?;
    let n = u64::from_le_bytes(head);
    if n > (bytes.len() - 8) as u64 {
        return Err(DecodeError("op count"));
    }
    Ok(n as usize)
}

/// The tag after an empty op list that makes an entry a cluster setting
/// (see [`encode_setting`]): nodes that predate settings read it as a list
/// with trailing bytes, and skip it as undecodable.
const SETTING_TAG: u8 = 0xA0;

/// A replicated cluster setting (the ACL table, say): `name` takes
/// `value` on every node when the entry applies. Written as a list of no
/// ops followed by the tag, the name and the value, so that every path a
/// write takes (forwarding, group commit, the log) carries it unchanged,
/// and it asks for no results.
pub fn encode_setting(name: &str, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + value.len() + 25);
    put_u64(&mut out, 0);
    out.push(SETTING_TAG);
    wire::put_bytes(&mut out, name.as_bytes());
    wire::put_bytes(&mut out, value);
    out
}

/// The tag after a count of one that makes an entry a change of the range
/// map (see [`encode_map_change`]); no op's tag is this high.
const MAP_CHANGE_TAG: u8 = 0xA1;

/// A change of the range map (`ranges::MapChange`), applied by the group
/// that keeps the map. Written as a list of one "op" (so that it gets one
/// result: applied, or why not) whose body is the tag and the change, so
/// that forwarding and the log carry it as they carry writes.
pub fn encode_map_change(change: &MapChange) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_u64(&mut out, 1);
    out.push(MAP_CHANGE_TAG);
    out.extend_from_slice(&postcard::to_stdvec(change).expect("a change serializes"));
    out
}

/// Whether an encoded entry is a change of the range map.
pub fn is_map_change(bytes: &[u8]) -> bool {
    bytes.len() > 8 && bytes[..8] == 1u64.to_le_bytes() && bytes[8] == MAP_CHANGE_TAG
}

/// The change of the range map an entry holds (None: it holds none).
pub fn decode_map_change(bytes: &[u8]) -> Option<Decoded<MapChange>> {
    if !is_map_change(bytes) {
        return None;
    }
    Some(postcard::from_bytes(&bytes[9..]).map_err(|_| DecodeError("range map change")))
}

/// The tag after a count of one that makes an entry a split of the range
/// the group serves (see [`encode_split`]).
const SPLIT_TAG: u8 = 0xA2;

/// A split of the range the group serves (`ranges::SplitRange`), written
/// as a map change is: one "op", so that it gets one result.
pub fn encode_split(split: &SplitRange) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_u64(&mut out, 1);
    out.push(SPLIT_TAG);
    out.extend_from_slice(&postcard::to_stdvec(split).expect("a split serializes"));
    out
}

/// Whether an encoded entry is a split.
pub fn is_split(bytes: &[u8]) -> bool {
    bytes.len() > 8 && bytes[..8] == 1u64.to_le_bytes() && bytes[8] == SPLIT_TAG
}

/// The split an entry holds (None: it holds none).
pub fn decode_split(bytes: &[u8]) -> Option<Decoded<SplitRange>> {
    if !is_split(bytes) {
        return None;
    }
    Some(postcard::from_bytes(&bytes[9..]).map_err(|_| DecodeError("range split")))
}

/// The tag after a count of one that makes an entry a read floor (see
/// [`encode_floor`]).
const FLOOR_TAG: u8 = 0xA3;

/// A read floor for the range the group serves: every write after it in
/// the log takes a version above `at` (a timestamp a read across ranges
/// reads every range at; `docs/design.md`, "Ranges"), and, with `pin_ms`
/// above 0, every replica that applies it keeps the store as of `at`
/// readable for that long (a snapshot of the keyspace). One "op", so that
/// it gets one result.
pub fn encode_floor(at: u64, pin_ms: u64) -> Vec<u8> {
    encode_timestamp(FLOOR_TAG, at, pin_ms)
}

/// The timestamp and pin a read floor entry holds (None: it holds none).
pub fn decode_floor(bytes: &[u8]) -> Option<Decoded<(u64, u64)>> {
    decode_timestamp(bytes, FLOOR_TAG, "read floor")
}

/// An entry of one "op": `tag`, a timestamp and a pin time.
fn encode_timestamp(tag: u8, at: u64, pin_ms: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(25);
    put_u64(&mut out, 1);
    out.push(tag);
    put_u64(&mut out, at);
    put_u64(&mut out, pin_ms);
    out
}

/// The timestamp and pin time of an entry [`encode_timestamp`] wrote with
/// `tag` (None: another entry; `what` names it in the error of a cut one).
fn decode_timestamp(bytes: &[u8], tag: u8, what: &'static str) -> Option<Decoded<(u64, u64)>> {
    if !tagged(bytes, tag) {
        return None;
    }
    let body = &bytes[9..];
    if body.len() != 16 {
        return Some(Err(DecodeError(what)));
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Some(Ok((word(&body[..8]), word(&body[8..]))))
}

/// The tag after a count of one that makes an entry a snapshot's release
/// (see [`encode_unpin`]).
const UNPIN_TAG: u8 = 0xA6;

/// The release of a snapshot of the keyspace at timestamp `at`, pinned
/// for `pin_ms` (as its read floor entry said): every replica that
/// applies it drops the pin that entry made, so the store's past is no
/// longer kept for it. One "op", so that it gets one result.
pub fn encode_unpin(at: u64, pin_ms: u64) -> Vec<u8> {
    encode_timestamp(UNPIN_TAG, at, pin_ms)
}

/// The timestamp and pin a release entry unpins (None: it is no release).
pub fn decode_unpin(bytes: &[u8]) -> Option<Decoded<(u64, u64)>> {
    decode_timestamp(bytes, UNPIN_TAG, "snapshot release")
}

/// The tags after a count of one that make an entry one step of a merge
/// (`ranges::merge`): the right range retired, its keys absorbed.
const RETIRE_TAG: u8 = 0xA4;
const ABSORB_TAG: u8 = 0xA5;

fn tagged(bytes: &[u8], tag: u8) -> bool {
    bytes.len() > 8 && bytes[..8] == 1u64.to_le_bytes() && bytes[8] == tag
}

fn encode_tagged<T: serde::Serialize>(tag: u8, body: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_u64(&mut out, 1);
    out.push(tag);
    out.extend_from_slice(&postcard::to_stdvec(body).expect("a merge step serializes"));
    out
}

/// A retirement of the range the group serves (`ranges::RetireRange`):
/// one "op", so that it gets one result.
pub fn encode_retire(retire: &RetireRange) -> Vec<u8> {
    encode_tagged(RETIRE_TAG, retire)
}

/// The retirement an entry holds (None: it holds none).
pub fn decode_retire(bytes: &[u8]) -> Option<Decoded<RetireRange>> {
    tagged(bytes, RETIRE_TAG)
        .then(|| postcard::from_bytes(&bytes[9..]).map_err(|_| DecodeError("range retirement")))
}

/// The keys of a retired range, for the range on its left
/// (`ranges::AbsorbRange`): one "op", so that it gets one result.
pub fn encode_absorb(absorb: &AbsorbRange) -> Vec<u8> {
    encode_tagged(ABSORB_TAG, absorb)
}

/// The absorption an entry holds (None: it holds none).
pub fn decode_absorb(bytes: &[u8]) -> Option<Decoded<AbsorbRange>> {
    tagged(bytes, ABSORB_TAG)
        .then(|| postcard::from_bytes(&bytes[9..]).map_err(|_| DecodeError("range absorption")))
}

/// The tag after a count of one that makes an entry a setting changed
/// only if it still holds the value it was decided from
/// ([`encode_setting_if`]).
const SETTING_IF_TAG: u8 = 0xA7;

/// A setting changed on a condition (see [`encode_setting_if`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SettingIf {
    /// The setting's name.
    pub name: String,
    /// The value the change was decided from, as this node had applied
    /// it (None: the log held none).
    pub expect: Option<Vec<u8>>,
    /// The value it takes.
    pub value: Vec<u8>,
}

/// A cluster setting that takes `value` only where it still holds
/// `expect` when the entry applies, alike on every replica: one "op", so
/// that it gets one result (applied, or [`SETTING_CHANGED`]). A change
/// decided from a table (the ACL users) that another node's change
/// replaced meanwhile is refused, not applied over it.
pub fn encode_setting_if(change: &SettingIf) -> Vec<u8> {
    encode_tagged(SETTING_IF_TAG, change)
}

/// The conditional setting an entry holds (None: it holds none).
pub fn decode_setting_if(bytes: &[u8]) -> Option<Decoded<SettingIf>> {
    tagged(bytes, SETTING_IF_TAG)
        .then(|| postcard::from_bytes(&bytes[9..]).map_err(|_| DecodeError("conditional setting")))
}

/// Why a conditional setting did not apply: the setting no longer held
/// the value the change was decided from.
pub const SETTING_CHANGED: &str = "the setting changed since this change was decided";

/// Whether an entry must be proposed alone, never joined with writes: a
/// setting, a change of the range map, a split, a read floor or a step of
/// a merge.
pub fn stands_alone(bytes: &[u8]) -> bool {
    is_setting(bytes)
        || tagged(bytes, SETTING_IF_TAG)
        || is_map_change(bytes)
        || is_split(bytes)
        || decode_floor(bytes).is_some()
        || tagged(bytes, UNPIN_TAG)
        || tagged(bytes, RETIRE_TAG)
        || tagged(bytes, ABSORB_TAG)
}

/// Whether an encoded entry is a setting, not ops.
pub fn is_setting(bytes: &[u8]) -> bool {
    bytes.len() > 8 && bytes[..8] == [0; 8] && bytes[8] == SETTING_TAG
}

/// A setting's name and value (None: the bytes are ops).
pub fn decode_setting(bytes: &[u8]) -> Option<Decoded<(String, Vec<u8>)>> {
    if !is_setting(bytes) {
        return None;
    }
    let mut r = Reader { b: &bytes[9..] };
    Some((|| {
        let name = std::str::from_utf8(r.bytes()?).map_err(|_| DecodeError("setting name"))?;
        let value = r.bytes()?.to_vec();
        r.end()?;
        Ok((name.to_string(), value))
    })())
}

/// How many ops an encoded list holds, checking that every one decodes
/// (a malformed list in an entry would stop every replica applying it).
pub fn op_count(bytes: &[u8]) -> Decoded<usize> {
    decode_ops(bytes).map(|ops| ops.len())
}

/// Joins encoded op lists, each checked by [`op_count`], into one, in
/// order (group commit: many proposals, one entry).
pub fn join_ops<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![0u8; 8];
    let mut total = 0u64;
    for part in parts {
        let (count, ops) = part.split_at(8);
        total += u64::from_le_bytes(count.try_into().expect("8 bytes"));
        out.extend_from_slice(ops);
    }
    out[..8].copy_from_slice(&total.to_le_bytes());
    out
}

/// Cuts the results of a joined entry (see [`join_ops`]) back into each
/// part's results: `counts[i]` results for part `i`.
pub fn split_results(bytes: &[u8], counts: &[usize]) -> Decoded<Vec<Vec<u8>>> {
    let mut r = Reader { b: bytes };
    let mut out = Vec::with_capacity(counts.len());
    for &n in counts {
        let start = bytes.len() - r.b.len();
        for _ in 0..n {
            match r.u8()? {
                0 => {
                    r.outcome()?;
                }
                1 => {
                    r.error()?;
                }
                _ => return Err(DecodeError("result tag")),
            }
        }
        out.push(bytes[start..bytes.len() - r.b.len()].to_vec());
    }
    r.end()?;
    Ok(out)
}
