//! Concurrent stress test of the store with a linearizability check.
//!
//! Writer threads insert, put, update, cas and delete, and write groups of
//! puts and deletes atomically (`write_atomically`, as MSET and DEL use it,
//! and as transactions, `Op::Txn`, as EXEC uses it),
//! over a small key space
//! (2,000 keys, mostly of 4..=10 bytes, a hot run of 16 adjacent keys, and
//! bursts of contiguous inserts and deletes) so that nodes split and merge
//! constantly (every third round confines all threads to 96 adjacent keys);
//! reader threads run get,
//! get_item, range (random bounds, limits, reverse, floor_start), floor, ceil,
//! and hold snapshots that they read through with get_at / range_at. Every op
//! is recorded with invocation and response timestamps from one global
//! counter, and every write stores a unique value. Each round's history is
//! checked by `linearizability::check` (see that module for what exactly is
//! verified), then, with all threads stopped and all snapshots released, the
//! store's full contents are compared with the model and reclamation must
//! be complete (`live_buffers == reachable_buffers` after `collect()`).
//!
//! Environment:
//! - `COMBKV_STRESS_SECS=<seconds>`: soak mode; each configuration runs for
//!   about that long (in checked rounds of a few seconds) instead of the
//!   short default. For example
//!   `COMBKV_STRESS_SECS=600 cargo test --release -p combkv --test stress -- --nocapture`.
//! - `COMBKV_STRESS_SEED=<u64>`: fixes the seed of the key set and the op
//!   mix (thread timing still varies); the seed is printed on every run.

mod linearizability;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{AtomicWrite, Config, Item, Range, Store};
use linearizability::{Action, Entry, GroupWrite, Key, Op, Query, Value, WriteKind};

/// Default (non-soak) length of each configuration's run.
const DEFAULT_SMALL_NODES: Duration = Duration::from_millis(7_000);
const DEFAULT_LARGE_NODES: Duration = Duration::from_millis(3_000);
const DEFAULT_HOT_CACHE: Duration = Duration::from_millis(4_000);
/// Length of one checked round.
const ROUND: Duration = Duration::from_millis(2_000);
/// Caps on the ops one thread records per round (bounds memory and check time).
const MAX_WRITER_OPS: usize = 100_000;
const MAX_READER_OPS: usize = 20_000;
const KEYS: usize = 2_000;
const HOT_KEYS: usize = 16;
const NARROW_KEYS: usize = 96;
const WRITERS: usize = 3;
const READERS: usize = 3;

/// The two configurations run one at a time: they share two cores.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn stress_1k_nodes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run(
        "1 KiB nodes",
        Config::with_node_size(1024),
        duration(DEFAULT_SMALL_NODES),
        Hot::Off,
    );
}

/// Readers read GETs in batches through hot-entry caches of their own,
/// on nodes small enough that the leaves under the cached keys split,
/// merge and are rewritten all the time.
#[test]
fn stress_hot_cache() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run(
        "1 KiB nodes, hot cache",
        Config::with_node_size(1024),
        duration(DEFAULT_HOT_CACHE),
        Hot::On,
    );
}

/// The same run with a bug planted in the cache's validation (it ignores
/// log appends, so an overwritten hot key is served stale): the check
/// must find the history not linearizable.
#[test]
fn planted_stale_hit_is_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let caught = run(
        "1 KiB nodes, hot cache with a planted stale hit",
        Config::with_node_size(1024),
        DEFAULT_HOT_CACHE,
        Hot::Planted,
    );
    assert!(caught, "the planted stale hit went unnoticed");
}

#[test]
fn stress_default_nodes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run(
        "8 KiB nodes",
        Config::default(),
        duration(DEFAULT_LARGE_NODES),
        Hot::Off,
    );
}

fn duration(default: Duration) -> Duration {
    match std::env::var("COMBKV_STRESS_SECS") {
        Ok(s) => Duration::from_secs(s.trim().parse().expect("COMBKV_STRESS_SECS: seconds")),
        Err(_) => default,
    }
}

fn seed() -> u64 {
    match std::env::var("COMBKV_STRESS_SEED") {
        Ok(s) => s.trim().parse().expect("COMBKV_STRESS_SEED: u64"),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            t.as_nanos() as u64
        }
    }
}

