//! Process-level crash test: `combkv serve --durability always` is killed
//! with SIGKILL at random moments while clients write through the `redis`
//! crate; after each restart every acknowledged write must be there with
//! its value. Cycles: `COMBKV_KILL9_CYCLES` (default 10); e.g.
//! `COMBKV_KILL9_CYCLES=200 cargo test --release -p combkv-cli --test kill9`
//! for a soak. `COMBKV_KILL9_DURABILITY=none` shows the test failing when
//! acknowledgements do not wait for the log.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use support::writes::{Acked, assert_all_acked, spawn_writers};

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
