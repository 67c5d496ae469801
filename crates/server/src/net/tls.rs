//! TLS on a non-blocking socket: a client connection's bytes go through
//! a `rustls::ServerConnection` on their way in and out, and nothing
//! above the connection knows. A read takes what the socket has, feeds it
//! to rustls and hands back the plaintext it yields; handshake messages
//! rustls wants sent go out at once, or, if the socket is full, with the
//! next flush (the event loop asks for one while `wants_write`). Nothing
//! here waits: a client that stalls its handshake costs its own socket
//! and buffers until the event loop's handshake deadline closes it.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::net::stream::Stream;
use rustls::ServerConnection;

/// A handshake not done within this long is abandoned.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection's TLS session.
#[derive(Debug)]
pub(crate) struct Tls {
    conn: ServerConnection,
    /// When the handshake must be done by (none once it is).
    deadline: Option<Instant>,
}

impl Tls {
    pub(crate) fn new(conn: ServerConnection) -> Tls {
        Tls {
            conn,
            deadline: Some(Instant::now() + HANDSHAKE_TIMEOUT),
        }
    }

    /// Whether the handshake is still going on.
    pub(crate) fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether the handshake should have been done by `now`.
    pub(crate) fn overdue(&self, now: Instant) -> bool {
        self.handshaking() && self.deadline.is_some_and(|d| now >= d)
    }

    /// Whether rustls holds bytes for the socket (handshake messages, or
    /// encrypted replies the socket did not take).
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Reads plaintext into `buf`, as a plain socket read would answer:
    /// Ok(n > 0) plaintext, Ok(0) the client closed, `WouldBlock` nothing
    /// more for now, `InvalidData` a TLS error (the alert for it is sent).
    pub(crate) fn read(&mut self, sock: &mut Stream, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify: an end of input like any.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Best effort: the alert that tells the client why.
                let _ = self.conn.write_tls(sock);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if !self.handshaking() {
                self.deadline = None;
            }
            self.send(sock)?;
        }
    }

    /// Writes what rustls holds for the socket until it is all out
    /// (Ok(true)) or the socket is full (Ok(false)).
    pub(crate) fn send(&mut self, sock: &mut Stream) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Encrypts `data` and writes it: returns how much of it rustls took,
    /// and whether everything, rustls's own buffer included, reached the
    /// socket. rustls buffers a bounded amount (64 KiB by default), so a
    /// large reply is encrypted as the socket drains, not all at once.
    pub(crate) fn write(&mut self, sock: &mut Stream, data: &[u8]) -> io::Result<(usize, bool)> {
        let mut taken = 0;
        loop {
            if !self.send(sock)? {
                return Ok((taken, false));
            }
            if taken == data.len() {
                return Ok((taken, true));
            }
            match self.conn.writer().write(&data[taken..])? {
                // Its buffer is full although the socket took all it had:
                // cannot happen; an error, rather than a spin.
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => taken += n,
            }
        }
    }
}
