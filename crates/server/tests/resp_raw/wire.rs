//! Raw RESP over TCP: an in-process server on a free port, a client that
//! sends exact bytes and reads back exactly one reply frame at a time.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

/// How long a test waits for a reply before failing (never reached when
/// the server answers; bounds a hang to a clear failure).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A test configuration: RESP on a free loopback port, memcached off, one
/// event loop, small value limit so "value too large" is cheap to reach.
pub fn config() -> ServerConfig {
    ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::Off,
        threads: 1,
        max_value_bytes: ByteSize(1024),
        ..Default::default()
    }
}

/// A running server that shuts down when dropped.
pub struct TestServer {
    server: Option<Server>,
}

impl TestServer {
    pub fn start(config: ServerConfig) -> TestServer {
        TestServer {
            server: Some(Server::start(config).expect("server starts")),
        }
    }

    pub fn connect(&self) -> Conn {
        let addr = self.server.as_ref().unwrap().resp_addr().unwrap();
        Conn::open(addr)
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

/// A server with the default test configuration.
pub fn server() -> TestServer {
    TestServer::start(config())
}

pub struct Conn {
    stream: TcpStream,
    /// Bytes read past the last returned frame.
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: std::net::SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// A second handle on the socket, for a thread that sends while this
    /// one reads the replies.
    pub fn sender(&self) -> TcpStream {
        self.stream.try_clone().expect("clone the socket")
    }

    /// Sends `args` as one multibulk request and returns its reply frame.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&encode(args));
        self.reply()
    }

    /// `cmd` with string arguments split on spaces (for readable tests).
    pub fn q(&mut self, line: &str) -> String {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        String::from_utf8(self.cmd(&args)).expect("utf-8 reply")
    }

    /// Sends `line` and asserts the exact reply.
    pub fn ok(&mut self, line: &str, want: &str) {
        let got = self.q(line);
        assert_eq!(got, want, "reply to {line:?}");
    }

    /// Reads one complete reply frame (RESP2 or RESP3).
    pub fn reply(&mut self) -> Vec<u8> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(n) = frame_len(&self.buf, 0) {
                return self.buf.drain(..n).collect();
            }
            assert!(Instant::now() < deadline, "no complete reply in time");
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk).expect("read reply");
            assert!(
                n > 0,
                "connection closed; partial reply {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn reply_str(&mut self) -> String {
        String::from_utf8(self.reply()).expect("utf-8 reply")
    }

    /// Asserts that the server closes the connection with nothing more to
    /// say.
    pub fn expect_closed(&mut self) {
        assert!(self.buf.is_empty(), "unread reply bytes before close");
        let mut b = [0u8; 256];
        match self.stream.read(&mut b) {
            Ok(0) => {}
            Ok(n) => panic!("expected close, got {:?}", String::from_utf8_lossy(&b[..n])),
            // A reset after the server closed with our bytes unread.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("expected close, got error {e}"),
        }
    }
}

/// RESP multibulk encoding of one request.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn line_end(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| at + p)
}

/// Length of the complete frame at `at`, or None if incomplete.
fn frame_len(b: &[u8], at: usize) -> Option<usize> {
    let kind = *b.get(at)?;
    let end = line_end(b, at)?;
    let head = std::str::from_utf8(&b[at + 1..end]).expect("ascii header");
    let after = end + 2;
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after - at),
        b'$' | b'=' | b'!' => {
            let n: i64 = head.parse().expect("bulk length");
            if n < 0 {
                return Some(after - at);
            }
            let total = after + n as usize + 2;
            (b.len() >= total).then_some(total - at)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n: i64 = head.parse().expect("aggregate length");
            if n < 0 {
                return Some(after - at);
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = after;
            for _ in 0..items {
                pos += frame_len(b, pos)?;
            }
            Some(pos - at)
        }
        other => panic!("unknown reply type {:?}", other as char),
    }
}

/// Bulk string reply.
pub fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// Flat array of bulk strings.
pub fn bulks(items: &[&str]) -> String {
    let mut out = format!("*{}\r\n", items.len());
    for i in items {
        out.push_str(&bulk(i));
    }
    out
}

pub fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

pub fn err(msg: &str) -> String {
    format!("-{msg}\r\n")
}

pub const OK: &str = "+OK\r\n";
pub const NIL: &str = "$-1\r\n";
pub const NIL_ARRAY: &str = "*-1\r\n";

pub fn arity(cmd: &str) -> String {
    err(&format!(
        "ERR wrong number of arguments for '{cmd}' command"
    ))
}

pub const SYNTAX: &str = "-ERR syntax error\r\n";
pub const NOT_INT: &str = "-ERR value is not an integer or out of range\r\n";
pub const KEY_TOO_LONG: &str = "-ERR key too long (max 460 bytes)\r\n";
pub const VALUE_TOO_LARGE: &str = "-ERR value too large (max 1024 bytes)\r\n";
pub const BAD_BOUND: &str = "-ERR min or max not valid string range item\r\n";

/// A key one byte over the limit.
pub fn long_key() -> String {
    "k".repeat(461)
}

/// A value one byte over the test limit.
pub fn big_value() -> String {
    "v".repeat(1025)
}

/// Parses an integer reply.
pub fn as_int(reply: &str) -> i64 {
    reply
        .strip_prefix(':')
        .and_then(|r| r.strip_suffix("\r\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {reply:?}"))
}
