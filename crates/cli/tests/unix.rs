//! Unix-socket listeners: RESP at `unixsocket` (`redis-cli -s` and
//! `redis-benchmark -s` use it) and memcached at `memcached-unixsocket`,
//! with the mode `unixsocketperm` gives; a stale socket file is replaced, a
//! live server's is not, and the files go at shutdown.

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("combkv-unix-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sends `req` on the socket at `path` and reads until `end` ends the
/// reply.
fn ask(path: &Path, req: &[u8], end: &[u8]) -> String {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

#[test]
fn resp_and_memcached_serve_on_their_unix_sockets() {
    let dir = temp_dir("serve");
    let resp = dir.join("combkv.sock");
    let mc = dir.join("memcached.sock");
    // A stale socket file, as a crashed server leaves it.
    drop(std::os::unix::net::UnixListener::bind(&resp).unwrap());
    let mut server = support::Server::start(
        &[
            "--unixsocket",
            resp.to_str().unwrap(),
            "--memcached-unixsocket",
            mc.to_str().unwrap(),
            "--unixsocketperm",
            "770",
        ],
        None,
    );
    for p in [&resp, &mc] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o770, "{}", p.display());
    }
    assert_eq!(ask(&resp, b"PING\r\n", b"\r\n"), "+PONG\r\n");
    assert_eq!(
        ask(&resp, b"SET u 1\r\nGET u\r\n", b"$1\r\n1\r\n"),
        "+OK\r\n$1\r\n1\r\n"
    );
    let list = ask(&resp, b"CLIENT INFO\r\n", b"\n\r\n");
    let path = resp.display();
    assert!(
        list.contains(&format!("addr={path}:0 laddr={path}:0 ")),
        "{list}"
    );
    assert_eq!(
        ask(&mc, b"set m 0 0 2\r\nhi\r\nget m u\r\n", b"END\r\n"),
        "STORED\r\nVALUE m 0 2\r\nhi\r\nVALUE u 0 1\r\n1\r\nEND\r\n"
    );
    // The same data over TCP.
    assert!(support::ask(
        server.resp,
        b"GET m\r\n",
        b"$2\r\nhi",
        Duration::from_secs(5)
    ));

    // A second server may not take a live socket.
    let out = Command::new(support::binary())
        .args(["serve", "--resp", "off", "--memcached", "off"])
        .args(["--unixsocket", resp.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("another server is listening there"), "{said}");

    // SIGTERM: the socket files go with the server.
    // SAFETY: kill(2) with a child's pid and a signal number.
    let sent = unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(sent, 0);
    assert!(server.child.wait().unwrap().success());
    assert!(!resp.exists() && !mc.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `redis-cli -s` and `redis-benchmark -s`, the tools operators use.
#[test]
fn redis_tools_use_the_unix_socket() {
    if !support::resp::redis_installed() {
        return;
    }
    let dir = temp_dir("tools");
    let sock = dir.join("combkv.sock");
    let _server = support::Server::start(&["--unixsocket", sock.to_str().unwrap()], None);
    let sock = sock.to_str().unwrap();
    let cli = Command::new("redis-cli")
        .args(["-s", sock, "SET", "tool", "ok"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "OK");
    let cli = Command::new("redis-cli")
        .args(["-s", sock, "GET", "tool"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "ok");
    let bench = Command::new("redis-benchmark")
        .args(["-s", sock, "-t", "set,get", "-n", "2000", "-q"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&bench.stdout);
    assert!(bench.status.success(), "{out}");
    for t in ["SET", "GET"] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("{t}: ")) && l.contains("requests per second")),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
