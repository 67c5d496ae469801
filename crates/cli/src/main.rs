//! `combkv`: the command line: `serve` (the server), `cluster` (manage a
//! replicated cluster), `backup`, `restore` and `load` (a live node's
//! backup; a data directory from one; a new cluster seeded from one),
//! `check` (verify a data directory). The YCSB driver
//! is its own binary, `combkv-bench` (crates/bench), so that the server
//! links none of the bench's peers and builds with the server's minimum Rust.

mod backup;
mod cluster;
mod connect;
mod logs;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once at start-up: boxing ServeArgs would save nothing worth a Box"
)]
enum Command {
    /// Run the server: RESP and memcached listeners over one store.
    Serve(serve::ServeArgs),
    /// Manage a replicated cluster: init, add, remove, status.
    Cluster(cluster::ClusterArgs),
    /// Verify every checkpoint and WAL segment in a data directory.
    Check(CheckArgs),
    /// Ask a running node to write a backup of its store (BACKUP).
    Backup(backup::BackupArgs),
    /// Check a backup and copy it into a new data directory.
    Restore(backup::RestoreArgs),
    /// Write a backup's items into a running node's empty store (LOADBACKUP):
    /// seeds a new cluster from a backup.
    Load(backup::LoadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::serve_main(args),
        Command::Cluster(args) => cluster::cluster_main(args),
        Command::Check(args) => check_main(&args),
        Command::Backup(args) => backup::backup_main(&args),
        Command::Restore(args) => backup::restore_main(&args),
        Command::Load(args) => backup::load_main(&args),
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
