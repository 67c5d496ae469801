//! The `redis` crate against an in-process server (issue 6, "What it must
//! show" 2): RESP2 and RESP3 connections, pipelines, and many clients
//! mixing reads and writes on one keyspace with a final consistency check.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};

use combkv_server::{Listen, Server, ServerConfig};
use redis::{Connection, Value};

struct TestServer(Option<Server>);

impl TestServer {
    fn start() -> TestServer {
        TestServer::with_hot_cache(0)
    }

    fn with_hot_cache(hot_cache_entries: usize) -> TestServer {
        let cfg = ServerConfig {
            resp: Listen::At("127.0.0.1:0".parse().unwrap()),
            memcached: Listen::Off,
            threads: 2,
            hot_cache_entries,
            ..Default::default()
        };
        TestServer(Some(Server::start(cfg).expect("server starts")))
    }

    fn url(&self, resp3: bool) -> String {
        let addr = self.0.as_ref().unwrap().resp_addr().unwrap();
        let proto = if resp3 { "?protocol=resp3" } else { "" };
        format!("redis://{addr}/{proto}")
    }

    fn connect(&self, resp3: bool) -> Connection {
        redis::Client::open(self.url(resp3))
            .unwrap()
            .get_connection()
            .expect("redis client connects")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.shutdown();
        }
    }
}

