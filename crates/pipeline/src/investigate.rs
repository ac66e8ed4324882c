//! `activity trace`: the five questions of an incident (seed 000, "investigate the sequence,
//! not the count"), answered in plain sentences from the record, each with its evidence.
//!
//! 1. One agent process or two?
//! 2. Authorized and dispatched?
//! 3. Did the target answer?
//! 4. Was the answer lost after completion?
//! 5. Did a later call reuse the execution, reuse the key, or create a new attempt?
//!
//! Only the record speaks here: the lifecycle events (what was sent and answered), the calls
//! log (who asked, and how each call related to the execution), the Sessions log (which agent
//! processes existed) and the other executions of the same intent. Nothing is inferred that
//! the record does not show, and where it cannot tell, the answer says so. One thing is read
//! from times: the recovery steps a `recovered` call took are the recovery events (a status
//! query's answer, a re-send, a review) recorded after the call before it was answered and up
//! to its own answer (the calls log is written as each call is answered).

use std::collections::BTreeSet;

use postern_core::Timestamp;
use postern_ledger::{CallRecord, ExecutionSummary, ExecutionView, Run};
use serde::Serialize;
use serde_json::Value;

mod answers;
mod gather;
mod processes;
mod separate;
pub use gather::{investigate, Investigation, RecordSource, RELATED};
pub use separate::{side_by_side, why_separate, SideBySide};

use answers::{authorized, delivery, later_calls, target_answer};
use processes::processes;

/// One fact an answer rests on.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Evidence {
    /// What the fact is, in words (`event 3 dispatched`, `call from run R`).
    pub what: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The lifecycle event's position (`n`), when the fact is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<u32>,
}

/// One question, its answer in a sentence or two, and the facts behind it.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    pub question: &'static str,
    pub answer: String,
    pub evidence: Vec<Evidence>,
}

/// The five answers for one execution.
#[derive(Clone, Debug, Serialize)]
pub struct Trace {
    pub execution_id: String,
    pub tool: String,
    pub actor: String,
    /// Whom the agent acted for, when its run authenticated with an issuer's access token:
    /// "SUBJECT of ISSUER (client ID)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acting_for: Option<String>,
    pub state: String,
    pub fingerprint: String,
    pub answers: Vec<Answer>,
}

/// What a trace is built from: the execution, the calls that reached it, the runs those calls
/// (and the execution) came from, and the other executions of the same intent (same actor and
/// fingerprint) or the same operation key.
pub struct TraceInput<'a> {
    pub view: &'a ExecutionView,
    pub calls: &'a [CallRecord],
    pub runs: &'a [Run],
    pub related: &'a [ExecutionSummary],
}

pub const QUESTIONS: [&str; 5] = [
    "One agent process or two?",
    "Was it authorized and dispatched?",
    "Did the target answer?",
    "Was the answer lost after completion?",
    "Did a later call reuse the execution, reuse the key, or create a new attempt?",
];

/// The runs whose calls a trace must show: the execution's own and every caller's.
pub fn runs_to_read(view: &ExecutionView, calls: &[CallRecord]) -> Vec<String> {
    let mut ids: BTreeSet<String> = calls.iter().filter_map(|c| c.run_id.clone()).collect();
    ids.extend(view.summary.run_id.clone());
    ids.into_iter().collect()
}

pub fn trace(input: &TraceInput<'_>) -> Trace {
    let s = &input.view.summary;
    Trace {
        execution_id: s.id.to_string(),
        tool: s.tool.clone(),
        actor: s.actor.clone(),
        acting_for: input
            .runs
            .iter()
            .find(|r| s.run_id.as_deref() == Some(r.id.as_str()))
            .and_then(|r| r.principal.as_ref())
            .map(|p| {
                format!(
                    "{} of {} (client {})",
                    p.subject,
                    p.issuer,
                    p.client_id.as_deref().unwrap_or("-")
                )
            }),
        state: s.lifecycle.state.name().to_string(),
        fingerprint: s.fingerprint.to_string(),
        answers: vec![
            processes(input),
            authorized(input.view),
            target_answer(input.view),
            delivery(input.view),
            later_calls(input),
        ],
    }
}

fn at(t: Timestamp) -> Option<String> {
    Some(t.to_string())
}

fn event_evidence(view: &ExecutionView, n: u32, what: String, t: Timestamp) -> Evidence {
    Evidence {
        what,
        at: at(t),
        execution_id: Some(view.summary.id.to_string()),
        event: Some(n),
        ..Evidence::default()
    }
}

/// The state a call's answer told the agent. The calls log records the execution's state as
/// the call was answered, before that answer's own delivery: `completed_result_not_delivered`
/// there is an answer that carried the result, which the agent read as `completed` (whether it
/// arrived is the lifecycle's `delivered` / `delivery_failed`, answer 4).
pub fn told(outcome: &str) -> &str {
    match outcome {
        "completed_result_not_delivered" => "completed",
        other => other,
    }
}

/// The built-in tool whose calls read an execution's record (and send nothing).
const STATUS_TOOL: &str = postern_core::contract::EXECUTION_STATUS;

fn is_status_read(c: &CallRecord) -> bool {
    c.tool == STATUS_TOOL
}

fn call_evidence(c: &CallRecord) -> Evidence {
    Evidence {
        what: format!("call of {} ({}): {}", c.tool, c.attempt, told(&c.outcome)),
        at: at(c.at),
        execution_id: c.execution_id.map(|id| id.to_string()),
        run_id: c.run_id.clone(),
        request_id: c.request_id.clone(),
        operation_key: c.operation_key.clone(),
        ..Evidence::default()
    }
}

fn text(detail: &Value, key: &str) -> Option<String> {
    detail.get(key).and_then(Value::as_str).map(str::to_string)
}
