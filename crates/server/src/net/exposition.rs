//! What `GET /metrics` answers: Prometheus's text format (0.0.4) written by
//! `prometheus-client`, with a HELP and a TYPE line for every family.
//! The figures stay where the server keeps them (atomics, each loop's
//! command counts) and are read at each scrape by a collector, so the
//! request path pays nothing for the endpoint.
//!
//! - Counters (`_total`): what only grows (connections, commands, bytes,
//!   errors, fsyncs, checkpoints, Raft ops), named in `COUNTERS`.
//! - Per command, for RESP and memcached alike (`protocol`, `cmd`):
//!   `combkv_commands_total`, `combkv_command_rejected_total`,
//!   `combkv_command_failed_total` and the latency histogram
//!   `combkv_command_duration_seconds`; error replies by code,
//!   `combkv_errors_total`.
//! - Every other numeric INFO field as a gauge `combkv_<field>`; on a
//!   cluster leader, each follower's lag and matched index.
//! - Histograms the engine and the replica keep as plain bucket counts,
//!   converted here: WAL fsync, checkpoint and merge durations, and on a
//!   cluster node Raft proposal durations.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use combkv::HistogramSnapshot;

use crate::state::Shared;
use crate::state::cmdstats::{BATCH_BUCKETS, BUCKETS, Totals, bucket_edge};

