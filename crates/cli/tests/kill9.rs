//! Process-level crash test: `combkv serve --durability always` is killed
//! with SIGKILL at random moments while clients write through the `redis`
//! crate; after each restart every acknowledged write must be there with
//! its value. Cycles: `COMBKV_KILL9_CYCLES` (default 10); e.g.
//! `COMBKV_KILL9_CYCLES=200 cargo test --release -p combkv-cli --test kill9`
//! for a soak. `COMBKV_KILL9_DURABILITY=none` shows the test failing when
//! acknowledgements do not wait for the log.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

/// Kills the server if the test fails while it runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

/// What the clients were told: key -> acknowledged value; plus, per
/// counter, the highest acknowledged INCR result.
#[derive(Default)]
struct Acked {
    values: BTreeMap<String, String>,
    /// Keys whose last write was sent but not acknowledged: the old or the
    /// new state may survive (None: a DEL).
    in_flight: BTreeMap<String, Option<String>>,
    counter: i64,
    deleted: Vec<String>,
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let cycles: usize = std::env::var("COMBKV_KILL9_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("combkv-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b696c6c39);
    for cycle in 0..cycles {
        let port = free_port();
        let mut child = Running(start(&dir, port));
        let writers: Vec<_> = (0..3)
            .map(|t| {
                let acked = acked.clone();
                std::thread::spawn(move || {
                    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                    let Ok(mut con) = client.get_connection() else {
                        return;
                    };
                    for i in 0u64.. {
                        let key = format!("c{cycle}-t{t}-{i}");
                        // Overwrite an earlier key now and then, so recovery
                        // must keep the newest value, not the first.
                        let key = if i % 7 == 3 {
                            format!("c{cycle}-t{t}-{}", i / 2)
                        } else {
                            key
                        };
                        let value = format!("v{cycle}-{t}-{i}");
                        let victim = format!("c{cycle}-t{t}-{}", i.saturating_sub(1));
                        let del = i % 13 == 6;
                        let (target, after) = if del {
                            (victim.clone(), None)
                        } else {
                            (key.clone(), Some(value.clone()))
                        };
                        acked
                            .lock()
                            .unwrap()
                            .in_flight
                            .insert(target.clone(), after.clone());
                        let r = if i % 11 == 5 {
                            redis::cmd("INCR")
                                .arg("counter")
                                .query::<i64>(&mut con)
                                .map(|n| {
                                    let mut a = acked.lock().unwrap();
                                    a.counter = a.counter.max(n);
                                })
                        } else if del {
                            redis::cmd("DEL")
                                .arg(&victim)
                                .query::<i64>(&mut con)
                                .map(|_| {
                                    let mut a = acked.lock().unwrap();
                                    a.values.remove(&victim);
                                    a.deleted.push(victim);
                                })
                        } else {
                            redis::cmd("SET")
                                .arg(&key)
                                .arg(&value)
                                .query::<()>(&mut con)
                                .map(|_| {
                                    let mut a = acked.lock().unwrap();
                                    a.values.insert(key.clone(), value.clone());
                                })
                        };
                        if r.is_err() {
                            // The server is gone: this write stays in flight.
                            return;
                        }
                        acked.lock().unwrap().in_flight.remove(&target);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
        child.0.kill().expect("SIGKILL");
        child.0.wait().unwrap();
        for w in writers {
            w.join().unwrap();
        }

        // Restart and check everything acknowledged so far, every cycle.
        let port = free_port();
        let child = Running(start(&dir, port));
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        let a = acked.lock().unwrap();
        let mut checked = 0;
        for (k, v) in &a.values {
            let got: Option<String> = redis::cmd("GET").arg(k).query(&mut con).unwrap();
            let alt = a.in_flight.get(k);
            assert!(
                got.as_ref() == Some(v) || alt.is_some_and(|alt| *alt == got),
                "cycle {cycle}: acknowledged {k}={v} came back as {got:?}"
            );
            checked += 1;
        }
        for k in &a.deleted {
            if a.values.contains_key(k) {
                continue;
            }
            let got: Option<String> = redis::cmd("GET").arg(k).query(&mut con).unwrap();
            assert!(
                got.is_none() || a.in_flight.contains_key(k),
                "cycle {cycle}: acknowledged DEL {k} undone ({got:?})"
            );
        }
        let counter: Option<i64> = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
        assert!(
            counter.unwrap_or(0) >= a.counter,
            "cycle {cycle}: counter {counter:?} below acknowledged {}",
            a.counter
        );
        assert!(
            cycle == 0 || checked > 0,
            "cycle {cycle}: nothing was acknowledged"
        );
        drop(a);
        drop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
