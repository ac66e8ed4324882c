//! What operators do, in one handle (`/ops`, the console, the CLI through them): approve or
//! deny a call, resolve a review, authorize or revoke a run, read what waits for them, and the
//! gateway's status. It decides through [`Approvals`] and reads the record; nothing below calls
//! back into it.

use std::sync::Arc;

use postern_core::config::Config;
use postern_core::lifecycle::{Resolution, State};
use postern_core::{EventKind, ExecutionId};
use postern_ledger::{Ledger, LedgerError, ListFilter, NewEvent, RunDecision};
use serde_json::json;

use super::approvals::Approvals;
use super::dispatch::Dispatch;
use super::runs::{RunView, Runs};
use super::upstreams::UpstreamTools;
use super::{now, Notice, Notices};
use crate::decision::{decided, decision_view, waits_for, DecisionError, PendingDecision};
use crate::error::GatewayError;
use crate::telemetry::{CheckpointView, Status, UpstreamHealth};

/// The operator-facing handle of a gateway ([`super::Gateway::operator`]).
pub struct Operator {
    pub(super) ledger: Arc<Ledger>,
    pub(super) config: Arc<Config>,
    pub(super) approvals: Arc<Approvals>,
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) runs: Arc<Runs>,
    pub(super) notices: Arc<Notices>,
    pub(super) upstream_tools: Arc<UpstreamTools>,
}

impl Operator {
    /// Approves one execution awaiting approval, which the operator identified by its id and
    /// fingerprint; sends it at once when this process holds its arguments.
    pub async fn approve(
        &self,
        id: &str,
        operator: &str,
        fingerprint: &str,
        reason: Option<String>,
    ) -> Result<PendingDecision, GatewayError> {
        let view = self.approvals.awaiting(id).await?;
        let s = &view.summary;
        // The run it waits for, or (for an actor authorized per run) the run it was made in:
        // a revoked run's calls are never approved.
        let required = self
            .config
            .actor(&s.actor)
            .is_some_and(|a| a.session_approval == postern_core::config::SessionApproval::Required);
        let run = waits_for(&view.events)
            .run
            .or_else(|| s.run_id.clone().filter(|_| required));
        if let Some(run) = &run {
            self.approvals.run_allows(s.id, run).await?;
        }
        if s.fingerprint.to_string() != fingerprint {
            return Err(DecisionError::FingerprintMismatch {
                id: s.id,
                given: fingerprint.chars().take(80).collect(),
                actual: s.fingerprint.to_string(),
            }
            .into());
        }
        let detail = json!({
            "approved_by": operator,
            "reason": reason,
            "fingerprint": s.fingerprint.to_string(),
        });
        let approved = self
            .approvals
            .decide(
                s.id,
                NewEvent::new(EventKind::Authorized).with_detail(detail),
            )
            .await?;
        // A revocation of the run that landed between the check and the approval wins: the
        // approved call is rejected before anything is dispatched.
        if let Some(run) = &run {
            if let Err(revoked) = self.approvals.run_allows(s.id, run).await {
                let why = json!({"reason": format!("run {run} was revoked as it was approved")});
                let rejected = NewEvent::new(EventKind::Rejected).with_detail(why);
                if let Err(e) = self.ledger.append(s.id, rejected, now()).await {
                    // Still authorized in the record: nothing sends it (its arguments are dropped
                    // here), and an identical retry is told to repeat once it can be recorded.
                    tracing::warn!(execution_id = %s.id, error = %e, "a revoked run's approved call could not be recorded rejected");
                }
                self.approvals.take_held(s.id);
                return Err(revoked);
            }
        }
        if let Some(call) = self.approvals.take_held(s.id) {
            self.approvals.send_approved(approved, call).await?;
        }
        self.pending_decision(s.id).await
    }

    /// Denies one execution awaiting approval: final for that execution.
    pub async fn deny(
        &self,
        id: &str,
        operator: &str,
        reason: Option<String>,
    ) -> Result<PendingDecision, GatewayError> {
        let view = self.approvals.awaiting(id).await?;
        let detail = json!({"denied_by": operator, "reason": reason});
        self.approvals
            .decide(
                view.summary.id,
                NewEvent::new(EventKind::Denied).with_detail(detail),
            )
            .await?;
        self.approvals.take_held(view.summary.id);
        self.pending_decision(view.summary.id).await
    }

