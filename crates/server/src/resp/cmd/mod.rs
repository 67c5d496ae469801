//! RESP commands: the table of names, arities and flags, dispatch, and the
//! batched read path. One file per command family:
//! `strings` (GET SET ... CAS), `keys` (DEL EXISTS EXPIRE TTL ... SCAN),
//! `ordered` (RANGE FLOOR CEIL SNAPSHOT GETAT RANGEAT), `server` (PING
//! HELLO AUTH INFO CONFIG CLIENT COMMAND SLOWLOG ...).

mod keys;
pub(crate) mod ordered;
mod server;
mod strings;

use std::sync::LazyLock;

use combkv::readexec::ReadRequest;
use smallvec::SmallVec;

use super::RespConn;
use super::error::{CmdError, CmdResult};
use super::reply::Reply;
use crate::pipeline::{Client, Cx};
use crate::shared::{Shared, Stats};

pub(crate) use ordered::RangeSpec;

/// What a command runs with.
pub(crate) struct Ctx<'a, 'b> {
    pub shared: &'a Shared,
    /// Writes go through the turn's session (see `proto::Cx`).
    pub session: &'a combkv::Session<'a>,
    pub conn: &'a mut RespConn,
    pub client: &'a mut Client,
    pub args: &'a [&'b [u8]],
    pub r: Reply<'a>,
    /// Close the connection after this reply (QUIT).
    pub close: bool,
}

impl Ctx<'_, '_> {
    /// Argument `i` as a signed integer (Redis's strict parsing).
    pub(crate) fn int(&self, i: usize) -> Result<i64, CmdError> {
        parse_i64(self.args[i]).ok_or(CmdError::NotInteger)
    }

    pub(crate) fn store(&self) -> &combkv::Store {
        &self.shared.store
    }

    /// Refuses a write above `maxmemory`.
    pub(crate) fn check_memory(&self) -> CmdResult {
        if self.shared.over_maxmemory() {
            Stats::add(&self.shared.stats.writes_refused_oom, 1);
            return Err(CmdError::Oom);
        }
        Ok(())
    }
}

/// Redis's integer syntax: optional '-', digits, no '+', no spaces, no
/// leading zeros, within i64.
pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    // One pass (this parses every length header of every request).
    let (neg, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!neg).then_some(0),
        [b'0', ..] => return None,
        _ if digits.len() > 19 => return None,
        _ => {}
    }
    // Accumulate negatively so i64::MIN parses without overflow.
    let mut n: i64 = 0;
    for &d in digits {
        let v = d.wrapping_sub(b'0');
        if v > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(v))?;
    }
    if neg { Some(n) } else { n.checked_neg() }
}

pub(crate) fn eq_ic(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

type Handler = fn(&mut Ctx<'_, '_>) -> CmdResult;

/// A command's table entry. `arity` as Redis gives it: n > 0 exactly n
/// arguments (the name included), n < 0 at least -n.
pub(crate) struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub write: bool,
    /// Refused above `maxmemory` (Redis's `denyoom`): writes that can add
    /// data. Deletes, expiries and FLUSHALL free memory and stay allowed.
    pub denyoom: bool,
    /// Allowed before AUTH.
    pub no_auth: bool,
    pub first_key: i32,
    pub last_key: i32,
    pub summary: &'static str,
    pub group: &'static str,
    handler: Handler,
}

const fn has_flag(flags: &str, f: u8) -> bool {
    let b = flags.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == f {
            return true;
        }
        i += 1;
    }
    false
}

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:literal, $first:expr, $last:expr, $group:literal, $summary:literal, $h:path) => {
        Spec {
            name: $name,
            arity: $arity,
            write: has_flag($flags, b'w'),
            denyoom: has_flag($flags, b'd'),
            no_auth: has_flag($flags, b'a'),
            first_key: $first,
            last_key: $last,
            summary: $summary,
            group: $group,
            handler: $h,
        }
    };
}

