-- Fewer index pages per commit. The recovery scan looks only for executions left
-- `dispatched`: an index of every state moved each finished execution from one part of the
-- index to another; a partial index holds only the executions in flight, stays a page or two,
-- and a completion just removes its entry. Listing newest first follows the primary key (an
-- execution id is a UUIDv7 minted at acceptance, and its text sorts as its number), so the
-- index on `accepted_at` only cost a page in every accept.
DROP INDEX executions_state;
DROP INDEX executions_accepted;
CREATE INDEX executions_dispatched ON executions (id) WHERE state = 'dispatched';
