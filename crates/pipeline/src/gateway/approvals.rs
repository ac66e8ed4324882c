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

use postern_core::config::Config;
use postern_core::lifecycle::State;
use postern_core::{EventKind, ExecutionId, Timestamp};
use postern_ledger::{
    ExecutionSummary, ExecutionView, Ledger, LedgerError, ListFilter, NewEvent, Run,
};
use serde_json::{json, Map, Value};

use super::dispatch::Dispatch;
use super::{now, Notice, Notices, ToolCall};
use crate::decision::{decided, expires_at, DecisionError, Waits};
use crate::error::GatewayError;
use crate::registry::Registry;
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

impl HeldCalls {
    /// The arguments held for `id`, if any.
    fn arguments(&self, id: ExecutionId) -> Option<Map<String, Value>> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&id).map(|call| call.arguments.clone())
    }
}

/// Calls that wait for a person: their approval requests, the arguments held to send them
/// once approved, their expiry, and session authorization's gate. Decides for [`super::Operator`]
/// and sends through [`Dispatch`].
pub(crate) struct Approvals {
    pub(super) ledger: Arc<Ledger>,
    pub(super) registry: Arc<Registry>,
    pub(super) config: Arc<Config>,
    pub(super) notices: Arc<Notices>,
    pub(super) dispatch: Arc<Dispatch>,
    /// Arguments of calls waiting for an approval, so an approval sends them at once.
    pub(super) held: HeldCalls,
}

impl Approvals {
    /// Forgets the arguments held for `id` (it will not be sent from here).
    pub(super) fn take_held(&self, id: ExecutionId) -> Option<ToolCall> {
        self.held.take(id)
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

    /// What will be sent for a held call: its target and every argument as given.
    pub(super) fn held_request(&self, id: ExecutionId, tool: &str) -> Option<Value> {
        let arguments = self.held.arguments(id)?;
        let entry = self.registry.get(tool)?;
        let rules = &entry.contract.arguments;
        let target = self.dispatch.target_of(&entry, &arguments).ok()?;
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
    pub(super) async fn run_allows(&self, id: ExecutionId, run: &str) -> Result<(), GatewayError> {
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
    pub async fn expire_approvals(&self) -> Result<usize, GatewayError> {
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
            self.notices.notify(Notice::Decided);
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
    pub(super) async fn awaiting(&self, id: &str) -> Result<ExecutionView, GatewayError> {
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

    pub(super) async fn view_of(&self, id: &str) -> Result<ExecutionView, GatewayError> {
        let unknown = || DecisionError::Unknown(id.chars().take(64).collect());
        let parsed: ExecutionId = id.parse().map_err(|_| unknown())?;
        self.ledger
            .read()
            .execution(parsed)
            .await?
            .ok_or_else(|| unknown().into())
    }

    /// Appends an approval's decision; a decision recorded first by someone else wins.
    pub(super) async fn decide(
        &self,
        id: ExecutionId,
        event: NewEvent,
    ) -> Result<ExecutionSummary, GatewayError> {
        match self.ledger.append(id, event, now()).await {
            Ok(s) => {
                self.notices.notify(Notice::Decided);
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
    pub(super) async fn send_held(&self, approved: ExecutionSummary) -> Result<(), GatewayError> {
        match self.held.take(approved.id) {
            Some(call) => self.send_approved(approved, call).await,
            None => Ok(()),
        }
    }

    /// Dispatches an approved execution with the arguments held for it (durable `dispatched`
    /// before the approval is answered) and sends it in the background.
    pub(super) async fn send_approved(
        &self,
        approved: ExecutionSummary,
        call: ToolCall,
    ) -> Result<(), GatewayError> {
        let Some(entry) = self.registry.get(&call.tool) else {
            return Ok(());
        };
        // A locked vault: nothing is dispatched (which would spend the approval on a request
        // that cannot leave); it stays authorized, and the agent's identical call sends it once
        // the vault is unlocked.
        if self.dispatch.vault_refuses(&entry).is_some() {
            return Ok(());
        }
        let target = self
            .dispatch
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
        let dispatch = self.dispatch.clone();
        let registry = self.registry.clone();
        self.dispatch.background.spawn(async move {
            if let Some(entry) = registry.get(&call.tool) {
                let sent = dispatch
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
