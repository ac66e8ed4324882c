//! Budgets' use as operators read it (`postern budgets`, the console, the gauges).

use postern_core::Timestamp;

use super::StoreReader;
use crate::budget::BudgetUsage;
use crate::error::LedgerError;
use crate::rows;

impl StoreReader {
    /// The use of `budget` in the window of `window_ms` ending `now`, per scope that has
    /// executions counted in it, most used first. The limits are the caller's to fill in.
    pub async fn budget_use(
        &self,
        budget: &str,
        window_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<BudgetUsage>, LedgerError> {
        let since = now.0.saturating_sub(window_ms);
        let found = sqlx::query(
            "SELECT scope_key, COUNT(*) AS calls, CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS sum, MIN(at) AS oldest FROM budget_charges WHERE budget = $1 AND at IS NOT NULL AND at > $2 GROUP BY scope_key ORDER BY COUNT(*) DESC, scope_key",
        )
        .bind(budget)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        found
            .iter()
            .map(|row| {
                let oldest = rows::get_opt_i64(row, "oldest")?;
                Ok(BudgetUsage {
                    budget: budget.to_string(),
                    scope: rows::get_str(row, "scope_key")?,
                    calls: u64::try_from(rows::get_i64(row, "calls")?).unwrap_or(0),
                    sum: rows::get_i64(row, "sum")?,
                    max_calls: None,
                    max_sum: None,
                    window_ms,
                    frees_at: oldest.map(|t| Timestamp(t.saturating_add(window_ms))),
                })
            })
            .collect()
    }
}
