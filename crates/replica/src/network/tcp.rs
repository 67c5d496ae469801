//! Requests between nodes over TCP: one request at a time per connection,
//! framed as `[length: u32 LE][postcard payload]`, with idle connections
//! kept per peer. Outgoing connections leave from the node's own address,
//! so that a rule that cuts a node off (a firewall rule on its address in
//! the partition tests) cuts both directions, and so that a peer's
//! certificate can be checked against the address it comes from
//! (`tls.rs`). With peer TLS each connection is TLS from its first byte.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::tls::{self, HANDSHAKE_TIMEOUT, PeerGuard};
use super::{BoxFuture, Handler, Transport};
use crate::rpc::{self, MAX_FRAME_BYTES, Request, Response};
use crate::types::NodeId;

/// Idle connections kept per peer. A connection carries one request at a
/// time, and every group a node hosts talks to the same peers at once
/// (appends, heartbeats, read indexes, forwarded writes): with a few dozen
/// ranges, requests in flight to one peer number in the dozens. Four kept
/// meant every other request opened a connection and closed it after one
/// round trip; a ranged cluster serving reads then had some 20,000 sockets
/// in TIME_WAIT, spent its CPU in the kernel's search for a free port, and
/// timed its appends out (linearizable GETs through five nodes: 114 a
/// second with 4, 7,072 with 64).
const IDLE_PER_PEER: usize = 64;

/// A connection to a peer: plain TCP, or TLS over it.
trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + Sync + std::fmt::Debug {
    fn tcp(&self) -> &TcpStream;
}

impl PeerStream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl PeerStream for tokio_rustls::client::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// What a connection reads into before frames are taken from it: a
/// request or an answer of a few hundred bytes (an append of a few
/// writes, a vote, a heartbeat) arrives whole in one read, its length and
/// payload together, and a read shorter than asked tells the runtime the
/// socket is drained, so the next frame's read does not first find it
/// empty. A larger frame is read straight into its own buffer.
const READ_BUFFER: usize = 8 << 10;

/// A connection to a peer with its read buffer.
type Conn = BufReader<Box<dyn PeerStream>>;

/// The TCP transport of one node.
#[derive(Debug)]
pub(crate) struct TcpTransport {
    /// The address outgoing connections are bound to (port 0).
    local_ip: Option<IpAddr>,
    guard: Arc<PeerGuard>,
    idle: Mutex<HashMap<NodeId, Vec<Conn>>>,
}

impl TcpTransport {
    pub(crate) fn new(local_ip: Option<IpAddr>, guard: Arc<PeerGuard>) -> TcpTransport {
        TcpTransport {
            local_ip,
            guard,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Connects to `addr`, over TLS with peer TLS on (the other node's
    /// certificate must name the host of `addr`).
    async fn connect(&self, addr: &str) -> io::Result<Box<dyn PeerStream>> {
        let tcp = self.connect_tcp(addr).await?;
        let Some(tls) = self.guard.tls() else {
            return Ok(Box::new(tcp));
        };
        let name = tls::server_name(addr)?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.client));
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => Ok(Box::new(stream)),
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("TLS handshake with {addr}: {e}"),
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake with {addr} timed out"),
            )),
        }
    }

    async fn connect_tcp(&self, addr: &str) -> io::Result<TcpStream> {
        let to: SocketAddr = tokio::net::lookup_host(addr).await?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no address for {addr}"))
        })?;
        let stream = outgoing_socket(self.local_ip, to)?.connect(to).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn round_trip(&self, target: NodeId, addr: &str, frame: &[u8]) -> io::Result<Response> {
        let mut pooled = None;
        while let Some(s) = self.idle.lock().get_mut(&target).and_then(Vec::pop) {
            // Bytes left in its buffer would be out of turn, as in the socket.
            if s.buffer().is_empty() && still_open(s.get_ref().tcp()) {
                pooled = Some(s);
                break;
            }
        }
        let mut stream = match pooled {
            Some(s) => s,
            None => BufReader::with_capacity(READ_BUFFER, self.connect(addr).await?),
        };
        stream.write_all(frame).await?;
        stream.flush().await?;
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

/// A socket for a connection to `to`, bound to `local_ip` (port 0) where
/// one is given and of `to`'s family.
///
/// On Linux the port is left to `connect` (`IP_BIND_ADDRESS_NO_PORT`): a
/// bind to port 0 otherwise reserves a port no other socket of that
/// address holds, one of some 28,000 shared by every connection leaving
/// it, to any peer, and by those in TIME_WAIT. Connections that churn
/// (dozens of groups to each peer, a peer stopped with requests held
/// open) could use them all up, and a connection would then fail at once
/// as if the peer were down. At `connect` the port need only be unique
/// for that peer. A kernel without the option (before 4.2) binds as
/// before.
fn outgoing_socket(local_ip: Option<IpAddr>, to: SocketAddr) -> io::Result<TcpSocket> {
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = local_ip
        && ip.is_ipv4() == to.is_ipv4()
    {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::socket::{setsockopt, sockopt::IpBindAddressNoPort};
            let _ = setsockopt(&socket, IpBindAddressNoPort, &true);
        }
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    Ok(socket)
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

/// A frame's buffer starts at most this large and grows with the bytes
/// that arrive: a header claiming 256 MiB costs nothing until they come.
const FIRST_READ: usize = 64 << 10;

/// Reads one frame's payload.
async fn read_frame<S: AsyncRead + Unpin + ?Sized>(stream: &mut S) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame claims {len} bytes"),
        ));
    }
    let mut payload = Vec::with_capacity(len.min(FIRST_READ));
    stream.take(len as u64).read_to_end(&mut payload).await?;
    if payload.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(payload)
}

