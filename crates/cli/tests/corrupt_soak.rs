//! Soak: `combkv serve --durability always` is killed with SIGKILL under
//! writers, and between kills one random byte of a *closed* log segment
//! (any but the newest) is damaged. Every start must then either refuse
//! with a clear message (the file, the offset, the ways out) and change
//! nothing, or recover every acknowledged write. After a refusal the test
//! undoes the damage (the next start must recover everything) or runs
//! `combkv check --repair`, by turns (the next start must come up, every key
//! must hold a value a client wrote to it, and a new write must get a
//! version above every version the repair dropped).
//!
//! Cycles: `COMBKV_SOAK_CYCLES` (default 4, a few seconds); e.g.
//! `COMBKV_SOAK_CYCLES=50 cargo test --release -p combkv-cli --test
//! corrupt_soak -- --nocapture` for a soak. `COMBKV_SOAK_SEED` picks
//! another run.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::writes::{Acked, adopt_server_state, assert_all_acked, spawn_writers};
use support::{binary, free_port};

/// Kills the server if the test fails while it runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How a start ended: serving, or refused (exit status, stderr).
enum Started {
    Serving(Running, u16),
    Refused(Option<i32>, String),
}

/// Starts `combkv serve` on `dir`; waits until it answers PING or exits.
fn start(dir: &Path) -> Started {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut child = Command::new(binary())
        .args(["serve", "--resp", &addr.to_string(), "--memcached", "off"])
        .arg("--data-dir")
        .arg(dir)
        .args(["--durability", "always", "--log-level", "error"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("combkv starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Started::Refused(status.code(), err);
        }
        if support::ask(addr, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(200)) {
            // Nothing more is read from stderr: the server logs errors only.
            return Started::Serving(Running(child), port);
        }
        assert!(
            Instant::now() < deadline,
            "server neither came up nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The log segments, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("wal-") && n.ends_with(".log")
        })
        .collect();
    v.sort();
    v
}

/// Every file of `dir` with its bytes, but the lock file, which each
/// process that takes the directory rewrites with its own pid.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != "LOCK"))
        .map(|e| {
            let p = e.unwrap().path();
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// The number after `what` in `text` (e.g. "version floor 1234").
fn number_after(text: &str, what: &str) -> Option<u64> {
    let rest = &text[text.find(what)? + what.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// (value, version) of `key`.
fn getv(con: &mut redis::Connection, key: &str) -> Option<(String, u64)> {
    redis::cmd("GETV").arg(key).query(con).unwrap()
}

fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn damage_to_a_closed_segment_is_refused_or_loses_nothing() {
    let cycles: usize = support::env_number("COMBKV_SOAK_CYCLES", 4);
    let seed: u64 = support::env_number("COMBKV_SOAK_SEED", 0x736f616b);
    let dir = std::env::temp_dir().join(format!("combkv-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut refusals, mut undone, mut repaired) = (0, 0, 0);
    let mut dropped_records = 0u64;
    for cycle in 0..cycles {
        let ctx = format!("seed {seed} cycle {cycle}");
        let Started::Serving(mut child, port) = start(&dir) else {
            panic!("{ctx}: the start before the writes refused");
        };
        let writers = spawn_writers(&acked, port, cycle);
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
        child.0.kill().expect("SIGKILL");
        child.0.wait().unwrap();
        for w in writers {
            w.join().unwrap();
        }

        // Damage one byte of a closed segment (every start adds a segment,
        // so from the second cycle on there is one).
        let segs = segments(&dir);
        let closed = &segs[..segs.len() - 1];
        let mut damage = None;
        if !closed.is_empty() {
            let victim = closed[rng.random_range(0..closed.len())].clone();
            let mut bytes = std::fs::read(&victim).unwrap();
            let at = rng.random_range(0..bytes.len());
            let original = bytes[at];
            bytes[at] ^= rng.random_range(1..=255u8);
            std::fs::write(&victim, &bytes).unwrap();
            damage = Some((victim, at, original));
        }

        let (child, port) = match start(&dir) {
            Started::Serving(child, port) => {
                assert!(
                    damage.is_none(),
                    "{ctx}: damage {damage:?} in a closed segment was not refused"
                );
                (child, port)
            }
            Started::Refused(code, err) => {
                let (victim, at, original) =
                    damage.unwrap_or_else(|| panic!("{ctx}: refused an undamaged log: {err}"));
                refusals += 1;
                let name = victim.file_name().unwrap().to_string_lossy().into_owned();
                assert_eq!(code, Some(1), "{ctx}: {err}");
                assert!(
                    err.contains(&name),
                    "{ctx}: the message names {name}: {err}"
                );
                assert!(err.contains("offset "), "{ctx}: {err}");
                assert!(err.contains("combkv check --repair"), "{ctx}: {err}");
                assert!(err.contains("--wal-truncate-corrupt"), "{ctx}: {err}");
                let before = files(&dir);
                assert!(
                    matches!(start(&dir), Started::Refused(..)),
                    "{ctx}: a second start did not refuse"
                );
                assert_eq!(before, files(&dir), "{ctx}: a refusal changed files");
                // Alternate, so that a short run does both.
                if refusals % 2 == 1 {
                    // Undo it: the next start must lose nothing.
                    let mut bytes = std::fs::read(&victim).unwrap();
                    bytes[at] = original;
                    std::fs::write(&victim, &bytes).unwrap();
                    undone += 1;
                    match start(&dir) {
                        Started::Serving(child, port) => (child, port),
                        Started::Refused(_, err) => panic!("{ctx}: undamaged, refused: {err}"),
                    }
                } else {
                    let out = Command::new(binary())
                        .args(["check", "--repair", "--data-dir"])
                        .arg(&dir)
                        .output()
                        .unwrap();
                    let report = String::from_utf8_lossy(&out.stdout).into_owned();
                    assert_eq!(out.status.code(), Some(0), "{ctx}: {report}");
                    assert!(
                        report.contains(&format!("in {name} at offset")),
                        "{ctx}: {report}"
                    );
                    repaired += 1;
                    dropped_records += number_after(&report, "holding ").unwrap_or(0);
                    // The highest version dropped: the floor written, or
                    // the records' own if the log keeps higher ones.
                    let floor = number_after(&report, "version floor ")
                        .max(number_after(&report, "..="))
                        .unwrap_or(0);
                    let Started::Serving(child, port) = start(&dir) else {
                        panic!("{ctx}: refused after the repair: {report}");
                    };
                    let mut con = connect(port);
                    adopt_server_state(&mut acked.lock().unwrap(), &mut con, &ctx);
                    let _: () = redis::cmd("SET")
                        .arg(format!("probe{cycle}"))
                        .arg("x")
                        .query(&mut con)
                        .unwrap();
                    let (_, v) = getv(&mut con, &format!("probe{cycle}")).unwrap();
                    assert!(
                        v > floor,
                        "{ctx}: version {v} not above dropped {floor}: {report}"
                    );
                    (child, port)
                }
            }
        };
        let mut con = connect(port);
        let a = acked.lock().unwrap();
        assert_all_acked(&a, &mut con, &ctx);
        drop(a);
        drop(child);
    }
    eprintln!(
        "corrupt_soak: {cycles} cycles, seed {seed}: {refusals} damaged starts refused, \
         {undone} undone and recovered whole, {repaired} repaired ({dropped_records} records dropped)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
