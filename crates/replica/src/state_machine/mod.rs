//! The state machine: a combkv store that applies committed entries in log
//! order, single-threaded, each at its entry's clock (never the wall clock),
//! so that every replica gives every write the same version and answer.
//! Snapshots are checkpoints of the store taken from an MVCC pin while
//! apply goes on (`snapshot`); installing one loads a new store and swaps it
//! in whole.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use combkv::op::Outcome;
use combkv::{Config, Store, Version};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, RaftSnapshotBuilder, SnapshotMeta, StorageIOError, StoredMembership,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::codec;
use crate::ranges::{Bounds, ClockOffset, RangeMap};
use crate::snapshot::{self, Header};
use crate::types::{Applied, Entry, LogId, NodeId, StorageError, TypeConfig};

mod merge;
mod split;
mod timestamps;

pub use split::{SplitChild, SplitHook, seed_split_group};

/// The store a node serves from. Installing a snapshot replaces it whole;
/// a reader takes the current one for a request and keeps it to the end.
#[derive(Debug, Clone)]
pub struct StoreCell(Arc<RwLock<Arc<Store>>>);

impl StoreCell {
    /// A cell holding `store` (a snapshot install swaps in another).
    pub fn new(store: Arc<Store>) -> StoreCell {
        StoreCell(Arc::new(RwLock::new(store)))
    }
    /// The current store.
    pub fn get(&self) -> Arc<Store> {
        Arc::clone(&self.0.read())
    }
    fn set(&self, store: Arc<Store>) {
        *self.0.write() = store;
    }
}

/// What the state machine has applied.
#[derive(Debug, Clone, Default)]
struct SmState {
    log_id: Option<LogId>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The clock of the last applied batch.
    now_ms: u64,
    /// The newest durable snapshot: its meta and file.
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, PathBuf)>,
    /// Every id that was a voter in an applied membership. One that is no
    /// member now was removed, and is never given to a new node: a node
    /// under a voter's id could vote again in a term the old one voted in.
    /// Derived from the membership entries every replica applies alike,
    /// and kept in snapshots, so every node knows the same set, after a
    /// restart and after installing a snapshot too.
    ever_voters: BTreeSet<NodeId>,
    /// Cluster settings (`codec::encode_setting`) by name, as the log has
    /// applied them; kept in snapshots like `ever_voters`.
    settings: BTreeMap<String, Vec<u8>>,
    /// The range map, in the group that keeps it (group 0, the meta
    /// group): made from the first membership, its first range's replicas
    /// following this group's membership, changed by `MapChange` entries;
    /// kept in snapshots. None in other groups, and before the first
    /// membership.
    ranges: Option<RangeMap>,
    /// The bounds of the range this group serves, once it has split (none:
    /// the whole keyspace, as group 0 starts); kept in snapshots. An op on
    /// a key outside them is refused, and a split cuts them.
    bounds: Option<Bounds>,
    /// The store's read version after the last entry that wrote to it (a
    /// batch of ops, a split, a merge): no write since lies above it, read
    /// floors having raised the clock past it or not. A split hands it to
    /// the range it makes, which reads the same at every timestamp from it
    /// on (`SplitChild::since`). Not kept anywhere: a store loaded or
    /// installed starts it at its clock.
    last_write: u64,
}

impl SmState {
    /// Makes the range map follow this group's membership as applied (a
    /// new map if there is none yet), in the group that keeps the map.
    fn follow_membership(&mut self) {
        let m = self.membership.membership();
        let voters: Vec<NodeId> = m.voter_ids().collect();
        if voters.is_empty() {
            return;
        }
        let learners: Vec<NodeId> = m.learner_ids().collect();
        let at = self.membership.log_id().map_or(0, |l| l.index);
        let map = self
            .ranges
            .get_or_insert_with(|| RangeMap::new(voters.clone()));
        // Range 0 is this group's own; it is always in the map.
        let _ = map.follow_membership(0, voters, learners, at);
    }
}

/// A function told of every applied batch: its log index, the batch, and
/// its results, one per op.
#[derive(Clone)]
pub struct ApplyHook(pub Arc<ApplyFn>);

/// See [`ApplyHook`].
pub type ApplyFn =
    dyn Fn(u64, &crate::types::Batch, &[Result<combkv::op::Outcome, combkv::Error>]) + Send + Sync;

