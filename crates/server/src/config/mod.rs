//! Server configuration: built-in defaults, a TOML file, then command-line
//! flags, each overriding the one before. Every limit of the server is here,
//! with its unit in its name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

mod live;
mod tls;

pub use live::{LIVE_SETTINGS, rewrite};

pub use tls::AuthClients;

/// How writes are made durable (meaningful only with a data directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// Acknowledge after fdatasync (group commit).
    Always,
    /// fdatasync once a second: a crash loses at most about a second.
    Everysec,
    /// Nothing is written to disk.
    None,
}

impl DurabilityMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityMode::Always => "always",
            DurabilityMode::Everysec => "everysec",
            DurabilityMode::None => "none",
        }
    }

    /// The engine's mode of the same name.
    pub fn engine(self) -> combkv::Durability {
        match self {
            DurabilityMode::Always => combkv::Durability::Always,
            DurabilityMode::Everysec => combkv::Durability::EverySec,
            DurabilityMode::None => combkv::Durability::None,
        }
    }

    /// How much a crash may lose of what was acknowledged: 0 nothing
    /// (`always`), then about a second (`everysec`), then what the OS had
    /// not written back (`none`).
    pub fn risk(self) -> u8 {
        match self {
            DurabilityMode::Always => 0,
            DurabilityMode::Everysec => 1,
            DurabilityMode::None => 2,
        }
    }
}

impl FromStr for DurabilityMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(DurabilityMode::Always),
            "everysec" => Ok(DurabilityMode::Everysec),
            "none" => Ok(DurabilityMode::None),
            _ => Err(format!(
                "unknown durability '{s}' (expected always, everysec or none)"
            )),
        }
    }
}

/// A listener address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

impl FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(Listen::Off);
        }
        s.parse::<SocketAddr>()
            .map(Listen::At)
            .map_err(|_| format!("bad listen address '{s}' (expected IP:PORT or off)"))
    }
}

