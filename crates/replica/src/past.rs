//! The recent past of a replica's store, held readable for reads at a
//! timestamp (`read_at`): a history hold taken every `Host` driver turn
//! (100 ms) while the keyspace is cut into ranges and a read at a
//! timestamp came to one of the node's replicas in the last `WANTED`, the
//! oldest kept until the next one is `RETAIN` old. A hold keeps every
//! buffer a write replaces for as long as it lives, so a node that no
//! such read asks holds none: under writes alone its memory is a single
//! node's. After a quiet spell a read floor's apply starts a hold (from
//! the store's read version); a write stamped above the read's timestamp
//! and applied before the floor leaves that hold too new, and the read is
//! taken again at a new timestamp (`PAST_GONE`), which the node's next
//! turn has held for every replica. A read across ranges takes its timestamp,
//! raises every range's floor to it through the range's log and then reads
//! each at it; its timestamp lies in the past by then, by one log round.
//! A snapshot of a keyspace split into ranges pins, on every replica of
//! every range, the hold that covers its timestamp for its life (`pin`).
//! A range split off while pinned takes its pins with it, on each replica
//! that applied the split: holds of the store it was split from, which
//! held its keys at the snapshot's timestamp (`inherit`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::{History, Store};
use parking_lot::Mutex;

/// What a read at a timestamp answers when the replica's held past does
/// not reach back to it (its read floor took longer than the past is
/// held, or the replica's store is newer than the timestamp: a range just
/// split off, a snapshot just installed): the read is taken again at a
/// new timestamp.
pub const PAST_GONE: &str = "the range's held past does not reach back to the read's timestamp";

/// How far back reads at a timestamp can reach: longer than any floor
/// round that succeeds (a request's own limit is longer, but a read that
/// waited this long is better taken again at a new timestamp).
pub(crate) const RETAIN: Duration = Duration::from_secs(1);

/// How long after the last read at a timestamp (or snapshot pin) a replica
/// goes on holding its past: long enough that steady reads across ranges,
/// however sparse, rarely meet a replica holding none.
pub(crate) const WANTED: Duration = Duration::from_secs(30);

/// A history hold: when it was taken, and of which store.
type Hold = (Instant, Arc<Store>, Arc<History>);

/// A hold pinned for a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Pin {
    /// Until when.
    until: Instant,
    /// The snapshot's timestamp.
    at: u64,
    /// How long it was pinned for (ms: two snapshots at one timestamp may
    /// live for different times).
    pin_ms: u64,
    hold: Hold,
    /// Handed over by the range this one was split off (or the store
    /// swapped since): its hold is of another store, which held this
    /// range's keys at `at`, and a read of them there is right. Kept for
    /// its life whatever store the replica holds.
    inherited: bool,
}

impl Pin {
    fn live(&self, now: Instant) -> bool {
        self.until > now
    }

    /// Whether it keeps `store`, the replica's own, readable at `at`.
    fn covers(&self, store: &Arc<Store>, at: u64) -> bool {
        self.at == at
            && (self.inherited || Arc::ptr_eq(&self.hold.1, store))
            && self.hold.2.version().0 <= at
    }
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct Past {
    /// Holds, oldest first (a snapshot installed swaps the store: the old
    /// one's holds are of no use).
    holds: Mutex<VecDeque<Hold>>,
    /// Holds pinned for snapshots.
    pinned: Mutex<Vec<Pin>>,
    /// When a read at a timestamp or a pin last asked for a hold.
    asked: Mutex<Option<Instant>>,
}

impl Past {
    /// One turn: a new hold on `store`, the ones no longer needed dropped.
    /// Every hold is dropped where `split` is false (no read at a timestamp
    /// can come: the keyspace is one range), or where no read at a
    /// timestamp came for `WANTED`, to this replica or (`node_asked`) to
    /// another of its node's: a read across ranges that finds one range
    /// holding no past is taken again, and by then the node's other
    /// ranges it reads hold theirs.
    pub(crate) fn turn(&self, store: &Arc<Store>, split: bool, node_asked: bool) {
        let now = Instant::now();
        self.pinned
            .lock()
            .retain(|p| p.live(now) && (p.inherited || Arc::ptr_eq(&p.hold.1, store)));
        let mut holds = self.holds.lock();
        // Under the holds' lock: a `start` that marked the ask before it
        // took the lock is seen here, one after it pushes its hold after.
        let keep = split && (node_asked || self.asked_lately());
        if !keep {
            holds.clear();
            return;
        }
        holds.retain(|(_, s, _)| Arc::ptr_eq(s, store));
        holds.push_back((
            Instant::now(),
            Arc::clone(store),
            Arc::new(store.hold_history()),
        ));
        while holds.len() > 1 && holds[1].0.elapsed() >= RETAIN {
            holds.pop_front();
        }
    }

