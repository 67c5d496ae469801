//! The request pipeline both protocols share (`docs/design.md`, "A turn").
//!
//! A connection's input is a pipeline of requests. [`Pipeline::process`]
//! runs the complete ones in order, and owns every rule of a turn:
//!
//! - each request is parsed and *classified* ([`Class`]): a read the read
//!   engine answers, another read, a write, or control;
//! - consecutive batchable reads are gathered and answered by one
//!   [`combkv::Store::read_batch`], their replies in request order;
//! - a read that follows the connection's own writes commits the turn's
//!   session first (reads never see undurable writes, their own included);
//! - processing stops once the replies pass the reply budget;
//! - a failed commit aborts the turn: nothing it produced is sent, and the
//!   connection closes;
//! - a protocol error (framing lost) is answered, then the connection
//!   closes;
//! - with [`Protocol::TIMED`], each command is timed for the slow log;
//! - a request counts as processed once it is answered (one that waits,
//!   for the budget or for a cluster's log, is parsed again later).
//!
//! A [`Protocol`] supplies the rest: parsing, the commands and their
//! replies. `resp::Resp` and `memcache::Memcache` are the two. The contract
//! between them and this driver ([`Protocol`], [`Cx`], [`Step`], [`Class`])
//! is `crate::turn`, below both.

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::cluster::ReadScope;
use crate::node::park::ReadGate;
use crate::state::Stats;
use crate::state::slowlog::Laps;
use crate::turn::{Class, Cx, MAX_BATCH_READS, Processed, Protocol, Reads, Step};

/// A reply that waits its turn: a held write's, or one rendered already
/// that follows a held one.
enum Pending<H> {
    /// A reply and how many outcomes it renders from.
    Reply(H, usize),
    Bytes(Vec<u8>),
}

/// What taking a request came to.
enum Took {
    /// Answered (or its reply held); go on.
    Answered,
    /// Answered; close the connection after the replies (QUIT).
    Close,
    /// Answered, and the connection holds as many writes as it may.
    Full,
    /// It waits for a read index: parsed again once that lands.
    Wait,
    /// A commit failed: abort the turn.
    Abort,
}

/// The writes a connection holds at most: its next write waits for them
/// to land (and then joins the next proposal).
const MAX_HELD: usize = 4096;

/// A connection's side of the pipeline: its protocol's state and what the
/// turn rules keep between requests.
pub(crate) struct Pipeline<P: Protocol> {
    pub proto: P,
    /// The connection wrote through the session since its last commit: a
    /// read must commit first to see its own writes.
    wrote: bool,
    /// The slow log's stopwatch.
    laps: Laps,
    /// Replies waiting for the outcomes of the writes they follow, in
    /// request order (on a cluster node, see `park`).
    held: VecDeque<Pending<P::Held>>,
}

impl<P: Protocol + std::fmt::Debug> std::fmt::Debug for Pipeline<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("proto", &self.proto)
            .field("wrote", &self.wrote)
            .field("held", &self.held.len())
            .finish()
    }
}

impl<P: Protocol> Pipeline<P> {
    pub(crate) fn new(proto: P) -> Pipeline<P> {
        Pipeline {
            proto,
            wrote: false,
            laps: Laps::default(),
            held: VecDeque::new(),
        }
    }

    /// Executes every complete request in `input`, appending replies to
    /// `out`. Stops early (leaving input unconsumed) once `out` holds more
    /// than `reply_budget` bytes, so a slow reader cannot make replies pile
    /// up: the request whose reply passes the budget is the last one
    /// answered, in a batch too (the rest of the batch is parsed again
    /// later), so the budget is passed by one request's reply at most.
    ///
    /// On a cluster node, first renders the held replies whose writes
    /// landed; while writes are held, only writes join them (see `park`).
    pub(crate) fn process(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
    ) -> Processed {
        // Counted once per call, not per request (an atomic add each).
        let mut parsed = 0;
        let processed = self.process_counted(cx, input, out, reply_budget, &mut parsed);
        Stats::add(&cx.shared.stats.requests_parsed, parsed);
        processed
    }

