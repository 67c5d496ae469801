//! What COMMAND INFO, COMMAND DOCS and COMMAND GETKEYS say about each
//! command, Redis 7.2 style: its syntax (parsed into Redis 7 argument
//! specs), key specs, flags, ACL categories, tips, `since` and complexity.
//! `redis-cli` builds its usage hints from the arguments, and clients find a
//! command's keys from the key specs.
//!
//! Entries are keyed by the lowercase command name (`client|setname` for a
//! subcommand), so the command table (`table`) stays about dispatch; the
//! unit tests keep the two in step: every table command has an entry whose
//! syntax parses, its key positions match the row's first and last key, and
//! its `denyoom`, `no_auth` and `no_multi` flags match the row's.
//!
//! Flags, categories and tips are Redis 7.2's for the commands Redis has,
//! except that flags about machinery combkv lacks (`noscript`,
//! `allow_busy`, `skip_slowlog`, `no_async_loading`) are left out,
//! `no_multi` is added where combkv refuses a command inside MULTI and
//! Redis does not (SCAN, BGSAVE, FLUSHALL ...), and the
//! `nondeterministic_output_order` tip is dropped where combkv answers in a
//! fixed order (KEYS in key order, COMMAND in table order). Complexities
//! are combkv's: its keys live in an ordered tree, so a key lookup is
//! O(log N), not Redis's O(1).
//!
//! ## Syntax notation
//!
//! Redis's usual notation: `UPPER` words are tokens, lowercase words
//! placeholders, `[...]` optional, `<a | b>` one of, `[a | b]` optionally
//! one of, and a trailing optional group ending in `...` repeats the items
//! before it (`key [key ...]`, `key value [key value ...]`). A token takes
//! the items after it up to the next bare token: none makes a pure token
//! (`NX`), one a token that introduces that value (`EX seconds`), several a
//! block named after the token (`AUTH username password`). A placeholder's
//! type comes from [`arg_type`], an explicit map. One-ofs and blocks
//! without a leading token take their names from the entry's `groups`, in
//! the order they open in the syntax (Redis names them: SET's `condition`
//! and `expiration`).

use std::sync::LazyLock;

/// A Redis 7 argument type, as COMMAND DOCS spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgType {
    String,
    Integer,
    Double,
    Key,
    Pattern,
    UnixTime,
    PureToken,
    OneOf,
    Block,
}

impl ArgType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::Double => "double",
            ArgType::Key => "key",
            ArgType::Pattern => "pattern",
            ArgType::UnixTime => "unix-time",
            ArgType::PureToken => "pure-token",
            ArgType::OneOf => "oneof",
            ArgType::Block => "block",
        }
    }

    /// One-ofs and blocks hold arguments (and have no display text).
    pub(crate) fn is_group(self) -> bool {
        matches!(self, ArgType::OneOf | ArgType::Block)
    }
}

/// One argument spec of COMMAND DOCS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    pub name: String,
    pub kind: ArgType,
    pub token: Option<String>,
    pub optional: bool,
    pub multiple: bool,
    pub multiple_token: bool,
    /// For a key: the index of the key spec that covers it.
    pub key_spec: Option<usize>,
    /// A one-of's choices, a block's parts.
    pub args: Vec<Arg>,
}

impl Arg {
    fn new(name: &str, kind: ArgType) -> Arg {
        Arg {
            name: name.to_string(),
            kind,
            token: None,
            optional: false,
            multiple: false,
            multiple_token: false,
            key_spec: None,
            args: Vec::new(),
        }
    }

    /// A one-of or block, named later (see [`name_groups`]) unless a token
    /// names it.
    fn group(kind: ArgType, args: Vec<Arg>) -> Arg {
        Arg {
            args,
            ..Arg::new("", kind)
        }
    }

    /// COMMAND DOCS's `flags` of the argument.
    pub(crate) fn flags(&self) -> Vec<&'static str> {
        [
            (self.optional, "optional"),
            (self.multiple, "multiple"),
            (self.multiple_token, "multiple_token"),
        ]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect()
    }
}

