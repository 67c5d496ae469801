//! RESP framing and a whole RESP session: `cargo +nightly fuzz run resp_parse`.
//! The stable smoke run is `crates/server/tests/fuzz_resp.rs`.
//!
//! The first byte chooses the split point of the input into two reads, so
//! the fuzzer also explores requests cut at every boundary; the rest is the
//! byte stream a client sends. Checks: no panic, the parser's invariants
//! (`resp_parse`), and replies that do not depend on how the bytes arrived
//! (`resp_session`).

#![no_main]

use combkv_server::resp_fuzzing::{resp_parse, resp_session};
use combkv_server::{ByteSize, ServerConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    resp_parse(input, 1 << 20);
    let config = ServerConfig {
        max_value_bytes: ByteSize(4096),
        max_request_bytes: ByteSize(1 << 20),
        max_reply_bytes: ByteSize(64 << 10),
        max_snapshots: 8,
        ..Default::default()
    };
    let cut = cut as usize * input.len() / 255;
    resp_session(&config, input, cut);
});
