//! Three-node clusters over a simulated network that drops, delays,
//! reorders and partitions messages and restarts nodes, each schedule
//! seeded, and now and then crashes every node at once, each losing what
//! its log had not synced (its log lives on a simulated file system).
//! Clients send SET, insert, CAS, DEL, GET and RANGE to random nodes; the history is checked for linearizability with the checker the
//! engine's stress tests use, and every replica's state digest must be
//! equal at the same applied index once the network heals.
//!
//! A write whose answer was lost (a timeout) may or may not have happened.
//! Each applied batch is recorded as it is applied (`ApplyHook`): an
//! acknowledged write must be there with the outcome its client saw, a
//! possibly-applied one is taken as applied exactly when it is there, and a
//! write there that no client issued (or one applied twice) fails the run.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N schedules per test (200 in all by
//! default); `COMBKV_SIM_SEED=S` runs the one schedule of seed S. A seed
//! fixes the faults, the restarts and every client's choices; openraft's
//! election timers draw from its own generator, so a rerun usually, not
//! always, takes the same path.

#[path = "../../engine/tests/linearizability/mod.rs"]
#[allow(dead_code)]
mod linearizability;

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::op::{Cond, Op, Outcome};
use combkv::{Expiry, Flags, Range, Version};
use combkv_replica::codec;
use combkv_replica::network::sim::{Faults, SimNet};
use combkv_replica::{ApplyHook, Batch, LogOptions, Replica, ReplicaConfig, SyncPolicy};
use linearizability as lin;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    /// What the schedule this thread runs did so far, printed if it fails
    /// (or as it goes, with `COMBKV_SIM_TRACE` set).
    static TRACE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

macro_rules! trace {
    ($($arg:tt)*) => {{
        let line = format!($($arg)*);
        if std::env::var_os("COMBKV_SIM_TRACE").is_some() {
            eprintln!("{line}");
        }
        TRACE.with(|t| t.borrow_mut().push(line));
    }};
}

const NODES: u64 = 3;
const CLIENTS: usize = 3;
const OPS_PER_CLIENT: usize = 30;
const KEYS: u64 = 6;

/// One applied entry: its batch and encoded results, as the first node to
/// apply it saw them (every other node must apply it alike).
#[derive(Debug, Clone)]
struct Applied {
    now_ms: u64,
    ops: Vec<u8>,
    results: Vec<u8>,
}

/// One client write found in an applied entry (group commit joins several
/// into one entry): the client's own op and result, encoded alone.
#[derive(Debug, Clone)]
struct AppliedWrite {
    index: u64,
    id: WriteId,
    op: Vec<u8>,
    result: Vec<u8>,
}

/// Names a client write: (client, op number). Each write carries it as a
/// second op, a put of the client's marker key, because two deletes of one
/// key are otherwise the same bytes in the log.
type WriteId = (usize, usize);

type Journal = Arc<Mutex<BTreeMap<u64, Applied>>>;

/// Marker keys sort before every data key (`key`), so no range read sees
/// them.
fn marker(thread: usize) -> Vec<u8> {
    format!("#c{thread}").into_bytes()
}

/// Splits applied entries into the client writes they carry.
fn writes_of(journal: &BTreeMap<u64, Applied>) -> Result<Vec<AppliedWrite>, String> {
    let mut out = Vec::new();
    for (&index, a) in journal {
        let ops = codec::decode_ops(&a.ops).map_err(|e| e.to_string())?;
        let results = codec::decode_results(&a.results).map_err(|e| e.to_string())?;
        if ops.len() % 2 != 0 || ops.len() != results.len() {
            return Err(format!("entry {index} holds {} ops", ops.len()));
        }
        for (pair, res) in ops.chunks(2).zip(results.chunks(2)) {
            let Op::Put { key, value, .. } = &pair[1] else {
                return Err(format!("entry {index}: a write without its marker"));
            };
            let thread = std::str::from_utf8(&key[2..]).unwrap().parse().unwrap();
            let n = std::str::from_utf8(value).unwrap().parse().unwrap();
            let (mut op, mut result) = (Vec::new(), Vec::new());
            codec::encode_ops(&pair[..1], &mut op);
            codec::encode_result(&res[0], &mut result);
            out.push(AppliedWrite {
                index,
                id: (thread, n),
                op,
                result,
            });
        }
    }
    Ok(out)
}

