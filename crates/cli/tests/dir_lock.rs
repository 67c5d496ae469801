//! One process at a time writes a data directory: a second `combkv serve`
//! on the directory of a running one (single node or cluster node), and
//! `combkv check --repair` on it, fail at once with one line naming the
//! running server's pid, and the running server keeps serving what it
//! acknowledged. Before the lock both servers served, each acknowledged
//! writes, and a restart lost one of them ("log cut ... version N not
//! above N").

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{Server, binary, free_port};

/// A fresh directory for one test, removed when it passes.
fn temp_dir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("combkv-dir-lock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn addr() -> SocketAddr {
    ([127, 0, 0, 1], free_port()).into()
}

/// Runs `combkv` with `args` to its exit, for at most 20 s: a server that
/// starts instead of refusing is killed, and the test fails saying so.
fn run_to_exit(args: &[&str]) -> Output {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("combkv starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "`combkv {}` still running after 20 s instead of refusing the directory; stderr: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `out` failed with `code` and an error of one line that names `pid` as
/// the holder of `dir` (other log lines may come before it).
fn refused_naming(out: &Output, code: i32, dir: &Path, pid: u32) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    let want = format!(
        "data directory {} is in use by process {pid} ",
        dir.display()
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains(" in use ")).collect();
    assert_eq!(errors.len(), 1, "one error line, got: {stderr}");
    assert!(errors[0].starts_with("combkv "), "{:?}", errors[0]);
    assert!(errors[0].contains(&want), "{:?} lacks {want:?}", errors[0]);
}

fn connect(resp: SocketAddr) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{resp}/")).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

fn set(con: &mut redis::Connection, k: &str, v: &str) {
    let reply: String = redis::cmd("SET").arg(k).arg(v).query(con).unwrap();
    assert_eq!(reply, "OK");
}

fn get(con: &mut redis::Connection, k: &str) -> Option<String> {
    redis::cmd("GET").arg(k).query(con).unwrap()
}

/// The names and sizes of the files in `dir`.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_second_serve_on_a_directory_in_use_is_refused_and_the_first_keeps_serving() {
    let dir = temp_dir("serve");
    let d = dir.to_str().unwrap();
    let first = Server::start(&["--data-dir", d, "--log-level", "warn"], None);
    let mut con = connect(first.resp);
    set(&mut con, "k", "first");

    let (resp, memcached) = (addr().to_string(), addr().to_string());
    let second = run_to_exit(&[
        "serve",
        "--resp",
        &resp,
        "--memcached",
        &memcached,
        "--data-dir",
        d,
        "--log-level",
        "warn",
    ]);
    refused_naming(&second, 1, &dir, first.pid());

    // The first goes on: what it acknowledged is there, and it takes more.
    assert_eq!(get(&mut con, "k").as_deref(), Some("first"));
    set(&mut con, "k", "again");
    assert_eq!(get(&mut con, "k").as_deref(), Some("again"));
    assert!(first.answers(Duration::from_secs(5)));
    drop(con);
    drop(first);

    // Once it is gone (killed: the kernel drops its lock), the directory
    // opens again, with every acknowledged write.
    let next = Server::start(&["--data-dir", d, "--log-level", "warn"], None);
    let mut con = connect(next.resp);
    assert_eq!(get(&mut con, "k").as_deref(), Some("again"));
    drop(con);
    drop(next);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_repair_on_a_directory_in_use_is_refused_and_changes_nothing() {
    let dir = temp_dir("repair");
    let d = dir.to_str().unwrap();
    let server = Server::start(&["--data-dir", d, "--log-level", "warn"], None);
    let mut con = connect(server.resp);
    set(&mut con, "k", "v");
    let before = listing(&dir);

    let repair = run_to_exit(&["check", "--repair", "--data-dir", d]);
    refused_naming(&repair, 4, &dir, server.pid());
    assert_eq!(listing(&dir), before, "the refused repair changed files");

    // The read-only check takes no lock: it reads a live directory.
    let check = run_to_exit(&["check", "--data-dir", d]);
    assert!(
        matches!(check.status.code(), Some(0 | 1)),
        "check of a live directory: {:?} {}",
        check.status,
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(get(&mut con, "k").as_deref(), Some("v"));
    drop(con);
    drop(server);

    let repair = run_to_exit(&["check", "--repair", "--data-dir", d]);
    assert_eq!(
        repair.status.code(),
        Some(0),
        "repair once the server is gone: {}",
        String::from_utf8_lossy(&repair.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cluster node's files live under `<data-dir>/cluster`, which no store
/// opens: the node locks the data directory itself, against a second node
/// and against a single-node server alike.
#[test]
fn a_cluster_nodes_directory_is_locked_too() {
    let dir = temp_dir("cluster");
    let d = dir.to_str().unwrap();
    let raft = addr().to_string();
    let peers = format!("1={raft}");
    let node = Server::start(
        &[
            "--data-dir",
            d,
            "--node-id",
            "1",
            "--raft-addr",
            &raft,
            "--peers",
            &peers,
            "--log-level",
            "warn",
        ],
        None,
    );

    let (resp, memcached, raft2) = (addr().to_string(), addr().to_string(), addr().to_string());
    let peers2 = format!("1={raft2}");
    let second_node = run_to_exit(&[
        "serve",
        "--resp",
        &resp,
        "--memcached",
        &memcached,
        "--data-dir",
        d,
        "--node-id",
        "1",
        "--raft-addr",
        &raft2,
        "--peers",
        &peers2,
        "--log-level",
        "warn",
    ]);
    refused_naming(&second_node, 1, &dir, node.pid());

    let (resp, memcached) = (addr().to_string(), addr().to_string());
    let single = run_to_exit(&[
        "serve",
        "--resp",
        &resp,
        "--memcached",
        &memcached,
        "--data-dir",
        d,
        "--log-level",
        "warn",
    ]);
    refused_naming(&single, 1, &dir, node.pid());

    let repair = run_to_exit(&["check", "--repair", "--data-dir", d]);
    refused_naming(&repair, 4, &dir, node.pid());

    assert!(node.answers(Duration::from_secs(5)));
    drop(node);
    std::fs::remove_dir_all(&dir).unwrap();
}
