//! Transport state as stored (`streams.rs`): a stream's events and owner, and an MCP
//! session's state and actor.

use super::StoreReader;
use crate::error::LedgerError;
use crate::rows;
use crate::streams::{StreamEvent, StreamOwner};

impl StoreReader {
    /// A stream's events after position `after` (all of them for `None`), in order.
    pub async fn stream_events_after(
        &self,
        stream_id: &str,
        after: Option<u64>,
    ) -> Result<Vec<StreamEvent>, LedgerError> {
        let after = after.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        sqlx::query("SELECT stream_id, n, payload, execution_id, last, at FROM stream_events WHERE stream_id = $1 AND n > $2 ORDER BY n")
            .bind(stream_id)
            .bind(after)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::stream_event)
            .collect()
    }

    /// Who may resume a stream.
    pub async fn stream_owner(&self, stream_id: &str) -> Result<Option<StreamOwner>, LedgerError> {
        sqlx::query("SELECT stream_id, session_id, actor, at FROM streams WHERE stream_id = $1")
            .bind(stream_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::stream_owner)
            .transpose()
    }

    /// An MCP session's stored state (opaque to the ledger).
    pub async fn mcp_session(&self, id: &str) -> Result<Option<String>, LedgerError> {
        sqlx::query("SELECT state FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(|r| rows::get_str(r, "state"))
            .transpose()
    }

    /// The actor an MCP session belongs to, if one was recorded.
    pub async fn mcp_session_actor(&self, id: &str) -> Result<Option<String>, LedgerError> {
        sqlx::query("SELECT actor FROM mcp_session_actors WHERE session_id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(|r| rows::get_str(r, "actor"))
            .transpose()
    }
}
