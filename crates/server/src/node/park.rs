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
//! - A read of keys held elsewhere parks too (`node::keyspace`): one of a
//!   range this node holds no replica of is sent to a node that does, and
//!   one across ranges has each range settle at its timestamp. The
//!   request answers nothing, and runs again once the round lands; it
//!   then finds the round's answer (`Parking::landed_round`), and sends
//!   the next round if it needs one (a scan that finds its floor first
//!   reads twice). Its rounds, and the timestamp it reads at, are kept
//!   until it answers.
//! - WAIT that must wait for followers parks too: a task on the Raft
//!   runtime watches replication until enough followers hold the
//!   connection's last write (its log index comes with its outcomes), the
//!   timeout passes or the server stops, and lands the count; the WAIT,
//!   left unparsed, runs again and answers it.
//! - An administration command that changes the cluster (CLUSTER INIT,
//!   ADD, REMOVE, SPLIT, MERGE; SNAPSHOT CREATE of a split keyspace; ACL
//!   SETUSER, DELUSER, LOAD) parks the same way: the change runs on the
//!   Raft runtime (an add waits for its node to catch up, for up to its
//!   timeout) and lands its answer for the command to find.
//!
//! At the end of the turn the loop proposes every write its connections
//! held as one batch, and asks one read index for every read. When the
//! answer lands (through the loop's [`Inbox`] and its waker), the held
//! replies are rendered, in order, from their outcomes, and the connection
//! goes on with the input after them.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::op::{Op, Outcome};
use combkv::{Error, Result, Session};
use combkv_replica::{At, ClusterError, RemoteRead, Replica, Routed};
use parking_lot::Mutex;

use crate::cluster::{Change, Changed, Cluster, ReadScope, Settled};
use crate::state::Shared;

/// The error a read returns when it parked its connection instead of
/// waiting (`Parking::park_round`): it never reaches a client, since the
/// request that got it answers nothing now and runs again.
const PARKED: &str = "the read parked its connection";

/// The error of a read that parked its connection.
pub(crate) fn parked() -> Error {
    Error::Unavailable(PARKED.into())
}

/// Whether `e` is a read's [`PARKED`].
pub(crate) fn is_parked(e: &Error) -> bool {
    matches!(e, Error::Unavailable(why) if why == PARKED)
}

/// What landed for a parked connection.
#[derive(Debug)]
pub(crate) enum Landing {
    /// The outcomes of the writes it held, in order, and the index of
    /// the log entry that holds them (none if they failed).
    Writes(Vec<Result<Outcome>>, Option<u64>),
    /// Its read index was reached here: when it began and the ranges it
    /// covered (or no leader answered).
    Read(Result<(Instant, ReadScope)>),
    /// The answer of its round of reads elsewhere (the round's place in
    /// the request's list): a range read at another node, or ranges settled
    /// at a timestamp, with the remote reads' answers.
    Round(usize, Result<Settled>),
    /// Its WAIT ended: how many followers hold its writes (None: this
    /// node stopped leading meanwhile).
    Waited(Option<usize>),
    /// The change to the cluster its administration command asked for
    /// ended, with this answer.
    Changed(Changed),
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
    /// The reads elsewhere of the request it parked on.
    reading: Reading,
    /// The answer of a WAIT that landed, for the WAIT it parked on.
    waited: Option<Option<usize>>,
    /// The answer of a change to the cluster that landed, for the
    /// administration command it parked on.
    changed: Option<Changed>,
    /// A change was asked and its answer has not landed yet.
    changing: bool,
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
            Landing::Round(i, r) => {
                if let Some(round) = self.reading.rounds.get_mut(i) {
                    round.answer = Answer::Landed(r);
                }
            }
            Landing::Waited(n) => self.waited = Some(n),
            Landing::Changed(r) => {
                self.changing = false;
                self.changed = Some(r);
            }
        }
    }

    /// What a change to the cluster finds when its command runs: the
    /// answer that landed for it, once; or, where it cannot park (the
    /// loop drains at shutdown) while it is still in flight, that it may
    /// or may not have been made (asking it again could make it twice);
    /// else None: it is to be asked.
    fn change_found(&mut self, can_park: bool) -> Option<Changed> {
        if let Some(r) = self.changed.take() {
            return Some(r);
        }
        (!can_park && std::mem::take(&mut self.changing)).then(|| {
            Err(ClusterError::Unknown(
                "the server stopped before the change ended: it may or may not have been made"
                    .into(),
            ))
        })
    }

    /// Whether outcomes of held writes landed and wait to be rendered.
    pub(crate) fn has_outcomes(&self) -> bool {
        self.outcomes.is_some()
    }

    /// A read index (a WAIT's answer) applies to one processing of the
    /// input it was asked for, never to input read after it.
    ///
    /// A request parked on a round of reads elsewhere runs again on the
    /// same input when it lands (the socket is not read meanwhile): the
    /// read index it passed (`Parking::keep_read`) and its rounds still
    /// apply to it.
    pub(crate) fn forget_read(&mut self) {
        let on_round = self.waiting
            && self
                .reading
                .rounds
                .last()
                .is_some_and(|r| matches!(r.answer, Answer::Pending));
        if !on_round {
            self.read = None;
            // A request whose rounds landed but that now waits for a read
            // index (its keys moved to a range the one it passed did not
            // cover) runs again: its tries stay counted, so that they stay
            // bounded over all its runs. (One that answered cleared them,
            // `Parking::take_parked`.)
            let tries = if self.waiting {
                self.reading.tries
            } else {
                [0; 3]
            };
            self.reading = Reading {
                tries,
                ..Reading::default()
            };
        }
        self.waited = None;
        // A change's answer waits for its command, which may first park
        // on a read index (SNAPSHOT CREATE passes the read gate): it is
        // dropped only by input processed without parking.
        if !self.waiting {
            self.changed = None;
        }
    }
}