/// SplitMix64: small, fast, deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A byte for keys: mostly a small alphabet (shared prefixes, dense
/// neighbourhoods), sometimes the extremes of the byte range.
fn key_byte(rng: &mut Rng) -> u8 {
    match rng.below(10) {
        0 => 0x00,
        1 => 0xff,
        2 => rng.next() as u8,
        _ => b'a' + rng.below(6) as u8,
    }
}

/// `n` distinct keys, sorted: mostly 4..=10 bytes, one in ten longer (up
/// to `max_len`, at most 24 bytes) so that fewer fit in a small node.
fn make_keys(rng: &mut Rng, n: usize, max_len: usize) -> Vec<Key> {
    let mut set = std::collections::BTreeSet::new();
    let long = max_len.min(24);
    while set.len() < n {
        let len = if long > 10 && rng.chance(10) {
            rng.between(11, long)
        } else {
            rng.between(4, 10)
        };
        set.insert((0..len).map(|_| key_byte(rng)).collect::<Vec<u8>>());
    }
    set.into_iter().collect()
}

/// The global real-time clock: one fetch at invocation, one at response.
struct Clock(AtomicU64);

impl Clock {
    fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// Everything a worker thread needs.
struct Shared {
    store: Store,
    keys: Vec<Key>,
    /// The slice of `keys` this round works on (set between rounds).
    active: (AtomicUsize, AtomicUsize),
    clock: Clock,
    stop: AtomicBool,
    /// Readers read GETs in batches through a hot-entry cache each.
    hot: Hot,
    /// The caches' hits and stale entries found, over all readers.
    hot_hits: AtomicU64,
    hot_stale: AtomicU64,
}

/// How readers use a hot-entry cache.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hot {
    Off,
    On,
    /// On, with validation that misses in-place overwrites (a planted bug
    /// the check must catch).
    Planted,
}

impl Shared {
    fn active_keys(&self) -> &[Key] {
        let lo = self.active.0.load(Ordering::SeqCst);
        let hi = self.active.1.load(Ordering::SeqCst);
        &self.keys[lo..hi]
    }
}

/// A thread's recorded ops and any unexpected errors.
struct Recorder<'a> {
    shared: &'a Shared,
    thread: usize,
    ops: Vec<Op>,
    errors: Vec<String>,
}

impl Recorder<'_> {
    fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Runs `f` between two clock ticks and records its action, or the error.
    fn record<E: std::fmt::Debug>(
        &mut self,
        what: impl FnOnce() -> String,
        f: impl FnOnce(&Store) -> Result<Action, E>,
    ) -> Option<&Action> {
        let invoke = self.shared.clock.tick();
        let r = f(&self.shared.store);
        let respond = self.shared.clock.tick();
        match r {
            Ok(action) => {
                self.ops.push(Op {
                    thread: self.thread,
                    invoke,
                    respond,
                    action,
                });
                self.ops.last().map(|op| &op.action)
            }
            Err(e) => {
                self.errors
                    .push(format!("thread {}: {} failed: {e:?}", self.thread, what()));
                None
            }
        }
    }

    /// Reads `keys` in one read-engine batch into `out` (which may hold a
    /// hot cache) between two clock ticks and records one `GetItem` per
    /// key, all with the batch's window.
    fn record_batch(&mut self, keys: &[Key], out: &mut BatchResults) {
        let reqs: Vec<ReadRequest<'_>> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
        let invoke = self.shared.clock.tick();
        let r = self.shared.store.read_batch(&reqs, out);
        let respond = self.shared.clock.tick();
        if let Err(e) = r {
            let msg = format!("thread {}: read_batch({keys:?}) failed: {e:?}", self.thread);
            self.errors.push(msg);
            return;
        }
        for (i, key) in keys.iter().enumerate() {
            let item = out.items(i).next().map(|it| Entry {
                key: it.key.to_vec(),
                value: it.value.to_vec(),
                version: it.version.get(),
            });
            self.ops.push(Op {
                thread: self.thread,
                invoke,
                respond,
                action: Action::GetItem {
                    key: key.clone(),
                    result: item,
                },
            });
        }
    }
}

fn entry(item: Item, errors: &mut Vec<String>) -> Entry {
    if item.expires_at_ms.is_some() {
        errors.push(format!(
            "item {:?} has a TTL, but no TTL was ever set",
            item.key
        ));
    }
    Entry {
        key: item.key.to_vec(),
        value: item.value.to_vec(),
        version: item.version.get(),
    }
}

