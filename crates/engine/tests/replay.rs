//! Recovery's bulk replay (`durable/replay.rs`) reaches the state the write
//! path reached: proptest histories of puts (with TTLs and client flags),
//! overwrites, deletes, clears, checkpoints (full, then delta runs) and
//! restarts; after each restart every item (value, version, expiry, flags)
//! and the key count equal the live store's before it. Writes and delta
//! runs after a restart go on from the bulk-built tree, so a run that
//! missed a replayed change shows at the next restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::{Config, DurableConfig, Expiry, Flags, Range, Store, Write};
use proptest::prelude::*;

/// key -> (value, version, expiry, client flags), as readers see it.
type State = BTreeMap<Vec<u8>, (Vec<u8>, u64, Option<u64>, u32)>;

#[derive(Debug, Clone)]
enum Op {
    /// Key index, value length, expiry (0: none, 1: in the past, 2: in an
    /// hour), client flags.
    Put(u16, usize, u8, u32),
    Delete(u16),
    Clear,
    Checkpoint,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u16..80, prop_oneof![4 => 1usize..24, 1 => 200usize..400], 0u8..3, any::<u32>())
            .prop_map(|(k, n, e, f)| Op::Put(k, n, e, f)),
        5 => (0u16..80).prop_map(Op::Delete),
        1 => Just(Op::Clear),
        2 => Just(Op::Checkpoint),
        2 => Just(Op::Restart),
    ]
}

fn open(fs: &FaultyStorage) -> Store {
    let cfg = DurableConfig {
        wal_segment_bytes: 2000,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        merge_after_deltas: 3,
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data")
    };
    // Small nodes: many leaves, so records land in many of them.
    Store::open(Config::with_node_size(1024), cfg).unwrap().0
}

fn dump(store: &Store) -> (State, usize) {
    let items = store.range(&Range::all()).unwrap();
    let state = items
        .into_iter()
        .map(|i| {
            let v = (i.value.to_vec(), i.version.get(), i.expires_at_ms, i.flags);
            (i.key.to_vec(), v)
        })
        .collect();
    (state, store.len() as usize)
}

fn apply(store: &Store, op: &Op, round: usize) {
    let key = |k: u16| format!("key:{k:05}").into_bytes();
    match *op {
        Op::Put(k, n, e, flags) => {
            let expiry = match e {
                0 => Expiry::Never,
                1 => Expiry::AtMs(1),
                _ => Expiry::AtMs(combkv::now_ms() + 3_600_000),
            };
            let value = format!("{round}-").into_bytes().repeat(n);
            store
                .write_with(&key(k), |_| {
                    let w = Write::Put {
                        value: value.clone(),
                        expiry,
                        flags: Flags::Set(flags),
                    };
                    (w, ())
                })
                .unwrap();
        }
        Op::Delete(k) => {
            store.delete(&key(k)).unwrap();
        }
        Op::Clear => store.clear().unwrap(),
        Op::Checkpoint => {
            store.checkpoint().unwrap();
        }
        Op::Restart => {}
    }
}

/// Runs `ops`, restarting at each `Restart` and at the end; returns how
/// many restarts were checked.
fn run(ops: &[Op], seed: u64) -> Result<usize, TestCaseError> {
    let fs = FaultyStorage::new(seed);
    let mut store = open(&fs);
    let mut restarts = 0;
    // Expired items are counted until a sweep takes them, and where they
    // are depends on the path (a clear leaves them in the live tree, a
    // checkpoint leaves them out, the log brings them back): key counts
    // are compared only until the first already-expired put, and between
    // restarts without a clear.
    let mut expired = false;
    let mut cleared = false;
    let ends = ops.iter().chain(std::iter::once(&Op::Restart));
    for (round, op) in ends.enumerate() {
        apply(&store, op, round);
        cleared |= matches!(op, Op::Clear);
        expired |= matches!(op, Op::Put(_, _, 1, _));
        if let Op::Restart = op {
            let before = dump(&store);
            store.shutdown().unwrap();
            drop(store);
            store = open(&fs);
            let after = dump(&store);
            prop_assert_eq!(
                &after.0,
                &before.0,
                "after restart {} at op {}",
                restarts,
                round
            );
            if !cleared && !expired {
                prop_assert_eq!(after.1, before.1, "keys after restart {}", restarts);
            }
            cleared = false;
            restarts += 1;
        }
    }
    Ok(restarts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn recovery_reaches_the_write_paths_state(
        ops in prop::collection::vec(op(), 0..300),
        seed in any::<u64>(),
    ) {
        run(&ops, seed)?;
    }
}

/// The shapes the random histories may miss: a log that deletes every key
/// of a checkpoint (no leaf is left to show the deletes, so the next
/// checkpoint is a full one), and a delta run after a replay that only
/// deleted keys in leaves it did not otherwise touch.
#[test]
fn deletes_replayed_into_untouched_leaves_reach_the_next_delta_run() {
    let mut ops: Vec<Op> = (0..80).map(|k| Op::Put(k, 30, 0, 0)).collect();
    ops.push(Op::Checkpoint);
    ops.extend((0..80).step_by(7).map(Op::Delete));
    ops.extend([Op::Restart, Op::Checkpoint, Op::Restart]);
    ops.extend((0..80).map(Op::Delete));
    ops.extend([Op::Restart, Op::Checkpoint, Op::Restart]);
    ops.extend([
        Op::Put(3, 5, 2, 9),
        Op::Restart,
        Op::Checkpoint,
        Op::Restart,
    ]);
    assert_eq!(run(&ops, 1).unwrap(), 7);
}
