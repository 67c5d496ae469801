//! A short, deterministic fuzz run of the memcached parsers (text and
//! binary) and of the whole protocol over a real store: generated requests,
//! random bytes and mutations of valid requests, fed in random pieces. Asserts no panic,
//! that the parser allocates nothing (so a length prefix cannot make it
//! reserve memory), and that a connection never holds more unprocessed
//! input than one request within the limits. `cargo fuzz` users have the
//! same parser target in `fuzz/`.
//!
//! `COMBKV_FUZZ_ITERS=<n>` scales the run (default 400000 parser inputs;
//! an eighth of that through the whole protocol).

use std::sync::Arc;

use combkv::{Config, Store};
use combkv_server::memcache_fuzzing::{
    BinParsed, Limits, MemcacheSession, Parsed, parse_binary, parse_memcache,
};
use combkv_server::{ByteSize, ServerConfig};

#[allow(dead_code, reason = "each fuzz test binary uses part of it")]
mod support;
use support::{Rng, allocated};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

const COMMANDS: &[&str] = &[
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
    "verbosity",
    "stats",
    "mn",
    "me",
    "mg",
    "ms",
    "md",
    "ma",
    "quit",
    "bogus",
    "",
];
const WORDS: &[&str] = &[
    "k",
    "key",
    "0",
    "1",
    "-1",
    "5",
    "100",
    "2592001",
    "18446744073709551615",
    "4294967296",
    "noreply",
    "v",
    "q",
    "k",
    "c",
    "f",
    "s",
    "t",
    "h",
    "l",
    "b",
    "O123",
    "T10",
    "T-1",
    "N5",
    "C1",
    "MS",
    "ME",
    "MA",
    "MP",
    "MR",
    "MD",
    "MI",
    "Mx",
    "D3",
    "J7",
    "F9",
    "Zm9v",
    "x",
    "",
    "reset",
    "99999999999999999999",
];

/// A request that is mostly well formed.
fn generated(rng: &mut Rng) -> Vec<u8> {
    let mut line = rng.pick(COMMANDS).to_string();
    for _ in 0..rng.below(7) {
        line.push(' ');
        let word: &&str = rng.pick(WORDS);
        line.push_str(word);
    }
    let mut out = line.into_bytes();
    out.extend_from_slice(if rng.below(10) == 0 { b"\n" } else { b"\r\n" });
    // Sometimes a data block of a plausible or wrong size.
    if rng.below(2) == 0 {
        let n = *rng.pick(&[0usize, 1, 3, 5, 10, 100]);
        out.extend((0..n).map(|i| b"abc\r\n 9"[i % 7]));
        out.extend_from_slice(if rng.below(8) == 0 { b"xx" } else { b"\r\n" });
    }
    out
}

fn mutated(rng: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, *rng.pick(b" \r\n0123456789-"));
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            3 => v.truncate(rng.below(v.len() + 1)),
            _ => {
                let i = rng.below(v.len() + 1);
                let digits = rng.next().to_string();
                v.splice(i..i, digits.bytes());
            }
        }
    }
    v
}

/// The binary opcodes served, and a few that are not.
const OPCODES: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x20,
    0x21, 0x22, 0x23, 0x24, 0x1f, 0x50, 0xff,
];

/// A binary packet that is mostly well formed: the extras length its
/// opcode takes (or another), a key, maybe a value.
fn generated_binary(rng: &mut Rng) -> Vec<u8> {
    let opcode = *rng.pick(OPCODES);
    let extlen = *rng.pick(&[0usize, 0, 4, 8, 20, 3]);
    let keys: [&[u8]; 5] = [b"", b"k", b"key", b"PLAIN", b"reset"];
    let values: [&[u8]; 4] = [b"", b"5", b"\0default\0pw", b"abc"];
    let key = *rng.pick(&keys);
    let value = *rng.pick(&values);
    let body = extlen + key.len() + value.len();
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extlen as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&(rng.next() as u32).to_be_bytes());
    p.extend_from_slice(&(rng.below(3) as u64).to_be_bytes());
    p.extend((0..extlen).map(|_| *rng.pick(&[0u8, 1, 0xff])));
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn binary_input(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..=rng.below(4) {
        v.extend(generated_binary(rng));
    }
    match rng.below(3) {
        0 => v,
        // Mutations keep the first byte, so the connection stays binary.
        _ => {
            let mut m = mutated(rng, v);
            if let Some(b) = m.first_mut() {
                *b = 0x80;
            }
            m
        }
    }
}

fn input(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0 => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
        1..=5 => {
            let mut v = Vec::new();
            for _ in 0..=rng.below(4) {
                v.extend(generated(rng));
            }
            v
        }
        _ => {
            let g = generated(rng);
            mutated(rng, g)
        }
    }
}