fn entries(items: Vec<Item>) -> Result<Vec<Entry>, String> {
    let mut errors = Vec::new();
    let out = items.into_iter().map(|i| entry(i, &mut errors)).collect();
    match errors.pop() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn opt_entry(item: Option<Item>) -> Result<Option<Entry>, String> {
    Ok(entries(item.into_iter().collect())?.pop())
}

fn to_range(q: &Query) -> Range {
    Range {
        start: q.start.clone(),
        end: q.end.clone(),
        limit: q.limit,
        reverse: q.reverse,
        floor_start: q.floor_start,
    }
}

/// A unique value: `<thread>.<seq>` and some padding; rarely a large one.
fn make_value(rng: &mut Rng, thread: usize, seq: u64) -> Value {
    let mut v = format!("{thread}.{seq}.").into_bytes();
    let pad = match rng.below(100) {
        0 => rng.between(100, 1_500),
        // Across the inline-value limit of small nodes.
        1..=3 => rng.below(600),
        4..=13 => rng.between(16, 64),
        _ => rng.below(12),
    };
    v.extend((0..pad).map(|i| b'a' + (i % 26) as u8));
    v
}

fn writer(shared: &Shared, thread: usize, seed: u64) -> (Vec<Op>, Vec<String>) {
    let mut rng = Rng(seed);
    let mut rec = Recorder {
        shared,
        thread,
        ops: Vec::new(),
        errors: Vec::new(),
    };
    let keys = shared.active_keys();
    let mut seq = 0u64;
    let mut grow = rng.chance(50);
    let mut phase_left = rng.between(200, 2_000);
    let mut cursor = rng.below(keys.len());
    let hot = hot_start(keys);
    while keep_going(shared, rec.ops.len(), MAX_WRITER_OPS) {
        phase_left = phase_left.saturating_sub(1);
        if phase_left == 0 {
            grow = !grow;
            phase_left = rng.between(200, 2_000);
        }
        let r = rng.below(1_000);
        if r < 10 {
            // A burst over a contiguous run of keys: mass deletes empty whole
            // leaves (merges), mass inserts fill them (splits).
            let len = rng.between(20, 300);
            let from = rng.below(keys.len());
            let delete = if r < 5 { true } else { !grow && r < 7 };
            for key in keys[from..].iter().take(len) {
                seq += 1;
                let value = (!delete).then(|| make_value(&mut rng, thread, seq));
                write_op(&mut rec, key, value, delete, WriteKind::Put);
            }
            continue;
        }
        if r < 40 {
            seq = group_op(&mut rec, &mut rng, keys, thread, seq, grow);
            continue;
        }
        cursor = if rng.chance(15) {
            // A hot run of adjacent keys: contention on one leaf.
            hot + rng.below(HOT_KEYS)
        } else if rng.chance(50) {
            rng.below(keys.len())
        } else {
            (cursor + rng.between(1, 8)).min(keys.len() - 1)
        };
        let key = &keys[cursor];
        seq += 1;
        let value = make_value(&mut rng, thread, seq);
        let pick = rng.below(100);
        let kind = if grow {
            match pick {
                0..30 => WriteKind::Put,
                30..65 => WriteKind::Insert,
                65..80 => WriteKind::Update,
                80..90 => WriteKind::Delete,
                _ => WriteKind::Cas { expected: 0 },
            }
        } else {
            match pick {
                0..10 => WriteKind::Put,
                10..20 => WriteKind::Insert,
                20..40 => WriteKind::Update,
                40..90 => WriteKind::Delete,
                _ => WriteKind::Cas { expected: 0 },
            }
        };
        match kind {
            WriteKind::Delete => write_op(&mut rec, key, None, true, kind),
            WriteKind::Cas { .. } => {
                let expected = if rng.chance(70) {
                    // Read-modify-write: cas against the version just read.
                    let got = rec.record(
                        || format!("get_item({key:?})"),
                        |s| {
                            let item = s.get_item(key).map_err(|e| format!("{e:?}"))?;
                            Ok::<_, String>(Action::GetItem {
                                key: key.clone(),
                                result: opt_entry(item)?,
                            })
                        },
                    );
                    match got {
                        Some(Action::GetItem { result, .. }) => {
                            result.as_ref().map_or(0, |e| e.version)
                        }
                        _ => continue,
                    }
                } else {
                    rng.below(3) as u64
                };
                write_op(
                    &mut rec,
                    key,
                    Some(value),
                    false,
                    WriteKind::Cas { expected },
                );
            }
            _ => write_op(&mut rec, key, Some(value), false, kind),
        }
    }
    (rec.ops, rec.errors)
}

/// Whether a worker goes on: until the round ends or some thread reaches
/// its op cap (which ends the round for all, so that the whole round runs
/// with every thread active).
fn keep_going(shared: &Shared, ops: usize, cap: usize) -> bool {
    if ops >= cap {
        shared.stop.store(true, Ordering::Relaxed);
    }
    !shared.stop.load(Ordering::Relaxed)
}

fn write_op(
    rec: &mut Recorder<'_>,
    key: &Key,
    value: Option<Value>,
    delete: bool,
    kind: WriteKind,
) {
    let kind = if delete { WriteKind::Delete } else { kind };
    rec.record(
        || format!("{kind:?}({key:?})"),
        |s| {
            let v = value.as_deref().unwrap_or_default();
            let result = match kind {
                WriteKind::Put => Some(s.put(key, v)?),
                WriteKind::Insert => s.insert(key, v)?,
                WriteKind::Update => s.update(key, v)?,
                WriteKind::Delete => s.delete(key)?,
                WriteKind::Cas { expected } => s.cas(key, expected, v, combkv::Expiry::Never)?,
            };
            Ok::<_, combkv::Error>(Action::Write {
                kind,
                key: key.clone(),
                value,
                result: result.map(|v| v.get()),
            })
        },
    );
}

/// Writes 2 to 6 distinct keys (some adjacent, some hot, some anywhere) as
/// one group: a put first, then puts and deletes. Returns the last `seq`
/// used for a value.
fn group_op(
    rec: &mut Recorder<'_>,
    rng: &mut Rng,
    keys: &[Key],
    thread: usize,
    mut seq: u64,
    grow: bool,
) -> u64 {
    let n = rng.between(2, 6);
    let mut picked: Vec<usize> = Vec::with_capacity(n);
    let mut at = rng.below(keys.len());
    while picked.len() < n {
        let i = match rng.below(3) {
            0 => hot_start(keys) + rng.below(HOT_KEYS),
            1 => rng.below(keys.len()),
            _ => (at + 1).min(keys.len() - 1),
        };
        at = i;
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    let delete_percent = if grow { 25 } else { 60 };
    // Half the groups go as a transaction (`Op::Txn`, EXEC's path): the
    // same check, that no read sees part of it, holds for both.
    let as_txn = rng.chance(50);
    let writes: Vec<GroupWrite> = picked
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            seq += 1;
            GroupWrite {
                key: keys[i].clone(),
                value: (j == 0 || !rng.chance(delete_percent))
                    .then(|| make_value(rng, thread, seq)),
                result: None,
            }
        })
        .collect();
    rec.record(
        || format!("group of {} writes (transaction: {as_txn})", writes.len()),
        |s| {
            if as_txn {
                return txn_group(s, &writes);
            }
            let args: Vec<AtomicWrite<'_>> = writes
                .iter()
                .map(|w| match &w.value {
                    Some(value) => AtomicWrite::Put {
                        key: &w.key,
                        value,
                        expiry: combkv::Expiry::Never,
                    },
                    None => AtomicWrite::Delete { key: &w.key },
                })
                .collect();
            let results = s.write_atomically(&args)?;
            assert_eq!(results.len(), writes.len(), "one result per write");
            let writes = writes
                .iter()
                .zip(results)
                .map(|(w, r)| GroupWrite {
                    result: r.map(|v| v.get()),
                    ..w.clone()
                })
                .collect();
            Ok::<_, combkv::Error>(Action::Group { writes })
        },
    );
    seq
}

