//! The human half of the pipeline (contract §6), kept apart from de-duplication: per-use
//! approvals and operators' resolutions of reviews.
//!
//! A call of a tool whose contract (or credential) says `approval = "every_call"` is accepted
//! as `awaiting_approval` in the accept's commit, and answered at once with that state. The
//! request is bound to the one execution and its fingerprint: an identical retry matches the
//! execution (never a second request, also after a restart or on another replica), and a call
//! with other arguments is another execution with its own request. An operator's approval names
//! the execution and its fingerprint and is recorded `authorized` (with who, when and why);
//! the transition table makes it single-use, and whichever decision the store records first
//! wins (a second one finds the execution no longer awaiting). A request not decided within its
//! `approval_ttl` is recorded `denied` with reason `expired`.
//!
//! After an approval the gateway dispatches at once when this process still holds the call's
//! arguments (it keeps those of the calls it answered `awaiting_approval`, and of identical
//! retries, in memory only: the ledger holds secret fields as keyed hashes, from which no
//! request can be rebuilt). Otherwise (a restart in between, another replica) the execution
//! stays `authorized` and the agent's next identical call sends it, as any `authorized`
//! execution is continued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_audit::ChainedEvent;
use postern_core::lifecycle::{Resolution, State};
use postern_core::{first_step, AuthorizationFacts, EventKind, ExecutionId, FirstStep, Timestamp};
use postern_ledger::{ExecutionSummary, ExecutionView, LedgerError, ListFilter, NewEvent, Run};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{now, Gateway, ToolCall};
use crate::decision::{Decided, DecisionError};
use crate::error::GatewayError;
use crate::registry::ToolEntry;
use crate::report::Attempt;

/// The most calls whose arguments wait in memory for their approval; beyond it an approved
/// execution is sent by the agent's next identical call instead.
const MAX_HELD: usize = 10_000;

/// Calls answered `awaiting_approval` whose arguments this process holds, so an approval can
/// send them at once.
#[derive(Default)]
pub(crate) struct HeldCalls(Mutex<HashMap<ExecutionId, ToolCall>>);

impl HeldCalls {
    fn hold(&self, id: ExecutionId, call: &ToolCall) {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // The first call's arguments are kept: a retry's non-semantic fields (outside the
        // fingerprint the operator approves) never replace them.
        if held.len() < MAX_HELD && !held.contains_key(&id) {
            // The caller's cancellation belongs to its request, which has been answered.
            let mut call = call.clone();
            call.cancel = None;
            held.insert(id, call);
        }
    }

    pub(super) fn take(&self, id: ExecutionId) -> Option<ToolCall> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&id)
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

impl HeldCalls {
    /// The arguments held for `id`, if any.
    fn arguments(&self, id: ExecutionId) -> Option<Map<String, Value>> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&id).map(|call| call.arguments.clone())
    }
}

impl Gateway {
    /// The events a new execution of this call gets in the accept's commit: the facts of
    /// contract §6 gathered here (the vault, the run's authorization, a per-use approval, the
    /// actor's calls already waiting), the order decided by [`postern_core::first_step`].
    /// `authorized` and `dispatched` share the commit (one fsync, and still durable before the
    /// first byte leaves).
    pub(super) async fn first_events(
        &self,
        entry: &ToolEntry,
        call: &ToolCall,
        target: Value,
        at: Timestamp,
    ) -> Result<Vec<NewEvent>, GatewayError> {
        let vault_locked = self.vault_refuses(entry).is_some();
        let per_use_ttl = self.policy.approval_ttl(&entry.contract);
        let unauthorized_run = match vault_locked {
            true => None,
            false => self.session_gate(call).await?,
        };
        let waits = !vault_locked && (unauthorized_run.is_some() || per_use_ttl.is_some());
        let facts = AuthorizationFacts {
            vault_locked,
            unauthorized_run,
            per_use_ttl,
            default_ttl: self.config.gateway.approval_ttl,
            // Counted only when the call would wait (the only case the order reads it).
            waiting: match waits {
                true => self.waiting(&call.actor).await?,
                false => 0,
            },
            max_waiting: self.config.gateway.max_pending_approvals_per_actor,
            actor: call.actor.clone(),
        };
        Ok(match first_step(&facts) {
            FirstStep::Refuse { reason, next_step } => vec![NewEvent::new(EventKind::Rejected)
                .with_detail(json!({"reason": reason, "next_step": next_step}))],
            FirstStep::Send => vec![
                NewEvent::new(EventKind::Authorized),
                NewEvent::new(EventKind::Dispatched).with_detail(target),
            ],
            // Nothing is authorized, let alone sent, until an operator says so.
            FirstStep::Wait { run, call, ttl } => {
                vec![Gateway::approval_request(at, ttl, &Waits { run, call })]
            }
        })
    }

