//! Whole-store operations the protocols share: checkpoints (SAVE, BGSAVE)
//! with their INFO persistence fields, backups (BACKUP), and closing the
//! store at shutdown.

use std::sync::atomic::Ordering;

use combkv_replica::ClusterError;

use crate::cluster::{Change, Changed, Proposer};
use crate::node::park::{self, Parking};
use crate::state::Shared;

/// Why a whole-store operation was refused. Each protocol words it for its
/// clients (`resp/error.rs`: an `ERR` reply, or the engine error's text).
#[derive(Debug)]
pub enum AdminError {
    /// Refused before it began: why (no data directory, a cluster node).
    Refused(&'static str),
    /// A directory given to LOADBACKUP is no complete, sound backup: why,
    /// naming it.
    NotABackup(String),
    /// The store refused or failed it.
    Store(combkv::Error),
}

impl From<combkv::Error> for AdminError {
    fn from(e: combkv::Error) -> Self {
        AdminError::Store(e)
    }
}

fn durable(shared: &Shared) -> Result<(), AdminError> {
    if shared.config.clustered() {
        return Err(AdminError::Refused(
            "a cluster node's log is its persistence; Raft takes its snapshots",
        ));
    }
    if shared.config.data_dir.is_none() {
        return Err(AdminError::Refused(
            "no data directory configured (start the server with --data-dir)",
        ));
    }
    Ok(())
}

/// SAVE: a checkpoint now (writers keep going; it is taken from a snapshot).
pub fn save(shared: &Shared) -> Result<(), AdminError> {
    durable(shared)?;
    let info = shared.current_store().checkpoint()?;
    shared
        .last_save_unix
        .store(info.finished_unix_ms / 1000, Ordering::Relaxed);
    Ok(())
}

/// BACKUP: a full checkpoint of one snapshot of the store into `dir` (new
/// or empty), a data directory by itself (`Store::backup`). Works with or
/// without a data directory. On a cluster node it backs up what the node
/// has applied; with `cluster-reads linearizable` the command passed the
/// pipeline's read gate first (a read naming no keys: a read index over
/// every range, taken with the connection parked), so the backup holds
/// every write acknowledged (by any node) before the command arrived.
pub fn backup(
    shared: &Shared,
    dir: &std::path::Path,
) -> Result<combkv::CheckpointInfo, AdminError> {
    if shared.cluster().is_some_and(|c| c.is_split()) {
        return Err(AdminError::Refused(SPLIT_BACKUP));
    }
    let info = shared.current_store().backup(dir)?;
    tracing::info!(
        "BACKUP into {}: version {}, {} items, {} bytes in {:.3}s",
        dir.display(),
        info.version,
        info.items,
        info.bytes,
        info.duration.as_secs_f64()
    );
    Ok(info)
}

/// Why BACKUP and LOADBACKUP are refused once the keyspace is cut into
/// ranges: a backup is one store's checkpoint, and would hold range 0's
/// keys alone.
const SPLIT_BACKUP: &str = "the keyspace is split into ranges: a backup of one store would \
     hold one range's keys; backups of a split keyspace are not built yet";

/// Items per batch of a backup load (a log entry on a cluster node), and
/// the bytes of keys and values that end a batch sooner.
const LOAD_BATCH_ITEMS: usize = 1000;
const LOAD_BATCH_BYTES: usize = 4 << 20;

/// One item of a backup, owned while its batch is written.
struct Loaded {
    key: Vec<u8>,
    value: Vec<u8>,
    expiry: combkv::Expiry,
    flags: u32,
}

/// LOADBACKUP: writes every item of the backup in `dir` (on this node's
/// host) into this node's store, which must be empty, through the write
/// path: on a cluster node as log entries of up to 1000 items, so every
/// node applies them (the way to seed a new cluster from a backup). Items
/// keep their value, expiry and flags, and take new versions; those
/// expired by now are left out. Returns the items written. On a cluster
/// node the store is found empty after the read gate's read index, as
/// for BACKUP, and the load runs on the Raft runtime while the
/// connection parks (None; its log rounds are not waited for on the
/// event loop): run again once it lands, the command finds its answer.
pub fn load_backup(
    shared: &Shared,
    parking: Option<Parking<'_>>,
    dir: &std::path::Path,
) -> Option<Result<u64, AdminError>> {
    // Checked before it is asked; run again once asked, the store is no
    // longer empty (as SNAPSHOT CREATE, `node::keyspace`).
    if !parking.is_some_and(|p| p.change_asked())
        && let Err(e) = loadable(shared, dir)
    {
        return Some(Err(e));
    }
    let Some(c) = shared.cluster() else {
        return Some(read_batches(dir, |batch| write_locally(shared, &batch)));
    };
    let proposer = c.proposer();
    let dir = dir.to_path_buf();
    let job = Box::pin(async move { load_into(proposer, dir).await.map(Some) });
    park::change(parking, c, Change::Job(job)).map(loaded)
}

/// A cluster load's answer as LOADBACKUP gives it.
fn loaded(changed: Changed) -> Result<u64, AdminError> {
    changed
        .map(|n| n.unwrap_or(0))
        .map_err(|e| AdminError::Store(e.into()))
}

/// Whether a backup in `dir` may be loaded here: the keyspace is one
/// range, the store empty, and the backup verified whole (so a damaged one
/// writes nothing).
fn loadable(shared: &Shared, dir: &std::path::Path) -> Result<(), AdminError> {
    if shared.cluster().is_some_and(|c| c.is_split()) {
        return Err(AdminError::Refused(SPLIT_BACKUP));
    }
    if !shared.current_store().is_empty() {
        return Err(AdminError::Refused(
            "the store is not empty: load a backup into a new node or cluster",
        ));
    }
    combkv::read_backup(dir, |_| {}).map_err(|e| match e {
        combkv::Error::Corrupt(why) => AdminError::NotABackup(why),
        other => AdminError::Store(other),
    })?;
    Ok(())
}

/// Reads the backup in `dir` in batches of up to `LOAD_BATCH_ITEMS`
/// items (or `LOAD_BATCH_BYTES` of keys and values), leaving out those
/// expired by now, and hands each to `write`, in order; the first error
/// ends it. Returns the items handed over.
fn read_batches(
    dir: &std::path::Path,
    mut write: impl FnMut(Vec<Loaded>) -> Result<(), AdminError>,
) -> Result<u64, AdminError> {
    let now = combkv::now_ms();
    let (mut batch, mut bytes, mut written) = (Vec::new(), 0, 0u64);
    let mut failed = None;
    combkv::read_backup(dir, |it| {
        if failed.is_some() || it.expires_at_ms.is_some_and(|at| at <= now) {
            return;
        }
        bytes += it.key.len() + it.value.len();
        batch.push(Loaded {
            key: it.key.to_vec(),
            value: it.value.to_vec(),
            expiry: it
                .expires_at_ms
                .map_or(combkv::Expiry::Never, combkv::Expiry::AtMs),
            flags: it.flags,
        });
        if batch.len() >= LOAD_BATCH_ITEMS || bytes >= LOAD_BATCH_BYTES {
            let n = batch.len() as u64;
            match write(std::mem::take(&mut batch)) {
                Ok(()) => written += n,
                Err(e) => failed = Some(e),
            }
            bytes = 0;
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !batch.is_empty() {
        written += batch.len() as u64;
        write(batch)?;
    }
    tracing::info!("LOADBACKUP from {}: {written} items", dir.display());
    Ok(written)
}

/// Writes `batch` into a single node's store: one group commit, not one
/// fsync per item.
fn write_locally(shared: &Shared, batch: &[Loaded]) -> Result<(), AdminError> {
    let store = shared.current_store();
    let session = store.session();
    for it in batch {
        session.write_with(&it.key, |_| {
            let put = combkv::Write::Put {
                value: it.value.clone(),
                expiry: it.expiry,
                flags: combkv::Flags::Set(it.flags),
            };
            (put, ())
        })?;
    }
    session.commit()?;
    Ok(())
}

/// A cluster node's load: the backup read on a blocking thread, each
/// batch proposed in turn (one entry per range it lies in: the keyspace
/// may split as the load grows it), the next read while one is proposed.
async fn load_into(proposer: Proposer, dir: std::path::PathBuf) -> Result<u64, ClusterError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Loaded>>(2);
    let reader = tokio::task::spawn_blocking(move || {
        read_batches(&dir, |batch| {
            // The proposer gone (a write failed): stop reading.
            tx.blocking_send(batch)
                .map_err(|_| AdminError::Refused("the load stopped"))
        })
    });
    let mut failed = None;
    while let Some(batch) = rx.recv().await {
        let results = proposer.apply_all(&puts(&batch)).await;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            failed = Some(ClusterError::Refused(e.to_string()));
            break;
        }
    }
    drop(rx);
    let read = reader
        .await
        .map_err(|e| ClusterError::Unknown(format!("the backup's reader failed: {e}")))?;
    if let Some(e) = failed {
        return Err(e);
    }
    read.map_err(|e| match e {
        AdminError::Refused(why) => ClusterError::Refused(why.into()),
        AdminError::NotABackup(why) => ClusterError::Refused(why),
        AdminError::Store(e) => ClusterError::Refused(e.to_string()),
    })
}

/// A batch of a backup as ops.
fn puts(batch: &[Loaded]) -> Vec<combkv::op::Op<'_>> {
    use combkv::op::{Cond, Op};
    batch
        .iter()
        .map(|it| Op::Put {
            key: &it.key,
            value: &it.value,
            expiry: it.expiry,
            flags: combkv::Flags::Set(it.flags),
            cond: Cond::Any,
            return_old: false,
        })
        .collect()
}

/// BGSAVE: Ok(true) if a checkpoint started, Ok(false) if one is running.
pub fn bgsave(shared: &Shared) -> Result<bool, AdminError> {
    durable(shared)?;
    Ok(shared.current_store().checkpoint_in_background()?)
}

/// Flushes the log and stops the engine's background threads (clean
/// shutdown). Errors are logged: there is no one left to answer.
pub fn close(shared: &Shared) {
    if let Some(c) = shared.cluster() {
        c.shutdown();
    }
    if let Err(e) = shared.current_store().shutdown() {
        tracing::error!("store shutdown: {e}");
    }
}

/// Redis's loading fields (its `loading_*` ones only while loading, as
/// Redis), then where the node is on its way to serving: `loading`,
/// `catching_up`, `ready` or `failed`, with the reason it failed.
fn loading_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    use crate::state::readiness::State;
    let r = &shared.readiness;
    let state = r.state();
    let mut f = vec![
        ("loading", u8::from(r.loading()).to_string()),
        ("async_loading", "0".into()),
    ];
    if r.loading() {
        let (done, total, perc, eta) = r.figures();
        let since = r
            .loading_since_unix
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        f.extend([
            ("loading_start_time", since.to_string()),
            ("loading_total_bytes", total.to_string()),
            ("loading_rdb_used_mem", "0".into()),
            ("loading_loaded_bytes", done.to_string()),
            ("loading_loaded_perc", format!("{perc:.2}")),
            ("loading_eta_seconds", eta.to_string()),
        ]);
    }
    let (name, why) = match state {
        State::Loading => ("loading", String::new()),
        State::CatchingUp => ("catching_up", String::new()),
        State::Ready => ("ready", String::new()),
        State::Failed(why) => ("failed", why),
    };
    f.push(("node_state", name.into()));
    if !why.is_empty() {
        f.push(("node_failure", why));
    }
    f
}