/// A group's puts and deletes as one transaction (`Op::Txn`).
fn txn_group(s: &Store, writes: &[GroupWrite]) -> Result<Action, combkv::Error> {
    use combkv::op::{Cond, Op as StoreOp, Outcome};
    let ops: Vec<StoreOp<'_>> = writes
        .iter()
        .map(|w| match &w.value {
            Some(value) => StoreOp::Put {
                key: &w.key,
                value,
                expiry: combkv::Expiry::Never,
                flags: combkv::Flags::NONE,
                cond: Cond::Any,
                return_old: false,
            },
            None => StoreOp::Delete {
                key: &w.key,
                cond: Cond::Any,
                return_old: false,
            },
        })
        .collect();
    let out = s.apply(&StoreOp::Txn {
        watch: std::borrow::Cow::Borrowed(&[]),
        ops: std::borrow::Cow::Owned(ops),
    })?;
    let Outcome::Txn {
        results: Some(results),
    } = out
    else {
        panic!("a transaction without watches applies: {out:?}");
    };
    assert_eq!(results.len(), writes.len(), "one result per op");
    let mut done = Vec::with_capacity(writes.len());
    for (w, r) in writes.iter().zip(results) {
        done.push(GroupWrite {
            result: r?.version().map(|v| v.get()),
            ..w.clone()
        });
    }
    Ok(Action::Group { writes: done })
}

