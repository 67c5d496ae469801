//! Versions as hybrid logical clock timestamps (`docs/design.md`,
//! "Ranges"): every write a group applies takes a version at or above its
//! entry's clock (unix ms in the high bits, a count in the low 16), so the
//! versions of different ranges are one clock's, and a read across ranges
//! can read each at one timestamp. Apply decides it from the entry alone,
//! so every replica gives a write the same version.
//!
//! A version is never visible before the wall clock has passed its
//! millisecond by the bound on the nodes' clock offset (the commit wait,
//! [`ClockOffset`]): a read floor (`codec::encode_floor`) puts the next
//! writes into the millisecond after the read's, and a read that starts,
//! on any node, once a write was acknowledged, or seen, must take a
//! timestamp at or above that write's.
//!
//! [`ClockOffset`]: crate::ranges::ClockOffset

use std::time::Duration;

use combkv::op::Op;
use combkv::{Store, Version};

pub(super) use crate::ranges::clock::wall_ms;
use crate::ranges::{ClockOffset, LOGICAL_BITS, Timestamp};

/// What the writes of an entry need before they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Before {
    /// The clock the store is raised to, so that the writes take versions
    /// from the one after it on.
    pub(super) raise: Version,
    /// The millisecond the wall clock must reach first (the commit wait),
    /// if it has not yet.
    pub(super) wait_until_ms: Option<u64>,
}

