//! The execution record's writes inside the open transaction: an execution's lifecycle events
//! (each checked against the core's table before anything is written, and chained), and the
//! `outcome_unknown` a stopped instance's dispatch is recorded as. Accept-or-match is
//! `accept.rs`.

use postern_core::digest::sha256;
use postern_core::lifecycle::State;
use postern_core::{hexdigits, EventKind, ExecutionId, Timestamp};
use serde_json::{json, Value};

use super::budgets::Budgets;
use super::transaction::Transaction;
use crate::db::{params, RowAccess, WriteConn};
use crate::error::LedgerError;
use crate::model::{ExecutionSummary, NewEvent};

/// The writer's part that writes executions: it borrows the open transaction.
pub(super) struct Executions<'t, C> {
    pub(super) tx: &'t mut Transaction<C>,
}

impl<C: WriteConn> Executions<'_, C> {
    /// Appends one event to an execution and answers with its summary after it.
    pub(super) async fn append(
        &mut self,
        id: ExecutionId,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<ExecutionSummary, LedgerError> {
        let mut s = self.tx.load_summary(id).await?;
        self.apply(&mut s, ev, now).await?;
        Ok(s)
    }

    /// Appends one lifecycle event to an existing execution and updates its row.
    pub(super) async fn apply(
        &mut self,
        s: &mut ExecutionSummary,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let first_dispatch = ev.kind == EventKind::Dispatched && s.first_dispatched_at.is_none();
        self.advance(s, ev, now).await?;
        // A budget counts an execution that waited for a person once it is sent, and no
        // longer one that failed (nothing was sent).
        if first_dispatch {
            Budgets { tx: &mut *self.tx }.dispatched(s.id, now).await?;
        } else if ev.kind == EventKind::Failed {
            Budgets { tx: &mut *self.tx }.nothing_sent(s.id).await?;
        }
        self.tx.later("UPDATE executions SET state = $1, n = $2, dispatches = $3, cancel_requested = $4, state_since = $5, first_dispatched_at = $6, rejection_retryable = $7, owner = $8 WHERE id = $9", params![s.lifecycle.state.to_string(), i64::from(s.events), i64::from(s.lifecycle.dispatches), i64::from(s.lifecycle.cancel_requested), now.0, s.first_dispatched_at.map(|t| t.0), i64::from(s.rejection_retryable), &self.tx.cfg.instance, s.id.to_string()]).await?;
        self.tx.remember(s);
        Ok(())
    }

    /// Moves the summary through one event, refusing impossible transitions before anything is
    /// written; stores the result, and queues the chained event for this batch's commit.
    pub(super) async fn advance(
        &mut self,
        s: &mut ExecutionSummary,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let next = s
            .lifecycle
            .next(ev.kind)
            .map_err(|source| LedgerError::Transition {
                execution_id: s.id,
                source,
            })?;
        let n = s.events + 1;
        let mut detail = match &ev.detail {
            Value::Object(m) => m.clone(),
            Value::Null => Default::default(),
            other => [("value".to_string(), other.clone())].into_iter().collect(),
        };
        if let Some(result) = &ev.result {
            // Each result-bearing event has its own slot, its event number: one dispatch can
            // bear two (an unknown answer, then the status query's), and a second result must
            // never overwrite the body an earlier event chained the digest of. (Stores written
            // before this keyed the slot by dispatch count; their refs still name their rows.)
            let attempt = n;
            let digest = format!("sha256:{}", hexdigits::encode(sha256(&result.body)));
            self.tx.later("INSERT INTO results (execution_id, attempt, digest, size, truncated, body) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (execution_id, attempt) DO UPDATE SET digest = excluded.digest, size = excluded.size, truncated = excluded.truncated, body = excluded.body", params![s.id.to_string(), i64::from(attempt), &digest, result.size as i64, i64::from(result.truncated), &result.body]).await?;
            detail.insert("result_digest".into(), json!(digest));
            detail.insert(
                "result_ref".into(),
                json!(format!("results/{}/{attempt}", s.id)),
            );
            detail.insert("result_size".into(), json!(result.size));
        }
        if ev.kind == EventKind::Dispatched {
            self.tx.fence().check_lease().await?;
            detail.insert("idempotency_key".into(), json!(s.id.to_string()));
            detail.insert("attempt".into(), json!(next.dispatches));
        }
        self.tx
            .append_event(s.id, n, ev.kind, now, Value::Object(detail))?;
        s.lifecycle = next;
        s.events = n;
        s.state_since = now;
        if ev.kind == EventKind::Dispatched && s.first_dispatched_at.is_none() {
            s.first_dispatched_at = Some(now);
        }
        if matches!(ev.kind, EventKind::Completed(_)) {
            s.rejection_retryable = ev.retryable_rejection;
        }
        Ok(())
    }

    /// Records `outcome_unknown` for an execution `owner` (a stopped instance) left
    /// `dispatched`: whether it was still so.
    pub(super) async fn abandoned(
        &mut self,
        id: ExecutionId,
        owner: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let row = self
            .tx
            .conn
            .query_opt(
                &format!(
                    "SELECT owner FROM executions WHERE id = $1{}",
                    self.tx.cfg.dialect.for_update()
                ),
                params![id.to_string()],
            )
            .await?
            .ok_or(LedgerError::UnknownExecution(id))?;
        let current_owner: Option<String> = row.opt_text("owner")?;
        let mut s = self.tx.load_summary(id).await?;
        if s.lifecycle.state != State::Dispatched || current_owner.as_deref() != Some(owner) {
            return Ok(false);
        }
        let ev = NewEvent::new(EventKind::OutcomeUnknown).with_detail(json!({
            "reason": "the gateway instance that dispatched it stopped before recording the target's answer",
            "previous_owner": owner,
            "taken_over_by": self.tx.cfg.instance,
        }));
        self.apply(&mut s, &ev, now).await?;
        Ok(true)
    }
}
