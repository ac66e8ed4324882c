//! What a trace is built from, read from a store: the CLI reads a store file or database
//! directly ([`StoreReader`]), the console the running gateway's [`Ledger`] (through its own
//! reader, [`Ledger::read`]). One reading serves both, so the page and `activity trace` always
//! tell the same story.

use std::future::Future;

use postern_core::ExecutionId;
use postern_ledger::{
    CallRecord, ExecutionSummary, ExecutionView, Ledger, LedgerError, ListFilter, Run, StoreReader,
};

use super::{runs_to_read, trace, Trace, TraceInput};

/// How many executions of one intent or key a trace sets side by side.
pub const RELATED: u32 = 50;

/// The reads an investigation makes.
pub trait RecordSource: Sync {
    fn execution(
        &self,
        id: ExecutionId,
    ) -> impl Future<Output = Result<Option<ExecutionView>, LedgerError>> + Send;
    fn calls_of(
        &self,
        id: ExecutionId,
    ) -> impl Future<Output = Result<Vec<CallRecord>, LedgerError>> + Send;
    fn run(&self, id: &str) -> impl Future<Output = Result<Option<Run>, LedgerError>> + Send;
    fn list(
        &self,
        filter: &ListFilter,
    ) -> impl Future<Output = Result<Vec<ExecutionSummary>, LedgerError>> + Send;
}

macro_rules! record_source {
    ($t:ty, $reader:path) => {
        impl RecordSource for $t {
            fn execution(
                &self,
                id: ExecutionId,
            ) -> impl Future<Output = Result<Option<ExecutionView>, LedgerError>> + Send {
                StoreReader::execution($reader(self), id)
            }
            fn calls_of(
                &self,
                id: ExecutionId,
            ) -> impl Future<Output = Result<Vec<CallRecord>, LedgerError>> + Send {
                StoreReader::calls_of($reader(self), id)
            }
            fn run(
                &self,
                id: &str,
            ) -> impl Future<Output = Result<Option<Run>, LedgerError>> + Send {
                StoreReader::run($reader(self), id)
            }
            fn list(
                &self,
                filter: &ListFilter,
            ) -> impl Future<Output = Result<Vec<ExecutionSummary>, LedgerError>> + Send {
                StoreReader::list($reader(self), filter)
            }
        }
    };
}

// The ledger's reads are its reader's (`Ledger::read`).
record_source!(Ledger, Ledger::read);
record_source!(StoreReader, std::convert::identity);

/// One execution with everything its trace rests on, and the trace.
pub struct Investigation {
    pub view: ExecutionView,
    pub calls: Vec<CallRecord>,
    pub runs: Vec<Run>,
    pub related: Vec<ExecutionSummary>,
    pub trace: Trace,
}

/// Reads execution `id`'s investigation; `None`: no such execution in this store.
pub async fn investigate<S: RecordSource>(
    store: &S,
    id: ExecutionId,
) -> Result<Option<Investigation>, LedgerError> {
    let Some(view) = store.execution(id).await? else {
        return Ok(None);
    };
    let calls = store.calls_of(id).await?;
    let mut runs = Vec::new();
    for run in runs_to_read(&view, &calls) {
        runs.extend(store.run(&run).await?);
    }
    let s = &view.summary;
    let mut related = store
        .list(&ListFilter {
            actor: Some(s.actor.clone()),
            fingerprint: Some(s.fingerprint.to_string()),
            limit: RELATED,
            ..ListFilter::default()
        })
        .await?;
    if let Some(key) = &s.operation_key {
        let same_key = ListFilter {
            actor: Some(s.actor.clone()),
            operation_key: Some(key.clone()),
            limit: RELATED,
            ..ListFilter::default()
        };
        for e in store.list(&same_key).await? {
            if !related.iter().any(|r| r.id == e.id) {
                related.push(e);
            }
        }
    }
    let trace = trace(&TraceInput {
        view: &view,
        calls: &calls,
        runs: &runs,
        related: &related,
    });
    Ok(Some(Investigation {
        view,
        calls,
        runs,
        related,
        trace,
    }))
}
