//! Parked connections: how a cluster node's event loop waits for the log
//! without waiting itself (`docs/design.md`, "Replication").
//!
//! On a cluster node a write's reply needs the outcome the log gives it,
//! and a linearizable read needs a read index: both take a quorum round.
//! Instead of blocking its thread, the loop *parks* the connection:
//!
//! - A write is decided once, as on a single node; its op joins the turn's
//!   proposal and its reply is *held*, a typed value that renders the reply
//!   from the outcome (the protocol's, kept by the pipeline). The writes
//!   that follow it in the connection's input are decided and held too, so
//!   a pipeline of writes travels as one proposal, in order. The first
//!   request that is not a write waits, unparsed, until they land.
//! - A read waits, unparsed, for a read index asked at the turn's end: it
//!   covers every request that arrived before it was asked (a parked
//!   connection's socket is not read until it resumes).
//! - WAIT that must wait for followers parks too: a task on the Raft
//!   runtime watches replication until enough followers hold the
//!   connection's last write (its log index comes with its outcomes), the
//!   timeout passes or the server stops, and lands the count; the WAIT,
//!   left unparsed, runs again and answers it.
//!
//! At the end of the turn the loop proposes every write its connections
//! held as one batch, and asks one read index for every read. When the
//! answer lands (through the loop's [`Inbox`] and its waker), the held
//! replies are rendered, in order, from their outcomes, and the connection
//! goes on with the input after them.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use combkv::op::{Op, Outcome};
use combkv::{Error, Result, Session};
use combkv_replica::{RemoteItem, RemoteRead, Routed};
use parking_lot::Mutex;

use crate::cluster::{Cluster, ReadScope, Settled};
use crate::node::keyspace::{Across, Asks};
use crate::state::Shared;

/// What landed for a parked connection.
#[derive(Debug)]
pub(crate) enum Landing {
    /// The outcomes of the writes it held, in order, and the index of
    /// the log entry that holds them (none if they failed).
    Writes(Vec<Result<Outcome>>, Option<u64>),
    /// Its read index was reached here: when it began and the ranges it
    /// covered (or no leader answered).
    Read(Result<(Instant, ReadScope)>),
    /// The answer of its read of a range held at another node.
    Remote(Result<Vec<Vec<RemoteItem>>>),
    /// The ranges of its read across ranges settled at its timestamp (the
    /// remote reads' answers).
    Across(Result<Settled>),
    /// Its WAIT ended: how many followers hold its writes (None: this
    /// node stopped leading meanwhile).
    Waited(Option<usize>),
}

/// One landing, addressed to a connection: its slab token, and its client
/// id, which a token reused by a later connection does not share.
#[derive(Debug)]
pub(crate) struct Landed {
    pub token: usize,
    pub client: u64,
    pub what: Landing,
}

/// A connection waiting for a read index: (token, client).
type Waiter = (usize, u64);

/// Whom a run of a turn's writes is for: (token, client, how many ops).
type Share = (usize, u64, usize);

/// A cluster node's event loop's traffic with the log: what its turn
/// asks for (sent at the turn's end, all at once), and what landed.
#[derive(Debug)]
pub(crate) struct Inbox {
    landed: Mutex<Vec<Landed>>,
    waker: Arc<mio::Waker>,
    /// This turn's writes, and whom each run of them is for; a
    /// connection's writes are contiguous (one connection is served at a
    /// time).
    writes: Mutex<(Routed, Vec<Share>)>,
    /// This turn's connections waiting for a read index, (token, client),
    /// by the ranges it must cover for them: one round per scope, so that
    /// a range that cannot answer (no quorum) holds up only the reads of
    /// it.
    reads: Mutex<Vec<(ReadScope, Vec<Waiter>)>>,
}

