-- The address a run's client connected from (issue 49): the TCP peer's, or the one a trusted
-- load balancer's PROXY header names. NULL: a stdio run, or one recorded before this.
ALTER TABLE runs ADD COLUMN client_address TEXT;
