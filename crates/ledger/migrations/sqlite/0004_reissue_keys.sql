-- Re-issue keys: the key a bridge (postern connect) gives every attempt of one agent request,
-- unique per actor. Unlike an operation key it never asks for a new action; it only finds the
-- execution an earlier attempt of the same request reached, whatever the match window.
CREATE TABLE reissue_keys (
    actor TEXT NOT NULL,
    key TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    PRIMARY KEY (actor, key)
) WITHOUT ROWID;
