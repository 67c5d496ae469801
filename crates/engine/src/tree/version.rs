//! Global write and read versions with in-order release (Honeycomb 3.2).
//!
//! A write takes its version with a fetch-add on the write version while it
//! holds the leaf lock, does its work, unlocks, then *completes* the version.
//! The read version advances to `v` only when every version `<= v` has
//! completed; a write is acknowledged once the read version has passed it.
//! Completion flags sit in a ring indexed by version; whoever completes the
//! oldest outstanding version advances the read version over every completed
//! successor.
//!
//! A durable store adds a *limit*: the read version never passes the newest
//! version the write-ahead log has made durable, so no reader sees a write
//! before its log record is on disk. Writers still complete their own
//! versions (in any order); the log flusher raises the limit after each
//! fsync. After a log failure the clock is *poisoned*: the limit freezes, so
//! the store stays at its last durable version, and waits give up.
//!
//! A *group* makes several writes visible at once (MSET): while it is open
//! the read version stays below every version the group may take, and once
//! it is closed the read version never lands between its first and last
//! version, so a reader sees all of the group's writes or none. Versions
//! other writers take meanwhile are released with the group, not before.
//! Groups take turns: one is open at a time. Two groups writing the same
//! keys would otherwise interleave per key (each visible whole, the result
//! a mix), and groups overlapping in time would chain their spans so that
//! the read version could not land anywhere while they went on.
//! While a group is open or its span not yet passed, the read version
//! advances on a slow path under a mutex; without groups nothing changes.
//!
//! **Every version taken is completed, exactly once, on every path**,
//! a panic included. In-order release is what makes one incomplete version
//! fatal: the read version would stop below it for good, and with it every
//! later write's acknowledgement. So a taken version is a [`WriteVersion`]
//! guard: the write completes it once it is published, and a writer that
//! unwinds first completes it as a no-op when the guard drops.

use std::collections::BTreeMap;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, backoff};

/// Ring slots: bounds the versions in flight (taken but not yet released).
const RING: u64 = 4096;

/// Ring slot of version `v`: consecutive versions (usually different
/// threads') land on different cache lines.
fn slot(v: u64) -> usize {
    const PER_LINE: u64 = 8;
    const LINES: u64 = RING / PER_LINE;
    ((v % LINES) * PER_LINE + (v / LINES) % PER_LINE) as usize
}

#[derive(Debug)]
pub(crate) struct VersionClock {
    /// Last version handed out. Own cache line: every write bumps it.
    write: CachePadded<AtomicU64>,
    /// Every version `<= read` is released. Own cache line: every read loads it.
    read: CachePadded<AtomicU64>,
    /// Slot `v % RING` holds `v` once write `v` has completed.
    done: Box<[AtomicU64]>,
    /// The read version never passes this (u64::MAX: no limit).
    limit: CachePadded<AtomicU64>,
    /// Non-zero after a durability failure: waits give up.
    poisoned: AtomicU64,
    /// Non-zero while `groups` constrains the read version (open groups,
    /// spans not yet passed, versions kept outside the ring): `advance`
    /// then takes the slow path.
    constrained: CachePadded<AtomicU64>,
    /// The open group's floor (u64::MAX: none), kept with `groups`: while
    /// the read version stands just below it nothing can move, and `advance`
    /// returns without the mutex (every completion inside a group would
    /// otherwise take it).
    open_floor: CachePadded<AtomicU64>,
    groups: Mutex<Groups>,
    /// Held by the open group, from `open_group` to `close_group`.
    turn: Mutex<()>,
}

/// What groups ask of the read version. Only touched under the mutex.
#[derive(Debug, Default)]
struct Groups {
    /// The open group's floor: the read version stays below it.
    open: Option<u64>,
    /// Closed groups not yet passed: (first, last). The read version is
    /// below `first` or at least `last`, never in between.
    spans: Vec<(u64, u64)>,
    /// Completed versions whose ring slot was not free yet: while a group
    /// holds the read version back, writes go on completing and may run
    /// past the ring, and waiting for a slot would wait on the group.
    overflow: Runs,
}

