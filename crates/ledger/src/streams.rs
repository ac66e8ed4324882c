//! Transport state for resumable MCP streams: the SSE events a stream carried, which session
//! and actor a stream belongs to, and MCP sessions' initialize parameters. Kept beside the
//! execution record, never part of it: losing a row here costs a replay, never an action.

use postern_core::{ExecutionId, Timestamp};

/// One SSE event of a stream, in the order the stream carried it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEvent {
    pub stream_id: String,
    /// Position in the stream, from 0.
    pub n: u64,
    /// The event as the transport serialised it (opaque to the ledger).
    pub payload: String,
    /// The execution whose answer this event carries, if any (replaying it is a delivery).
    pub execution_id: Option<ExecutionId>,
    /// The stream's final event: nothing follows it.
    pub last: bool,
    pub at: Timestamp,
}

/// The owner of a stream: only this session (and actor) may resume it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOwner {
    pub stream_id: String,
    /// `None` for a stream outside any MCP session (protocol 2026-07-28).
    pub session_id: Option<String>,
    pub actor: String,
    pub at: Timestamp,
}

/// A write of transport state. None of these is waited on by an action, so the writer lets
/// them share the next commit instead of spending one of their own.
#[derive(Clone, Debug)]
pub enum StreamWrite {
    Event(StreamEvent),
    Owner(StreamOwner),
    PutSession {
        id: String,
        state: String,
        at: Timestamp,
    },
    DropSession(String),
    /// One `tools/call` as answered (the Sessions log's calls, `activity trace`'s evidence).
    Call(Box<crate::model::CallRecord>),
    /// The actor an MCP session belongs to (the first one recorded stays).
    SessionActor {
        id: String,
        actor: String,
        at: Timestamp,
    },
}

impl StreamWrite {
    pub(crate) fn sql(&self) -> (&'static str, Vec<crate::db::SqlValue>) {
        use crate::db::IntoSql;
        match self {
            StreamWrite::Event(e) => (
                "INSERT INTO stream_events (stream_id, n, payload, execution_id, last, at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                vec![
                    e.stream_id.as_str().into_sql(),
                    (e.n as i64).into_sql(),
                    e.payload.as_str().into_sql(),
                    e.execution_id.map(|id| id.to_string()).into_sql(),
                    i64::from(e.last).into_sql(),
                    e.at.0.into_sql(),
                ],
            ),
            StreamWrite::Owner(o) => (
                "INSERT INTO streams (stream_id, session_id, actor, at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                vec![
                    o.stream_id.as_str().into_sql(),
                    o.session_id.clone().into_sql(),
                    o.actor.as_str().into_sql(),
                    o.at.0.into_sql(),
                ],
            ),
            StreamWrite::PutSession { id, state, at } => (
                "INSERT INTO mcp_sessions (id, state, at) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET state = excluded.state, at = excluded.at",
                vec![id.as_str().into_sql(), state.as_str().into_sql(), at.0.into_sql()],
            ),
            StreamWrite::DropSession(id) => (
                "DELETE FROM mcp_sessions WHERE id = $1",
                vec![id.as_str().into_sql()],
            ),
            StreamWrite::Call(c) => (
                "INSERT INTO calls (id, at, actor, tool, run_id, request_id, execution_id, attempt, operation_key, outcome, instance) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                vec![
                    uuid::Uuid::now_v7().to_string().into_sql(),
                    c.at.0.into_sql(),
                    c.actor.as_str().into_sql(),
                    c.tool.as_str().into_sql(),
                    c.run_id.clone().into_sql(),
                    c.request_id.clone().into_sql(),
                    c.execution_id.map(|id| id.to_string()).into_sql(),
                    c.attempt.as_str().into_sql(),
                    c.operation_key.clone().into_sql(),
                    c.outcome.as_str().into_sql(),
                    c.instance.as_str().into_sql(),
                ],
            ),
            StreamWrite::SessionActor { id, actor, at } => (
                "INSERT INTO mcp_session_actors (session_id, actor, at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                vec![id.as_str().into_sql(), actor.as_str().into_sql(), at.0.into_sql()],
            ),
        }
    }
}
