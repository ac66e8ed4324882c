//! The checks run once the whole log is in: what it covers against what was asked of it (the
//! requested ranges, the anchors, the heads a signed export header names), the skips no later
//! event explained, and per chain the events no signature vouches for.

use std::collections::BTreeMap;

use super::{ChainRange, UnsignedTail, Verifier};
use crate::breaks::{Break, BreakReason};

impl Verifier {
    /// Skips that no later, lower seq explained as a reorder: events are missing.
    pub(super) fn report_pending_gaps(&mut self) {
        for (name, chain) in &self.chains {
            if let Some((expected, at)) = chain.pending_gap {
                self.breaks.push(Break {
                    chain: Some(name.clone()),
                    seq: Some(at),
                    reason: BreakReason::Gap { expected },
                });
            }
        }
    }

    /// Each requested range must be present, or vouched for by a signature (`signed`).
    pub(super) fn check_requested(&mut self, signed: &BTreeMap<String, u64>) {
        for r in &self.requested {
            let last = self.chains.get(&r.chain).and_then(|c| c.last);
            let behind_checkpoint = signed.get(&r.chain).is_some_and(|s| *s >= r.to);
            if last.is_none_or(|l| l < r.to) && !behind_checkpoint {
                self.breaks.push(Break {
                    chain: Some(r.chain.clone()),
                    seq: Some(r.to),
                    reason: BreakReason::RangeNotCovered { last_seq: last },
                });
            }
        }
    }

    /// Each head recorded elsewhere must be in the log with its hash.
    pub(super) fn check_anchors(&mut self) {
        for (chain, seq, hash) in std::mem::take(&mut self.anchors) {
            let found = self
                .chains
                .get(&chain)
                .and_then(|c| c.hashes.get(seq))
                .copied();
            if found != Some(hash) {
                self.breaks.push(Break {
                    chain: Some(chain),
                    seq: Some(seq),
                    reason: BreakReason::AnchorMismatch {
                        expected_hash: postern_core::hexdigits::encode(hash),
                        found: found.map(postern_core::hexdigits::encode),
                    },
                });
            }
        }
    }

    /// The run each chain covers, first to last seq.
    pub(super) fn covered(&self) -> Vec<ChainRange> {
        self.chains
            .iter()
            .filter_map(|(name, c)| {
                Some(ChainRange {
                    chain: name.clone(),
                    from: c.first?,
                    to: c.last?,
                })
            })
            .collect()
    }

    /// Per chain, the events past the last seq a valid signature vouches for (`signed`).
    pub(super) fn unsigned_tail(&self, signed: &BTreeMap<String, u64>) -> Vec<UnsignedTail> {
        self.chains
            .iter()
            .filter_map(|(name, c)| {
                let signed_to = signed.get(name).copied();
                let events = match signed_to {
                    Some(s) => c.hashes.seqs().filter(|&seq| seq > s).count() as u64,
                    None => c.hashes.len() as u64,
                };
                (events > 0).then(|| UnsignedTail {
                    chain: name.clone(),
                    signed_to,
                    events,
                })
            })
            .collect()
    }

    /// Holds the log to the heads a signed export header names: each chain must end exactly
    /// at its head, with its hash, and no other chain may appear. A head that holds counts as
    /// signed coverage up to it (in `signed`), like a checkpoint.
    pub(super) fn check_signed_heads(&mut self, signed: &mut BTreeMap<String, u64>) {
        let Some(Some(heads)) = self.signed_heads.take() else {
            return;
        };
        for h in &heads {
            let brk = |seq, reason| Break {
                chain: Some(h.chain.clone()),
                seq: Some(seq),
                reason,
            };
            let chain = self.chains.get(&h.chain);
            let last = chain.and_then(|c| c.last);
            match chain.and_then(|c| c.hashes.get(h.seq)) {
                Some(found) if *found == h.hash => {
                    let entry = signed.entry(h.chain.clone()).or_insert(0);
                    *entry = (*entry).max(h.seq);
                }
                Some(found) => self.breaks.push(brk(
                    h.seq,
                    BreakReason::SignedHeadMismatch {
                        expected_hash: postern_core::hexdigits::encode(h.hash),
                        found: postern_core::hexdigits::encode(found),
                    },
                )),
                // A head inside a pruned range cannot be: retention never prunes a head.
                None => self.breaks.push(brk(
                    h.seq,
                    BreakReason::EndsBeforeSignedHead { last_seq: last },
                )),
            }
            if let Some(past) = chain.and_then(|c| c.hashes.seqs().filter(|s| *s > h.seq).min()) {
                self.breaks
                    .push(brk(past, BreakReason::PastSignedHead { head: Some(h.seq) }));
            }
        }
        for (name, chain) in &self.chains {
            if !heads.iter().any(|h| h.chain == *name) {
                let first = chain.hashes.seqs().min();
                self.breaks.push(Break {
                    chain: Some(name.clone()),
                    seq: first,
                    reason: BreakReason::PastSignedHead { head: None },
                });
            }
        }
    }
}
