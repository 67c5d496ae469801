//! `combkv cluster init | add | remove | status`: a cluster's
//! administration, sent as `CLUSTER ...` commands to a node's RESP port.

use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// A node's RESP address (any node for status and init; add and remove
    /// go to the leader, and the error names it if this node is not).
    #[arg(long, default_value = "127.0.0.1:6380", value_name = "ADDR")]
    server: String,
    /// The password, if the node has `requirepass`.
    #[arg(long, value_name = "PASS")]
    password: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Forms a new cluster of these voters, `id=host:port,...` (Raft
    /// addresses), from the node at --server, which must be one of them.
    Init { members: String },
    /// Adds node ID at Raft address ADDR: a learner until it has caught
    /// up, then a voter.
    Add { id: u64, addr: String },
    /// Removes node ID from the cluster.
    Remove { id: u64 },
    /// The node's role, term, log indexes, members and (on the leader) each
    /// follower's lag.
    Status,
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
    let client = redis::Client::open(format!("redis://{}/", args.server))
        .map_err(|e| format!("bad server address {}: {e}", args.server))?;
    let mut con = client
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| format!("cannot reach {}: {e}", args.server))?;
    if let Some(p) = &args.password {
        redis::cmd("AUTH")
            .arg(p)
            .query::<()>(&mut con)
            .map_err(|e| e.to_string())?;
    }
    let mut cmd = redis::cmd("CLUSTER");
    match &args.action {
        Action::Init { members } => cmd.arg("INIT").arg(members),
        Action::Add { id, addr } => cmd.arg("ADD").arg(*id).arg(addr),
        Action::Remove { id } => cmd.arg("REMOVE").arg(*id),
        Action::Status => cmd.arg("STATUS"),
    };
    match cmd.query::<redis::Value>(&mut con) {
        Ok(redis::Value::Okay) => Ok("OK\n".into()),
        Ok(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).replace("\r\n", "\n")),
        Ok(redis::Value::VerbatimString { text, .. }) => Ok(text.replace("\r\n", "\n")),
        Ok(other) => Ok(format!("{other:?}\n")),
        Err(e) => Err(e.to_string()),
    }
}
