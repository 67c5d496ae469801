//! The RESP command table: every command's name, arity, kind, flags and
//! handler, and the lookup of a request's command name (a perfect hash).
//! The table is the one place that says how a command runs: how it takes
//! part in a turn ([`Kind`]; a batchable read names its [`BatchRead`]),
//! whether it is refused above `maxmemory` or inside MULTI. What COMMAND
//! reports besides (syntax, key specs, ACL categories) is `docs`, kept in
//! step with the table by its tests.

use std::sync::LazyLock;

pub(crate) mod acl;
mod command;
pub(super) mod docs;

use super::batch::BatchRead;
use super::spec::{Kind, Spec};
use super::{
    bits, client, cluster, compare, keys, latency, lcs, memory, multi, object, ordered, server,
    strings,
};

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

/// A table entry; flags: `d` denyoom, `a` allowed before AUTH, `x`
/// refused inside MULTI, `m` runs at once inside MULTI, `r` a read when
/// given its key alone.
macro_rules! spec {
    ($name:literal, $arity:expr, $kind:expr, $flags:literal, $first:expr, $last:expr, $h:path, $group:literal, $summary:literal) => {
        Spec {
            name: $name,
            arity: $arity,
            kind: $kind,
            denyoom: has_flag($flags, b'd'),
            no_auth: has_flag($flags, b'a'),
            no_multi: has_flag($flags, b'x'),
            in_multi_now: has_flag($flags, b'm'),
            read_bare: has_flag($flags, b'r'),
            first_key: $first,
            last_key: $last,
            summary: $summary,
            group: $group,
            handler: $h,
        }
    };
}

