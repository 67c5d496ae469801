//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH (`docs/protocol.md`,
//! "Transactions").
//!
//! Between MULTI and EXEC a connection's commands are checked (existence,
//! arity, authentication, `maxmemory`) and queued; a refusal marks the
//! transaction failed, and EXEC then answers EXECABORT. EXEC runs in three
//! steps, so that the whole transaction is one decided op
//! ([`Op::Txn`]) that a single node applies under its transaction lock and
//! a cluster applies from one log entry:
//!
//! 1. *decide*: each queued data command's handler runs with [`TxnStep::
//!    Decide`]: its write is recorded instead of applied, and its reads
//!    ([`Ctx::get_with`]) are recorded as [`Op::Read`] and answered
//!    "absent" (the partial reply is thrown away);
//! 2. *apply*: the recorded ops, with the watched keys' versions, go as
//!    one `Op::Txn` (on a cluster node the connection parks, and EXEC runs
//!    again from step 1 when the log answers);
//! 3. *reply*: each handler runs again with [`TxnStep::Reply`], taking
//!    the results of its own ops in order, and writes its reply into
//!    EXEC's array. Control commands (PING, ECHO, CLIENT ...) run only
//!    here.
//!
//! So a data command in a transaction makes its reads before its one
//! write, and decides the same ops both times (its arguments are the
//! same; only an op's result differs, which it reads in step 3).
//!
//! On a keyspace split into ranges, reads of a snapshot (GETAT, RANGEAT)
//! run before step 1 and are answered in their places in step 3
//! ([`read_early`]): they may wait for another node, which parks EXEC.

use std::borrow::Cow;
use std::cell::RefCell;

use combkv::op::{Op, Outcome, ScanWhat, Watch};
use combkv::{ItemView, Result as StoreResult, Version};
use combkv_replica::codec::{self, OpList};

use super::Ctx;
use super::batch::BatchRead;
use super::spec::{Kind, Spec};
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::reply::Reply;
use crate::state::Stats;

/// What a queued argument costs besides its bytes (its `Vec`), counted
/// against the transaction's limit.
const ARG_OVERHEAD: usize = 24;

/// A transaction being queued (after MULTI).
#[derive(Debug, Default)]
pub(crate) struct Multi {
    queued: Vec<Queued>,
    /// What the queued commands hold, overheads included.
    bytes: usize,
    /// The queued arguments' bytes as Redis's `multi-mem` counts them.
    argv_mem: usize,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    failed: bool,
    /// Per queued command, the refusal to answer in its place when the
    /// user may no longer run it at EXEC (ACL rules changed meanwhile).
    denied: Vec<Option<String>>,
    /// EXEC checked the queued commands against the user's rules: an EXEC
    /// that parked and runs again (see [`read_early`]) checks them once.
    rechecked: bool,
}

impl Multi {
    /// The queued commands: their table entries and arguments.
    pub(crate) fn queued(&self) -> impl Iterator<Item = (&'static Spec, &[Vec<u8>])> {
        self.queued.iter().map(|q| (q.spec, q.args.as_slice()))
    }

    /// Answers queued command `i` with `error` at EXEC instead of running it.
    pub(crate) fn deny(&mut self, i: usize, error: String) {
        if self.denied.len() < self.queued.len() {
            self.denied.resize(self.queued.len(), None);
        }
        self.denied[i] = Some(error);
    }

    /// How many commands are queued, and their arguments' bytes as Redis
    /// counts them (CLIENT LIST's `multi=` and `multi-mem=`).
    pub(crate) fn size(&self) -> (usize, usize) {
        (self.queued.len(), self.argv_mem)
    }

    /// A queued command writes (EXEC then waits out a CLIENT PAUSE WRITE).
    pub(crate) fn writes(&self) -> bool {
        self.queued.iter().any(|q| q.spec.writes())
    }

    /// Whether EXEC is to check the queued commands against the user's
    /// rules: the first time it runs only.
    pub(crate) fn recheck(&mut self) -> bool {
        !std::mem::replace(&mut self.rechecked, true)
    }

    fn denial(&self, i: usize) -> Option<&str> {
        self.denied.get(i).and_then(|d| d.as_deref())
    }
}

#[derive(Debug)]
struct Queued {
    spec: &'static Spec,
    args: Vec<Vec<u8>>,
}

/// A connection's watched keys, each with its live item's version when
/// first watched (`None`: absent), and what they hold (counted against
/// the transaction's limit), kept as keys are added: a WATCH of many keys
/// neither searches nor sums a list per key.
#[derive(Debug, Default)]
pub(crate) struct Watches {
    keys: std::collections::BTreeMap<Vec<u8>, Option<Version>>,
    bytes: usize,
}

