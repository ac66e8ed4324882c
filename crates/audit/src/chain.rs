//! The chain format: what is hashed, what is signed.

use ed25519_dalek::{Signer, Verifier as _};
use postern_core::canon;
use postern_core::digest::{sha256, sha256_of};
use postern_core::{EventKind, ExecutionId, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `prev_hash` of the first event of a chain.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("signing key must be 32 bytes of hex (64 hex digits)")]
    BadSigningKey,
    #[error("public key must be 32 bytes of hex (64 hex digits), optionally prefixed ed25519:")]
    BadPublicKey,
    #[error("event cannot be canonicalised: {0}")]
    Canon(#[from] canon::CanonError),
}

/// What one event says: this is what the chain hashes (everything but the hashes themselves).
/// Secrets never enter it; results enter as a digest plus a reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventBody {
    /// The writer's chain (one per gateway instance, so replicas never serialise on one head).
    pub chain: String,
    /// Position in the chain, from 1.
    pub seq: u64,
    pub execution_id: ExecutionId,
    /// Position of the event in its execution's lifecycle, from 1 (`accepted`).
    pub n: u32,
    #[serde(with = "event_name")]
    pub event: EventKind,
    pub at: Timestamp,
    /// Facts about the transition (fingerprint, idempotency key, target status, result digest).
    pub detail: Value,
}

/// An event with its place in the chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "EventWire", into = "EventWire")]
pub struct ChainedEvent {
    pub body: EventBody,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

/// The flat form of a chained event in exports (no `flatten`: it would buffer every line).
#[derive(Clone, Serialize, Deserialize)]
struct EventWire {
    chain: String,
    seq: u64,
    execution_id: ExecutionId,
    n: u32,
    #[serde(with = "event_name")]
    event: EventKind,
    at: Timestamp,
    #[serde(serialize_with = "canonical_detail")]
    detail: Value,
    #[serde(with = "hex32")]
    prev_hash: [u8; 32],
    #[serde(with = "hex32")]
    hash: [u8; 32],
}

impl From<EventWire> for ChainedEvent {
    fn from(w: EventWire) -> Self {
        ChainedEvent {
            body: EventBody {
                chain: w.chain,
                seq: w.seq,
                execution_id: w.execution_id,
                n: w.n,
                event: w.event,
                at: w.at,
                detail: w.detail,
            },
            prev_hash: w.prev_hash,
            hash: w.hash,
        }
    }
}

impl From<ChainedEvent> for EventWire {
    fn from(e: ChainedEvent) -> Self {
        let b = e.body;
        EventWire {
            chain: b.chain,
            seq: b.seq,
            execution_id: b.execution_id,
            n: b.n,
            event: b.event,
            at: b.at,
            detail: b.detail,
            prev_hash: e.prev_hash,
            hash: e.hash,
        }
    }
}

/// Exports carry the detail in its canonical bytes, so a verifier can hash it as read.
fn canonical_detail<S: serde::Serializer>(v: &Value, s: S) -> Result<S::Ok, S::Error> {
    let mut out = Vec::new();
    canon::write_canonical(v, &mut out).map_err(serde::ser::Error::custom)?;
    let text = String::from_utf8(out).map_err(serde::ser::Error::custom)?;
    serde_json::value::RawValue::from_string(text)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// `SHA-256(prev_hash ‖ JCS(body))`.
pub fn event_hash(prev_hash: &[u8; 32], body: &EventBody) -> Result<[u8; 32], AuditError> {
    Ok(link_hash(prev_hash, &body.canonical_bytes()?))
}

/// `SHA-256(prev_hash ‖ body)`: what links an event's canonical body to the one before it.
fn link_hash(prev_hash: &[u8; 32], body: &[u8]) -> [u8; 32] {
    sha256_of(&[prev_hash, body])
}

impl EventBody {
    /// The RFC 8785 bytes of the body, written field by field in canonical key order (the
    /// verifier hashes every event, so this avoids a generic serialiser; a test pins it to
    /// `serde_jcs`).
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, AuditError> {
        Ok(self.canonical_parts()?.0)
    }

    /// The canonical body, and the canonical detail inside it (which a store keeps as is).
    fn canonical_parts(&self) -> Result<(Vec<u8>, Vec<u8>), AuditError> {
        let mut detail = Vec::with_capacity(128);
        canon::write_canonical(&self.detail, &mut detail)?;
        let mut out = Vec::with_capacity(256);
        write_body(
            &mut out,
            self.at,
            &self.chain,
            &detail,
            self.event,
            self.execution_id,
            self.n,
            self.seq,
        )?;
        Ok((out, detail))
    }
}

/// The canonical body with its detail already in canonical bytes (an export carries it so).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_body(
    out: &mut Vec<u8>,
    at: Timestamp,
    chain: &str,
    detail: &[u8],
    event: EventKind,
    execution_id: ExecutionId,
    n: u32,
    seq: u64,
) -> Result<(), AuditError> {
    out.extend_from_slice(b"{\"at\":");
    canon::write_canonical_int(i128::from(at.0), out)?;
    out.extend_from_slice(b",\"chain\":");
    canon::write_canonical_str(chain, out);
    out.extend_from_slice(b",\"detail\":");
    out.extend_from_slice(detail);
    out.extend_from_slice(b",\"event\":");
    canon::write_canonical_str(event.name(), out);
    out.extend_from_slice(b",\"execution_id\":\"");
    out.extend_from_slice(&execution_id.ascii());
    out.extend_from_slice(b"\",\"n\":");
    canon::write_canonical_int(i128::from(n), out)?;
    out.extend_from_slice(b",\"seq\":");
    canon::write_canonical_int(i128::from(seq), out)?;
    out.push(b'}');
    Ok(())
}

/// `SHA-256(prev_hash ‖ body)` for a body whose canonical detail bytes are given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn raw_event_hash(
    body: &mut Vec<u8>,
    prev_hash: &[u8; 32],
    at: Timestamp,
    chain: &str,
    detail: &[u8],
    event: EventKind,
    execution_id: ExecutionId,
    n: u32,
    seq: u64,
) -> Result<[u8; 32], AuditError> {
    body.clear();
    write_body(body, at, chain, detail, event, execution_id, n, seq)?;
    Ok(link_hash(prev_hash, body))
}

