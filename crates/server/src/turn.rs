//! The contract between the request pipeline and the protocols
//! (`docs/design.md`, "A turn"): what a protocol implements ([`Protocol`]:
//! parsing, classing, commands, replies), what it works with while a
//! connection's input is processed ([`Cx`]: the shared state, the turn's
//! session, the connection's client, how a write reaches the store or the
//! cluster), and what it answers ([`Step`], [`Class`], [`Ran`]).
//!
//! It sits below both protocols and below the driver
//! (`crate::pipeline::Pipeline`), so that protocols import it downward.

use std::net::SocketAddr;
use std::time::Duration;

use combkv::op::{Op, Outcome};
use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Result, Session};
use smallvec::SmallVec;

use crate::cluster::{ReadMark, ReadScope};
use crate::node::keyspace::Keyspace;
use crate::node::park::{Parking, ReadGate, Written};
use crate::state::Shared;

/// Per-connection facts every protocol may need.
#[derive(Debug)]
pub(crate) struct Client {
    pub id: u64,
    pub addr: SocketAddr,
    pub name: Option<String>,
    /// What CLIENT LIST and CLIENT KILL see of it, shared with the
    /// registry: published into with relaxed stores, no lock.
    pub live: std::sync::Arc<crate::state::ClientEntry>,
}

impl Client {
    /// A new connection's client, registered nowhere yet.
    pub(crate) fn new(
        id: u64,
        addr: SocketAddr,
        laddr: Option<SocketAddr>,
        fd: i32,
        protocol: &'static str,
        unix: Option<std::sync::Arc<str>>,
    ) -> Client {
        let mut live = crate::state::ClientEntry::new(id, addr, laddr, fd, protocol);
        live.unix = unix;
        Client {
            id,
            addr,
            name: None,
            live: std::sync::Arc::new(live),
        }
    }
}

/// What a protocol works with while processing one connection's input.
pub(crate) struct Cx<'a> {
    pub shared: &'a Shared,
    /// Writes go through the turn's session: their replies are written at
    /// once, but leave only after the event loop commits the session (one
    /// group commit per turn). A read after this connection's own writes
    /// commits first.
    pub session: &'a Session<'a>,
    /// The event loop's reusable result buffers for read batches.
    pub batch: &'a mut BatchResults,
    pub client: &'a mut Client,
    /// The read index this call's reads were let through on, on a
    /// cluster node: when it began (after every request here arrived) and
    /// the ranges it covered.
    pub read: Option<(std::time::Instant, ReadScope)>,
    /// This event loop's per-command counts.
    pub stats: &'a crate::state::cmdstats::LoopStats,
    /// The node did not serve yet when this turn began: commands that
    /// touch data are answered `LOADING` (and the turn's store is the
    /// empty one served meanwhile).
    pub loading: bool,
    /// On a cluster node: how this connection waits for the log (see
    /// `park`). None on a single node.
    pub parking: Option<Parking<'a>>,
    /// The reply the request just run holds, and how many writes' outcomes
    /// it waits for, for a protocol whose replies need nothing but this
    /// context ([`Cx::hold`]).
    pub held: Option<(Render, usize)>,
    /// Where a reply may leave one large value to be sent from the store's
    /// shared bytes instead of copied into the output (`None`: copy it).
    pub send_shared: Option<&'a SendShared>,
}

/// One large value of a reply, sent from its shared bytes with `writev`
/// instead of copied into the connection's output: the output offset it
/// follows, and the value. Empty until a reply fills it.
pub(crate) type SendShared = std::cell::RefCell<Option<(usize, bytes::Bytes)>>;

/// Values from this size on are sent from their shared bytes when the
/// connection allows it (`Cx::send_shared`).
pub(crate) const SEND_SHARED_FROM: usize = 64 * 1024;

/// A held reply: renders it from its writes' outcomes, in order, once they
/// land (see `park`).
pub(crate) type Render =
    Box<dyn for<'c> FnOnce(&mut Cx<'c>, Vec<Result<Outcome>>, &mut Vec<u8>) + Send>;

