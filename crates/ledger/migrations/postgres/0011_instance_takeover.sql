-- Replica takeover (issue 19): the surviving instance that found another's lease expired
-- records that it took it over, and when. A taken-over instance is fenced: its heartbeat no
-- longer renews anything and a commit that would dispatch refuses to (checked in the commit).
ALTER TABLE instances ADD COLUMN taken_over_by TEXT;
ALTER TABLE instances ADD COLUMN taken_over_at BIGINT;