fn q<T: redis::FromRedisValue>(c: &mut Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

fn string_commands(c: &mut Connection, resp3: bool) {
    let _: () = q(c, &["FLUSHALL"]);
    let _: () = q(c, &["SET", "k", "v"]);
    assert_eq!(q::<Option<String>>(c, &["GET", "k"]).as_deref(), Some("v"));
    assert_eq!(q::<Option<String>>(c, &["GET", "nokey"]), None);
    // The null's wire form follows the protocol.
    let raw: Value = q(c, &["GET", "nokey"]);
    assert_eq!(raw, Value::Nil);
    assert_eq!(q::<i64>(c, &["INCR", "n"]), 1);
    assert_eq!(q::<i64>(c, &["INCRBY", "n", "41"]), 42);
    let _: () = q(c, &["MSET", "a", "1", "b", "2"]);
    assert_eq!(
        q::<Vec<Option<String>>>(c, &["MGET", "a", "b", "zz"]),
        vec![Some("1".into()), Some("2".into()), None]
    );
    assert_eq!(
        q::<Option<String>>(c, &["SET", "a", "9", "GET"]).as_deref(),
        Some("1")
    );
    assert!(q::<bool>(c, &["EXPIRE", "a", "100"]));
    let ttl: i64 = q(c, &["TTL", "a"]);
    assert!((99..=100).contains(&ttl));
    assert_eq!(q::<i64>(c, &["DEL", "a", "b", "zz"]), 2);
    // Errors arrive as errors, and the connection stays usable.
    let e = redis::cmd("INCR").arg("k").query::<i64>(c).unwrap_err();
    assert!(e.to_string().contains("not an integer"), "{e}");
    let e = redis::cmd("NOPE").query::<()>(c).unwrap_err();
    assert!(e.to_string().contains("unknown command"), "{e}");
    // combkv's own commands.
    let (v, ver): (String, i64) = q(c, &["GETV", "k"]);
    assert_eq!(v, "v");
    let ver2: Option<i64> = q(c, &["CAS", "k", &ver.to_string(), "w"]);
    assert!(ver2.unwrap() > ver);
    let stale: Option<i64> = q(c, &["CAS", "k", &ver.to_string(), "x"]);
    assert_eq!(stale, None);
    let _: () = q(c, &["MSET", "r:1", "a", "r:3", "c", "r:2", "b"]);
    let range: Vec<String> = q(c, &["RANGE", "[r:", "+", "LIMIT", "10", "KEYSONLY"]);
    assert_eq!(range, ["r:1", "r:2", "r:3"]);
    let pairs: Vec<(String, String)> = q(c, &["RANGE", "(r:1", "+", "REV"]);
    assert_eq!(
        pairs,
        [("r:3".into(), "c".into()), ("r:2".into(), "b".into())]
    );
    let floor: Option<(String, String)> = q(c, &["FLOOR", "r:25"]);
    assert_eq!(floor, Some(("r:2".into(), "b".into())));
    let none: Option<(String, String)> = q(c, &["CEIL", "zzz"]);
    assert_eq!(none, None);
    let snap: i64 = q(c, &["SNAPSHOT", "CREATE"]);
    let _: () = q(c, &["SET", "r:2", "changed"]);
    assert_eq!(
        q::<Option<String>>(c, &["GETAT", &snap.to_string(), "r:2"]).as_deref(),
        Some("b")
    );
    assert!(q::<bool>(c, &["SNAPSHOT", "RELEASE", &snap.to_string()]));
    // SCAN in key order through the client's iterator.
    let keys: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("COUNT")
        .arg(2)
        .clone()
        .iter(c)
        .unwrap()
        .map(|k| k.unwrap())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), q::<usize>(c, &["DBSIZE"]));
    // Server commands.
    let info: redis::InfoDict = q(c, &["INFO", "server"]);
    assert_eq!(
        info.get::<String>("redis_version").as_deref(),
        Some("7.2.0")
    );
    let conf: HashMap<String, String> = q(c, &["CONFIG", "GET", "maxclients"]);
    assert_eq!(conf.get("maxclients").map(String::as_str), Some("10000"));
    let raw: Value = q(c, &["CONFIG", "GET", "maxclients"]);
    assert_eq!(matches!(raw, Value::Map(_)), resp3, "{raw:?}");
    let _: () = q(c, &["CLIENT", "SETNAME", "rs-client"]);
    assert_eq!(
        q::<Option<String>>(c, &["CLIENT", "GETNAME"]).as_deref(),
        Some("rs-client")
    );
    assert!(q::<i64>(c, &["COMMAND", "COUNT"]) > 40);
    // The string family, through the crate's typed helpers where it has
    // them (a float delta makes `incr` send INCRBYFLOAT).
    use redis::Commands;
    let _: () = c.set("f", "10.50").unwrap();
    assert_eq!(c.incr::<_, _, f64>("f", 0.1f64).unwrap(), 10.6);
    assert_eq!(q::<String>(c, &["GET", "f"]), "10.6");
    let _: () = c.set("bits", "\u{0}\u{ff}").unwrap();
    assert_eq!(q::<i64>(c, &["BITPOS", "bits", "1"]), 8);
    let _: () = c.mset(&[("l1", "ohmytext"), ("l2", "mynewtext")]).unwrap();
    assert_eq!(q::<String>(c, &["LCS", "l1", "l2"]), "mytext");
    assert_eq!(q::<i64>(c, &["LCS", "l1", "l2", "LEN"]), 6);
    let idx: HashMap<String, Value> = q(c, &["LCS", "l1", "l2", "IDX"]);
    assert_eq!(idx.get("len"), Some(&Value::Int(6)));
    let _: () = c.set_ex("ex", "v", 100).unwrap();
    assert_eq!(c.getrange::<_, String>("ex", 0, 0).unwrap(), "v");
    assert!(c.rename_nx::<_, _, bool>("ex", "ex2").unwrap());
    assert_eq!(c.ttl::<_, i64>("ex2").unwrap(), 100);
}

#[test]
fn resp2_and_resp3_connections() {
    let s = TestServer::start();
    for resp3 in [false, true] {
        let mut c = s.connect(resp3);
        string_commands(&mut c, resp3);
    }
}

#[test]
fn pipelines_over_both_protocols() {
    let s = TestServer::start();
    for resp3 in [false, true] {
        let mut c = s.connect(resp3);
        let _: () = q(&mut c, &["FLUSHALL"]);
        let mut p = redis::pipe();
        for i in 0..500 {
            p.cmd("SET").arg(format!("p:{i:03}")).arg(i).ignore();
            p.cmd("GET").arg(format!("p:{i:03}"));
        }
        p.cmd("INCR").arg("p:000");
        p.cmd("RANGE")
            .arg("[p:100")
            .arg("+")
            .arg("LIMIT")
            .arg(3)
            .arg("KEYSONLY");
        p.cmd("GET").arg("nokey");
        let out: Vec<Value> = p.query(&mut c).unwrap();
        assert_eq!(out.len(), 503);
        for (i, v) in out[..500].iter().enumerate() {
            assert_eq!(*v, Value::BulkString(i.to_string().into_bytes()));
        }
        assert_eq!(out[500], Value::Int(1));
        assert_eq!(
            out[501],
            Value::Array(
                ["p:100", "p:101", "p:102"]
                    .iter()
                    .map(|k| Value::BulkString(k.as_bytes().to_vec()))
                    .collect()
            )
        );
        assert_eq!(out[502], Value::Nil);
        // An error in the middle of a pipeline is that command's reply only.
        let (a, b, c2): (Value, Value, Value) = redis::pipe()
            .cmd("SET")
            .arg("x")
            .arg("1")
            .cmd("INCRBY")
            .arg("x")
            .arg("notanumber")
            .cmd("GET")
            .arg("x")
            .ignore_errors()
            .query(&mut c)
            .unwrap();
        assert_eq!(a, Value::Okay);
        assert!(matches!(b, Value::ServerError(_)), "{b:?}");
        assert_eq!(c2, Value::BulkString(b"1".to_vec()));
    }
}