impl std::fmt::Debug for ApplyHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApplyHook")
    }
}

/// One node's state machine.
#[derive(Debug, Clone)]
pub struct StateMachine {
    cell: StoreCell,
    config: Config,
    /// Where snapshot files live.
    dir: PathBuf,
    state: Arc<Mutex<SmState>>,
    applied_tx: Arc<watch::Sender<Option<LogId>>>,
    /// The cluster settings, as each entry or snapshot sets them.
    settings_tx: Arc<watch::Sender<BTreeMap<String, Vec<u8>>>>,
    /// The range map as applied, shared: routers read it for every write
    /// and read without taking the state's lock that apply holds.
    map_tx: Arc<watch::Sender<Option<Arc<RangeMap>>>>,
    on_apply: Option<ApplyHook>,
    /// Whether this group keeps the range map (`SmState::ranges`).
    keeps_map: bool,
    /// The group this state machine is (its range's id while unsplit).
    group: u64,
    /// Told of each split's new range.
    on_split: Option<SplitHook>,
    /// The writes applied and reads served, for splits by load.
    load: Arc<crate::load::Load>,
    /// The store's recent past, held for reads at a timestamp.
    past: Arc<crate::past::Past>,
    /// The bound on the nodes' clock offset, and what apply saw of it.
    offset: ClockOffset,
}

fn io_err(e: io::Error) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

/// The snapshot files in `dir`, newest first by their last log index.
fn snapshot_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "snap") {
            found.push(p);
        }
    }
    found.sort();
    found.reverse();
    Ok(found)
}

