//! COMMAND INFO, COMMAND DOCS, COMMAND GETKEYS and COMMAND LIST in
//! Redis 7.2's shapes: exact reply bytes in RESP2 and RESP3. The bytes of
//! `COMMAND INFO get mset` (both protocols) are the ones redis-server
//! answers.

use crate::wire::*;

/// An expected reply, built as the server's writer builds one: in RESP2 a
/// map is a flat array of its pairs and a set an array.
struct Want {
    resp3: bool,
    out: String,
}

impl Want {
    fn new(resp3: bool) -> Want {
        Want {
            resp3,
            out: String::new(),
        }
    }
    fn arr(&mut self, n: usize) -> &mut Want {
        self.out += &format!("*{n}\r\n");
        self
    }
    fn map(&mut self, n: usize) -> &mut Want {
        self.out += &if self.resp3 {
            format!("%{n}\r\n")
        } else {
            format!("*{}\r\n", 2 * n)
        };
        self
    }
    fn set(&mut self, n: usize) -> &mut Want {
        self.out += &format!("{}{n}\r\n", if self.resp3 { '~' } else { '*' });
        self
    }
    fn b(&mut self, s: &str) -> &mut Want {
        self.out += &bulk(s);
        self
    }
    fn s(&mut self, s: &str) -> &mut Want {
        self.out += &format!("+{s}\r\n");
        self
    }
    fn i(&mut self, n: i64) -> &mut Want {
        self.out += &int(n);
        self
    }
    /// A pair of a map whose value is a bulk string.
    fn kv(&mut self, k: &str, v: &str) -> &mut Want {
        self.b(k).b(v)
    }
    /// One argument spec (not a one-of or block): name, type,
    /// display_text, then the key spec index, token and flags it has.
    fn arg(&mut self, name: &str, ty: &str, key: Option<i64>, token: Option<&str>, flags: &[&str]) {
        let n = 3 + key.is_some() as usize + token.is_some() as usize + !flags.is_empty() as usize;
        self.map(n)
            .kv("name", name)
            .kv("type", ty)
            .kv("display_text", name);
        if let Some(k) = key {
            self.b("key_spec_index").i(k);
        }
        if let Some(t) = token {
            self.kv("token", t);
        }
        self.flags(flags);
    }
    fn flags(&mut self, flags: &[&str]) {
        if !flags.is_empty() {
            self.b("flags").set(flags.len());
            for f in flags {
                self.s(f);
            }
        }
    }
    /// A one-of or block's head: its `arguments` follow.
    fn group(&mut self, name: &str, ty: &str, flags: &[&str], args: usize) {
        self.map(3 + !flags.is_empty() as usize)
            .kv("name", name)
            .kv("type", ty);
        self.flags(flags);
        self.b("arguments").arr(args);
    }
    /// A key spec: flags, begin_search index, find_keys range.
    fn key_spec(&mut self, flags: &[&str], index: i64, lastkey: i64, step: i64) {
        self.map(3).b("flags").set(flags.len());
        for f in flags {
            self.s(f);
        }
        self.b("begin_search").map(2).kv("type", "index");
        self.b("spec").map(1).b("index").i(index);
        self.b("find_keys").map(2).kv("type", "range");
        self.b("spec").map(3);
        self.b("lastkey").i(lastkey).b("keystep").i(step);
        self.b("limit").i(0);
    }
}

/// The fields of COMMAND INFO from the flags to the ACL categories.
fn info_head(w: &mut Want, name: &str, arity: i64, flags: &[&str], keys: [i64; 3], acl: &[&str]) {
    w.arr(10).b(name).i(arity).set(flags.len());
    for f in flags {
        w.s(f);
    }
    for k in keys {
        w.i(k);
    }
    w.set(acl.len());
    for c in acl {
        w.s(c);
    }
}

fn info_get_mset(resp3: bool) -> String {
    let mut w = Want::new(resp3);
    w.arr(2);
    info_head(
        &mut w,
        "get",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@string", "@fast"],
    );
    w.set(0).set(1).key_spec(&["RO", "access"], 1, 0, 1);
    w.set(0);
    info_head(
        &mut w,
        "mset",
        -3,
        &["write", "denyoom"],
        [1, -1, 2],
        &["@write", "@string", "@slow"],
    );
    w.set(2)
        .b("request_policy:multi_shard")
        .b("response_policy:all_succeeded");
    w.set(1).key_spec(&["OW", "update"], 1, -1, 2);
    w.set(0);
    w.out
}

#[test]
fn command_info_get_and_mset() {
    let s = server();
    let mut c = s.connect();
    // Written out once, as redis-server 7 sends it.
    let get = "*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n\
               *3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n\
               *2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n\
               $4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n\
               $5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n\
               $5\r\nlimit\r\n:0\r\n*0\r\n";
    assert!(info_get_mset(false).starts_with(&format!("*2\r\n{get}")));
    c.ok("COMMAND INFO get mset", &info_get_mset(false));
    c.ok("command info GET MSet", &info_get_mset(false));
    assert!(c.q("HELLO 3").starts_with('%'));
    c.ok("COMMAND INFO get mset", &info_get_mset(true));
}

