-- Budgets with fewer structures to write per counted call (issue 53). A charge is keyed by its
-- execution first (what a dispatch, a failure and pruning look it up by), so the key is also
-- that index: a charge writes its heap row, the key and the window index, not a fourth.
ALTER TABLE budget_charges DROP CONSTRAINT budget_charges_pkey;
ALTER TABLE budget_charges ADD PRIMARY KEY (execution_id, budget, scope_key);
DROP INDEX budget_charges_execution;
