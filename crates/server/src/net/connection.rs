//! One client connection: its socket, input and output buffers, and
//! protocol state. The event loop drives it; nothing here blocks.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use crate::net::stream::Stream;

use std::sync::atomic::Ordering;

use std::cell::RefCell;

use crate::net::proto::ProtoState;
use crate::net::tls::Tls;
use crate::node::park::{Inbox, Park, Parking};
use crate::state::{Shared, Stats};
use crate::turn::{Client, Cx, Processed, SendShared};

/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug)]
pub(crate) struct Connection {
    pub stream: Stream,
    pub proto: ProtoState,
    pub client: Client,
    /// Input: `rbuf[rstart..rend]` is unprocessed.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// The input bytes, from `rstart`, that the request being read needs at
    /// least, as its protocol worked out from the lengths it declared (0:
    /// not known): `fill` makes room for all of it at once.
    wanted: usize,
    /// A large value of the request at `rstart` being read into a buffer
    /// of its own (`Protocol::large`), and where its data starts from the
    /// request's start: `fill` reads into it until it is full, then hands
    /// it to the protocol (`Protocol::splice`).
    filling: Option<(usize, combkv::ValueBuf)>,
    /// The length of that value, being read or spliced (0: none), counted
    /// in `Shared::query_buffers` until its request is consumed.
    large_bytes: usize,
    /// Output: `wbuf[wpos..]` is unsent.
    pub wbuf: Vec<u8>,
    wpos: usize,
    /// A large value of a reply sent from the store's shared bytes instead
    /// of copied into `wbuf` (`Cx::send_shared`): it follows `wbuf[..at]`,
    /// and `sent` of its bytes are written. One at a time; `wpos <= at`
    /// until it is all sent.
    wshared: Option<(usize, bytes::Bytes, usize)>,
    /// Where this turn's replies may leave such a value.
    send_shared: SendShared,
    /// The peer closed its side, or a protocol asked to close: no more input.
    pub input_closed: bool,
    /// Close once the output is flushed.
    pub close_after_flush: bool,
    /// WRITABLE interest is registered (output is waiting for the socket).
    pub want_writable: bool,
    /// Output length when this turn first processed input: replies after it
    /// wait for the turn's commit.
    pub turn_mark: Option<usize>,
    /// The output buffer's capacity as last added to `Shared::output_buffers`.
    out_counted: usize,
    /// On a cluster node: what it waits for from the log (see `park`).
    pub park: RefCell<Park>,
    /// On a TLS listener's connection: the session its bytes go through.
    pub tls: Option<Box<Tls>>,
    /// A request waits for a CLIENT PAUSE to end: neither read nor served
    /// until the event loop sees the pause over.
    pub postponed: bool,
}

/// An input buffer up to this size is always granted: only larger ones
/// count against `max-total-query-bytes`, so small requests are always read.
const QUERY_FLOOR: usize = 64 * 1024;
/// Buffers larger than this are given back once little of them is in use.
const SHRINK_ABOVE: usize = 1 << 20;

/// What one read attempt found.
pub(crate) enum Fill {
    /// `n` bytes; `short` if that was less than the room offered, which on
    /// a stream socket means the socket's input was drained (epoll(7)), so
    /// an edge-triggered reader need not read again to see `WouldBlock`.
    Data {
        n: usize,
        short: bool,
    },
    WouldBlock,
    Eof,
    /// The input buffer must grow, and every client's input together would
    /// pass `max-total-query-bytes`.
    OverLimit,
}

impl Connection {
    pub fn new(stream: Stream, proto: ProtoState, client: Client) -> Connection {
        let fixed =
            std::mem::size_of::<Connection>() + std::mem::size_of::<crate::state::ClientEntry>();
        client.live.fixed_mem.store(fixed as u64, Ordering::Relaxed);
        Connection {
            stream,
            proto,
            client,
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            wanted: 0,
            filling: None,
            large_bytes: 0,
            wbuf: Vec::new(),
            wpos: 0,
            wshared: None,
            send_shared: SendShared::default(),
            input_closed: false,
            close_after_flush: false,
            want_writable: false,
            turn_mark: None,
            out_counted: 0,
            park: RefCell::new(Park::default()),
            tls: None,
            postponed: false,
        }
    }