/// A Redis 7 key spec of the one shape combkv's commands need: keys from
/// index `begin`, to `lastkey` (relative to `begin` when >= 0, from the end
/// when < 0), every `step`-th.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeySpec {
    /// Redis's key spec flags, space-separated (`RW access update`).
    pub flags: &'static str,
    pub notes: &'static str,
    pub begin: i32,
    pub lastkey: i32,
    pub step: i32,
}

impl KeySpec {
    /// The flags in Redis's order.
    pub(crate) fn flag_list(&self) -> Vec<&'static str> {
        ordered(self.flags, KEY_FLAG_ORDER)
    }
}

/// A key spec for the one key at `begin`.
const fn key_at(flags: &'static str, begin: i32) -> KeySpec {
    KeySpec {
        flags,
        notes: "",
        begin,
        lastkey: 0,
        step: 1,
    }
}

/// One key, the first argument.
const fn key1(flags: &'static str) -> KeySpec {
    key_at(flags, 1)
}

/// Every argument from the first on is a key (every `step`-th).
const fn all_keys(flags: &'static str, step: i32) -> KeySpec {
    KeySpec {
        flags,
        notes: "",
        begin: 1,
        lastkey: -1,
        step,
    }
}

/// One command's (or subcommand's) documentation.
#[derive(Debug)]
pub(crate) struct Doc {
    /// Lowercase; `parent|sub` for a subcommand.
    pub name: &'static str,
    /// A subcommand's arity and summary (a command's are its table row's).
    pub arity: i32,
    pub summary: &'static str,
    /// The Redis version that added it; combkv's version for combkv's own.
    pub since: &'static str,
    pub complexity: &'static str,
    /// The arguments after the name (after the subcommand for one), in
    /// the notation above.
    pub syntax: &'static str,
    /// Names of the syntax's one-ofs and token-less blocks, in order.
    pub groups: &'static [&'static str],
    /// Command flags, space-separated; `movablekeys` is derived.
    pub flags: &'static str,
    /// ACL categories besides those the flags imply (`setImplicitACLCategories`).
    pub acl: &'static str,
    pub tips: &'static str,
    pub keys: &'static [KeySpec],
}

const NONE: Doc = Doc {
    name: "",
    arity: 0,
    summary: "",
    since: "",
    complexity: "",
    syntax: "",
    groups: &[],
    flags: "",
    acl: "",
    tips: "",
    keys: &[],
};

/// COMMAND INFO's command flags in Redis's order (`addReplyFlagsForCommand`),
/// those combkv reports.
const FLAG_ORDER: &[&str] = &[
    "write",
    "readonly",
    "denyoom",
    "admin",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "no_mandatory_keys",
    "no_multi",
    "movablekeys",
];

/// ACL categories in Redis's order (`ACLCommandCategories`): the ACL
/// table's list, which rules are written against.
const ACL_ORDER: &[&str] = &crate::state::acl::catalog::CATEGORIES;

/// Key spec flags in Redis's order (`addReplyFlagsForKeyArgs`).
const KEY_FLAG_ORDER: &[&str] = &[
    "RO",
    "RW",
    "OW",
    "RM",
    "access",
    "update",
    "insert",
    "delete",
    "not_key",
    "incomplete",
    "variable_flags",
];