thread_local! {
    /// Entries that joined more than one client write (group commit), on
    /// this test's thread (its runtime runs here).
    static JOINED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn config(dir: &Path, id: u64, journal: &Journal, storage: &FaultyStorage) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(
        id,
        format!("127.0.0.{id}:7000").parse().unwrap(),
        dir.join(format!("node{id}")),
    );
    // Synced as `--durability always` syncs: a crash of every node must
    // lose no acknowledged write. The simulated file system makes syncs
    // free.
    // A cache of a few entries: most reads (replication, apply) go to the
    // segments, while appends, truncations and purges go on.
    c.log = LogOptions {
        segment_bytes: 4096,
        sync: SyncPolicy::Always,
        inline: true,
        cache_bytes: 2048,
        ..LogOptions::default()
    };
    c.log_storage = Some(Arc::new(storage.clone()));
    // Snapshots and purges every few dozen entries, or every few KiB of
    // log, so that restarted and cut-off nodes catch up through snapshots
    // too.
    c.snapshot_entries = 40;
    c.snapshot_log_bytes = 6 << 10;
    c.log_keep_entries = 10;
    let journal = Arc::clone(journal);
    c.on_apply = Some(ApplyHook(Arc::new(move |index, batch: &Batch, typed| {
        trace!("node {id} applies entry {index}: {typed:?}");
        // Kept encoded, as entries are compared and cut byte for byte.
        let mut results = Vec::new();
        for r in typed {
            codec::encode_result(r, &mut results);
        }
        let results = &results[..];
        let mut j = journal.lock();
        match j.get(&index) {
            // Every replica must apply an entry alike.
            Some(a) if a.ops != batch.ops || a.now_ms != batch.now_ms || a.results != results => {
                panic!(
                    "node {id} applied entry {index} as {:?} -> {:?}, another node as {:?} -> {:?}",
                    codec::decode_ops(&batch.ops),
                    codec::decode_results(results),
                    codec::decode_ops(&a.ops),
                    codec::decode_results(&a.results),
                );
            }
            Some(_) => {}
            None => {
                if codec::decode_ops(&batch.ops).is_ok_and(|ops| ops.len() > 2) {
                    JOINED.with(|j| j.set(j.get() + 1));
                }
                j.insert(
                    index,
                    Applied {
                        now_ms: batch.now_ms,
                        ops: batch.ops.clone(),
                        results: results.to_vec(),
                    },
                );
            }
        }
    })));
    c
}

struct Cluster {
    dir: PathBuf,
    net: SimNet,
    journal: Journal,
    nodes: Mutex<HashMap<u64, Replica>>,
    /// Each node's log's file system, kept across its restarts.
    storage: HashMap<u64, FaultyStorage>,
}

impl Cluster {
    fn node(&self, id: u64) -> Option<Replica> {
        self.nodes.lock().get(&id).cloned()
    }

    async fn start(&self, id: u64) {
        trace!("starting node {id}");
        let storage = &self.storage[&id];
        if storage.has_crashed() {
            storage.restart();
        }
        let c = config(&self.dir, id, &self.journal, storage);
        let r = Replica::start_simulated(&c, &self.net)
            .await
            .unwrap_or_else(|e| panic!("starting node {id}: {e}"));
        self.net.set_down(id, false);
        self.nodes.lock().insert(id, r);
    }

    /// Crashes node `id`: what its log had not synced is lost (a random
    /// prefix of it survives), and it stops at once.
    async fn crash(&self, id: u64) {
        trace!("crashing node {id}");
        self.storage[&id].crash();
        self.stop(id).await;
    }

    async fn stop(&self, id: u64) {
        trace!("stopping node {id}");
        let r = self.nodes.lock().remove(&id);
        self.net.set_down(id, true);
        if let Some(r) = r {
            r.shutdown().await;
        }
    }
}

/// A client's op and what came of it.
struct Done {
    thread: usize,
    invoke: u64,
    respond: u64,
    what: What,
}

