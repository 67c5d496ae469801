//! `combkv serve --config combkv.example.toml` starts, serves with the
//! example's settings, and lets flags override the file.

mod support;

use support::free_port;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one RESP request and returns its whole reply as sent.
fn ask(addr: &str, args: &[&str]) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    read_value(&mut r, &mut reply)?;
    Ok(reply)
}

/// Reads one RESP2 value (simple, error, integer, bulk or array) into `out`.
fn read_value(r: &mut impl BufRead, out: &mut String) -> std::io::Result<()> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    out.push_str(&line);
    let n: i64 = line.get(1..).unwrap_or("").trim_end().parse().unwrap_or(-1);
    match line.as_bytes().first() {
        Some(b'$') if n >= 0 => {
            let mut body = String::new();
            r.read_line(&mut body)?;
            out.push_str(&body);
        }
        Some(b'*') => {
            for _ in 0..n.max(0) {
                read_value(r, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[test]
fn the_example_config_starts_a_server() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../combkv.example.toml");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_combkv"))
        .args(["serve", "--config", example, "--resp", &addr])
        .args(["--memcached", "off", "--maxclients", "77"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Killed(child);
    wait_pong(&addr);
    // From the file.
    let got = ask(&addr, &["CONFIG", "GET", "max-reply-bytes"]).unwrap();
    assert!(
        got.ends_with(&format!("${}\r\n{}\r\n", 8, 64 << 20)),
        "{got:?}"
    );
    // A flag overrides the file.
    let got = ask(&addr, &["CONFIG", "GET", "maxclients"]).unwrap();
    assert!(got.ends_with("$2\r\n77\r\n"), "{got:?}");
}

#[test]
fn a_bad_config_file_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(format!("combkv-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "maxclients = \"many\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_combkv"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad config file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits until `addr` answers PING with PONG (the store is loaded).
fn wait_pong(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask(addr, &["PING"])
        .map(|r| r != "+PONG\r\n")
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "no PONG on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `combkv serve --config FILE` (its stderr to `log`) and waits
/// for PONG.
fn start_with(file: &std::path::Path, addr: &str, log: &std::path::Path) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_combkv"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let server = Killed(child);
    wait_pong(addr);
    server
}

/// CONFIG SET log-level changes what the log says at once; CONFIG REWRITE
/// puts the live settings in the file, comments kept, and a restart on the
/// file has them; a setting also comes from a COMBKV_* variable.
#[test]
fn log_level_changes_live_and_rewrite_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("combkv-rewrite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let file = dir.join("combkv.toml");
    std::fs::write(
        &file,
        format!(
            "# the test node\nresp = \"{addr}\" # where clients go\nmemcached = \"off\"\n\
             log-level = \"warn\"\n"
        ),
    )
    .unwrap();
    let log = dir.join("combkv.log");
    let server = start_with(&file, &addr, &log);
    let logged = || std::fs::read_to_string(&log).unwrap();
    assert!(!logged().contains("resp request"), "{}", logged());
    assert_eq!(
        ask(&addr, &["CONFIG", "SET", "log-level", "debug"]).unwrap(),
        "+OK\r\n"
    );
    ask(&addr, &["PING"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !logged().contains("resp request: PING") {
        assert!(Instant::now() < deadline, "no debug line: {}", logged());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ask(
            &addr,
            &["CONFIG", "SET", "maxmemory", "5mb", "slowlog-max-len", "7"]
        )
        .unwrap(),
        "+OK\r\n"
    );
    assert_eq!(ask(&addr, &["CONFIG", "REWRITE"]).unwrap(), "+OK\r\n");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with(&format!(
            "# the test node\nresp = \"{addr}\" # where clients go\n"
        )),
        "{text}"
    );
    assert!(text.contains("log-level = \"debug\""), "{text}");
    assert!(text.contains(&format!("maxmemory = {}", 5 << 20)), "{text}");
    assert!(text.contains("slowlog-max-len = 7"), "{text}");
    drop(server);

    let _server = start_with(&file, &addr, &log);
    let got = ask(&addr, &["CONFIG", "GET", "maxmemory"]).unwrap();
    assert!(got.ends_with(&format!("$7\r\n{}\r\n", 5 << 20)), "{got:?}");
    let got = ask(&addr, &["CONFIG", "GET", "slowlog-max-len"]).unwrap();
    assert!(got.ends_with("$1\r\n7\r\n"), "{got:?}");
    drop(_server);

    // The environment, below the flags and above the file.
    let child = Command::new(env!("CARGO_BIN_EXE_combkv"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .env("COMBKV_MAXCLIENTS", "33")
        .env("COMBKV_MAXMEMORY", "1mb")
        .arg("--maxmemory")
        .arg("2mb")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Killed(child);
    wait_pong(&addr);
    let got = ask(&addr, &["CONFIG", "GET", "maxclients"]).unwrap();
    assert!(got.ends_with("$2\r\n33\r\n"), "{got:?}");
    let got = ask(&addr, &["CONFIG", "GET", "maxmemory"]).unwrap();
    assert!(got.ends_with(&format!("$7\r\n{}\r\n", 2 << 20)), "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
