//! A simulated network for cluster tests: requests between in-process
//! nodes are delayed, dropped (on the way there or, with the reply lost, on
//! the way back), reordered (by their random delays) and cut by partitions
//! or a node being down, all decided by one seeded generator. Run on
//! tokio's single-threaded runtime with its clock paused, a schedule is
//! fast and replays from its seed.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{BoxFuture, Handler, Transport};
use crate::rpc::{Request, Response};
use crate::types::NodeId;

/// How unreliable the simulated network is.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Chance that a request is lost on the way.
    pub drop_request: f64,
    /// Chance that a reply is lost on the way back (the request took
    /// effect; the caller cannot tell).
    pub drop_reply: f64,
    /// Each way's delay, uniform in this range.
    pub delay_ms: (u64, u64),
}

impl Faults {
    /// A network that delivers everything promptly.
    pub const NONE: Faults = Faults {
        drop_request: 0.0,
        drop_reply: 0.0,
        delay_ms: (0, 1),
    };
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    faults: Faults,
    handlers: HashMap<NodeId, Arc<dyn Handler>>,
    down: HashSet<NodeId>,
    /// Nodes in different groups cannot talk; empty: no partition.
    groups: Vec<HashSet<NodeId>>,
    /// Pairs of nodes that cannot talk (either way), whatever the groups:
    /// a partition that is not an equivalence (a node that reaches two
    /// nodes that cannot reach each other).
    cuts: HashSet<(NodeId, NodeId)>,
}

impl std::fmt::Debug for dyn Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handler")
    }
}

/// The simulated network all nodes of a test share.
#[derive(Debug, Clone)]
pub struct SimNet {
    state: Arc<Mutex<State>>,
}

/// What the network decided for one request.
enum Fate {
    /// Lost on the way: the caller hears nothing until its timeout.
    Lost(Duration),
    /// The target is down: as a connection attempt to a dead host, refused
    /// after a moment.
    Refused(Duration),
    Delivered {
        there: Duration,
        back: Duration,
        reply_lost: bool,
    },
}

impl SimNet {
    /// A network whose faults are drawn from `seed`, as `faults` says.
    pub fn new(seed: u64, faults: Faults) -> SimNet {
        SimNet {
            state: Arc::new(Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                faults,
                handlers: HashMap::new(),
                down: HashSet::new(),
                groups: Vec::new(),
                cuts: HashSet::new(),
            })),
        }
    }

    pub(crate) fn register(&self, id: NodeId, handler: Arc<dyn Handler>) {
        self.state.lock().handlers.insert(id, handler);
    }

    /// The transport node `from` sends through.
    pub(crate) fn transport(&self, from: NodeId) -> Arc<dyn Transport> {
        Arc::new(SimTransport {
            net: self.clone(),
            from,
        })
    }

    /// Changes the faults from now on.
    pub fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    /// Cuts the network into these groups (nodes not named are alone).
    pub fn partition(&self, groups: &[&[NodeId]]) {
        self.state.lock().groups = groups.iter().map(|g| g.iter().copied().collect()).collect();
    }

    /// Cuts the link between `a` and `b` (each still reaches the others).
    pub fn cut(&self, a: NodeId, b: NodeId) {
        self.state.lock().cuts.insert((a.min(b), a.max(b)));
    }

    /// Mends the link between `a` and `b` that [`SimNet::cut`] cut.
    pub fn uncut(&self, a: NodeId, b: NodeId) {
        self.state.lock().cuts.remove(&(a.min(b), a.max(b)));
    }

    /// Ends every partition and cut.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        s.groups.clear();
        s.cuts.clear();
    }

    /// Marks a node down (nothing reaches it or leaves it) or up again.
    pub fn set_down(&self, id: NodeId, down: bool) {
        let mut s = self.state.lock();
        if down {
            s.down.insert(id);
        } else {
            s.down.remove(&id);
        }
    }

    /// A random draw from the network's generator (for tests that want
    /// their own choices to replay from the same seed).
    pub fn draw(&self, below: u64) -> u64 {
        self.state.lock().rng.random_range(0..below.max(1))
    }

    fn connected(s: &State, a: NodeId, b: NodeId) -> bool {
        if s.down.contains(&a) || s.down.contains(&b) || s.cuts.contains(&(a.min(b), a.max(b))) {
            return false;
        }
        if s.groups.is_empty() {
            return true;
        }
        let group = |n: NodeId| s.groups.iter().position(|g| g.contains(&n));
        match (group(a), group(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        }
    }

    fn fate(&self, from: NodeId, to: NodeId, timeout: Duration) -> Fate {
        let mut s = self.state.lock();
        let (lo, hi) = s.faults.delay_ms;
        // Never zero: a failure that costs no simulated time would let a
        // retry loop spin with the paused clock standing still.
        let delay = |s: &mut State| {
            Duration::from_millis(s.rng.random_range(lo.max(1)..hi.max(lo + 1).max(2)))
        };
        if s.down.contains(&to) || s.down.contains(&from) {
            return Fate::Refused(delay(&mut s).min(timeout));
        }
        if !Self::connected(&s, from, to) {
            // A partition drops packets: the caller waits out its timeout.
            return Fate::Lost(timeout);
        }
        let drop_request = s.faults.drop_request;
        if s.rng.random_bool(drop_request) {
            return Fate::Lost(timeout);
        }
        let there = delay(&mut s);
        let back = delay(&mut s);
        let drop_reply = s.faults.drop_reply;
        let reply_lost = s.rng.random_bool(drop_reply);
        Fate::Delivered {
            there,
            back,
            reply_lost,
        }
    }
}

#[derive(Debug)]
struct SimTransport {
    net: SimNet,
    from: NodeId,
}

fn lost(target: NodeId) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("node {target}: lost in the simulated network"),
    )
}

impl Transport for SimTransport {
    fn call(
        &self,
        target: NodeId,
        _addr: &str,
        req: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, io::Result<Response>> {
        Box::pin(async move {
            match self.net.fate(self.from, target, timeout) {
                Fate::Lost(after) => {
                    tokio::time::sleep(after).await;
                    Err(lost(target))
                }
                Fate::Refused(after) => {
                    tokio::time::sleep(after).await;
                    Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("node {target} is down"),
                    ))
                }
                Fate::Delivered {
                    there,
                    back,
                    reply_lost,
                } => {
                    tokio::time::sleep(there).await;
                    let handler = self.net.state.lock().handlers.get(&target).cloned();
                    let Some(handler) = handler else {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!("node {target} is not running"),
                        ));
                    };
                    // A node that went down meanwhile never sees it.
                    if !SimNet::connected(&self.net.state.lock(), self.from, target) {
                        tokio::time::sleep(timeout.saturating_sub(there)).await;
                        return Err(lost(target));
                    }
                    let resp = handler.handle(req).await;
                    if reply_lost {
                        tokio::time::sleep(timeout.saturating_sub(there)).await;
                        return Err(lost(target));
                    }
                    tokio::time::sleep(back).await;
                    // Nor does its reply come back from beyond a new cut.
                    if !SimNet::connected(&self.net.state.lock(), self.from, target) {
                        return Err(lost(target));
                    }
                    Ok(resp)
                }
            }
        })
    }
}
