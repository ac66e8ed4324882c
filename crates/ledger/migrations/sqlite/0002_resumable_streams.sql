-- Resumable MCP streams (Streamable HTTP): the SSE events a stream carried, so a client that
-- reconnects with Last-Event-ID receives what it missed, also after a restart. These rows are
-- transport state, not the execution record: the events log above stays the truth.
CREATE TABLE stream_events (
    stream_id TEXT NOT NULL,
    n BIGINT NOT NULL,
    payload TEXT NOT NULL,
    execution_id TEXT,
    last BIGINT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (stream_id, n)
) WITHOUT ROWID;

-- Which session and actor a stream belongs to: a Last-Event-ID from anyone else replays nothing.
CREATE TABLE streams (
    stream_id TEXT PRIMARY KEY,
    session_id TEXT,
    actor TEXT NOT NULL,
    at BIGINT NOT NULL
) WITHOUT ROWID;

-- MCP sessions (protocol versions before 2026-07-28): their initialize parameters, so a
-- session outlives a gateway restart.
CREATE TABLE mcp_sessions (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    at BIGINT NOT NULL
) WITHOUT ROWID;
CREATE INDEX stream_events_at ON stream_events (at);