impl ChainedEvent {
    /// Links `body` after `prev_hash`.
    pub fn link(body: EventBody, prev_hash: [u8; 32]) -> Result<ChainedEvent, AuditError> {
        let hash = event_hash(&prev_hash, &body)?;
        Ok(ChainedEvent {
            body,
            prev_hash,
            hash,
        })
    }

    /// Links `body` after `prev_hash`, and also returns its detail's canonical JSON text: the
    /// bytes the hash covered, which a store writes instead of canonicalising the detail again.
    pub fn link_keeping_detail(
        body: EventBody,
        prev_hash: [u8; 32],
    ) -> Result<(ChainedEvent, String), AuditError> {
        let (canonical, detail) = body.canonical_parts()?;
        let event = ChainedEvent {
            hash: link_hash(&prev_hash, &canonical),
            body,
            prev_hash,
        };
        // Canonical JSON is UTF-8 by construction.
        let detail =
            String::from_utf8(detail).map_err(|e| canon::CanonError::Serialize(e.to_string()))?;
        Ok((event, detail))
    }
}

/// A signed statement "chain C had head H at seq N": truncation behind it is detectable.
/// Checkpoints form a chain of their own: each names the one its signer signed before it on
/// the same chain (`prev`), so a deleted checkpoint is a gap, not a silence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub chain: String,
    pub seq: u64,
    #[serde(with = "hex32")]
    pub head_hash: [u8; 32],
    pub at: Timestamp,
    /// The previous checkpoint of this chain; `None` for a chain's first (and for checkpoints
    /// signed before checkpoints were chained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<CheckpointLink>,
    /// The signer's key id (first 16 hex digits of SHA-256 of the public key).
    pub key_id: String,
    /// Ed25519 signature over the JCS bytes of `{at, chain, head_hash, prev?, seq}`, hex.
    pub signature: String,
}

/// A checkpoint as a later one names it: its seq and head hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointLink {
    pub seq: u64,
    #[serde(with = "hex32")]
    pub head_hash: [u8; 32],
}

impl Checkpoint {
    /// How a later checkpoint names this one.
    pub fn link(&self) -> CheckpointLink {
        CheckpointLink {
            seq: self.seq,
            head_hash: self.head_hash,
        }
    }
}

#[derive(Serialize)]
struct SignedPart<'a> {
    chain: &'a str,
    seq: u64,
    head_hash: String,
    at: Timestamp,
    // Absent (not null) for a first checkpoint, so the bytes of those signed before
    // checkpoints were chained are unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    prev: Option<SignedLink>,
}

#[derive(Serialize)]
struct SignedLink {
    seq: u64,
    head_hash: String,
}

