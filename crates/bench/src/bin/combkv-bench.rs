//! `combkv-bench`: the YCSB driver (docs/workloads.md), in-process and over
//! the network. It is its own binary, as redis-benchmark is to redis-server,
//! so that the shipped `combkv` server links none of the bench's peers
//! (masstree, scc) and builds with the server's older minimum Rust.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use combkv_bench::bench::{self, BenchOptions};
use combkv_bench::generator::Distribution;
use combkv_bench::record::{Shape, SizeRange};
use combkv_bench::target::TargetKind;
use combkv_bench::workload::Workload;
use combkv_bench::ycsb::Stop;

/// Default client connections for network targets.
const DEFAULT_CONNECTIONS: usize = 2;
/// Default operations in flight per connection.
const DEFAULT_PIPELINE: usize = 32;

/// Run YCSB workloads (docs/workloads.md) against the engine and in-process
/// peers, or against combkv, Redis and memcached servers over loopback.
#[derive(Parser, Debug)]
#[command(
    name = "combkv-bench",
    version,
    after_help = "Each (workload, target) pair loads a fresh target in its own child \
    process, then runs the mix; every value read is checked, and a wrong answer fails the run. \
    Memory is (VmRSS after load - before) / records, of the bench process in-process and of \
    the server process over the network.\n\n\
    Network targets (combkv-resp, combkv-memcached, redis, memcached) run in their own \
    invocation, not mixed with in-process ones. Each pair starts a fresh server on free \
    loopback ports: combkv-* run `combkv serve --durability none` (the combkv binary is \
    --server-bin, else $COMBKV_BIN, else the `combkv` next to combkv-bench, as `cargo build \
    -p combkv-cli -p combkv-bench` leaves them); redis and memcached run from PATH with \
    persistence off (install them with `scripts/peers install`; the bench installs \
    nothing). The memcached targets skip workloads e and cloud (no ordered scans in that \
    protocol)."
)]
struct BenchArgs {
    /// Workloads, comma-separated: a, b, c, d, e, f, cloud.
    #[arg(long, value_delimiter = ',', default_value = "a")]
    workload: Vec<Workload>,

    /// Targets, comma-separated: engine, btreemap, skipmap, scc, masstree (in-process),
    /// or combkv-resp, combkv-memcached, redis, memcached (network).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "engine,btreemap,skipmap,scc,masstree"
    )]
    targets: Vec<TargetKind>,

    /// Records loaded before each run.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,

    /// Operations per run, all threads together.
    #[arg(long, conflicts_with = "duration")]
    ops: Option<u64>,

    /// Seconds per run (the default is 10 when --ops is not given).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,

    /// In-process targets: worker threads (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,

    /// Network targets: client connections, each driven by its own thread.
    #[arg(long)]
    connections: Option<usize>,

    /// Network targets: operations in flight per connection.
    #[arg(long)]
    pipeline: Option<usize>,

    /// Network targets: the combkv binary that serves combkv-resp and
    /// combkv-memcached (default: $COMBKV_BIN, else `combkv` next to this
    /// executable).
    #[arg(long, value_name = "PATH")]
    server_bin: Option<PathBuf>,
    /// combkv targets: hot-entry cache slots per thread, 0 = none (engine:
    /// GETs become read-engine batches of one through a cache per worker,
    /// as a server reads them; combkv-resp/combkv-memcached: the server's
    /// --hot-cache-entries). Not given: engine GETs by get_with, servers
    /// at their default.
    #[arg(long, value_name = "N")]
    hot_cache: Option<usize>,

    /// Request distribution for every workload, instead of each one's own.
    #[arg(long)]
    distribution: Option<Distribution>,

    /// Key size in bytes, A or A..B (multiples of 8, at least 16).
    #[arg(long, default_value = "16", value_name = "A[..B]")]
    key_size: SizeRange,

    /// Value size in bytes, A or A..B (multiples of 8, at least 8).
    #[arg(long, default_value = "16", value_name = "A[..B]")]
    value_size: SizeRange,

    /// Cloud workload: percentage of range reads (the rest are inserts).
    #[arg(long, default_value_t = 95, value_parser = clap::value_parser!(u8).range(0..=100))]
    read_pct: u8,

    /// Seed of the workers' random generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Write one JSON object per (workload, target) to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Write an SVG bar chart (throughput and p99 per target per workload) to FILE.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// Run one measurement in this process (a spec from the parent).
    #[arg(long, hide = true, value_name = "SPEC")]
    child: Option<String>,
}

impl BenchArgs {
    /// Why these options do not fit the targets asked for: each kind of
    /// target has its own knobs, and a knob that would be ignored is more
    /// likely a mistake than a wish.
    fn misplaced(&self) -> Option<&'static str> {
        if self.targets.iter().any(|t| t.is_network()) {
            self.threads.map(|_| {
                "--threads applies to in-process targets; network targets use --connections and --pipeline"
            })
        } else if self.connections.is_some() || self.pipeline.is_some() || self.server_bin.is_some()
        {
            Some(
                "--connections, --pipeline and --server-bin apply to network targets (combkv-resp, combkv-memcached, redis, memcached)",
            )
        } else {
            None
        }
    }

    /// The options of the run, defaults filled in.
    fn options(self) -> BenchOptions {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let stop = match (self.ops, self.duration) {
            (Some(n), _) => Stop::Ops(n),
            (None, Some(s)) => Stop::Secs(s),
            (None, None) => Stop::Secs(10.0),
        };
        BenchOptions {
            workloads: self.workload,
            targets: self.targets,
            records: self.records,
            stop,
            threads: self.threads.unwrap_or(cores),
            connections: self.connections.unwrap_or(DEFAULT_CONNECTIONS),
            pipeline: self.pipeline.unwrap_or(DEFAULT_PIPELINE),
            server_bin: self.server_bin,
            hot_cache: self.hot_cache,
            distribution: self.distribution,
            shape: Shape {
                key_size: self.key_size,
                value_size: self.value_size,
            },
            read_pct: self.read_pct,
            seed: self.seed,
            json: self.json,
            plot: self.plot,
        }
    }
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    let result = match &args.child {
        // A pair's child: this same binary re-executed by `bench::run`.
        Some(spec) => bench::child_main(spec),
        None => {
            if let Some(m) = args.misplaced() {
                eprintln!("combkv-bench: {m}");
                return ExitCode::FAILURE;
            }
            // The children take every option from the spec, so they are
            // started with `--child SPEC` alone.
            bench::run(&args.options(), &[]).map(drop)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("combkv-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
