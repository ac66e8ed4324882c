//! The recovery half of the pipeline: what a call matched to an earlier execution gets, per the
//! core's `RecoveryDecision` (contract §4). Attach with a bounded wait, answer from the record,
//! or settle an unknown outcome: status query, re-dispatch with the same key, precondition
//! probe, or `needs_review`. A probe that cannot get an answer settles nothing.

use std::ops::ControlFlow;
use std::time::Duration;

use postern_channels::{Answer, AnswerVerdict, Outcome, Question, Reading};
use postern_core::lifecycle::State;
use postern_core::recovery::{RecoveryDecision, UnknownFallback};
use postern_core::{EventKind, ExecutionId};
use postern_ledger::{ExecutionSummary, LedgerError, NewEvent};
use serde_json::json;

use std::sync::Arc;

use postern_core::config::Config;
use postern_ledger::Ledger;

use super::approvals::Approvals;
use super::dispatch::Dispatch;
use super::records::Records;
use super::{now, ToolCall};
use crate::error::GatewayError;
use crate::registry::ToolEntry;
use crate::report::{next_step, unsettled_next_step, Attempt, CallReport};

/// Recovers calls matched to an earlier execution. Calls down into [`Approvals`],
/// [`Dispatch`] and [`Records`]; nothing calls back into it but the gateway.
pub(super) struct Recovery {
    pub(super) ledger: Arc<Ledger>,
    pub(super) config: Arc<Config>,
    pub(super) records: Arc<Records>,
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) approvals: Arc<Approvals>,
}

impl Recovery {
    pub(super) async fn recover(
        &self,
        entry: &ToolEntry,
        decision: RecoveryDecision,
        prior: ExecutionSummary,
        call: &ToolCall,
    ) -> Result<CallReport, GatewayError> {
        use RecoveryDecision as D;
        match decision {
            D::New { .. } => Err(GatewayError::Internal(
                "the ledger matched a call the decision calls new".into(),
            )),
            D::Conflict { original } => Err(GatewayError::Conflict {
                key: call.operation_key.clone().unwrap_or_default(),
                original,
                accepted_at: prior.accepted_at,
            }),
            D::Continue { execution_id } => {
                // Nothing is dispatched for a caller that is already gone.
                if call.is_cancelled() {
                    return Err(GatewayError::Cancelled);
                }
                if let Some(r) = self.held_back(entry, execution_id, call).await? {
                    return Ok(r);
                }
                if prior.lifecycle.state == State::Accepted {
                    self.records
                        .append(execution_id, NewEvent::new(EventKind::Authorized))
                        .await?;
                }
                // Where it goes, as every `dispatched` event records (this call's arguments
                // have the execution's fingerprint, so the same target).
                // The first call's arguments when this process holds them (a retry's
                // non-semantic fields never replace what was approved).
                let held = self.approvals.take_held(execution_id);
                let call = held.as_ref().unwrap_or(call);
                let target = self
                    .dispatch
                    .target_now(entry, &call.arguments)
                    .await
                    .map_err(GatewayError::Internal)?;
                let dispatched = NewEvent::new(EventKind::Dispatched).with_detail(target.clone());
                match self.ledger.append(execution_id, dispatched, now()).await {
                    Ok(s) => {
                        self.dispatch
                            .send(entry, s, call, Attempt::Attached, Some(target))
                            .await
                    }
                    // Someone else dispatched it meanwhile: join them.
                    Err(LedgerError::Transition { .. }) => self.attach(execution_id).await,
                    Err(e) => Err(e.into()),
                }
            }
            D::Attach { execution_id } => self.attach(execution_id).await,
            D::AwaitApproval { execution_id, .. } => {
                // The pending request, never a second one; its expiry is checked on the way. A
                // call whose run was authorized meanwhile goes on now, with this call's
                // arguments; otherwise they are kept (after a restart they were lost) so an
                // approval sends it at once.
                if let Some(view) = self.ledger.read().execution(execution_id).await? {
                    if !self.approvals.expire_if_due(&view).await? {
                        // Released only when this call may send it now.
                        if self.held_back(entry, execution_id, call).await?.is_none() {
                            if let Some(released) = self.approvals.release(&view).await? {
                                let go_on = D::Continue { execution_id };
                                return Box::pin(self.recover(entry, go_on, released, call)).await;
                            }
                        }
                        self.approvals.hold_for_approval(execution_id, call);
                    }
                }
                self.records
                    .stored_report(execution_id, Attempt::Recovered)
                    .await
            }
            D::ReturnDenial { execution_id }
            | D::ReturnReview { execution_id }
            | D::ReturnResolution { execution_id, .. } => {
                self.records
                    .stored_report(execution_id, Attempt::Recovered)
                    .await
            }
            D::ReturnResult { execution_id, .. } => {
                self.records
                    .stored_report(execution_id, Attempt::Recovered)
                    .await
            }
            D::RecoverUnknown {
                execution_id,
                status_query_first,
                fallback,
            } => {
                debug_assert_eq!(execution_id, prior.id);
                self.recover_unknown(entry, prior, status_query_first, fallback, call)
                    .await
            }
        }
    }

