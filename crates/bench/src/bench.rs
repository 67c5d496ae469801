//! The `combkv-bench` driver: every (workload, target) pair in a fresh child
//! process, then a table per workload, JSON lines and a plot.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::generator::Distribution;
use crate::record::Shape;
use crate::target::TargetKind;
use crate::workload::Workload;
use crate::ycsb::{RunResult, RunSpec, Stop, run_one};
use crate::{BenchError, Result, child, plot, results};

/// What `combkv-bench` was asked to do.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workloads: Vec<Workload>,
    pub targets: Vec<TargetKind>,
    pub records: u64,
    pub stop: Stop,
    /// In-process targets: worker threads.
    pub threads: usize,
    /// Network targets: client connections (one thread each) and
    /// operations in flight per connection.
    pub connections: usize,
    pub pipeline: usize,
    /// Network targets: the `combkv` binary to serve combkv-resp and
    /// combkv-memcached (`None`: `$COMBKV_BIN`, else `combkv` next to the
    /// running executable).
    pub server_bin: Option<PathBuf>,
    /// combkv targets: hot-entry cache slots per thread (None: default).
    pub hot_cache: Option<usize>,
    /// Overrides each workload's own distribution.
    pub distribution: Option<Distribution>,
    pub shape: Shape,
    pub read_pct: u8,
    pub seed: u64,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

impl BenchOptions {
    /// The measurement of one (workload, target) pair.
    pub fn spec(&self, workload: Workload, target: TargetKind) -> RunSpec {
        RunSpec {
            workload,
            target,
            records: self.records,
            stop: self.stop,
            threads: self.threads,
            distribution: self
                .distribution
                .unwrap_or_else(|| workload.default_distribution()),
            shape: self.shape,
            read_pct: self.read_pct,
            seed: self.seed,
            connections: self.connections,
            pipeline: self.pipeline,
            server_bin: self.server_bin.clone(),
            hot_cache: self.hot_cache,
        }
    }

    /// Whether this run measures servers over loopback (all its targets are
    /// network targets; [`run`] refuses a mix).
    pub fn is_network(&self) -> bool {
        self.targets.first().is_some_and(|t| t.is_network())
    }

    fn describe(&self) -> String {
        let stop = match self.stop {
            Stop::Ops(n) => format!("{n} ops"),
            Stop::Secs(s) => format!("{s} s"),
        };
        let clients = if self.is_network() {
            format!(
                "{} connection(s) x pipeline {}",
                self.connections, self.pipeline
            )
        } else {
            format!("{} thread(s)", self.threads)
        };
        format!(
            "{} records, {} B keys, {} B values, {clients}, {stop} per run",
            self.records, self.shape.key_size, self.shape.value_size
        )
    }
}

