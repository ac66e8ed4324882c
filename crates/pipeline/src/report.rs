//! What a call gets back, in the gateway's own terms (the MCP front turns it into a
//! `CallToolResult`): the execution's identity and state, how this call relates to it, and the
//! target's answer.

use postern_core::lifecycle::State;
use postern_core::{ExecutionId, Fingerprint, Timestamp};
use serde_json::{json, Value};

/// How this call relates to the execution it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This call created the execution.
    New,
    /// This call joined an execution that was still in progress.
    Attached,
    /// This call was answered from an earlier execution's record.
    Recovered,
}

impl Attempt {
    pub fn as_str(self) -> &'static str {
        match self {
            Attempt::New => "new",
            Attempt::Attached => "attached",
            Attempt::Recovered => "recovered",
        }
    }
}

#[derive(Clone, Debug)]
pub struct CallReport {
    pub execution_id: ExecutionId,
    pub tool: String,
    pub attempt: Attempt,
    pub state: State,
    pub fingerprint: Fingerprint,
    pub accepted_at: Timestamp,
    pub first_dispatched_at: Option<Timestamp>,
    /// When the tool's match window of this execution ends: an identical call before then is
    /// answered from its record (`None`: the tool is gone from the config).
    pub window_ends: Option<Timestamp>,
    pub target_status: Option<u16>,
    /// The target's answer (JSON if it was JSON, else text), or the execution record for
    /// `execution_status`.
    pub response: Option<Value>,
    /// `response` is an upstream MCP server's tool result (its `content` blocks are what the
    /// model reads), not a target's body.
    pub upstream_result: bool,
    /// The upstream lists the tool with an `outputSchema`: its `structuredContent` is passed
    /// on unchanged (the execution record goes in `_meta` only).
    pub upstream_structured: bool,
    pub next_step: Option<String>,
    /// For an execution a human decides on: the pending approval request (when it expires), or
    /// the recorded decision (who, when, why).
    pub decision: Option<Value>,
    /// A budget the call was counted against with little left after it (issue 53).
    pub budget_left: Option<postern_ledger::BudgetUsage>,
    /// True when the call itself failed in a way the agent should see as an error result
    /// (nothing was sent, or the target rejected it).
    pub is_error: bool,
}

/// The state as the agent reading this answer should see it: this answer *is* the delivery,
/// so a completed execution reads `completed` (the ledger records whether it arrived).
fn answer_state(state: State) -> &'static str {
    match state {
        State::Completed(_) | State::Delivered(_) => "completed",
        other => other.display_name(),
    }
}

impl CallReport {
    /// `structuredContent` of the MCP result.
    pub fn structured(&self) -> Value {
        json!({
            "execution": {
                "execution_id": self.execution_id.to_string(),
                "tool": self.tool,
                "state": answer_state(self.state),
                "outcome": self.state.outcome(),
                "attempt": self.attempt.as_str(),
                "fingerprint": self.fingerprint.short(),
                "accepted_at": self.accepted_at.to_string(),
                "first_dispatched_at": self.first_dispatched_at.map(|t| t.to_string()),
                "target_status": self.target_status,
                "next_step": self.next_step,
                "decision": self.decision,
                "budget_left": self.budget_left.as_ref().map(|b| b.to_json()),
            },
            "response": self.response,
        })
    }

    /// The one-line summary for the text content.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} {}: {}",
            self.tool,
            self.execution_id,
            answer_state(self.state)
        );
        if let Some(status) = self.target_status {
            s.push_str(&format!(" (target answered {status})"));
        }
        match self.attempt {
            Attempt::New => {}
            Attempt::Attached => s.push_str(&format!(
                "; joined execution {} already in progress",
                self.execution_id
            )),
            Attempt::Recovered => s.push_str(&format!(
                "; matched execution {}, first sent at {}: {}",
                self.execution_id,
                self.first_dispatched_at
                    .map_or("(never sent)".to_string(), |t| t.to_string()),
                new_action(self.window_ends)
            )),
        }
        if let Some(n) = &self.next_step {
            s.push_str("; ");
            s.push_str(n);
        }
        if let Some(b) = &self.budget_left {
            s.push_str("; ");
            s.push_str(&budget_left_note(b));
        }
        s
    }
}

/// How an agent gets a new, separate action instead of this one's record. The operation key
/// is not a tool argument: a model cannot set it through an ordinary host, so the advice names
/// what it can do (wait out the window) and who can set the key.
pub fn new_action(window_ends: Option<Timestamp>) -> String {
    let wait = match window_ends {
        Some(at) => format!("an identical call is answered from this record until {at}; to perform it again as a new, separate action, call after then"),
        None => "to perform it again as a new, separate action, call after the tool's match window has passed".to_string(),
    };
    format!("{wait}, or have the host send a new idempotency key (params.idempotencyKey or _meta[\"io.postern/idempotency-key\"]: not a tool argument, so a model cannot set it itself)")
}

/// The next step when a recovery attempt could not reach the target: the outcome stays unknown.
pub fn unsettled_next_step(id: ExecutionId) -> String {
    format!("outcome still unknown: the target could not be reached to settle this; repeat the identical call later or check execution_status({id}); do not start a new action")
}