    /// A connection whose bytes go through TLS.
    pub fn with_tls(mut self, tls: Tls) -> Connection {
        self.tls = Some(Box::new(tls));
        self
    }

    /// Whether TLS holds bytes for the socket (a handshake message): the
    /// event loop then flushes even with no reply to send.
    pub fn tls_wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Unsent output bytes.
    pub fn pending_output(&self) -> usize {
        self.wbuf.len() - self.wpos + self.shared_unsent()
    }

    /// Unsent bytes of the value sent from its shared bytes.
    fn shared_unsent(&self) -> usize {
        self.wshared
            .as_ref()
            .map_or(0, |(_, value, sent)| value.len() - sent)
    }

    /// Unprocessed input bytes.
    pub fn pending_input(&self) -> usize {
        self.rend - self.rstart
    }

    /// Reads once from the socket into the spare room after the unprocessed
    /// input, or into the large value being received. The buffer's length
    /// is its zeroed capacity and `rend` marks the end of the data, so a
    /// read does not re-zero the buffer each time.
    ///
    /// A buffer past `QUERY_FLOOR` grows only while every client's input
    /// buffers together stay within `max-total-query-bytes`
    /// (`Fill::OverLimit` otherwise).
    pub fn fill(&mut self, shared: &Shared) -> io::Result<Fill> {
        let (room, read) = match &mut self.filling {
            Some((_, value)) => {
                let room = value.remaining();
                let read = match &mut self.tls {
                    // Straight from the socket, no pass over the buffer.
                    None => loop {
                        match value.read_from(self.stream.as_fd()) {
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            read => break read,
                        }
                    },
                    tls => {
                        let (stream, client) = (&mut self.stream, &self.client);
                        value.fill_with(|buf| read_once(stream, tls, buf, shared, client))
                    }
                };
                (room, read)
            }
            None => {
                if !self.make_room(shared) {
                    return Ok(Fill::OverLimit);
                }
                let room = self.rbuf.len() - self.rend;
                let buf = &mut self.rbuf[self.rend..];
                let read = read_once(&mut self.stream, &mut self.tls, buf, shared, &self.client);
                if let Ok(n) = read {
                    self.rend += n;
                }
                (room, read)
            }
        };
        match read {
            Ok(0) => Ok(Fill::Eof),
            Ok(n) => {
                self.splice_when_full();
                self.publish_input();
                // rustls may hold more plaintext than one read takes:
                // a TLS connection reads until `WouldBlock`.
                let short = n < room && self.tls.is_none();
                Ok(Fill::Data { n, short })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Fill::WouldBlock),
            Err(e) => Err(e),
        }
    }

    /// Starts reading the large value of the request at `rstart` (its data
    /// from `at`, `len` bytes) into a buffer of its own: what arrived of it
    /// moves there, what followed it stays in the input, from `at`. Not if
    /// that buffer would pass `max-total-query-bytes`: the value then
    /// arrives in the input as any other.
    fn start_large(&mut self, shared: &Shared, at: usize, len: usize) {
        let total = &shared.query_buffers;
        if total.load(Ordering::Relaxed).saturating_add(len) > shared.live.max_total_query_bytes() {
            return;
        }
        total.fetch_add(len, Ordering::Relaxed);
        self.large_bytes = len;
        let mut value = combkv::ValueBuf::new(len);
        let data = self.rstart + at;
        let taken = value.extend_from_slice(&self.rbuf[data..self.rend]);
        self.rbuf.copy_within(data + taken..self.rend, data);
        self.rend -= taken;
        self.filling = Some((at, value));
        self.wanted = 0;
        self.splice_when_full();
    }

