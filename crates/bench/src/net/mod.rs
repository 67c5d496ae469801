//! The network half of the bench: servers over loopback.
//!
//! - [`resp`] and [`memcache`]: the two client protocols (requests out,
//!   replies parsed in place, split reads handled).
//! - [`conn`]: one connection's socket and buffers.
//! - [`dialect`]: what each target is sent for each operation.
//! - `session`: one connection's pipelined, checked share of a run.
//! - [`server`]: starting each target's server (`combkv serve`, or
//!   `redis-server`, `memcached`) and reading its memory.
//!
//! One client implementation per protocol serves every target that speaks
//! it, with the same settings: combkv-resp and redis share the RESP client,
//! combkv-memcached and memcached the memcached one.

pub mod conn;
pub mod dialect;
pub mod memcache;
pub mod resp;
pub mod server;
mod session;

use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;

use self::conn::Conn;
use self::dialect::Dialect;
use self::server::{Server, StartOptions};
use self::session::Session;
use crate::generator::Chooser;
use crate::ops::{OpCounts, Worker};
use crate::target::TargetKind;
use crate::workload::Workload;
use crate::ycsb::{Loaded, Phase, RunCheck, RunResult, RunSpec, Stop, bar};
use crate::{BenchError, Result};

/// Writes in flight per connection during the load, for every target alike.
/// The load is not what the run measures; a deep pipeline keeps it short.
pub const LOAD_PIPELINE: usize = 256;

/// How the bench speaks to `target` in `workload`.
pub fn dialect(target: TargetKind, workload: Workload, read_pct: u8) -> Result<Dialect> {
    let mix = workload.mix(read_pct);
    match target {
        TargetKind::CombkvResp => Ok(Dialect::Combkv),
        TargetKind::Redis => Ok(Dialect::Redis {
            index: mix.scan > 0 || mix.cloud_range > 0,
        }),
        TargetKind::CombkvMemcached | TargetKind::Memcached => Ok(Dialect::Memcache),
        other => Err(BenchError(format!("{other} is not a network target"))),
    }
}

/// Names the `combkv` server binary when `--server-bin` does not: the
/// bench is a separate binary, so a server built elsewhere (an installed
/// release, another target directory) needs a way in that a script can set
/// once.
pub const SERVER_BIN_ENV: &str = "COMBKV_BIN";

