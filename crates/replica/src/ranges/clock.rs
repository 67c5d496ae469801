//! Hybrid logical clock timestamps: what item versions become once the
//! keyspace is cut into ranges, so that a read crossing ranges can take one
//! timestamp and read every range at it.
//!
//! A timestamp is one `u64`: unix milliseconds in the high 48 bits, a
//! logical counter in the low 16. Ordered as integers, it follows the wall
//! clock where the clock moves and counts where it does not (or goes back):
//! a clock never hands out a timestamp at or below one it has handed out or
//! seen. Seeing another node's timestamp (a reply, a log entry) moves this
//! clock past it, so that anything acknowledged before a read began has a
//! timestamp below the one the read takes on any node that saw it.
//!
//! A range's leader takes a write's timestamp from its clock after it has
//! [`Clock::observe`]d the highest timestamp it served a read at (its read
//! floor), so no later write lands at or below a read already served.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Bits of a timestamp that count within one millisecond.
pub const LOGICAL_BITS: u32 = 16;

/// A hybrid logical clock timestamp (see the module's docs).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp at the start of unix millisecond `ms`.
    pub fn from_millis(ms: u64) -> Timestamp {
        Timestamp(ms << LOGICAL_BITS)
    }

    /// Its unix milliseconds.
    pub fn millis(self) -> u64 {
        self.0 >> LOGICAL_BITS
    }

    /// Its count within the millisecond.
    pub fn logical(self) -> u64 {
        self.0 & ((1 << LOGICAL_BITS) - 1)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.millis(), self.logical())
    }
}

/// How far, beyond the bound on the nodes' clock offset, a version may run
/// ahead of the clock of a node that applies it and still be waited for
/// (a read floor runs the next writes up to a millisecond ahead), and a
/// proposal's clock ahead of its leader's and still be taken as it is.
pub(crate) const SLACK_MS: u64 = 10;

/// The largest bound on the nodes' clock offset, ms: every write waits it
/// out, so a larger one (a setting, or a value published in the log) is
/// taken as this.
pub const MAX_CLOCK_OFFSET_MS: u64 = 1000;

/// The prefix of the cluster setting under which each node publishes its
/// `cluster-max-clock-offset` (ms, in decimal), followed by its id: see
/// [`ClockOffset::adopt`].
pub const CLOCK_OFFSET_SETTING: &str = "clock-offset/";

/// This node's wall clock, unix ms.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The timestamp a read across ranges that starts now reads at: the end
/// of the wall clock's current millisecond. A version is visible only once
/// the clock of a node that applied it passed its millisecond by the
/// bound on the nodes' clock offset (the commit wait, [`ClockOffset`]), so
/// this clock, within the bound of that one, has reached it: every write
/// acknowledged, or seen, before now lies at or below it.
/// Never below one handed out before in this process: a wall clock
/// stepped back does not send a read that starts after another finished
/// to an earlier timestamp.
pub fn read_timestamp() -> Timestamp {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let at = Timestamp::from_millis(wall_ms()).0 | ((1 << LOGICAL_BITS) - 1);
    Timestamp(LAST.fetch_max(at, Ordering::AcqRel).max(at))
}

/// A node's (or a range leader's) clock. Shared between threads: every
/// [`Clock::now`] is above every timestamp handed out or observed before
/// it, on any thread.
#[derive(Debug, Default)]
pub struct Clock {
    last: AtomicU64,
}

impl Clock {
    /// A clock that has handed out nothing and seen nothing.
    pub fn new() -> Clock {
        Clock::default()
    }

    /// A new timestamp at wall time `wall_ms`: the start of that
    /// millisecond if the clock has not passed it, else one above the last
    /// timestamp handed out or seen. More than 65,536 timestamps in one
    /// millisecond carry into the next, which only runs the clock ahead of
    /// the wall for as long as the burst lasts.
    pub fn now(&self, wall_ms: u64) -> Timestamp {
        let wall = Timestamp::from_millis(wall_ms).0;
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let next = wall.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Timestamp(next),
                Err(seen) => last = seen,
            }
        }
    }

    /// Moves the clock to at least `ts` (seen in a reply, a log entry, or a
    /// read served at it): every later [`Clock::now`] is above it.
    pub fn observe(&self, ts: Timestamp) {
        self.last.fetch_max(ts.0, Ordering::AcqRel);
    }

    /// The last timestamp handed out or observed.
    pub fn last(&self) -> Timestamp {
        Timestamp(self.last.load(Ordering::Acquire))
    }
}

