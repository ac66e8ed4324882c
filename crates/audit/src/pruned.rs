//! Ranges of a chain removed by retention. The events go, a signed statement stays: "chain C,
//! seq FROM..=TO, pruned; the event before it hashed B, the last of it hashed T". With it the
//! verifier still links the events on either side (the one after must carry T as its
//! `prev_hash`), so a pruned range is told apart from a cut: a cut has no statement, and a
//! statement cannot be made without the signing key.

use postern_core::{canon, Timestamp};
use serde::{Deserialize, Serialize};

use crate::chain::{hex32, AuditError, SigningKey, VerifyingKey};

/// A signed statement that `from..=to` of `chain` was pruned by retention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedRange {
    pub chain: String,
    pub from: u64,
    pub to: u64,
    /// The hash of event `from - 1` (the genesis hash when `from` is 1).
    #[serde(with = "hex32")]
    pub before_hash: [u8; 32],
    /// The hash of event `to`: what the next event's `prev_hash` must be.
    #[serde(with = "hex32")]
    pub to_hash: [u8; 32],
    pub at: Timestamp,
    pub key_id: String,
    /// Ed25519 over the JCS bytes of every field above plus `"statement": "pruned by
    /// retention"`, hex.
    pub signature: String,
}

#[derive(Serialize)]
struct SignedPart<'a> {
    statement: &'static str,
    chain: &'a str,
    from: u64,
    to: u64,
    before_hash: String,
    to_hash: String,
    at: Timestamp,
}

impl PrunedRange {
    fn signed_bytes(&self) -> Result<Vec<u8>, AuditError> {
        Ok(canon::canonical_bytes(&SignedPart {
            statement: "pruned by retention",
            chain: &self.chain,
            from: self.from,
            to: self.to,
            before_hash: hex::encode(self.before_hash),
            to_hash: hex::encode(self.to_hash),
            at: self.at,
        })?)
    }

    /// A statement for `from..=to`, signed by `key`.
    pub fn sign(
        key: &SigningKey,
        chain: &str,
        (from, to): (u64, u64),
        before_hash: [u8; 32],
        to_hash: [u8; 32],
        at: Timestamp,
    ) -> Result<PrunedRange, AuditError> {
        let mut range = PrunedRange {
            chain: chain.to_string(),
            from,
            to,
            before_hash,
            to_hash,
            at,
            key_id: key.verifying_key().key_id(),
            signature: String::new(),
        };
        range.signature = key.sign_hex(&range.signed_bytes()?);
        Ok(range)
    }

    /// Whether `key` made this statement.
    pub fn is_signed_by(&self, key: &VerifyingKey) -> bool {
        self.key_id == key.key_id()
            && self
                .signed_bytes()
                .is_ok_and(|bytes| key.verifies_hex(&bytes, &self.signature))
    }

    /// How many events the range held.
    pub fn len(&self) -> u64 {
        self.to.saturating_sub(self.from).saturating_add(1)
    }

    pub fn is_empty(&self) -> bool {
        self.to < self.from
    }
}
