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

use postern_core::lifecycle::{Resolution, State, Verdict};
use postern_core::{EventKind, Timestamp};
use postern_ledger::{CallRecord, ExecutionSummary, ExecutionView, Run};
use serde::Serialize;
use serde_json::Value;

mod gather;
mod processes;
mod separate;
pub use gather::{investigate, Investigation, RecordSource, RELATED};
pub use separate::{side_by_side, why_separate, SideBySide};

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

/// 2. Authorized (by whom) and dispatched (when, how often).
fn authorized(view: &ExecutionView) -> Answer {
    let mut evidence = Vec::new();
    let mut sentences = Vec::new();
    let mut dispatches = Vec::new();
    for e in &view.events {
        let b = &e.body;
        let d = &b.detail;
        match b.event {
            EventKind::ApprovalRequested => {
                sentences.push(format!("An approval was requested at {}.", b.at));
                evidence.push(event_evidence(view, b.n, "approval_requested".into(), b.at));
            }
            EventKind::Authorized => {
                let by = text(d, "approved_by")
                    .map(|op| format!("approved by operator {op}"))
                    .or_else(|| {
                        text(d, "run_authorized_by")
                            .map(|op| format!("its run authorized by operator {op}"))
                    })
                    .unwrap_or_else(|| {
                        "by policy (the tool's contract asks no approval)".to_string()
                    });
                sentences.push(format!("Authorized {by} at {}.", b.at));
                evidence.push(event_evidence(view, b.n, format!("authorized: {by}"), b.at));
            }
            EventKind::Denied => {
                let by = text(d, "denied_by").unwrap_or_else(|| "policy".into());
                let why = text(d, "reason")
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                sentences.push(format!("Denied by {by} at {}{why}.", b.at));
                evidence.push(event_evidence(view, b.n, format!("denied by {by}"), b.at));
            }
            EventKind::Rejected | EventKind::Cancelled => {
                let why = text(d, "reason")
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                sentences.push(format!(
                    "{} at {} before dispatch{why}.",
                    b.event.name(),
                    b.at
                ));
                evidence.push(event_evidence(view, b.n, b.event.name().into(), b.at));
            }
            EventKind::Dispatched => {
                dispatches.push(b.at);
                evidence.push(event_evidence(view, b.n, "dispatched".into(), b.at));
            }
            _ => {}
        }
    }
    match dispatches.as_slice() {
        [] => sentences.push("It was never dispatched: nothing was sent to the target.".into()),
        [one] => sentences.push(format!("Dispatched once, at {one}.")),
        many => sentences.push(format!(
            "Dispatched {} times ({}): recovery sent the same execution again, with the same execution id as its idempotency key (or marker), never as a new action.",
            many.len(),
            many.iter().map(Timestamp::to_string).collect::<Vec<_>>().join(", ")
        )),
    }
    Answer {
        question: QUESTIONS[1],
        answer: sentences.join(" "),
        evidence,
    }
}

/// 3. The target's answer: status and time, or why the outcome is unknown.
fn target_answer(view: &ExecutionView) -> Answer {
    let mut evidence = Vec::new();
    let mut sentences = Vec::new();
    let dispatched = view
        .events
        .iter()
        .any(|e| e.body.event == EventKind::Dispatched);
    for e in &view.events {
        let b = &e.body;
        let d = &b.detail;
        let status = d
            .get("target_status")
            .and_then(Value::as_u64)
            .map(|s| format!(" status {s}"))
            .unwrap_or_default();
        let via = text(d, "via")
            .map(|v| format!(", learnt by {v}"))
            .unwrap_or_default();
        let sentence = match b.event {
            EventKind::Completed(Verdict::Applied) => {
                format!("The target answered{status} at {}{via}: applied.", b.at)
            }
            EventKind::Completed(Verdict::Rejected) => format!(
                "The target answered{status} at {}{via}: rejected, nothing applied.",
                b.at
            ),
            EventKind::Failed => format!(
                "The request failed at {} without reaching the target{}.",
                b.at,
                text(d, "reason").map(|r| format!(" ({r})")).unwrap_or_default()
            ),
            EventKind::OutcomeUnknown => format!(
                "At {} the outcome became unknown{}{status}: the gateway cannot tell whether the target applied it.",
                b.at,
                text(d, "reason").map(|r| format!(" ({r})")).unwrap_or_default()
            ),
            EventKind::ReviewRequired => format!("At {} it was sent to an operator's review.", b.at),
            EventKind::Resolved(r) => format!(
                "At {} operator {} resolved it: {}{}.",
                b.at,
                text(d, "resolved_by").unwrap_or_else(|| "?".into()),
                match r {
                    Resolution::Applied => "applied",
                    Resolution::NotApplied => "not applied",
                },
                text(d, "reason")
                    .map(|r| format!(" (\"{r}\")"))
                    .unwrap_or_default()
            ),
            _ => continue,
        };
        evidence.push(event_evidence(view, b.n, b.event.name().into(), b.at));
        sentences.push(sentence);
    }
    if sentences.is_empty() {
        sentences.push(if dispatched {
            "Not yet: it was dispatched and no answer is recorded (still in flight).".into()
        } else {
            "The target was never asked.".into()
        });
    }
    Answer {
        question: QUESTIONS[2],
        answer: sentences.join(" "),
        evidence,
    }
}