    /// Hands the large value being read to the protocol once it is full.
    fn splice_when_full(&mut self) {
        if self
            .filling
            .as_ref()
            .is_some_and(|(_, v)| v.remaining() == 0)
            && let Some((at, value)) = self.filling.take()
        {
            match value.finish() {
                Ok(value) => self.proto.splice(at, value),
                Err(value) => self.filling = Some((at, value)),
            }
        }
    }

    /// Forgets the large value (its request was consumed, or the input is
    /// dropped) and takes it out of the shared count.
    fn drop_large(&mut self, shared: &Shared) {
        if self.large_bytes == 0 {
            return;
        }
        self.filling = None;
        self.proto.unsplice();
        shared
            .query_buffers
            .fetch_sub(self.large_bytes, Ordering::Relaxed);
        self.large_bytes = 0;
    }

    /// Makes room to read into: at least half a chunk. A request whose size
    /// is known (`wanted`) first gets the capacity for all of it plus a
    /// chunk for what follows, so that a large value arrives in one
    /// allocation: the buffer's zeroed length still grows by doubling as
    /// bytes arrive (a declared length alone commits no memory), but within
    /// that capacity, never moved again. False: growing would pass
    /// `max-total-query-bytes`.
    fn make_room(&mut self, shared: &Shared) -> bool {
        let short_of_wanted =
            self.wanted > 0 && self.wanted + READ_CHUNK > self.rbuf.capacity() - self.rstart;
        if self.rstart > 0
            && (self.rstart == self.rend
                || self.rbuf.len() - self.rend < READ_CHUNK / 2
                || short_of_wanted)
        {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        let len = self.rbuf.len();
        if len - self.rend >= READ_CHUNK / 2 {
            return true;
        }
        if short_of_wanted {
            // `rstart` is 0 here. Address space only, nothing committed; if
            // even that is refused (a huge `max-request-bytes`, strict
            // overcommit), the buffer grows by doubling as before.
            let _ = self.rbuf.try_reserve_exact(self.wanted + READ_CHUNK - len);
        }
        let mut grow = len.max(READ_CHUNK);
        let spare = self.rbuf.capacity() - len;
        if spare >= READ_CHUNK / 2 {
            grow = grow.min(spare);
        }
        let total = &shared.query_buffers;
        let cap = shared.live.max_total_query_bytes();
        if len + grow > QUERY_FLOOR && total.load(Ordering::Relaxed).saturating_add(grow) > cap {
            return false;
        }
        total.fetch_add(grow, Ordering::Relaxed);
        self.rbuf.resize(len + grow, 0);
        true
    }

    /// Executes the complete requests in the input. Returns the bytes used.
    pub fn process(&mut self, cx_parts: CxParts<'_>, reply_budget: usize) -> usize {
        if self.turn_mark.is_none() {
            self.turn_mark = Some(self.wbuf.len());
        }
        let client = self.client.id;
        let cluster = cx_parts.shared.cluster().filter(|_| !cx_parts.loading);
        let parking = cluster.map(|_| Parking {
            park: &self.park,
            inbox: cx_parts.inbox,
            token: cx_parts.token,
            client,
        });
        let mut cx = Cx {
            shared: cx_parts.shared,
            session: cx_parts.session,
            batch: cx_parts.batch,
            client: &mut self.client,
            read: None,
            loading: cx_parts.loading,
            stats: cx_parts.stats,
            parking,
            held: None,
            // Plain sockets only (TLS encrypts from a copy anyway), and one
            // value at a time.
            send_shared: (self.tls.is_none() && self.wshared.is_none())
                .then_some(&self.send_shared),
        };
        // A bug in a command must cost one connection, not the event loop
        // and every other client on it.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.proto.process(
                &mut cx,
                &self.rbuf[self.rstart..self.rend],
                &mut self.wbuf,
                reply_budget,
            )
        }));
        let out = match result {
            Ok(out) => out,
            Err(_) => {
                tracing::error!(
                    client = self.client.id,
                    "request handling panicked; closing the connection"
                );
                self.wbuf.extend_from_slice(self.proto.internal_error());
                Processed {
                    consumed: self.rend - self.rstart,
                    close: true,
                    abort: false,
                    postponed: false,
                    wanted: 0,
                    large: None,
                }
            }
        };
        if let Some((at, value)) = self.send_shared.get_mut().take() {
            Stats::add(&cx_parts.shared.stats.large_values_sent_uncopied, 1);
            self.wshared = Some((at, value, 0));
        }
        self.rstart += out.consumed;
        self.wanted = out.wanted;
        if out.consumed > 0 {
            // The request at `rstart` was answered: its large value with it.
            self.drop_large(cx_parts.shared);
        }
        if self.large_bytes > 0 {
            // Its input holds what follows the value, not the value.
            self.wanted = 0;
        } else if let Some((at, len)) = out.large
            && !self.input_closed
        {
            self.start_large(cx_parts.shared, at, len);
        }
        // A read index that landed served this processing of the input it
        // was asked for; input read later needs its own.
        self.park.get_mut().forget_read();
        if out.abort {
            self.abort_turn();
        }
        if out.close {
            self.input_closed = true;
            self.close_after_flush = true;
        }
        self.postponed = out.postponed;
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        self.shrink_input(cx_parts.shared);
        self.count_output(cx_parts.shared);
        self.publish_input();
        out.consumed
    }

    /// Gives back a large input buffer once little of it is in use (a large
    /// request is done): the unprocessed input moves to a buffer of its own
    /// size.
    fn shrink_input(&mut self, shared: &Shared) {
        let len = self.rbuf.len();
        let used = self.rend - self.rstart;
        if len <= SHRINK_ABOVE || used * 4 > len {
            return;
        }
        let keep = if used == 0 { 0 } else { used.max(READ_CHUNK) };
        let mut smaller = vec![0; keep];
        smaller[..used].copy_from_slice(&self.rbuf[self.rstart..self.rend]);
        self.rbuf = smaller;
        self.rstart = 0;
        self.rend = used;
        shared
            .query_buffers
            .fetch_sub(len - keep, Ordering::Relaxed);
    }

    /// Publishes the input buffer's state (CLIENT LIST's `qbuf`): after a
    /// read, so that a command sees its own request in it, as in Redis, and
    /// after processing.
    fn publish_input(&self) {
        let pending = self.rend - self.rstart + self.large_bytes;
        let free = self.rbuf.len() - self.rend;
        self.client
            .live
            .publish_input(self.rbuf.len() + self.large_bytes, pending, free);
    }

    /// Brings `Shared::output_buffers` up to date with the output buffer,
    /// and publishes it (CLIENT LIST's `obl`, `omem`).
    pub fn count_output(&mut self, shared: &Shared) {
        // A value sent from its shared bytes is held for this client as
        // long as it is unsent, as a copy would be.
        let cap = self.wbuf.capacity() + self.shared_unsent();
        self.client.live.publish_output(cap, self.pending_output());
        if cap >= self.out_counted {
            shared
                .output_buffers
                .fetch_add(cap - self.out_counted, Ordering::Relaxed);
        } else {
            shared
                .output_buffers
                .fetch_sub(self.out_counted - cap, Ordering::Relaxed);
        }
        self.out_counted = cap;
    }

    /// Drops both buffers (the connection is closing, or passed a limit)
    /// and takes them out of the shared counts.
    pub fn release(&mut self, shared: &Shared) {
        shared
            .query_buffers
            .fetch_sub(self.rbuf.len(), Ordering::Relaxed);
        self.drop_large(shared);
        self.rbuf = Vec::new();
        self.rstart = 0;
        self.rend = 0;
        self.wanted = 0;
        self.wbuf = Vec::new();
        self.wpos = 0;
        self.wshared = None;
        self.count_output(shared);
    }

    /// Writes the output up to the end of the value sent from its shared
    /// bytes, if there is one: with `writev`, the output before it, the
    /// value and the output after it at once. A value the socket does not
    /// take whole stays shared (no copy) until it does. Ok(true): no such
    /// value is left.
    fn flush_shared(&mut self) -> io::Result<bool> {
        while let Some((at, value, sent)) = &mut self.wshared {
            let before = &self.wbuf[self.wpos..*at];
            let rest = &value[*sent..];
            let after = &self.wbuf[*at..];
            let (b, r) = (before.len(), rest.len());
            let wrote = self.stream.write_vectored(&[
                io::IoSlice::new(before),
                io::IoSlice::new(rest),
                io::IoSlice::new(after),
            ]);
            let n = match wrote {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n < b {
                self.wpos += n;
            } else if n < b + r {
                self.wpos = *at;
                *sent += n - b;
            } else {
                self.wpos = *at + (n - b - r);
                self.wshared = None;
            }
        }
        Ok(true)
    }

    /// Drops the replies produced this turn (they may acknowledge writes
    /// whose commit failed) and closes after what was produced before.
    pub fn abort_turn(&mut self) {
        if let Some(mark) = self.turn_mark.take() {
            self.wbuf.truncate(mark.max(self.wpos));
            if self.wshared.as_ref().is_some_and(|w| w.0 > self.wbuf.len()) {
                // Its reply was dropped with the turn's.
                self.wshared = None;
            }
        }
        self.input_closed = true;
        self.close_after_flush = true;
    }

    /// Writes as much output as the socket takes. Ok(true): all written.
    pub fn flush(&mut self) -> io::Result<bool> {
        if !self.flush_shared()? {
            return Ok(false);
        }
        // No value is sent from shared bytes over TLS (`process`).
        if let Some(t) = &mut self.tls {
            let (taken, all) = t.write(&mut self.stream, &self.wbuf[self.wpos..])?;
            self.wpos += taken;
            if !all {
                return Ok(false);
            }
        }
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        // Give back the memory of a large reply once it is written.
        if self.wbuf.capacity() > SHRINK_ABOVE {
            self.wbuf = Vec::new();
        }
        Ok(true)
    }
}

