//! One connection's share of a measurement: a sliding window of pipelined
//! requests, each checked against the model when its reply arrives.
//!
//! A session keeps up to `depth` operations in flight. It appends the
//! requests of new operations to the write buffer and sends them in one
//! write, waits for bytes, handles every complete reply (in order: the
//! server answers a connection's requests in order), then tops the window
//! up again. Operations that take two round trips (read-modify-write, Redis
//! scans) send their second request when the first reply arrives and go to
//! the back of the queue, behind the requests already sent.
//!
//! The model's write bits make this safe to pipeline. A read takes its
//! window's low end when its request is queued and its high end when the
//! reply is handled, which only widens the window. A write holds its
//! record's bit until its reply; when the bit is held (often by this very
//! connection, under a zipfian draw) the session keeps completing what it
//! has in flight until the bit is free (see `Session::write_lock`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::Rng;

use super::conn::Conn;
use super::dialect::{Dialect, Reply, bulk};
use super::memcache::Expect;
use crate::model::check_counter;
use crate::ops::{CloudCheck, Context, OpCounts, ScanCheck, Worker, cloud_bounds, show};
use crate::workload::{Op, SCAN_LEN_MAX};
use crate::{BenchError, Result};

/// How many completed operations a session counts before it adds them to
/// the shared progress counter.
const PROGRESS_BATCH: u64 = 64;

/// Where an operation in flight stands: which reply it waits for.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// A load write of record `i`.
    Load { i: u64 },
    /// A read of record `i`, whose window began at `lo`.
    Read { i: u64, lo: u32 },
    /// An update of record `i` from counter `c` (its write bit held).
    Update { i: u64, c: u32 },
    /// The read of a read-modify-write (bit held; must see exactly `c`).
    RmwRead { i: u64, c: u32 },
    /// The write of a read-modify-write, to `c + 1`.
    RmwWrite { i: u64, c: u32 },
    /// An insert of the new record `i`.
    Insert { i: u64 },
    /// A scan of `n` from record `i`: its RANGE (combkv) or index read (Redis).
    Scan { i: u64, n: usize, lo: u32 },
    /// Redis: the MGET of the keys the index read returned.
    ScanValues { i: u64, n: usize, lo: u32 },
    /// A cloud range at sorted position `j`: RANGE FLOOR (combkv) or the two
    /// index reads (Redis).
    Cloud { j: usize },
    /// Redis: the MGET of the keys the index reads returned.
    CloudValues { j: usize },
}

impl Stage {
    /// What a memcached reply to this stage looks like.
    fn expect(self) -> Expect {
        match self {
            Stage::Read { .. } | Stage::RmwRead { .. } => Expect::Get,
            _ => Expect::Set,
        }
    }
}

/// An operation in flight.
#[derive(Debug)]
struct Pending {
    stage: Stage,
    /// When its first request was queued.
    t0: Instant,
    /// Replies still due for the current stage.
    replies: u8,
    /// Keys returned by Redis index reads, back to back, and where each ends.
    keys: Vec<u8>,
    ends: Vec<usize>,
}

/// What handling a reply did.
enum Outcome {
    /// The operation waits for another reply of the same stage.
    Wait,
    /// The operation sent its next request.
    Sent,
    /// The operation is complete: which kind, for the counts (`None`: load).
    Done(Option<Op>),
}

/// One connection's worker.
pub(super) struct Session<'c, 'a> {
    cx: &'c Context<'a, Dialect>,
    dialect: Dialect,
    conn: Conn,
    w: Worker,
    pending: VecDeque<Pending>,
    spare: Vec<Pending>,
    /// A scratch buffer for range bounds.
    bounds: Vec<u8>,
    pub hist: Histogram<u64>,
    stop: &'c AtomicBool,
    progress: &'c AtomicU64,
    unreported: u64,
}

impl std::fmt::Debug for Session<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("dialect", &self.dialect)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

fn fail<T>(what: String) -> Result<T> {
    Err(BenchError(what))
}