/// 4. Deliveries and lost deliveries after completion.
fn delivery(view: &ExecutionView) -> Answer {
    let mut evidence = Vec::new();
    let completed = view.events.iter().find(|e| {
        matches!(
            e.body.event,
            EventKind::Completed(_) | EventKind::Resolved(_)
        )
    });
    let (mut lost, mut delivered) = (Vec::new(), Vec::new());
    for e in &view.events {
        let b = &e.body;
        match b.event {
            EventKind::DeliveryFailed => {
                lost.push(b.at);
                evidence.push(event_evidence(view, b.n, "delivery_failed".into(), b.at));
            }
            EventKind::Delivered => {
                delivered.push(b.at);
                evidence.push(event_evidence(view, b.n, "delivered".into(), b.at));
            }
            _ => {}
        }
    }
    // The first delivery after the first loss: the answer that did arrive after it was lost.
    let delivered_after = lost
        .first()
        .and_then(|l| delivered.iter().find(|d| *d >= l))
        .or(delivered.first());
    let answer = match (completed, lost.first(), delivered_after) {
        (None, _, _) => format!(
            "No: there was no completed answer to lose (the execution is {}).",
            view.summary.lifecycle.state.name()
        ),
        (Some(c), Some(l), Some(d)) if d < l => format!(
            "Yes: the target completed at {} and an answer was lost on its way to an agent at {l}, after it had been delivered at {d} (to another call); it has not been delivered since.",
            c.body.at
        ),
        (Some(c), Some(l), Some(d)) => format!(
            "Yes: the target completed at {} and the answer was lost on its way to the agent at {l} ({} lost deliver{}); it was delivered later, at {d}.",
            c.body.at,
            lost.len(),
            if lost.len() == 1 { "y" } else { "ies" }
        ),
        (Some(c), Some(l), None) => format!(
            "Yes: the target completed at {} and the answer was lost on its way to the agent at {l}; it has not been delivered since.",
            c.body.at
        ),
        (Some(_), None, Some(d)) => format!("No: the answer was delivered at {d}."),
        (Some(c), None, None) => match view.summary.lifecycle.state {
            State::Resolved(_) => format!(
                "Not applicable: an operator resolved it at {}; the agent reads the resolution with execution_status.",
                c.body.at
            ),
            _ => format!(
                "Not known: the target completed at {} and no delivery is recorded (a task or status read that has not been polled yet).",
                c.body.at
            ),
        },
    };
    Answer {
        question: QUESTIONS[3],
        answer,
        evidence,
    }
}