fn iters() -> usize {
    std::env::var("COMBKV_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000)
}

/// Parses `data` request by request, as a connection would.
fn parse_all(data: &[u8], limits: &Limits) {
    let mut at = 0;
    while at < data.len() {
        let before = allocated();
        let parsed = parse_memcache(&data[at..], limits, 0);
        assert_eq!(
            allocated(),
            before,
            "the parser allocated on {:?}",
            String::from_utf8_lossy(data)
        );
        match parsed {
            Parsed::Incomplete { scanned, wanted } => {
                assert!(scanned <= data.len() - at);
                // The size a storage command declared is more than arrived
                // (else it was complete).
                assert!(wanted == 0 || wanted > data.len() - at);
                return;
            }
            Parsed::Close { .. } => return,
            Parsed::Request { consumed, .. } => {
                assert!(consumed > 0 && consumed <= data.len() - at);
                at += consumed;
            }
            Parsed::Error {
                consumed, swallow, ..
            } => {
                assert!(consumed > 0 && consumed <= data.len() - at);
                // A skipped block is a declared length (an i32) plus \r\n.
                assert!(swallow <= i32::MAX as usize + 2);
                at += consumed + swallow.min(data.len() - at - consumed);
            }
        }
    }
}

#[test]
fn parser_allocates_nothing_and_never_panics() {
    let mut rng = Rng(0x5eed_0001);
    let limits = [
        Limits {
            max_key_len: 250,
            max_value_len: 64,
            max_request_bytes: 4096,
            max_body: 100,
        },
        Limits {
            max_key_len: 17,
            max_value_len: 1 << 20,
            max_request_bytes: 128 << 20,
            max_body: usize::MAX,
        },
    ];
    for i in 0..iters() {
        let data = input(&mut rng);
        parse_all(&data, &limits[i % 2]);
    }
    // A declared length far past every limit is refused, not awaited.
    let huge = b"set k 0 0 2147483647\r\n";
    assert!(matches!(
        parse_memcache(huge, &limits[0], 0),
        Parsed::Error {
            swallow: 2_147_483_649,
            ..
        }
    ));
}

/// Parses binary `data` packet by packet, as a connection would.
fn parse_all_binary(data: &[u8], limits: &Limits) {
    let mut at = 0;
    while at < data.len() {
        let before = allocated();
        let parsed = parse_binary(&data[at..], limits);
        assert_eq!(allocated(), before, "the parser allocated on {data:?}");
        match parsed {
            BinParsed::Incomplete | BinParsed::Close(_) => return,
            BinParsed::Request(_, consumed) => {
                assert!(consumed >= 24 && consumed <= data.len() - at);
                assert!(consumed <= limits.max_request_bytes);
                at += consumed;
            }
            BinParsed::Error {
                consumed, swallow, ..
            } => {
                assert_eq!(consumed, 24);
                assert!(consumed <= data.len() - at);
                at += consumed + swallow.min(data.len() - at - consumed);
            }
        }
    }
}

#[test]
fn binary_parser_allocates_nothing_and_never_panics() {
    let mut rng = Rng(0x5eed_0003);
    let limits = Limits {
        max_key_len: 250,
        max_value_len: 64,
        max_request_bytes: 4096,
        max_body: 100,
    };
    for _ in 0..iters() {
        let data = match rng.below(4) {
            0 => (0..rng.below(96)).map(|_| rng.next() as u8).collect(),
            _ => binary_input(&mut rng),
        };
        parse_all_binary(&data, &limits);
    }
    // A body length far past every limit is refused from the header.
    let mut huge = vec![0x80, 0x01, 0, 1, 8, 0, 0, 0];
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    huge.extend_from_slice(&[0; 12]);
    assert!(matches!(
        parse_binary(&huge, &limits),
        BinParsed::Error { swallow, .. } if swallow == u32::MAX as usize
    ));
}

#[test]
fn protocol_over_a_real_store_never_panics() {
    let mut rng = Rng(0x5eed_0002);
    let store = Arc::new(
        Store::new(Config {
            max_value_len: 4096,
            ..Config::with_node_size(1024)
        })
        .unwrap(),
    );
    let config = ServerConfig {
        max_request_bytes: ByteSize(64 << 10),
        max_value_bytes: ByteSize(4096),
        ..Default::default()
    };
    let max_pending = 64 << 10;
    let mut session = MemcacheSession::new(store.clone(), config.clone());
    for _ in 0..iters() / 8 {
        // A quarter of the inputs are binary, each on a new connection
        // (its first byte decides which protocol it speaks).
        let binary = rng.below(4) == 0;
        if session.closed || binary {
            session = MemcacheSession::new(store.clone(), config.clone());
        }
        let data = if binary {
            binary_input(&mut rng)
        } else {
            input(&mut rng)
        };
        // Delivered in up to three pieces.
        let mut at = 0;
        while at < data.len() {
            let n = 1 + rng.below(data.len() - at);
            session.feed(&data[at..at + n]);
            at += n;
            assert!(
                session.pending_input() <= max_pending,
                "{} bytes held",
                session.pending_input()
            );
        }
        session.output.clear();
    }
    // The store is still consistent and usable.
    store.put(b"after", b"fuzz").unwrap();
    assert_eq!(store.get(b"after").unwrap().unwrap(), &b"fuzz"[..]);
}
