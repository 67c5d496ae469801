//! Certificates for the TLS tests, made with rcgen into files, and rustls
//! clients that present them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A CA that signs certificates into files.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("combkv test {name}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = Ca {
            issuer,
            dir: dir.to_path_buf(),
            name: name.into(),
        };
        std::fs::write(ca.ca_file(), ca.issuer.pem()).unwrap();
        ca
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// A certificate naming `ip`: (cert file, key file).
    pub fn leaf(&self, label: &str, ip: IpAddr) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![ip.to_string()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let c = self.dir.join(format!("{}-{label}.pem", self.name));
        let k = self.dir.join(format!("{}-{label}.key", self.name));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A TLS client trusting the cluster's CA, presenting `cert`.
pub fn tls_client(ca: &Path, cert: &Path, key: &Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let certs: Vec<_> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .unwrap(),
    )
}

impl Ca {
    /// A certificate for the names (IP addresses or DNS names) given.
    pub fn leaf_for(&self, label: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let c = self.dir.join(format!("{}-{label}.pem", self.name));
        let k = self.dir.join(format!("{}-{label}.key", self.name));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A TLS client trusting `ca`, presenting no certificate.
pub fn tls_client_anonymous(ca: &Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