#[test]
fn command_info_key_positions_and_subcommands() {
    let s = server();
    let mut c = s.connect();
    // The key fields (first, last, step) of commands whose keys are not
    // simply the first argument.
    for (name, keys) in [
        ("copy", ":1\r\n:2\r\n:1\r\n"),
        ("rename", ":1\r\n:2\r\n:1\r\n"),
        ("msetnx", ":1\r\n:-1\r\n:2\r\n"),
        ("getat", ":2\r\n:2\r\n:1\r\n"),
        ("watch", ":1\r\n:-1\r\n:1\r\n"),
        ("range", ":0\r\n:0\r\n:0\r\n"),
        ("keys", ":0\r\n:0\r\n:0\r\n"),
    ] {
        let info = c.q(&format!("COMMAND INFO {name}"));
        assert!(info.contains(keys), "{name}: {info}");
    }
    // Slow commands are not `fast`; admin commands are `admin`.
    for name in ["keys", "scan", "range", "flushall", "save", "set", "del"] {
        let info = c.q(&format!("COMMAND INFO {name}"));
        assert!(
            !info.contains("+fast\r\n") && info.contains("+@slow\r\n"),
            "{name}: {info}"
        );
    }
    for name in ["save", "bgsave", "shutdown", "backup", "loadbackup"] {
        let info = c.q(&format!("COMMAND INFO {name}"));
        assert!(
            info.contains("+admin\r\n") && info.contains("+no_multi\r\n"),
            "{name}: {info}"
        );
    }
    // COMPARE's RANGE form has no key: its keys move.
    let info = c.q("COMMAND INFO compare");
    assert!(
        info.contains("+readonly\r\n+no_mandatory_keys\r\n+movablekeys\r\n"),
        "{info}"
    );
    // A subcommand by its full name, and a command's subcommands.
    let mut w = Want::new(false);
    w.arr(1);
    info_head(
        &mut w,
        "client|setname",
        3,
        &["loading", "stale"],
        [0, 0, 0],
        &["@slow", "@connection"],
    );
    w.set(2)
        .b("request_policy:all_nodes")
        .b("response_policy:all_succeeded");
    w.set(0).set(0);
    c.ok("COMMAND INFO client|setname", &w.out);
    let client = c.q("COMMAND INFO client");
    assert!(
        client.starts_with("*1\r\n*10\r\n$6\r\nclient\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*1\r\n+@slow\r\n*0\r\n*0\r\n*12\r\n*10\r\n$14\r\nclient|getname\r\n"),
        "{client}"
    );
    c.ok(
        "COMMAND INFO nope client|nope get|x",
        "*3\r\n*-1\r\n*-1\r\n*-1\r\n",
    );
}

fn docs_set(resp3: bool) -> String {
    let mut w = Want::new(resp3);
    w.map(1).b("set").map(5);
    w.kv(
        "summary",
        "Sets a key (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL).",
    );
    w.kv("since", "1.0.0").kv("group", "string");
    w.kv("complexity", "O(log N) where N is the number of keys");
    w.b("arguments").arr(5);
    w.arg("key", "key", Some(0), None, &[]);
    w.arg("value", "string", None, None, &[]);
    w.group("condition", "oneof", &["optional"], 2);
    w.arg("nx", "pure-token", None, Some("NX"), &[]);
    w.arg("xx", "pure-token", None, Some("XX"), &[]);
    w.arg("get", "pure-token", None, Some("GET"), &["optional"]);
    w.group("expiration", "oneof", &["optional"], 5);
    w.arg("seconds", "integer", None, Some("EX"), &[]);
    w.arg("milliseconds", "integer", None, Some("PX"), &[]);
    w.arg("unix-time-seconds", "unix-time", None, Some("EXAT"), &[]);
    w.arg(
        "unix-time-milliseconds",
        "unix-time",
        None,
        Some("PXAT"),
        &[],
    );
    w.arg("keepttl", "pure-token", None, Some("KEEPTTL"), &[]);
    w.out
}