/// Every command, sorted by name (binary search).
pub(crate) static COMMANDS: &[Spec] = &[
    spec!(
        "append",
        3,
        "wd",
        1,
        1,
        "string",
        "Appends a string to the value of a key.",
        strings::append
    ),
    spec!(
        "auth",
        -2,
        "a",
        0,
        0,
        "connection",
        "Authenticates the connection.",
        server::auth
    ),
    spec!(
        "bgsave",
        -1,
        "",
        0,
        0,
        "server",
        "Starts a checkpoint in the background.",
        server::bgsave
    ),
    spec!(
        "cas",
        -4,
        "wd",
        1,
        1,
        "combkv",
        "Sets a key only if its version matches.",
        strings::cas
    ),
    spec!(
        "ceil",
        2,
        "",
        1,
        1,
        "combkv",
        "The smallest key >= key, with its value.",
        ordered::ceil
    ),
    spec!(
        "client",
        -2,
        "",
        0,
        0,
        "connection",
        "CLIENT ID, SETNAME, GETNAME, LIST, INFO.",
        server::client
    ),
    spec!(
        "command",
        -1,
        "",
        0,
        0,
        "server",
        "Describes the commands (COUNT, DOCS, INFO, LIST).",
        server::command
    ),
    spec!(
        "config",
        -2,
        "",
        0,
        0,
        "server",
        "CONFIG GET parameters.",
        server::config
    ),
    spec!(
        "dbsize",
        1,
        "",
        0,
        0,
        "server",
        "The number of keys.",
        keys::dbsize
    ),
    spec!(
        "decr",
        2,
        "wd",
        1,
        1,
        "string",
        "Decrements the integer value of a key by one.",
        strings::decr
    ),
    spec!(
        "decrby",
        3,
        "wd",
        1,
        1,
        "string",
        "Decrements the integer value of a key.",
        strings::decrby
    ),
    spec!("del", -2, "w", 1, -1, "generic", "Deletes keys.", keys::del),
    spec!(
        "echo",
        2,
        "",
        0,
        0,
        "connection",
        "Returns the given string.",
        server::echo
    ),
    spec!(
        "exists",
        -2,
        "",
        1,
        -1,
        "generic",
        "Counts the keys that exist.",
        keys::exists
    ),
    spec!(
        "expire",
        -3,
        "w",
        1,
        1,
        "generic",
        "Sets a key's time to live in seconds.",
        keys::expire
    ),
    spec!(
        "expireat",
        -3,
        "w",
        1,
        1,
        "generic",
        "Sets a key's expiry as a unix time in seconds.",
        keys::expireat
    ),
    spec!(
        "floor",
        2,
        "",
        1,
        1,
        "combkv",
        "The greatest key <= key, with its value.",
        ordered::floor
    ),
    spec!(
        "flushall",
        -1,
        "w",
        0,
        0,
        "server",
        "Removes every key.",
        keys::flushall
    ),
    spec!(
        "flushdb",
        -1,
        "w",
        0,
        0,
        "server",
        "Removes every key.",
        keys::flushall
    ),
    spec!(
        "get",
        2,
        "",
        1,
        1,
        "string",
        "Returns the value of a key.",
        strings::get
    ),
    spec!(
        "getat",
        3,
        "",
        2,
        2,
        "combkv",
        "A key's value as of a snapshot.",
        ordered::getat
    ),
    spec!(
        "getdel",
        2,
        "w",
        1,
        1,
        "string",
        "Returns the value of a key and deletes it.",
        strings::getdel
    ),
    spec!(
        "getv",
        2,
        "",
        1,
        1,
        "combkv",
        "A key's value and version.",
        strings::getv
    ),
    spec!(
        "hello",
        -1,
        "a",
        0,
        0,
        "connection",
        "Handshakes: protocol version, AUTH, SETNAME.",
        server::hello
    ),
    spec!(
        "incr",
        2,
        "wd",
        1,
        1,
        "string",
        "Increments the integer value of a key by one.",
        strings::incr
    ),
    spec!(
        "incrby",
        3,
        "wd",
        1,
        1,
        "string",
        "Increments the integer value of a key.",
        strings::incrby
    ),
    spec!(
        "info",
        -1,
        "",
        0,
        0,
        "server",
        "Information and statistics about the server.",
        server::info
    ),
    spec!(
        "keys",
        2,
        "",
        0,
        0,
        "generic",
        "Keys matching a pattern, in key order.",
        keys::keys
    ),
    spec!(
        "lastsave",
        1,
        "",
        0,
        0,
        "server",
        "Unix time of the last successful checkpoint.",
        server::lastsave
    ),
    spec!(
        "mget",
        -2,
        "",
        1,
        -1,
        "string",
        "Returns the values of keys.",
        strings::mget
    ),
    spec!(
        "mset",
        -3,
        "wd",
        1,
        -1,
        "string",
        "Sets several keys.",
        strings::mset
    ),
    spec!(
        "persist",
        2,
        "w",
        1,
        1,
        "generic",
        "Removes a key's expiry.",
        keys::persist
    ),
    spec!(
        "pexpire",
        -3,
        "w",
        1,
        1,
        "generic",
        "Sets a key's time to live in milliseconds.",
        keys::pexpire
    ),
    spec!(
        "pexpireat",
        -3,
        "w",
        1,
        1,
        "generic",
        "Sets a key's expiry as a unix time in milliseconds.",
        keys::pexpireat
    ),
    spec!(
        "ping",
        -1,
        "",
        0,
        0,
        "connection",
        "Returns PONG or the given string.",
        server::ping
    ),
    spec!(
        "pttl",
        2,
        "",
        1,
        1,
        "generic",
        "A key's time to live in milliseconds.",
        keys::pttl
    ),
    spec!(
        "quit",
        -1,
        "a",
        0,
        0,
        "connection",
        "Closes the connection.",
        server::quit
    ),
    spec!(
        "range",
        -3,
        "",
        0,
        0,
        "combkv",
        "Items between two bounds, in key order, from one snapshot.",
        ordered::range
    ),
    spec!(
        "rangeat",
        -4,
        "",
        0,
        0,
        "combkv",
        "RANGE as of a snapshot.",
        ordered::rangeat
    ),
    spec!(
        "save",
        1,
        "",
        0,
        0,
        "server",
        "Takes a checkpoint now.",
        server::save
    ),
    spec!(
        "scan",
        -2,
        "",
        0,
        0,
        "generic",
        "Iterates keys in key order.",
        keys::scan
    ),
    spec!(
        "select",
        2,
        "",
        0,
        0,
        "connection",
        "Selects database 0 (the only one).",
        server::select
    ),
    spec!(
        "set",
        -3,
        "wd",
        1,
        1,
        "string",
        "Sets a key (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL).",
        strings::set
    ),
    spec!(
        "setnx",
        3,
        "wd",
        1,
        1,
        "string",
        "Sets a key only if it does not exist.",
        strings::setnx
    ),
    spec!(
        "slowlog",
        -2,
        "",
        0,
        0,
        "server",
        "SLOWLOG GET, LEN, RESET.",
        server::slowlog
    ),
    spec!(
        "snapshot",
        -2,
        "",
        0,
        0,
        "combkv",
        "SNAPSHOT CREATE, RELEASE, LIST.",
        ordered::snapshot
    ),
    spec!(
        "strlen",
        2,
        "",
        1,
        1,
        "string",
        "The length of a key's value.",
        strings::strlen
    ),
    spec!(
        "time",
        1,
        "",
        0,
        0,
        "server",
        "The server time.",
        server::time
    ),
    spec!(
        "ttl",
        2,
        "",
        1,
        1,
        "generic",
        "A key's time to live in seconds.",
        keys::ttl
    ),
    spec!(
        "type",
        2,
        "",
        1,
        1,
        "generic",
        "The type of a key's value.",
        keys::type_
    ),
    spec!(
        "unlink",
        -2,
        "w",
        1,
        -1,
        "generic",
        "Deletes keys.",
        keys::del
    ),
];

pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    // This runs for every request: one multiply picks the only slot a name
    // can be in, and names compare as integers (a binary search over the
    // table was ~180 instructions and seven unpredictable branches).
    let key = name_key(name)?;
    let t = &*NAME_TABLE;
    let i = t.slots[t.slot(key)];
    (i != NameTable::EMPTY && NAME_KEYS[i as usize] == key).then(|| &COMMANDS[i as usize])
}

/// A perfect hash of the command names: every name of `COMMANDS` has a slot
/// of its own, found once at start-up by trying multipliers.
struct NameTable {
    mult: u64,
    /// `COMMANDS` index per slot, or `EMPTY`.
    slots: Vec<u8>,
}

impl NameTable {
    const BITS: u32 = 10;
    const EMPTY: u8 = u8::MAX;

    fn slot(&self, key: u128) -> usize {
        let folded = (key >> 64) as u64 ^ key as u64;
        (folded.wrapping_mul(self.mult) >> (64 - Self::BITS)) as usize
    }

    fn build(keys: &[u128]) -> NameTable {
        assert!(
            keys.len() < usize::from(Self::EMPTY),
            "command indexes fit a byte"
        );
        // splitmix64 steps: odd multipliers, the same on every start.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        loop {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let mut t = NameTable {
                mult: (z ^ (z >> 31)) | 1,
                slots: vec![Self::EMPTY; 1 << Self::BITS],
            };
            let placed = keys.iter().enumerate().all(|(i, &k)| {
                let s = t.slot(k);
                let free = t.slots[s] == Self::EMPTY;
                t.slots[s] = i as u8;
                free
            });
            if placed {
                return t;
            }
        }
    }
}