    /// Records an operator's resolution of an execution under review.
    pub async fn resolve_review(
        &self,
        id: &str,
        operator: &str,
        resolution: Resolution,
        reason: String,
    ) -> Result<PendingDecision, GatewayError> {
        let view = self.approvals.view_of(id).await?;
        let s = &view.summary;
        if s.lifecycle.state != State::NeedsReview {
            return Err(DecisionError::NotUnderReview {
                id: s.id,
                state: s.lifecycle.state.display_name(),
                decided: decided(&view.events),
            }
            .into());
        }
        let detail = json!({"resolved_by": operator, "reason": reason});
        let event = NewEvent::new(EventKind::Resolved(resolution)).with_detail(detail);
        match self.ledger.append(s.id, event, now()).await {
            Ok(_) => {
                self.notices.notify(Notice::Decided);
                self.pending_decision(s.id).await
            }
            Err(LedgerError::Transition { .. }) => {
                let view = self.approvals.view_of(id).await?;
                Err(DecisionError::NotUnderReview {
                    id: view.summary.id,
                    state: view.summary.lifecycle.state.display_name(),
                    decided: decided(&view.events),
                }
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Executions awaiting approval (`State::AwaitingApproval`) or review, newest first.
    pub async fn pending(&self, state: State) -> Result<Vec<PendingDecision>, GatewayError> {
        self.pending_page(state, 1000, None).await
    }

    /// One execution as an operator sees it (any state).
    pub async fn pending_decision(&self, id: ExecutionId) -> Result<PendingDecision, GatewayError> {
        let view = self.approvals.view_of(&id.to_string()).await?;
        let mut p = decision_view(&view);
        p.request = self.approvals.held_request(id, &view.summary.tool);
        Ok(p)
    }

    /// Authorizes a run once, and releases its waiting calls.
    pub async fn authorize_run(
        &self,
        run_id: &str,
        operator: &str,
    ) -> Result<RunView, GatewayError> {
        self.approvals
            .decide_run(run_id, RunDecision::Authorize, operator)
            .await?;
        for view in self.approvals.waiting_in(run_id).await? {
            self.approvals.release_if_authorized(&view).await?;
        }
        self.runs.view_of(run_id).await
    }

    /// Revokes a run: its waiting calls are denied, its next calls refused.
    pub async fn revoke_run(&self, run_id: &str, operator: &str) -> Result<RunView, GatewayError> {
        self.approvals
            .decide_run(run_id, RunDecision::Revoke, operator)
            .await?;
        let reason = format!("run {run_id} revoked by {operator}");
        for view in self.approvals.waiting_in(run_id).await? {
            let detail = json!({"denied_by": operator, "reason": reason});
            let denied = NewEvent::new(EventKind::Denied).with_detail(detail);
            self.approvals.take_held(view.summary.id);
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
        for s in self.ledger.read().list(&authorized).await? {
            self.approvals.take_held(s.id);
            let rejected =
                NewEvent::new(EventKind::Rejected).with_detail(json!({"reason": reason}));
            match self.ledger.append(s.id, rejected, now()).await {
                Ok(_) | Err(LedgerError::Transition { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.runs.view_of(run_id).await
    }

    /// One page of the executions in `state` (awaiting approval, or under review), newest
    /// first, older than `before` when given.
    pub async fn pending_page(
        &self,
        state: State,
        limit: u32,
        before: Option<ExecutionId>,
    ) -> Result<Vec<PendingDecision>, GatewayError> {
        let filter = ListFilter {
            state: Some(state.as_str().to_string()),
            limit,
            before,
            ..ListFilter::default()
        };
        let mut out = Vec::new();
        for s in self.ledger.read().list(&filter).await? {
            if let Ok(p) = self.pending_decision(s.id).await {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// How many executions in `state` are older than `before` (all of them without it): what
    /// a page ending at `before` leaves out.
    pub async fn pending_count(
        &self,
        state: State,
        before: Option<ExecutionId>,
    ) -> Result<u64, GatewayError> {
        let filter = ListFilter {
            state: Some(state.as_str().to_string()),
            before,
            ..ListFilter::default()
        };
        Ok(self.ledger.read().count(&filter).await?)
    }

    /// Every budget and its use now, per scope.
    pub async fn budgets(&self) -> Result<Vec<crate::telemetry::BudgetView>, GatewayError> {
        super::budgets::views(&self.config, &self.ledger, now()).await
    }

    /// The running gateway at a glance.
    pub async fn status(&self) -> Status {
        let at = now();
        let started = std::time::Instant::now();
        let (store_state, health) = match self.ledger.read().health(at).await {
            Ok(h) => ("ok".to_string(), h),
            Err(e) => (e.to_string(), Default::default()),
        };
        let age = |t: postern_core::Timestamp| (at.0 - t.0).max(0) as f64 / 1000.0;
        Status {
            instance: self.ledger.instance().to_string(),
            store: match self.ledger.dialect() {
                postern_ledger::Dialect::Sqlite => "sqlite",
                postern_ledger::Dialect::Postgres => "postgres",
            },
            store_state,
            store_read_seconds: started.elapsed().as_secs_f64(),
            ledger_queue: self.ledger.queue_depth(),
            upstreams: self
                .upstream_tools
                .upstream_views()
                .into_iter()
                .map(|u| UpstreamHealth {
                    up: u.down.is_none(),
                    why: u.down,
                    pid: u.pid,
                    withheld_tools: u.tools.iter().filter(|t| t.state == "withheld").count(),
                    name: u.name,
                })
                .collect(),
            vault: match self.dispatch.vault() {
                None => "none",
                Some(v) if v.is_locked() => "locked",
                Some(_) => "unlocked",
            },
            approvals_pending: health.awaiting_approval,
            oldest_approval_age_seconds: health.oldest_approval_since.map(age),
            reviews_pending: health.needs_review,
            outcome_unknown: health.outcome_unknown,
            outcome_unknown_last_hour: health.unknown_last_hour,
            dispatched: health.dispatched,
            runs_open: self.runs.open_count(),
            last_checkpoint: health.last_checkpoint.map(|c| CheckpointView {
                age_seconds: age(c.at),
                at: c.at.to_string(),
                seq: c.seq,
                chain: c.chain,
            }),
            signing_refused: self.ledger.signing_refused(),
            budgets: super::budgets::views(&self.config, &self.ledger, at)
                .await
                .unwrap_or_default(),
        }
    }
}
