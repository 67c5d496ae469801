//! `combkv`: the command line: `serve` (the server), `check` (verify a
//! data directory), `bench` (the YCSB driver, in-process and over the
//! network).

mod cluster;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
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

#[derive(Parser, Debug)]
#[command(
    name = "combkv",
    version,
    about = "combkv: an in-memory ordered key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server: RESP and memcached listeners over one store.
    Serve(serve::ServeArgs),
    /// Manage a replicated cluster: init, add, remove, status.
    Cluster(cluster::ClusterArgs),
    /// Verify every checkpoint and WAL segment in a data directory.
    Check(CheckArgs),
    /// Run YCSB workloads (docs/workloads.md) against the engine and in-process
    /// peers, or against combkv, Redis and memcached servers over loopback.
    Bench(BenchArgs),
}

#[derive(Args, Debug)]
#[command(
    after_help = "Each (workload, target) pair loads a fresh target in its own child \
    process, then runs the mix; every value read is checked, and a wrong answer fails the run. \
    Memory is (VmRSS after load - before) / records, of the bench process in-process and of \
    the server process over the network.\n\n\
    Network targets (combkv-resp, combkv-memcached, redis, memcached) run in their own \
    invocation, not mixed with in-process ones. Each pair starts a fresh server on free \
    loopback ports: combkv-* run `combkv serve --durability none` from this build (see \
    --server-bin); redis and memcached run from PATH with persistence off (install them \
    with `scripts/peers install`; the bench installs nothing). The memcached targets \
    skip workloads e and cloud (no ordered scans in that protocol)."
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
    /// combkv-memcached (default: `combkv` next to this executable).
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench_main(args),
        Command::Serve(args) => serve::serve_main(args),
        Command::Cluster(args) => cluster::cluster_main(args),
        Command::Check(args) => check_main(&args),
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Without --repair, reads every file without changing any, and takes no lock: \
    it may read a directory a server is writing (the newest log segment may then end in a \
    record being written, reported as a torn tail) or one on read-only media. Exit status 0: \
    everything is valid; 1: something is damaged, and recovery would cut a torn log tail or \
    skip a checkpoint; 2: the directory cannot be read; 3: recovery would refuse to start \
    (a corrupt log: damage followed by valid data).\n\n\
    With --repair, takes the directory's lock first (refused, changing nothing, while a \
    server or another repair holds it: the message names its pid), then cuts the log where \
    recovery would cut or refuse it, as redis-check-aof --fix does, and prints what it \
    dropped: the cut segment is copied whole to <name>.discarded, later segments are renamed \
    <name>.discarded, and the highest version the dropped data held is written to \
    version-floor, so that new writes never reuse one. Acknowledged writes after the cut are \
    lost. Exit status 0: repaired, or nothing to repair; 1: it cannot be repaired (e.g. a \
    record of a kind this version does not know: open it with the combkv that wrote it); \
    2: a file operation failed; 4: another process holds the directory."
)]
struct CheckArgs {
    /// The server's data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Cut a corrupt or torn log so that the server starts (see below).
    #[arg(long)]
    repair: bool,
}

fn check_main(args: &CheckArgs) -> ExitCode {
    if args.repair {
        return repair_main(&args.data_dir);
    }
    match combkv::check(&args.data_dir) {
        Ok(report) => {
            print!("{report}");
            if report.would_refuse() {
                ExitCode::from(3)
            } else if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("combkv check: {}: {e}", args.data_dir.display());
            ExitCode::from(2)
        }
    }
}

fn repair_main(dir: &std::path::Path) -> ExitCode {
    match combkv::durable::repair(dir) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(combkv::durable::RecoveryError::Io(e)) => {
            eprintln!("combkv check --repair: {}: {e}", dir.display());
            ExitCode::from(2)
        }
        Err(combkv::durable::RecoveryError::InUse(d)) => {
            eprintln!("combkv check --repair: {d}");
            ExitCode::from(4)
        }
        Err(e) => {
            eprintln!(
                "combkv check --repair: {}: cannot repair: {e}",
                dir.display()
            );
            ExitCode::from(1)
        }
    }
}

fn bench_main(args: BenchArgs) -> ExitCode {
    let result = match &args.child {
        Some(spec) => bench::child_main(spec),
        None => {
            let network = args.targets.iter().any(|t| t.is_network());
            let misplaced = if network {
                args.threads.map(|_| "--threads applies to in-process targets; network targets use --connections and --pipeline")
            } else if args.connections.is_some()
                || args.pipeline.is_some()
                || args.server_bin.is_some()
            {
                Some(
                    "--connections, --pipeline and --server-bin apply to network targets (combkv-resp, combkv-memcached, redis, memcached)",
                )
            } else {
                None
            };
            if let Some(m) = misplaced {
                eprintln!("combkv bench: {m}");
                return ExitCode::FAILURE;
            }
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let threads = args.threads.unwrap_or(cores);
            let stop = match (args.ops, args.duration) {
                (Some(n), _) => Stop::Ops(n),
                (None, Some(s)) => Stop::Secs(s),
                (None, None) => Stop::Secs(10.0),
            };
            let opts = BenchOptions {
                workloads: args.workload,
                targets: args.targets,
                records: args.records,
                stop,
                threads,
                connections: args.connections.unwrap_or(DEFAULT_CONNECTIONS),
                pipeline: args.pipeline.unwrap_or(DEFAULT_PIPELINE),
                server_bin: args.server_bin,
                hot_cache: args.hot_cache,
                distribution: args.distribution,
                shape: Shape {
                    key_size: args.key_size,
                    value_size: args.value_size,
                },
                read_pct: args.read_pct,
                seed: args.seed,
                json: args.json,
                plot: args.plot,
            };
            bench::run(&opts, &["bench".to_string()]).map(drop)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("combkv bench: {e}");
            ExitCode::FAILURE
        }
    }
}
