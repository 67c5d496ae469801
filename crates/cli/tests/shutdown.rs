//! SHUTDOWN from a client, as a process: RESP's `SHUTDOWN SAVE` takes a
//! checkpoint and exits 0 after answering what other clients had sent;
//! the data is there after a restart. memcached's `shutdown` is refused
//! unless `memcached-shutdown` is set, then stops the server too.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::Server;

/// Waits for the child to exit on its own; its exit status.
fn exits(s: &mut Server, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn request(stream: &mut TcpStream, req: &[u8], want: &[u8]) {
    stream.write_all(req).unwrap();
    let got = support::read_until(stream, want, Duration::from_secs(10));
    assert!(
        got.ends_with(want),
        "{:?} answered {:?}",
        String::from_utf8_lossy(req),
        String::from_utf8_lossy(&got)
    );
}

/// Reads until the server closes the connection; what it sent meanwhile.
fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
            Err(e) => panic!("no close: {e}"),
        }
    }
}

#[test]
fn shutdown_save_checkpoints_answers_and_exits_cleanly() {
    let dir = std::env::temp_dir().join(format!("combkv-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = [
        "--data-dir",
        dir.to_str().unwrap(),
        "--durability",
        "everysec",
    ];
    let mut s = Server::start(&args, None);
    let mut other = TcpStream::connect(s.resp).unwrap();
    request(&mut other, b"SET kept yes\r\n", b"+OK\r\n");
    let mut c = TcpStream::connect(s.resp).unwrap();
    // Refusals first: nothing stops.
    request(
        &mut c,
        b"SHUTDOWN SAVE NOSAVE\r\n",
        b"-ERR syntax error\r\n",
    );
    request(&mut c, b"SHUTDOWN BOGUS\r\n", b"-ERR syntax error\r\n");
    request(
        &mut c,
        b"SHUTDOWN ABORT\r\n",
        b"-ERR No shutdown in progress.\r\n",
    );
    request(&mut c, b"MULTI\r\n", b"+OK\r\n");
    request(
        &mut c,
        b"SHUTDOWN\r\n",
        b"-ERR Command not allowed inside a transaction\r\n",
    );
    request(&mut c, b"DISCARD\r\n", b"+OK\r\n");
    assert!(s.answers(Duration::from_secs(5)));
    // SHUTDOWN SAVE answers nothing: the connection closes, the process
    // exits 0.
    c.write_all(b"SET last 1\r\nSHUTDOWN SAVE\r\nPING\r\n")
        .unwrap();
    assert_eq!(until_closed(&mut c), b"+OK\r\n");
    assert!(exits(&mut s, Duration::from_secs(30)).success());
    drop(s);
    let info = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        info.iter()
            .any(|f| f.starts_with("ckpt-") && f.ends_with(".ckpt")),
        "no checkpoint written: {info:?}"
    );
    let s = Server::start(&args, None);
    let mut c = TcpStream::connect(s.resp).unwrap();
    request(
        &mut c,
        b"MGET kept last\r\n",
        b"*2\r\n$3\r\nyes\r\n$1\r\n1\r\n",
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shutdown_save_without_a_data_directory_is_refused() {
    let s = Server::start(&[], None);
    let mut c = TcpStream::connect(s.resp).unwrap();
    request(
        &mut c,
        b"SHUTDOWN SAVE\r\n",
        b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n",
    );
    assert!(s.answers(Duration::from_secs(5)));
}

#[test]
fn memcached_shutdown_needs_its_setting() {
    let mut s = Server::start(&[], None);
    let mut c = TcpStream::connect(s.memcached).unwrap();
    request(&mut c, b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n");
    assert!(s.answers_memcached(Duration::from_secs(5)));
    drop(c);
    drop(s);

    let cfg = std::env::temp_dir().join(format!("combkv-mc-shutdown-{}.toml", std::process::id()));
    std::fs::write(&cfg, "memcached-shutdown = true\n").unwrap();
    s = Server::start(&["--config", cfg.to_str().unwrap()], None);
    let mut c = TcpStream::connect(s.memcached).unwrap();
    request(
        &mut c,
        b"shutdown now\r\n",
        b"CLIENT_ERROR invalid shutdown mode\r\n",
    );
    c.write_all(b"set k 0 0 1\r\nv\r\nshutdown graceful\r\n")
        .unwrap();
    assert_eq!(until_closed(&mut c), b"STORED\r\n");
    assert!(exits(&mut s, Duration::from_secs(30)).success());
    let _ = std::fs::remove_file(&cfg);
}
