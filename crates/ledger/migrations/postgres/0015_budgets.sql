-- Budgets on effects (issue 53). One row per execution a budget counts, per budget and scope
-- (the actor and/or argument values it is partitioned by). `at` is when its first dispatch was
-- recorded (NULL while it waits for a person: counted once it is sent); `amount` is the summed
-- argument in millionths (0 for a budget that counts executions only). An execution that ends
-- `failed` (nothing was sent) loses its rows; its other rows go when it is pruned.
CREATE TABLE budget_charges (
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    at BIGINT,
    PRIMARY KEY (budget, scope_key, execution_id)
);
CREATE INDEX budget_charges_window ON budget_charges (budget, scope_key, at);
CREATE INDEX budget_charges_execution ON budget_charges (execution_id);
-- Each scope's running totals: the counted charges with `at` after `counted_from` (those at or
-- before it have left the window and been taken off), so a check reads one row and the charges
-- that left the window since the last one. On PostgreSQL its row is what a check locks first,
-- so replicas count one at a time.
CREATE TABLE budget_scopes (
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    calls BIGINT NOT NULL DEFAULT 0,
    total BIGINT NOT NULL DEFAULT 0,
    counted_from BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (budget, scope_key)
);
