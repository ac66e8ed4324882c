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

use postern_core::config::SessionApproval;
use postern_core::lifecycle::State;
use postern_core::{EventKind, Timestamp};
use postern_ledger::{
    ExecutionSummary, ExecutionView, LedgerError, ListFilter, NewEvent, Run, RunDecision,
};
use serde_json::json;

use super::approvals::Approvals;
use super::{now, Notice, ToolCall};
use crate::decision::waits_for;
use crate::error::GatewayError;
use crate::gateway::DecisionError;

impl Approvals {
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
        match self.ledger.read().run(run_id).await? {
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

    /// If `view` waits only for its run and the run is authorized now: recorded `authorized`
    /// and, when this process holds its arguments, sent. Whether it was released.
    pub(super) async fn release_if_authorized(
        &self,
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
        Ok(match self.ledger.read().run(&run_id).await? {
            Some(Run {
                authorized: Some((by, _)),
                revoked: None,
                ..
            }) => Some(by),
            _ => None,
        })
    }

    /// Executions of the run waiting for approval.
    pub(super) async fn waiting_in(
        &self,
        run_id: &str,
    ) -> Result<Vec<ExecutionView>, GatewayError> {
        let filter = ListFilter {
            state: Some(State::AwaitingApproval.as_str().to_string()),
            run_id: Some(run_id.to_string()),
            limit: 1000,
            ..ListFilter::default()
        };
        let mut out = Vec::new();
        for s in self.ledger.read().list(&filter).await? {
            if let Some(view) = self.ledger.read().execution(s.id).await? {
                out.push(view);
            }
        }
        Ok(out)
    }

    pub(super) async fn decide_run(
        &self,
        run_id: &str,
        decision: RunDecision,
        operator: &str,
    ) -> Result<(), GatewayError> {
        let shown = || run_id.chars().take(200).collect::<String>();
        let Some(run) = self.ledger.read().run(run_id).await? else {
            return Err(DecisionError::UnknownRun(shown()).into());
        };
        if self
            .ledger
            .decide_run(run_id, decision.clone(), operator, now())
            .await?
        {
            self.notices.notify(Notice::Decided);
            return Ok(());
        }
        let run = self.ledger.read().run(run_id).await?.unwrap_or(run);
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
}
