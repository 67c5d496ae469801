//! CONFIG SET of every live setting: CONFIG GET shows the new value and
//! the server behaves by it at once; bad values, settings that need a
//! restart and combinations that fail the start-up checks change nothing.

use std::time::{Duration, Instant};

use super::limits::{NOAUTH, WRONGPASS};
use super::wire::*;

fn set(c: &mut Conn, name: &str, value: &str) {
    c.ok(&format!("CONFIG SET {name} {value}"), OK);
    c.ok(&format!("CONFIG GET {name}"), &bulks(&[name, value]));
}

fn refused(name: &str, why: &str) -> String {
    err(&format!(
        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
    ))
}

#[test]
fn maxmemory_applies_to_the_next_write() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET a 1", OK);
    set(&mut c, "maxmemory", "1");
    c.ok(
        "SET b 2",
        &err("OOM command not allowed when used memory > 'maxmemory'."),
    );
    c.ok("GET a", &bulk("1"));
    let info = c.q("INFO memory");
    assert!(info.contains("\r\nmaxmemory:1\r\n"), "{info}");
    set(&mut c, "maxmemory", "0");
    c.ok("SET b 2", OK);
    // Units as in the config file.
    c.ok("CONFIG SET maxmemory 2mb", OK);
    c.ok("CONFIG GET maxmemory", &bulks(&["maxmemory", "2097152"]));
    c.ok(
        "CONFIG SET maxmemory lots",
        &refused("maxmemory", "bad byte size 'lots'"),
    );
    c.ok("CONFIG GET maxmemory", &bulks(&["maxmemory", "2097152"]));
}

#[test]
fn maxclients_applies_to_the_next_connection() {
    let s = server();
    let mut c = s.connect();
    let _b = s.connect();
    c.ok("PING", "+PONG\r\n");
    set(&mut c, "maxclients", "2");
    let mut extra = s.connect();
    assert_eq!(extra.reply_str(), "-ERR max number of clients reached\r\n");
    extra.expect_closed();
    set(&mut c, "maxclients", "10");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = s.connect();
        d.send(&encode(&[b"PING"]));
        if d.reply_str() == "+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the raised limit never applied");
        std::thread::sleep(Duration::from_millis(10));
    }
    c.ok(
        "CONFIG SET maxclients 0",
        &refused("maxclients", "maxclients must be at least 1"),
    );
}

#[test]
fn requirepass_is_the_default_users_password() {
    let s = server();
    let mut admin = s.connect();
    set(&mut admin, "requirepass", "s3cret");
    // The connection that set it stays authenticated; a new one must AUTH.
    admin.ok("PING", "+PONG\r\n");
    let mut c = s.connect();
    c.ok("GET k", NOAUTH);
    c.ok("AUTH wrong", WRONGPASS);
    c.ok("AUTH s3cret", OK);
    c.ok("GET k", "$-1\r\n");
    let user = admin.q("ACL GETUSER default");
    assert!(!user.contains("nopass"), "{user}");
    // Cleared: no password needed again.
    assert_eq!(
        admin.cmd(&[b"CONFIG", b"SET", b"requirepass", b""]),
        OK.as_bytes()
    );
    admin.ok("CONFIG GET requirepass", &bulks(&["requirepass", ""]));
    let mut c = s.connect();
    c.ok("GET k", "$-1\r\n");
}

#[test]
fn the_slow_log_limits_apply_at_once() {
    let s = server();
    let mut c = s.connect();
    set(&mut c, "slowlog-log-slower-than", "0");
    c.ok("SET a 1", OK);
    c.ok("GET a", &bulk("1"));
    let len = c.q("SLOWLOG LEN");
    assert_ne!(len, ":0\r\n", "every command is slow at 0 us");
    set(&mut c, "slowlog-max-len", "1");
    c.ok("SLOWLOG LEN", ":1\r\n");
    set(&mut c, "slowlog-log-slower-than", "-1");
    c.ok("SLOWLOG RESET", OK);
    c.ok("GET a", &bulk("1"));
    c.ok("SLOWLOG LEN", ":0\r\n");
}

#[test]
fn client_limits_apply_to_the_next_request() {
    let s = server();
    let mut c = s.connect();
    for i in 0..100 {
        c.ok(&format!("SET key:{i:03} v"), OK);
    }
    set(&mut c, "max-reply-bytes", "1024");
    c.ok(
        "KEYS *",
        &err("ERR keys reply exceeds max-reply-bytes; use SCAN"),
    );
    set(&mut c, "max-reply-bytes", "1048576");
    let keys = c.q("KEYS *");
    assert!(keys.starts_with("*100\r\n"), "{keys}");
    // The checks at start hold: no hard output limit below a reply's.
    c.ok(
        "CONFIG SET client-output-hard-limit 1000",
        &refused(
            "client-output-hard-limit",
            "client-output-hard-limit must be 0 (none) or at least max-reply-bytes",
        ),
    );
    set(&mut c, "client-output-hard-limit", "0");
    set(&mut c, "max-request-bytes", "2048");
    let big = "x".repeat(3000);
    c.send(&encode(&[b"SET", b"big", big.as_bytes()]));
    let r = c.reply_str();
    assert!(r.starts_with("-ERR Protocol error"), "{r}");
    let mut c = s.connect();
    c.ok(
        "CONFIG SET max-total-query-bytes 1024",
        &refused(
            "max-total-query-bytes",
            "max-total-query-bytes must be at least max-request-bytes",
        ),
    );
}

