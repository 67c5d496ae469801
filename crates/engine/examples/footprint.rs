//! Where the bytes of a store go: loads records with 16-byte keys in
//! random order (the key of record `i` is the hex of a 64-bit hash of `i`,
//! as the bench's keys are) and prints `Store::footprint`, part by part,
//! per record, beside the process's resident growth.
//!
//! ```sh
//! cargo run --release -p combkv --example footprint -- [records] [value bytes]
//! ```
//! Defaults: 1 000 000 records, 16-byte values.

use combkv::{Config, Store};

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("records"));
    let value_len: usize = args.next().map_or(16, |a| a.parse().expect("value bytes"));
    let rss_before = resident_bytes();
    let store = Store::new(Config::default()).expect("default config");
    let mut value = vec![0u8; value_len];
    for i in 0..records {
        let h = fnv1a64(i);
        for (j, b) in value.iter_mut().enumerate() {
            *b = (h >> ((j % 8) * 8)) as u8;
        }
        store.put(&hex16(h), &value).expect("put");
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

fn fnv1a64(i: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in i.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn hex16(h: u64) -> [u8; 16] {
    let digits = b"0123456789abcdef";
    let mut k = [0u8; 16];
    for (j, b) in k.iter_mut().enumerate() {
        *b = digits[((h >> (60 - 4 * j)) & 0xf) as usize];
    }
    k
}

/// VmRSS of this process, in bytes (0 where /proc is not there).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
