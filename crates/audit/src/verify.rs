//! Offline verification, in the manner of CloudTrail's validate-logs: feed rows in chain order,
//! get a report of the range requested and covered, every break with its reason and place, and
//! totals.

use std::collections::{BTreeMap, HashMap};

use postern_core::lifecycle::EventKind;
use postern_core::{ExecutionId, Timestamp};

pub use crate::breaks::{Break, BreakReason};
use crate::chain::ChainHead;
use crate::chain::{event_hash, ChainedEvent, Checkpoint, VerifyingKey, GENESIS_HASH};
use crate::pruned::PrunedRange;
use crate::seqs::SeqHashes;
use executions::Executions;
use pruned_ranges::PrunedRanges;
pub use report::{ChainRange, Report, UnsignedTail};

mod coverage;
mod executions;
mod pruned_ranges;
mod report;
mod signatures;

#[derive(Default)]
struct ChainState {
    first: Option<u64>,
    last: Option<u64>,
    last_hash: Option<[u8; 32]>,
    /// A skip that a later, lower seq may still explain as a reorder.
    pending_gap: Option<(u64, u64)>,
    hashes: SeqHashes,
    events: u64,
    /// The highest seq a checkpoint fed so far names (signature not yet checked).
    checkpointed_to: u64,
    /// When unsigned history is refused: each event past `checkpointed_to` as it came, with
    /// its time (few: the young tail, unless checkpoints were deleted).
    late: Vec<(u64, Timestamp)>,
}

/// What the verifier needs of one event (its detail is only needed to check its hash).
#[derive(Clone, Copy, Debug)]
pub struct EventMeta<'a> {
    pub chain: &'a str,
    pub seq: u64,
    pub execution_id: ExecutionId,
    pub n: u32,
    pub event: EventKind,
    pub at: Timestamp,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

impl<'a> EventMeta<'a> {
    pub fn of(e: &'a ChainedEvent) -> EventMeta<'a> {
        EventMeta {
            chain: &e.body.chain,
            seq: e.body.seq,
            execution_id: e.body.execution_id,
            n: e.body.n,
            event: e.body.event,
            at: e.body.at,
            prev_hash: e.prev_hash,
            hash: e.hash,
        }
    }
}

/// Streams rows in, then [`Verifier::finish`] for the report.
pub struct Verifier {
    key: VerifyingKey,
    requested: Vec<ChainRange>,
    chains: BTreeMap<String, ChainState>,
    executions: Executions,
    checkpoints: Vec<Checkpoint>,
    breaks: Vec<Break>,
    /// Heads recorded outside the log (chain, seq, hash) it must still contain.
    anchors: Vec<(String, u64, [u8; 32])>,
    /// Validly signed pruned ranges, and the events and ranges the verified links went across.
    pruned: PrunedRanges,
    /// The heads a validly signed export header names; `Some(None)`: a signed header that
    /// names none.
    signed_heads: Option<Option<Vec<ChainHead>>>,
    /// Events older than `window` ms before `reference` must be covered by a valid signature.
    signed_before: Option<(Timestamp, i64)>,
    /// Per chain, the highest seq a fed checkpoint names.
    checkpointed_to: HashMap<String, u64>,
    /// Checkpoints a witness outside the store holds.
    witnessed: Vec<Checkpoint>,
}

impl Verifier {
    pub fn new(key: VerifyingKey) -> Verifier {
        Verifier {
            key,
            requested: Vec::new(),
            chains: BTreeMap::new(),
            executions: Executions::default(),
            checkpoints: Vec::new(),
            breaks: Vec::new(),
            anchors: Vec::new(),
            pruned: PrunedRanges::default(),
            signed_heads: None,
            signed_before: None,
            checkpointed_to: HashMap::new(),
            witnessed: Vec::new(),
        }
    }

    /// Refuses unsigned history: every event written more than `window_ms` before
    /// `reference` (now, or an export's time) must be covered by a valid checkpoint or signed
    /// head. A gateway signs its head every `checkpoint_every`, so older unsigned events mean
    /// deleted checkpoints or events written without it.
    pub fn require_signed_within(&mut self, window_ms: i64, reference: Timestamp) {
        self.signed_before = Some((reference, window_ms));
    }

