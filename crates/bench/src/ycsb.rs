//! One YCSB measurement: one workload against one fresh target.
//!
//! Load the initial records, read the resident size, then run the mix on
//! `threads` threads for a number of operations or seconds, timing every
//! operation into a per-thread histogram and checking every value read
//! against the [`Model`]. The driver runs each measurement in a fresh child
//! process (see [`crate::bench`]) so that the resident figure is the
//! target's alone; tests call [`run_one`] directly.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::generator::{Chooser, Distribution};
use crate::keys::key_hash;
use crate::model::Model;
use crate::ops::{Context, OpCounts, Worker, run_op};
use crate::record::Shape;
use crate::runner::rss_bytes;
use crate::target::{BTreeMapTarget, MasstreeTarget, SccTarget, SkipMapTarget, Target, TargetKind};
use crate::workload::Workload;
use crate::{BenchError, Result};

/// When the run phase ends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stop {
    /// After this many operations, all threads together.
    Ops(u64),
    /// After this many seconds.
    Secs(f64),
}

/// Everything one measurement needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub workload: Workload,
    pub target: TargetKind,
    /// Records loaded before the run, numbered `0..records`.
    pub records: u64,
    pub stop: Stop,
    pub threads: usize,
    pub distribution: Distribution,
    pub shape: Shape,
    /// Cloud's range percentage R.
    pub read_pct: u8,
    /// Seed of the workers' generators.
    pub seed: u64,
    /// Network targets: client connections, each on its own thread.
    #[serde(default = "one")]
    pub connections: usize,
    /// Network targets: operations in flight per connection.
    #[serde(default = "one")]
    pub pipeline: usize,
    /// Network targets: the `combkv` binary that serves combkv-resp and
    /// combkv-memcached (`None`: `$COMBKV_BIN`, else `combkv` next to the
    /// running executable).
    #[serde(default)]
    pub server_bin: Option<std::path::PathBuf>,
    /// combkv targets: hot-entry cache slots per thread (0: none). The
    /// engine then reads GETs as read-engine batches of one through it
    /// (None: by `get_with`); a server gets `--hot-cache-entries` (None:
    /// its default).
    #[serde(default)]
    pub hot_cache: Option<usize>,
}

fn one() -> usize {
    1
}

/// Most connections, and most operations in flight per connection.
pub const CONNECTIONS_MAX: usize = 1024;
pub const PIPELINE_MAX: usize = 4096;

impl RunSpec {
    /// Checks the limits.
    pub fn validate(&self) -> Result<()> {
        let err = |m: String| Err(BenchError(m));
        if self.records < 3 {
            return err("--records must be at least 3".into());
        }
        if self.threads == 0 || self.threads > 1024 {
            return err("--threads must lie in 1..=1024".into());
        }
        if self.target.is_network() {
            if self.connections == 0 || self.connections > CONNECTIONS_MAX {
                return err(format!("--connections must lie in 1..={CONNECTIONS_MAX}"));
            }
            if self.pipeline == 0 || self.pipeline > PIPELINE_MAX {
                return err(format!("--pipeline must lie in 1..={PIPELINE_MAX}"));
            }
            let memcached = matches!(
                self.target,
                TargetKind::Memcached | TargetKind::CombkvMemcached
            );
            if memcached && self.shape.key_size.max > crate::net::memcache::KEY_LEN_MAX {
                return err(format!(
                    "{}: memcached keys are at most {} bytes, --key-size goes to {}",
                    self.target,
                    crate::net::memcache::KEY_LEN_MAX,
                    self.shape.key_size.max
                ));
            }
        }
        if self.read_pct > 100 {
            return err("--read-pct must lie in 0..=100".into());
        }
        match self.stop {
            Stop::Ops(0) => return err("--ops must be at least 1".into()),
            Stop::Secs(s) if !(s.is_finite() && s > 0.0) => {
                return err("--duration must be a positive number of seconds".into());
            }
            _ => {}
        }
        self.shape.validate().map_err(BenchError)
    }
}

