//! Dispatch: sending a dispatched execution through its channel and recording what came of
//! it, durably, before anyone is answered. The pipeline knows no channel: it builds an
//! [`Action`] (the credential resolved here, from the config or the vault, once for the
//! action and its recovery probes), hands it to the tool's [`Channel`](postern_channels::Channel)
//! and records the [`Outcome`].

use std::time::Duration;

use postern_channels::http::{Credential, Secret};
use postern_channels::{Action, AnswerVerdict, Outcome};
use postern_core::lifecycle::Verdict;
use postern_core::{EventKind, ExecutionId};
use postern_ledger::{ExecutionSummary, NewEvent, ResultBody};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use std::sync::{Arc, OnceLock};

use postern_ledger::Ledger;

use super::records::{response_value, Records};
use super::{now, ToolCall};
use crate::error::GatewayError;
use crate::registry::ToolEntry;
use crate::report::{unrecorded_next_step, unsettled_next_step, Attempt, CallReport};
use crate::vault::VaultSlot;

/// What the record of an answer notes besides the answer.
#[derive(Default)]
pub(super) struct Noted<'a> {
    /// The recovery step that got it (a status query, a precondition probe).
    pub via: Option<&'a str>,
    /// The caller's client answered a question of the target during the call.
    pub asked_client: bool,
}

/// Sends dispatched executions through their channels and records what came of them. Calls
/// only [`Records`].
pub(super) struct Dispatch {
    pub(super) ledger: Arc<Ledger>,
    pub(super) records: Arc<Records>,
    /// The vault credential secrets come from, if the config names one (set once, at start).
    pub(super) vault: OnceLock<VaultSlot>,
    /// Records that wait for the store to come back, and calls sent after an approval.
    pub(super) background: tokio_util::task::TaskTracker,
}

impl Dispatch {
    pub(super) fn vault(&self) -> Option<&VaultSlot> {
        self.vault.get()
    }

    /// Why a tool's call cannot be sent now because of the vault, if it cannot.
    pub(super) fn vault_refuses(&self, entry: &ToolEntry) -> Option<String> {
        entry.vault_credential.as_ref()?;
        match self.vault.get() {
            Some(v) if !v.is_locked() => None,
            _ => Some("the vault is locked".to_string()),
        }
    }

    /// Sends a dispatched execution through its channel and records the outcome durably
    /// before returning it.
    pub(super) async fn send(
        &self,
        entry: &ToolEntry,
        s: ExecutionSummary,
        call: &ToolCall,
        attempt: Attempt,
        target: Option<Value>,
    ) -> Result<CallReport, GatewayError> {
        let id = s.id.to_string();
        let intent = s.fingerprint.to_string();
        let forward_cancel = CancellationToken::new();
        // Set when the caller's client answers a question of the target during the call.
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let action = match self.action(
            entry,
            &call.arguments,
            (&id, &intent),
            forward_cancel.clone(),
        ) {
            Ok(mut action) => {
                action.progress = call.progress.clone();
                action.asker = call
                    .asker
                    .clone()
                    .map(|asker| super::asked::watched(asker, asked.clone()));
                action.recorded_target = match target {
                    Some(target) => Some(target),
                    None => self.recorded_target(s.id).await,
                };
                action
            }
            Err(reason) => {
                // Nothing of this attempt left: the credential could not be had.
                let outcome = Outcome::NotSent { reason };
                return self
                    .record_outcome(&s, outcome, attempt, Noted::default())
                    .await;
            }
        };
        if call.is_cancelled() {
            // Gone between the durable `dispatched` and the first byte: nothing of this attempt
            // left (an earlier dispatch's fate stays as unknown as it was).
            let reason = "cancelled after dispatch was recorded and before the request left; this attempt sent nothing";
            let event = s.lifecycle.nothing_sent_event();
            self.records
                .append(
                    s.id,
                    NewEvent::new(event).with_detail(json!({"reason": reason})),
                )
                .await?;
            return Err(GatewayError::Cancelled);
        }
        let target_span = tracing::debug_span!(
            "target",
            tool = %s.tool,
            execution_id = %s.id,
            dispatch = s.lifecycle.dispatches,
        );
        if let Err(why) = self.ledger.may_send() {
            // Lost between the durable `dispatched` and the first byte (a pause, the database
            // out of reach): this replica sends nothing, and records so itself — it may renew
            // its lease and live on, and then no survivor would ever take the execution over.
            // (If one already did, the record says outcome_unknown and this changes nothing.)
            tracing::error!(execution_id = %s.id, reason = %why, "not sent: this replica lost its lease");
            let reason = format!("this gateway replica lost its lease before the request left ({why}); this attempt sent nothing");
            return self
                .record_outcome(&s, Outcome::NotSent { reason }, attempt, Noted::default())
                .await;
        }
        let mut action = action;
        action.traceparent =
            crate::telemetry::traceparent_for(&target_span, call.trace_parent.as_deref());
        let sent_at = std::time::Instant::now();
        let sending = tracing::Instrument::instrument(entry.channel.send(action), target_span);
        tokio::pin!(sending);
        let outcome = match &call.cancel {
            Some(cancel) => tokio::select! {
                outcome = &mut sending => outcome,
                () = cancel.cancelled() => {
                    let note = json!({"note": "cancellation arrived after dispatch: the request had left; the execution runs to its recorded end (a channel that can pass the cancellation on does)"});
                    if let Err(e) = self.records.append(s.id, NewEvent::new(EventKind::CancelRequested).with_detail(note)).await {
                        tracing::warn!(execution_id = %s.id, error = %e, "a cancellation after dispatch could not be recorded");
                    }
                    forward_cancel.cancel();
                    sending.await
                }
            },
            None => sending.await,
        };
        metrics::histogram!(
            crate::telemetry::TARGET_SECONDS,
            "tool" => s.tool.clone(),
            "outcome" => outcome.label()
        )
        .record(sent_at.elapsed().as_secs_f64());
        let noted = Noted {
            via: None,
            asked_client: asked.load(std::sync::atomic::Ordering::Acquire),
        };
        self.record_outcome(&s, outcome, attempt, noted).await
    }

