//! MCP sessions over the ledger: rmcp's `SessionStore`, so a session outlives a restart.

use std::sync::Arc;

use postern_ledger::{Ledger, StreamWrite};
use postern_pipeline::now;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

/// MCP sessions outlive a restart: rmcp restores one from its stored initialize parameters.
pub(crate) struct DurableSessions {
    ledger: Arc<Ledger>,
}

impl DurableSessions {
    pub(crate) fn new(ledger: Arc<Ledger>) -> DurableSessions {
        DurableSessions { ledger }
    }
}

#[async_trait::async_trait]
impl SessionStore for DurableSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.ledger.read().mcp_session(session_id).await? {
            Some(text) => {
                let state = serde_json::from_str(&text)?;
                // A session in use is not old: restoring it restarts its retention.
                let touch = StreamWrite::PutSession {
                    id: session_id.to_string(),
                    state: text,
                    at: now(),
                };
                let ledger = self.ledger.clone();
                tokio::spawn(async move { ledger.record_stream(touch).await });
                Ok(Some(state))
            }
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let write = StreamWrite::PutSession {
            id: session_id.to_string(),
            state: serde_json::to_string(state)?,
            at: now(),
        };
        Ok(self.ledger.record_stream_now(write).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        // A closed session is an ended run in the Sessions log.
        if let Err(e) = self
            .ledger
            .end_run(
                &format!("mcp-session:{session_id}"),
                now(),
                postern_ledger::RunEnd::Closed,
            )
            .await
        {
            tracing::warn!(error = %e, "a closed session's end could not be recorded in the Sessions log");
        }
        Ok(self
            .ledger
            .record_stream(StreamWrite::DropSession(session_id.to_string()))
            .await?)
    }
}