/// The figures of one measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub workload: Workload,
    pub target: TargetKind,
    /// Worker threads (network targets: one per connection).
    pub threads: usize,
    /// Network targets: client connections and operations in flight on each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<usize>,
    pub records: u64,
    pub distribution: Distribution,
    pub key_size: String,
    pub value_size: String,
    pub read_pct: u8,
    /// Operations of the run phase, all threads together.
    pub ops: u64,
    pub secs: f64,
    pub throughput_ops: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub load_secs: f64,
    pub load_ops: f64,
    /// VmRSS of the process holding the data (the bench itself in-process,
    /// the server over the network) before the load and after it.
    pub rss_before_bytes: u64,
    pub rss_after_load_bytes: u64,
    /// (VmRSS after load - before) / records.
    pub bytes_per_record: f64,
    /// Mean key + value bytes of the loaded records.
    pub raw_bytes_per_record: f64,
    pub op_counts: OpCounts,
}

#[cfg(test)]
impl RunResult {
    /// A made-up result for report tests.
    pub(crate) fn example(target: TargetKind) -> RunResult {
        RunResult {
            workload: Workload::A,
            target,
            threads: 2,
            connections: None,
            pipeline: None,
            records: 1000,
            distribution: Distribution::Zipfian,
            key_size: "16".into(),
            value_size: "16".into(),
            read_pct: 95,
            ops: 100,
            secs: 1.0,
            throughput_ops: 100.0,
            p50_us: 0.5,
            p90_us: 1.0,
            p99_us: 2.0,
            p999_us: 12.5,
            max_us: 100.0,
            load_secs: 0.1,
            load_ops: 10000.0,
            rss_before_bytes: 1 << 20,
            rss_after_load_bytes: (1 << 20) + 64_000,
            bytes_per_record: 64.0,
            raw_bytes_per_record: 32.0,
            op_counts: OpCounts::default(),
        }
    }
}

/// Runs one measurement in this process; `progress` draws bars on stderr.
pub fn run_one(spec: &RunSpec, progress: bool) -> Result<RunResult> {
    spec.validate()?;
    match spec.target {
        #[cfg(feature = "engine")]
        TargetKind::Engine => run_with(spec, progress, || {
            crate::target::EngineTarget::with_hot_cache(spec.hot_cache)
        }),
        #[cfg(not(feature = "engine"))]
        TargetKind::Engine => Err(BenchError::new(
            "this build has no engine target (built without the `engine` feature)",
        )),
        TargetKind::BTreeMap => run_with(spec, progress, || Ok(BTreeMapTarget::new())),
        TargetKind::SkipMap => run_with(spec, progress, || Ok(SkipMapTarget::new())),
        TargetKind::Scc => run_with(spec, progress, || Ok(SccTarget::new())),
        TargetKind::Masstree => run_with(spec, progress, || Ok(MasstreeTarget::new())),
        TargetKind::CombkvResp
        | TargetKind::CombkvMemcached
        | TargetKind::Redis
        | TargetKind::Memcached => crate::net::run_one(spec, progress),
    }
}

/// Runs one measurement against the target `make` builds.
pub fn run_with<T: Target>(
    spec: &RunSpec,
    progress: bool,
    make: impl FnOnce() -> Result<T>,
) -> Result<RunResult> {
    let tag = format!("{}/{}", spec.workload, spec.target);
    let rss_before = rss_bytes()?;
    let target = make()?;
    let load_bar = bar(progress, spec.records, &tag, "load");
    let (load_secs, raw_bytes) = load(&target, spec, &load_bar)?;
    load_bar.finish_and_clear();
    let rss_after = rss_bytes()?;

    // Everything below is the bench's, allocated after the resident figure.
    let check = RunCheck::new(spec);
    let cx = check.context(&target, spec);
    let run_len = match spec.stop {
        Stop::Ops(n) => n,
        Stop::Secs(s) => (s * 1000.0) as u64,
    };
    let run_bar = bar(progress, run_len, &tag, "run");
    let run = run_phase(&cx, spec, &run_bar)?;
    run_bar.finish_and_clear();

    Ok(RunResult::measured(
        spec,
        spec.threads,
        None,
        run,
        Loaded {
            secs: load_secs,
            raw_bytes,
            rss_before,
            rss_after,
        },
    ))
}

/// What checking a run's answers needs besides the target, shared by the
/// in-process and network drivers: the model of every record, the initial
/// record numbers in key order (cloud only, else empty) and the greatest
/// initial key.
pub(crate) struct RunCheck {
    model: Model,
    sorted: Vec<u64>,
    max_initial_key: Vec<u8>,
}

