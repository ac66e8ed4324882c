-- Investigation (issue 17). Every tools/call, as the gateway answered it: which run sent it
-- (with its JSON-RPC id), which execution it reached and how (`new`, `attached`,
-- `recovered`), or that it was refused before any execution existed. Not chained: the
-- lifecycle events stay the evidence of what was sent; this is the evidence of who asked.
CREATE TABLE calls (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    tool TEXT NOT NULL,
    run_id TEXT,
    request_id TEXT,
    execution_id TEXT,
    attempt TEXT NOT NULL,
    operation_key TEXT,
    outcome TEXT NOT NULL,
    instance TEXT NOT NULL
);
-- Execution ids and call ids are UUIDv7: both indexes grow at their right edge.
CREATE INDEX calls_execution ON calls (execution_id);
CREATE INDEX calls_run ON calls (run_id, id);
-- The first page of the Activity log filtered by actor or tool, and every execution of one
-- intent, without walking a million rows.
CREATE INDEX executions_actor ON executions (actor, id);
CREATE INDEX executions_tool ON executions (tool, id);
-- Every execution of one intent, and of one operation key, by an index that holds both columns
-- the investigation asks for: the planner never walks an actor's whole history for the one row
-- (PostgreSQL without statistics chose the actor index and read 50,000 rows of it).
CREATE INDEX executions_fingerprint ON executions (fingerprint, actor);
CREATE INDEX executions_operation_key ON executions (operation_key, actor) WHERE operation_key IS NOT NULL;
CREATE INDEX runs_started ON runs (started_at);
-- How a run ended: `closed` (the client deleted its session), `transport_closed`,
-- `idle_expired`, `gateway_stopped`.
ALTER TABLE runs ADD COLUMN end_reason TEXT;
-- What an operator watches (`postern status`, the /metrics gauges): the executions waiting for
-- someone, counted without reading the others. Partial indexes hold only the executions in
-- that state (an execution passes through at most a few of them), so a commit of a finished
-- one touches none; `dispatched` has its own since migration 3.
CREATE INDEX executions_awaiting_approval ON executions (state_since) WHERE state = 'awaiting_approval';
CREATE INDEX executions_needs_review ON executions (state_since) WHERE state = 'needs_review';
CREATE INDEX executions_outcome_unknown ON executions (state_since) WHERE state = 'outcome_unknown';
