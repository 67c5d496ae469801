//! The recent past of a replica's store, held readable for reads at a
//! timestamp (`read_at`): a history hold taken every `Host` driver turn
//! (100 ms) while the keyspace is cut into ranges, the oldest kept until
//! the next one is `RETAIN` old. A read across ranges takes its timestamp,
//! raises every range's floor to it through the range's log and then reads
//! each at it; its timestamp lies in the past by then, by one log round.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::{History, Store};
use parking_lot::Mutex;

/// How far back reads at a timestamp can reach: longer than any floor
/// round that succeeds (a request's own limit is longer, but a read that
/// waited this long is better taken again at a new timestamp).
pub(crate) const RETAIN: Duration = Duration::from_secs(1);

/// A history hold: when it was taken, and of which store.
type Hold = (Instant, Arc<Store>, Arc<History>);

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct Past {
    /// Holds, oldest first (a snapshot installed swaps the store: the old
    /// one's holds are of no use).
    holds: Mutex<VecDeque<Hold>>,
}

impl Past {
    /// One turn: a new hold on `store`, the ones no longer needed dropped;
    /// with `keep` false (no read at a timestamp can come: the keyspace is
    /// one range), every hold dropped.
    pub(crate) fn turn(&self, store: &Arc<Store>, keep: bool) {
        let mut holds = self.holds.lock();
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

    /// A hold on `store` through which it can be read at version `at`.
    pub(crate) fn covering(&self, store: &Arc<Store>, at: u64) -> Option<Arc<History>> {
        self.holds
            .lock()
            .iter()
            .find(|(_, s, h)| Arc::ptr_eq(s, store) && h.version().0 <= at)
            .map(|(_, _, h)| Arc::clone(h))
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
        past.turn(&store, true);
        store.put(b"a", b"2").unwrap();
        past.turn(&store, true);
        assert!(past.covering(&store, before).is_some());
        assert!(past.covering(&store, before - 1).is_none());
        // Another store (a snapshot installed) is not covered; its turn
        // drops the old store's holds.
        let other = Arc::new(Store::new(combkv::Config::default()).unwrap());
        assert!(past.covering(&other, u64::MAX).is_none());
        past.turn(&other, true);
        assert!(past.covering(&store, u64::MAX).is_none());
        assert!(past.covering(&other, other.read_version().0).is_some());
        past.turn(&other, false);
        assert!(past.covering(&other, u64::MAX).is_none());
    }
}
