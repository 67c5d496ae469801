//! A real redis-server beside combkv, for tests that check combkv answers
//! the same bytes, and the raw exchanges they compare.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wire::Conn;

/// Sends `bytes` on a new connection; returns what came back within a
/// short quiet time, and whether the server closed the connection.
pub fn exchange(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, false),
        }
    }
}

/// Sends each command on one connection and returns each reply.
pub fn replies(addr: SocketAddr, cmds: &[Vec<&str>]) -> Vec<String> {
    let mut c = Conn::open(addr);
    cmds.iter()
        .map(|cmd| {
            let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
            String::from_utf8(c.cmd(&args)).unwrap()
        })
        .collect()
}

/// A redis-server on a free port, stopped on drop.
pub struct Redis(Child, pub SocketAddr);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts redis-server if `scripts/test` installed it (`scripts/peers`).
/// Without it the test fails, unless `COMBKV_SKIP_PEERS` is set.
pub fn redis() -> Option<Redis> {
    let check = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/peers"))
        .args(["check", "redis"])
        .output()
        .expect("running scripts/peers check");
    if !check.status.success() {
        let why = String::from_utf8_lossy(&check.stderr);
        assert!(
            std::env::var_os("COMBKV_SKIP_PEERS").is_some(),
            "{}; `scripts/test` installs it, or set COMBKV_SKIP_PEERS=1",
            why.trim()
        );
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {}", why.trim());
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let redis = Redis(child, addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() || exchange(addr, b"PING\r\n").0 != b"+PONG\r\n" {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(redis)
}
