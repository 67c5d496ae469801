//! Out of file descriptors, the listeners recover: `combkv serve` under an
//! open-files limit of 64 (soft and hard) takes bursts of connections
//! until it refuses them, hundreds of times, and afterwards new connections
//! on both ports are answered at once. Before the fix a listener that hit
//! EMFILE waited for a readiness edge that a full backlog never brings,
//! and the RESP port stopped accepting for good.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{Server, reset};

/// Connections opened and held at most: more than the limit and a
/// listener's backlog (128) together. The flood also ends after three
/// connects in a row fail: the backlog is full.
const FLOOD: usize = 1000;
/// Connections held at once per cycle at most.
const MOST_HELD: usize = 200;
const CYCLES: usize = 400;

/// Sends `req` on a new connection and waits a moment for `want`.
fn answered(s: &mut TcpStream, req: &[u8], want: &[u8]) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let mut buf = [0u8; 128];
    s.write_all(req).is_ok() && matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(want))
}

/// Opens connections to `addr`, each answered before the next, until one
/// is refused (an error reply, a close, no answer or no connection), then
/// resets them all. Returns how many were answered.
fn until_refused(addr: SocketAddr, req: &[u8], want: &[u8]) -> usize {
    let mut held = Vec::new();
    while held.len() < MOST_HELD {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else {
            break;
        };
        let ok = answered(&mut s, req, want);
        held.push(s);
        if !ok {
            break;
        }
    }
    for s in &held {
        reset(s);
    }
    held.len().saturating_sub(1)
}

/// Both ports answer a new connection within two seconds (connections
/// still being closed may get a "max clients" refusal meanwhile).
fn both_ports_answer(server: &Server, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let wait = Duration::from_millis(500);
    while !server.answers(wait) {
        assert!(
            Instant::now() < deadline,
            "the RESP port no longer answers {when}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    while !server.answers_memcached(wait) {
        assert!(
            Instant::now() < deadline,
            "the memcached port no longer answers {when}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn listeners_recover_after_running_out_of_descriptors() {
    let server = Server::start(&["--threads", "1", "--log-level", "error"], Some(64));
    // A flood of connections held open: past the limit the server has no
    // descriptor to accept them with, and they fill the listener's backlog
    // until connecting fails. Then they all go away.
    let mut held = Vec::new();
    let mut failed = 0;
    while held.len() < FLOOD && failed < 3 {
        match TcpStream::connect_timeout(&server.resp, Duration::from_millis(200)) {
            Ok(s) => {
                held.push(s);
                failed = 0;
            }
            Err(_) => failed += 1,
        }
    }
    for s in held.drain(..) {
        reset(&s);
    }
    both_ports_answer(&server, "after a flood of connections");
    let mut most = 0;
    for cycle in 0..CYCLES {
        let (addr, req, want): (_, &[u8], &[u8]) = if cycle % 2 == 0 {
            (server.resp, b"PING\r\n", b"+PONG\r\n")
        } else {
            (server.memcached, b"version\r\n", b"VERSION ")
        };
        most = most.max(until_refused(addr, req, want));
    }
    assert!(most > 0, "no connection was ever answered");
    both_ports_answer(&server, "after connect/close cycles");
}
