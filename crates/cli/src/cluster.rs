//! `combkv cluster init | add | remove | status | ranges | split`: a cluster's
//! administration, sent as `CLUSTER ...` commands to a node's RESP port.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::connect::{ConnectArgs, detail};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    conn: ConnectArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Forms a new cluster of these voters, `id=host:port,...` (Raft
    /// addresses), from the node at --server, which must be one of them.
    Init { members: String },
    /// Adds node ID at Raft address ADDR (start it first, with its
    /// --node-id and --raft-addr and without --peers). It becomes a
    /// learner, which must hold the leader's log within --timeout, and
    /// only then a voter. If it does not (not running, a wrong address) it
    /// is removed again: the voters are unchanged, and the same command
    /// may be run again. An id in the cluster, or of a voter removed
    /// before, is refused: ids are never reused.
    Add {
        id: u64,
        addr: String,
        /// Seconds the new node has to catch up.
        #[arg(long, default_value_t = 30.0, value_name = "SECS")]
        timeout: f64,
    },
    /// Removes node ID from the cluster: a voter loses its vote, then
    /// leaves; a learner leaves. A removed voter's id is never used again.
    Remove { id: u64 },
    /// The node's role, term, log indexes, members, retired ids, (on the
    /// leader) each follower's lag, and `cluster_problem`: why the node
    /// cannot join or elect, if it cannot.
    Status,
    /// The ranges the keyspace is cut into, a line each: id, bounds, epoch
    /// (splits and merges, replica changes), voters and learners, and for
    /// those the node holds, the leader, keys, bytes and load (requests a
    /// second; `-` unless splits by load are on).
    Ranges,
    /// Splits the range holding KEY at KEY, which starts a new range;
    /// prints the new range's id. Every node of the range keeps a replica
    /// of both halves. Refused while a snapshot pins the range.
    Split {
        key: String,
        /// Split even while a snapshot pins the range: the new range
        /// takes the pins, and keeps the store it was split from held (its
        /// memory) until the snapshot ends.
        #[arg(long)]
        force: bool,
    },
    /// Merges the range holding KEY with the range after it (both must be
    /// on the same nodes); prints the id of the range merged away. Its
    /// keys go to the range holding KEY, which then reaches its end.
    /// Refused while a snapshot pins either range.
    Merge {
        key: String,
        /// Merge even while a snapshot pins the ranges: the snapshot's
        /// reads of the merged range are refused from then on.
        #[arg(long)]
        force: bool,
    },
}

pub fn cluster_main(args: ClusterArgs) -> ExitCode {
    match run(&args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("combkv cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &ClusterArgs) -> Result<String, String> {
    let mut con = args.conn.connect()?;
    let mut cmd = redis::cmd("CLUSTER");
    match &args.action {
        Action::Init { members } => cmd.arg("INIT").arg(members),
        Action::Add { id, addr, timeout } => cmd.arg("ADD").arg(*id).arg(addr).arg(*timeout),
        Action::Remove { id } => cmd.arg("REMOVE").arg(*id),
        Action::Status => cmd.arg("STATUS"),
        Action::Ranges => cmd.arg("RANGES"),
        Action::Split { key, force } | Action::Merge { key, force } => {
            let what = match &args.action {
                Action::Split { .. } => "SPLIT",
                _ => "MERGE",
            };
            cmd.arg(what).arg(key);
            if *force {
                cmd.arg("FORCE");
            }
            &mut cmd
        }
    };
    match cmd.query::<redis::Value>(&mut con) {
        Ok(redis::Value::Okay) => Ok("OK\n".into()),
        Ok(redis::Value::Int(n)) => Ok(format!("{n}\n")),
        Ok(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).replace("\r\n", "\n")),
        Ok(redis::Value::VerbatimString { text, .. }) => Ok(text.replace("\r\n", "\n")),
        Ok(other) => Ok(format!("{other:?}\n")),
        Err(e) => Err(detail(&e)),
    }
}
