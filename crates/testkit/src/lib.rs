//! Test support shared by Postern's test binaries and benchmarks (never a dependency of the
//! gateway crate): a throw-away certificate authority ([`TestCa`]) and an axum listener that
//! speaks TLS ([`TlsListener`]), so tests dial real TLS servers on 127.0.0.1.
//!
//! The one place certificates for tests (and demos) are made: the channels crate's tests, the
//! `postern` binary's end-to-end tests, the gateway benchmark and `postern demo`'s https scene,
//! whose private CA it makes, all use it. [`sshd`] starts a real OpenSSH server with a
//! throw-away config and a proxy that cuts connections, for the SSH channel's tests;
//! [`balancer`] a real HAProxy, [`postgres`] a private PostgreSQL cluster, and (feature
//! `browser`) a headless Chromium over WebDriver.

pub mod balancer;
#[cfg(feature = "browser")]
pub mod browser;
pub mod postgres;
pub mod sshd;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

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

/// A TCP listener whose connections are TLS, for `axum::serve`. Handshakes run concurrently
/// (each on its own task), so a slow or failing one never holds up the others; a connection
/// whose handshake fails is dropped and counted ([`TlsListener::failed_handshakes`]).
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    failed: Arc<AtomicUsize>,
}

impl TlsListener {
    /// Listens on `127.0.0.1:0` with `config`.
    pub async fn bind(config: Arc<ServerConfig>) -> io::Result<TlsListener> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Ok(TlsListener::over(listener, config))
    }

    /// TLS on an already bound listener.
    pub fn over(listener: TcpListener, config: Arc<ServerConfig>) -> TlsListener {
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let (tx, ready) = mpsc::channel(256);
        let failed = Arc::new(AtomicUsize::new(0));
        let failures = failed.clone();
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx, failures) = (acceptor.clone(), tx.clone(), failures.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Err(_) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        TlsListener {
            addr,
            ready,
            failed,
        }
    }

    /// How many handshakes failed so far (shared: stays readable after `axum::serve` took the
    /// listener).
    pub fn failed_handshakes(&self) -> Arc<AtomicUsize> {
        self.failed.clone()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ended (its listener failed): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