/// INFO fields that only grow: (field, metric name without `_total`, help).
const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "total_connections_received",
        "combkv_connections_received",
        "Connections accepted.",
    ),
    (
        "rejected_connections",
        "combkv_connections_rejected",
        "Connections refused at maxclients.",
    ),
    (
        "total_commands_processed",
        "combkv_commands_processed",
        "Requests answered, every protocol.",
    ),
    (
        "total_requests_parsed",
        "combkv_requests_parsed",
        "Requests parsed, counting each parse again after a wait.",
    ),
    (
        "keyspace_hits",
        "combkv_keyspace_hits",
        "Reads that found their key.",
    ),
    (
        "keyspace_misses",
        "combkv_keyspace_misses",
        "Reads that did not find their key.",
    ),
    (
        "total_net_input_bytes",
        "combkv_net_input_bytes",
        "Bytes read from clients.",
    ),
    (
        "total_net_output_bytes",
        "combkv_net_output_bytes",
        "Bytes written to clients.",
    ),
    (
        "total_error_replies",
        "combkv_error_replies",
        "Error replies sent.",
    ),
    (
        "protocol_errors",
        "combkv_protocol_errors",
        "Connections closed for a protocol error.",
    ),
    (
        "read_batches",
        "combkv_read_batches",
        "Read-engine batches run.",
    ),
    (
        "read_batch_requests",
        "combkv_read_batch_requests",
        "Reads answered in read-engine batches.",
    ),
    (
        "hot_cache_hits",
        "combkv_hot_cache_hits",
        "GETs the hot-entry caches answered.",
    ),
    (
        "hot_cache_misses",
        "combkv_hot_cache_misses",
        "GETs the hot-entry caches passed on.",
    ),
    (
        "oom_rejected_writes",
        "combkv_oom_rejected_writes",
        "Writes refused above maxmemory.",
    ),
    (
        "large_values_received",
        "combkv_large_values_received",
        "Large RESP bulk strings received into a buffer of their own.",
    ),
    (
        "large_values_stored_uncopied",
        "combkv_large_values_stored_uncopied",
        "Large values received that a write stored without a copy.",
    ),
    (
        "large_values_sent_uncopied",
        "combkv_large_values_sent_uncopied",
        "Large values of replies sent from the store's bytes without a copy.",
    ),
    (
        "tls_handshake_failures",
        "combkv_tls_handshake_failures",
        "Client TLS handshakes that failed.",
    ),
    (
        "acl_access_denied_auth",
        "combkv_acl_access_denied_auth",
        "Failed authentications.",
    ),
    (
        "acl_access_denied_cmd",
        "combkv_acl_access_denied_cmd",
        "Commands a user may not run.",
    ),
    (
        "acl_access_denied_key",
        "combkv_acl_access_denied_key",
        "Commands on keys a user may not touch.",
    ),
    (
        "checkpoints_ok",
        "combkv_checkpoints_ok",
        "Checkpoints written.",
    ),
    (
        "checkpoints_failed",
        "combkv_checkpoints_failed",
        "Checkpoints that failed.",
    ),
    (
        "merges_ok",
        "combkv_merges_ok",
        "Checkpoint chains merged into a new base.",
    ),
    (
        "merges_failed",
        "combkv_merges_failed",
        "Checkpoint merges that failed.",
    ),
    (
        "wal_records_written",
        "combkv_wal_records_written",
        "Write-ahead log records written.",
    ),
    (
        "fsyncs",
        "combkv_wal_fsyncs",
        "fsyncs of the write-ahead log.",
    ),
    (
        "background_tasks_failed",
        "combkv_background_tasks_failed",
        "Background tasks that failed.",
    ),
    (
        "raft_leader_changes",
        "combkv_raft_leader_changes",
        "Changes of leader a cluster node saw (to another node, or to none).",
    ),
    (
        "cluster_peers_refused",
        "combkv_cluster_peers_refused",
        "Connections to the Raft port refused.",
    ),
    (
        "raft_read_index_leased",
        "combkv_raft_read_index_leased",
        "Read indexes a leader gave under its lease, with no round.",
    ),
    (
        "raft_read_index_rounds",
        "combkv_raft_read_index_rounds",
        "Read indexes a leader gave after a round of heartbeats to a quorum.",
    ),
    (
        "cluster_ops_encoded",
        "combkv_cluster_ops_encoded",
        "Write ops this node encoded for the log.",
    ),
    (
        "cluster_ops_decoded",
        "combkv_cluster_ops_decoded",
        "Write ops this node decoded from the log.",
    ),
    (
        "cluster_results_encoded",
        "combkv_cluster_results_encoded",
        "Write results this node encoded.",
    ),
    (
        "cluster_results_decoded",
        "combkv_cluster_results_decoded",
        "Write results this node decoded.",
    ),
    (
        "ranges_splits_applied",
        "combkv_ranges_splits_applied",
        "Range splits this node's replicas applied.",
    ),
    (
        "ranges_merges",
        "combkv_ranges_merges",
        "Range merges this node's range leaders carried out.",
    ),
    (
        "ranges_replicas_added",
        "combkv_ranges_replicas_added",
        "Replicas this node's range leaders added to their groups.",
    ),
    (
        "ranges_replicas_removed",
        "combkv_ranges_replicas_removed",
        "Replicas this node's range leaders removed from their groups.",
    ),
    (
        "ranges_replicas_deleted",
        "combkv_ranges_replicas_deleted",
        "Replicas on this node deleted after their range moved away.",
    ),
    (
        "ranges_snapshots_sent",
        "combkv_ranges_snapshots_sent",
        "Raft snapshots this node's replicas sent whole to a follower (a replica added, or one too far behind the log).",
    ),
    (
        "ranges_snapshots_received",
        "combkv_ranges_snapshots_received",
        "Raft snapshots this node's replicas received whole and installed.",
    ),
    (
        "ranges_leaders_moved",
        "combkv_ranges_leaders_moved",
        "Range leaderships this node (leading the meta group) had handed to another voter.",
    ),
    (
        "ranges_reads_across",
        "combkv_ranges_reads_across",
        "Reads across ranges this node served at one timestamp.",
    ),
    (
        "ranges_read_retries",
        "combkv_ranges_read_retries",
        "Reads across ranges taken again at a new timestamp (a map behind, a range's past not held back far enough).",
    ),
    (
        "ranges_read_indexes",
        "combkv_ranges_read_indexes",
        "Read indexes this node's linearizable reads completed, one per range each covered.",
    ),
    (
        "ranges_clock_ahead_past_bound",
        "combkv_ranges_clock_ahead_past_bound",
        "Log entries this node applied whose proposer's clock ran ahead of its own by more than the clock offset bound it applies (ranges_clock_offset_ms).",
    ),
    (
        "used_cpu_sys",
        "combkv_cpu_system_seconds",
        "CPU time in the kernel.",
    ),
    (
        "used_cpu_user",
        "combkv_cpu_user_seconds",
        "CPU time in user space.",
    ),
    (
        "used_cpu_sys_children",
        "combkv_cpu_children_system_seconds",
        "Children's CPU time in the kernel.",
    ),
    (
        "used_cpu_user_children",
        "combkv_cpu_children_user_seconds",
        "Children's CPU time in user space.",
    ),
];

