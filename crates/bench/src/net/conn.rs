//! One client connection: a blocking loopback socket with a write buffer
//! that collects a whole pipeline of requests for one `write`, and a read
//! buffer that replies are parsed from in place.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::{BenchError, Result};

/// Bytes asked of the kernel per `read`: a pipeline of 100-item ranges fits.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// A server silent for this long is taken as hung: the run fails instead of
/// waiting forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to a server under test.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// Read buffer; `rbuf[rpos..rend]` are received bytes not yet parsed.
    /// Its length only grows (when one reply outgrows it), so reads never
    /// pay for zeroing.
    pub rbuf: Vec<u8>,
    pub rpos: usize,
    pub rend: usize,
    /// Requests not yet sent.
    pub wbuf: Vec<u8>,
}

impl Conn {
    /// Connects to `addr` with Nagle off (a pipeline is sent in one write
    /// anyway; a lone request must not wait for an ACK).
    pub fn connect(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .map_err(|e| BenchError(format!("connecting to {addr}: {e}")))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(READ_TIMEOUT)))
            .map_err(|e| BenchError(format!("setting up the socket to {addr}: {e}")))?;
        Ok(Conn {
            stream,
            rbuf: vec![0; READ_CHUNK_BYTES * 2],
            rpos: 0,
            rend: 0,
            wbuf: Vec::with_capacity(READ_CHUNK_BYTES),
        })
    }

    /// Sends everything in the write buffer.
    pub fn flush(&mut self) -> Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.stream
            .write_all(&self.wbuf)
            .map_err(|e| BenchError(format!("sending to the server: {e}")))?;
        self.wbuf.clear();
        Ok(())
    }

    /// The received bytes not yet parsed.
    #[inline]
    pub fn unparsed(&self) -> &[u8] {
        &self.rbuf[self.rpos..self.rend]
    }

    /// Marks `n` more received bytes as parsed.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        debug_assert!(self.rpos + n <= self.rend);
        self.rpos += n;
    }

    /// Waits for more bytes from the server and appends them to the
    /// unparsed ones.
    pub fn receive(&mut self) -> Result<()> {
        if self.rpos == self.rend {
            (self.rpos, self.rend) = (0, 0);
        }
        if self.rbuf.len() - self.rend < READ_CHUNK_BYTES {
            // Move the unparsed tail (the start of an incomplete reply) to
            // the front; grow only when that tail itself fills the buffer.
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            (self.rpos, self.rend) = (0, self.rend - self.rpos);
            if self.rbuf.len() - self.rend < READ_CHUNK_BYTES {
                self.rbuf.resize(self.rend + READ_CHUNK_BYTES * 2, 0);
            }
        }
        let got = loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(BenchError(format!("reading from the server: {e}"))),
            }
        };
        if got == 0 {
            return Err(BenchError::new(
                "the server closed the connection with requests outstanding",
            ));
        }
        self.rend += got;
        Ok(())
    }
}
