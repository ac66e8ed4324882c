-- Session authorization (issue 14): an operator authorizes a run once, or revokes it. Each
-- decision is set once (the UPDATE that records it requires the column to be empty), so of
-- two operators deciding at once exactly one is recorded.
ALTER TABLE runs ADD COLUMN authorized_by TEXT;
ALTER TABLE runs ADD COLUMN authorized_at BIGINT;
ALTER TABLE runs ADD COLUMN revoked_by TEXT;
ALTER TABLE runs ADD COLUMN revoked_at BIGINT;
