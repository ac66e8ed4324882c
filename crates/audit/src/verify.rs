//! Offline verification, in the manner of CloudTrail's validate-logs: feed rows in chain order,
//! get a report of the range requested and covered, every break with its reason and place, and
//! totals.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use postern_core::lifecycle::{EventKind, Lifecycle};
use postern_core::{ExecutionId, Timestamp};
use serde::{Deserialize, Serialize};

pub use crate::breaks::{Break, BreakReason};
use crate::chain::ChainHead;
use crate::chain::{event_hash, ChainedEvent, Checkpoint, VerifyingKey, GENESIS_HASH};
use crate::fold::FoldMap;
use crate::pruned::PrunedRange;
use crate::seqs::SeqHashes;

mod signatures;

/// A contiguous run of one chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRange {
    pub chain: String,
    pub from: u64,
    pub to: u64,
}

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

#[derive(Default)]
struct ExecutionState {
    next_n: u32,
    lifecycle: Option<Lifecycle>,
    /// Events that arrived ahead of their turn (possible when an execution spans chains).
    waiting: BTreeMap<u32, (EventKind, String, u64)>,
}

impl ExecutionState {
    /// Folds the execution's next event; what was refused, if anything. A refused event is
    /// skipped (the state stays), so one bad event is one break.
    fn advance(&mut self, event: EventKind) -> Option<Refused> {
        self.next_n += 1;
        match Lifecycle::step(self.lifecycle, event) {
            Ok(l) => {
                self.lifecycle = Some(l);
                None
            }
            Err(e) => Some(Refused(e)),
        }
    }
}

struct Refused(postern_core::lifecycle::TransitionError);

impl Refused {
    fn of(self, execution_id: ExecutionId) -> BreakReason {
        BreakReason::ImpossibleTransition {
            execution_id,
            from: self.0.from,
            event: self.0.event,
            after_earlier_dispatch: self.0.unmet.is_some(),
        }
    }
}

/// The verification result.
#[derive(Clone, Debug)]
pub struct Report {
    pub requested: Vec<ChainRange>,
    pub covered: Vec<ChainRange>,
    pub breaks: Vec<Break>,
    pub events: u64,
    pub checkpoints: u64,
    pub valid_signatures: u64,
    pub executions: u64,
    /// Chains no signed checkpoint covers: truncation of their tail cannot be ruled out.
    pub unsigned_chains: Vec<String>,
    /// Per chain, the events after its last validly signed checkpoint: nothing vouches for
    /// them, so a cut of them (with any checkpoint after them) would not be seen.
    pub unsigned_tail: Vec<UnsignedTail>,
    /// Events removed by retention whose signed pruned ranges the links went across: their
    /// contents are gone, the chain around them verified.
    pub pruned_events: u64,
    pub pruned_ranges: u64,
    /// An export whose signed header names no chain heads (written before they were): only
    /// checkpoints vouch for its events.
    pub header_without_heads: bool,
}

