//! The ranges retention pruned, as verification goes across them: the validly signed ones, by
//! chain and first seq, and how many events and ranges the verified links crossed. A range
//! joins the events on either side of it, extends a chain past its last event, and vouches for
//! the checkpoints pruned with it.

use std::collections::{BTreeMap, HashMap};

use super::ChainState;
use crate::breaks::{Break, BreakReason};
use crate::chain::{CheckpointLink, VerifyingKey, GENESIS_HASH};
use crate::pruned::PrunedRange;

/// The validly signed pruned ranges, and what the links crossed of them.
#[derive(Default)]
pub(super) struct PrunedRanges {
    /// Validly signed pruned ranges, by chain and first seq.
    signed: HashMap<(String, u64), PrunedRange>,
    /// Events and ranges the verified links went across.
    events: u64,
    ranges: u64,
}

impl PrunedRanges {
    /// A range pruned by retention: kept when `key` signed it. One without a valid signature
    /// is a break (returned), and explains nothing.
    pub(super) fn admit(&mut self, r: PrunedRange, key: &VerifyingKey) -> Option<Break> {
        if !r.is_signed_by(key) || r.is_empty() {
            return Some(Break {
                chain: Some(r.chain.clone()),
                seq: Some(r.from),
                reason: BreakReason::PrunedRangeUnsigned { to: r.to },
            });
        }
        self.signed.insert((r.chain.clone(), r.from), r);
        None
    }

    /// Whether a signed pruned range joins event `seq` of `chain` (carrying `prev_hash`) to
    /// the one before it, `after` (its seq and hash; 0 and the genesis hash for none). A range
    /// that does is counted as crossed.
    pub(super) fn bridge(
        &mut self,
        chain: &str,
        after: (u64, [u8; 32]),
        seq: u64,
        prev_hash: &[u8; 32],
    ) -> bool {
        // (Most stores have no pruned range: no key is built for them.)
        let crossed = (!self.signed.is_empty())
            .then(|| self.signed.get(&(chain.to_string(), after.0 + 1)))
            .flatten()
            .filter(|r| r.to + 1 == seq && r.before_hash == after.1 && r.to_hash == *prev_hash)
            .map(PrunedRange::len);
        if let Some(events) = crossed {
            self.events += events;
            self.ranges += 1;
        }
        crossed.is_some()
    }

    /// Ranges pruned at a chain's end (or a whole chain's events): nothing after them links
    /// to them, so they extend the chain from its last event.
    pub(super) fn follow_tails(&mut self, chains: &mut BTreeMap<String, ChainState>) {
        let mut names: Vec<String> = self.signed.keys().map(|(c, _)| c.clone()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let state = chains.entry(name.clone()).or_default();
            while let Some(r) = self
                .signed
                .get(&(name.clone(), state.last.unwrap_or(0) + 1))
                .filter(|r| r.before_hash == state.last_hash.unwrap_or(GENESIS_HASH))
            {
                state.first.get_or_insert(1);
                state.last = Some(r.to);
                state.last_hash = Some(r.to_hash);
                self.events += r.len();
                self.ranges += 1;
            }
        }
    }

    /// For a checkpoint (or a link naming one) whose seq lies in a pruned range: whether it
    /// matches what the range says (its last hash, the only one left); `None` when no range
    /// holds the seq.
    pub(super) fn holding(&self, chain: &str, seq: u64, head_hash: &[u8; 32]) -> Option<bool> {
        self.signed
            .values()
            .find(|r| r.chain == chain && r.from <= seq && seq <= r.to)
            .map(|r| seq != r.to || *head_hash == r.to_hash)
    }

    /// Whether a checkpoint link names a place retention pruned (the range's signature
    /// vouches for what was there).
    pub(super) fn vouch_for_link(&self, chain: &str, p: CheckpointLink) -> bool {
        self.holding(chain, p.seq, &p.head_hash) == Some(true)
    }

    /// The events, and the ranges, the verified links went across.
    pub(super) fn crossed(&self) -> (u64, u64) {
        (self.events, self.ranges)
    }
}
