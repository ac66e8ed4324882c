//! Matching and the recovery decision (contract §4): given the prior execution the ledger found
//! (if any) and the incoming request, what must happen. Pure: the ledger finds candidates and
//! enforces uniqueness; this module decides, and never blindly answers "success".
//!
//! One departure from contract §4's window rule (issue 14): a prior still waiting for a person
//! (`awaiting_approval`, or `authorized` and never sent) is matched whatever the match window,
//! `0s` included, so that a retry never makes a second approval request and an approved call is
//! never approved twice.

use crate::class::{ActionClass, RecoveryMethod};
use crate::contract::ToolContract;
use crate::fingerprint::Fingerprint;
use crate::ids::{ExecutionId, Timestamp};
use crate::lifecycle::{Lifecycle, Resolution, State, Verdict};

/// What the ledger knows about a prior execution that may be the same intent.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorExecution {
    pub execution_id: ExecutionId,
    pub fingerprint: Fingerprint,
    pub actor: String,
    pub intent_scope: String,
    pub operation_key: Option<String>,
    pub lifecycle: Lifecycle,
    pub accepted_at: Timestamp,
    /// When it entered its current state (e.g. since when it awaits approval).
    pub state_since: Timestamp,
    /// The target rejected it in a way that invites a retry (e.g. 429): never blocks a new call.
    pub rejection_retryable: bool,
}

/// The request being decided. Protocol links (JSON-RPC id, MCP session) are deliberately absent:
/// they identify messages, not actions.
#[derive(Clone, Debug, PartialEq)]
pub struct IncomingRequest<'a> {
    pub fingerprint: Fingerprint,
    pub actor: &'a str,
    pub intent_scope: &'a str,
    pub operation_key: Option<&'a str>,
    /// The prior was found by the request's re-issue key (a key a bridge gives every attempt of
    /// one agent request): it is the same request whatever the window. Unlike an operation key,
    /// a re-issue key that matches nothing never asks for a new action; the fingerprint decides.
    pub reissue_of_prior: bool,
    pub now: Timestamp,
}

/// Why a call became a new execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewReason {
    /// Reads are never matched: a read is never served stale from the ledger.
    ReadOnly,
    NoPrior,
    DifferentActor,
    DifferentIntent,
    DifferentScope,
    /// The prior is older than the class's match window.
    OutsideWindow,
    /// The prior's operation key is past its retention.
    KeyExpired,
    /// The caller supplied an operation key the prior does not carry: an explicit new action.
    NewOperationKey,
    /// Nothing was sent (or the target said nothing was applied and to try again).
    PriorNotPerformed,
}

/// What an unknown outcome is turned into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownFallback {
    /// Re-dispatch the SAME execution with the SAME idempotency key.
    RedispatchSameKey,
    /// Query the precondition; re-dispatch only while it holds, else review.
    RedispatchIfPreconditionHolds,
    /// Read the durable marker on the host; if none can be read, review.
    QueryMarker,
    /// Stop: `needs_review`, a human resolves it.
    Review,
}

/// The decision for one incoming call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryDecision {
    /// Start a new execution.
    New { reason: NewReason },
    /// Same operation key, different intent: refuse, name the original, change nothing.
    Conflict { original: ExecutionId },
    /// The prior was accepted/authorized but never dispatched: carry on with it.
    Continue { execution_id: ExecutionId },
    /// Show the original pending approval; never a second prompt.
    AwaitApproval {
        execution_id: ExecutionId,
        since: Timestamp,
    },
    /// In flight: wait (bounded) for the same execution's result.
    Attach { execution_id: ExecutionId },
    /// Answer from the stored result, marked `recovered`.
    ReturnResult {
        execution_id: ExecutionId,
        verdict: Verdict,
        delivered_before: bool,
    },
    /// Answer with the original denial.
    ReturnDenial { execution_id: ExecutionId },
    /// Under review: show the record and review status; send nothing.
    ReturnReview { execution_id: ExecutionId },
    /// A reviewer resolved it as applied: answer with that resolution.
    ReturnResolution {
        execution_id: ExecutionId,
        resolution: Resolution,
    },
    /// Outcome unknown: first the status query if the contract has one, then the fallback.
    RecoverUnknown {
        execution_id: ExecutionId,
        status_query_first: bool,
        fallback: UnknownFallback,
    },
}

