//! Connection and server commands: PING ECHO SELECT QUIT TIME INFO CONFIG
//! CLIENT COMMAND SLOWLOG SAVE BGSAVE LASTSAVE BACKUP LOADBACKUP; the arity check of every
//! command in the table; unknown commands.

use combkv_server::DurabilityMode;

use crate::wire::*;

/// Every command in the table with its Redis-style arity. `COMMAND COUNT`
/// is checked against this list, so a new command fails the test until it
/// is added here (and so gets its arity error checked).
const TABLE: &[(&str, i32)] = &[
    ("acl", -2),
    ("append", 3),
    ("auth", -2),
    ("backup", 2),
    ("bgsave", -1),
    ("bitcount", -2),
    ("bitpos", -3),
    ("cas", -4),
    ("ceil", 2),
    ("client", -2),
    ("cluster", -2),
    ("command", -1),
    ("compare", -5),
    ("config", -2),
    ("copy", -3),
    ("dbsize", 1),
    ("decr", 2),
    ("decrby", 3),
    ("del", -2),
    ("discard", 1),
    ("echo", 2),
    ("exec", 1),
    ("exists", -2),
    ("expire", -3),
    ("expireat", -3),
    ("expiretime", 2),
    ("floor", 2),
    ("flushall", -1),
    ("flushdb", -1),
    ("get", 2),
    ("getat", 3),
    ("getbit", 3),
    ("getdel", 2),
    ("getex", -2),
    ("getrange", 4),
    ("getset", 3),
    ("getv", 2),
    ("hello", -1),
    ("incr", 2),
    ("incrby", 3),
    ("incrbyfloat", 3),
    ("info", -1),
    ("keys", 2),
    ("lastsave", 1),
    ("latency", -2),
    ("lcs", -3),
    ("loadbackup", 2),
    ("memory", -2),
    ("mget", -2),
    ("monitor", 1),
    ("mset", -3),
    ("msetnx", -3),
    ("multi", 1),
    ("object", -2),
    ("persist", 2),
    ("pexpire", -3),
    ("pexpireat", -3),
    ("pexpiretime", 2),
    ("ping", -1),
    ("psetex", 4),
    ("pttl", 2),
    ("quit", -1),
    ("range", -3),
    ("rangeat", -4),
    ("rename", 3),
    ("renamenx", 3),
    ("role", 1),
    ("save", 1),
    ("scan", -2),
    ("select", 2),
    ("set", -3),
    ("setbit", 4),
    ("setex", 4),
    ("setnx", 3),
    ("setrange", 4),
    ("shutdown", -1),
    ("slowlog", -2),
    ("snapshot", -2),
    ("strlen", 2),
    ("substr", 4),
    ("time", 1),
    ("touch", -2),
    ("ttl", 2),
    ("type", 2),
    ("unlink", -2),
    ("unwatch", 1),
    ("wait", 3),
    ("watch", -2),
];

#[test]
fn every_command_checks_its_arity() {
    let s = server();
    let mut c = s.connect();
    c.ok("COMMAND COUNT", &int(TABLE.len() as i64));
    for &(name, arity_n) in TABLE {
        // COMMAND INFO reports the arity the server enforces.
        let info = c.q(&format!("COMMAND INFO {name}"));
        let head = format!("*1\r\n*10\r\n{}:{arity_n}\r\n", bulk(name));
        assert!(info.starts_with(&head), "{name}: {info}");
        let too_few = if arity_n > 0 {
            arity_n - 1
        } else {
            -arity_n - 1
        };
        let mut args: Vec<Vec<u8>> = vec![name.to_uppercase().into_bytes()];
        args.extend((1..too_few).map(|i| format!("a{i}").into_bytes()));
        if too_few >= 1 {
            let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
            assert_eq!(c.cmd(&refs), arity(name).as_bytes(), "{name} too few");
        }
        if arity_n > 0 {
            let mut args: Vec<Vec<u8>> = vec![name.as_bytes().to_vec()];
            args.extend((1..=arity_n).map(|i| format!("a{i}").into_bytes()));
            let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
            assert_eq!(c.cmd(&refs), arity(name).as_bytes(), "{name} too many");
        }
    }
    c.ok("PING", "+PONG\r\n");
}