/// How far apart the nodes' clocks may be (the server's
/// `cluster-max-clock-offset`), and what this node has seen of the
/// others'. One per node, shared by its groups' state machines.
///
/// A read across ranges takes its timestamp from its own node's clock, so
/// it sees a write acknowledged before it began only if that clock has
/// reached the write's version. Apply holds a write's answer until this
/// node's clock passes the version's millisecond by the bound: once it is
/// acknowledged, every clock within the bound has reached its version
/// (Spanner's commit wait). A bound of 0 trusts the nodes to share one
/// clock (one host).
///
/// Each entry carries its proposer's clock (never below the range's
/// applied clock). A replica that applies one ahead of its own clock
/// learns that some node's clock runs ahead of its own by at least that
/// much (less the time the entry took to arrive): a sure lower bound on
/// their offset, which is counted, and logged when it is past the bound.
#[derive(Debug, Clone, Default)]
pub struct ClockOffset(std::sync::Arc<OffsetSeen>);

#[derive(Debug, Default)]
struct OffsetSeen {
    /// This node's setting.
    configured_ms: u64,
    /// The bound it applies by: the largest of its own setting and those
    /// the cluster's members published ([`ClockOffset::adopt`]).
    bound_ms: AtomicU64,
    /// The settings the members published, as last adopted (by node id):
    /// a disagreement is logged once per change.
    published: parking_lot::Mutex<Vec<(u64, u64)>>,
    /// The most an entry's clock was seen ahead of this node's, ms, in
    /// this minute of the wall clock (`minute`) and the one before, so
    /// that the figure follows clocks brought back in line.
    ahead_max_ms: AtomicU64,
    ahead_before_ms: AtomicU64,
    minute: AtomicU64,
    /// Entries whose clock was ahead of this node's by more than the
    /// bound.
    past_bound: AtomicU64,
    /// When one was last logged (this node's clock, ms): at most one a
    /// minute.
    logged_ms: AtomicU64,
}

impl ClockOffset {
    /// Clocks at most `bound_ms` apart.
    pub fn new(bound_ms: u64) -> ClockOffset {
        ClockOffset(std::sync::Arc::new(OffsetSeen {
            configured_ms: bound_ms,
            bound_ms: AtomicU64::new(bound_ms),
            ..OffsetSeen::default()
        }))
    }

    /// The bound this node applies by, ms: its own setting, or a larger
    /// one another member published.
    pub fn bound_ms(&self) -> u64 {
        self.0.bound_ms.load(Ordering::Relaxed)
    }

    /// This node's own setting, ms (what it publishes).
    pub fn configured_ms(&self) -> u64 {
        self.0.configured_ms
    }

    /// The settings the cluster's members published (node id, ms; each
    /// node publishes its own through the meta group's log, see
    /// [`CLOCK_OFFSET_SETTING`]). The bound must hold on every node, and
    /// the commit wait of a range's leader protects the reads of every
    /// other node, so a setting that differs from node to node would leave
    /// the guarantee to the smallest: this node applies by the largest of
    /// them and its own instead, and a disagreement is logged (once per
    /// change) so that the operator sets the same everywhere.
    pub fn adopt(&self, published: &[(u64, u64)]) {
        let mut sorted = published.to_vec();
        sorted.sort_unstable();
        let largest = sorted.iter().map(|&(_, ms)| ms).max().unwrap_or(0);
        let bound = self.0.configured_ms.max(largest).min(MAX_CLOCK_OFFSET_MS);
        let mut last = self.0.published.lock();
        let before = self.0.bound_ms.swap(bound, Ordering::Relaxed);
        if *last == sorted && before == bound {
            return;
        }
        let differ = sorted.iter().any(|&(_, ms)| ms != self.0.configured_ms);
        if differ {
            let each: Vec<String> = sorted
                .iter()
                .map(|(id, ms)| format!("node {id}: {ms} ms"))
                .collect();
            tracing::warn!(
                "the nodes' cluster-max-clock-offset settings differ ({}; this node's: {} ms): \
                 this node applies the largest, {bound} ms; set the same on every node",
                each.join(", "),
                self.0.configured_ms
            );
        } else if before != bound {
            tracing::info!(
                "every member that published its cluster-max-clock-offset set {bound} ms: this \
                 node applies it"
            );
        }
        *last = sorted;
    }

