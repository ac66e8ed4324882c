-- Checkpoints form a chain (issue 47): each names the checkpoint its signer signed before it on
-- the same audit chain, so a deleted checkpoint is a break. NULL: a chain's first checkpoint,
-- or one signed before checkpoints were chained.
ALTER TABLE checkpoints ADD COLUMN prev_seq BIGINT;
ALTER TABLE checkpoints ADD COLUMN prev_hash TEXT;
