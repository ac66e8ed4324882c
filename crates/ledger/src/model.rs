//! What goes into and comes out of the ledger, in the core's terms.

use std::sync::Arc;

use postern_audit::ChainedEvent;
use postern_core::canon::CanonError;
use postern_core::lifecycle::Lifecycle;
use postern_core::recovery::{PriorExecution, RecoveryDecision};
use postern_core::{
    ActionClass, ActionRecord, EventKind, ExecutionId, Fingerprint, FingerprintKey, Timestamp,
    ToolContract,
};
use serde_json::Value;

/// A request to perform an action: accepted as a new execution or matched to a prior one,
/// atomically.
#[derive(Clone, Debug)]
pub struct AcceptRequest {
    pub record: ActionRecord,
    pub fingerprint: Fingerprint,
    pub contract: Arc<ToolContract>,
    pub operation_key: Option<String>,
    /// A bridge's key for every attempt of one agent request (`io.postern/reissue-key`): finds
    /// the execution an earlier attempt reached, whatever the window; ignored when the request
    /// carries an operation key (which already does that, and more).
    pub reissue_key: Option<String>,
    pub run_id: Option<String>,
    /// The address the caller connected from, for the audit record (`accepted`'s detail).
    pub client_address: Option<String>,
    /// Whom the caller acted for (an issuer's access token), for `accepted`'s detail.
    pub principal: Option<postern_core::config::Principal>,
    /// Events appended in the same commit when (and only when) a new execution is created,
    /// e.g. `authorized` and `dispatched`: accept and dispatch then cost one fsync together.
    pub then: Vec<NewEvent>,
    pub now: Timestamp,
    /// Set by the caller when it gave up (its client went away) while the request waited for
    /// the writer: a new execution is then recorded `cancelled` instead of taking `then`, so
    /// nothing is dispatched for a caller that is gone.
    pub withdrawn: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The budgets a new execution is counted against (issue 53), checked in the accept's
    /// transaction when `then` dispatches it.
    pub budgets: Vec<crate::BudgetCharge>,
    /// What a new execution gets instead of `then` when one of `budgets` would pass its limit
    /// (an approval request, or a refusal) — a refusal whenever a budget passed refuses; its
    /// first event's detail gains the budget's use.
    pub over_budget: Vec<NewEvent>,
    /// With `over_budget`: how many of the actor's calls may wait for a person; past a budget
    /// with that many waiting already, the call is refused instead.
    pub waiting_cap: Option<u64>,
    /// The record's canonical bytes, computed once for the fingerprint and kept for the row.
    pub(crate) record_bytes: Vec<u8>,
}

impl AcceptRequest {
    /// A request for `record`, its fingerprint derived from it with `key` (so the two can never
    /// disagree), with no operation key, no run and no follow-up events.
    pub fn new(
        record: ActionRecord,
        key: &FingerprintKey,
        contract: Arc<ToolContract>,
        now: Timestamp,
    ) -> Result<AcceptRequest, CanonError> {
        let record_bytes = record.canonical_bytes()?;
        Ok(AcceptRequest {
            fingerprint: key.fingerprint(&record_bytes),
            record,
            record_bytes,
            contract,
            operation_key: None,
            reissue_key: None,
            run_id: None,
            client_address: None,
            principal: None,
            then: Vec::new(),
            now,
            withdrawn: None,
            budgets: Vec::new(),
            over_budget: Vec::new(),
            waiting_cap: None,
        })
    }

    /// Events to append in the accept's commit when a new execution is created.
    pub fn then(mut self, events: Vec<NewEvent>) -> AcceptRequest {
        self.then = events;
        self
    }

