//! The reads the read engine answers: GET, MGET, GETV and bounded RANGEs.
//! A command's table entry names its [`BatchRead`]; the pipeline gathers
//! consecutive ones into one `Store::read_batch`, so every key of a request
//! (and every request of a batch) is read at one version. GET, MGET and
//! GETV have no other implementation: their handlers, which answer a
//! request that did not join a batch (an invalid key), run the same code on
//! a batch of one.

use combkv::readexec::{BatchResults, ReadRequest};

use super::ordered::{self, RangeSpec};
use super::{ArgList, Ctx};
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::reply::Reply;
use crate::state::Stats;
use crate::turn::{Reads, SendShared};

/// A read the read engine answers in batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchRead {
    Get,
    Mget,
    Getv,
    Range,
}

/// A request planned into a batch: what its reply needs besides its
/// arguments and the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Planned {
    Get,
    Mget,
    Getv,
    /// The spec's slot in the connection's `RangeSlots`.
    Range(usize),
}

/// RANGEs with a LIMIT up to this join batches; longer ones stream through
/// the plain path, which enforces the reply limit as it goes.
const BATCH_RANGE_LIMIT: usize = 1000;

impl BatchRead {
    /// Plans a request (arity already checked) into a batch, or `None` if
    /// the batch path would not answer it exactly as the command does: an
    /// invalid key (the handler answers the error), a RANGE that does not
    /// parse, has no LIMIT of at most `BATCH_RANGE_LIMIT` or has bounds past
    /// the key length (the handler answers it unbatched). A RANGE is parsed
    /// into the next of `ranges`' slots.
    #[inline]
    pub(crate) fn plan<'a>(
        self,
        args: impl ArgList<'a>,
        max_key: usize,
        ranges: &mut RangeSlots,
    ) -> Option<Planned> {
        match self {
            BatchRead::Get => check_keys(args, max_key).ok().map(|()| Planned::Get),
            BatchRead::Mget => check_keys(args, max_key).ok().map(|()| Planned::Mget),
            BatchRead::Getv => check_keys(args, max_key).ok().map(|()| Planned::Getv),
            BatchRead::Range => {
                let slot = ranges.parse(args, max_key).ok()?;
                let spec = ranges.get(slot);
                if spec.range.limit.is_some_and(|l| l <= BATCH_RANGE_LIMIT)
                    && spec.valid_keys(max_key)
                {
                    return Some(Planned::Range(slot));
                }
                ranges.unparse();
                None
            }
        }
    }
}

/// Keys `args[1..]` are valid: the error the store would give otherwise.
fn check_keys<'a>(args: impl ArgList<'a>, max_key: usize) -> CmdResult {
    for i in 1..args.len() {
        combkv::check_key(args.get(i), max_key)?;
    }
    Ok(())
}

/// Appends what a planned request reads.
#[inline]
pub(crate) fn read_requests<'a>(
    planned: Planned,
    args: impl ArgList<'a>,
    ranges: &'a RangeSlots,
    into: &mut Reads<'a>,
) {
    match planned {
        Planned::Get | Planned::Getv => into.push(ReadRequest::Get(args.get(1))),
        Planned::Mget => into.extend((1..args.len()).map(|i| ReadRequest::Get(args.get(i)))),
        Planned::Range(slot) => into.push(ReadRequest::Range(&ranges.get(slot).range)),
    }
}

/// Keyspace hits and misses of a batch's replies.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    hits: u64,
    misses: u64,
}

