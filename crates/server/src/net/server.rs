//! Starting and stopping the server: open the store, bind the listeners,
//! start the event loops, the acceptor, housekeeping and metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use combkv::Store;
use mio::net::TcpListener;
use mio::{Poll, Waker};

use crate::config::{Listen, ServerConfig, StartError};
use crate::net::acceptor::{ACCEPTOR_WAKER, Acceptor};
use crate::net::event_loop::EventLoop;
use crate::state::{Node, Shared};

/// The sockets a server listens on; a listener that is off is `None`.
struct Listeners {
    resp: Option<TcpListener>,
    memcached: Option<TcpListener>,
    tls_resp: Option<TcpListener>,
    tls_memcached: Option<TcpListener>,
    memcached_udp: Option<std::net::UdpSocket>,
    metrics: Option<std::net::TcpListener>,
    /// RESP's and memcached's unix sockets, with their paths.
    unix: [Option<(mio::net::UnixListener, Arc<str>)>; 2],
}

/// The addresses the listeners were bound to.
struct Bound {
    resp: Option<SocketAddr>,
    memcached: Option<SocketAddr>,
    tls_resp: Option<SocketAddr>,
    tls_memcached: Option<SocketAddr>,
    memcached_udp: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Listeners {
    /// Binds every listener the configuration turns on.
    fn bind(config: &ServerConfig) -> Result<Listeners, StartError> {
        let resp = bind(config.resp, "resp")?;
        let memcached = bind(config.memcached, "memcached")?;
        let tls_resp = bind(
            config.tls_resp_addr().map_or(Listen::Off, Listen::At),
            "tls-resp",
        )?;
        let tls_memcached = bind(config.tls_memcached, "tls-memcached")?;
        let memcached_udp = match config.memcached_udp {
            Listen::Off => None,
            Listen::At(addr) => Some(std::net::UdpSocket::bind(addr).map_err(|e| {
                StartError(format!("cannot listen on {addr} (memcached UDP): {e}"))
            })?),
        };
        let metrics = match config.metrics {
            Listen::Off => None,
            Listen::At(addr) => Some(
                std::net::TcpListener::bind(addr)
                    .map_err(|e| StartError(format!("cannot listen on {addr} (metrics): {e}")))?,
            ),
        };
        let mode = config.unix_mode().map_err(StartError)?;
        let unix = [
            bind_unix(config.unixsocket.as_deref(), mode, "unixsocket")?,
            bind_unix(
                config.memcached_unixsocket.as_deref(),
                mode,
                "memcached-unixsocket",
            )?,
        ];
        Ok(Listeners {
            resp,
            memcached,
            tls_resp,
            tls_memcached,
            memcached_udp,
            metrics,
            unix,
        })
    }

    /// Writes into `config` what was bound, not what was asked for: port 0
    /// picks a free port, and INFO and CONFIG GET report the one in use.
    fn record_bound(&self, config: &mut ServerConfig) -> Bound {
        let addr = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        let bound = Bound {
            resp: addr(&self.resp),
            memcached: addr(&self.memcached),
            tls_resp: addr(&self.tls_resp),
            tls_memcached: addr(&self.tls_memcached),
            memcached_udp: self
                .memcached_udp
                .as_ref()
                .and_then(|s| s.local_addr().ok()),
            metrics: self.metrics.as_ref().and_then(|l| l.local_addr().ok()),
        };
        for (setting, at) in [
            (&mut config.resp, bound.resp),
            (&mut config.memcached, bound.memcached),
            (&mut config.memcached_udp, bound.memcached_udp),
            (&mut config.metrics, bound.metrics),
            (&mut config.tls_resp, bound.tls_resp),
            (&mut config.tls_memcached, bound.tls_memcached),
        ] {
            if let Some(a) = at {
                *setting = Listen::At(a);
            }
        }
        // The port in use is in tls-resp now; tls-port follows it.
        if let Some(a) = bound.tls_resp {
            config.tls_port = a.port();
        }
        bound
    }
}

/// Opens what this process serves, a single node's store or a cluster
/// node (its store and Raft node), and the data directory's lock a
/// cluster node holds. Recovery reports how far it got to `progress`.
fn open_node(
    config: &ServerConfig,
    progress: &Arc<combkv::RecoveryProgress>,
) -> Result<(Node, Option<combkv::durable::DirLock>), StartError> {
    if config.clustered() {
        // A cluster node's files (its Raft log and snapshots, under
        // `<data-dir>/cluster`) are written by no durable store, so no
        // store takes the directory's lock: the node takes it, before
        // it opens any of them, and holds it for the process's life.
        let lock = match &config.data_dir {
            Some(dir) => Some(combkv::durable::DirLock::acquire(dir).map_err(|e| {
                StartError(match e {
                    combkv::durable::LockError::InUse(d) => d.to_string(),
                    e => format!("cannot open data directory {}: {e}", dir.display()),
                })
            })?),
            None => None,
        };
        let c = crate::cluster::Cluster::start(config)?;
        Ok((Node::Cluster(Box::new(c)), lock))
    } else {
        // A single node's store holds the lock itself (`Store::open`).
        let store = open_store(config, Some(progress.clone()))?;
        Ok((Node::Single(Arc::new(store)), None))
    }
}

/// Starts the server's threads: the event loops, the acceptor,
/// housekeeping, and the memcached UDP and metrics listeners if on.
fn start_threads(
    shared: &Arc<Shared>,
    threads_n: usize,
    listeners: Listeners,
) -> Result<Vec<JoinHandle<()>>, StartError> {
    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    let mut senders = Vec::new();
    for i in 0..threads_n {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (ev, waker) = EventLoop::new(shared.clone(), rx)
            .map_err(|e| StartError(format!("cannot start event loop: {e}")))?;
        senders.push((tx, waker.clone()));
        wakers.push(waker);
        threads.push(spawn(format!("combkv-loop-{i}"), move || ev.run())?);
    }
    let poll = Poll::new().map_err(|e| StartError(format!("cannot create poll: {e}")))?;
    let acceptor_waker = Arc::new(
        Waker::new(poll.registry(), ACCEPTOR_WAKER)
            .map_err(|e| StartError(format!("cannot create waker: {e}")))?,
    );
    wakers.push(acceptor_waker);
    let _ = shared.wakers.set(wakers);
    let acceptor = Acceptor {
        poll,
        // In `acceptor::KINDS` order.
        listeners: [
            listeners.resp,
            listeners.memcached,
            listeners.tls_resp,
            listeners.tls_memcached,
        ],
        shared: shared.clone(),
        loops: senders,
        next: 0,
        unix: listeners.unix,
        stalled: [false; crate::net::acceptor::ALL],
    };
    threads.push(spawn("combkv-accept".into(), move || acceptor.run())?);
    let hk = shared.clone();
    threads.push(spawn("combkv-housekeeping".into(), move || {
        housekeeping(hk)
    })?);
    if let Some(socket) = listeners.memcached_udp {
        let u = shared.clone();
        threads.push(spawn("combkv-mc-udp".into(), move || {
            crate::memcache::udp::serve(socket, u)
        })?);
    }
    if let Some(l) = listeners.metrics {
        let m = shared.clone();
        threads.push(spawn("combkv-metrics".into(), move || {
            crate::net::metrics::serve(l, m)
        })?);
    }
    Ok(threads)
}

/// A running server. Dropping it does not stop it; call `shutdown`.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    resp_addr: Option<SocketAddr>,
    memcached_addr: Option<SocketAddr>,
    memcached_udp_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
}