impl Cx<'_> {
    /// The store of this turn (the keyspace's one store, or range 0's).
    pub fn store(&self) -> &combkv::Store {
        self.session.store()
    }

    /// The keys reads see: this turn's store, or the stores of the ranges
    /// the keyspace is cut into. A read that waits for another node parks
    /// the connection rather than wait (`node::keyspace`): it returns
    /// `node::park::parked()`, and the request answers nothing now and
    /// runs again when what it waits for landed.
    pub(crate) fn keyspace(&self) -> Keyspace<'_> {
        Keyspace::of(
            self.shared,
            self.session.store(),
            self.read_mark(),
            self.parking,
        )
    }

    /// Applies a decided write: through the turn's session on a single
    /// node, through the cluster's log on a cluster node, where the
    /// connection parks and the reply is held (`Written::Held`).
    pub fn write_op(&self, op: &Op<'_>) -> Written {
        crate::node::park::write(self.shared, self.session, self.parking, op)
    }

    /// Applies a decided write and renders its reply into `out` with
    /// `render`: now, or, on a cluster node, once its outcome lands. The
    /// render owns what it needs: a command whose reply borrows from the
    /// request uses [`Cx::write_op`] and [`Cx::hold`], copying only when
    /// the reply is held.
    pub fn write(
        &mut self,
        op: &Op<'_>,
        out: &mut Vec<u8>,
        render: impl for<'c> FnOnce(&mut Cx<'c>, Result<Outcome>, &mut Vec<u8>) + Send + 'static,
    ) {
        match self.write_op(op) {
            Written::Now(r) => render(self, r, out),
            Written::Held => self.write_held(render),
        }
    }

    /// Holds the request's reply until the outcome of its one held write
    /// ([`Cx::write_op`] said `Written::Held`) lands.
    pub fn write_held(
        &mut self,
        render: impl for<'c> FnOnce(&mut Cx<'c>, Result<Outcome>, &mut Vec<u8>) + Send + 'static,
    ) {
        self.hold(1, move |cx, mut r, out| render(cx, one(&mut r), out));
    }

    /// Holds the request's reply until the outcomes of its `n` held writes
    /// land, then renders it with `render`.
    pub fn hold(
        &mut self,
        n: usize,
        render: impl for<'c> FnOnce(&mut Cx<'c>, Vec<Result<Outcome>>, &mut Vec<u8>) + Send + 'static,
    ) {
        self.held = Some((Box::new(render), n));
    }

    /// On a cluster node with linearizable reads, waits for a read index
    /// over the ranges `scope` names (asked only there: it routes the
    /// reads by the range map) unless one that began after every request
    /// of this call arrived covers them already.
    pub(crate) fn ready_to_read(&mut self, scope: impl FnOnce(&Self) -> ReadScope) -> ReadGate {
        let Some(c) = self.shared.cluster() else {
            return ReadGate::Open;
        };
        if c.reads() == crate::config::ClusterReads::Local {
            return ReadGate::Open;
        }
        if let Some(landed) = self.parking.and_then(|p| p.landed_read()) {
            match landed {
                Ok((since, covered)) => self.read = Some((since, covered)),
                Err(e) => return ReadGate::Refused(e),
            }
        }
        let scope = scope(self);
        if let Some((since, covered)) = &self.read
            && (covered.contains(&scope) || c.fresh_over(&scope, *since))
        {
            return ReadGate::Open;
        }
        if scope.is_none() {
            // Nothing here to wait for; a read that finds a range of its
            // own after all (the map changed meanwhile) waits for one that
            // begins from now (`Cluster::is_fresh`).
            self.read.get_or_insert((std::time::Instant::now(), scope));
            return ReadGate::Open;
        }
        if self.parking.is_some_and(|p| p.park_read(&scope)) {
            return ReadGate::Wait;
        }
        match c.read_barrier_over(&scope) {
            Ok(since) => {
                self.read = Some((since, scope));
                ReadGate::Open
            }
            Err(e) => ReadGate::Refused(e),
        }
    }

    /// Reads a batch into the loop's result buffers: None if the
    /// connection parked instead. On a cluster node what would wait (a
    /// batch inside one range held at another node, read there; one across
    /// ranges, every range settled at its timestamp) is done in the
    /// background while the event loop serves others, and the batch runs
    /// again once it lands, reading from its answer (`node::keyspace`).
    pub(crate) fn read_batch(&mut self, reads: &[ReadRequest<'_>]) -> Option<Result<()>> {
        let keyspace = Keyspace::of(
            self.shared,
            self.session.store(),
            self.read_mark(),
            self.parking,
        );
        let done = keyspace.read_batch(reads, self.batch);
        if self.read_parked() {
            return None;
        }
        Some(done)
    }

    /// A request answered, or parked on a read elsewhere instead
    /// (`node::keyspace`): true if it parked, and then it keeps the read
    /// index it passed for when it runs again; else its rounds served it.
    pub(crate) fn read_parked(&self) -> bool {
        let Some(p) = self.parking else {
            return false;
        };
        if p.take_parked() {
            p.keep_read(self.read.clone());
            return true;
        }
        false
    }

    /// The read index this call's reads were let through on, if one was.
    pub(crate) fn read_mark(&self) -> Option<ReadMark> {
        self.read.as_ref().map(|(since, scope)| ReadMark {
            since: *since,
            all: *scope == ReadScope::All,
        })
    }
}

