//! The background executor for checkpoint and compaction work, in the shape
//! of the compaction-offload paper (FPGA-accelerated compactions for
//! LSM-based key-value stores, section 3.2; `docs/design.md`, "References"):
//!
//! - *builder*: the code that wants work done (a checkpoint trigger, SAVE,
//!   BGSAVE) builds a `Task` and submits it to the bounded task queue; a
//!   full queue blocks `submit` (back-pressure) or refuses `try_submit`.
//! - *dispatcher*: picks the backend for each task, round-robin over the
//!   configured backends (only the CPU backend exists today; an offload
//!   backend plugs in here).
//! - *driver*: the worker threads (their own thread budget, so request
//!   threads are never borrowed) run the task on its backend; a task that
//!   fails on an offload backend is retried on the CPU path, and both the
//!   failure and the retry are counted and reported.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::error::{CheckpointError, IoError};

/// Why a background task failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum TaskError {
    /// A checkpoint failed.
    Checkpoint(CheckpointError),
    /// An offload backend could not run the task (the driver then retries
    /// it on the CPU).
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "no offload backend exists yet; the tests have one"
        )
    )]
    Offload { backend: String, source: IoError },
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskError::Checkpoint(e) => e.fmt(f),
            TaskError::Offload { backend, source } => write!(f, "{backend}: {source}"),
        }
    }
}

impl std::error::Error for TaskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TaskError::Checkpoint(e) => Some(e),
            TaskError::Offload { source, .. } => Some(source),
        }
    }
}

/// A unit of background work. `run_cpu` is the reference implementation
/// every task has; `finish` receives the outcome once (after any retry).
pub(crate) trait Task: Send {
    fn name(&self) -> String;
    fn run_cpu(&mut self) -> Result<(), TaskError>;
    fn finish(&mut self, outcome: Result<(), TaskError>);
}

/// Where tasks run. An offload backend returns Err for what it cannot do;
/// the driver then retries the task on the CPU.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &str;
    fn is_cpu(&self) -> bool {
        false
    }
    fn run(&self, task: &mut dyn Task) -> Result<(), TaskError>;
}

/// Runs tasks on the calling worker thread.
#[derive(Debug, Default)]
pub(crate) struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }
    fn is_cpu(&self) -> bool {
        true
    }
    fn run(&self, task: &mut dyn Task) -> Result<(), TaskError> {
        task.run_cpu()
    }
}

/// Counters, for `PersistenceStats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    /// Worker threads.
    pub threads: usize,
    /// How many tasks the queue holds before `try_submit` refuses more.
    pub queue_capacity: usize,
    /// Tasks waiting in the queue now.
    pub queued: usize,
    /// Tasks that ran to success.
    pub completed: u64,
    /// Tasks whose final outcome was a failure.
    pub failed: u64,
    /// Tasks that failed on an offload backend and were retried on the CPU.
    pub retried_on_cpu: u64,
    /// `try_submit` calls refused because the queue was full.
    pub rejected: u64,
    /// The most recent failure, with the task's name.
    pub last_failure: Option<String>,
}

struct Queue {
    tasks: VecDeque<Box<dyn Task>>,
    stopping: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Workers wait here for tasks; submitters wait here for room.
    changed: Condvar,
    capacity: usize,
    backends: Vec<Arc<dyn Backend>>,
    next_backend: AtomicUsize,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    rejected: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

/// The executor: a bounded queue and a fixed set of worker threads.
pub(crate) struct Executor {
    shared: Arc<Shared>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    threads: usize,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("threads", &self.threads)
            .field("capacity", &self.shared.capacity)
            .finish()
    }
}

