//! Client memory limits, over raw sockets: a body `maxmemory` has no room
//! for is refused when its header arrives and skipped unread; the input
//! buffers of all clients together stay within `max-total-query-bytes`;
//! replies stop at the reply budget inside a batch and inside a multi-key
//! memcached `get`, and what was not answered is answered later, in order.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

/// The tests here run one at a time: each streams bodies of up to 70 MB
/// through this process (as client and server), and together they would
/// hold several of them at once.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(cfg: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut c = ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        ..Default::default()
    };
    cfg(&mut c);
    Server::start(c).expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads exactly `want.len()` bytes and compares.
fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

/// Reads until the peer closes.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

const OOM: &[u8] = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";

/// `maxmemory` of 32 MiB, which an empty store and its clients are far
/// below: room for bodies of up to about 16 MiB (half the room), not for
/// 60 MiB.
fn tight(c: &mut ServerConfig) {
    c.maxmemory = ByteSize(32 << 20);
}

/// Sends `n` bytes of `b` in pieces (the test need not hold a whole body).
fn send_bytes(s: &mut TcpStream, b: u8, n: usize) {
    let chunk = vec![b; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        s.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
}

#[test]
fn a_resp_body_without_room_is_refused_at_its_header_and_skipped() {
    let _serial = serial();
    let server = start(tight);
    let mut c = connect(server.resp_addr().unwrap());
    // The reply comes before any of the body is sent.
    c.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$67108864\r\n")
        .unwrap();
    expect(&mut c, OOM);
    // The body (sent in pieces) is skipped, and so is a further argument.
    send_bytes(&mut c, b'x', 64 << 20);
    c.write_all(b"\r\n*1\r\n$4\r\nPING\r\n").unwrap();
    expect(&mut c, b"+PONG\r\n");
    c.write_all(b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$70000000\r\n")
        .unwrap();
    expect(&mut c, OOM);
    send_bytes(&mut c, b'y', 70_000_002);
    c.write_all(b"$2\r\nEX\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .unwrap();
    expect(&mut c, b"$-1\r\n");
    // A body with room is read and stored.
    c.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n")
        .unwrap();
    c.write_all(&vec![b'z'; 100_000]).unwrap();
    c.write_all(b"\r\n").unwrap();
    expect(&mut c, b"+OK\r\n");
    server.shutdown();
}

#[test]
fn a_memcached_block_without_room_is_refused_at_its_line_and_skipped() {
    let _serial = serial();
    let server = start(tight);
    let mut c = connect(server.memcached_addr().unwrap());
    c.write_all(b"set k 0 0 67108864\r\n").unwrap();
    expect(&mut c, b"SERVER_ERROR out of memory storing object\r\n");
    send_bytes(&mut c, b'x', 67_108_866);
    c.write_all(b"ms k 60000000\r\n").unwrap();
    expect(&mut c, b"SERVER_ERROR out of memory storing object\r\n");
    send_bytes(&mut c, b'x', 60_000_002);
    c.write_all(b"get k\r\nset k 0 0 100000 noreply\r\n")
        .unwrap();
    expect(&mut c, b"END\r\n");
    c.write_all(&vec![b'z'; 100_000]).unwrap();
    c.write_all(b"\r\nmg k s\r\n").unwrap();
    expect(&mut c, b"HD s100000\r\n");
    server.shutdown();
}

#[test]
fn input_buffers_together_stay_within_max_total_query_bytes() {
    let _serial = serial();
    let server = start(|c| {
        c.max_request_bytes = ByteSize(4 << 20);
        c.max_total_query_bytes = ByteSize(6 << 20);
        c.max_value_bytes = ByteSize(4 << 20);
    });
    let addr = server.resp_addr().unwrap();
    let body = 3 << 20;
    let header = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${body}\r\n");
    // Two clients each send most of a 3 MiB body: the second one's buffer
    // would take the total past 6 MiB.
    let mut a = connect(addr);
    a.write_all(header.as_bytes()).unwrap();
    a.write_all(&vec![b'a'; body - 10]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut b = connect(addr);
    b.write_all(header.as_bytes()).unwrap();
    let _ = b.write_all(&vec![b'b'; body - 10]);
    let refused = read_to_close(&mut b);
    assert_eq!(
        String::from_utf8_lossy(&refused),
        "-ERR client query buffers are at max-total-query-bytes; closing connection\r\n"
    );
    // The first one finishes; small requests are always read.
    a.write_all(&[b'a'; 10]).unwrap();
    a.write_all(b"\r\n").unwrap();
    expect(&mut a, b"+OK\r\n");
    let mut c = connect(addr);
    c.write_all(b"PING\r\n").unwrap();
    expect(&mut c, b"+PONG\r\n");
    c.write_all(b"INFO stats\r\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut info = Vec::new();
    while !String::from_utf8_lossy(&info).contains("client_query_buffer_limit_disconnections:1") {
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&info)
        );
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).unwrap();
        info.extend_from_slice(&buf[..n]);
    }
    server.shutdown();
}

/// Replies stop once they pass `max-reply-bytes`, also inside a batch of
/// GETs and inside a `get` of many keys; the rest follows, in order, as the
/// client reads.
#[test]
fn replies_resume_in_order_after_the_budget() {
    let _serial = serial();
    let server = start(|c| c.max_reply_bytes = ByteSize(64 << 10));
    let value = vec![b'v'; 30_000];
    let mut r = connect(server.resp_addr().unwrap());
    let mut set = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$30000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    r.write_all(&set).unwrap();
    expect(&mut r, b"+OK\r\n");
    let mut want = Vec::new();
    let mut req = Vec::new();
    for i in 0..40 {
        if i % 7 == 3 {
            req.extend_from_slice(b"*2\r\n$4\r\nECHO\r\n$1\r\ne\r\n");
            want.extend_from_slice(b"$1\r\ne\r\n");
        } else {
            req.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
            want.extend_from_slice(b"$30000\r\n");
            want.extend_from_slice(&value);
            want.extend_from_slice(b"\r\n");
        }
    }
    r.write_all(&req).unwrap();
    expect(&mut r, &want);
    let mut m = connect(server.memcached_addr().unwrap());
    let mut line = b"get".to_vec();
    let mut want = Vec::new();
    for i in 0..30 {
        let key: &[u8] = if i % 5 == 2 { b"nokey" } else { b"big" };
        line.push(b' ');
        line.extend_from_slice(key);
        if key == b"big" {
            want.extend_from_slice(b"VALUE big 0 30000\r\n");
            want.extend_from_slice(&value);
            want.extend_from_slice(b"\r\n");
        }
    }
    line.extend_from_slice(b"\r\nmn\r\n");
    want.extend_from_slice(b"END\r\nMN\r\n");
    m.write_all(&line).unwrap();
    expect(&mut m, &want);
    server.shutdown();
}
