//! Readiness (`docs/operations.md`): a node that is still recovering
//! answers `LOADING` (RESP) and `SERVER_ERROR` (memcached), never a wrong
//! or missing value, and `/readyz` says 503 until it serves; a node whose
//! disk fills says why it is not ready, and a restart once space is back
//! serves every acknowledged write; the service manager hears READY=1.
//! (A cluster node that restarts behind its leader: `cluster.rs`.)

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::resp::{Client, Value};
use support::{binary, free_port, on_other_ports};

/// A `combkv serve` child on a data directory, killed on drop; unlike
/// `support::Server` it does not wait for the node to serve.
struct Node {
    child: Child,
    resp: SocketAddr,
    memcached: SocketAddr,
    metrics: SocketAddr,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Starts a node and waits until its three ports listen (it binds
    /// them before it recovers its store). One that exits first is taken
    /// to have found a port taken and is started again on other ports
    /// (`support::on_other_ports`).
    fn spawn(dir: &Path, extra: &[&str]) -> Node {
        on_other_ports(|| {
            let mut node = Node::start(dir, extra);
            node.listening().map(|()| node)
        })
    }

    /// Waits until its ports all listen; an error if it exited first.
    fn listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let open = |a: &SocketAddr| TcpStream::connect_timeout(a, Duration::from_millis(200));
            if [self.resp, self.memcached, self.metrics]
                .iter()
                .all(|a| open(a).is_ok())
            {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("the node exited ({status}) before it listened"));
            }
            assert!(
                Instant::now() < deadline,
                "the node did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start(dir: &Path, extra: &[&str]) -> Node {
        let at = |p: u16| -> SocketAddr { ([127, 0, 0, 1], p).into() };
        let (resp, memcached, metrics) = (at(free_port()), at(free_port()), at(free_port()));
        let child = Command::new(binary())
            .args(["serve", "--data-dir", dir.to_str().unwrap()])
            .args(["--resp", &resp.to_string()])
            .args(["--memcached", &memcached.to_string()])
            .args(["--metrics", &metrics.to_string()])
            .args(["--log-level", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("combkv starts");
        Node {
            child,
            resp,
            memcached,
            metrics,
        }
    }

    /// (status, body) of `GET path` on the metrics listener; None while it
    /// does not answer.
    fn probe(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics, path)
    }

    /// Waits for `/readyz` to answer 200; fails at once if the node
    /// exited, and says what `/readyz` last answered if it never did.
    fn wait_ready(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let probe = self.probe("/readyz");
            if probe.as_ref().is_some_and(|p| p.0 == 200) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the node exited ({status}) before it was ready");
            }
            assert!(
                Instant::now() < deadline,
                "not ready within {within:?}; /readyz last answered {probe:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and waits for a clean exit.
    fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) with a child's pid and a signal number.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("combkv-ready-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn key(i: u64) -> String {
    format!("key:{i:08}")
}

fn value(i: u64) -> String {
    format!("value-{i}-{}", i.wrapping_mul(0x9e37_79b9) % 1000)
}

/// Writes keys `from..to` with MSETs of 1,000 pairs, pipelined.
fn fill(resp: SocketAddr, from: u64, to: u64) {
    let mut s = TcpStream::connect(resp).unwrap();
    let mut sent = 0;
    let mut i = from;
    while i < to {
        let end = (i + 1000).min(to);
        let n = 1 + 2 * (end - i);
        let mut req = format!("*{n}\r\n$4\r\nMSET\r\n");
        for j in i..end {
            let (k, v) = (key(j), value(j));
            req.push_str(&format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()));
        }
        s.write_all(req.as_bytes()).unwrap();
        sent += 1;
        i = end;
    }
    let want = "+OK\r\n".repeat(sent);
    let got = support::read_until(&mut s, want.as_bytes(), Duration::from_secs(300));
    assert_eq!(got, want.as_bytes());
}

/// One reply of a node still loading or serving: LOADING, or the right
/// value; anything else fails the test.
fn check_get(c: &mut Client, i: u64) -> bool {
    match c.cmd(&["GET", &key(i)]) {
        Value::Error(e) if e.starts_with("LOADING ") => true,
        Value::Bulk(b) => {
            assert_eq!(String::from_utf8_lossy(&b), value(i), "GET {}", key(i));
            false
        }
        other => panic!("GET {} while loading: {other}", key(i)),
    }
}