/// For a request that was dispatched but whose outcome the store could not take.
pub fn unrecorded_next_step(id: ExecutionId, why: &str) -> String {
    format!("the request was sent, but its outcome could not be recorded ({why}); do not repeat this as a new action. The gateway records it as soon as the store takes writes again: repeat the identical call later or check execution_status({id})")
}

/// The next step when an upstream MCP tool answered with `isError: true` and its contract
/// leaves the outcome unknown (`on_tool_error = "unknown"`, the default): the upstream did
/// answer, with an error that may follow a partial effect.
pub fn upstream_error_step(
    state: State,
    id: ExecutionId,
    result: Option<&Value>,
) -> Option<String> {
    let result = result?;
    if !matches!(state, State::OutcomeUnknown) || result.get("isError") != Some(&Value::Bool(true))
    {
        return None;
    }
    let said = result
        .get("content")
        .and_then(Value::as_array)
        .and_then(|blocks| blocks.iter().find_map(|b| b.get("text")?.as_str()))
        .unwrap_or("(no text)");
    let said: String = said.chars().take(300).collect();
    Some(format!(
        "the upstream answered with an error: {said:?}. An error may follow a partial effect, so the outcome is unknown: do not retry as a new action; check with execution_status({id})"
    ))
}

/// What the agent should do next, in words, for anything not plainly finished.
pub fn next_step(state: State, id: ExecutionId) -> Option<String> {
    match state {
        State::OutcomeUnknown => Some(format!(
            "outcome unknown: the request reached the target but no answer came back. Do not retry as a new action; check with execution_status({id})"
        )),
        State::NeedsReview => Some(format!(
            "needs review: nothing more will be sent; a human must resolve {id} as applied or not applied"
        )),
        State::Dispatched | State::Accepted | State::Authorized => {
            Some(format!("in progress: check later with execution_status({id}); calling again with the same arguments attaches to it"))
        }
        State::AwaitingApproval => Some(format!("awaiting an operator's approval: nothing has been sent. Check later with execution_status({id}) or repeat the identical call; that never makes a second approval request")),
        State::Failed => Some("nothing reached the target; it is safe to call again".to_string()),
        State::Denied => Some(format!("denied: it will not be performed, and an identical call gets this denial; {}", new_action(None))),
        State::Resolved(postern_core::lifecycle::Resolution::NotApplied) => Some(format!("resolved by an operator as not applied: nothing was done; {}", new_action(None))),
        State::Resolved(postern_core::lifecycle::Resolution::Applied) => Some("resolved by an operator as applied: the action happened; do not repeat it".to_string()),
        _ => None,
    }
}

/// What an answer says of a budget with little left: its use after this call, what remains,
/// and that past it nothing is sent without a person (or at all).
pub(crate) fn budget_left_note(b: &postern_ledger::BudgetUsage) -> String {
    use postern_core::budget::amount_text;
    let mut left = Vec::new();
    if let Some(max) = b.max_calls {
        left.push(format!(
            "{} of {max} calls left",
            max.saturating_sub(b.calls)
        ));
    }
    if let Some(max) = b.max_sum {
        left.push(format!(
            "{} of {} left to sum",
            amount_text(max.saturating_sub(b.sum).max(0)),
            amount_text(max)
        ));
    }
    let scope = match b.scope.is_empty() {
        true => String::new(),
        false => format!(" for {}", b.scope),
    };
    format!(
        "little is left of budget {}{scope}: {} in the last {}s",
        b.budget,
        left.join(", "),
        b.window_ms / 1000
    )
}

/// What an answer says of the budget a call's event names (`detail.budget`, as the ledger
/// wrote it), or `None`.
pub(crate) fn budget_step(detail: &Value, waits: bool) -> Option<String> {
    let b = detail.get("budget")?;
    let text = |k: &str| {
        b.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    };
    let name = text("name")?;
    let mut used = Vec::new();
    if let Some(max) = b.get("max_calls").filter(|v| !v.is_null()) {
        used.push(format!(
            "{} of {max} calls",
            text("calls").unwrap_or_default()
        ));
    }
    if let Some(max) = text("max_sum").filter(|m| m != "null") {
        used.push(format!(
            "{} of {max} summed",
            text("sum").unwrap_or_default()
        ));
    }
    let window = b.get("window_seconds").and_then(Value::as_i64).unwrap_or(0);
    let frees = text("frees_at")
        .filter(|f| f != "null")
        .map_or(String::new(), |f| format!("; it frees up from {f}"));
    let scope = text("scope")
        .filter(|s| !s.is_empty())
        .map_or(String::new(), |s| format!(" for {s}"));
    let then = match waits {
        true => "Nothing was sent: it waits for an operator's approval (postern approvals approve), which sends it",
        false => "Nothing was sent: call again once it frees up, or ask an operator to raise the budget",
    };
    Some(format!(
        "budget {name}{scope} is used up ({} in the last {window}s{frees}). {then}",
        used.join(", ")
    ))
}
