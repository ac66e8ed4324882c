//! The signatures' side of verification (issue 47): each checkpoint's signer and head, the
//! chain checkpoints form (a deleted one is a gap), the checkpoints a witness holds, and the
//! events old enough that a signature must cover them.

use std::collections::BTreeMap;

use postern_core::Timestamp;

use super::Verifier;
use crate::breaks::{Break, BreakReason};
use crate::chain::Checkpoint;

/// Sorts checkpoints by chain and seq and drops repeats (a witnessed one also in the log);
/// how many are left.
fn dedup_checkpoints(valid: &mut Vec<&Checkpoint>) -> usize {
    valid.sort_by(|a, b| (&a.chain, a.seq).cmp(&(&b.chain, b.seq)));
    valid.dedup_by(|a, b| a == b);
    valid.len()
}

impl Verifier {
    /// Checks every checkpoint's signer, signature and head hash: how many are validly
    /// signed, and per chain the highest seq a valid signature vouches for.
    pub(super) fn check_checkpoints(&mut self) -> (u64, BTreeMap<String, u64>) {
        let mut valid_signatures = 0;
        let mut signed: BTreeMap<String, u64> = BTreeMap::new();
        let stored = std::mem::take(&mut self.checkpoints);
        let mut valid: Vec<&Checkpoint> = Vec::with_capacity(stored.len());
        self.check_witnessed(&stored);
        let witnessed = std::mem::take(&mut self.witnessed);
        for c in stored.iter().chain(&witnessed) {
            let brk = |reason| Break {
                chain: Some(c.chain.clone()),
                seq: Some(c.seq),
                reason,
            };
            if c.key_id != self.key.key_id() {
                self.breaks.push(brk(BreakReason::UnknownSigner {
                    key_id: c.key_id.clone(),
                }));
                continue;
            }
            if !self.key.verifies(c) {
                self.breaks.push(brk(BreakReason::BadSignature));
                continue;
            }
            valid_signatures += 1;
            valid.push(c);
            let entry = signed.entry(c.chain.clone()).or_insert(0);
            *entry = (*entry).max(c.seq);
            if let Some(reason) = self.checkpoint_head(c) {
                self.breaks.push(brk(reason));
            }
        }
        // A witnessed checkpoint that is also in the log counts once.
        let with_repeats = valid.len();
        valid_signatures -= (with_repeats - dedup_checkpoints(&mut valid)) as u64;
        // Links are followed through every checkpoint there is: one with a bad signature is
        // already a break of its own, not also a gap.
        let mut all: Vec<&Checkpoint> = stored.iter().chain(&witnessed).collect();
        dedup_checkpoints(&mut all);
        self.check_checkpoint_links(&all);
        (valid_signatures, signed)
    }

    /// Each witnessed checkpoint must still be among the log's own checkpoints, unless the log
    /// ends before it (an export made earlier) or retention pruned its place.
    fn check_witnessed(&mut self, stored: &[Checkpoint]) {
        for w in &self.witnessed {
            let ends_before = self
                .chains
                .get(&w.chain)
                .and_then(|c| c.last)
                .is_none_or(|last| last < w.seq);
            let kept = stored.iter().any(|c| c == w);
            if !kept && !ends_before && self.pruned.holding(&w.chain, w.seq, &w.head_hash).is_none()
            {
                self.breaks.push(Break {
                    chain: Some(w.chain.clone()),
                    seq: Some(w.seq),
                    reason: BreakReason::WitnessedCheckpointMissing,
                });
            }
        }
    }

    /// Checkpoints form one chain per audit chain: each names the one before it. A
    /// named one that is missing is a deleted checkpoint, unless retention pruned its place
    /// (pruning removes the checkpoints inside a range; the range's signature vouches).
    fn check_checkpoint_links(&mut self, valid: &[&Checkpoint]) {
        let mut previous: Option<&Checkpoint> = None;
        for c in valid {
            let before = previous.filter(|p| p.chain == c.chain);
            previous = Some(c);
            let linked = match (c.prev, before) {
                (Some(p), Some(b)) => p == b.link(),
                // Pruned with its range: the range's signed last hash vouches for it.
                (Some(p), None) => self.pruned.vouch_for_link(&c.chain, p),
                (None, None) => true,
                // Signed before checkpoints were chained: nothing to hold it to, unless the
                // one before it was chained (a chain never goes back to unchained).
                (None, Some(b)) => b.prev.is_none(),
            };
            let pruned_between = match (c.prev, before) {
                (Some(p), Some(b)) => p.seq > b.seq && self.pruned.vouch_for_link(&c.chain, p),
                _ => false,
            };
            if !linked && !pruned_between {
                self.breaks.push(Break {
                    chain: Some(c.chain.clone()),
                    seq: Some(c.seq),
                    reason: BreakReason::CheckpointChainBroken {
                        named: c.prev.map(|p| p.seq),
                        found: before.map(|b| b.seq),
                    },
                });
            }
        }
    }

    /// Events older than the cutoff that no signature covers are a break, one per chain.
    pub(super) fn check_unsigned_history(&mut self, signed: &BTreeMap<String, u64>) {
        let Some((reference, window)) = self.signed_before else {
            return;
        };
        let cutoff = Timestamp(reference.0.saturating_sub(window));
        for (name, chain) in &self.chains {
            let signed_to = signed.get(name).copied().unwrap_or(0);
            let old: Vec<&(u64, Timestamp)> = chain
                .late
                .iter()
                .filter(|(seq, at)| *seq > signed_to && *at < cutoff)
                .collect();
            let Some(first) = old.iter().map(|(seq, _)| *seq).min() else {
                continue;
            };
            let oldest_at = old.iter().map(|(_, at)| at.0).min().unwrap_or_default();
            self.breaks.push(Break {
                chain: Some(name.clone()),
                seq: Some(first),
                reason: BreakReason::UnsignedHistory {
                    events: old.len() as u64,
                    oldest_at,
                },
            });
        }
    }

    /// What is wrong with a validly signed checkpoint's head, if anything: another hash at
    /// its seq, or no event there at all.
    fn checkpoint_head(&self, c: &Checkpoint) -> Option<BreakReason> {
        let chain = self.chains.get(&c.chain);
        match chain.and_then(|ch| ch.hashes.get(c.seq)) {
            Some(h) if *h == c.head_hash => None,
            Some(_) => Some(BreakReason::CheckpointMismatch),
            // Inside a pruned range only its last hash is left to compare with.
            None => match self.pruned.holding(&c.chain, c.seq, &c.head_hash) {
                Some(true) => None,
                Some(false) => Some(BreakReason::CheckpointMismatch),
                None => Some(BreakReason::Truncated {
                    last_seq: chain.and_then(|ch| ch.last),
                }),
            },
        }
    }
}
