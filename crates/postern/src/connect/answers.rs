//! The gateway's answer as the bridge reads it (its execution record, whether the execution is
//! still in progress), and what the bridge adds of its own: the annotation of a call it sent
//! more than once, and the answer when the recovery time ran out with no word from the gateway.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// The gateway's execution record in a result: always in `_meta`, and in `structuredContent`
/// unless the tool's upstream gives structured content of its own.
fn execution(result: &CallToolResult) -> Option<&serde_json::Map<String, Value>> {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.postern/execution"))
        .or_else(|| result.structured_content.as_ref()?.get("execution"))?
        .as_object()
}

/// The gateway's answer says the execution has not reached an end yet.
pub(super) fn is_in_progress(result: &CallToolResult) -> bool {
    execution(result)
        .and_then(|e| e.get("state"))
        .and_then(Value::as_str)
        .is_some_and(|s| matches!(s, "accepted" | "authorized" | "dispatched"))
}

/// What the bridge observed of one call's attempts, in order.
#[derive(Default)]
pub(super) struct Observed {
    /// One line per attempt: what came back, or why nothing did.
    attempts: Vec<String>,
    /// Execution ids the gateway named in its answers, in order, without repeats.
    executions: Vec<String>,
}

impl Observed {
    pub(super) fn lost(&mut self, reason: &str, sent: bool) {
        let left = if sent {
            "the request had left the bridge"
        } else {
            "the request provably did not reach the gateway"
        };
        let n = self.attempts.len() + 1;
        self.attempts
            .push(format!("attempt {n}: no answer ({reason}; {left})"));
    }

    pub(super) fn answered(&mut self, result: &CallToolResult, what: &str) {
        let field = |name: &str| {
            execution(result)
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let n = self.attempts.len() + 1;
        let line = match (field("execution_id"), field("attempt")) {
            (Some(id), attempt) => {
                if !self.executions.contains(&id) {
                    self.executions.push(id.clone());
                }
                let how = attempt.map_or(String::new(), |a| format!(", its `attempt` field: {a}"));
                format!("attempt {n}: {what}, naming execution {id}{how}")
            }
            (None, _) => format!("attempt {n}: {what}, naming no execution"),
        };
        self.attempts.push(line);
    }
}

/// When the answer took more than one attempt, says what the bridge saw and nothing more: how
/// many times it sent the call, what happened to each attempt, which execution ids the gateway
/// named. What the gateway or the target did with an attempt whose answer was lost is not
/// something the bridge saw, so it is not said.
pub(super) fn annotate(mut result: CallToolResult, seen: &Observed) -> CallToolResult {
    if seen.attempts.len() <= 1 {
        return result;
    }
    let note = format!(
        "postern connect sent this call {} times (each re-issue with the same arguments and \
         re-issue key): {}.",
        seen.attempts.len(),
        seen.attempts.join("; ")
    );
    result.content.push(ContentBlock::text(note.clone()));
    if let Some(Value::Object(s)) = result.structured_content.as_mut() {
        s.insert(
            "bridge".into(),
            json!({
                "attempts": seen.attempts.len(),
                "reissued": true,
                "observed": seen.attempts,
                "executions_named": seen.executions,
                "note": note,
            }),
        );
    }
    result
}

/// The answer after the recovery time ran out with no word from the gateway.
pub(super) fn not_known(
    tool: &str,
    url: &str,
    attempts: u32,
    waited: Duration,
    last_problem: &str,
    maybe_sent: bool,
) -> CallToolResult {
    let secs = waited.as_secs();
    if !maybe_sent {
        let text = format!(
            "{tool}: not performed: the gateway at {url} could not be reached ({attempts} \
             attempts in {secs}s; last problem: {last_problem}). Nothing was sent; it is safe to \
             call again."
        );
        let mut r = CallToolResult::error(vec![ContentBlock::text(text.clone())]);
        r.structured_content = Some(json!({
            "execution": {"execution_id": null, "tool": tool, "state": "not_sent", "next_step": text},
            "bridge": {"attempts": attempts, "waited_ms": waited.as_millis() as u64, "last_problem": last_problem},
        }));
        return r;
    }
    let text = format!(
        "{tool}: outcome not known to postern connect: the gateway at {url} gave no answer in \
         {secs}s ({attempts} attempts; last problem: {last_problem}). The call may or may not have \
         been performed. Do not start it as a new action: repeat this identical call (same tool, \
         same arguments, same idempotency key) and the gateway answers from its record if it \
         matches the earlier one (by the idempotency key, or by the arguments within the tool's \
         match window)."
    );
    let mut r = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    r.structured_content = Some(json!({
        "execution": {"execution_id": null, "tool": tool, "state": "unknown_to_bridge", "next_step": text},
        "bridge": {"attempts": attempts, "waited_ms": waited.as_millis() as u64, "last_problem": last_problem},
    }));
    r
}
