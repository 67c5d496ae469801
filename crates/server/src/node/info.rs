//! INFO text (RESP) in Redis's `# Section` / `name:value` format. The same
//! figures feed memcached `stats` and the Prometheus endpoint.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use combkv_replica::Role;

use crate::state::{Shared, Stats};

/// Sections in INFO's default order.
pub const SECTIONS: [&str; 10] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "ranges",
    "cpu",
    "keyspace",
    "engine",
];

/// Sections only `all`, `everything` or their own name show (as in
/// Redis, where INFO's default leaves them out), in Redis's order after
/// `cpu`.
pub const STATS_SECTIONS: [&str; 3] = ["commandstats", "errorstats", "latencystats"];

/// Renders the requested sections: none or `default`, the default ones;
/// `all` or `everything`, those and the statistics sections.
pub fn render(shared: &Shared, wanted: &[String]) -> String {
    let every = wanted
        .iter()
        .any(|w| matches!(w.as_str(), "all" | "everything"));
    let default = every || wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let mut order: Vec<&str> = Vec::new();
    for s in SECTIONS {
        if s == "keyspace" {
            order.extend(STATS_SECTIONS);
        }
        order.push(s);
    }
    let mut out = String::new();
    for s in order {
        // A single node has no ranges: the section is a cluster node's.
        if s == "ranges" && !shared.config.clustered() {
            continue;
        }
        let stats = STATS_SECTIONS.contains(&s);
        let shown = if stats { every } else { default };
        if shown || wanted.iter().any(|w| w == s) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            if stats {
                stats_section(shared, s, &mut out);
            } else {
                section(shared, s, &mut out);
            }
        }
    }
    out
}

/// Redis's `commandstats`, `errorstats` and `latencystats` lines for the
/// RESP commands (memcached's are in the metrics).
fn stats_section(shared: &Shared, name: &str, out: &mut String) {
    let mut title = name.to_string();
    title[..1].make_ascii_uppercase();
    let _ = write!(out, "# {title}\r\n");
    match name {
        "commandstats" => {
            for (cmd, t) in shared.command_totals(false) {
                let usec = t.nanos / 1000;
                let per_call = if t.calls == 0 {
                    0.0
                } else {
                    t.nanos as f64 / 1000.0 / t.calls as f64
                };
                let _ = write!(
                    out,
                    "cmdstat_{cmd}:calls={},usec={usec},usec_per_call={per_call:.2},\
                     rejected_calls={},failed_calls={}\r\n",
                    t.calls, t.rejected, t.failed
                );
            }
        }
        "errorstats" => {
            for (code, n) in shared.error_totals(false) {
                let _ = write!(out, "errorstat_{code}:count={n}\r\n");
            }
        }
        _ => {
            for (cmd, t) in shared.command_totals(false) {
                if t.calls == 0 {
                    continue;
                }
                let _ = write!(
                    out,
                    "latency_percentiles_usec_{cmd}:p50={:.3},p99={:.3},p99.9={:.3}\r\n",
                    t.percentile_us(0.5),
                    t.percentile_us(0.99),
                    t.percentile_us(0.999)
                );
            }
        }
    }
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2}G", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.2}M", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.2}K", b / 1024.0)
    } else {
        format!("{bytes}B")
    }
}

/// `name:value` pairs of a section, for INFO and the metrics endpoint.
pub fn fields(shared: &Shared, name: &str) -> Vec<(&'static str, String)> {
    match name {
        "server" => server_fields(shared),
        "clients" => {
            let c = &shared.live.overlay(&shared.config);
            vec![
                (
                    "connected_clients",
                    shared.clients.load(Ordering::Relaxed).to_string(),
                ),
                ("maxclients", c.maxclients.to_string()),
                // Only CLIENT PAUSE blocks (no BLPOP, no WAIT): clients
                // whose command waits for it to end, as Redis 7.0 counts
                // them (`redis-cli --stat` reads the field).
                ("blocked_clients", shared.pause.held().to_string()),
                ("max_request_bytes", c.max_request_bytes.0.to_string()),
                ("max_reply_bytes", c.max_reply_bytes.0.to_string()),
                (
                    "client_output_hard_limit",
                    c.client_output_hard_limit.0.to_string(),
                ),
                (
                    "max_total_query_bytes",
                    c.max_total_query_bytes.0.to_string(),
                ),
            ]
        }
        "memory" => memory_fields(shared),
        "persistence" => crate::node::admin::persistence_fields(shared),
        "stats" => stats_fields(shared),
        "keyspace" => {
            let n = shared.keys();
            if n == 0 {
                Vec::new()
            } else {
                vec![("db0", format!("keys={n},expires=0,avg_ttl=0"))]
            }
        }
        "engine" => engine_fields(&shared.current_store()),
        "replication" => replication_fields(shared),
        "ranges" => ranges_fields(shared),
        "cpu" => {
            // Redis's fields, from getrusage: redis_exporter and its
            // dashboard read them.
            let (user, sys) = crate::state::shared::cpu_times(false);
            let (cuser, csys) = crate::state::shared::cpu_times(true);
            vec![
                ("used_cpu_sys", sys),
                ("used_cpu_user", user),
                ("used_cpu_sys_children", csys),
                ("used_cpu_user_children", cuser),
            ]
        }
        _ => Vec::new(),
    }
}