#[test]
fn command_docs_set_and_mset() {
    let s = server();
    let mut c = s.connect();
    c.ok("COMMAND DOCS set", &docs_set(false));
    // MSET's pairs are a repeated block; unknown names are left out.
    let mut w = Want::new(false);
    w.map(1).b("mset").map(5);
    w.kv("summary", "Sets several keys.")
        .kv("since", "1.0.1")
        .kv("group", "string");
    w.kv(
        "complexity",
        "O(K log N) where K is the number of keys given and N the number stored",
    );
    w.b("arguments").arr(1);
    w.group("data", "block", &["multiple"], 2);
    w.arg("key", "key", Some(0), None, &[]);
    w.arg("value", "string", None, None, &[]);
    c.ok("COMMAND DOCS nope mset", &w.out);
    // A command without arguments has no `arguments`.
    let mut w = Want::new(false);
    w.map(1).b("multi").map(4);
    w.kv("summary", "Starts a transaction.")
        .kv("since", "1.2.0")
        .kv("group", "transactions")
        .kv("complexity", "O(1)");
    c.ok("COMMAND DOCS multi", &w.out);
    assert!(c.q("HELLO 3").starts_with('%'));
    c.ok("COMMAND DOCS set", &docs_set(true));
    // Subcommands come in a map of their own docs.
    let snap = c.q("COMMAND DOCS snapshot");
    assert!(
        snap.contains("$11\r\nsubcommands\r\n%4\r\n$15\r\nsnapshot|create\r\n%5\r\n"),
        "{snap}"
    );
    let mut w = Want::new(true);
    w.map(1).b("snapshot|release").map(5);
    w.kv(
        "summary",
        "Ends a snapshot; returns 1, or 0 if it was not live.",
    );
    w.kv("since", "0.1.0").kv("group", "combkv");
    w.kv(
        "complexity",
        "O(log N) where N is the number of live snapshots",
    );
    w.b("arguments").arr(1);
    w.arg("id", "integer", None, None, &[]);
    c.ok("COMMAND DOCS snapshot|release", &w.out);
}

#[test]
fn command_getkeys() {
    let s = server();
    let mut c = s.connect();
    c.ok("COMMAND GETKEYS mset a 1 b 2", &bulks(&["a", "b"]));
    c.ok("COMMAND GETKEYS MSET a 1 b", &bulks(&["a", "b"]));
    c.ok(
        "COMMAND GETKEYS copy src dst REPLACE",
        &bulks(&["src", "dst"]),
    );
    c.ok("COMMAND GETKEYS getat 7 k", &bulks(&["k"]));
    c.ok("COMMAND GETKEYS del a b c", &bulks(&["a", "b", "c"]));
    c.ok("COMMAND GETKEYS set k v GET EX 10", &bulks(&["k"]));
    c.ok("COMMAND GETKEYS lcs a b LEN", &bulks(&["a", "b"]));
    c.ok("COMMAND GETKEYS compare k VERSION = 3", &bulks(&["k"]));
    c.ok("COMMAND GETKEYS compare RANGE [a [b COUNT = 0", "*0\r\n");
    c.ok(
        "COMMAND GETKEYSANDFLAGS copy src dst",
        "*2\r\n*2\r\n$3\r\nsrc\r\n*2\r\n+RO\r\n+access\r\n\
         *2\r\n$3\r\ndst\r\n*2\r\n+OW\r\n+update\r\n",
    );
    // Redis's errors, in Redis's order: the command, its keys, its arity.
    c.ok(
        "COMMAND GETKEYS nope a",
        &err("ERR Invalid command specified"),
    );
    c.ok(
        "COMMAND GETKEYS client nope",
        &err("ERR Invalid command specified"),
    );
    c.ok(
        "COMMAND GETKEYS ping",
        &err("ERR The command has no key arguments"),
    );
    c.ok(
        "COMMAND GETKEYS range - +",
        &err("ERR The command has no key arguments"),
    );
    c.ok(
        "COMMAND GETKEYS client setname x",
        &err("ERR The command has no key arguments"),
    );
    c.ok(
        "COMMAND GETKEYS get",
        &err("ERR Invalid number of arguments specified for command"),
    );
    c.ok(
        "COMMAND GETKEYS get a b",
        &err("ERR Invalid number of arguments specified for command"),
    );
    c.ok("COMMAND GETKEYS", &arity("command|getkeys"));
}

#[test]
fn command_list_help_and_errors() {
    let s = server();
    let mut c = s.connect();
    let list = c.q("COMMAND LIST");
    for name in [
        "get",
        "client|setname",
        "snapshot|create",
        "command|getkeys",
    ] {
        assert!(list.contains(&bulk(name)), "{name}: {list}");
    }
    c.ok(
        "COMMAND LIST FILTERBY PATTERN snapshot*",
        &bulks(&[
            "snapshot",
            "snapshot|create",
            "snapshot|help",
            "snapshot|list",
            "snapshot|release",
        ]),
    );
    c.ok(
        "COMMAND LIST FILTERBY ACLCAT Transaction",
        &bulks(&["compare", "discard", "exec", "multi", "unwatch", "watch"]),
    );
    c.ok("COMMAND LIST FILTERBY ACLCAT nope", "*0\r\n");
    c.ok("COMMAND LIST FILTERBY MODULE m", "*0\r\n");
    c.ok("COMMAND LIST FILTERBY BOGUS x", SYNTAX);
    c.ok("COMMAND LIST x", SYNTAX);
    let help = c.q("COMMAND HELP");
    assert!(
        help.starts_with(
            "*17\r\n+COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
        ),
        "{help}"
    );
    assert!(
        help.ends_with("+HELP\r\n+    Print this help.\r\n"),
        "{help}"
    );
    c.ok("COMMAND HELP x", &arity("command|help"));
    c.ok("COMMAND COUNT x", &arity("command|count"));
}