/// How a request takes part in a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A read the read engine answers: it joins the pending batch.
    BatchRead,
    /// Reads the store by itself (after the pending batch, and after a
    /// commit of the connection's own writes).
    Read,
    /// Writes through the turn's session.
    Write,
    /// Touches no stored data: connection state, server information, QUIT,
    /// error replies.
    Control,
}

/// What a protocol's parser found at the start of the unprocessed input.
#[derive(Debug)]
pub(crate) enum Step<R, E> {
    /// No complete request yet: wait for more input.
    Incomplete,
    /// `usize` bytes that hold nothing to answer (an empty line, the rest
    /// of a rejected data block).
    Skip(usize),
    /// A request, `usize` bytes long.
    Request(R, usize),
    /// A request answered by an error alone, `usize` bytes long; framing is
    /// kept.
    Reject(E, usize),
    /// Framing is lost: answer the error, then close the connection.
    Close(E),
}

/// The read requests of a batch. A pipeline's reads fit on the stack: at
/// one request per read every request is a batch of its own, and a heap
/// list was a malloc and a free each.
pub(crate) type Reads<'a> = SmallVec<[ReadRequest<'a>; 16]>;

/// One protocol's part of the pipeline: parsing, commands, replies.
pub(crate) trait Protocol {
    /// A parsed request, borrowing from the input.
    type Request<'a>;
    /// Why a request is answered by an error alone.
    type Error;
    /// The listener's name (CLIENT LIST's `protocol=`).
    const NAME: &'static str;
    /// A held write's reply, rendered when its outcome lands (`park`).
    type Held;
    /// Sent before closing a connection whose request hit a bug.
    const INTERNAL_ERROR: &'static [u8];
    /// Commands are timed for the slow log.
    const TIMED: bool;

    /// Called once per call of [`crate::pipeline::Pipeline::process`], before
    /// any parsing.
    fn begin(&mut self, _cx: &Cx<'_>) {}

    /// Parses the request at `input[at..]`. `fresh`: no parsed request is
    /// held any more (the pending batch is empty), so buffers the parser
    /// keeps for requests may be reused.
    fn parse<'a>(
        &mut self,
        cx: &Cx<'_>,
        input: &'a [u8],
        at: usize,
        fresh: bool,
    ) -> Step<Self::Request<'a>, Self::Error>;

    /// After `parse` said `Step::Incomplete`: the input bytes the
    /// incomplete request needs at least, from where it starts (0: not
    /// known). The connection makes room for them at once.
    fn wanted(&self) -> usize {
        0
    }

    /// After `parse` said `Step::Incomplete`: a large value of the
    /// incomplete request, most of it still to come, that the connection
    /// may read into a buffer of its own: where its data starts from the
    /// request's start, and its length (`None`: read it into the input).
    fn large(&self) -> Option<(usize, usize)> {
        None
    }

    /// The value `large` announced, received into its own buffer: the
    /// request at the start of the input takes it from there, and the
    /// input holds what follows the value's data (from offset `at`), until
    /// [`Protocol::unsplice`]. Only called after `large` said so.
    fn splice(&mut self, _at: usize, _value: combkv::ReceivedValue) {}

    /// The request the spliced value belongs to was consumed.
    fn unsplice(&mut self) {}