/// How a command's data access runs inside EXEC (see the module doc).
pub(crate) enum TxnStep {
    Decide(OpList),
    Reply(std::vec::IntoIter<StoreResult<Outcome>>),
}

/// Why a deciding handler stopped at its write: it is recorded, not
/// applied (the handler's reply is thrown away).
fn decided() -> combkv::Error {
    combkv::Error::Unavailable("decided, applied with the transaction".into())
}

/// A handler's result count did not match between deciding and replying:
/// a bug in a command, answered as an error instead of a wrong reply.
fn mismatch() -> combkv::Error {
    combkv::Error::Corrupt("a command in the transaction did not replay its ops".into())
}

/// [`Ctx::apply`] inside EXEC.
pub(super) fn apply(step: &RefCell<TxnStep>, op: &Op<'_>) -> StoreResult<Outcome> {
    match &mut *step.borrow_mut() {
        TxnStep::Decide(ops) => {
            ops.push(op);
            Err(decided())
        }
        TxnStep::Reply(results) => results.next().unwrap_or_else(|| Err(mismatch())),
    }
}

/// [`Ctx::get_with`] inside EXEC: the key's item as the transaction's
/// earlier ops left it.
pub(super) fn get_with<T>(
    step: &RefCell<TxnStep>,
    key: &[u8],
    f: impl FnOnce(Option<ItemView<'_>>) -> T,
) -> StoreResult<T> {
    let r = match &mut *step.borrow_mut() {
        TxnStep::Decide(ops) => {
            ops.push(&Op::Read {
                keys: Cow::Borrowed(&[key]),
            });
            return Ok(f(None));
        }
        TxnStep::Reply(results) => results.next().unwrap_or_else(|| Err(mismatch()))?,
    };
    match r {
        Outcome::Read { items } if items.len() == 1 => Ok(f(items[0].as_ref().map(|it| it.view()))),
        _ => Err(mismatch()),
    }
}

/// [`Ctx::scan_with`] inside EXEC: the range as the transaction's earlier
/// ops left it (`Op::Scan`); the number of items in it.
pub(super) fn scan_with(
    step: &RefCell<TxnStep>,
    range: &combkv::Range,
    what: ScanWhat,
    max_bytes: u64,
    mut f: impl FnMut(ItemView<'_>) -> bool,
) -> StoreResult<u64> {
    let r = match &mut *step.borrow_mut() {
        TxnStep::Decide(ops) => {
            ops.push(&Op::Scan {
                range: Cow::Borrowed(range),
                what,
                max_bytes,
            });
            return Ok(0);
        }
        TxnStep::Reply(results) => results.next().unwrap_or_else(|| Err(mismatch()))?,
    };
    match r {
        Outcome::Scan { items, count } => {
            for it in &items {
                if !f(it.view()) {
                    break;
                }
            }
            Ok(count)
        }
        _ => Err(mismatch()),
    }
}

/// GET, GETV and MGET inside EXEC: through [`Ctx::get_with`] instead of a
/// read-engine batch.
pub(super) fn batch_read(cx: &mut Ctx<'_, '_>, kind: BatchRead) -> CmdResult {
    let value = |it: Option<ItemView<'_>>| it.map(|it| it.value.to_vec());
    match kind {
        BatchRead::Get => match cx.get_with(cx.args[1], value)? {
            Some(v) => cx.r.bulk(&v),
            None => cx.r.null(),
        },
        BatchRead::Getv => {
            let it = cx.get_with(cx.args[1], |it| {
                it.map(|it| (it.value.to_vec(), it.version))
            })?;
            match it {
                Some((v, version)) => {
                    cx.r.array(2);
                    cx.r.bulk(&v);
                    cx.r.int(version.get() as i64);
                }
                None => cx.r.null_array(),
            }
        }
        BatchRead::Mget => {
            let mut values = Vec::with_capacity(cx.args.len() - 1);
            for &k in &cx.args[1..] {
                values.push(cx.get_with(k, value)?);
            }
            cx.r.array(values.len());
            for v in values {
                match v {
                    Some(v) => cx.r.bulk(&v),
                    None => cx.r.null(),
                }
            }
        }
        BatchRead::Range => unreachable!("RANGE's handler reads through Ctx::scan_with"),
    }
    Ok(())
}

/// Queues a command after MULTI (its checks passed): `+QUEUED`.
pub(super) fn queue(cx: &mut Ctx<'_, '_>, spec: &'static Spec) -> CmdResult {
    let limit = cx.shared.live.max_request_bytes() as usize;
    let watched = cx.conn.watched.bytes;
    let multi = cx.conn.multi.as_mut().expect("queued inside MULTI");
    let bytes: usize = cx.args.iter().map(|a| a.len() + ARG_OVERHEAD).sum();
    if multi.bytes + bytes + watched > limit {
        multi.failed = true;
        return Err(CmdError::err(format!(
            "the transaction's queued commands and watched keys pass max-request-bytes ({limit})"
        )));
    }
    // A COMPARE is a condition of the whole transaction: it comes first.
    if spec.name == "compare"
        && multi
            .queued
            .iter()
            .any(|q| q.spec.kind != Kind::Control && q.spec.name != "compare")
    {
        multi.failed = true;
        return Err(CmdError::err(
            "COMPARE must come before the transaction's other data commands",
        ));
    }
    multi.bytes += bytes;
    // Redis counts each queued argument's bytes and its pointer.
    multi.argv_mem += cx
        .args
        .iter()
        .map(|a| a.len() + std::mem::size_of::<usize>())
        .sum::<usize>();
    multi.queued.push(Queued {
        spec,
        args: cx.args.iter().map(|a| a.to_vec()).collect(),
    });
    cx.r.simple("QUEUED");
    Ok(())
}

/// A refusal while queuing: EXEC will answer EXECABORT.
pub(super) fn fail(cx: &mut Ctx<'_, '_>) {
    if let Some(m) = &mut cx.conn.multi {
        m.failed = true;
    }
}

pub(super) fn multi(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.conn.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    cx.conn.multi = Some(Multi::default());
    cx.r.ok();
    Ok(())
}

pub(super) fn discard(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.conn.multi.take().is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    cx.conn.watched = Watches::default();
    cx.r.ok();
    Ok(())
}

/// WATCH key...: notes each key's version now (a read: it follows the
/// connection's own writes, and on a cluster node a read index).
pub(super) fn watch(cx: &mut Ctx<'_, '_>) -> CmdResult {
    if cx.conn.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let limit = cx.shared.live.max_request_bytes() as usize;
    for &key in &cx.args[1..] {
        // The first WATCH of a key counts: a change since then aborts.
        if cx.conn.watched.keys.contains_key(key) {
            continue;
        }
        let bytes = key.len() + ARG_OVERHEAD;
        if cx.conn.watched.bytes + bytes > limit {
            return Err(CmdError::err(format!(
                "the watched keys pass max-request-bytes ({limit})"
            )));
        }
        let version = cx.keyspace().get_with(key, |it| it.map(|it| it.version))?;
        cx.conn.watched.keys.insert(key.to_vec(), version);
        cx.conn.watched.bytes += bytes;
    }
    cx.r.ok();
    Ok(())
}

pub(super) fn unwatch(cx: &mut Ctx<'_, '_>) -> CmdResult {
    cx.conn.watched = Watches::default();
    cx.r.ok();
    Ok(())
}

pub(super) fn exec(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let Some(multi) = cx.conn.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    let watched = std::mem::take(&mut cx.conn.watched);
    if multi.failed {
        return Err(CmdError::Other(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    let Some(early) = read_early(cx, &multi) else {
        // Parked on a read elsewhere: EXEC runs again, whole, once it
        // lands, and finds the transaction as it was.
        cx.conn.multi = Some(multi);
        cx.conn.watched = watched;
        cx.parked = true;
        return Ok(());
    };
    let step = RefCell::new(TxnStep::Decide(OpList::default()));
    let mut counts = Vec::with_capacity(multi.queued.len());
    let mut scratch = Vec::new();
    for (i, q) in multi.queued.iter().enumerate() {
        let before = decided_count(&step);
        if q.spec.kind != Kind::Control
            && multi.denial(i).is_none()
            && answered(&early, i).is_none()
        {
            // Its reply (or error) is thrown away: it is made in step 3.
            let _ = run_queued(cx, q, Some(&step), &mut scratch);
            scratch.clear();
        }
        counts.push(decided_count(&step) - before);
    }
    let TxnStep::Decide(ops) = step.replace(TxnStep::Reply(Vec::new().into_iter())) else {
        unreachable!("deciding");
    };
    let bytes = ops.finish();
    let ops =
        codec::decode_ops(&bytes).map_err(|e| CmdError::err(format!("internal error: {e}")))?;
    let watch: Vec<Watch<'_>> = watched
        .keys
        .iter()
        .map(|(key, &version)| Watch { key, version })
        .collect();
    let txn = Op::Txn {
        watch: Cow::Owned(watch),
        ops: Cow::Owned(ops),
    };
    cx.write(&txn, move |cx, outcome| {
        reply(cx, &multi, &counts, &early, outcome)
    })
}

/// Queued reads of a snapshot's past (GETAT, RANGEAT): they read nothing
/// the transaction writes, and on a split keyspace they may be answered
/// by another node.
const SNAPSHOT_READS: [&str; 2] = ["getat", "rangeat"];

/// A queued command answered before the transaction ran.
enum Early {
    Reply(Vec<u8>),
    Error(String),
}

/// Before step 1, on a keyspace split into ranges: runs the queued reads
/// of a snapshot, which may wait for another node, as they run outside
/// EXEC, so that a wait parks the connection and the event loop serves
/// others meanwhile (inside the transaction's steps reads wait on the
/// loop). Their replies are kept for step 3 and they are not run again;
/// they read a snapshot, which the transaction cannot change. Per queued
/// command, its early answer; None if one of them parked (the first read
/// that has to wait sends its round, the connection's one in flight; EXEC
/// runs again when it lands, finds its answer, and the next read that has
/// to wait sends its own). Elsewhere (one store, or no parking): none,
/// and nothing allocated.
fn read_early(cx: &mut Ctx<'_, '_>, multi: &Multi) -> Option<Vec<Option<Early>>> {
    let split = matches!(
        cx.keyspace(),
        crate::node::keyspace::Keyspace::Ranges {
            parking: Some(_),
            ..
        }
    );
    if !split {
        return Some(Vec::new());
    }
    let mut early: Vec<Option<Early>> = (0..multi.queued.len()).map(|_| None).collect();
    let mut parked = false;
    for (i, q) in multi.queued.iter().enumerate() {
        if !SNAPSHOT_READS.contains(&q.spec.name) || multi.denial(i).is_some() {
            continue;
        }
        let mut out = Vec::new();
        let r = run_queued(cx, q, None, &mut out);
        early[i] = match r {
            Err(CmdError::Store(e)) if crate::node::park::is_parked(&e) => {
                parked = true;
                continue;
            }
            Err(e) => Some(Early::Error(e.line())),
            Ok(()) => Some(Early::Reply(out)),
        };
    }
    (!parked).then_some(early)
}

/// Queued command `i`'s answer from [`read_early`], if it had one.
fn answered(early: &[Option<Early>], i: usize) -> Option<&Early> {
    early.get(i).and_then(Option::as_ref)
}

/// Step 3: EXEC's reply, from the transaction's outcome.
fn reply(
    cx: &mut Ctx<'_, '_>,
    multi: &Multi,
    counts: &[usize],
    early: &[Option<Early>],
    outcome: Outcome,
) -> CmdResult {
    let Outcome::Txn { results } = outcome else {
        return Err(mismatch().into());
    };
    let Some(results) = results else {
        // A watched key changed: nothing was applied.
        cx.r.null_array();
        return Ok(());
    };
    cx.r.array(multi.queued.len());
    let step = RefCell::new(TxnStep::Reply(Vec::new().into_iter()));
    let mut results = results.into_iter();
    for (i, (q, &n)) in multi.queued.iter().zip(counts).enumerate() {
        // Denied, or answered before the transaction ran.
        match (multi.denial(i), answered(early, i)) {
            (Some(error), _) => {
                error_in_place(cx, error);
                continue;
            }
            (None, Some(Early::Error(error))) => {
                error_in_place(cx, error);
                continue;
            }
            (None, Some(Early::Reply(bytes))) => {
                cx.r.out.extend_from_slice(bytes);
                continue;
            }
            (None, None) => {}
        }
        let mine: Vec<_> = results.by_ref().take(n).collect();
        *step.borrow_mut() = TxnStep::Reply(mine.into_iter());
        let mut out = std::mem::take(cx.r.out);
        let r = run_queued(cx, q, Some(&step), &mut out);
        *cx.r.out = out;
        if let Err(e) = r {
            error_in_place(cx, &e.line());
        }
    }
    Ok(())
}

/// A queued command's error, in its place in EXEC's reply.
fn error_in_place(cx: &mut Ctx<'_, '_>, line: &str) {
    Stats::add(&cx.shared.stats.errors_replied, 1);
    cx.r.error(line);
}

fn decided_count(step: &RefCell<TxnStep>) -> usize {
    match &*step.borrow() {
        TxnStep::Decide(ops) => ops.len(),
        TxnStep::Reply(_) => 0,
    }
}

/// Runs a queued command's handler inside EXEC, its reply into `out`:
/// in a step of the transaction, or (`step` None) before it, reading as
/// outside EXEC, its reads parking the connection where they may.
fn run_queued(
    cx: &mut Ctx<'_, '_>,
    q: &Queued,
    step: Option<&RefCell<TxnStep>>,
    out: &mut Vec<u8>,
) -> CmdResult {
    let args: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
    let resp3 = cx.r.resp3;
    let mut sub = Ctx {
        shared: cx.shared,
        session: cx.session,
        parking: if step.is_none() { cx.parking } else { None },
        batch: &mut *cx.batch,
        conn: &mut *cx.conn,
        client: &mut *cx.client,
        args: &args,
        r: Reply { out, resp3 },
        loading: cx.loading,
        stats: cx.stats,
        read_mark: cx.read_mark,
        close: false,
        txn: step,
        held: None,
        parked: false,
    };
    (q.spec.handler)(&mut sub)
}
