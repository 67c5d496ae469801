//! COMMAND: COUNT, LIST, INFO, DOCS, GETKEYS, GETKEYSANDFLAGS, HELP, built
//! from the table's rows (name, arity, group, summary) and `docs` (syntax,
//! flags, ACL categories, key specs).

use super::super::{Ctx, eq_ic};
use super::{COMMANDS, Spec, docs, lookup};
use crate::resp::cmd::unknown_subcommand;
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::glob;
use crate::resp::reply::Reply;

/// A command or subcommand as COMMAND describes it: a command's name,
/// arity, summary and group from its table row, a subcommand's from its
/// docs (the group its command's); the rest from its docs (`docs`).
struct Described {
    name: &'static str,
    arity: i32,
    summary: &'static str,
    group: &'static str,
    /// A command's table row (None for a subcommand).
    spec: Option<&'static Spec>,
    docs: Option<docs::Entry>,
}

fn describe(spec: &'static Spec) -> Described {
    Described {
        name: spec.name,
        arity: spec.arity,
        summary: spec.summary,
        group: spec.group,
        spec: Some(spec),
        docs: docs::find(spec.name),
    }
}

fn describe_sub(group: &'static str, sub: docs::Entry) -> Described {
    Described {
        name: sub.doc.name,
        arity: sub.doc.arity,
        summary: sub.doc.summary,
        group,
        spec: None,
        docs: Some(sub),
    }
}

/// The command or subcommand (`client|setname`) a name gives, in any case.
fn describe_name(name: &[u8]) -> Option<Described> {
    if let Some(spec) = lookup(name) {
        return Some(describe(spec));
    }
    let sub = docs::find_bytes(name)?;
    let (parent, _) = sub.doc.name.split_once('|')?;
    Some(describe_sub(lookup(parent.as_bytes())?.group, sub))
}

fn subcommands_of(d: &Described) -> Vec<Described> {
    docs::subcommands(d.name)
        .map(|sub| describe_sub(d.group, sub))
        .collect()
}

/// `n` arguments (the name included) fit Redis's `arity`.
fn arity_fits(arity: i32, n: usize) -> bool {
    let need = arity.unsigned_abs() as usize;
    if arity > 0 { n == need } else { n >= need }
}

/// COMMAND INFO's 10 fields, Redis 7.2's: name, arity, flags, first key,
/// last key, key step, ACL categories, tips, key specs, subcommands.
fn command_info(r: &mut Reply<'_>, d: &Described) {
    r.array(10);
    r.bulk_str(d.name);
    r.int(i64::from(d.arity));
    let Some(e) = d.docs else {
        // A table row without docs (the unit tests allow none).
        table_info(r, d.spec.expect("a subcommand has docs"));
        return;
    };
    let doc = e.doc;
    let flags = doc.flag_list();
    r.set(flags.len());
    for f in flags {
        r.simple(f);
    }
    let (first, last, step, _) = doc.legacy_keys();
    for n in [first, last, step] {
        r.int(i64::from(n));
    }
    let acl = doc.acl_categories();
    r.set(acl.len());
    for c in &acl {
        r.simple(c);
    }
    r.set(doc.tip_list().count());
    for t in doc.tip_list() {
        r.bulk_str(t);
    }
    r.set(doc.keys.len());
    for k in doc.keys {
        key_spec(r, k);
    }
    let subs = subcommands_of(d);
    if subs.is_empty() {
        // Redis answers an empty set here, an array when there are some.
        r.set(0);
    } else {
        r.array(subs.len());
        for sub in &subs {
            command_info(r, sub);
        }
    }
}

/// COMMAND INFO's fields after the arity for a command without docs:
/// what its table row knows.
fn table_info(r: &mut Reply<'_>, spec: &Spec) {
    let flags = [
        (true, if spec.writes() { "write" } else { "readonly" }),
        (spec.denyoom, "denyoom"),
        (spec.no_auth, "no_auth"),
        (spec.no_multi, "no_multi"),
    ];
    r.set(flags.iter().filter(|f| f.0).count());
    for (_, f) in flags.iter().filter(|f| f.0) {
        r.simple(f);
    }
    let (first, last) = (spec.first_key, spec.last_key);
    for n in [first, last, i32::from(first != 0)] {
        r.int(i64::from(n));
    }
    for _ in 0..4 {
        r.set(0);
    }
}

