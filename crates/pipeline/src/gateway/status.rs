//! The running gateway at a glance ([`Status`]: `GET /ops/status`, `postern status`, the
//! gauges of `/metrics`), and one execution's record for its agent (`execution_status`).

use crate::telemetry::{CheckpointView, Status, UpstreamHealth};

use postern_core::contract::EXECUTION_STATUS;
use postern_core::ExecutionId;
use serde_json::{json, Value};

use super::{asked, now, Gateway, ToolCall};
use crate::error::GatewayError;
use crate::report::{Attempt, CallReport};

impl Gateway {
    /// Reads the store's waiting executions and the process's own state; a store that cannot
    /// be read is said in `store_state`, never an error (the rest is still worth seeing).
    pub async fn status(&self) -> Status {
        let at = now();
        let started = std::time::Instant::now();
        let (store_state, health) = match self.ledger().read().health(at).await {
            Ok(h) => ("ok".to_string(), h),
            Err(e) => (e.to_string(), Default::default()),
        };
        let age = |t: postern_core::Timestamp| (at.0 - t.0).max(0) as f64 / 1000.0;
        Status {
            instance: self.ledger().instance().to_string(),
            store: match self.ledger().dialect() {
                postern_ledger::Dialect::Sqlite => "sqlite",
                postern_ledger::Dialect::Postgres => "postgres",
            },
            store_state,
            store_read_seconds: started.elapsed().as_secs_f64(),
            ledger_queue: self.ledger().queue_depth(),
            upstreams: self
                .upstream_tools
                .upstream_views()
                .into_iter()
                .map(|u| UpstreamHealth {
                    up: u.down.is_none(),
                    why: u.down,
                    pid: u.pid,
                    withheld_tools: u.tools.iter().filter(|t| t.state == "withheld").count(),
                    name: u.name,
                })
                .collect(),
            vault: match self.vault() {
                None => "none",
                Some(v) if v.is_locked() => "locked",
                Some(_) => "unlocked",
            },
            approvals_pending: health.awaiting_approval,
            oldest_approval_age_seconds: health.oldest_approval_since.map(age),
            reviews_pending: health.needs_review,
            outcome_unknown: health.outcome_unknown,
            outcome_unknown_last_hour: health.unknown_last_hour,
            dispatched: health.dispatched,
            runs_open: self.runs.open_count(),
            last_checkpoint: health.last_checkpoint.map(|c| CheckpointView {
                age_seconds: age(c.at),
                at: c.at.to_string(),
                seq: c.seq,
                chain: c.chain,
            }),
            signing_refused: self.ledger().signing_refused(),
        }
    }
}

impl Gateway {
    /// The built-in read-only tool: the record of an execution the actor owns.
    pub(super) async fn execution_status(
        &self,
        call: &ToolCall,
    ) -> Result<CallReport, GatewayError> {
        let raw = call
            .arguments
            .get("execution_id")
            .and_then(Value::as_str)
            .ok_or_else(|| GatewayError::InvalidArguments {
                tool: EXECUTION_STATUS.into(),
                errors: vec!["execution_id (a string) is required".into()],
            })?;
        let id: ExecutionId = raw
            .parse()
            .map_err(|_| GatewayError::UnknownExecution(raw.chars().take(64).collect()))?;
        let view = self.ledger.read().execution(id).await?;
        let Some(view) = view.filter(|v| v.summary.actor == call.actor) else {
            // Another actor's execution is indistinguishable from a missing one.
            return Err(GatewayError::UnknownExecution(
                raw.chars().take(64).collect(),
            ));
        };
        let mut r = self.stored_report(id, Attempt::Recovered).await?;
        if view.summary.run_id != call.run_id && asked::asked_client(&view) {
            r.response = None;
            r.next_step = Some(asked::withheld_step(id));
        }
        let events: Vec<Value> = view
            .events
            .iter()
            .map(|e| json!({"event": e.body.event.name(), "at": e.body.at.to_string(), "detail": e.body.detail}))
            .collect();
        r.response =
            Some(json!({"record": view.record, "events": events, "target_response": r.response}));
        r.attempt = Attempt::Recovered;
        Ok(r)
    }
}
