//! What the ledger counts for `/metrics`, through the `metrics` facade: nothing is kept unless
//! the binary installs a recorder, so a library user pays a relaxed load per call.
//!
//! Every figure here is of a commit that succeeded: an event is counted once it is durable,
//! never when it was only written into a transaction that rolled back.

use std::time::Duration;

use postern_core::EventKind;

/// Events made durable, by kind (`postern_events_total{event}`): the states entered.
pub const EVENTS: &str = "postern_events_total";
/// Time from opening a write transaction to its durable commit.
pub const COMMIT_SECONDS: &str = "postern_ledger_commit_seconds";
/// Time of the `COMMIT` statement alone: on SQLite (WAL, synchronous=FULL) the fsync.
pub const COMMIT_STATEMENT_SECONDS: &str = "postern_ledger_commit_statement_seconds";
/// Requests committed together (group commit).
pub const BATCH_SIZE: &str = "postern_ledger_batch_size";
/// Commits that failed (nothing of their batch recorded, or unknown on a lost connection).
pub const COMMIT_FAILURES: &str = "postern_ledger_commit_failures_total";

pub(crate) fn committed(
    requests: usize,
    events: &[EventKind],
    took: Duration,
    commit_statement: Duration,
) {
    metrics::histogram!(COMMIT_SECONDS).record(took.as_secs_f64());
    metrics::histogram!(COMMIT_STATEMENT_SECONDS).record(commit_statement.as_secs_f64());
    metrics::histogram!(BATCH_SIZE).record(requests as f64);
    for kind in events {
        metrics::counter!(EVENTS, "event" => kind.name()).increment(1);
    }
}

pub(crate) fn commit_failed(fault: crate::StorageFault) {
    metrics::counter!(COMMIT_FAILURES, "fault" => fault.label()).increment(1);
}
