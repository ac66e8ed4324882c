//! What a verification found wrong: each [`Break`] names its place and its reason, worded for
//! the operator who reads `postern audit verify`.

use std::fmt;

use postern_core::lifecycle::{EventKind, State};
use postern_core::ExecutionId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreakReason {
    /// The event's content does not hash to its stored hash: it was edited.
    HashMismatch,
    /// The event does not link to the one before it: a row was replaced or inserted.
    PrevHashMismatch,
    /// Sequence numbers skip: rows are missing.
    Gap {
        expected: u64,
    },
    /// A row arrives after a later one: rows were moved.
    Reorder {
        after: u64,
    },
    /// The same seq twice.
    Duplicate,
    /// A signed checkpoint vouches for events that are not there.
    Truncated {
        last_seq: Option<u64>,
    },
    /// The signed head hash differs from the chain's hash at that seq.
    CheckpointMismatch,
    BadSignature,
    /// Signed by another key than the one given to the verifier.
    UnknownSigner {
        key_id: String,
    },
    /// The requested range is not fully present (no signed checkpoint vouches for it).
    RangeNotCovered {
        last_seq: Option<u64>,
    },
    /// The execution's events do not form a possible lifecycle.
    ImpossibleTransition {
        execution_id: ExecutionId,
        from: Option<State>,
        event: EventKind,
        /// The state allows the event but the history does not: `failed` after an earlier
        /// dispatch (written by versions before the rule; such an execution may have been
        /// applied and is review material).
        after_earlier_dispatch: bool,
    },
    /// An execution's event numbers skip (an event of it is missing).
    MissingExecutionEvent {
        execution_id: ExecutionId,
        expected_n: u32,
    },
    /// A stored result body does not hash to the digest its event chained: it was changed.
    ResultMismatch {
        reference: String,
    },
    /// An event vouches for a stored result that is not there.
    ResultMissing {
        reference: String,
    },
    /// An execution's stored row (its state, record, fingerprint …) says other than the
    /// events chained for it: the row was edited.
    RowMismatch {
        execution_id: ExecutionId,
        field: &'static str,
        chained: String,
        stored: String,
    },
    /// The log disagrees with a head recorded elsewhere (`--expect-head`): it was rewritten or
    /// cut before that point.
    AnchorMismatch {
        expected_hash: String,
        found: Option<String>,
    },
    /// The chain ends before the head the signed export header names: events were cut.
    EndsBeforeSignedHead {
        last_seq: Option<u64>,
    },
    /// The event at the head the signed export header names has another hash: the log was
    /// rewritten (hashes recomputed) before or at it.
    SignedHeadMismatch {
        expected_hash: String,
        found: String,
    },
    /// An event past the head the signed export header names (`head: None`: of a chain the
    /// header does not name): appended after the export.
    PastSignedHead {
        head: Option<u64>,
    },
    /// A line or row that could not be read.
    Malformed {
        line: u64,
        reason: String,
    },
    /// A pruned-range statement without a valid signature of the verifier's key.
    PrunedRangeUnsigned {
        to: u64,
    },
    /// An export header without a valid signature of the verifier's key: the ranges it names
    /// could have been edited to hide a cut.
    HeaderNotSigned {
        line: u64,
        has_signature: bool,
    },
    /// Events older than the time a checkpoint must have been signed by that no signature
    /// covers: checkpoints were deleted, or the history was written without its gateway.
    UnsignedHistory {
        events: u64,
        oldest_at: i64,
    },
    /// A signed checkpoint names a previous checkpoint (`named`) that is not there, or is not
    /// the one before it (`found`: the seq of the one before it, if any): a checkpoint was
    /// deleted or replaced.
    CheckpointChainBroken {
        named: Option<u64>,
        found: Option<u64>,
    },
    /// A checkpoint the witness holds is missing from the store or export it was written
    /// beside.
    WitnessedCheckpointMissing,
    /// A row an operator decision governs (a tool pin, a run's authorization, an intent
    /// slot) says other than the chained decision: the row was edited.
    DecisionMismatch {
        row: String,
        field: &'static str,
        chained: String,
        stored: String,
    },
}

