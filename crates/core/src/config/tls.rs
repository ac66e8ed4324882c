//! The listener's TLS settings (`[gateway] tls`) and the client-certificate fingerprints that
//! authenticate actors (`[[actor]] client_cert_fingerprint`).

use std::fmt;

/// `[gateway] tls = { cert = "…", key = "…" }`: the listener's certificate chain and private
/// key, PEM files relative to the config file. Both are read again on `SIGHUP`, so the key is a
/// path (an environment variable could not be re-read); like every secret file it must be
/// readable by its owner only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerTls {
    /// The certificate chain, leaf first.
    pub cert: String,
    /// The private key of the leaf.
    pub key: String,
}

/// The SHA-256 digest of a certificate's DER encoding: what `openssl x509 -noout -fingerprint
/// -sha256` prints. An actor pinned to one is authenticated by the TLS handshake that proves
/// possession of the certificate's key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CertificateFingerprint(pub [u8; 32]);

impl CertificateFingerprint {
    /// `sha256:` followed by 64 hex digits, in either case, with or without `:` between the
    /// bytes (as openssl prints them).
    pub fn parse(text: &str) -> Result<CertificateFingerprint, String> {
        let expected = "expected \"sha256:\" and 64 hex digits (openssl x509 -noout -fingerprint -sha256 -in cert.pem)";
        let Some(digits) = text
            .strip_prefix("sha256:")
            .or_else(|| text.strip_prefix("SHA256:"))
        else {
            return Err(format!("{expected}; the value does not start with sha256:"));
        };
        let digits: String = digits.chars().filter(|c| *c != ':').collect();
        crate::hexdigits::decode32(&digits)
            .map(CertificateFingerprint)
            .ok_or_else(|| format!("{expected}; the value after sha256: is not 32 bytes of hex"))
    }
}

impl fmt::Display for CertificateFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for CertificateFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A TLS client certificate and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The PEM certificate chain, leaf first (relative to the config file). Not a secret.
    pub certificate: String,
    /// The PEM private key (a secret reference: a file readable by its owner only, or an
    /// environment variable).
    pub key: super::SecretRef,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_and_plain_forms_parse_to_the_same_fingerprint() {
        let plain = format!("sha256:{}", "ab".repeat(32));
        let openssl = format!("SHA256:{}", vec!["AB"; 32].join(":"));
        let a = CertificateFingerprint::parse(&plain).unwrap();
        assert_eq!(a, CertificateFingerprint::parse(&openssl).unwrap());
        assert_eq!(a.to_string(), plain);
    }

    #[test]
    fn a_wrong_prefix_or_length_is_refused() {
        assert!(CertificateFingerprint::parse(&"ab".repeat(32))
            .unwrap_err()
            .contains("does not start with sha256:"));
        assert!(CertificateFingerprint::parse("sha256:abcd")
            .unwrap_err()
            .contains("not 32 bytes"));
        assert!(CertificateFingerprint::parse(&format!("sha256:{}", "zz".repeat(32))).is_err());
    }
}