/// Expired items the housekeeping thread deletes per tick at most.
const SWEEP_PER_TICK: usize = 20_000;
const HOUSEKEEPING_TICK: Duration = Duration::from_millis(100);

fn bind(l: Listen, what: &str) -> Result<Option<TcpListener>, StartError> {
    match l {
        Listen::Off => Ok(None),
        Listen::At(addr) => TcpListener::bind(addr)
            .map(Some)
            .map_err(|e| StartError(format!("cannot listen on {addr} ({what}): {e}"))),
    }
}

fn path_shown(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref()
        .map_or("off".to_string(), |p| p.display().to_string())
}

/// Binds a unix socket at `path` with `mode`. A socket file left by a
/// server that is gone is replaced (as Redis does); one a live server
/// answers on, or anything that is not a socket, is refused.
fn bind_unix(
    path: Option<&std::path::Path>,
    mode: u32,
    what: &str,
) -> Result<Option<(mio::net::UnixListener, Arc<str>)>, StartError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let Some(path) = path else {
        return Ok(None);
    };
    let shown = path.display();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(StartError(format!(
                "cannot listen on {shown} ({what}): it exists and is not a socket"
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(StartError(format!(
                "cannot listen on {shown} ({what}): another server is listening there"
            )));
        }
        std::fs::remove_file(path)
            .map_err(|e| StartError(format!("cannot replace the stale socket {shown}: {e}")))?;
    }
    let l = mio::net::UnixListener::bind(path)
        .map_err(|e| StartError(format!("cannot listen on {shown} ({what}): {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| StartError(format!("cannot set the mode of {shown} ({what}): {e}")))?;
    Ok(Some((l, Arc::from(path.to_string_lossy().as_ref()))))
}

/// Starts a named server thread.
fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, StartError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|e| StartError(format!("cannot start thread: {e}")))
}

/// Raises the open-files limit for `maxclients`, or lowers `maxclients`
/// to fit the limit (with a warning, as Redis does).
fn fit_descriptors(config: &mut ServerConfig) -> Result<(), StartError> {
    let own = crate::state::fdlimit::own_needs(config.thread_count(), config.data_dir.is_some());
    let Some(fitted) = crate::state::fdlimit::fit(config.maxclients, own) else {
        tracing::warn!("cannot read the open files limit (RLIMIT_NOFILE); maxclients unchecked");
        return Ok(());
    };
    if fitted.maxclients == config.maxclients {
        return Ok(());
    }
    if fitted.maxclients == 0 {
        return Err(StartError(format!(
            "the open files limit ({}, hard limit {}) leaves no descriptor for clients: \
             the server needs {own} for itself; raise it (ulimit -n)",
            fitted.limit, fitted.hard
        )));
    }
    tracing::warn!(
        "maxclients lowered from {} to {}: the open files limit is {} (hard limit {}) \
         and the server needs {own} descriptors beside its clients; raise it (ulimit -n) \
         to serve more",
        config.maxclients,
        fitted.maxclients,
        fitted.limit,
        fitted.hard
    );
    config.maxclients = fitted.maxclients;
    Ok(())
}

/// Warns of every port that others may reach and nothing protects
/// (served only with protected mode off), and says how memcached clients
/// authenticate when they must.
fn warn_unprotected(config: &ServerConfig) {
    for (name, addr, why) in config.unprotected() {
        tracing::warn!(
            "UNPROTECTED: {name} on {addr}, an address other hosts may reach, and {why}; \
             protected mode is off, so it is served anyway"
        );
    }
    if let Listen::At(addr) = config.memcached
        && config.requirepass.is_some()
    {
        tracing::info!(
            "memcached listener on {addr} requires authentication: \
             set <any key> 0 0 <bytes> with \"default <requirepass>\" as data"
        );
    }
}

pub(crate) fn open_store(
    config: &ServerConfig,
    progress: Option<Arc<combkv::RecoveryProgress>>,
) -> Result<Store, StartError> {
    let Some(dir) = &config.data_dir else {
        return Store::new(config.engine_config()).map_err(|e| StartError(e.to_string()));
    };
    let mode = config.durability_mode().engine();
    let durable = combkv::DurableConfig {
        delta_checkpoints: config.checkpoint_deltas,
        progress,
        ..combkv::DurableConfig::new(dir).with_mode(mode)
    };
    let (store, report) = Store::open(config.engine_config(), durable).map_err(|e| match e {
        // Says which directory and which process already.
        combkv::Error::InUse(d) => StartError(d.to_string()),
        e => StartError(format!("cannot open data directory {}: {e}", dir.display())),
    })?;
    tracing::info!(dir = %dir.display(), durability = %mode, "recovered: {report}");
    if report.tail_cut.is_some() || !report.skipped_checkpoints.is_empty() {
        tracing::warn!("recovery repaired the data directory: {report}");
    }
    Ok(store)
}

impl Server {
    /// Opens the store, binds every listener and starts serving.
    pub fn start(config: ServerConfig) -> Result<Server, StartError> {
        config.validate().map_err(StartError)?;
        warn_unprotected(&config);
        super::heap::tune();
        let mut config = config;
        fit_descriptors(&mut config)?;
        let tls = crate::state::tls::ClientTls::new(&config).map_err(StartError)?;
        let acl = crate::state::acl::Acl::new(
            crate::resp::cmd::table::acl_catalog(),
            config.requirepass.as_deref(),
            config.aclfile.clone(),
        )
        .map_err(|e| StartError(format!("aclfile: {e}")))?;
        // The ACL file's default user may have no password after all.
        if config.protected_mode && !acl.default_requires_auth() {
            let open = ServerConfig {
                requirepass: None,
                aclfile: None,
                ..config.clone()
            };
            if let Some((name, addr, _)) = open.unprotected().first() {
                return Err(StartError(format!(
                    "protected mode: {name} address {addr} is not loopback and the ACL file's \
                     default user needs no password; give it one, or turn protected mode off \
                     (--protected-mode no)"
                )));
            }
        }
        let listeners = Listeners::bind(&config)?;
        let threads_n = config.thread_count();
        let bound = listeners.record_bound(&mut config);
        let shared = Arc::new(Shared::new(config, tls, acl).map_err(StartError)?);
        let _ = shared
            .command_names
            .set(crate::state::cmdstats::CommandNames {
                resp: crate::resp::cmd::table::names(),
                memcached: crate::memcache::names::NAMES.to_vec(),
            });
        // Clients are served from here on, told `LOADING` until the node
        // is open (and, on a cluster node, caught up).
        let threads = start_threads(&shared, threads_n, listeners)?;
        let shown = |a: Option<SocketAddr>| a.map_or("off".to_string(), |a| a.to_string());
        tracing::info!(
            resp = %shown(bound.resp),
            memcached = %shown(bound.memcached),
            memcached_udp = %shown(bound.memcached_udp),
            metrics = %shown(bound.metrics),
            unixsocket = %path_shown(&shared.config.unixsocket),
            memcached_unixsocket = %path_shown(&shared.config.memcached_unixsocket),
            threads = threads_n,
            "combkv {} listening; loading the dataset",
            env!("CARGO_PKG_VERSION")
        );
        match open_node(&shared.config, &shared.readiness.progress) {
            Ok((node, lock)) => {
                shared.hold(lock);
                shared.serve(node);
            }
            Err(e) => {
                shared.stop();
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        crate::node::acl::follow(&shared);
        crate::node::readiness::check(&shared, 0);
        if shared.cluster().is_some() {
            tracing::info!("store open; catching up with the cluster's leader before serving");
        } else {
            tracing::info!("store open, serving: Ready to accept connections");
        }
        Ok(Server {
            shared,
            resp_addr: bound.resp,
            memcached_addr: bound.memcached,
            memcached_udp_addr: bound.memcached_udp,
            metrics_addr: bound.metrics,
            threads,
        })
    }

    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp_addr
    }
    pub fn memcached_addr(&self) -> Option<SocketAddr> {
        self.memcached_addr
    }
    /// The memcached UDP socket's address, when enabled.
    pub fn memcached_udp_addr(&self) -> Option<SocketAddr> {
        self.memcached_udp_addr
    }
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }
    /// The store served now (a cluster node's changes when it installs a
    /// snapshot).
    pub fn store(&self) -> Arc<Store> {
        self.shared.current_store()
    }

    /// A handle that can stop the server from another thread (signals).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            shared: self.shared.clone(),
        }
    }

    /// A handle that reloads certificate files from another thread
    /// (SIGHUP).
    pub fn reloader(&self) -> Reloader {
        Reloader {
            shared: self.shared.clone(),
        }
    }

    /// Blocks until a `Stopper` has stopped the server, then finishes:
    /// in-flight requests are answered and flushed, the store is closed.
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
        crate::node::admin::close(&self.shared);
        let c = &self.shared.config;
        for path in [&c.unixsocket, &c.memcached_unixsocket]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_file(path);
        }
        tracing::info!("combkv stopped");
    }

    /// Stops accepting, finishes in-flight requests, flushes, closes.
    pub fn shutdown(self) {
        self.stopper().stop();
        self.wait();
    }
}