/// The first of the `HOT_KEYS` adjacent keys that get a share of all ops.
fn hot_start(keys: &[Key]) -> usize {
    keys.len() / 3
}

/// A random key bound: a key of the key space (mostly) or random bytes.
fn random_key(rng: &mut Rng, keys: &[Key]) -> Key {
    if rng.chance(10) {
        keys[hot_start(keys) + rng.below(HOT_KEYS)].clone()
    } else if rng.chance(75) {
        keys[rng.below(keys.len())].clone()
    } else {
        (0..rng.between(1, 11)).map(|_| key_byte(rng)).collect()
    }
}

fn random_query(rng: &mut Rng, keys: &[Key]) -> Query {
    let mut a = random_key(rng, keys);
    let mut b = random_key(rng, keys);
    if rng.chance(70) {
        // Keep most ranges short so they do not always cover the whole tree.
        let i = rng.below(keys.len());
        a = keys[i].clone();
        b = keys[(i + rng.between(0, 200)).min(keys.len() - 1)].clone();
    }
    if a > b {
        std::mem::swap(&mut a, &mut b);
    }
    let floor_start = rng.chance(20);
    let start = if floor_start {
        Bound::Included(a)
    } else {
        match rng.below(10) {
            0 => Bound::Unbounded,
            1..=5 => Bound::Included(a),
            _ => Bound::Excluded(a),
        }
    };
    let end = match rng.below(10) {
        0 => Bound::Unbounded,
        // floor_start only with a non-empty original range (see API.md:
        // "start > end => empty").
        _ if floor_start && matches!(&start, Bound::Included(s) if *s >= b) => Bound::Unbounded,
        1..=5 => Bound::Included(b),
        _ => Bound::Excluded(b),
    };
    let limit = match rng.below(100) {
        0 => Some(0),
        1..=30 => None,
        31..=70 => Some(rng.between(1, 8)),
        _ => Some(rng.between(9, 100)),
    };
    Query {
        start,
        end,
        limit,
        reverse: rng.chance(50),
        floor_start,
    }
}