    /// Where a call goes, as recorded in its `dispatched` event (`secret_fields` shown as
    /// `***`), after its channel checked that every request the call may make renders.
    pub(super) fn target_of(
        &self,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Result<Value, String> {
        let secret = |name: &str| entry.contract.arguments.secret.contains(name);
        entry.channel.target(arguments, &secret)
    }

    /// [`Dispatch::target_of`], after the channel learned (once) what the record must name
    /// that only the target can tell (an SSH host's marker directory).
    pub(super) async fn target_now(
        &self,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Result<Value, String> {
        let credential = || self.credential_for(entry).ok().flatten();
        if let Some(locating) = entry.channel.locate(&credential) {
            locating.await;
        }
        self.target_of(entry, arguments)
    }

    /// Where execution `id` went, as its first `dispatched` event records it.
    pub(super) async fn recorded_target(&self, id: ExecutionId) -> Option<Value> {
        let view = self.ledger.read().execution(id).await.ok()??;
        view.events
            .into_iter()
            .find(|e| e.body.event == EventKind::Dispatched)
            .map(|e| e.body.detail)
    }

    /// One dispatch (or recovery probe) of execution `id` as its channel takes it.
    pub(super) fn action<'a>(
        &self,
        entry: &ToolEntry,
        arguments: &'a Map<String, Value>,
        (id, intent): (&'a str, &'a str),
        cancel: CancellationToken,
    ) -> Result<Action<'a>, String> {
        Ok(Action {
            execution_id: id,
            intent,
            arguments,
            credential: self.credential_for(entry)?,
            // The call's own secrets never come back in what the target answers.
            secrets: entry
                .contract
                .arguments
                .secret
                .iter()
                .filter_map(|name| match arguments.get(name)? {
                    Value::String(s) => Some(Secret::new(s.clone())),
                    Value::Null => None,
                    other => Some(Secret::new(other.to_string())),
                })
                .collect(),
            cancel,
            progress: None,
            asker: None,
            traceparent: None,
            recorded_target: None,
        })
    }

    /// The tool's credential now: from the vault when it lives there.
    fn credential_for(&self, entry: &ToolEntry) -> Result<Option<Credential>, String> {
        match (&entry.vault_credential, self.vault.get()) {
            (Some(c), Some(vault)) => vault
                .credential(c)
                .map_err(|why| format!("{why}: this request was not sent")),
            (Some(_), None) => Err("no vault is configured: this request was not sent".into()),
            (None, _) => Ok(entry.credential.clone()),
        }
    }

