//! Figures, run by hand: the peak and settled resident size of servers fed
//! the two amplification cases of `memory_bounds.rs` (a 4 MiB value asked
//! for by 1,500 pipelined RESP `GET big`, and by one memcached `get` line
//! naming it 400 times, never read), for combkv builds and for
//! redis-server (RESP case) and memcached (memcached case), in one run.
//!
//! ```text
//! COMBKV_FIGURES_BINS="before=/tmp/combkv-harden-before,after=target/release/combkv" \
//!     cargo test --release -p combkv-cli --test memory_figures -- --ignored --nocapture
//! ```
//!
//! `COMBKV_FIGURES_BINS` names the combkv builds (`name=path`, comma
//! separated; default: this crate's binary as `this`). `COMBKV_FIGURES_PEERS=0`
//! leaves redis-server and memcached out. Each server is a fresh process;
//! the client floods for 3 s and leaves; peak is the server's VmHWM and
//! settled its VmRSS 5 s after the client left; base is VmRSS with the
//! value loaded, before the flood.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, read_until, reset, resp_cmd};

const VALUE: usize = 4 << 20;

/// A server process of any kind, killed on drop.
struct Proc {
    child: Child,
    resp: Option<SocketAddr>,
    memcached: Option<SocketAddr>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(cmd: &mut Command, resp: Option<SocketAddr>, memcached: Option<SocketAddr>) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server starts");
        let p = Proc {
            child,
            resp,
            memcached,
        };
        let addr = resp.or(memcached).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nothing listens on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        p
    }

    /// (VmRSS, VmHWM) in MiB.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                / 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

fn loopback() -> SocketAddr {
    ([127, 0, 0, 1], free_port()).into()
}

fn combkv(bin: &str) -> Proc {
    let (r, m) = (loopback(), loopback());
    Proc::spawn(
        Command::new(bin).args([
            "serve",
            "--resp",
            &r.to_string(),
            "--memcached",
            &m.to_string(),
            "--log-level",
            "error",
        ]),
        Some(r),
        Some(m),
    )
}

fn redis() -> Proc {
    let r = loopback();
    Proc::spawn(
        Command::new("redis-server").args([
            "--port",
            &r.port().to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]),
        Some(r),
        None,
    )
}

fn memcached() -> Proc {
    let m = loopback();
    Proc::spawn(
        Command::new("memcached").args([
            "-p",
            &m.port().to_string(),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-I",
            "8m",
            "-m",
            "1024",
            "-u",
            "root",
        ]),
        None,
        Some(m),
    )
}

/// (base, peak, settled) in MiB for one server and one case.
fn measure(p: &Proc, resp_case: bool) -> (u64, u64, u64) {
    let value = vec![b'v'; VALUE];
    let flood = if resp_case {
        let mut c = TcpStream::connect(p.resp.unwrap()).unwrap();
        resp_cmd(&mut c, &[b"SET", b"big", &value]);
        read_until(&mut c, b"+OK\r\n", Duration::from_secs(10));
        b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(1500)
    } else {
        let mut c = TcpStream::connect(p.memcached.unwrap()).unwrap();
        c.write_all(format!("set big 0 0 {VALUE}\r\n").as_bytes())
            .unwrap();
        c.write_all(&value).unwrap();
        c.write_all(b"\r\n").unwrap();
        read_until(&mut c, b"STORED\r\n", Duration::from_secs(10));
        let mut line = b"get".to_vec();
        for _ in 0..400 {
            line.extend_from_slice(b" big");
        }
        line.extend_from_slice(b"\r\n");
        line
    };
    drop(value);
    std::thread::sleep(Duration::from_millis(300));
    let base = p.memory().0;
    let addr = if resp_case { p.resp } else { p.memcached };
    let mut c = TcpStream::connect(addr.unwrap()).unwrap();
    c.write_all(&flood).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    reset(&c);
    drop(c);
    std::thread::sleep(Duration::from_secs(5));
    // VmHWM is the process's high-water mark: read last, it covers a
    // server still answering when the client left.
    let (settled, peak) = p.memory();
    (base, peak, settled)
}

#[test]
#[ignore = "figures, run by hand (see the file's comment)"]
fn amplification_figures() {
    let bins = std::env::var("COMBKV_FIGURES_BINS")
        .unwrap_or_else(|_| format!("this={}", env!("CARGO_BIN_EXE_combkv")));
    let peers = std::env::var("COMBKV_FIGURES_PEERS").map_or(true, |v| v != "0");
    let mut rows = Vec::new();
    for (case, resp_case) in [
        ("1,500 pipelined GET (RESP)", true),
        ("get x400 (memcached)", false),
    ] {
        for spec in bins.split(',') {
            let (name, path) = spec.split_once('=').expect("name=path");
            let p = combkv(path);
            rows.push((case, format!("combkv {name}"), measure(&p, resp_case)));
        }
        if peers {
            let (name, p) = if resp_case {
                ("redis-server", redis())
            } else {
                ("memcached", memcached())
            };
            rows.push((case, name.to_string(), measure(&p, resp_case)));
        }
    }
    println!("| case | server | base RSS (MiB) | peak RSS (MiB) | settled RSS (MiB) |");
    println!("|---|---|---|---|---|");
    for (case, server, (base, peak, settled)) in rows {
        println!("| {case} | {server} | {base} | {peak} | {settled} |");
    }
}
