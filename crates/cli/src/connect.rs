//! How the admin subcommands (`cluster`, `backup`) reach a node's RESP
//! port: its address, the password or ACL user, and TLS.

use std::path::{Path, PathBuf};

use clap::Args;

#[derive(Args, Debug)]
pub struct ConnectArgs {
    /// The node's RESP address (`cluster add` and `remove` must reach the
    /// leader; the error names it if this node is not).
    #[arg(long, default_value = "127.0.0.1:6380", value_name = "ADDR")]
    pub server: String,
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
    cacert: Option<PathBuf>,
    /// A client certificate (PEM), for a node with `tls-auth-clients yes`.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    cert: Option<PathBuf>,
    /// The key of --cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
}

impl ConnectArgs {
    /// A connection to the node at --server, authenticated if asked. It
    /// waits as long as the node takes to answer (a BACKUP or a CLUSTER
    /// ADD may take minutes).
    pub fn connect(&self) -> Result<redis::Connection, String> {
        let mut con = self
            .client()?
            .get_connection_with_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| format!("cannot reach {}: {e}", self.server))?;
        if let Some(p) = &self.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &self.user {
                auth.arg(user);
            }
            auth.arg(p).query::<()>(&mut con).map_err(|e| detail(&e))?;
        }
        Ok(con)
    }

    /// A client for the node at --server, over TLS with --tls.
    fn client(&self) -> Result<redis::Client, String> {
        let bad = |e: redis::RedisError| format!("bad server address {}: {e}", self.server);
        if !self.tls {
            return redis::Client::open(format!("redis://{}/", self.server)).map_err(bad);
        }
        // The redis crate takes the process's rustls provider: ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read =
            |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        let root_cert = self.cacert.as_deref().map(read).transpose()?;
        redis::Client::build_with_tls(
            format!("rediss://{}/", self.server),
            redis::TlsCertificates {
                client_tls,
                root_cert,
            },
        )
        .map_err(bad)
    }
}

/// The server's own words for an error, without the client library's
/// prefix.
pub fn detail(e: &redis::RedisError) -> String {
    e.detail().map_or_else(|| e.to_string(), str::to_string)
}