/// The events of one chain that no valid signature covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsignedTail {
    pub chain: String,
    /// The seq of the last validly signed checkpoint, if any.
    pub signed_to: Option<u64>,
    pub events: u64,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.breaks.is_empty()
    }

    /// Adds breaks found beside the chain (stored results), in the report's order.
    pub fn add_breaks(&mut self, breaks: Vec<Break>) {
        self.breaks.extend(breaks);
        self.breaks
            .sort_by(|a, b| (&a.chain, a.seq).cmp(&(&b.chain, b.seq)));
    }

    /// How many events, over all chains, no valid signature covers.
    pub fn unsigned_tail_events(&self) -> u64 {
        self.unsigned_tail.iter().map(|t| t.events).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranges = |r: &[ChainRange]| {
            if r.is_empty() {
                "(none)".to_string()
            } else {
                r.iter()
                    .map(|r| format!("chain {} seq {}..{}", r.chain, r.from, r.to))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        writeln!(f, "Range requested: {}", ranges(&self.requested))?;
        writeln!(f, "Range covered:   {}", ranges(&self.covered))?;
        for b in &self.breaks {
            writeln!(f, "BREAK {b}")?;
        }
        if self.header_without_heads {
            writeln!(f, "note: the export header names no chain heads (an export from before they were signed): only signed checkpoints vouch for its events")?;
        }
        for c in &self.unsigned_chains {
            writeln!(f, "note: no signed checkpoint covers chain {c}: truncation of its tail cannot be ruled out")?;
        }
        for t in self.unsigned_tail.iter().filter(|t| t.signed_to.is_some()) {
            writeln!(
                f,
                "note: {} event(s) of chain {} after the last signed checkpoint (seq {}) are not covered by a signature: a cut of them would not be seen",
                t.events,
                t.chain,
                t.signed_to.unwrap_or(0)
            )?;
        }
        if self.pruned_events > 0 {
            writeln!(
                f,
                "note: {} event(s) in {} range(s) were pruned by retention (signed pruned-range statements): the chain links across them, their contents are gone",
                self.pruned_events, self.pruned_ranges
            )?;
        }
        writeln!(
            f,
            "Results: {} events in {} chain(s), {} executions; {} checkpoint(s), {} with a valid signature",
            self.events,
            self.covered.len(),
            self.executions,
            self.checkpoints,
            self.valid_signatures
        )?;
        if self.is_valid() {
            write!(
                f,
                "VALID: every event links, hashes and follows the lifecycle"
            )
        } else {
            write!(f, "INVALID: {} break(s)", self.breaks.len())
        }
    }
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
    executions: FoldMap<ExecutionId, ExecutionState>,
    checkpoints: Vec<Checkpoint>,
    breaks: Vec<Break>,
    /// Heads recorded outside the log (chain, seq, hash) it must still contain.
    anchors: Vec<(String, u64, [u8; 32])>,
    /// Validly signed pruned ranges, by chain and first seq.
    pruned: HashMap<(String, u64), PrunedRange>,
    /// Events and ranges the verified links went across.
    pruned_events: u64,
    pruned_ranges: u64,
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
            executions: FoldMap::default(),
            checkpoints: Vec::new(),
            breaks: Vec::new(),
            anchors: Vec::new(),
            pruned: HashMap::new(),
            pruned_events: 0,
            pruned_ranges: 0,
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
        if !r.is_signed_by(&self.key) || r.is_empty() {
            self.breaks.push(Break {
                chain: Some(r.chain.clone()),
                seq: Some(r.from),
                reason: BreakReason::PrunedRangeUnsigned { to: r.to },
            });
            return;
        }
        self.pruned.insert((r.chain.clone(), r.from), r);
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
        // (Most stores have no pruned range: no key is built for them.)
        let bridge = (!self.pruned.is_empty())
            .then(|| self.pruned.get(&(b.chain.to_string(), after.0 + 1)))
            .flatten()
            .filter(|r| r.to + 1 == b.seq && r.before_hash == after.1 && r.to_hash == e.prev_hash)
            .map(PrunedRange::len);
        match chain.last {
            _ if bridge.is_some() => {
                self.pruned_events += bridge.unwrap_or(0);
                self.pruned_ranges += 1;
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
        self.lifecycle(e);
    }

    fn lifecycle(&mut self, e: &EventMeta<'_>) {
        let b = e;
        // A notice is chained like any event but belongs to no execution's lifecycle; it is
        // its own id's only event.
        if b.event == EventKind::Notice {
            if b.n != 1 {
                self.breaks.push(Break {
                    chain: Some(b.chain.to_string()),
                    seq: Some(b.seq),
                    reason: BreakReason::Malformed {
                        line: 0,
                        reason: format!("notice {} is not event 1 of its id", b.execution_id),
                    },
                });
            }
            return;
        }
        let ex = self
            .executions
            .entry(b.execution_id)
            .or_insert_with(|| ExecutionState {
                next_n: 1,
                ..Default::default()
            });
        if b.n == ex.next_n && ex.waiting.is_empty() {
            // The common case: the execution's next event, in order.
            let refused = ex.advance(b.event);
            if let Some(reason) = refused {
                self.breaks.push(Break {
                    chain: Some(b.chain.to_string()),
                    seq: Some(b.seq),
                    reason: reason.of(b.execution_id),
                });
            }
            return;
        }
        ex.waiting
            .insert(b.n, (b.event, b.chain.to_string(), b.seq));
        while let Some((event, chain, seq)) = ex.waiting.remove(&ex.next_n) {
            if let Some(reason) = ex.advance(event) {
                self.breaks.push(Break {
                    chain: Some(chain),
                    seq: Some(seq),
                    reason: reason.of(b.execution_id),
                });
            }
        }
    }

    /// One signed checkpoint.
    pub fn checkpoint(&mut self, c: &Checkpoint) {
        self.note_checkpoint(c);
        self.checkpoints.push(c.clone());
    }

    /// Ranges pruned at a chain's end (or a whole chain's events): nothing after them links
    /// to them, so they extend the chain from its last event.
    fn follow_tail_ranges(&mut self) {
        let mut names: Vec<String> = self.pruned.keys().map(|(c, _)| c.clone()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let state = self.chains.entry(name.clone()).or_default();
            while let Some(r) = self
                .pruned
                .get(&(name.clone(), state.last.unwrap_or(0) + 1))
                .filter(|r| r.before_hash == state.last_hash.unwrap_or(GENESIS_HASH))
            {
                state.first.get_or_insert(1);
                state.last = Some(r.to);
                state.last_hash = Some(r.to_hash);
                self.pruned_events += r.len();
                self.pruned_ranges += 1;
            }
        }
    }

    pub fn finish(mut self) -> Report {
        self.follow_tail_ranges();
        let checkpoints = self.checkpoints.len() as u64;
        let (valid_signatures, mut signed) = self.check_checkpoints();
        let header_without_heads = matches!(self.signed_heads, Some(None));
        self.check_signed_heads(&mut signed);
        // The order the breaks are found in is kept among those at one place (the sort below
        // is stable), so the steps run in this order.
        self.report_pending_gaps();
        self.check_requested(&signed);
        self.check_anchors();
        self.report_incomplete_executions();
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
            pruned_events: self.pruned_events,
            pruned_ranges: self.pruned_ranges,
            header_without_heads,
        }
    }

    /// Skips that no later, lower seq explained as a reorder: events are missing.
    fn report_pending_gaps(&mut self) {
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
    fn check_requested(&mut self, signed: &BTreeMap<String, u64>) {
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
    fn check_anchors(&mut self) {
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

    /// Executions still waiting for an event at the end: that event is missing.
    fn report_incomplete_executions(&mut self) {
        for (id, ex) in &self.executions {
            if !ex.waiting.is_empty() {
                self.breaks.push(Break {
                    chain: None,
                    seq: None,
                    reason: BreakReason::MissingExecutionEvent {
                        execution_id: *id,
                        expected_n: ex.next_n,
                    },
                });
            }
        }
    }

    /// The run each chain covers, first to last seq.
    fn covered(&self) -> Vec<ChainRange> {
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
    fn unsigned_tail(&self, signed: &BTreeMap<String, u64>) -> Vec<UnsignedTail> {
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
    fn check_signed_heads(&mut self, signed: &mut BTreeMap<String, u64>) {
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
