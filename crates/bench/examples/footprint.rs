//! Where the bytes of a store go: loads records `0..N` with the bench's
//! 16-byte keys (random key order, as `engine-figures` loads them) and
//! prints `Store::footprint`, part by part, per record, beside the
//! process's resident growth.
//!
//! ```sh
//! cargo run --release -p combkv-bench --example footprint -- [records] [value bytes]
//! ```
//! Defaults: 1 000 000 records, 16-byte values (the bench's value of the
//! record, repeated to the length asked for).

use combkv::{Config, Store};
use combkv_bench::keys;
use combkv_bench::runner::rss_bytes;

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("records"));
    let value_len: usize = args.next().map_or(16, |a| a.parse().expect("value bytes"));
    let rss_before = resident_bytes();
    let store = Store::new(Config::default()).expect("default config");
    let mut value = Vec::with_capacity(value_len);
    for i in 0..records {
        let v = keys::value(i);
        value.clear();
        value.extend(v.iter().cycle().take(value_len));
        store.put(&keys::key(i), &value).expect("put");
    }
    let rss_loaded = resident_bytes();
    print(
        "after the load",
        &store,
        records,
        value_len,
        rss_loaded - rss_before,
    );
    // What reclamation frees of the replaced buffers (the figure a store
    // settles at once writes stop).
    for _ in 0..20 {
        store.reclaim();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    print(
        "after reclamation",
        &store,
        records,
        value_len,
        resident_bytes() - rss_before,
    );
}

fn print(when: &str, store: &Store, records: u64, value_len: usize, rss: u64) {
    let f = store.footprint();
    let n = records as f64;
    let raw = (16 + value_len) as f64;
    println!(
        "\n{when}: {records} records of {raw} raw bytes; {} leaves, {} interior nodes, {} sorted items, {} log items",
        f.leaves, f.interior_nodes, f.sorted_items, f.log_items
    );
    println!("| part | B/record |\n|---|---:|");
    for (name, bytes) in f.parts() {
        println!("| {name} | {:.1} |", bytes as f64 / n);
    }
    let total = f.total() as f64 / n;
    println!("| **total** | **{total:.1}** ({:.2}x raw) |", total / raw);
    println!(
        "| resident growth (VmRSS) | {:.1} ({:.2}x raw) |",
        rss as f64 / n,
        rss as f64 / n / raw
    );
    let leaf_bytes = (f.key_bytes + f.value_bytes + f.item_header_bytes + f.log_bytes) as f64;
    let leaf_room = leaf_bytes + f.leaf_free_bytes as f64;
    println!(
        "item bytes / (item bytes + room past the published size) of current leaves: {:.1}%",
        100.0 * leaf_bytes / leaf_room
    );
}

/// VmRSS of this process, in bytes.
fn resident_bytes() -> u64 {
    rss_bytes().expect("VmRSS")
}