    /// The time the log is judged as of (an export's `exported_at`), when unsigned history
    /// is refused.
    pub fn reference_time(&mut self, at: Timestamp) {
        if let Some((reference, _)) = &mut self.signed_before {
            *reference = at;
        }
    }

    /// A checkpoint kept by a witness outside the store: it counts as a checkpoint (its head
    /// must be in the log), and the log must still hold it among its own checkpoints.
    pub fn witnessed(&mut self, c: &Checkpoint) {
        self.note_checkpoint(c);
        self.witnessed.push(c.clone());
    }

    fn note_checkpoint(&mut self, c: &Checkpoint) {
        let to = self.checkpointed_to.entry(c.chain.clone()).or_insert(0);
        *to = (*to).max(c.seq);
        if let Some(chain) = self.chains.get_mut(&c.chain) {
            chain.checkpointed_to = chain.checkpointed_to.max(c.seq);
        }
    }

    /// The heads named by an export header the verifier's key signed: the log must end
    /// exactly at each, with that hash, and they vouch for every event up to them.
    pub fn signed_heads(&mut self, heads: Option<Vec<ChainHead>>) {
        self.signed_heads = Some(heads);
    }

    /// A range pruned by retention (before the chain's events are fed). One without a valid
    /// signature of the verifier's key is a break, and explains nothing.
    pub fn pruned(&mut self, r: PrunedRange) {
        if let Some(unsigned) = self.pruned.admit(r, &self.key) {
            self.breaks.push(unsigned);
        }
    }

    /// Declares a head recorded elsewhere (an anchor): the log must hold `hash` at `seq` of
    /// `chain`. Unlike a checkpoint, an anchor kept outside the store also catches a rewrite by
    /// someone holding the signing key.
    pub fn expect_head(&mut self, chain: String, seq: u64, hash: [u8; 32]) {
        self.anchors.push((chain, seq, hash));
    }

    /// Declares a range the log should contain (from an export's header or the caller).
    pub fn request(&mut self, range: ChainRange) {
        self.requested.push(range);
    }

    /// The key checkpoints (and an export's header) must be signed with.
    pub fn key(&self) -> VerifyingKey {
        self.key
    }

    /// An export's header line: its ranges count only if the verifier's key signed it.
    pub fn header(&mut self, line: u64, signed_by_key: bool, has_signature: bool) {
        if !signed_by_key {
            self.breaks.push(Break {
                chain: None,
                seq: None,
                reason: BreakReason::HeaderNotSigned {
                    line,
                    has_signature,
                },
            });
        }
    }

    pub fn malformed(&mut self, line: u64, reason: String) {
        self.breaks.push(Break {
            chain: None,
            seq: None,
            reason: BreakReason::Malformed { line, reason },
        });
    }

    /// One event, in the order the log holds it.
    pub fn event(&mut self, e: &ChainedEvent) {
        let intact = event_hash(&e.prev_hash, &e.body).is_ok_and(|h| h == e.hash);
        self.event_checked(&EventMeta::of(e), intact);
    }

