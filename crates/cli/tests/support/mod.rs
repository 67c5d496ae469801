//! What the process-level tests of `combkv serve` share: a server child
//! that is killed when the test ends, free ports, raw sockets, and the
//! child's memory as /proc reports it.
//!
//! `COMBKV_TEST_BIN` runs the tests against another build (e.g. one kept
//! from before a change) instead of this crate's binary.

#![allow(dead_code, reason = "each test binary uses a part")]

pub mod certs;
pub mod node;
pub mod proxy;
pub mod resp;
pub mod writes;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `combkv serve` child, killed on drop.
pub struct Server {
    pub child: Child,
    pub resp: SocketAddr,
    pub memcached: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `start` (a server started on ports it picks) until it succeeds,
/// up to five times: a port can be taken by something outside this
/// binary's picks between the pick and the bind (a clean-clone run met
/// "Address already in use" once). The fifth failure is the panic.
pub fn on_other_ports<T>(mut start: impl FnMut() -> Result<T, String>) -> T {
    for _ in 0..4 {
        match start() {
            Ok(started) => return started,
            Err(why) => eprintln!("{why}; other ports next"),
        }
    }
    start().unwrap_or_else(|why| panic!("{why}"))
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    free_port_on([127, 0, 0, 1].into())
}

/// Ports the tests give their servers: below Linux's ephemeral range
/// (32768-60999), so that no outgoing connection of a test running beside
/// this one takes the port between this check and the server's bind.
const TEST_PORTS: std::ops::Range<u16> = 20000..32000;

/// A port nothing listens on at `ip` now, never one this test binary
/// handed out before: tests side by side pick ports and then bind them
/// (in a child) a while later, so a check alone let two of them, or one
/// test's two listeners, pick the same port; a clean-clone run lost a test
/// to that once. One cursor per process, from a random start, walks
/// `TEST_PORTS` and skips ports something else listens on.
pub fn free_port_on(ip: std::net::IpAddr) -> u16 {
    use rand::Rng as _;
    use std::sync::Mutex;
    static CURSOR: Mutex<Option<u16>> = Mutex::new(None);
    let span = TEST_PORTS.end - TEST_PORTS.start;
    let mut cursor = CURSOR.lock().unwrap_or_else(|e| e.into_inner());
    let next = cursor.get_or_insert_with(|| rand::rng().random_range(0..span));
    for _ in 0..span {
        let port = TEST_PORTS.start + *next;
        *next = (*next + 1) % span;
        if TcpListener::bind((ip, port)).is_ok() {
            return port;
        }
    }
    panic!("no free test port on {ip}")
}

/// A number from the environment (a soak or replay setting), or `default`
/// when it is unset; a value that is no number stops the test.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// `scripts/peers ARGS` (a `check` or a `tool`): what it printed, or
/// `None` (skipped) with `COMBKV_SKIP_PEERS`; else a missing peer fails
/// the test.
pub fn peer_tool(args: &[&str]) -> Option<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/peers");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        return Some(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("COMBKV_SKIP_PEERS").is_some() {
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {}", why.trim());
        return None;
    }
    panic!("{}; `scripts/test` installs it first", why.trim());
}

/// The binary under test.
pub fn binary() -> String {
    std::env::var("COMBKV_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_combkv").into())
}

impl Server {
    /// Starts `combkv serve` on free ports with `args` after them; with
    /// `nofile`, under that open-files limit (soft and hard). Returns once
    /// the RESP port answers PING.
    ///
    /// A server that exits before it answers is started again on other
    /// ports ([`on_other_ports`]); a bad setting fails all five.
    pub fn start(args: &[&str], nofile: Option<u64>) -> Server {
        on_other_ports(|| Server::start_once(args, nofile))
    }

    fn start_once(args: &[&str], nofile: Option<u64>) -> Result<Server, String> {
        let resp: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let memcached: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut cmd = Command::new(binary());
        cmd.args(["serve", "--resp", &resp.to_string()])
            .args(["--memcached", &memcached.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(n) = nofile {
            // SAFETY: between fork and exec the closure only calls
            // setrlimit, which is async-signal-safe, on a local value.
            unsafe {
                cmd.pre_exec(move || {
                    let r = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("combkv starts");
        let mut server = Server {
            child,
            resp,
            memcached,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        // PING answers PONG once the store is loaded (LOADING before).
        // With requirepass it is answered NOAUTH whatever the loading, so
        // the password is given first; another password setting (an ACL
        // file's) leaves NOAUTH as the sign the server is up.
        let pass = args
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| args.get(i + 1));
        let wait = Duration::from_millis(500);
        let up = || match pass {
            Some(p) => ask(
                resp,
                format!("AUTH {p}\r\nPING\r\n").as_bytes(),
                b"+OK\r\n+PONG",
                wait,
            ),
            None => {
                ask(resp, b"PING\r\n", b"+PONG\r\n", wait)
                    || ask(resp, b"PING\r\n", b"-NOAUTH", wait)
            }
        };
        while !up() {
            // A server that could not start (a port taken by something
            // outside the tests, a bad setting) says why on stderr above.
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "combkv serve exited ({status}) before answering on {resp}"
                ));
            }
            assert!(Instant::now() < deadline, "no PONG from {resp}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// True if a new RESP connection gets +PONG within `wait`.
    pub fn answers(&self, wait: Duration) -> bool {
        ask(self.resp, b"PING\r\n", b"+PONG\r\n", wait)
    }

    /// True if a new memcached connection answers `version` within `wait`.
    pub fn answers_memcached(&self, wait: Duration) -> bool {
        ask(self.memcached, b"version\r\n", b"VERSION ", wait)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (VmRSS, VmHWM) of the server in bytes.
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// Sends `req` on a new connection; true if the reply starts with `want`
/// within `wait`.
pub fn ask(addr: SocketAddr, req: &[u8], want: &[u8], wait: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, wait) else {
        return false;
    };
    let deadline = Instant::now() + wait;
    if s.write_all(req).is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    reset(&s);
    got.starts_with(want)
}

/// Closes with a reset (SO_LINGER 0), so thousands of short connections
/// leave no TIME_WAIT behind to use up the local ports.
pub fn reset(s: &TcpStream) {
    use std::os::fd::AsRawFd as _;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a linger value of the size passed.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Sends one RESP command built from `args` and reads one reply line (or a
/// bulk reply's header and body) with `wait`.
pub fn resp_cmd(s: &mut TcpStream, args: &[&[u8]]) {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req).unwrap();
}

/// Whether nothing has come back on `s` yet (a request it sent still
/// waits for its answer), without waiting.
pub fn no_reply_yet(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let waiting = matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    waiting
}

/// Reads until `want` ends what was read, or panics after `wait`.
pub fn read_until(s: &mut TcpStream, want: &[u8], wait: Duration) -> Vec<u8> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !got.ends_with(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no {:?} within {wait:?}; got {:?}",
            String::from_utf8_lossy(want),
            String::from_utf8_lossy(&got[got.len().saturating_sub(200)..])
        );
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => panic!("closed; got {:?}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
    got
}
