//! Engine figures: load, get and range throughput and resident bytes per
//! record for the combkv engine and three in-memory peers.
//!
//! Each (target, thread count) pair runs in a fresh child process (this
//! binary, re-executed with the hidden `--child` flag through
//! `combkv_bench::child`) so that its resident
//! size is its own. The parent collects one report line from each child and
//! prints the table.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use combkv_bench::child;
use combkv_bench::report::{self, RAW_BYTES_PER_RECORD, Report};
use combkv_bench::runner::{self, Params};
use combkv_bench::target::TargetKind;

#[derive(Parser, Debug)]
#[command(
    name = "engine-figures",
    about = "Load, get and range throughput and resident bytes per record: combkv engine vs BTreeMap, SkipMap, scc TreeIndex and Masstree",
    after_help = "Throughput is in millions of operations per second, all threads together. \
                  Ratio columns are engine/peer: above 1 the engine is faster (or, for \
                  resident B/record, bigger)."
)]
struct Args {
    /// Records to load (numbered 0..N; 16-byte keys, 16-byte values).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,

    /// Targets to measure, comma-separated: engine, btreemap, skipmap, scc, masstree.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "engine,btreemap,skipmap,scc,masstree"
    )]
    targets: Vec<TargetKind>,

    /// Thread counts, comma-separated; every phase runs at each count.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,

    /// Seconds per timed measurement (get, range 3, range 100).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,

    /// Also write one JSON object per (target, threads) to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,

    /// Seed for the workers' random number generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Skip the untimed full scan that checks every record after loading.
    #[arg(long)]
    no_scan: bool,

    /// Run one target in this process (at the single thread count given by
    /// --threads) and print a report line for the parent.
    #[arg(long, hide = true, value_name = "TARGET")]
    child: Option<TargetKind>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = check(&args) {
        eprintln!("engine-figures: {msg}");
        return ExitCode::from(2);
    }
    match args.child {
        Some(kind) => child(&args, kind),
        None => parent(&args),
    }
}

fn check(args: &Args) -> Result<(), String> {
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if args.targets.is_empty() || args.threads.is_empty() {
        return Err("--targets and --threads must not be empty".into());
    }
    if args.threads.contains(&0) {
        return Err("thread counts must be at least 1".into());
    }
    if !(args.secs.is_finite() && args.secs > 0.0) {
        return Err("--secs must be a positive number".into());
    }
    if args.child.is_some() && args.threads.len() != 1 {
        return Err("--child takes exactly one thread count".into());
    }
    Ok(())
}

fn child(args: &Args, kind: TargetKind) -> ExitCode {
    let params = Params {
        records: args.records,
        threads: args.threads[0],
        secs: Duration::from_secs_f64(args.secs),
        seed: args.seed,
        scan: !args.no_scan,
    };
    match runner::measure(kind, &params) {
        Ok(report) => {
            println!("{}", report.to_line());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("engine-figures: {kind}, {} thread(s): {e}", params.threads);
            ExitCode::FAILURE
        }
    }
}

fn parent(args: &Args) -> ExitCode {
    let mut json = match &args.json {
        Some(path) => match File::create(path) {
            Ok(f) => Some(BufWriter::new(f)),
            Err(e) => {
                eprintln!("engine-figures: cannot create {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };

    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for &threads in &args.threads {
        for &kind in &args.targets {
            match run_child(args, kind, threads) {
                Ok(r) => {
                    if let Some(w) = json.as_mut() {
                        let written =
                            writeln!(w, "{}", r.to_json(args.secs)).and_then(|()| w.flush());
                        if let Err(e) = written {
                            eprintln!("engine-figures: writing JSON: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                    reports.push(r);
                }
                Err(e) => {
                    eprintln!("engine-figures: {kind}, {threads} thread(s) failed: {e}");
                    failures.push(format!("{kind}/{threads}"));
                }
            }
        }
    }

    println!(
        "\ncombkv engine figures: {} records, {RAW_BYTES_PER_RECORD} raw B/record (16 B key + 16 B value), {} s per timed measurement",
        args.records, args.secs
    );
    println!(
        "throughput in Mops/s, all threads together (higher is better); resident B/record = (VmRSS after load - before) / records (lower is better)"
    );
    if args.targets.contains(&TargetKind::Engine) && args.targets.len() > 1 {
        println!(
            "engine/peer ratios: above 1 = engine faster (throughput rows) or bigger (resident row)"
        );
    }
    println!();
    print!("{}", report::table(&reports, &args.targets, &args.threads));
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("engine-figures: failed: {}", failures.join(", "));
        ExitCode::FAILURE
    }
}

fn run_child(args: &Args, kind: TargetKind, threads: usize) -> Result<Report, String> {
    let mut argv: Vec<String> = vec![
        "--child".into(),
        kind.name().into(),
        "--threads".into(),
        threads.to_string(),
        "--records".into(),
        args.records.to_string(),
        "--secs".into(),
        args.secs.to_string(),
        "--seed".into(),
        args.seed.to_string(),
    ];
    if args.no_scan {
        argv.push("--no-scan".into());
    }
    let line = child::run_self(&argv).map_err(|e| e.to_string())?;
    Report::from_line(&line).map_err(|e| e.to_string())
}