#[test]
fn a_call_changes_all_or_nothing_and_restart_settings_are_named() {
    let s = server();
    let mut c = s.connect();
    c.ok(
        "CONFIG SET maxmemory 5mb maxclients many",
        &refused(
            "maxclients",
            "argument couldn't be parsed into an integer: 'many'",
        ),
    );
    c.ok("CONFIG GET maxmemory", &bulks(&["maxmemory", "0"]));
    c.ok(
        "CONFIG SET maxmemory 5mb maxmemory 6mb",
        &refused("maxmemory", "duplicate parameter"),
    );
    c.ok(
        "CONFIG SET data-dir /tmp",
        &refused(
            "data-dir",
            "not changeable while serving: change the config file or flags and restart",
        ),
    );
    c.ok(
        "CONFIG SET no-such-setting 1",
        &refused(
            "no-such-setting",
            "Unknown option or number of arguments for CONFIG SET",
        ),
    );
    c.ok(
        "CONFIG SET log-level loud",
        &refused(
            "log-level",
            "unknown log level 'loud' (expected error, warn, info, debug or trace)",
        ),
    );
    set(&mut c, "log-level", "debug");
    c.ok("CONFIG SET maxmemory 5mb maxclients 50", OK);
    c.ok(
        "CONFIG GET maxmemory maxclients",
        &bulks(&["maxmemory", "5242880", "maxclients", "50"]),
    );
    c.ok(
        "CONFIG REWRITE",
        &err("ERR The server is running without a config file"),
    );
    c.ok("CONFIG REWRITE x", &arity("config|rewrite"));
}

/// LATENCY's replies in Redis's shapes: the monitor's events (none until
/// one passes the threshold), the histograms of the commands run.
#[test]
fn latency_monitor_and_histograms() {
    let s = server();
    let mut c = s.connect();
    c.ok("LATENCY LATEST", "*0\r\n");
    c.ok("LATENCY HISTORY command", "*0\r\n");
    c.ok("LATENCY RESET", ":0\r\n");
    c.ok("LATENCY RESET command", ":0\r\n");
    c.ok(
        "LATENCY GRAPH command",
        &err("ERR No samples available for event 'command'"),
    );
    c.ok("LATENCY HELP x", &arity("latency|help"));
    c.ok(
        "LATENCY NOPE",
        &err("ERR unknown subcommand 'NOPE'. Try LATENCY HELP."),
    );
    set(&mut c, "latency-monitor-threshold", "100");
    c.ok("CONFIG RESETSTAT", OK);
    c.ok("SET a 1", OK);
    c.ok("SET b 2", OK);
    c.ok("GET a", &bulk("1"));
    let histo = c.q("LATENCY HISTOGRAM set nosuchcommand");
    assert!(
        histo
            .starts_with("*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n"),
        "{histo}"
    );
    let all = c.q("LATENCY HISTOGRAM");
    assert!(
        all.contains("$3\r\nget\r\n") && all.contains("$3\r\nset\r\n"),
        "{all}"
    );
    let doctor = c.q("LATENCY DOCTOR");
    assert!(
        doctor.contains("No event took 100 milliseconds"),
        "{doctor}"
    );
}