impl Listen {
    /// The port, as INFO and CONFIG GET write it: 0 when off.
    pub(crate) fn port(self) -> u16 {
        match self {
            Listen::At(a) => a.port(),
            Listen::Off => 0,
        }
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A byte count: a plain number or one with a unit (`kb`, `mb`, `gb`, as
/// powers of 1024, case-insensitive), the way redis.conf writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lower.len());
        let (digits, unit) = lower.split_at(split);
        let n: u64 = digits.parse().map_err(|_| format!("bad byte size '{s}'"))?;
        let mult: u64 = match unit {
            "" | "b" => 1,
            "k" | "kb" => 1 << 10,
            "m" | "mb" => 1 << 20,
            "g" | "gb" => 1 << 30,
            _ => return Err(format!("bad byte size '{s}' (units: kb, mb, gb)")),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("byte size '{s}' is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Everything `combkv serve` can be told. Field names are the TOML keys
/// (kebab-case) and `CONFIG GET` names.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ServerConfig {
    /// RESP listener.
    pub resp: Listen,
    /// memcached text/meta/binary listener.
    pub memcached: Listen,
    /// memcached's UDP transport (get and gets), off by default as in
    /// memcached: a small request can draw a large reply, so an open UDP
    /// port can be used to flood a third party with forged sources.
    pub memcached_udp: Listen,
    /// Prometheus text endpoint (`GET /metrics`), off by default.
    pub metrics: Listen,
    /// Where the WAL and checkpoints live; none = purely in memory.
    pub data_dir: Option<PathBuf>,
    /// Default: `always` with a data directory, `none` without.
    pub durability: Option<DurabilityMode>,
    /// Event-loop threads; 0 = one per core.
    pub threads: usize,
    /// Writes are refused above this much used memory (INFO `used_memory`:
    /// what the store holds plus the clients' buffers, not the resident
    /// size); 0 = no limit.
    pub maxmemory: ByteSize,
    /// Password for AUTH on the RESP listener and memcached's text-protocol
    /// authentication; none = no authentication.
    pub requirepass: Option<String>,
    /// The ACL file (Redis's `aclfile`): users loaded at start and by ACL
    /// LOAD, written by ACL SAVE.
    pub aclfile: Option<PathBuf>,
    /// `error`, `warn`, `info`, `debug` or `trace` (debug logs every request).
    pub log_level: String,
    /// Commands (and expiry sweeps) at least this many milliseconds long
    /// go to the latency monitor (LATENCY LATEST); 0: off (Redis's
    /// `latency-monitor-threshold`).
    pub latency_monitor_threshold: u64,
    /// `text` (one line per event) or `json` (one object per line, for a
    /// log collector).
    pub log_format: String,
    /// Connections served at once, both listeners together.
    pub maxclients: usize,
    /// Largest request (a whole RESP command or memcached command line plus
    /// data block); a larger one is an error and the connection is closed.
    pub max_request_bytes: ByteSize,
    /// Largest reply a client may have pending; a RANGE that would exceed it
    /// is refused, and a client reading too slowly stops being read.
    pub max_reply_bytes: ByteSize,
    /// A client whose pending replies pass this is disconnected (Redis's
    /// `client-output-buffer-limit` hard limit); 0 = no limit.
    pub client_output_hard_limit: ByteSize,
    /// Input buffered for all clients together at most: past it a client
    /// whose request needs a larger buffer is refused and disconnected.
    pub max_total_query_bytes: ByteSize,
    /// Largest value accepted.
    pub max_value_bytes: ByteSize,
    /// Slots of each event loop's hot-entry cache (DPA-Store's: GETs of
    /// hot keys answered without a descent, validated against the leaf);
    /// 0 = none.
    pub hot_cache_entries: usize,
    /// Engine node size (power of two, 1 KiB .. 64 KiB).
    pub node_size_bytes: ByteSize,
    /// Live snapshots at most.
    pub max_snapshots: usize,
    /// Longest snapshot lifetime.
    pub max_snapshot_seconds: u64,
    /// Requests slower than this go to the slow log; negative = never.
    pub slowlog_log_slower_than: i64,
    /// Slow log entries kept.
    pub slowlog_max_len: usize,
    /// Refuse to listen where nothing protects the port: a client listener
    /// on a non-loopback address without a password, and a Raft address
    /// that is not loopback without peer TLS (Redis's protected mode, with
    /// the Raft port added).
    pub protected_mode: bool,
    /// This node's id in a replicated cluster; 0 = a single node.
    pub node_id: u64,
    /// The address this node's peers reach it at (Raft traffic).
    pub raft_addr: Option<SocketAddr>,
    /// Where the other nodes reach this one when that is not `raft_addr`
    /// (a proxy or a NAT in between); its own entry in `peers` must be
    /// this. None: `raft_addr`.
    pub raft_advertise: Option<SocketAddr>,
    /// This node's certificate for mutual TLS with the other nodes (PEM,
    /// its own certificate first), as etcd's `--peer-cert-file`. It must
    /// name every IP address the node connects from and the host of its
    /// Raft address.
    pub peer_cert_file: Option<PathBuf>,
    /// The key of `peer-cert-file`.
    pub peer_key_file: Option<PathBuf>,
    /// The cluster's CA (PEM): a peer's certificate must chain to it.
    pub peer_ca_cert_file: Option<PathBuf>,
    /// The cluster's first voters, `id=host:port,...`, this node among
    /// them: on its first start the node with the lowest id forms the
    /// cluster. Empty: the node waits to be added (`combkv cluster add`).
    pub peers: String,
    /// `linearizable` (the default) or `local`: served from this node's
    /// state without asking the leader, possibly stale.
    pub cluster_reads: ClusterReads,
    /// A cluster node takes a snapshot (and purges its Raft log behind it)
    /// once this many entries were applied since the last one ...
    pub cluster_snapshot_entries: u64,
    /// ... or once those entries take this many bytes of log, whichever
    /// comes first (0: never by bytes): what bounds the log on disk.
    pub cluster_snapshot_log_bytes: ByteSize,
    /// Entries kept in the Raft log behind a snapshot when it is purged, so
    /// that a follower a little behind catches up from the log.
    pub cluster_log_keep_entries: u64,
    /// Recent Raft log entries kept in memory; older ones are read from
    /// the log's files when a follower needs them.
    pub cluster_log_cache_bytes: ByteSize,
    /// A range whose keys and values pass this many bytes is split at the
    /// key that halves them, by its leader (0: never by size; ranges are
    /// then split by `CLUSTER SPLIT` alone).
    pub cluster_range_split_bytes: ByteSize,
    /// Voters each range but range 0 should have, placed by the meta
    /// group's leader so that nodes hold similar numbers of replicas (0:
    /// ranges stay on the nodes of the range they were split from).
    pub cluster_range_replicas: u64,
    /// A cluster member that has not answered the meta group's leader for
    /// this many seconds is placed as if it had left: the ranges it holds
    /// replicas of get replicas on the other nodes (0: never).
    pub cluster_node_down_seconds: u64,
    /// A range that takes this many requests a second or more (write ops
    /// applied, reads served by its leader's node) for three seconds in a
    /// row is split by its leader at the middle of its sampled keys (0:
    /// never by load).
    pub cluster_range_split_load: u64,
    /// A range whose keys and values, with those of the range after it on
    /// the same nodes, take fewer than this many bytes is merged with it by
    /// its leader (none: a fifth of `cluster_range_split_bytes`, so never
    /// while that is 0; 0: never).
    pub cluster_range_merge_bytes: Option<ByteSize>,
    /// The most, in milliseconds, that any two nodes' clocks may differ.
    /// Applying a write waits until the node's clock has passed the
    /// write's version by this much, so that a read across ranges on any
    /// node, whose timestamp comes from its own clock, sees every write
    /// acknowledged before it began (0: the nodes share one clock, as on
    /// one host).
    pub cluster_max_clock_offset: u64,
    /// Cut a corrupt write-ahead log (damage followed by valid data) and
    /// start, instead of refusing to: what `combkv check --repair` does.
    pub wal_truncate_corrupt: bool,
    /// Incremental checkpoints (the default): after a full one, each
    /// checkpoint writes only what changed since the one before (a delta
    /// run), and the background executor merges runs into a new full one.
    /// Off: every checkpoint is full.
    pub checkpoint_deltas: bool,
    /// Learned search of interior nodes (off by default): nodes whose keys
    /// all have one length get a piecewise-linear model searched in place
    /// of their shortcut lines where it reads fewer lines.
    pub learned_search: bool,
    /// memcached's `shutdown` command stops the server (memcached's `-A`,
    /// `--enable-shutdown`); off, it answers `ERROR: shutdown not enabled`.
    /// RESP's SHUTDOWN needs no setting (AUTH guards it, as in Redis).
    pub memcached_shutdown: bool,
    /// RESP on this unix socket too (Redis's `unixsocket`).
    pub unixsocket: Option<PathBuf>,
    /// memcached (text, meta, binary) on this unix socket too (memcached's
    /// `-s`).
    pub memcached_unixsocket: Option<PathBuf>,
    /// The unix sockets' permissions, octal digits as Redis writes them
    /// (`700`: the server's user only).
    pub unixsocketperm: u32,
    /// RESP over TLS on this port, on the IP of `resp` (Redis's
    /// `tls-port`); 0 = none. `tls-resp` gives the whole address instead.
    pub tls_port: u16,
    /// RESP over TLS at this address (or `off`).
    pub tls_resp: Listen,
    /// memcached (text, meta and binary) over TLS at this address (or
    /// `off`).
    pub tls_memcached: Listen,
    /// The metrics endpoint serves HTTPS instead of HTTP.
    pub tls_metrics: bool,
    /// The server's certificate chain (PEM), its own certificate first.
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `tls-cert-file` (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// The CAs client certificates must chain to (PEM).
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Whether TLS clients must present a certificate: no, optional or yes.
    pub tls_auth_clients: AuthClients,
    /// The file these settings were read from, if any: where CONFIG
    /// REWRITE writes.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

/// How a cluster node serves reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterReads {
    /// Every read sees every write acknowledged before it began (a read
    /// index from the leader, one quorum round for all reads waiting).
    Linearizable,
    /// This node's applied state, possibly behind the leader's.
    Local,
}

impl ClusterReads {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterReads::Linearizable => "linearizable",
            ClusterReads::Local => "local",
        }
    }
}

impl FromStr for ClusterReads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "linearizable" => Ok(ClusterReads::Linearizable),
            "local" => Ok(ClusterReads::Local),
            _ => Err(format!(
                "unknown cluster-reads '{s}' (expected linearizable or local)"
            )),
        }
    }
}