/// The `combkv` binary a run starts: the spec's (`--server-bin`), else
/// [`SERVER_BIN_ENV`]'s, else the `combkv` next to the running executable,
/// where `cargo build -p combkv-cli -p combkv-bench` puts both.
pub fn combkv_bin(spec: &RunSpec) -> Result<PathBuf> {
    if let Some(p) = &spec.server_bin {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os(SERVER_BIN_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()
        .map_err(|e| BenchError(format!("cannot find my own executable: {e}")))?;
    Ok(exe.with_file_name("combkv"))
}

/// Runs one measurement against a fresh server for `spec.target`: start
/// it, load, read its resident size, run the mix over `connections`
/// pipelined connections, stop it.
pub fn run_one(spec: &RunSpec, progress: bool) -> Result<RunResult> {
    spec.validate()?;
    if let Some(why) = spec.target.skips(spec.workload) {
        return Err(BenchError(format!(
            "{}/{}: {why}",
            spec.workload, spec.target
        )));
    }
    let server = Server::start(
        spec.target,
        &StartOptions {
            combkv_bin: combkv_bin(spec)?,
            records: spec.records,
            key_bytes_max: spec.shape.key_size.max,
            value_bytes_max: spec.shape.value_size.max,
            hot_cache: spec.hot_cache,
        },
    )?;
    run_on(spec, progress, server)
}

/// Runs one measurement against `server` (fresh and empty), which speaks
/// the protocol of `spec.target`, and stops it at the end.
pub fn run_on(spec: &RunSpec, progress: bool, server: Server) -> Result<RunResult> {
    spec.validate()?;
    let tag = format!("{}/{}", spec.workload, spec.target);
    let dialect = dialect(spec.target, spec.workload, spec.read_pct)?;

    // The model and the sorted keys live in this process, not the server's:
    // they can be built before the server's memory is read.
    let check = RunCheck::new(spec);
    let cx = check.context(&dialect, spec);
    let chooser = Chooser::new(spec.distribution, spec.records);
    let rss_before = server.rss_bytes()?;
    let stop = AtomicBool::new(false);
    let progress_ops = AtomicU64::new(0);
    let mut sessions = (0..spec.connections)
        .map(|t| {
            let seed = spec.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let conn = Conn::connect(server.addr)?;
            Session::new(
                &cx,
                conn,
                Worker::new(seed, chooser.clone()),
                &stop,
                &progress_ops,
            )
        })
        .collect::<Result<Vec<_>>>()?;

    let load_bar = bar(progress, spec.records, &tag, "load");
    let (load_secs, raw_bytes) = load(&mut sessions, spec, &progress_ops, &load_bar)?;
    load_bar.finish_and_clear();
    let rss_after = server.rss_bytes()?;

    progress_ops.store(0, Ordering::Relaxed);
    let run_len = match spec.stop {
        Stop::Ops(n) => n,
        Stop::Secs(s) => (s * 1000.0) as u64,
    };
    let run_bar = bar(progress, run_len, &tag, "run");
    let run = run_phase(&mut sessions, spec, &stop, &progress_ops, &run_bar)?;
    run_bar.finish_and_clear();
    drop(sessions);
    server.stop()?;

    Ok(RunResult::measured(
        spec,
        spec.connections,
        Some((spec.connections, spec.pipeline)),
        run,
        Loaded {
            secs: load_secs,
            raw_bytes,
            rss_before,
            rss_after,
        },
    ))
}

fn join<R>(h: std::thread::ScopedJoinHandle<'_, Result<R>>) -> Result<R> {
    h.join()
        .unwrap_or_else(|_| Err(BenchError::new("a client thread panicked")))
}

/// Moves the bar along `done` until every handle finished; with a
/// `deadline`, raises `stop` when it passes and shows time instead.
fn follow<R>(
    handles: &[std::thread::ScopedJoinHandle<'_, R>],
    done: &AtomicU64,
    bar: &ProgressBar,
    deadline: Option<(Duration, &AtomicBool)>,
) -> Instant {
    let start = Instant::now();
    while !handles.iter().all(|h| h.is_finished()) {
        let elapsed = start.elapsed();
        let ops = done.load(Ordering::Relaxed);
        match deadline {
            Some((d, stop)) => {
                if elapsed >= d {
                    stop.store(true, Ordering::Relaxed);
                }
                bar.set_position((elapsed.as_millis() as u64).min(bar.length().unwrap_or(0)));
                bar.set_message(format!("{ops} ops"));
            }
            None => bar.set_position(ops),
        }
        let nap = deadline.map_or(Duration::from_millis(50), |(d, _)| {
            d.saturating_sub(elapsed)
                .clamp(Duration::from_millis(1), Duration::from_millis(50))
        });
        std::thread::sleep(nap);
    }
    start
}

/// Loads records `0..records`, connection `t` writing the `t`-th contiguous
/// slice of record numbers; returns seconds and total key + value bytes.
fn load(
    sessions: &mut [Session<'_, '_>],
    spec: &RunSpec,
    done: &AtomicU64,
    bar: &ProgressBar,
) -> Result<(f64, u64)> {
    let n = sessions.len() as u64;
    let slice = |t: u64| (u128::from(spec.records) * u128::from(t) / u128::from(n)) as u64;
    let barrier = Barrier::new(sessions.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .map(|(t, session)| {
                let (lo, hi) = (slice(t as u64), slice(t as u64 + 1));
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    session.load(lo, hi, LOAD_PIPELINE)
                })
            })
            .collect();
        barrier.wait();
        let start = follow(&handles, done, bar, None);
        let secs = start.elapsed().as_secs_f64();
        let bytes = handles.into_iter().map(join).sum::<Result<u64>>()?;
        Ok((secs, bytes))
    })
}

fn run_phase(
    sessions: &mut [Session<'_, '_>],
    spec: &RunSpec,
    stop: &AtomicBool,
    done: &AtomicU64,
    bar: &ProgressBar,
) -> Result<Phase> {
    let n = sessions.len() as u64;
    let barrier = Barrier::new(sessions.len() + 1);
    let deadline = match spec.stop {
        Stop::Secs(s) => Some((Duration::from_secs_f64(s), stop)),
        Stop::Ops(_) => None,
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .map(|(t, session)| {
                let t = t as u64;
                let quota = match spec.stop {
                    Stop::Ops(ops) => ops / n + u64::from(t < ops % n),
                    Stop::Secs(_) => u64::MAX,
                };
                let barrier = &barrier;
                s.spawn(move || -> Result<Instant> {
                    barrier.wait();
                    let r = session.run(quota, spec.pipeline);
                    if r.is_err() {
                        // The others must not wait on write bits this
                        // session will never release.
                        stop.store(true, Ordering::Relaxed);
                    }
                    r.map(|()| Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let start = follow(&handles, done, bar, deadline);
        let mut end = start;
        let mut first_error = None;
        for h in handles {
            match join(h) {
                Ok(t_end) => end = end.max(t_end),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(end.duration_since(start).as_secs_f64())
    })
    .and_then(|secs| {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| BenchError(format!("histogram: {e}")))?;
        let mut counts = OpCounts::default();
        for session in sessions.iter() {
            hist.add(&session.hist)
                .map_err(|e| BenchError(format!("merging histograms: {e}")))?;
            counts.add(&session.counts());
        }
        let c = counts;
        let ops = c.read + c.update + c.insert + c.scan + c.rmw + c.cloud_range;
        Ok(Phase {
            ops,
            secs,
            hist,
            counts,
        })
    })
}
