//! MONITOR: the clients that watch every command the server runs. A
//! command's line is formatted only while one watches (one relaxed load
//! otherwise) and handed to each watcher's event loop (`Mailbox`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::clients::ClientEntry;

#[derive(Debug, Default)]
pub struct Monitors {
    watching: AtomicUsize,
    clients: Mutex<Vec<Arc<ClientEntry>>>,
}

impl Monitors {
    /// True while at least one client watches.
    #[inline]
    pub fn active(&self) -> bool {
        self.watching.load(Ordering::Relaxed) > 0
    }

    pub fn add(&self, client: Arc<ClientEntry>) {
        let mut clients = self.clients.lock();
        if clients.iter().any(|c| c.id == client.id) {
            return;
        }
        clients.push(client);
        self.watching.store(clients.len(), Ordering::Relaxed);
    }

    /// A connection closed: it watches no more.
    pub fn remove(&self, id: u64) {
        if !self.active() {
            return;
        }
        let mut clients = self.clients.lock();
        clients.retain(|c| c.id != id);
        self.watching.store(clients.len(), Ordering::Relaxed);
    }

    /// Sends a command's line, Redis's format: `+<unix seconds.micros>
    /// [0 <client address>] "arg" "arg" ...`, arguments quoted and escaped
    /// as Redis's `sdscatrepr`.
    pub fn feed(&self, addr: &str, args: &[&[u8]]) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut line =
            format!("+{}.{:06} [0 {addr}]", now.as_secs(), now.subsec_micros()).into_bytes();
        for a in args {
            line.extend_from_slice(b" ");
            repr(a, &mut line);
        }
        line.extend_from_slice(b"\r\n");
        for c in self.clients.lock().iter() {
            if !c.killed() {
                c.post_monitor(&line);
            }
        }
    }
}

/// `s` quoted, as Redis's `sdscatrepr` writes it.
fn repr(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::repr;

    #[test]
    fn arguments_are_quoted_as_redis_quotes_them() {
        let mut out = Vec::new();
        repr(b"a\"b\\c\n\x01\xff z", &mut out);
        assert_eq!(out, br#""a\"b\\c\n\x01\xff z""#);
    }
}