/// Every command, sorted by name: `spec!(name, arity, kind, flags, first
/// key, last key, handler, group, summary)`.
#[rustfmt::skip]
pub(crate) static COMMANDS: &[Spec] = &[
    spec!("acl", -2, Kind::Control, "", 0, 0, self::acl::acl,
          "server", "Users and permissions: ACL SETUSER, GETUSER, LIST, LOG ..."),
    spec!("append", 3, Kind::Write, "d", 1, 1, strings::append,
          "string", "Appends a string to the value of a key."),
    spec!("auth", -2, Kind::Control, "a", 0, 0, super::acl::auth,
          "connection", "Authenticates the connection."),
    spec!("backup", 2, Kind::Read, "x", 0, 0, server::backup,
          "server", "Writes a full checkpoint of one snapshot into an empty directory."),
    spec!("bgsave", -1, Kind::Read, "x", 0, 0, server::bgsave,
          "server", "Starts a checkpoint in the background."),
    spec!("bitcount", -2, Kind::Read, "", 1, 1, bits::bitcount,
          "bitmap", "Counts the set bits of a value, or of a byte or bit range of it."),
    spec!("bitpos", -3, Kind::Read, "", 1, 1, bits::bitpos,
          "bitmap", "The first bit set or clear in a value, or in a byte or bit range of it."),
    spec!("cas", -4, Kind::Write, "d", 1, 1, strings::cas,
          "combkv", "Sets a key only if its version matches."),
    spec!("ceil", 2, Kind::Read, "", 1, 1, ordered::ceil,
          "combkv", "The smallest key >= key, with its value."),
    spec!("client", -2, Kind::Control, "", 0, 0, client::client,
          "connection", "CLIENT ID, SETNAME, GETNAME, LIST, INFO."),
    spec!("cluster", -2, Kind::Control, "x", 0, 0, cluster::cluster,
          "cluster", "CLUSTER STATUS, RANGES, INIT, ADD, REMOVE: a combkv cluster's administration."),
    spec!("command", -1, Kind::Control, "", 0, 0, command::command,
          "server", "Describes the commands (COUNT, DOCS, INFO, LIST)."),
    spec!("compare", -5, Kind::Write, "", 1, 1, compare::compare,
          "combkv", "A transaction's condition on a key's version or value, or a range's count or newest version."),
    spec!("config", -2, Kind::Control, "", 0, 0, server::config,
          "server", "CONFIG GET parameters."),
    spec!("copy", -3, Kind::Write, "d", 1, 2, keys::copy,
          "generic", "Copies a key's value and expiry to another key."),
    spec!("dbsize", 1, Kind::Read, "", 0, 0, keys::dbsize,
          "server", "The number of keys."),
    spec!("decr", 2, Kind::Write, "d", 1, 1, strings::decr,
          "string", "Decrements the integer value of a key by one."),
    spec!("decrby", 3, Kind::Write, "d", 1, 1, strings::decrby,
          "string", "Decrements the integer value of a key."),
    spec!("del", -2, Kind::Write, "", 1, -1, keys::del,
          "generic", "Deletes keys."),
    spec!("discard", 1, Kind::Control, "m", 0, 0, multi::discard,
          "transactions", "Discards a transaction."),
    spec!("echo", 2, Kind::Control, "", 0, 0, server::echo,
          "connection", "Returns the given string."),
    spec!("exec", 1, Kind::Write, "m", 0, 0, multi::exec,
          "transactions", "Executes the commands queued since MULTI."),
    spec!("exists", -2, Kind::Read, "", 1, -1, keys::exists,
          "generic", "Counts the keys that exist."),
    spec!("expire", -3, Kind::Write, "", 1, 1, keys::expire,
          "generic", "Sets a key's time to live in seconds."),
    spec!("expireat", -3, Kind::Write, "", 1, 1, keys::expireat,
          "generic", "Sets a key's expiry as a unix time in seconds."),
    spec!("expiretime", 2, Kind::Read, "", 1, 1, keys::expiretime,
          "generic", "The unix time in seconds a key expires at."),
    spec!("floor", 2, Kind::Read, "", 1, 1, ordered::floor,
          "combkv", "The greatest key <= key, with its value."),
    spec!("flushall", -1, Kind::Write, "x", 0, 0, keys::flushall,
          "server", "Removes every key."),
    spec!("flushdb", -1, Kind::Write, "x", 0, 0, keys::flushall,
          "server", "Removes every key."),
    spec!("get", 2, Kind::BatchRead(BatchRead::Get), "", 1, 1, strings::get,
          "string", "Returns the value of a key."),
    spec!("getat", 3, Kind::Read, "", 2, 2, ordered::getat,
          "combkv", "A key's value as of a snapshot."),
    spec!("getbit", 3, Kind::Read, "", 1, 1, bits::getbit,
          "bitmap", "Returns a bit of a value."),
    spec!("getdel", 2, Kind::Write, "", 1, 1, strings::getdel,
          "string", "Returns the value of a key and deletes it."),
    spec!("getex", -2, Kind::Write, "r", 1, 1, strings::getex,
          "string", "Returns a key's value and sets or removes its expiry."),
    spec!("getrange", 4, Kind::Read, "", 1, 1, strings::getrange,
          "string", "Returns a substring of a key's value."),
    spec!("getset", 3, Kind::Write, "d", 1, 1, strings::getset,
          "string", "Sets a key and returns its old value."),
    spec!("getv", 2, Kind::BatchRead(BatchRead::Getv), "", 1, 1, strings::getv,
          "combkv", "A key's value and version."),
    spec!("hello", -1, Kind::Control, "a", 0, 0, server::hello,
          "connection", "Handshakes: protocol version, AUTH, SETNAME."),
    spec!("incr", 2, Kind::Write, "d", 1, 1, strings::incr,
          "string", "Increments the integer value of a key by one."),
    spec!("incrby", 3, Kind::Write, "d", 1, 1, strings::incrby,
          "string", "Increments the integer value of a key."),
    spec!("incrbyfloat", 3, Kind::Write, "d", 1, 1, strings::incrbyfloat,
          "string", "Adds a decimal float to the value of a key."),
    spec!("info", -1, Kind::Control, "", 0, 0, server::info,
          "server", "Information and statistics about the server."),
    spec!("keys", 2, Kind::Read, "", 0, 0, keys::keys,
          "generic", "Keys matching a pattern, in key order."),
    spec!("lastsave", 1, Kind::Control, "", 0, 0, server::lastsave,
          "server", "Unix time of the last successful checkpoint."),
    spec!("latency", -2, Kind::Control, "", 0, 0, latency::latency,
          "server", "The latency monitor and per-command latency histograms."),
    spec!("lcs", -3, Kind::Read, "", 1, 2, lcs::lcs,
          "string", "The longest common subsequence of two values."),
    spec!("loadbackup", 2, Kind::Read, "x", 0, 0, server::loadbackup,
          "server", "Writes a backup's items into an empty store through the write path."),
    spec!("memory", -2, Kind::Read, "", 0, 0, memory::memory,
          "server", "Memory usage: of a key, of the server."),
    spec!("mget", -2, Kind::BatchRead(BatchRead::Mget), "", 1, -1, strings::mget,
          "string", "Returns the values of keys."),
    spec!("monitor", 1, Kind::Control, "", 0, 0, server::monitor,
          "server", "Streams every command the server runs."),
    spec!("mset", -3, Kind::Write, "d", 1, -1, strings::mset,
          "string", "Sets several keys."),
    spec!("msetnx", -3, Kind::Write, "d", 1, -1, strings::msetnx,
          "string", "Sets several keys only if none of them exists."),
    spec!("multi", 1, Kind::Control, "m", 0, 0, multi::multi,
          "transactions", "Starts a transaction."),
    spec!("object", -2, Kind::Read, "", 0, 0, object::object,
          "generic", "A key's encoding; REFCOUNT, IDLETIME and FREQ as far as combkv tracks them."),
    spec!("persist", 2, Kind::Write, "", 1, 1, keys::persist,
          "generic", "Removes a key's expiry."),
    spec!("pexpire", -3, Kind::Write, "", 1, 1, keys::pexpire,
          "generic", "Sets a key's time to live in milliseconds."),
    spec!("pexpireat", -3, Kind::Write, "", 1, 1, keys::pexpireat,
          "generic", "Sets a key's expiry as a unix time in milliseconds."),
    spec!("pexpiretime", 2, Kind::Read, "", 1, 1, keys::pexpiretime,
          "generic", "The unix time in milliseconds a key expires at."),
    spec!("ping", -1, Kind::Control, "", 0, 0, server::ping,
          "connection", "Returns PONG or the given string."),
    spec!("psetex", 4, Kind::Write, "d", 1, 1, strings::psetex,
          "string", "Sets a key with a time to live in milliseconds."),
    spec!("pttl", 2, Kind::Read, "", 1, 1, keys::pttl,
          "generic", "A key's time to live in milliseconds."),
    spec!("quit", -1, Kind::Control, "am", 0, 0, server::quit,
          "connection", "Closes the connection."),
    spec!("range", -3, Kind::BatchRead(BatchRead::Range), "", 0, 0, ordered::range,
          "combkv", "Items between two bounds, in key order, from one snapshot."),
    spec!("rangeat", -4, Kind::Read, "", 0, 0, ordered::rangeat,
          "combkv", "RANGE as of a snapshot."),
    spec!("rename", 3, Kind::Write, "", 1, 2, keys::rename,
          "generic", "Renames a key, overwriting the destination."),
    spec!("renamenx", 3, Kind::Write, "", 1, 2, keys::renamenx,
          "generic", "Renames a key only if the new name does not exist."),
    spec!("role", 1, Kind::Control, "", 0, 0, cluster::role,
          "server", "The node's replication role."),
    spec!("save", 1, Kind::Read, "x", 0, 0, server::save,
          "server", "Takes a checkpoint now."),
    spec!("scan", -2, Kind::Read, "x", 0, 0, keys::scan,
          "generic", "Iterates keys in key order."),
    spec!("select", 2, Kind::Control, "", 0, 0, server::select,
          "connection", "Selects database 0 (the only one)."),
    spec!("set", -3, Kind::Write, "d", 1, 1, strings::set,
          "string", "Sets a key (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL)."),
    spec!("setbit", 4, Kind::Write, "d", 1, 1, bits::setbit,
          "bitmap", "Sets or clears a bit of a value, growing it with zero bytes."),
    spec!("setex", 4, Kind::Write, "d", 1, 1, strings::setex,
          "string", "Sets a key with a time to live in seconds."),
    spec!("setnx", 3, Kind::Write, "d", 1, 1, strings::setnx,
          "string", "Sets a key only if it does not exist."),
    spec!("setrange", 4, Kind::Write, "d", 1, 1, bits::setrange,
          "string", "Overwrites part of a value from an offset, growing it with zero bytes."),
    spec!("shutdown", -1, Kind::Read, "x", 0, 0, server::shutdown,
          "server", "Stops the server as SIGTERM does (SAVE: checkpoint first)."),
    spec!("slowlog", -2, Kind::Control, "", 0, 0, server::slowlog,
          "server", "SLOWLOG GET, LEN, RESET."),
    spec!("snapshot", -2, Kind::Read, "x", 0, 0, ordered::snapshot,
          "combkv", "SNAPSHOT CREATE, RELEASE, LIST."),
    spec!("strlen", 2, Kind::Read, "", 1, 1, strings::strlen,
          "string", "The length of a key's value."),
    spec!("substr", 4, Kind::Read, "", 1, 1, strings::getrange,
          "string", "Returns a substring of a key's value (GETRANGE's old name)."),
    spec!("time", 1, Kind::Control, "", 0, 0, server::time,
          "server", "The server time."),
    spec!("touch", -2, Kind::Read, "", 1, -1, keys::touch,
          "generic", "Counts the keys that exist."),
    spec!("ttl", 2, Kind::Read, "", 1, 1, keys::ttl,
          "generic", "A key's time to live in seconds."),
    spec!("type", 2, Kind::Read, "", 1, 1, keys::type_,
          "generic", "The type of a key's value."),
    spec!("unlink", -2, Kind::Write, "", 1, -1, keys::del,
          "generic", "Deletes keys."),
    spec!("unwatch", 1, Kind::Control, "", 0, 0, multi::unwatch,
          "transactions", "Forgets every watched key."),
    spec!("wait", 3, Kind::Control, "", 0, 0, cluster::wait,
          "generic", "Waits for followers to hold the connection's writes."),
    spec!("watch", -2, Kind::Read, "m", 1, -1, multi::watch,
          "transactions", "Aborts the next EXEC if any of these keys changes."),
];

