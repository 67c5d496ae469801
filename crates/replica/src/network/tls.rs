//! Mutual TLS between nodes, and the guard on the Raft port.
//!
//! With peer TLS every connection between two nodes is TLS 1.3 with both
//! sides presenting a certificate that chains to the cluster's CA:
//!
//! - the node that connects checks that the other's certificate names the
//!   host it dialed (the address in the membership), as any TLS client
//!   does;
//! - the node that accepts checks that the other's certificate names the
//!   address the connection came from: outgoing connections leave from a
//!   node's own address (`tcp.rs`), so a certificate made for one node
//!   cannot be used from another machine to speak as a node.
//!
//! Until both checks pass nothing is decoded: rustls reads the handshake
//! in records of at most 16 KiB, and a frame is read only afterwards, into
//! a buffer that grows with what arrives, not with what its header claims.
//! Every refused connection is counted and logged, at most once a second.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A handshake that takes longer than this is abandoned: a peer that
/// connects and says nothing must not hold a task and a socket forever.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a node's peer certificate, its key and the cluster's CA are
/// (`peer-cert-file`, `peer-key-file`, `peer-ca-cert-file`), PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsFiles {
    /// This node's certificate chain, its own certificate first. It must
    /// name the host of every address the node is reached at and connects
    /// from (IP addresses as IP subject alternative names).
    pub cert: PathBuf,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The cluster's CA: a peer's certificate must chain to one of these.
    pub ca: PathBuf,
}

/// The TLS configurations built from [`PeerTlsFiles`].
#[derive(Debug)]
pub(crate) struct PeerTls {
    pub client: Arc<ClientConfig>,
    pub server: Arc<ServerConfig>,
}

impl PeerTls {
    /// Reads and checks the files: the key must match the certificate and
    /// the CA file must hold at least one certificate.
    pub(crate) fn load(files: &PeerTlsFiles) -> Result<PeerTls, String> {
        let certs = read_certs(&files.cert, "peer-cert-file")?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|e| format!("peer-key-file {}: {e}", files.key.display()))?;
        let mut roots = RootCertStore::empty();
        for ca in read_certs(&files.ca, "peer-ca-cert-file")? {
            roots
                .add(ca)
                .map_err(|e| format!("peer-ca-cert-file {}: {e}", files.ca.display()))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()
                .map_err(|e| format!("peer-ca-cert-file {}: {e}", files.ca.display()))?;
        let tls13 = &[&rustls::version::TLS13];
        let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(tls13)
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("peer-cert-file and peer-key-file: {e}"))?;
        // No resumption between nodes: a session ticket would arrive on an
        // idle pooled connection and look like data out of turn.
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(tls13)
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("peer-cert-file and peer-key-file: {e}"))?;
        Ok(PeerTls {
            client: Arc::new(client),
            server: Arc::new(server),
        })
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

/// The name a node dialing `addr` (`host:port`) expects the other's
/// certificate to carry.
pub(crate) fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no TLS name in {addr}: {e}"),
        )
    })
}

/// Whether the certificate a peer presented names `from`, the address its
/// connection came from.
pub(crate) fn names_address(cert: &CertificateDer<'_>, from: IpAddr) -> bool {
    ParsedCertificate::try_from(cert).is_ok_and(|parsed| {
        rustls::client::verify_server_name(&parsed, &ServerName::IpAddress(from.into())).is_ok()
    })
}

/// What guards a node's Raft port: its peer TLS (if any, replaceable by
/// a reload) and the count of what it refused.
#[derive(Debug, Default)]
pub struct PeerGuard {
    files: Option<PeerTlsFiles>,
    tls: RwLock<Option<Arc<PeerTls>>>,
    refused: AtomicU64,
    log: RateLimited,
}

impl PeerGuard {
    /// A guard with peer TLS from `files` (loaded now), or none.
    pub(crate) fn new(files: Option<PeerTlsFiles>) -> Result<PeerGuard, String> {
        let tls = match &files {
            Some(f) => Some(Arc::new(PeerTls::load(f)?)),
            None => None,
        };
        Ok(PeerGuard {
            files,
            tls: RwLock::new(tls),
            ..PeerGuard::default()
        })
    }

