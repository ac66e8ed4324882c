-- Tool pinning (issue 15): the accepted version of each upstream MCP tool the gateway
-- re-exports, as a digest of its name, description and input schema, with the definition it
-- was taken from (for the diff an operator is shown when the upstream changes it). Each change
-- of a row is also a `notice` event in the audit chain, in the same commit.
CREATE TABLE upstream_tool_pins (
    upstream TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest TEXT NOT NULL,
    definition TEXT NOT NULL,
    pinned_at BIGINT NOT NULL,
    accepted_by TEXT,
    PRIMARY KEY (upstream, tool)
);