impl Groups {
    fn floor(&self) -> u64 {
        self.open.unwrap_or(u64::MAX)
    }

    fn demands(&self) -> u64 {
        (usize::from(self.open.is_some()) + self.spans.len() + self.overflow.len()) as u64
    }

    /// The newest version in `lo..=hi` the read version may stand at (none
    /// inside a span); the open group's floor is the caller's bound.
    fn best_allowed(&self, lo: u64, hi: u64) -> Option<u64> {
        let mut x = hi;
        'again: while x >= lo {
            for &(first, last) in &self.spans {
                if first <= x && x < last {
                    x = first.checked_sub(1)?;
                    continue 'again;
                }
            }
            return Some(x);
        }
        None
    }
}

/// A set of versions kept as runs of consecutive ones (start -> end,
/// inclusive): a long group's versions stay a handful of runs.
#[derive(Debug, Default)]
struct Runs(BTreeMap<u64, u64>);

impl Runs {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn insert(&mut self, v: u64) {
        if self.end_of_run(v).is_some() {
            return;
        }
        let below = v
            .checked_sub(1)
            .and_then(|p| self.0.range(..=p).next_back())
            .filter(|&(_, &end)| end + 1 == v)
            .map(|(&start, _)| start);
        let above = self.0.remove(&(v + 1));
        match below {
            Some(start) => {
                self.0.insert(start, above.unwrap_or(v));
            }
            None => {
                self.0.insert(v, above.unwrap_or(v));
            }
        }
    }

    /// The last version of the run holding `v`, if `v` is in the set.
    fn end_of_run(&self, v: u64) -> Option<u64> {
        self.0
            .range(..=v)
            .next_back()
            .filter(|&(_, &end)| v <= end)
            .map(|(_, &end)| end)
    }

    /// Forgets every version `<= v`.
    fn drop_through(&mut self, v: u64) {
        let mut rest = self.0.split_off(&(v + 1));
        if let Some((_, &end)) = self.0.iter().next_back()
            && end > v
        {
            rest.insert(v + 1, end);
        }
        self.0 = rest;
    }
}

/// A write version this thread took (Honeycomb's WriteVersion) and must
/// complete: [`WriteVersion::complete`] once the write is published, or,
/// if the writer unwinds before that, the guard's drop.
///
/// A version completed by the drop completes as a no-op: the write that
/// took it had not published anything yet (a log append writes beyond the
/// published size, a merge or a structure change into buffers no reader
/// can reach until they are published), so releasing it releases nothing.
/// A panic in the middle of publishing a structure change (a bug in the
/// tree) leaves the tree as far as it got; completing the version then
/// still keeps every other write's release going. With a log, the version's
/// record may be in the log though the write never took effect in memory:
/// the write was never acknowledged, so a recovery that replays it is
/// within what a crash at that point could give.
#[must_use = "a version taken must be completed"]
pub(crate) struct WriteVersion<'c> {
    clock: &'c VersionClock,
    v: u64,
}

impl WriteVersion<'_> {
    /// The version.
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        self.v
    }

    /// Completes the version: its write is published. Returns it.
    #[inline(always)]
    pub(crate) fn complete(self) -> u64 {
        let this = std::mem::ManuallyDrop::new(self);
        this.clock.complete(this.v);
        this.v
    }
}

impl Drop for WriteVersion<'_> {
    /// The writer unwound before publishing its write: complete the version
    /// as a no-op, so that releases go on past it.
    fn drop(&mut self) {
        self.clock.complete(self.v);
    }
}

impl std::fmt::Debug for WriteVersion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("WriteVersion").field(&self.v).finish()
    }
}

/// The open group (see the module doc), holding the turn:
/// `VersionClock::close_group` ends it.
#[must_use = "an open group holds the read version back until closed"]
pub(crate) struct GroupHold<'c> {
    floor: u64,
    _turn: MutexGuard<'c, ()>,
}

