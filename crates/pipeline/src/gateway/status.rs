//! The running gateway at a glance ([`Status`]: `GET /ops/status`, `postern status`, the
//! gauges of `/metrics`), and one execution's record for its agent (`execution_status`).

use postern_core::contract::EXECUTION_STATUS;
use postern_core::ExecutionId;
use serde_json::{json, Value};

use super::{asked, Gateway, ToolCall};
use crate::error::GatewayError;
use crate::report::{Attempt, CallReport};

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
        let mut r = self.records.stored_report(id, Attempt::Recovered).await?;
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