    /// The request's class; only a `BatchRead` joins a batch.
    fn class(&self, req: &Self::Request<'_>) -> Class;

    /// How many reads a batched request adds to its batch (keys, ranges).
    fn reads(&self, _req: &Self::Request<'_>) -> usize {
        1
    }

    /// Puts the parser back where it was before it parsed `req` (or a step
    /// that was not a request), which will be parsed again from its start:
    /// the turn stopped before answering it. Only a parser that keeps state
    /// between requests needs it.
    fn rewind(&mut self, _req: Option<&Self::Request<'_>>) {}

    /// Appends the keys a `Read` request reads, if its command names them
    /// (where it reads more, a read index is taken for those as it reads
    /// them); false if they are not known before it runs.
    fn read_keys<'s>(
        &'s self,
        _input: &'s [u8],
        _req: &Self::Request<'_>,
        _into: &mut SmallVec<[&'s [u8]; 4]>,
    ) -> bool {
        false
    }

    /// Appends what a batched request reads (`class` said `BatchRead`).
    fn read_requests<'s>(
        &'s self,
        input: &'s [u8],
        req: &'s Self::Request<'_>,
        into: &mut Reads<'s>,
    );

    /// Writes the replies of a batch from its results, in request order,
    /// until `out` holds more than `budget` bytes. Returns how many requests
    /// were answered (at least one); the rest are parsed again later.
    fn reply_batch(
        &self,
        cx: &Cx<'_>,
        input: &[u8],
        pending: &[Self::Request<'_>],
        results: &BatchResults,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> usize;

    /// Answers every request of a batch the engine refused.
    fn batch_failed(
        &self,
        cx: &Cx<'_>,
        err: combkv::Error,
        pending: &[Self::Request<'_>],
        out: &mut Vec<u8>,
    );

    /// Runs a request that is not batched and writes its reply, or holds
    /// it (a write on a cluster node).
    fn execute(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        req: &Self::Request<'_>,
        out: &mut Vec<u8>,
    ) -> Ran<Self::Held>;

    /// Renders a held reply from its writes' outcomes, in order.
    fn land(
        &mut self,
        cx: &mut Cx<'_>,
        held: Self::Held,
        outcomes: Vec<Result<Outcome>>,
        out: &mut Vec<u8>,
    );

    /// The request must wait for a CLIENT PAUSE to end: it is left in the
    /// input, unanswered, and the connection is served again after it.
    fn postponed(&self, _cx: &Cx<'_>, _req: &Self::Request<'_>) -> bool {
        false
    }

    /// Answers a rejected request.
    fn reject(&mut self, cx: &Cx<'_>, err: Self::Error, out: &mut Vec<u8>);

    /// Answers the protocol error before the connection closes.
    fn protocol_error(&mut self, cx: &Cx<'_>, err: Self::Error, out: &mut Vec<u8>);

    /// Records a request (or a batch, by its first request) that took
    /// `took` in the slow log (only with `TIMED`).
    fn slow(&self, _cx: &Cx<'_>, _input: &[u8], _req: &Self::Request<'_>, _took: Duration) {}

    /// A request that ran (`execute`) took `took`: counted in its
    /// command's statistics, and in the slow log if it is slow.
    fn timed(&mut self, cx: &Cx<'_>, input: &[u8], req: &Self::Request<'_>, took: Duration) {
        if cx.shared.slowlog.wants(took) {
            self.slow(cx, input, req, took);
        }
    }

    /// The first `pending` requests of a batch were answered together in
    /// `took`.
    fn timed_batch(
        &self,
        cx: &Cx<'_>,
        input: &[u8],
        pending: &[Self::Request<'_>],
        took: Duration,
    ) {
        if cx.shared.slowlog.wants(took)
            && let Some(first) = pending.first()
        {
            self.slow(cx, input, first, took);
        }
    }
}

/// What running a request came to.
#[derive(Debug)]
pub(crate) struct Ran<H> {
    /// Close the connection after the replies (QUIT).
    pub close: bool,
    /// Its reply waits for the outcomes of this many held writes (never
    /// with `close`).
    pub held: Option<(H, usize)>,
    /// It answered nothing: its connection parked until an answer lands
    /// (WAIT), and the request is parsed and run again then.
    pub parked: bool,
}

/// The result of processing a connection's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Processed {
    /// Input bytes used (complete requests); the rest waits for more data.
    pub consumed: usize,
    /// Close the connection once the replies are written (QUIT, or framing
    /// lost after a protocol error).
    pub close: bool,
    /// A commit failed (the store turned read-only): the replies of this
    /// turn must not be sent, since they may acknowledge writes that are not
    /// durable. The connection is closed without them.
    pub abort: bool,
    /// A request waits for a CLIENT PAUSE to end (it is not consumed).
    pub postponed: bool,
    /// The input bytes the incomplete request after the consumed ones
    /// needs at least (0: not known; see [`Protocol::wanted`]).
    pub wanted: usize,
    /// The large value of the incomplete request at the start of what is
    /// left (`consumed`), from there (see [`Protocol::large`]).
    pub large: Option<(usize, usize)>,
}

impl Processed {
    pub(crate) fn aborted(consumed: usize) -> Processed {
        Processed {
            consumed,
            close: true,
            abort: true,
            postponed: false,
            wanted: 0,
            large: None,
        }
    }
}

/// The one outcome of a single held write.
pub(crate) fn one(outcomes: &mut Vec<Result<Outcome>>) -> Result<Outcome> {
    outcomes.pop().unwrap_or_else(|| {
        Err(combkv::Error::Uncertain(
            "the log answered no outcome for a write".into(),
        ))
    })
}

/// Reads one batch gathers at most: the batch's results hold every value
/// it read until its replies are written.
pub(crate) const MAX_BATCH_READS: usize = 16;
