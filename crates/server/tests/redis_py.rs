//! redis-py, the Python client, against an in-process server: its
//! transaction pipelines, the WATCH retry loop of its documentation under
//! eight concurrent clients, and the string commands
//! (`tests/redis_py/transactions.py` says what is checked). redis-py comes
//! from PyPI through `scripts/peers install redis-py`, which
//! `scripts/test` runs first; a missing one fails the test unless
//! `COMBKV_SKIP_PEERS` is set.

use std::path::Path;
use std::process::Command;

use combkv_server::{Listen, Server, ServerConfig};

/// The virtual environment's python, or `None` (skipped) with
/// `COMBKV_SKIP_PEERS`.
fn redis_py() -> Option<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/peers"))
        .args(["tool", "redis-py"])
        .output()
        .expect("running scripts/peers tool");
    if out.status.success() {
        return Some(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("COMBKV_SKIP_PEERS").is_some() {
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {}", why.trim());
        return None;
    }
    panic!(
        "{}; `scripts/test` installs it first, or set COMBKV_SKIP_PEERS=1 to skip this test",
        why.trim()
    );
}

#[test]
fn redis_py_transactions_watch_loop_and_string_commands() {
    let Some(python) = redis_py() else {
        return;
    };
    let server = Server::start(ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::Off,
        threads: 2,
        ..Default::default()
    })
    .expect("server starts");
    let port = server.resp_addr().unwrap().port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/redis_py/transactions.py");
    let out = Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .output()
        .expect("running python");
    server.shutdown();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-py checks failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("redis-py: all checks passed"), "{stdout}");
    eprintln!("{stdout}");
}
