//! What the ledger counts for `/metrics`, through the `metrics` facade: nothing is kept unless
//! the binary installs a recorder, so a library user pays a relaxed load per call. The binary
//! installs its recorder before it opens a ledger: a writer takes its handles when it is made.
//!
//! Every figure here is of a commit that succeeded: an event is counted once it is durable,
//! never when it was only written into a transaction that rolled back.

use std::time::Duration;

use metrics::{Counter, Histogram};
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

/// The handles of what a commit counts, each looked up once: a `histogram!` or a labelled
/// `counter!` builds its key and finds it in the recorder's registry at every use (~4,400
/// instructions a commit, issue 52). Made with the writer, so after the binary installed its
/// recorder (a handle made before would stay a no-op); an event kind's counter on its first
/// commit.
pub(crate) struct CommitMetrics {
    commit: Histogram,
    statement: Histogram,
    batch: Histogram,
    events: Vec<(EventKind, Counter)>,
}

impl CommitMetrics {
    pub fn new() -> CommitMetrics {
        CommitMetrics {
            commit: metrics::histogram!(COMMIT_SECONDS),
            statement: metrics::histogram!(COMMIT_STATEMENT_SECONDS),
            batch: metrics::histogram!(BATCH_SIZE),
            events: Vec::new(),
        }
    }

    /// A commit succeeded: its requests, the events it made durable and how long it took.
    pub fn committed(
        &mut self,
        requests: usize,
        events: &[EventKind],
        took: Duration,
        commit_statement: Duration,
    ) {
        self.commit.record(took.as_secs_f64());
        self.statement.record(commit_statement.as_secs_f64());
        self.batch.record(requests as f64);
        for &kind in events {
            let at = match self.events.iter().position(|(k, _)| *k == kind) {
                Some(at) => at,
                None => {
                    let counter = metrics::counter!(EVENTS, "event" => kind.name());
                    self.events.push((kind, counter));
                    self.events.len() - 1
                }
            };
            self.events[at].1.increment(1);
        }
    }
}

pub(crate) fn commit_failed(fault: crate::StorageFault) {
    metrics::counter!(COMMIT_FAILURES, "fault" => fault.label()).increment(1);
}
