//! What every part of the pipeline records through and answers from: appending an event,
//! a call's report from an execution's summary or from its stored record, and the deliveries
//! of answers. The bottom part: it calls no other.

use std::sync::Arc;

use postern_core::contract::ChannelSpec;
use postern_core::lifecycle::{State, Verdict};
use postern_core::{EventKind, ExecutionId};
use postern_ledger::{ExecutionSummary, Ledger, NewEvent};
use serde_json::Value;

use super::now;
use crate::error::GatewayError;
use crate::registry::Registry;
use crate::report::{next_step, Attempt, CallReport};

/// The record as the pipeline's parts read and extend it.
pub struct Records {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
}

impl Records {
    pub(super) fn new(ledger: Arc<Ledger>, registry: Arc<Registry>) -> Records {
        Records { ledger, registry }
    }

    pub(super) async fn append(
        &self,
        id: ExecutionId,
        event: NewEvent,
    ) -> Result<ExecutionSummary, GatewayError> {
        Ok(self.ledger.append(id, event, now()).await?)
    }

    pub(super) fn report(
        &self,
        s: &ExecutionSummary,
        attempt: Attempt,
        target_status: Option<u16>,
        response: Option<Value>,
    ) -> CallReport {
        let is_error = matches!(
            s.lifecycle.state,
            State::Failed
                | State::Rejected
                | State::Completed(Verdict::Rejected)
                | State::Delivered(Verdict::Rejected)
        );
        let entry = self.registry.get(&s.tool);
        let window_ends = entry
            .as_ref()
            .map(|e| s.accepted_at.saturating_add(e.contract.match_window));
        let upstream_result = entry
            .as_ref()
            .is_some_and(|e| matches!(e.contract.channel, ChannelSpec::Mcp(_)));
        // The upstream lists an output schema: its structured content is the tool's own.
        let upstream_structured = entry.is_some_and(|e| e.has_output_schema());
        // An upstream that answered `isError: true` said its call failed, whatever the
        // contract records of the effect: the client is told so as it would be directly.
        let is_error = is_error
            || (upstream_result
                && response
                    .as_ref()
                    .is_some_and(|r| r.get("isError") == Some(&Value::Bool(true))));
        CallReport {
            execution_id: s.id,
            tool: s.tool.clone(),
            attempt,
            state: s.lifecycle.state,
            fingerprint: s.fingerprint,
            accepted_at: s.accepted_at,
            first_dispatched_at: s.first_dispatched_at,
            window_ends,
            target_status,
            next_step: crate::report::upstream_error_step(
                s.lifecycle.state,
                s.id,
                response.as_ref().filter(|_| upstream_result),
            )
            .or_else(|| next_step(s.lifecycle.state, s.id)),
            response,
            upstream_result,
            upstream_structured,
            decision: None,
            budget_left: None,
            is_error,
        }
    }

    /// A report from the stored record (status and answer as recorded).
    pub(super) async fn stored_report(
        &self,
        id: ExecutionId,
        attempt: Attempt,
    ) -> Result<CallReport, GatewayError> {
        let view = self
            .ledger
            .read()
            .execution(id)
            .await?
            .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
        let status = view
            .events
            .iter()
            .rev()
            .find_map(|e| e.body.detail.get("target_status").and_then(Value::as_u64))
            .and_then(|s| u16::try_from(s).ok());
        let response = view.result.as_ref().map(|r| response_value(&r.body));
        let mut report = self.report(&view.summary, attempt, status, response);
        report.decision = crate::decision::decision_of(&view);
        if view.summary.lifecycle.state == State::Authorized && report.decision.is_some() {
            let id = view.summary.id;
            report.next_step = Some(format!("approved; it is being sent. If it still reads authorized (the gateway restarted before sending it), repeat the identical call: that sends it, once. Check with execution_status({id})"));
        }
        // A budget used up says which, its use, and what happens now.
        let state = view.summary.lifecycle.state;
        if matches!(state, State::Rejected | State::AwaitingApproval) {
            let waits = state == State::AwaitingApproval;
            let asked = |e: &&postern_audit::ChainedEvent| {
                matches!(
                    e.body.event,
                    EventKind::Rejected | EventKind::ApprovalRequested
                )
            };
            if let Some(step) = view
                .events
                .iter()
                .rev()
                .find(asked)
                .and_then(|e| crate::report::budget_step(&e.body.detail, waits))
            {
                report.next_step = Some(step);
                return Ok(report);
            }
        }
        // A refusal says what to do in its own event (a locked vault: repeat once unlocked).
        if view.summary.lifecycle.state == State::Rejected {
            report.next_step = view
                .events
                .iter()
                .rev()
                .find(|e| e.body.event == EventKind::Rejected)
                .and_then(|e| e.body.detail.get("next_step"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(report.next_step);
        }
        Ok(report)
    }

    /// An actor's execution and its report as recorded now (an MCP task's status and result).
    /// Another actor's execution is indistinguishable from a missing one.
    pub async fn recorded(
        &self,
        id: ExecutionId,
        actor: &str,
    ) -> Result<(ExecutionSummary, CallReport), GatewayError> {
        let summary = self
            .ledger
            .read()
            .summary(id)
            .await?
            .filter(|s| s.actor == actor)
            .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
        let report = self.stored_report(id, Attempt::New).await?;
        Ok((summary, report))
    }

    /// As [`Records::record_delivery`], for answers that repeat an earlier one (a replayed
    /// stream): recorded only for executions whose answer was not yet delivered, so re-reading
    /// a delivered result never grows the chain.
    pub async fn record_first_delivery(&self, ids: &[ExecutionId], delivered: bool) {
        let mut first = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(Some(s)) = self.ledger.read().summary(*id).await {
                if matches!(s.lifecycle.state, State::Completed(_)) {
                    first.push(*id);
                }
            }
        }
        self.record_delivery(&first, delivered);
    }

    /// Records that the answer for these executions was (or was not) fully written out. Only a
    /// completed execution has a delivery to record: for any other the ledger refuses the event
    /// (an impossible transition), which is what lets this skip a read first.
    /// Nothing waits for these records: they are queued and ride a later commit.
    pub fn record_delivery(&self, ids: &[ExecutionId], delivered: bool) {
        let kind = if delivered {
            EventKind::Delivered
        } else {
            EventKind::DeliveryFailed
        };
        for id in ids {
            self.ledger.append_later(*id, NewEvent::new(kind), now());
        }
    }
}

/// The target's body as JSON when it is JSON, else as text.
pub(super) fn response_value(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}