    /// `process`, counting the requests it parsed into `parsed`.
    fn process_counted(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        reply_budget: usize,
        parsed: &mut u64,
    ) -> Processed {
        self.laps = Laps::default();
        self.proto.begin(cx);
        self.land(cx, out);
        let mut batch = Batch::default();
        let mut at = 0;
        let mut close = false;
        let mut postponed = false;
        // Where the incomplete request at the end needs the input to reach,
        // and where it starts with its large value (see `Protocol::large`).
        let mut wanted_end = 0;
        let mut large = None;
        while out.len() <= reply_budget {
            let start = at;
            let step = self.proto.parse(cx, input, at, batch.reqs.is_empty());
            if !self.held.is_empty() && !self.joins_held(&step) {
                // Answered after the held writes land, parsed again then.
                self.proto.rewind(request_of(&step));
                break;
            }
            if let Step::Request(req, _) = &step
                && self.proto.postponed(cx, req)
            {
                // Parsed again once the pause ends; the requests before it
                // are answered now.
                self.proto.rewind(Some(req));
                at = start;
                postponed = true;
                break;
            }
            // Requests before this one are answered first; a step that
            // needs them answered waits if that passed the budget.
            let answers_batch = match &step {
                Step::Incomplete | Step::Skip(_) => false,
                Step::Request(req, _) if self.proto.class(req) == Class::BatchRead => {
                    !batch.reqs.is_empty() && batch.reads + self.proto.reads(req) > MAX_BATCH_READS
                }
                _ => true,
            };
            if answers_batch {
                match self.flush(cx, input, &mut batch, out, reply_budget) {
                    Flushed::Abort => return Processed::aborted(start),
                    Flushed::Partial(resume) => {
                        at = resume;
                        break;
                    }
                    Flushed::Done if out.len() > reply_budget => {
                        self.proto.rewind(request_of(&step));
                        at = start;
                        break;
                    }
                    Flushed::Done => {}
                }
            }
            match step {
                Step::Incomplete => {
                    let wanted = self.proto.wanted();
                    wanted_end = if wanted > 0 { start + wanted } else { 0 };
                    large = self.proto.large().map(|l| (start, l));
                    break;
                }
                Step::Skip(n) => at += n,
                Step::Request(req, n) => {
                    at += n;
                    *parsed += 1;
                    if self.proto.class(&req) == Class::BatchRead {
                        let reads = self.proto.reads(&req);
                        batch.push(req, start, reads);
                        continue;
                    }
                    match self.take(cx, input, &req, out) {
                        Took::Answered => {}
                        Took::Close => {
                            close = true;
                            break;
                        }
                        Took::Full => break,
                        Took::Wait => {
                            self.proto.rewind(Some(&req));
                            at = start;
                            break;
                        }
                        Took::Abort => return Processed::aborted(at),
                    }
                }
                Step::Reject(err, n) => {
                    self.proto.reject(cx, err, out);
                    at += n;
                }
                Step::Close(err) => {
                    Stats::add(&cx.shared.stats.protocol_errors, 1);
                    self.proto.protocol_error(cx, err, out);
                    // Framing is lost: nothing after this can be trusted.
                    return Processed {
                        consumed: input.len(),
                        close: true,
                        abort: false,
                        postponed: false,
                        wanted: 0,
                        large: None,
                    };
                }
            }
        }
        match self.flush(cx, input, &mut batch, out, reply_budget) {
            Flushed::Abort => return Processed::aborted(at),
            Flushed::Partial(resume) => at = resume,
            Flushed::Done => {}
        }
        Processed {
            consumed: at,
            close,
            abort: false,
            postponed,
            wanted: wanted_end.saturating_sub(at),
            // Only for a request that starts what is left.
            large: large.filter(|&(start, _)| start == at).map(|(_, l)| l),
        }
    }