impl Executor {
    /// `threads` workers (at least one), a queue of `capacity` tasks, and
    /// the backends the dispatcher chooses from (empty: the CPU only).
    pub(crate) fn new(
        threads: usize,
        capacity: usize,
        backends: Vec<Arc<dyn Backend>>,
    ) -> Executor {
        let backends = if backends.is_empty() {
            vec![Arc::new(CpuBackend) as Arc<dyn Backend>]
        } else {
            backends
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                tasks: VecDeque::new(),
                stopping: false,
            }),
            changed: Condvar::new(),
            capacity: capacity.max(1),
            backends,
            next_backend: AtomicUsize::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        });
        let threads = threads.max(1);
        let workers = (0..threads)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("combkv-bg-{i}"))
                    .spawn(move || drive(&s))
                    .expect("spawning a background worker")
            })
            .collect();
        Executor {
            shared,
            workers: Mutex::new(workers),
            threads,
        }
    }

    /// Queues `task`, waiting while the queue is full. Err(task) after `stop`.
    pub(crate) fn submit(&self, task: Box<dyn Task>) -> Result<(), Box<dyn Task>> {
        let mut q = self.shared.queue.lock();
        while q.tasks.len() >= self.shared.capacity && !q.stopping {
            self.shared.changed.wait(&mut q);
        }
        if q.stopping {
            return Err(task);
        }
        q.tasks.push_back(task);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Queues `task` if there is room now.
    pub(crate) fn try_submit(&self, task: Box<dyn Task>) -> Result<(), Box<dyn Task>> {
        let mut q = self.shared.queue.lock();
        if q.tasks.len() >= self.shared.capacity || q.stopping {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(task);
        }
        q.tasks.push_back(task);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Runs what is queued, then stops the workers.
    pub(crate) fn stop(&self) {
        {
            let mut q = self.shared.queue.lock();
            q.stopping = true;
            self.shared.changed.notify_all();
        }
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
    }

    pub(crate) fn stats(&self) -> ExecutorStats {
        let s = &self.shared;
        ExecutorStats {
            threads: self.threads,
            queue_capacity: s.capacity,
            queued: s.queue.lock().tasks.len(),
            completed: s.completed.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            retried_on_cpu: s.retried.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            last_failure: s.last_failure.lock().clone(),
        }
    }
}

/// The dispatcher: round-robin over the backends.
fn dispatch(s: &Shared) -> &Arc<dyn Backend> {
    let i = s.next_backend.fetch_add(1, Ordering::Relaxed);
    &s.backends[i % s.backends.len()]
}

/// The driver: one worker thread's loop.
fn drive(s: &Shared) {
    loop {
        let mut task = {
            let mut q = s.queue.lock();
            loop {
                if let Some(t) = q.tasks.pop_front() {
                    s.changed.notify_all();
                    break t;
                }
                if q.stopping {
                    return;
                }
                s.changed.wait(&mut q);
            }
        };
        let backend = dispatch(s);
        let mut outcome = backend.run(task.as_mut());
        if let Err(e) = &outcome
            && !backend.is_cpu()
        {
            s.retried.fetch_add(1, Ordering::Relaxed);
            *s.last_failure.lock() = Some(format!(
                "{} failed on {} ({e}); retried on the CPU",
                task.name(),
                backend.name()
            ));
            outcome = task.run_cpu();
        }
        match &outcome {
            Ok(()) => s.completed.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                *s.last_failure.lock() = Some(format!("{} failed: {e}", task.name()));
                s.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        task.finish(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Probe {
        fail_cpu: bool,
        ran_cpu: Arc<AtomicU64>,
        done: mpsc::Sender<Result<(), TaskError>>,
    }

    impl Task for Probe {
        fn name(&self) -> String {
            "probe".into()
        }
        fn run_cpu(&mut self) -> Result<(), TaskError> {
            self.ran_cpu.fetch_add(1, Ordering::SeqCst);
            if self.fail_cpu {
                Err(cpu_says_no())
            } else {
                Ok(())
            }
        }
        fn finish(&mut self, outcome: Result<(), TaskError>) {
            let _ = self.done.send(outcome);
        }
    }

    fn cpu_says_no() -> TaskError {
        let e = std::io::Error::other("cpu says no");
        TaskError::Checkpoint(CheckpointError::Io(IoError::new("probe", e)))
    }

    #[derive(Debug)]
    struct Broken;
    impl Backend for Broken {
        fn name(&self) -> &str {
            "broken-offload"
        }
        fn run(&self, _task: &mut dyn Task) -> Result<(), TaskError> {
            Err(TaskError::Offload {
                backend: self.name().into(),
                source: IoError::new("running probe", std::io::Error::other("device lost")),
            })
        }
    }

    #[test]
    fn a_task_failing_on_an_offload_backend_is_retried_on_the_cpu_and_reported() {
        let ex = Executor::new(1, 4, vec![Arc::new(Broken)]);
        let ran = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let task = Probe {
            fail_cpu: false,
            ran_cpu: Arc::clone(&ran),
            done: tx,
        };
        assert!(ex.submit(Box::new(task)).is_ok());
        assert_eq!(rx.recv().unwrap(), Ok(()));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let st = ex.stats();
        assert_eq!((st.completed, st.failed, st.retried_on_cpu), (1, 0, 1));
        assert!(st.last_failure.unwrap().contains("device lost"));
        ex.stop();
    }

    #[test]
    fn a_failing_cpu_task_is_reported_not_retried() {
        let ex = Executor::new(1, 4, Vec::new());
        let (tx, rx) = mpsc::channel();
        let ran = Arc::new(AtomicU64::new(0));
        let task = Probe {
            fail_cpu: true,
            ran_cpu: Arc::clone(&ran),
            done: tx,
        };
        assert!(ex.submit(Box::new(task)).is_ok());
        assert_eq!(rx.recv().unwrap(), Err(cpu_says_no()));
        let st = ex.stats();
        assert_eq!((st.completed, st.failed, st.retried_on_cpu), (0, 1, 0));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        ex.stop();
    }

    /// Blocks its worker until released.
    struct Gate(Arc<(Mutex<bool>, Condvar)>);
    impl Task for Gate {
        fn name(&self) -> String {
            "gate".into()
        }
        fn run_cpu(&mut self) -> Result<(), TaskError> {
            let (m, c) = &*self.0;
            let mut open = m.lock();
            while !*open {
                c.wait(&mut open);
            }
            Ok(())
        }
        fn finish(&mut self, _: Result<(), TaskError>) {}
    }

    #[test]
    fn a_full_queue_refuses_try_submit_and_holds_submit_back() {
        let ex = Arc::new(Executor::new(1, 1, Vec::new()));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        assert!(ex.submit(Box::new(Gate(Arc::clone(&gate)))).is_ok());
        // Wait until the worker holds the first task, then fill the queue.
        while ex.stats().queued != 0 {
            std::thread::yield_now();
        }
        assert!(ex.submit(Box::new(Gate(Arc::clone(&gate)))).is_ok());
        assert!(ex.try_submit(Box::new(Gate(Arc::clone(&gate)))).is_err());
        assert_eq!(ex.stats().rejected, 1);
        let ex2 = Arc::clone(&ex);
        let g2 = Arc::clone(&gate);
        let blocked = std::thread::spawn(move || ex2.submit(Box::new(Gate(g2))).is_ok());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!blocked.is_finished(), "submit waits for room");
        *gate.0.lock() = true;
        gate.1.notify_all();
        assert!(blocked.join().unwrap());
        ex.stop();
        assert_eq!(ex.stats().completed, 3);
    }
}
