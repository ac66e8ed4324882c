//! Session authorization (contract §6 step 3): an actor with `session_approval = "required"` is
//! authorized once per run (an MCP session, a client's `io.postern/run`), by an operator.
//!
//! The first calls of a run not yet authorized are accepted as `awaiting_approval` (waiting for
//! the run, and for their own approval too if their tool asks for one) and answered at once. An
//! operator's authorization of the run is recorded on the run, set once, and releases its
//! waiting calls: each is recorded `authorized` naming the operator and sent (its arguments
//! held in memory, or by the agent's next identical call). Later calls of the run go straight
//! on. Revoking the run denies its waiting calls and refuses its next ones before anything is
//! recorded.

use std::sync::Arc;

use postern_core::config::SessionApproval;
use postern_core::lifecycle::State;
use postern_core::{EventKind, Timestamp};
use postern_ledger::{
    ExecutionSummary, ExecutionView, LedgerError, ListFilter, NewEvent, Run, RunDecision,
};
use serde::Serialize;
use serde_json::json;

use super::approvals::waits_for;
use super::{now, Gateway, ToolCall};
use crate::error::GatewayError;
use crate::gateway::DecisionError;

/// A run as an operator sees it.
#[derive(Clone, Debug, Serialize)]
pub struct RunView {
    pub run_id: String,
    pub actor: String,
    pub client: Option<String>,
    pub client_version: Option<String>,
    /// The address the client connected from (behind a trusted proxy, the one it named).
    pub client_address: Option<String>,
    /// Whom the agent acted for (an issuer's access token): `{issuer, subject, client_id}`.
    pub principal: Option<serde_json::Value>,
    pub protocol_version: Option<String>,
    pub transport: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// How it ended: `closed`, `transport_closed`, `idle_expired`, `gateway_stopped`.
    pub end_reason: Option<&'static str>,
    /// Whether the run's actor must be authorized per run.
    pub requires_authorization: bool,
    /// `pending`, `authorized` or `revoked`.
    pub authorization: &'static str,
    pub authorized_by: Option<String>,
    pub authorized_at: Option<String>,
    pub revoked_by: Option<String>,
    pub revoked_at: Option<String>,
}

/// A call of the calls log as the operator API and the CLI show it.
pub fn call_json(c: &postern_ledger::CallRecord) -> serde_json::Value {
    json!({
        "at": c.at.to_string(),
        "actor": c.actor,
        "tool": c.tool,
        "run_id": c.run_id,
        "request_id": c.request_id,
        "execution_id": c.execution_id.map(|id| id.to_string()),
        "attempt": c.attempt,
        "operation_key": c.operation_key,
        // What the answer told the agent (see `investigate::told`).
        "outcome": crate::investigate::told(&c.outcome),
        "instance": c.instance,
    })
}

impl Gateway {
    /// What session authorization asks of a call, before anything is recorded: `None` to go
    /// on, the run to wait for, or a refusal (a revoked run, a call that names no run).
    pub(super) async fn session_gate(
        &self,
        call: &ToolCall,
    ) -> Result<Option<String>, GatewayError> {
        let required = self
            .config
            .actor(&call.actor)
            .is_some_and(|a| a.session_approval == SessionApproval::Required);
        if !required {
            return Ok(None);
        }
        let Some(run_id) = &call.run_id else {
            return Err(GatewayError::NoRun {
                actor: call.actor.clone(),
            });
        };
        match self.ledger.run(run_id).await? {
            Some(run) if run.actor != call.actor => Err(GatewayError::NoRun {
                actor: call.actor.clone(),
            }),
            Some(Run {
                revoked: Some((by, at)),
                ..
            }) => Err(GatewayError::RunRevoked {
                run: run_id.clone(),
                by,
                at,
            }),
            Some(Run {
                authorized: Some(_),
                ..
            }) => Ok(None),
            _ => Ok(Some(run_id.clone())),
        }
    }