pub fn persistence_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.config;
    let p = shared.current_store().persistence();
    let last = p.last_checkpoint.as_ref();
    if let Some(l) = last {
        shared
            .last_save_unix
            .fetch_max(l.finished_unix_ms / 1000, Ordering::Relaxed);
    }
    let mut fields = loading_fields(shared);
    fields.extend([
        ("durability", shared.live.durability().as_str().into()),
        (
            "data_dir",
            c.data_dir
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string()),
        ),
        (
            "rdb_last_save_time",
            shared.last_save_unix.load(Ordering::Relaxed).to_string(),
        ),
        (
            "rdb_bgsave_in_progress",
            (p.checkpoint_in_progress as u8).to_string(),
        ),
        // Redis's name for the last save's duration, whole seconds, -1
        // before the first (`last_checkpoint_seconds` has the fraction).
        (
            "rdb_last_bgsave_time_sec",
            last.map_or(-1, |l| l.duration.as_secs() as i64).to_string(),
        ),
        ("checkpoints_ok", p.checkpoints_ok.to_string()),
        ("checkpoints_failed", p.checkpoints_failed.to_string()),
        (
            "last_checkpoint_version",
            last.map_or(0, |l| l.version).to_string(),
        ),
        (
            "last_checkpoint_kind",
            last.map_or(String::new(), |l| l.kind.to_string()),
        ),
        (
            "last_checkpoint_items",
            last.map_or(0, |l| l.items).to_string(),
        ),
        (
            "last_checkpoint_bytes",
            last.map_or(0, |l| l.bytes).to_string(),
        ),
        (
            "last_checkpoint_seconds",
            format!("{:.3}", last.map_or(0.0, |l| l.duration.as_secs_f64())),
        ),
        (
            "last_checkpoint_error",
            p.last_checkpoint_error.clone().unwrap_or_default(),
        ),
        (
            "base_checkpoint_version",
            p.base_checkpoint.map_or(0, |b| b.0).to_string(),
        ),
        (
            "base_checkpoint_bytes",
            p.base_checkpoint.map_or(0, |b| b.1).to_string(),
        ),
        ("delta_runs", p.delta_runs.to_string()),
        ("delta_bytes", p.delta_bytes.to_string()),
        ("merges_ok", p.merges_ok.to_string()),
        ("merges_failed", p.merges_failed.to_string()),
        (
            "last_merge_seconds",
            format!(
                "{:.3}",
                p.last_merge
                    .as_ref()
                    .map_or(0.0, |m| m.duration.as_secs_f64())
            ),
        ),
        ("wal_bytes", p.wal_bytes.to_string()),
        ("wal_segments", p.wal_segments.to_string()),
        ("wal_records_written", p.wal_records_written.to_string()),
        (
            "wal_bytes_since_checkpoint",
            p.wal_bytes_since_checkpoint.to_string(),
        ),
        ("durable_version", p.durable_version.to_string()),
        ("fsyncs", p.fsyncs.to_string()),
        ("read_only", (p.read_only.is_some() as u8).to_string()),
        ("read_only_cause", p.read_only.clone().unwrap_or_default()),
        (
            "recovery_records_replayed",
            p.recovery.records_replayed.to_string(),
        ),
        (
            "recovery_seconds",
            format!(
                "{:.3}",
                (p.recovery.load_time + p.recovery.replay_time).as_secs_f64()
            ),
        ),
        (
            "background_tasks_completed",
            p.executor.completed.to_string(),
        ),
        ("background_tasks_failed", p.executor.failed.to_string()),
        ("background_tasks_queued", p.executor.queued.to_string()),
    ]);
    fields
}
