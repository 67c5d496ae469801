//! `combkv serve`: defaults, then `--config FILE`, then `COMBKV_*`
//! environment variables, then flags.
//!
//! With `wal-truncate-corrupt`, a corrupt log is cut
//! (`combkv::durable::repair`, what `combkv check --repair` does) before the
//! server opens the directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use combkv_server::{ByteSize, DurabilityMode, Listen, Server, ServerConfig};

#[derive(Args, Debug)]
#[command(
    after_help = "Defaults: RESP on 127.0.0.1:6380, memcached on 127.0.0.1:11212, in memory \
    (no --data-dir). Flags override COMBKV_* environment variables (COMBKV_MAXMEMORY for \
    --maxmemory ...), which override the config file, which overrides the defaults. \
    SIGINT/SIGTERM stop accepting, answer what was received, flush and exit."
)]
pub struct ServeArgs {
    /// TOML config file (keys as in CONFIG GET: resp, memcached, data-dir, ...).
    #[arg(long, env = "COMBKV_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// RESP listener address, or `off`.
    #[arg(long, env = "COMBKV_RESP", value_name = "ADDR")]
    resp: Option<Listen>,
    /// memcached listener address, or `off`.
    #[arg(long, env = "COMBKV_MEMCACHED", value_name = "ADDR")]
    memcached: Option<Listen>,
    /// RESP on this unix socket too (Redis's unixsocket).
    #[arg(long, env = "COMBKV_UNIXSOCKET", value_name = "PATH")]
    unixsocket: Option<PathBuf>,
    /// memcached on this unix socket too (memcached's -s).
    #[arg(long, env = "COMBKV_MEMCACHED_UNIXSOCKET", value_name = "PATH")]
    memcached_unixsocket: Option<PathBuf>,
    /// The unix sockets' mode, octal (default 700).
    #[arg(long, env = "COMBKV_UNIXSOCKETPERM", value_name = "MODE")]
    unixsocketperm: Option<u32>,
    /// memcached UDP address (get and gets), or `off` (the default, as in
    /// memcached: an open UDP port can be abused to flood others).
    #[arg(long, env = "COMBKV_MEMCACHED_UDP", value_name = "ADDR")]
    memcached_udp: Option<Listen>,
    /// Directory for the write-ahead log and checkpoints.
    #[arg(long, env = "COMBKV_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// always | everysec | none (default: always with --data-dir, else none).
    #[arg(long, env = "COMBKV_DURABILITY")]
    durability: Option<DurabilityMode>,
    /// Event-loop threads (default: one per core).
    #[arg(long, env = "COMBKV_THREADS")]
    threads: Option<usize>,
    /// Refuse writes above this much used memory: what the store holds
    /// plus client buffers (INFO used_memory), not the resident size
    /// (e.g. 4gb; 0 = no limit).
    #[arg(long, env = "COMBKV_MAXMEMORY", value_name = "BYTES")]
    maxmemory: Option<ByteSize>,
    /// Require this password: AUTH on the RESP listener, memcached's
    /// text-protocol authentication (a `set` of "default <password>").
    #[arg(long, env = "COMBKV_REQUIREPASS", value_name = "PASS")]
    requirepass: Option<String>,
    /// Users and permissions from this ACL file (Redis's format), written
    /// by ACL SAVE (docs/security.md).
    #[arg(long, env = "COMBKV_ACLFILE", value_name = "FILE")]
    aclfile: Option<PathBuf>,
    /// Prometheus metrics address (GET /metrics), or `off`.
    #[arg(long, env = "COMBKV_METRICS", value_name = "ADDR")]
    metrics: Option<Listen>,
    /// error | warn | info | debug | trace (debug logs every request).
    #[arg(long, env = "COMBKV_LOG_LEVEL", value_name = "LEVEL")]
    log_level: Option<String>,
    /// text | json (one JSON object per line, for log collectors).
    #[arg(long, env = "COMBKV_LOG_FORMAT", value_name = "FORMAT")]
    log_format: Option<String>,
    /// Connections served at once.
    #[arg(long, env = "COMBKV_MAXCLIENTS")]
    maxclients: Option<usize>,
    /// Slots of each event loop's hot-entry cache (0 = none).
    #[arg(long, env = "COMBKV_HOT_CACHE_ENTRIES", value_name = "N")]
    hot_cache_entries: Option<usize>,
    /// This node's id in a replicated cluster (0 or absent: a single node).
    #[arg(long, env = "COMBKV_NODE_ID", value_name = "ID")]
    node_id: Option<u64>,
    /// The address this node's peers reach it at (Raft traffic).
    #[arg(long, env = "COMBKV_RAFT_ADDR", value_name = "ADDR")]
    raft_addr: Option<std::net::SocketAddr>,
    /// Where the other nodes reach this one, if not at --raft-addr (a
    /// proxy or NAT in between). Its entry in --peers must be this address
    /// (--raft-addr without it): a node told otherwise refuses to start.
    #[arg(long, env = "COMBKV_RAFT_ADVERTISE", value_name = "ADDR")]
    raft_advertise: Option<std::net::SocketAddr>,
    /// This node's certificate for mutual TLS with the other nodes (PEM);
    /// with --peer-key-file and --peer-ca-cert-file. SIGHUP reloads them.
    #[arg(long, env = "COMBKV_PEER_CERT_FILE", value_name = "FILE")]
    peer_cert_file: Option<PathBuf>,
    /// The key of --peer-cert-file (PEM).
    #[arg(long, env = "COMBKV_PEER_KEY_FILE", value_name = "FILE")]
    peer_key_file: Option<PathBuf>,
    /// The cluster's CA (PEM): peers' certificates must chain to it.
    #[arg(long, env = "COMBKV_PEER_CA_CERT_FILE", value_name = "FILE")]
    peer_ca_cert_file: Option<PathBuf>,
    /// RESP over TLS on this port, on the IP of --resp (Redis's tls-port).
    #[arg(long, env = "COMBKV_TLS_PORT", value_name = "PORT")]
    tls_port: Option<u16>,
    /// RESP over TLS at this address, or `off` (instead of --tls-port).
    #[arg(long, env = "COMBKV_TLS_RESP", value_name = "ADDR")]
    tls_resp: Option<Listen>,
    /// memcached (text, meta, binary) over TLS at this address, or `off`.
    #[arg(long, env = "COMBKV_TLS_MEMCACHED", value_name = "ADDR")]
    tls_memcached: Option<Listen>,
    /// yes: the metrics endpoint serves HTTPS.
    #[arg(long, env = "COMBKV_TLS_METRICS", value_name = "yes|no", value_parser = yes_no)]
    tls_metrics: Option<bool>,
    /// The TLS listeners' certificate chain (PEM). CONFIG SET or SIGHUP
    /// reloads it.
    #[arg(long, env = "COMBKV_TLS_CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file (PEM).
    #[arg(long, env = "COMBKV_TLS_KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// The CAs client certificates must chain to (PEM).
    #[arg(long, env = "COMBKV_TLS_CA_CERT_FILE", value_name = "FILE")]
    tls_ca_cert_file: Option<PathBuf>,
    /// no | optional | yes (default): whether TLS clients must present a
    /// certificate chaining to --tls-ca-cert-file.
    #[arg(long, env = "COMBKV_TLS_AUTH_CLIENTS", value_name = "MODE")]
    tls_auth_clients: Option<combkv_server::config::AuthClients>,
    /// yes (default): refuse to start with a port other hosts may reach
    /// that nothing protects (no password, a Raft port without peer TLS);
    /// no: start and log a warning for each.
    #[arg(long, env = "COMBKV_PROTECTED_MODE", value_name = "yes|no", value_parser = yes_no)]
    protected_mode: Option<bool>,
    /// The cluster's first voters, `id=host:port,...` (Raft addresses), this
    /// node among them; the lowest id forms the cluster on its first start.
    /// Leave out to start a node that waits to be added.
    #[arg(long, env = "COMBKV_PEERS", value_name = "LIST")]
    peers: Option<String>,
    /// linearizable (default) | local: local reads skip the leader and may
    /// be stale.
    #[arg(long, env = "COMBKV_CLUSTER_READS", value_name = "MODE")]
    cluster_reads: Option<combkv_server::config::ClusterReads>,
    /// Snapshot (and purge the Raft log) every N applied entries (default
    /// 100000) ...
    #[arg(long, env = "COMBKV_CLUSTER_SNAPSHOT_ENTRIES", value_name = "N")]
    cluster_snapshot_entries: Option<u64>,
    /// ... or once they take this many bytes of log (default 256mb; 0 =
    /// never by bytes).
    #[arg(long, env = "COMBKV_CLUSTER_SNAPSHOT_LOG_BYTES", value_name = "BYTES")]
    cluster_snapshot_log_bytes: Option<ByteSize>,
    /// Raft log entries kept behind a snapshot (default 1000).
    #[arg(long, env = "COMBKV_CLUSTER_LOG_KEEP_ENTRIES", value_name = "N")]
    cluster_log_keep_entries: Option<u64>,
    /// Recent Raft log entries kept in memory (default 64mb).
    #[arg(long, env = "COMBKV_CLUSTER_LOG_CACHE_BYTES", value_name = "BYTES")]
    cluster_log_cache_bytes: Option<ByteSize>,
    /// Split a range once its keys and values pass this many bytes, at
    /// the key that halves them (default 0: never by size; at least 64kb).
    #[arg(long, env = "COMBKV_CLUSTER_RANGE_SPLIT_BYTES", value_name = "BYTES")]
    cluster_range_split_bytes: Option<ByteSize>,
    /// Place each range (but range 0, which is on every node) on this many
    /// nodes, moving replicas so that nodes hold similar numbers (default
    /// 0: ranges stay on the nodes of the range they were split from).
    #[arg(long, env = "COMBKV_CLUSTER_RANGE_REPLICAS", value_name = "N")]
    cluster_range_replicas: Option<u64>,
    /// Place a node that has not answered for this many seconds as if it
    /// had left the cluster: the ranges it holds get replicas on the other
    /// nodes (default 1800; 0: never).
    #[arg(long, env = "COMBKV_CLUSTER_NODE_DOWN_SECONDS", value_name = "SECONDS")]
    cluster_node_down_seconds: Option<u64>,
    /// Split a range whose requests (writes, and reads served by its
    /// leader's node) stay at or above this many a second for three
    /// seconds, at the middle of its sampled keys (default 0: never by
    /// load).
    #[arg(long, env = "COMBKV_CLUSTER_RANGE_SPLIT_LOAD", value_name = "WRITES")]
    cluster_range_split_load: Option<u64>,
    /// The most two nodes' clocks may differ, in milliseconds: every write
    /// waits this long before it is acknowledged, so that reads across
    /// ranges on any node see it (default 0: the nodes share one host's
    /// clock; at most 1000). Set the same on every node: each applies the
    /// largest its cluster's members set.
    #[arg(long, env = "COMBKV_CLUSTER_MAX_CLOCK_OFFSET", value_name = "MS")]
    cluster_max_clock_offset: Option<u64>,
    /// Merge a range with the range after it (both on the same nodes) once
    /// their keys and values together take fewer than this many bytes
    /// (default: a fifth of --cluster-range-split-bytes; 0: never; at most
    /// half the split size).
    #[arg(long, env = "COMBKV_CLUSTER_RANGE_MERGE_BYTES", value_name = "BYTES")]
    cluster_range_merge_bytes: Option<ByteSize>,
    /// If the write-ahead log is corrupt (damage followed by valid data, not
    /// a torn tail), cut it there and start instead of refusing: what
    /// `combkv check --repair` does. The dropped data is kept as .discarded
    /// files and versions restart above it; acknowledged writes in it are
    /// lost.
    #[arg(long, env = "COMBKV_WAL_TRUNCATE_CORRUPT")]
    wal_truncate_corrupt: bool,
}