fn reader(shared: &Shared, thread: usize, seed: u64) -> (Vec<Op>, Vec<String>) {
    let mut rng = Rng(seed);
    let mut rec = Recorder {
        shared,
        thread,
        ops: Vec::new(),
        errors: Vec::new(),
    };
    let keys = shared.active_keys();
    let mut held: Vec<Held> = Vec::new();
    // One reader per round also holds a snapshot for the whole round, so
    // that it reads through long chains of old node versions.
    let long = if thread % (WRITERS + READERS) == WRITERS {
        take_snapshot(&mut rec)
    } else {
        None
    };
    let mut batch = match shared.hot {
        Hot::Off => BatchResults::new(),
        Hot::On | Hot::Planted => BatchResults::with_hot_cache(64),
    };
    if shared.hot == Hot::Planted {
        batch.hot_cache_mut().unwrap().plant_stale_hits_for_tests();
    }
    while keep_going(shared, rec.ops.len(), MAX_READER_OPS) {
        if let Some(snap) = long
            && rng.chance(2)
        {
            read_at(&mut rec, &mut rng, snap);
            continue;
        }
        let key = random_key(&mut rng, keys);
        if shared.hot != Hot::Off && rng.chance(40) {
            // GETs through the cache, half of them on the hot run of keys.
            let hot = hot_start(keys);
            let batch_keys: Vec<Key> = (0..rng.between(1, 4))
                .map(|_| {
                    if rng.chance(50) {
                        keys[hot + rng.below(HOT_KEYS.min(keys.len() - hot))].clone()
                    } else {
                        random_key(&mut rng, keys)
                    }
                })
                .collect();
            rec.record_batch(&batch_keys, &mut batch);
            continue;
        }
        match rng.below(100) {
            0..2 => {
                rec.record(
                    || "read_version".to_string(),
                    |s| {
                        Ok::<_, String>(Action::ReadVersion {
                            version: s.read_version().get(),
                        })
                    },
                );
            }
            2..35 => {
                rec.record(
                    || format!("get({key:?})"),
                    |s| {
                        Ok::<_, combkv::Error>(Action::Get {
                            result: s.get(&key)?.map(|b| b.to_vec()),
                            key: key.clone(),
                        })
                    },
                );
            }
            35..45 => {
                rec.record(
                    || format!("get_item({key:?})"),
                    |s| {
                        let item = s.get_item(&key).map_err(|e| format!("{e:?}"))?;
                        Ok::<_, String>(Action::GetItem {
                            key: key.clone(),
                            result: opt_entry(item)?,
                        })
                    },
                );
            }
            45..70 => {
                let query = random_query(&mut rng, keys);
                rec.record(
                    || format!("range({query:?})"),
                    |s| {
                        let items = s.range(&to_range(&query)).map_err(|e| format!("{e:?}"))?;
                        Ok::<_, String>(Action::Range {
                            result: entries(items)?,
                            query: query.clone(),
                        })
                    },
                );
            }
            70..75 => {
                // floor / ceil, checked as the equivalent one-item range.
                let floor = rng.chance(50);
                let query = Query {
                    start: if floor {
                        Bound::Unbounded
                    } else {
                        Bound::Included(key.clone())
                    },
                    end: if floor {
                        Bound::Included(key.clone())
                    } else {
                        Bound::Unbounded
                    },
                    limit: Some(1),
                    reverse: floor,
                    floor_start: false,
                };
                rec.record(
                    || format!("floor/ceil({key:?})"),
                    |s| {
                        let item = if floor { s.floor(&key) } else { s.ceil(&key) };
                        let item = item.map_err(|e| format!("{e:?}"))?;
                        Ok::<_, String>(Action::Range {
                            result: entries(item.into_iter().collect())?,
                            query: query.clone(),
                        })
                    },
                );
            }
            75..84 if held.len() < 3 => held.extend(take_snapshot(&mut rec)),
            84..97 if !held.is_empty() => {
                // A few reads through one held snapshot (writers run in
                // between, so the snapshot falls behind).
                let snap = held[rng.below(held.len())];
                for _ in 0..rng.between(1, 4) {
                    read_at(&mut rec, &mut rng, snap);
                }
            }
            _ if !held.is_empty() => {
                let snap = held.swap_remove(rng.below(held.len()));
                release(&mut rec, snap);
            }
            _ => {}
        }
    }
    for snap in held.into_iter().chain(long) {
        release(&mut rec, snap);
    }
    if let Some(c) = batch.hot_cache() {
        shared.hot_hits.fetch_add(c.stats().hits, Ordering::Relaxed);
        shared
            .hot_stale
            .fetch_add(c.stats().stale, Ordering::Relaxed);
    }
    (rec.ops, rec.errors)
}

/// A held snapshot: its handle, and the version it pins (what the
/// checker knows snapshots by).
#[derive(Clone, Copy)]
struct Held {
    id: combkv::SnapshotId,
    version: u64,
}

fn take_snapshot(rec: &mut Recorder<'_>) -> Option<Held> {
    let mut handle = None;
    let action = rec.record(
        || "snapshot".to_string(),
        |s| {
            let id = s.snapshot(Duration::from_secs(600))?;
            handle = Some(id);
            let version = s
                .list_snapshots()
                .into_iter()
                .find(|i| i.id == id)
                .map(|i| i.version.get())
                .expect("a new snapshot is listed");
            Ok::<_, combkv::Error>(Action::Snapshot { id: version })
        },
    );
    match (action, handle) {
        (Some(Action::Snapshot { id: version }), Some(id)) => Some(Held {
            id,
            version: *version,
        }),
        _ => None,
    }
}