enum What {
    /// A write with its encoded op; `Some(result)` if answered, `None` if
    /// it may or may not have happened.
    Write {
        id: WriteId,
        op: Vec<u8>,
        result: Option<Outcome>,
    },
    Read(lin::Action),
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// One client: random ops on random nodes.
async fn client(cl: Arc<Cluster>, thread: usize, seed: u64, clock: Arc<AtomicU64>) -> Vec<Done> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut done = Vec::new();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for n in 0..OPS_PER_CLIENT {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        let id = rng.random_range(1..=NODES);
        let Some(node) = cl.node(id) else { continue };
        let k = rng.random_range(0..KEYS);
        let value = format!("c{thread}-{n}").into_bytes();
        let kind = rng.random_range(0..10);
        let invoke = clock.fetch_add(1, Ordering::SeqCst);
        trace!("client {thread} op {n} kind {kind} via node {id}");
        let what = if kind < 6 {
            let cond = match kind {
                0 | 1 => Cond::Any,
                2 => Cond::Absent,
                3 => Cond::Version(Version(seen.get(&k).copied().unwrap_or(1))),
                _ => Cond::Any,
            };
            let kb = key(k);
            let op = if kind == 4 {
                Op::Delete {
                    key: &kb,
                    cond: Cond::Any,
                    return_old: false,
                }
            } else {
                Op::Put {
                    key: &kb,
                    value: &value,
                    expiry: Expiry::Never,
                    flags: Flags::Set(0),
                    cond,
                    return_old: false,
                }
            };
            let mut bytes = Vec::new();
            codec::encode_ops(std::slice::from_ref(&op), &mut bytes);
            let (mk, mv) = (marker(thread), n.to_string().into_bytes());
            let named = [
                op.clone(),
                Op::Put {
                    key: &mk,
                    value: &mv,
                    expiry: Expiry::Never,
                    flags: Flags::Set(0),
                    cond: Cond::Any,
                    return_old: false,
                },
            ];
            let mut proposal = Vec::new();
            codec::encode_ops(&named, &mut proposal);
            // Nothing here expires, so the clock's value is free; it only
            // has to grow.
            let now_ms = 1_000_000_000 + invoke;
            match node.write(now_ms, proposal).await {
                Ok(r) => {
                    assert_eq!(r.len(), 2, "a write's share of its entry's results");
                    let outcome = r.into_iter().next().unwrap().unwrap();
                    What::Write {
                        id: (thread, n),
                        op: bytes,
                        result: Some(outcome),
                    }
                }
                Err(combkv_replica::ClusterError::Unknown(_)) => What::Write {
                    id: (thread, n),
                    op: bytes,
                    result: None,
                },
                // Never entered the log.
                Err(_) => continue,
            }
        } else {
            if node.read_barrier().await.is_err() {
                continue;
            }
            let store = node.current_store();
            if kind < 8 {
                let it = store.get_item(&key(k)).unwrap();
                if let Some(it) = &it {
                    seen.insert(k, it.version.get());
                }
                What::Read(lin::Action::GetItem {
                    key: key(k),
                    result: it.map(|it| lin::Entry {
                        key: it.key.to_vec(),
                        value: it.value.to_vec(),
                        version: it.version.get(),
                    }),
                })
            } else {
                let query = lin::Query {
                    start: Bound::Included(key(k)),
                    end: Bound::Unbounded,
                    limit: Some(3),
                    reverse: false,
                    floor_start: false,
                };
                let r = Range::new(query.start.clone(), query.end.clone()).with_limit(3);
                let items = store.range(&r).unwrap();
                What::Read(lin::Action::Range {
                    query,
                    result: items
                        .into_iter()
                        .map(|it| lin::Entry {
                            key: it.key.to_vec(),
                            value: it.value.to_vec(),
                            version: it.version.get(),
                        })
                        .collect(),
                })
            }
        };
        let respond = clock.fetch_add(1, Ordering::SeqCst);
        done.push(Done {
            thread,
            invoke,
            respond,
            what,
        });
    }
    done
}