/// The words of `list` (space-separated) in `order`'s order.
fn ordered(list: &str, order: &[&'static str]) -> Vec<&'static str> {
    order
        .iter()
        .copied()
        .filter(|w| list.split_whitespace().any(|x| x == *w))
        .collect()
}

fn has(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

impl Doc {
    /// COMMAND INFO's flags, in Redis's order. `movablekeys` when the key
    /// specs alone do not find the keys (an incomplete spec), as Redis
    /// derives it.
    pub(crate) fn flag_list(&self) -> Vec<&'static str> {
        let mut flags = ordered(self.flags, FLAG_ORDER);
        if self.legacy_keys().3 {
            flags.push("movablekeys");
        }
        flags
    }

    pub(crate) fn has_flag(&self, flag: &str) -> bool {
        has(self.flags, flag)
    }

    /// ACL categories with their `@`, Redis's explicit ones plus those its
    /// flags imply: write, read, admin (and dangerous), fast, else slow.
    pub(crate) fn acl_categories(&self) -> Vec<String> {
        let f = |flag| self.has_flag(flag);
        let implied = [
            (f("write"), "write"),
            (f("readonly"), "read"),
            (f("admin"), "admin"),
            (f("admin"), "dangerous"),
            (f("fast"), "fast"),
            (!f("fast"), "slow"),
        ];
        ACL_ORDER
            .iter()
            .filter(|c| has(self.acl, c) || implied.iter().any(|(on, i)| *on && i == *c))
            .map(|c| format!("@{c}"))
            .collect()
    }

    pub(crate) fn tip_list(&self) -> impl Iterator<Item = &'static str> {
        self.tips.split_whitespace()
    }

    /// COMMAND INFO's first key, last key and step, and whether the
    /// specs leave keys unfound (`movablekeys`): Redis's
    /// `populateCommandLegacyRangeSpec`. A single spec is used as it is
    /// (MSET's step 2 included); several join when consecutive with step 1
    /// (RENAME, COPY: keys 1 to 2).
    pub(crate) fn legacy_keys(&self) -> (i32, i32, i32, bool) {
        let incomplete = self.keys.iter().any(|k| has(k.flags, "incomplete"));
        let abs_last = |k: &KeySpec| {
            if k.lastkey >= 0 {
                k.begin + k.lastkey
            } else {
                k.lastkey
            }
        };
        match self.keys {
            [] => (0, 0, 0, false),
            [k] => (k.begin, abs_last(k), k.step, incomplete),
            specs => {
                let (mut first, mut last, mut movable) = (i32::MAX, 0i32, incomplete);
                for k in specs {
                    if k.step != 1 || (last != 0 && last != k.begin - 1) {
                        movable = true;
                        continue;
                    }
                    first = first.min(k.begin);
                    // A negative (from the end) last key is the furthest,
                    // as Redis's unsigned comparison makes it.
                    if (abs_last(k) as u32) > (last as u32) {
                        last = abs_last(k);
                    }
                }
                if first == i32::MAX {
                    (0, 0, 0, true)
                } else {
                    (first, last, 1, movable)
                }
            }
        }
    }

    /// The key arguments of a full command line (`line[0]` the command
    /// name, a subcommand's name in `line[1]`) with their spec's flags, as
    /// COMMAND GETKEYS finds them; None when the line cannot hold them
    /// (Redis's "Invalid arguments specified for command").
    pub(crate) fn key_positions(&self, line: &[&[u8]]) -> Option<Vec<(usize, &'static KeySpec)>> {
        // COMPARE's key form names a key at 1, its RANGE form none: what
        // the incomplete spec cannot say (Redis's getkeys function).
        if self.name == "compare" {
            let range_form = line.len() == 7 && line[1].eq_ignore_ascii_case(b"range");
            return Some(if range_form {
                Vec::new()
            } else {
                vec![(1, &self.keys[0])]
            });
        }
        let argc = line.len() as i64;
        let mut keys = Vec::new();
        for k in self.keys {
            let first = i64::from(k.begin);
            let last = if k.lastkey >= 0 {
                first + i64::from(k.lastkey)
            } else {
                argc + i64::from(k.lastkey)
            };
            if last >= argc || last < first || first >= argc {
                return None;
            }
            let mut i = first;
            while i <= last {
                keys.push((i as usize, k));
                i += i64::from(k.step);
            }
        }
        Some(keys)
    }
}

mod entries;

pub(crate) use entries::DOCS;

/// Every entry's arguments, parsed once, in `DOCS` order. The unit tests
/// parse every syntax, so none is left empty by an error here.
static ARGS: LazyLock<Vec<Vec<Arg>>> =
    LazyLock::new(|| DOCS.iter().map(|d| parse(d).unwrap_or_default()).collect());

/// One entry with its parsed arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub doc: &'static Doc,
    pub args: &'static [Arg],
}

fn entry(i: usize) -> Entry {
    Entry {
        doc: &DOCS[i],
        args: &ARGS[i],
    }
}

/// The entry of a lowercase name (`get`, `client|setname`).
pub(crate) fn find(name: &str) -> Option<Entry> {
    DOCS.binary_search_by(|d| d.name.cmp(name)).ok().map(entry)
}

/// The position of a command's or subcommand's entry.
pub(crate) fn index_of(name: &str) -> Option<usize> {
    DOCS.binary_search_by(|d| d.name.cmp(name)).ok()
}