/// A test-only command, in debug builds alone (so never in a release
/// binary) and absent from the table (so from COMMAND): `DEBUG PANIC`
/// panics inside its handler, for the tests that check that a bug costs
/// one connection and nothing else.
#[cfg(debug_assertions)]
#[rustfmt::skip]
static DEBUG: Spec = spec!("debug", -2, Kind::Control, "", 0, 0, server::debug,
    "server", "DEBUG PANIC: panics (debug builds only).");

/// The command a request names: [`lookup`], and in debug builds the
/// test-only `DEBUG`.
#[inline]
pub(crate) fn lookup_request(name: &[u8]) -> Option<&'static Spec> {
    let found = lookup(name);
    #[cfg(debug_assertions)]
    if found.is_none() && name.eq_ignore_ascii_case(b"debug") {
        return Some(&DEBUG);
    }
    found
}

/// Whether the command or subcommand of statistics id `id` (its
/// [`full_name_index`]) has Redis's `fast` flag (the latency monitor's
/// `fast-command` event rather than `command`).
pub(crate) fn is_fast(id: usize) -> bool {
    docs::DOCS.get(id).is_some_and(|d| d.has_flag("fast"))
}

/// Whether the command or subcommand of statistics id `id` has Redis's
/// `admin` flag (MONITOR does not show those, as Redis).
pub(crate) fn is_admin(id: usize) -> bool {
    docs::DOCS.get(id).is_some_and(|d| d.has_flag("admin"))
}

