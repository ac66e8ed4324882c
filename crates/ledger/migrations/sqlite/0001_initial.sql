-- Executions: one row per accepted attempt. `state` … `lease_until` are a projection of the
-- event log (kept for queries); the events are the truth.
CREATE TABLE executions (
    id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    tool TEXT NOT NULL,
    class TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    intent_scope TEXT NOT NULL,
    operation_key TEXT,
    record TEXT NOT NULL,
    run_id TEXT,
    state TEXT NOT NULL,
    n BIGINT NOT NULL,
    dispatches BIGINT NOT NULL,
    cancel_requested BIGINT NOT NULL,
    accepted_at BIGINT NOT NULL,
    state_since BIGINT NOT NULL,
    first_dispatched_at BIGINT,
    rejection_retryable BIGINT NOT NULL,
    owner TEXT
) WITHOUT ROWID;
CREATE INDEX executions_state ON executions (state);
CREATE INDEX executions_accepted ON executions (accepted_at);

-- The append-only event log, hash-chained per writer chain. Never updated; deleted only by
-- retention, whole executions at a time, leaving signed pruned ranges (migration 0006).
CREATE TABLE events (
    chain TEXT NOT NULL,
    seq BIGINT NOT NULL,
    execution_id TEXT NOT NULL,
    n BIGINT NOT NULL,
    event TEXT NOT NULL,
    at BIGINT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (chain, seq),
    UNIQUE (execution_id, n)
);

CREATE TABLE chains (
    chain TEXT PRIMARY KEY,
    head_seq BIGINT NOT NULL,
    head_hash TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    chain TEXT NOT NULL,
    seq BIGINT NOT NULL,
    head_hash TEXT NOT NULL,
    at BIGINT NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    PRIMARY KEY (chain, seq)
) WITHOUT ROWID;

-- The matchable intent slot: at most one execution per (actor, scope, fingerprint) at a time.
-- Concurrent identical accepts meet on this primary key.
CREATE TABLE intents (
    actor TEXT NOT NULL,
    intent_scope TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    PRIMARY KEY (actor, intent_scope, fingerprint)
) WITHOUT ROWID;

-- Client-supplied operation keys, unique per actor.
CREATE TABLE operation_keys (
    actor TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    PRIMARY KEY (actor, key)
) WITHOUT ROWID;

-- Stored results, size-capped by the caller; the chain holds only their digest.
CREATE TABLE results (
    execution_id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    digest TEXT NOT NULL,
    size BIGINT NOT NULL,
    truncated BIGINT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (execution_id, attempt)
) WITHOUT ROWID;

-- The Sessions log: one row per agent run.
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    client_name TEXT,
    client_version TEXT,
    protocol_version TEXT,
    transport TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at BIGINT
) WITHOUT ROWID;

-- Gateway instances (one per process): liveness for taking over a crashed one's executions.
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
) WITHOUT ROWID;
