-- A call's row is one b-tree, keyed by its id (issue 52): a rowid table with a TEXT PRIMARY KEY
-- writes the row and, apart, its key's index, two b-trees for every tools/call. Call ids are
-- UUIDv7, so the rows still grow at the table's right edge; nothing reads calls by rowid.
CREATE TABLE calls_keyed (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    tool TEXT NOT NULL,
    run_id TEXT,
    request_id TEXT,
    execution_id TEXT,
    attempt TEXT NOT NULL,
    operation_key TEXT,
    outcome TEXT NOT NULL,
    instance TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO calls_keyed (id, at, actor, tool, run_id, request_id, execution_id, attempt, operation_key, outcome, instance)
    SELECT id, at, actor, tool, run_id, request_id, execution_id, attempt, operation_key, outcome, instance FROM calls;
DROP TABLE calls;
ALTER TABLE calls_keyed RENAME TO calls;
CREATE INDEX calls_execution ON calls (execution_id);
CREATE INDEX calls_run ON calls (run_id, id);