impl<'c, 'a> Session<'c, 'a> {
    pub fn new(
        cx: &'c Context<'a, Dialect>,
        conn: Conn,
        w: Worker,
        stop: &'c AtomicBool,
        progress: &'c AtomicU64,
    ) -> Result<Self> {
        Ok(Session {
            cx,
            dialect: *cx.target,
            conn,
            w,
            pending: VecDeque::new(),
            spare: Vec::new(),
            bounds: Vec::new(),
            // 1 ns .. 60 s at 3 significant digits, as the in-process runs.
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| BenchError(format!("histogram: {e}")))?,
            stop,
            progress,
            unreported: 0,
        })
    }

    /// The operations this session completed, by kind.
    pub fn counts(&self) -> OpCounts {
        self.w.counts
    }

    fn push(&mut self, stage: Stage, replies: u8, t0: Instant) {
        let mut p = self.spare.pop().unwrap_or_else(|| Pending {
            stage,
            t0,
            replies,
            keys: Vec::new(),
            ends: Vec::new(),
        });
        p.stage = stage;
        p.t0 = t0;
        p.replies = replies;
        p.keys.clear();
        p.ends.clear();
        self.pending.push_back(p);
    }

    fn report(&mut self, n: u64) {
        self.unreported += n;
        if self.unreported >= PROGRESS_BATCH {
            self.progress.fetch_add(self.unreported, Ordering::Relaxed);
            self.unreported = 0;
        }
    }

    /// Writes records `lo..hi` at counter 0 with up to `depth` writes in
    /// flight; returns their key + value bytes.
    pub fn load(&mut self, lo: u64, hi: u64, depth: usize) -> Result<u64> {
        let mut bytes = 0u64;
        let shape = self.cx.shape;
        for i in lo..hi {
            if self.pending.len() >= depth {
                self.conn.flush()?;
                while self.pending.len() >= depth {
                    self.receive()?;
                }
            }
            let h = shape.key_into(i, &mut self.w.key);
            shape.value_into(h, 0, &mut self.w.value);
            bytes += (self.w.key.len() + self.w.value.len()) as u64;
            let replies = self
                .dialect
                .insert(&mut self.conn.wbuf, &self.w.key, &self.w.value);
            self.push(Stage::Load { i }, replies, Instant::now());
        }
        self.drain()?;
        self.flush_progress();
        Ok(bytes)
    }

    /// Runs `quota` operations of the mix (or until the stop flag) with up
    /// to `depth` in flight.
    pub fn run(&mut self, quota: u64, depth: usize) -> Result<()> {
        let mut issued = 0u64;
        loop {
            while self.pending.len() < depth && issued < quota && !self.stop.load(Ordering::Relaxed)
            {
                if !self.issue()? {
                    break;
                }
                issued += 1;
            }
            if self.pending.is_empty() {
                break;
            }
            self.conn.flush()?;
            self.receive()?;
        }
        self.flush_progress();
        Ok(())
    }

    fn flush_progress(&mut self) {
        self.progress.fetch_add(self.unreported, Ordering::Relaxed);
        self.unreported = 0;
    }

    /// Sends what is queued and completes every operation in flight.
    fn drain(&mut self) -> Result<()> {
        while !self.pending.is_empty() {
            self.conn.flush()?;
            self.receive()?;
        }
        Ok(())
    }

    /// Takes record `i`'s write bit. While it is held, the session keeps
    /// completing its own operations in flight (the holder may be one of
    /// them), and only spins once it has none; `None` if the run stopped
    /// meanwhile.
    ///
    /// No two sessions wait on each other: a session that waits with
    /// operations in flight is reading their replies, which the server
    /// sends whatever the bench does, so every bit it holds is released;
    /// a session that spins holds no bit.
    fn write_lock(&mut self, i: u64) -> Result<Option<u32>> {
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.cx.model.try_write_begin(i) {
                return Ok(Some(c));
            }
            if self.stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if !self.pending.is_empty() {
                self.conn.flush()?;
                self.receive()?;
                continue;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Queues one operation of the mix; `false` if the run stopped while
    /// it waited for a write bit.
    fn issue(&mut self) -> Result<bool> {
        let cx = self.cx;
        let (shape, model) = (&cx.shape, cx.model);
        let op = cx.mix.pick(&mut self.w.rng);
        let (stage, replies) = match op {
            Op::Read => {
                let i = self.w.chooser.next(&mut self.w.rng, model.acked());
                shape.key_into(i, &mut self.w.key);
                let lo = model.read_begin(i);
                self.dialect.get(&mut self.conn.wbuf, &self.w.key);
                (Stage::Read { i, lo }, 1)
            }
            Op::Update => {
                let i = self.w.chooser.next(&mut self.w.rng, model.acked());
                let Some(c) = self.write_lock(i)? else {
                    return Ok(false);
                };
                let h = shape.key_into(i, &mut self.w.key);
                shape.value_into(h, c + 1, &mut self.w.value);
                self.dialect
                    .set(&mut self.conn.wbuf, &self.w.key, &self.w.value);
                (Stage::Update { i, c }, 1)
            }
            Op::ReadModifyWrite => {
                let i = self.w.chooser.next(&mut self.w.rng, model.acked());
                let Some(c) = self.write_lock(i)? else {
                    return Ok(false);
                };
                shape.key_into(i, &mut self.w.key);
                self.dialect.get(&mut self.conn.wbuf, &self.w.key);
                (Stage::RmwRead { i, c }, 1)
            }
            Op::Insert => {
                let i = model.insert_begin();
                let h = shape.key_into(i, &mut self.w.key);
                shape.value_into(h, 0, &mut self.w.value);
                let replies = self
                    .dialect
                    .insert(&mut self.conn.wbuf, &self.w.key, &self.w.value);
                (Stage::Insert { i }, replies)
            }
            Op::Scan => {
                let i = self.w.chooser.next(&mut self.w.rng, model.acked());
                let n = self.w.rng.random_range(1..=SCAN_LEN_MAX);
                shape.key_into(i, &mut self.w.key);
                let lo = model.read_begin(i);
                self.dialect
                    .scan(&mut self.conn.wbuf, &self.w.key, n, &mut self.bounds);
                (Stage::Scan { i, n, lo }, 1)
            }
            Op::CloudRange => {
                let j = self
                    .w
                    .chooser
                    .next(&mut self.w.rng, cx.sorted.len() as u64 - 2)
                    as usize;
                cloud_bounds(shape, cx.sorted, j, &mut self.w.key, &mut self.w.key3);
                let replies = self.dialect.cloud(
                    &mut self.conn.wbuf,
                    &self.w.key,
                    &self.w.key3,
                    &mut self.bounds,
                );
                (Stage::Cloud { j }, replies)
            }
        };
        self.push(stage, replies, Instant::now());
        Ok(true)
    }

    /// Waits for bytes and handles every complete reply among them.
    fn receive(&mut self) -> Result<()> {
        self.conn.receive()?;
        while let Some(front) = self.pending.front() {
            let expect = front.stage.expect();
            let buf = &self.conn.rbuf[self.conn.rpos..self.conn.rend];
            let Some((reply, used)) = self.dialect.parse(buf, expect).map_err(BenchError)? else {
                break;
            };
            let mut p = self.pending.pop_front().expect("a front exists");
            let outcome = handle(
                self.cx,
                self.dialect,
                &mut self.w,
                &mut p,
                reply,
                &mut self.conn.wbuf,
            );
            self.conn.rpos += used;
            match outcome? {
                Outcome::Wait => self.pending.push_front(p),
                Outcome::Sent => self.pending.push_back(p),
                Outcome::Done(op) => {
                    if let Some(op) = op {
                        let ns = p.t0.elapsed().as_nanos() as u64;
                        self.hist.saturating_record(ns);
                        let c = &mut self.w.counts;
                        *match op {
                            Op::Read => &mut c.read,
                            Op::Update => &mut c.update,
                            Op::Insert => &mut c.insert,
                            Op::Scan => &mut c.scan,
                            Op::ReadModifyWrite => &mut c.rmw,
                            Op::CloudRange => &mut c.cloud_range,
                        } += 1;
                    }
                    self.spare.push(p);
                    self.report(1);
                }
            }
        }
        if self.pending.is_empty() && self.conn.rpos != self.conn.rend {
            return fail(format!(
                "the server sent {} bytes nobody asked for",
                self.conn.rend - self.conn.rpos
            ));
        }
        Ok(())
    }
}

/// Handles one reply to the operation `p`.
fn handle(
    cx: &Context<'_, Dialect>,
    dialect: Dialect,
    w: &mut Worker,
    p: &mut Pending,
    reply: Reply<'_>,
    wbuf: &mut Vec<u8>,
) -> Result<Outcome> {
    let (shape, model) = (&cx.shape, cx.model);
    match p.stage {
        Stage::Load { i } | Stage::Insert { i } => loaded(cx, dialect, w, p, reply, i),
        Stage::Update { i, c } => {
            let r = reply.stored();
            model.write_end(i, if r.is_ok() { c + 1 } else { c });
            if let Err(what) = r {
                shape.key_into(i, &mut w.key);
                return fail(format!(
                    "update of record {i} (key {}): {what}",
                    show(&w.key)
                ));
            }
            Ok(Outcome::Done(Some(Op::Update)))
        }
        Stage::Read { i, lo } => {
            let v = reply.value();
            let hi = model.read_end(i);
            check_read(cx, w, i, v, lo, hi)?;
            Ok(Outcome::Done(Some(Op::Read)))
        }
        Stage::RmwRead { i, c } => {
            // Holding the write bit, the read must see exactly `c`.
            let got = match check_read(cx, w, i, reply.value(), c, c) {
                Ok(got) => got,
                Err(e) => {
                    model.write_end(i, c);
                    return Err(BenchError(format!("read-modify-write: {e}")));
                }
            };
            debug_assert_eq!(got, c);
            let h = shape.key_into(i, &mut w.key);
            shape.value_into(h, c + 1, &mut w.value);
            dialect.set(wbuf, &w.key, &w.value);
            p.stage = Stage::RmwWrite { i, c };
            p.replies = 1;
            Ok(Outcome::Sent)
        }
        Stage::RmwWrite { i, c } => {
            let r = reply.stored();
            model.write_end(i, if r.is_ok() { c + 1 } else { c });
            if let Err(what) = r {
                shape.key_into(i, &mut w.key);
                return fail(format!(
                    "read-modify-write of record {i} (key {}): {what}",
                    show(&w.key)
                ));
            }
            Ok(Outcome::Done(Some(Op::ReadModifyWrite)))
        }
        Stage::Scan { i, n, lo } => scan_reply(cx, dialect, w, p, reply, wbuf, (i, n, lo)),
        Stage::ScanValues { i, n, lo } => {
            let h = shape.key_into(i, &mut w.key);
            let mut check = ScanCheck::new(cx, &w.key, h, &mut w.prev, &mut w.scratch);
            let verdict = zip_values(p, reply, |k, v| check.item(k, v)).and_then(|count| {
                let hi = model.read_end(i);
                check.finish(count, n, lo, hi, &cx.max_initial_key)
            });
            match verdict {
                Ok(()) => Ok(Outcome::Done(Some(Op::Scan))),
                Err(what) => fail(format!(
                    "scan of {n} from record {i} (key {}): {what}",
                    show(&w.key)
                )),
            }
        }
        Stage::Cloud { j } => cloud_reply(cx, dialect, w, p, reply, wbuf, j),
        Stage::CloudValues { j } => {
            let verdict = with_cloud_check(cx, w, j, |check| {
                zip_values(p, reply, |k, v| check.item(k, v))
            });
            match verdict {
                Ok(()) => Ok(Outcome::Done(Some(Op::CloudRange))),
                Err(what) => cloud_fail(cx, w, j, what),
            }
        }
    }
}

/// A load's or an insert's reply (on Redis with the index, the SET's and
/// then the ZADD's).
fn loaded(
    cx: &Context<'_, Dialect>,
    dialect: Dialect,
    w: &mut Worker,
    p: &mut Pending,
    reply: Reply<'_>,
    i: u64,
) -> Result<Outcome> {
    let (shape, model) = (&cx.shape, cx.model);
    // Redis with the index answers the SET, then the ZADD.
    let what = if dialect == (Dialect::Redis { index: true }) && p.replies == 1 {
        reply.added()
    } else {
        reply.stored()
    };
    if let Err(what) = what {
        shape.key_into(i, &mut w.key);
        return fail(format!("writing record {i} (key {}): {what}", show(&w.key)));
    }
    p.replies -= 1;
    if p.replies > 0 {
        return Ok(Outcome::Wait);
    }
    if let Stage::Insert { i } = p.stage {
        model.insert_end(i);
        return Ok(Outcome::Done(Some(Op::Insert)));
    }
    Ok(Outcome::Done(None))
}

/// A scan's first reply: RANGE's items (checked), or, on Redis, the index's
/// keys, whose values an MGET then asks for.
fn scan_reply(
    cx: &Context<'_, Dialect>,
    dialect: Dialect,
    w: &mut Worker,
    p: &mut Pending,
    reply: Reply<'_>,
    wbuf: &mut Vec<u8>,
    (i, n, lo): (u64, usize, u32),
) -> Result<Outcome> {
    let (shape, model) = (&cx.shape, cx.model);
    let h = shape.key_into(i, &mut w.key);
    let scan_fail = |w: &Worker, what: String| {
        fail(format!(
            "scan of {n} from record {i} (key {}): {what}",
            show(&w.key)
        ))
    };
    let items = match reply.items() {
        Ok(items) => items,
        Err(what) => return scan_fail(w, what),
    };
    if dialect == Dialect::Combkv {
        // RANGE answers k1 v1 k2 v2 ...
        if items.len() % 2 != 0 {
            return scan_fail(w, format!("RANGE answered {} elements", items.len()));
        }
        let count = items.len() / 2;
        let mut check = ScanCheck::new(cx, &w.key, h, &mut w.prev, &mut w.scratch);
        let mut items = items;
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            match (bulk(k), bulk(v)) {
                (Ok(k), Ok(v)) => check.item(k, v),
                (Err(what), _) | (_, Err(what)) => return scan_fail(w, what),
            }
        }
        let hi = model.read_end(i);
        let verdict = check.finish(count, n, lo, hi, &cx.max_initial_key);
        return match verdict {
            Ok(()) => Ok(Outcome::Done(Some(Op::Scan))),
            Err(what) => scan_fail(w, what),
        };
    }
    if let Err(what) = collect_keys(p, items) {
        return scan_fail(w, what);
    }
    if p.ends.is_empty() {
        return scan_fail(w, "the index has no key from the start key on".into());
    }
    Dialect::mget(wbuf, &p.keys, &p.ends);
    p.stage = Stage::ScanValues { i, n, lo };
    p.replies = 1;
    Ok(Outcome::Sent)
}