impl RunCheck {
    pub(crate) fn new(spec: &RunSpec) -> RunCheck {
        let sorted = if spec.workload == Workload::Cloud {
            let mut s: Vec<u64> = (0..spec.records).collect();
            s.sort_unstable_by_key(|&i| key_hash(i));
            s
        } else {
            Vec::new()
        };
        let mut max_initial_key = Vec::new();
        let top = (0..spec.records).max_by_key(|&i| key_hash(i)).unwrap_or(0);
        spec.shape.key_into(top, &mut max_initial_key);
        RunCheck {
            model: Model::new(spec.records),
            sorted,
            max_initial_key,
        }
    }

    /// The operations' context for `target`.
    pub(crate) fn context<'a, T: ?Sized>(
        &'a self,
        target: &'a T,
        spec: &RunSpec,
    ) -> Context<'a, T> {
        let mix = spec.workload.mix(spec.read_pct);
        Context {
            target,
            model: &self.model,
            shape: spec.shape,
            mix,
            writes_existing: mix.writes_existing(),
            max_initial_key: self.max_initial_key.clone(),
            sorted: &self.sorted,
        }
    }
}

pub(crate) fn bar(progress: bool, len: u64, tag: &str, phase: &str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let template = if phase == "load" {
        "{prefix:>16} {msg:4} [{bar:30}] {pos}/{len} records ({per_sec}, eta {eta})"
    } else {
        "{prefix:>16} {msg:4} [{bar:30}] {pos}/{len} {wide_msg}"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let b = ProgressBar::new(len).with_style(style);
    b.set_prefix(tag.to_string());
    b.set_message(phase.to_string());
    b
}

/// How many operations a worker runs between looks at the stop flag.
const BATCH: u64 = 64;

fn join<R>(h: std::thread::ScopedJoinHandle<'_, Result<R>>) -> Result<R> {
    h.join()
        .unwrap_or_else(|_| Err(BenchError::new("a worker thread panicked")))
}

/// Inserts records `0..records` at counter 0, thread `t` taking the `t`-th
/// contiguous slice of record numbers; returns seconds and total key + value
/// bytes.
fn load<T: Target>(target: &T, spec: &RunSpec, bar: &ProgressBar) -> Result<(f64, u64)> {
    let threads = spec.threads as u64;
    let done = AtomicU64::new(0);
    let barrier = Barrier::new(spec.threads + 1);
    let slice = |t: u64| (u128::from(spec.records) * u128::from(t) / u128::from(threads)) as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (done, barrier) = (&done, &barrier);
                let (lo, hi) = (slice(t), slice(t + 1));
                s.spawn(move || -> Result<u64> {
                    let (mut k, mut v) = (Vec::new(), Vec::new());
                    let mut bytes = 0u64;
                    barrier.wait();
                    for i in lo..hi {
                        let h = spec.shape.key_into(i, &mut k);
                        spec.shape.value_into(h, 0, &mut v);
                        target.insert(&k, &v)?;
                        bytes += (k.len() + v.len()) as u64;
                        if i % 1024 == 0 {
                            done.store(i - lo, Ordering::Relaxed);
                        }
                    }
                    Ok(bytes)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        while !handles.iter().all(|h| h.is_finished()) {
            bar.set_position(done.load(Ordering::Relaxed) * threads);
            std::thread::sleep(Duration::from_millis(50));
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = handles.into_iter().map(join).sum::<Result<u64>>()?;
        Ok((secs, bytes))
    })
}

/// What a run phase measured (in-process or over the network).
pub(crate) struct Phase {
    pub ops: u64,
    pub secs: f64,
    pub hist: Histogram<u64>,
    pub counts: OpCounts,
}

/// What a load phase measured.
pub(crate) struct Loaded {
    pub secs: f64,
    /// Key and value bytes loaded.
    pub raw_bytes: u64,
    /// Resident bytes of the store's process before and after the load.
    pub rss_before: u64,
    pub rss_after: u64,
}

impl RunResult {
    /// The figures of a measurement from its phases. `net`: connections
    /// and pipeline depth of a network run.
    pub(crate) fn measured(
        spec: &RunSpec,
        threads: usize,
        net: Option<(usize, usize)>,
        run: Phase,
        load: Loaded,
    ) -> RunResult {
        let us = |q: f64| run.hist.value_at_quantile(q) as f64 / 1000.0;
        let records = spec.records as f64;
        RunResult {
            workload: spec.workload,
            target: spec.target,
            threads,
            connections: net.map(|n| n.0),
            pipeline: net.map(|n| n.1),
            records: spec.records,
            distribution: spec.distribution,
            key_size: spec.shape.key_size.to_string(),
            value_size: spec.shape.value_size.to_string(),
            read_pct: spec.read_pct,
            ops: run.ops,
            secs: run.secs,
            throughput_ops: run.ops as f64 / run.secs,
            p50_us: us(0.5),
            p90_us: us(0.9),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: run.hist.max() as f64 / 1000.0,
            load_secs: load.secs,
            load_ops: records / load.secs,
            rss_before_bytes: load.rss_before,
            rss_after_load_bytes: load.rss_after,
            bytes_per_record: (load.rss_after as f64 - load.rss_before as f64) / records,
            raw_bytes_per_record: load.raw_bytes as f64 / records,
            op_counts: run.counts,
        }
    }
}

fn run_phase<T: Target>(cx: &Context<'_, T>, spec: &RunSpec, bar: &ProgressBar) -> Result<Phase> {
    let threads = spec.threads as u64;
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let barrier = Barrier::new(spec.threads + 1);
    // Built once: the latest chooser sums zeta over the records.
    let chooser = Chooser::new(spec.distribution, spec.records);
    let deadline = match spec.stop {
        Stop::Secs(s) => Some(Duration::from_secs_f64(s)),
        Stop::Ops(_) => None,
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, done, barrier) = (&stop, &done, &barrier);
                let quota = match spec.stop {
                    Stop::Ops(n) => n / threads + u64::from(t < n % threads),
                    Stop::Secs(_) => u64::MAX,
                };
                let seed = spec.seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut w = Worker::new(seed, chooser.clone());
                s.spawn(
                    move || -> Result<(u64, Histogram<u64>, OpCounts, Instant, Instant)> {
                        // 1 ns .. 60 s at 3 significant digits.
                        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                            .map_err(|e| BenchError(format!("histogram: {e}")))?;
                        let mut ops = 0u64;
                        barrier.wait();
                        // Each worker's own start: a short run may end
                        // before the main thread reads the clock.
                        let began = Instant::now();
                        while ops < quota && !stop.load(Ordering::Relaxed) {
                            let n = BATCH.min(quota - ops);
                            for _ in 0..n {
                                let t0 = Instant::now();
                                if let Err(e) = run_op(cx, &mut w) {
                                    stop.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                                hist.saturating_record(t0.elapsed().as_nanos() as u64);
                            }
                            ops += n;
                            done.fetch_add(n, Ordering::Relaxed);
                        }
                        Ok((ops, hist, w.counts, began, Instant::now()))
                    },
                )
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        while !handles.iter().all(|h| h.is_finished()) {
            let elapsed = start.elapsed();
            let ops = done.load(Ordering::Relaxed);
            match deadline {
                Some(d) => {
                    if elapsed >= d {
                        stop.store(true, Ordering::Relaxed);
                    }
                    bar.set_position((elapsed.as_millis() as u64).min(bar.length().unwrap_or(0)));
                    bar.set_message(format!("{ops} ops"));
                }
                None => bar.set_position(ops),
            }
            let nap = deadline.map_or(Duration::from_millis(50), |d| {
                d.saturating_sub(elapsed)
                    .clamp(Duration::from_millis(1), Duration::from_millis(50))
            });
            std::thread::sleep(nap);
        }
        let (mut began, mut end) = (start, start);
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| BenchError(format!("histogram: {e}")))?;
        let mut counts = OpCounts::default();
        let mut ops = 0;
        for h in handles {
            let (n, th, c, t_began, t_end) = join(h)?;
            ops += n;
            began = began.min(t_began);
            end = end.max(t_end);
            hist.add(&th)
                .map_err(|e| BenchError(format!("merging histograms: {e}")))?;
            counts.add(&c);
        }
        Ok(Phase {
            ops,
            secs: (end - began).as_secs_f64(),
            hist,
            counts,
        })
    })
}