static NAME_TABLE: LazyLock<NameTable> = LazyLock::new(|| NameTable::build(&NAME_KEYS));

/// A command name lowercased into a big-endian integer, zero padded: the
/// integers sort as the names do. None for what cannot be a command name
/// (longer than 16 bytes, or holding a zero byte, which padding would hide).
fn name_key(name: &[u8]) -> Option<u128> {
    if name.len() > 16 {
        return None;
    }
    let mut key = 0u128;
    for (i, &b) in name.iter().enumerate() {
        if b == 0 {
            return None;
        }
        key |= u128::from(b.to_ascii_lowercase()) << (120 - 8 * i);
    }
    Some(key)
}

/// `name_key` of every command, in `COMMANDS` order.
static NAME_KEYS: LazyLock<Vec<u128>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .map(|s| name_key(s.name.as_bytes()).expect("command names fit in 16 bytes"))
        .collect()
});

/// Runs one command (`spec`: its table entry, from `lookup`, looked up
/// once per request by the caller) and writes its reply.
pub(crate) fn dispatch(cx: &mut Ctx<'_, '_>, spec: Option<&'static Spec>) {
    let result = run(cx, spec);
    if let Err(e) = result {
        Stats::add(&cx.shared.stats.errors_replied, 1);
        cx.r.error(&e.line());
    }
}

/// The checks run in Redis 7's order (`processCommand`): the command
/// exists, its arity, authentication, then `maxmemory` for writes. So an
/// unknown command before AUTH is "unknown command", not NOAUTH.
fn run(cx: &mut Ctx<'_, '_>, spec: Option<&'static Spec>) -> CmdResult {
    let Some(spec) = spec else {
        return Err(CmdError::Other(unknown_command(cx.args)));
    };
    let n = cx.args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return Err(CmdError::Arity(spec.name.to_string()));
    }
    if !cx.conn.authenticated && !spec.no_auth {
        return Err(CmdError::NoAuth);
    }
    if spec.denyoom {
        cx.check_memory()?;
    }
    (spec.handler)(cx)
}

/// Redis 7's text: `ERR unknown command 'x', with args beginning with: 'a' 'b' `.
fn unknown_command(args: &[&[u8]]) -> String {
    let mut shown = String::new();
    for a in &args[1..] {
        if shown.len() >= 128 {
            break;
        }
        let room = 128 - shown.len();
        let s = String::from_utf8_lossy(a);
        let s: String = s.chars().take(room).collect();
        shown.push_str(&format!("'{s}' "));
    }
    let name: String = String::from_utf8_lossy(args[0]).chars().take(128).collect();
    format!("ERR unknown command '{name}', with args beginning with: {shown}")
}

// ---- batched reads -----------------------------------------------------------

/// A read that can join a read-engine batch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Batchable {
    Get,
    Mget,
    Getv,
    /// The spec's slot in the connection's `RangeSlots`.
    Range(usize),
}

/// The parsed RANGEs of a connection's pending batch, kept between batches
/// so that their key buffers are reused instead of allocated per request.
#[derive(Debug, Default)]
pub(crate) struct RangeSlots {
    specs: Vec<RangeSpec>,
    used: usize,
}

impl RangeSlots {
    /// Slots a connection keeps across batches, at most.
    const KEEP: usize = 64;