    /// An entry proposed at `proposed_ms` by its proposer's clock (never
    /// below the range's applied clock) is applied here at `wall_ms` by
    /// this node's.
    pub fn saw(&self, proposed_ms: u64, wall_ms: u64) {
        let ahead = proposed_ms.saturating_sub(wall_ms);
        if ahead == 0 {
            return;
        }
        self.turn_minute(wall_ms);
        self.0.ahead_max_ms.fetch_max(ahead, Ordering::Relaxed);
        if ahead > self.bound_ms() {
            self.past_bound(
                wall_ms,
                format_args!(
                    "an entry's proposer clock runs at least {ahead} ms ahead of this node's"
                ),
            );
        }
    }

    /// The latest clock, unix ms, this node's clock at `wall_ms` lets a
    /// proposal or a version have: the bound and [`SLACK_MS`] ahead.
    pub fn limit_ms(&self, wall_ms: u64) -> u64 {
        wall_ms
            .saturating_add(self.bound_ms())
            .saturating_add(SLACK_MS)
    }

    /// A proposal that came to this leader, its clock reading `wall_ms`,
    /// with a clock `ahead_ms` ahead of it, past [`ClockOffset::limit_ms`]:
    /// its clock was taken back to the limit, or, a read floor, it was
    /// refused.
    pub fn proposal_ahead(&self, ahead_ms: u64, wall_ms: u64) {
        self.past_bound(
            wall_ms,
            format_args!(
                "a proposal came with a clock {ahead_ms} ms ahead of this leader's (a read floor \
                 from that clock is refused, a write takes this leader's clock)"
            ),
        );
    }

    /// Versions `ahead_ms` ahead of this node's clock (reading `wall_ms`),
    /// by more than the bound and [`SLACK_MS`], are applied without the
    /// commit wait (it would stall the range for as long).
    pub fn versions_ahead(&self, ahead_ms: u64, wall_ms: u64) {
        self.past_bound(
            wall_ms,
            format_args!(
                "versions run {ahead_ms} ms ahead of this node's clock and are applied without \
                 the commit wait (has a clock gone back?)"
            ),
        );
    }

    /// Counts a clock found ahead of this node's by more than the bound,
    /// and logs `what` at most once a minute.
    fn past_bound(&self, wall_ms: u64, what: std::fmt::Arguments<'_>) {
        self.0.past_bound.fetch_add(1, Ordering::Relaxed);
        let logged = self.0.logged_ms.load(Ordering::Relaxed);
        if wall_ms >= logged.saturating_add(60_000)
            && self
                .0
                .logged_ms
                .compare_exchange(logged, wall_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::error!(
                "{what}, past cluster-max-clock-offset ({} ms): reads across ranges may miss \
                 writes acknowledged up to that long before they began; synchronise the \
                 clocks or raise the bound",
                self.bound_ms()
            );
        }
    }

