-- When a gateway last saw a run arrive (its start, its resumption, or a call on a gateway whose
-- memory of it had aged): the idle pass ends only runs not seen, and with no call, for
-- `[gateway] session_idle`. Without it a run resumed by a call still in flight looked idle
-- since its last recorded call, and a run another replica ended stayed ended while served.
ALTER TABLE runs ADD COLUMN seen_at BIGINT;
UPDATE runs SET seen_at = started_at;
-- The idle pass reads the open runs only.
CREATE INDEX runs_open ON runs (seen_at) WHERE ended_at IS NULL;