/// Every command's and subcommand's full name, by statistics id (its
/// [`full_name_index`]), as INFO commandstats names them.
pub(crate) fn names() -> Vec<&'static str> {
    docs::DOCS.iter().map(|d| d.name).collect()
}

/// Redis's `loading` flag: whether the command of `line` (a container's
/// subcommand's, if it has them) runs while the dataset loads. Looked up
/// only then, so a lookup by name is fine.
pub(crate) fn runs_while_loading(spec: &Spec, line: &[&[u8]]) -> bool {
    let sub = line.get(1).and_then(|sub| {
        let name = format!("{}|{}", spec.name, String::from_utf8_lossy(sub));
        docs::find_bytes(name.as_bytes())
    });
    sub.or_else(|| docs::find(spec.name))
        .is_some_and(|e| e.doc.has_flag("loading"))
}

pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    // This runs for every request: one multiply picks the only slot a name
    // can be in, and names compare as integers (a binary search over the
    // table was ~180 instructions and seven unpredictable branches).
    let key = name_key(name)?;
    let t = &*NAME_TABLE;
    let i = t.slots[t.slot(key)];
    (i != NameTable::EMPTY && NAME_KEYS[i as usize] == key).then(|| &COMMANDS[i as usize])
}

/// The key arguments of `line` for the command or subcommand `name`
/// (`get`, `client|list`), each with the permission it needs (ACL's READ
/// and WRITE bits), as its key specs give them; None when the line cannot
/// hold them.
pub(crate) fn key_positions(name: &str, line: &[&[u8]]) -> Option<Vec<(usize, u8)>> {
    let entry = docs::find(name)?;
    let keys = entry.doc.key_positions(line)?;
    // SET reads the key only with GET (Redis's `setGetKeys`: its spec's
    // `variable_flags` become OW UPDATE without it).
    let set_without_get = name == "set"
        && !line[3.min(line.len())..]
            .iter()
            .any(|a| a.eq_ignore_ascii_case(b"get"));
    Some(
        keys.into_iter()
            .map(|(i, k)| {
                let need = super::acl::need_of(k.flags);
                (
                    i,
                    if set_without_get {
                        crate::state::acl::WRITE
                    } else {
                        need
                    },
                )
            })
            .collect(),
    )
}