/// Runs every pair, each in a child started as this executable with
/// `self_args` followed by `--child SPEC` (the caller's entry point must hand
/// that spec to [`child_main`]). Prints the tables on stdout; writes the JSON
/// lines as results arrive and the plot at the end. A failed pair does not
/// stop the others, but makes the whole run fail.
pub fn run(opts: &BenchOptions, self_args: &[String]) -> Result<Vec<RunResult>> {
    if opts.workloads.is_empty() || opts.targets.is_empty() {
        return Err(BenchError::new(
            "--workload and --targets must not be empty",
        ));
    }
    let network = opts.targets.iter().filter(|t| t.is_network()).count();
    if network != 0 && network != opts.targets.len() {
        return Err(BenchError::new(
            "--targets mixes in-process targets (engine, btreemap, skipmap, scc, masstree) with network \
             targets (combkv-resp, combkv-memcached, redis, memcached); run them separately: \
             each table compares its targets with one reference (the engine in-process, \
             combkv-resp over the network)",
        ));
    }
    for &w in &opts.workloads {
        for &t in &opts.targets {
            opts.spec(w, t).validate()?;
        }
    }
    let mut json = match &opts.json {
        Some(path) => Some(BufWriter::new(File::create(path).map_err(|e| {
            BenchError(format!("cannot create {}: {e}", path.display()))
        })?)),
        None => None,
    };
    println!("combkv-bench: {}", opts.describe());
    let mut all = Vec::new();
    let mut failures = Vec::new();
    for &w in &opts.workloads {
        let mut these = Vec::new();
        for &t in &opts.targets {
            if let Some(why) = t.skips(w) {
                if let Some(out) = json.as_mut() {
                    writeln!(out, "{}", results::skipped_json_line(w, t, why))
                        .and_then(|()| out.flush())
                        .map_err(|e| BenchError(format!("writing JSON: {e}")))?;
                }
                continue;
            }
            let spec = opts.spec(w, t);
            match run_child(&spec, self_args) {
                Ok(r) => {
                    if let Some(out) = json.as_mut() {
                        writeln!(out, "{}", results::json_line(&r))
                            .and_then(|()| out.flush())
                            .map_err(|e| BenchError(format!("writing JSON: {e}")))?;
                    }
                    these.push(r);
                }
                Err(e) => {
                    eprintln!("combkv-bench: {w}/{t} failed: {e}");
                    failures.push(format!("{w}/{t}"));
                }
            }
        }
        let spec = opts.spec(w, opts.targets[0]);
        println!(
            "\nworkload {w}: {}; {}",
            w.describe(opts.read_pct),
            spec.distribution
        );
        print!("{}", results::table(w, &these, &opts.targets));
        all.extend(these);
    }
    if let Some(path) = &opts.plot {
        let title = format!("combkv-bench: {}", opts.describe());
        let svg = plot::svg(&all, &opts.workloads, &opts.targets, &title);
        std::fs::write(path, svg)
            .map_err(|e| BenchError(format!("writing {}: {e}", path.display())))?;
    }
    if failures.is_empty() {
        Ok(all)
    } else {
        Err(BenchError(format!("failed: {}", failures.join(", "))))
    }
}

fn run_child(spec: &RunSpec, self_args: &[String]) -> Result<RunResult> {
    let spec_json =
        serde_json::to_string(spec).map_err(|e| BenchError(format!("encoding the spec: {e}")))?;
    let mut args = self_args.to_vec();
    args.push("--child".into());
    args.push(spec_json);
    let line = child::run_self(&args)?;
    let payload = child::payload(&line).unwrap_or_default();
    serde_json::from_str(payload)
        .map_err(|e| BenchError(format!("bad report line from child ({e}): {line}")))
}

/// The child's side: runs the measurement `spec_json` describes in this
/// process and prints its report line.
pub fn child_main(spec_json: &str) -> Result<()> {
    let spec: RunSpec = serde_json::from_str(spec_json)
        .map_err(|e| BenchError(format!("bad --child spec ({e}): {spec_json}")))?;
    let r = run_one(&spec, true)
        .map_err(|e| BenchError(format!("{}/{}: {e}", spec.workload, spec.target)))?;
    child::emit(&results::json_line(&r));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(targets: Vec<TargetKind>) -> BenchOptions {
        BenchOptions {
            workloads: vec![Workload::A],
            targets,
            records: 100,
            stop: Stop::Ops(10),
            threads: 1,
            connections: 1,
            pipeline: 1,
            server_bin: None,
            hot_cache: None,
            distribution: None,
            shape: Shape::default(),
            read_pct: 95,
            seed: 1,
            json: None,
            plot: None,
        }
    }

    #[test]
    fn in_process_and_network_targets_are_not_mixed() {
        let e = run(&opts(vec![TargetKind::Engine, TargetKind::Redis]), &[]).unwrap_err();
        assert!(e.0.contains("run them separately"), "{e}");
        assert!(opts(vec![TargetKind::Redis]).is_network());
        assert!(!opts(vec![TargetKind::Scc]).is_network());
        let d = opts(vec![TargetKind::Memcached]).describe();
        assert!(d.contains("1 connection(s) x pipeline 1"), "{d}");
    }

    #[test]
    fn network_limits_are_checked_before_anything_runs() {
        let mut o = opts(vec![TargetKind::Memcached]);
        o.pipeline = 0;
        assert!(run(&o, &[]).unwrap_err().0.contains("--pipeline"));
        o.pipeline = 1;
        o.shape.key_size = "16..256".parse().unwrap();
        let e = run(&o, &[]).unwrap_err();
        assert!(e.0.contains("memcached keys are at most 250 bytes"), "{e}");
    }
}
