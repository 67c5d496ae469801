//! TLS on the client listeners, with real clients and certificates made
//! for each test (rcgen):
//!
//! - `real_clients_over_tls`: redis-cli `--tls`, redis-py with `ssl=True`,
//!   the `redis` crate with rustls, pymemcache with a TLS context, a
//!   memcached binary request through rustls, the metrics endpoint over
//!   HTTPS, and `combkv cluster --tls` with a password;
//! - `client_certificates_required_and_refused`: with `tls-auth-clients
//!   yes`, no certificate and another CA's certificate are refused and
//!   counted, the CA's own accepted;
//! - `certificates_rotate_while_clients_stay_connected`: CONFIG SET and
//!   SIGHUP give new connections new certificates while a connected client
//!   goes on; files that do not load change nothing;
//! - `a_stalled_handshake_holds_no_loop`: on a single event loop, clients
//!   that connect and stall their handshake do not delay another, and are
//!   closed when their handshake time is up.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::Server;
use support::certs::{Ca, tls_client, tls_client_anonymous};

/// A test's directory, removed when the test passes.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("combkv-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

fn free_addr() -> SocketAddr {
    ([127, 0, 0, 1], support::free_port()).into()
}

/// `combkv serve` with a TLS RESP port, a TLS memcached listener and
/// HTTPS metrics, certificates from `ca`.
struct TlsServer {
    server: Server,
    tls_resp: SocketAddr,
    tls_memcached: SocketAddr,
    metrics: SocketAddr,
}