    /// Parses a RANGE into the next slot: its index, or the parse error.
    fn parse(&mut self, args: &[&[u8]], max_key: usize) -> Result<usize, CmdError> {
        if self.used == self.specs.len() {
            self.specs.push(RangeSpec::none());
        }
        ordered::parse_range_into(args, max_key, &mut self.specs[self.used])?;
        self.used += 1;
        Ok(self.used - 1)
    }

    /// Gives back the last slot taken (its RANGE did not join the batch).
    fn unparse(&mut self) {
        self.used -= 1;
    }

    pub(crate) fn get(&self, i: usize) -> &RangeSpec {
        &self.specs[i]
    }

    /// The batch is answered: every slot is free again.
    pub(crate) fn clear(&mut self) {
        self.used = 0;
        self.specs.truncate(Self::KEEP);
    }
}

/// RANGEs with a LIMIT up to this join batches; longer ones stream through
/// the plain path, which enforces the reply limit as it goes.
const BATCH_RANGE_LIMIT: usize = 1000;

/// Whether `args` is a read the batch path answers exactly as the command
/// would. Anything unusual (bad arity, invalid key, no LIMIT) takes the
/// normal path, which also produces the right error. A RANGE is parsed
/// into the next of `ranges`' slots.
pub(crate) fn batchable(
    spec: Option<&'static Spec>,
    args: &[&[u8]],
    shared: &Shared,
    ranges: &mut RangeSlots,
) -> Option<Batchable> {
    let max_key = shared.store.max_key_len();
    let key_ok = |k: &[u8]| !k.is_empty() && k.len() <= max_key;
    let name = spec?.name;
    if name == "get" && args.len() == 2 && key_ok(args[1]) {
        return Some(Batchable::Get);
    }
    if name == "mget" && args.len() >= 2 && args[1..].iter().all(|k| key_ok(k)) {
        return Some(Batchable::Mget);
    }
    if name == "getv" && args.len() == 2 && key_ok(args[1]) {
        return Some(Batchable::Getv);
    }
    if name == "range" && args.len() >= 3 {
        let slot = ranges.parse(&args[1..], max_key).ok()?;
        let spec = ranges.get(slot);
        if spec.range.limit.is_some_and(|l| l <= BATCH_RANGE_LIMIT) && spec.valid_keys(max_key) {
            return Some(Batchable::Range(slot));
        }
        ranges.unparse();
    }
    None
}

/// The arguments of pending requests, as offsets into the input they were
/// parsed from: argument `i` is `input[offs[i].0..][..offs[i].1]`. Sliced on
/// demand, so a batch allocates no list of them.
#[derive(Clone, Copy)]
pub(crate) struct Args<'a> {
    pub input: &'a [u8],
    pub offs: &'a [(usize, usize)],
}

impl<'a> Args<'a> {
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &'a [u8] {
        let (at, len) = self.offs[i];
        &self.input[at..at + len]
    }
}

