//! The Sessions log's life cycle of a run, and the calls log: a run is recorded when this
//! process first sees it, ended when its client closes the session (`DELETE`), when its
//! transport ends (stdio), when no call came for `[gateway] session_idle`, or when the
//! gateway stops gracefully. Every `tools/call` is recorded as answered (who asked, which
//! execution it reached and how), beside the lifecycle events, in the next commit.
//!
//! This process remembers the runs it recorded for half of `session_idle` only, then records
//! the run again on its next call (which marks it seen, and resumes it if another replica's
//! idle pass or stop ended it meanwhile): so a run served here is never left ended while its
//! calls go on, and the idle pass never ends a run whose call is still in flight (a call
//! longer than half of `session_idle` excepted).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postern_core::ExecutionId;
use postern_ledger::{CallRecord, LedgerError, Run, RunEnd};

use postern_core::config::SessionApproval;
use postern_ledger::Ledger;
use serde::Serialize;
use serde_json::json;

use super::{now, ToolCall};
use crate::error::GatewayError;
use crate::gateway::DecisionError;
use crate::registry::Registry;
use crate::report::CallReport;

/// Runs this process has recorded and not seen end, with when it last recorded each. Bounded:
/// past the bound it is cleared (a run forgotten here is recorded again on its next call,
/// which only marks it seen).
#[derive(Default)]
struct OpenRuns(Mutex<HashMap<String, Instant>>);

const REMEMBERED: usize = 10_000;

impl OpenRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who asked, kept from the call for its row in the calls log.
pub(super) struct Asker {
    actor: String,
    tool: String,
    /// The tool's class as a metrics label (looked up once per call).
    pub(super) class: &'static str,
    run_id: Option<String>,
    request_id: Option<String>,
    operation_key: Option<String>,
}

impl Asker {
    pub(super) fn of(call: &ToolCall, class: &'static str) -> Asker {
        Asker {
            actor: call.actor.clone(),
            tool: call.tool.clone(),
            class,
            run_id: call.run_id.clone(),
            request_id: call.request_id.clone(),
            operation_key: call.operation_key.clone(),
        }
    }
}

/// A run as an operator sees it.
#[derive(Clone, Debug, Serialize)]
pub struct RunView {
    pub run_id: String,
    pub actor: String,
    pub client: Option<String>,
    pub client_version: Option<String>,
    /// The address the client connected from (behind a trusted proxy, the one it named).
    pub client_address: Option<String>,
    /// Whom the agent acted for (an issuer's access token): `{issuer, subject, client_id}`.
    pub principal: Option<serde_json::Value>,
    pub protocol_version: Option<String>,
    pub transport: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// How it ended: `closed`, `transport_closed`, `idle_expired`, `gateway_stopped`.
    pub end_reason: Option<&'static str>,
    /// Whether the run's actor must be authorized per run.
    pub requires_authorization: bool,
    /// `pending`, `authorized` or `revoked`.
    pub authorization: &'static str,
    pub authorized_by: Option<String>,
    pub authorized_at: Option<String>,
    pub revoked_by: Option<String>,
    pub revoked_at: Option<String>,
}

/// A call of the calls log as the operator API and the CLI show it.
pub fn call_json(c: &postern_ledger::CallRecord) -> serde_json::Value {
    json!({
        "at": c.at.to_string(),
        "actor": c.actor,
        "tool": c.tool,
        "run_id": c.run_id,
        "request_id": c.request_id,
        "execution_id": c.execution_id.map(|id| id.to_string()),
        "attempt": c.attempt,
        "operation_key": c.operation_key,
        // What the answer told the agent (see `investigate::told`).
        "outcome": crate::investigate::told(&c.outcome),
        "instance": c.instance,
    })
}

