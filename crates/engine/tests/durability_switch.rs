//! Switching the durability mode while writers go on (`Store::set_durability`,
//! CONFIG SET durability): a switch to `Always` fsyncs everything written
//! before it, so a crash right after loses nothing acknowledged in either
//! mode; readers never see the store go back while the modes change under
//! them; the mode INFO reports is the one in force.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::{Config, Durability, DurableConfig, Range, Store};

fn open(fs: &FaultyStorage, mode: Durability) -> Store {
    let cfg = DurableConfig {
        wal_segment_bytes: 4096,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data").with_mode(mode)
    };
    Store::open(Config::with_node_size(1024), cfg).unwrap().0
}

fn keys(store: &Store) -> Vec<Vec<u8>> {
    store
        .range(&Range::all())
        .unwrap()
        .into_iter()
        .map(|i| i.key.to_vec())
        .collect()
}

#[test]
fn a_switch_to_always_fsyncs_what_everysec_acknowledged() {
    let fs = FaultyStorage::new(3);
    let store = open(&fs, Durability::EverySec);
    let syncs = fs.syncs();
    for i in 0..200 {
        store.put(format!("k{i:03}").as_bytes(), b"v").unwrap();
    }
    store.set_durability(Durability::Always).unwrap();
    assert!(fs.syncs() > syncs, "the switch fsynced nothing");
    assert_eq!(store.persistence().mode, Durability::Always);
    // Acknowledged after its own fsync from now on.
    store.put(b"after", b"v").unwrap();
    fs.crash();
    drop(store);
    fs.restart();
    let store = open(&fs, Durability::Always);
    let got = keys(&store);
    assert_eq!(got.len(), 201, "lost in the crash: {}", 201 - got.len());
    // A switch to the mode in force changes nothing.
    store.set_durability(Durability::Always).unwrap();
}

#[test]
fn modes_switch_under_writers_and_readers_and_nothing_acknowledged_is_lost() {
    let fs = FaultyStorage::new(5);
    let store = Arc::new(open(&fs, Durability::Always));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|t| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let k = format!("t{t}-{i:06}").into_bytes();
                    store.put(&k, b"v").unwrap();
                    if t == 0 {
                        store.put(b"counter", i.to_string().as_bytes()).unwrap();
                    }
                    acked.push(k);
                    i += 1;
                }
                acked
            })
        })
        .collect();
    // The counter never goes back: a switch never hides what was visible.
    let reader = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut last = -1i64;
            while !stop.load(Ordering::Acquire) {
                if let Some(v) = store.get(b"counter").unwrap() {
                    let n: i64 = std::str::from_utf8(&v).unwrap().parse().unwrap();
                    assert!(n >= last, "the counter went back from {last} to {n}");
                    last = n;
                }
            }
        })
    };
    let modes = [Durability::EverySec, Durability::None, Durability::Always];
    for round in 0..30 {
        store.set_durability(modes[round % 3]).unwrap();
        std::thread::sleep(Duration::from_millis(3));
    }
    // The last switch was to Always: everything before it is fsynced, and
    // every write after it waits for its own fsync.
    assert_eq!(store.persistence().mode, Durability::Always);
    std::thread::sleep(Duration::from_millis(10));
    stop.store(true, Ordering::Release);
    let acked: Vec<Vec<u8>> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    reader.join().unwrap();
    assert!(acked.len() > 30, "only {} writes", acked.len());
    fs.crash();
    drop(store);
    fs.restart();
    let store = open(&fs, Durability::Always);
    let got: std::collections::BTreeSet<Vec<u8>> = keys(&store).into_iter().collect();
    for k in &acked {
        assert!(
            got.contains(k),
            "acknowledged {:?} lost",
            String::from_utf8_lossy(k)
        );
    }
}