/// Answers `pending` (requests whose arguments are `args[first..end]`) with
/// one read-engine batch, replies in order.
pub(crate) fn run_batch(
    cx: &mut Cx<'_>,
    pending: &[(usize, usize, Batchable)],
    args: Args<'_>,
    ranges: &RangeSlots,
    r: &mut Reply<'_>,
) {
    // A pipeline's reads fit on the stack: at -P 1 every request is a
    // batch of its own, and a heap list was a malloc and a free each.
    let mut requests: SmallVec<[ReadRequest<'_>; 16]> = SmallVec::with_capacity(pending.len());
    for &(first, end, b) in pending {
        match b {
            Batchable::Get | Batchable::Getv => {
                requests.push(ReadRequest::Get(args.get(first + 1)))
            }
            Batchable::Mget => {
                requests.extend((first + 1..end).map(|i| ReadRequest::Get(args.get(i))))
            }
            Batchable::Range(slot) => requests.push(ReadRequest::Range(&ranges.get(slot).range)),
        }
    }
    let stats = &cx.shared.stats;
    Stats::add(&stats.read_batches, 1);
    Stats::add(&stats.read_batch_requests, requests.len() as u64);
    if let Err(e) = cx.shared.store.read_batch(&requests, cx.batch) {
        // Keys were checked when the requests joined the batch; an error
        // here is answered on every request rather than lost.
        for _ in pending {
            r.error(&CmdError::from(e.clone()).line());
        }
        return;
    }
    let res = &*cx.batch;
    let max_reply = cx.shared.config.max_reply_bytes.0 as usize;
    let mut i = 0;
    let (mut hits, mut misses) = (0, 0);
    for &(first, end, b) in pending {
        match b {
            Batchable::Get => {
                match res.value(i) {
                    Some(v) => {
                        hits += 1;
                        r.bulk(v);
                    }
                    None => {
                        misses += 1;
                        r.null();
                    }
                }
                i += 1;
            }
            Batchable::Getv => {
                match res.items(i).next() {
                    Some(it) => {
                        hits += 1;
                        r.array(2);
                        r.bulk(it.value);
                        r.int(it.version.get() as i64);
                    }
                    None => {
                        misses += 1;
                        r.null_array();
                    }
                }
                i += 1;
            }
            Batchable::Mget => {
                let n = end - first - 1;
                r.array(n);
                for j in i..i + n {
                    match res.value(j) {
                        Some(v) => {
                            hits += 1;
                            r.bulk(v);
                        }
                        None => {
                            misses += 1;
                            r.null();
                        }
                    }
                }
                i += n;
            }
            Batchable::Range(slot) => {
                ordered::reply_items(r, ranges.get(slot), res, i, max_reply);
                i += 1;
            }
        }
    }
    Stats::add(&stats.keyspace_hits, hits);
    Stats::add(&stats.keyspace_misses, misses);
}

#[cfg(test)]
mod lookup_tests {
    use super::{COMMANDS, NAME_KEYS, lookup, parse_i64};

    /// Redis's `string2ll` rules: optional '-', digits, no leading zeros,
    /// no "-0", no '+' or spaces, in range.
    #[test]
    fn parse_i64_follows_string2ll() {
        let good: [(&[u8], i64); 8] = [
            (b"0", 0),
            (b"7", 7),
            (b"-7", -7),
            (b"16", 16),
            (b"1000000", 1_000_000),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
            (b"-1", -1),
        ];
        for (s, n) in good {
            assert_eq!(parse_i64(s), Some(n), "{s:?}");
        }
        let bad: [&[u8]; 14] = [
            b"",
            b"-",
            b"-0",
            b"00",
            b"01",
            b"-01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1-",
        ];
        for s in bad {
            assert_eq!(parse_i64(s), None, "{s:?}");
        }
        for n in (-100_000i64..100_000).chain([i64::MAX - 1, i64::MIN + 1]) {
            assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }
    }

    #[test]
    fn the_table_is_sorted_lowercase_and_every_name_is_found_in_any_case() {
        assert!(NAME_KEYS.windows(2).all(|w| w[0] < w[1]), "COMMANDS sorted");
        for spec in COMMANDS {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            let upper = spec.name.to_ascii_uppercase();
            assert_eq!(lookup(upper.as_bytes()).map(|s| s.name), Some(spec.name));
            assert_eq!(
                lookup(spec.name.as_bytes()).map(|s| s.name),
                Some(spec.name)
            );
        }
    }

    #[test]
    fn near_misses_are_unknown() {
        // Every name one byte off a command's (and each truncation) is
        // unknown unless it is a command itself.
        for spec in COMMANDS {
            let name = spec.name.as_bytes();
            let mut near: Vec<Vec<u8>> = (0..name.len()).map(|n| name[..n].to_vec()).collect();
            for i in 0..name.len() {
                for b in [b'a', b'z', b'_', b'0', 0x80] {
                    let mut v = name.to_vec();
                    v[i] = b;
                    near.push(v);
                }
            }
            near.push([name, b"x"].concat());
            for n in near {
                let is_command = COMMANDS
                    .iter()
                    .any(|s| s.name.as_bytes().eq_ignore_ascii_case(&n));
                assert_eq!(
                    lookup(&n).is_some(),
                    is_command,
                    "{:?}",
                    String::from_utf8_lossy(&n)
                );
            }
        }
        for name in [
            &b""[..],
            b"ge",
            b"gett",
            b"get\0",
            b"\0get",
            b"g\0t",
            b"getxxxxxxxxxxxxxxxxxxx",
            b"\xffget",
        ] {
            assert!(lookup(name).is_none(), "{name:?}");
        }
    }
}