fn key_spec(r: &mut Reply<'_>, k: &docs::KeySpec) {
    r.map(3 + usize::from(!k.notes.is_empty()));
    if !k.notes.is_empty() {
        r.bulk_str("notes");
        r.bulk_str(k.notes);
    }
    r.bulk_str("flags");
    let flags = k.flag_list();
    r.set(flags.len());
    for f in flags {
        r.simple(f);
    }
    r.bulk_str("begin_search");
    r.map(2);
    r.bulk_str("type");
    r.bulk_str("index");
    r.bulk_str("spec");
    r.map(1);
    r.bulk_str("index");
    r.int(i64::from(k.begin));
    r.bulk_str("find_keys");
    r.map(2);
    r.bulk_str("type");
    r.bulk_str("range");
    r.bulk_str("spec");
    r.map(3);
    for (name, n) in [("lastkey", k.lastkey), ("keystep", k.step), ("limit", 0)] {
        r.bulk_str(name);
        r.int(i64::from(n));
    }
}

/// COMMAND DOCS's map of one command: summary, since, group, complexity,
/// arguments and subcommands, those it has (Redis 7.2's order; no
/// history, no per-argument `since`).
fn command_docs(r: &mut Reply<'_>, d: &Described) {
    let (since, complexity, args) = d.docs.map_or(("", "", &[][..]), |e| {
        (e.doc.since, e.doc.complexity, e.args)
    });
    let subs = subcommands_of(d);
    let fields = [
        !d.summary.is_empty(),
        !since.is_empty(),
        true,
        !complexity.is_empty(),
        !args.is_empty(),
        !subs.is_empty(),
    ];
    r.map(fields.iter().filter(|&&f| f).count());
    for (key, value) in [
        ("summary", d.summary),
        ("since", since),
        ("group", d.group),
        ("complexity", complexity),
    ] {
        if !value.is_empty() || key == "group" {
            r.bulk_str(key);
            r.bulk_str(value);
        }
    }
    if !args.is_empty() {
        r.bulk_str("arguments");
        arguments(r, args);
    }
    if !subs.is_empty() {
        r.bulk_str("subcommands");
        r.map(subs.len());
        for sub in &subs {
            r.bulk_str(sub.name);
            command_docs(r, sub);
        }
    }
}