/// One break: where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    pub chain: Option<String>,
    pub seq: Option<u64>,
    pub reason: BreakReason,
}

impl Break {
    /// ` at seq S (chain C)`, as much of it as the break knows, to follow its kind.
    fn place(&self) -> String {
        match (&self.chain, self.seq) {
            (Some(c), Some(s)) => format!(" at seq {s} (chain {c})"),
            (Some(c), None) => format!(" (chain {c})"),
            _ => String::new(),
        }
    }
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use BreakReason::*;
        let at = self.place();
        match &self.reason {
            HashMismatch => write!(
                f,
                "hash mismatch{at}: the event's content does not match its hash"
            ),
            PrevHashMismatch => write!(
                f,
                "chain link broken{at}: prev_hash is not the previous event's hash"
            ),
            Gap { expected } => write!(f, "gap{at}: expected seq {expected}, events are missing"),
            Reorder { after } => write!(f, "reorder{at}: arrives after seq {after}"),
            Duplicate => write!(f, "duplicate{at}: the same seq appears twice"),
            Truncated { last_seq } => write!(
                f,
                "truncation behind a signed checkpoint{at}: the log ends at {}",
                log_end(*last_seq)
            ),
            CheckpointMismatch => write!(
                f,
                "checkpoint mismatch{at}: the signed head hash differs from the chain"
            ),
            BadSignature => write!(
                f,
                "bad signature{at}: the checkpoint's signature does not verify"
            ),
            UnknownSigner { key_id } => write!(
                f,
                "bad signature{at}: signed by key {key_id}, not the key given"
            ),
            RangeNotCovered { last_seq } => write!(
                f,
                "range not covered{at}: the log ends at {}",
                log_end(*last_seq)
            ),
            ImpossibleTransition {
                execution_id,
                from,
                event,
                after_earlier_dispatch,
            } => write_impossible_transition(
                f,
                &at,
                execution_id,
                *from,
                event,
                *after_earlier_dispatch,
            ),
            MissingExecutionEvent {
                execution_id,
                expected_n,
            } => {
                write!(f, "impossible state sequence for execution {execution_id}: event #{expected_n} is missing")
            }
            ResultMismatch { reference } => write!(
                f,
                "result mismatch{at}: {reference} does not match the digest its event chained (the stored body, or the event, was changed)"
            ),
            ResultMissing { reference } => write!(
                f,
                "result missing{at}: {reference}, which its event vouches for, is not stored"
            ),
            RowMismatch {
                execution_id,
                field,
                chained,
                stored,
            } => write_row_mismatch(f, execution_id, field, chained, stored),
            AnchorMismatch {
                expected_hash,
                found,
            } => write_anchor_mismatch(f, &at, expected_hash, found.as_deref()),
            EndsBeforeSignedHead { last_seq } => write!(
                f,
                "cut before the signed head{at}: the export header names this head, the log ends at {}",
                log_end(*last_seq)
            ),
            SignedHeadMismatch {
                expected_hash,
                found,
            } => write!(
                f,
                "signed head mismatch{at}: the export header names hash {expected_hash}, the log has {found} (rewritten)"
            ),
            PastSignedHead { head } => write_past_signed_head(f, &at, *head),
            Malformed { line, reason } => write!(f, "unreadable record at line {line}: {reason}"),
            PrunedRangeUnsigned { to } => write!(
                f,
                "unsigned pruned range{at}..{to}: the statement that these events were pruned by retention does not verify with this key"
            ),
            HeaderNotSigned { line, has_signature } => {
                write_header_not_signed(f, *line, *has_signature)
            }
            UnsignedHistory { .. }
            | CheckpointChainBroken { .. }
            | WitnessedCheckpointMissing
            | DecisionMismatch { .. } => write_signing(f, &at, &self.reason),
        }
    }
}

