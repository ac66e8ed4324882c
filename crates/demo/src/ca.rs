//! A certificate authority made on the spot, in memory: `postern demo`'s https scene makes one
//! for its TLS invoice API, and the tests (through `postern-testkit`) for every TLS server they
//! dial. Certificates are for loopback names; nothing here is meant for production keys.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// The crypto provider every test server uses: ring, as the gateway does.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate authority made for one test: its certificate and key live in memory only.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate issued by a [`TestCa`], with its private key.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
    /// The issuing CA's certificate (sent after the leaf, as servers send their chain).
    ca_der: CertificateDer<'static>,
}

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 1975 to 4096 (rcgen's defaults).
    Current,
    /// Valid only during the year 2000.
    Expired,
}

impl TestCa {
    /// A new CA called `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("generate a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("self-sign the CA");
        TestCa { cert, key }
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// Writes the CA certificate (PEM) to `dir/file`; returns the path.
    pub fn write_pem(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.cert_pem()).expect("write the CA certificate");
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server_cert(&self, names: &[&str], validity: Validity) -> Issued {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth, validity)
    }

    /// A client certificate (for mTLS) whose subject is `name`.
    pub fn client_cert(&self, name: &str) -> Issued {
        self.issue(
            &[name],
            ExtendedKeyUsagePurpose::ClientAuth,
            Validity::Current,
        )
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose, validity: Validity) -> Issued {
        let key = KeyPair::generate().expect("generate a key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("certificate params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if validity == Validity::Expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign the certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
            ca_der: self.cert_der(),
        }
    }

    /// Trust anchors holding this CA only.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.cert_der())
            .expect("the CA is a valid anchor");
        roots
    }
}

impl Issued {
    fn chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.cert_der.clone(), self.ca_der.clone()]
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// Writes the certificate (PEM) to `dir/cert_file` and the key (PEM, mode 0600) to
    /// `dir/key_file`; returns both paths.
    pub fn write_pem(&self, dir: &Path, cert_file: &str, key_file: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let cert = dir.join(cert_file);
        let key = dir.join(key_file);
        std::fs::write(&cert, &self.cert_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 the key");
        (cert, key)
    }

    /// A TLS 1.2/1.3 server config presenting this certificate, no client certificates asked.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config_with(None, &[&rustls::version::TLS13, &rustls::version::TLS12])
    }

    /// As [`Issued::server_config`], requiring a client certificate issued by `clients`.
    pub fn server_config_requiring_client(&self, clients: &TestCa) -> Arc<ServerConfig> {
        self.server_config_with(
            Some(clients),
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        )
    }

    /// A server config with the given client CA (if any) and protocol versions.
    pub fn server_config_with(
        &self,
        clients: Option<&TestCa>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .expect("protocol versions");
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(ca.roots()), provider())
                        .build()
                        .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(self.chain(), self.key())
            .expect("server certificate and key");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}
