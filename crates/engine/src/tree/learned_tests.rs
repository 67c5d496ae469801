//! Learned node search (`node::learned`) through the tree: models are built
//! where they pay (fixed-length keys of smooth distributions), every layout
//! check holds, and point reads, floors and scans answer as a `BTreeMap`
//! does, through splits (ascending and random inserts), node merges
//! (deletes) and bulk loading, for dense, sparse and clustered 8-byte keys
//! and 16-byte hashed keys.

use std::collections::BTreeMap;
use std::ops::Bound;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::Tree;
use super::load::BulkLoader;
use super::write::{WriteMode, WriteOp};
use crate::config::Geometry;
use crate::types::Now;

const MODE: WriteMode<'static> = WriteMode {
    now: None,
    logged: true,
};

fn geometry(node: usize) -> Geometry {
    Geometry {
        learned: true,
        ..Geometry::new(node)
    }
}

fn put(tree: &Tree, key: &[u8], value: &[u8]) {
    let v = super::write::tests::put(tree, key, value);
    assert!(tree.wait_released(v));
}

fn delete(tree: &Tree, key: &[u8]) {
    let w = tree.write(key, MODE, |cur| match cur {
        Some(_) => (WriteOp::Delete, ()),
        None => (WriteOp::Noop, ()),
    });
    assert!(tree.wait_released(w.wait_for));
}

/// Every read of the tree against `model`: each key and its neighbours
/// (GET and FLOOR), three-item forward and reverse scans from each.
fn check(tree: &Tree, model: &BTreeMap<Vec<u8>, Vec<u8>>, probes: &[Vec<u8>], ctx: &str) {
    tree.check_layout().unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let now = Now::lazy();
    let _pin = tree.pin();
    let rv = tree.read_version();
    for k in model.keys().chain(probes) {
        let got = tree
            .get_at(k, rv)
            .filter(|it| it.is_live(&now))
            .map(|it| it.value.bytes().to_vec());
        assert_eq!(got.as_ref(), model.get(k), "{ctx}: get {k:?}");
        let floor = tree.floor_at(k, rv, &now).map(|it| it.key.to_vec());
        let want = model
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(&k[..])))
            .next_back()
            .map(|(k, _)| k.clone());
        assert_eq!(floor, want, "{ctx}: floor {k:?}");
        for reverse in [false, true] {
            let mut got = Vec::new();
            let (start, end) = if reverse {
                (Bound::Unbounded, Bound::Included(&k[..]))
            } else {
                (Bound::Included(&k[..]), Bound::Unbounded)
            };
            tree.scan(rv, &now, start, end, reverse, |it| {
                got.push(it.key.to_vec());
                got.len() < 3
            });
            let want: Vec<Vec<u8>> = if reverse {
                model
                    .range::<[u8], _>((Bound::Unbounded, Bound::Included(&k[..])))
                    .rev()
                    .take(3)
                    .map(|(k, _)| k.clone())
                    .collect()
            } else {
                model
                    .range::<[u8], _>((Bound::Included(&k[..]), Bound::Unbounded))
                    .take(3)
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            assert_eq!(got, want, "{ctx}: scan from {k:?} reverse {reverse}");
        }
    }
}

/// Key sets: dense, sparse and clustered 8-byte big-endian integers, and
/// 16-byte keys of hashed integers (hex, as the YCSB keys).
fn keys(kind: &str, n: u64, rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = match kind {
        "dense" => (0..n)
            .map(|i| (1_000_000 + i).to_be_bytes().to_vec())
            .collect(),
        "sparse" => (0..n)
            .map(|_| rng.random::<u64>().to_be_bytes().to_vec())
            .collect(),
        "clustered" => {
            let mut v = Vec::new();
            while (v.len() as u64) < n {
                let base: u64 = rng.random::<u64>() >> 8;
                let len = rng.random_range(1..200);
                v.extend((0..len).map(|i| (base + i).to_be_bytes().to_vec()));
            }
            v.truncate(n as usize);
            v
        }
        _ => (0..n)
            .map(|i| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into_bytes())
            .collect(),
    };
    out.sort();
    out.dedup();
    out
}

/// Probes that are not keys: each key's successor and a few random ones.
fn probes(keys: &[Vec<u8>], rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut p: Vec<Vec<u8>> = keys
        .iter()
        .step_by(7)
        .map(|k| {
            let mut k = k.clone();
            *k.last_mut().expect("non-empty") ^= 1;
            k
        })
        .collect();
    p.extend((0..50).map(|_| rng.random::<u64>().to_be_bytes().to_vec()));
    p.push(vec![0]);
    p.push(vec![0xff; 20]);
    p
}

#[test]
fn learned_search_answers_as_a_map_through_splits_merges_and_bulk_loads() {
    for node in [1024, 8192] {
        for kind in ["dense", "sparse", "clustered", "hashed"] {
            let ctx = format!("{node} B nodes, {kind} keys");
            let mut rng = StdRng::seed_from_u64(node as u64);
            let n = if node == 1024 { 6000 } else { 30_000 };
            let all = keys(kind, n, &mut rng);
            let probes = probes(&all, &mut rng);
            let mut model = BTreeMap::new();

            // Ascending inserts: every split at the right edge.
            let tree = Tree::new(geometry(node));
            for k in &all[..all.len() / 2] {
                put(&tree, k, k);
                model.insert(k.clone(), k.clone());
            }
            // Random inserts of the rest: splits everywhere.
            let mut rest = all[all.len() / 2..].to_vec();
            rest.shuffle(&mut rng);
            for k in &rest {
                put(&tree, k, b"v");
                model.insert(k.clone(), b"v".to_vec());
            }
            let (learned, interior) = tree.learned_nodes();
            if kind == "dense" && node > 1024 {
                assert!(
                    learned * 2 >= interior,
                    "{ctx}: {learned} of {interior} learned"
                );
            }
            check(&tree, &model, &probes, &format!("{ctx}, inserted"));

            // Deletes of most keys: node merges and root changes.
            let mut doomed = all.clone();
            doomed.shuffle(&mut rng);
            for k in doomed.iter().take(all.len() * 9 / 10) {
                delete(&tree, k);
                model.remove(k);
            }
            check(&tree, &model, &probes, &format!("{ctx}, deleted"));

            // A bulk load of everything.
            let g = geometry(node);
            let mut loader = BulkLoader::new(&g);
            for (i, k) in all.iter().enumerate() {
                loader.push(k, k, i as u64 + 1, 0, 0).unwrap();
            }
            let (loaded, _) = loader.finish();
            loaded.reset_clock(all.len() as u64);
            let full: BTreeMap<Vec<u8>, Vec<u8>> =
                all.iter().map(|k| (k.clone(), k.clone())).collect();
            let (learned, interior) = loaded.learned_nodes();
            if kind == "dense" && node > 1024 {
                assert!(
                    learned * 2 >= interior,
                    "{ctx}: {learned} of {interior} learned after a bulk load"
                );
            }
            check(&loaded, &full, &probes, &format!("{ctx}, bulk loaded"));
        }
    }
}

/// Without the option no node gets a model.
#[test]
fn without_the_option_no_node_is_learned() {
    let tree = Tree::new(Geometry::new(1024));
    for i in 0..5000u64 {
        put(&tree, &i.to_be_bytes(), b"v");
    }
    assert_eq!(tree.learned_nodes().0, 0);
}