    /// The TLS configuration new connections use; none without peer TLS.
    pub(crate) fn tls(&self) -> Option<Arc<PeerTls>> {
        self.tls.read().clone()
    }

    /// Reads the certificate files again: connections made from now on
    /// present and check the new ones; open ones carry on. A file that does
    /// not load changes nothing.
    pub(crate) fn reload(&self) -> Result<bool, String> {
        let Some(files) = &self.files else {
            return Ok(false);
        };
        let tls = PeerTls::load(files)?;
        *self.tls.write() = Some(Arc::new(tls));
        Ok(true)
    }

    /// Connections refused so far: failed handshakes, certificates that do
    /// not name their address, frames too large or undecodable.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts and logs (rate-limited) a refused connection.
    pub(crate) fn refuse(&self, from: std::net::SocketAddr, why: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.log.warn(|suppressed| {
            tracing::warn!(
                "raft port: refused a connection from {from}: {why}{}",
                if suppressed > 0 {
                    format!(" ({suppressed} more refused since the last report)")
                } else {
                    String::new()
                }
            )
        });
    }
}

/// At most one log line a second; the lines in between are counted and
/// the count given with the next one.
#[derive(Debug, Default)]
struct RateLimited {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl RateLimited {
    fn warn(&self, log: impl FnOnce(u64)) {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        drop(last);
        log(self.suppressed.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host_part() {
        assert_eq!(
            server_name("127.0.0.2:7000").unwrap(),
            ServerName::IpAddress("127.0.0.2".parse::<IpAddr>().unwrap().into())
        );
        assert_eq!(
            server_name("[::1]:7000").unwrap(),
            ServerName::IpAddress("::1".parse::<IpAddr>().unwrap().into())
        );
        assert_eq!(
            server_name("node-1.example:7000").unwrap(),
            ServerName::try_from("node-1.example").unwrap()
        );
        assert!(server_name("bad name!:1").is_err());
    }

    #[test]
    fn a_certificate_names_only_its_own_addresses() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.2".into(), "node-2".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = cert.der();
        assert!(names_address(der, "127.0.0.2".parse().unwrap()));
        assert!(!names_address(der, "127.0.0.1".parse().unwrap()));
        assert!(!names_address(der, "::1".parse().unwrap()));
        assert!(!names_address(
            &CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]),
            "127.0.0.2".parse().unwrap()
        ));
    }

    #[test]
    fn files_that_do_not_match_are_refused() {
        let dir = std::env::temp_dir().join(format!("combkv-peer-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let files = PeerTlsFiles {
            cert: write("c.pem", &cert.pem()),
            key: write("k.pem", &key.serialize_pem()),
            ca: write("ca.pem", &cert.pem()),
        };
        PeerTls::load(&files).unwrap();
        let wrong_key = PeerTlsFiles {
            key: write("other.pem", &other.serialize_pem()),
            ..files.clone()
        };
        assert!(
            PeerTls::load(&wrong_key)
                .unwrap_err()
                .contains("peer-key-file")
        );
        let no_ca = PeerTlsFiles {
            ca: write("empty.pem", ""),
            ..files.clone()
        };
        assert!(
            PeerTls::load(&no_ca)
                .unwrap_err()
                .contains("no certificate")
        );
        // A reload that fails keeps what was loaded.
        let guard = PeerGuard::new(Some(files.clone())).unwrap();
        std::fs::write(&files.cert, "not a certificate").unwrap();
        assert!(guard.reload().is_err());
        assert!(guard.tls().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_log_is_rate_limited_and_counts_what_it_skipped() {
        let r = RateLimited::default();
        let mut seen = Vec::new();
        for _ in 0..5 {
            r.warn(|s| seen.push(s));
        }
        assert_eq!(seen, vec![0]);
        *r.last.lock() = Some(Instant::now() - Duration::from_secs(2));
        r.warn(|s| seen.push(s));
        assert_eq!(seen, vec![0, 4]);
    }
}