/// Faults, partitions and restarts while the clients run.
async fn nemesis(cl: Arc<Cluster>, seed: u64, stop: Arc<AtomicU64>) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut down: Option<u64> = None;
    while stop.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..2000))).await;
        let action = rng.random_range(0..7);
        trace!("nemesis: action {action}");
        match action {
            0 => {
                let a = rng.random_range(1..=NODES);
                let rest: Vec<u64> = (1..=NODES).filter(|&n| n != a).collect();
                cl.net.partition(&[&[a], &rest]);
            }
            1 => cl.net.heal(),
            2 => {
                if let Some(id) = down.take() {
                    cl.start(id).await;
                } else {
                    let id = rng.random_range(1..=NODES);
                    cl.stop(id).await;
                    down = Some(id);
                }
            }
            // Every node at once (a power cut), then all back: the leader
            // may come back as the leader it was, in its old term, with a
            // commit point behind its log.
            6 => {
                for id in 1..=NODES {
                    if cl.node(id).is_some() {
                        cl.crash(id).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
                down = None;
                for id in 1..=NODES {
                    cl.start(id).await;
                }
            }
            3 => cl.net.set_faults(Faults {
                drop_request: 0.1,
                drop_reply: 0.1,
                delay_ms: (1, 40),
            }),
            _ => cl.net.set_faults(Faults {
                drop_request: 0.02,
                drop_reply: 0.02,
                delay_ms: (1, 10),
            }),
        }
    }
    cl.net.heal();
    cl.net.set_faults(Faults::NONE);
    if let Some(id) = down {
        cl.start(id).await;
    }
}

/// Turns the client records into a checkable history, resolving each
/// possibly-applied write with the journal of applied entries.
fn history(done: Vec<Done>, journal: &BTreeMap<u64, Applied>) -> Result<Vec<lin::Op>, String> {
    let mut left = writes_of(journal)?;
    let mut history = Vec::new();
    let mut unknown = Vec::new();
    for d in done {
        match d.what {
            What::Read(action) => history.push(lin::Op {
                thread: d.thread,
                invoke: d.invoke,
                respond: d.respond,
                action,
            }),
            What::Write {
                id,
                op,
                result: Some(outcome),
            } => {
                let Some(pos) = left.iter().position(|a| a.id == id) else {
                    return Err(format!(
                        "an acknowledged write is not in the applied log: {:?} -> {outcome:?}",
                        codec::decode_ops(&op)
                    ));
                };
                let a = left.remove(pos);
                let applied = codec::decode_results(&a.result).unwrap()[0].clone().ok();
                if a.op != op || applied.as_ref() != Some(&outcome) {
                    return Err(format!(
                        "write {id:?} was answered {outcome:?} but entry {} applied it as {:?} -> {applied:?}",
                        a.index,
                        codec::decode_ops(&a.op)
                    ));
                }
                history.push(lin::Op {
                    thread: d.thread,
                    invoke: d.invoke,
                    respond: d.respond,
                    action: action_of(&op, &outcome),
                });
            }
            What::Write {
                id,
                op,
                result: None,
            } => unknown.push((d.thread, d.invoke, id, op)),
        }
    }
    for (thread, invoke, id, op) in unknown {
        if let Some(pos) = left.iter().position(|a| a.id == id) {
            let a = left.remove(pos);
            if a.op != op {
                return Err(format!("write {id:?} was applied as another op"));
            }
            let outcome = codec::decode_results(&a.result).unwrap()[0]
                .clone()
                .unwrap();
            history.push(lin::Op {
                thread,
                invoke,
                // Never answered: constrains nothing after it.
                respond: u64::MAX,
                action: action_of(&op, &outcome),
            });
        }
    }
    if let Some(a) = left.first() {
        return Err(format!(
            "entry {} applied a write no client issued or applied one twice: {:?} {:?}",
            a.index,
            a.id,
            codec::decode_ops(&a.op)
        ));
    }
    Ok(history)
}

fn action_of(op: &[u8], outcome: &Outcome) -> lin::Action {
    let ops = codec::decode_ops(op).unwrap();
    let version = outcome.version().map(|v| v.get());
    match &ops[0] {
        Op::Put {
            key, value, cond, ..
        } => lin::Action::Write {
            kind: match cond {
                Cond::Any => lin::WriteKind::Put,
                Cond::Absent => lin::WriteKind::Insert,
                Cond::Present => lin::WriteKind::Update,
                Cond::Version(v) => lin::WriteKind::Cas { expected: v.get() },
            },
            key: key.to_vec(),
            value: Some(value.to_vec()),
            result: version,
        },
        Op::Delete { key, .. } => lin::Action::Write {
            kind: lin::WriteKind::Delete,
            key: key.to_vec(),
            value: None,
            result: version,
        },
        other => panic!("the clients send no {other:?}"),
    }
}

