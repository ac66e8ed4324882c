//! TLS for the listener (`[gateway] tls`): rustls with the ring provider, TLS 1.2 and 1.3,
//! HTTP/2 and HTTP/1.1 offered by ALPN, and a certificate that can be replaced while the
//! gateway runs ([`TlsHandshake::replace`], on `SIGHUP`) without touching open connections:
//! a handshake takes the certificate current when it starts, and established connections keep
//! the keys they agreed.
//!
//! Client certificates authenticate actors by pinning (`[[actor]] client_cert_fingerprint`):
//! when any actor has one, the handshake asks for a certificate (optionally, so token-only
//! actors still connect), checks that the client holds its key (the handshake signature) and
//! that it is within its validity period, and hands its SHA-256 fingerprint to the front in
//! [`Peer`]. Which actor, if any, it belongs to is the front's decision; no CA is involved.
//!
//! A connection whose first byte is not a TLS record (a plain `http://` request to the TLS
//! port) is answered `400` in plain text saying to use `https://`, and closed.

use std::io;
use std::sync::{Arc, RwLock};

use postern_core::config::CertificateFingerprint;
use postern_core::Timestamp;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{Handshake, Peer};

mod validity;

pub use validity::Validity;

/// Why a listener certificate cannot be used. Never quotes key material.
#[derive(Debug, thiserror::Error)]
pub enum ListenerTlsError {
    #[error("the certificate file holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    #[error("the certificate file is not valid PEM: {0}")]
    BadPem(String),
    #[error("the key file is not a PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    BadKey,
    #[error("the key does not match the certificate (it is the key of another certificate)")]
    KeyMismatch,
    #[error("the certificate cannot be used: {0}")]
    Unusable(String),
    #[error("the certificate's validity period cannot be read (not an X.509 certificate?)")]
    NoValidity,
    #[error("the certificate expired at {0}: renew it (clients would refuse every handshake)")]
    Expired(Timestamp),
    #[error("the certificate is not valid before {0}: check the clock or the certificate")]
    NotYetValid(Timestamp),
}

/// A certificate chain with its private key, checked: the key is the leaf's, and the leaf is
/// valid now.
#[derive(Debug)]
pub struct ServerIdentity {
    key: Arc<CertifiedKey>,
    validity: Validity,
    fingerprint: CertificateFingerprint,
}

impl ServerIdentity {
    /// From the PEM certificate chain (leaf first) and PEM private key, as of `now`.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        now: Timestamp,
    ) -> Result<ServerIdentity, ListenerTlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ListenerTlsError::BadPem(e.to_string()))?;
        let Some(leaf) = chain.first() else {
            return Err(ListenerTlsError::NoCertificate);
        };
        let validity = Validity::of(leaf).ok_or(ListenerTlsError::NoValidity)?;
        validity.check(now)?;
        let fingerprint = fingerprint(leaf);
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| ListenerTlsError::BadKey)?;
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => ListenerTlsError::KeyMismatch,
            other => ListenerTlsError::Unusable(other.to_string()),
        })?;
        Ok(ServerIdentity {
            key: Arc::new(key),
            validity,
            fingerprint,
        })
    }

    pub fn validity(&self) -> Validity {
        self.validity
    }

    /// The leaf certificate's fingerprint (for the start-up line and the reload message).
    pub fn fingerprint(&self) -> CertificateFingerprint {
        self.fingerprint
    }
}

/// The TLS side of the listener: a [`Handshake`] that serves the current certificate.
#[derive(Clone)]
pub struct TlsHandshake {
    acceptor: TlsAcceptor,
    current: Arc<CurrentCertificate>,
}

impl TlsHandshake {
    /// A handshake serving `identity`; `ask_client_certificates` when some actor is pinned to a
    /// client certificate.
    pub fn new(identity: ServerIdentity, ask_client_certificates: bool) -> TlsHandshake {
        let current = Arc::new(CurrentCertificate(RwLock::new(identity.key)));
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("the ring provider supports TLS 1.2 and 1.3");
        let builder = if ask_client_certificates {
            builder.with_client_cert_verifier(Arc::new(PinnedClientCertificates {
                algorithms: provider().signature_verification_algorithms,
            }))
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // 0-RTT data can be replayed by anyone on the path: a request in it could run twice.
        config.max_early_data_size = 0;
        TlsHandshake {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
        }
    }

    /// Serves `identity` to every handshake from now on; connections already open keep theirs.
    pub fn replace(&self, identity: ServerIdentity) {
        *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = identity.key;
    }
}

impl Handshake for TlsHandshake {
    type Io = TlsStream<TcpStream>;

    async fn handshake(&self, mut tcp: TcpStream) -> io::Result<(Self::Io, Peer)> {
        let mut first = [0u8; 1];
        let n = tcp.peek(&mut first).await?;
        // 22 is a TLS handshake record; anything else is not TLS (most likely plain HTTP).
        if n == 1 && first[0] != 22 {
            answer_plain_http(&mut tcp).await;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "plain HTTP on the TLS port",
            ));
        }
        let tls = self.acceptor.accept(tcp).await?;
        let client_certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(fingerprint);
        let peer = Peer {
            client_certificate,
            address: None,
        };
        Ok((tls, peer))
    }
}

/// A short `400` for a client that spoke plain HTTP to the TLS port, so its user sees why
/// instead of a reset connection.
async fn answer_plain_http(tcp: &mut TcpStream) {
    let body = "this port speaks HTTPS: use https:// (the gateway's [gateway] tls is set)\n";
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(response.as_bytes()).await;
    let _ = tcp.shutdown().await;
}

/// The SHA-256 fingerprint of a certificate's DER bytes.
pub fn fingerprint(cert: &CertificateDer<'_>) -> CertificateFingerprint {
    CertificateFingerprint(postern_core::digest::sha256(cert.as_ref()))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate handshakes are served, swapped whole on reload.
#[derive(Debug)]
struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// Accepts any client certificate whose key the client proves it holds and that is within its
/// validity period; the front then matches its fingerprint against the actors' pins. A client
/// may also present none.
#[derive(Debug)]
struct PinnedClientCertificates {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for PinnedClientCertificates {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        use rustls::CertificateError as C;
        let validity = Validity::of(end_entity).ok_or(C::BadEncoding)?;
        let now = Timestamp(i64::try_from(now.as_secs()).unwrap_or(i64::MAX) * 1000);
        match validity.check(now) {
            Ok(()) => Ok(ClientCertVerified::assertion()),
            Err(ListenerTlsError::NotYetValid(_)) => Err(C::NotValidYet.into()),
            Err(_) => Err(C::Expired.into()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
