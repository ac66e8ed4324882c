//! Budgets inside the open transaction (issue 53): a new execution's charges checked under
//! their scopes' locks and recorded with it; its first later dispatch counted; a `failed`
//! execution (nothing was sent) uncounted.
//!
//! Exact across replicas: on PostgreSQL a charge first locks its scope's row
//! (`budget_scopes`, `FOR UPDATE`) and only then counts, in a statement of its own, so it sees
//! every charge committed before it got the lock (a count in the locking statement would read
//! the snapshot taken before it waited). SQLite has one writer at a time.

use postern_core::{ExecutionId, Timestamp};

use super::transaction::Transaction;
use crate::budget::{BudgetCharge, BudgetUsage};
use crate::db::{params, WriteConn};
use crate::dialect::Dialect;
use crate::error::LedgerError;
use crate::rows;

/// The writer's part that counts budgets: it borrows the open transaction.
pub(super) struct Budgets<'t, C> {
    pub(super) tx: &'t mut Transaction<C>,
}

impl<C: WriteConn> Budgets<'_, C> {
    /// Checks every charge of a new execution about to be dispatched; the budget it would pass
    /// (one that refuses before one that waits for a person), or `None` (within every limit).
    /// The charges are recorded either way: counted from `now` when it is within its limits,
    /// else pending (counted once a person has let it be sent).
    pub(super) async fn charge(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        now: Timestamp,
    ) -> Result<Option<(BudgetUsage, bool)>, LedgerError> {
        let mut over: Option<(BudgetUsage, bool)> = None;
        for charge in charges {
            let usage = self.locked_usage(charge, now).await?;
            if !usage.allows(charge.amount)
                && over.as_ref().is_none_or(|(_, r)| !r && charge.refuse)
            {
                over = Some((usage, charge.refuse));
            }
        }
        let at = over.is_none().then_some(now);
        self.record(id, charges, at).await?;
        Ok(over)
    }

    /// Records a new execution's charges, counted from `at` (`None`: pending, it waits for a
    /// person).
    pub(super) async fn record(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        at: Option<Timestamp>,
    ) -> Result<(), LedgerError> {
        let id = id.to_string();
        for c in charges {
            self.tx
                .later(
                    "INSERT INTO budget_charges (budget, scope_key, execution_id, amount, at) VALUES ($1, $2, $3, $4, $5)",
                    params![&c.budget, &c.scope, &id, c.amount, at.map(|t| t.0)],
                )
                .await?;
        }
        Ok(())
    }

    /// Counts an execution's pending charges from its first dispatch (after a person let it
    /// be sent). Charges already counted stay as they are: a re-dispatch is not a new effect.
    pub(super) async fn dispatched(
        &mut self,
        id: ExecutionId,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.tx
            .later(
                "UPDATE budget_charges SET at = $1 WHERE execution_id = $2 AND at IS NULL",
                params![now.0, id.to_string()],
            )
            .await
    }

    /// Uncounts an execution that ended `failed`: nothing of it was sent.
    pub(super) async fn nothing_sent(&mut self, id: ExecutionId) -> Result<(), LedgerError> {
        self.tx
            .later(
                "DELETE FROM budget_charges WHERE execution_id = $1",
                params![id.to_string()],
            )
            .await
    }

    /// The charge's scope locked (PostgreSQL), then its use in the window ending `now`.
    async fn locked_usage(
        &mut self,
        c: &BudgetCharge,
        now: Timestamp,
    ) -> Result<BudgetUsage, LedgerError> {
        if self.tx.cfg.dialect == Dialect::Postgres {
            self.tx
                .later(
                    "INSERT INTO budget_scopes (budget, scope_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    params![&c.budget, &c.scope],
                )
                .await?;
            self.tx
                .conn
                .query_opt(
                    "SELECT budget FROM budget_scopes WHERE budget = $1 AND scope_key = $2 FOR UPDATE",
                    params![&c.budget, &c.scope],
                )
                .await?;
        }
        let since = now.0.saturating_sub(c.window_ms);
        let row = self
            .tx
            .conn
            .query_opt(USAGE, params![&c.budget, &c.scope, since])
            .await?
            .ok_or_else(|| LedgerError::Corrupt("a budget's count returned no row".into()))?;
        let oldest = rows::get_opt_i64(&row, "oldest")?;
        Ok(BudgetUsage {
            budget: c.budget.clone(),
            scope: c.scope.clone(),
            calls: u64::try_from(rows::get_i64(&row, "calls")?).unwrap_or(0),
            sum: rows::get_i64(&row, "sum")?,
            max_calls: c.max_calls,
            max_sum: c.max_sum,
            window_ms: c.window_ms,
            frees_at: oldest.map(|t| Timestamp(t.saturating_add(c.window_ms))),
        })
    }
}

/// A scope's counted executions in a window: how many, their sum, the oldest.
pub(crate) const USAGE: &str = "SELECT COUNT(*) AS calls, CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS sum, MIN(at) AS oldest FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at IS NOT NULL AND at > $3";