/// A cluster node whose Raft log is still being opened: the fields of a
/// cluster node, with nothing known yet (`raft_role:loading`).
fn opening_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.config;
    let mut f = vec![
        ("role", "slave".into()),
        ("cluster_enabled", "1".into()),
        ("raft_role", "loading".into()),
        ("raft_node_id", c.node_id.to_string()),
        ("raft_leader_id", String::new()),
    ];
    for name in [
        "raft_term",
        "raft_last_log_index",
        "raft_commit_index",
        "raft_applied_index",
        "raft_snapshot_index",
        "raft_voters",
        "raft_learners",
    ] {
        f.push((name, "0".into()));
    }
    f.extend([
        ("cluster_reads", c.cluster_reads.as_str().into()),
        (
            "cluster_peer_tls",
            u8::from(c.peer_tls_files().is_some()).to_string(),
        ),
        ("cluster_peers_refused", "0".into()),
        ("raft_read_index_leased", "0".into()),
        ("raft_read_index_rounds", "0".into()),
        ("cluster_problem", String::new()),
        ("connected_slaves", "0".into()),
    ]);
    f
}

/// INFO's `ranges` section on a cluster node (and, as ever, the metrics):
/// the ranges of the map, the ones this node holds a replica of and leads,
/// their keys and bytes, and what its groups did to ranges since it
/// started (`docs/cluster.md`, "Ranges").
fn ranges_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let Some(c) = shared.cluster() else {
        return Vec::new();
    };
    let r = c.range_stats();
    let (reads_across, read_retries) = c.reads_across();
    let (clock_ahead_max, clock_past_bound) = c.clock_ahead();
    vec![
        ("ranges", r.ranges.to_string()),
        ("ranges_hosted", r.hosted.to_string()),
        ("ranges_leading", r.leading.to_string()),
        ("ranges_stale_replicas", r.stale.to_string()),
        ("ranges_keys", r.keys.to_string()),
        ("ranges_bytes", r.bytes.to_string()),
        ("ranges_splits_applied", r.splits.to_string()),
        ("ranges_merges", r.merges.to_string()),
        ("ranges_replicas_added", r.replicas_added.to_string()),
        ("ranges_replicas_removed", r.replicas_removed.to_string()),
        ("ranges_replicas_deleted", r.replicas_deleted.to_string()),
        ("ranges_leaders_moved", r.leaders_moved.to_string()),
        ("ranges_reads_across", reads_across.to_string()),
        ("ranges_read_retries", read_retries.to_string()),
        ("ranges_read_indexes", c.read_index_rounds().to_string()),
        ("ranges_snapshot_pins", r.snapshot_pins.to_string()),
        ("ranges_snapshots_sending", r.snapshots.sending.to_string()),
        (
            "ranges_snapshots_receiving",
            r.snapshots.receiving.to_string(),
        ),
        ("ranges_snapshots_sent", r.snapshots.sent.to_string()),
        (
            "ranges_snapshots_received",
            r.snapshots.received.to_string(),
        ),
        ("ranges_clock_offset_ms", c.clock_offset_ms().to_string()),
        ("ranges_clock_ahead_max_ms", clock_ahead_max.to_string()),
        (
            "ranges_clock_ahead_past_bound",
            clock_past_bound.to_string(),
        ),
    ]
}