/// One read from the socket, through TLS if the connection has it, into
/// `buf`; retried when interrupted. A failed TLS handshake is recorded.
fn read_once(
    stream: &mut Stream,
    tls: &mut Option<Box<Tls>>,
    buf: &mut [u8],
    shared: &Shared,
    client: &Client,
) -> io::Result<usize> {
    loop {
        let (read, handshaking) = match tls {
            None => (stream.read(buf), false),
            Some(t) => {
                let handshaking = t.handshaking();
                (t.read(stream, buf), handshaking)
            }
        };
        match read {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() != io::ErrorKind::WouldBlock && handshaking => {
                shared.tls.failed(&client.addr.to_string(), &e.to_string());
                return Err(e);
            }
            read => return read,
        }
    }
}

/// The parts of a `Cx` the event loop owns.
pub(crate) struct CxParts<'a> {
    pub shared: &'a crate::state::Shared,
    pub session: &'a combkv::Session<'a>,
    pub batch: &'a mut combkv::readexec::BatchResults,
    /// On a cluster node, where this loop hears that a parked connection
    /// may go on (none while draining at shutdown: writes then block).
    pub inbox: Option<&'a std::sync::Arc<Inbox>>,
    /// The connection's token in its loop.
    pub token: usize,
    /// The node did not serve when the turn began (see `Cx::loading`).
    pub loading: bool,
    /// The loop's per-command counts.
    pub stats: &'a crate::state::cmdstats::LoopStats,
}
