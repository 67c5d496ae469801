//! combkv's server: a Redis RESP listener and a memcached text/meta listener
//! over one [`combkv::Store`] (DESIGN.md section 6, PROTOCOL.md).
//!
//! - `config`: defaults, TOML file, flags; every limit
//! - `server`: start/stop, acceptor, housekeeping
//! - `event_loop`, `connection`: thread-per-core `mio` loops, buffers
//! - `proto`: the seam between a connection and its protocol
//! - `resp/`: frame -> command -> reply; `memcache/`: text and meta commands
//! - `info`, `metrics`, `slowlog`, `admin`: observability and whole-store ops

mod admin;
pub mod config;
mod connection;
mod event_loop;
pub mod info;
mod memcache;
mod metrics;
mod proto;
mod resp;
mod server;
mod shared;
mod slowlog;

pub use config::{ByteSize, DurabilityMode, Listen, ServerConfig};
pub use server::{Server, StartError, Stopper};

/// Entry points for the fuzz targets (`fuzz/`, `tests/fuzz_memcache.rs`);
/// not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use std::sync::Arc;
    use std::time::Instant;

    use combkv::Store;
    use combkv::readexec::BatchResults;

    pub use crate::memcache::error::McError;
    pub use crate::memcache::parse::{Limits, Parsed, Request, parse as parse_memcache};

    use crate::config::ServerConfig;
    use crate::memcache::McConn;
    use crate::proto::{Client, Cx};
    use crate::shared::Shared;

    /// One memcached connection over a real store, without a socket: bytes
    /// in, reply bytes out, exactly as the event loop drives a connection.
    #[derive(Debug)]
    pub struct MemcacheSession {
        shared: Arc<Shared>,
        batch: BatchResults,
        client: Client,
        conn: McConn,
        input: Vec<u8>,
        /// Replies so far (the caller may clear it).
        pub output: Vec<u8>,
        /// The server closed the connection.
        pub closed: bool,
    }

    impl MemcacheSession {
        pub fn new(store: Arc<Store>, config: ServerConfig) -> MemcacheSession {
            MemcacheSession {
                shared: Arc::new(Shared::new(store, config)),
                batch: BatchResults::new(),
                client: Client {
                    id: 1,
                    addr: ([127, 0, 0, 1], 0).into(),
                    name: None,
                    connected_at: Instant::now(),
                },
                conn: McConn::default(),
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

        /// Receives `bytes` and runs every complete request.
        pub fn feed(&mut self, bytes: &[u8]) {
            if self.closed {
                return;
            }
            self.input.extend_from_slice(bytes);
            let budget = self.shared.config.max_reply_bytes.0 as usize;
            loop {
                let mut cx = Cx {
                    shared: &self.shared,
                    batch: &mut self.batch,
                    client: &mut self.client,
                };
                let out = self
                    .conn
                    .process(&mut cx, &self.input, &mut self.output, budget);
                self.input.drain(..out.consumed);
                if out.close {
                    self.closed = true;
                    self.input.clear();
                    return;
                }
                if out.consumed == 0 || self.input.is_empty() {
                    return;
                }
                if self.output.len() > budget {
                    // The event loop would flush here and go on; a session
                    // drops replies past the reply budget instead.
                    self.output.clear();
                }
            }
        }
    }
}