/// The name of the entry at `i`.
pub(crate) fn name_at(i: usize) -> Option<&'static str> {
    DOCS.get(i).map(|d| d.name)
}

/// [`find`] for a name as a client sent it, in any case.
pub(crate) fn find_bytes(name: &[u8]) -> Option<Entry> {
    find(&String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// A command's subcommands (none for most), in name order.
pub(crate) fn subcommands(parent: &str) -> impl Iterator<Item = Entry> + '_ {
    DOCS.iter()
        .enumerate()
        .filter(move |(_, d)| {
            d.name
                .strip_prefix(parent)
                .is_some_and(|rest| rest.starts_with('|'))
        })
        .map(|(i, _)| entry(i))
}

/// A placeholder's type, from its name (and, where a name means something
/// else in one command, the command's).
fn arg_type(cmd: &str, name: &str) -> ArgType {
    match (cmd, name) {
        // RANGE bounds (`[a`, `(a`, `-`, `+`), not offsets.
        ("range" | "rangeat" | "compare", "start" | "end") => ArgType::String,
        // SETBIT's value is a bit; INCRBYFLOAT's increment a float.
        ("setbit", "value") => ArgType::Integer,
        ("incrbyfloat", "increment") => ArgType::Double,
        (_, "key" | "key1" | "key2" | "source" | "destination" | "newkey") => ArgType::Key,
        (
            _,
            "seconds" | "milliseconds" | "offset" | "start" | "end" | "count" | "numkeys"
            | "cursor" | "index" | "increment" | "decrement" | "bit" | "version" | "id"
            | "protover" | "destination-db" | "min-match-len" | "timeout" | "numreplicas",
        ) => ArgType::Integer,
        (_, "unix-time-seconds" | "unix-time-milliseconds") => ArgType::UnixTime,
        (_, "pattern") => ArgType::Pattern,
        _ => ArgType::String,
    }
}

/// An upper-case word: a token, not a placeholder.
fn is_token(w: &str) -> bool {
    w.bytes().any(|b| b.is_ascii_uppercase()) && !w.bytes().any(|b| b.is_ascii_lowercase())
}

/// The notation before it becomes argument specs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Raw<'a> {
    Word(&'a str),
    /// `[...]` (optional) or `<...>`, with its alternatives.
    Group {
        optional: bool,
        alts: Vec<Vec<Raw<'a>>>,
    },
    /// `x y [x y ...]` folded: the items repeated.
    Repeat(Vec<Raw<'a>>),
}

/// Splits the notation into words, brackets and bars.
fn lex(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        let punct = matches!(c, '[' | ']' | '<' | '>' | '|');
        if c.is_whitespace() || punct {
            if let Some(st) = start.take() {
                out.push(&s[st..i]);
            }
            if punct {
                out.push(&s[i..i + 1]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(st) = start {
        out.push(&s[st..]);
    }
    out
}

/// Reads items up to `close` (the end for None) into alternatives split at
/// `|`; a repeat group folds into the items before it.
fn read<'a>(
    toks: &[&'a str],
    pos: &mut usize,
    close: Option<&str>,
) -> Result<(Vec<Vec<Raw<'a>>>, bool), String> {
    let mut alts: Vec<Vec<Raw<'a>>> = vec![Vec::new()];
    let mut repeat = false;
    loop {
        let Some(&t) = toks.get(*pos) else {
            return match close {
                None => Ok((alts, repeat)),
                Some(c) => Err(format!("missing '{c}'")),
            };
        };
        *pos += 1;
        if repeat && Some(t) != close {
            return Err("'...' must end its group".into());
        }
        let alt = alts.last_mut().expect("one alternative at least");
        match t {
            "[" | "<" => {
                let optional = t == "[";
                let (inner, rep) = read(toks, pos, Some(if optional { "]" } else { ">" }))?;
                if inner.iter().any(Vec::is_empty) {
                    return Err("an empty alternative".into());
                }
                if !rep {
                    alt.push(Raw::Group {
                        optional,
                        alts: inner,
                    });
                    continue;
                }
                // `x y [x y ...]`: the group repeats the items before it.
                let [items] = <[_; 1]>::try_from(inner).map_err(|_| "'...' after a '|'")?;
                if !optional || alt.len() < items.len() || alt[alt.len() - items.len()..] != items {
                    return Err("'...' must follow the items it repeats".into());
                }
                alt.truncate(alt.len() - items.len());
                alt.push(Raw::Repeat(items));
            }
            "|" => alts.push(Vec::new()),
            "..." => repeat = true,
            "]" | ">" if Some(t) == close => return Ok((alts, repeat)),
            "]" | ">" => return Err(format!("unbalanced '{t}'")),
            w => alt.push(Raw::Word(w)),
        }
    }
}

/// Argument specs of a run of items: a token takes the items up to the
/// next bare token.
fn to_args(cmd: &str, items: &[Raw<'_>]) -> Result<Vec<Arg>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let bare_token = |r: &Raw<'_>| matches!(r, Raw::Word(w) if is_token(w));
        if let Raw::Word(token) = items[i]
            && is_token(token)
        {
            let end = items[i + 1..]
                .iter()
                .position(bare_token)
                .map_or(items.len(), |p| i + 1 + p);
            let mut operands = to_args(cmd, &items[i + 1..end])?;
            let mut arg = match operands.len() {
                0 => Arg::new(&token.to_ascii_lowercase(), ArgType::PureToken),
                1 => operands.pop().expect("one operand"),
                _ => Arg {
                    name: token.to_ascii_lowercase(),
                    ..Arg::group(ArgType::Block, operands)
                },
            };
            if arg.token.is_some() {
                return Err(format!("two tokens for one argument at {token}"));
            }
            arg.token = Some(token.to_string());
            out.push(arg);
            i = end;
        } else {
            out.push(to_arg(cmd, &items[i])?);
            i += 1;
        }
    }
    Ok(out)
}

/// A run of items as one argument: the item itself, or a block of them.
fn one(cmd: &str, items: &[Raw<'_>]) -> Result<Arg, String> {
    let mut args = to_args(cmd, items)?;
    Ok(match args.len() {
        1 => args.pop().expect("one argument"),
        _ => Arg::group(ArgType::Block, args),
    })
}

fn to_arg(cmd: &str, raw: &Raw<'_>) -> Result<Arg, String> {
    Ok(match raw {
        Raw::Word(w) => Arg::new(w, arg_type(cmd, w)),
        Raw::Group { optional, alts } => {
            let mut choices = alts
                .iter()
                .map(|alt| one(cmd, alt))
                .collect::<Result<Vec<_>, _>>()?;
            let mut arg = match choices.len() {
                1 => choices.pop().expect("one choice"),
                _ => Arg::group(ArgType::OneOf, choices),
            };
            arg.optional |= *optional;
            arg
        }
        Raw::Repeat(items) => {
            let mut arg = one(cmd, items)?;
            arg.multiple = true;
            // `GET pattern [GET pattern ...]`: the token comes with each.
            arg.multiple_token = arg.token.is_some();
            arg
        }
    })
}

/// Names the unnamed one-ofs and blocks from `names`, outer before inner.
fn name_groups<'n>(
    args: &mut [Arg],
    names: &mut impl Iterator<Item = &'n &'n str>,
) -> Result<(), String> {
    for a in args {
        if a.name.is_empty() {
            a.name = names
                .next()
                .ok_or("a one-of or block without a name")?
                .to_string();
        }
        name_groups(&mut a.args, names)?;
    }
    Ok(())
}

/// Gives each key argument its key spec: the n-th key the n-th spec, the
/// keys past the last spec the last one (LCS's two keys share one).
fn number_keys(args: &mut [Arg], seen: &mut usize, specs: usize) -> Result<(), String> {
    for a in args {
        if a.kind == ArgType::Key {
            if specs == 0 {
                return Err(format!("key argument '{}' without a key spec", a.name));
            }
            a.key_spec = Some((*seen).min(specs - 1));
            *seen += 1;
        }
        number_keys(&mut a.args, seen, specs)?;
    }
    Ok(())
}

/// An entry's syntax as argument specs.
fn parse(doc: &Doc) -> Result<Vec<Arg>, String> {
    let toks = lex(doc.syntax);
    let mut pos = 0;
    let (alts, repeat) = read(&toks, &mut pos, None)?;
    let [items] = <[_; 1]>::try_from(alts).map_err(|_| "'|' outside a group")?;
    if repeat {
        return Err("'...' outside a group".into());
    }
    let mut args = to_args(doc.name, &items)?;
    let mut names = doc.groups.iter();
    name_groups(&mut args, &mut names)?;
    if names.next().is_some() {
        return Err("more group names than groups".into());
    }
    let mut seen = 0;
    number_keys(&mut args, &mut seen, doc.keys.len())?;
    if seen < doc.keys.len() {
        return Err("a key spec without a key argument".into());
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::super::COMMANDS;
    use super::*;

    fn syntax(name: &'static str, syntax: &'static str, groups: &'static [&'static str]) -> Doc {
        Doc {
            name,
            syntax,
            groups,
            ..NONE
        }
    }

    /// `name:type` with `[token]`, `?` optional, `*` multiple, `+`
    /// multiple_token, `#n` key spec, `{...}` parts: a compact view.
    fn show(args: &[Arg]) -> String {
        let one = |a: &Arg| {
            let mut s = format!("{}:{}", a.name, a.kind.name());
            if let Some(t) = &a.token {
                s += &format!("[{t}]");
            }
            for (on, mark) in [
                (a.optional, "?"),
                (a.multiple, "*"),
                (a.multiple_token, "+"),
            ] {
                if on {
                    s += mark;
                }
            }
            if let Some(k) = a.key_spec {
                s += &format!("#{k}");
            }
            if a.kind.is_group() {
                s += &format!("{{{}}}", show(&a.args));
            }
            s
        };
        args.iter().map(one).collect::<Vec<_>>().join(" ")
    }

    fn parsed(d: &Doc) -> String {
        show(&parse(d).unwrap_or_else(|e| panic!("{}: {e}", d.name)))
    }

    #[test]
    fn the_notation_parses_into_redis_argument_specs() {
        let set = find("set").unwrap();
        assert_eq!(
            show(set.args),
            "key:key#0 value:string \
             condition:oneof?{nx:pure-token[NX] xx:pure-token[XX]} get:pure-token[GET]? \
             expiration:oneof?{seconds:integer[EX] milliseconds:integer[PX] \
             unix-time-seconds:unix-time[EXAT] unix-time-milliseconds:unix-time[PXAT] \
             keepttl:pure-token[KEEPTTL]}"
        );
        assert_eq!(
            show(find("mset").unwrap().args),
            "data:block*{key:key#0 value:string}"
        );
        assert_eq!(show(find("del").unwrap().args), "key:key*#0");
        assert_eq!(
            show(find("hello").unwrap().args),
            "arguments:block?{protover:integer \
             auth:block[AUTH]?{username:string password:string} clientname:string[SETNAME]?}"
        );
        assert_eq!(
            show(find("bitpos").unwrap().args),
            "key:key#0 bit:integer range:block?{start:integer end-unit-block:block?{\
             end:integer unit:oneof?{byte:pure-token[BYTE] bit:pure-token[BIT]}}}"
        );
        assert_eq!(
            show(find("copy").unwrap().args),
            "source:key#0 destination:key#1 destination-db:integer[DB]? replace:pure-token[REPLACE]?"
        );
        assert_eq!(
            show(find("lcs").unwrap().args),
            "key1:key#0 key2:key#0 len:pure-token[LEN]? idx:pure-token[IDX]? \
             min-match-len:integer[MINMATCHLEN]? withmatchlen:pure-token[WITHMATCHLEN]?"
        );
        assert_eq!(
            show(find("incrbyfloat").unwrap().args),
            "key:key#0 increment:double"
        );
        assert_eq!(
            show(find("command|list").unwrap().args),
            "filterby:oneof[FILTERBY]?{module-name:string[MODULE] category:string[ACLCAT] \
             pattern:pattern[PATTERN]}"
        );
        assert_eq!(
            show(find("command|getkeys").unwrap().args),
            "command:string arg:string?*"
        );
        assert_eq!(
            show(find("range").unwrap().args),
            "start:string end:string count:integer[LIMIT]? rev:pure-token[REV]? \
             floor:pure-token[FLOOR]? keysonly:pure-token[KEYSONLY]? \
             withversions:pure-token[WITHVERSIONS]?"
        );
        assert_eq!(
            show(find("compare").unwrap().args),
            "condition:oneof{key-condition:block{key:key#0 key-check:oneof{\
             version:block[VERSION]{op:string version:integer} \
             value:block[VALUE]{op:string value:string}}} \
             range:block[RANGE]{start:string end:string range-check:oneof{\
             count:block[COUNT]{op:string count:integer} \
             maxversion:block[MAXVERSION]{op:string version:integer}}}}"
        );
        // A repeated token comes with every value.
        assert_eq!(
            parsed(&syntax("x", "item [GET pattern [GET pattern ...]]", &[])),
            "item:string pattern:pattern[GET]?*+"
        );
        assert_eq!(
            parsed(&syntax("x", "[ID id [id ...]]", &[])),
            "id:integer[ID]?*"
        );
        assert_eq!(parsed(&syntax("x", "", &[])), "");
    }

    #[test]
    fn bad_notation_is_refused() {
        for (s, groups) in [
            ("item [value", &[][..]),
            ("item value]", &[]),
            ("item <a | b]", &[]),
            ("item [a | ]", &[]),
            ("a | b", &[]),
            ("item ...", &[]),
            ("item [value ...]", &[]),
            ("item [item ... x]", &[]),
            ("item [a | b]", &[]),
            ("item [a | b]", &["one", "two"]),
        ] {
            assert!(parse(&syntax("x", s, groups)).is_err(), "{s:?} {groups:?}");
        }
        // The same, written right, parses.
        assert!(parse(&syntax("x", "item [a | b]", &["one"])).is_ok());
        assert!(parse(&syntax("x", "item [item ...]", &[])).is_ok());
        // A key needs a key spec, and a key spec a key.
        assert!(parse(&syntax("x", "key", &[])).is_err());
        const RO: &[KeySpec] = &[key1("RO")];
        let keyless = Doc {
            keys: RO,
            ..syntax("x", "value", &[])
        };
        assert!(parse(&keyless).is_err());
    }

    #[test]
    fn every_entry_parses_and_names_sort() {
        assert!(
            DOCS.windows(2).all(|w| w[0].name < w[1].name),
            "DOCS sorted"
        );
        for d in DOCS {
            parse(d).unwrap_or_else(|e| panic!("{}: {e} in {:?}", d.name, d.syntax));
            assert_eq!(d.name, d.name.to_ascii_lowercase());
            assert!(
                !d.since.is_empty() && !d.complexity.is_empty(),
                "{}",
                d.name
            );
            for f in d.flags.split_whitespace() {
                assert!(
                    FLAG_ORDER.contains(&f) && f != "movablekeys",
                    "{}: {f}",
                    d.name
                );
            }
            assert!(
                !(d.has_flag("write") && d.has_flag("readonly")),
                "{}",
                d.name
            );
            for c in d.acl.split_whitespace() {
                assert!(ACL_ORDER.contains(&c), "{}: {c}", d.name);
            }
            for k in d.keys {
                for f in k.flags.split_whitespace() {
                    assert!(KEY_FLAG_ORDER.contains(&f), "{}: {f}", d.name);
                }
                assert!(k.begin > 0 && k.step > 0, "{}", d.name);
            }
            match d.name.split_once('|') {
                // A subcommand has its own arity and summary, and a parent.
                Some((parent, _)) => {
                    assert!(d.arity != 0 && !d.summary.is_empty(), "{}", d.name);
                    assert!(find(parent).is_some(), "{}", d.name);
                }
                None => assert!(d.arity == 0 && d.summary.is_empty(), "{}", d.name),
            }
        }
    }

    #[test]
    fn every_table_command_has_docs_that_agree_with_its_row() {
        for spec in COMMANDS {
            let e = find(spec.name).unwrap_or_else(|| panic!("{} has no docs", spec.name));
            let d = e.doc;
            let (first, last, step, _) = d.legacy_keys();
            assert_eq!(
                (first, last),
                (spec.first_key, spec.last_key),
                "{}",
                spec.name
            );
            assert_eq!(step != 0, spec.first_key != 0, "{}", spec.name);
            assert_eq!(d.has_flag("denyoom"), spec.denyoom, "{}", spec.name);
            assert_eq!(d.has_flag("no_auth"), spec.no_auth, "{}", spec.name);
            assert_eq!(d.has_flag("no_multi"), spec.no_multi, "{}", spec.name);
            // A subcommand is refused inside MULTI as its command is, and
            // never runs before AUTH; its keys (MEMORY USAGE's) come after
            // the subcommand.
            for sub in subcommands(spec.name) {
                let s = sub.doc;
                assert_eq!(s.has_flag("no_multi"), spec.no_multi, "{}", s.name);
                assert!(!s.has_flag("no_auth"), "{}", s.name);
                assert!(s.keys.iter().all(|k| k.begin >= 2), "{}", s.name);
                assert!(spec.arity_ok(s.arity.unsigned_abs() as usize), "{}", s.name);
            }
        }
        // And every documented command is in the table.
        for d in DOCS.iter().filter(|d| !d.name.contains('|')) {
            assert!(
                COMMANDS.iter().any(|s| s.name == d.name),
                "{} documented but not in the table",
                d.name
            );
        }
    }

    fn keys_of(name: &str, line: &str) -> Option<Vec<usize>> {
        let line: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let d = find(name).unwrap().doc;
        d.key_positions(&line)
            .map(|ks| ks.into_iter().map(|(i, _)| i).collect())
    }

    #[test]
    fn key_positions_follow_the_key_specs() {
        assert_eq!(keys_of("get", "get a"), Some(vec![1]));
        assert_eq!(keys_of("mset", "mset a 1 b 2"), Some(vec![1, 3]));
        assert_eq!(keys_of("del", "del a b c"), Some(vec![1, 2, 3]));
        assert_eq!(keys_of("copy", "copy a b REPLACE"), Some(vec![1, 2]));
        assert_eq!(keys_of("getat", "getat 7 k"), Some(vec![2]));
        assert_eq!(keys_of("lcs", "lcs a b LEN"), Some(vec![1, 2]));
        assert_eq!(keys_of("compare", "compare k VERSION = 3"), Some(vec![1]));
        assert_eq!(
            keys_of("compare", "compare RANGE [a [b COUNT = 0"),
            Some(vec![])
        );
        assert_eq!(keys_of("get", "get"), None);
        assert_eq!(find("mset").unwrap().doc.legacy_keys(), (1, -1, 2, false));
        assert_eq!(find("rename").unwrap().doc.legacy_keys(), (1, 2, 1, false));
        assert_eq!(find("compare").unwrap().doc.legacy_keys(), (1, 1, 1, true));
        assert_eq!(find("ping").unwrap().doc.legacy_keys(), (0, 0, 0, false));
    }

    #[test]
    fn flags_and_categories_come_in_redis_order() {
        let get = find("get").unwrap().doc;
        assert_eq!(get.flag_list(), ["readonly", "fast"]);
        assert_eq!(get.acl_categories(), ["@read", "@string", "@fast"]);
        let save = find("save").unwrap().doc;
        assert_eq!(save.flag_list(), ["admin", "no_multi"]);
        assert_eq!(save.acl_categories(), ["@admin", "@slow", "@dangerous"]);
        let backup = find("backup").unwrap().doc;
        assert_eq!(backup.flag_list(), save.flag_list());
        assert_eq!(backup.acl_categories(), save.acl_categories());
        let load = find("loadbackup").unwrap().doc;
        assert_eq!(load.acl_categories(), save.acl_categories());
        let compare = find("compare").unwrap().doc;
        assert_eq!(
            compare.flag_list(),
            ["readonly", "no_mandatory_keys", "movablekeys"]
        );
        let keys = find("keys").unwrap().doc;
        assert_eq!(
            keys.acl_categories(),
            ["@keyspace", "@read", "@slow", "@dangerous"]
        );
        assert_eq!(
            find("set").unwrap().doc.keys[0].flag_list(),
            ["RW", "access", "update", "variable_flags"]
        );
        let subs: Vec<&str> = subcommands("client").map(|e| e.doc.name).collect();
        assert_eq!(
            subs,
            [
                "client|getname",
                "client|help",
                "client|id",
                "client|info",
                "client|kill",
                "client|list",
                "client|no-evict",
                "client|no-touch",
                "client|pause",
                "client|setinfo",
                "client|setname",
                "client|unpause"
            ]
        );
        assert_eq!(subcommands("get").count(), 0);
        assert!(find_bytes(b"CLIENT|SetName").is_some());
    }
}