/// The server's config, and whether to cut a corrupt log first.
fn config(args: &ServeArgs) -> Result<(ServerConfig, bool), String> {
    let mut c = match &args.config {
        Some(path) => ServerConfig::from_file(path)?,
        None => ServerConfig::default(),
    };
    c.wal_truncate_corrupt |= args.wal_truncate_corrupt;
    if let Some(v) = args.resp {
        c.resp = v;
    }
    if let Some(v) = args.memcached {
        c.memcached = v;
    }
    if let Some(v) = args.memcached_udp {
        c.memcached_udp = v;
    }
    if let Some(v) = &args.unixsocket {
        c.unixsocket = Some(v.clone());
    }
    if let Some(v) = &args.memcached_unixsocket {
        c.memcached_unixsocket = Some(v.clone());
    }
    if let Some(v) = args.unixsocketperm {
        c.unixsocketperm = v;
    }
    if let Some(v) = &args.data_dir {
        c.data_dir = Some(v.clone());
    }
    if let Some(v) = args.durability {
        c.durability = Some(v);
    }
    if let Some(v) = args.threads {
        c.threads = v;
    }
    if let Some(v) = args.maxmemory {
        c.maxmemory = v;
    }
    if let Some(v) = &args.requirepass {
        c.requirepass = Some(v.clone());
    }
    if let Some(v) = &args.aclfile {
        c.aclfile = Some(v.clone());
    }
    if let Some(v) = args.metrics {
        c.metrics = v;
    }
    if let Some(v) = &args.log_level {
        c.log_level = v.clone();
    }
    if let Some(v) = &args.log_format {
        c.log_format = v.clone();
    }
    if let Some(v) = args.maxclients {
        c.maxclients = v;
    }
    if let Some(v) = args.hot_cache_entries {
        c.hot_cache_entries = v;
    }
    if let Some(v) = args.node_id {
        c.node_id = v;
    }
    if let Some(v) = args.raft_addr {
        c.raft_addr = Some(v);
    }
    if let Some(v) = args.raft_advertise {
        c.raft_advertise = Some(v);
    }
    if let Some(v) = &args.peers {
        c.peers = v.clone();
    }
    if let Some(v) = &args.peer_cert_file {
        c.peer_cert_file = Some(v.clone());
    }
    if let Some(v) = &args.peer_key_file {
        c.peer_key_file = Some(v.clone());
    }
    if let Some(v) = &args.peer_ca_cert_file {
        c.peer_ca_cert_file = Some(v.clone());
    }
    if let Some(v) = args.protected_mode {
        c.protected_mode = v;
    }
    if let Some(v) = args.tls_port {
        c.tls_port = v;
    }
    if let Some(v) = args.tls_resp {
        c.tls_resp = v;
    }
    if let Some(v) = args.tls_memcached {
        c.tls_memcached = v;
    }
    if let Some(v) = args.tls_metrics {
        c.tls_metrics = v;
    }
    if let Some(v) = &args.tls_cert_file {
        c.tls_cert_file = Some(v.clone());
    }
    if let Some(v) = &args.tls_key_file {
        c.tls_key_file = Some(v.clone());
    }
    if let Some(v) = &args.tls_ca_cert_file {
        c.tls_ca_cert_file = Some(v.clone());
    }
    if let Some(v) = args.tls_auth_clients {
        c.tls_auth_clients = v;
    }
    if let Some(v) = args.cluster_reads {
        c.cluster_reads = v;
    }
    if let Some(v) = args.cluster_snapshot_entries {
        c.cluster_snapshot_entries = v;
    }
    if let Some(v) = args.cluster_snapshot_log_bytes {
        c.cluster_snapshot_log_bytes = v;
    }
    if let Some(v) = args.cluster_log_keep_entries {
        c.cluster_log_keep_entries = v;
    }
    if let Some(v) = args.cluster_log_cache_bytes {
        c.cluster_log_cache_bytes = v;
    }
    if let Some(v) = args.cluster_range_split_bytes {
        c.cluster_range_split_bytes = v;
    }
    if let Some(v) = args.cluster_range_replicas {
        c.cluster_range_replicas = v;
    }
    if let Some(v) = args.cluster_node_down_seconds {
        c.cluster_node_down_seconds = v;
    }
    if let Some(v) = args.cluster_range_split_load {
        c.cluster_range_split_load = v;
    }
    if let Some(v) = args.cluster_max_clock_offset {
        c.cluster_max_clock_offset = v;
    }
    if let Some(v) = args.cluster_range_merge_bytes {
        c.cluster_range_merge_bytes = Some(v);
    }
    c.validate()?;
    let truncate = c.wal_truncate_corrupt;
    Ok((c, truncate))
}

