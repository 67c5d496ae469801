//! What ACL rules are written against: every command and subcommand the
//! server has (`get`, `client|setname`), each with its ACL categories, and
//! the categories by name in Redis's order. The command table builds it
//! (it knows the commands); the ACL state only reads it.

use std::collections::HashMap;

/// ACL categories in Redis's order (`ACLCommandCategories`): a command's
/// categories are a bit mask over this list.
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The category bit of a name (without its `@`), lowercase or not.
pub fn category(name: &str) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Every command and subcommand, by id (its index).
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    /// Full names, lowercase: `get`, `client|setname`.
    pub names: Vec<String>,
    /// A subcommand's command.
    pub parent: Vec<Option<usize>>,
    /// A command's subcommands.
    pub subs: Vec<Vec<usize>>,
    /// Category bits.
    pub cats: Vec<u32>,
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// A catalog of `(full name, category names)`, commands before their
    /// subcommands.
    pub fn new<'a>(entries: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>) -> Catalog {
        let mut c = Catalog::default();
        for (name, cats) in entries {
            let id = c.names.len();
            let parent = name
                .split_once('|')
                .and_then(|(p, _)| c.by_name.get(p).copied());
            if let Some(p) = parent {
                c.subs[p].push(id);
            }
            c.names.push(name.to_ascii_lowercase());
            c.parent.push(parent);
            c.subs.push(Vec::new());
            c.cats.push(
                cats.iter()
                    .filter_map(|n| category(n.trim_start_matches('@')))
                    .fold(0, |m, b| m | b),
            );
            c.by_name.insert(name.to_ascii_lowercase(), id);
        }
        c
    }

    /// The id of a full name (`get`, `config|get`), any case.
    pub fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(&name.to_ascii_lowercase()).copied()
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
