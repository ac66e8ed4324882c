//! Budgets inside the open transaction (issue 53): a new execution's charges checked under
//! their scopes' locks and recorded with it; its first later dispatch counted; a `failed`
//! execution (nothing was sent) uncounted.
//!
//! A check reads its scope's running totals (`budget_scopes`) and takes off only the charges
//! that left the window since the last check: each charge is added once and taken off once, so
//! a check costs the same however many calls the window holds.
//!
//! Exact across replicas: on PostgreSQL a check reads the totals row `FOR UPDATE` (the row as
//! the last committer left it, once the lock is got) and reads the charges that left the window
//! in a statement of its own, so it sees every charge committed before it got the lock. SQLite
//! has one writer at a time.

use postern_core::{ExecutionId, Timestamp};

use super::transaction::Transaction;
use crate::budget::{BudgetCharge, BudgetUsage};
use crate::db::{params, WriteConn};
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
        if let Some((usage, _)) = &mut over {
            usage.frees_at = self.frees_at(usage, now).await?;
        }
        let at = over.is_none().then_some(now);
        self.record(id, charges, at, now).await?;
        Ok(over)
    }

    /// Records a new execution's charges, counted from `at` (`None`: pending, it waits for a
    /// person).
    pub(super) async fn record(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let id = id.to_string();
        for c in charges {
            // A pending charge's scope needs its totals row for when it is sent.
            let since = now.0.saturating_sub(c.window_ms);
            self.tx
                .later(NEW_SCOPE, params![&c.budget, &c.scope, since])
                .await?;
            self.tx
                .later(
                    "INSERT INTO budget_charges (budget, scope_key, execution_id, amount, at) VALUES ($1, $2, $3, $4, $5)",
                    params![&c.budget, &c.scope, &id, c.amount, at.map(|t| t.0)],
                )
                .await?;
            if at.is_some() {
                self.tx
                    .later(
                        "UPDATE budget_scopes SET calls = calls + 1, total = total + $1 WHERE budget = $2 AND scope_key = $3",
                        params![c.amount, &c.budget, &c.scope],
                    )
                    .await?;
            }
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
        let id = id.to_string();
        self.tx.later(ADD_PENDING, params![&id]).await?;
        self.tx
            .later(
                "UPDATE budget_charges SET at = $1 WHERE execution_id = $2 AND at IS NULL",
                params![now.0, &id],
            )
            .await
    }

    /// Uncounts an execution that ended `failed`: nothing of it was sent.
    pub(super) async fn nothing_sent(&mut self, id: ExecutionId) -> Result<(), LedgerError> {
        let id = id.to_string();
        self.tx.later(TAKE_OFF, params![&id]).await?;
        self.tx
            .later(
                "DELETE FROM budget_charges WHERE execution_id = $1",
                params![&id],
            )
            .await
    }

    /// The charge's scope locked (PostgreSQL), its totals brought to the window ending `now`.
    async fn locked_usage(
        &mut self,
        c: &BudgetCharge,
        now: Timestamp,
    ) -> Result<BudgetUsage, LedgerError> {
        let since = now.0.saturating_sub(c.window_ms);
        let key = params![&c.budget, &c.scope];
        self.tx
            .later(NEW_SCOPE, params![&c.budget, &c.scope, since])
            .await?;
        let lock = self.tx.cfg.dialect.for_update();
        let sql = format!("SELECT calls, total, counted_from FROM budget_scopes WHERE budget = $1 AND scope_key = $2{lock}");
        let row = self
            .tx
            .conn
            .query_opt(&sql, key)
            .await?
            .ok_or_else(missing)?;
        let (mut calls, mut total) = (rows::get_i64(&row, "calls")?, rows::get_i64(&row, "total")?);
        let from = rows::get_i64(&row, "counted_from")?;
        if since != from {
            // Take off what left the window since; a longer window than before counts again.
            let (sql, p) = match since > from {
                true => (LEFT, params![&c.budget, &c.scope, from, since]),
                false => (IN_WINDOW, params![&c.budget, &c.scope, since, i64::MAX]),
            };
            let row = self.tx.conn.query_opt(sql, p).await?.ok_or_else(missing)?;
            let (n, sum) = (rows::get_i64(&row, "calls")?, rows::get_i64(&row, "sum")?);
            (calls, total) = match since > from {
                true => (calls - n, total - sum),
                false => (n, sum),
            };
            self.tx
                .later(
                    "UPDATE budget_scopes SET calls = $1, total = $2, counted_from = $3 WHERE budget = $4 AND scope_key = $5",
                    params![calls, total, since, &c.budget, &c.scope],
                )
                .await?;
        }
        Ok(BudgetUsage {
            budget: c.budget.clone(),
            scope: c.scope.clone(),
            calls: u64::try_from(calls).unwrap_or(0),
            sum: total,
            max_calls: c.max_calls,
            max_sum: c.max_sum,
            window_ms: c.window_ms,
            frees_at: None,
        })
    }

    /// When the oldest charge counted in the window leaves it (read only for a call past it).
    async fn frees_at(
        &mut self,
        u: &BudgetUsage,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, LedgerError> {
        let since = now.0.saturating_sub(u.window_ms);
        let row = self
            .tx
            .conn
            .query_opt(
                "SELECT MIN(at) AS oldest FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at > $3",
                params![&u.budget, &u.scope, since],
            )
            .await?;
        let oldest = row
            .map(|r| rows::get_opt_i64(&r, "oldest"))
            .transpose()?
            .flatten();
        Ok(oldest.map(|t| Timestamp(t.saturating_add(u.window_ms))))
    }
}

fn missing() -> LedgerError {
    LedgerError::Corrupt("a budget's totals row is missing".into())
}

/// A scope's totals row, made on its first charge (counting from the window's start).
const NEW_SCOPE: &str = "INSERT INTO budget_scopes (budget, scope_key, counted_from) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

/// The counted charges of a scope with `at` in ($3, $4].
const IN_WINDOW: &str = "SELECT COUNT(*) AS calls, CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS sum FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at > $3 AND at <= $4";

/// The same: those that left the window between two checks.
const LEFT: &str = IN_WINDOW;

/// Adds an execution's pending charges to their scopes' totals.
const ADD_PENDING: &str = "UPDATE budget_scopes SET calls = calls + 1, total = total + (SELECT c.amount FROM budget_charges c WHERE c.execution_id = $1 AND c.at IS NULL AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key) WHERE EXISTS (SELECT 1 FROM budget_charges c WHERE c.execution_id = $1 AND c.at IS NULL AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key)";

/// Takes an execution's counted charges still in their scopes' totals off them (before its
/// charges are deleted: it failed with nothing sent, or is pruned).
pub(super) const TAKE_OFF: &str = "UPDATE budget_scopes SET calls = calls - 1, total = total - (SELECT c.amount FROM budget_charges c WHERE c.execution_id = $1 AND c.at IS NOT NULL AND c.at > budget_scopes.counted_from AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key) WHERE EXISTS (SELECT 1 FROM budget_charges c WHERE c.execution_id = $1 AND c.at IS NOT NULL AND c.at > budget_scopes.counted_from AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key)";