impl VersionClock {
    /// A clock whose versions `<= start` are all released.
    pub(crate) fn starting_at(start: u64) -> VersionClock {
        VersionClock {
            write: CachePadded::new(AtomicU64::new(start)),
            read: CachePadded::new(AtomicU64::new(start)),
            done: (0..RING).map(|_| AtomicU64::new(u64::MAX)).collect(),
            limit: CachePadded::new(AtomicU64::new(u64::MAX)),
            poisoned: AtomicU64::new(0),
            constrained: CachePadded::new(AtomicU64::new(0)),
            open_floor: CachePadded::new(AtomicU64::new(u64::MAX)),
            groups: Mutex::new(Groups::default()),
            turn: Mutex::new(()),
        }
    }

    /// Restarts the clock so that every version `<= v` counts as released
    /// and the next write takes `v + 1`. Recovery replays log records with
    /// their own versions this way; only while nothing else uses the clock.
    pub(crate) fn reset_to(&self, v: u64) {
        debug_assert_eq!(
            self.read.load(Ordering::SeqCst),
            self.write.load(Ordering::SeqCst),
            "reset with writes in flight"
        );
        self.write.store(v, Ordering::SeqCst);
        self.read.store(v, Ordering::SeqCst);
    }

    /// Caps the read version at `v` (`u64::MAX`: no cap), which must not
    /// be below the read version: set when the log opens and when its
    /// durability mode switches (`Wal::set_mode`).
    pub(crate) fn set_limit(&self, v: u64) {
        debug_assert!(v >= self.read_version(), "a limit below what readers see");
        self.limit.store(v, Ordering::SeqCst);
        self.advance();
    }

    /// Raises the cap to `v` if it is below: the flusher, as the log
    /// becomes durable.
    pub(crate) fn raise_limit(&self, v: u64) {
        self.limit.fetch_max(v, Ordering::SeqCst);
        self.advance();
    }

