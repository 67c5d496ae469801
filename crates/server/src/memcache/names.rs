//! memcached commands as the statistics name them (INFO-style
//! `commandstats` for memcached clients, the metrics' `cmd` label): one id
//! per command word, the binary protocol's requests under the text
//! command they match.

use super::binary::BinCmd;
use super::parse::{GetKind, Request};
use super::types::StoreCmd;

/// Every name, in id order.
pub const NAMES: &[&str] = &[
    "get",
    "gets",
    "gat",
    "gats",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "incr",
    "decr",
    "touch",
    "flush_all",
    "version",
    "quit",
    "shutdown",
    "verbosity",
    "stats",
    "lru_crawler",
    "mn",
    "me",
    "mg",
    "ms",
    "md",
    "ma",
    "auth",
    "noop",
    "sasl",
];

fn id(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).unwrap_or(0)
}

fn store(cmd: StoreCmd) -> &'static str {
    match cmd {
        StoreCmd::Set => "set",
        StoreCmd::Add => "add",
        StoreCmd::Replace => "replace",
        StoreCmd::Append => "append",
        StoreCmd::Prepend => "prepend",
        StoreCmd::Cas => "cas",
    }
}

/// The statistics id of `req`; None for a part of a retrieval line after
/// its first (a line counts once).
pub fn of(req: &Request<'_>) -> Option<usize> {
    let name = match req {
        Request::Get { first: false, .. } => return None,
        Request::Get { kind, .. } => match kind {
            GetKind::Get => "get",
            GetKind::Gets => "gets",
            GetKind::Gat => "gat",
            GetKind::Gats => "gats",
        },
        Request::Store { cmd, .. } => store(*cmd),
        Request::Delete { .. } => "delete",
        Request::Arith { incr, .. } => {
            if *incr {
                "incr"
            } else {
                "decr"
            }
        }
        Request::Touch { .. } => "touch",
        Request::FlushAll { .. } => "flush_all",
        Request::Version => "version",
        Request::Quit => "quit",
        Request::Shutdown { .. } => "shutdown",
        Request::Verbosity { .. } => "verbosity",
        Request::Stats { .. } => "stats",
        Request::MetaDump { .. } | Request::MetaDumpBadClass => "lru_crawler",
        Request::MetaNoop => "mn",
        Request::MetaDebug { .. } => "me",
        Request::MetaGet { .. } => "mg",
        Request::MetaSet { .. } => "ms",
        Request::MetaDelete { .. } => "md",
        Request::MetaArith { .. } => "ma",
        Request::Auth { .. } => "auth",
        Request::Binary(b) => binary(&b.cmd),
    };
    Some(id(name))
}

fn binary(cmd: &BinCmd<'_>) -> &'static str {
    match cmd {
        BinCmd::Get { .. } => "get",
        BinCmd::Touch { value: true, .. } => "gat",
        BinCmd::Touch { .. } => "touch",
        BinCmd::Store { cmd, cas, .. } if *cas != 0 && *cmd == StoreCmd::Set => "cas",
        BinCmd::Store { cmd, .. } => store(*cmd),
        BinCmd::Delete { .. } => "delete",
        BinCmd::Arith { incr: true, .. } => "incr",
        BinCmd::Arith { .. } => "decr",
        BinCmd::Quit => "quit",
        BinCmd::Flush { .. } => "flush_all",
        BinCmd::Noop => "noop",
        BinCmd::Version => "version",
        BinCmd::Verbosity => "verbosity",
        BinCmd::Stat { .. } => "stats",
        BinCmd::SaslListMechs | BinCmd::SaslAuth { .. } | BinCmd::SaslStep => "sasl",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct() {
        for (i, n) in NAMES.iter().enumerate() {
            assert_eq!(id(n), i, "{n}");
        }
    }
}