#[test]
fn a_client_during_recovery_gets_loading_never_a_wrong_or_missing_value() {
    const KEYS: u64 = 1_000_000;
    const AFTER_SAVE: u64 = 20_000;
    let dir = temp_dir("loading");
    let mut node = Node::spawn(&dir, &[]);
    // A fresh node is ready at once; the long wait is for a machine that
    // runs this file's other tests beside it (one once took over 30 s).
    node.wait_ready(Duration::from_secs(90));
    fill(node.resp, 0, KEYS);
    let mut c = Client::connect(node.resp);
    assert_eq!(c.cmd(&["SAVE"]), Value::Simple("OK".into()));
    // Some in the log only, replayed after the checkpoint loads.
    fill(node.resp, KEYS, KEYS + AFTER_SAVE);
    drop(c);
    node.stop();

    let node = Node::spawn(&dir, &[]);
    let (mut loading_seen, mut readyz_503, mut perc_seen) = (0, 0, false);
    let mut client: Option<Client> = None;
    let mut i = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "not ready in time");
        let probe = node.probe("/readyz");
        if let Some((status, body)) = &probe {
            if *status == 200 {
                break;
            }
            assert_eq!(*status, 503, "{body}");
            assert!(body.starts_with("loading the dataset"), "{body}");
            readyz_503 += 1;
        }
        if client.is_none() && TcpStream::connect(node.resp).is_ok() {
            client = Some(Client::connect(node.resp));
        }
        if let Some(c) = client.as_mut() {
            i = (i + 7919) % (KEYS + AFTER_SAVE);
            loading_seen += u32::from(check_get(c, i));
            if let Value::Bulk(info) = c.cmd(&["INFO", "persistence"]) {
                let info = String::from_utf8_lossy(&info).into_owned();
                perc_seen |= info.contains("loading:1") && info.contains("loading_loaded_perc:");
            }
            let mut mc = TcpStream::connect(node.memcached).unwrap();
            mc.write_all(format!("get {}\r\n", key(i)).as_bytes())
                .unwrap();
            let mut buf = [0u8; 256];
            let n = mc.read(&mut buf).unwrap();
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            assert!(
                line.starts_with("SERVER_ERROR loading")
                    || line.starts_with(&format!("VALUE {} 0 ", key(i))),
                "{line}"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(readyz_503 > 0, "/readyz never answered 503 while loading");
    eprintln!(
        "while loading: {readyz_503} readyz 503s, {loading_seen} LOADING replies, INFO loading fields seen: {perc_seen}"
    );
    // Served now: every key there, with its value.
    let mut c = Client::connect(node.resp);
    assert_eq!(c.cmd(&["DBSIZE"]), Value::Int((KEYS + AFTER_SAVE) as i64));
    for i in (0..KEYS + AFTER_SAVE).step_by(997) {
        assert!(!check_get(&mut c, i), "LOADING after /readyz said 200");
    }
    assert_eq!(node.probe("/healthz").map(|p| p.0), Some(200));
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

/// READY=1 reaches the socket systemd names in NOTIFY_SOCKET, after the
/// node serves.
#[test]
fn the_service_manager_hears_ready() {
    let dir = temp_dir("notify");
    let socket_path = dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let data = dir.join("data");
    let at = |p: u16| -> SocketAddr { ([127, 0, 0, 1], p).into() };
    let resp = at(free_port());
    let mut child = Command::new(binary())
        .args(["serve", "--data-dir", data.to_str().unwrap()])
        .args(["--resp", &resp.to_string(), "--memcached", "off"])
        .args(["--log-level", "warn"])
        .env("NOTIFY_SOCKET", &socket_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    let mut heard = String::new();
    while !heard.contains("READY=1") {
        let n = socket.recv(&mut buf).expect("a notification within 30 s");
        heard.push_str(&String::from_utf8_lossy(&buf[..n]));
        heard.push('\n');
    }
    assert!(support::ask(
        resp,
        b"PING\r\n",
        b"+PONG",
        Duration::from_secs(5)
    ));
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small tmpfs for a data directory: None (the test says why and
/// passes) where this process may not mount one.
struct Tmpfs {
    path: std::path::PathBuf,
}

impl Tmpfs {
    fn mount(name: &str, bytes: u64) -> Option<Tmpfs> {
        let path = temp_dir(name);
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs here (not root, or no mount permission)");
            let _ = std::fs::remove_dir_all(&path);
            return None;
        }
        Some(Tmpfs { path })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[test]
fn a_full_disk_makes_the_node_not_ready_and_a_restart_with_space_recovers_it() {
    let Some(fs) = Tmpfs::mount("full", 16 << 20) else {
        return;
    };
    // Most of the disk taken by something else, as on a shared volume.
    let filler = fs.path.join("filler");
    std::fs::write(&filler, vec![0u8; 12 << 20]).unwrap();
    let data = fs.path.join("data");
    let mut node = Node::spawn(&data, &[]);
    node.wait_ready(Duration::from_secs(30));
    let mut c = Client::connect(node.resp);
    let big = "x".repeat(10_000);
    let mut acked = 0u64;
    loop {
        match c.cmd(&["SET", &key(acked), &big]) {
            Value::Simple(ok) if ok == "OK" => acked += 1,
            _ => break,
        }
        assert!(acked < 2_000, "16 MiB took 20 MB of writes");
    }
    // The failure is seen within a second (the housekeeping check).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, body) = loop {
        let p = node.probe("/readyz").expect("the metrics listener answers");
        if p.0 != 200 || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    let health = node.probe("/healthz").unwrap();
    assert_eq!(
        health.0, 503,
        "a node only a restart repairs is not healthy"
    );
    // Reads go on meanwhile.
    let mut c = Client::connect(node.resp);
    assert_eq!(c.cmd(&["GET", &key(0)]).text(), Some(big.clone()));
    let info = c.cmd(&["INFO", "persistence"]).text().unwrap();
    assert!(info.contains("node_state:failed"), "{info}");
    assert!(info.contains("No space left on device"), "{info}");

    // Space is back; the supervisor restarts the node.
    std::fs::remove_file(&filler).unwrap();
    drop(node);
    let mut node = Node::spawn(&data, &[]);
    node.wait_ready(Duration::from_secs(60));
    let mut c = Client::connect(node.resp);
    for i in 0..acked {
        assert_eq!(
            c.cmd(&["GET", &key(i)]).text(),
            Some(big.clone()),
            "{}",
            key(i)
        );
    }
    assert_eq!(
        c.cmd(&["SET", "after", "space"]),
        Value::Simple("OK".into())
    );
    assert_eq!(node.probe("/healthz").unwrap().0, 200);
}