/// INFO's `replication` section (and, numeric fields, the metrics): the
/// node's role and Raft state, and on a leader each follower's progress.
pub fn replication_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    if shared.config.clustered() && shared.cluster().is_none() {
        return opening_fields(shared);
    }
    let Some(c) = shared.cluster() else {
        return vec![
            ("role", "master".into()),
            ("cluster_enabled", "0".into()),
            ("connected_slaves", "0".into()),
        ];
    };
    let s = c.status();
    let mut f = vec![
        (
            "role",
            if s.role == Role::Leader {
                "master"
            } else {
                "slave"
            }
            .into(),
        ),
        ("cluster_enabled", "1".into()),
        ("raft_role", s.role.as_str().into()),
        ("raft_node_id", s.id.to_string()),
        (
            "raft_leader_id",
            s.leader.map_or(String::new(), |l| l.to_string()),
        ),
        ("raft_term", s.term.to_string()),
        ("raft_last_log_index", s.last_log_index.to_string()),
        ("raft_commit_index", s.commit_index.to_string()),
        ("raft_applied_index", s.applied_index.to_string()),
        ("raft_snapshot_index", s.snapshot_index.to_string()),
        (
            "raft_voters",
            s.nodes.iter().filter(|n| n.2).count().to_string(),
        ),
        (
            "raft_learners",
            s.nodes.iter().filter(|n| !n.2).count().to_string(),
        ),
        ("cluster_reads", c.reads().as_str().into()),
        ("cluster_peer_tls", (s.peer_tls as u8).to_string()),
        // Connections to the Raft port refused: failed TLS handshakes,
        // certificates that do not name their address, bad frames.
        ("cluster_peers_refused", s.peers_refused.to_string()),
        // Read indexes this node gave as the leader: under its lease, and
        // after a round of heartbeats (`docs/cluster.md`, "Reads").
        ("raft_read_index_leased", s.read_indexes_leased.to_string()),
        (
            "raft_read_index_rounds",
            s.read_indexes_confirmed.to_string(),
        ),
        // Empty while all is well; else why the node cannot join or elect
        // (one line: INFO's format has no room for more).
        (
            "cluster_problem",
            s.problem
                .as_deref()
                .unwrap_or("")
                .replace(['\r', '\n'], " "),
        ),
        ("connected_slaves", s.followers.len().to_string()),
        (
            "raft_leader_changes",
            Stats::get(&shared.stats.raft_leader_changes).to_string(),
        ),
    ];
    // Redis's fields for a replica: where its leader takes clients.
    if s.role != Role::Leader {
        let leader = s.leader.and_then(|l| {
            crate::node::peers::resp_addr(c, l)
                .or_else(|| s.nodes.iter().find(|n| n.0 == l).map(|n| n.1.clone()))
        });
        let (host, port) = leader
            .as_deref()
            .and_then(|a| a.rsplit_once(':'))
            .unwrap_or(("", "0"));
        f.extend([
            ("master_host", host.to_string()),
            ("master_port", port.to_string()),
            (
                "master_link_status",
                if leader.is_some() { "up" } else { "down" }.into(),
            ),
        ]);
    }
    // Ops and results this process encoded and decoded: a write crosses
    // each hop once (`docs/cluster.md`, "Watching it").
    let t = combkv_replica::codec_tally();
    f.extend([
        ("cluster_ops_encoded", t.ops_encoded.to_string()),
        ("cluster_ops_decoded", t.ops_decoded.to_string()),
        ("cluster_results_encoded", t.results_encoded.to_string()),
        ("cluster_results_decoded", t.results_decoded.to_string()),
    ]);
    const NAMES: [&str; 16] = [
        "follower0",
        "follower1",
        "follower2",
        "follower3",
        "follower4",
        "follower5",
        "follower6",
        "follower7",
        "follower8",
        "follower9",
        "follower10",
        "follower11",
        "follower12",
        "follower13",
        "follower14",
        "follower15",
    ];
    for (name, (id, matched, lag)) in NAMES.iter().zip(&s.followers) {
        let addr = s
            .nodes
            .iter()
            .find(|n| n.0 == *id)
            .map_or("", |n| n.1.as_str());
        f.push((
            name,
            format!("id={id},addr={addr},match={matched},lag={lag}"),
        ));
    }
    f
}

fn server_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.config;
    vec![
        ("redis_version", "7.2.0".into()),
        ("combkv_version", env!("CARGO_PKG_VERSION").into()),
        ("redis_mode", "standalone".into()),
        ("os", std::env::consts::OS.into()),
        ("arch_bits", (usize::BITS).to_string()),
        ("multiplexing_api", "epoll".into()),
        ("process_id", std::process::id().to_string()),
        ("tcp_port", c.resp.port().to_string()),
        ("memcached_port", c.memcached.port().to_string()),
        ("uptime_in_seconds", shared.uptime().as_secs().to_string()),
        (
            "uptime_in_days",
            (shared.uptime().as_secs() / 86_400).to_string(),
        ),
        ("event_loop_threads", c.thread_count().to_string()),
    ]
}

