//! The threading model combkv did not choose, kept so the choice can be
//! measured again: a task per connection on a multi-threaded tokio runtime,
//! RESP only, over the same protocol code and store as the event loops
//! (docs/design.md, "Threading model"). Built only with the `tokio-variant`
//! feature, for `examples/tokio_variant.rs`; not a way to run combkv. It has
//! no memcached listener, no client limit, no client registry, and no clean
//! shutdown (the process is killed).
//!
//! Each task does what an event-loop turn does for one connection: read,
//! process every complete request (reads as read-engine batches), commit
//! the session once (group commit of the connection's writes), write the
//! replies, and read again.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use combkv::readexec::BatchResults;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::{Listen, ServerConfig};
use crate::proto::{Client, Cx, ProtoState};
use crate::resp::RespConn;
use crate::shared::Shared;

/// Bytes offered to each read.
const READ_CHUNK: usize = 16 * 1024;

/// Serves RESP on `config.resp` with `config.thread_count()` runtime
/// workers until the process ends. Err: a one-line reason it could not
/// start.
pub fn serve(config: ServerConfig) -> Result<(), String> {
    config.validate()?;
    let Listen::At(addr) = config.resp else {
        return Err("the tokio variant needs a RESP address".into());
    };
    let store = crate::server::open_store(&config).map_err(|e| e.to_string())?;
    let workers = config.thread_count();
    let shared = Arc::new(Shared::new(Arc::new(store), config));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_io()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} (resp): {e}"))?;
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = connection(stream, peer, shared).await {
                    tracing::debug!("connection from {peer} ended: {e}");
                }
            });
        }
    })
}

async fn connection(
    mut stream: TcpStream,
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> io::Result<()> {
    let mut client = Client {
        id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
        addr,
        name: None,
        connected_at: Instant::now(),
    };
    let mut proto = ProtoState::Resp(RespConn::new(shared.config.requirepass.is_some()));
    let mut batch = BatchResults::new();
    let max_reply = shared.config.max_reply_bytes.0 as usize;
    let max_request = shared.config.max_request_bytes.0 as usize;
    let (mut rbuf, mut rend) = (vec![0u8; READ_CHUNK], 0);
    let mut wbuf = Vec::new();
    // Whether the unprocessed input may still hold complete requests (the
    // last turn stopped at the reply budget): process before reading.
    let mut more = false;
    loop {
        if !more {
            if rbuf.len() - rend < READ_CHUNK / 2 {
                if rend > max_request {
                    return Ok(());
                }
                let grow = rbuf.len();
                rbuf.resize(rbuf.len() + grow, 0);
            }
            let n = stream.read(&mut rbuf[rend..]).await?;
            if n == 0 {
                return Ok(());
            }
            rend += n;
        }
        let out = {
            let session = shared.store.session();
            let mut cx = Cx {
                shared: &shared,
                session: &session,
                batch: &mut batch,
                client: &mut client,
            };
            let out = proto.process(&mut cx, &rbuf[..rend], &mut wbuf, max_reply);
            // Replies leave only once the writes they acknowledge commit.
            if out.abort || session.commit().is_err() {
                return Ok(());
            }
            out
        };
        rbuf.copy_within(out.consumed..rend, 0);
        rend -= out.consumed;
        more = out.consumed > 0 && rend > 0 && wbuf.len() > max_reply;
        if !wbuf.is_empty() {
            stream.write_all(&wbuf).await?;
            wbuf.clear();
        }
        if out.close {
            return Ok(());
        }
    }
}