#[test]
fn a_single_node_is_a_master_and_not_a_cluster() {
    let s = server();
    let mut c = s.connect();
    c.ok("ROLE", "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    c.ok(
        "CLUSTER STATUS",
        &err("ERR this server is not a cluster node (start it with --node-id and --raft-addr)"),
    );
    let info = c.q("INFO replication");
    assert!(info.contains("role:master\r\n"), "{info}");
    assert!(info.contains("cluster_enabled:0\r\n"), "{info}");
}

#[test]
fn unknown_commands() {
    let s = server();
    let mut c = s.connect();
    c.ok(
        "BOGUS",
        &err("ERR unknown command 'BOGUS', with args beginning with: "),
    );
    c.ok(
        "bogus a b",
        &err("ERR unknown command 'bogus', with args beginning with: 'a' 'b' "),
    );
    // Arguments are shown up to 128 bytes in all.
    let long = "x".repeat(200);
    c.ok(
        &format!("NOPE {long} y"),
        &err(&format!(
            "ERR unknown command 'NOPE', with args beginning with: '{}' ",
            "x".repeat(128)
        )),
    );
    // Newlines in what is echoed back cannot break the framing.
    assert_eq!(
        c.cmd(&[b"X\r\nY", b"a\nb"]),
        b"-ERR unknown command 'X  Y', with args beginning with: 'a b' \r\n"
    );
    // Names longer than any command.
    c.ok(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        &err("ERR unknown command 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', with args beginning with: "),
    );
    assert_eq!(
        c.cmd(&[b""]),
        b"-ERR unknown command '', with args beginning with: \r\n"
    );
    c.ok("PING", "+PONG\r\n");
}

#[test]
fn ping_echo_select_time_lastsave() {
    let s = server();
    let mut c = s.connect();
    c.ok("PING", "+PONG\r\n");
    c.ok("PING hi", &bulk("hi"));
    c.ok("PING a b", &arity("ping"));
    c.ok("ECHO hi", &bulk("hi"));
    assert_eq!(c.cmd(&[b"ECHO", b""]), b"$0\r\n\r\n");
    c.ok("SELECT 0", OK);
    c.ok("SELECT 1", &err("ERR DB index is out of range"));
    c.ok("SELECT -1", &err("ERR DB index is out of range"));
    c.ok("SELECT x", NOT_INT);
    let t = c.q("TIME");
    let parts: Vec<&str> = t.split("\r\n").collect();
    assert_eq!(parts[0], "*2");
    let secs: u64 = parts[2].parse().unwrap();
    let micros: u64 = parts[4].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2 && micros < 1_000_000, "{t}");
    let last = as_int(&c.q("LASTSAVE"));
    assert!((last as u64) <= now + 1 && last > 0);
}

#[test]
fn save_and_bgsave_need_a_data_dir() {
    let s = server();
    let mut c = s.connect();
    let no_dir = err("ERR no data directory configured (start the server with --data-dir)");
    c.ok("SAVE", &no_dir);
    c.ok("BGSAVE", &no_dir);
    c.ok("BGSAVE SCHEDULE", &no_dir);
    c.ok("BGSAVE bogus", SYNTAX);
    c.ok("SAVE x", &arity("save"));
}

