//! Event loops: one thread per core, each with its own `mio` poll and its
//! own connections, so a connection is only ever touched by one thread and
//! needs no lock. The acceptor hands new connections out round-robin.
//!
//! One turn of a loop: wait for events; read and process every readable
//! connection (reads among its requests go to the read engine as one batch);
//! then write every connection's replies. A connection gets at most
//! `TURN_INPUT_BYTES` of input processed per turn, so one busy client cannot
//! starve the rest; the remainder is picked up next turn.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use combkv::readexec::BatchResults;
use crossbeam_channel::Receiver;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::net::connection::{Connection, CxParts, Fill};
use crate::node::park::Inbox;
use crate::state::clients::{FLAG_BLOCKED, Mailbox, Paused};
use crate::state::{Shared, Stats};

/// Input processed per connection per turn.
const TURN_INPUT_BYTES: usize = 1 << 20;
/// The waker's token (connections use slab indexes).
pub(crate) const WAKER: Token = Token(usize::MAX);

/// A connection on its way from the acceptor to a loop.
pub(crate) type NewConn = Connection;

pub(crate) struct EventLoop {
    poll: Poll,
    conns: Slab<Connection>,
    incoming: Receiver<NewConn>,
    shared: Arc<Shared>,
    batch: BatchResults,
    /// The hot-entry cache slots `batch` was made with (`hot-cache-entries`
    /// when it was).
    hot_entries: usize,
    /// Connections with input left over from the last turn.
    again: Vec<usize>,
    /// This turn's connections to serve, (token, whether a short read may
    /// end its reading); kept to reuse its allocation.
    ready: Vec<(usize, bool)>,
    /// Connections with output to write at the end of this turn.
    dirty: Vec<usize>,
    /// Connections whose input was processed this turn.
    served: Vec<usize>,
    /// On a cluster node: where parked connections' answers land.
    inbox: Option<Arc<Inbox>>,
    /// Parked connections whose answer landed: served first next turn.
    resumed: Vec<usize>,
    /// TLS connections still in their handshake, checked against their
    /// deadline every turn (a poll waits at most 100 ms).
    handshaking: Vec<usize>,
    /// The clock when `poll` last returned: when connections served in
    /// this wakeup last read or wrote (one clock read per wakeup).
    now: std::time::Instant,
    /// The node did not serve yet when this turn began (`Cx::loading`).
    loading: bool,
    /// This loop's per-command counts (summed by INFO and the metrics).
    stats: Arc<crate::state::cmdstats::LoopStats>,
    /// Where CLIENT KILL posts this loop's connections to close.
    mailbox: Arc<Mailbox>,
    /// Connections whose next request waits for a CLIENT PAUSE to end.
    postponed: Vec<usize>,
}

impl EventLoop {
    pub(crate) fn new(
        shared: Arc<Shared>,
        incoming: Receiver<NewConn>,
    ) -> io::Result<(EventLoop, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let inbox = shared
            .config
            .clustered()
            .then(|| Arc::new(Inbox::new(Arc::clone(&waker))));
        let batch = shared.config.read_results();
        let stats = shared.new_loop_stats();
        let mailbox = Arc::new(Mailbox::new(Arc::clone(&waker)));
        Ok((
            EventLoop {
                poll,
                conns: Slab::new(),
                incoming,
                hot_entries: shared.config.hot_cache_entries,
                shared,
                batch,
                again: Vec::new(),
                ready: Vec::new(),
                dirty: Vec::new(),
                served: Vec::new(),
                inbox,
                resumed: Vec::new(),
                handshaking: Vec::new(),
                now: std::time::Instant::now(),
                loading: true,
                stats,
                mailbox,
                postponed: Vec::new(),
            },
            waker,
        ))
    }