/// A yes/no flag value, as Redis writes its boolean settings.
fn yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, not '{s}'")),
    }
}

/// `--wal-truncate-corrupt`: cuts the log where recovery would refuse it,
/// and logs what was dropped. Err: why the directory cannot be repaired.
fn truncate_corrupt(dir: &Path) -> Result<(), String> {
    let report = combkv::durable::repair(dir)
        .map_err(|e| format!("cannot repair data directory {}: {e}", dir.display()))?;
    match &report.cut {
        Some(cut) if cut.corrupt => tracing::error!(
            "wal-truncate-corrupt: the write-ahead log was corrupt and has been cut; acknowledged writes \
             after the cut are lost: {report}"
        ),
        Some(_) => tracing::warn!("wal-truncate-corrupt: {report}"),
        None => tracing::info!("wal-truncate-corrupt: {report}"),
    }
    Ok(())
}

pub fn serve_main(args: ServeArgs) -> ExitCode {
    let (c, truncate) = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("combkv serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    crate::logs::init(&c.log_level, &c.log_format);
    if truncate
        && let Some(dir) = &c.data_dir
        && let Err(e) = truncate_corrupt(dir)
    {
        eprintln!("combkv serve: {e}");
        return ExitCode::FAILURE;
    }
    let server = match Server::start(c) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("combkv serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stopper = server.stopper();
    let reloader = server.reloader();
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("combkv serve: cannot install signal handlers: {e}");
            stopper.stop();
            server.wait();
            return ExitCode::FAILURE;
        }
    };
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig == signal_hook::consts::SIGHUP {
                tracing::info!("SIGHUP: reloading certificate files");
                reloader.reload();
                continue;
            }
            tracing::info!(signal = sig, "shutting down");
            stopper.stop();
            break;
        }
    });
    server.wait();
    ExitCode::SUCCESS
}
