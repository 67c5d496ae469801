//! A RESP2/RESP3 client that keeps each reply's type (a simple string and
//! a bulk string with the same text are different replies), and a
//! redis-server child to send the same commands to: the tests that compare
//! combkv's replies with Redis's use both.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One reply, as the wire typed it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// RESP2's `$-1`.
    NilBulk,
    /// RESP2's `*-1`.
    NilArray,
    Array(Vec<Value>),
    /// RESP3 `_`.
    Null,
    Double(String),
    Bool(bool),
    Verbatim(String),
    Map(Vec<(Value, Value)>),
    Set(Vec<Value>),
    /// Not a reply: the server closed the connection instead of answering.
    Closed,
    /// Not a reply: nothing came within the client's wait.
    NoReply,
}

impl Value {
    /// The text of a simple, bulk or verbatim string.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Simple(s) | Value::Verbatim(s) => Some(s.clone()),
            Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, open: &str, items: &[Value], close: &str| {
            write!(f, "{open}")?;
            for (i, v) in items.iter().enumerate() {
                write!(f, "{}{v}", if i == 0 { "" } else { ", " })?;
            }
            write!(f, "{close}")
        };
        match self {
            Value::Simple(s) => write!(f, "+{s}"),
            Value::Error(s) => write!(f, "-{s}"),
            Value::Int(n) => write!(f, ":{n}"),
            Value::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::NilBulk => write!(f, "$-1"),
            Value::NilArray => write!(f, "*-1"),
            Value::Array(items) => list(f, "[", items, "]"),
            Value::Null => write!(f, "_"),
            Value::Double(d) => write!(f, ",{d}"),
            Value::Bool(b) => write!(f, "#{}", if *b { 't' } else { 'f' }),
            Value::Verbatim(s) => write!(f, "={s:?}"),
            Value::Set(items) => list(f, "~{", items, "}"),
            Value::Map(pairs) => {
                write!(f, "%{{")?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    write!(f, "{}{k}: {v}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, "}}")
            }
            Value::Closed => write!(f, "<connection closed>"),
            Value::NoReply => write!(f, "<no reply>"),
        }
    }
}

