//! Retention: which executions are past it (read from the pool, a page at a time, oldest
//! first) and pruning them through the writer, plus the transport state and runs that age out
//! with them ([`Ledger::prune_streams`]). Only executions in a final state go: an unsettled one
//! (`dispatched`, `outcome_unknown`, `needs_review`, …) is kept whatever its age.

use std::collections::HashMap;

use postern_core::lifecycle::State;
use postern_core::{ExecutionId, Timestamp};

use crate::error::LedgerError;
use crate::model::Pruned;
use crate::ops::Op;
use crate::rows;
use crate::writer::now_millis;
use crate::Ledger;

/// How long records are kept: per tool, and for every other tool.
#[derive(Clone, Debug)]
pub struct Retention {
    pub default: std::time::Duration,
    pub by_tool: HashMap<String, std::time::Duration>,
}

/// What one retention pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub executions: u64,
    pub events: u64,
    /// Rows of transport state (stream events, streams, sessions) and ended runs.
    pub transport: u64,
}

/// Executions handed to the writer per commit: a prune never holds the writer for long.
const PER_COMMIT: usize = 500;
/// Rows read per page while looking for prunable executions.
const PAGE: i64 = 2000;

fn before(now: i64, keep: std::time::Duration) -> i64 {
    now.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX))
}

/// The smallest execution id minted at or after `at_millis` (ids are UUIDv7: time first).
fn first_id_at(at_millis: i64) -> ExecutionId {
    let ms = u64::try_from(at_millis.max(0)).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    ExecutionId::from_bytes(bytes)
}

impl Ledger {
    /// One retention pass: prunes every execution past its retention (in commits of a few
    /// hundred), then transport state and runs past the default retention.
    pub async fn prune(&self, retention: &Retention) -> Result<PruneReport, LedgerError> {
        let now = now_millis();
        let shortest = retention
            .by_tool
            .values()
            .chain(std::iter::once(&retention.default))
            .min()
            .copied()
            .unwrap_or(retention.default);
        // Nothing accepted after this can be past any retention (state_since ≥ accepted_at).
        let horizon = first_id_at(before(now, shortest));
        let mut report = PruneReport::default();
        let mut after = String::new();
        loop {
            let page = sqlx::query(
                "SELECT id, tool, state, n, state_since FROM executions WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3",
            )
            .bind(&after)
            .bind(horizon.to_string())
            .bind(PAGE)
            .fetch_all(&self.pool)
            .await?;
            let Some(last) = page.last() else { break };
            after = rows::get_str(last, "id")?;
            let mut plan = Vec::new();
            for row in &page {
                let state: State = rows::get_str(row, "state")?
                    .parse()
                    .map_err(|e| LedgerError::Corrupt(format!("state: {e}")))?;
                let tool = rows::get_str(row, "tool")?;
                let keep = retention
                    .by_tool
                    .get(&tool)
                    .copied()
                    .unwrap_or(retention.default);
                if state.is_final() && rows::get_i64(row, "state_since")? < before(now, keep) {
                    let id: ExecutionId = rows::get_str(row, "id")?
                        .parse()
                        .map_err(|e| LedgerError::Corrupt(format!("execution id: {e}")))?;
                    let n = u32::try_from(rows::get_i64(row, "n")?)
                        .map_err(|e| LedgerError::Corrupt(format!("n: {e}")))?;
                    plan.push((id, n));
                }
            }
            for chunk in plan.chunks(PER_COMMIT) {
                let chunk = chunk.to_vec();
                let at = Timestamp(now_millis());
                let pruned: Pruned = self.writes.call(|tx| Op::Prune(chunk, at, tx)).await?;
                report.executions += pruned.executions;
                report.events += pruned.events;
            }
            if (page.len() as i64) < PAGE {
                break;
            }
        }
        report.transport = self
            .prune_streams(Timestamp(before(now, retention.default)))
            .await?;
        Ok(report)
    }

    /// Deletes transport state older than `before` (stream events, owners, sessions) and runs
    /// that ended before it. The execution record is never pruned here (see [`Ledger::prune`]).
    pub async fn prune_streams(&self, before: Timestamp) -> Result<u64, LedgerError> {
        let mut removed = 0;
        for table in [
            "stream_events",
            "streams",
            "mcp_sessions",
            "mcp_session_actors",
        ] {
            removed += sqlx::query(&format!("DELETE FROM {table} WHERE at < $1"))
                .bind(before.0)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        // Refusals (no execution) age out with the transport state; a call that reached an
        // execution goes with that execution's record.
        removed += sqlx::query("DELETE FROM calls WHERE execution_id IS NULL AND at < $1")
            .bind(before.0)
            .execute(&self.pool)
            .await?
            .rows_affected();
        removed += sqlx::query("DELETE FROM runs WHERE ended_at IS NOT NULL AND ended_at < $1")
            .bind(before.0)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(removed)
    }
}
