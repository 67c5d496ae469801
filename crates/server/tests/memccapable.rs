//! libmemcached's protocol checker, `memccapable` (Debian's
//! libmemcached-tools, installed by `scripts/peers install memcapable`,
//! which `scripts/test` runs first), against a server started here: each of
//! its 27 ascii and 27 binary tests must pass. A missing `memccapable`
//! fails the test unless `COMBKV_SKIP_PEERS` is set.

use std::process::Command;

use combkv_server::{Listen, Server, ServerConfig};

/// The checker's path, or `None` (skipped) with `COMBKV_SKIP_PEERS`.
fn memccapable() -> Option<&'static str> {
    let found = Command::new("sh")
        .args(["-c", "command -v memccapable"])
        .output()
        .expect("running sh");
    if found.status.success() {
        return Some("memccapable");
    }
    if std::env::var_os("COMBKV_SKIP_PEERS").is_some() {
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): memccapable is not installed");
        return None;
    }
    panic!(
        "memccapable is not installed; `scripts/test` installs it first \
         (scripts/peers install memcapable), or set COMBKV_SKIP_PEERS=1 to skip this test"
    );
}

/// Runs the checker against a fresh server with `threads` event loops;
/// returns each test's name and whether it passed.
fn run(bin: &str, threads: usize) -> Vec<(String, bool)> {
    let server = Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads,
        ..Default::default()
    })
    .expect("server starts");
    let addr = server.memcached_addr().unwrap();
    let out = Command::new(bin)
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-t", "10", "-v"])
        .output()
        .expect("running memccapable");
    server.shutdown();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Each test prints its name padded to 40 columns, then [pass] or, on
    // stderr, [FAIL]; -v adds the failed assertion.
    let mut results: Vec<(String, bool)> = Vec::new();
    for line in stdout.lines().chain(stderr.lines()) {
        for (mark, passed) in [("[pass]", true), ("[FAIL]", false)] {
            if let Some(at) = line.find(mark) {
                let name = line[..at].trim();
                if !name.is_empty() {
                    results.push((name.to_string(), passed));
                }
            }
        }
    }
    let failed: Vec<_> = results.iter().filter(|(_, ok)| !ok).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "memccapable failed ({}): {failed:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("All tests passed"), "{stdout}");
    results
}

#[test]
fn memccapable_passes_every_ascii_and_binary_test() {
    let Some(bin) = memccapable() else {
        return;
    };
    for threads in [1, 2] {
        let results = run(bin, threads);
        let count = |p: &str| results.iter().filter(|(n, _)| n.starts_with(p)).count();
        // Failed tests print their mark on stderr, so a missing line is
        // a test that did not run: the checker has 27 of each.
        assert_eq!(count("ascii "), 27, "{results:?}");
        assert_eq!(count("binary "), 27, "{results:?}");
        for name in ["binary getkq", "binary setq", "binary decrq", "binary stat"] {
            assert!(results.iter().any(|(n, ok)| n == name && *ok), "{name}");
        }
    }
}