    /// How many of `actor`'s calls wait for an operator's approval. Counted in the store, so
    /// across restarts and replicas; calls accepted at the same moment may each see the count
    /// below the cap.
    async fn waiting(&self, actor: &str) -> Result<u64, GatewayError> {
        let filter = ListFilter {
            actor: Some(actor.to_string()),
            state: Some(State::AwaitingApproval.as_str().to_string()),
            ..ListFilter::default()
        };
        Ok(self.ledger.read().count(&filter).await?)
    }

    /// The `approval_requested` event of a new execution that waits for `waits` and expires
    /// after `ttl`.
    pub(crate) fn approval_request(at: Timestamp, ttl: Duration, waits: &Waits) -> NewEvent {
        let expires = at.saturating_add(ttl);
        NewEvent::new(EventKind::ApprovalRequested).with_detail(json!({
            "expires_at": expires.to_string(),
            "expires_at_ms": expires.millis(),
            "waits_for_run": waits.run,
            "waits_for_call": waits.call,
            "decided_by": "an operator ([[operator]]: postern sessions authorize / postern approvals approve)",
        }))
    }

    /// Keeps the arguments of a call that waits for approval, so an approval can send it.
    pub(crate) fn hold_for_approval(&self, id: ExecutionId, call: &ToolCall) {
        self.held.hold(id, call);
    }

