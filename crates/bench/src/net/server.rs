//! Starting and stopping the servers under test, and reading their memory.
//!
//! Every server is a child of this process, started fresh per measurement
//! on a free loopback port and stopped with SIGTERM when its [`Server`] is
//! dropped: combkv as `combkv serve` (by default the `combkv` binary next
//! to `combkv-bench`, see [`super::combkv_bin`]), `redis-server` and
//! `memcached` with persistence off. The bench never installs anything: a
//! missing peer is an error that names `scripts/peers install`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::target::TargetKind;
use crate::{BenchError, Result};

/// How long a started server gets to answer its protocol's no-op.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server gets to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at starting a server: a port found free may be taken before the
/// server binds it.
const START_ATTEMPTS: usize = 5;
/// Memory memcached is allowed per record (`-m`), beyond key and value:
/// its item header (48-56 B) and slab rounding, with room to spare. Too
/// little would evict records, which the checker reports as missing.
const MEMCACHED_OVERHEAD_BYTES: u64 = 200;
/// Ports are drawn from here: above the well-known and registered ports the
/// servers default to (6379, 11211) and below Linux's ephemeral range
/// (32768-60999), so a port we pick is not one the kernel hands to an
/// outgoing connection meanwhile.
pub const PORT_RANGE: std::ops::RangeInclusive<u16> = 20000..=32000;

/// A loopback port in [`PORT_RANGE`] that nothing listens on now (checked by
/// binding it), starting at a random offset so that concurrent callers tend
/// to pick different ports.
pub fn free_port() -> Result<u16> {
    free_port_in(PORT_RANGE)
}

/// A loopback port in `range` that nothing listens on now.
pub fn free_port_in(range: std::ops::RangeInclusive<u16>) -> Result<u16> {
    let (from, to) = (*range.start(), *range.end());
    if from == 0 || from > to {
        return Err(BenchError(format!("no ports in {from}..={to}")));
    }
    let span = u32::from(to - from) + 1;
    let first = rand::rng().random_range(0..span);
    for i in 0..span {
        let port = from + ((first + i) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(BenchError(format!("every port in {from}..={to} is taken")))
}

/// The program a peer runs, found on `PATH`, or an error that says how to
/// install it.
fn peer_program(program: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            BenchError(format!(
                "{program} is not installed: run `scripts/peers install` \
                 (or apt-get install {package})"
            ))
        })
}