/// Parses one reply from the front of `buf`: the value and the bytes it
/// took, `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&buf[1..eol]).into_owned();
    let rest = eol + 2;
    let count =
        || -> Result<i64, String> { line.parse().map_err(|_| format!("bad count {line:?}")) };
    let value = match kind {
        b'+' => Value::Simple(line),
        b'-' => Value::Error(line),
        b':' => Value::Int(count()?),
        b',' => Value::Double(line),
        b'#' => Value::Bool(line == "t"),
        b'_' => Value::Null,
        b'$' | b'=' | b'!' => {
            let n = count()?;
            if n < 0 {
                return Ok(Some((Value::NilBulk, rest)));
            }
            let end = rest + n as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            let body = buf[rest..end].to_vec();
            let v = match kind {
                b'$' => Value::Bulk(body),
                b'!' => Value::Error(String::from_utf8_lossy(&body).into_owned()),
                _ => Value::Verbatim(String::from_utf8_lossy(&body).into_owned()),
            };
            return Ok(Some((v, end + 2)));
        }
        b'*' | b'~' | b'%' | b'>' => {
            let n = count()?;
            if n < 0 {
                return Ok(Some((Value::NilArray, rest)));
            }
            let items = if kind == b'%' { 2 * n } else { n };
            let mut at = rest;
            let mut got = Vec::new();
            for _ in 0..items {
                match parse(&buf[at..])? {
                    Some((v, used)) => {
                        got.push(v);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            let v = match kind {
                b'%' => {
                    let mut it = got.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Value::Map(pairs)
                }
                b'~' => Value::Set(got),
                _ => Value::Array(got),
            };
            return Ok(Some((v, at)));
        }
        other => return Err(format!("unknown reply type {:?}", other as char)),
    };
    Ok(Some((value, rest)))
}

/// One connection that sends commands and reads their replies.
pub struct Client {
    s: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Client {
            s: Some(s),
            buf: Vec::new(),
        }
    }

    /// Sends `args` as one command and reads its reply; a closed
    /// connection or a silent server give `Closed` / `NoReply`.
    pub fn cmd(&mut self, args: &[&str]) -> Value {
        let Some(s) = self.s.as_mut() else {
            return Value::Closed;
        };
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        if s.write_all(&req).is_err() {
            self.s = None;
            return Value::Closed;
        }
        self.read(Duration::from_secs(5))
    }

    /// Sends `args` as one command without waiting for its reply.
    pub fn send(&mut self, args: &[&str]) {
        let Some(s) = self.s.as_mut() else { return };
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        if s.write_all(&req).is_err() {
            self.s = None;
        }
    }

    /// The next reply, waiting at most `wait` (`NoReply` if none came).
    pub fn reply(&mut self, wait: Duration) -> Value {
        self.read(wait)
    }

    /// The connection's local address, as the server sees its peer.
    pub fn local_addr(&self) -> SocketAddr {
        self.s
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .expect("an open connection")
    }

    fn read(&mut self, wait: Duration) -> Value {
        let deadline = Instant::now() + wait;
        let mut chunk = [0u8; 8192];
        loop {
            match parse(&self.buf) {
                Ok(Some((v, used))) => {
                    self.buf.drain(..used);
                    return v;
                }
                Ok(None) => {}
                Err(e) => panic!("{e}: {:?}", String::from_utf8_lossy(&self.buf)),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(s) = self.s.as_mut() else {
                return Value::Closed;
            };
            if left.is_zero() {
                return Value::NoReply;
            }
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut chunk) {
                Ok(0) => {
                    self.s = None;
                    return Value::Closed;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    self.s = None;
                    return Value::Closed;
                }
            }
        }
    }
}

/// A redis-server on a free port, stopped on drop.
pub struct Redis {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True when `scripts/peers` finds redis-server; without it the calling
/// test fails, unless `COMBKV_SKIP_PEERS` is set (then it is skipped).
pub fn redis_installed() -> bool {
    let check = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/peers"))
        .args(["check", "redis"])
        .output()
        .expect("running scripts/peers check");
    if check.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&check.stderr);
    assert!(
        std::env::var_os("COMBKV_SKIP_PEERS").is_some(),
        "{}; `scripts/test` installs it, or set COMBKV_SKIP_PEERS=1",
        why.trim()
    );
    eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {}", why.trim());
    false
}

impl Redis {
    /// Starts redis-server without persistence, with `aclfile` if given
    /// and `args` after the others.
    pub fn start(aclfile: Option<&Path>, args: &[&str]) -> Redis {
        let port = super::free_port();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        if let Some(path) = aclfile {
            cmd.arg("--aclfile").arg(path);
        }
        cmd.args(args);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let redis = Redis { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        // With a password, PING is answered NOAUTH: serving all the same.
        let answers = |want: &[u8]| super::ask(addr, b"PING\r\n", want, Duration::from_millis(300));
        while !answers(b"+PONG") && !answers(b"-NOAUTH") {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }
}

/// A redis-server and a combkv serve side by side, with a client of each:
/// what a test that compares their answers starts from. None (the test
/// returns) where redis-server is missing and `COMBKV_SKIP_PEERS` is set.
pub struct Beside {
    pub redis: Redis,
    pub combkv: super::Server,
    /// A client of redis-server.
    pub r: Client,
    /// A client of combkv.
    pub c: Client,
}

impl Beside {
    pub fn start() -> Option<Beside> {
        if !redis_installed() {
            return None;
        }
        let redis = Redis::start(None, &[]);
        let combkv = super::Server::start(&[], None);
        let (r, c) = (Client::connect(redis.addr), Client::connect(combkv.resp));
        Some(Beside {
            redis,
            combkv,
            r,
            c,
        })
    }
}