fn signed_bytes(
    chain: &str,
    seq: u64,
    head_hash: &[u8; 32],
    at: Timestamp,
    prev: Option<&CheckpointLink>,
) -> Result<Vec<u8>, AuditError> {
    Ok(canon::canonical_bytes(&SignedPart {
        chain,
        seq,
        head_hash: hex::encode(head_hash),
        at,
        prev: prev.map(|p| SignedLink {
            seq: p.seq,
            head_hash: hex::encode(p.head_hash),
        }),
    })?)
}

/// The gateway's Ed25519 signing key. `Debug` never shows it.
pub struct SigningKey(ed25519_dalek::SigningKey);

/// The public half, what verifiers hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct VerifyingKey(ed25519_dalek::VerifyingKey);

impl SigningKey {
    /// From 32 random bytes (the caller draws them: this crate does no I/O).
    pub fn from_bytes(bytes: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&bytes))
    }
    pub fn from_hex(text: &str) -> Result<SigningKey, AuditError> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut bytes).map_err(|_| AuditError::BadSigningKey)?;
        Ok(SigningKey::from_bytes(bytes))
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0.to_bytes())
    }
    pub fn verifying_key(&self) -> VerifyingKey {
        VerifyingKey(self.0.verifying_key())
    }

    /// Signs "`chain` had `head_hash` at `seq`", naming the checkpoint signed before it.
    pub fn checkpoint(
        &self,
        chain: &str,
        (seq, head_hash): (u64, [u8; 32]),
        at: Timestamp,
        prev: Option<CheckpointLink>,
    ) -> Result<Checkpoint, AuditError> {
        let signature = self
            .0
            .sign(&signed_bytes(chain, seq, &head_hash, at, prev.as_ref())?);
        Ok(Checkpoint {
            chain: chain.to_string(),
            seq,
            head_hash,
            at,
            prev,
            key_id: self.verifying_key().key_id(),
            signature: hex::encode(signature.to_bytes()),
        })
    }
}

impl SigningKey {
    /// Signs arbitrary bytes (an export header's canonical form); the signature as hex.
    pub fn sign_hex(&self, bytes: &[u8]) -> String {
        hex::encode(self.0.sign(bytes).to_bytes())
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

impl VerifyingKey {
    /// Reads `ed25519:<hex>` or plain hex.
    pub fn from_text(text: &str) -> Result<VerifyingKey, AuditError> {
        let t = text.trim();
        let t = t.strip_prefix("ed25519:").unwrap_or(t);
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(t, &mut bytes).map_err(|_| AuditError::BadPublicKey)?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(VerifyingKey)
            .map_err(|_| AuditError::BadPublicKey)
    }
    pub fn key_id(&self) -> String {
        hex::encode(&sha256(self.0.as_bytes())[..8])
    }
    /// True when `signature` (hex) is this key's over `bytes`.
    pub fn verifies_hex(&self, bytes: &[u8], signature: &str) -> bool {
        let mut sig = [0u8; 64];
        if hex::decode_to_slice(signature, &mut sig).is_err() {
            return false;
        }
        self.0
            .verify(bytes, &ed25519_dalek::Signature::from_bytes(&sig))
            .is_ok()
    }

    /// True when the checkpoint's signature is this key's over its content.
    pub fn verifies(&self, c: &Checkpoint) -> bool {
        let Ok(bytes) = signed_bytes(&c.chain, c.seq, &c.head_hash, c.at, c.prev.as_ref()) else {
            return false;
        };
        let mut sig = [0u8; 64];
        if hex::decode_to_slice(&c.signature, &mut sig).is_err() {
            return false;
        }
        self.0
            .verify(&bytes, &ed25519_dalek::Signature::from_bytes(&sig))
            .is_ok()
    }
}

impl std::fmt::Display for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ed25519:{}", hex::encode(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Reads a borrowed string where the input allows it (serde's `Cow<str>` always copies).
struct StrVisitor<F>(F, &'static str);

impl<T, F: FnOnce(&str) -> Result<T, String>> serde::de::Visitor<'_> for StrVisitor<F> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.1)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }
}

pub(crate) mod event_name {
    use postern_core::EventKind;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &EventKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.name())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        d.deserialize_str(super::StrVisitor(
            |s: &str| s.parse::<EventKind>().map_err(|e| e.to_string()),
            "a lifecycle event name",
        ))
    }
}

/// A chain's last event, named by an export's signed header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    pub chain: String,
    pub seq: u64,
    #[serde(with = "hex32")]
    pub hash: [u8; 32],
}

pub(crate) mod hex32 {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&postern_core::hexdigits::encode(b))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        d.deserialize_str(super::StrVisitor(
            |s: &str| {
                postern_core::hexdigits::decode32(s)
                    .ok_or_else(|| "expected 64 hex digits".to_string())
            },
            "64 hex digits",
        ))
    }
}
