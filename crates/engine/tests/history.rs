//! History holds: reads at any version since a hold was taken see exactly
//! the writes at or below it, however many writes, splits, merges and
//! reclamation passes came after; the clock raised between writes.

use std::collections::BTreeMap;

use combkv::{Config, Range, Store, Version};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Step {
    Put(u16, u8),
    Delete(u16),
    Raise(u32),
    Collect,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u16..400, any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        3 => (0u16..400).prop_map(Step::Delete),
        1 => (1u32..1_000_000).prop_map(Step::Raise),
        1 => Just(Step::Collect),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

fn value(k: u16, v: u8) -> Vec<u8> {
    // Values of several sizes, so leaves fill, split and merge.
    vec![v; 8 + usize::from(k % 5) * 24]
}

fn scan_at(store: &Store, h: &combkv::History, v: Version) -> Model {
    let mut out = Model::new();
    store
        .scan_at_version(h, v, &Range::all(), |it| {
            out.insert(it.key.to_vec(), it.value.to_vec());
            true
        })
        .unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_version_since_the_hold_reads_as_the_model(
        before in proptest::collection::vec(step(), 0..300),
        after in proptest::collection::vec(step(), 1..1500),
    ) {
        let store = Store::new(Config::default()).unwrap();
        let mut model = Model::new();
        let apply = |s: &Step, model: &mut Model| match *s {
            Step::Put(k, v) => {
                store.put(&key(k), &value(k, v)).unwrap();
                model.insert(key(k), value(k, v));
            }
            Step::Delete(k) => {
                store.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Step::Raise(by) => {
                store.raise_clock(Version(store.read_version().0 + u64::from(by)));
            }
            Step::Collect => store.collect(),
        };
        for s in &before {
            apply(s, &mut model);
        }
        let hold = store.hold_history();
        prop_assert_eq!(hold.version(), store.read_version());
        // The model as of every version from the hold on.
        let mut states = vec![(store.read_version(), model.clone())];
        for s in &after {
            apply(s, &mut model);
            let v = store.read_version();
            if let Step::Raise(_) = s {
                // No write lies between: the state at the raised version is
                // the state before it.
                prop_assert!(v >= states.last().unwrap().0);
            }
            states.push((v, model.clone()));
        }
        store.collect();
        // Every version read back, and one between two writes' versions
        // (after a raise) reads as the earlier one.
        for (i, (v, want)) in states.iter().enumerate() {
            prop_assert_eq!(&scan_at(&store, &hold, *v), want, "scan at state {}", i);
            if let Some((next, _)) = states.get(i + 1)
                && next.0 > v.0 + 1
            {
                prop_assert_eq!(&scan_at(&store, &hold, Version(next.0 - 1)), want);
            }
            for k in (0..400).step_by(37) {
                let got = store.get_at_version(&hold, *v, &key(k)).unwrap().map(|it| it.value.to_vec());
                prop_assert_eq!(got.as_ref(), want.get(&key(k)));
            }
        }
        // A version beyond the newest reads as the newest.
        prop_assert_eq!(&scan_at(&store, &hold, Version(u64::MAX)), &model);
    }
}

#[test]
fn a_version_older_than_the_hold_is_refused() {
    let store = Store::new(Config::default()).unwrap();
    store.put(b"a", b"1").unwrap();
    let hold = store.hold_history();
    let older = Version(hold.version().0 - 1);
    assert!(matches!(
        store.get_at_version(&hold, older, b"a"),
        Err(combkv::Error::NoSuchSnapshot)
    ));
}

#[test]
fn without_a_hold_old_versions_are_reclaimed() {
    // What the hold keeps is real memory: the same writes without it leave
    // less behind after reclamation.
    let run = |hold: bool| {
        let store = Store::new(Config::default()).unwrap();
        for i in 0..2_000u16 {
            store.put(&key(i % 50), &value(i % 50, 1)).unwrap();
        }
        let h = hold.then(|| store.hold_history());
        for round in 0..20u8 {
            for i in 0..50 {
                store.put(&key(i), &value(i, round)).unwrap();
            }
        }
        store.collect();
        let bytes = store.memory().node_bytes;
        drop(h);
        bytes
    };
    assert!(run(true) > run(false));
}

#[test]
fn raising_the_clock_leaves_writes_above_it() {
    let store = Store::new(Config::default()).unwrap();
    store.put(b"a", b"1").unwrap();
    store.raise_clock(Version(1_000_000));
    assert_eq!(store.read_version(), Version(1_000_000));
    let v = store.put(b"a", b"2").unwrap();
    assert!(v > Version(1_000_000));
    // Lower raises change nothing.
    store.raise_clock(Version(5));
    assert!(store.put(b"b", b"3").unwrap() > v);
}

/// A store restored from another's items, its clock raised far past them
/// (a range split off a store whose reads raised its clock), is held from
/// its newest item's version: every version from there to its clock
/// reads the restored items, and keeps doing so through the writes and
/// reclamation after, which read as the model from their versions on.
#[test]
fn a_restored_store_is_held_from_before_its_clock() {
    let source = Store::new(Config::default()).unwrap();
    let mut model = Model::new();
    for k in 0..300u16 {
        source.put(&key(k), &value(k, 1)).unwrap();
        model.insert(key(k), value(k, 1));
    }
    let newest = source.read_version();
    let pin = source.pin();
    let mut items = Vec::new();
    source.visit_all_at(&pin, |it| {
        items.push(it.to_item());
        true
    });
    let clock = Version(newest.0 + 1_000_000);
    let store = Store::restore(Config::default(), clock, items).unwrap();
    let hold = store.hold_history_since(newest);
    assert_eq!(hold.version(), newest);
    // A version above the read version holds from the read version.
    assert_eq!(store.hold_history_since(Version(u64::MAX)).version(), clock);
    let between = Version(newest.0 + 500_000);
    for v in [newest, between, clock] {
        assert_eq!(scan_at(&store, &hold, v), model, "at {v:?}");
    }
    let before = model.clone();
    for k in 0..300u16 {
        match k % 3 {
            0 => {
                store.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            1 => {
                store.put(&key(k), &value(k, 2)).unwrap();
                model.insert(key(k), value(k, 2));
            }
            _ => {}
        }
        store.put(&key(k + 1000), &value(k, 3)).unwrap();
        model.insert(key(k + 1000), value(k, 3));
    }
    store.collect();
    for v in [newest, between, clock] {
        assert_eq!(scan_at(&store, &hold, v), before, "at {v:?}, after writes");
    }
    assert_eq!(scan_at(&store, &hold, store.read_version()), model);
    assert!(matches!(
        store.get_at_version(&hold, Version(newest.0 - 1), b"a"),
        Err(combkv::Error::NoSuchSnapshot)
    ));
}