/// The reads elsewhere of a request that parks (see the module's
/// documentation), kept until it answers.
#[derive(Debug, Default)]
struct Reading {
    /// The timestamp its reads across ranges read at, once a run took one
    /// (`keyspace::at_timestamp`).
    at: Option<u64>,
    /// How many times its reads were taken again, by [`Retry`]: counted
    /// over all its runs, so that the tries stay bounded.
    tries: [u64; 3],
    /// Every round it sent, in order.
    rounds: Vec<Round>,
    /// It parked on a round in this run: it answers nothing now.
    parked: bool,
}

/// Why a read is taken again (`Parking::tries`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Retry {
    /// At a new timestamp (a range's past did not reach back to it, or the
    /// map was found behind while reading at it).
    Timestamp = 0,
    /// Routed by a range map brought up to date.
    Map = 1,
    /// Routed again after a pause for a range's group to start here.
    Start = 2,
}

/// One round of reads elsewhere: when it reads, this node's replicas whose
/// floors it raises, the reads it sends to other nodes, and the answer
/// once it landed.
#[derive(Debug)]
struct Round {
    how: At,
    local: Vec<Replica>,
    remote: Vec<(u64, Vec<RemoteRead>)>,
    answer: Answer,
    /// A catch-up of the range map ([`Parking::park_catch_up`]), found by
    /// [`Parking::take_landed`] only; other rounds by
    /// [`Parking::landed_round`] only.
    catch_up: bool,
}

/// Where a round's answer stands.
#[derive(Debug)]
enum Answer {
    /// In flight.
    Pending,
    Landed(Result<Settled>),
    /// Found where it is found only once (a catch-up's, a failed round's):
    /// found no more, and not in flight either.
    Taken,
}

impl Answer {
    /// The landed answer, leaving `Taken`.
    fn take(&mut self) -> Option<Result<Settled>> {
        match std::mem::replace(self, Answer::Taken) {
            Answer::Landed(r) => Some(r),
            other => {
                *self = other;
                None
            }
        }
    }
}