    /// One event whose own hash was already checked (`intact`), e.g. on another thread.
    pub fn event_checked(&mut self, e: &EventMeta<'_>, intact: bool) {
        let b = e;
        if !self.chains.contains_key(b.chain) {
            let checkpointed_to = self.checkpointed_to.get(b.chain).copied().unwrap_or(0);
            self.chains.insert(
                b.chain.to_string(),
                ChainState {
                    checkpointed_to,
                    ..ChainState::default()
                },
            );
        }
        let Some(chain) = self.chains.get_mut(b.chain) else {
            return;
        };
        let brk = |reason| Break {
            chain: Some(b.chain.to_string()),
            seq: Some(b.seq),
            reason,
        };
        chain.events += 1;
        chain.first = Some(chain.first.map_or(b.seq, |f| f.min(b.seq)));
        if self.signed_before.is_some() && b.seq > chain.checkpointed_to {
            chain.late.push((b.seq, b.at));
        }
        if !intact {
            self.breaks.push(brk(BreakReason::HashMismatch));
        }
        let mut linked_in_order = true;
        // A signed pruned range that joins this event to the one before it (or to genesis).
        let after = chain.last.map_or((0, GENESIS_HASH), |l| {
            (l, chain.last_hash.unwrap_or(GENESIS_HASH))
        });
        let bridged = self.pruned.bridge(b.chain, after, b.seq, &e.prev_hash);
        match chain.last {
            _ if bridged => {
                if chain.last.is_none() {
                    chain.first = Some(1);
                }
            }
            None if b.seq != 1
                && !self
                    .requested
                    .iter()
                    .any(|r| r.chain == b.chain && r.from == b.seq) =>
            {
                self.breaks.push(brk(BreakReason::Gap { expected: 1 }));
                linked_in_order = false;
            }
            None => {
                if b.seq == 1 && e.prev_hash != GENESIS_HASH {
                    self.breaks.push(brk(BreakReason::PrevHashMismatch));
                }
            }
            Some(last) if b.seq == last + 1 => {
                if chain.last_hash != Some(e.prev_hash) {
                    self.breaks.push(brk(BreakReason::PrevHashMismatch));
                }
            }
            Some(last) if b.seq > last + 1 => {
                if let Some((expected, at)) = chain.pending_gap.replace((last + 1, b.seq)) {
                    self.breaks.push(Break {
                        chain: Some(b.chain.to_string()),
                        seq: Some(at),
                        reason: BreakReason::Gap { expected },
                    });
                }
                linked_in_order = false;
            }
            Some(last) if b.seq == last || chain.hashes.contains(b.seq) => {
                self.breaks.push(brk(BreakReason::Duplicate));
                return;
            }
            Some(last) => {
                // Lower than the last one: a move, not a loss, if it fills the pending skip.
                if chain
                    .pending_gap
                    .is_some_and(|(expected, _)| expected == b.seq)
                {
                    chain.pending_gap = None;
                }
                self.breaks.push(brk(BreakReason::Reorder { after: last }));
                linked_in_order = false;
            }
        }
        if linked_in_order || chain.last.is_none_or(|l| b.seq > l) {
            chain.last = Some(b.seq);
            chain.last_hash = Some(e.hash);
        }
        chain.hashes.insert(b.seq, e.hash);
        self.executions.fold(e, &mut self.breaks);
    }

    /// One signed checkpoint.
    pub fn checkpoint(&mut self, c: &Checkpoint) {
        self.note_checkpoint(c);
        self.checkpoints.push(c.clone());
    }

    pub fn finish(mut self) -> Report {
        self.pruned.follow_tails(&mut self.chains);
        let checkpoints = self.checkpoints.len() as u64;
        let (valid_signatures, mut signed) = self.check_checkpoints();
        let header_without_heads = matches!(self.signed_heads, Some(None));
        self.check_signed_heads(&mut signed);
        // The order the breaks are found in is kept among those at one place (the sort below
        // is stable), so the steps run in this order.
        self.report_pending_gaps();
        self.check_requested(&signed);
        self.check_anchors();
        self.executions.report_incomplete(&mut self.breaks);
        let covered = self.covered();
        let unsigned_chains = self
            .chains
            .keys()
            .filter(|c| !signed.contains_key(*c))
            .cloned()
            .collect();
        let unsigned_tail = self.unsigned_tail(&signed);
        self.check_unsigned_history(&signed);
        self.breaks
            .sort_by(|a, b| (&a.chain, a.seq).cmp(&(&b.chain, b.seq)));
        let (pruned_events, pruned_ranges) = self.pruned.crossed();
        Report {
            requested: self.requested,
            covered,
            breaks: self.breaks,
            events: self.chains.values().map(|c| c.events).sum(),
            checkpoints,
            valid_signatures,
            executions: self.executions.len() as u64,
            unsigned_chains,
            unsigned_tail,
            pruned_events,
            pruned_ranges,
            header_without_heads,
        }
    }
}
