//! The acceptor: one thread that accepts on every client listener (RESP
//! and memcached, each plain, over TLS and on a unix socket) and hands
//! each new connection,
//! with its protocol state and, on a TLS listener, a fresh TLS session, to
//! an event loop, round-robin.

use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::Sender;
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::net::connection::Connection;
use crate::net::proto::ProtoState;
use crate::net::stream::Stream;
use crate::net::tls::Tls;
use crate::pipeline::Pipeline;
use crate::state::{Shared, Stats};
use crate::turn::Client;

/// The acceptor's waker (TCP listeners use tokens 0..LISTENERS, the unix
/// sockets the two after).
pub(crate) const ACCEPTOR_WAKER: Token = Token(ALL);
/// How often a listener that ran out of descriptors tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kind {
    pub resp: bool,
    pub tls: bool,
}

/// The client listeners, in token order.
pub(crate) const KINDS: [Kind; LISTENERS] = [
    Kind {
        resp: true,
        tls: false,
    },
    Kind {
        resp: false,
        tls: false,
    },
    Kind {
        resp: true,
        tls: true,
    },
    Kind {
        resp: false,
        tls: true,
    },
];
const LISTENERS: usize = 4;
/// The unix sockets: RESP, memcached (plain, as their `KINDS`).
const UNIX_KINDS: [Kind; 2] = [KINDS[0], KINDS[1]];
/// Every listener, TCP then unix.
pub(crate) const ALL: usize = LISTENERS + UNIX_KINDS.len();

pub(crate) struct Acceptor {
    pub poll: Poll,
    /// Per `KINDS` entry, its listener if on.
    pub listeners: [Option<TcpListener>; LISTENERS],
    /// The RESP and memcached unix sockets, if on, with their paths.
    pub unix: [Option<(UnixListener, Arc<str>)>; 2],
    pub shared: Arc<Shared>,
    pub loops: Vec<(Sender<Connection>, Arc<Waker>)>,
    pub next: usize,
    /// Per listener: the last accept failed for want of descriptors or
    /// memory.
    pub stalled: [bool; ALL],
}

impl Acceptor {
    pub(crate) fn run(mut self) {
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if let Some(l) = l
                && let Err(e) = self
                    .poll
                    .registry()
                    .register(l, Token(i), Interest::READABLE)
            {
                tracing::error!("cannot register listener: {e}");
                return;
            }
        }
        for (i, u) in self.unix.iter_mut().enumerate() {
            if let Some((l, _)) = u
                && let Err(e) =
                    self.poll
                        .registry()
                        .register(l, Token(LISTENERS + i), Interest::READABLE)
            {
                tracing::error!("cannot register unix socket: {e}");
                return;
            }
        }
        let mut events = Events::with_capacity(64);
        while !self.shared.shutting_down.load(Ordering::Acquire) {
            // A stalled listener is retried on a timer: its readiness is
            // edge-triggered, and a full backlog brings no new edge.
            let timeout = if self.stalled.iter().any(|&s| s) {
                ACCEPT_RETRY
            } else {
                Duration::from_millis(200)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!("acceptor poll failed: {e}");
                return;
            }
            let mut tried = [false; ALL];
            for ev in events.iter() {
                if let Some(t) = tried.get_mut(ev.token().0) {
                    *t = true;
                }
            }
            for (i, tried) in tried.into_iter().enumerate() {
                if tried || self.stalled[i] {
                    self.accept_all(i);
                }
            }
        }
        // Listeners close here: no new connections during shutdown.
    }

    /// Accepts until the backlog is empty. Out of descriptors (or kernel
    /// memory) the listener is marked stalled and retried every
    /// `ACCEPT_RETRY` until an accept goes through again.
    fn accept_all(&mut self, i: usize) {
        loop {
            let accepted = match (
                self.listeners.get(i),
                self.unix.get(i.wrapping_sub(LISTENERS)),
            ) {
                (Some(Some(l)), _) => l.accept().map(|(s, addr)| {
                    let _ = s.set_nodelay(true);
                    (Stream::Tcp(s), addr, None, KINDS[i])
                }),
                (None, Some(Some((l, path)))) => l.accept().map(|(s, _)| {
                    let nowhere = SocketAddr::from(([0, 0, 0, 0], 0));
                    (
                        Stream::Unix(s),
                        nowhere,
                        Some(Arc::clone(path)),
                        UNIX_KINDS[i - LISTENERS],
                    )
                }),
                _ => return,
            };
            match accepted {
                Ok((stream, addr, path, kind)) => {
                    if std::mem::take(&mut self.stalled[i]) {
                        tracing::info!("accepting connections again");
                    }
                    self.adopt(stream, addr, path, kind);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stalled[i] = false;
                    return;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS, ENOMEM: retried on a timer.
                    if !std::mem::replace(&mut self.stalled[i], true) {
                        tracing::warn!(
                            "accept failed: {e}; retrying every {} ms",
                            ACCEPT_RETRY.as_millis()
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Hands a new connection to a loop (or refuses it at `maxclients`);
    /// `path`: a unix socket's, whose client has no address.
    fn adopt(&mut self, mut stream: Stream, addr: SocketAddr, path: Option<Arc<str>>, kind: Kind) {
        let shared = &self.shared;
        Stats::add(&shared.stats.connections_received, 1);
        let now = shared.clients.fetch_add(1, Ordering::Relaxed) + 1;
        if now > shared.live.maxclients() {
            shared.clients.fetch_sub(1, Ordering::Relaxed);
            Stats::add(&shared.stats.connections_rejected, 1);
            // A TLS client could not read a plain answer: it is just closed.
            let msg: &[u8] = match kind {
                Kind { tls: true, .. } => b"",
                Kind { resp: true, .. } => b"-ERR max number of clients reached\r\n",
                Kind { resp: false, .. } => b"SERVER_ERROR Too many open connections\r\n",
            };
            let _ = stream.write(msg);
            return;
        }
        let tls = match kind.tls.then(|| shared.tls.server_config()) {
            None => None,
            Some(Some(config)) => match rustls::ServerConnection::new(config) {
                Ok(c) => Some(Tls::new(c)),
                Err(e) => {
                    shared.tls.failed(&addr.to_string(), &e.to_string());
                    shared.clients.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            },
            // A TLS listener is bound only with a TLS configuration.
            Some(None) => {
                shared.clients.fetch_sub(1, Ordering::Relaxed);
                return;
            }
        };
        let auth = shared.acl.default_requires_auth();
        let proto = if kind.resp {
            ProtoState::Resp(Pipeline::new(crate::resp::Resp::new(auth)))
        } else {
            ProtoState::Memcache(Pipeline::new(crate::memcache::Memcache::new(auth)))
        };
        let laddr = match &stream {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
        };
        let client = Client::new(
            shared.next_client_id.fetch_add(1, Ordering::Relaxed),
            addr,
            laddr,
            stream.raw_fd(),
            proto.name(),
            path,
        );
        let mut conn = Connection::new(stream, proto, client);
        if let Some(tls) = tls {
            conn = conn.with_tls(tls);
        }
        let (tx, waker) = &self.loops[self.next % self.loops.len()];
        self.next += 1;
        if tx.send(conn).is_ok() {
            let _ = waker.wake();
        } else {
            shared.clients.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
