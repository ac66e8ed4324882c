//! TLS to targets: rustls with the ring provider, TLS 1.2 and 1.3 only, the server's host name
//! always verified. A [`TlsProfile`] says whom a tool's requests trust (the webpki roots, or
//! the CAs of the tool's `http.ca_file` instead) and who they are (a credential's client
//! certificate, for mTLS); the gateway builds one per distinct pair at start-up.
//!
//! There is deliberately no way to turn verification off: a target that cannot prove its name
//! with a trusted certificate is not dialled.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};

use crate::http::Secret;
use crate::ChannelError;

/// The certificate authorities a tool's requests trust.
#[derive(Clone, Debug)]
pub enum TrustedRoots {
    /// The Mozilla root store, as compiled into this build (`webpki-roots`): the same on every
    /// machine, whatever the system's store holds.
    WebPki,
    /// Only these CAs (from a tool's `http.ca_file`), instead of the webpki roots.
    Only(Vec<CertificateDer<'static>>),
}

impl TrustedRoots {
    /// The certificates of a PEM file. A file with no certificate in it is an error: trusting
    /// nothing would fail every call at run time instead of at start-up.
    pub fn from_pem(pem: &[u8]) -> Result<TrustedRoots, ChannelError> {
        let certs = certificates(pem)?;
        if certs.is_empty() {
            return Err(tls_error(
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
        // Each must be usable as a trust anchor, so a bad one is said now, not at the handshake.
        let mut store = RootCertStore::empty();
        for (i, cert) in certs.iter().enumerate() {
            store.add(cert.clone()).map_err(|e| {
                tls_error(&format!(
                    "certificate {} cannot be trusted as a CA: {e}",
                    i + 1
                ))
            })?;
        }
        Ok(TrustedRoots::Only(certs))
    }
}

/// A client certificate chain and its private key, for targets that require mTLS.
#[derive(Clone)]
pub struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certificates", &self.chain.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl ClientIdentity {
    /// The certificate chain (leaf first) from `certificate_pem` and the private key from
    /// `key_pem`; refused when the key does not belong to the leaf certificate.
    pub fn from_pem(
        certificate_pem: &[u8],
        key_pem: &Secret,
    ) -> Result<ClientIdentity, ChannelError> {
        let chain = certificates(certificate_pem)?;
        if chain.is_empty() {
            return Err(tls_error(
                "the client certificate file holds no PEM certificate",
            ));
        }
        // The key's own parse error could quote key material: say only what kind of problem.
        let key = PrivateKeyDer::from_pem_slice(key_pem.expose().as_bytes()).map_err(|_| {
            tls_error("the client key is not a PEM private key (PKCS#8, PKCS#1 or SEC1)")
        })?;
        let identity = ClientIdentity {
            chain,
            key: Arc::new(key),
        };
        // Building a config is the check that the key matches the certificate.
        client_config(&TrustedRoots::Only(Vec::new()), Some(&identity))?;
        Ok(identity)
    }
}

/// Whom a tool's requests trust and who they are, built once: the channel keeps one connection
/// pool per profile (and connect timeout), so connections made under one tool's trust are never
/// used for another's.
#[derive(Debug)]
pub struct TlsProfile {
    id: u64,
    config: Arc<ClientConfig>,
}

impl TlsProfile {
    pub fn new(
        roots: &TrustedRoots,
        identity: Option<&ClientIdentity>,
    ) -> Result<TlsProfile, ChannelError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Ok(TlsProfile {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            config: Arc::new(client_config(roots, identity)?),
        })
    }

    /// The webpki roots and no client certificate: what a tool without `ca_file` or client
    /// certificate gets. One shared instance.
    pub fn webpki() -> Arc<TlsProfile> {
        static WEBPKI: OnceLock<Arc<TlsProfile>> = OnceLock::new();
        WEBPKI
            .get_or_init(|| {
                Arc::new(
                    TlsProfile::new(&TrustedRoots::WebPki, None)
                        .expect("the webpki roots make a valid client config"),
                )
            })
            .clone()
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The rustls configuration, for clients outside the channel (`postern connect`'s).
    pub fn rustls_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

/// Makes ring the process's default rustls provider, for clients that take the default rather
/// than a configuration of ours (reqwest's, which is built with rustls but no provider of its
/// own: without a default it panics when a client is built). Idempotent; every binary and test
/// that builds a reqwest client calls it first.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<CryptoProvider> {
    static RING: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    RING.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// TLS 1.3 and 1.2 only (rustls has nothing older), the given roots, hostname verification by
/// webpki, HTTP/1.1 by ALPN, and no 0-RTT early data (rustls' default, and required here: early
/// data can be replayed by anyone on the path, so a request in it could run twice).
fn client_config(
    roots: &TrustedRoots,
    identity: Option<&ClientIdentity>,
) -> Result<ClientConfig, ChannelError> {
    let mut store = RootCertStore::empty();
    match roots {
        TrustedRoots::WebPki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        TrustedRoots::Only(certs) => {
            for cert in certs {
                store
                    .add(cert.clone())
                    .map_err(|e| tls_error(&format!("a CA certificate cannot be used: {e}")))?;
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| tls_error(&e.to_string()))?
        .with_root_certificates(store);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => {
                    tls_error("the client key does not match the client certificate")
                }
                other => tls_error(&format!("the client certificate cannot be used: {other}")),
            })?,
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.enable_early_data = false;
    Ok(config)
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ChannelError> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(&format!("not a valid PEM file: {e}")))
}

fn tls_error(reason: &str) -> ChannelError {
    ChannelError::Tls {
        reason: reason.to_string(),
    }
}

/// Why a handshake with `host` failed, in words a user can act on. Names the host, never the
/// URL's path or query (which may carry arguments).
pub(crate) fn handshake_failure(host: &str, e: &rustls::Error) -> String {
    use rustls::Error as E;
    let why = match e {
        E::InvalidCertificate(c) => certificate_problem(host, c),
        E::AlertReceived(alert) => alert_meaning(*alert),
        E::InvalidMessage(_) => format!("the target does not speak TLS ({e})"),
        E::PeerIncompatible(_) => {
            format!(
                "no TLS version or cipher suite in common: Postern speaks TLS 1.2 and 1.3 ({e})"
            )
        }
        other => other.to_string(),
    };
    format!("TLS handshake with {host} failed: {why}")
}

fn certificate_problem(host: &str, e: &CertificateError) -> String {
    use CertificateError as C;
    match e {
        C::UnknownIssuer => "certificate not trusted (unknown CA): its issuer is not among the trusted roots (a private CA goes in the tool's http.ca_file)".to_string(),
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            format!("certificate not valid for the host name {host} (wrong host)")
        }
        C::Expired | C::ExpiredContext { .. } => "certificate expired".to_string(),
        C::NotValidYet | C::NotValidYetContext { .. } => "certificate not valid yet".to_string(),
        C::Revoked => "certificate revoked".to_string(),
        C::BadSignature => "certificate signature is not valid".to_string(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "certificate not issued for TLS servers (extended key usage)".to_string()
        }
        other => format!("certificate rejected: {other:?}"),
    }
}

fn alert_meaning(alert: AlertDescription) -> String {
    use AlertDescription as A;
    match alert {
        A::CertificateRequired => {
            "the target requires a client certificate (configure one on the tool's credential)"
                .to_string()
        }
        A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::UnsupportedCertificate => {
            format!("the target refused our client certificate (alert {alert:?})")
        }
        A::CertificateExpired => "the target refused our client certificate: expired".to_string(),
        A::ProtocolVersion => {
            "no TLS version in common (alert ProtocolVersion): Postern speaks TLS 1.2 and 1.3"
                .to_string()
        }
        other => format!("the target refused the handshake (alert {other:?})"),
    }
}

/// Whether a received alert can only have come from the target's TLS layer refusing the
/// handshake. With TLS 1.3 the client's side of the handshake ends before the target has
/// checked the client's certificate, so the request is written and the refusal arrives as an
/// alert after it; but a target that refused the handshake never read a byte of application
/// data, so the request provably reached no application. These alerts are sent only during a
/// handshake (rustls offers no post-handshake authentication, so a target cannot ask for a
/// certificate later on a connection that already carried requests).
pub(crate) fn alert_refuses_handshake(e: &rustls::Error) -> bool {
    use AlertDescription as A;
    matches!(
        e,
        rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::HandshakeFailure
        )
    )
}