const CLIENTS: usize = 8;
const ROUNDS: usize = 150;
const SHARED_COUNTERS: usize = 4;

/// Many clients (RESP2 and RESP3, plain and pipelined) on one keyspace:
/// INCR on shared counters, CAS increments on one shared key, SET and GET
/// of each client's own keys, RANGE reads of everything. At the end every
/// increment is counted exactly once and every client's last writes are
/// what is stored.
#[test]
fn concurrent_clients_mixing_reads_and_writes() {
    let s = TestServer::start();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let urls: Vec<String> = (0..CLIENTS).map(|i| s.url(i % 2 == 1)).collect();
    let handles: Vec<_> = urls
        .into_iter()
        .enumerate()
        .map(|(id, url)| {
            let barrier = barrier.clone();
            std::thread::spawn(move || client_work(id, &url, &barrier))
        })
        .collect();
    let mut cas_wins = 0;
    for h in handles {
        cas_wins += h.join().expect("client thread");
    }
    let mut c = s.connect(false);
    for i in 0..SHARED_COUNTERS {
        let n: i64 = q(&mut c, &["GET", &format!("counter:{i}")]);
        assert_eq!(
            n as usize,
            CLIENTS * ROUNDS / SHARED_COUNTERS * 2,
            "counter {i}"
        );
    }
    let cas: i64 = q(&mut c, &["GET", "cas-counter"]);
    assert_eq!(cas as usize, cas_wins);
    assert_eq!(cas_wins, CLIENTS * ROUNDS / 10);
    for id in 0..CLIENTS {
        for k in 0..10 {
            let key = format!("own:{id}:{k}");
            let last = (0..ROUNDS).rev().find(|r| r % 10 == k).unwrap();
            let v: String = q(&mut c, &["GET", &key]);
            assert_eq!(v, format!("{id}:{last}"), "{key}");
        }
    }
    let n: usize = q(&mut c, &["DBSIZE"]);
    assert_eq!(n, SHARED_COUNTERS + 1 + CLIENTS * 10);
    let all: Vec<String> = q(&mut c, &["RANGE", "-", "+", "KEYSONLY"]);
    assert_eq!(all.len(), n);
}

/// One client's share; returns its successful CAS increments.
fn client_work(id: usize, url: &str, barrier: &Barrier) -> usize {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    barrier.wait();
    let mut cas_wins = 0;
    for r in 0..ROUNDS {
        let counter = format!("counter:{}", (id + r) % SHARED_COUNTERS);
        let own = format!("own:{id}:{}", r % 10);
        if r % 2 == 0 {
            let _: i64 = q(&mut c, &["INCR", &counter]);
            let _: i64 = q(&mut c, &["INCRBY", &counter, "1"]);
            let _: () = q(&mut c, &["SET", &own, &format!("{id}:{r}")]);
            let got: String = q(&mut c, &["GET", &own]);
            assert_eq!(got, format!("{id}:{r}"), "a client reads its own write");
        } else {
            // The same work, pipelined, with reads between the writes.
            let (n1, n2, _, got, range): (i64, i64, (), String, Vec<String>) = redis::pipe()
                .cmd("INCR")
                .arg(&counter)
                .cmd("INCR")
                .arg(&counter)
                .cmd("SET")
                .arg(&own)
                .arg(format!("{id}:{r}"))
                .cmd("GET")
                .arg(&own)
                .cmd("RANGE")
                .arg("[own:")
                .arg("(own;")
                .arg("KEYSONLY")
                .query(&mut c)
                .unwrap();
            // Other clients may increment in between; replies keep order.
            assert!(n2 > n1, "{n1} then {n2}");
            assert_eq!(got, format!("{id}:{r}"));
            let mut sorted = range.clone();
            sorted.sort();
            assert_eq!(range, sorted, "RANGE is in key order");
            assert!(range.contains(&own));
        }
        if r % 10 == 0 {
            // CAS increment with retries: exactly one success per attempt.
            loop {
                let cur: Option<(String, i64)> = q(&mut c, &["GETV", "cas-counter"]);
                let (n, ver) = match cur {
                    Some((v, ver)) => (v.parse::<i64>().unwrap(), ver),
                    None => (0, 0),
                };
                let done: Option<i64> = q(
                    &mut c,
                    &["CAS", "cas-counter", &ver.to_string(), &(n + 1).to_string()],
                );
                if done.is_some() {
                    cas_wins += 1;
                    break;
                }
            }
        }
    }
    cas_wins
}