    /// Runs a request that is not batched: a read first commits the
    /// connection's own writes and passes the read gate.
    fn take(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        req: &P::Request<'_>,
        out: &mut Vec<u8>,
    ) -> Took {
        match self.proto.class(req) {
            Class::Write => self.wrote = true,
            Class::Read => {
                if !self.commit_own_writes(cx) {
                    return Took::Abort;
                }
                // The ranges of the keys it names, or, those not known
                // before it runs, every range.
                let scope = |cx: &Cx<'_>| {
                    let mut keys = SmallVec::new();
                    if !self.proto.read_keys(input, req, &mut keys) {
                        return ReadScope::All;
                    }
                    crate::node::keyspace::Keyspace::of(cx.shared, cx.session.store(), None, None)
                        .keys_scope(&keys)
                };
                match cx.ready_to_read(scope) {
                    ReadGate::Open => {}
                    ReadGate::Wait => return Took::Wait,
                    ReadGate::Refused(e) => {
                        // Answered: what its earlier runs kept (tries,
                        // rounds) is dropped, not left to the next request.
                        cx.read_parked();
                        self.proto
                            .batch_failed(cx, e, std::slice::from_ref(req), out);
                        Stats::add(&cx.shared.stats.commands_processed, 1);
                        return Took::Answered;
                    }
                }
            }
            _ => {}
        }
        let Some(close) = self.run(cx, input, req, out) else {
            // Counted when it runs again and answers.
            return Took::Wait;
        };
        Stats::add(&cx.shared.stats.commands_processed, 1);
        if close {
            Took::Close
        } else if self.held.len() >= MAX_HELD {
            Took::Full
        } else {
            Took::Answered
        }
    }

    /// Whether a step may be taken while writes are held: a write (its
    /// reply joins the held ones), or input that holds no request.
    fn joins_held(&self, step: &Step<P::Request<'_>, P::Error>) -> bool {
        match step {
            Step::Incomplete | Step::Skip(_) => true,
            Step::Request(req, _) => self.proto.class(req) == Class::Write,
            Step::Reject(..) | Step::Close(_) => false,
        }
    }

    /// Renders the held replies whose writes landed, in order.
    fn land(&mut self, cx: &mut Cx<'_>, out: &mut Vec<u8>) {
        let Some(outcomes) = cx.parking.and_then(|p| p.take_outcomes()) else {
            return;
        };
        let mut outcomes = outcomes.into_iter();
        for pending in std::mem::take(&mut self.held) {
            match pending {
                Pending::Bytes(b) => out.extend_from_slice(&b),
                Pending::Reply(h, n) => {
                    let mut mine: Vec<_> = outcomes.by_ref().take(n).collect();
                    mine.resize_with(n, || {
                        Err(combkv::Error::Uncertain(
                            "the log answered fewer writes than were proposed".into(),
                        ))
                    });
                    self.proto.land(cx, h, mine, out);
                }
            }
        }
    }

    /// Executes one request that is not batched, timed for the slow log;
    /// its reply is written, or held. Some(true): close the connection
    /// after the replies; None: it parked, answering nothing (untimed: it
    /// is timed when it runs again).
    fn run(
        &mut self,
        cx: &mut Cx<'_>,
        input: &[u8],
        req: &P::Request<'_>,
        out: &mut Vec<u8>,
    ) -> Option<bool> {
        if P::TIMED {
            self.laps.start();
        }
        let before = out.len();
        let ran = self.proto.execute(cx, input, req, out);
        // Asked either way: it keeps or clears the request's reads elsewhere.
        let parked_read = cx.read_parked();
        if ran.parked || parked_read {
            debug_assert_eq!(out.len(), before, "a parked request answers nothing now");
            // Whatever a handler made of its parked read goes with it.
            out.truncate(before);
            return None;
        }
        if P::TIMED {
            let took = self.laps.lap();
            self.proto.timed(cx, input, req, took);
        }
        if let Some((h, n)) = ran.held {
            debug_assert_eq!(out.len(), before, "a held reply renders nothing now");
            self.held.push_back(Pending::Reply(h, n));
        } else if !self.held.is_empty() && out.len() > before {
            // A write refused before it was decided: its reply follows
            // the held ones.
            self.held.push_back(Pending::Bytes(out.split_off(before)));
        }
        Some(ran.close)
    }

    /// Commits the session if this connection wrote since its last commit,
    /// so a read sees the connection's own writes. False: the commit failed
    /// and the turn must be aborted.
    fn commit_own_writes(&mut self, cx: &Cx<'_>) -> bool {
        if !std::mem::take(&mut self.wrote) {
            return true;
        }
        // The commit (an fsync with `durability always`) is nobody's
        // command: the next lap starts after it.
        self.laps.restart();
        match cx.session.commit() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(client = cx.client.id, "commit failed: {e}");
                false
            }
        }
    }

    /// Answers the pending reads, if any, with one read-engine batch,
    /// replies in request order.
    #[inline]
    fn flush<'a>(
        &mut self,
        cx: &mut Cx<'_>,
        input: &'a [u8],
        batch: &mut Batch<P::Request<'a>>,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Flushed {
        // Checked here, inlined: a write after a write has no batch to
        // answer, and the call cost a pipelined SET about 25 instructions.
        if batch.reqs.is_empty() {
            return Flushed::Done;
        }
        self.answer_batch(cx, input, batch, out, budget)
    }

    /// `flush` of a batch that is not empty.
    fn answer_batch<'a>(
        &mut self,
        cx: &mut Cx<'_>,
        input: &'a [u8],
        batch: &mut Batch<P::Request<'a>>,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Flushed {
        if !self.commit_own_writes(cx) {
            return Flushed::Abort;
        }
        let pending = &batch.reqs;
        let mut reads = Reads::new();
        for req in pending.iter() {
            self.proto.read_requests(input, req, &mut reads);
        }
        let gate = cx.ready_to_read(|cx| {
            crate::node::keyspace::Keyspace::of(cx.shared, cx.session.store(), None, None)
                .read_scope(&reads)
        });
        match gate {
            ReadGate::Open => {}
            ReadGate::Wait => {
                drop(reads);
                // The whole batch is parsed again once the read index lands.
                self.proto.rewind(batch.reqs.first());
                let resume = batch.starts[0];
                batch.clear();
                return Flushed::Partial(resume);
            }
            ReadGate::Refused(e) => {
                drop(reads);
                // Answered: see the single request's refusal above.
                cx.read_parked();
                self.proto.batch_failed(cx, e, &batch.reqs, out);
                Stats::add(&cx.shared.stats.commands_processed, batch.reqs.len() as u64);
                batch.clear();
                return Flushed::Done;
            }
        }
        if P::TIMED {
            self.laps.start();
        }
        let Some(done) = cx.read_batch(&reads) else {
            // Sent to the node that holds its range: the whole batch is
            // parsed again once the answer lands.
            drop(reads);
            self.proto.rewind(batch.reqs.first());
            let resume = batch.starts[0];
            batch.clear();
            return Flushed::Partial(resume);
        };
        Stats::add(&cx.shared.stats.read_batches, 1);
        Stats::add(&cx.shared.stats.read_batch_requests, reads.len() as u64);
        cx.stats.batch(reads.len());
        cx.shared.stats.add_hot_cache(cx.batch);
        drop(reads);
        let before = out.len();
        let answered = match done {
            Ok(()) => self
                .proto
                .reply_batch(cx, input, pending, &*cx.batch, out, budget),
            // Requests were checked when they joined the batch; an engine
            // refusal is still answered on every request rather than lost.
            Err(e) => {
                self.proto.batch_failed(cx, e, pending, out);
                pending.len()
            }
        };
        Stats::add(&cx.shared.stats.commands_processed, answered as u64);
        if out.len() - before > SHRINK_AFTER_BYTES {
            // The results held every value of the batch: give that back.
            cx.batch.shrink();
        }
        if P::TIMED {
            let took = self.laps.lap();
            self.proto
                .timed_batch(cx, input, &pending[..answered.min(pending.len())], took);
        }
        let flushed = match pending.get(answered) {
            Some(first_left) => {
                self.proto.rewind(Some(first_left));
                Flushed::Partial(batch.starts[answered])
            }
            None => Flushed::Done,
        };
        batch.clear();
        flushed
    }
}

