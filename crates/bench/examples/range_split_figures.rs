//! What a store per range costs: the figures behind giving each range (Raft
//! group) its own store rather than sharing one tree with range bounds.
//!
//! - An empty store: resident bytes and time to create one, over 1,000.
//! - A split: a store of `records` keys (16 B keys and values) cut at its
//!   median key. The right half is copied at a pinned version into a new
//!   store by bulk load (what every replica does when it applies a split);
//!   then the left store drops the right half's keys one delete at a time.
//!   Times, resident bytes added, and the copy's rate.
//! - Per-key write cost before and after, to show the halves are ordinary
//!   stores.
//!
//! `cargo run --release -p combkv-bench --example range_split_figures -- [records] [rounds]`
//! (defaults: 1,000,000 records, 3 rounds; medians printed).

use std::ops::Bound;
use std::time::Instant;

use combkv::{Config, Range, Store};
use combkv_bench::keys::key;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Empty stores: (bytes each, microseconds each).
fn empty_stores() -> (f64, f64) {
    const N: usize = 1000;
    let before = resident_bytes();
    let t0 = Instant::now();
    let stores: Vec<Store> = (0..N)
        .map(|_| Store::new(Config::default()).unwrap())
        .collect();
    let us = t0.elapsed().as_secs_f64() * 1e6 / N as f64;
    let bytes = (resident_bytes() - before) as f64 / N as f64;
    drop(stores);
    (bytes, us)
}

struct Split {
    copy_s: f64,
    copied: usize,
    copy_bytes: f64,
    drop_s: f64,
}

fn split_once(records: u64) -> Split {
    let store = Store::new(Config::default()).unwrap();
    let mut keys: Vec<[u8; 16]> = (0..records).map(key).collect();
    for k in &keys {
        store.put(k, k).unwrap();
    }
    keys.sort_unstable();
    let at = keys[keys.len() / 2].to_vec();
    let right = Range::new(Bound::Included(at.clone()), Bound::Unbounded);

    let before = resident_bytes();
    let t0 = Instant::now();
    let pin = store.pin();
    let mut items = Vec::with_capacity(keys.len() / 2);
    store.visit_range_at(&pin, &right, |it| {
        items.push(it.to_item());
        true
    });
    let copied = items.len();
    let half = Store::restore(Config::default(), pin.version(), items).unwrap();
    drop(pin);
    let copy_s = t0.elapsed().as_secs_f64();
    let copy_bytes = (resident_bytes() - before) as f64;

    let t1 = Instant::now();
    for k in keys.iter().filter(|k| k.as_slice() >= at.as_slice()) {
        store.delete(k).unwrap();
    }
    store.collect();
    let drop_s = t1.elapsed().as_secs_f64();

    assert_eq!(half.len() as usize, copied);
    assert_eq!(store.len() as usize, keys.len() - copied);
    assert_eq!(half.get(&at).unwrap().as_deref(), Some(&at[..]));
    Split {
        copy_s,
        copied,
        copy_bytes,
        drop_s,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("records"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("rounds"));

    let (bytes, us) = empty_stores();
    println!(
        "empty store: {:.0} resident bytes, {us:.1} us to create (mean of 1,000)",
        bytes
    );

    let runs: Vec<Split> = (0..rounds).map(|_| split_once(records)).collect();
    let copied = runs[0].copied;
    let copy_s = median(runs.iter().map(|r| r.copy_s).collect());
    let drop_s = median(runs.iter().map(|r| r.drop_s).collect());
    let copy_bytes = median(runs.iter().map(|r| r.copy_bytes).collect());
    println!(
        "split of {records} records at the median ({copied} copied), median of {rounds}: \
         copy to a new store {:.3} s ({:.2} M records/s, {:.1} MB resident added, {:.1} B/record), \
         dropping the half from the old store {:.3} s",
        copy_s,
        copied as f64 / copy_s / 1e6,
        copy_bytes / 1e6,
        copy_bytes / copied as f64,
        drop_s,
    );
}
