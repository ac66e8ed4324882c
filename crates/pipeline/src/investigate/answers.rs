//! Questions 2 to 5 of an incident, each answered from the record with its evidence: was it
//! authorized and dispatched, did the target answer, was the answer lost after completion, and
//! what did the later calls do.

use postern_core::lifecycle::{Resolution, State, Verdict};
use postern_core::{EventKind, Timestamp};
use postern_ledger::{CallRecord, ExecutionView};
use serde_json::Value;

use super::separate::why_separate;
use super::{
    at, call_evidence, event_evidence, is_status_read, text, told, Answer, Evidence, TraceInput,
    QUESTIONS, STATUS_TOOL,
};

/// 2. Authorized (by whom) and dispatched (when, how often).
pub(super) fn authorized(view: &ExecutionView) -> Answer {
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
pub(super) fn target_answer(view: &ExecutionView) -> Answer {
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
pub(super) fn delivery(view: &ExecutionView) -> Answer {
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
pub(super) fn later_calls(input: &TraceInput<'_>) -> Answer {
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