/// The runs this process serves and the calls log: its own state (the runs it remembers),
/// the ledger it records them in. Reached through [`super::Gateway::runs`].
pub struct Runs {
    ledger: Arc<Ledger>,
    /// Which actors need their runs authorized.
    config: Arc<postern_core::config::Config>,
    open: OpenRuns,
    /// `[gateway] session_idle`.
    session_idle: Duration,
}

/// Who asked, with the tool's class as a metrics label: a configured tool's, the built-in
/// status read's, or `none` for a name the agent made up (counted as tool `(unknown)`, never a
/// label of its choosing).
pub(super) fn asker(registry: &Registry, call: &ToolCall) -> Asker {
    let class = match registry.get(&call.tool) {
        Some(entry) => entry.contract.class.as_str(),
        None if call.tool == postern_core::contract::EXECUTION_STATUS => "status_read",
        None => "none",
    };
    Asker::of(call, class)
}

impl Runs {
    pub(super) fn new(ledger: Arc<Ledger>, config: Arc<postern_core::config::Config>) -> Runs {
        Runs {
            session_idle: config.gateway.session_idle,
            config,
            ledger,
            open: OpenRuns::default(),
        }
    }

    /// The run of this process's stdio client: `stdio:<pid>-<start, unix ms>`. The pid alone
    /// would name two processes one run once the system reuses it (and then a later stdio
    /// client would be recorded into, or resume, an earlier one's run).
    pub fn stdio_run_id() -> &'static str {
        static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        ID.get_or_init(|| format!("stdio:{}-{}", std::process::id(), now().0))
    }

    /// How long this process trusts its memory that a run is recorded and open.
    fn memory(&self) -> Duration {
        self.session_idle / 2
    }

    /// Records `run` the first time this process sees it, or once its memory of it has aged
    /// (marking it seen, and resuming it if it ended only because it idled or a gateway
    /// stopped). Returns whether it was recorded now.
    pub async fn open(&self, run: Run) -> bool {
        let memory = self.memory();
        let first = {
            let mut open = self.open.lock();
            if open.len() >= REMEMBERED {
                open.clear();
            }
            let now = Instant::now();
            match open.insert(run.id.clone(), now) {
                Some(since) => now.duration_since(since) >= memory,
                None => true,
            }
        };
        if first {
            if let Err(e) = self.ledger.start_run(run).await {
                tracing::warn!(error = %e, "a run could not be recorded in the Sessions log");
            }
        }
        first
    }

    /// How many runs this process serves (recorded and not seen end).
    pub fn open_count(&self) -> usize {
        self.open.lock().len()
    }

    /// Whether this process has recorded `run_id`, not seen it end, and recorded it recently
    /// enough to skip recording it again (see the module's doc).
    pub fn is_open(&self, run_id: &str) -> bool {
        let memory = self.memory();
        self.open
            .lock()
            .get(run_id)
            .is_some_and(|since| since.elapsed() < memory)
    }

    /// Records how a run ended (the first end recorded stays).
    pub async fn end(&self, run_id: &str, how: RunEnd) -> Result<(), LedgerError> {
        self.open.lock().remove(run_id);
        self.ledger.end_run(run_id, now(), how).await
    }

    /// Ends every run this process still has open as `gateway_stopped` (a graceful stop).
    pub async fn end_open(&self) {
        let open: Vec<String> = self.open.lock().drain().map(|(id, _)| id).collect();
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
    pub fn keep_expiry(self: &Arc<Self>) {
        let runs = self.clone();
        let idle = runs.session_idle;
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let at = now();
                let before = postern_core::Timestamp(at.0 - idle.as_millis() as i64);
                match runs.ledger.expire_runs(before, at).await {
                    Ok(ended) => {
                        let mut open = runs.open.lock();
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
            Err(e) => {
                // The kind only: a schema error's words can quote an argument, a secret one too.
                tracing::info!(kind = e.kind(), tool = ?asker.tool, actor = %asker.actor, "call refused");
                self.record_call(asker, e.execution(), "refused", e.kind())
            }
        }
    }

    /// Records a call that reached `execution_id` (or none) this way, with this outcome.
    pub(super) fn record_call(
        &self,
        asker: Asker,
        execution_id: Option<ExecutionId>,
        attempt: &'static str,
        outcome: &'static str,
    ) {
        // A tool name that is not configured is the agent's string: never a label.
        let (tool, class) = match asker.class {
            "none" => ("(unknown)", "none"),
            class => (asker.tool.as_str(), class),
        };
        crate::telemetry::count_call(tool, class, attempt, outcome);
        tracing::debug!(tool, class, attempt, outcome, execution_id = ?execution_id.map(|id| id.to_string()), run = ?asker.run_id, "call answered");
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

    /// Records a read passed through to an upstream (a resource, a prompt) in the calls log:
    /// who read what and when; never an execution.
    pub fn record_read(
        &self,
        actor: &str,
        run_id: Option<String>,
        request_id: Option<String>,
        what: String,
        outcome: &'static str,
    ) {
        crate::telemetry::count_read(outcome);
        self.ledger.record_call(CallRecord {
            at: now(),
            actor: actor.to_string(),
            tool: what,
            run_id,
            request_id,
            execution_id: None,
            attempt: "read".into(),
            operation_key: None,
            outcome: outcome.into(),
            instance: self.ledger.instance().to_string(),
        });
    }

    /// The Sessions log, newest first.
    pub async fn views(&self, limit: u32) -> Result<Vec<RunView>, GatewayError> {
        Ok(self
            .ledger
            .read()
            .runs(limit)
            .await?
            .iter()
            .map(|r| self.view(r))
            .collect())
    }

    /// One run with its calls (oldest first, at most `limit`).
    pub async fn with_calls(
        &self,
        run_id: &str,
        limit: u32,
    ) -> Result<serde_json::Value, GatewayError> {
        let view = self.view_of(run_id).await?;
        let calls = self.ledger.read().calls_in(run_id, limit).await?;
        let mut out = serde_json::to_value(&view).unwrap_or_default();
        out["calls"] = calls.iter().map(call_json).collect();
        Ok(out)
    }

    pub(super) async fn view_of(&self, run_id: &str) -> Result<RunView, GatewayError> {
        let run = self
            .ledger
            .read()
            .run(run_id)
            .await?
            .ok_or_else(|| DecisionError::UnknownRun(run_id.chars().take(200).collect()))?;
        Ok(self.view(&run))
    }

    fn view(&self, run: &Run) -> RunView {
        let requires_authorization = self
            .config
            .actor(&run.actor)
            .is_some_and(|a| a.session_approval == SessionApproval::Required);
        let authorization = match (&run.revoked, &run.authorized) {
            (Some(_), _) => "revoked",
            (None, Some(_)) => "authorized",
            (None, None) if requires_authorization => "pending",
            (None, None) => "not_required",
        };
        RunView {
            run_id: run.id.clone(),
            actor: run.actor.clone(),
            client: run.client_name.clone(),
            client_version: run.client_version.clone(),
            client_address: run.client_address.clone(),
            principal: run.principal.as_ref().map(
                |p| json!({"issuer": p.issuer, "subject": p.subject, "client_id": p.client_id}),
            ),
            protocol_version: run.protocol_version.clone(),
            transport: run.transport.clone(),
            started_at: run.started_at.to_string(),
            ended_at: run.ended_at.map(|t| t.to_string()),
            end_reason: run.end_reason.map(|e| e.as_str()),
            requires_authorization,
            authorization,
            authorized_by: run.authorized.as_ref().map(|a| a.0.clone()),
            authorized_at: run.authorized.as_ref().map(|a| a.1.to_string()),
            revoked_by: run.revoked.as_ref().map(|r| r.0.clone()),
            revoked_at: run.revoked.as_ref().map(|r| r.1.to_string()),
        }
    }
}
