//! Whether this node serves (`docs/operations.md`, "Readiness").
//!
//! The listeners are bound and the event loops run before the store is
//! recovered, so that a client connecting meanwhile is told why it waits
//! (`LOADING`, as Redis answers while it loads its RDB) instead of
//! hanging in the kernel's accept queue, and an orchestrator can ask
//! `/readyz`. A node moves one way: loading, then (a cluster node)
//! catching up with its leader's commit index, then ready; it becomes
//! failed from any state when its storage fails in a way only a restart
//! repairs (a log write that failed: a full disk).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Instant, SystemTime};

use combkv::RecoveryProgress;
use parking_lot::Mutex;

const LOADING: u8 = 0;
const CATCHING_UP: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// Where a node is on its way to serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Recovering its store from checkpoints and the log.
    Loading,
    /// A cluster node whose store is open but has not yet applied what
    /// its leader had committed when it asked.
    CatchingUp,
    Ready,
    /// Its storage failed; the reason.
    Failed(String),
}

#[derive(Debug)]
pub struct Readiness {
    state: AtomicU8,
    failure: Mutex<String>,
    /// What recovery has read (Redis's `loading_*` INFO fields).
    pub progress: Arc<RecoveryProgress>,
    pub loading_since: Instant,
    pub loading_since_unix: SystemTime,
    /// A cluster node has asked its leader for a read index and waits.
    pub asking: AtomicBool,
    /// The service manager has been told the node is ready.
    pub announced: AtomicBool,
    /// A cluster node's RESP address is in the log (`node/peers.rs`).
    pub published: AtomicBool,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            state: AtomicU8::new(LOADING),
            failure: Mutex::new(String::new()),
            progress: Arc::default(),
            loading_since: Instant::now(),
            loading_since_unix: SystemTime::now(),
            asking: AtomicBool::new(false),
            announced: AtomicBool::new(false),
            published: AtomicBool::new(false),
        }
    }
}

impl Readiness {
    /// True until the node serves: a command that needs the data is
    /// answered `LOADING`. One load on every command's path.
    #[inline]
    pub fn loading(&self) -> bool {
        self.state.load(Ordering::Acquire) < READY
    }

    pub fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            LOADING => State::Loading,
            CATCHING_UP => State::CatchingUp,
            READY => State::Ready,
            _ => State::Failed(self.failure.lock().clone()),
        }
    }

    /// The store is open; a cluster node still has to catch up.
    pub fn loaded(&self, clustered: bool) {
        let next = if clustered { CATCHING_UP } else { READY };
        let _ = self
            .state
            .compare_exchange(LOADING, next, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The cluster node has applied what its leader had committed.
    pub fn caught_up(&self) {
        let _ =
            self.state
                .compare_exchange(CATCHING_UP, READY, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The node's storage failed for good. False if it had already.
    pub fn fail(&self, why: &str) -> bool {
        let mut failure = self.failure.lock();
        if self.state.load(Ordering::Acquire) == FAILED {
            return false;
        }
        *failure = why.to_string();
        self.state.store(FAILED, Ordering::Release);
        true
    }

    /// Redis's `loading_*` INFO fields while loading: (bytes done, bytes
    /// in all, percent done, seconds left at the rate so far).
    pub fn figures(&self) -> (u64, u64, f64, u64) {
        let (done, total) = self.progress.get();
        let perc = if total == 0 {
            0.0
        } else {
            done as f64 * 100.0 / total as f64
        };
        let elapsed = self.loading_since.elapsed().as_secs_f64();
        let eta = if done == 0 {
            1
        } else {
            (elapsed * (total - done) as f64 / done as f64).ceil() as u64
        };
        (done, total, perc, eta)
    }

    /// The `/readyz` and `/healthz` line for the state.
    pub fn describe(&self) -> String {
        match self.state() {
            State::Loading => {
                let (_, _, perc, eta) = self.figures();
                format!("loading the dataset: {perc:.2}% done, about {eta} s left")
            }
            State::CatchingUp => "catching up with the cluster's leader".into(),
            State::Ready => "ready".into(),
            State::Failed(why) => format!("failed: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_one_way_and_failure_sticks() {
        let r = Readiness::default();
        assert!(r.loading());
        r.caught_up();
        assert_eq!(r.state(), State::Loading, "no catching up before loaded");
        r.loaded(true);
        assert_eq!(r.state(), State::CatchingUp);
        assert!(r.loading());
        r.caught_up();
        assert_eq!(r.state(), State::Ready);
        assert!(!r.loading());
        r.loaded(true);
        assert_eq!(r.state(), State::Ready, "never back to catching up");
        assert!(r.fail("No space left on device"));
        assert!(!r.fail("again"));
        assert_eq!(r.state(), State::Failed("No space left on device".into()));
        assert_eq!(r.describe(), "failed: No space left on device");
        r.caught_up();
        assert!(matches!(r.state(), State::Failed(_)));
    }

    #[test]
    fn single_node_is_ready_once_loaded() {
        let r = Readiness::default();
        r.loaded(false);
        assert_eq!(r.state(), State::Ready);
    }
}
