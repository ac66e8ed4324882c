//! Why two executions of one intent (or one key) are separate, from the record's own facts:
//! `activity trace`'s answer 5 and the side-by-side view of `--fingerprint` / `--key`.

use postern_core::lifecycle::{State, Verdict};
use postern_core::Timestamp;
use postern_ledger::ExecutionSummary;
use serde::Serialize;

/// Why `other` did not match `this` (both recorded; the record's own facts only).
pub fn why_separate(this: &ExecutionSummary, other: &ExecutionSummary) -> String {
    let (first, second) = if other.id > this.id {
        (this, other)
    } else {
        (other, this)
    };
    if first.fingerprint != second.fingerprint {
        return "its arguments differ (another fingerprint), so it is another intent".into();
    }
    if first.intent_scope != second.intent_scope {
        return format!(
            "its intent scope differs ({} vs {})",
            first.intent_scope, second.intent_scope
        );
    }
    if first.class.is_read_only() {
        return "a read_only tool: every call is a new execution (a read is never answered from an earlier one)".into();
    }
    let after = gap(first.accepted_at, second.accepted_at);
    match (&first.operation_key, &second.operation_key) {
        (a, Some(b)) if a.as_ref() != Some(b) => {
            return format!(
                "the later call carried a new operation key ({b}), which asks for a new action"
            )
        }
        (Some(a), Some(_)) => {
            return format!(
                "the same operation key ({a}), {after} later: past the key's retention, so a new action"
            )
        }
        _ => {}
    }
    // Final states: what the earlier one was then, it still is.
    match first.lifecycle.state {
        State::Failed | State::Rejected | State::Cancelled => {
            return format!(
                "the earlier one was {}: nothing was performed, so the later call was a new action",
                first.lifecycle.state.name()
            )
        }
        State::Completed(Verdict::Rejected) | State::Delivered(Verdict::Rejected)
            if first.rejection_retryable =>
        {
            return "the target had answered the earlier one that nothing was applied and to try again (a retryable rejection), so the later call was a new action".into();
        }
        _ => {}
    }
    format!(
        "the same intent arrived {after} after the first, outside the tool's match window (keys, scope and the earlier outcome do not explain it otherwise), so the gateway treated it as a new action"
    )
}

fn gap(a: Timestamp, b: Timestamp) -> String {
    let ms = (b.0 - a.0).max(0);
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=119_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{:.1} min", ms as f64 / 60_000.0),
    }
}

/// The executions `trace --fingerprint` / `--key` sets side by side, oldest first, each with
/// why it did not match the one before it.
#[derive(Clone, Debug, Serialize)]
pub struct SideBySide {
    pub execution_id: String,
    pub actor: String,
    pub tool: String,
    pub state: String,
    pub dispatches: u32,
    pub fingerprint: String,
    pub operation_key: Option<String>,
    pub run_id: Option<String>,
    pub accepted_at: String,
    /// Why this one is not the one before it (`None` for the first).
    pub separate_because: Option<String>,
}

pub fn side_by_side(executions: &[ExecutionSummary]) -> Vec<SideBySide> {
    let mut sorted: Vec<&ExecutionSummary> = executions.iter().collect();
    sorted.sort_by_key(|e| e.id);
    let mut out: Vec<SideBySide> = Vec::with_capacity(sorted.len());
    for (i, e) in sorted.iter().enumerate() {
        out.push(SideBySide {
            execution_id: e.id.to_string(),
            actor: e.actor.clone(),
            tool: e.tool.clone(),
            state: e.lifecycle.state.name().to_string(),
            dispatches: e.lifecycle.dispatches,
            fingerprint: e.fingerprint.to_string(),
            operation_key: e.operation_key.clone(),
            run_id: e.run_id.clone(),
            accepted_at: e.accepted_at.to_string(),
            separate_because: i.checked_sub(1).map(|p| {
                if sorted[p].actor != e.actor {
                    format!("another actor ({} vs {})", sorted[p].actor, e.actor)
                } else {
                    why_separate(sorted[p], e)
                }
            }),
        });
    }
    out
}
