-- SQLite's calls become one b-tree keyed by id (issue 52). PostgreSQL keeps every table as a
-- heap beside its key's index: nothing to change, the version is recorded to keep the two
-- dialects' numbering the same.
SELECT 1;