/// A cloud range's first reply: RANGE's items (checked), or, on Redis, the
/// floor's and the range's keys, whose values an MGET then asks for.
fn cloud_reply(
    cx: &Context<'_, Dialect>,
    dialect: Dialect,
    w: &mut Worker,
    p: &mut Pending,
    reply: Reply<'_>,
    wbuf: &mut Vec<u8>,
    j: usize,
) -> Result<Outcome> {
    if dialect == Dialect::Combkv {
        let verdict = reply.items().and_then(|mut items| {
            if items.len() % 2 != 0 {
                return Err(format!("RANGE answered {} elements", items.len()));
            }
            let count = items.len() / 2;
            with_cloud_check(cx, w, j, |check| {
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    check.item(bulk(k)?, bulk(v)?);
                }
                Ok(count)
            })
        });
        return match verdict {
            Ok(()) => Ok(Outcome::Done(Some(Op::CloudRange))),
            Err(what) => cloud_fail(cx, w, j, what),
        };
    }
    // Redis: the floor answer, then the range answer.
    if let Err(what) = reply.items().and_then(|items| collect_keys(p, items)) {
        return cloud_fail(cx, w, j, what);
    }
    p.replies -= 1;
    if p.replies > 0 {
        return Ok(Outcome::Wait);
    }
    if p.ends.is_empty() {
        return cloud_fail(cx, w, j, "the index has no key up to hi".into());
    }
    Dialect::mget(wbuf, &p.keys, &p.ends);
    p.stage = Stage::CloudValues { j };
    p.replies = 1;
    Ok(Outcome::Sent)
}

