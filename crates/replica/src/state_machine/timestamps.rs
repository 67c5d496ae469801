//! Versions as hybrid logical clock timestamps (`docs/design.md`,
//! "Ranges"): every write a group applies takes a version at or above its
//! entry's clock (unix ms in the high bits, a count in the low 16), so the
//! versions of different ranges are one clock's, and a read across ranges
//! can read each at one timestamp. Apply decides it from the entry alone,
//! so every replica gives a write the same version.
//!
//! A version is never visible before the wall clock has reached its
//! millisecond (the commit wait): a read floor (`codec::encode_floor`)
//! puts the next writes into the millisecond after the read's, and a
//! read that starts once a write was acknowledged, or seen, must take a
//! timestamp at or above that write's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use combkv::{Store, Version};

use crate::ranges::{LOGICAL_BITS, Timestamp};

/// The longest apply waits for the wall clock to reach a version's
/// millisecond. A version runs ahead by less than one millisecond (a read
/// floor's); further ahead, the wall clock went back (a clock stepped by
/// hand, a node started on another machine with a slower one): apply goes
/// on rather than stall, and says so.
const MAX_COMMIT_WAIT: Duration = Duration::from_millis(10);

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Before `n` writes of an entry with clock `now_ms` apply: their versions
/// start at the entry's clock, and apply waits until the wall clock has
/// reached the last one's millisecond.
pub(super) fn before_writes(store: &Store, now_ms: u64, n: usize) {
    store.raise_clock(Version(Timestamp::from_millis(now_ms).0.saturating_sub(1)));
    let last = store.read_version().0.saturating_add(n as u64);
    commit_wait(last >> LOGICAL_BITS);
}

/// Waits until the wall clock reads `ms` or later (at most
/// `MAX_COMMIT_WAIT`).
fn commit_wait(ms: u64) {
    let now = wall_ms();
    if now >= ms {
        return;
    }
    let ahead = Duration::from_millis(ms - now);
    if ahead > MAX_COMMIT_WAIT {
        tracing::warn!(
            "versions run {ahead:?} ahead of this node's clock: has the clock gone back?"
        );
        return;
    }
    while wall_ms() < ms {
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry's writes take versions from its clock on, never below
    /// the store's last, and the wall clock has reached each one's
    /// millisecond when apply goes on.
    #[test]
    fn writes_take_versions_from_the_entry_clock_on() {
        let store = Store::new(combkv::Config::default()).unwrap();
        let now = wall_ms();
        before_writes(&store, now, 3);
        let v = store.put(b"a", b"1").unwrap();
        assert_eq!(v, Version(Timestamp::from_millis(now).0));
        // An entry with an older clock (a new leader's lagging one) goes on
        // from the store's last version.
        before_writes(&store, now - 5, 1);
        assert_eq!(store.put(b"b", b"1").unwrap(), Version(v.0 + 1));
        // A floor in this millisecond puts the next write in the next one,
        // and apply waits for the clock to reach it.
        let floor = Timestamp::from_millis(wall_ms()).0 | 0xFFFF;
        store.raise_clock(Version(floor));
        before_writes(&store, now, 1);
        let w = store.put(b"c", b"1").unwrap();
        assert!(w.0 > floor);
        assert!(wall_ms() >= w.0 >> LOGICAL_BITS);
    }
}
