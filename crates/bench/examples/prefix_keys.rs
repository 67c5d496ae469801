//! Point reads and writes on keys with a long shared prefix, as
//! `redis-benchmark -r` makes them (`key:000000123456`): the case the
//! shortcut prefix skip (`Header::prefix_skip`) is for.
//! `cargo run --release -p combkv-bench --example prefix_keys -- 1000000`
use std::time::Instant;

use combkv::{Config, Store};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let store = Store::new(Config::default()).unwrap();
    let key = |i: u64| {
        format!(
            "key:{:012}",
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 1_000_000
        )
        .into_bytes()
    };
    let t = Instant::now();
    for i in 0..n {
        store.put(&key(i), b"0123456789abcdef").unwrap();
    }
    let put = t.elapsed();
    let t = Instant::now();
    let mut hits = 0u64;
    for i in 0..2 * n {
        hits += store.get(&key(i.wrapping_mul(31))).unwrap().is_some() as u64;
    }
    let get = t.elapsed();
    println!(
        "{n} puts: {:.0} ns/op; {} gets: {:.0} ns/op ({hits} hits)",
        put.as_nanos() as f64 / n as f64,
        2 * n,
        get.as_nanos() as f64 / (2 * n) as f64
    );
}
