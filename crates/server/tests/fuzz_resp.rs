//! Fuzz smoke run of the RESP listener (issue 6, "What it must show" 3):
//! seeded random and mutated inputs through the frame parser and through a
//! whole RESP session (parse, dispatch, batched reads, replies), asserting
//! no panic and no allocation driven by a declared length. Deterministic:
//! the same seeds run every time; `COMBKV_FUZZ_SCALE=N` runs N times more.
//! The open-ended search is the cargo-fuzz target `fuzz/fuzz_targets/resp_parse.rs`.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use combkv_server::resp_fuzzing::{RespSession, resp_parse, resp_session};
use combkv_server::{ByteSize, ServerConfig};

#[allow(dead_code, reason = "each fuzz test binary uses part of it")]
mod support;
use support::{Rng, peak_alloc};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

// ---- inputs -----------------------------------------------------------------

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Valid requests covering every command family and reply shape.
const COMMANDS: &[&[&str]] = &[
    &["SET", "k", "v"],
    &["SET", "k", "v", "NX", "GET"],
    &["SET", "k2", "v", "XX", "KEEPTTL"],
    &["SET", "n", "10", "EX", "100"],
    &["GET", "k"],
    &["GET", "nokey"],
    &["MGET", "k", "n", "zz"],
    &["MSET", "a", "1", "b", "2"],
    &["INCR", "n"],
    &["DECRBY", "n", "3"],
    &["APPEND", "k", "xyz"],
    &["STRLEN", "k"],
    &["GETDEL", "b"],
    &["SETNX", "c", "3"],
    &["DEL", "a", "zz"],
    &["EXISTS", "k", "n"],
    &["EXPIRE", "k", "100", "NX"],
    &["PEXPIRE", "k", "100000", "GT"],
    &["TTL", "k"],
    &["PERSIST", "k"],
    &["TYPE", "k"],
    &["DBSIZE"],
    &["KEYS", "*"],
    &["SCAN", "0", "MATCH", "k*", "COUNT", "2"],
    &["RANGE", "-", "+"],
    &["RANGE", "[a", "(z", "LIMIT", "3", "REV", "WITHVERSIONS"],
    &["RANGE", "[k", "+", "FLOOR", "KEYSONLY", "LIMIT", "2"],
    &["FLOOR", "m"],
    &["CEIL", "b"],
    &["GETV", "k"],
    &["CAS", "k", "0", "v"],
    &["CAS", "k", "1", "v", "PX", "1000"],
    &["SNAPSHOT", "CREATE", "EX", "5"],
    &["SNAPSHOT", "LIST"],
    &["SNAPSHOT", "RELEASE", "1"],
    &["GETAT", "1", "k"],
    &["RANGEAT", "1", "-", "+", "LIMIT", "2"],
    &["PING"],
    &["ECHO", "hi"],
    &["HELLO", "3"],
    &["HELLO", "2", "SETNAME", "fz"],
    &["AUTH", "pw"],
    &["SELECT", "0"],
    &["CLIENT", "ID"],
    &["CLIENT", "SETNAME", "x"],
    &["COMMAND", "COUNT"],
    &["COMMAND", "DOCS", "get"],
    &["CONFIG", "GET", "max*"],
    &["INFO", "stats"],
    &["SLOWLOG", "GET", "2"],
    &["TIME"],
    &["FLUSHALL"],
    &["NOPE", "x"],
    &["QUIT"],
];

/// A valid pipeline of a few requests, multibulk or inline.
fn pipeline(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let cmd = rng.pick(COMMANDS);
        if rng.below(4) == 0 {
            out.extend_from_slice(cmd.join(" ").as_bytes());
            out.extend_from_slice(if rng.below(2) == 0 { b"\r\n" } else { b"\n" });
        } else {
            out.extend(encode(cmd));
        }
    }
    out
}

/// Numbers that sit on the parser's boundaries.
const EXTREMES: &[&str] = &[
    "-1",
    "0",
    "-0",
    "+1",
    "01",
    "10",
    "11",
    "16385",
    "1048576",
    "1048577",
    "2147483647",
    "2147483648",
    "134217728",
    "999999999999",
    "9223372036854775807",
    "99999999999999999999",
    "",
];

/// A mutation of a valid pipeline.
fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(b'*');
        }
        let at = rng.below(b.len());
        match rng.below(8) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => {
                b.remove(at);
            }
            2 => b.insert(at, *rng.pick(b"*$\r\n:-+0123456789 \"'\\x")),
            3 => b.truncate(at),
            4 => {
                let end = (at + rng.below(16)).min(b.len());
                let chunk = b[at..end].to_vec();
                b.splice(at..at, chunk);
            }
            5 => {
                // Replace the digit run at or after `at` with an extreme.
                let start = (at..b.len()).find(|&i| b[i].is_ascii_digit());
                if let Some(s) = start {
                    let e = (s..b.len())
                        .find(|&i| !b[i].is_ascii_digit())
                        .unwrap_or(b.len());
                    b.splice(s..e, rng.pick(EXTREMES).bytes());
                }
            }
            6 => {
                let other = pipeline(rng);
                let cut = rng.below(other.len());
                b.splice(at..at, other[cut..].iter().copied());
            }
            _ => {
                let n = rng.below(64);
                for _ in 0..n {
                    b.insert(at, rng.next() as u8);
                }
            }
        }
    }
    b
}