/// Resident bytes of process `pid` (`VmRSS` in `/proc/PID/status`).
pub fn rss_bytes_of(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&path).map_err(|e| BenchError(format!("reading {path}: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| BenchError(format!("no VmRSS line in {path}")))
}

/// Sends SIGTERM to `pid`.
fn sigterm(pid: u32) {
    // `kill` rather than libc: no unsafe for one signal per measurement.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// A running server under test.
#[derive(Debug)]
pub struct Server {
    name: &'static str,
    pid: u32,
    /// Where the bench's requests go.
    pub addr: SocketAddr,
    /// Our child; `None` for a server someone else runs.
    child: Option<Child>,
    log: Option<PathBuf>,
    stopped: bool,
}

/// What starts a target's server.
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// The `combkv` binary for the combkv targets.
    pub combkv_bin: PathBuf,
    /// Records to be loaded and their largest key and value, for sizing
    /// memcached's memory.
    pub records: u64,
    pub key_bytes_max: usize,
    pub value_bytes_max: usize,
    /// combkv: `--hot-cache-entries` (None: its default).
    pub hot_cache: Option<usize>,
}

/// The protocol whose no-op tells that a started server is ready.
#[derive(Clone, Copy, Debug)]
enum Probe {
    /// RESP `PING` on this address.
    Resp(SocketAddr),
    /// memcached `version` on this address.
    Memcached(SocketAddr),
}

impl Probe {
    fn answers(self) -> std::io::Result<()> {
        match self {
            Probe::Resp(a) => ping(a),
            Probe::Memcached(a) => memcached_version(a),
        }
    }
}

/// A command line to start on a fresh pair of ports, and where to reach it.
struct Launch {
    command: Command,
    addr: SocketAddr,
    probe: Probe,
}

impl Server {
    /// Starts a fresh server for `target` and waits until it answers.
    pub fn start(target: TargetKind, opts: &StartOptions) -> Result<Server> {
        match target {
            TargetKind::CombkvResp | TargetKind::CombkvMemcached => {
                let bin = opts.combkv_bin.clone();
                if !bin.is_file() {
                    return Err(BenchError(format!(
                        "no combkv binary at {} (build it with `cargo build --release -p \
                         combkv-cli`, or name it with --server-bin or COMBKV_BIN)",
                        bin.display()
                    )));
                }
                Server::launch("combkv", |resp_port, mc_port| {
                    let resp = SocketAddr::from(([127, 0, 0, 1], resp_port));
                    let mc = SocketAddr::from(([127, 0, 0, 1], mc_port));
                    let mut command = Command::new(&bin);
                    command
                        .args(["serve", "--resp", &resp.to_string()])
                        .args(["--memcached", &mc.to_string()])
                        .args(["--durability", "none"]);
                    if let Some(n) = opts.hot_cache {
                        command.args(["--hot-cache-entries", &n.to_string()]);
                    }
                    let addr = if target == TargetKind::CombkvResp {
                        resp
                    } else {
                        mc
                    };
                    Launch {
                        command,
                        addr,
                        probe: Probe::Resp(resp),
                    }
                })
            }
            TargetKind::Redis => {
                let program = peer_program("redis-server", "redis-server")?;
                Server::launch("redis", |port, _| {
                    let addr = SocketAddr::from(([127, 0, 0, 1], port));
                    let mut command = Command::new(&program);
                    // No RDB snapshots, no AOF: an in-memory peer, as combkv
                    // runs with --durability none in the bench.
                    command
                        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                        .args(["--save", "", "--appendonly", "no"])
                        .args(["--daemonize", "no", "--protected-mode", "yes"]);
                    Launch {
                        command,
                        addr,
                        probe: Probe::Resp(addr),
                    }
                })
            }
            TargetKind::Memcached => {
                let program = peer_program("memcached", "memcached")?;
                let per_record =
                    (opts.key_bytes_max + opts.value_bytes_max) as u64 + MEMCACHED_OVERHEAD_BYTES;
                // The run's inserts come on top of the load: twice the load's
                // estimate, and never below memcached's own default of 64 MB.
                let mb = (opts.records.saturating_mul(per_record).saturating_mul(2) >> 20).max(64);
                Server::launch("memcached", |port, _| {
                    let addr = SocketAddr::from(([127, 0, 0, 1], port));
                    let mut command = Command::new(&program);
                    // -U 0: no UDP listener; -c: enough connections for the
                    // bench; -u: memcached refuses to run as root without
                    // naming a user.
                    command
                        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
                        .args(["-m", &mb.to_string(), "-c", "4096"]);
                    if is_root() {
                        command.args(["-u", "root"]);
                    }
                    Launch {
                        command,
                        addr,
                        probe: Probe::Memcached(addr),
                    }
                })
            }
            other => Err(BenchError(format!("{other} is not a network target"))),
        }
    }

    /// A server that someone else started and will stop: the bench reads
    /// the memory of process `pid` and sends requests to `addr`.
    pub fn external(addr: SocketAddr, pid: u32) -> Server {
        Server {
            name: "external",
            pid,
            addr,
            child: None,
            log: None,
            stopped: true,
        }
    }

    /// Starts what `launch` builds for two free ports (the second for
    /// combkv's memcached listener) and waits for it to answer, trying
    /// fresh ports when a start fails.
    fn launch(name: &'static str, launch: impl Fn(u16, u16) -> Launch) -> Result<Server> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut second = free_port()?;
            while second == port {
                second = free_port()?;
            }
            let Launch {
                mut command,
                addr,
                probe,
            } = launch(port, second);
            let log = std::env::temp_dir().join(format!("combkv-bench-{name}-{port}.log"));
            let log_file = std::fs::File::create(&log)
                .map_err(|e| BenchError(format!("creating {}: {e}", log.display())))?;
            let log_err = log_file
                .try_clone()
                .map_err(|e| BenchError(format!("{}: {e}", log.display())))?;
            let child = command
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(log_err)
                .spawn()
                .map_err(|e| BenchError(format!("starting {name}: {e}")))?;
            let mut server = Server {
                name,
                pid: child.id(),
                addr,
                child: Some(child),
                log: Some(log.clone()),
                stopped: false,
            };
            match server.wait_until_ready(probe) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last = format!("{e}; its log ({}):\n{}", log.display(), tail(&log));
                    server.stop_now();
                }
            }
        }
        Err(BenchError(format!(
            "{name} did not start after {START_ATTEMPTS} attempts: {last}"
        )))
    }

    /// Polls the server's no-op until it answers.
    fn wait_until_ready(&mut self, probe: Probe) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.stopped = true;
                return Err(BenchError(format!("{} exited with {status}", self.name)));
            }
            if probe.answers().is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError(format!(
                    "{} did not answer on {:?} within {READY_TIMEOUT:?}",
                    self.name, probe
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Resident bytes of the server process.
    pub fn rss_bytes(&self) -> Result<u64> {
        rss_bytes_of(self.pid)
    }

    /// Stops the server (SIGTERM, then SIGKILL after a grace period).
    pub fn stop(mut self) -> Result<()> {
        self.stop_now();
        Ok(())
    }

    fn stop_now(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let Some(child) = self.child.as_mut() else {
            return;
        };
        sigterm(self.pid);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    eprintln!(
                        "combkv-bench: {} (pid {}) ignored SIGTERM for {STOP_TIMEOUT:?}; killing it",
                        self.name, self.pid
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        if let Some(log) = &self.log {
            let _ = std::fs::remove_file(log);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Whether this process runs as root (memcached then needs `-u root`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Sends memcached's `version` and expects `VERSION ...`.
fn memcached_version(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"version\r\n")?;
    let mut got = [0u8; 8];
    s.read_exact(&mut got)?;
    if &got == b"VERSION " {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "version answered {:?}",
            String::from_utf8_lossy(&got)
        )))
    }
}

/// Sends one `PING` and expects `+PONG`.
pub fn ping(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut got = [0u8; 7];
    s.read_exact(&mut got)?;
    if &got == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "PING answered {:?}",
            String::from_utf8_lossy(&got)
        )))
    }
}

/// The last lines of a log file, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}
