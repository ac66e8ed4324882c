//! Stored results against the digests their events chained. An event that recorded a result
//! carries `result_ref` (`results/<execution>/<attempt>`) and `result_digest`
//! (`sha256:<hex>` of the body); the body itself lives beside the chain. A body changed after
//! the fact, or removed, is a break at the event that vouched for it.

use std::sync::Arc;

use postern_core::digest::sha256;

use crate::chain::ChainedEvent;
use crate::fold::FoldMap;
use crate::verify::{Break, BreakReason};

/// One event's claim on a stored result: its digest, and where the event is.
struct Claim {
    digest: ClaimedDigest,
    chain: Arc<str>,
    seq: u64,
}

/// A claimed digest: as bytes when it is written the way the ledger writes one
/// (`sha256:` and 64 lower-case hex digits), else as the text it is.
enum ClaimedDigest {
    Sha256([u8; 32]),
    Other(String),
}

impl ClaimedDigest {
    fn of(text: &str) -> ClaimedDigest {
        let bytes = text
            .strip_prefix("sha256:")
            .filter(|h| !h.bytes().any(|c| c.is_ascii_uppercase()))
            .and_then(postern_core::hexdigits::decode32);
        match bytes {
            Some(b) => ClaimedDigest::Sha256(b),
            None => ClaimedDigest::Other(text.to_string()),
        }
    }

    /// Whether it names `actual` exactly as `sha256:<lower-case hex>` would.
    fn matches(&self, actual: &[u8; 32]) -> bool {
        match self {
            ClaimedDigest::Sha256(b) => b == actual,
            ClaimedDigest::Other(t) => {
                *t == format!("sha256:{}", postern_core::hexdigits::encode(actual))
            }
        }
    }
}

/// What the events expect of the stored results, and what was found. Every event that vouched
/// for a reference is held to it (two events naming one reference with different digests
/// mean a body was overwritten: the earlier claim breaks, whatever order the chains are read in).
#[derive(Default)]
pub struct ResultCheck {
    /// result_ref → (the events' claims, found).
    expected: FoldMap<String, (Vec<Claim>, bool)>,
    breaks: Vec<Break>,
}

impl ResultCheck {
    pub fn new() -> ResultCheck {
        ResultCheck::default()
    }

    /// Notes the result an event vouches for, if it recorded one.
    pub fn event(&mut self, e: &ChainedEvent) {
        let detail = &e.body.detail;
        let (Some(reference), Some(digest)) = (
            detail.get("result_ref").and_then(|v| v.as_str()),
            detail.get("result_digest").and_then(|v| v.as_str()),
        ) else {
            return;
        };
        self.claim(
            reference,
            digest,
            &Arc::from(e.body.chain.as_str()),
            e.body.seq,
        );
    }

    /// An event at `seq` of `chain` vouches that `reference` holds a body with `digest`.
    pub(crate) fn claim(&mut self, reference: &str, digest: &str, chain: &Arc<str>, seq: u64) {
        let claim = Claim {
            digest: ClaimedDigest::of(digest),
            chain: chain.clone(),
            seq,
        };
        match self.expected.get_mut(reference) {
            Some((claims, _)) => claims.push(claim),
            None => {
                self.expected
                    .insert(reference.to_string(), (vec![claim], false));
            }
        }
    }

    /// One stored result body. A body no event vouches for is left alone (it is not evidence).
    pub fn stored(&mut self, reference: &str, body: &[u8]) {
        self.stored_digest(reference, &sha256(body));
    }

    /// One stored result, by the SHA-256 of its body (taken by the caller, e.g. on its reading
    /// thread).
    pub fn stored_digest(&mut self, reference: &str, actual: &[u8; 32]) {
        let Some((claims, found)) = self.expected.get_mut(reference) else {
            return;
        };
        *found = true;
        for c in claims.iter().filter(|c| !c.digest.matches(actual)) {
            self.breaks.push(Break {
                chain: Some(c.chain.to_string()),
                seq: Some(c.seq),
                reason: BreakReason::ResultMismatch {
                    reference: reference.to_string(),
                },
            });
        }
    }

    /// The breaks found: changed bodies, and vouched-for results that are not stored.
    pub fn finish(mut self) -> Vec<Break> {
        let mut missing: Vec<_> = self.expected.into_iter().filter(|(_, (_, f))| !f).collect();
        // In reference order, as the report always gave them.
        missing.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (reference, (claims, _)) in missing {
            for c in claims {
                self.breaks.push(Break {
                    chain: Some(c.chain.to_string()),
                    seq: Some(c.seq),
                    reason: BreakReason::ResultMissing {
                        reference: reference.clone(),
                    },
                });
            }
        }
        self.breaks
    }
}
