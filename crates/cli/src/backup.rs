//! `combkv backup` (asks a running node for a `BACKUP`), `combkv restore`
//! (checks a backup and copies it into an empty data directory) and
//! `combkv load` (asks a running node, a new cluster's, to write a
//! backup's items through its write path: `LOADBACKUP`).
//! docs/operations.md ("Backup and restore") says when to use which, and what a backup holds.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::connect::{ConnectArgs, detail};

#[derive(Args, Debug)]
#[command(
    after_help = "The node writes a full checkpoint of one snapshot of its store into DIR \
    while its clients go on writing, and answers once the file and the directory are synced. \
    DIR is a path on the node's host (relative: to the node's working directory; give an \
    absolute one), created if missing, and must be empty. The backup holds every write \
    acknowledged before the command; on a cluster node with cluster-reads linearizable it \
    holds every write the cluster acknowledged before it. Exit status 0: the backup is \
    complete; 1: it was refused or failed (the node's reason is printed)."
)]
pub struct BackupArgs {
    #[command(flatten)]
    conn: ConnectArgs,
    /// The directory the node writes the backup into.
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
}

pub fn backup_main(args: &BackupArgs) -> ExitCode {
    let run = || -> Result<(), String> {
        let mut con = args.conn.connect()?;
        redis::cmd("BACKUP")
            .arg(args.to.as_os_str().as_encoded_bytes())
            .query::<()>(&mut con)
            .map_err(|e| detail(&e))
    };
    match run() {
        Ok(()) => {
            println!(
                "backup of {} written to {}",
                args.conn.server,
                args.to.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("combkv backup: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "The node reads the backup in BACKUP_DIR (a path on the node's host), verifies \
    it whole, and writes its items into its store through the write path: on a cluster node \
    as Raft log entries of up to 1000 items, which every node applies. This is how a new \
    cluster is seeded from a backup. The store must be empty (a new single node or cluster). \
    Items keep their values, expiry and memcached flags, and take new versions; items expired \
    by now are left out. Exit status 0: every item was written; 1: refused or failed (the \
    node's reason is printed; a failure part way leaves the items written so far)."
)]
pub struct LoadArgs {
    #[command(flatten)]
    conn: ConnectArgs,
    /// The backup directory, on the node's host.
    #[arg(long, value_name = "BACKUP_DIR")]
    from: PathBuf,
}

pub fn load_main(args: &LoadArgs) -> ExitCode {
    let run = || -> Result<i64, String> {
        let mut con = args.conn.connect()?;
        redis::cmd("LOADBACKUP")
            .arg(args.from.as_os_str().as_encoded_bytes())
            .query::<i64>(&mut con)
            .map_err(|e| detail(&e))
    };
    match run() {
        Ok(n) => {
            println!(
                "loaded {n} items from {} into {}",
                args.from.display(),
                args.conn.server
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("combkv load: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Verifies the backup's checkpoint (every block's checksum, key order, the \
    item count: what `combkv check` does), then copies it into DIR, which must be empty or \
    absent, and syncs the file and the directory. Start the server with \
    `combkv serve --data-dir DIR`. Exit status 0: restored; 1: the backup is incomplete, \
    damaged or no backup; 2: a file operation failed; 3: DIR is not empty."
)]
pub struct RestoreArgs {
    /// The backup directory (`combkv backup --to`).
    #[arg(long, value_name = "BACKUP_DIR")]
    from: PathBuf,
    /// The new data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
}

/// Why a restore stopped; each has its exit status.
enum Refused {
    NotABackup(String),
    Io(String),
    NotEmpty(String),
}

pub fn restore_main(args: &RestoreArgs) -> ExitCode {
    match restore(&args.from, &args.data_dir) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(Refused::NotABackup(why)) => {
            eprintln!("combkv restore: {why}");
            ExitCode::from(1)
        }
        Err(Refused::Io(why)) => {
            eprintln!("combkv restore: {why}");
            ExitCode::from(2)
        }
        Err(Refused::NotEmpty(why)) => {
            eprintln!("combkv restore: {}: {why}", args.data_dir.display());
            ExitCode::from(3)
        }
    }
}

fn restore(from: &Path, to: &Path) -> Result<String, Refused> {
    let (file, version, items) = verified_backup(from)?;
    let io = |what: &str, p: &Path| {
        let what = what.to_string();
        let p = p.display().to_string();
        move |e: std::io::Error| Refused::Io(format!("{what} {p}: {e}"))
    };
    std::fs::create_dir_all(to).map_err(io("cannot create", to))?;
    let mut entries = std::fs::read_dir(to).map_err(io("cannot read", to))?;
    if let Some(e) = entries.next() {
        let name = e.map_err(io("cannot read", to))?.file_name();
        return Err(Refused::NotEmpty(format!(
            "not empty (it holds {}): restore into a new or empty directory",
            name.to_string_lossy()
        )));
    }
    // As the engine writes a checkpoint: a `.tmp` that a crash leaves is
    // deleted when a server opens the directory, and never loaded.
    let tmp = to.join(format!("{file}.tmp"));
    let src = from.join(&file);
    let mut out = File::create(&tmp).map_err(io("cannot create", &tmp))?;
    let mut input = File::open(&src).map_err(io("cannot open", &src))?;
    std::io::copy(&mut input, &mut out).map_err(io("cannot copy into", &tmp))?;
    out.flush().map_err(io("cannot write", &tmp))?;
    out.sync_all().map_err(io("cannot sync", &tmp))?;
    drop(out);
    std::fs::rename(&tmp, to.join(&file)).map_err(io("cannot rename", &tmp))?;
    sync_dir(to)?;
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    // The copy, read back as the server will read it.
    let (_, v, n) = verified_backup(to).map_err(|e| match e {
        Refused::NotABackup(why) => Refused::Io(format!("the copy does not read back: {why}")),
        other => other,
    })?;
    if (v, n) != (version, items) {
        return Err(Refused::Io(format!(
            "the copy in {} reads back as version {v} with {n} items, not {version} with {items}",
            to.display()
        )));
    }
    Ok(format!(
        "restored {file} (version {version}, {items} items) into {}; start it with \
         combkv serve --data-dir {}",
        to.display(),
        to.display()
    ))
}

/// The backup's checkpoint (file, version, items), verified as recovery
/// would read it (`combkv::read_backup`: one checkpoint and nothing else;
/// a directory with log segments or delta runs is a data directory a
/// server ran on, whose log a copy of the checkpoint would lose).
fn verified_backup(dir: &Path) -> Result<(String, u64, u64), Refused> {
    combkv::read_backup(dir, |_| {}).map_err(|e| match e {
        combkv::Error::Corrupt(why) => Refused::NotABackup(why),
        other => Refused::Io(format!("cannot read {}: {other}", dir.display())),
    })
}

fn sync_dir(dir: &Path) -> Result<(), Refused> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Refused::Io(format!("cannot sync {}: {e}", dir.display())))
}
