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
-- The row a charge's transaction locks first (PostgreSQL), so replicas count one at a time.
CREATE TABLE budget_scopes (
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    PRIMARY KEY (budget, scope_key)
);