/// Decides what an incoming call gets, from the prior execution the ledger found (or none).
pub fn decide(
    prior: Option<&PriorExecution>,
    incoming: &IncomingRequest<'_>,
    contract: &ToolContract,
) -> RecoveryDecision {
    use RecoveryDecision::New;
    if contract.class.is_read_only() {
        return New {
            reason: NewReason::ReadOnly,
        };
    }
    let Some(prior) = prior else {
        return New {
            reason: NewReason::NoPrior,
        };
    };
    if prior.actor != incoming.actor {
        return New {
            reason: NewReason::DifferentActor,
        };
    }
    let age_ms = incoming
        .now
        .millis()
        .saturating_sub(prior.accepted_at.millis());
    let within = |d: std::time::Duration| i128::from(age_ms) < d.as_millis() as i128;
    match incoming.operation_key {
        Some(key) => {
            if prior.operation_key.as_deref() != Some(key) {
                return New {
                    reason: NewReason::NewOperationKey,
                };
            }
            // The key replaces the window: it matches for its whole retention.
            if !within(contract.retention) {
                return New {
                    reason: NewReason::KeyExpired,
                };
            }
            if prior.fingerprint != incoming.fingerprint {
                return RecoveryDecision::Conflict {
                    original: prior.execution_id,
                };
            }
        }
        // A re-issue of the same request: matched for the retention, not the window.
        None if incoming.reissue_of_prior => {
            if !within(contract.retention) {
                return New {
                    reason: NewReason::KeyExpired,
                };
            }
            if prior.fingerprint != incoming.fingerprint
                || prior.intent_scope != incoming.intent_scope
            {
                return RecoveryDecision::Conflict {
                    original: prior.execution_id,
                };
            }
        }
        None => {
            if prior.fingerprint != incoming.fingerprint {
                return New {
                    reason: NewReason::DifferentIntent,
                };
            }
            if prior.intent_scope != incoming.intent_scope {
                return New {
                    reason: NewReason::DifferentScope,
                };
            }
            // A prior still waiting for a person (or approved and never sent) is matched for as
            // long as it waits, whatever the window: a retry never makes a second approval
            // request, and an approved call is never approved twice.
            let waiting = matches!(
                prior.lifecycle.state,
                State::AwaitingApproval | State::Authorized
            );
            if !within(contract.match_window) && !waiting {
                return New {
                    reason: NewReason::OutsideWindow,
                };
            }
        }
    }
    by_state(prior, contract)
}

fn by_state(prior: &PriorExecution, contract: &ToolContract) -> RecoveryDecision {
    use RecoveryDecision::*;
    let execution_id = prior.execution_id;
    match prior.lifecycle.state {
        State::Accepted | State::Authorized => Continue { execution_id },
        State::AwaitingApproval => AwaitApproval {
            execution_id,
            since: prior.state_since,
        },
        State::Dispatched => Attach { execution_id },
        State::Completed(Verdict::Rejected) | State::Delivered(Verdict::Rejected)
            if prior.rejection_retryable =>
        {
            New {
                reason: NewReason::PriorNotPerformed,
            }
        }
        State::Completed(verdict) => ReturnResult {
            execution_id,
            verdict,
            delivered_before: false,
        },
        State::Delivered(verdict) => ReturnResult {
            execution_id,
            verdict,
            delivered_before: true,
        },
        State::Denied => ReturnDenial { execution_id },
        State::NeedsReview => ReturnReview { execution_id },
        // An operator's resolution is what an identical retry is told, either way: after
        // `not_applied` a new action needs a new operation key, as after a denial.
        State::Resolved(resolution) => ReturnResolution {
            execution_id,
            resolution,
        },
        State::OutcomeUnknown => RecoverUnknown {
            execution_id,
            status_query_first: contract.recovery.has_status_probe(),
            fallback: unknown_fallback(contract),
        },
        State::Failed | State::Rejected | State::Cancelled => New {
            reason: NewReason::PriorNotPerformed,
        },
    }
}

/// The class default on an unknown outcome, as refined by the contract's recovery method.
pub fn unknown_fallback(contract: &ToolContract) -> UnknownFallback {
    let method = match contract.recovery.method {
        // A status query is tried first; what follows it is the class default.
        RecoveryMethod::StatusQuery => contract.class.default_recovery(),
        m => m,
    };
    match method {
        RecoveryMethod::RetrySameKey => UnknownFallback::RedispatchSameKey,
        RecoveryMethod::Precondition => UnknownFallback::RedispatchIfPreconditionHolds,
        RecoveryMethod::Marker => UnknownFallback::QueryMarker,
        // `Retry` is only allowed for reads, which never get here; `StatusQuery` maps to the
        // class default above, and no class defaults to it.
        RecoveryMethod::Review | RecoveryMethod::Retry | RecoveryMethod::StatusQuery => {
            debug_assert!(contract.class != ActionClass::ReadOnly);
            UnknownFallback::Review
        }
    }
}

impl RecoveryDecision {
    /// The prior execution this decision attaches to, if any.
    pub fn execution_id(&self) -> Option<ExecutionId> {
        use RecoveryDecision::*;
        match self {
            New { .. } => None,
            Conflict { original } => Some(*original),
            Continue { execution_id }
            | AwaitApproval { execution_id, .. }
            | Attach { execution_id }
            | ReturnResult { execution_id, .. }
            | ReturnDenial { execution_id }
            | ReturnReview { execution_id }
            | ReturnResolution { execution_id, .. }
            | RecoverUnknown { execution_id, .. } => Some(*execution_id),
        }
    }
}