/// MSET and multi-key DEL are atomic: while one client overwrites (and
/// sometimes deletes) a set of keys as a whole, other clients reading them
/// with MGET and RANGE never see a mix of two MSETs or half a DEL.
#[test]
fn mset_and_del_are_atomic_for_readers() {
    let server = TestServer::start();
    let keys: Vec<String> = (0..20).map(|i| format!("atom:{:03}", i * 13)).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Reads done so far: the writer goes on until enough of them overlapped
    // its writes (on a loaded machine 300 rounds can pass before the reader
    // is scheduled), or a minute has passed.
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (url, keys, stop) = (server.url(false), keys.clone(), stop.clone());
        let reads = reads.clone();
        std::thread::spawn(move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let mut round = 0u32;
            loop {
                round += 1;
                let mut cmd = redis::cmd("MSET");
                for k in &keys {
                    cmd.arg(k).arg(format!("round-{round:05}"));
                }
                let _: () = cmd.query(&mut c).unwrap();
                if round.is_multiple_of(7) {
                    let n: i64 = redis::cmd("DEL").arg(&keys).query(&mut c).unwrap();
                    assert_eq!(n, keys.len() as i64);
                }
                let overlapped = reads.load(std::sync::atomic::Ordering::SeqCst) >= 50;
                if round >= 300 && (overlapped || std::time::Instant::now() > deadline) {
                    break;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    // Unrelated single-key writes, so the groups' versions interleave.
    let other = {
        let (url, stop) = (server.url(false), stop.clone());
        std::thread::spawn(move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                let _: () = q(&mut c, &["SET", &format!("atom:{:03}-x", i % 250), "x"]);
            }
        })
    };
    let mut c = server.connect(true);
    let mut checked = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let got: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
        let present: Vec<&String> = got.iter().flatten().collect();
        assert!(
            present.is_empty()
                || (present.len() == keys.len() && present.iter().all(|v| *v == present[0])),
            "MGET saw a torn MSET or DEL: {got:?}"
        );
        let range: Vec<String> = q(&mut c, &["RANGE", "[atom:", "(atom;", "LIMIT", "1000"]);
        let values: Vec<&String> = range
            .chunks(2)
            .filter(|kv| kv[0].len() == 8)
            .map(|kv| &kv[1])
            .collect();
        assert!(
            values.is_empty()
                || (values.len() == keys.len() && values.iter().all(|v| *v == values[0])),
            "RANGE saw a torn MSET or DEL: {values:?}"
        );
        checked += 1;
        reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    writer.join().unwrap();
    other.join().unwrap();
    assert!(checked > 10, "only {checked} reads overlapped the writes");
}

/// redis's `pipe().atomic()` sends MULTI ... EXEC and unpacks EXEC's
/// array; over both protocols.
#[test]
fn transaction_pipelines() {
    let s = TestServer::start();
    for resp3 in [false, true] {
        let mut c = s.connect(resp3);
        let _: () = q(&mut c, &["FLUSHALL"]);
        let (n, v, missing, both): (i64, String, Option<String>, Vec<Option<String>>) =
            redis::pipe()
                .atomic()
                .cmd("INCRBY")
                .arg("n")
                .arg(5)
                .cmd("SET")
                .arg("k")
                .arg("v")
                .ignore()
                .cmd("GET")
                .arg("k")
                .cmd("GET")
                .arg("missing")
                .cmd("MGET")
                .arg("k")
                .arg("n")
                .query(&mut c)
                .unwrap();
        assert_eq!(n, 5);
        assert_eq!(v, "v");
        assert_eq!(missing, None);
        assert_eq!(both, [Some("v".to_string()), Some("5".to_string())]);
        // A command's own error inside EXEC is an error of the pipeline;
        // the others applied.
        let r: redis::RedisResult<(i64, i64)> = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg("k")
            .cmd("INCR")
            .arg("n")
            .query(&mut c);
        assert!(r.is_err(), "{r:?}");
        assert_eq!(q::<i64>(&mut c, &["GET", "n"]), 6);
        // A refusal while queuing discards the whole transaction.
        let r: redis::RedisResult<()> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("n")
            .arg("0")
            .cmd("SET")
            .arg("only-one-argument")
            .query(&mut c);
        // (The crate reports the queuing error, which EXECABORT follows.)
        let e = r.unwrap_err().to_string();
        assert!(e.contains("wrong number of arguments for 'set'"), "{e}");
        assert_eq!(q::<i64>(&mut c, &["GET", "n"]), 6);
    }
}

/// Optimistic locking, as Redis documents it: WATCH, read, MULTI, write,
/// EXEC, retry on a null reply. Eight clients increment one counter
/// through it; the total is exact, and some EXECs were aborted and
/// retried (the loop really raced).
#[test]
fn watch_multi_exec_retry_loop_ends_with_the_exact_total() {
    const CLIENTS: usize = 8;
    const EACH: i64 = 150;
    let s = Arc::new(TestServer::start());
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let url = s.url(false);
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, barrier) = (url.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                barrier.wait();
                let mut aborted = 0;
                for _ in 0..EACH {
                    loop {
                        let _: () = redis::cmd("WATCH").arg("counter").query(&mut c).unwrap();
                        let n: Option<i64> =
                            redis::cmd("GET").arg("counter").query(&mut c).unwrap();
                        let r: Option<(String,)> = redis::pipe()
                            .atomic()
                            .cmd("SET")
                            .arg("counter")
                            .arg(n.unwrap_or(0) + 1)
                            .query(&mut c)
                            .unwrap();
                        match r {
                            Some(_) => break,
                            None => aborted += 1,
                        }
                    }
                }
                aborted
            })
        })
        .collect();
    let aborted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let mut c = s.connect(false);
    assert_eq!(q::<i64>(&mut c, &["GET", "counter"]), CLIENTS as i64 * EACH);
    assert!(
        aborted > 0,
        "no EXEC was ever aborted: the clients did not race"
    );
}

