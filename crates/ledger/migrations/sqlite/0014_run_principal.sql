-- Whom a run's agent acted for (issue 50), when it authenticated with an [[issuer]]'s access
-- token: the token's issuer, subject and client. Never the token. NULL: a static token or a
-- client certificate, or a run recorded before this.
ALTER TABLE runs ADD COLUMN principal_issuer TEXT;
ALTER TABLE runs ADD COLUMN principal_subject TEXT;
ALTER TABLE runs ADD COLUMN principal_client TEXT;