/// MONITOR streams what other clients run, in Redis's format; admin
/// commands (CONFIG) are not shown.
#[test]
fn monitor_streams_commands() {
    let s = server();
    let mut m = s.connect();
    m.ok("MONITOR", OK);
    let mut c = s.connect();
    c.ok("SET k \"v\\x01", OK);
    c.ok("CONFIG GET maxclients", &bulks(&["maxclients", "10000"]));
    c.ok("GET k", &bulk("\"v\\x01"));
    let first = m.reply_str();
    let second = m.reply_str();
    for (line, want) in [
        (&first, r#" "SET" "k" "\"v\\x01""#),
        (&second, r#" "GET" "k""#),
    ] {
        assert!(
            line.starts_with('+') && line.contains(" [0 127.0.0.1:"),
            "{line}"
        );
        assert!(line.ends_with(&format!("{want}\r\n")), "{line}");
    }
}

/// INFO stats' hot-cache hits and misses.
fn hot_cache_counts(c: &mut Conn) -> (u64, u64) {
    let info = c.q("INFO stats");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("INFO stats has {name}: {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    (field("hot_cache_hits:"), field("hot_cache_misses:"))
}

/// CONFIG SET hot-cache-entries gives each event loop a cache of that
/// size from its next turn: hot keys are then answered from it (the
/// hit counter grows), and with 0 there is none (neither counter moves).
#[test]
fn hot_cache_entries_resize_the_loops_caches() {
    let s = server();
    let mut c = s.connect();
    c.ok(
        "CONFIG GET hot-cache-entries",
        &bulks(&["hot-cache-entries", "0"]),
    );
    c.ok("MSET h1 a h2 b", OK);
    gets(&mut c, "a");
    assert_eq!(hot_cache_counts(&mut c), (0, 0), "no cache by default");
    set(&mut c, "hot-cache-entries", "256");
    gets(&mut c, "a");
    let (hits, misses) = hot_cache_counts(&mut c);
    assert!(hits > 300, "{hits} hits, {misses} misses with a cache");
    // An overwritten value is never answered from the cache.
    c.ok("SET h1 z", OK);
    c.ok("MGET h1 h2", &bulks(&["z", "b"]));
    set(&mut c, "hot-cache-entries", "0");
    let before = hot_cache_counts(&mut c);
    gets(&mut c, "z");
    assert_eq!(hot_cache_counts(&mut c), before, "a cache after setting 0");
    c.ok(
        "CONFIG SET hot-cache-entries 99999999999",
        &refused(
            "hot-cache-entries",
            "hot-cache-entries must be at most 1048576",
        ),
    );
    c.ok(
        "CONFIG SET hot-cache-entries lots",
        &refused(
            "hot-cache-entries",
            "argument couldn't be parsed into an integer: 'lots'",
        ),
    );
    c.ok(
        "CONFIG GET hot-cache-entries",
        &bulks(&["hot-cache-entries", "0"]),
    );
}

/// 200 reads of the two hot keys, `h1` holding `h1`.
fn gets(c: &mut Conn, h1: &str) {
    for _ in 0..200 {
        c.ok("MGET h1 h2", &bulks(&[h1, "b"]));
    }
}

/// A number from INFO `section`.
fn info_number(c: &mut Conn, section: &str, name: &str) -> u64 {
    let info = c.q(&format!("INFO {section}"));
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO {section} has {name}: {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// CONFIG SET durability switches the log's fsync policy at once: with
/// `always` each acknowledged write had its own fsync, with `everysec`
/// writes go without one, back to `always` they have one again, `none`
/// has none; what was written in every mode is there after a restart.
/// Without a data directory there is no log to switch.
#[test]
fn durability_switches_the_logs_fsync_policy() {
    let dir = std::env::temp_dir().join(format!("combkv-live-durability-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config();
    cfg.data_dir = Some(dir.clone());
    let s = TestServer::start(cfg.clone());
    let mut c = s.connect();
    c.ok("CONFIG GET durability", &bulks(&["durability", "always"]));
    let writes = |c: &mut Conn, mode: &str, n: usize| -> u64 {
        let before = info_number(c, "persistence", "fsyncs");
        for i in 0..n {
            c.ok(&format!("SET {mode}{i} v"), OK);
        }
        info_number(c, "persistence", "fsyncs") - before
    };
    let n = writes(&mut c, "always", 20);
    assert!(n >= 20, "{n} fsyncs for 20 writes with always");
    set(&mut c, "durability", "everysec");
    c.ok(
        "CONFIG GET appendfsync",
        &bulks(&["appendfsync", "everysec"]),
    );
    let info = c.q("INFO persistence");
    assert!(info.contains("\r\ndurability:everysec\r\n"), "{info}");
    // One fsync a second at most (these take far less than 3 seconds).
    let n = writes(&mut c, "everysec", 50);
    assert!(n <= 3, "{n} fsyncs for 50 writes with everysec");
    set(&mut c, "durability", "always");
    let n = writes(&mut c, "again", 20);
    assert!(n >= 20, "{n} fsyncs for 20 writes with always again");
    set(&mut c, "durability", "none");
    let n = writes(&mut c, "none", 20);
    assert!(n <= 1, "{n} fsyncs for 20 writes with none");
    c.ok(
        "CONFIG SET durability sometimes",
        &refused(
            "durability",
            "unknown durability 'sometimes' (expected always, everysec or none)",
        ),
    );
    c.ok("CONFIG GET durability", &bulks(&["durability", "none"]));
    drop(c);
    drop(s);
    // A clean stop writes the log out; every mode's writes come back.
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    c.ok("DBSIZE", &int(110));
    c.ok("GET everysec49", &bulk("v"));
    c.ok("GET none19", &bulk("v"));
    drop(c);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);

    let s = server();
    let mut c = s.connect();
    c.ok(
        "CONFIG SET durability always",
        &refused(
            "durability",
            "durability 'always' needs a data directory (--data-dir)",
        ),
    );
    c.ok("CONFIG GET durability", &bulks(&["durability", "none"]));
}