impl StateMachine {
    /// Opens the state machine of `dir`: an empty store, or the newest
    /// valid snapshot there loaded into one. Entries after it come back
    /// from the log when openraft re-applies them.
    pub fn open(
        config: Config,
        dir: &Path,
        on_apply: Option<ApplyHook>,
    ) -> io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let mut state = SmState::default();
        let mut store = None;
        for path in snapshot_files(dir)? {
            match load(&config, &path) {
                Ok((s, header)) => {
                    state.log_id = header.meta.last_log_id;
                    state.membership = header.meta.last_membership.clone();
                    state.now_ms = header.now_ms;
                    state.ever_voters = header.ever_voters.iter().copied().collect();
                    state.settings = header.settings.iter().cloned().collect();
                    state.ranges = header.ranges.clone();
                    state.bounds = header.bounds.clone();
                    state.snapshot = Some((header.meta, path));
                    store = Some(s);
                    break;
                }
                Err(e) => tracing::warn!(
                    "skipping snapshot {}: {e}; an older snapshot (or the leader's) is used \
                     instead, and the file can be removed once the node has caught up",
                    path.display()
                ),
            }
        }
        let store = match store {
            Some(s) => s,
            None => Store::new(config.clone()).map_err(io::Error::other)?,
        };
        state.last_write = store.read_version().get();
        let (applied_tx, _) = watch::channel(state.log_id);
        let (settings_tx, _) = watch::channel(state.settings.clone());
        let (map_tx, _) = watch::channel(state.ranges.clone().map(Arc::new));
        Ok(StateMachine {
            cell: StoreCell::new(Arc::new(store)),
            config,
            dir: dir.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
            applied_tx: Arc::new(applied_tx),
            settings_tx: Arc::new(settings_tx),
            map_tx: Arc::new(map_tx),
            on_apply,
            keeps_map: false,
            group: 0,
            on_split: None,
            load: Arc::default(),
            past: Arc::default(),
            offset: ClockOffset::default(),
        })
    }

    /// Makes this the state machine of group `group` (its range's id until
    /// the range is split), told of its splits' new ranges by `on_split`.
    pub fn serving(mut self, group: u64, on_split: Option<SplitHook>) -> StateMachine {
        self.group = group;
        self.on_split = on_split;
        self
    }

    /// Applies writes for clocks at most `offset`'s bound apart, and tells
    /// it of entries from clocks ahead of this node's.
    pub fn with_clock_offset(mut self, offset: ClockOffset) -> StateMachine {
        self.offset = offset;
        self.tell_offset(&self.state.lock());
        self
    }

    /// Tells the node's [`ClockOffset`] the bounds its cluster's members
    /// published (the meta group's settings under
    /// [`CLOCK_OFFSET_SETTING`](crate::ranges::CLOCK_OFFSET_SETTING), of
    /// the nodes in its membership: a removed node's no longer counts), as
    /// this replica has applied them. Only group 0 keeps settings; called
    /// where its settings or membership change, so the bound follows the
    /// log with no delay.
    fn tell_offset(&self, state: &SmState) {
        if self.group != 0 {
            return;
        }
        let prefix = crate::ranges::CLOCK_OFFSET_SETTING;
        let members: BTreeSet<NodeId> = state.membership.nodes().map(|(id, _)| *id).collect();
        let published: Vec<(u64, u64)> = state
            .settings
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, value)| {
                let id: NodeId = name[prefix.len()..].parse().ok()?;
                let ms: u64 = std::str::from_utf8(value).ok()?.parse().ok()?;
                members.contains(&id).then_some((id, ms))
            })
            .collect();
        self.offset.adopt(&published);
    }

    /// The store's recent past (reads at a timestamp).
    pub(crate) fn past(&self) -> &crate::past::Past {
        &self.past
    }

    /// The requests this replica has seen lately (splits by load).
    pub(crate) fn load(&self) -> &crate::load::Load {
        &self.load
    }

    /// Counts no load (splits by load are off).
    pub(crate) fn without_load(mut self) -> StateMachine {
        self.load = Arc::new(crate::load::Load::off());
        self
    }

    /// The bounds of the range this group serves.
    pub fn bounds(&self) -> Bounds {
        self.state
            .lock()
            .bounds
            .clone()
            .unwrap_or_else(|| Bounds::whole(self.group))
    }

    /// Makes this the state machine of the group that keeps the range map
    /// (the meta group). A map its snapshot did not hold (one written
    /// before maps were kept) is made from the snapshot's membership.
    pub fn keeping_range_map(mut self) -> StateMachine {
        self.keeps_map = true;
        let mut state = self.state.lock();
        if state.ranges.is_none() {
            state.follow_membership();
        }
        self.publish_map(&state);
        drop(state);
        self
    }

    /// Shares the range map `state` holds if it changed since it was last
    /// shared (every change bumps its generation).
    fn publish_map(&self, state: &SmState) {
        let now = state.ranges.as_ref().map(RangeMap::generation);
        let shared = self.map_tx.borrow().as_ref().map(|m| m.generation());
        if now != shared {
            self.map_tx.send_replace(state.ranges.clone().map(Arc::new));
        }
    }

    /// The group this state machine is.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// The range map as applied so far, shared (None: this group keeps
    /// none, or has applied no membership yet).
    pub fn shared_range_map(&self) -> Option<Arc<RangeMap>> {
        self.map_tx.borrow().clone()
    }

    /// The range map as applied so far (None: this group keeps none, or
    /// has applied no membership yet).
    pub fn range_map(&self) -> Option<RangeMap> {
        self.state.lock().ranges.clone()
    }

    /// The store this node serves reads from.
    pub fn store(&self) -> &StoreCell {
        &self.cell
    }

    /// Follows the applied log id.
    pub fn applied(&self) -> watch::Receiver<Option<LogId>> {
        self.applied_tx.subscribe()
    }

    /// The clock of the last applied batch: a leader never proposes below it.
    pub fn now_ms(&self) -> u64 {
        self.state.lock().now_ms
    }

    /// Follows the cluster settings as applied (see `SmState::settings`).
    pub fn settings(&self) -> watch::Receiver<BTreeMap<String, Vec<u8>>> {
        self.settings_tx.subscribe()
    }

    /// Every id that was a voter in a membership applied so far (see
    /// `SmState::ever_voters`).
    pub fn ever_voters(&self) -> BTreeSet<NodeId> {
        self.state.lock().ever_voters.clone()
    }

    /// A digest of the whole state (every item's key, value, version,
    /// expiry and flags, in key order) and the log id it stands at; equal
    /// on every replica at the same applied log id.
    pub fn digest(&self) -> io::Result<(Option<LogId>, u64)> {
        let state = self.state.lock();
        let store = self.cell.get();
        let pin = store.pin();
        let at = state.log_id;
        let mut h = crc32fast::Hasher::new();
        if let Some(map) = &state.ranges {
            h.update(&postcard::to_stdvec(map).map_err(io::Error::other)?);
        }
        drop(state);
        let mut n = 0u64;
        store.visit_all_at(&pin, |it| {
            for part in [it.key, it.value] {
                h.update(&(part.len() as u64).to_le_bytes());
                h.update(part);
            }
            h.update(&it.version.get().to_le_bytes());
            h.update(&it.expires_at_ms.unwrap_or(0).to_le_bytes());
            h.update(&it.flags.to_le_bytes());
            n += 1;
            true
        });
        Ok((at, u64::from(h.finalize()) << 32 | (n & 0xffff_ffff)))
    }

    /// A read floor at timestamp `at`, pinned for `pin_ms` past its
    /// millisecond (0: not pinned). Every write after it takes a version
    /// above the floor, so a read at it, once this entry has applied, sees
    /// all the writes it ever will.
    fn floor(&self, at: u64, pin_ms: u64) -> combkv::Result<Outcome> {
        let store = self.cell.get();
        // A read at `at` comes once this applies: the store's past held
        // from its read version (at or below `at`) if nothing holds it yet
        // (no read at a timestamp for a while, `past::WANTED`).
        self.past.start(&store);
        store.raise_clock(Version(at));
        // The pin lasts until the snapshot's end (its timestamp's
        // millisecond plus its life), not from whenever this entry applies:
        // a replay after a restart pins no longer than that. A replica too
        // far behind to hold `at` any more pins nothing: reads of the
        // snapshot go to another. The state is the same either way; the
        // answer says whether this replica pinned, so that the leader's
        // tells the snapshot's taker (`Host::snapshot`) to take it again
        // where the range cannot be read at `at` (a store newer than it: a
        // range just split off).
        let left = match pin_ms {
            0 => 0,
            _ => (at >> crate::ranges::LOGICAL_BITS)
                .saturating_add(pin_ms)
                .saturating_sub(timestamps::wall_ms()),
        };
        let ttl = std::time::Duration::from_millis(left);
        if left > 0 && !self.past.pin(&store, at, pin_ms, ttl) {
            Err(combkv::Error::Unavailable(crate::past::PAST_GONE.into()))
        } else {
            Ok(Outcome::Clear)
        }
    }

    /// Puts cluster setting `name` in place as an entry sets it.
    fn put_setting(&self, state: &mut SmState, name: String, value: Vec<u8>) {
        let offset = name.starts_with(crate::ranges::CLOCK_OFFSET_SETTING);
        state.settings.insert(name, value);
        self.settings_tx.send_replace(state.settings.clone());
        if offset {
            self.tell_offset(state);
        }
    }

    /// Applies one entry, or, changing nothing, says until which
    /// millisecond of the wall clock its writes must wait first (the
    /// commit wait: `apply` waits without the state's lock, then applies
    /// it). A failure is rare and ends the node, so its size (openraft's
    /// error type) costs nothing on the path that matters.
    #[allow(clippy::result_large_err)]
    fn apply_entry(&self, entry: &Entry, state: &mut SmState) -> Result<Step, StorageError> {
        match &entry.payload {
            EntryPayload::Blank => {}
            EntryPayload::Membership(m) => {
                state.ever_voters.extend(m.voter_ids());
                state.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                if self.keeps_map {
                    state.follow_membership();
                }
                self.tell_offset(state);
            }
            EntryPayload::Normal(batch) => return self.apply_batch(entry.log_id, batch, state),
        }
        state.log_id = Some(entry.log_id);
        Ok(Step::Applied(Applied::default()))
    }

    /// [`StateMachine::apply_entry`] of a batch.
    #[allow(clippy::result_large_err)]
    fn apply_batch(
        &self,
        log_id: LogId,
        batch: &crate::types::Batch,
        state: &mut SmState,
    ) -> Result<Step, StorageError> {
        let applied = |state: &mut SmState, a: Applied| {
            state.log_id = Some(log_id);
            Ok(Step::Applied(a))
        };
        if let Some(split) = codec::decode_split(&batch.ops) {
            let a = control(split, |s| self.split(&s, state, batch.now_ms));
            return applied(state, a);
        }
        if let Some(retire) = codec::decode_retire(&batch.ops) {
            let a = control(retire, |r| self.retire(&r, state));
            return applied(state, a);
        }
        if let Some(absorb) = codec::decode_absorb(&batch.ops) {
            let a = control(absorb, |a| self.absorb(&a, state));
            return applied(state, a);
        }
        if let Some(change) = codec::decode_map_change(&batch.ops) {
            let a = control(change, |c| match state.ranges.as_mut() {
                Some(map) if self.keeps_map => map
                    .apply(&c)
                    .map(|()| Outcome::Clear)
                    .map_err(|e| combkv::Error::InvalidConfig(e.to_string())),
                _ => Err(combkv::Error::InvalidConfig(
                    "this group keeps no range map".into(),
                )),
            });
            return applied(state, a);
        }
        if let Some(floor) = codec::decode_floor(&batch.ops) {
            let a = control(floor, |(at, pin_ms)| self.floor(at, pin_ms));
            return applied(state, a);
        }
        if let Some(unpin) = codec::decode_unpin(&batch.ops) {
            // A replica that holds no pin of `at` (it pinned too late, or
            // replayed the floor after a restart) has nothing to drop: the
            // same state either way.
            let a = control(unpin, |(at, pin_ms)| {
                self.past.unpin(at, pin_ms);
                Ok(Outcome::Clear)
            });
            return applied(state, a);
        }
        if let Some(change) = codec::decode_setting_if(&batch.ops) {
            let a = control(change, |c| {
                if state.settings.get(&c.name) != c.expect.as_ref() {
                    return Err(combkv::Error::InvalidConfig(codec::SETTING_CHANGED.into()));
                }
                self.put_setting(state, c.name, c.value);
                Ok(Outcome::Clear)
            });
            return applied(state, a);
        }
        match codec::decode_setting(&batch.ops) {
            Some(Ok((name, value))) => {
                self.put_setting(state, name, value);
                return applied(state, Applied::default());
            }
            Some(Err(e)) => {
                tracing::error!("entry {log_id} holds an undecodable setting: {e}");
                return applied(state, Applied::default());
            }
            None => {}
        }
        let ops = match codec::decode_ops(&batch.ops) {
            Ok(ops) => ops,
            // Every replica reads the same bytes and skips them alike; the
            // proposers hear that their writes did not apply (no results
            // come back for them).
            Err(e) => {
                tracing::error!("entry {log_id} holds undecodable ops: {e}");
                return applied(state, Applied::default());
            }
        };
        // The log's clocks only go forward; a batch below the last one (a
        // new leader whose clock lags) is applied at the last.
        let now = batch.now_ms.max(state.now_ms);
        let store = self.cell.get();
        let before = timestamps::before_writes(&store, now, &ops, &self.offset);
        if let Some(ms) = before.wait_until_ms {
            // Nothing changed yet: a snapshot taken during the wait sees
            // this entry not applied.
            return Ok(Step::Wait(ms));
        }
        store.raise_clock(before.raise);
        state.now_ms = now;
        let mut results = Vec::with_capacity(ops.len());
        for op in &ops {
            // Decided against bounds the range no longer has (a split or
            // merge applied after it was routed): refused alike on every
            // replica, for the router to route again.
            if let Some(b) = &state.bounds
                && (b.retired || !op.keys_within(&b.start, b.end.as_deref()))
            {
                results.push(Err(combkv::Error::WrongRange(format!(
                    "a key outside {b}: the range was split or merged; route the request again"
                ))));
                continue;
            }
            if let Some(key) = op.some_key() {
                self.load.note(key);
            }
            let r = store.apply_at(op, now);
            if let Err(e @ combkv::Error::ReadOnly(_)) = &r {
                // A store that refuses writes cannot go on applying: the
                // node must stop.
                return Err(io_err(io::Error::other(e.to_string())));
            }
            results.push(r);
        }
        state.last_write = store.read_version().get();
        if let Some(hook) = &self.on_apply {
            (hook.0)(log_id.index, batch, &results);
        }
        applied(state, Applied { results })
    }
}

