//! Admission: a call is checked (the tool, the actor's right to it, its arguments, where it
//! would go, the keys it names) before anything is recorded, then accepted or matched durably
//! with the first events contract §6 decides for it — the order in
//! [`postern_core::first_step`], the facts gathered here.

use std::sync::Arc;

use postern_core::config::Config;
use postern_core::lifecycle::State;
use postern_core::{
    first_step, ActionRecord, Arguments, AuthorizationFacts, EventKind, FingerprintKey, FirstStep,
    Timestamp,
};
use postern_ledger::{AcceptOutcome, AcceptRequest, Ledger, ListFilter, NewEvent};
use serde_json::{json, Value};

use super::approvals::Approvals;
use super::call::key_fault;
use super::dispatch::Dispatch;
use super::policy::ToolPolicy;
use super::{now, ToolCall};
use crate::decision::Waits;
use crate::error::GatewayError;
use crate::registry::{Registry, ToolEntry};

/// Admits calls: the first part a call meets.
pub(super) struct Admission {
    pub(super) ledger: Arc<Ledger>,
    pub(super) registry: Arc<Registry>,
    pub(super) config: Arc<Config>,
    pub(super) key: FingerprintKey,
    pub(super) policy: Arc<ToolPolicy>,
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) approvals: Arc<Approvals>,
}

impl Admission {
    /// Validates and accepts (or matches) a call, durably.
    pub(super) async fn admit(
        &self,
        call: &ToolCall,
    ) -> Result<(Arc<ToolEntry>, AcceptOutcome, Value), GatewayError> {
        let entry = self
            .registry
            .get(&call.tool)
            .ok_or_else(|| GatewayError::UnknownTool(call.tool.clone()))?;
        if !self.policy.may_call(&call.actor, &call.tool) {
            return Err(GatewayError::Forbidden {
                actor: call.actor.clone(),
                tool: call.tool.clone(),
            });
        }
        if let Some(why) = entry.withheld() {
            return Err(GatewayError::Withheld {
                tool: call.tool.clone(),
                why,
            });
        }
        // Validate before anything is recorded.
        let arguments_value = Value::Object(call.arguments.clone());
        entry
            .validate(&arguments_value)
            .map_err(|errors| GatewayError::InvalidArguments {
                tool: call.tool.clone(),
                errors,
            })?;
        let invalid = |e: String| GatewayError::InvalidArguments {
            tool: call.tool.clone(),
            errors: vec![e],
        };
        let arguments =
            Arguments::from_value(arguments_value).map_err(|e| invalid(e.to_string()))?;
        // Where the request will go, checked before anything is recorded: an argument that
        // would steer it (`..`, an empty segment) is refused naming the placeholder.
        let target = self
            .dispatch
            .target_now(&entry, &call.arguments)
            .await
            .map_err(invalid)?;
        for (what, key) in [
            ("operation key", &call.operation_key),
            ("re-issue key", &call.reissue_key),
            ("intent scope", &call.intent_scope),
        ] {
            if let Some(fault) = key.as_deref().and_then(|k| key_fault(what, k)) {
                return Err(GatewayError::InvalidKey {
                    tool: call.tool.clone(),
                    errors: vec![fault],
                });
            }
        }
        let contract = entry.contract.clone();
        let record = ActionRecord::build(
            &contract,
            &call.actor,
            call.intent_scope.as_deref(),
            &arguments,
            &self.key,
        )
        .map_err(|e| invalid(e.to_string()))?;
        let at = now();
        let then = self.first_events(&entry, call, target.clone(), at).await?;
        let mut request = AcceptRequest::new(record, &self.key, contract, at)
            .map_err(|e| invalid(e.to_string()))?
            .then(then);
        self.budget(&mut request, &entry, call).await?;
        request.operation_key = call.operation_key.clone();
        request.reissue_key = call.reissue_key.clone();
        request.run_id = call.run_id.clone();
        request.client_address = call.client_address.clone();
        request.principal = call.principal.clone();
        // A caller that goes away while its request waits for the writer is recorded
        // `cancelled` instead of dispatched (contract §3 rule 6).
        let withdrawn = call
            .cancel
            .as_ref()
            .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)));
        request.withdrawn = withdrawn.clone();
        let accepting = self.ledger.accept(request);
        let accepted = match (&call.cancel, &withdrawn) {
            (Some(cancel), Some(flag)) => {
                tokio::pin!(accepting);
                tokio::select! {
                    outcome = &mut accepting => outcome,
                    () = cancel.cancelled() => {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        accepting.await
                    }
                }
            }
            _ => accepting.await,
        }
        .map_err(|e| match e.fault() {
            // Before anything was sent: the agent may simply call again later.
            Some(_) => GatewayError::NotRecorded(e),
            None => GatewayError::Ledger(e),
        })?;
        Ok((entry, accepted, target))
    }

    /// The events a new execution of this call gets in the accept's commit: the facts of
    /// contract §6 gathered here (the vault, the run's authorization, a per-use approval, the
    /// actor's calls already waiting), the order decided by [`postern_core::first_step`].
    /// `authorized` and `dispatched` share the commit (one fsync, and still durable before the
    /// first byte leaves).
    async fn first_events(
        &self,
        entry: &ToolEntry,
        call: &ToolCall,
        target: Value,
        at: Timestamp,
    ) -> Result<Vec<NewEvent>, GatewayError> {
        let vault_locked = self.dispatch.vault_refuses(entry).is_some();
        let per_use_ttl = self.policy.approval_ttl(&entry.contract);
        let unauthorized_run = match vault_locked {
            true => None,
            false => self.approvals.session_gate(call).await?,
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
                vec![Approvals::approval_request(at, ttl, &Waits { run, call })]
            }
        })
    }

    /// The budgets the call is counted against, and what it gets past one (issue 53).
    async fn budget(
        &self,
        request: &mut AcceptRequest,
        entry: &ToolEntry,
        call: &ToolCall,
    ) -> Result<(), GatewayError> {
        let budgets = super::budgets::charges(&self.config, entry, &call.actor, &call.arguments)?;
        if budgets.is_empty() {
            return Ok(());
        }
        let ttl = self
            .policy
            .approval_ttl(&entry.contract)
            .unwrap_or(self.config.gateway.approval_ttl);
        // Past a budget it waits for a person, under the actor's cap (the ledger counts the
        // waiting calls only then).
        request.over_budget = vec![super::budgets::approval_request(request.now, ttl)];
        request.waiting_cap = Some(u64::from(
            self.config.gateway.max_pending_approvals_per_actor,
        ));
        request.budgets = budgets;
        Ok(())
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
}