    /// What stops this call from sending anything for a matched execution now, as its answer:
    /// a locked vault, or this call's run not yet authorized (its identical call from an
    /// authorized run may). `None`: it may send.
    async fn held_back(
        &self,
        entry: &ToolEntry,
        id: ExecutionId,
        call: &ToolCall,
    ) -> Result<Option<CallReport>, GatewayError> {
        let why = match (self.dispatch.vault_refuses(entry), self.approvals.session_gate(call).await?) {
            (Some(why), _) => format!("{why}: nothing was sent. Repeat the identical call once an operator has unlocked it (postern vault unlock)"),
            (None, Some(run)) => format!("this call's run {run} is not authorized yet: nothing was sent. An operator authorizes it with postern sessions authorize {run}; then repeat the identical call"),
            (None, None) => return Ok(None),
        };
        let mut report = self.records.stored_report(id, Attempt::Recovered).await?;
        report.next_step = Some(why);
        Ok(Some(report))
    }

    /// Waits (bounded) for an in-flight execution's result.
    async fn attach(&self, id: ExecutionId) -> Result<CallReport, GatewayError> {
        let deadline = tokio::time::Instant::now() + self.config.gateway.attach_wait;
        let mut pause = Duration::from_millis(5);
        loop {
            let s = self
                .ledger
                .read()
                .summary(id)
                .await?
                .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
            let in_flight = matches!(
                s.lifecycle.state,
                State::Accepted | State::Authorized | State::Dispatched
            );
            if !in_flight || tokio::time::Instant::now() >= deadline {
                let mut r = self.records.stored_report(id, Attempt::Attached).await?;
                if in_flight {
                    r.next_step = next_step(State::Dispatched, id);
                }
                return Ok(r);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Settles an unknown outcome: the status query first (if the contract has one and the
    /// decision asks for it), then the class's fallback. A probe that cannot get an answer
    /// (nothing sent, no answer, a 5xx) settles nothing: the execution stays `outcome_unknown`
    /// and the caller is told to repeat the identical call later, never to start a new action.
    async fn recover_unknown(
        &self,
        entry: &ToolEntry,
        prior: ExecutionSummary,
        status_query_first: bool,
        fallback: UnknownFallback,
        call: &ToolCall,
    ) -> Result<CallReport, GatewayError> {
        let id = prior.id;
        let said = if status_query_first && entry.contract.recovery.has_status_probe() {
            match self.status_query(entry, call, &prior).await {
                ControlFlow::Break(settled) => return settled,
                ControlFlow::Continue(said) => said,
            }
        } else {
            StatusSaid::default()
        };
        let redispatch = match self.fallback(entry, fallback, said, call, &prior).await {
            ControlFlow::Break(answered) => return answered,
            ControlFlow::Continue(redispatch) => redispatch,
        };
        if redispatch && call.is_cancelled() {
            // The caller went away while we looked: its outcome stays unknown, nothing re-sent.
            return Err(GatewayError::Cancelled);
        }
        if redispatch {
            self.redispatch_unknown(entry, id, call).await
        } else {
            self.require_review(id, said.not_found).await
        }
    }

    /// Asks the target's status query: a known key settles the execution as applied (the
    /// answer, `Break`); otherwise what it said for the fallback to weigh.
    async fn status_query(
        &self,
        entry: &ToolEntry,
        call: &ToolCall,
        prior: &ExecutionSummary,
    ) -> ControlFlow<Result<CallReport, GatewayError>, StatusSaid> {
        match self.read(entry, Question::Status, call, prior).await {
            Reading::Yes(a) => {
                // The target knows this execution's key: it was applied.
                let applied = Outcome::Answered(with_verdict(a, AnswerVerdict::Applied));
                ControlFlow::Break(self.settle(prior, applied, "status_query").await)
            }
            Reading::NotFound => ControlFlow::Continue(StatusSaid {
                not_found: true,
                unsettled: false,
            }),
            Reading::No | Reading::NoAnswer => ControlFlow::Continue(StatusSaid {
                not_found: false,
                unsettled: true,
            }),
        }
    }

    /// Whether the class's fallback re-sends the same execution (`false`: an operator
    /// reviews it), or the call's answer when the fallback settled it or could not decide.
    async fn fallback(
        &self,
        entry: &ToolEntry,
        fallback: UnknownFallback,
        said: StatusSaid,
        call: &ToolCall,
        prior: &ExecutionSummary,
    ) -> ControlFlow<Result<CallReport, GatewayError>, bool> {
        let recovery = &entry.contract.recovery;
        ControlFlow::Continue(match fallback {
            UnknownFallback::RedispatchSameKey => true,
            UnknownFallback::RedispatchIfPreconditionHolds => {
                match self.read(entry, Question::Precondition, call, prior).await {
                    Reading::Yes(_) => true,
                    // The precondition answered and no longer holds: a human decides.
                    Reading::No | Reading::NotFound => false,
                    Reading::NoAnswer if recovery.precondition.is_none() => false,
                    Reading::NoAnswer => {
                        return ControlFlow::Break(self.stay_unknown(prior.id).await)
                    }
                }
            }
            // An irreversible tool is re-sent only when the target itself said it never saw it.
            UnknownFallback::Review if said.unsettled => {
                return ControlFlow::Break(self.stay_unknown(prior.id).await)
            }
            UnknownFallback::Review => {
                said.not_found
                    && recovery.has_status_probe()
                    && entry.contract.class != postern_core::ActionClass::Irreversible
            }
            UnknownFallback::QueryMarker => return self.query_marker(entry, call, prior).await,
        })
    }

    /// Asks the host for the command's marker: a finished command's result settles it, no
    /// marker re-sends it, anything else goes to a person or waits for a later retry.
    async fn query_marker(
        &self,
        entry: &ToolEntry,
        call: &ToolCall,
        prior: &ExecutionSummary,
    ) -> ControlFlow<Result<CallReport, GatewayError>, bool> {
        ControlFlow::Continue(
            match self.read(entry, Question::Marker, call, prior).await {
                // It finished on the host: its exit code and output are the result. An exit
                // code the contract cannot read as applied or unchanged goes to a person.
                Reading::Yes(a) if a.verdict != AnswerVerdict::Unknown => {
                    return ControlFlow::Break(
                        self.settle(prior, Outcome::Answered(a), "marker").await,
                    )
                }
                Reading::Yes(_) => false,
                // No marker: the command provably never started; the same execution is
                // sent again (its claim makes a second start impossible).
                Reading::NotFound => true,
                // Started and died unfinished, or another intent's marker: a person decides.
                Reading::No => false,
                // Unreachable, or still running after the wait: settled by a later retry.
                Reading::NoAnswer => return ControlFlow::Break(self.stay_unknown(prior.id).await),
            },
        )
    }

    /// Records the outcome a probe learnt (`via`); one recorded meanwhile by another call is
    /// joined instead.
    async fn settle(
        &self,
        prior: &ExecutionSummary,
        outcome: Outcome,
        via: &str,
    ) -> Result<CallReport, GatewayError> {
        match self
            .dispatch
            .record_outcome(
                prior,
                outcome,
                Attempt::Recovered,
                super::dispatch::Noted {
                    via: Some(via),
                    asked_client: false,
                },
            )
            .await
        {
            Err(GatewayError::Ledger(LedgerError::Transition { .. })) => {
                self.attach(prior.id).await
            }
            other => other,
        }
    }

    /// Sends the same execution again, with the same idempotency key.
    async fn redispatch_unknown(
        &self,
        entry: &ToolEntry,
        id: ExecutionId,
        call: &ToolCall,
    ) -> Result<CallReport, GatewayError> {
        // Not re-sent by a call whose run is not authorized, nor while the vault is locked.
        if let Some(r) = self.held_back(entry, id, call).await? {
            return Ok(r);
        }
        match self
            .ledger
            .append(
                id,
                NewEvent::new(EventKind::Dispatched)
                    .with_detail(json!({"reason": "recovering an unknown outcome"})),
                now(),
            )
            .await
        {
            Ok(s) => {
                self.dispatch
                    .send(entry, s, call, Attempt::Recovered, None)
                    .await
            }
            Err(LedgerError::Transition { .. }) => self.attach(id).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Sends an unknown outcome that cannot be safely re-sent to an operator's review.
    async fn require_review(
        &self,
        id: ExecutionId,
        known_not_applied: bool,
    ) -> Result<CallReport, GatewayError> {
        let detail = json!({"reason": "the outcome is unknown and this tool cannot be safely re-sent", "status_query_said_not_found": known_not_applied});
        match self
            .ledger
            .append(
                id,
                NewEvent::new(EventKind::ReviewRequired).with_detail(detail),
                now(),
            )
            .await
        {
            Ok(s) => Ok(self.records.report(&s, Attempt::Recovered, None, None)),
            Err(LedgerError::Transition { .. }) => {
                self.records.stored_report(id, Attempt::Recovered).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Asks the target a read-only question about an execution (status query, precondition);
    /// a tool without that question, or whose credential cannot be had, gets no answer.
    async fn read(
        &self,
        entry: &ToolEntry,
        question: Question,
        call: &ToolCall,
        prior: &ExecutionSummary,
    ) -> Reading {
        let (id, intent) = (prior.id.to_string(), prior.fingerprint.to_string());
        let cancel = tokio_util::sync::CancellationToken::new();
        let Ok(mut action) = self
            .dispatch
            .action(entry, &call.arguments, (&id, &intent), cancel)
        else {
            return Reading::NoAnswer;
        };
        action.recorded_target = self.dispatch.recorded_target(prior.id).await;
        let reading = match entry.channel.ask(question, action) {
            Some(asking) => asking.await,
            None => Reading::NoAnswer,
        };
        reading
    }

    /// The target could not be asked: nothing is recorded, the execution stays unknown, and
    /// the caller learns how to settle it without a second action.
    async fn stay_unknown(&self, id: ExecutionId) -> Result<CallReport, GatewayError> {
        let mut report = self.records.stored_report(id, Attempt::Recovered).await?;
        if report.state == State::OutcomeUnknown {
            report.next_step = Some(unsettled_next_step(id));
        }
        Ok(report)
    }
}

/// What a status query that did not settle an unknown outcome said of it.
#[derive(Clone, Copy, Default)]
struct StatusSaid {
    /// The target does not know the execution's key: it was not applied.
    not_found: bool,
    /// No answer, or not a usable one: nothing is known.
    unsettled: bool,
}

fn with_verdict(mut a: Answer, verdict: AnswerVerdict) -> Answer {
    a.verdict = verdict;
    a
}
