//! Snapshots (docs/design.md, "Definitions"): read versions pinned in a
//! registry. Reclamation (`reclaim`) keeps every buffer a pinned version
//! needs.
//!
//! A version is held by *handles* (client snapshots: a unique id each, with
//! an expiry) and by *pins* (the engine's own holds: a checkpoint, a
//! replication snapshot, which end when their guard drops). Two handles on
//! the same version are two entries: releasing one never ends the other,
//! and a client cannot release a pin. A read at a snapshot holds its
//! version against release and expiry while it runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Shared, Tree};

/// The registry of pinned versions.
#[derive(Debug, Default)]
pub(crate) struct SnapshotRegistry {
    /// Pinned version -> (handles and pins holding it, reads in progress).
    versions: BTreeMap<u64, (usize, usize)>,
    /// Handle id -> (version, expiry).
    handles: BTreeMap<u64, (u64, Instant)>,
    /// The last handle id given out (ids are never reused).
    last_handle: u64,
    /// History holds: version -> how many. A hold at `h` keeps every
    /// version from `h` on readable, not one version: reads at any version
    /// between it and the newest see exactly the writes at or below theirs.
    history: BTreeMap<u64, usize>,
}

/// A live client snapshot, as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandleInfo {
    pub id: u64,
    pub version: u64,
    pub left: Duration,
}

impl SnapshotRegistry {
    fn hold(&mut self, v: u64) {
        self.versions.entry(v).or_default().0 += 1;
    }

    fn unhold(&mut self, v: u64) {
        if let Some(e) = self.versions.get_mut(&v) {
            e.0 -= 1;
            if e.0 == 0 && e.1 == 0 {
                self.versions.remove(&v);
            }
        }
    }

    /// Ends expired handles.
    pub(crate) fn prune(&mut self, now: Instant) {
        let expired: Vec<(u64, u64)> = self
            .handles
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(&id, &(v, _))| (id, v))
            .collect();
        for (id, v) in expired {
            self.handles.remove(&id);
            self.unhold(v);
        }
    }

    /// Ends handle `id`; false if it was not live.
    fn release(&mut self, id: u64) -> bool {
        match self.handles.remove(&id) {
            Some((v, _)) => {
                self.unhold(v);
                true
            }
            None => false,
        }
    }

    /// Starts a read at handle `id`: its version, if the handle is live.
    fn enter(&mut self, id: u64, now: Instant) -> Option<u64> {
        match self.handles.get(&id) {
            Some(&(v, until)) if until > now => {
                self.versions.entry(v).or_default().1 += 1;
                Some(v)
            }
            _ => None,
        }
    }

    /// Ends a read started by `enter`.
    fn leave(&mut self, v: u64) {
        if let Some(e) = self.versions.get_mut(&v) {
            e.1 -= 1;
            if e.0 == 0 && e.1 == 0 {
                self.versions.remove(&v);
            }
        }
    }

    /// Whether a handle, a pin or a read needs read version in `[from, to)`,
    /// or a history hold any version from `from` on: a buffer that serves
    /// `[from, to)` is needed by a hold at `h` when `to > h` (it serves the
    /// versions of `[max(from, h), to)`).
    pub(crate) fn any_in(&self, from: u64, to: u64) -> bool {
        from < to
            && (self.versions.range(from..to).next().is_some()
                || self.history.keys().next().is_some_and(|&h| to > h))
    }

    fn hold_history(&mut self, v: u64) {
        *self.history.entry(v).or_default() += 1;
    }

    fn unhold_history(&mut self, v: u64) {
        if let Some(n) = self.history.get_mut(&v) {
            *n -= 1;
            if *n == 0 {
                self.history.remove(&v);
            }
        }
    }

    /// Live client snapshots (what `max_snapshots` caps).
    pub(crate) fn live(&self) -> usize {
        self.handles.len()
    }
}

/// A version the engine holds for itself: buffers it needs stay until the
/// guard drops. Reclamation frees them at its next pass.
#[derive(Debug)]
pub(crate) struct VersionPin {
    shared: Arc<Shared>,
    version: u64,
}

impl VersionPin {
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
}

impl Drop for VersionPin {
    fn drop(&mut self) {
        self.shared.snapshots.lock().unhold(self.version);
    }
}

/// A history hold: every version from `version` on stays readable until
/// the guard drops.
#[derive(Debug)]
pub(crate) struct HistoryHold {
    shared: Arc<Shared>,
    version: u64,
}

impl HistoryHold {
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
}

impl Drop for HistoryHold {
    fn drop(&mut self) {
        self.shared.snapshots.lock().unhold_history(self.version);
    }
}