    /// Approves one execution awaiting approval, which the operator identified by its id and
    /// fingerprint; sends it at once when this process holds its arguments.
    pub async fn approve(
        self: &Arc<Self>,
        id: &str,
        operator: &str,
        fingerprint: &str,
        reason: Option<String>,
    ) -> Result<PendingDecision, GatewayError> {
        let view = self.awaiting(id).await?;
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
            self.run_allows(s.id, run).await?;
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
            .decide(
                s.id,
                NewEvent::new(EventKind::Authorized).with_detail(detail),
            )
            .await?;
        // A revocation of the run that landed between the check and the approval wins: the
        // approved call is rejected before anything is dispatched.
        if let Some(run) = &run {
            if let Err(revoked) = self.run_allows(s.id, run).await {
                let why = json!({"reason": format!("run {run} was revoked as it was approved")});
                let rejected = NewEvent::new(EventKind::Rejected).with_detail(why);
                if let Err(e) = self.ledger.append(s.id, rejected, now()).await {
                    // Still authorized in the record: nothing sends it (its arguments are dropped
                    // here), and an identical retry is told to repeat once it can be recorded.
                    tracing::warn!(execution_id = %s.id, error = %e, "a revoked run's approved call could not be recorded rejected");
                }
                self.held.take(s.id);
                return Err(revoked);
            }
        }
        if let Some(call) = self.held.take(s.id) {
            self.send_approved(approved, call).await?;
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
        let view = self.awaiting(id).await?;
        let detail = json!({"denied_by": operator, "reason": reason});
        self.decide(
            view.summary.id,
            NewEvent::new(EventKind::Denied).with_detail(detail),
        )
        .await?;
        self.held.take(view.summary.id);
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
        let view = self.view_of(id).await?;
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
                self.notices.notify(super::Notice::Decided);
                self.pending_decision(s.id).await
            }
            Err(LedgerError::Transition { .. }) => {
                let view = self.view_of(id).await?;
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
        let view = self.view_of(&id.to_string()).await?;
        let mut p = decision_view(&view);
        p.request = self.held_request(id, &view.summary.tool);
        Ok(p)
    }

    /// What will be sent for a held call: its target and every argument as given.
    fn held_request(&self, id: ExecutionId, tool: &str) -> Option<Value> {
        let arguments = self.held.arguments(id)?;
        let entry = self.registry.get(tool)?;
        let rules = &entry.contract.arguments;
        let target = self.target_of(&entry, &arguments).ok()?;
        let non_semantic: Vec<&String> = arguments
            .keys()
            .filter(|k| rules.non_semantic.contains(*k))
            .collect();
        let shown: Map<String, Value> = arguments
            .iter()
            .map(|(k, v)| {
                let v = if rules.secret.contains(k) {
                    json!("***")
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect();
        Some(json!({"target": target, "arguments": shown, "non_semantic": non_semantic}))
    }

    /// Whether the run `run` lets execution `id` be approved: authorized and not revoked.
    async fn run_allows(&self, id: ExecutionId, run: &str) -> Result<(), GatewayError> {
        match self.ledger.read().run(run).await? {
            Some(Run {
                revoked: Some((by, at)),
                ..
            }) => Err(DecisionError::RunDecided {
                run: run.to_string(),
                what: "revoked",
                by,
                at,
            }
            .into()),
            Some(r) if r.authorized.is_some() => Ok(()),
            _ => Err(DecisionError::RunNotAuthorized {
                id,
                run: run.to_string(),
            }
            .into()),
        }
    }

    /// Records `denied (expired)` for every approval request past its expiry, and releases
    /// calls whose run was authorized meanwhile; returns how many were expired.
    pub async fn expire_approvals(self: &Arc<Self>) -> Result<usize, GatewayError> {
        let filter = ListFilter {
            state: Some(State::AwaitingApproval.as_str().to_string()),
            limit: 100_000,
            ..ListFilter::default()
        };
        let mut expired = 0;
        // Oldest first (the list is newest first): they are the ones due.
        for s in self.ledger.read().list(&filter).await?.into_iter().rev() {
            // One execution's trouble (a store fault) does not stop the others' expiry.
            let step = async {
                let Some(view) = self.ledger.read().execution(s.id).await? else {
                    return Ok::<_, GatewayError>(false);
                };
                if self.expire_if_due(&view).await? {
                    return Ok(true);
                }
                self.release_if_authorized(&view).await?;
                Ok(false)
            };
            match step.await {
                Ok(true) => expired += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(execution_id = %s.id, error = %e, "an approval request could not be handled")
                }
            }
        }
        // An approval does not wait for ever either: a call approved and not sent within its
        // approval_ttl (the gateway restarted and the agent never repeated it) is rejected.
        let approved = ListFilter {
            state: Some(State::Authorized.as_str().to_string()),
            limit: 100_000,
            ..ListFilter::default()
        };
        for s in self.ledger.read().list(&approved).await?.into_iter().rev() {
            let ttl = self
                .registry
                .get(&s.tool)
                .and_then(|e| e.contract.approval_ttl)
                .unwrap_or(self.config.gateway.approval_ttl);
            if now() <= s.state_since.saturating_add(ttl) {
                continue;
            }
            let why = json!({"reason": "approved, but not sent within its approval_ttl: a new approval is needed"});
            let rejected = NewEvent::new(EventKind::Rejected).with_detail(why);
            if self.ledger.append(s.id, rejected, now()).await.is_ok() {
                self.held.take(s.id);
                expired += 1;
            }
        }
        if expired > 0 {
            self.notices.notify(super::Notice::Decided);
        }
        Ok(expired)
    }

    /// Denies the request as expired if it is; whether it did.
    pub(crate) async fn expire_if_due(&self, view: &ExecutionView) -> Result<bool, GatewayError> {
        let Some(at) = expires_at(&view.events) else {
            return Ok(false);
        };
        if now() <= at || view.summary.lifecycle.state != State::AwaitingApproval {
            return Ok(false);
        }
        let detail = json!({"reason": "expired", "expired_at": at.to_string()});
        match self
            .ledger
            .append(
                view.summary.id,
                NewEvent::new(EventKind::Denied).with_detail(detail),
                now(),
            )
            .await
        {
            Ok(_) => {
                self.held.take(view.summary.id);
                Ok(true)
            }
            // Decided meanwhile by someone else: not expired after all.
            Err(LedgerError::Transition { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The execution `id`, which must be awaiting approval (and not expired).
    async fn awaiting(&self, id: &str) -> Result<ExecutionView, GatewayError> {
        let view = self.view_of(id).await?;
        let s = &view.summary;
        if s.lifecycle.state != State::AwaitingApproval {
            return Err(DecisionError::NotAwaiting {
                id: s.id,
                state: s.lifecycle.state.display_name(),
                decided: decided(&view.events),
            }
            .into());
        }
        if self.expire_if_due(&view).await? {
            let at = expires_at(&view.events).unwrap_or(s.state_since);
            return Err(DecisionError::Expired { id: s.id, at }.into());
        }
        Ok(view)
    }

    async fn view_of(&self, id: &str) -> Result<ExecutionView, GatewayError> {
        let unknown = || DecisionError::Unknown(id.chars().take(64).collect());
        let parsed: ExecutionId = id.parse().map_err(|_| unknown())?;
        self.ledger
            .read()
            .execution(parsed)
            .await?
            .ok_or_else(|| unknown().into())
    }

    /// Appends an approval's decision; a decision recorded first by someone else wins.
    async fn decide(
        &self,
        id: ExecutionId,
        event: NewEvent,
    ) -> Result<ExecutionSummary, GatewayError> {
        match self.ledger.append(id, event, now()).await {
            Ok(s) => {
                self.notices.notify(super::Notice::Decided);
                Ok(s)
            }
            Err(LedgerError::Transition { .. }) => {
                let view = self.view_of(&id.to_string()).await?;
                Err(DecisionError::NotAwaiting {
                    id,
                    state: view.summary.lifecycle.state.display_name(),
                    decided: decided(&view.events),
                }
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sends an execution just authorized, if this process holds its arguments.
    pub(super) async fn send_held(
        self: &Arc<Self>,
        approved: ExecutionSummary,
    ) -> Result<(), GatewayError> {
        match self.held.take(approved.id) {
            Some(call) => self.send_approved(approved, call).await,
            None => Ok(()),
        }
    }

    /// Dispatches an approved execution with the arguments held for it (durable `dispatched`
    /// before the approval is answered) and sends it in the background.
    async fn send_approved(
        self: &Arc<Self>,
        approved: ExecutionSummary,
        call: ToolCall,
    ) -> Result<(), GatewayError> {
        let Some(entry) = self.registry.get(&call.tool) else {
            return Ok(());
        };
        // A locked vault: nothing is dispatched (which would spend the approval on a request
        // that cannot leave); it stays authorized, and the agent's identical call sends it once
        // the vault is unlocked.
        if self.vault_refuses(&entry).is_some() {
            return Ok(());
        }
        let target = self
            .target_now(&entry, &call.arguments)
            .await
            .map_err(GatewayError::Internal)?;
        let dispatched = self
            .ledger
            .append(
                approved.id,
                NewEvent::new(EventKind::Dispatched).with_detail(target.clone()),
                now(),
            )
            .await;
        let dispatched = match dispatched {
            Ok(s) => s,
            // An identical call continued it meanwhile: it is theirs to send.
            Err(LedgerError::Transition { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let gateway = self.clone();
        self.background.spawn(async move {
            if let Some(entry) = gateway.registry.get(&call.tool) {
                let sent = gateway
                    .send(&entry, dispatched, &call, Attempt::New, Some(target))
                    .await;
                if let Err(e) = sent {
                    tracing::warn!(tool = %call.tool, error = %e, "an approved call's dispatch ended in an error; its record says what was sent");
                }
            }
        });
        Ok(())
    }
}

/// What a call waiting for approval waits for: its run's authorization, its own approval, or
/// both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    pub run: Option<String>,
    pub call: bool,
}

/// What the execution's approval request waits for, from its `approval_requested` event.
pub(crate) fn waits_for(events: &[ChainedEvent]) -> Waits {
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
fn expires_at(events: &[ChainedEvent]) -> Option<Timestamp> {
    events
        .iter()
        .find(|e| e.body.event == EventKind::ApprovalRequested)
        .and_then(|e| e.body.detail.get("expires_at_ms"))
        .and_then(Value::as_i64)
        .map(Timestamp)
}

/// The last human decision in the events, if any.
pub(crate) fn decided(events: &[ChainedEvent]) -> Option<Decided> {
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

fn decision_view(view: &ExecutionView) -> PendingDecision {
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
pub(crate) fn decision_of(view: &ExecutionView) -> Option<Value> {
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
