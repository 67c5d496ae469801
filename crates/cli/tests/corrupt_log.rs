//! A corrupt write-ahead log as an operator meets it: `combkv serve`
//! refuses the directory with a message that names the file and offset and
//! the ways out, and exits non-zero; `combkv check` says recovery would
//! refuse; `combkv check --repair`, `--wal-truncate-corrupt` and the config
//! file's `wal-truncate-corrupt` cut it, keep what they drop, and new writes
//! get versions above everything dropped.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{binary, free_port};

/// A server child with its stderr collected; killed on drop.
struct Serving {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serving {
    /// Starts `combkv serve` on `dir` with `extra` flags and waits for PING.
    fn start(dir: &Path, extra: &[&str]) -> Serving {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut child = serve_command(dir, addr, extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("combkv starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let serving = Serving {
            child,
            addr,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !support::ask(addr, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(500)) {
            assert!(
                Instant::now() < deadline,
                "no PONG; stderr: {}",
                serving.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        serving
    }

    fn con(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.addr))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

fn serve_command(dir: &Path, addr: SocketAddr, extra: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.args(["serve", "--resp", &addr.to_string(), "--memcached", "off"])
        .arg("--data-dir")
        .arg(dir)
        .args(["--durability", "always", "--log-level", "info"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// Runs `combkv serve` on `dir`, which must refuse to start: its exit
/// status and stderr. Panics if it serves instead.
fn refusal(dir: &Path) -> (Option<i32>, String) {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut child = serve_command(dir, addr, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        let serving = support::ask(addr, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(100));
        if serving || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("combkv serve did not refuse the corrupt log (serving: {serving})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("combkv-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// (value, version) of `key`.
fn getv(con: &mut redis::Connection, key: &str) -> Option<(String, u64)> {
    redis::cmd("GETV").arg(key).query(con).unwrap()
}

const KEYS: usize = 300;

/// Writes `k0..k299` through a server on `dir`, kills it (every write was
/// acknowledged after its fsync), and returns the highest version written.
fn write_keys(dir: &Path) -> u64 {
    let server = Serving::start(dir, &[]);
    let mut con = server.con();
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("value {i}"))
            .query(&mut con)
            .unwrap();
    }
    getv(&mut con, &format!("k{}", KEYS - 1)).unwrap().1
}

/// The log segment holding the records, and the offsets of its records
/// (frames: u32 length | u32 crc | body, after a 32-byte header).
fn records(dir: &Path) -> (PathBuf, Vec<usize>) {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 32)
        .collect();
    segs.sort();
    assert_eq!(segs.len(), 1, "{segs:?}");
    let bytes = std::fs::read(&segs[0]).unwrap();
    let mut at = 32;
    let mut offsets = Vec::new();
    while at + 8 <= bytes.len() {
        offsets.push(at);
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    (segs.remove(0), offsets)
}

/// Flips one byte in the body of the record in the middle of the log.
/// Returns the segment's name and the record's offset.
fn corrupt_mid_log(dir: &Path) -> (String, usize) {
    let (seg, offsets) = records(dir);
    let at = offsets[offsets.len() / 2];
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[at + 8 + 20] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    (seg.file_name().unwrap().to_string_lossy().into_owned(), at)
}

/// Every file of `dir` with its bytes.
/// Every file of `dir` with its bytes, but the lock file, which each
/// process that takes the directory rewrites with its own pid.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != "LOCK"))
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(binary())
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Keys present after a cut: a prefix `k0..kN`, nothing after.
fn present_prefix(con: &mut redis::Connection) -> usize {
    let n = (0..KEYS)
        .take_while(|i| getv(con, &format!("k{i}")).is_some())
        .count();
    for i in n..KEYS {
        assert!(getv(con, &format!("k{i}")).is_none(), "k{i} after the cut");
    }
    n
}

#[test]
fn serve_refuses_a_corrupt_log_and_check_repair_cuts_it() {
    let dir = temp_dir("corrupt-serve");
    let highest = write_keys(&dir);
    let (seg, at) = corrupt_mid_log(&dir);
    let before = files(&dir);

    // serve: a clear refusal, a non-zero exit, nothing changed.
    let (code, err) = refusal(&dir);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot open data directory"), "{err}");
    assert!(err.contains(&format!("{seg}: offset {at}:")), "{err}");
    assert!(err.contains("corruption, not a torn tail"), "{err}");
    assert!(err.contains("well-formed records"), "{err}");
    assert!(err.contains("Nothing was changed"), "{err}");
    assert!(err.contains("combkv check --repair --data-dir"), "{err}");
    assert!(err.contains("--wal-truncate-corrupt"), "{err}");
    assert_eq!(before, files(&dir), "a refused start changed the directory");

    // check: exit 3, and what a repair would drop.
    let out = run(&["check"], &dir);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert!(
        report.contains(&format!("CORRUPT at offset {at}")),
        "{report}"
    );
    assert!(report.contains("recovery would REFUSE"), "{report}");
    assert!(report.contains("--repair would cut"), "{report}");
    assert_eq!(before, files(&dir));

    // check --repair: cuts, says what it dropped, keeps it.
    let out = run(&["check", "--repair"], &dir);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(report.contains("repaired"), "{report}");
    assert!(
        report.contains(&format!("corrupt log cut in {seg} at offset {at}")),
        "{report}"
    );
    assert!(report.contains(&format!("..={highest})")), "{report}");
    assert!(
        report.contains(&format!("version floor {highest}")),
        "{report}"
    );
    assert!(dir.join(format!("{seg}.discarded")).exists());
    assert!(dir.join("version-floor").exists());
    let out = run(&["check"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = run(&["check", "--repair"], &dir);
    assert!(text(&out.stdout).contains("nothing to repair"));

    // serve starts with the prefix; new writes are above every dropped version.
    for restart in 0..2 {
        let server = Serving::start(&dir, &[]);
        let mut con = server.con();
        let n = present_prefix(&mut con);
        assert!(n > 0 && n < KEYS, "{n} keys");
        let _: () = redis::cmd("SET")
            .arg(format!("new{restart}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
        let (_, v) = getv(&mut con, &format!("new{restart}")).unwrap();
        assert!(v > highest, "restart {restart}: version {v} <= {highest}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wal_truncate_corrupt_cuts_at_start_from_the_flag_or_the_config_file() {
    for how in ["flag", "config file"] {
        let dir = temp_dir(&format!("corrupt-truncate-{}", how.len()));
        let highest = write_keys(&dir);
        let (seg, at) = corrupt_mid_log(&dir);
        let conf = dir.with_extension("toml");
        std::fs::write(&conf, "wal-truncate-corrupt = true\nmaxclients = 50\n").unwrap();
        let conf_path = conf.to_string_lossy().into_owned();
        let extra: &[&str] = match how {
            "flag" => &["--wal-truncate-corrupt"],
            _ => &["--config", &conf_path],
        };
        let server = Serving::start(&dir, extra);
        let log = server.stderr.lock().unwrap().clone();
        assert!(log.contains("ERROR"), "{how}: {log}");
        assert!(log.contains("acknowledged writes"), "{how}: {log}");
        assert!(
            log.contains(&format!("corrupt log cut in {seg} at offset {at}")),
            "{how}: {log}"
        );
        let mut con = server.con();
        let n = present_prefix(&mut con);
        assert!(n > 0 && n < KEYS, "{how}: {n} keys");
        let _: () = redis::cmd("SET")
            .arg("new")
            .arg("v")
            .query(&mut con)
            .unwrap();
        assert!(getv(&mut con, "new").unwrap().1 > highest, "{how}");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&conf);
    }
}

#[test]
fn wal_truncate_corrupt_must_be_a_boolean_and_needs_a_data_dir_but_not_an_existing_one() {
    let dir = temp_dir("corrupt-config");
    let conf = dir.join("c.toml");
    std::fs::write(&conf, "wal-truncate-corrupt = \"yes\"\n").unwrap();
    let out = Command::new(binary())
        .args(["serve", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad config file"), "{err}");
    assert!(err.contains("expected a boolean"), "{err}");
    let out = Command::new(binary())
        .args(["serve", "--wal-truncate-corrupt", "--resp", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs a data directory"), "{err}");
    // A directory that does not exist yet has nothing to cut: it starts.
    let fresh = dir.join("not-yet");
    let server = Serving::start(&fresh, &["--wal-truncate-corrupt"]);
    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("b")
        .query(&mut server.con())
        .unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
