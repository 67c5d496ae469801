//! Process-level crash test: `combkv serve --durability always` is killed
//! with SIGKILL at random moments while clients write through the `redis`
//! crate; after each restart every acknowledged write must be there with
//! its value. Cycles: `COMBKV_KILL9_CYCLES` (default 10); e.g.
//! `COMBKV_KILL9_CYCLES=200 cargo test --release -p combkv-cli --test kill9`
//! for a soak. A second test does the same with multi-key transactions
//! (MULTI/EXEC): each is there whole or not at all. `COMBKV_KILL9_DURABILITY=none` shows the test failing when
//! acknowledgements do not wait for the log.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use support::free_port;
use support::writes::{Acked, assert_all_acked, spawn_writers};

/// Kills the server if the test fails while it runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[expect(
    clippy::zombie_processes,
    reason = "the child is returned to the caller, which kills and waits for it"
)]
fn start(dir: &Path, port: u16) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_combkv"))
        .args([
            "serve",
            "--resp",
            &format!("127.0.0.1:{port}"),
            "--memcached",
            "off",
            "--data-dir",
            dir.to_str().unwrap(),
            "--durability",
            &std::env::var("COMBKV_KILL9_DURABILITY").unwrap_or_else(|_| "always".into()),
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("combkv starts");
    // Recovery can take a moment: poll until it answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            && let Ok(mut con) = c.get_connection()
            && redis::cmd("PING").query::<String>(&mut con).is_ok()
        {
            return child;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server did not come up");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lets the writers run for a random while, kills the server with
/// SIGKILL, and waits for the writers to notice.
fn kill_while_writing(
    child: &mut Running,
    rng: &mut rand::rngs::StdRng,
    writers: Vec<std::thread::JoinHandle<()>>,
) {
    std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
    child.0.kill().expect("SIGKILL");
    child.0.wait().unwrap();
    for w in writers {
        w.join().unwrap();
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let cycles: usize = support::env_number("COMBKV_KILL9_CYCLES", 10);
    let dir = std::env::temp_dir().join(format!("combkv-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b696c6c39);
    for cycle in 0..cycles {
        let port = free_port();
        let mut child = Running(start(&dir, port));
        let writers = spawn_writers(&acked, port, cycle);
        kill_while_writing(&mut child, &mut rng, writers);

        // Restart and check everything acknowledged so far, every cycle.
        let port = free_port();
        let child = Running(start(&dir, port));
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        let a = acked.lock().unwrap();
        let checked = assert_all_acked(&a, &mut con, &format!("cycle {cycle}"));
        assert!(
            cycle == 0 || checked > 0,
            "cycle {cycle}: nothing was acknowledged"
        );
        drop(a);
        drop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Transactions (MULTI ... EXEC) of several keys, killed with SIGKILL at
/// random moments under `--durability always`: after each restart every
/// acknowledged EXEC is there whole, and none, acknowledged or not, is
/// there in part. Each transaction writes four keys of its own
/// (`tx:{writer}:{seq}:{i}`) and overwrites four keys its writer shares
/// (`shared:{writer}:{i}`) with its sequence number.
#[test]
fn transactions_survive_kill_9_whole_or_not_at_all() {
    const WRITERS: usize = 3;
    const KEYS: usize = 4;
    let cycles: usize = support::env_number("COMBKV_KILL9_CYCLES", 10);
    let dir = std::env::temp_dir().join(format!("combkv-kill9-tx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Per writer: the next sequence number, the last one acknowledged,
    // and those whose EXEC got no answer (may or may not have applied).
    let next = Arc::new(Mutex::new(vec![1u64; WRITERS]));
    let acked = Arc::new(Mutex::new(vec![0u64; WRITERS]));
    let unsure = Arc::new(Mutex::new(vec![Vec::<u64>::new(); WRITERS]));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x74786b696c6c);
    for cycle in 0..cycles {
        let port = free_port();
        let mut child = Running(start(&dir, port));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (next, acked, unsure) =
                    (Arc::clone(&next), Arc::clone(&acked), Arc::clone(&unsure));
                std::thread::spawn(move || {
                    let Ok(mut con) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                        .and_then(|c| c.get_connection())
                    else {
                        return;
                    };
                    loop {
                        let seq = {
                            let mut n = next.lock().unwrap();
                            n[w] += 1;
                            n[w] - 1
                        };
                        let mut p = redis::pipe();
                        p.atomic();
                        for i in 0..KEYS {
                            p.set(format!("tx:{w}:{seq}:{i}"), seq).ignore();
                            p.set(format!("shared:{w}:{i}"), seq).ignore();
                        }
                        match p.query::<()>(&mut con) {
                            Ok(()) => acked.lock().unwrap()[w] = seq,
                            Err(_) => {
                                unsure.lock().unwrap()[w].push(seq);
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        kill_while_writing(&mut child, &mut rng, writers);

        let port = free_port();
        let child = Running(start(&dir, port));
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let acked = acked.lock().unwrap().clone();
        let unsure = unsure.lock().unwrap().clone();
        // Every key of every transaction that is there, by transaction.
        let mut found: BTreeMap<(usize, u64), usize> = BTreeMap::new();
        let keys: Vec<String> = redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg("tx:*")
            .arg("COUNT")
            .arg(10_000)
            .clone()
            .iter(&mut con)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for k in keys {
            let parts: Vec<&str> = k.split(':').collect();
            let (w, seq) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
            *found.entry((w, seq)).or_default() += 1;
        }
        for (&(w, seq), &n) in &found {
            assert_eq!(
                n, KEYS,
                "cycle {cycle}: transaction {w}:{seq} is there in part"
            );
        }
        for (w, &last) in acked.iter().enumerate() {
            for seq in 1..=last {
                assert!(
                    found.contains_key(&(w, seq)) || unsure[w].contains(&seq),
                    "cycle {cycle}: acknowledged transaction {w}:{seq} is missing"
                );
            }
            let shared: Vec<Option<u64>> = (0..KEYS)
                .map(|i| {
                    redis::cmd("GET")
                        .arg(format!("shared:{w}:{i}"))
                        .query(&mut con)
                        .unwrap()
                })
                .collect();
            assert!(
                shared.iter().all(|s| *s == shared[0]),
                "cycle {cycle}: writer {w}'s shared keys mix transactions: {shared:?}"
            );
            assert!(
                shared[0].unwrap_or(0) >= last,
                "cycle {cycle}: writer {w}'s shared keys are older than its last acknowledged transaction {last}: {shared:?}"
            );
        }
        assert!(
            acked.iter().sum::<u64>() > 0,
            "cycle {cycle}: no transaction was acknowledged"
        );
        drop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