/// BACKUP works without a data directory, refuses a directory that holds
/// anything, and its backup loads (LOADBACKUP) into an empty store only;
/// neither runs inside MULTI.
#[test]
fn backup_and_loadbackup_of_an_in_memory_server() {
    let root = std::env::temp_dir().join(format!("combkv-resp-backup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("b").display().to_string();
    let s = server();
    let mut c = s.connect();
    c.ok("SET a 1", OK);
    c.ok("SET b 2 PX 3600000", OK);
    c.ok(&format!("BACKUP {dir}"), OK);
    let again = c.q(&format!("BACKUP {dir}"));
    assert!(
        again.starts_with("-ERR I/O error: ") && again.contains("is not empty (it holds ckpt-"),
        "{again}"
    );
    let empty = String::from_utf8(c.cmd(&[b"BACKUP", b""])).unwrap();
    assert_eq!(empty, err("ERR BACKUP needs a directory"));
    c.ok("BACKUP a b", &arity("backup"));
    c.ok("LOADBACKUP", &arity("loadbackup"));
    c.ok(
        &format!("LOADBACKUP {dir}"),
        &err("ERR the store is not empty: load a backup into a new node or cluster"),
    );
    c.ok("MULTI", OK);
    c.ok(
        &format!("BACKUP {dir}"),
        &err("ERR Command not allowed inside a transaction"),
    );
    c.ok("DISCARD", OK);

    let fresh = server();
    let mut f = fresh.connect();
    let none = f.q(&format!("LOADBACKUP {}", root.display()));
    assert!(
        none.starts_with("-ERR ") && none.contains("holds no checkpoint"),
        "{none}"
    );
    f.ok(&format!("LOADBACKUP {dir}"), &int(2));
    f.ok("GET a", &bulk("1"));
    let ttl = as_int(&f.q("PTTL b"));
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "{ttl}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// After a full checkpoint, SAVE writes delta runs (INFO persistence shows
/// the kind and the chain); `checkpoint-deltas = false` makes every one
/// full, and CONFIG GET says which.
#[test]
fn save_writes_delta_runs_unless_checkpoint_deltas_is_off() {
    let dir = std::env::temp_dir().join(format!("combkv-deltas-{}", std::process::id()));
    for deltas in [true, false] {
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = config();
        cfg.data_dir = Some(dir.clone());
        cfg.checkpoint_deltas = deltas;
        let s = TestServer::start(cfg);
        let mut c = s.connect();
        let on = if deltas { "yes" } else { "no" };
        c.ok(
            "CONFIG GET checkpoint-deltas",
            &bulks(&["checkpoint-deltas", on]),
        );
        for i in 0..100 {
            c.ok(&format!("SET k{i} v{i}"), OK);
        }
        c.ok("SAVE", OK);
        assert!(
            c.q("INFO persistence")
                .contains("last_checkpoint_kind:full\r\n")
        );
        c.ok("SET k7 changed", OK);
        c.ok("SAVE", OK);
        let info = c.q("INFO persistence");
        let (kind, runs) = if deltas { ("delta", 1) } else { ("full", 0) };
        assert!(
            info.contains(&format!("last_checkpoint_kind:{kind}\r\n")),
            "{info}"
        );
        assert!(info.contains(&format!("delta_runs:{runs}\r\n")), "{info}");
        assert!(info.contains("merges_failed:0\r\n"), "{info}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quit_replies_then_closes() {
    let s = server();
    let mut c = s.connect();
    // Requests after QUIT in the same write are not run.
    c.send(b"*1\r\n$4\r\nQUIT\r\n*3\r\n$3\r\nSET\r\n$1\r\nq\r\n$1\r\n1\r\n");
    assert_eq!(c.reply_str(), OK);
    c.expect_closed();
    let mut c = s.connect();
    c.ok("EXISTS q", &int(0));
}

#[test]
fn client_setname_getname_id_list_info() {
    let s = server();
    let mut c = s.connect();
    let id = as_int(&c.q("CLIENT ID"));
    let mut other = s.connect();
    assert!(as_int(&other.q("CLIENT ID")) > id);
    c.ok("CLIENT GETNAME", NIL);
    c.ok("CLIENT SETNAME worker-1", OK);
    c.ok("CLIENT GETNAME", &bulk("worker-1"));
    let name_err = err("ERR Client names cannot contain spaces, newlines or special characters.");
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", b"a b"]), name_err.as_bytes());
    assert_eq!(
        c.cmd(&[b"CLIENT", b"SETNAME", b"a\nb"]),
        name_err.as_bytes()
    );
    c.ok("CLIENT GETNAME", &bulk("worker-1"));
    let list = c.q("CLIENT LIST");
    assert!(list.contains(&format!("id={id} ")), "{list}");
    assert!(list.contains("name=worker-1 "), "{list}");
    // Its own end, and the seconds since its last command (this one).
    let laddr = s.server().resp_addr().unwrap();
    assert!(list.contains(&format!(" laddr={laddr} ")), "{list}");
    assert!(list.contains(" idle=0 "), "{list}");
    let info = c.q("CLIENT INFO");
    assert!(
        info.starts_with('$') && info.contains(&format!("id={id} ")),
        "{info}"
    );
    assert_eq!(info.matches("id=").count(), 1, "{info}");
    // An empty name clears it.
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", b""]), OK.as_bytes());
    c.ok("CLIENT GETNAME", NIL);
    c.ok("CLIENT SETINFO LIB-NAME redis-rs", OK);
    c.ok("CLIENT", &arity("client"));
    c.ok("CLIENT ID x", &arity("client|id"));
    c.ok("CLIENT SETNAME", &arity("client|setname"));
    c.ok("CLIENT SETNAME a b", &arity("client|setname"));
    c.ok("CLIENT GETNAME x", &arity("client|getname"));
    c.ok("CLIENT INFO x", &arity("client|info"));
    c.ok("CLIENT SETINFO x", &arity("client|setinfo"));
    c.ok(
        "CLIENT BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try CLIENT HELP."),
    );
}

#[test]
fn config_get_and_refusals() {
    let mut cfg = config();
    cfg.maxclients = 77;
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    c.ok("CONFIG GET maxclients", &bulks(&["maxclients", "77"]));
    c.ok("CONFIG GET MAXCLIENTS", &bulks(&["maxclients", "77"]));
    c.ok(
        "CONFIG GET max-value-bytes maxclients",
        &bulks(&["maxclients", "77", "max-value-bytes", "1024"]),
    );
    let r = c.q("CONFIG GET max-*");
    assert!(
        r.starts_with("*12\r\n") && r.contains("max-total-query-bytes"),
        "{r}"
    );
    c.ok("CONFIG GET nothing-like-this", "*0\r\n");
    c.ok("CONFIG", &arity("config"));
    c.ok("CONFIG GET", &arity("config|get"));
    c.ok(
        "CONFIG SET threads 5",
        &err(
            "ERR CONFIG SET failed (possibly related to argument 'threads') - not \
             changeable while serving: change the config file or flags and restart",
        ),
    );
    c.ok("CONFIG RESETSTAT", OK);
    c.ok("CONFIG RESETSTAT x", &arity("config|resetstat"));
    c.ok(
        "CONFIG BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try CONFIG HELP."),
    );
    c.ok("CONFIG GET maxclients", &bulks(&["maxclients", "77"]));
}

/// Redis's names for combkv's settings, as Redis tools read them
/// (`redis-benchmark` reads `save` and `appendonly`), and the address
/// actually bound rather than the `:0` asked for.
#[test]
fn config_get_answers_redis_names_and_the_bound_port() {
    let s = server();
    let mut c = s.connect();
    let port = s.server().resp_addr().unwrap().port().to_string();
    c.ok(
        "CONFIG GET save appendonly",
        &bulks(&["appendonly", "no", "save", ""]),
    );
    c.ok(
        "CONFIG GET append*",
        &bulks(&["appendonly", "no", "appendfsync", "no"]),
    );
    c.ok(
        "CONFIG GET port bind",
        &bulks(&["port", &port, "bind", "127.0.0.1"]),
    );
    c.ok(
        "CONFIG GET resp",
        &bulks(&["resp", &format!("127.0.0.1:{port}")]),
    );
    c.ok(
        "CONFIG GET maxmemory*",
        &bulks(&["maxmemory", "0", "maxmemory-policy", "noeviction"]),
    );
    c.ok(
        "CONFIG GET databases timeout",
        &bulks(&["databases", "1", "timeout", "0"]),
    );
    let info = c.q("INFO server");
    assert!(info.contains(&format!("tcp_port:{port}\r\n")), "{info}");
    drop(c);
    drop(s);

    let dir = std::env::temp_dir().join(format!("combkv-config-get-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (mode, fsync) in [
        (DurabilityMode::Always, "always"),
        (DurabilityMode::Everysec, "everysec"),
        (DurabilityMode::None, "no"),
    ] {
        let mut cfg = config();
        cfg.data_dir = Some(dir.clone());
        cfg.durability = Some(mode);
        let s = TestServer::start(cfg);
        let mut c = s.connect();
        c.ok(
            "CONFIG GET append*",
            &bulks(&["appendonly", "yes", "appendfsync", fsync]),
        );
        c.ok(
            "CONFIG GET dir",
            &bulks(&["dir", &dir.display().to_string()]),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn command_count_docs_info_list() {
    let s = server();
    let mut c = s.connect();
    let n = TABLE.len();
    c.ok("COMMAND COUNT", &int(n as i64));
    // LIST names every command, each followed by its subcommands
    // (`client|setname`), as Redis 7 lists them.
    let list = c.q("COMMAND LIST");
    let lines: Vec<&str> = list.split("\r\n").collect();
    let listed: Vec<&str> = (1..lines.len())
        .filter(|&i| lines[i - 1].starts_with('$') && !lines[i].contains('|'))
        .map(|i| lines[i])
        .collect();
    let names: Vec<&str> = TABLE.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed, names);
    let all = c.q("COMMAND");
    assert!(all.starts_with(&format!("*{n}\r\n*10\r\n")), "{all}");
    c.ok(
        "COMMAND DOCS get",
        &format!(
            "*2\r\n{}*10\r\n{}{}{}{}{}{}{}{}{}*1\r\n*8\r\n{}{}{}{}{}{}{}:0\r\n",
            bulk("get"),
            bulk("summary"),
            bulk("Returns the value of a key."),
            bulk("since"),
            bulk("1.0.0"),
            bulk("group"),
            bulk("string"),
            bulk("complexity"),
            bulk("O(log N) where N is the number of keys"),
            bulk("arguments"),
            bulk("name"),
            bulk("key"),
            bulk("type"),
            bulk("key"),
            bulk("display_text"),
            bulk("key"),
            bulk("key_spec_index"),
        ),
    );
    // Unknown names are left out (Redis), an unknown INFO name is null.
    c.ok("COMMAND DOCS nope", "*0\r\n");
    let docs = c.q("COMMAND DOCS");
    assert!(docs.starts_with(&format!("*{}\r\n", 2 * n)), "{docs}");
    c.ok("COMMAND INFO nope", "*1\r\n*-1\r\n");
    // A key spec: its flags, begin_search index 1, find_keys range.
    let spec = |flags: &str, lastkey: i64| {
        format!(
            "{}*{}\r\n{flags}{}*4\r\n{}{}{}*2\r\n{}:1\r\n{}*4\r\n{}{}{}*6\r\n{}:{lastkey}\r\n{}:1\r\n{}:0\r\n",
            bulk("flags"),
            flags.matches('+').count(),
            bulk("begin_search"),
            bulk("type"),
            bulk("index"),
            bulk("spec"),
            bulk("index"),
            bulk("find_keys"),
            bulk("type"),
            bulk("range"),
            bulk("spec"),
            bulk("lastkey"),
            bulk("keystep"),
            bulk("limit"),
        )
    };
    c.ok(
        "COMMAND INFO set",
        &format!(
            "*1\r\n*10\r\n{}:-3\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n\
             *3\r\n+@write\r\n+@string\r\n+@slow\r\n*0\r\n*1\r\n*8\r\n{}{}{}*0\r\n",
            bulk("set"),
            bulk("notes"),
            bulk("RW and ACCESS due to the optional `GET` argument"),
            spec("+RW\r\n+access\r\n+update\r\n+variable_flags\r\n", 0),
        ),
    );
    c.ok(
        "COMMAND INFO del",
        &format!(
            "*1\r\n*10\r\n{}:-2\r\n*1\r\n+write\r\n:1\r\n:-1\r\n:1\r\n\
             *3\r\n+@keyspace\r\n+@write\r\n+@slow\r\n*2\r\n{}{}*1\r\n*6\r\n{}*0\r\n",
            bulk("del"),
            bulk("request_policy:multi_shard"),
            bulk("response_policy:agg_sum"),
            spec("+RM\r\n+delete\r\n", -1),
        ),
    );
    c.ok("COMMAND COUNT x", &arity("command|count"));
    c.ok(
        "COMMAND BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try COMMAND HELP."),
    );
}

#[test]
fn info_sections() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 b 2", OK);
    let all = c.q("INFO");
    for section in [
        "# Server\r\n",
        "# Clients\r\n",
        "# Memory\r\n",
        "# Persistence\r\n",
        "# Stats\r\n",
        "# Keyspace\r\n",
        "# Engine\r\n",
    ] {
        assert!(all.contains(section), "{section} missing");
    }
    for field in [
        "redis_version:",
        "tcp_port:",
        "connected_clients:1\r\n",
        "used_memory:",
        "maxmemory:0\r\n",
        "total_commands_processed:",
        "keyspace_hits:",
        "db0:keys=2,",
        "max_key_len:460\r\n",
    ] {
        assert!(all.contains(field), "{field} missing");
    }
    for line in ["INFO all", "INFO default", "INFO everything", "info ALL"] {
        let r = c.q(line);
        assert!(
            r.contains("# Server\r\n") && r.contains("# Engine\r\n"),
            "{line}"
        );
    }
    let server = c.q("INFO server");
    let body = server.split_once("\r\n").unwrap().1;
    assert!(body.starts_with("# Server\r\nredis_version:"), "{server}");
    assert!(!server.contains("# Clients"));
    let two = c.q("INFO KEYSPACE clients");
    let body = two.split_once("\r\n").unwrap().1;
    assert!(body.starts_with("# Clients\r\n"), "{two}");
    assert!(body.contains("\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n"));
    c.ok("INFO nosuchsection", "$0\r\n\r\n");
    c.ok("FLUSHALL", OK);
    c.ok("INFO keyspace", &bulk("# Keyspace\r\n"));
}

#[test]
fn slowlog_get_len_reset() {
    let mut cfg = config();
    cfg.slowlog_log_slower_than = 0;
    cfg.slowlog_max_len = 3;
    cfg.requirepass = Some("pw".into());
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    c.ok("AUTH pw", OK);
    c.ok("SLOWLOG RESET", OK);
    // RESET itself is logged after it ran.
    c.ok("SLOWLOG LEN", &int(1));
    c.ok("CLIENT SETNAME slow-one", OK);
    c.ok("SET k v", OK);
    let got = c.q("SLOWLOG GET 1");
    assert!(got.starts_with("*1\r\n*6\r\n:"), "{got}");
    assert!(
        got.contains(&format!("*3\r\n{}{}{}", bulk("SET"), bulk("k"), bulk("v"))),
        "{got}"
    );
    assert!(got.ends_with(&bulk("slow-one")), "{got}");
    assert!(got.contains("\r\n127.0.0.1:"), "{got}");
    // At most slowlog-max-len entries, newest first.
    c.ok("SLOWLOG LEN", &int(3));
    let all = c.q("SLOWLOG GET -1");
    assert!(all.starts_with("*3\r\n"), "{all}");
    let first = all.find("SLOWLOG").unwrap();
    let set = all.find("$3\r\nSET").unwrap();
    assert!(first < set, "newest first: {all}");
    c.ok("SLOWLOG GET 0", "*0\r\n");
    // AUTH's password never reaches the log.
    c.ok("AUTH pw", OK);
    let got = c.q("SLOWLOG GET 1");
    assert!(
        got.contains(&format!("*2\r\n{}{}", bulk("AUTH"), bulk("(redacted)"))),
        "{got}"
    );
    assert!(!got.contains("$2\r\npw\r\n"), "{got}");
    let count_err = err("ERR count should be greater than or equal to -1");
    c.ok("SLOWLOG GET -2", &count_err);
    c.ok("SLOWLOG GET x", &count_err);
    c.ok(
        "SLOWLOG GET 1 2",
        &err("ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP."),
    );
    // Pipelined commands are each logged with their own arguments (the
    // stopwatch takes one clock read per command).
    c.ok("SLOWLOG RESET", OK);
    let mut bytes = Vec::new();
    for args in [
        &[&b"SET"[..], b"p1", b"a"][..],
        &[b"GET", b"p1"],
        &[b"SET", b"p2", b"b"],
    ] {
        bytes.extend(encode(args));
    }
    c.send(&bytes);
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), bulk("a"));
    assert_eq!(c.reply_str(), OK);
    let got = c.q("SLOWLOG GET 3");
    let at = |needle: String| {
        got.find(&needle)
            .unwrap_or_else(|| panic!("{needle:?} in {got}"))
    };
    let (p2, get, p1) = (
        at(format!("*3\r\n{}{}{}", bulk("SET"), bulk("p2"), bulk("b"))),
        at(format!("*2\r\n{}{}", bulk("GET"), bulk("p1"))),
        at(format!("*3\r\n{}{}{}", bulk("SET"), bulk("p1"), bulk("a"))),
    );
    assert!(p2 < get && get < p1, "newest first: {got}");
    c.ok("SLOWLOG LEN x", &arity("slowlog|len"));
    c.ok("SLOWLOG RESET x", &arity("slowlog|reset"));
    c.ok("SLOWLOG", &arity("slowlog"));
    c.ok(
        "SLOWLOG BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try SLOWLOG HELP."),
    );
}

/// Every command in the table is sent by some raw-bytes test: a request
/// that starts with its name in capitals (`"NAME ...` or `b"NAME"`) in one
/// of this directory's files. A command added without a raw test (and so
/// without its replies and errors checked byte for byte) fails here.
#[test]
fn every_command_has_a_raw_bytes_test() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/resp_raw");
    let mut sources = String::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let untested: Vec<&str> = TABLE
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| {
            let upper = name.to_uppercase();
            ![
                format!("\"{upper} "),
                format!("\"{upper}\""),
                format!("b\"{upper}\""),
            ]
            .iter()
            .any(|p| sources.contains(p.as_str()))
        })
        .collect();
    assert!(
        untested.is_empty(),
        "commands without a raw-bytes request in tests/resp_raw: {untested:?}"
    );
}