/// One get_at or range_at through `snap`.
fn read_at(rec: &mut Recorder<'_>, rng: &mut Rng, snap: Held) {
    let keys = rec.shared.active_keys();
    let key = random_key(rng, keys);
    if rng.chance(60) {
        rec.record(
            || format!("get_at({}, {key:?})", snap.id.0),
            |s| {
                let item = s.get_at(snap.id, &key).map_err(|e| format!("{e:?}"))?;
                Ok::<_, String>(Action::GetAt {
                    snap: snap.version,
                    key: key.clone(),
                    result: opt_entry(item)?,
                })
            },
        );
    } else {
        let query = random_query(rng, keys);
        rec.record(
            || format!("range_at({}, {query:?})", snap.id.0),
            |s| {
                let items = s
                    .range_at(snap.id, &to_range(&query))
                    .map_err(|e| format!("{e:?}"))?;
                Ok::<_, String>(Action::RangeAt {
                    snap: snap.version,
                    result: entries(items)?,
                    query: query.clone(),
                })
            },
        );
    }
}

fn release(rec: &mut Recorder<'_>, snap: Held) {
    if !rec.store().release_snapshot(snap.id) {
        rec.errors.push(format!(
            "thread {}: release_snapshot({}) returned false for a held snapshot",
            rec.thread, snap.id.0
        ));
    }
}

/// Runs checked rounds for about `total`. Returns true if a round's
/// history was not linearizable, which only a planted bug may cause: with
/// `Hot::Planted` the run stops there, otherwise it panics.
fn run(name: &str, config: Config, total: Duration, hot: Hot) -> bool {
    let seed = seed();
    eprintln!("[{name}] seed {seed} (COMBKV_STRESS_SEED), duration {total:?}");
    let mut rng = Rng(seed);
    let store = Store::new(config).expect("store");
    assert!(store.max_key_len() >= 10, "keys of up to 10 bytes must fit");
    let keys = make_keys(&mut rng, KEYS, store.max_key_len());
    let shared = Arc::new(Shared {
        store,
        active: (AtomicUsize::new(0), AtomicUsize::new(keys.len())),
        keys,
        clock: Clock(AtomicU64::new(1)),
        stop: AtomicBool::new(false),
        hot,
        hot_hits: AtomicU64::new(0),
        hot_stale: AtomicU64::new(0),
    });
    let mut state: BTreeMap<Key, (Value, u64)> = BTreeMap::new();
    let mut base = shared.store.read_version().get();
    let start = Instant::now();
    let mut round = 0usize;
    let mut total_ops = 0usize;
    while round == 0 || start.elapsed() < total {
        let round_time = ROUND.min(
            total
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(300)),
        );
        let t0 = Instant::now();
        shared.stop.store(false, Ordering::SeqCst);
        // Every third round is narrow: all threads on NARROW_KEYS adjacent
        // keys, a few leaves that split, merge and get rewritten at once.
        let (lo, hi) = if round % 3 == 1 {
            let lo = rng.below(KEYS - NARROW_KEYS);
            (lo, lo + NARROW_KEYS)
        } else {
            (0, KEYS)
        };
        shared.active.0.store(lo, Ordering::SeqCst);
        shared.active.1.store(hi, Ordering::SeqCst);
        let mut handles = Vec::new();
        for i in 0..WRITERS + READERS {
            let shared = Arc::clone(&shared);
            let thread = round * (WRITERS + READERS) + i;
            let tseed = rng.next();
            handles.push(
                thread::Builder::new()
                    .name(format!("stress-{thread}"))
                    .spawn(move || {
                        if i < WRITERS {
                            writer(&shared, thread, tseed)
                        } else {
                            reader(&shared, thread, tseed)
                        }
                    })
                    .expect("spawn"),
            );
        }
        // Until the deadline, or until a thread reached its op cap. Meanwhile
        // this thread runs reclamation and introspection concurrently with
        // the workers: they must be safe at any time.
        while t0.elapsed() < round_time && !shared.stop.load(Ordering::Relaxed) {
            shared.store.collect();
            let c = shared.store.node_counts();
            assert!(c.live_buffers > 0 && c.reachable_buffers > 0, "{c:?}");
            let _ = shared.store.list_snapshots();
            thread::sleep(Duration::from_millis(1));
        }
        shared.stop.store(true, Ordering::SeqCst);
        let mut history = Vec::new();
        let mut errors = Vec::new();
        for h in handles {
            let (ops, errs) = h.join().expect("worker thread panicked");
            history.extend(ops);
            errors.extend(errs);
        }
        let run_time = t0.elapsed();
        assert!(
            errors.is_empty(),
            "[{name}] round {round}: unexpected errors (seed {seed}):\n{}",
            errors[..errors.len().min(20)].join("\n")
        );
        let t1 = Instant::now();
        let report = match linearizability::check(&state, base, &history) {
            Ok(report) => report,
            Err(v) if hot == Hot::Planted => {
                eprintln!(
                    "[{name}] round {round}: caught, as planted:\n{}",
                    v[..v.len().min(2)].join("\n\n")
                );
                return true;
            }
            Err(v) => panic!(
                "[{name}] round {round}: history of {} ops is not linearizable (seed {seed}):\n{}",
                history.len(),
                v.join("\n\n")
            ),
        };
        let check_time = t1.elapsed();
        total_ops += report.stats.ops;
        eprintln!(
            "[{name}] round {round} (keys {lo}..{hi}): {} ops in {run_time:.2?}, checked in \
             {check_time:.2?}; {} keys live; {:?}",
            report.stats.ops,
            report.final_state.len(),
            report.stats
        );
        state = report.final_state;
        base = report.max_version;
        let counts = quiescent_checks(name, round, &shared.store, &state, base);
        eprintln!("[{name}] round {round}: quiescent, {counts:?}");
        round += 1;
    }
    eprintln!(
        "[{name}] {round} rounds, {total_ops} ops in {:.2?}",
        start.elapsed()
    );
    if hot != Hot::Off {
        let hits = shared.hot_hits.load(Ordering::Relaxed);
        let stale = shared.hot_stale.load(Ordering::Relaxed);
        eprintln!("[{name}] hot caches: {hits} hits, {stale} stale entries found");
        // Both paths ran: hits were served and validation refused some.
        assert!(hits > 0 && stale > 0, "hits {hits}, stale {stale}");
    }
    false
}