    /// Starts a new minute's maximum if the wall clock (`wall_ms`) has
    /// left the last one: the last becomes the one before if it was the
    /// minute just ended. A sample racing the turn may land in either.
    fn turn_minute(&self, wall_ms: u64) {
        let now = wall_ms / 60_000;
        let last = self.0.minute.load(Ordering::Relaxed);
        // A wall clock stepped back turns it too, or the figure would
        // stay until the clock caught up with the minute it left.
        if now != last
            && self
                .0
                .minute
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let ended = self.0.ahead_max_ms.swap(0, Ordering::Relaxed);
            let before = if now == last.wrapping_add(1) {
                ended
            } else {
                0
            };
            self.0.ahead_before_ms.store(before, Ordering::Relaxed);
        }
    }

    /// The most an entry's clock was seen ahead of this node's (ms) in the
    /// last minute or two, and how many times a clock was found ahead by
    /// more than the bound (an entry's, or versions applied without the
    /// commit wait) since the node started.
    pub fn seen(&self) -> (u64, u64) {
        self.seen_at(wall_ms())
    }

    /// [`ClockOffset::seen`] with this node's clock reading `wall_ms`.
    fn seen_at(&self, wall_ms: u64) -> (u64, u64) {
        self.turn_minute(wall_ms);
        (
            self.0
                .ahead_max_ms
                .load(Ordering::Relaxed)
                .max(self.0.ahead_before_ms.load(Ordering::Relaxed)),
            self.0.past_bound.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an entry ahead of this node's clock says anything; one ahead
    /// by more than the bound is counted.
    #[test]
    fn entries_ahead_of_the_clock_are_measured_against_the_bound() {
        let offset = ClockOffset::new(5);
        offset.saw(1_000, 1_000);
        offset.saw(990, 1_000);
        assert_eq!(offset.seen_at(1_000), (0, 0), "behind or level: nothing");
        offset.saw(1_005, 1_000);
        assert_eq!(offset.seen_at(1_000), (5, 0), "within the bound");
        offset.saw(1_012, 1_000);
        offset.saw(1_006, 1_000);
        assert_eq!(offset.seen_at(1_000), (12, 2));
        // Shared by the clones a node's groups hold.
        let group = offset.clone();
        group.saw(2_030, 2_000);
        assert_eq!(offset.seen_at(2_000), (30, 3));
        // The most ahead is that of this minute and the one before; the
        // count stays.
        offset.saw(60_003, 60_000);
        assert_eq!(offset.seen_at(60_000), (30, 3), "the minute before");
        assert_eq!(offset.seen_at(120_000), (3, 3), "two minutes on");
        assert_eq!(offset.seen_at(300_000), (0, 3), "clocks back in line");
        // A wall clock stepped back starts a new window too.
        offset.saw(240_004, 240_000);
        assert_eq!(offset.seen_at(240_000), (4, 3), "stepped back");
    }

    /// A node applies by the largest bound its cluster's members published
    /// and its own, following them down again once they agree.
    #[test]
    fn the_largest_published_bound_is_the_one_applied() {
        let offset = ClockOffset::new(20);
        let group = offset.clone();
        assert_eq!(offset.bound_ms(), 20);
        offset.adopt(&[(1, 20), (2, 20)]);
        assert_eq!(group.bound_ms(), 20);
        offset.adopt(&[(3, 250), (1, 20), (2, 20)]);
        assert_eq!(group.bound_ms(), 250, "a member's larger bound");
        assert_eq!(offset.limit_ms(1_000), 1_000 + 250 + SLACK_MS);
        offset.adopt(&[(1, 0), (2, 5)]);
        assert_eq!(group.bound_ms(), 20, "never below its own");
        assert_eq!(group.configured_ms(), 20);
        offset.adopt(&[]);
        assert_eq!(group.bound_ms(), 20);
        offset.adopt(&[(4, 1_000_000_000)]);
        assert_eq!(group.bound_ms(), MAX_CLOCK_OFFSET_MS, "capped");
    }

    #[test]
    fn a_timestamp_splits_into_millis_and_a_count() {
        let t = Timestamp((1_700_000_000_123 << 16) | 7);
        assert_eq!((t.millis(), t.logical()), (1_700_000_000_123, 7));
        assert_eq!(t.to_string(), "1700000000123.7");
        assert_eq!(Timestamp::from_millis(5).0, 5 << 16);
    }

    #[test]
    fn the_clock_follows_the_wall_and_counts_where_it_stands_still() {
        let c = Clock::new();
        assert_eq!(c.now(10), Timestamp::from_millis(10));
        assert_eq!(c.now(10), Timestamp(Timestamp::from_millis(10).0 + 1));
        // The wall went back: the clock does not.
        assert_eq!(c.now(9), Timestamp(Timestamp::from_millis(10).0 + 2));
        assert_eq!(c.now(11), Timestamp::from_millis(11));
    }

    #[test]
    fn an_observed_timestamp_is_passed_by_the_next() {
        let c = Clock::new();
        c.now(10);
        let seen = Timestamp(Timestamp::from_millis(50).0 + 3);
        c.observe(seen);
        // An older one moves nothing.
        c.observe(Timestamp::from_millis(20));
        assert_eq!(c.last(), seen);
        assert_eq!(c.now(10), Timestamp(seen.0 + 1));
    }

    #[test]
    fn a_burst_past_the_logical_bits_carries_into_the_next_millisecond() {
        let c = Clock::new();
        let mut last = c.now(1);
        for _ in 0..(1 << LOGICAL_BITS) {
            let t = c.now(1);
            assert!(t > last);
            last = t;
        }
        assert_eq!(last.millis(), 2);
        // The wall catching up past it starts counting afresh.
        assert_eq!(c.now(3), Timestamp::from_millis(3));
    }

    #[test]
    fn threads_never_get_the_same_timestamp() {
        let c = std::sync::Arc::new(Clock::new());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let c = std::sync::Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for i in 0..10_000u64 {
                        if i % 100 == 0 {
                            c.observe(Timestamp::from_millis(i / 100 + t));
                        }
                        got.push(c.now(i / 1000));
                    }
                    // Increasing on each thread.
                    assert!(got.windows(2).all(|w| w[0] < w[1]));
                    got
                })
            })
            .collect();
        let mut all: Vec<Timestamp> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