impl Inbox {
    pub(crate) fn new(waker: Arc<mio::Waker>) -> Inbox {
        Inbox {
            landed: Mutex::new(Vec::new()),
            waker,
            writes: Mutex::new((Routed::default(), Vec::new())),
            reads: Mutex::new(Vec::new()),
        }
    }

    /// Sends what this turn asked of the log: its writes as one proposal
    /// (one entry, unless the leader joins it with others), and one read
    /// index for each set of ranges connections wait for (every request
    /// they parked on arrived before it is asked).
    pub(crate) fn submit(self: &Arc<Self>, cluster: &Cluster) {
        let (ops, to) = std::mem::take(&mut *self.writes.lock());
        if !ops.is_empty() {
            let inbox = Arc::clone(self);
            cluster.propose_all(ops, move |index, results| {
                let mut results = results.into_iter();
                for (token, client, n) in to {
                    let share = results.by_ref().take(n).collect();
                    inbox.land(Landed {
                        token,
                        client,
                        what: Landing::Writes(share, index),
                    });
                }
            });
        }
        let rounds = std::mem::take(&mut *self.reads.lock());
        for (scope, reads) in rounds {
            let inbox = Arc::clone(self);
            cluster.read_barrier_then(scope, move |r| {
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
    /// Writes or a read index are in flight: the connection is neither
    /// read nor served until they land.
    pub waiting: bool,
    /// The outcomes of the writes it held, landed, not yet rendered.
    outcomes: Option<Vec<Result<Outcome>>>,
    /// A read index that landed for the input as it stood when parked.
    read: Option<Result<(Instant, ReadScope)>>,
    /// A read of a range held at another node, sent for the batch it
    /// parked on, and its answer once it landed.
    remote: Option<RemoteRound>,
    /// A read across ranges settling for the batch it parked on.
    across: Option<AcrossRound>,
    /// The answer of a WAIT that landed, for the WAIT it parked on.
    waited: Option<Option<usize>>,
    /// The log index of the last write of this connection that landed
    /// (what WAIT waits for the followers to hold).
    last_write: Option<u64>,
}

impl Park {
    /// Records a landing; the connection may be served again.
    pub(crate) fn land(&mut self, what: Landing) {
        self.waiting = false;
        match what {
            Landing::Writes(r, index) => {
                self.outcomes = Some(r);
                self.last_write = self.last_write.max(index);
            }
            Landing::Read(r) => self.read = Some(r),
            Landing::Remote(r) => {
                if let Some(round) = &mut self.remote {
                    round.answer = Some(r);
                }
            }
            Landing::Across(r) => {
                if let Some(round) = &mut self.across {
                    round.answer = Some(r);
                }
            }
            Landing::Waited(n) => self.waited = Some(n),
        }
    }

    /// Whether outcomes of held writes landed and wait to be rendered.
    pub(crate) fn has_outcomes(&self) -> bool {
        self.outcomes.is_some()
    }

    /// A read index (a WAIT's answer) applies to one processing of the
    /// input it was asked for, never to input read after it.
    pub(crate) fn forget_read(&mut self) {
        self.read = None;
        // A round sent in this processing waits for its answer; one whose
        // answer landed served this processing or none.
        if !self.waiting || self.remote.as_ref().is_some_and(|r| r.answer.is_some()) {
            self.remote = None;
        }
        if !self.waiting || self.across.as_ref().is_some_and(|r| r.answer.is_some()) {
            self.across = None;
        }
        self.waited = None;
    }
}

/// A read a parked connection sent to a node that holds the range: what
/// it asked (range, reads), and the answer once it landed.
#[derive(Debug)]
struct RemoteRound {
    asked: (u64, Vec<RemoteRead>),
    answer: Option<Result<Vec<Vec<RemoteItem>>>>,
}

/// A read across ranges a parked connection settles: its timestamp, what
/// it asked, the replicas whose floors it raises, and the answer once it
/// landed.
#[derive(Debug)]
struct AcrossRound {
    at: u64,
    asks: Asks,
    settled: Vec<combkv_replica::Replica>,
    answer: Option<Result<Settled>>,
}

/// A landed settle of a read across ranges (`Parking::landed_across`):
/// its timestamp, what it asked, the replicas settled, and the answer.
pub(crate) type LandedAcross = (u64, Asks, Vec<combkv_replica::Replica>, Result<Settled>);

/// What became of a write on a cluster node.
#[derive(Debug)]
pub(crate) enum Written {
    /// Its outcome, now (a blocking proposal while the loop drains).
    Now(Result<Outcome>),
    /// It joined the turn's proposal: its reply is held until it lands.
    Held,
}

/// What became of a WAIT on a cluster node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Its answer: how many followers hold the writes (None: this node is
    /// not the leader).
    Now(Option<usize>),
    /// The connection parked; the WAIT runs again once the answer lands.
    Parked,
}

/// Whether reads may go ahead on a cluster node.
#[derive(Debug)]
pub(crate) enum ReadGate {
    /// They may: every request here arrived before the read index.
    Open,
    /// No leader answered: the reads are refused with this error.
    Refused(Error),
    /// A read index was asked for: the connection parks, and its reads run
    /// once it lands.
    Wait,
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

impl Parking<'_> {
    /// The outcomes of held writes that landed, once.
    pub(crate) fn take_outcomes(&self) -> Option<Vec<Result<Outcome>>> {
        self.park.borrow_mut().outcomes.take()
    }

    /// A decided write on a cluster node: it joins the turn's proposal and
    /// the connection parks (or, with no inbox, a blocking proposal).
    pub(crate) fn write(&self, cluster: &Cluster, op: &Op<'_>) -> Written {
        let Some(inbox) = self.inbox else {
            return Written::Now(cluster.apply(op));
        };
        self.park.borrow_mut().waiting = true;
        let mut writes = inbox.writes.lock();
        cluster.route(&mut writes.0, op);
        match writes.1.last_mut() {
            Some((token, client, n)) if (*token, *client) == (self.token, self.client) => *n += 1,
            _ => writes.1.push((self.token, self.client, 1)),
        }
        Written::Held
    }

    /// WAIT on a cluster node: the answer that landed for this WAIT, or
    /// one found now, or else a background wait for `want` followers to
    /// hold the connection's last write (the commit index if it wrote
    /// nothing) and a parked connection. None in the answer: this node
    /// is not the leader. With no inbox (the loop drains) it answers at
    /// once, with the count as it stands.
    pub(crate) fn wait_replicas(
        &self,
        cluster: &Cluster,
        want: i64,
        timeout: Option<std::time::Duration>,
    ) -> Waited {
        let mut p = self.park.borrow_mut();
        if let Some(n) = p.waited.take() {
            return Waited::Now(n);
        }
        let index = p.last_write.unwrap_or_else(|| cluster.commit_index());
        let now = cluster.replicas_at(index);
        let Some(inbox) = self.inbox else {
            return Waited::Now(now);
        };
        match now {
            Some(n) if (n as i64) < want => {
                p.waiting = true;
                let inbox = Arc::clone(inbox);
                let (token, client) = (self.token, self.client);
                let want = want as usize;
                cluster.wait_replicas_then(index, want, timeout, move |n| {
                    inbox.land(Landed {
                        token,
                        client,
                        what: Landing::Waited(n),
                    });
                });
                Waited::Parked
            }
            done => Waited::Now(done),
        }
    }

    /// The answer that landed for a read of exactly `reads` of `range` at
    /// another node, once (a batch parsed again is the batch that asked:
    /// it is checked all the same).
    pub(crate) fn landed_remote(
        &self,
        range: u64,
        reads: &[RemoteRead],
    ) -> Option<Result<Vec<Vec<RemoteItem>>>> {
        let mut p = self.park.borrow_mut();
        match &p.remote {
            Some(round)
                if round.answer.is_some() && round.asked.0 == range && round.asked.1 == reads =>
            {
                p.remote.take().and_then(|round| round.answer)
            }
            _ => None,
        }
    }

    /// Sends `reads` of `range` to a node that holds it, in the
    /// background, and parks the connection until the answer lands (the
    /// event loop serves others meanwhile); false with no inbox (the loop
    /// drains: the caller reads itself).
    pub(crate) fn park_remote(
        &self,
        cluster: &Cluster,
        range: u64,
        reads: Vec<RemoteRead>,
    ) -> bool {
        let Some(inbox) = self.inbox else {
            return false;
        };
        let mut p = self.park.borrow_mut();
        if !p.waiting {
            p.waiting = true;
            p.remote = Some(RemoteRound {
                asked: (range, reads.clone()),
                answer: None,
            });
            let inbox = Arc::clone(inbox);
            let (token, client) = (self.token, self.client);
            cluster.read_remote_then(range, reads, move |r| {
                inbox.land(Landed {
                    token,
                    client,
                    what: Landing::Remote(r),
                });
            });
        }
        true
    }

    /// The settle that landed for a read across ranges, once.
    pub(crate) fn landed_across(&self) -> Option<LandedAcross> {
        let mut p = self.park.borrow_mut();
        if p.across.as_ref().is_none_or(|r| r.answer.is_none()) {
            return None;
        }
        let round = p.across.take()?;
        Some((round.at, round.asks, round.settled, round.answer?))
    }

    /// Settles a read across ranges in the background (every range's
    /// floor raised to its timestamp, the remote parts read there) and
    /// parks the connection until that lands; false with no inbox.
    pub(crate) fn park_across(&self, cluster: &Cluster, across: Across) -> bool {
        let Some(inbox) = self.inbox else {
            return false;
        };
        let mut p = self.park.borrow_mut();
        if !p.waiting {
            p.waiting = true;
            let Across {
                at,
                local,
                remote,
                asks,
            } = across;
            p.across = Some(AcrossRound {
                at,
                asks,
                settled: local.clone(),
                answer: None,
            });
            let inbox = Arc::clone(inbox);
            let (token, client) = (self.token, self.client);
            cluster.settle_at_then(combkv_replica::At::Settle(at), local, remote, move |r| {
                inbox.land(Landed {
                    token,
                    client,
                    what: Landing::Across(r),
                });
            });
        }
        true
    }

    /// The read index that landed for this input, once.
    pub(crate) fn landed_read(&self) -> Option<Result<(Instant, ReadScope)>> {
        self.park.borrow_mut().read.take()
    }

    /// Parks the connection until a read index over `scope` lands (asked
    /// at the turn's end with every other connection's); false with no
    /// inbox (the loop drains: the caller waits for one itself).
    pub(crate) fn park_read(&self, scope: &ReadScope) -> bool {
        let Some(inbox) = self.inbox else {
            return false;
        };
        let mut p = self.park.borrow_mut();
        if !p.waiting {
            p.waiting = true;
            let mut rounds = inbox.reads.lock();
            let waiter = (self.token, self.client);
            match rounds.iter_mut().find(|(s, _)| s == scope) {
                Some((_, waiting)) => waiting.push(waiter),
                None => rounds.push((scope.clone(), vec![waiter])),
            }
        }
        true
    }
}

/// Applies a decided write where this node's writes go: the turn's
/// session on a single node; the log on a cluster node, where the reply is
/// held while the connection parks (or, while the loop drains, the write
/// waits for the log).
pub(crate) fn write(
    shared: &Shared,
    session: &Session<'_>,
    parking: Option<Parking<'_>>,
    op: &Op<'_>,
) -> Written {
    match (shared.cluster(), parking) {
        (Some(c), Some(p)) => p.write(c, op),
        (Some(c), None) => Written::Now(c.apply(op)),
        (None, _) => Written::Now(session.apply(op)),
    }
}