/// With hot-entry caches in the event loops, GETs of hot keys are served
/// from them (INFO counts the hits) and a write is seen by the very next
/// read on any connection: a writer sets a counter and, once acknowledged,
/// a reader on another connection (another event loop, likely) must read
/// that value or a newer one.
#[test]
fn hot_caches_serve_hot_keys_and_never_an_overwritten_value() {
    let server = TestServer::with_hot_cache(256);
    let mut w = server.connect(false);
    let mut r = server.connect(true);
    string_commands(&mut r, true);
    let _: () = q(&mut w, &["MSET", "h1", "a", "h2", "b", "h3", "c"]);
    for i in 0..2_000u32 {
        let v = i.to_string();
        let _: () = q(&mut w, &["SET", "counter", &v]);
        let got: String = q(&mut r, &["GET", "counter"]);
        assert!(
            got.parse::<u32>().unwrap() >= i,
            "read {got} after {i} was acknowledged"
        );
        let hot: Vec<String> = q(&mut r, &["MGET", "h1", "h2", "h3"]);
        assert_eq!(hot, ["a", "b", "c"]);
        if i % 500 == 0 {
            let _: () = q(&mut w, &["SET", "h2", "b"]);
        }
    }
    let info: String = q(&mut r, &["INFO", "stats"]);
    let hits: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("hot_cache_hits:"))
        .expect("INFO stats has hot_cache_hits")
        .trim()
        .parse()
        .unwrap();
    assert!(hits > 3_000, "{hits} hits");
}