    /// Whether the caller withdrew before the writer reached this request.
    pub fn is_withdrawn(&self) -> bool {
        self.withdrawn
            .as_ref()
            .is_some_and(|w| w.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// One lifecycle event to append.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: EventKind,
    /// Facts for the audit chain. Never secrets.
    pub detail: Value,
    /// The target's answer, stored size-capped; only its digest enters the chain.
    pub result: Option<ResultBody>,
    /// For `completed(rejected)`: the target invites a retry (e.g. 429), so the execution never
    /// blocks a new one.
    pub retryable_rejection: bool,
}

impl NewEvent {
    pub fn new(kind: EventKind) -> NewEvent {
        NewEvent {
            kind,
            detail: Value::Object(Default::default()),
            result: None,
            retryable_rejection: false,
        }
    }
    pub fn with_detail(mut self, detail: Value) -> NewEvent {
        self.detail = detail;
        self
    }
    pub fn with_result(mut self, result: ResultBody) -> NewEvent {
        self.result = Some(result);
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBody {
    pub body: Vec<u8>,
    /// The size before capping.
    pub size: u64,
    pub truncated: bool,
}

/// What accepting gave.
#[derive(Clone, Debug)]
pub enum AcceptOutcome {
    /// A new execution (with its `then` events appended).
    Created {
        execution: ExecutionSummary,
        /// A budget it was counted against with little left after it (issue 53): its use
        /// including this execution, for the answer to say how much remains.
        budget_left: Option<crate::BudgetUsage>,
    },
    /// A prior execution and what the incoming call gets from it (never a second execution).
    Existing {
        decision: RecoveryDecision,
        execution: ExecutionSummary,
    },
}

impl AcceptOutcome {
    pub fn execution(&self) -> &ExecutionSummary {
        match self {
            AcceptOutcome::Created { execution: e, .. }
            | AcceptOutcome::Existing { execution: e, .. } => e,
        }
    }
}

/// An execution's row: identity, intent and the lifecycle projected from its events.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionSummary {
    pub id: ExecutionId,
    pub actor: String,
    pub tool: String,
    pub class: ActionClass,
    pub fingerprint: Fingerprint,
    pub intent_scope: String,
    pub operation_key: Option<String>,
    pub run_id: Option<String>,
    pub lifecycle: Lifecycle,
    /// Number of events so far.
    pub events: u32,
    pub accepted_at: Timestamp,
    pub state_since: Timestamp,
    pub first_dispatched_at: Option<Timestamp>,
    pub rejection_retryable: bool,
}

impl ExecutionSummary {
    /// The view the recovery decision takes.
    pub fn prior(&self) -> PriorExecution {
        PriorExecution {
            execution_id: self.id,
            fingerprint: self.fingerprint,
            actor: self.actor.clone(),
            intent_scope: self.intent_scope.clone(),
            operation_key: self.operation_key.clone(),
            lifecycle: self.lifecycle,
            accepted_at: self.accepted_at,
            state_since: self.state_since,
            rejection_retryable: self.rejection_retryable,
        }
    }
}

/// Everything about one execution: the Activity log's unit.
#[derive(Clone, Debug)]
pub struct ExecutionView {
    pub summary: ExecutionSummary,
    /// The canonical action record (no secrets).
    pub record: Value,
    pub events: Vec<ChainedEvent>,
    pub result: Option<StoredResult>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResult {
    /// The result's slot in `results/{execution}/{slot}`: the number of the event that stored
    /// it (in stores written before schema 11, the dispatch count).
    pub attempt: u32,
    pub digest: String,
    pub size: u64,
    pub truncated: bool,
    pub body: Vec<u8>,
}

/// One agent run (the Sessions log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub id: String,
    pub actor: String,
    pub client_name: Option<String>,
    pub client_version: Option<String>,
    /// The address its client connected from (a trusted proxy's PROXY header's, behind one);
    /// `None` for stdio.
    pub client_address: Option<String>,
    /// Whom the agent acted for, when it authenticated with an issuer's access token.
    pub principal: Option<RunPrincipal>,
    pub protocol_version: Option<String>,
    pub transport: String,
    pub started_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    /// How it ended (with `ended_at`).
    pub end_reason: Option<RunEnd>,
    /// The operator who authorized the run (session authorization), and when.
    pub authorized: Option<(String, Timestamp)>,
    /// The operator who revoked it, and when: its next calls are refused.
    pub revoked: Option<(String, Timestamp)>,
}

impl Run {
    /// A run as first seen: not yet authorized or revoked.
    pub fn new(id: String, actor: String, transport: String, started_at: Timestamp) -> Run {
        Run {
            id,
            actor,
            client_name: None,
            client_version: None,
            client_address: None,
            principal: None,
            protocol_version: None,
            transport,
            started_at,
            ended_at: None,
            end_reason: None,
            authorized: None,
            revoked: None,
        }
    }
}

/// Whom a run's agent acted for: an access token's issuer, subject and client (never the token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPrincipal {
    pub issuer: String,
    pub subject: String,
    pub client_id: Option<String>,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// The client closed its MCP session (`DELETE`).
    Closed,
    /// The transport ended (a stdio client went away).
    TransportClosed,
    /// No call for the gateway's `session_idle`.
    IdleExpired,
    /// The gateway serving it stopped gracefully. A client that carries on with the same
    /// session (after a restart, or on another replica) resumes the run, and the end is cleared.
    GatewayStopped,
    /// The gateway gave the session up, idle, to make room for a newer one of its actor at
    /// `max_sessions_per_actor`; the session is unknown from then on (404).
    Evicted,
}

impl RunEnd {
    pub const ALL: [RunEnd; 5] = [
        RunEnd::Closed,
        RunEnd::TransportClosed,
        RunEnd::IdleExpired,
        RunEnd::GatewayStopped,
        RunEnd::Evicted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunEnd::Closed => "closed",
            RunEnd::TransportClosed => "transport_closed",
            RunEnd::IdleExpired => "idle_expired",
            RunEnd::GatewayStopped => "gateway_stopped",
            RunEnd::Evicted => "evicted",
        }
    }

    /// Whether a later call of the same run resumes it (the run did not choose to end).
    pub fn resumable(self) -> bool {
        matches!(self, RunEnd::IdleExpired | RunEnd::GatewayStopped)
    }
}

/// One `tools/call` as the gateway answered it: who asked (run, JSON-RPC id), and which
/// execution it reached, how — or that it was refused before any execution existed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    pub at: Timestamp,
    pub actor: String,
    pub tool: String,
    pub run_id: Option<String>,
    /// The JSON-RPC request id, as the client sent it (JSON text).
    pub request_id: Option<String>,
    pub execution_id: Option<ExecutionId>,
    /// `new`, `attached`, `recovered`, or `refused` (no execution).
    pub attempt: String,
    pub operation_key: Option<String>,
    /// The state the call reported, or for a refusal its kind (never its arguments).
    pub outcome: String,
    /// The gateway instance that answered it.
    pub instance: String,
}

