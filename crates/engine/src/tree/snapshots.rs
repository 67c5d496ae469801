//! Snapshots (docs/design.md, "Definitions"): read versions pinned in a
//! registry with an expiry. Reclamation (`reclaim`) keeps every buffer a
//! registered version needs; a read at a snapshot holds its entry against
//! release and expiry while it runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::Tree;

/// Live snapshots: pinned version -> (creations not yet released, reads in
/// progress, expiry). An entry holds buffers back while it has creations
/// that have not expired, or reads in progress (a read that began before a
/// release or expiry finishes at its version).
#[derive(Debug, Default)]
pub(crate) struct SnapshotRegistry {
    pub pins: BTreeMap<u64, (usize, usize, Instant)>,
}

impl SnapshotRegistry {
    /// Forgets expired creations; drops entries nobody uses.
    pub(crate) fn prune(&mut self, now: Instant) {
        self.pins.retain(|_, e| {
            if e.2 <= now {
                e.0 = 0;
            }
            e.0 > 0 || e.1 > 0
        });
    }
    /// Releases one creation; false if there was none.
    pub(crate) fn release(&mut self, v: u64) -> bool {
        let Some(e) = self.pins.get_mut(&v) else {
            return false;
        };
        if e.0 == 0 {
            return false;
        }
        e.0 -= 1;
        if e.0 == 0 && e.1 == 0 {
            self.pins.remove(&v);
        }
        true
    }
    /// Starts a read at snapshot `v`; false if it is not live.
    pub(crate) fn enter(&mut self, v: u64, now: Instant) -> bool {
        match self.pins.get_mut(&v) {
            Some(e) if e.0 > 0 && e.2 > now => {
                e.1 += 1;
                true
            }
            _ => false,
        }
    }
    /// Ends a read started by `enter`.
    pub(crate) fn leave(&mut self, v: u64, now: Instant) {
        if let Some(e) = self.pins.get_mut(&v) {
            e.1 -= 1;
        }
        self.prune(now);
    }
    /// Whether a snapshot (or a read at one) needs read version in `[from, to)`.
    pub(crate) fn any_in(&self, from: u64, to: u64) -> bool {
        from < to && self.pins.range(from..to).next().is_some()
    }
    /// Live creations.
    pub(crate) fn live(&self) -> usize {
        self.pins.values().map(|e| e.0).sum()
    }
}

impl Tree {
    /// Pins the current read version in the registry for `ttl`, unless
    /// `max` snapshots are live already (`None`: no cap). Returns the
    /// version pinned.
    pub(crate) fn pin_snapshot(&self, ttl: Duration, max: Option<usize>) -> Option<u64> {
        // Pinned while registering, so no buffer this version needs can pass
        // its grace period before the registry shows the snapshot.
        let guard = self.epochs.pin();
        let mut reg = self.shared.snapshots.lock();
        let now = Instant::now();
        if let Some(max) = max {
            reg.prune(now);
            if reg.live() >= max {
                return None;
            }
        }
        let rv = self.clock.read_version();
        let e = reg.pins.entry(rv).or_insert((0, 0, now));
        e.0 += 1;
        e.2 = e.2.max(now + ttl);
        drop(reg);
        drop(guard);
        Some(rv)
    }

    /// Releases one creation of the snapshot at `v` and frees what it alone
    /// held. False if it was unknown or expired.
    pub(crate) fn release_snapshot(&self, v: u64) -> bool {
        let released = {
            let mut reg = self.shared.snapshots.lock();
            reg.prune(Instant::now());
            reg.release(v)
        };
        if released {
            self.collect(false);
        }
        released
    }

    /// Live snapshots and the time each has left.
    pub(crate) fn list_snapshots(&self) -> Vec<(u64, Duration)> {
        let mut reg = self.shared.snapshots.lock();
        let now = Instant::now();
        reg.prune(now);
        reg.pins
            .iter()
            .filter(|(_, e)| e.0 > 0)
            .map(|(&v, e)| (v, e.2.saturating_duration_since(now)))
            .collect()
    }

    /// Runs `f` at the snapshot's version `v`, holding the snapshot against
    /// release and expiry meanwhile. None if `v` is not a live snapshot.
    pub(crate) fn at_snapshot<T>(&self, v: u64, f: impl FnOnce(u64) -> T) -> Option<T> {
        let guard = self.epochs.pin();
        if !self.shared.snapshots.lock().enter(v, Instant::now()) {
            return None;
        }
        let out = f(v);
        self.shared.snapshots.lock().leave(v, Instant::now());
        drop(guard);
        Some(out)
    }
}
