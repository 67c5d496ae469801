//! A client that sends but never reads cannot make the server's memory
//! grow without bound, and memory comes back when it leaves: `combkv serve
//! --maxmemory` holds a 4 MiB value; a raw socket asks for it over and over
//! (RESP: ~1,500 pipelined `GET big`; memcached: one `get` line naming it
//! 400 times) and reads nothing. The server's peak resident size (VmHWM of
//! its /proc status) stays within `PEAK_OVER_VALUE` of the value; after the
//! client leaves, the resident size comes back down and a write is
//! accepted again under `maxmemory` within a few seconds. Before the fix a
//! pipeline of batched GETs was answered as one batch whatever its size,
//! and a multi-key `get` as one request: gigabytes, and writes refused for
//! minutes afterwards.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{Server, read_until, reset, resp_cmd};

const VALUE: usize = 4 << 20;
/// How far above the value the server's peak resident size may go.
const PEAK_OVER_VALUE: u64 = 200 << 20;
/// `maxmemory`: a bit above the loaded data and the server's own memory.
const MAXMEMORY: &str = "64mb";
/// Resident size the server must come back under once the client left.
const SETTLED: u64 = 48 << 20;

fn start() -> Server {
    Server::start(&["--maxmemory", MAXMEMORY, "--log-level", "warn"], None)
}

/// Stores the 4 MiB value as `big`.
fn load(server: &Server) {
    let mut c = TcpStream::connect(server.resp).unwrap();
    resp_cmd(&mut c, &[b"SET", b"big", &vec![b'v'; VALUE]]);
    read_until(&mut c, b"+OK\r\n", Duration::from_secs(10));
}

/// Sends `flood` on a new connection and reads nothing for a while, then
/// resets the connection. Returns the server's peak resident size.
fn flood_without_reading(server: &Server, addr: SocketAddr, flood: &[u8]) -> u64 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(flood).unwrap();
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        peak = peak.max(server.memory().1);
        std::thread::sleep(Duration::from_millis(50));
    }
    reset(&c);
    drop(c);
    peak.max(server.memory().1)
}

/// After the flooding client left: the resident size comes back under
/// `SETTLED` and a write under `maxmemory` is accepted, within a few
/// seconds.
fn memory_comes_back(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut c = TcpStream::connect(server.resp).unwrap();
    loop {
        let rss = server.memory().0;
        resp_cmd(&mut c, &[b"SET", b"after", b"x"]);
        let reply = read_until(&mut c, b"\r\n", Duration::from_secs(5));
        if reply == b"+OK\r\n" && rss < SETTLED {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "5 s after the client left: resident {} MiB, SET answered {:?}",
            rss >> 20,
            String::from_utf8_lossy(&reply)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check_peak(peak: u64, what: &str) {
    assert!(
        peak < VALUE as u64 + PEAK_OVER_VALUE,
        "{what}: peak resident {} MiB, over {} MiB",
        peak >> 20,
        (VALUE as u64 + PEAK_OVER_VALUE) >> 20
    );
}

#[test]
fn pipelined_gets_that_are_never_read_hold_bounded_memory() {
    let server = start();
    load(&server);
    let flood = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(1500);
    let peak = flood_without_reading(&server, server.resp, &flood);
    check_peak(peak, "1,500 pipelined GETs");
    memory_comes_back(&server);
}

#[test]
fn a_multi_key_get_that_is_never_read_holds_bounded_memory() {
    let server = start();
    load(&server);
    let mut line = b"get".to_vec();
    for _ in 0..400 {
        line.extend_from_slice(b" big");
    }
    line.extend_from_slice(b"\r\n");
    let peak = flood_without_reading(&server, server.memcached, &line);
    check_peak(peak, "one get of 400 keys");
    memory_comes_back(&server);
}