/// Checks a read of record `i` (`v`: the value, `None` for a miss) against
/// the window `lo..=hi`; returns the counter it read.
fn check_read(
    cx: &Context<'_, Dialect>,
    w: &mut Worker,
    i: u64,
    v: std::result::Result<Option<&[u8]>, String>,
    lo: u32,
    hi: u32,
) -> Result<u32> {
    let h = cx.shape.key_into(i, &mut w.key);
    let v = match v {
        Ok(Some(v)) => v,
        Ok(None) => {
            return fail(format!(
                "read: record {i} (key {}) is missing",
                show(&w.key)
            ));
        }
        Err(what) => return fail(format!("read: record {i} (key {}): {what}", show(&w.key))),
    };
    let got = cx.shape.decode_value(h, v, &mut w.scratch);
    check_counter(got, lo, hi).map_err(|m| {
        let shown = match got {
            Some(c) => format!("update {c}"),
            None => format!("{:?}", show(v)),
        };
        BenchError(format!(
            "read: record {i} (key {}) returned {shown}: {m}",
            show(&w.key)
        ))
    })?;
    Ok(got.unwrap_or_default())
}

/// Appends the keys of an index answer (an array of bulk strings) to `p`.
fn collect_keys(p: &mut Pending, items: super::resp::Items<'_>) -> std::result::Result<(), String> {
    for f in items {
        p.keys.extend_from_slice(bulk(f)?);
        p.ends.push(p.keys.len());
    }
    Ok(())
}