/// Parses `id=host:port,...` (`peers`).
pub fn parse_peers(s: &str) -> Result<Vec<(u64, SocketAddr)>, String> {
    let mut out: Vec<(u64, SocketAddr)> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("peer '{part}' is not id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| format!("peer '{part}': the id must be a number above 0"))?;
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|e| format!("peer '{part}': {e}"))?;
        if out.iter().any(|(i, _)| *i == id) {
            return Err(format!("peer id {id} is named twice"));
        }
        out.push((id, addr));
    }
    Ok(out)
}

/// At most 2^20 slots (128 MiB) per event loop.
const MAX_HOT_CACHE_ENTRIES: usize = 1 << 20;

/// Why the server could not start: one line for the operator. It lives
/// with the configuration, below every part that can refuse a start (the
/// cluster node, the store, the listeners).
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            resp: Listen::At(([127, 0, 0, 1], 6380).into()),
            memcached: Listen::At(([127, 0, 0, 1], 11212).into()),
            memcached_udp: Listen::Off,
            metrics: Listen::Off,
            data_dir: None,
            durability: None,
            threads: 0,
            maxmemory: ByteSize(0),
            requirepass: None,
            aclfile: None,
            log_level: "info".into(),
            log_format: "text".into(),
            latency_monitor_threshold: 0,
            maxclients: 10_000,
            max_request_bytes: ByteSize(128 << 20),
            max_reply_bytes: ByteSize(64 << 20),
            client_output_hard_limit: ByteSize(256 << 20),
            max_total_query_bytes: ByteSize(512 << 20),
            max_value_bytes: ByteSize(64 << 20),
            node_size_bytes: ByteSize(8192),
            hot_cache_entries: combkv::readexec::DEFAULT_HOT_CACHE_ENTRIES,
            max_snapshots: 1024,
            max_snapshot_seconds: 3600,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            protected_mode: true,
            node_id: 0,
            raft_addr: None,
            raft_advertise: None,
            peer_cert_file: None,
            peer_key_file: None,
            peer_ca_cert_file: None,
            peers: String::new(),
            cluster_reads: ClusterReads::Linearizable,
            cluster_snapshot_entries: 100_000,
            cluster_snapshot_log_bytes: ByteSize(256 << 20),
            cluster_log_keep_entries: 1000,
            cluster_log_cache_bytes: ByteSize(64 << 20),
            cluster_range_split_bytes: ByteSize(0),
            cluster_range_replicas: 0,
            cluster_node_down_seconds: 1800,
            cluster_range_split_load: 0,
            cluster_range_merge_bytes: None,
            cluster_max_clock_offset: 0,
            wal_truncate_corrupt: false,
            checkpoint_deltas: true,
            learned_search: false,
            memcached_shutdown: false,
            unixsocket: None,
            memcached_unixsocket: None,
            unixsocketperm: 700,
            tls_port: 0,
            tls_resp: Listen::Off,
            tls_memcached: Listen::Off,
            tls_metrics: false,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: AuthClients::Yes,
            config_file: None,
        }
    }
}

