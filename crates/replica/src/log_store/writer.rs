//! The node's log writer: one thread that does the file work of every Raft
//! log journaled on the node (`journal`), instead of a thread per log.
//!
//! A node hosting many ranges hosts as many logs. With a thread each, a
//! leader's append woke its log's thread, which wrote the records and
//! committed them to the journal alone: appends of different groups
//! arriving one after another were synced one after another, each sync
//! and each wake a trip through the kernel. Here a log with work queued
//! is put on the writer's ready list; the writer takes every log on it,
//! runs their queued jobs with each append's records written to its
//! segment and queued in the journal (not synced), and only then syncs
//! the journal once and tells every log whose appends it covered (see
//! [`Served`]). So the appends of all groups that arrive during one turn
//! share one sync and one thread, as TiKV's raft-engine write batches do.
//!
//! The writer also looks at every log at least every [`TICK`]: what is due
//! with no job queued (a segment's sync a second after its appends, a
//! commit point to save) is done then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often every log is looked at for what is due without a job.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// A log the writer serves.
pub(crate) trait Served: Send + Sync {
    /// Set while the log is on the ready list.
    fn ready_flag(&self) -> &AtomicBool;
    /// The log is closed: whoever closed it does what was left.
    fn closed(&self) -> bool;
    /// Runs the queued jobs and what is due; an append whose records went
    /// to the journal is left waiting for the journal's sync. Whether any
    /// append waits.
    fn drain_deferred(&self) -> bool;
    /// Waits for the journal's sync of the appends left waiting (the first
    /// log asked takes the journal's turn, which syncs what every log
    /// queued) and tells them.
    fn flush_deferred(&self);
}

/// See the module's doc.
#[derive(Debug)]
pub(crate) struct LogWriter {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    inner: Mutex<Inner>,
    wake: Condvar,
}

#[derive(Default)]
struct Inner {
    ready: Vec<Arc<dyn Served>>,
    logs: Vec<Weak<dyn Served>>,
    started: bool,
    stop: bool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("ready", &self.ready.len())
            .field("logs", &self.logs.len())
            .field("stop", &self.stop)
            .finish()
    }
}

impl LogWriter {
    pub(crate) fn new() -> LogWriter {
        LogWriter {
            state: Arc::new(State::default()),
        }
    }

    /// Serves `log` from now on; the thread starts with the first log.
    pub(crate) fn register(&self, log: Weak<dyn Served>) -> std::io::Result<()> {
        let mut inner = self.state.inner.lock();
        inner.logs.retain(|l| l.strong_count() > 0);
        inner.logs.push(log);
        if !inner.started {
            let state = Arc::clone(&self.state);
            std::thread::Builder::new()
                .name("raft-log-io".into())
                .spawn(move || run(&state))?;
            inner.started = true;
        }
        Ok(())
    }

    /// How many logs it serves (those still open).
    #[cfg(test)]
    pub(crate) fn served(&self) -> usize {
        let mut inner = self.state.inner.lock();
        inner.logs.retain(|l| l.strong_count() > 0);
        inner.logs.len()
    }

    /// `log` has a job queued: it goes on the ready list, unless it is on
    /// it already.
    pub(crate) fn wake<S: Served + 'static>(&self, log: &Arc<S>) {
        if log.ready_flag().swap(true, Ordering::AcqRel) {
            return;
        }
        let log: Arc<dyn Served> = Arc::clone(log) as Arc<dyn Served>;
        self.state.inner.lock().ready.push(log);
        self.state.wake.notify_one();
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.state.inner.lock().stop = true;
        self.state.wake.notify_one();
    }
}

/// The writer's thread: a turn whenever logs are ready, and every log
/// looked at once a [`TICK`], busy or not.
fn run(state: &State) {
    let mut ticked = Instant::now();
    loop {
        let mut turn = {
            let mut inner = state.inner.lock();
            if inner.ready.is_empty() && !inner.stop {
                let wait = TICK.saturating_sub(ticked.elapsed());
                state.wake.wait_for(&mut inner, wait);
            }
            if inner.stop {
                return;
            }
            let mut turn = std::mem::take(&mut inner.ready);
            if ticked.elapsed() >= TICK {
                ticked = Instant::now();
                inner.logs.retain(|l| l.strong_count() > 0);
                for log in inner.logs.iter().filter_map(Weak::upgrade) {
                    if !turn.iter().any(|t| Arc::ptr_eq(t, &log)) {
                        turn.push(log);
                    }
                }
            }
            turn
        };
        let mut waiting = Vec::new();
        for log in turn.drain(..) {
            // Off the list before its queue is read: a job queued from now
            // on puts it back for the next turn.
            log.ready_flag().store(false, Ordering::Release);
            if !log.closed() && log.drain_deferred() {
                waiting.push(log);
            }
        }
        for log in waiting {
            log.flush_deferred();
        }
    }
}
