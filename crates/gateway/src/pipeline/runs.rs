//! The Sessions log's life cycle of a run, and the calls log: a run is recorded when this
//! process first sees it, ended when its client closes the session (`DELETE`), when its
//! transport ends (stdio), when no call came for `[gateway] session_idle`, or when the
//! gateway stops gracefully. Every `tools/call` is recorded as answered (who asked, which
//! execution it reached and how), beside the lifecycle events, in the next commit.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_core::ExecutionId;
use postern_ledger::{CallRecord, LedgerError, Run, RunEnd};

use super::{now, Gateway, ToolCall};
use crate::error::GatewayError;
use crate::report::CallReport;

/// Runs this process has recorded and not seen end. Bounded: past the bound it is cleared
/// (a run forgotten here is recorded again on its next call, which the ledger ignores).
#[derive(Default)]
pub(super) struct OpenRuns(Mutex<HashSet<String>>);

const REMEMBERED: usize = 10_000;

impl OpenRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who asked, kept from the call for its row in the calls log.
pub(super) struct Asker {
    actor: String,
    tool: String,
    run_id: Option<String>,
    request_id: Option<String>,
    operation_key: Option<String>,
}

impl Asker {
    pub(super) fn of(call: &ToolCall) -> Asker {
        Asker {
            actor: call.actor.clone(),
            tool: call.tool.clone(),
            run_id: call.run_id.clone(),
            request_id: call.request_id.clone(),
            operation_key: call.operation_key.clone(),
        }
    }
}

impl Gateway {
    /// The run of this process's stdio client: `stdio:<pid>-<start, unix ms>`. The pid alone
    /// would name two processes one run once the system reuses it (and then a later stdio
    /// client would be recorded into, or resume, an earlier one's run).
    pub fn stdio_run_id() -> &'static str {
        static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        ID.get_or_init(|| format!("stdio:{}-{}", std::process::id(), now().0))
    }

    /// Records `run` the first time this process sees it (and resumes it, if it ended only
    /// because it idled or a gateway stopped). Returns whether it was new here.
    pub async fn open_run(&self, run: Run) -> bool {
        let first = {
            let mut open = self.open_runs.lock();
            if open.len() >= REMEMBERED {
                open.clear();
            }
            open.insert(run.id.clone())
        };
        if first {
            if let Err(e) = self.ledger.start_run(run).await {
                tracing::warn!(error = %e, "a run could not be recorded in the Sessions log");
            }
        }
        first
    }

    /// Whether this process has recorded `run_id` and not seen it end.
    pub fn is_open_run(&self, run_id: &str) -> bool {
        self.open_runs.lock().contains(run_id)
    }

    /// Records how a run ended (the first end recorded stays).
    pub async fn end_run(&self, run_id: &str, how: RunEnd) -> Result<(), LedgerError> {
        self.open_runs.lock().remove(run_id);
        self.ledger.end_run(run_id, now(), how).await
    }

    /// Ends every run this process still has open as `gateway_stopped` (a graceful stop).
    pub async fn end_open_runs(&self) {
        let open: Vec<String> = self.open_runs.lock().drain().collect();
        for id in open {
            if let Err(e) = self
                .ledger
                .end_run(&id, now(), RunEnd::GatewayStopped)
                .await
            {
                tracing::warn!(run = %id, error = %e, "a run's end could not be recorded");
            }
        }
    }

    /// Starts the pass that ends runs idle past `[gateway] session_idle`, whichever replica
    /// served them: every quarter of it, between 1 s and 1 min.
    pub fn keep_run_expiry(self: &Arc<Self>) {
        let gateway = self.clone();
        let idle = gateway.config.gateway.session_idle;
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let at = now();
                let before = postern_core::Timestamp(at.0 - idle.as_millis() as i64);
                match gateway.ledger.expire_runs(before, at).await {
                    Ok(ended) => {
                        let mut open = gateway.open_runs.lock();
                        for id in &ended {
                            open.remove(id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?every, "the idle-run pass failed")
                    }
                }
            }
        });
    }

    /// Records a call as answered: nothing waits for the row.
    pub(super) fn record_answer(&self, asker: Asker, answer: Result<&CallReport, &GatewayError>) {
        match answer {
            Ok(r) => self.record_call(
                asker,
                Some(r.execution_id),
                r.attempt.as_str(),
                r.state.display_name(),
            ),
            Err(e) => self.record_call(asker, e.execution(), "refused", e.kind()),
        }
    }

    /// Records a call that reached `execution_id` (or none) this way, with this outcome.
    pub(super) fn record_call(
        &self,
        asker: Asker,
        execution_id: Option<ExecutionId>,
        attempt: &str,
        outcome: &str,
    ) {
        let (attempt, outcome) = (attempt.to_string(), outcome.to_string());
        self.ledger.record_call(CallRecord {
            at: now(),
            actor: asker.actor,
            tool: asker.tool,
            run_id: asker.run_id,
            request_id: asker.request_id,
            execution_id,
            attempt,
            operation_key: asker.operation_key,
            outcome,
            instance: self.ledger.instance().to_string(),
        });
    }
}