impl ServerConfig {
    /// `cluster-range-merge-bytes` as it applies: as set, or a fifth of the
    /// split size (PD merges regions below 20 MiB of its 96 MiB split).
    pub fn range_merge_bytes(&self) -> u64 {
        self.cluster_range_merge_bytes
            .map_or(self.cluster_range_split_bytes.0 / 5, |b| b.0)
    }
}

/// The smallest size a range may be split at (`cluster-range-split-bytes`).
pub const MIN_RANGE_SPLIT_BYTES: u64 = 64 << 10;

/// The largest `cluster-max-clock-offset`, ms: every write waits that
/// long, and clocks further apart need mending, not waiting out.
pub const MAX_CLOCK_OFFSET_MS: u64 = combkv_replica::ranges::MAX_CLOCK_OFFSET_MS;

impl ServerConfig {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<ServerConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let mut c: ServerConfig = toml::from_str(&text).map_err(|e| {
            format!(
                "bad config file {}: {}",
                path.display(),
                e.message().trim_end()
            )
        })?;
        c.config_file = Some(path.to_path_buf());
        Ok(c)
    }

    /// `unixsocketperm` as a mode (its digits are octal, as in Redis).
    pub fn unix_mode(&self) -> Result<u32, String> {
        u32::from_str_radix(&self.unixsocketperm.to_string(), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| {
                format!(
                    "unixsocketperm {} is not an octal mode (e.g. 700 or 770)",
                    self.unixsocketperm
                )
            })
    }

    /// The durability mode in effect.
    pub fn durability_mode(&self) -> DurabilityMode {
        self.durability.unwrap_or(if self.data_dir.is_some() {
            DurabilityMode::Always
        } else {
            DurabilityMode::None
        })
    }

    /// Event-loop threads in effect: one per core on a single node. A
    /// cluster node's loops leave half the cores to Raft (its runtime, the
    /// log's writer), and fewer loops make larger batches: each loop's
    /// turn is one proposal and one read-index request
    /// (`docs/experiments.md`, "Cluster").
    pub fn thread_count(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.threads > 0 {
            self.threads
        } else if self.node_id > 0 {
            (cores / 2).max(1)
        } else {
            cores
        }
    }

    /// Whether this node is part of a replicated cluster.
    pub fn clustered(&self) -> bool {
        self.node_id > 0
    }

    /// Checks what can be checked before binding anything.
    pub fn validate(&self) -> Result<(), String> {
        self.check_listeners_and_data()?;
        self.check_cluster()?;
        self.check_limits()?;
        self.check_log_level()?;
        self.check_peer_tls()?;
        self.check_tls()?;
        self.check_protected_mode()
    }

    /// At least one listener; a data directory for what needs one; no UDP
    /// with a password.
    fn check_listeners_and_data(&self) -> Result<(), String> {
        if self.resp == Listen::Off
            && self.memcached == Listen::Off
            && self.tls_resp_addr().is_none()
            && self.tls_memcached == Listen::Off
            && self.unixsocket.is_none()
            && self.memcached_unixsocket.is_none()
        {
            return Err(
                "every client listener is off (set --resp, --memcached, --tls-port or \
                 --tls-memcached)"
                    .into(),
            );
        }
        if self.durability_mode() != DurabilityMode::None && self.data_dir.is_none() {
            return Err(format!(
                "durability '{}' needs a data directory (--data-dir)",
                self.durability_mode().as_str()
            ));
        }
        if self.maxclients == 0 {
            return Err("maxclients must be at least 1".into());
        }
        self.unix_mode()?;
        for p in [&self.unixsocket, &self.memcached_unixsocket]
            .into_iter()
            .flatten()
        {
            // sun_path holds 108 bytes, its terminating NUL included.
            if p.as_os_str().len() > 107 {
                return Err(format!(
                    "unix socket path {} is over 107 bytes",
                    p.display()
                ));
            }
        }
        if self.unixsocket.is_some() && self.unixsocket == self.memcached_unixsocket {
            return Err("unixsocket and memcached-unixsocket are the same path".into());
        }
        if self.memcached_udp != Listen::Off && self.requirepass.is_some() {
            return Err(
                "memcached-udp cannot be used with requirepass: a datagram cannot \
                        authenticate (memcached disables UDP with authentication too)"
                    .into(),
            );
        }
        if self.wal_truncate_corrupt && self.data_dir.is_none() {
            return Err("wal-truncate-corrupt needs a data directory (--data-dir)".into());
        }
        Ok(())
    }

    /// A cluster node's settings, or none of them without `--node-id`.
    fn check_cluster(&self) -> Result<(), String> {
        if self.clustered() {
            if self.raft_addr.is_none() {
                return Err("a cluster node needs --raft-addr".into());
            }
            if self.data_dir.is_none() {
                return Err("a cluster node needs --data-dir (its Raft log lives there)".into());
            }
            let peers = parse_peers(&self.peers)?;
            if self.cluster_snapshot_entries == 0 {
                return Err("cluster-snapshot-entries must be at least 1".into());
            }
            if self.cluster_max_clock_offset > MAX_CLOCK_OFFSET_MS {
                return Err(format!(
                    "cluster-max-clock-offset must be 0 to {MAX_CLOCK_OFFSET_MS} ms (every write \
                     waits this long before it is acknowledged)"
                ));
            }
            if self.cluster_range_replicas > 7 {
                return Err("cluster-range-replicas must be 0 (off) to 7".into());
            }
            let split = self.cluster_range_split_bytes.0;
            if split != 0 && split < MIN_RANGE_SPLIT_BYTES {
                return Err(format!(
                    "cluster-range-split-bytes must be 0 (off) or at least {MIN_RANGE_SPLIT_BYTES} \
                     (each range is a Raft group and a store of its own)"
                ));
            }
            let merge = self.range_merge_bytes();
            if merge != 0 && split != 0 && merge > split / 2 {
                return Err(format!(
                    "cluster-range-merge-bytes ({merge}) must be at most half of \
                     cluster-range-split-bytes ({split}), or a merged range would split again"
                ));
            }
            if !peers.is_empty() && !peers.iter().any(|(id, _)| *id == self.node_id) {
                return Err(format!(
                    "--peers must name this node (id {}) among the first voters",
                    self.node_id
                ));
            }
        } else if self.raft_addr.is_some()
            || self.raft_advertise.is_some()
            || !self.peers.is_empty()
        {
            return Err(
                "--raft-addr, --raft-advertise and --peers need --node-id (a cluster node)".into(),
            );
        }
        Ok(())
    }

    /// Sizes and counts within their bounds.
    fn check_limits(&self) -> Result<(), String> {
        if self.max_value_bytes.0 > u64::from(u32::MAX) - 1024 {
            // memcached's binary protocol carries a value's length in 32 bits.
            return Err("max-value-bytes must be below 4 GiB".into());
        }
        if self.max_request_bytes.0 < 1024 {
            return Err("max-request-bytes must be at least 1024".into());
        }
        if self.max_reply_bytes.0 < 1024 {
            return Err("max-reply-bytes must be at least 1024".into());
        }
        if self.client_output_hard_limit.0 != 0
            && self.client_output_hard_limit.0 < self.max_reply_bytes.0
        {
            return Err(
                "client-output-hard-limit must be 0 (none) or at least max-reply-bytes".into(),
            );
        }
        if self.max_total_query_bytes.0 < self.max_request_bytes.0 {
            return Err("max-total-query-bytes must be at least max-request-bytes".into());
        }
        if self.hot_cache_entries > MAX_HOT_CACHE_ENTRIES {
            return Err(format!(
                "hot-cache-entries must be at most {MAX_HOT_CACHE_ENTRIES}"
            ));
        }
        if self.threads > 1024 {
            return Err("threads must be at most 1024".into());
        }
        Ok(())
    }

    fn check_log_level(&self) -> Result<(), String> {
        if !matches!(
            self.log_level.as_str(),
            "error" | "warn" | "info" | "debug" | "trace"
        ) {
            return Err(format!(
                "unknown log level '{}' (expected error, warn, info, debug or trace)",
                self.log_level
            ));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(format!(
                "unknown log format '{}' (expected text or json)",
                self.log_format
            ));
        }
        Ok(())
    }

    /// With protected mode, no listener that nothing protects on an
    /// address that is not loopback (`unprotected`).
    fn check_protected_mode(&self) -> Result<(), String> {
        if !self.protected_mode {
            return Ok(());
        }
        match self.unprotected().first() {
            Some((name, addr, why)) => Err(format!(
                "protected mode: {name} address {addr} is not loopback and {why}; \
                 protect it, or turn protected mode off (--protected-mode no)"
            )),
            None => Ok(()),
        }
    }

    /// Whether clients must authenticate before anything runs, as far as
    /// the settings tell: a password, or an ACL file (whose default user
    /// the server checks once it has loaded it: `Server::start`).
    pub fn clients_authenticate(&self) -> bool {
        self.requirepass.is_some() || self.aclfile.is_some()
    }

    /// Listeners on addresses that are not loopback with nothing to keep
    /// a stranger out: (setting, address, what is missing). Protected mode
    /// refuses to start with any; without it each is logged at start.
    pub fn unprotected(&self) -> Vec<(&'static str, SocketAddr, &'static str)> {
        let mut open = Vec::new();
        let exposed = |l: Listen| match l {
            Listen::At(a) if !a.ip().is_loopback() => Some(a),
            _ => None,
        };
        let clients = "clients need no password (set requirepass)";
        for (name, l) in [("resp", self.resp), ("memcached", self.memcached)] {
            if let Some(a) = exposed(l)
                && !self.clients_authenticate()
            {
                open.push((name, a, clients));
            }
        }
        // Over TLS, a required client certificate protects it as well.
        let tls_clients = "clients need neither a password nor a certificate \
                           (set requirepass, or tls-auth-clients yes)";
        let tls_resp = self.tls_resp_addr().map_or(Listen::Off, Listen::At);
        for (name, l) in [
            ("tls-resp", tls_resp),
            ("tls-memcached", self.tls_memcached),
        ] {
            if let Some(a) = exposed(l)
                && !self.clients_authenticate()
                && !self.tls_authenticates()
            {
                open.push((name, a, tls_clients));
            }
        }
        if let Some(a) = exposed(self.memcached_udp) {
            open.push(("memcached-udp", a, "a datagram cannot authenticate"));
        }
        if let Some(a) = exposed(self.metrics)
            && !(self.tls_metrics && self.tls_authenticates())
        {
            open.push((
                "metrics",
                a,
                "the metrics endpoint has no authentication \
                 (set tls-metrics yes with tls-auth-clients yes)",
            ));
        }
        if self.clustered()
            && let Some(a) = self.raft_addr
            && !a.ip().is_loopback()
            && !self.peer_tls()
        {
            open.push((
                "raft-addr",
                a,
                "anyone who reaches it can write, vote and replace the store \
                 (set peer-cert-file, peer-key-file and peer-ca-cert-file)",
            ));
        }
        open
    }

    /// Whether connections between nodes are mutual TLS.
    pub fn peer_tls(&self) -> bool {
        self.peer_cert_file.is_some()
    }

    /// The peer TLS files: all three settings or none.
    fn check_peer_tls(&self) -> Result<(), String> {
        let set = [
            self.peer_cert_file.is_some(),
            self.peer_key_file.is_some(),
            self.peer_ca_cert_file.is_some(),
        ];
        if set.contains(&true) && set.contains(&false) {
            return Err(
                "peer TLS needs all of peer-cert-file, peer-key-file and peer-ca-cert-file".into(),
            );
        }
        if set[0] && !self.clustered() {
            return Err("peer TLS settings need a cluster node (--node-id)".into());
        }
        Ok(())
    }

    /// The peer TLS files, for the replica.
    pub fn peer_tls_files(&self) -> Option<combkv_replica::PeerTlsFiles> {
        match (
            &self.peer_cert_file,
            &self.peer_key_file,
            &self.peer_ca_cert_file,
        ) {
            (Some(cert), Some(key), Some(ca)) => Some(combkv_replica::PeerTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            }),
            _ => None,
        }
    }

    /// The engine configuration these settings give.
    pub fn engine_config(&self) -> combkv::Config {
        combkv::Config {
            node_size_bytes: self.node_size_bytes.0 as usize,
            max_value_len: self.max_value_bytes.0 as usize,
            max_snapshots: self.max_snapshots,
            max_snapshot_age: std::time::Duration::from_secs(self.max_snapshot_seconds),
            learned_search: self.learned_search,
        }
    }

    /// An event loop's read results, with its hot-entry cache if any.
    pub fn read_results(&self) -> combkv::readexec::BatchResults {
        read_results_for(self.hot_cache_entries)
    }

    /// The data directory as CONFIG GET writes it: empty when none.
    fn data_dir_text(&self) -> String {
        self.data_dir
            .as_ref()
            .map_or(String::new(), |d| d.display().to_string())
    }

    /// `(name, value)` of every parameter, for CONFIG GET.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let listen = |l: Listen| match l {
            Listen::Off => "off".to_string(),
            Listen::At(a) => a.to_string(),
        };
        vec![
            ("resp", listen(self.resp)),
            ("memcached", listen(self.memcached)),
            ("memcached-udp", listen(self.memcached_udp)),
            ("unixsocket", path_text(&self.unixsocket)),
            (
                "memcached-unixsocket",
                path_text(&self.memcached_unixsocket),
            ),
            ("unixsocketperm", self.unixsocketperm.to_string()),
            ("metrics", listen(self.metrics)),
            ("data-dir", self.data_dir_text()),
            ("durability", self.durability_mode().as_str().into()),
            ("threads", self.thread_count().to_string()),
            ("maxmemory", self.maxmemory.0.to_string()),
            ("requirepass", self.requirepass.clone().unwrap_or_default()),
            ("aclfile", path_text(&self.aclfile)),
            ("log-level", self.log_level.clone()),
            ("log-format", self.log_format.clone()),
            (
                "latency-monitor-threshold",
                self.latency_monitor_threshold.to_string(),
            ),
            ("maxclients", self.maxclients.to_string()),
            ("max-request-bytes", self.max_request_bytes.0.to_string()),
            ("max-reply-bytes", self.max_reply_bytes.0.to_string()),
            (
                "client-output-hard-limit",
                self.client_output_hard_limit.0.to_string(),
            ),
            (
                "max-total-query-bytes",
                self.max_total_query_bytes.0.to_string(),
            ),
            ("max-value-bytes", self.max_value_bytes.0.to_string()),
            ("node-size-bytes", self.node_size_bytes.0.to_string()),
            ("hot-cache-entries", self.hot_cache_entries.to_string()),
            ("max-snapshots", self.max_snapshots.to_string()),
            (
                "max-snapshot-seconds",
                self.max_snapshot_seconds.to_string(),
            ),
            (
                "slowlog-log-slower-than",
                self.slowlog_log_slower_than.to_string(),
            ),
            ("slowlog-max-len", self.slowlog_max_len.to_string()),
            (
                "protected-mode",
                if self.protected_mode { "yes" } else { "no" }.into(),
            ),
            ("node-id", self.node_id.to_string()),
            (
                "raft-addr",
                self.raft_addr.map(|a| a.to_string()).unwrap_or_default(),
            ),
            (
                "raft-advertise",
                self.raft_advertise
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            ),
            ("peer-cert-file", path_text(&self.peer_cert_file)),
            ("peer-key-file", path_text(&self.peer_key_file)),
            ("peer-ca-cert-file", path_text(&self.peer_ca_cert_file)),
            ("peers", self.peers.clone()),
            ("cluster-reads", self.cluster_reads.as_str().into()),
            (
                "cluster-snapshot-entries",
                self.cluster_snapshot_entries.to_string(),
            ),
            (
                "cluster-snapshot-log-bytes",
                self.cluster_snapshot_log_bytes.0.to_string(),
            ),
            (
                "cluster-log-keep-entries",
                self.cluster_log_keep_entries.to_string(),
            ),
            (
                "cluster-log-cache-bytes",
                self.cluster_log_cache_bytes.0.to_string(),
            ),
            (
                "cluster-range-split-bytes",
                self.cluster_range_split_bytes.0.to_string(),
            ),
            (
                "cluster-range-replicas",
                self.cluster_range_replicas.to_string(),
            ),
            (
                "cluster-node-down-seconds",
                self.cluster_node_down_seconds.to_string(),
            ),
            (
                "cluster-range-split-load",
                self.cluster_range_split_load.to_string(),
            ),
            (
                "cluster-max-clock-offset",
                self.cluster_max_clock_offset.to_string(),
            ),
            (
                "cluster-range-merge-bytes",
                self.range_merge_bytes().to_string(),
            ),
            (
                "wal-truncate-corrupt",
                if self.wal_truncate_corrupt {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ),
            (
                "checkpoint-deltas",
                if self.checkpoint_deltas { "yes" } else { "no" }.into(),
            ),
            (
                "learned-search",
                if self.learned_search { "yes" } else { "no" }.into(),
            ),
            (
                "memcached-shutdown",
                if self.memcached_shutdown { "yes" } else { "no" }.into(),
            ),
        ]
        .into_iter()
        .chain(self.tls_listen_params())
        .chain(self.tls_file_params())
        .collect()
    }

    /// Redis's names for settings combkv has under its own names, answered
    /// by CONFIG GET (read only; not TOML keys): Redis tools read them, and
    /// an empty answer reads as a broken server (`redis-benchmark` warns
    /// "Could not fetch server CONFIG" without `save` and `appendonly`).
    /// Each value is what the setting means in Redis's terms.
    pub fn redis_params(&self) -> Vec<(&'static str, String)> {
        let bind = match self.resp {
            Listen::Off => String::new(),
            Listen::At(a) => a.ip().to_string(),
        };
        let logged = self.data_dir.is_some();
        vec![
            ("port", self.resp.port().to_string()),
            ("bind", bind),
            ("dir", self.data_dir_text()),
            // Every write is logged when there is a data directory; its
            // fsync policy is the durability mode.
            ("appendonly", if logged { "yes" } else { "no" }.into()),
            (
                "appendfsync",
                match self.durability_mode() {
                    DurabilityMode::Always => "always",
                    DurabilityMode::Everysec => "everysec",
                    DurabilityMode::None => "no",
                }
                .into(),
            ),
            // No RDB save points: checkpoints follow the log's size.
            ("save", String::new()),
            // At maxmemory writes are refused and nothing is evicted.
            ("maxmemory-policy", "noeviction".into()),
            // One keyspace (SELECT 0 only).
            ("databases", "1".into()),
            // Idle clients are never closed.
            ("timeout", "0".into()),
        ]
    }
}

