//! Requests between nodes over TCP: one request at a time per connection,
//! framed as `[length: u32 LE][postcard payload]`, with idle connections
//! kept per peer. Outgoing connections leave from the node's own address,
//! so that a rule that cuts a node off (a firewall rule on its address in
//! the partition tests) cuts both directions.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::{BoxFuture, Handler, Transport};
use crate::rpc::{self, MAX_FRAME_BYTES, Request, Response};
use crate::types::NodeId;

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 4;

/// The TCP transport of one node.
#[derive(Debug)]
pub(crate) struct TcpTransport {
    /// The address outgoing connections are bound to (port 0).
    local_ip: Option<IpAddr>,
    idle: Mutex<HashMap<NodeId, Vec<TcpStream>>>,
}

impl TcpTransport {
    pub(crate) fn new(local_ip: Option<IpAddr>) -> TcpTransport {
        TcpTransport {
            local_ip,
            idle: Mutex::new(HashMap::new()),
        }
    }

    async fn connect(&self, addr: &str) -> io::Result<TcpStream> {
        let to: SocketAddr = tokio::net::lookup_host(addr).await?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no address for {addr}"))
        })?;
        let socket = if to.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = self.local_ip
            && ip.is_ipv4() == to.is_ipv4()
        {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        let stream = socket.connect(to).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn round_trip(&self, target: NodeId, addr: &str, frame: &[u8]) -> io::Result<Response> {
        let mut pooled = None;
        while let Some(s) = self.idle.lock().get_mut(&target).and_then(Vec::pop) {
            if still_open(&s) {
                pooled = Some(s);
                break;
            }
        }
        let mut stream = match pooled {
            Some(s) => s,
            None => self.connect(addr).await?,
        };
        stream.write_all(frame).await?;
        let payload = read_frame(&mut stream).await?;
        let resp = rpc::decode(&payload)?;
        let mut idle = self.idle.lock();
        let list = idle.entry(target).or_default();
        if list.len() < IDLE_PER_PEER {
            list.push(stream);
        }
        Ok(resp)
    }
}

impl Transport for TcpTransport {
    fn call(
        &self,
        target: NodeId,
        addr: &str,
        req: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, io::Result<Response>> {
        let addr = addr.to_string();
        Box::pin(async move {
            let frame = rpc::encode(&req)?;
            match tokio::time::timeout(timeout, self.round_trip(target, &addr, &frame)).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer from node {target} at {addr} within {timeout:?}"),
                )),
            }
        })
    }
}

/// Whether an idle connection may be used: the peer has not closed it.
/// A peer that restarted closed its old connections; sending on one would
/// fail only after the request left, and a write would then have to be
/// answered "may or may not have been applied" although it never arrived.
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.try_read(&mut byte) {
        // Nothing to read: open and idle, as it should be.
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        // Closed (0) or, out of turn, data: not usable either way.
        Ok(_) => false,
    }
}

/// Reads one frame's payload.
async fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame claims {len} bytes"),
        ));
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await?;
    Ok(payload)
}

/// Serves requests arriving on `listener` until the runtime shuts down.
pub(crate) async fn serve(listener: TcpListener, handler: Arc<dyn Handler>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, say: wait a little and go on.
                tracing::warn!("raft listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, &*handler).await
                && e.kind() != io::ErrorKind::UnexpectedEof
            {
                tracing::debug!("raft connection from {peer}: {e}");
            }
        });
    }
}

async fn serve_connection(mut stream: TcpStream, handler: &dyn Handler) -> io::Result<()> {
    loop {
        let payload = read_frame(&mut stream).await?;
        let req: Request = rpc::decode(&payload)?;
        let resp = handler.handle(req).await;
        stream.write_all(&rpc::encode(&resp)?).await?;
    }
}