/// An operator's decision about a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunDecision {
    Authorize,
    Revoke,
}

/// What the recovery scan found on open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Executions left `dispatched` by a stopped instance, now recorded `outcome_unknown`.
    pub marked_unknown: Vec<ExecutionId>,
}

/// Filter for listing executions, newest first.
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    pub actor: Option<String>,
    pub state: Option<String>,
    pub run_id: Option<String>,
    pub tool: Option<String>,
    pub fingerprint: Option<String>,
    pub operation_key: Option<String>,
    /// Only executions older than this one (the next page of a newest-first list).
    pub before: Option<ExecutionId>,
    /// Only executions accepted at or after this time.
    pub accepted_from: Option<Timestamp>,
    /// Only executions accepted before this time.
    pub accepted_to: Option<Timestamp>,
    pub limit: u32,
}

/// The accepted version of one upstream MCP tool (tool pinning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPin {
    pub upstream: String,
    pub tool: String,
    /// Hex SHA-256 of the tool's canonical definition (name, description, input schema).
    pub digest: String,
    /// The definition the digest was taken from (JSON text).
    pub definition: String,
    pub pinned_at: Timestamp,
    /// The operator who accepted this version; `None`: pinned at first sight.
    pub accepted_by: Option<String>,
}

/// What `postern status` and the `/metrics` gauges read from the store.
#[derive(Clone, Debug, Default)]
pub struct StoreHealth {
    /// Executions waiting for a person's decision.
    pub awaiting_approval: u64,
    /// When the oldest of them started waiting.
    pub oldest_approval_since: Option<Timestamp>,
    /// Executions an operator must resolve.
    pub needs_review: u64,
    /// Executions whose outcome is unknown now (recovered when the agent retries).
    pub outcome_unknown: u64,
    /// Of those, the ones that became unknown within the last hour.
    pub unknown_last_hour: u64,
    /// Executions sent and not yet answered.
    pub dispatched: u64,
    /// The newest signed checkpoint of any chain.
    pub last_checkpoint: Option<postern_audit::Checkpoint>,
}

/// What one prune removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub executions: u64,
    pub events: u64,
}