/// SHUTDOWN's refusals change nothing; SHUTDOWN itself answers nothing and
/// closes the connection, after the replies before it, and the server
/// stops (the process test `crates/cli/tests/shutdown.rs` checks SAVE and
/// the exit).
#[test]
fn shutdown_refusals_then_shutdown() {
    let s = server();
    let mut c = s.connect();
    c.ok("SHUTDOWN NOSAVE SAVE", SYNTAX);
    c.ok("SHUTDOWN NOW BOGUS", SYNTAX);
    c.ok("SHUTDOWN ABORT NOW", SYNTAX);
    c.ok("SHUTDOWN ABORT", &err("ERR No shutdown in progress."));
    c.ok(
        "SHUTDOWN SAVE",
        &err("ERR Errors trying to SHUTDOWN. Check logs."),
    );
    c.ok("PING", "+PONG\r\n");
    c.send(b"SET k v\r\nSHUTDOWN NOSAVE NOW FORCE\r\nPING\r\n");
    assert_eq!(c.reply_str(), OK);
    c.expect_closed();
}

/// INFO's cpu section (Redis's fields, from getrusage), blocked_clients,
/// and CLIENT HELP: what redis_exporter and redis-cli --stat read.
#[test]
fn info_cpu_blocked_clients_and_client_help() {
    let s = server();
    let mut c = s.connect();
    let cpu = c.q("INFO cpu");
    for field in [
        "used_cpu_sys",
        "used_cpu_user",
        "used_cpu_sys_children",
        "used_cpu_user_children",
    ] {
        let v = cpu
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in {cpu}"));
        let (secs, micros) = v.trim().split_once('.').expect("seconds.microseconds");
        assert!(
            secs.parse::<u64>().is_ok() && micros.len() == 6,
            "{field}:{v}"
        );
    }
    assert!(c.q("INFO clients").contains("blocked_clients:0\r\n"));
    let help = c.q("CLIENT HELP");
    assert!(
        help.starts_with(
            "*45\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
        ),
        "{help}"
    );
    assert!(
        help.ends_with("+HELP\r\n+    Print this help.\r\n"),
        "{help}"
    );
    c.ok("CLIENT HELP x", &arity("client|help"));
}

/// MEMORY: a key's bytes (nil when missing), the subcommands' arity and an
/// unknown one, and ACL key permissions on MEMORY USAGE's key.
#[test]
fn memory_usage_and_its_errors() {
    let s = server();
    let mut c = s.connect();
    c.ok("MEMORY USAGE nope", NIL);
    c.ok("SET k v", OK);
    let n = c.q("MEMORY USAGE k");
    assert!(n.starts_with(':') && n != ":0\r\n", "{n}");
    c.ok("MEMORY USAGE k SAMPLES 5", &n);
    c.ok("MEMORY USAGE k SAMPLES -1", &err("ERR syntax error"));
    c.ok("MEMORY", &arity("memory"));
    c.ok("MEMORY STATS x", &arity("memory|stats"));
    c.ok(
        "MEMORY BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try MEMORY HELP."),
    );
    c.ok("ACL SETUSER reader on nopass ~r* +memory|usage", OK);
    c.ok("AUTH reader x", OK);
    c.ok("MEMORY USAGE r1", NIL);
    c.ok(
        "MEMORY USAGE k",
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n",
    );
}