impl Hits {
    #[inline]
    fn count(&mut self, found: bool) {
        if found {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    pub(crate) fn record(&self, stats: &crate::state::Stats) {
        Stats::add(&stats.keyspace_hits, self.hits);
        Stats::add(&stats.keyspace_misses, self.misses);
    }
}

/// Writes a planned request's reply from the batch results at `i` on;
/// returns how many results it used. `n_args`: its argument count, the
/// name included.
#[expect(clippy::too_many_arguments, reason = "a reply's inputs, kept flat")]
#[inline]
pub(crate) fn reply(
    planned: Planned,
    n_args: usize,
    res: &BatchResults,
    i: usize,
    ranges: &RangeSlots,
    max_reply: usize,
    hits: &mut Hits,
    r: &mut Reply<'_>,
    send: Option<&SendShared>,
) -> usize {
    match planned {
        Planned::Get => {
            let v = res.value_and_handle(i);
            hits.count(v.is_some());
            match v {
                Some((_, Some(shared))) => r.bulk_shared(shared, send),
                Some((v, None)) => r.bulk(v),
                None => r.null(),
            }
            1
        }
        Planned::Getv => {
            match res.items(i).next() {
                Some(it) => {
                    hits.count(true);
                    r.array(2);
                    r.bulk(it.value);
                    r.int(it.version.get() as i64);
                }
                None => {
                    hits.count(false);
                    r.null_array();
                }
            }
            1
        }
        Planned::Mget => {
            let n = n_args - 1;
            r.array(n);
            for j in i..i + n {
                let v = res.value(j);
                hits.count(v.is_some());
                match v {
                    Some(v) => r.bulk(v),
                    None => r.null(),
                }
            }
            n
        }
        Planned::Range(slot) => {
            ordered::reply_items(r, ranges.get(slot), res, i, max_reply);
            1
        }
    }
}

/// The handler of a batchable read that did not join a batch: runs it as a
/// batch of one (or answers why it cannot run: its key's error).
pub(super) fn run_one(cx: &mut Ctx<'_, '_>, kind: BatchRead) -> CmdResult {
    let max_key = cx.store().max_key_len();
    check_keys(cx.args, max_key)?;
    let mut ranges = RangeSlots::default();
    let planned = kind
        .plan(cx.args, max_key, &mut ranges)
        .ok_or(CmdError::Syntax)?;
    let mut reads = Reads::new();
    read_requests(planned, cx.args, &ranges, &mut reads);
    let keyspace = crate::node::keyspace::Keyspace::of(
        cx.shared,
        cx.session.store(),
        cx.read_mark,
        cx.read_parking(),
    );
    let done = keyspace.read_batch(&reads, cx.batch);
    // Counted once it answers (a read that parked runs again).
    let stats = &cx.shared.stats;
    if !done.as_ref().is_err_and(crate::node::park::is_parked) {
        Stats::add(&stats.read_batches, 1);
        Stats::add(&stats.read_batch_requests, reads.len() as u64);
        stats.add_hot_cache(cx.batch);
    }
    done?;
    let max_reply = cx.shared.live.max_reply_bytes();
    let mut hits = Hits::default();
    let n = cx.args.len();
    // Copied: the reply may be one of several (EXEC's).
    reply(
        planned, n, cx.batch, 0, &ranges, max_reply, &mut hits, &mut cx.r, None,
    );
    hits.record(stats);
    Ok(())
}

/// The parsed RANGEs of a connection's pending batch, kept between batches
/// so that their key buffers are reused instead of allocated per request.
#[derive(Debug, Default)]
pub(crate) struct RangeSlots {
    specs: Vec<RangeSpec>,
    used: usize,
}

impl RangeSlots {
    /// Slots a connection keeps across batches, at most.
    const KEEP: usize = 64;

    /// Parses a RANGE (`args`, the name first) into the next slot: its
    /// index, or the parse error.
    fn parse<'a>(&mut self, args: impl ArgList<'a>, max_key: usize) -> Result<usize, CmdError> {
        if self.used == self.specs.len() {
            self.specs.push(RangeSpec::none());
        }
        ordered::parse_range_into(args, 1, max_key, &mut self.specs[self.used])?;
        self.used += 1;
        Ok(self.used - 1)
    }

    /// Gives back the last slot taken (its RANGE did not join the batch).
    fn unparse(&mut self) {
        self.used -= 1;
    }

    pub(crate) fn get(&self, i: usize) -> &RangeSpec {
        &self.specs[i]
    }

    /// No planned RANGE is held any more: every slot is free again.
    pub(crate) fn clear(&mut self) {
        self.used = 0;
        self.specs.truncate(Self::KEEP);
    }
}