/// The breaks of what the signer and its witness vouch for (issue 47).
fn write_signing(f: &mut fmt::Formatter<'_>, at: &str, reason: &BreakReason) -> fmt::Result {
    use BreakReason::*;
    match reason {
        UnsignedHistory { events, oldest_at } => write!(
            f,
            "unsigned history{at}: {events} event(s), the oldest written at {}, are older than a checkpoint must follow them and no signature covers them (checkpoints deleted, events written without the gateway, or a gateway without a signing_key)",
            postern_core::Timestamp(*oldest_at)
        ),
        CheckpointChainBroken { named, found } => write!(
            f,
            "checkpoint chain broken{at}: it names the previous checkpoint {} but the one before it is {} (a checkpoint was deleted or replaced)",
            named.map_or("(none: a chain's first)".into(), |s| format!("at seq {s}")),
            found.map_or("(none)".into(), |s| format!("at seq {s}"))
        ),
        DecisionMismatch {
            row,
            field,
            chained,
            stored,
        } => write!(
            f,
            "row edited{at}: {row}: its {field} is {stored:?} but the chained decision says {chained:?}"
        ),
        WitnessedCheckpointMissing => write!(
            f,
            "witnessed checkpoint missing{at}: the witness holds a checkpoint the log does not (it was deleted)"
        ),
        _ => Ok(()),
    }
}

/// Where the log ends, for the breaks that say so.
fn log_end(last_seq: Option<u64>) -> String {
    last_seq.map_or("no events".into(), |s| format!("seq {s}"))
}

/// A transition the lifecycle refuses; after an earlier dispatch the history, not the state,
/// is what makes `failed` false, so the operator is told to treat it as an unknown outcome.
fn write_impossible_transition(
    f: &mut fmt::Formatter<'_>,
    at: &str,
    execution_id: &ExecutionId,
    from: Option<State>,
    event: &EventKind,
    after_earlier_dispatch: bool,
) -> fmt::Result {
    write!(
        f,
        "impossible state sequence for execution {execution_id}{at}: {event} in state {}",
        from.map_or("(new)".into(), |s| s.to_string())
    )?;
    if after_earlier_dispatch {
        f.write_str(" after an earlier dispatch: a request of it may have reached the target, so `failed` (nothing sent) is false; review it as an unknown outcome")?;
    }
    Ok(())
}

/// A stored execution row that says other than its chained events.
fn write_row_mismatch(
    f: &mut fmt::Formatter<'_>,
    execution_id: &ExecutionId,
    field: &str,
    chained: &str,
    stored: &str,
) -> fmt::Result {
    write!(
        f,
        "execution row edited: {execution_id}'s {field} is {stored:?} in the executions table, but its chained events say {chained:?}"
    )
}

/// An anchor that holds another hash, or is not in the log at all.
fn write_anchor_mismatch(
    f: &mut fmt::Formatter<'_>,
    at: &str,
    expected_hash: &str,
    found: Option<&str>,
) -> fmt::Result {
    match found {
        Some(h) => write!(
            f,
            "anchor mismatch{at}: the head recorded elsewhere has hash {expected_hash}, the log has {h}"
        ),
        None => write!(
            f,
            "anchor mismatch{at}: the head recorded elsewhere (hash {expected_hash}) is not in the log"
        ),
    }
}

/// An appended event: past its chain's signed head, or of a chain the header does not name.
fn write_past_signed_head(f: &mut fmt::Formatter<'_>, at: &str, head: Option<u64>) -> fmt::Result {
    match head {
        Some(h) => write!(
            f,
            "event past the signed head{at}: the export header names seq {h} as the chain's last event (appended)"
        ),
        None => write!(
            f,
            "event of a chain the signed export header does not name{at} (appended)"
        ),
    }
}

/// A header whose ranges cannot be trusted: unsigned, or signed by another key.
fn write_header_not_signed(
    f: &mut fmt::Formatter<'_>,
    line: u64,
    has_signature: bool,
) -> fmt::Result {
    write!(
        f,
        "export header at line {line} {}: the ranges it names could have been edited to hide a cut",
        if has_signature {
            "has a signature that does not verify with this key"
        } else {
            "is not signed"
        }
    )
}