/// What became of an entry `apply_entry` was given.
enum Step {
    Applied(Applied),
    /// Not applied: its writes wait until the wall clock reads this
    /// millisecond (the commit wait).
    Wait(u64),
}

/// The one result of an entry holding one control op (a split, a
/// retirement, an absorb, a map change, a read floor): `apply` of it, or,
/// an entry that does not decode, refused alike on every replica.
fn control<T, E: std::fmt::Display>(
    decoded: Result<T, E>,
    apply: impl FnOnce(T) -> combkv::Result<Outcome>,
) -> Applied {
    let result = decoded
        .map_err(|e| combkv::Error::InvalidConfig(e.to_string()))
        .and_then(apply);
    Applied {
        results: vec![result],
    }
}

/// Whether `file` is the file at `path` (same device and inode).
async fn same_file(file: &tokio::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata().await, tokio::fs::metadata(path).await) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Writes a snapshot of `store` at `pin` with `header` into `dir`: a
/// temporary file, synced (by `finish`), renamed, the directory synced.
fn write_snapshot(
    dir: &Path,
    header: &Header,
    store: &Store,
    pin: combkv::Pin,
) -> io::Result<PathBuf> {
    let name = snapshot::file_name(&header.meta);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut w = snapshot::Writer::create(&tmp, header)?;
    let mut failed = None;
    store.visit_all_at(&pin, |it| {
        let r = w.item(
            it.key,
            it.value,
            it.version.get(),
            it.expires_at_ms.unwrap_or(0),
            it.flags,
        );
        match r {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    });
    drop(pin);
    if let Some(e) = failed {
        return Err(e);
    }
    w.finish()?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path)?;
    File::open(dir)?.sync_all()?;
    Ok(path)
}

