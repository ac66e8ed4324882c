//! The intent fingerprint: `hmac-sha256:<hex>` over the canonical bytes of an action record.
//!
//! Keyed so that a leaked ledger does not let anyone test guesses of arguments; never used as
//! the idempotency key sent to a target (that is the execution id).

use std::fmt;
use std::str::FromStr;

use ring::hmac;
use subtle::ConstantTimeEq;

/// The minimum key length: the output size of SHA-256.
pub const MIN_KEY_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("fingerprint key is {len} bytes; at least {MIN_KEY_BYTES} are required (`postern init` generates one)")]
    TooShort { len: usize },
    #[error("fingerprint key is not hex: expected {} or more hex digits", MIN_KEY_BYTES * 2)]
    NotHex,
}

/// The gateway's HMAC key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct FingerprintKey {
    // ring's keys hold the HMAC's inner and outer states, computed once (ring rather than the
    // hmac crate for the reason `digest` gives).
    fingerprint: hmac::Key,
    secret_refs: hmac::Key,
}

impl FingerprintKey {
    pub fn new(bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort { len: bytes.len() });
        }
        let fingerprint = hmac::Key::new(hmac::HMAC_SHA256, bytes);
        // A separate subkey for secret references: a secret's reference can never collide with
        // (or be confused for) the fingerprint of some record.
        let subkey = hmac::sign(&fingerprint, b"postern/secret-ref/v1");
        let secret_refs = hmac::Key::new(hmac::HMAC_SHA256, subkey.as_ref());
        Ok(FingerprintKey {
            fingerprint,
            secret_refs,
        })
    }

    /// Reads a hex-encoded key (what `postern init` writes), ignoring surrounding whitespace.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let bytes = hex::decode(text.trim()).map_err(|_| KeyError::NotHex)?;
        Self::new(&bytes)
    }

    /// The fingerprint of canonical record bytes.
    pub fn fingerprint(&self, canonical: &[u8]) -> Fingerprint {
        let tag = hmac::sign(&self.fingerprint, canonical);
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(tag.as_ref());
        Fingerprint(bytes)
    }

    /// The keyed reference that stands in for a secret value: `secret:hmac-sha256:<hex>`.
    /// Equal secrets give equal references (so they fingerprint alike) without revealing them.
    pub fn secret_reference(&self, canonical_secret: &[u8]) -> String {
        let tag = hmac::sign(&self.secret_refs, canonical_secret);
        format!("secret:hmac-sha256:{}", crate::hexdigits::encode(tag))
    }
}

impl fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintKey(<redacted>)")
    }
}

/// An intent fingerprint. Equality is checked in constant time.
#[derive(Clone, Copy, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    /// The first 12 hex digits, for humans.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::hash::Hash for Fingerprint {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("hmac-sha256:")?;
        f.write_str(&crate::hexdigits::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint {0:?}: expected hmac-sha256: followed by 64 hex digits")]
pub struct InvalidFingerprint(pub String);

impl FromStr for Fingerprint {
    type Err = InvalidFingerprint;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidFingerprint(s.chars().take(90).collect());
        let hex_part = s.strip_prefix("hmac-sha256:").ok_or_else(bad)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|_| bad())?;
        Ok(Fingerprint(out))
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(
            FingerprintKey::new(&[7u8; 31]).unwrap_err(),
            KeyError::TooShort { len: 31 }
        );
        assert!(FingerprintKey::new(&[7u8; 32]).is_ok());
        assert_eq!(
            FingerprintKey::from_hex("zz").unwrap_err(),
            KeyError::NotHex
        );
    }

    #[test]
    fn fingerprint_is_plain_hmac_sha256_rfc4231_case_6() {
        // RFC 4231 test case 6 (131-byte key): the fingerprint is plain HMAC-SHA256.
        let key = [0xaa_u8; 131];
        let fp = FingerprintKey::new(&key)
            .unwrap()
            .fingerprint(b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(
            fp.to_string(),
            "hmac-sha256:60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        assert_eq!(fp.to_string().parse::<Fingerprint>().unwrap(), fp);
        assert_eq!(
            format!("{:?}", FingerprintKey::new(&key).unwrap()),
            "FingerprintKey(<redacted>)"
        );
    }

    #[test]
    fn a_secret_reference_is_hmac_under_the_derived_subkey() {
        // HMAC-SHA256(HMAC-SHA256(key, "postern/secret-ref/v1"), secret), computed with Python's
        // hmac module: references written before the HMAC's implementation changed still match.
        let key = FingerprintKey::new(&[0xaa_u8; 131]).unwrap();
        assert_eq!(
            key.secret_reference(br#""hunter2""#),
            "secret:hmac-sha256:8d6d091ba0176e6849a44d556da7954b958b1c681fbbc39f64289e434ac77833"
        );
    }
}
