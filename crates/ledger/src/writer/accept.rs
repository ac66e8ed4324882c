//! Accept-or-match inside the writer's transaction: the intent slot, operation key and
//! re-issue key rows are where concurrent identical requests meet.

use postern_core::digest::sha256;
use postern_core::lifecycle::{Lifecycle, State};
use postern_core::recovery::{decide, IncomingRequest, RecoveryDecision};
use postern_core::{hexdigits, EventKind, ExecutionId};

use std::borrow::Cow;

use super::budgets::{Budgets, Charged};
use super::claims::Claim;
use super::executions::Executions;
use crate::budget::{BudgetUsage, Checked};
use crate::db::{params, WriteConn};
use crate::error::LedgerError;
use crate::model::{AcceptOutcome, AcceptRequest, ExecutionSummary, NewEvent};
use crate::rows;
use serde_json::json;

/// The earlier execution a request met, and by what.
struct Met {
    id: ExecutionId,
    /// The operation key that names it.
    key: Option<String>,
    /// Found by the request's re-issue key: an attempt of the same request.
    reissue: bool,
}

impl<C: WriteConn> Executions<'_, C> {
    /// Accept-or-match, decided inside this transaction. The intent slot (or operation key) row
    /// is the point where concurrent identical requests meet: the first inserts it, the others
    /// find it (PostgreSQL makes them wait for the first's commit) and are matched.
    pub(super) async fn accept(
        &mut self,
        req: &AcceptRequest,
    ) -> Result<AcceptOutcome, LedgerError> {
        // Made ahead for a plain accept (`claims.rs`): its id and whether it got the slot.
        let claim = self.tx.claim.take();
        let new_id = claim.as_ref().map_or_else(
            || ExecutionId::from_bytes(*uuid::Uuid::now_v7().as_bytes()),
            |c| c.id,
        );
        let new_id_text = new_id.to_string();
        let fingerprint = req.fingerprint.to_string();
        let actor = req.record.actor.clone();
        let scope = req.record.intent_scope.clone();
        if req.contract.class.is_read_only() {
            return self.create(new_id, req).await;
        }
        let Some(Met {
            id: prior_id,
            key,
            reissue: reissue_of_prior,
        }) = self.meet(req, claim, &fingerprint, &new_id_text).await?
        else {
            return self.create(new_id, req).await;
        };
        let prior = self.tx.load_summary(prior_id).await?;
        let incoming = IncomingRequest {
            fingerprint: req.fingerprint,
            actor: &actor,
            intent_scope: &scope,
            operation_key: key.as_deref(),
            reissue_of_prior,
            now: req.now,
        };
        match decide(Some(&prior.prior()), &incoming, &req.contract) {
            RecoveryDecision::New { .. } => {
                if let Some(key) = &key {
                    self.tx.later("UPDATE operation_keys SET fingerprint = $1, execution_id = $2 WHERE actor = $3 AND key = $4", params![&fingerprint, &new_id_text, &actor, key]).await?;
                }
                self.point_reissue_key(&actor, req, &new_id_text).await?;
                self.point_intent(&actor, &scope, &fingerprint, &new_id_text)
                    .await?;
                self.create(new_id, req).await
            }
            decision => {
                // Later attempts of this request find the execution it was matched to (a
                // conflict matched nothing: its key keeps pointing where it did).
                if !matches!(decision, RecoveryDecision::Conflict { .. }) {
                    self.point_reissue_key(&actor, req, &prior.id.to_string())
                        .await?;
                }
                Ok(AcceptOutcome::Existing {
                    decision,
                    execution: prior,
                })
            }
        }
    }

    /// The earlier execution the request meets at its operation key, re-issue key or intent
    /// slot; `None` when it is the first there, and a new execution (`new_id`) is created that
    /// the rows already name.
    async fn meet(
        &mut self,
        req: &AcceptRequest,
        claim: Option<Claim>,
        fingerprint: &str,
        new_id_text: &str,
    ) -> Result<Option<Met>, LedgerError> {
        let (actor, scope) = (&req.record.actor, &req.record.intent_scope);
        let lock = self.tx.cfg.dialect.for_update();
        if let Some(key) = req.operation_key.clone() {
            let inserted = self.tx.conn.query_opt("INSERT INTO operation_keys (actor, key, fingerprint, execution_id) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING execution_id", params![actor, &key, fingerprint, new_id_text]).await?;
            if inserted.is_some() {
                self.point_intent(actor, scope, fingerprint, new_id_text)
                    .await?;
                return Ok(None);
            }
            let row = self
                .tx
                .conn
                .query_opt(
                    &format!(
                "SELECT execution_id FROM operation_keys WHERE actor = $1 AND key = $2{lock}"
            ),
                    params![actor, &key],
                )
                .await?
                .ok_or_else(|| LedgerError::Corrupt("operation key row vanished".into()))?;
            return Ok(Some(Met {
                id: rows::parse_id(&rows::get_str(&row, "execution_id")?)?,
                key: Some(key),
                reissue: false,
            }));
        }
        // A re-issue key claims its row first (a concurrent attempt of the same request
        // waits here for this one's commit), so every attempt after the first finds the
        // execution the first one reached, whatever the window.
        let reissue = match &req.reissue_key {
            Some(rkey) => {
                let claimed = self.tx.conn.query_opt("INSERT INTO reissue_keys (actor, key, execution_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING execution_id", params![actor, rkey, new_id_text]).await?;
                if claimed.is_some() {
                    None
                } else {
                    let row = self.tx.conn.query_opt(&format!("SELECT execution_id FROM reissue_keys WHERE actor = $1 AND key = $2{lock}"), params![actor, rkey]).await?.ok_or_else(|| LedgerError::Corrupt("re-issue key row vanished".into()))?;
                    Some(rows::parse_id(&rows::get_str(&row, "execution_id")?)?)
                }
            }
            None => None,
        };
        if let Some(prior_id) = reissue {
            return Ok(Some(Met {
                id: prior_id,
                key: None,
                reissue: true,
            }));
        }
        let inserted = match claim {
            Some(c) => c.won,
            None => {
                self.claim_intent(params![actor, scope, fingerprint, new_id_text])
                    .await?
            }
        };
        if inserted {
            return Ok(None);
        }
        let row = self.tx.conn.query_opt(&format!("SELECT execution_id FROM intents WHERE actor = $1 AND intent_scope = $2 AND fingerprint = $3{lock}"), params![actor, scope, fingerprint]).await?.ok_or_else(|| LedgerError::Corrupt("intent row vanished".into()))?;
        Ok(Some(Met {
            id: rows::parse_id(&rows::get_str(&row, "execution_id")?)?,
            key: None,
            reissue: false,
        }))
    }

    /// Claims the intent for a new execution: false when another execution holds it.
    async fn claim_intent(&mut self, p: &[crate::db::SqlValue]) -> Result<bool, LedgerError> {
        macro_rules! claim {
            () => {
                "INSERT INTO intents (actor, intent_scope, fingerprint, execution_id) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"
            };
        }
        const CLAIM: &str = claim!();
        if self.tx.conn.can_defer() {
            // PostgreSQL: the answer rides with what is held back.
            let returning = concat!(claim!(), " RETURNING execution_id");
            return Ok(self.tx.conn.query_opt(returning, p).await?.is_some());
        }
        // SQLite: the count of changed rows says it; RETURNING would cost a table of its own
        // (about 19,000 instructions a statement, docs/performance.md).
        Ok(self.tx.conn.exec(CLAIM, p).await? == 1)
    }

    /// Points the request's re-issue key (if it has one and no operation key) at `id`.
    async fn point_reissue_key(
        &mut self,
        actor: &str,
        req: &AcceptRequest,
        id: &str,
    ) -> Result<(), LedgerError> {
        if let (None, Some(rkey)) = (&req.operation_key, &req.reissue_key) {
            self.tx
                .later(
                    "UPDATE reissue_keys SET execution_id = $1 WHERE actor = $2 AND key = $3",
                    params![id, actor, rkey],
                )
                .await?;
        }
        Ok(())
    }

    async fn point_intent(
        &mut self,
        actor: &str,
        scope: &str,
        fingerprint: &str,
        id: &str,
    ) -> Result<(), LedgerError> {
        self.tx.later("INSERT INTO intents (actor, intent_scope, fingerprint, execution_id) VALUES ($1, $2, $3, $4) ON CONFLICT (actor, intent_scope, fingerprint) DO UPDATE SET execution_id = excluded.execution_id", params![actor, scope, fingerprint, id]).await
    }

    async fn create(
        &mut self,
        id: ExecutionId,
        req: &AcceptRequest,
    ) -> Result<AcceptOutcome, LedgerError> {
        let record_sha256 = hexdigits::encode(sha256(&req.record_bytes));
        let record_text = std::str::from_utf8(&req.record_bytes)
            .map_err(|e| LedgerError::Corrupt(e.to_string()))?
            .to_owned();
        let mut s = ExecutionSummary {
            id,
            actor: req.record.actor.clone(),
            tool: req.record.tool.clone(),
            class: req.contract.class,
            fingerprint: req.fingerprint,
            intent_scope: req.record.intent_scope.clone(),
            operation_key: req.operation_key.clone(),
            run_id: req.run_id.clone(),
            lifecycle: Lifecycle {
                state: State::Accepted,
                dispatches: 0,
                cancel_requested: false,
            },
            events: 1,
            accepted_at: req.now,
            state_since: req.now,
            first_dispatched_at: None,
            rejection_retryable: false,
        };
        let mut detail = json!({
            "fingerprint": s.fingerprint.to_string(),
            "actor": s.actor,
            "tool": s.tool,
            "class": s.class.as_str(),
            "intent_scope": s.intent_scope,
            "operation_key": s.operation_key,
            "run_id": s.run_id,
            "record_sha256": record_sha256,
        });
        if let Some(address) = &req.client_address {
            detail["client_address"] = json!(address);
        }
        if let Some(p) = &req.principal {
            detail["principal"] =
                json!({"issuer": p.issuer, "subject": p.subject, "client_id": p.client_id});
        }
        self.tx
            .append_event(id, 1, EventKind::Accepted, req.now, detail)?;
        let mut budget_left = None;
        // Where the execution's charges are (none: no budget counts it).
        let mut charged_at = None;
        if req.is_withdrawn() {
            let note = json!({"reason": "the client went away before dispatch; nothing was sent"});
            self.advance(
                &mut s,
                &NewEvent::new(EventKind::Cancelled).with_detail(note),
                req.now,
            )
            .await?;
        } else {
            let events;
            (events, budget_left, charged_at) = self.first_events(id, req).await?;
            for ev in events.iter() {
                self.advance(&mut s, ev, req.now).await?;
            }
        }
        // One row with the final projection: the `then` events cost no extra statement.
        self.tx.later("INSERT INTO executions (id, actor, tool, class, fingerprint, intent_scope, operation_key, record, run_id, state, n, dispatches, cancel_requested, accepted_at, state_since, first_dispatched_at, rejection_retryable, owner, budget_keys, budget_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)", params![id.to_string(), &s.actor, &s.tool, s.class.as_str(), s.fingerprint.to_string(), &s.intent_scope, &s.operation_key, &record_text, &s.run_id, s.lifecycle.state.to_string(), i64::from(s.events), i64::from(s.lifecycle.dispatches), i64::from(s.lifecycle.cancel_requested), s.accepted_at.0, s.state_since.0, s.first_dispatched_at.map(|t| t.0), i64::from(s.rejection_retryable), &self.tx.cfg.instance, charged_at.map(|_| Charged::keys_text(&req.budgets)), charged_at.flatten()]).await?;
        self.tx.remember(&s);
        Ok(AcceptOutcome::Created {
            execution: s,
            budget_left,
        })
    }

    /// Whether the request's actor has `waiting_cap` calls waiting for a person already (read
    /// only for a call past a budget, which would otherwise wait too).
    async fn at_waiting_cap(&mut self, req: &AcceptRequest) -> Result<bool, LedgerError> {
        let Some(cap) = req.waiting_cap else {
            return Ok(false);
        };
        let row = self
            .tx
            .conn
            .query_opt(
                "SELECT COUNT(*) AS n FROM executions WHERE actor = $1 AND state = $2",
                params![&req.record.actor, State::AwaitingApproval.to_string()],
            )
            .await?;
        let waiting = row
            .map(|r| rows::get_i64(&r, "n"))
            .transpose()?
            .unwrap_or(0);
        Ok(u64::try_from(waiting).unwrap_or(0) >= cap)
    }

    /// The events a new execution takes after `accepted`: `then`, unless a budget it is
    /// counted against would pass its limit, when it takes `over_budget` (naming the budget
    /// and its use) and nothing is dispatched. With the budget little is left of, and whether
    /// its charges were recorded: counted at a time, or waiting for a person.
    async fn first_events<'r>(
        &mut self,
        id: ExecutionId,
        req: &'r AcceptRequest,
    ) -> Result<FirstEvents<'r>, LedgerError> {
        if req.budgets.is_empty() {
            return Ok((Cow::Borrowed(&req.then), None, None));
        }
        let has = |kind: EventKind| req.then.iter().any(|e| e.kind == kind);
        let mut budgets = Budgets { tx: &mut *self.tx };
        if has(EventKind::Dispatched) {
            match budgets.charge(id, &req.budgets, req.now).await? {
                Checked::Over(usage, refuse) => {
                    let waits = !refuse && !self.at_waiting_cap(req).await?;
                    let events = if waits { &req.over_budget[..] } else { &[][..] };
                    let events = Cow::Owned(over_budget(events, &usage));
                    return Ok((events, None, Some(None)));
                }
                Checked::Within(left) => {
                    return Ok((Cow::Borrowed(&req.then), left, Some(Some(req.now.0))))
                }
            }
        } else if has(EventKind::ApprovalRequested) {
            budgets.pending(id, &req.budgets, req.now).await?;
            return Ok((Cow::Borrowed(&req.then), None, Some(None)));
        }
        Ok((Cow::Borrowed(&req.then), None, None))
    }
}

/// A new execution's first events, the budget little is left of, and where its charges are
/// (`Some(Some(at))`: counted at `at`; `Some(None)`: waiting for a person; `None`: none).
type FirstEvents<'r> = (
    Cow<'r, [NewEvent]>,
    Option<BudgetUsage>,
    Option<Option<i64>>,
);

/// `events` (a refusal when none is given: the budget refuses, or the actor's waiting calls are
/// at their cap) with the budget reached and its use in the first one's detail.
fn over_budget(events: &[NewEvent], usage: &BudgetUsage) -> Vec<NewEvent> {
    let mut events = events.to_vec();
    if events.is_empty() {
        events.push(NewEvent::new(EventKind::Rejected).with_detail(json!({
            "reason": format!("budget {} is used up: nothing was sent", usage.budget),
        })));
    }
    if let Some(detail) = events[0].detail.as_object_mut() {
        detail.insert("budget".into(), usage.to_json());
    }
    events
}
