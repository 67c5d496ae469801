//! The live TLS configuration of the client listeners: what new TLS
//! connections are handed (`server_config`), replaced whole when
//! `CONFIG SET tls-*` or SIGHUP loads new files. Connections already open
//! keep the configuration they started with. A file that does not load
//! changes nothing.

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::{AuthClients, ServerConfig as Settings};
use crate::state::ratelimit::RateLimited;

/// The files and the client-certificate rule a configuration is built of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub auth: AuthClients,
}

impl TlsFiles {
    fn of(s: &Settings) -> TlsFiles {
        TlsFiles {
            cert: s.tls_cert_file.clone(),
            key: s.tls_key_file.clone(),
            ca: s.tls_ca_cert_file.clone(),
            auth: s.tls_auth_clients,
        }
    }

    /// CONFIG GET's view: (name, value) of each setting.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        };
        vec![
            ("tls-cert-file", path(&self.cert)),
            ("tls-key-file", path(&self.key)),
            ("tls-ca-cert-file", path(&self.ca)),
            ("tls-auth-clients", self.auth.as_str().into()),
        ]
    }

    /// Builds a rustls configuration: TLS 1.2 and 1.3, the certificate
    /// and key (which must match), client certificates as `auth` says.
    pub fn load(&self) -> Result<Arc<ServerConfig>, String> {
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            return Err("TLS needs tls-cert-file and tls-key-file".into());
        };
        let chain: Vec<CertificateDer<'static>> = read_certs(cert, "tls-cert-file")?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("tls-key-file {}: {e}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?;
        let builder = match (self.auth, &self.ca) {
            (AuthClients::No, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(format!(
                    "tls-auth-clients {} needs tls-ca-cert-file",
                    self.auth.as_str()
                ));
            }
            (auth, Some(ca)) => {
                let mut roots = RootCertStore::empty();
                for c in read_certs(ca, "tls-ca-cert-file")? {
                    roots
                        .add(c)
                        .map_err(|e| format!("tls-ca-cert-file {}: {e}", ca.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == AuthClients::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("tls-ca-cert-file {}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("tls-cert-file and tls-key-file: {e}"))?;
        // Redis clients speak RESP; no ALPN is asked for or offered.
        config.alpn_protocols.clear();
        Ok(Arc::new(config))
    }
}

fn read_certs(path: &PathBuf, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

/// The client listeners' TLS, as it is now.
#[derive(Debug)]
pub struct ClientTls {
    live: RwLock<(TlsFiles, Option<Arc<ServerConfig>>)>,
    /// Handshakes that failed or timed out.
    failures: AtomicU64,
    log: RateLimited,
}

impl ClientTls {
    /// Loads the configured files when a listener serves TLS.
    pub fn new(settings: &Settings) -> Result<ClientTls, String> {
        let files = TlsFiles::of(settings);
        let config = if settings.client_tls() {
            Some(files.load()?)
        } else {
            None
        };
        Ok(ClientTls {
            live: RwLock::new((files, config)),
            failures: AtomicU64::new(0),
            log: RateLimited::default(),
        })
    }

    /// No TLS listener (the fuzzing harnesses' servers).
    pub fn off(settings: &Settings) -> ClientTls {
        ClientTls {
            live: RwLock::new((TlsFiles::of(settings), None)),
            failures: AtomicU64::new(0),
            log: RateLimited::default(),
        }
    }

    /// The configuration new connections get; none without TLS listeners.
    pub fn server_config(&self) -> Option<Arc<ServerConfig>> {
        self.live.read().1.clone()
    }

    /// The files and rule in use.
    pub fn files(&self) -> TlsFiles {
        self.live.read().0.clone()
    }

    /// Builds from `files` and, if that works, puts them in use (CONFIG
    /// SET). Without TLS listeners the files are checked and kept.
    pub fn replace(&self, files: TlsFiles) -> Result<(), String> {
        let config = files.load()?;
        let mut live = self.live.write();
        let serving = live.1.is_some();
        *live = (files, serving.then_some(config));
        Ok(())
    }

    /// Reads the files in use again (SIGHUP). Ok(false): no TLS listener.
    pub fn reload(&self) -> Result<bool, String> {
        if self.server_config().is_none() {
            return Ok(false);
        }
        self.replace(self.files()).map(|()| true)
    }

    /// Handshakes that failed so far (INFO `tls_handshake_failures`).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Counts a failed handshake and logs it with the client's address, at
    /// most once a second (with the number of those not logged).
    pub fn failed(&self, from: &str, why: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.log.warn(&format!("TLS handshake failed: {why}"), from);
    }
}
