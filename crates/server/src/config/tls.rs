//! TLS settings for clients, with Redis's names where Redis has them:
//! `tls-port` (RESP over TLS on the IP of `resp`), `tls-cert-file`,
//! `tls-key-file`, `tls-ca-cert-file`, `tls-auth-clients`; and combkv's own
//! `tls-resp` (an address, as `resp`), `tls-memcached` and `tls-metrics`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use serde::Deserialize;

use super::{Listen, ServerConfig, path_text};

/// Whether TLS clients must present a certificate (Redis's
/// `tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthClients {
    /// No certificate is asked for.
    No,
    /// A certificate is checked if the client presents one.
    Optional,
    /// A certificate chaining to `tls-ca-cert-file` is required (Redis's
    /// default).
    #[default]
    Yes,
}

impl AuthClients {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthClients::No => "no",
            AuthClients::Optional => "optional",
            AuthClients::Yes => "yes",
        }
    }
}

impl FromStr for AuthClients {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "no" => Ok(AuthClients::No),
            "optional" => Ok(AuthClients::Optional),
            "yes" => Ok(AuthClients::Yes),
            _ => Err(format!(
                "unknown tls-auth-clients '{s}' (expected no, optional or yes)"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for AuthClients {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Redis writes it yes/no; TOML may give a boolean.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            B(bool),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::B(true) => Ok(AuthClients::Yes),
            Raw::B(false) => Ok(AuthClients::No),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl ServerConfig {
    /// Where RESP over TLS listens: `tls-resp`, or `tls-port` on the IP of
    /// `resp` (loopback when `resp` is off).
    pub fn tls_resp_addr(&self) -> Option<SocketAddr> {
        match (self.tls_resp, self.tls_port) {
            (Listen::At(a), _) => Some(a),
            (Listen::Off, 0) => None,
            (Listen::Off, port) => {
                let ip = match self.resp {
                    Listen::At(a) => a.ip(),
                    Listen::Off => IpAddr::V4(Ipv4Addr::LOCALHOST),
                };
                Some(SocketAddr::new(ip, port))
            }
        }
    }

    /// Whether any listener serves TLS.
    pub fn client_tls(&self) -> bool {
        self.tls_resp_addr().is_some() || self.tls_memcached != Listen::Off || self.tls_metrics
    }

    /// TLS listeners need a certificate and a key; client authentication a
    /// CA; `tls-port` and `tls-resp` must not contradict each other.
    pub(super) fn check_tls(&self) -> Result<(), String> {
        if let (Listen::At(a), p) = (self.tls_resp, self.tls_port)
            && p != 0
            && p != a.port()
        {
            return Err(format!(
                "tls-port {p} contradicts tls-resp {a}: set one of them"
            ));
        }
        if self.tls_metrics && self.metrics == Listen::Off {
            return Err("tls-metrics needs the metrics listener (--metrics ADDR)".into());
        }
        if !self.client_tls() {
            return Ok(());
        }
        if self.tls_cert_file.is_none() || self.tls_key_file.is_none() {
            return Err("a TLS listener needs tls-cert-file and tls-key-file".into());
        }
        if self.tls_auth_clients != AuthClients::No && self.tls_ca_cert_file.is_none() {
            return Err(format!(
                "tls-auth-clients {} needs tls-ca-cert-file (or set tls-auth-clients no)",
                self.tls_auth_clients.as_str()
            ));
        }
        Ok(())
    }

    /// Whether a TLS listener keeps out clients without a certificate.
    pub fn tls_authenticates(&self) -> bool {
        self.tls_auth_clients == AuthClients::Yes
    }

    /// CONFIG GET's view of the TLS settings as the configuration gave
    /// them (CONFIG SET changes the live ones: `state::tls`).
    pub(super) fn tls_listen_params(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "tls-port",
                self.tls_resp_addr().map_or(0, |a| a.port()).to_string(),
            ),
            (
                "tls-resp",
                self.tls_resp_addr().map_or("off".into(), |a| a.to_string()),
            ),
            (
                "tls-memcached",
                match self.tls_memcached {
                    Listen::Off => "off".into(),
                    Listen::At(a) => a.to_string(),
                },
            ),
            (
                "tls-metrics",
                if self.tls_metrics { "yes" } else { "no" }.into(),
            ),
        ]
    }

    /// The certificate settings, as given at start.
    pub fn tls_file_params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("tls-cert-file", path_text(&self.tls_cert_file)),
            ("tls-key-file", path_text(&self.tls_key_file)),
            ("tls-ca-cert-file", path_text(&self.tls_ca_cert_file)),
            ("tls-auth-clients", self.tls_auth_clients.as_str().into()),
        ]
    }
}