    /// The Sessions log, newest first.
    pub async fn run_views(&self, limit: u32) -> Result<Vec<RunView>, GatewayError> {
        Ok(self
            .ledger
            .runs(limit)
            .await?
            .iter()
            .map(|r| self.run_view(r))
            .collect())
    }

    /// One run with its calls (oldest first, at most `limit`).
    pub async fn run_with_calls(
        &self,
        run_id: &str,
        limit: u32,
    ) -> Result<serde_json::Value, GatewayError> {
        let view = self.run_view_of(run_id).await?;
        let calls = self.ledger.calls_in(run_id, limit).await?;
        let mut out = serde_json::to_value(&view).unwrap_or_default();
        out["calls"] = calls.iter().map(call_json).collect();
        Ok(out)
    }

    /// Authorizes a run once, and releases its waiting calls.
    pub async fn authorize_run(
        self: &Arc<Self>,
        run_id: &str,
        operator: &str,
    ) -> Result<RunView, GatewayError> {
        self.decide_run(run_id, RunDecision::Authorize, operator)
            .await?;
        for view in self.waiting_in(run_id).await? {
            self.release_if_authorized(&view).await?;
        }
        self.run_view_of(run_id).await
    }

    /// Revokes a run: its waiting calls are denied, its next calls refused.
    pub async fn revoke_run(&self, run_id: &str, operator: &str) -> Result<RunView, GatewayError> {
        self.decide_run(run_id, RunDecision::Revoke, operator)
            .await?;
        let reason = format!("run {run_id} revoked by {operator}");
        for view in self.waiting_in(run_id).await? {
            let detail = json!({"denied_by": operator, "reason": reason});
            let denied = NewEvent::new(EventKind::Denied).with_detail(detail);
            self.held.take(view.summary.id);
            match self.ledger.append(view.summary.id, denied, now()).await {
                Ok(_) | Err(LedgerError::Transition { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Approved but not yet sent (this gateway restarted before sending): never sent now.
        let authorized = ListFilter {
            state: Some(State::Authorized.as_str().to_string()),
            run_id: Some(run_id.to_string()),
            limit: 100_000,
            ..ListFilter::default()
        };
        for s in self.ledger.list(&authorized).await? {
            self.held.take(s.id);
            let rejected =
                NewEvent::new(EventKind::Rejected).with_detail(json!({"reason": reason}));
            match self.ledger.append(s.id, rejected, now()).await {
                Ok(_) | Err(LedgerError::Transition { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.run_view_of(run_id).await
    }

    /// If `view` waits only for its run and the run is authorized now: recorded `authorized`
    /// and, when this process holds its arguments, sent. Whether it was released.
    pub(super) async fn release_if_authorized(
        self: &Arc<Self>,
        view: &ExecutionView,
    ) -> Result<bool, GatewayError> {
        match self.release(view).await? {
            Some(summary) => {
                self.send_held(summary).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Records `authorized` (naming the run's authorizer) for an execution that waits only for
    /// its run, once the run is authorized; the execution then, or `None`.
    pub(super) async fn release(
        &self,
        view: &ExecutionView,
    ) -> Result<Option<ExecutionSummary>, GatewayError> {
        if self.expire_if_due(view).await? {
            return Ok(None);
        }
        let Some(authorized_by) = self.run_authorizes(view).await? else {
            return Ok(None);
        };
        let detail = json!({
            "run_authorized_by": authorized_by,
            "run_id": view.summary.run_id,
        });
        let authorized = NewEvent::new(EventKind::Authorized).with_detail(detail);
        match self.ledger.append(view.summary.id, authorized, now()).await {
            Ok(s) => Ok(Some(s)),
            Err(LedgerError::Transition { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The operator who authorized the run `view` waits for, when that is all it waits for
    /// and the run is authorized (and not revoked).
    pub(super) async fn run_authorizes(
        &self,
        view: &ExecutionView,
    ) -> Result<Option<String>, GatewayError> {
        let waits = waits_for(&view.events);
        if view.summary.lifecycle.state != State::AwaitingApproval
            || waits.call
            || waits.run.is_none()
        {
            return Ok(None);
        }
        let Some(run_id) = waits.run else {
            return Ok(None);
        };
        Ok(match self.ledger.run(&run_id).await? {
            Some(Run {
                authorized: Some((by, _)),
                revoked: None,
                ..
            }) => Some(by),
            _ => None,
        })
    }

    /// Executions of the run waiting for approval.
    async fn waiting_in(&self, run_id: &str) -> Result<Vec<ExecutionView>, GatewayError> {
        let filter = ListFilter {
            state: Some(State::AwaitingApproval.as_str().to_string()),
            run_id: Some(run_id.to_string()),
            limit: 1000,
            ..ListFilter::default()
        };
        let mut out = Vec::new();
        for s in self.ledger.list(&filter).await? {
            if let Some(view) = self.ledger.execution(s.id).await? {
                out.push(view);
            }
        }
        Ok(out)
    }

    async fn decide_run(
        &self,
        run_id: &str,
        decision: RunDecision,
        operator: &str,
    ) -> Result<(), GatewayError> {
        let shown = || run_id.chars().take(200).collect::<String>();
        let Some(run) = self.ledger.run(run_id).await? else {
            return Err(DecisionError::UnknownRun(shown()).into());
        };
        if self
            .ledger
            .decide_run(run_id, decision.clone(), operator, now())
            .await?
        {
            self.notices.notify(super::Notice::Decided);
            return Ok(());
        }
        let run = self.ledger.run(run_id).await?.unwrap_or(run);
        let (what, by, at) = match (&run.revoked, &run.authorized) {
            (Some((by, at)), _) => ("revoked", by.clone(), *at),
            (None, Some((by, at))) => ("authorized", by.clone(), *at),
            (None, None) => ("pending", String::new(), Timestamp(0)),
        };
        Err(DecisionError::RunDecided {
            run: shown(),
            what,
            by,
            at,
        }
        .into())
    }

    async fn run_view_of(&self, run_id: &str) -> Result<RunView, GatewayError> {
        let run = self
            .ledger
            .run(run_id)
            .await?
            .ok_or_else(|| DecisionError::UnknownRun(run_id.chars().take(200).collect()))?;
        Ok(self.run_view(&run))
    }

    fn run_view(&self, run: &Run) -> RunView {
        let requires_authorization = self
            .config
            .actor(&run.actor)
            .is_some_and(|a| a.session_approval == SessionApproval::Required);
        let authorization = match (&run.revoked, &run.authorized) {
            (Some(_), _) => "revoked",
            (None, Some(_)) => "authorized",
            (None, None) if requires_authorization => "pending",
            (None, None) => "not_required",
        };
        RunView {
            run_id: run.id.clone(),
            actor: run.actor.clone(),
            client: run.client_name.clone(),
            client_version: run.client_version.clone(),
            client_address: run.client_address.clone(),
            principal: run.principal.as_ref().map(
                |p| json!({"issuer": p.issuer, "subject": p.subject, "client_id": p.client_id}),
            ),
            protocol_version: run.protocol_version.clone(),
            transport: run.transport.clone(),
            started_at: run.started_at.to_string(),
            ended_at: run.ended_at.map(|t| t.to_string()),
            end_reason: run.end_reason.map(|e| e.as_str()),
            requires_authorization,
            authorization,
            authorized_by: run.authorized.as_ref().map(|a| a.0.clone()),
            authorized_at: run.authorized.as_ref().map(|a| a.1.to_string()),
            revoked_by: run.revoked.as_ref().map(|r| r.0.clone()),
            revoked_at: run.revoked.as_ref().map(|r| r.1.to_string()),
        }
    }
}
