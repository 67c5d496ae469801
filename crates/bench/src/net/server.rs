//! Starting and stopping the servers under test, and reading their memory.
//!
//! `redis` and `memcached` go through `scripts/peers` (compiled into this
//! binary, run with bash): it installs the Debian package when missing and
//! starts the server on a free loopback port with persistence off. combkv
//! is started here as `combkv serve` from the same build. Every server is
//! fresh per measurement and stopped with SIGTERM when its [`Server`] is
//! dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::target::TargetKind;
use crate::{BenchError, Result};

/// `scripts/peers`, carried in the binary so that `combkv bench` works from
/// any directory.
pub const PEERS_SCRIPT: &str = include_str!("../../../../scripts/peers");

/// How long a started combkv server gets to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server gets to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at starting combkv: a port found free may be taken before the
/// server binds it.
const START_ATTEMPTS: usize = 3;
/// Memory memcached is allowed per record (`-m`), beyond key and value:
/// its item header (48-56 B) and slab rounding, with room to spare. Too
/// little would evict records, which the checker reports as missing.
const MEMCACHED_OVERHEAD_BYTES: u64 = 200;

/// Runs `scripts/peers` with `args`; returns its stdout.
pub fn peers(args: &[&str]) -> Result<String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(PEERS_SCRIPT)
        .arg("scripts/peers")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError(format!("running bash for scripts/peers: {e}")))?;
    if !out.status.success() {
        return Err(BenchError(format!(
            "scripts/peers {} failed ({})",
            args.join(" "),
            out.status
        )));
    }
    String::from_utf8(out.stdout).map_err(|_| BenchError::new("scripts/peers printed non-UTF-8"))
}

/// A free loopback port, by the script's rule.
pub fn free_port() -> Result<u16> {
    let out = peers(&["free-port"])?;
    out.trim()
        .parse()
        .map_err(|_| BenchError(format!("scripts/peers free-port printed {out:?}")))
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
    /// Our own child (combkv); peers are children of the script's shell.
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
}

impl Server {
    /// Starts a fresh server for `target` and waits until it answers.
    pub fn start(target: TargetKind, opts: &StartOptions) -> Result<Server> {
        match target {
            TargetKind::CombkvResp | TargetKind::CombkvMemcached => {
                Server::start_combkv(target, &opts.combkv_bin)
            }
            TargetKind::Redis => Server::start_peer("redis", &[]),
            TargetKind::Memcached => {
                let per_record =
                    (opts.key_bytes_max + opts.value_bytes_max) as u64 + MEMCACHED_OVERHEAD_BYTES;
                // The run's inserts come on top of the load: twice the load's
                // estimate, and never below memcached's own default of 64 MB.
                let mb = (opts.records.saturating_mul(per_record).saturating_mul(2) >> 20).max(64);
                Server::start_peer("memcached", &[&mb.to_string()])
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

    fn start_peer(name: &'static str, extra: &[&str]) -> Result<Server> {
        let mut args = vec!["start", name];
        args.extend_from_slice(extra);
        let out = peers(&args)?;
        let mut words = out.split_whitespace();
        let (Some(port), Some(pid), None) = (words.next(), words.next(), words.next()) else {
            return Err(BenchError(format!(
                "scripts/peers start {name} printed {out:?}, not \"PORT PID\""
            )));
        };
        let (Ok(port), Ok(pid)) = (port.parse::<u16>(), pid.parse::<u32>()) else {
            return Err(BenchError(format!(
                "scripts/peers start {name} printed {out:?}"
            )));
        };
        Ok(Server {
            name,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child: None,
            log: None,
            stopped: false,
        })
    }

    fn start_combkv(target: TargetKind, bin: &Path) -> Result<Server> {
        if !bin.is_file() {
            return Err(BenchError(format!(
                "no combkv binary at {} (build it with `cargo build --release -p combkv-cli`, \
                 or name it with --server-bin)",
                bin.display()
            )));
        }
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let resp_port = free_port()?;
            let mut mc_port = free_port()?;
            while mc_port == resp_port {
                mc_port = free_port()?;
            }
            let resp = SocketAddr::from(([127, 0, 0, 1], resp_port));
            let mc = SocketAddr::from(([127, 0, 0, 1], mc_port));
            let log = std::env::temp_dir().join(format!("combkv-bench-serve-{resp_port}.log"));
            let log_file = std::fs::File::create(&log)
                .map_err(|e| BenchError(format!("creating {}: {e}", log.display())))?;
            let log_err = log_file
                .try_clone()
                .map_err(|e| BenchError(format!("{}: {e}", log.display())))?;
            let child = Command::new(bin)
                .args(["serve", "--resp", &resp.to_string()])
                .args(["--memcached", &mc.to_string()])
                .args(["--durability", "none"])
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(log_err)
                .spawn()
                .map_err(|e| BenchError(format!("starting {}: {e}", bin.display())))?;
            let mut server = Server {
                name: "combkv",
                pid: child.id(),
                addr: if target == TargetKind::CombkvResp {
                    resp
                } else {
                    mc
                },
                child: Some(child),
                log: Some(log.clone()),
                stopped: false,
            };
            match server.wait_for_ping(resp) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last = format!("{e}; its log ({}):\n{}", log.display(), tail(&log));
                    server.stop_now();
                }
            }
        }
        Err(BenchError(format!(
            "combkv serve did not start after {START_ATTEMPTS} attempts: {last}"
        )))
    }

    /// Polls `PING` on the RESP listener until `+PONG` comes back.
    fn wait_for_ping(&mut self, resp: SocketAddr) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.stopped = true;
                return Err(BenchError(format!("combkv serve exited with {status}")));
            }
            if ping(resp).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError(format!(
                    "combkv serve did not answer PING on {resp} within {READY_TIMEOUT:?}"
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

    /// Stops the server (SIGTERM, then SIGKILL after a grace period) and
    /// checks that it went.
    pub fn stop(mut self) -> Result<()> {
        if self.stopped {
            // External, or already gone.
            return Ok(());
        }
        self.stop_now();
        if std::path::Path::new(&format!("/proc/{}", self.pid)).exists() && self.child.is_none() {
            // A peer that is not our child: gone once its /proc entry is.
            return Err(BenchError(format!(
                "{} (pid {}) did not stop",
                self.name, self.pid
            )));
        }
        Ok(())
    }

    fn stop_now(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        match self.child.as_mut() {
            Some(child) => {
                sigterm(self.pid);
                let deadline = Instant::now() + STOP_TIMEOUT;
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if Instant::now() > deadline => {
                            eprintln!(
                                "combkv bench: {} (pid {}) ignored SIGTERM for {STOP_TIMEOUT:?}; killing it",
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
            None => {
                let _ = peers(&["stop", &self.pid.to_string()]);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
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