fn memory_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.live.overlay(&shared.config);
    // As sampled (every 100 ms), so that INFO shows what `maxmemory` was
    // last judged by; the store's own parts are read now.
    let used = shared.used_memory.load(Ordering::Relaxed);
    let peak = shared.used_memory_peak.load(Ordering::Relaxed);
    let rss = shared.used_memory_rss.load(Ordering::Relaxed);
    let store = shared.current_store().memory();
    vec![
        // What the store holds plus the clients' buffers: what `maxmemory`
        // is compared with (Redis's used_memory counts both too).
        ("used_memory", used.to_string()),
        ("used_memory_human", human(used)),
        // The operating system's figure: above `used_memory` by the
        // binary, the threads' stacks, freed node buffers kept for reuse
        // and what the allocator keeps.
        ("used_memory_rss", rss.to_string()),
        ("used_memory_rss_human", human(rss)),
        ("used_memory_peak", peak.to_string()),
        ("used_memory_peak_human", human(peak)),
        // Redis's name: the data alone (node buffers and out-of-line values).
        ("used_memory_dataset", store.total().to_string()),
        ("maxmemory", c.maxmemory.0.to_string()),
        ("maxmemory_human", human(c.maxmemory.0)),
        ("maxmemory_policy", "noeviction".into()),
        // Redis's name: every client's input and output buffers.
        ("mem_clients_normal", shared.client_buffers().to_string()),
        ("node_memory_bytes", store.node_bytes.to_string()),
        ("value_memory_bytes", store.value_bytes.to_string()),
    ]
}

fn load(a: &std::sync::atomic::AtomicU64) -> String {
    a.load(std::sync::atomic::Ordering::Relaxed).to_string()
}

fn stats_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let st = &shared.stats;
    let n = |c: &crate::state::Counter| Stats::get(c).to_string();
    vec![
        ("total_connections_received", n(&st.connections_received)),
        ("total_commands_processed", n(&st.commands_processed)),
        ("total_requests_parsed", n(&st.requests_parsed)),
        ("rejected_connections", n(&st.connections_rejected)),
        ("keyspace_hits", n(&st.keyspace_hits)),
        ("keyspace_misses", n(&st.keyspace_misses)),
        ("total_net_input_bytes", n(&st.net_input_bytes)),
        ("total_net_output_bytes", n(&st.net_output_bytes)),
        ("total_error_replies", n(&st.errors_replied)),
        ("protocol_errors", n(&st.protocol_errors)),
        ("read_batches", n(&st.read_batches)),
        ("read_batch_requests", n(&st.read_batch_requests)),
        ("hot_cache_hits", n(&st.hot_cache_hits)),
        ("hot_cache_misses", n(&st.hot_cache_misses)),
        // Refused here, and (on a cluster node) by a range's leader.
        (
            "oom_rejected_writes",
            (Stats::get(&st.writes_refused_oom)
                + shared.cluster().map_or(0, |c| c.refused_for_memory()))
            .to_string(),
        ),
        ("large_values_received", n(&st.large_values_received)),
        (
            "large_values_stored_uncopied",
            n(&st.large_values_stored_uncopied),
        ),
        (
            "large_values_sent_uncopied",
            n(&st.large_values_sent_uncopied),
        ),
        (
            "client_output_buffer_limit_disconnections",
            n(&st.output_limit_disconnections),
        ),
        (
            "client_query_buffer_limit_disconnections",
            n(&st.query_limit_disconnections),
        ),
        // TLS handshakes that failed or timed out (client listeners).
        ("tls_handshake_failures", shared.tls.failures().to_string()),
        // Redis 7's ACL denial counts.
        ("acl_access_denied_auth", load(&shared.acl.denied_auth)),
        ("acl_access_denied_cmd", load(&shared.acl.denied_cmd)),
        ("acl_access_denied_key", load(&shared.acl.denied_key)),
        (
            "acl_access_denied_channel",
            load(&shared.acl.denied_channel),
        ),
    ]
}

fn engine_fields(store: &combkv::Store) -> Vec<(&'static str, String)> {
    let g = store.config();
    let nodes = store.node_counts();
    vec![
        ("node_size_bytes", g.node_size_bytes.to_string()),
        ("max_key_len", store.max_key_len().to_string()),
        ("max_value_len", store.max_value_len().to_string()),
        ("read_version", store.read_version().get().to_string()),
        ("live_buffers", nodes.live_buffers.to_string()),
        ("reachable_buffers", nodes.reachable_buffers.to_string()),
        ("snapshots", store.list_snapshots().len().to_string()),
        ("max_snapshots", g.max_snapshots.to_string()),
    ]
}

fn section(shared: &Shared, name: &str, out: &mut String) {
    let mut title = name.to_string();
    title[..1].make_ascii_uppercase();
    let _ = write!(out, "# {title}\r\n");
    for (k, v) in fields(shared, name) {
        let _ = write!(out, "{k}:{v}\r\n");
    }
}