fn start(ca: &Ca, auth: &str, extra: &[&str]) -> TlsServer {
    let (cert, key) = ca.leaf_for("server", &["127.0.0.1", "localhost"]);
    let (tls_resp, tls_memcached, metrics) = (free_addr(), free_addr(), free_addr());
    let mut args: Vec<String> = [
        "--tls-resp",
        &tls_resp.to_string(),
        "--tls-memcached",
        &tls_memcached.to_string(),
        "--metrics",
        &metrics.to_string(),
        "--tls-metrics",
        "yes",
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.ca_file().to_str().unwrap(),
        "--tls-auth-clients",
        auth,
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TlsServer {
        server: Server::start(&args, None),
        tls_resp,
        tls_memcached,
        metrics,
    }
}

/// Sends `req` over TLS on a new connection and reads one line back.
fn tls_line(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    req: &[u8],
) -> std::io::Result<String> {
    let mut s = tls_connect(addr, config)?;
    s.write_all(req)?;
    s.flush()?;
    let mut line = String::new();
    BufReader::new(&mut s).read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line)
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn tls_connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> std::io::Result<TlsStream> {
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let conn =
        rustls::ClientConnection::new(Arc::clone(config), name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// A field of INFO, read over the plain RESP port.
fn info_field(server: &Server, field: &str) -> u64 {
    let mut con = redis::Client::open(format!("redis://{}/", server.resp))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field}"))
        .trim()
        .parse()
        .unwrap()
}

fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new("redis-cli").args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (
        out.status.success() && !text.contains("Could not connect"),
        text,
    )
}

#[test]
fn real_clients_over_tls() {
    let dir = Dir::new("clients");
    let ca = Ca::new(&dir.0, "ca");
    let s = start(&ca, "no", &["--requirepass", "s3cret"]);
    let cafile = ca.ca_file();
    let cafile = cafile.to_str().unwrap();
    let port = s.tls_resp.port().to_string();

    if support::peer_tool(&["check", "redis"]).is_some() {
        let tls = [
            "--tls",
            "--cacert",
            cafile,
            "-p",
            &port,
            "-a",
            "s3cret",
            "--no-auth-warning",
        ];
        let run = |cmd: &[&str]| {
            let args: Vec<&str> = tls.iter().chain(cmd).copied().collect();
            redis_cli(&args)
        };
        assert_eq!(run(&["SET", "cli:1", "one"]).1.trim(), "OK");
        assert_eq!(run(&["GET", "cli:1"]).1.trim(), "one");
        assert_eq!(run(&["RANGE", "[cli:", "[cli:~"]).1.trim(), "cli:1\none");
    }

    if let Some(python) = support::peer_tool(&["tool", "redis-py"]) {
        let script = format!(
            r#"
import ssl, sys, redis, pymemcache.client.base as mc
r = redis.Redis(host="127.0.0.1", port={port}, password="s3cret", ssl=True, ssl_ca_certs="{cafile}")
r.set("py:1", "two")
assert r.get("py:1") == b"two", r.get("py:1")
assert r.execute_command("RANGE", "[py:", "[py:~") == [b"py:1", b"two"]
ctx = ssl.create_default_context(cafile="{cafile}")
c = mc.Client(("127.0.0.1", {mport}), tls_context=ctx)
c.set("default", "default s3cret", noreply=False)
c.set("mc:1", b"three")
assert c.get("mc:1") == b"three", c.get("mc:1")
print("ok")
"#,
            mport = s.tls_memcached.port()
        );
        let out = Command::new(python).arg("-c").arg(script).output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The redis crate over rustls (ring as the process's provider).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{port}/"),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(cafile).unwrap()),
        },
    )
    .unwrap();
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("AUTH").arg("s3cret").query(&mut con).unwrap();
    let _: () = redis::cmd("SET")
        .arg("rs:1")
        .arg("four")
        .query(&mut con)
        .unwrap();
    let got: Vec<String> = redis::cmd("MGET")
        .arg(&["cli:1", "rs:1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(got, ["one", "four"]);
    // A large value over TLS: read through rustls into a buffer of its own
    // (a slice zeroed once, not the plain socket's read(2)), stored as it
    // was, and read back whole (copied: GET over TLS sends no shared bytes).
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let _: () = redis::cmd("SET")
        .arg("rs:big")
        .arg(&big)
        .query(&mut con)
        .unwrap();
    let back: Vec<u8> = redis::cmd("GET").arg("rs:big").query(&mut con).unwrap();
    assert!(back == big, "{} bytes back", back.len());
    let info: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
    for counted in [
        "large_values_received:1\r\n",
        "large_values_stored_uncopied:1\r\n",
        "large_values_sent_uncopied:0\r\n",
    ] {
        assert!(info.contains(counted), "{counted:?} not in {info}");
    }

    // memcached's binary protocol over TLS: a NOOP answers 0x81.
    let anon = tls_client_anonymous(&ca.ca_file());
    let mut bin = tls_connect(s.tls_memcached, &anon).unwrap();
    let mut noop = [0u8; 24];
    noop[0] = 0x80;
    noop[1] = 0x0a;
    bin.write_all(&noop).unwrap();
    let mut head = [0u8; 24];
    bin.read_exact(&mut head).unwrap();
    assert_eq!((head[0], head[1]), (0x81, 0x0a));

    // HTTPS metrics.
    let mut m = tls_connect(s.metrics, &anon).unwrap();
    m.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    let _ = m.read_to_string(&mut body);
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("combkv_tls_handshake_failures"));

    // combkv cluster over TLS, with the password: the node answers (it is
    // no cluster node), so TLS and AUTH went through.
    let out = Command::new(support::binary())
        .args(["cluster", "--server", &s.tls_resp.to_string(), "--tls"])
        .args(["--cacert", cafile, "--password", "s3cret", "status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a cluster node"), "{err}");
    let out = Command::new(support::binary())
        .args(["cluster", "--server", &s.tls_resp.to_string(), "--tls"])
        .args(["--cacert", cafile, "--password", "wrong", "status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WRONGPASS") || err.contains("invalid"),
        "{err}"
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir.0);
}

#[test]
fn client_certificates_required_and_refused() {
    let dir = Dir::new("auth");
    let ca = Ca::new(&dir.0, "ca");
    let other = Ca::new(&dir.0, "other");
    let s = start(&ca, "yes", &[]);
    let (good_cert, good_key) = ca.leaf_for("client", &["client"]);
    let (bad_cert, bad_key) = other.leaf_for("client", &["client"]);
    let good = tls_client(&ca.ca_file(), &good_cert, &good_key);
    let bad = tls_client(&ca.ca_file(), &bad_cert, &bad_key);
    let anon = tls_client_anonymous(&ca.ca_file());
    let before = info_field(&s.server, "tls_handshake_failures");

    assert_eq!(
        tls_line(s.tls_resp, &good, b"PING\r\n").unwrap(),
        "+PONG\r\n"
    );
    assert!(tls_line(s.tls_resp, &anon, b"PING\r\n").is_err());
    assert!(tls_line(s.tls_resp, &bad, b"PING\r\n").is_err());
    assert!(tls_line(s.tls_memcached, &anon, b"version\r\n").is_err());
    assert!(
        tls_line(s.tls_memcached, &good, b"version\r\n")
            .unwrap()
            .starts_with("VERSION")
    );
    if support::peer_tool(&["check", "redis"]).is_some() {
        let port = s.tls_resp.port().to_string();
        let cafile = ca.ca_file();
        let base = ["--tls", "--cacert", cafile.to_str().unwrap(), "-p", &port];
        let (_, text) = redis_cli(&[&base[..], &["PING"]].concat());
        assert!(!text.contains("PONG"), "{text}");
        let with_cert = [
            "--cert",
            good_cert.to_str().unwrap(),
            "--key",
            good_key.to_str().unwrap(),
            "PING",
        ];
        let (ok, text) = redis_cli(&[&base[..], &with_cert].concat());
        assert!(ok && text.contains("PONG"), "{text}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while info_field(&s.server, "tls_handshake_failures") < before + 3 {
        assert!(Instant::now() < deadline, "refusals not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir.0);
}

/// Replaces `path`'s contents at once (a temporary file renamed over it).
fn replace_file(path: &Path, from: &Path) {
    let tmp = path.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn certificates_rotate_while_clients_stay_connected() {
    let dir = Dir::new("rotate");
    let first = Ca::new(&dir.0, "first");
    let second = Ca::new(&dir.0, "second");
    let third = Ca::new(&dir.0, "third");
    let s = start(&first, "no", &[]);
    let trusts = |ca: &Ca| tls_client_anonymous(&ca.ca_file());
    let mut held = tls_connect(s.tls_resp, &trusts(&first)).unwrap();
    let ping = |s: &mut TlsStream| {
        s.write_all(b"PING\r\n").unwrap();
        s.flush().unwrap();
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"+PONG\r\n");
    };
    ping(&mut held);

    let mut con = redis::Client::open(format!("redis://{}/", s.server.resp))
        .unwrap()
        .get_connection()
        .unwrap();
    let (cert2, key2) = second.leaf_for("server", &["127.0.0.1"]);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(cert2.to_str().unwrap())
        .arg("tls-key-file")
        .arg(key2.to_str().unwrap())
        .query(&mut con)
        .unwrap();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-cert-file")
        .query(&mut con)
        .unwrap();
    assert_eq!(got[1], cert2.to_str().unwrap());
    ping(&mut held);
    assert_eq!(
        tls_line(s.tls_resp, &trusts(&second), b"PING\r\n").unwrap(),
        "+PONG\r\n"
    );
    assert!(tls_line(s.tls_resp, &trusts(&first), b"PING\r\n").is_err());

    // A key that does not match its certificate: refused, nothing changes.
    let (_, key3) = third.leaf_for("server", &["127.0.0.1"]);
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-key-file")
        .arg(key3.to_str().unwrap())
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("CONFIG SET failed"), "{err}");
    assert!(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("threads")
            .arg("5")
            .query::<()>(&mut con)
            .is_err()
    );
    assert_eq!(
        tls_line(s.tls_resp, &trusts(&second), b"PING\r\n").unwrap(),
        "+PONG\r\n"
    );

    // SIGHUP: the files in use, rewritten in place, are read again.
    let (cert3, key3) = third.leaf_for("server2", &["127.0.0.1"]);
    replace_file(&cert2, &cert3);
    replace_file(&key2, &key3);
    let pid = libc::pid_t::try_from(s.server.pid()).unwrap();
    // SAFETY: kill(2) with our own child's pid and a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tls_line(s.tls_resp, &trusts(&third), b"PING\r\n").is_err() {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not load the new files"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tls_line(s.tls_resp, &trusts(&second), b"PING\r\n").is_err());
    ping(&mut held);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir.0);
}

#[test]
fn a_stalled_handshake_holds_no_loop() {
    let dir = Dir::new("stall");
    let ca = Ca::new(&dir.0, "ca");
    let s = start(&ca, "no", &["--threads", "1"]);
    let before = info_field(&s.server, "tls_handshake_failures");
    // One says nothing; one sends half a ClientHello record.
    let silent = TcpStream::connect(s.tls_resp).unwrap();
    let mut half = TcpStream::connect(s.tls_resp).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01])
        .unwrap();
    let anon = tls_client_anonymous(&ca.ca_file());
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(
            tls_line(s.tls_resp, &anon, b"PING\r\n").unwrap(),
            "+PONG\r\n"
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
    // Their handshake time (10 s) over, both are closed and counted.
    for mut stalled in [silent, half] {
        stalled
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut buf = [0u8; 64];
        let t = Instant::now();
        match stalled.read(&mut buf) {
            Ok(0) | Err(_) => {}
            Ok(n) => assert!(buf[0] == 21, "{n} bytes: {:?}", &buf[..n]),
        }
        assert!(t.elapsed() < Duration::from_secs(15));
    }
    assert!(info_field(&s.server, "tls_handshake_failures") >= before + 2);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir.0);
}