/// The request a step holds, if any.
fn request_of<R, E>(step: &Step<R, E>) -> Option<&R> {
    match step {
        Step::Request(req, _) => Some(req),
        _ => None,
    }
}

/// A batch whose replies took more than this gives its result buffers back.
const SHRINK_AFTER_BYTES: usize = 1 << 20;

/// The pending batch: its requests, where each starts in the input, and
/// the reads they make.
struct Batch<R> {
    reqs: SmallVec<[R; 16]>,
    starts: SmallVec<[usize; 16]>,
    reads: usize,
}

impl<R> Default for Batch<R> {
    fn default() -> Self {
        Batch {
            reqs: SmallVec::new(),
            starts: SmallVec::new(),
            reads: 0,
        }
    }
}

impl<R> Batch<R> {
    fn push(&mut self, req: R, start: usize, reads: usize) {
        self.reqs.push(req);
        self.starts.push(start);
        self.reads += reads;
    }

    fn clear(&mut self) {
        self.reqs.clear();
        self.starts.clear();
        self.reads = 0;
    }
}

/// What answering the pending batch came to.
enum Flushed {
    /// Every request answered (or none was pending).
    Done,
    /// The replies passed the budget before the batch's end: processing
    /// stops, and resumes at this input offset (the first request not
    /// answered).
    Partial(usize),
    /// A commit failed: abort the turn.
    Abort,
}
