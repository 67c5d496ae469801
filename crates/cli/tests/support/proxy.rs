//! A TCP proxy in front of each node's Raft port, so that a test can cut
//! one node off from the others (a partition) and heal it: the nodes
//! advertise the proxies' addresses (`--raft-advertise`) and reach each
//! other only through them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::node::ip;

/// A TCP proxy in front of one node's Raft port that can cut that node
/// off: while `cut` names a node, connections from or to it are refused
/// and the open ones are closed.
pub struct Proxy {
    pub addr: SocketAddr,
}

/// Which node is cut off, shared by the proxies of a cluster.
#[derive(Default)]
pub struct Cut {
    node: AtomicU64,
    /// Bumped at every cut; pumps of an older generation stop.
    generation: AtomicU64,
}

impl Cut {
    /// Cuts node `id` off, both ways: its open connections close, new
    /// ones are refused.
    pub fn isolate(&self, id: u64) {
        self.node.store(id, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Lets every node reach every other again.
    pub fn heal(&self) {
        self.node.store(0, Ordering::SeqCst);
    }
}

impl Proxy {
    pub fn start(target_id: u64, target: SocketAddr, cut: Arc<Cut>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(from) = conn else { continue };
                let Ok(peer) = from.peer_addr() else { continue };
                let c = cut.node.load(Ordering::SeqCst);
                // Nodes send from their own 127.0.0.<id> address.
                if c == target_id || peer.ip() == ip(c) && c != 0 {
                    continue;
                }
                let Ok(to) = TcpStream::connect(target) else {
                    continue;
                };
                let generation = cut.generation.load(Ordering::SeqCst);
                for (mut a, mut b) in [
                    (from.try_clone().unwrap(), to.try_clone().unwrap()),
                    (to, from),
                ] {
                    let cut = cut.clone();
                    std::thread::spawn(move || {
                        let _ = a.set_read_timeout(Some(Duration::from_millis(100)));
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            if cut.generation.load(Ordering::SeqCst) != generation {
                                break;
                            }
                            match a.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if b.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = a.shutdown(std::net::Shutdown::Both);
                        let _ = b.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr }
    }
}
