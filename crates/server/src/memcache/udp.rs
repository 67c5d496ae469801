//! memcached's UDP transport, for `get` and `gets` (off by default, as in
//! memcached). Every datagram starts with memcached's 8-byte frame header,
//! four big-endian 16-bit numbers:
//!
//! ```text
//! request id | sequence number | datagrams in this message | reserved (0)
//! ```
//!
//! A request is one datagram (sequence 0 of 1) holding text lines; its
//! reply is split into datagrams of at most [`MAX_DATAGRAM`] bytes, each
//! with the request's id, its sequence number and the count, which the
//! client reassembles. Datagrams that are too short, or that claim to be
//! part of a multi-datagram request, are dropped, as memcached drops them.
//! One thread serves the socket; a line's keys are read in read-engine
//! batches of 16, each batch at one version.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use combkv::readexec::{BatchResults, ReadRequest};

use super::cmd::{Found, write_value};
use super::error::McError;
use super::parse::{self, GetKind, Parsed, Request};
use crate::state::{Shared, Stats};
use crate::turn::MAX_BATCH_READS;

pub const FRAME_HEADER: usize = 8;
/// A reply datagram's size at most, header included (memcached's
/// `UDP_MAX_PAYLOAD_SIZE`): below the usual Ethernet MTU, so that replies
/// are not fragmented on the way.
pub const MAX_DATAGRAM: usize = 1400;
const PAYLOAD: usize = MAX_DATAGRAM - FRAME_HEADER;
/// The largest datagram read (memcached's `UDP_READ_BUFFER_SIZE`).
const READ_BUFFER: usize = 64 * 1024;
/// Buffers grown past this by one reply are dropped after it.
const SHRINK_ABOVE: usize = 1 << 20;
/// How often the thread looks at whether the server is stopping.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// A datagram's frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub request_id: u16,
    pub sequence: u16,
    pub total: u16,
}

