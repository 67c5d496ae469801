//! memcached request parser: `cargo +nightly fuzz run memcache_parse`.
//! The stable smoke run is `crates/server/tests/fuzz_memcache.rs`.

#![no_main]

use combkv_server::memcache_fuzzing::{Limits, Parsed, parse_memcache};
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
        match parse_memcache(&data[at..], &limits, 0) {
            Parsed::Request { consumed, .. } => {
                assert!(consumed > 0 && consumed <= data.len() - at);
                at += consumed;
            }
            Parsed::Error {
                consumed, swallow, ..
            } => {
                assert!(consumed > 0 && consumed <= data.len() - at);
                at += consumed;
                at += swallow.min(data.len() - at);
            }
            Parsed::Incomplete { .. } | Parsed::Close { .. } => break,
        }
    }
});