fn run_schedule(seed: u64) {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    TRACE.with(|t| t.borrow_mut().clear());
    let started = std::time::Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-sim-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(seed, Faults::NONE),
            journal: Arc::new(Mutex::new(BTreeMap::new())),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES)
                .map(|id| (id, FaultyStorage::new(seed ^ id)))
                .collect(),
        });
        for id in 1..=NODES {
            cl.start(id).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.node(1).unwrap().initialize(&members).await.unwrap();
        let clock = Arc::new(AtomicU64::new(1));
        let stop = Arc::new(AtomicU64::new(0));
        let nem = tokio::spawn(nemesis(Arc::clone(&cl), seed, Arc::clone(&stop)));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let s = seed.wrapping_mul(31).wrapping_add(t as u64);
                tokio::spawn(client(Arc::clone(&cl), t, s, Arc::clone(&clock)))
            })
            .collect();
        let mut done = Vec::new();
        for c in clients {
            done.extend(c.await.unwrap());
        }
        stop.store(1, Ordering::SeqCst);
        nem.await.unwrap();
        converge(&cl).await?;
        let journal = cl.journal.lock().clone();
        let history = history(done, &journal)?;
        lin::check(&BTreeMap::new(), 0, &history).map_err(|v| v.join("\n"))?;
        for id in 1..=NODES {
            cl.stop(id).await;
        }
        Ok::<usize, String>(history.len())
    });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(e) => {
            let trace = TRACE.with(|t| t.borrow().join("\n"));
            panic!("schedule {seed} failed (rerun: COMBKV_SIM_SEED={seed}):\n{e}\ntrace:\n{trace}")
        }
        Ok(ops) => eprintln!(
            "schedule {seed}: {ops} ops checked in {:.1} s",
            started.elapsed().as_secs_f64()
        ),
    }
}

/// Waits until every node has applied the leader's last entry, then
/// compares their state digests.
async fn converge(cl: &Cluster) -> Result<(), String> {
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let nodes: Vec<Replica> = (1..=NODES).filter_map(|id| cl.node(id)).collect();
        let Some(leader) = nodes
            .iter()
            .find(|n| n.status().role == combkv_replica::Role::Leader)
        else {
            continue;
        };
        let last = leader.status().last_log_index;
        let digests: Vec<_> = nodes.iter().map(|n| n.digest().unwrap()).collect();
        trace!("converge: leader last {last}, {digests:?}");
        if digests
            .iter()
            .all(|(at, _)| at.is_some_and(|(_, i)| i == last))
        {
            if digests.iter().any(|d| d.1 != digests[0].1) {
                return Err(format!("replicas differ at index {last}: {digests:?}"));
            }
            return Ok(());
        }
    }
    Err("the cluster did not converge".into())
}

fn seeds(part: u64, parts: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("COMBKV_SIM_SEED") {
        let s: u64 = s.parse().expect("COMBKV_SIM_SEED is a number");
        return if part == 0 { vec![s] } else { vec![] };
    }
    let total: u64 = std::env::var("COMBKV_SIM_SCHEDULES").ok().map_or(200, |s| {
        s.parse().expect("COMBKV_SIM_SCHEDULES is a number")
    });
    (0..total).filter(|s| s % parts == part).collect()
}

/// Runs one part's schedules; over a few dozen, clients' writes must have
/// shared entries, or group commit went untested.
fn run_part(part: u64) {
    let seeds = seeds(part, 4);
    let many = seeds.len() >= 20;
    seeds.into_iter().for_each(run_schedule);
    let joined = JOINED.with(|j| j.get());
    eprintln!("part {part}: {joined} entries joined several clients' writes");
    assert!(!many || joined > 0, "no entry joined two clients' writes");
}

// Four tests, so that the harness runs schedules on both cores.
#[test]
fn simulated_schedules_part_0() {
    run_part(0);
}
#[test]
fn simulated_schedules_part_1() {
    run_part(1);
}
#[test]
fn simulated_schedules_part_2() {
    run_part(2);
}
#[test]
fn simulated_schedules_part_3() {
    run_part(3);
}