impl Frame {
    /// The header at the start of `d`, if it has one.
    pub fn read(d: &[u8]) -> Option<Frame> {
        let at = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
        (d.len() >= FRAME_HEADER).then(|| Frame {
            request_id: at(0),
            sequence: at(2),
            total: at(4),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        for n in [self.request_id, self.sequence, self.total, 0] {
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Serves `socket` until the server stops.
pub(crate) fn serve(socket: UdpSocket, shared: Arc<Shared>) {
    if let Err(e) = socket.set_read_timeout(Some(STOP_CHECK)) {
        tracing::error!("memcached UDP: cannot set a read timeout, not serving: {e}");
        return;
    }
    let mut buf = vec![0u8; READ_BUFFER];
    let mut reply = Vec::new();
    let mut datagram = Vec::with_capacity(MAX_DATAGRAM);
    let mut batch = shared.config.read_results();
    let mut hot_entries = shared.config.hot_cache_entries;
    while !shared.shutting_down.load(Ordering::Acquire) {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::warn!("memcached UDP: receive failed: {e}");
                std::thread::sleep(STOP_CHECK);
                continue;
            }
        };
        Stats::add(&shared.stats.net_input_bytes, n as u64);
        let Some(frame) = Frame::read(&buf[..n]) else {
            continue;
        };
        if frame.sequence != 0 || frame.total != 1 {
            tracing::debug!(%peer, "memcached UDP: multi-datagram request dropped");
            continue;
        }
        reply.clear();
        // After the wait for a datagram: a CONFIG SET answered meanwhile
        // applies to it.
        shared.fit_hot_cache(&mut batch, &mut hot_entries);
        answer(&shared, &mut batch, &buf[FRAME_HEADER..n], &mut reply);
        if let Err(e) = send(&socket, peer, frame.request_id, &reply, &mut datagram) {
            tracing::debug!(%peer, "memcached UDP: send failed: {e}");
        }
        Stats::add(
            &shared.stats.net_output_bytes,
            (reply.len() + reply.len().div_ceil(PAYLOAD) * FRAME_HEADER) as u64,
        );
        // A large reply's buffers are not kept for the next small one.
        if reply.capacity() > SHRINK_ABOVE {
            reply = Vec::new();
            batch.shrink();
        }
    }
}

/// Sends `reply` to `peer` in numbered datagrams.
fn send(
    socket: &UdpSocket,
    peer: SocketAddr,
    request_id: u16,
    reply: &[u8],
    datagram: &mut Vec<u8>,
) -> io::Result<()> {
    let chunks = reply.chunks(PAYLOAD);
    let total = u16::try_from(chunks.len()).expect("answer() bounds the reply");
    for (i, chunk) in chunks.enumerate() {
        datagram.clear();
        Frame {
            request_id,
            sequence: i as u16,
            total,
        }
        .write(datagram);
        datagram.extend_from_slice(chunk);
        socket.send_to(datagram, peer)?;
    }
    Ok(())
}

/// The text reply to a datagram's lines. Only `get` and `gets` are
/// served; any other command is answered with an error and changes
/// nothing (`noreply` hides it, as on TCP). A reply that would not fit in
/// 65,535 datagrams, or passes `max-reply-bytes`, is replaced by an error
/// as soon as it does, before more is read.
pub(crate) fn answer(
    shared: &Shared,
    batch: &mut BatchResults,
    mut input: &[u8],
    out: &mut Vec<u8>,
) {
    let limits = super::limits(shared);
    let max_reply = (u16::MAX as usize * PAYLOAD).min(shared.live.max_reply_bytes());
    while !input.is_empty() {
        // How much of the input the request took, and whether to go on.
        let (consumed, more) = match parse::parse(input, &limits, 0) {
            // A datagram holds whole requests; a partial one is dropped.
            Parsed::Incomplete { .. } => (0, false),
            Parsed::Close { err } => {
                super::cmd::line(out, &err.line());
                (0, false)
            }
            Parsed::Error {
                err,
                noreply,
                consumed,
                swallow,
            } => {
                if !noreply {
                    super::cmd::line(out, &err.line());
                }
                // A refused storage command's data block is skipped.
                (consumed.saturating_add(swallow), true)
            }
            Parsed::Request { req, consumed } => {
                let fits = match req {
                    Request::Get {
                        kind: kind @ (GetKind::Get | GetKind::Gets),
                        keys,
                        ..
                    } => get(shared, batch, kind, keys, out, max_reply),
                    _ => {
                        super::cmd::line(out, "SERVER_ERROR UDP serves only get and gets");
                        true
                    }
                };
                (consumed, fits)
            }
        };
        if out.len() > max_reply {
            out.clear();
            return super::cmd::line(out, &McError::TooLarge.line());
        }
        if !more {
            return;
        }
        input = &input[consumed.min(input.len())..];
    }
}

/// `get`/`gets` of a line's keys, read `MAX_BATCH_READS` at a time (each
/// group at one version), as TCP reads a line in parts. Stops, returning
/// false, as soon as the reply passes `max_reply`.
fn get(
    shared: &Shared,
    batch: &mut BatchResults,
    kind: GetKind,
    keys: &[u8],
    out: &mut Vec<u8>,
    max_reply: usize,
) -> bool {
    if shared.readiness.loading() {
        super::cmd::line(out, &McError::Loading.line());
        return true;
    }
    if let Some(c) = shared.cluster()
        && let Err(e) = c.read_barrier()
    {
        super::cmd::line(out, &McError::from(e).line());
        return true;
    }
    let store = shared.current_store();
    let (mut hits, mut misses) = (0u64, 0u64);
    let mut keys = parse::keys(keys);
    let mut chunk: Vec<&[u8]> = Vec::with_capacity(MAX_BATCH_READS);
    let mut reads: Vec<ReadRequest<'_>> = Vec::with_capacity(MAX_BATCH_READS);
    let fits = 'line: loop {
        chunk.clear();
        chunk.extend(keys.by_ref().take(MAX_BATCH_READS));
        if chunk.is_empty() {
            out.extend_from_slice(b"END\r\n");
            break 'line true;
        }
        reads.clear();
        reads.extend(chunk.iter().map(|k| ReadRequest::Get(k)));
        let done = crate::node::keyspace::Keyspace::of(shared, &store, None, None)
            .read_batch(&reads, batch);
        shared.stats.add_hot_cache(batch);
        if let Err(e) = done {
            super::cmd::line(out, &McError::from(e).line());
            break 'line true;
        }
        for (i, key) in chunk.iter().enumerate() {
            let Some(it) = batch.items(i).next() else {
                misses += 1;
                continue;
            };
            hits += 1;
            write_value(out, key, &Found::from(&it), kind.with_cas());
            if out.len() > max_reply {
                break 'line false;
            }
        }
    };
    let mc = &shared.memcache.stats;
    Stats::add(&mc.cmd_get, hits + misses);
    Stats::add(&mc.get_hits, hits);
    Stats::add(&mc.get_misses, misses);
    Stats::add(&shared.stats.keyspace_hits, hits);
    Stats::add(&shared.stats.keyspace_misses, misses);
    fits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_headers_round_trip_in_network_order() {
        let f = Frame {
            request_id: 0x1234,
            sequence: 2,
            total: 3,
        };
        let mut out = Vec::new();
        f.write(&mut out);
        assert_eq!(out, [0x12, 0x34, 0, 2, 0, 3, 0, 0]);
        assert_eq!(Frame::read(&out), Some(f));
        assert_eq!(Frame::read(&out[..7]), None);
    }
}
