//! memcached binary protocol parser:
//! `cargo +nightly fuzz run memcache_binary_parse`. The stable smoke run is
//! in `crates/server/tests/fuzz_memcache.rs`.

#![no_main]

use combkv_server::memcache_fuzzing::{BinParsed, Limits, parse_binary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_key_len: 250,
        max_value_len: 1 << 20,
        max_request_bytes: 4 << 20,
        max_body: usize::MAX,
    };
    let mut at = 0;
    while at < data.len() {
        match parse_binary(&data[at..], &limits) {
            BinParsed::Request(_, consumed) => {
                assert!(consumed >= 24 && consumed <= data.len() - at);
                at += consumed;
            }
            BinParsed::Error {
                consumed, swallow, ..
            } => {
                assert!(consumed == 24 && consumed <= data.len() - at);
                at += consumed;
                at += swallow.min(data.len() - at);
            }
            BinParsed::Incomplete | BinParsed::Close(_) => break,
        }
    }
});