/// With every thread stopped and every snapshot released: the store holds
/// exactly the model's state, and reclamation completes.
fn quiescent_checks(
    name: &str,
    round: usize,
    store: &Store,
    state: &BTreeMap<Key, (Value, u64)>,
    max_version: u64,
) -> combkv::NodeCounts {
    assert!(
        store.list_snapshots().is_empty(),
        "[{name}] round {round}: snapshots left after all were released: {:?}",
        store.list_snapshots()
    );
    let rv = store.read_version().get();
    assert!(
        rv >= max_version,
        "[{name}] round {round}: read version {rv} is below the last write version {max_version}"
    );
    let all = entries(store.range(&Range::all()).expect("range all")).expect("items");
    let want: Vec<Entry> = state
        .iter()
        .map(|(k, (v, ver))| Entry {
            key: k.clone(),
            value: v.clone(),
            version: *ver,
        })
        .collect();
    if all != want {
        let first = all
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(all.len().min(want.len()));
        panic!(
            "[{name}] round {round}: quiescent full scan differs from the model at item {first}: \
             store has {} items ({:?}), model {} ({:?})",
            all.len(),
            all.get(first),
            want.len(),
            want.get(first)
        );
    }
    for (k, (v, ver)) in state.iter().step_by(7) {
        let item = store.get_item(k).expect("get_item").expect("present");
        assert_eq!(
            (&item.value[..], item.version.get()),
            (&v[..], *ver),
            "[{name}] round {round}: quiescent get_item({k:?})"
        );
    }
    // Reclamation: loop collect() until the counts agree. Frees go through
    // a process-wide epoch, so this may take a number of calls (see
    // /tmp/combkv/bugs/collect_starved_by_other_threads.md); give it 5 s.
    let t = Instant::now();
    let mut calls = 0usize;
    loop {
        store.collect();
        calls += 1;
        let c = store.node_counts();
        if c.live_buffers == c.reachable_buffers {
            if calls > 1 {
                eprintln!("[{name}] round {round}: reclamation took {calls} collect() calls");
            }
            return c;
        }
        if t.elapsed() > Duration::from_secs(5) {
            panic!(
                "[{name}] round {round}: reclamation incomplete after {calls} collect() calls in \
                 {:.2?}: live_buffers {} != reachable_buffers {}",
                t.elapsed(),
                c.live_buffers,
                c.reachable_buffers
            );
        }
        if calls.is_multiple_of(16) {
            thread::sleep(Duration::from_millis(1));
        }
    }
}