/// Loads a snapshot file into a new store.
fn load(config: &Config, path: &Path) -> io::Result<(Store, Header)> {
    let (mut reader, header) = snapshot::Reader::open(path)?;
    let mut failed = None;
    let items = std::iter::from_fn(|| match reader.next_item() {
        Ok(it) => it,
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    let store = Store::restore(config.clone(), Version(header.clock), items);
    if let Some(e) = failed {
        return Err(e);
    }
    Ok((store.map_err(io::Error::other)?, header))
}

/// Builds a snapshot from the state captured when openraft asked for it.
#[derive(Debug)]
pub struct Builder {
    sm: StateMachine,
    store: Arc<Store>,
    /// Held from the moment openraft asked until the file is written.
    pin: Option<combkv::Pin>,
    header: Header,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let dir = self.sm.dir.clone();
        let header = self.header.clone();
        let store = Arc::clone(&self.store);
        let pin = self.pin.take().expect("a builder builds once");
        // Writing millions of items is blocking work: off the runtime.
        let path = tokio::task::spawn_blocking(move || write_snapshot(&dir, &header, &store, pin))
            .await
            .map_err(|e| io_err(io::Error::other(e)))?
            .map_err(io_err)?;
        self.sm.set_current(self.header.meta.clone(), path.clone());
        let file = tokio::fs::File::open(&path).await.map_err(io_err)?;
        Ok(Snapshot {
            meta: self.header.meta.clone(),
            snapshot: Box::new(file),
        })
    }
}

impl StateMachine {
    /// Makes `meta` at `path` the current snapshot and removes older files.
    fn set_current(&self, meta: SnapshotMeta<NodeId, BasicNode>, path: PathBuf) {
        let mut state = self.state.lock();
        let newer = state
            .snapshot
            .as_ref()
            .is_none_or(|(m, _)| m.last_log_id <= meta.last_log_id);
        if !newer {
            let _ = std::fs::remove_file(&path);
            return;
        }
        if let Some((_, old)) = state.snapshot.replace((meta, path.clone()))
            && old != path
        {
            let _ = std::fs::remove_file(old);
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError> {
        let s = self.state.lock();
        Ok((s.log_id, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut out = Vec::new();
        let mut entries = entries.into_iter();
        // An entry whose writes wait for the wall clock (the commit wait).
        let mut waiting: Option<Entry> = None;
        loop {
            // The state's lock is held for the whole batch but a commit
            // wait, which is waited out without it (and on tokio's timer
            // where it is long), so that reads, snapshots and the node's
            // other groups go on meanwhile: a snapshot or a digest sees the
            // store and the applied log id of one moment.
            let wait = {
                let mut state = self.state.lock();
                let mut wait = None;
                while let Some(entry) = waiting.take().or_else(|| {
                    let entry = entries.next()?;
                    if let EntryPayload::Normal(batch) = &entry.payload {
                        self.offset.saw(batch.now_ms, timestamps::wall_ms());
                    }
                    Some(entry)
                }) {
                    match self.apply_entry(&entry, &mut state)? {
                        Step::Applied(a) => out.push(a),
                        Step::Wait(ms) => {
                            waiting = Some(entry);
                            wait = Some(ms);
                            break;
                        }
                    }
                }
                let log_id = state.log_id;
                if self.keeps_map {
                    self.publish_map(&state);
                }
                drop(state);
                self.applied_tx.send_replace(log_id);
                wait
            };
            match wait {
                Some(ms) => timestamps::wall_reaches(ms).await,
                None => return Ok(out),
            }
        }
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        let state = self.state.lock();
        let store = self.cell.get();
        let pin = store.pin();
        let meta = SnapshotMeta {
            last_log_id: state.log_id,
            last_membership: state.membership.clone(),
            snapshot_id: format!(
                "{:020}-{}-{}",
                state.log_id.map_or(0, |l| l.index),
                state.log_id.map_or(0, |l| l.leader_id.term),
                pin.version().get()
            ),
        };
        let header = Header {
            meta,
            clock: store.read_version().get(),
            now_ms: state.now_ms,
            ever_voters: state.ever_voters.iter().copied().collect(),
            settings: state.settings.clone().into_iter().collect(),
            ranges: state.ranges.clone(),
            bounds: state.bounds.clone(),
        };
        drop(state);
        Builder {
            sm: self.clone(),
            store,
            pin: Some(pin),
            header,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self
            .dir
            .join(format!("receiving-{}.tmp", std::process::id()));
        let f = tokio::fs::File::create(&path).await.map_err(io_err)?;
        Ok(Box::new(f))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let received = self
            .dir
            .join(format!("receiving-{}.tmp", std::process::id()));
        let path = self.dir.join(snapshot::file_name(meta));
        let mut snapshot = snapshot;
        if same_file(&snapshot, &received).await {
            // What `begin_receiving_snapshot` handed out, filled: keep it.
            snapshot.sync_all().await.map_err(io_err)?;
            drop(snapshot);
            std::fs::rename(&received, &path).map_err(io_err)?;
        } else {
            // Some other file (openraft allows it): copy it in whole.
            use tokio::io::AsyncSeekExt;
            let _ = std::fs::remove_file(&received);
            snapshot
                .seek(std::io::SeekFrom::Start(0))
                .await
                .map_err(io_err)?;
            let tmp = self.dir.join(format!("{}.tmp", snapshot::file_name(meta)));
            let mut out = tokio::fs::File::create(&tmp).await.map_err(io_err)?;
            tokio::io::copy(&mut *snapshot, &mut out)
                .await
                .map_err(io_err)?;
            out.sync_all().await.map_err(io_err)?;
            drop(out);
            std::fs::rename(&tmp, &path).map_err(io_err)?;
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err)?;
        let config = self.config.clone();
        let load_path = path.clone();
        let (store, header) = tokio::task::spawn_blocking(move || load(&config, &load_path))
            .await
            .map_err(|e| io_err(io::Error::other(e)))?
            .map_err(io_err)?;
        let clock = store.read_version().get();
        // One swap: a reader sees the old state or the new, never a mix.
        self.cell.set(Arc::new(store));
        {
            let mut s = self.state.lock();
            s.last_write = clock;
            s.log_id = meta.last_log_id;
            s.membership = meta.last_membership.clone();
            s.now_ms = header.now_ms;
            s.ever_voters = header.ever_voters.into_iter().collect();
            s.settings = header.settings.into_iter().collect();
            s.ranges = header.ranges;
            s.bounds = header.bounds;
            if self.keeps_map && s.ranges.is_none() {
                s.follow_membership();
            }
            self.settings_tx.send_replace(s.settings.clone());
            self.tell_offset(&s);
            self.publish_map(&s);
        }
        self.set_current(meta.clone(), path);
        self.applied_tx.send_replace(meta.last_log_id);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let current = self.state.lock().snapshot.clone();
        match current {
            None => Ok(None),
            Some((meta, path)) => {
                let file = tokio::fs::File::open(&path).await.map_err(io_err)?;
                Ok(Some(Snapshot {
                    meta,
                    snapshot: Box::new(file),
                }))
            }
        }
    }
}