/// Question 5: every call that touched the execution, with its attempt kind; and the other
/// executions of the same intent or key, with why they are separate.
fn later_calls(input: &TraceInput<'_>) -> Answer {
    let s = &input.view.summary;
    let mut evidence: Vec<Evidence> = input.calls.iter().map(call_evidence).collect();
    let mut sentences = Vec::new();
    let created = input
        .calls
        .iter()
        .filter(|c| c.attempt == "new" && !is_status_read(c))
        .count();
    let later: Vec<(usize, &CallRecord)> = input
        .calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.attempt != "new" || is_status_read(c))
        .collect();
    if input.calls.is_empty() {
        sentences.push("No call is recorded in the calls log for this execution (its calls predate the log, or the gateway stopped before recording them).".to_string());
    } else if later.is_empty() {
        sentences.push(format!(
            "No later call reached it: {} call(s), the one that created it.",
            input.calls.len()
        ));
    } else {
        if created == 1 {
            sentences.push("One call created it.".into());
        }
        for (i, c) in later {
            let who = format!(
                "A call at {} (run {}, JSON-RPC id {}{})",
                c.at,
                c.run_id.as_deref().unwrap_or("none"),
                c.request_id.as_deref().unwrap_or("?"),
                c.operation_key
                    .as_ref()
                    .map(|k| format!(", operation key {k}"))
                    .unwrap_or_default()
            );
            let since = i
                .checked_sub(1)
                .map(|p| input.calls[p].at)
                .unwrap_or(Timestamp(i64::MIN));
            let how = if is_status_read(c) {
                format!(
                    "read its record with {STATUS_TOOL} (told {}): nothing was sent",
                    told(&c.outcome)
                )
            } else {
                match c.attempt.as_str() {
                    "attached" => format!("reused this execution while it was in progress (attached), nothing new was sent for it; it was told {}", told(&c.outcome)),
                    "recovered" => recovered(input.view, since, c, &mut evidence),
                    "refused" => format!("was refused ({}) and changed nothing", c.outcome),
                    other => format!("reached it as {other}"),
                }
            };
            sentences.push(format!("{who} {how}."));
        }
    }
    for other in input.related.iter().filter(|e| e.id != s.id) {
        let why = why_separate(s, other);
        sentences.push(format!(
            "Execution {} ({}, accepted {}) is a separate attempt: {why}.",
            other.id,
            other.lifecycle.state.name(),
            other.accepted_at
        ));
        evidence.push(Evidence {
            what: format!("separate execution: {why}"),
            at: at(other.accepted_at),
            execution_id: Some(other.id.to_string()),
            run_id: other.run_id.clone(),
            operation_key: other.operation_key.clone(),
            fingerprint: Some(other.fingerprint.to_string()),
            ..Evidence::default()
        });
    }
    Answer {
        question: QUESTIONS[4],
        answer: sentences.join(" "),
        evidence,
    }
}

/// What a call matched to the execution from its record (`recovered`) came to: the recovery
/// steps the lifecycle records after the call before it (`since`) and up to this call's
/// answer — a status query that settled an unknown outcome, a re-dispatch with the same key,
/// a review — or, with none, the record alone.
fn recovered(
    view: &ExecutionView,
    since: Timestamp,
    c: &CallRecord,
    evidence: &mut Vec<Evidence>,
) -> String {
    let mut steps = Vec::new();
    let first_dispatch = view
        .events
        .iter()
        .find(|e| e.body.event == EventKind::Dispatched)
        .map(|e| e.body.n);
    for e in view
        .events
        .iter()
        .filter(|e| e.body.at > since && e.body.at <= c.at)
    {
        let b = &e.body;
        let step = match b.event {
            EventKind::Dispatched if Some(b.n) != first_dispatch => {
                "recovery re-sent the SAME execution, with the same idempotency key".to_string()
            }
            EventKind::Completed(v) => match text(&b.detail, "via") {
                Some(via) => format!(
                    "recovery settled the unknown outcome by asking the target ({via}): {}",
                    match v {
                        Verdict::Applied => "it had applied it",
                        Verdict::Rejected => "it had not applied it",
                    }
                ),
                None => continue,
            },
            EventKind::OutcomeUnknown => "the outcome stayed unknown".to_string(),
            EventKind::ReviewRequired => {
                "the outcome being unknown, the tool's class sent it to an operator's review instead of sending it again".to_string()
            }
            _ => continue,
        };
        evidence.push(event_evidence(
            view,
            b.n,
            format!("during the call at {}: {step}", c.at),
            b.at,
        ));
        steps.push(format!("{step} (event {})", b.n));
    }
    if steps.is_empty() {
        format!(
            "reused this execution and was answered from its record (recovered), nothing was sent for it; it was told {}",
            told(&c.outcome)
        )
    } else {
        format!(
            "reused this execution (recovered): {}; it was told {}",
            steps.join(", then "),
            told(&c.outcome)
        )
    }
}
