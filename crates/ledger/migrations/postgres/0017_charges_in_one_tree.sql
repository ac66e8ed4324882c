-- A counted charge writes one index (issue 53). `budget_charges` holds counted charges only,
-- keyed in window order; an execution finds its own through its row (`budget_keys`: the budgets
-- and scopes it is charged to, as a JSON array of [budget, scope] pairs; `budget_at`: when they
-- were counted, NULL while it waits for a person). Charges waiting for a person are in
-- `budget_pending` until it is sent.
ALTER TABLE executions ADD COLUMN budget_keys TEXT;
ALTER TABLE executions ADD COLUMN budget_at BIGINT;
UPDATE executions e
    SET budget_keys = c.keys, budget_at = c.at
    FROM (SELECT execution_id, json_agg(json_build_array(budget, scope_key))::text AS keys, MAX(at) AS at
          FROM budget_charges GROUP BY execution_id) c
    WHERE c.execution_id = e.id;

CREATE TABLE budget_pending (
    execution_id TEXT NOT NULL,
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    amount BIGINT NOT NULL,
    PRIMARY KEY (execution_id, budget, scope_key)
);
INSERT INTO budget_pending (execution_id, budget, scope_key, amount)
    SELECT execution_id, budget, scope_key, amount FROM budget_charges WHERE at IS NULL;

CREATE TABLE budget_counted (
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    at BIGINT NOT NULL,
    execution_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    PRIMARY KEY (budget, scope_key, at, execution_id)
);
INSERT INTO budget_counted (budget, scope_key, at, execution_id, amount)
    SELECT budget, scope_key, at, execution_id, amount FROM budget_charges WHERE at IS NOT NULL;
DROP TABLE budget_charges;
ALTER TABLE budget_counted RENAME TO budget_charges;
ALTER INDEX budget_counted_pkey RENAME TO budget_charges_pkey;