impl Tree {
    /// Runs `f` with the current read version registered under the epoch
    /// that keeps its buffers, so no buffer the version needs can pass its
    /// grace period before the registry shows it.
    fn register(&self, f: impl FnOnce(&mut SnapshotRegistry, u64) -> Option<u64>) -> Option<u64> {
        let guard = self.epochs.pin();
        let mut reg = self.shared.snapshots.lock();
        let rv = self.clock.read_version();
        let out = f(&mut reg, rv);
        drop(reg);
        drop(guard);
        out
    }

    /// A new client snapshot of the current read version, live for `ttl`,
    /// unless `max` are live already. Returns (handle id, version).
    pub(crate) fn create_snapshot(&self, ttl: Duration, max: usize) -> Option<(u64, u64)> {
        let mut version = 0;
        let id = self.register(|reg, rv| {
            let now = Instant::now();
            reg.prune(now);
            if reg.live() >= max {
                return None;
            }
            reg.last_handle += 1;
            let id = reg.last_handle;
            reg.handles.insert(id, (rv, now + ttl));
            reg.hold(rv);
            version = rv;
            Some(id)
        })?;
        Some((id, version))
    }

    /// Holds the current read version for the engine itself.
    pub(crate) fn pin_version(&self) -> VersionPin {
        let version = self
            .register(|reg, rv| {
                reg.hold(rv);
                Some(rv)
            })
            .expect("a pin is always taken");
        VersionPin {
            shared: Arc::clone(&self.shared),
            version,
        }
    }

    /// Holds every version from the current read version on (see
    /// [`HistoryHold`]), registered as `pin_version` registers its one.
    pub(crate) fn hold_history(&self) -> HistoryHold {
        let version = self
            .register(|reg, rv| {
                reg.hold_history(rv);
                Some(rv)
            })
            .expect("a hold is always taken");
        HistoryHold {
            shared: Arc::clone(&self.shared),
            version,
        }
    }

    /// Holds every version from `v` on (the read version if that is
    /// lower), for a tree the same at every version from `v` to its read
    /// version: see `Store::hold_history_since`.
    pub(crate) fn hold_history_since(&self, v: u64) -> HistoryHold {
        let version = self
            .register(|reg, rv| {
                let v = v.min(rv);
                reg.hold_history(v);
                Some(v)
            })
            .expect("a hold is always taken");
        HistoryHold {
            shared: Arc::clone(&self.shared),
            version,
        }
    }

    /// Ends client snapshot `id` and frees what it alone held. False if it
    /// was unknown, released or expired.
    pub(crate) fn release_snapshot(&self, id: u64) -> bool {
        let released = {
            let mut reg = self.shared.snapshots.lock();
            reg.prune(Instant::now());
            reg.release(id)
        };
        if released {
            self.collect(false);
        }
        released
    }

    /// Live client snapshots: id, version, time left.
    pub(crate) fn list_snapshots(&self) -> Vec<HandleInfo> {
        let mut reg = self.shared.snapshots.lock();
        let now = Instant::now();
        reg.prune(now);
        reg.handles
            .iter()
            .map(|(&id, &(version, until))| HandleInfo {
                id,
                version,
                left: until.saturating_duration_since(now),
            })
            .collect()
    }

    /// Runs `f` at the version of client snapshot `id`, holding it against
    /// release and expiry meanwhile. None if `id` is not live.
    pub(crate) fn at_snapshot<T>(&self, id: u64, f: impl FnOnce(u64) -> T) -> Option<T> {
        let guard = self.epochs.pin();
        let v = self.shared.snapshots.lock().enter(id, Instant::now())?;
        let out = f(v);
        self.shared.snapshots.lock().leave(v);
        drop(guard);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_pins_are_private() {
        let mut reg = SnapshotRegistry::default();
        let now = Instant::now();
        for id in [1, 2] {
            reg.handles.insert(id, (7, now + Duration::from_secs(60)));
            reg.hold(7);
        }
        reg.hold(7); // an engine pin
        assert_eq!(reg.live(), 2);
        assert!(reg.release(1));
        assert!(!reg.release(1), "a double release ends nothing more");
        assert!(reg.any_in(7, 8), "handle 2 and the pin still hold 7");
        assert!(reg.release(2));
        assert!(reg.any_in(7, 8), "the pin still holds 7");
        reg.unhold(7);
        assert!(!reg.any_in(0, u64::MAX));
        reg.handles.insert(3, (9, now));
        reg.hold(9);
        reg.prune(now + Duration::from_millis(1));
        assert!(!reg.any_in(0, u64::MAX), "expired");
    }
}