    /// Holds `store`, a range just split off, from `since` on: its keys
    /// stood as they are at every version from there to its clock
    /// (`SplitChild::since`). A read across ranges whose timestamp was
    /// taken before the split, after reads elsewhere raised the splitting
    /// store's clock past it, reads the new range at it rather than being
    /// taken again (with the next split under way, perhaps again and
    /// again). Kept as any hold: while the node is asked for its past.
    pub(crate) fn seed(&self, store: &Arc<Store>, since: combkv::Version) {
        self.holds.lock().push_front((
            Instant::now(),
            Arc::clone(store),
            Arc::new(store.hold_history_since(since)),
        ));
    }

    /// Whether a read at a timestamp or a pin asked for this past in the
    /// last `WANTED`.
    pub(crate) fn asked_lately(&self) -> bool {
        self.asked.lock().is_some_and(|at| at.elapsed() < WANTED)
    }

    /// Holds `store`'s past from now on if nothing holds it yet (a store
    /// just installed from a snapshot, or split off, read before the next
    /// turn; no read at a timestamp for `WANTED`): a read at a timestamp
    /// taken from now on finds it held, and so does one whose read floor
    /// applies now (the hold reaches back to the store's read version).
    pub(crate) fn start(&self, store: &Arc<Store>) {
        *self.asked.lock() = Some(Instant::now());
        let mut holds = self.holds.lock();
        if !holds.iter().any(|(_, s, _)| Arc::ptr_eq(s, store)) {
            holds.push_back((
                Instant::now(),
                Arc::clone(store),
                Arc::new(store.hold_history()),
            ));
        }
    }

    /// A hold through which `store` (the replica's own) can be read at
    /// version `at`, and the store it holds (another where a split handed
    /// over a pin); the ask keeps the past held for `WANTED` from now.
    pub(crate) fn covering(
        &self,
        store: &Arc<Store>,
        at: u64,
    ) -> Option<(Arc<Store>, Arc<History>)> {
        *self.asked.lock() = Some(Instant::now());
        let covers = |(_, s, h): &&Hold| Arc::ptr_eq(s, store) && h.version().0 <= at;
        if let Some((_, s, h)) = self.holds.lock().iter().find(covers) {
            return Some((Arc::clone(s), Arc::clone(h)));
        }
        self.pinned_at(store, at)
    }

    /// The hold a snapshot at `at` pinned here, if one did, and the store
    /// it holds. Only a pin says that the replica has applied the
    /// snapshot's floor (it is taken as the floor applies, or handed over
    /// by a split applied after it): a rolling hold that covers `at` on a
    /// replica behind the floor would read a state still to change.
    pub(crate) fn pinned_at(
        &self,
        store: &Arc<Store>,
        at: u64,
    ) -> Option<(Arc<Store>, Arc<History>)> {
        let now = Instant::now();
        self.pinned
            .lock()
            .iter()
            .find(|p| p.live(now) && p.covers(store, at))
            .map(|p| (Arc::clone(&p.hold.1), Arc::clone(&p.hold.2)))
    }

    /// Keeps `store` readable at `at` for `ttl` (what is left of a
    /// snapshot's life of `pin_ms`), if a hold covers it now; false if
    /// none does (this replica applied the snapshot's floor too late, or
    /// from a restart's replay).
    pub(crate) fn pin(&self, store: &Arc<Store>, at: u64, pin_ms: u64, ttl: Duration) -> bool {
        let Some((held, h)) = self.covering(store, at) else {
            return false;
        };
        let inherited = !Arc::ptr_eq(&held, store);
        let now = Instant::now();
        self.pinned.lock().push(Pin {
            until: now + ttl,
            at,
            pin_ms,
            hold: (now, held, h),
            inherited,
        });
        true
    }