/// Serves requests arriving on `listener` until the runtime shuts down.
pub(crate) async fn serve(listener: TcpListener, handler: Arc<dyn Handler>, guard: Arc<PeerGuard>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, say: wait a little and go on.
                tracing::warn!(
                    "raft listener: accept failed: {e}; retrying in 50 ms (out of \
                     descriptors? raise the open files limit)"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let handler = Arc::clone(&handler);
        let guard = Arc::clone(&guard);
        tokio::spawn(async move {
            let served = match guard.tls() {
                None => {
                    serve_connection(BufReader::with_capacity(READ_BUFFER, stream), &*handler).await
                }
                Some(tls) => match accept_tls(stream, peer, &tls.server).await {
                    Ok(stream) => {
                        serve_connection(BufReader::with_capacity(READ_BUFFER, stream), &*handler)
                            .await
                    }
                    Err(why) => {
                        guard.refuse(peer, &why);
                        return;
                    }
                },
            };
            match served {
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    guard.refuse(peer, &e.to_string());
                }
                Err(e) if e.kind() != io::ErrorKind::UnexpectedEof => {
                    tracing::debug!("raft connection from {peer}: {e}");
                }
                _ => {}
            }
        });
    }
}

/// The TLS handshake with a connecting peer, and the check that its
/// certificate names the address it comes from.
async fn accept_tls(
    stream: TcpStream,
    peer: SocketAddr,
    config: &Arc<rustls::ServerConfig>,
) -> Result<tokio_rustls::server::TlsStream<TcpStream>, String> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
        Err(_) => return Err("TLS handshake timed out".into()),
    };
    let named = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .is_some_and(|cert| tls::names_address(cert, peer.ip()));
    if !named {
        return Err(format!(
            "its certificate does not name {}, the address it connects from",
            peer.ip()
        ));
    }
    Ok(stream)
}

/// Answers one request after another on a connection, plain or TLS. A
/// frame that does not decode ends the connection (`InvalidData`).
async fn serve_connection<S>(mut stream: S, handler: &dyn Handler) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let payload = read_frame(&mut stream).await?;
        let req: Request = rpc::decode(&payload)?;
        let resp = handler.handle(req).await;
        stream.write_all(&rpc::encode(&resp)?).await?;
        stream.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Answer;

    impl Handler for Answer {
        fn handle(&self, _req: Request) -> BoxFuture<'_, Response> {
            Box::pin(async { Response::Pins(0) })
        }
    }

    /// An answer followed by bytes out of turn arrives in one read, so
    /// the extra bytes sit in the connection's read buffer, not in its
    /// socket: that connection is not used again, or the next request
    /// would take them for its answer.
    #[tokio::test]
    async fn a_connection_with_bytes_out_of_turn_in_its_buffer_is_not_reused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut answer, mut kept) = (1, Vec::new());
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut req = BufReader::new(&mut stream);
                read_frame(&mut req).await.unwrap();
                // Its answer and a stray one after it, in one write.
                let mut out = rpc::encode(&Response::Pins(answer)).unwrap();
                out.extend(rpc::encode(&Response::Pins(99)).unwrap());
                stream.write_all(&out).await.unwrap();
                answer += 1;
                // Kept open, so only the buffer tells.
                kept.push(stream);
            }
        });
        let transport = TcpTransport::new(None, Arc::new(PeerGuard::new(None).unwrap()));
        for want in [1, 2] {
            let got = transport
                .call(2, &addr, Request::Pins, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(matches!(got, Response::Pins(n) if n == want), "{got:?}");
        }
    }

    /// A connection leaving the node's own address takes its port at
    /// `connect`, not at the bind before it (`outgoing_socket`): bound,
    /// it holds no port yet; connected, it has one, from that address.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn an_outgoing_socket_takes_its_port_at_connect() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = listener.local_addr().unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let socket = outgoing_socket(Some(local), to).unwrap();
        assert_eq!(socket.local_addr().unwrap(), SocketAddr::new(local, 0));
        let stream = socket.connect(to).await.unwrap();
        let from = stream.local_addr().unwrap();
        assert_eq!(from.ip(), local);
        assert_ne!(from.port(), 0);
        // Without a local address, nothing is bound before `connect`.
        let plain = outgoing_socket(None, to).unwrap();
        assert_eq!(plain.local_addr().unwrap().port(), 0);
    }

    /// A request a node cannot decode (a variant of a newer build's) is
    /// hung up on, counted as a refusal, and the asker sees a hang-up
    /// (`peer_hung_up`: what the meta group's leader takes for an older
    /// build when it asks `Request::Held`); a request it knows is
    /// answered on a new connection after it.
    #[tokio::test]
    async fn an_undecodable_request_is_hung_up_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let guard = Arc::new(PeerGuard::new(None).unwrap());
        tokio::spawn(serve(listener, Arc::new(Answer), Arc::clone(&guard)));
        let transport = TcpTransport::new(None, Arc::clone(&guard));
        // postcard writes the variant's index first: 100 is past the last.
        let unknown = [1, 0, 0, 0, 100];
        let e = transport.round_trip(2, &addr, &unknown).await.unwrap_err();
        assert!(crate::network::peer_hung_up(&e), "{e:?}");
        assert_eq!(guard.refused(), 1);
        let answer = transport
            .call(2, &addr, Request::Pins, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(answer, Response::Pins(0)));
        // One down: no hang-up.
        drop(transport);
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap().to_string();
        drop(closed);
        let transport = TcpTransport::new(None, guard);
        let e = transport
            .call(3, &gone, Request::Pins, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(!crate::network::peer_hung_up(&e), "{e:?}");
    }
}
