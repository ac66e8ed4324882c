//! What an execution's events say of a human decision: what a waiting call waits for, when its
//! request expires, who decided ([`Decided`]) and an execution as an operator decides on it
//! ([`PendingDecision`]); and why a decision was not recorded ([`DecisionError`]).

use postern_audit::ChainedEvent;
use postern_core::lifecycle::{Resolution, State};
use postern_core::{EventKind, ExecutionId, Timestamp};
use postern_ledger::ExecutionView;
use serde::Serialize;
use serde_json::{json, Value};

/// Why an operator's decision was not recorded. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("no execution {0}")]
    Unknown(String),
    #[error("execution {id} is {state}, not awaiting approval{}", decided.as_ref().map(|d| format!(": already decided {d}")).unwrap_or_default())]
    NotAwaiting {
        id: ExecutionId,
        state: &'static str,
        decided: Option<Decided>,
    },
    #[error("the approval names fingerprint {given}, but execution {id} has {actual}: these are not the arguments shown for approval; nothing was approved")]
    FingerprintMismatch {
        id: ExecutionId,
        given: String,
        actual: String,
    },
    #[error("the approval request of {id} expired at {at}: it is recorded denied (expired), which an identical retry is told; a new action is a call after the tool's match window, or one the host sends with a new idempotency key")]
    Expired { id: ExecutionId, at: Timestamp },
    #[error("execution {id} waits for its run {run} to be authorized first: postern sessions authorize {run}")]
    RunNotAuthorized { id: ExecutionId, run: String },
    #[error("no run {0} in the Sessions log")]
    UnknownRun(String),
    #[error("run {run} is already {what}{}", if by.is_empty() { String::new() } else { format!(" by {by} at {at}") })]
    RunDecided {
        run: String,
        what: &'static str,
        by: String,
        at: Timestamp,
    },
    #[error("execution {id} is {state}, not needs_review{}", decided.as_ref().map(|d| format!(": already resolved {d}")).unwrap_or_default())]
    NotUnderReview {
        id: ExecutionId,
        state: &'static str,
        decided: Option<Decided>,
    },
}

impl DecisionError {
    /// Whether a decision came too late because the request expired: this attempt found it
    /// due, or the expiry sweep had already recorded it `denied` by nobody (the only denial
    /// without an operator). Both are 410 Gone, never 409, on `/ops` and the console.
    pub fn expired(&self) -> bool {
        match self {
            DecisionError::Expired { .. } => true,
            DecisionError::NotAwaiting {
                decided: Some(d), ..
            } => d.decision == "denied" && d.by.is_none(),
            _ => false,
        }
    }
}

/// A recorded human decision: who, when, what and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Decided {
    /// `approved`, `denied`, `resolved_applied`, `resolved_not_applied`.
    pub decision: String,
    /// The operator; `None` for an approval request that expired.
    pub by: Option<String>,
    pub at: String,
    pub reason: Option<String>,
}

impl std::fmt::Display for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "({}) by {} at {}",
            self.decision,
            self.by.as_deref().unwrap_or("nobody (expired)"),
            self.at
        )?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        Ok(())
    }
}

/// An execution as an operator decides on it.
#[derive(Clone, Debug, Serialize)]
pub struct PendingDecision {
    pub execution_id: String,
    pub tool: String,
    pub actor: String,
    pub run_id: Option<String>,
    /// The full fingerprint, which an approval must name.
    pub fingerprint: String,
    /// The canonical action record: secret fields appear only as keyed hashes.
    pub record: Value,
    pub state: &'static str,
    /// When the approval was requested (or the review began).
    pub since: String,
    /// For an approval request: when it is denied as expired.
    pub expires_at: Option<String>,
    pub decided: Option<Decided>,
    /// The request as it will be sent, when this gateway holds the call's arguments: the
    /// target, every argument (non-semantic ones too, which the record leaves out; secret ones
    /// as `***`) and which of them are non-semantic. `None` when it does not (after a restart:
    /// the next identical call supplies them).
    pub request: Option<Value>,
}

/// What a call waiting for approval waits for: its run's authorization, its own approval, or
/// both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    pub run: Option<String>,
    pub call: bool,
}

/// What the execution's approval request waits for, from its `approval_requested` event.
pub fn waits_for(events: &[ChainedEvent]) -> Waits {
    let detail = events
        .iter()
        .find(|e| e.body.event == EventKind::ApprovalRequested)
        .map(|e| &e.body.detail);
    Waits {
        run: detail
            .and_then(|d| d.get("waits_for_run"))
            .and_then(Value::as_str)
            .map(str::to_string),
        // Requests recorded before session authorization existed waited for the call only.
        call: detail
            .and_then(|d| d.get("waits_for_call"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
    }
}

/// When the execution's approval request expires, from its `approval_requested` event.
pub fn expires_at(events: &[ChainedEvent]) -> Option<Timestamp> {
    events
        .iter()
        .find(|e| e.body.event == EventKind::ApprovalRequested)
        .and_then(|e| e.body.detail.get("expires_at_ms"))
        .and_then(Value::as_i64)
        .map(Timestamp)
}

/// The last human decision in the events, if any.
pub fn decided(events: &[ChainedEvent]) -> Option<Decided> {
    events.iter().rev().find_map(|e| {
        let d = &e.body.detail;
        let text = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
        let (decision, by) = match e.body.event {
            EventKind::Authorized if d.get("approved_by").is_some() => {
                ("approved", text("approved_by"))
            }
            EventKind::Authorized if d.get("run_authorized_by").is_some() => {
                ("run_authorized", text("run_authorized_by"))
            }
            EventKind::Denied => ("denied", text("denied_by")),
            EventKind::Resolved(Resolution::Applied) => ("resolved_applied", text("resolved_by")),
            EventKind::Resolved(Resolution::NotApplied) => {
                ("resolved_not_applied", text("resolved_by"))
            }
            _ => return None,
        };
        Some(Decided {
            decision: decision.to_string(),
            by,
            at: e.body.at.to_string(),
            reason: text("reason"),
        })
    })
}

pub fn decision_view(view: &ExecutionView) -> PendingDecision {
    let s = &view.summary;
    PendingDecision {
        execution_id: s.id.to_string(),
        tool: s.tool.clone(),
        actor: s.actor.clone(),
        run_id: s.run_id.clone(),
        fingerprint: s.fingerprint.to_string(),
        record: view.record.clone(),
        state: s.lifecycle.state.display_name(),
        since: view
            .events
            .iter()
            .find(|e| {
                matches!(
                    e.body.event,
                    EventKind::ApprovalRequested | EventKind::ReviewRequired
                )
            })
            .map_or(s.state_since, |e| e.body.at)
            .to_string(),
        expires_at: expires_at(&view.events).map(|t| t.to_string()),
        decided: decided(&view.events),
        request: None,
    }
}

/// What a call's answer says of a human decision: the pending request, or the decision.
pub fn decision_of(view: &ExecutionView) -> Option<Value> {
    let state = view.summary.lifecycle.state;
    if state == State::AwaitingApproval {
        let p = decision_view(view);
        let waits = waits_for(&view.events);
        return Some(json!({
            "awaiting": "approval",
            "waits_for_run": waits.run,
            "waits_for_call": waits.call,
            "requested_at": p.since,
            "expires_at": p.expires_at,
            "decided_by": "an operator",
        }));
    }
    decided(&view.events).map(|d| json!(d))
}