    /// The pins a range split off this one takes with it (`inherit`).
    pub(crate) fn to_inherit(&self) -> Vec<Pin> {
        let now = Instant::now();
        self.pinned
            .lock()
            .iter()
            .filter(|p| p.live(now))
            .map(|p| Pin {
                inherited: true,
                ..p.clone()
            })
            .collect()
    }

    /// Takes the pins of the range this one was split off: its reads of
    /// their snapshots are served from that range's store as it stood.
    pub(crate) fn inherit(&self, pins: Vec<Pin>) {
        self.pinned.lock().extend(pins);
    }

    /// Drops a pin of the snapshot at `at` pinned for `pin_ms` (released
    /// before its end), if one is held; whether one was.
    pub(crate) fn unpin(&self, at: u64, pin_ms: u64) -> bool {
        let mut pinned = self.pinned.lock();
        match pinned.iter().position(|p| p.at == at && p.pin_ms == pin_ms) {
            Some(i) => {
                pinned.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The timestamps pinned now (one per snapshot that pinned them).
    pub(crate) fn pinned(&self) -> usize {
        let now = Instant::now();
        self.pinned.lock().iter().filter(|p| p.live(now)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_cover_versions_since_the_oldest_and_only_their_store() {
        let store = Arc::new(Store::new(combkv::Config::default()).unwrap());
        let past = Past::default();
        store.put(b"a", b"1").unwrap();
        let before = store.read_version().0;
        assert!(past.covering(&store, before).is_none());
        past.turn(&store, true, false);
        store.put(b"a", b"2").unwrap();
        past.turn(&store, true, false);
        assert!(past.covering(&store, before).is_some());
        assert!(past.covering(&store, before - 1).is_none());
        // Another store (a snapshot installed) is not covered; its turn
        // drops the old store's holds.
        let other = Arc::new(Store::new(combkv::Config::default()).unwrap());
        assert!(past.covering(&other, u64::MAX).is_none());
        past.turn(&other, true, false);
        assert!(past.covering(&store, u64::MAX).is_none());
        assert!(past.covering(&other, other.read_version().0).is_some());
        past.turn(&other, false, false);
        assert!(past.covering(&other, u64::MAX).is_none());
    }

    /// A pin keeps its timestamp readable after the rolling holds have
    /// moved past it (and after they are dropped), for its life only, and
    /// only at its own timestamp.
    #[test]
    fn a_pin_outlives_the_rolling_holds_for_its_life() {
        let store = Arc::new(Store::new(combkv::Config::default()).unwrap());
        let past = Past::default();
        store.put(b"a", b"1").unwrap();
        past.covering(&store, 0);
        past.turn(&store, true, false);
        let at = store.read_version().0;
        // Rolling holds cover it, but no pin says the floor applied here.
        assert!(past.covering(&store, at).is_some());
        assert!(past.pinned_at(&store, at).is_none());
        assert!(!past.pin(&store, at - 1, 60_000, Duration::from_secs(60)));
        assert!(past.pin(&store, at, 300, Duration::from_millis(300)));
        store.put(b"a", b"2").unwrap();
        past.turn(&store, false, false);
        assert!(past.covering(&store, at).is_some());
        assert!(
            past.covering(&store, at + 1).is_none(),
            "only its own timestamp"
        );
        assert_eq!(past.pinned(), 1);
        std::thread::sleep(Duration::from_millis(350));
        assert!(past.covering(&store, at).is_none());
        past.turn(&store, false, false);
        assert_eq!(past.pinned(), 0);
    }

    /// A release drops the pin of its snapshot: one of two snapshots at the
    /// same timestamp (another pin of it stays), the one of its own life
    /// (not the other's), none of another timestamp; with the last, the
    /// store as of it is no longer kept.
    #[test]
    fn a_release_drops_the_pin_of_its_snapshot() {
        let store = Arc::new(Store::new(combkv::Config::default()).unwrap());
        let past = Past::default();
        store.put(b"a", b"1").unwrap();
        past.covering(&store, 0);
        past.turn(&store, true, false);
        let at = store.read_version().0;
        let (short, long) = (Duration::from_secs(60), Duration::from_secs(600));
        assert!(past.pin(&store, at, 60_000, short) && past.pin(&store, at, 600_000, long));
        store.put(b"a", b"2").unwrap();
        past.turn(&store, false, false);
        assert!(!past.unpin(at + 1, 60_000));
        assert!(past.unpin(at, 600_000));
        assert!(
            !past.unpin(at, 600_000),
            "the long one is gone, not the short"
        );
        assert_eq!(past.pinned(), 1);
        assert!(past.pinned_at(&store, at).is_some());
        assert!(past.unpin(at, 60_000));
        assert_eq!(past.pinned(), 0);
        assert!(past.pinned_at(&store, at).is_none());
        assert!(past.covering(&store, at).is_none());
    }

    /// No read at a timestamp, no hold: a replica only written keeps no
    /// replaced buffer. An ask holds from the next turn on, until `WANTED`
    /// has passed without one.
    #[test]
    fn the_past_is_held_only_while_reads_at_a_timestamp_ask_for_it() {
        let store = Arc::new(Store::new(combkv::Config::default()).unwrap());
        let past = Past::default();
        store.put(b"a", b"1").unwrap();
        past.turn(&store, true, false);
        assert!(past.holds.lock().is_empty(), "nothing asked for the past");
        let at = store.read_version().0;
        assert!(past.covering(&store, at).is_none());
        past.turn(&store, true, false);
        assert!(past.covering(&store, at).is_some());
        // A read floor applying starts one at once, reaching back to the
        // store's read version (below the floor's timestamp).
        let other = Arc::new(Store::new(combkv::Config::default()).unwrap());
        other.put(b"a", b"1").unwrap();
        let floor = other.read_version().0 + 10;
        past.start(&other);
        other.raise_clock(combkv::Version(floor));
        assert!(past.pin(&other, floor, 1_000, Duration::from_secs(1)));
        // Asked of another replica of the node: held too.
        *past.asked.lock() = None;
        past.turn(&store, true, true);
        assert!(!past.holds.lock().is_empty(), "asked of the node");
        // Asked of none (or too long ago): none held.
        past.turn(&store, true, false);
        assert!(past.holds.lock().is_empty(), "asked of none");
    }

    /// A range split off takes the splitting replica's live pins: they
    /// read the old store at their timestamp whatever the new range's own
    /// store is, survive its turns, count as its pins, and a release drops
    /// them; an ended pin is not handed over.
    #[test]
    fn a_range_split_off_inherits_the_live_pins() {
        let parent = Arc::new(Store::new(combkv::Config::default()).unwrap());
        let past = Past::default();
        parent.put(b"m", b"old").unwrap();
        past.start(&parent);
        let at = parent.read_version().0;
        assert!(past.pin(&parent, at, 60_000, Duration::from_secs(60)));
        assert!(past.pin(&parent, at, 1, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(5));
        parent.put(b"m", b"new").unwrap();
        let inherited = past.to_inherit();
        assert_eq!(inherited.len(), 1, "the ended pin stays behind");

        let child = Arc::new(Store::new(combkv::Config::default()).unwrap());
        child.put(b"m", b"new").unwrap();
        let split_off = Past::default();
        assert!(split_off.pinned_at(&child, at).is_none());
        split_off.inherit(inherited);
        split_off.turn(&child, true, false);
        let (store, history) = split_off.pinned_at(&child, at).expect("inherited");
        assert!(
            Arc::ptr_eq(&store, &parent),
            "read from the store split from"
        );
        let then = store.get_at_version(&history, combkv::Version(at), b"m");
        assert_eq!(
            then.unwrap().map(|it| it.value.to_vec()),
            Some(b"old".to_vec())
        );
        assert!(
            split_off.pinned_at(&child, at + 1).is_none(),
            "its own timestamp only"
        );
        assert_eq!(split_off.pinned(), 1);
        assert!(split_off.unpin(at, 60_000));
        assert!(split_off.pinned_at(&child, at).is_none());
    }
}
