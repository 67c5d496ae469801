//! Entry points for the memcached fuzz targets
//! (`fuzz/fuzz_targets/memcache_parse.rs`, `memcache_binary_parse.rs`) and
//! the fuzz smoke tests
//! (`tests/fuzz_memcache.rs`), exported as `combkv_server::memcache_fuzzing`.
//! Not an API: it lets code outside the crate drive the parser and a whole
//! memcached connection without a socket.

use std::sync::Arc;

use combkv::Store;
use combkv::readexec::BatchResults;

pub use crate::memcache::binary::{BinParsed, parse as parse_binary};
pub use crate::memcache::error::McError;
pub use crate::memcache::parse::{Limits, Parsed, Request, parse as parse_memcache};

use crate::config::ServerConfig;
use crate::memcache::Memcache;
use crate::pipeline::Pipeline;
use crate::state::Shared;
use crate::turn::{Client, Cx};

/// One memcached connection over a real store, without a socket: bytes in,
/// reply bytes out, exactly as the event loop drives a connection (one
/// session per read, committed at its end).
#[derive(Debug)]
pub struct MemcacheSession {
    shared: Arc<Shared>,
    batch: BatchResults,
    client: Client,
    conn: Pipeline<Memcache>,
    input: Vec<u8>,
    /// Replies so far (the caller may clear it).
    pub output: Vec<u8>,
    /// The server closed the connection.
    pub closed: bool,
}

impl MemcacheSession {
    pub fn new(store: Arc<Store>, config: ServerConfig) -> MemcacheSession {
        let needs_auth = config.requirepass.is_some();
        let tls = crate::state::tls::ClientTls::off(&config);
        let acl = crate::state::acl::Acl::new(
            crate::resp::cmd::table::acl_catalog(),
            config.requirepass.as_deref(),
            None,
        )
        .expect("no ACL file to fail");
        MemcacheSession {
            shared: Arc::new(
                Shared::serving(crate::state::Node::Single(store), config, tls, acl)
                    .expect("an in-memory store"),
            ),
            batch: BatchResults::new(),
            client: Client::new(1, ([127, 0, 0, 1], 0).into(), None, -1, "memcached", None),
            conn: Pipeline::new(Memcache::new(needs_auth)),
            input: Vec::new(),
            output: Vec::new(),
            closed: false,
        }
    }

    /// The limits requests are parsed with.
    pub fn limits(&self) -> Limits {
        crate::memcache::limits(&self.shared)
    }

    /// Bytes received and not yet used (an incomplete request).
    pub fn pending_input(&self) -> usize {
        self.input.len()
    }

    /// Receives `bytes` as one read and runs every complete request.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.closed {
            return;
        }
        self.input.extend_from_slice(bytes);
        let budget = self.shared.config.max_reply_bytes.0 as usize;
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
            let out = self
                .conn
                .process(&mut cx, &self.input, &mut self.output, budget);
            assert!(out.consumed <= self.input.len(), "consumed past the input");
            assert!(!out.abort, "an in-memory store never fails a commit");
            self.input.drain(..out.consumed);
            if out.close {
                self.closed = true;
                self.input.clear();
                break;
            }
            if out.consumed == 0 || self.input.is_empty() {
                break;
            }
            if self.output.len() > budget {
                // The event loop would flush here and go on; a session
                // drops replies past the reply budget instead.
                self.output.clear();
            }
        }
        session.commit().expect("an in-memory store commits");
    }
}