/// A path setting as CONFIG GET shows it: empty when unset.
fn path_text(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map_or(String::new(), |p| p.display().to_string())
}

/// Read results with a hot-entry cache of `entries` slots (0: none): an
/// event loop's, at start and after CONFIG SET hot-cache-entries.
pub fn read_results_for(entries: usize) -> combkv::readexec::BatchResults {
    match entries {
        0 => combkv::readexec::BatchResults::new(),
        n => combkv::readexec::BatchResults::with_hot_cache(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_take_redis_units() {
        assert_eq!("100".parse::<ByteSize>().unwrap().0, 100);
        assert_eq!("4kb".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("2MB".parse::<ByteSize>().unwrap().0, 2 << 20);
        assert_eq!("1g".parse::<ByteSize>().unwrap().0, 1 << 30);
        assert!("12xb".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert!("99999999999999999999gb".parse::<ByteSize>().is_err());
    }

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_keys() {
        let c: ServerConfig =
            toml::from_str("resp = \"127.0.0.1:7000\"\nmemcached = \"off\"\nmaxmemory = \"1mb\"")
                .unwrap();
        assert_eq!(c.resp, Listen::At("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(c.memcached, Listen::Off);
        assert_eq!(c.maxmemory.0, 1 << 20);
        assert_eq!(c.maxclients, 10_000);
        assert!(toml::from_str::<ServerConfig>("no-such-key = 1").is_err());
    }

    #[test]
    fn validation_refuses_what_cannot_work() {
        let mut c = ServerConfig::default();
        assert!(c.validate().is_ok());
        c.resp = "0.0.0.0:6380".parse().unwrap();
        assert!(c.validate().unwrap_err().contains("not loopback"));
        c.requirepass = Some("pw".into());
        assert!(c.validate().is_ok(), "a password protects the listener");
        c.requirepass = None;
        c.protected_mode = false;
        assert!(c.validate().is_ok());
        c.durability = Some(DurabilityMode::Always);
        assert!(c.validate().unwrap_err().contains("--data-dir"));
        c.data_dir = Some("/tmp/x".into());
        assert!(c.validate().is_ok());
        assert_eq!(c.durability_mode(), DurabilityMode::Always);
        c.max_value_bytes = ByteSize(4 << 30);
        assert!(c.validate().unwrap_err().contains("below 4 GiB"));
        c.max_value_bytes = ByteSize(1 << 20);
        c.memcached_udp = "127.0.0.1:11212".parse().unwrap();
        c.requirepass = Some("pw".into());
        assert!(c.validate().unwrap_err().contains("memcached-udp"));
        // A cluster node's clock offset bound: a wait on every write.
        let mut c = ServerConfig {
            node_id: 1,
            raft_addr: Some("127.0.0.1:7001".parse().unwrap()),
            data_dir: Some("/tmp/x".into()),
            cluster_max_clock_offset: MAX_CLOCK_OFFSET_MS,
            ..ServerConfig::default()
        };
        assert!(c.validate().is_ok());
        c.cluster_max_clock_offset = MAX_CLOCK_OFFSET_MS + 1;
        assert!(
            c.validate()
                .unwrap_err()
                .contains("cluster-max-clock-offset")
        );
    }

    #[test]
    fn protected_mode_wants_peer_tls_on_a_raft_port_others_reach() {
        let mut c = ServerConfig {
            node_id: 1,
            data_dir: Some("/tmp/x".into()),
            raft_addr: Some("10.0.0.1:7001".parse().unwrap()),
            ..ServerConfig::default()
        };
        let err = c.validate().unwrap_err();
        assert!(
            err.contains("raft-addr") && err.contains("peer-cert-file"),
            "{err}"
        );
        c.peer_cert_file = Some("/c".into());
        assert!(c.validate().unwrap_err().contains("all of"));
        c.peer_key_file = Some("/k".into());
        c.peer_ca_cert_file = Some("/ca".into());
        assert!(c.validate().is_ok());
        assert!(c.peer_tls_files().is_some());
        c.peer_cert_file = None;
        c.peer_key_file = None;
        c.peer_ca_cert_file = None;
        c.protected_mode = false;
        assert!(c.validate().is_ok());
        assert_eq!(c.unprotected().len(), 1, "still reported, as a warning");
        c.raft_addr = Some("127.0.0.2:7001".parse().unwrap());
        assert!(c.unprotected().is_empty());
    }

    /// `combkv.example.toml` at the repository root: it parses, it is the
    /// built-in defaults, and it names every setting (commented out where
    /// the default is "none").
    #[test]
    fn the_example_config_is_every_setting_at_its_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../combkv.example.toml");
        let c = ServerConfig::from_file(&path).unwrap();
        c.validate().unwrap();
        assert_eq!(c.params(), ServerConfig::default().params());
        let text = std::fs::read_to_string(&path).unwrap();
        for (name, _) in ServerConfig::default().params() {
            let named = text.lines().any(|l| {
                let l = l.trim_start_matches("# ");
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            assert!(named, "combkv.example.toml does not name {name}");
        }
        // The commented-out examples are valid settings too.
        let uncommented: String = text
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| r.contains(" = "))
                    .unwrap_or(l)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let all: ServerConfig = toml::from_str(&uncommented).unwrap();
        assert_eq!(all.data_dir.as_deref(), Some(Path::new("/var/lib/combkv")));
        assert_eq!(all.durability, Some(DurabilityMode::Always));
        assert!(all.requirepass.is_some());
        all.validate().unwrap();
    }
}
