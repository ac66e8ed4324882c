//! The ledger's one integration-test binary: the store conformance suite (run against both
//! SQLite and the real PostgreSQL), resumable-stream transport state, the multi-process and
//! crash tests.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod batches;
mod budgets;
mod conformance;
mod crash;
mod faults;
mod retention;
mod runs;
mod streams;
mod support;
mod takeover;