/// Stops a running server.
#[derive(Debug, Clone)]
pub struct Stopper {
    shared: Arc<Shared>,
}

impl Stopper {
    pub fn stop(&self) {
        self.shared.stop();
    }
}

/// Reloads a running server's certificate files.
#[derive(Debug, Clone)]
pub struct Reloader {
    shared: Arc<Shared>,
}

impl Reloader {
    /// Reads every certificate and key file again; connections opened
    /// from now on use them, open ones carry on. A file that does not load
    /// leaves what was loaded before in use, and is logged.
    pub fn reload(&self) {
        match self.shared.tls.reload() {
            Ok(true) => tracing::info!("reloaded the client TLS certificate files"),
            Ok(false) => {}
            Err(e) => tracing::error!("client TLS files not reloaded, the old ones stay: {e}"),
        }
        if let Some(c) = self.shared.cluster() {
            match c.reload_peer_tls() {
                Ok(true) => tracing::info!("reloaded the peer TLS certificate files"),
                Ok(false) => {}
                Err(e) => tracing::error!("peer TLS files not reloaded, the old ones stay: {e}"),
            }
        }
    }
}

/// Reclaims what deletes left behind, samples memory, sweeps expired
/// items, and (with durability) lets the engine's own threads do
/// checkpoints; stops at shutdown.
fn housekeeping(shared: Arc<Shared>) {
    let mut tick = 0u64;
    while !shared.shutting_down.load(Ordering::Acquire) {
        if tick.is_multiple_of(TRIM_EVERY_TICKS) {
            super::heap::trim();
        }
        // Writers reclaim as they go, but a store that takes no writes (an
        // idle one, or one whose writes `maxmemory` refuses after a
        // FLUSHALL) would keep what it deleted counted forever: a pass per
        // tick frees it within a few ticks.
        crate::node::readiness::check(&shared, tick);
        match shared.cluster() {
            Some(c) => c.stores().iter().for_each(|s| s.reclaim()),
            None => shared.current_store().reclaim(),
        }
        shared.sample_memory();
        match shared.cluster() {
            // Only the leader deletes, through the log (see cluster.rs).
            Some(c) => c.reap(SWEEP_PER_TICK),
            None => {
                let started = std::time::Instant::now();
                shared.current_store().sweep_expired(SWEEP_PER_TICK);
                let ms = started.elapsed().as_millis() as u64;
                let threshold = shared.live.latency_monitor_threshold();
                if threshold > 0 && ms >= threshold {
                    shared.latency.record("expire-cycle", ms);
                }
            }
        }
        std::thread::sleep(HOUSEKEEPING_TICK);
        tick += 1;
    }
}

/// Housekeeping ticks between heap trims (one a second).
const TRIM_EVERY_TICKS: u64 = 10;