    /// Marks a durability failure: waits for versions not yet released
    /// return false from now on. The flusher stops raising the limit, so
    /// with a limit the store stays at its last durable version.
    pub(crate) fn poison(&self) {
        self.poisoned.store(1, Ordering::SeqCst);
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst) != 0
    }

    /// The read version: readers see exactly the writes `<= ` it.
    pub(crate) fn read_version(&self) -> u64 {
        self.read.load(Ordering::Acquire)
    }

    /// The last version handed out (released or not).
    pub(crate) fn write_version(&self) -> u64 {
        self.write.load(Ordering::SeqCst)
    }

    /// Takes the next write version. Call with the leaf lock held. The
    /// caller completes it: callers in the tree hold it as a
    /// [`WriteVersion`] (`VersionClock::guard`).
    pub(crate) fn next(&self) -> u64 {
        self.write.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Holds `v`, a version just taken from this clock (`next`), until it
    /// is completed.
    #[inline(always)]
    pub(crate) fn guard(&self, v: u64) -> WriteVersion<'_> {
        WriteVersion { clock: self, v }
    }

    /// Marks `v` complete and advances the read version as far as it can.
    /// Never called with a node lock held.
    pub(crate) fn complete(&self, v: u64) {
        let mut round = 0;
        // A slot is reused only after the version it last held is released.
        while v >= self.read.load(Ordering::SeqCst) + RING {
            if self.is_poisoned() {
                // The read version will not move again; nothing waits on `v`.
                return;
            }
            if self.constrained.load(Ordering::SeqCst) != 0 {
                // A group may be holding the read version back, perhaps
                // this thread's own: keep `v` aside rather than wait.
                let mut g = self.groups.lock();
                if v >= self.read.load(Ordering::SeqCst) + RING {
                    g.overflow.insert(v);
                    self.constrained.store(g.demands(), Ordering::SeqCst);
                    drop(g);
                    self.advance();
                    return;
                }
                break;
            }
            backoff(&mut round);
        }
        self.done[slot(v)].store(v, Ordering::SeqCst);
        self.advance();
    }

    fn advance(&self) {
        loop {
            let r = self.read.load(Ordering::SeqCst);
            let n = r + 1;
            let ready = n <= self.limit.load(Ordering::SeqCst)
                && self.done[slot(n)].load(Ordering::SeqCst) == n;
            // Loaded after `n`'s completion flag: a group opened before `n`
            // was taken is seen here (see `open_group`).
            if self.constrained.load(Ordering::SeqCst) != 0 {
                if n < self.open_floor.load(Ordering::SeqCst) {
                    self.advance_constrained();
                }
                return;
            }
            if !ready {
                return;
            }
            // Losing the race means someone else advanced; look again.
            let _ = self
                .read
                .compare_exchange(r, n, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// `advance` while groups constrain the read version: finds the newest
    /// version up to which everything completed (ring or overflow) that the
    /// groups allow, and moves the read version there in one step, so no
    /// reader sees it stand inside a group's span.
    fn advance_constrained(&self) {
        let mut g = self.groups.lock();
        loop {
            let r = self.read.load(Ordering::SeqCst);
            let limit = self.limit.load(Ordering::SeqCst);
            let stop = g.floor();
            // The newest version up to which everything completed, below
            // every open floor and within the limit: the ring one by one (it
            // holds at most RING versions past the read version), the
            // overflow a run at a time.
            let bound = limit.min(stop.saturating_sub(1));
            let mut n = r;
            while n < bound {
                let m = n + 1;
                if self.done[slot(m)].load(Ordering::SeqCst) == m {
                    n = m;
                } else if let Some(end) = g.overflow.end_of_run(m) {
                    n = end.min(bound);
                } else {
                    break;
                }
            }
            let land = g.best_allowed(r + 1, n).unwrap_or(r);
            if land > r
                && self
                    .read
                    .compare_exchange(r, land, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
            {
                // A fast-path advance moved it (only ever to allowed
                // versions: it runs only while nothing is constrained).
                continue;
            }
            let read = land.max(r);
            g.spans.retain(|&(_, last)| last > read);
            g.overflow.drop_through(read);
            self.constrained.store(g.demands(), Ordering::SeqCst);
            return;
        }
    }

    /// Opens a group once the previous one is closed: until it is closed
    /// the read version stays below every version taken from now on. Call
    /// before the group's first write.
    pub(crate) fn open_group(&self) -> GroupHold<'_> {
        // Groups are short: wait for the turn spinning, then yielding, rather
        // than parking (parking and waking every turn cost MSET -P 16 a
        // third of its throughput).
        let mut round = 0;
        let turn = loop {
            if let Some(t) = self.turn.try_lock() {
                break t;
            }
            backoff(&mut round);
        };
        let mut g = self.groups.lock();
        // `constrained` is raised before the floor is read: a fast-path
        // advance that finds a version >= floor completed then also finds
        // `constrained` set (it loads it after the completion flag).
        self.constrained.fetch_add(1, Ordering::SeqCst);
        let floor = self.write.load(Ordering::SeqCst) + 1;
        g.open = Some(floor);
        self.open_floor.store(floor, Ordering::SeqCst);
        self.constrained.store(g.demands(), Ordering::SeqCst);
        GroupHold { floor, _turn: turn }
    }

    /// Closes a group whose writes are all complete; `last` is the newest
    /// version it took or whose write its decisions saw (below its floor if
    /// none). The read version then jumps from below the group's first
    /// version to `last` or beyond once every version in between has
    /// completed.
    pub(crate) fn close_group(&self, hold: GroupHold<'_>, last: u64) {
        let mut g = self.groups.lock();
        g.open = None;
        // Lowered before this close's own `advance`: one that read the old
        // floor and returned early is covered by it.
        self.open_floor.store(u64::MAX, Ordering::SeqCst);
        if last > hold.floor {
            g.spans.push((hold.floor, last));
        }
        self.constrained.store(g.demands(), Ordering::SeqCst);
        drop(g);
        // The next group opens only after this one's span is recorded.
        drop(hold);
        self.advance();
    }

    /// Waits until the read version is `>= v`. False if the clock is
    /// poisoned first (`v` will never be released).
    pub(crate) fn wait_released(&self, v: u64) -> bool {
        let mut round = 0;
        while self.read.load(Ordering::Acquire) < v {
            if self.is_poisoned() {
                return self.read.load(Ordering::Acquire) >= v;
            }
            self.advance();
            backoff(&mut round);
        }
        true
    }

    /// True if version `v` is released.
    pub(crate) fn is_released(&self, v: u64) -> bool {
        self.read.load(Ordering::Acquire) >= v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_permutation_of_the_ring() {
        let mut seen = vec![false; RING as usize];
        for v in 0..RING {
            let s = slot(v);
            assert!(!seen[s], "slot {s} reused within one ring");
            seen[s] = true;
        }
        assert_eq!(slot(5), slot(5 + RING));
        assert_ne!(slot(5) / 8, slot(6) / 8, "neighbours share a cache line");
    }

    #[test]
    fn out_of_order_completion_releases_in_order() {
        let c = VersionClock::starting_at(0);
        let (a, b, d) = (c.next(), c.next(), c.next());
        c.complete(d);
        c.complete(b);
        assert_eq!(c.read_version(), 0, "version 1 still outstanding");
        c.complete(a);
        assert_eq!(c.read_version(), 3);
        assert!(c.wait_released(3));
    }

    #[test]
    fn the_limit_holds_back_completed_versions() {
        let c = VersionClock::starting_at(0);
        c.set_limit(1);
        let (a, b) = (c.next(), c.next());
        c.complete(a);
        c.complete(b);
        assert_eq!(c.read_version(), 1, "version 2 is above the limit");
        c.set_limit(2);
        assert_eq!(c.read_version(), 2);
        c.poison();
        let d = c.next();
        c.complete(d);
        assert!(!c.wait_released(d), "a poisoned clock gives up");
    }

    #[test]
    fn a_group_is_released_at_once() {
        let c = VersionClock::starting_at(0);
        let before = c.next();
        let hold = c.open_group();
        let a = c.next(); // the group's
        let other = c.next(); // another writer's, inside the span
        let b = c.next(); // the group's
        c.complete(before);
        c.complete(a);
        c.complete(other);
        assert_eq!(c.read_version(), before, "held below the open group");
        c.complete(b);
        assert_eq!(c.read_version(), before, "still open");
        c.close_group(hold, b);
        assert_eq!(c.read_version(), b, "one jump over the whole span");
        let after = c.next();
        c.complete(after);
        assert_eq!(c.read_version(), after, "back on the fast path");
        assert_eq!(c.constrained.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_read_version_never_stops_inside_a_span() {
        let c = VersionClock::starting_at(0);
        let hold = c.open_group();
        let a = c.next();
        let other = c.next(); // not complete when the group closes
        let b = c.next();
        c.complete(a);
        c.complete(b);
        c.close_group(hold, b);
        assert_eq!(c.read_version(), 0, "`other` is outstanding");
        c.complete(other);
        assert_eq!(c.read_version(), b);
        // A durable limit inside a span holds the read version below it.
        let hold = c.open_group();
        let (x, y) = (c.next(), c.next());
        c.set_limit(x);
        c.complete(x);
        c.complete(y);
        c.close_group(hold, y);
        assert_eq!(c.read_version(), b, "the limit cuts the span");
        c.set_limit(y);
        assert_eq!(c.read_version(), y);
    }

    #[test]
    fn a_group_longer_than_the_ring_does_not_wait_on_itself() {
        let c = VersionClock::starting_at(0);
        let hold = c.open_group();
        let mut last = 0;
        for _ in 0..RING + 100 {
            last = c.next();
            // Past the ring this would wait for a release the open group
            // holds back; it keeps the version aside instead.
            c.complete(last);
        }
        assert_eq!(c.read_version(), 0);
        c.close_group(hold, last);
        assert_eq!(c.read_version(), last);
        assert_eq!(c.constrained.load(Ordering::SeqCst), 0, "overflow drained");
        let v = c.next();
        c.complete(v);
        assert_eq!(c.read_version(), v);
    }

    /// Shuttle explores the clock alone: a group writer, a single writer
    /// whose completion runs the fast path while the group opens, and an
    /// observer of the read version. The observer must never see it inside
    /// the group's span or past an open group's floor.
    /// Run: `cargo test -p combkv --features shuttle --lib shuttle_`.
    #[cfg(feature = "shuttle")]
    #[test]
    fn shuttle_no_read_version_inside_a_group() {
        use shuttle::sync::Arc;
        use shuttle::thread;
        shuttle::check_pct(
            || {
                let c = Arc::new(VersionClock::starting_at(0));
                let span = Arc::new(AtomicU64::new(0));
                let group = {
                    let (c, span) = (c.clone(), span.clone());
                    thread::spawn(move || {
                        let hold = c.open_group();
                        let a = c.next();
                        c.complete(a);
                        let b = c.next();
                        c.complete(b);
                        assert!(c.read_version() < a, "the open group was passed");
                        // Published before the close: any read version the
                        // observer saw up to now must be below `a`.
                        span.store(a << 32 | b, Ordering::SeqCst);
                        c.close_group(hold, b);
                    })
                };
                let single = {
                    let c = c.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            let v = c.next();
                            c.complete(v);
                        }
                    })
                };
                let mut seen = Vec::new();
                for _ in 0..6 {
                    seen.push((c.read_version(), span.load(Ordering::SeqCst)));
                    thread::yield_now();
                }
                group.join().unwrap();
                single.join().unwrap();
                let s = span.load(Ordering::SeqCst);
                let (a, b) = (s >> 32, s & 0xffff_ffff);
                for (r, published) in seen {
                    assert!(r < a || r >= b, "read version {r} inside the span {a}..{b}");
                    if published == 0 {
                        assert!(r < a, "read version {r} passed the open group at {a}");
                    }
                }
                assert_eq!(c.read_version(), 4);
            },
            5000,
            3,
        );
    }

    /// A writer that unwinds between taking its version and completing it
    /// must not stall the release of every later version: the guard
    /// completes it as a no-op.
    #[test]
    fn a_version_a_panicking_writer_took_does_not_stall_releases() {
        let c = VersionClock::starting_at(0);
        let before = c.guard(c.next());
        let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _v = c.guard(c.next());
            panic!("the writer dies holding its version");
        }));
        assert!(died.is_err());
        let after = c.guard(c.next()).complete();
        assert_eq!(c.read_version(), 0, "`before` is still outstanding");
        before.complete();
        assert_eq!(
            c.read_version(),
            after,
            "released past the dead writer's version"
        );
        // And inside a group: the group closes past it too.
        let hold = c.open_group();
        let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _v = c.guard(c.next());
            panic!("a group's writer dies");
        }));
        assert!(died.is_err());
        let last = c.guard(c.next()).complete();
        c.close_group(hold, last);
        assert_eq!(c.read_version(), last);
    }

    #[test]
    fn runs_merge_and_forget() {
        let mut r = Runs::default();
        for v in [5, 7, 6, 10, 9, 20] {
            r.insert(v);
        }
        assert_eq!(
            r.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            [(5, 7), (9, 10), (20, 20)]
        );
        assert_eq!(r.end_of_run(6), Some(7));
        assert_eq!(r.end_of_run(8), None);
        r.insert(8);
        assert_eq!(r.end_of_run(5), Some(10));
        r.drop_through(6);
        assert_eq!(
            r.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            [(7, 10), (20, 20)]
        );
        r.drop_through(20);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_long_group_keeps_its_overflow_as_a_few_runs() {
        let c = VersionClock::starting_at(0);
        let hold = c.open_group();
        let mut last = 0;
        for i in 0..RING * 20 {
            last = c.next();
            c.complete(last);
            if i == RING * 10 {
                assert!(
                    c.groups.lock().overflow.len() <= 2,
                    "one run, not a set of versions"
                );
            }
        }
        c.close_group(hold, last);
        assert_eq!(c.read_version(), last);
    }
}
