//! Parked connections: how a cluster node's event loop waits for the log
//! without waiting itself (`docs/design.md`, "Replication").
//!
//! On a cluster node a write's reply needs the outcome the log gives it,
//! and a linearizable read needs a read index: both take a quorum round.
//! Instead of blocking its thread, the loop *parks* the connection: the
//! request's partial reply is dropped, its input is left unconsumed, and
//! the loop serves other connections. At the end of the turn the loop
//! proposes every write its connections parked on as one batch, and asks
//! one read index for every read. When the answer lands (through the
//! loop's [`Inbox`] and its waker), the loop runs the request again from
//! the start; this time the write's outcome is *replayed* from the
//! connection's [`Park`] instead of proposed, and the reply is rendered
//! from it. A command that writes several times parks at each write in
//! turn, replaying the ones before.
//!
//! A read index covers the requests that arrived before it was asked: a
//! parked connection's socket is not read until it resumes, and the index
//! applies to the input as it was when the connection parked.

use std::cell::RefCell;
use std::sync::Arc;

use combkv::op::{Op, Outcome};
use combkv::{Error, Result};
use combkv_replica::codec::OpList;
use parking_lot::Mutex;

use crate::cluster::Cluster;

/// What landed for a parked connection.
#[derive(Debug)]
pub(crate) enum Landing {
    /// The outcome of the write it proposed.
    Write(Result<Outcome>),
    /// Its read index was reached here (or no leader answered).
    Read(Result<()>),
}

/// One landing, addressed to a connection: its slab token, and its client
/// id, which a token reused by a later connection does not share.
#[derive(Debug)]
pub(crate) struct Landed {
    pub token: usize,
    pub client: u64,
    pub what: Landing,
}

/// A cluster node's event loop's traffic with the log: what its turn
/// asks for (sent at the turn's end, all at once), and what landed.
#[derive(Debug)]
pub(crate) struct Inbox {
    landed: Mutex<Vec<Landed>>,
    waker: Arc<mio::Waker>,
    /// This turn's writes, and whom each is for: (token, client).
    writes: Mutex<(OpList, Vec<(usize, u64)>)>,
    /// This turn's connections waiting for a read index: (token, client).
    reads: Mutex<Vec<(usize, u64)>>,
}

impl Inbox {
    pub(crate) fn new(waker: Arc<mio::Waker>) -> Inbox {
        Inbox {
            landed: Mutex::new(Vec::new()),
            waker,
            writes: Mutex::new((OpList::default(), Vec::new())),
            reads: Mutex::new(Vec::new()),
        }
    }

    /// Sends what this turn asked of the log: its writes as one proposal
    /// (one entry, unless the leader joins it with others), and one read
    /// index for every connection that waits for one (every request they
    /// parked on arrived before it is asked).
    pub(crate) fn submit(self: &Arc<Self>, cluster: &Cluster) {
        let (ops, to) = std::mem::take(&mut *self.writes.lock());
        if !ops.is_empty() {
            let inbox = Arc::clone(self);
            cluster.propose_all(ops, move |results| {
                for ((token, client), r) in to.into_iter().zip(results) {
                    inbox.land(Landed {
                        token,
                        client,
                        what: Landing::Write(r),
                    });
                }
            });
        }
        let reads = std::mem::take(&mut *self.reads.lock());
        if !reads.is_empty() {
            let inbox = Arc::clone(self);
            cluster.read_barrier_then(move |r| {
                for (token, client) in reads {
                    inbox.land(Landed {
                        token,
                        client,
                        what: Landing::Read(r.clone()),
                    });
                }
            });
        }
    }

    fn land(&self, l: Landed) {
        let first = {
            let mut landed = self.landed.lock();
            landed.push(l);
            landed.len() == 1
        };
        // One wake per batch of landings: the loop takes them all.
        if first && let Err(e) = self.waker.wake() {
            tracing::error!("cannot wake an event loop: {e}");
        }
    }

    /// Everything that landed since the last call.
    pub(crate) fn take(&self) -> Vec<Landed> {
        std::mem::take(&mut *self.landed.lock())
    }
}

/// A connection's parking state.
#[derive(Debug, Default)]
pub(crate) struct Park {
    /// A write or a read index is in flight: the connection is neither
    /// read nor served until it lands.
    pub waiting: bool,
    /// The outcomes of the writes the first unanswered request made, in
    /// order; its next run replays them.
    replay: Vec<Result<Outcome>>,
    /// How many of `replay` this run of the request used.
    next: usize,
    /// A read index that landed for the input as it stood when parked.
    read: Option<Result<()>>,
}

impl Park {
    /// Records a landing; the connection may be served again.
    pub(crate) fn land(&mut self, what: Landing) {
        self.waiting = false;
        match what {
            Landing::Write(r) => self.replay.push(r),
            Landing::Read(r) => self.read = Some(r),
        }
    }

    /// A read index applies to one processing of the input it was asked
    /// for, never to input read after it.
    pub(crate) fn forget_read(&mut self) {
        self.read = None;
    }
}

/// What a request needs to park its connection: the connection's park,
/// and where to land (none while the loop drains at shutdown, when writes
/// block instead).
#[derive(Clone, Copy)]
pub(crate) struct Parking<'a> {
    pub park: &'a RefCell<Park>,
    pub inbox: Option<&'a Arc<Inbox>>,
    pub token: usize,
    pub client: u64,
}

/// Why a write or read did not run now: its connection parked. The reply
/// rendered from it is dropped, never sent.
fn parked() -> Error {
    Error::Unavailable("parked until the log answers".into())
}

impl Parking<'_> {
    /// Whether the request that ran parked the connection.
    pub(crate) fn parked(&self) -> bool {
        self.park.borrow().waiting
    }

    /// A request starts (again): its writes replay from the first.
    pub(crate) fn begin_request(&self) {
        self.park.borrow_mut().next = 0;
    }

    /// The request was answered: what it replayed is spent.
    pub(crate) fn end_request(&self) {
        let mut p = self.park.borrow_mut();
        p.replay.clear();
        p.next = 0;
    }

    /// A write on a cluster node: its replayed outcome, or a proposal and a
    /// parked connection (or, with no inbox, a blocking proposal).
    pub(crate) fn apply(&self, cluster: &Cluster, op: &Op<'_>) -> Result<Outcome> {
        let mut p = self.park.borrow_mut();
        if let Some(r) = p.replay.get(p.next) {
            let r = r.clone();
            p.next += 1;
            return r;
        }
        let Some(inbox) = self.inbox else {
            drop(p);
            return cluster.apply(op);
        };
        if !p.waiting {
            p.waiting = true;
            let mut writes = inbox.writes.lock();
            writes.0.push(op);
            writes.1.push((self.token, self.client));
        }
        Err(parked())
    }

    /// A read index on a cluster node: the one that landed for this input,
    /// or a request for one and a parked connection (or, with no inbox, a
    /// blocking wait).
    pub(crate) fn read_barrier(&self, cluster: &Cluster) -> Result<()> {
        if cluster.reads() == crate::config::ClusterReads::Local {
            return Ok(());
        }
        let mut p = self.park.borrow_mut();
        if let Some(r) = p.read.take() {
            return r;
        }
        let Some(inbox) = self.inbox else {
            drop(p);
            return cluster.read_barrier();
        };
        if !p.waiting {
            p.waiting = true;
            inbox.reads.lock().push((self.token, self.client));
        }
        Err(parked())
    }
}
