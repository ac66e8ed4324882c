-- Retention: ranges of a chain whose events were pruned, each with the signed statement that
-- lets the verifier link across it (see postern_audit::PrunedRange). Adjacent ranges are
-- merged, so a steady store keeps a handful of rows here.
CREATE TABLE pruned_ranges (
    chain TEXT NOT NULL,
    from_seq BIGINT NOT NULL,
    to_seq BIGINT NOT NULL,
    before_hash TEXT NOT NULL,
    to_hash TEXT NOT NULL,
    at BIGINT NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    PRIMARY KEY (chain, from_seq)
);
CREATE UNIQUE INDEX pruned_ranges_end ON pruned_ranges (chain, to_seq);
-- Retention removes an execution's re-issue key by the execution (its key is not on the record).
CREATE INDEX reissue_keys_execution ON reissue_keys (execution_id);