/// Bytes drawn mostly from RESP's alphabet.
fn random_input(rng: &mut Rng) -> Vec<u8> {
    const ALPHABET: &[u8] = b"*$\r\n\r\n:+-0123456789 \"'\\xSETGETRANGE";
    let n = rng.below(96);
    (0..n)
        .map(|_| {
            if rng.below(8) == 0 {
                rng.next() as u8
            } else {
                *rng.pick(ALPHABET)
            }
        })
        .collect()
}

fn input(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => random_input(rng),
        1 => pipeline(rng),
        _ => {
            let p = pipeline(rng);
            mutate(rng, p)
        }
    }
}

fn scale() -> usize {
    std::env::var("COMBKV_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn fuzz_config(requirepass: bool) -> ServerConfig {
    ServerConfig {
        max_value_bytes: ByteSize(4096),
        max_request_bytes: ByteSize(1 << 20),
        max_reply_bytes: ByteSize(64 << 10),
        max_snapshots: 8,
        requirepass: requirepass.then(|| "pw".to_string()),
        ..Default::default()
    }
}

/// Runs `f` on `input`; on a panic, prints the input so it can become a
/// regression test, then fails.
fn guarded<T>(what: &str, seed: u64, i: usize, input: &[u8], f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            eprintln!(
                "{what} panicked: seed {seed} case {i} input {:?}",
                input.escape_ascii().to_string()
            );
            resume_unwind(p)
        }
    }
}

// ---- tests ------------------------------------------------------------------

#[test]
fn parser_survives_random_and_mutated_input() {
    let seed = 0x5eed_0001;
    let mut rng = Rng(seed);
    for i in 0..300_000 * scale() {
        let input = input(&mut rng);
        let (n, used) = guarded("resp_parse", seed, i, &input, || {
            resp_parse(&input, 1 << 20)
        });
        assert!(used <= input.len() && (n == 0) == (used == 0));
    }
}

#[test]
fn sessions_survive_random_and_mutated_input() {
    for (seed, auth) in [(0x5eed_0002u64, false), (0x5eed_0003, true)] {
        let mut rng = Rng(seed);
        let mut session = RespSession::new(fuzz_config(auth));
        for i in 0..25_000 * scale() {
            let input = input(&mut rng);
            // One to three reads, split at random points.
            let cut1 = rng.below(input.len() + 1);
            let cut2 = cut1 + rng.below(input.len() - cut1 + 1);
            guarded("session", seed, i, &input, || {
                session.feed(&input[..cut1]);
                session.feed(&input[cut1..cut2]);
                session.feed(&input[cut2..]);
            });
            if session.closed() || rng.below(50) == 0 {
                session.reconnect();
            }
            // What waits for more input is bounded by the request limit.
            assert!(session.pending_input() <= (1 << 20) + 64 * 1024);
        }
        // Still serving after all that.
        session.reconnect();
        if auth {
            assert_eq!(session.feed(b"AUTH pw\r\n"), b"+OK\r\n");
        }
        assert_eq!(session.feed(b"*1\r\n$4\r\nPING\r\n"), b"+PONG\r\n");
    }
}

#[test]
fn replies_do_not_depend_on_read_boundaries() {
    let seed = 0x5eed_0004;
    let mut rng = Rng(seed);
    let config = fuzz_config(false);
    for i in 0..2_000 * scale() {
        let input = if rng.below(2) == 0 {
            pipeline(&mut rng)
        } else {
            let p = pipeline(&mut rng);
            mutate(&mut rng, p)
        };
        let cut = rng.below(input.len() + 1);
        guarded("resp_session", seed, i, &input, || {
            resp_session(&config, &input, cut)
        });
    }
}

/// Length prefixes are checked against limits before anything is reserved,
/// and what is reserved is bounded by the bytes that arrived.
#[test]
fn declared_lengths_do_not_allocate() {
    let huge: &[&[u8]] = &[
        b"*2147483647\r\n",
        b"*1048576\r\n",
        b"*1048576\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"*1\r\n$999999999999\r\n",
        b"*1\r\n$9223372036854775807\r\n",
        b"*2\r\n$3\r\nGET\r\n$1048576\r\nabc",
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000\r\n",
        b"$2147483647\r\n",
        b"*-2147483648\r\n",
    ];
    let mut session = RespSession::new(fuzz_config(false));
    for input in huge {
        let (_, peak) = peak_alloc(|| resp_parse(input, 1 << 20));
        assert!(peak < 64 * 1024, "parsing {input:?} held {peak} bytes");
        session.reconnect();
        let (_, peak) = peak_alloc(|| session.feed(input));
        assert!(peak < 64 * 1024, "session on {input:?} held {peak} bytes");
    }
    // Unauthenticated, even a modest declared size is refused outright.
    let mut locked = RespSession::new(fuzz_config(true));
    let out = locked.feed(b"*1\r\n$100000\r\n");
    assert_eq!(out, b"-ERR Protocol error: unauthenticated bulk length\r\n");
    assert!(locked.closed());
    // A megabyte of tiny arguments costs memory in proportion to what
    // arrived, not to the declared count.
    let mut many = b"*1048576\r\n".to_vec();
    for _ in 0..10_000 {
        many.extend_from_slice(b"$1\r\na\r\n");
    }
    let (_, peak) = peak_alloc(|| resp_parse(&many, 1 << 20));
    assert!(
        peak < 16 * many.len(),
        "held {peak} bytes for {} input",
        many.len()
    );
}