    /// Records what a dispatch (or a status query standing in for one) came to. `dispatched`
    /// is the execution as it was when this attempt was dispatched: a request that provably
    /// sent nothing is `failed` only when no earlier dispatch of the execution exists.
    pub(super) async fn record_outcome(
        &self,
        dispatched: &ExecutionSummary,
        outcome: Outcome,
        attempt: Attempt,
        noted: Noted<'_>,
    ) -> Result<CallReport, GatewayError> {
        let id = dispatched.id;
        let mut unsettled = false;
        let mut failed_because = None;
        let (event, status, response) = match outcome {
            Outcome::NotSent { reason } => {
                let event = dispatched.lifecycle.nothing_sent_event();
                let detail = if event == EventKind::Failed {
                    failed_because = Some(reason.clone());
                    json!({"reason": reason})
                } else {
                    // A re-send that could not connect: this attempt sent nothing, the earlier
                    // one may have been applied.
                    unsettled = true;
                    json!({"reason": reason, "note": "this recovery attempt sent nothing; an earlier dispatch may have reached the target, so the outcome stays unknown"})
                };
                (NewEvent::new(event).with_detail(detail), None, None)
            }
            Outcome::Unknown { reason } => {
                tracing::warn!(execution_id = %id, tool = %dispatched.tool, reason = %reason, "outcome unknown: the target may or may not have applied it");
                (
                    NewEvent::new(EventKind::OutcomeUnknown).with_detail(json!({"reason": reason})),
                    None,
                    None,
                )
            }
            Outcome::Answered(a) => {
                // A read over the cap: the caller gets it whole, the record a note of it.
                let response = response_value(a.whole.as_deref().unwrap_or(&a.body));
                let mut detail = match a.status {
                    Some(status) => json!({"target_status": status}),
                    None => json!({}),
                };
                if let Some(v) = noted.via {
                    detail["via"] = json!(v);
                }
                if noted.asked_client {
                    // The answer may hold what the client gave: shown only to its run.
                    detail[super::asked::ASKED_CLIENT] = json!(true);
                }
                let result = ResultBody {
                    body: a.body.clone(),
                    size: a.size,
                    truncated: a.truncated,
                };
                let mut ev = match a.verdict {
                    AnswerVerdict::Applied => NewEvent::new(EventKind::Completed(Verdict::Applied)),
                    AnswerVerdict::Rejected { retryable } => {
                        let mut ev = NewEvent::new(EventKind::Completed(Verdict::Rejected));
                        ev.retryable_rejection = retryable;
                        ev
                    }
                    // A 500 may have half happened: unknown, never failed.
                    AnswerVerdict::Unknown => {
                        tracing::warn!(execution_id = %id, tool = %dispatched.tool, status = ?a.status, "outcome unknown: the target's answer does not say whether it applied it");
                        NewEvent::new(EventKind::OutcomeUnknown)
                    }
                };
                ev.detail = detail;
                ev.result = Some(result);
                (ev, a.status, Some(response))
            }
        };
        let s = match self.ledger.append(id, event.clone(), now()).await {
            Ok(s) => s,
            Err(e) if e.fault().is_some() => {
                // The request's fate is known here but cannot be written down now: say so, and
                // keep writing it until the store takes it.
                let why = e.to_string();
                tracing::error!(execution_id = %id, error = %why, "the target's answer could not be recorded; retrying in the background");
                self.record_when_possible(id, event);
                let mut report = self.records.report(dispatched, attempt, status, response);
                report.next_step = Some(unrecorded_next_step(id, &why));
                report.is_error = false;
                return Ok(report);
            }
            Err(postern_ledger::LedgerError::Transition { .. }) => {
                // Another instance recorded this execution's fate first (it took this one over
                // while the answer was awaited): the agent is told the record, not an error.
                tracing::warn!(execution_id = %id, "the outcome arrived after another instance settled the execution; answering from the record");
                return self.records.stored_report(id, attempt).await;
            }
            Err(e) => return Err(e.into()),
        };
        let mut report = self.records.report(&s, attempt, status, response);
        if unsettled {
            report.next_step = Some(unsettled_next_step(id));
        }
        if let Some(reason) = failed_because {
            // The agent sees why (a refused connection, a certificate not trusted), not only
            // that nothing was sent: calling again will not help until that is fixed.
            report.next_step = Some(format!(
                "nothing reached the target ({reason}); it is safe to call again once that is fixed"
            ));
        }
        Ok(report)
    }

    /// Writes an outcome the store refused (it was full or unreachable), retrying with backoff
    /// until it is taken or the execution has moved on. Until then the record says
    /// `dispatched`, which every retry of the call treats as still in progress; if the gateway
    /// stops first, the next start's recovery scan records `outcome_unknown`.
    pub(super) fn record_when_possible(&self, id: ExecutionId, event: NewEvent) {
        let ledger = self.ledger.clone();
        self.background.spawn(async move {
            let mut wait = Duration::from_millis(200);
            loop {
                tokio::time::sleep(wait).await;
                match ledger.append(id, event.clone(), now()).await {
                    Err(postern_ledger::LedgerError::Closed) => return,
                    Err(e) if e.fault().is_some() => {
                        tracing::warn!(execution_id = %id, error = %e, retry_in = ?wait, "an outcome is still not recorded");
                        wait = (wait * 2).min(Duration::from_secs(5));
                    }
                    // Recorded, or refused as a transition (another instance settled it).
                    _ => return,
                }
            }
        });
    }
}