/// The exposition of `shared`'s figures now.
pub fn render(shared: &Arc<Shared>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Figures(Arc::clone(shared))));
    let mut out = String::new();
    // Writing to a String fails only if a collector does.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::error!("metrics exposition failed: {e}");
    }
    out
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Debug)]
struct Figures(Arc<Shared>);

impl Collector for Figures {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let shared = &self.0;
        info_fields(shared, &mut e)?;
        gauge(
            &mut e,
            "combkv_keys",
            "Keys in the store.",
            shared.keys() as f64,
        )?;
        gauge(
            &mut e,
            "combkv_ready",
            "1 when the node serves (what /readyz says).",
            f64::from(u8::from(crate::node::readiness::serving(shared).is_ok())),
        )?;
        batch_sizes(shared, &mut e)?;
        durations(shared, &mut e)?;
        commands(shared, &mut e)?;
        errors(shared, &mut e)?;
        followers(shared, &mut e)
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, f64>(&v, None)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// Every numeric INFO field: a counter if `COUNTERS` names it, else a
/// gauge.
fn info_fields(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    for section in crate::node::info::SECTIONS {
        for (name, value) in crate::node::info::fields(shared, section) {
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            match COUNTERS.iter().find(|c| c.0 == name) {
                Some((_, metric, help)) => counter(e, metric, help, v)?,
                None => gauge(
                    e,
                    &format!("combkv_{name}"),
                    &format!("INFO {section} field {name}."),
                    v,
                )?,
            }
        }
    }
    Ok(())
}

/// A per-command counter family: name, help, and its value in the totals.
type Family = (&'static str, &'static str, fn(&Totals) -> u64);

/// The per-command families, RESP's then memcached's series in each.
fn commands(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    let all: Vec<(&str, &str, Totals)> = [("resp", false), ("memcached", true)]
        .into_iter()
        .flat_map(|(proto, mc)| {
            shared
                .command_totals(mc)
                .into_iter()
                .map(move |(cmd, t)| (proto, cmd, t))
        })
        .collect();
    let families: [Family; 3] = [
        (
            "combkv_commands",
            "Commands run, by protocol and command.",
            |t| t.calls,
        ),
        (
            "combkv_command_rejected",
            "Commands refused before they ran (arity, authentication, permissions, loading, memory).",
            |t| t.rejected,
        ),
        (
            "combkv_command_failed",
            "Commands that ran and answered an error.",
            |t| t.failed,
        ),
    ];
    for (name, help, value) in families {
        let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (proto, cmd, t) in &all {
            let labels = [("protocol", *proto), ("cmd", *cmd)];
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&value(t), None)?;
        }
    }
    let mut m = e.encode_descriptor(
        "combkv_command_duration_seconds",
        "Time from a command's parse to its reply (a batch's time shared by its reads).",
        None,
        MetricType::Histogram,
    )?;
    for (proto, cmd, t) in &all {
        if t.calls == 0 {
            continue;
        }
        // The log-linear buckets summed per power of two.
        let buckets: Vec<(f64, u64)> = t
            .buckets
            .chunks(4)
            .enumerate()
            .map(|(i, c)| {
                let edge = bucket_edge(i * 4 + 3) as f64 / 1e9;
                (edge, c.iter().sum())
            })
            .collect();
        debug_assert_eq!(buckets.len() * 4, BUCKETS);
        let labels = [("protocol", *proto), ("cmd", *cmd)];
        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            t.nanos as f64 / 1e9,
            t.buckets.iter().sum(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

/// Read-engine batches by the number of reads in them.
fn batch_sizes(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    let mut counts = [0u64; BATCH_BUCKETS];
    for l in shared.loop_stats.lock().iter() {
        l.batches_into(&mut counts);
    }
    let buckets: Vec<(f64, u64)> = counts
        .iter()
        .enumerate()
        .take(BATCH_BUCKETS - 1)
        .map(|(i, n)| ((1u64 << i) as f64, *n))
        .collect();
    let total: u64 = counts.iter().sum();
    let reads = shared.stats.read_batch_requests.get() as f64;
    e.encode_descriptor(
        "combkv_read_batch_size",
        "Reads in each read-engine batch.",
        None,
        MetricType::Histogram,
    )?
    .encode_histogram::<NoLabelSet>(reads, total, &buckets, None)
}

/// The durations the engine times (fsyncs, checkpoints, merges; present,
/// at zero, without a data directory, as their counters are) and, on a
/// cluster node, its proposals'.
fn durations(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    let p = shared.current_store().persistence();
    seconds(
        e,
        "combkv_wal_fsync_duration_seconds",
        "Each fdatasync of the write-ahead log (one per group commit).",
        &p.fsync_durations,
    )?;
    seconds(
        e,
        "combkv_checkpoint_duration_seconds",
        "Each checkpoint written, from its snapshot to its rename.",
        &p.checkpoint_durations,
    )?;
    seconds(
        e,
        "combkv_merge_duration_seconds",
        "Each merge of a checkpoint chain into a new base.",
        &p.merge_durations,
    )?;
    let Some(c) = shared.cluster() else {
        return Ok(());
    };
    seconds(
        e,
        "combkv_raft_proposal_duration_seconds",
        "Each write proposal this node handed to Raft, until its results were applied here.",
        &c.proposal_durations(),
    )?;
    seconds(
        e,
        "combkv_raft_log_fsync_duration_seconds",
        "Each fsync of this node's Raft log (its write-ahead log on a cluster node).",
        &c.log_fsync_durations(),
    )
}

/// A duration histogram: its finite buckets' bounds in seconds, then +Inf.
fn seconds(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
) -> fmt::Result {
    let buckets: Vec<(f64, u64)> = h
        .buckets()
        .map(|(le, n)| (le.map_or(f64::INFINITY, |d| d.as_secs_f64()), n))
        .collect();
    e.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(h.sum().as_secs_f64(), h.count(), &buckets, None)
}

fn errors(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    let mut m = e.encode_descriptor(
        "combkv_errors",
        "Error replies by protocol and code (the reply's first word).",
        None,
        MetricType::Counter,
    )?;
    for (proto, mc) in [("resp", false), ("memcached", true)] {
        for (code, n) in shared.error_totals(mc) {
            let labels = [("protocol", proto), ("code", code.as_str())];
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
    }
    Ok(())
}

/// On a cluster leader: each follower's lag (entries) and matched index.
fn followers(shared: &Shared, e: &mut DescriptorEncoder) -> fmt::Result {
    let Some(c) = shared.cluster() else {
        return Ok(());
    };
    let s = c.status();
    if s.followers.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = s.followers.iter().map(|f| f.0.to_string()).collect();
    let mut m = e.encode_descriptor(
        "combkv_raft_follower_lag",
        "Log entries a follower is behind the leader's last.",
        None,
        MetricType::Gauge,
    )?;
    for (id, f) in ids.iter().zip(&s.followers) {
        m.encode_family(&[("node", id.as_str())])?
            .encode_gauge(&f.2)?;
    }
    let mut m = e.encode_descriptor(
        "combkv_raft_follower_matched_index",
        "The last log index a follower is known to hold.",
        None,
        MetricType::Gauge,
    )?;
    for (id, f) in ids.iter().zip(&s.followers) {
        m.encode_family(&[("node", id.as_str())])?
            .encode_gauge(&f.1)?;
    }
    Ok(())
}