/// What ACL rules are written against: every command and subcommand this
/// table documents, with its ACL categories.
pub(crate) fn acl_catalog() -> crate::state::acl::Catalog {
    let entries: Vec<(&'static str, Vec<String>)> = docs::DOCS
        .iter()
        .filter(|d| {
            let command = d.name.split('|').next().unwrap_or(d.name);
            lookup(command.as_bytes()).is_some()
        })
        .map(|d| (d.name, d.acl_categories()))
        .collect();
    crate::state::acl::Catalog::new(
        entries
            .iter()
            .map(|(n, cats)| (*n, cats.iter().map(String::as_str).collect())),
    )
}

/// Per `COMMANDS` entry: its documentation index and whether it has
/// subcommands (CLIENT LIST's `cmd=` names the subcommand).
static DOC_OF: LazyLock<Vec<(u32, bool)>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .map(|s| {
            let i = docs::index_of(s.name).map_or(NO_COMMAND, |i| i as u32);
            (i, docs::subcommands(s.name).next().is_some())
        })
        .collect()
});

use crate::state::clients::NO_COMMAND;

/// The documentation index of what a request runs, its full name as Redis
/// gives it (`get`, `client|list`), for CLIENT LIST's `cmd=`; `NO_COMMAND`
/// for an unknown command or subcommand (Redis's `NULL`). A container
/// command without its subcommand is itself, as in Redis.
pub(crate) fn full_name_index(spec: Option<&'static Spec>, sub: Option<&[u8]>) -> u32 {
    let Some(spec) = spec else {
        return NO_COMMAND;
    };
    // The entry's position in the table, from its address (entries are
    // `Spec`s laid out in order).
    let at = (spec as *const Spec as usize).wrapping_sub(COMMANDS.as_ptr() as usize)
        / std::mem::size_of::<Spec>();
    let Some(&(doc, container)) = DOC_OF.get(at) else {
        return NO_COMMAND;
    };
    match sub {
        Some(sub) if container => {
            let name = format!(
                "{}|{}",
                spec.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            );
            docs::index_of(&name).map_or(NO_COMMAND, |i| i as u32)
        }
        _ => doc,
    }
}

/// The full name at a documentation index (see [`full_name_index`]).
pub(crate) fn full_name(i: u32) -> Option<&'static str> {
    docs::name_at(i as usize)
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

#[cfg(test)]
mod tests {
    use super::{COMMANDS, NAME_KEYS, lookup};

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
