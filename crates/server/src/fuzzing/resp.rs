//! Entry points for the RESP fuzz target (`fuzz/fuzz_targets/resp_parse.rs`)
//! and the fuzz smoke tests (`tests/fuzz_resp.rs`), exported as
//! `combkv_server::resp_fuzzing`. Not an API: it lets code outside the crate
//! drive the frame parser and a whole RESP session without a socket.

use std::sync::Arc;

use combkv::Store;
use combkv::readexec::BatchResults;

use crate::config::ServerConfig;
use crate::pipeline::Pipeline;
use crate::resp::Resp;
use crate::resp::frame::{self, Frames, Limits};
use crate::state::Shared;
use crate::turn::{Client, Cx};

/// Parses every complete RESP request at the start of `input`, as the
/// listener would, checking the parser's own invariants. Returns the
/// requests parsed and the bytes they used; stops at the first incomplete
/// request or framing error.
pub fn resp_parse(input: &[u8], max_request_bytes: usize) -> (usize, usize) {
    let limits = Limits {
        max_request_bytes,
        authenticated: true,
        max_body: usize::MAX,
    };
    let mut frames = Frames::default();
    let (mut at, mut n) = (0, 0);
    while at < input.len() {
        let f = match frame::parse(&input[at..], limits, &mut frames) {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => break,
        };
        assert!(f.consumed > 0, "a complete request consumes input");
        assert!(at + f.consumed <= input.len(), "consumed past the input");
        for i in f.first..f.end {
            // Every argument lies inside the input or the scratch arena.
            let a = frames.arg(&input[at..], i);
            assert!(a.len() <= f.consumed.max(frames.scratch_len()));
        }
        at += f.consumed;
        n += 1;
    }
    (n, at)
}

/// One RESP connection over its own store, without a socket: bytes in,
/// reply bytes out, exactly as the event loop drives a connection.
#[derive(Debug)]
pub struct RespSession {
    shared: Arc<Shared>,
    conn: Pipeline<Resp>,
    client: Client,
    batch: BatchResults,
    input: Vec<u8>,
    closed: bool,
}

impl RespSession {
    /// A session on a fresh store configured by `config` (listeners are
    /// ignored).
    pub fn new(config: ServerConfig) -> RespSession {
        let store = Store::new(config.engine_config()).expect("valid engine config");
        let needs_auth = config.requirepass.is_some();
        let tls = crate::state::tls::ClientTls::off(&config);
        let acl = crate::state::acl::Acl::new(
            crate::resp::cmd::table::acl_catalog(),
            config.requirepass.as_deref(),
            None,
        )
        .expect("no ACL file to fail");
        let shared = Arc::new(
            Shared::serving(
                crate::state::Node::Single(Arc::new(store)),
                config,
                tls,
                acl,
            )
            .expect("an in-memory store"),
        );
        RespSession {
            shared,
            conn: Pipeline::new(Resp::new(needs_auth)),
            client: Client::new(1, ([127, 0, 0, 1], 1).into(), None, -1, "resp", None),
            batch: BatchResults::new(),
            input: Vec::new(),
            closed: false,
        }
    }

    /// True once the session would have closed the connection (QUIT, or a
    /// protocol error).
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// A new connection to the same store (the client reconnected).
    pub fn reconnect(&mut self) {
        self.conn = Pipeline::new(Resp::new(self.shared.config.requirepass.is_some()));
        self.client.name = None;
        self.input.clear();
        self.closed = false;
    }

    /// Bytes received and not yet used (an incomplete request).
    pub fn pending_input(&self) -> usize {
        self.input.len()
    }

    /// Feeds `bytes` as one read; returns the replies written. After the
    /// session has closed, input is ignored.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        self.input.extend_from_slice(bytes);
        let max_reply = self.shared.config.max_reply_bytes.0 as usize;
        let shared = self.shared.clone();
        let store = shared.current_store();
        let session = store.session();
        let stats = crate::state::cmdstats::LoopStats::none();
        loop {
            let mut cx = Cx {
                shared: &self.shared,
                session: &session,
                batch: &mut self.batch,
                client: &mut self.client,
                read: None,
                loading: false,
                stats: &stats,
                parking: None,
                held: None,
                send_shared: None,
            };
            // The client is assumed to read every reply: the budget counts
            // this round's output only.
            let before = out.len();
            let o = self
                .conn
                .process(&mut cx, &self.input, &mut out, before + max_reply);
            assert!(o.consumed <= self.input.len(), "consumed past the input");
            self.input.drain(..o.consumed);
            if o.close {
                self.closed = true;
                self.input.clear();
                return out;
            }
            if o.consumed == 0 {
                session.commit().expect("an in-memory store commits");
                return out;
            }
        }
    }
}

/// Runs `input` through a session as one read, then again split at `cut`
/// (two reads) on a second session with the same config, and checks that
/// both give the same replies: framing must not depend on how the bytes
/// arrive. Returns the replies.
pub fn resp_session(config: &ServerConfig, input: &[u8], cut: usize) -> Vec<u8> {
    let mut whole = RespSession::new(config.clone());
    let a = whole.feed(input);
    let mut split = RespSession::new(config.clone());
    let cut = cut.min(input.len());
    let mut b = split.feed(&input[..cut]);
    b.extend(split.feed(&input[cut..]));
    assert_eq!(
        whole.closed(),
        split.closed(),
        "closing depends on read boundaries"
    );
    if !replies_vary(input) {
        assert_eq!(a, b, "replies depend on read boundaries");
    }
    a
}

/// Requests whose replies legitimately differ between two runs (clocks,
/// ids, server statistics): their sessions are not compared byte for byte.
fn replies_vary(input: &[u8]) -> bool {
    // "ex" and "px" cover every expiry option and command: an item that
    // expires between the two runs changes later replies.
    const VARYING: [&[u8]; 10] = [
        b"time",
        b"info",
        b"client",
        b"slowlog",
        b"ttl",
        b"snapshot",
        b"lastsave",
        b"config",
        b"ex",
        b"px",
    ];
    let lower = input.to_ascii_lowercase();
    VARYING
        .iter()
        .any(|w| lower.windows(w.len()).any(|x| x == *w))
}
