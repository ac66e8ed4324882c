//! The Sessions log as stored: runs, and the calls each carried (or that reached an execution).

use postern_core::ExecutionId;

use super::StoreReader;
use crate::error::LedgerError;
use crate::model::{CallRecord, Run};
use crate::rows;

impl StoreReader {
    /// A run (the Sessions log).
    pub async fn run(&self, id: &str) -> Result<Option<Run>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM runs WHERE id = $1",
            rows::RUN_COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(rows::run)
        .transpose()
    }

    /// Runs (the Sessions log), newest first.
    pub async fn runs(&self, limit: u32) -> Result<Vec<Run>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM runs ORDER BY started_at DESC LIMIT {}",
            rows::RUN_COLUMNS,
            limit.max(1)
        ))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::run)
        .collect()
    }

    /// The calls that reached an execution, oldest first.
    pub async fn calls_of(&self, id: ExecutionId) -> Result<Vec<CallRecord>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM calls WHERE execution_id = $1 ORDER BY id",
            rows::CALL_COLUMNS
        ))
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::call)
        .collect()
    }

    /// A run's calls, oldest first (at most `limit`).
    pub async fn calls_in(&self, run: &str, limit: u32) -> Result<Vec<CallRecord>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM calls WHERE run_id = $1 ORDER BY id LIMIT {}",
            rows::CALL_COLUMNS,
            limit.max(1)
        ))
        .bind(run)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::call)
        .collect()
    }
}