impl Round {
    fn asks(&self, how: At, local: &[Replica], remote: &[(u64, Vec<RemoteRead>)]) -> bool {
        self.how == how
            && self.remote == remote
            && self.local.len() == local.len()
            && self.local.iter().zip(local).all(|(a, b)| a.is_same(b))
    }
}

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
#[derive(Clone, Copy, Debug)]
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

    /// Whether this connection's command asked a change that landed (its
    /// answer waits for the command, run again, to find it) or is still
    /// in flight (run again while the loop drains at shutdown): either
    /// way the command is past the checks it made before asking, which
    /// what the change did may no longer pass.
    pub(crate) fn change_asked(&self) -> bool {
        let p = self.park.borrow();
        p.changed.is_some() || p.changing
    }

    /// Whether a read that would wait can park this connection instead
    /// (not while the loop drains at shutdown).
    pub(crate) fn can_park(&self) -> bool {
        self.inbox.is_some()
    }

    /// The answer of a round that asked exactly this and landed, if one
    /// did: a request run again finds each of its rounds' answers. A
    /// failed round's answer is found once, so that the read taken again
    /// after it (the map brought up to date) sends a new round.
    pub(crate) fn landed_round(
        &self,
        how: At,
        local: &[Replica],
        remote: &[(u64, Vec<RemoteRead>)],
    ) -> Option<Result<Settled>> {
        let mut p = self.park.borrow_mut();
        let round = p.reading.rounds.iter_mut().find(|r| {
            matches!(r.answer, Answer::Landed(_)) && !r.catch_up && r.asks(how, local, remote)
        })?;
        match &round.answer {
            Answer::Landed(Ok(answers)) => Some(Ok(answers.clone())),
            _ => round.answer.take(),
        }
    }

    /// The answer of the range map's catch-up ([`Parking::park_catch_up`])
    /// that landed, found once, so that a map found behind again sends a
    /// new one.
    pub(crate) fn take_landed(&self) -> Option<Result<Settled>> {
        let mut p = self.park.borrow_mut();
        let round = p
            .reading
            .rounds
            .iter_mut()
            .find(|r| r.catch_up && matches!(r.answer, Answer::Landed(_)))?;
        round.answer.take()
    }

    /// Sends a catch-up of the range map, a read index on the meta group's
    /// replica `meta`, as [`Parking::park_round`] sends a round.
    pub(crate) fn park_catch_up(&self, cluster: &Cluster, meta: Replica) -> bool {
        let before = self.park.borrow().reading.rounds.len();
        let parked = self.park_round(cluster, At::Now, vec![meta], Vec::new(), None);
        if let Some(sent) = self.park.borrow_mut().reading.rounds.get_mut(before) {
            sent.catch_up = true;
        }
        parked
    }

    /// Sends a round in the background (`Cluster::settle_at_then`), after
    /// `pause` if given, and parks the connection until it lands; false
    /// with no inbox (the loop drains: the caller waits itself). While the
    /// connection already waits (its held writes) the round is sent when
    /// it runs again. A round that asks nothing only waits out its pause
    /// (a read taken again at a timestamp taken after it); no read finds
    /// its answer, since a read that asks nothing does not wait.
    pub(crate) fn park_round(
        &self,
        cluster: &Cluster,
        how: At,
        local: Vec<Replica>,
        remote: Vec<(u64, Vec<RemoteRead>)>,
        pause: Option<Duration>,
    ) -> bool {
        let Some(inbox) = self.inbox else {
            return false;
        };
        let mut p = self.park.borrow_mut();
        p.reading.parked = true;
        if p.waiting {
            return true;
        }
        p.waiting = true;
        let i = p.reading.rounds.len();
        p.reading.rounds.push(Round {
            how,
            local: local.clone(),
            remote: remote.clone(),
            answer: Answer::Pending,
            catch_up: false,
        });
        let inbox = Arc::clone(inbox);
        let (token, client) = (self.token, self.client);
        cluster.settle_at_then(how, local, remote, pause, move |r| {
            inbox.land(Landed {
                token,
                client,
                what: Landing::Round(i, r),
            });
        });
        true
    }

    /// The timestamp this request reads across ranges at, if a run of it
    /// took one.
    pub(crate) fn read_at(&self) -> Option<u64> {
        self.park.borrow().reading.at
    }

    /// Records the timestamp the request reads across ranges at, for its
    /// later runs.
    pub(crate) fn set_read_at(&self, at: u64) {
        self.park.borrow_mut().reading.at = Some(at);
    }

    /// How many times the request's reads were taken again, for `why`.
    pub(crate) fn tries(&self, why: Retry) -> u64 {
        self.park.borrow().reading.tries[why as usize]
    }

    /// The request's reads are taken again, for `why`; taken again at a
    /// new timestamp, they read at one taken from now.
    pub(crate) fn tried(&self, why: Retry) {
        let reading = &mut self.park.borrow_mut().reading;
        reading.tries[why as usize] += 1;
        if let Retry::Timestamp = why {
            reading.at = None;
        }
    }

    /// Whether the request parked on a round in this run (it answers
    /// nothing now, whatever its handler returned); the mark is cleared.
    /// If it did not, it answered: its rounds served it, and the request
    /// after it takes a timestamp of its own (none is in flight: a request
    /// that sent one parked).
    pub(crate) fn take_parked(&self) -> bool {
        let reading = &mut self.park.borrow_mut().reading;
        if std::mem::take(&mut reading.parked) {
            return true;
        }
        *reading = Reading::default();
        false
    }

    /// A request parked on a round keeps the read index it passed, `mark`,
    /// for when it runs again (`Park::forget_read`).
    pub(crate) fn keep_read(&self, mark: Option<(Instant, ReadScope)>) {
        self.park.borrow_mut().read = mark.map(Ok);
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

/// A change to the cluster (an administration command's) on a cluster
/// node: the answer that landed for this command, or else the change
/// carried out in the background and None, the connection parked (the
/// command runs again once the answer lands). With no `parking` (inside
/// EXEC) it waits for the change; so it does while the loop drains at
/// shutdown, where a change still in flight when the drain gave up
/// waiting for it is answered as such rather than asked twice.
pub(crate) fn change(
    parking: Option<Parking<'_>>,
    cluster: &Cluster,
    change: Change,
) -> Option<Changed> {
    let Some(at) = parking else {
        return Some(cluster.change(change));
    };
    let mut p = at.park.borrow_mut();
    if let Some(r) = p.change_found(at.inbox.is_some()) {
        return Some(r);
    }
    let Some(inbox) = at.inbox else {
        return Some(cluster.change(change));
    };
    p.waiting = true;
    p.changing = true;
    let inbox = Arc::clone(inbox);
    let (token, client) = (at.token, at.client);
    cluster.change_then(change, move |r| {
        inbox.land(Landed {
            token,
            client,
            what: Landing::Changed(r),
        });
    });
    None
}

#[cfg(test)]
mod tests;
