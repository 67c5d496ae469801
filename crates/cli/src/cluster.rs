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
    /// The password, if the node asks for one (`requirepass`, or the
    /// password of --user).
    #[arg(long, visible_alias = "pass", value_name = "PASS")]
    password: Option<String>,
    /// Authenticate as this user (`AUTH user password`) instead of the
    /// default user.
    #[arg(long, value_name = "USER", requires = "password")]
    user: Option<String>,
    /// Connect to the node's TLS port (its `tls-port`).
    #[arg(long)]
    tls: bool,
    /// The CA the node's certificate must chain to (PEM); without it, the
    /// system's trusted CAs.
    #[arg(long, value_name = "FILE", requires = "tls")]
    cacert: Option<std::path::PathBuf>,
    /// A client certificate (PEM), for a node with `tls-auth-clients yes`.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    cert: Option<std::path::PathBuf>,
    /// The key of --cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<std::path::PathBuf>,
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

/// A client for the node at --server, over TLS with --tls.
fn client(args: &ClusterArgs) -> Result<redis::Client, String> {
    let bad = |e: redis::RedisError| format!("bad server address {}: {e}", args.server);
    if !args.tls {
        return redis::Client::open(format!("redis://{}/", args.server)).map_err(bad);
    }
    // The redis crate takes the process's rustls provider: ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let client_tls = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    let root_cert = args.cacert.as_deref().map(read).transpose()?;
    redis::Client::build_with_tls(
        format!("rediss://{}/", args.server),
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(bad)
}

fn run(args: &ClusterArgs) -> Result<String, String> {
    let mut con = client(args)?
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| format!("cannot reach {}: {e}", args.server))?;
    if let Some(p) = &args.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = &args.user {
            auth.arg(user);
        }
        auth.arg(p)
            .query::<()>(&mut con)
            .map_err(|e| e.detail().map_or_else(|| e.to_string(), str::to_string))?;
    }
    let mut cmd = redis::cmd("CLUSTER");
    match &args.action {
        Action::Init { members } => cmd.arg("INIT").arg(members),
        Action::Add { id, addr, timeout } => cmd.arg("ADD").arg(*id).arg(addr).arg(*timeout),
        Action::Remove { id } => cmd.arg("REMOVE").arg(*id),
        Action::Status => cmd.arg("STATUS"),
    };
    match cmd.query::<redis::Value>(&mut con) {
        Ok(redis::Value::Okay) => Ok("OK\n".into()),
        Ok(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).replace("\r\n", "\n")),
        Ok(redis::Value::VerbatimString { text, .. }) => Ok(text.replace("\r\n", "\n")),
        Ok(other) => Ok(format!("{other:?}\n")),
        // The server's own words, without the client library's prefix.
        Err(e) => Err(e.detail().map_or_else(|| e.to_string(), str::to_string)),
    }
}
