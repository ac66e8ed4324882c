//! Stored results against the digests their events chained. An event that recorded a result
//! carries `result_ref` (`results/<execution>/<attempt>`) and `result_digest`
//! (`sha256:<hex>` of the body); the body itself lives beside the chain. A body changed after
//! the fact, or removed, is a break at the event that vouched for it.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::chain::ChainedEvent;
use crate::verify::{Break, BreakReason};

/// One event's claim on a stored result: its digest, and where the event is.
struct Claim {
    digest: String,
    chain: String,
    seq: u64,
}

/// What the events expect of the stored results, and what was found. Every event that vouched
/// for a reference is held to it (two events naming one reference with different digests
/// mean a body was overwritten: the earlier claim breaks, whatever order the chains are read in).
#[derive(Default)]
pub struct ResultCheck {
    /// result_ref → (the events' claims, found).
    expected: BTreeMap<String, (Vec<Claim>, bool)>,
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
        self.expected
            .entry(reference.to_string())
            .or_default()
            .0
            .push(Claim {
                digest: digest.to_string(),
                chain: e.body.chain.clone(),
                seq: e.body.seq,
            });
    }

    /// One stored result body. A body no event vouches for is left alone (it is not evidence).
    pub fn stored(&mut self, reference: &str, body: &[u8]) {
        let Some((claims, found)) = self.expected.get_mut(reference) else {
            return;
        };
        *found = true;
        let actual = format!(
            "sha256:{}",
            postern_core::hexdigits::encode(Sha256::digest(body))
        );
        for c in claims.iter().filter(|c| c.digest != actual) {
            self.breaks.push(Break {
                chain: Some(c.chain.clone()),
                seq: Some(c.seq),
                reason: BreakReason::ResultMismatch {
                    reference: reference.to_string(),
                },
            });
        }
    }

    /// The breaks found: changed bodies, and vouched-for results that are not stored.
    pub fn finish(mut self) -> Vec<Break> {
        for (reference, (claims, found)) in self.expected {
            if found {
                continue;
            }
            for c in claims {
                self.breaks.push(Break {
                    chain: Some(c.chain),
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
