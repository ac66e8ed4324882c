//! The verification report: the ranges requested and covered, every break, the totals, and the
//! notes on what no signature vouches for, printed as an operator reads it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::breaks::Break;

/// A contiguous run of one chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRange {
    pub chain: String,
    pub from: u64,
    pub to: u64,
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