    /// Runs until shutdown, then finishes what was read and flushes replies.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if !self.again.is_empty() {
                Duration::ZERO
            } else if self.postponed.is_empty() {
                Duration::from_millis(100)
            } else {
                // Wake when the pause ends (CLIENT UNPAUSE wakes every loop).
                let left = self.shared.pause.left().unwrap_or_default();
                left.min(Duration::from_millis(100))
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!("event loop poll failed: {e}");
                break;
            }
            self.now = std::time::Instant::now();
            // (token, whether a short read may end its reading): only for a
            // readable event that reports no hang-up or error. Connections
            // served again without an event, or whose peer closed, read
            // until `WouldBlock` or end of input.
            let mut ready = std::mem::take(&mut self.ready);
            ready.extend(self.again.drain(..).map(|t| (t, false)));
            for ev in events.iter() {
                if ev.token() == WAKER {
                    self.adopt();
                    self.take_landed();
                    self.take_kills();
                    self.take_monitor_out();
                    continue;
                }
                let t = ev.token().0;
                if ev.is_writable() {
                    self.dirty.push(t);
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    ready.push((t, !(ev.is_read_closed() || ev.is_error())));
                }
            }
            // Loading is read before the store: a turn that finds the node
            // serving finds its store too.
            self.loading = self.shared.readiness.loading();
            self.shared
                .fit_hot_cache(&mut self.batch, &mut self.hot_entries);
            let store = self.shared.current_store();
            let session = store.session();
            // Parked connections whose answer landed go on with the input
            // they parked on before their sockets are read again (a read
            // index covers only that input); then they read until
            // `WouldBlock`, since edges that came meanwhile were passed by.
            for t in std::mem::take(&mut self.resumed) {
                self.serve(t, &session, false, true);
            }
            self.resume_postponed(&session);
            // Per token, the full read wins over the short one.
            ready.sort_unstable();
            ready.dedup_by_key(|r| r.0);
            for &(t, short_ok) in &ready {
                self.serve(t, &session, short_ok, false);
            }
            if let (Some(inbox), Some(cluster)) = (&self.inbox, self.shared.cluster()) {
                inbox.submit(cluster);
            }
            ready.clear();
            self.ready = ready;
            // One group commit covers every write of the turn; only then do
            // their replies leave.
            if let Err(e) = session.commit() {
                tracing::error!("commit failed, dropping this turn's replies: {e}");
                for (t, conn) in self.conns.iter_mut() {
                    if conn.turn_mark.is_some() {
                        conn.abort_turn();
                        self.dirty.push(t);
                    }
                }
            }
            self.write_out();
            self.close_overdue_handshakes();
            for t in self.served.drain(..) {
                if let Some(conn) = self.conns.get_mut(t) {
                    conn.turn_mark = None;
                }
            }
            if self.shared.shutting_down.load(Ordering::Acquire) {
                self.drain();
                return;
            }
        }
    }

    /// Takes what landed for parked connections (see `park`).
    fn take_landed(&mut self) {
        let Some(inbox) = &self.inbox else { return };
        for l in inbox.take() {
            // A connection closed meanwhile may have passed its token on.
            if let Some(conn) = self.conns.get_mut(l.token)
                && conn.client.id == l.client
            {
                conn.park.get_mut().land(l.what);
                self.resumed.push(l.token);
            }
        }
    }

    /// Closes the connections CLIENT KILL named (its entry is marked, so
    /// `serve` would not serve it either).
    fn take_kills(&mut self) {
        for (t, id) in self.mailbox.take_kills() {
            if self.conns.get(t).is_some_and(|c| c.client.id == id) {
                self.close(t);
            }
        }
    }

    /// Writes the MONITOR lines other loops posted to their clients here.
    fn take_monitor_out(&mut self) {
        for (t, id, line) in self.mailbox.take_monitor_out() {
            if let Some(conn) = self.conns.get_mut(t)
                && conn.client.id == id
            {
                conn.wbuf.extend_from_slice(&line);
                conn.count_output(&self.shared);
                self.dirty.push(t);
            }
        }
    }

    /// Once a CLIENT PAUSE is over, serves again the connections it held:
    /// first the input they stopped at, then what their sockets hold.
    fn resume_postponed(&mut self, session: &combkv::Session<'_>) {
        if self.postponed.is_empty() || self.shared.pause.now() != Paused::No {
            return;
        }
        for t in std::mem::take(&mut self.postponed) {
            // A connection closed meanwhile may have passed its token on.
            if let Some(conn) = self.conns.get_mut(t)
                && conn.postponed
            {
                conn.postponed = false;
                conn.client.live.set_flag(FLAG_BLOCKED, false);
                self.shared.pause.hold(false);
                self.serve(t, session, false, true);
            }
        }
    }

    /// Registers connections the acceptor sent.
    fn adopt(&mut self) {
        while let Ok(mut conn) = self.incoming.try_recv() {
            let entry = self.conns.vacant_entry();
            let t = entry.key();
            if let Err(e) =
                self.poll
                    .registry()
                    .register(&mut conn.stream, Token(t), Interest::READABLE)
            {
                tracing::warn!(
                    "cannot register a connection with epoll: {e}; it was closed (the \
                     client may reconnect); check the open files limit (ulimit -n)"
                );
                self.shared.clients.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            // Settled first: a kill may come as soon as it is listed.
            conn.client.live.settle(&self.mailbox, t);
            self.shared
                .client_registry
                .lock()
                .insert(conn.client.id, Arc::clone(&conn.client.live));
            if conn.tls.is_some() {
                self.handshaking.push(t);
            }
            entry.insert(conn);
            // Data may have arrived before registration.
            self.again.push(t);
        }
    }

    /// Reads and processes one connection's input, up to the turn budget.
    /// With `short_ok`, a read that returns less than the room offered ends
    /// the reading: the socket is drained, and the next data brings a new
    /// edge. That saves the `WouldBlock` read (a third of the syscalls of an
    /// unpipelined request). A `resumed` connection (its answer from the
    /// log landed) first runs the input it parked on, then reads.
    fn serve(&mut self, t: usize, session: &combkv::Session<'_>, short_ok: bool, resumed: bool) {
        let max_reply = self.shared.live.max_reply_bytes();
        let max_request = self.shared.live.max_request_bytes() as usize;
        let hard_limit = self.shared.live.client_output_hard_limit();
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.park.get_mut().waiting || conn.postponed {
            // Neither read nor served until its answer lands (the pause
            // ends).
            return;
        }
        if conn.client.live.killed() {
            self.close(t);
            return;
        }
        let mut budget = TURN_INPUT_BYTES;
        let mut failed = false;
        let mut read = !resumed;
        loop {
            // A resumed connection first runs the input it parked on, even
            // past EOF or with replies waiting: that input is what its
            // landed answer (a read index, a read elsewhere) covers, and
            // input read before it runs would be covered too.
            if read && (conn.input_closed || conn.pending_output() > max_reply) {
                // Paused until the client reads its replies (see write_out).
                break;
            }
            let mut drained = false;
            // None: nothing read this time (a resumed connection's first
            // round; edges that came while it was parked were passed by,
            // so it then reads until `WouldBlock`).
            let got = if !std::mem::replace(&mut read, true) {
                None
            } else {
                Some(match conn.fill(&self.shared) {
                    Ok(Fill::Data { n, short }) => {
                        conn.client.live.touch(self.now);
                        drained = short && short_ok;
                        n
                    }
                    Ok(Fill::WouldBlock) => 0,
                    Ok(Fill::OverLimit) => {
                        refuse_query(&self.shared, conn);
                        break;
                    }
                    Ok(Fill::Eof) => {
                        conn.input_closed = true;
                        conn.close_after_flush = true;
                        0
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                })
            };
            if let Some(n) = got {
                Stats::add(&self.shared.stats.net_input_bytes, n as u64);
            }
            // A resumed connection is processed even with no input left:
            // the replies it held render first.
            if conn.pending_input() > 0 || got.is_none() {
                let before = conn.pending_output();
                let parts = CxParts {
                    shared: &self.shared,
                    session,
                    batch: &mut self.batch,
                    inbox: self.inbox.as_ref(),
                    token: t,
                    loading: self.loading,
                    stats: &self.stats,
                };
                let used = conn.process(parts, max_reply);
                self.served.push(t);
                if conn.pending_output() != before {
                    self.dirty.push(t);
                }
                if hard_limit != 0 && conn.pending_output() > hard_limit {
                    output_limit_reached(&self.shared, conn);
                    failed = true;
                    break;
                }
                if conn.park.get_mut().waiting {
                    // Read no more until the log answers.
                    break;
                }
                if conn.postponed {
                    // Read no more until the pause ends.
                    conn.client.live.set_flag(FLAG_BLOCKED, true);
                    self.shared.pause.hold(true);
                    self.postponed.push(t);
                    break;
                }
                budget = budget.saturating_sub(used);
                if used == 0 && conn.pending_input() > max_request.saturating_add(READ_SLACK) {
                    // The protocol checks declared lengths itself; this only
                    // catches a request that never completes its framing.
                    Stats::add(&self.shared.stats.protocol_errors, 1);
                    failed = true;
                    break;
                }
            }
            if got == Some(0) || drained {
                break;
            }
            if budget == 0 {
                // More may be waiting in the socket: come back next turn.
                self.again.push(t);
                break;
            }
        }
        if failed {
            self.close(t);
        } else if conn_done(&self.conns[t]) || self.conns[t].tls_wants_write() {
            // Finished, or TLS has handshake messages to send.
            self.dirty.push(t);
        }
    }

    /// Closes TLS connections whose handshake passed its deadline, and
    /// forgets those whose handshake is done (or that closed).
    fn close_overdue_handshakes(&mut self) {
        if self.handshaking.is_empty() {
            return;
        }
        let now = std::time::Instant::now();
        let mut overdue = Vec::new();
        self.handshaking.retain(|&t| {
            let Some(tls) = self.conns.get(t).and_then(|c| c.tls.as_ref()) else {
                return false;
            };
            if tls.overdue(now) {
                overdue.push(t);
                return false;
            }
            tls.handshaking()
        });
        for t in overdue {
            let addr = self.conns[t].client.addr.to_string();
            self.shared
                .tls
                .failed(&addr, "no handshake within the time allowed");
            self.close(t);
        }
    }

    /// Writes every dirty connection's replies; closes finished connections.
    fn write_out(&mut self) {
        let max_reply = self.shared.live.max_reply_bytes();
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for t in dirty.drain(..) {
            let Some(conn) = self.conns.get_mut(t) else {
                continue;
            };
            let before = conn.pending_output();
            // Published as sent before it is: a client that read its reply
            // must not see it as unsent in CLIENT LIST (`count_output`
            // below publishes what a short write left).
            conn.client.live.publish_output(conn.wbuf.capacity(), 0);
            let flushed = conn.flush();
            conn.count_output(&self.shared);
            let sent = before - conn.pending_output();
            Stats::add(&self.shared.stats.net_output_bytes, sent as u64);
            if sent > 0 {
                // Redis's `lastinteraction` counts writes too.
                conn.client.live.touch(self.now);
            }
            match flushed {
                Err(_) => self.close(t),
                Ok(true) => {
                    if conn.close_after_flush {
                        self.close(t);
                        continue;
                    }
                    if conn.want_writable {
                        conn.want_writable = false;
                        conn.client.live.writable.store(false, Ordering::Relaxed);
                        let _ = self.poll.registry().reregister(
                            &mut conn.stream,
                            Token(t),
                            Interest::READABLE,
                        );
                    }
                    // A paused connection may have input waiting.
                    if before > max_reply || conn.pending_input() > 0 {
                        self.again.push(t);
                    }
                }
                Ok(false) => {
                    if !conn.want_writable {
                        conn.want_writable = true;
                        conn.client.live.writable.store(true, Ordering::Relaxed);
                        let _ = self.poll.registry().reregister(
                            &mut conn.stream,
                            Token(t),
                            Interest::READABLE | Interest::WRITABLE,
                        );
                    }
                }
            }
        }
        self.dirty = dirty;
    }

    fn close(&mut self, t: usize) {
        if let Some(mut conn) = self.conns.try_remove(t) {
            conn.release(&self.shared);
            if conn.postponed {
                self.shared.pause.hold(false);
            }
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.shared.clients.fetch_sub(1, Ordering::Relaxed);
            self.shared.client_registry.lock().remove(&conn.client.id);
            self.shared.monitors.remove(conn.client.id);
        }
    }

    /// Shutdown: requests already read are answered, replies are flushed
    /// (for up to a few seconds), then every connection is closed.
    fn drain(&mut self) {
        // Parked connections first get their answers (a write in flight
        // must not be proposed twice); then the rest of the input runs
        // with writes that block.
        if self.inbox.is_some() {
            let deadline = std::time::Instant::now() + combkv_replica::REQUEST_TIMEOUT;
            while self.conns.iter().any(|(_, c)| c.park.borrow().waiting)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
                self.take_landed();
            }
        }
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        self.loading = self.shared.readiness.loading();
        let store = self.shared.current_store();
        let session = store.session();
        for &t in &tokens {
            // Held replies whose writes landed render too.
            if let Some(conn) = self.conns.get_mut(t)
                && (conn.pending_input() > 0 || conn.park.get_mut().has_outcomes())
            {
                let parts = CxParts {
                    shared: &self.shared,
                    session: &session,
                    batch: &mut self.batch,
                    inbox: None,
                    token: t,
                    loading: self.loading,
                    stats: &self.stats,
                };
                conn.process(parts, usize::MAX);
            }
        }
        if let Err(e) = session.commit() {
            tracing::error!("commit failed at shutdown, dropping unacknowledged replies: {e}");
            for (_, conn) in self.conns.iter_mut() {
                if conn.turn_mark.is_some() {
                    conn.abort_turn();
                }
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for t in tokens {
            if let Some(conn) = self.conns.get_mut(t) {
                while conn.pending_output() > 0 && std::time::Instant::now() < deadline {
                    match conn.flush() {
                        Ok(true) | Err(_) => break,
                        Ok(false) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }
            self.close(t);
        }
    }
}

/// A client whose pending replies passed `client-output-hard-limit`: its
/// replies are dropped and it is closed (Redis's client output buffer
/// limit). The first time is logged as a warning, later ones at debug.
fn output_limit_reached(shared: &Shared, conn: &mut Connection) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    Stats::add(&shared.stats.output_limit_disconnections, 1);
    let pending = conn.pending_output();
    if LOGGED.swap(true, Ordering::Relaxed) {
        tracing::debug!(
            client = conn.client.id,
            pending,
            "client-output-hard-limit reached"
        );
    } else {
        tracing::warn!(
            client = conn.client.id,
            addr = %conn.client.addr,
            pending,
            "closing a client whose pending replies passed client-output-hard-limit \
             (logged once; INFO stats counts them)"
        );
    }
    conn.release(shared);
}

/// A client whose input needs a larger buffer while every client's input
/// buffers together are at `max-total-query-bytes`: it gets an error and
/// is closed, so that large requests arriving slowly cannot hold memory
/// without bound.
fn refuse_query(shared: &Shared, conn: &mut Connection) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    Stats::add(&shared.stats.query_limit_disconnections, 1);
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            client = conn.client.id,
            addr = %conn.client.addr,
            "closing a client: the input buffers of all clients are at max-total-query-bytes \
             (logged once; INFO stats counts them)"
        );
    }
    conn.wbuf.extend_from_slice(conn.proto.query_limit_error());
    conn.input_closed = true;
    conn.close_after_flush = true;
}

/// Slack over `max-request-bytes` for framing around the largest request.
const READ_SLACK: usize = 64 * 1024;

fn conn_done(c: &Connection) -> bool {
    c.close_after_flush
}
