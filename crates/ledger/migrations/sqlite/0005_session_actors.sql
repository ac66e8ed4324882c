-- The actor an MCP session belongs to: the one whose token opened it. A request in a session
-- with another actor's token is treated as an unknown session (its `:common` stream too).
CREATE TABLE mcp_session_actors (
    session_id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    at BIGINT NOT NULL
);