/// Before the writes of an entry with clock `now_ms` apply: their versions
/// start at the entry's clock; an entry whose versions would cross into
/// the next millisecond starts at that one instead (a read across ranges
/// reads at the end of a millisecond, and must never fall inside one
/// atomic write's versions, which the engine releases together), and apply
/// waits until the wall clock has passed the last one's millisecond by
/// the bound on the nodes' clock offset (`offset`). An entry that writes
/// nothing (a read-only transaction, a leader's blank batch) waits for
/// nothing. Changes nothing: the caller waits, then asks again and raises
/// the clock.
pub(super) fn before_writes(
    store: &Store,
    now_ms: u64,
    ops: &[Op<'_>],
    offset: &ClockOffset,
) -> Before {
    let mut raise = store
        .read_version()
        .0
        .max(Timestamp::from_millis(now_ms).0.saturating_sub(1));
    let n: u64 = ops.iter().map(versions_taken).sum();
    let first = raise.saturating_add(1);
    let mut last = first.saturating_add(n.saturating_sub(1));
    let per_ms = 1u64 << LOGICAL_BITS;
    if n > 0 && n <= per_ms && first >> LOGICAL_BITS != last >> LOGICAL_BITS {
        let next = (first >> LOGICAL_BITS) + 1;
        raise = Timestamp::from_millis(next).0 - 1;
        last = Timestamp::from_millis(next).0 + n - 1;
    }
    Before {
        raise: Version(raise),
        wait_until_ms: match n {
            0 => None,
            _ => commit_wait(last >> LOGICAL_BITS, offset),
        },
    }
}

/// At most how many versions `op` takes. (A FLUSHALL, `Op::Clear`, takes
/// its store whole, and is refused once the keyspace is split: counted
/// as one.)
fn versions_taken(op: &Op<'_>) -> u64 {
    match op {
        Op::Put { .. }
        | Op::Delete { .. }
        | Op::Append { .. }
        | Op::Incr { .. }
        | Op::Expire { .. }
        | Op::Reap { .. }
        | Op::SetRange { .. }
        | Op::SetBit { .. }
        | Op::IncrFloat { .. }
        | Op::Clear => 1,
        Op::Move { .. } => 2,
        Op::Atomic(writes) => writes.len() as u64,
        Op::Txn { ops, .. } => ops.iter().map(versions_taken).sum(),
        Op::Check(_) | Op::Read { .. } | Op::Scan { .. } => 0,
        // An op the engine adds later: one write until counted here.
        _ => 1,
    }
}

/// The millisecond apply waits for the wall clock to reach before writes
/// whose last version is in millisecond `version_ms` apply, if it has not
/// yet: that one plus the bound. A version runs ahead of this node's
/// clock by less than a millisecond (a read floor's) plus the offset
/// (another node's clock, as far ahead as the bound allows, gave it), and
/// apply waits the bound beyond it. Further ahead than the bound and
/// [`SLACK_MS`] (a clock gone back, or clocks further apart than the
/// bound): no wait, rather than stall the range as long, and `offset`
/// says so (counted, logged at most once a minute).
///
/// [`SLACK_MS`]: crate::ranges::clock::SLACK_MS
fn commit_wait(version_ms: u64, offset: &ClockOffset) -> Option<u64> {
    let now = wall_ms();
    let ms = version_ms.saturating_add(offset.bound_ms());
    if now >= ms {
        return None;
    }
    if version_ms > offset.limit_ms(now) {
        offset.versions_ahead(version_ms - now, now);
        return None;
    }
    Some(ms)
}

/// Waits until the wall clock reads `ms`: the last millisecond in short
/// sleeps (a read floor's wait, the usual one, is under a millisecond, and
/// tokio's timer counts whole ones), longer on tokio's timer. A wall clock
/// stepped back meanwhile does not hold it longer than the wait looked
/// when it began: the caller plans again, and finds the versions too far
/// ahead to wait for.
pub(super) async fn wall_reaches(ms: u64) {
    let start = wall_ms();
    let deadline = std::time::Instant::now() + Duration::from_millis(ms.saturating_sub(start) + 1);
    loop {
        let now = wall_ms();
        if now >= ms || std::time::Instant::now() >= deadline {
            return;
        }
        if ms - now > 1 {
            tokio::time::sleep(Duration::from_millis(ms - now - 1)).await;
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What apply does with [`before_writes`]: waits, then raises.
    fn before(store: &Store, now_ms: u64, ops: &[Op<'_>], offset_ms: u64) {
        let offset = ClockOffset::new(offset_ms);
        loop {
            let b = before_writes(store, now_ms, ops, &offset);
            match b.wait_until_ms {
                Some(ms) => {
                    while wall_ms() < ms {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                None => return store.raise_clock(b.raise),
            }
        }
    }

    fn put(k: &'static [u8]) -> Op<'static> {
        Op::Put {
            key: k,
            value: b"1",
            expiry: combkv::Expiry::Never,
            flags: combkv::Flags::Set(0),
            cond: combkv::op::Cond::Any,
            return_old: false,
        }
    }

    /// An entry's writes take versions from its clock on, never below
    /// the store's last, and the wall clock has reached each one's
    /// millisecond when apply goes on.
    #[test]
    fn writes_take_versions_from_the_entry_clock_on() {
        let store = Store::new(combkv::Config::default()).unwrap();
        let now = wall_ms();
        before(&store, now, &[put(b"a")], 0);
        let v = store.put(b"a", b"1").unwrap();
        assert_eq!(v, Version(Timestamp::from_millis(now).0));
        // An entry with an older clock (a new leader's lagging one) goes on
        // from the store's last version.
        before(&store, now - 5, &[put(b"b")], 0);
        assert_eq!(store.put(b"b", b"1").unwrap(), Version(v.0 + 1));
        // A floor in this millisecond puts the next write in the next one,
        // and apply waits for the clock to reach it.
        let floor = Timestamp::from_millis(wall_ms()).0 | 0xFFFF;
        store.raise_clock(Version(floor));
        before(&store, now, &[put(b"c")], 0);
        let w = store.put(b"c", b"1").unwrap();
        assert!(w.0 > floor);
        assert!(wall_ms() >= w.0 >> LOGICAL_BITS);
    }

    /// With a bound on the clock offset, apply goes on only once the wall
    /// clock has passed the version's millisecond by the bound: by then
    /// every clock within the bound has reached it.
    #[test]
    fn the_commit_wait_covers_the_clock_offset() {
        for offset_ms in [0, 3, 20] {
            let store = Store::new(combkv::Config::default()).unwrap();
            let now = wall_ms();
            before(&store, now, &[put(b"a")], offset_ms);
            let done = wall_ms();
            let v = store.put(b"a", b"1").unwrap();
            assert!(
                done >= (v.0 >> LOGICAL_BITS) + offset_ms,
                "bound {offset_ms}: applied at {done}, version at {}",
                v.0 >> LOGICAL_BITS
            );
        }
    }

    /// An entry that writes nothing (a read-only transaction, a blank
    /// batch) waits for nothing, whatever the bound; versions further
    /// ahead of the clock than the bound and `SLACK_MS` are not
    /// waited for, and counted.
    #[test]
    fn what_the_commit_wait_leaves_out() {
        let store = Store::new(combkv::Config::default()).unwrap();
        let offset = ClockOffset::new(1000);
        let now = wall_ms();
        let keys: &[&[u8]] = &[b"a"];
        let read = Op::Read {
            keys: std::borrow::Cow::Borrowed(keys),
        };
        let b = before_writes(&store, now, std::slice::from_ref(&read), &offset);
        assert_eq!(b.wait_until_ms, None, "no write");
        let b = before_writes(&store, now, &[put(b"a")], &offset);
        assert!(b.wait_until_ms.is_some_and(|ms| ms >= now + 1000), "{b:?}");
        assert_eq!(offset.seen(), (0, 0));
        // Versions a bound and 10 ms ahead still wait; further, not.
        let b = before_writes(&store, wall_ms() + 1005, &[put(b"a")], &offset);
        assert!(b.wait_until_ms.is_some(), "{b:?}");
        let b = before_writes(&store, wall_ms() + 1100, &[put(b"a")], &offset);
        assert_eq!(b.wait_until_ms, None);
        assert_eq!(offset.seen().1, 1, "counted");
    }

    /// An atomic write whose versions would straddle the end of a
    /// millisecond (where reads across ranges read) starts at the next.
    #[test]
    fn an_entry_never_straddles_the_end_of_a_millisecond() {
        let store = Store::new(combkv::Config::default()).unwrap();
        let ms = wall_ms();
        store.raise_clock(Version(Timestamp::from_millis(ms).0 + 0xFFF0));
        let writes: Vec<combkv::AtomicWrite<'_>> = (0..40u8)
            .map(|_| combkv::AtomicWrite::Put {
                key: b"k",
                value: b"v",
                expiry: combkv::Expiry::Never,
            })
            .collect();
        let op = Op::Atomic(std::borrow::Cow::Owned(writes));
        assert_eq!(versions_taken(&op), 40);
        before(&store, ms, std::slice::from_ref(&op), 0);
        assert_eq!(
            store.read_version(),
            Version(Timestamp::from_millis(ms + 1).0 - 1)
        );
        // Ten fit in what is left of the millisecond: they stay in it.
        let store = Store::new(combkv::Config::default()).unwrap();
        store.raise_clock(Version(Timestamp::from_millis(ms).0 + 0xFFF0));
        let ten: Vec<Op<'_>> = (0..10).map(|_| put(b"k")).collect();
        before(&store, ms, &ten, 0);
        assert_eq!(
            store.read_version(),
            Version(Timestamp::from_millis(ms).0 + 0xFFF0)
        );
    }
}
