//! Learned node search through the store (`Config::learned_search`):
//! interior nodes of fixed-length keys get models, and GETs, 3-item RANGEs
//! (forward and reverse) and FLOORs, through the read engine's batches and
//! the plain calls alike, answer as a `BTreeMap` does, after random
//! inserts, after deletes, and after recovery bulk loads the tree.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Config, DurableConfig, Range, Store};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn config() -> Config {
    Config {
        learned_search: true,
        ..Config::default()
    }
}

fn check(store: &Store, model: &Model, rng: &mut StdRng, ctx: &str) {
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let probes: Vec<Vec<u8>> = (0..3000)
        .map(|i| match i % 3 {
            0 => keys[rng.random_range(0..keys.len())].clone(),
            1 => (rng.random_range(0..400_000u64) * 3).to_be_bytes().to_vec(),
            _ => rng.random::<u64>().to_be_bytes().to_vec(),
        })
        .collect();
    let ranges: Vec<Range> = probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let r = Range::new(Bound::Included(p.clone()), Bound::Unbounded).with_limit(3);
            if i % 2 == 0 {
                r
            } else {
                Range::new(Bound::Unbounded, Bound::Included(p.clone()))
                    .with_limit(3)
                    .reversed()
            }
        })
        .collect();
    for chunk in 0..probes.len() / 100 {
        let at = chunk * 100;
        let mut reqs: Vec<ReadRequest<'_>> = Vec::new();
        for i in at..at + 100 {
            reqs.push(ReadRequest::Get(&probes[i]));
            reqs.push(ReadRequest::Range(&ranges[i]));
        }
        let mut out = BatchResults::new();
        store.read_batch(&reqs, &mut out).unwrap();
        for i in at..at + 100 {
            let p = &probes[i];
            let want = model.get(p).map(|v| &v[..]);
            assert_eq!(out.value(2 * (i - at)), want, "{ctx}: batch get {p:?}");
            assert_eq!(store.get(p).unwrap().as_deref(), want, "{ctx}: get {p:?}");
            let got: Vec<Vec<u8>> = out
                .items(2 * (i - at) + 1)
                .map(|it| it.key.to_vec())
                .collect();
            let want: Vec<Vec<u8>> = if i % 2 == 0 {
                model
                    .range::<[u8], _>((Bound::Included(&p[..]), Bound::Unbounded))
                    .take(3)
                    .map(|(k, _)| k.clone())
                    .collect()
            } else {
                model
                    .range::<[u8], _>((Bound::Unbounded, Bound::Included(&p[..])))
                    .rev()
                    .take(3)
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            assert_eq!(got, want, "{ctx}: batch range {i} from {p:?}");
            let plain: Vec<Vec<u8>> = store
                .range(&ranges[i])
                .unwrap()
                .into_iter()
                .map(|it| it.key.to_vec())
                .collect();
            assert_eq!(plain, want, "{ctx}: range {i} from {p:?}");
        }
    }
}

#[test]
fn learned_nodes_answer_as_a_map_before_and_after_recovery() {
    let fs = FaultyStorage::new(1);
    let durable = DurableConfig {
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data").with_mode(combkv::Durability::None)
    };
    let (store, _) = Store::open(config(), durable.clone()).unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    // Dense 8-byte keys (every third integer), in random order.
    let mut all: Vec<u64> = (0..120_000u64).map(|i| i * 3).collect();
    all.shuffle(&mut rng);
    let mut model = Model::new();
    for (n, i) in all.iter().enumerate() {
        let k = i.to_be_bytes().to_vec();
        let v = format!("v{n}").into_bytes();
        store.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    // Random inserts leave leaves unevenly full, so few separators lie on
    // a line tight enough to pay; whatever nodes got models, reads agree.
    check(&store, &model, &mut rng, "inserted");

    for i in all.iter().take(60_000) {
        let k = i.to_be_bytes().to_vec();
        store.delete(&k).unwrap();
        model.remove(&k);
    }
    check(&store, &model, &mut rng, "deleted");
    store.checkpoint().unwrap();
    store.shutdown().unwrap();
    drop(store);

    // Recovery bulk loads the tree: its leaves are filled evenly.
    let (store, _) = Store::open(config(), durable).unwrap();
    let (learned, interior) = store.learned_nodes();
    assert!(
        learned * 2 >= interior,
        "{learned} of {interior} interior nodes learned after a bulk load"
    );
    check(&store, &model, &mut rng, "recovered");
    let (inner, leaf) = store.lookup_lines(&42u64.to_be_bytes());
    assert!(inner > 0 && leaf > 0);
}

#[test]
fn without_the_option_no_node_is_learned_and_lines_are_measured() {
    let store = Store::new(Config::default()).unwrap();
    for i in 0..100_000u64 {
        store.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let (learned, interior) = store.learned_nodes();
    assert_eq!(learned, 0);
    assert!(interior > 1);
    let (inner, leaf) = store.lookup_lines(&7u64.to_be_bytes());
    // A header and a top line, a group line and a segment in each.
    assert!(
        inner >= 3 * (interior > 1) as usize && leaf >= 3,
        "{inner} {leaf}"
    );
}