/// Argument specs as Redis 7.2's `addReplyCommandArgList` writes them.
fn arguments(r: &mut Reply<'_>, args: &[docs::Arg]) {
    r.array(args.len());
    for a in args {
        let group = a.kind.is_group();
        let flags = a.flags();
        let fields = [
            true,
            true,
            !group,
            a.key_spec.is_some(),
            a.token.is_some(),
            !flags.is_empty(),
            group,
        ];
        r.map(fields.iter().filter(|&&f| f).count());
        r.bulk_str("name");
        r.bulk_str(&a.name);
        r.bulk_str("type");
        r.bulk_str(a.kind.name());
        if !group {
            r.bulk_str("display_text");
            r.bulk_str(&a.name);
        }
        if let Some(i) = a.key_spec {
            r.bulk_str("key_spec_index");
            r.int(i as i64);
        }
        if let Some(t) = &a.token {
            r.bulk_str("token");
            r.bulk_str(t);
        }
        if !flags.is_empty() {
            r.bulk_str("flags");
            r.set(flags.len());
            for f in flags {
                r.simple(f);
            }
        }
        if group {
            r.bulk_str("arguments");
            arguments(r, &a.args);
        }
    }
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS: the keys of a full command line,
/// found from its key specs, with Redis 7's errors.
fn getkeys(cx: &mut Ctx<'_, '_>, with_flags: bool) -> CmdResult {
    let line = &cx.args[2..];
    let invalid = || CmdError::err("Invalid command specified");
    let spec = lookup(line[0]).ok_or_else(invalid)?;
    let mut d = describe(spec);
    // A subcommand is looked up as Redis does (CLIENT SETNAME, not CLIENT).
    if line.len() >= 2 && docs::subcommands(spec.name).next().is_some() {
        let sub = String::from_utf8_lossy(line[1]).to_ascii_lowercase();
        let sub = docs::find(&format!("{}|{sub}", spec.name)).ok_or_else(invalid)?;
        d = describe_sub(spec.group, sub);
    }
    let Some(doc) = d.docs.map(|e| e.doc).filter(|doc| !doc.keys.is_empty()) else {
        return Err(CmdError::err("The command has no key arguments"));
    };
    if !arity_fits(d.arity, line.len()) {
        return Err(CmdError::err(
            "Invalid number of arguments specified for command",
        ));
    }
    let keys = match doc.key_positions(line) {
        Some(keys) => keys,
        None if doc.has_flag("no_mandatory_keys") => Vec::new(),
        None => return Err(CmdError::err("Invalid arguments specified for command")),
    };
    cx.r.array(keys.len());
    for (i, k) in keys {
        if with_flags {
            cx.r.array(2);
            cx.r.bulk(line[i]);
            let flags = k.flag_list();
            cx.r.set(flags.len());
            for f in flags {
                cx.r.simple(f);
            }
        } else {
            cx.r.bulk(line[i]);
        }
    }
    Ok(())
}

/// What COMMAND LIST keeps.
enum ListFilter {
    All,
    /// There are no modules: none.
    Module,
    /// An ACL category, `@` included.
    AclCat(String),
    Pattern(Vec<u8>),
}

impl ListFilter {
    fn keeps(&self, d: &Described) -> bool {
        match self {
            ListFilter::All => true,
            ListFilter::Module => false,
            ListFilter::AclCat(cat) => d.docs.is_some_and(|e| e.doc.acl_categories().contains(cat)),
            ListFilter::Pattern(p) => glob::matches_nocase(p, d.name.as_bytes()),
        }
    }
}

/// COMMAND LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p]: every command
/// and subcommand name (`client|setname`), as Redis 7 lists them.
fn command_list(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let filter = match &cx.args[2..] {
        [] => ListFilter::All,
        [by, kind, arg] if eq_ic(by, "filterby") => {
            if eq_ic(kind, "module") {
                ListFilter::Module
            } else if eq_ic(kind, "aclcat") {
                let cat = String::from_utf8_lossy(arg).to_ascii_lowercase();
                ListFilter::AclCat(format!("@{cat}"))
            } else if eq_ic(kind, "pattern") {
                ListFilter::Pattern(arg.to_vec())
            } else {
                return Err(CmdError::Syntax);
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let mut names = Vec::new();
    for spec in COMMANDS {
        let d = describe(spec);
        let subs = subcommands_of(&d);
        for d in std::iter::once(d).chain(subs) {
            if filter.keeps(&d) {
                names.push(d.name);
            }
        }
    }
    cx.r.array(names.len());
    for n in names {
        cx.r.bulk_str(n);
    }
    Ok(())
}

/// COMMAND [COUNT | LIST | INFO | DOCS | GETKEYS | GETKEYSANDFLAGS | HELP]:
/// each subcommand's arity is its docs entry's.
pub(super) fn command(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let Some(sub) = cx.args.get(1).copied() else {
        cx.r.array(COMMANDS.len());
        for spec in COMMANDS {
            command_info(&mut cx.r, &describe(spec));
        }
        return Ok(());
    };
    let name = format!(
        "command|{}",
        String::from_utf8_lossy(sub).to_ascii_lowercase()
    );
    let Some(entry) = docs::find(&name) else {
        return Err(unknown_subcommand(sub, "COMMAND"));
    };
    if !arity_fits(entry.doc.arity, cx.args.len()) {
        return Err(CmdError::Arity(name));
    }
    let names = &cx.args[2..];
    match entry.doc.name {
        "command|count" => cx.r.int(COMMANDS.len() as i64),
        "command|list" => return command_list(cx),
        "command|info" if names.is_empty() => {
            cx.r.array(COMMANDS.len());
            for spec in COMMANDS {
                command_info(&mut cx.r, &describe(spec));
            }
        }
        "command|info" => {
            cx.r.array(names.len());
            for n in names {
                match describe_name(n) {
                    Some(d) => command_info(&mut cx.r, &d),
                    None => cx.r.null_array(),
                }
            }
        }
        "command|docs" => {
            // Unknown names are left out, as Redis does.
            let found: Vec<Described> = if names.is_empty() {
                COMMANDS.iter().map(describe).collect()
            } else {
                names.iter().filter_map(|n| describe_name(n)).collect()
            };
            cx.r.map(found.len());
            for d in &found {
                cx.r.bulk_str(d.name);
                command_docs(&mut cx.r, d);
            }
        }
        "command|getkeys" => return getkeys(cx, false),
        "command|getkeysandflags" => return getkeys(cx, true),
        _ => {
            const HELP: [&str; 16] = [
                "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "(no subcommand)",
                "    Return details about all commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
                "    Return a list of all commands (and subcommands) in this server.",
                "INFO [<command-name> ...]",
                "    Return details about the named commands, or about all of them.",
                "DOCS [<command-name> ...]",
                "    Return documentation about the named commands, or about all of them.",
                "GETKEYS <full-command>",
                "    Return the keys from a full command.",
                "GETKEYSANDFLAGS <full-command>",
                "    Return the keys and the access flags from a full command.",
                "HELP",
            ];
            super::super::help_reply(&mut cx.r, &HELP);
        }
    }
    Ok(())
}
