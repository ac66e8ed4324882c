-- A counted charge writes one b-tree (issue 53: checking a budget still cost 13 % of calls/s at
-- c=64 with 0016's two). `budget_charges` holds counted charges only, keyed in window order; an
-- execution finds its own through its row (`budget_keys`: the budgets and scopes it is charged
-- to, as a JSON array of [budget, scope] pairs; `budget_at`: when they were counted, NULL while
-- it waits for a person). Charges waiting for a person are in `budget_pending` until it is sent.
ALTER TABLE executions ADD COLUMN budget_keys TEXT;
ALTER TABLE executions ADD COLUMN budget_at BIGINT;
UPDATE executions
    SET budget_keys = (SELECT json_group_array(json_array(c.budget, c.scope_key)) FROM budget_charges c WHERE c.execution_id = executions.id),
        budget_at = (SELECT MAX(c.at) FROM budget_charges c WHERE c.execution_id = executions.id)
    WHERE id IN (SELECT execution_id FROM budget_charges);

CREATE TABLE budget_pending (
    execution_id TEXT NOT NULL,
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    amount BIGINT NOT NULL,
    PRIMARY KEY (execution_id, budget, scope_key)
) WITHOUT ROWID;
INSERT INTO budget_pending (execution_id, budget, scope_key, amount)
    SELECT execution_id, budget, scope_key, amount FROM budget_charges WHERE at IS NULL;

CREATE TABLE budget_counted (
    budget TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    at BIGINT NOT NULL,
    execution_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    PRIMARY KEY (budget, scope_key, at, execution_id)
) WITHOUT ROWID;
INSERT INTO budget_counted (budget, scope_key, at, execution_id, amount)
    SELECT budget, scope_key, at, execution_id, amount FROM budget_charges WHERE at IS NOT NULL;
DROP TABLE budget_charges;
ALTER TABLE budget_counted RENAME TO budget_charges;
