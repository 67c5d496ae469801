//! The Prometheus endpoint: `GET /metrics` on `--metrics ADDR` answers the
//! figures in Prometheus text format (version 0.0.4, `exposition.rs`);
//! `GET /healthz`
//! and `GET /readyz` are the orchestrator's probes (200, or 503 with the
//! reason). One request per connection, served on its own thread;
//! anything else gets 404. With
//! `tls-metrics yes` it is HTTPS, with the client listeners' certificate
//! and client-certificate rule.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::state::Shared;
use crate::state::readiness::State;

/// Request head bytes read at most.
const MAX_HEAD_BYTES: u64 = 8192;

pub fn serve(listener: TcpListener, shared: Arc<Shared>) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !shared.shutting_down.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, from)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                if !shared.config.tls_metrics {
                    let _ = answer(stream, &shared);
                    continue;
                }
                // HTTPS: the handshake happens in the first read, within
                // the same two-second timeouts (this thread serves
                // metrics only).
                let Some(config) = shared.tls.server_config() else {
                    continue;
                };
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                if let Err(e) = answer(&mut tls, &shared)
                    && tls.conn.is_handshaking()
                {
                    shared.tls.failed(&from.to_string(), &e.to_string());
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn answer<S: Read + Write>(mut stream: S, shared: &Arc<Shared>) -> std::io::Result<()> {
    let mut reader = BufReader::new((&mut stream).take(MAX_HEAD_BYTES));
    let mut first = String::new();
    reader.read_line(&mut first)?;
    // Read the rest of the head so the client sees a clean response.
    loop {
        let mut l = String::new();
        if reader.read_line(&mut l)? == 0 || l == "\r\n" || l == "\n" {
            break;
        }
    }
    drop(reader);
    let w = &mut stream;
    let path = first.split_whitespace().nth(1).unwrap_or("");
    // Probes: `/healthz` fails only when the node needs a restart (its
    // storage failed), `/readyz` until it serves, when it fails, and once
    // its cluster removed it (a restart would not make it a member again,
    // so that one is no health failure).
    let probe = match path {
        "/healthz" => Some(match shared.readiness.state() {
            State::Failed(_) => Err(shared.readiness.describe()),
            _ => Ok(()),
        }),
        "/readyz" => Some(crate::node::readiness::serving(shared)),
        _ => None,
    };
    if let Some(said) = probe.filter(|_| first.starts_with("GET ")) {
        let status = match said {
            Ok(()) => "200 OK",
            Err(_) => "503 Service Unavailable",
        };
        let body = format!(
            "{}\n",
            said.err().unwrap_or_else(|| shared.readiness.describe())
        );
        write!(
            w,
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        return w.flush();
    }
    if !first.starts_with("GET ") || (path != "/metrics" && path != "/") {
        w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    }
    let body = super::exposition::render(shared);
    write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        super::exposition::CONTENT_TYPE,
        body.len(),
        body
    )
}
