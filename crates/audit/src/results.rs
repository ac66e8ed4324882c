//! Stored results against the digests their events chained. An event that recorded a result
//! carries `result_ref` (`results/<execution>/<attempt>`) and `result_digest`
//! (`sha256:<hex>` of the body); the body itself lives beside the chain. A body changed after
//! the fact, or removed, is a break at the event that vouched for it.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::chain::ChainedEvent;
use crate::verify::{Break, BreakReason};

/// What the events expect of the stored results, and what was found.
#[derive(Default)]
pub struct ResultCheck {
    /// result_ref → (result_digest, chain, seq, found).
    expected: BTreeMap<String, (String, String, u64, bool)>,
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
        self.expected.insert(
            reference.to_string(),
            (digest.to_string(), e.body.chain.clone(), e.body.seq, false),
        );
    }

    /// One stored result body. A body no event vouches for is left alone (it is not evidence).
    pub fn stored(&mut self, reference: &str, body: &[u8]) {
        let Some((digest, chain, seq, found)) = self.expected.get_mut(reference) else {
            return;
        };
        *found = true;
        let actual = format!(
            "sha256:{}",
            postern_core::hexdigits::encode(Sha256::digest(body))
        );
        if actual != *digest {
            self.breaks.push(Break {
                chain: Some(chain.clone()),
                seq: Some(*seq),
                reason: BreakReason::ResultMismatch {
                    reference: reference.to_string(),
                },
            });
        }
    }

    /// The breaks found: changed bodies, and vouched-for results that are not stored.
    pub fn finish(mut self) -> Vec<Break> {
        for (reference, (_, chain, seq, found)) in self.expected {
            if !found {
                self.breaks.push(Break {
                    chain: Some(chain),
                    seq: Some(seq),
                    reason: BreakReason::ResultMissing { reference },
                });
            }
        }
        self.breaks
    }
}