/// Pairs the keys in `p` with the values of an MGET answer, in order, and
/// shows each pair to `item`; returns the count.
fn zip_values(
    p: &Pending,
    reply: Reply<'_>,
    mut item: impl FnMut(&[u8], &[u8]),
) -> std::result::Result<usize, String> {
    let items = reply.items()?;
    if items.len() != p.ends.len() {
        return Err(format!(
            "MGET of {} keys answered {} values",
            p.ends.len(),
            items.len()
        ));
    }
    let mut at = 0;
    for (f, &end) in items.zip(&p.ends) {
        let k = &p.keys[at..end];
        at = end;
        match f {
            super::resp::Frame::Bulk(v) => item(k, v),
            super::resp::Frame::Null => {
                return Err(format!(
                    "the index lists key {} but MGET finds no value",
                    show(k)
                ));
            }
            other => return Err(format!("MGET answered {other}")),
        }
    }
    Ok(p.ends.len())
}

/// Runs `feed` with a [`CloudCheck`] of the range at sorted position `j`
/// (it returns the item count), then the check's verdict.
fn with_cloud_check(
    cx: &Context<'_, Dialect>,
    w: &mut Worker,
    j: usize,
    feed: impl FnOnce(&mut CloudCheck<'_>) -> std::result::Result<usize, String>,
) -> std::result::Result<(), String> {
    let floor_len = cloud_bounds(&cx.shape, cx.sorted, j, &mut w.key, &mut w.key3);
    cx.shape.key_into(cx.sorted[j + 1], &mut w.key2);
    let mut check = CloudCheck::new(
        cx,
        &w.key[..floor_len],
        &w.key2,
        &mut w.prev,
        &mut w.scratch,
    );
    let count = feed(&mut check)?;
    check.finish(count, &w.key3)
}

fn cloud_fail<T>(cx: &Context<'_, Dialect>, w: &mut Worker, j: usize, what: String) -> Result<T> {
    let floor_len = cloud_bounds(&cx.shape, cx.sorted, j, &mut w.key, &mut w.key3);
    fail(format!(
        "range floor from {} to {}: {what}",
        show(&w.key[..floor_len]),
        show(&w.key3)
    ))
}
