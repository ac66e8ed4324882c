//! What an upstream's answer to a `tools/call` says of the effect: the verdict the ledger
//! records.
//!
//! An error is read by who caused it. After one of the upstream's questions during the call
//! got no answer (Postern refused it — a capability the client did not declare, a question it
//! could not route — or the client did), the error follows from that: `rejected`, and calling
//! again (from a client that can answer) is a new attempt. A read that answers with an error changed nothing: `rejected` too. Any
//! other error may follow a partial effect: the tool's `on_tool_error` decides (default
//! unknown).

use postern_core::contract::ToolErrorVerdict;
use postern_core::duration::format_duration;
use rmcp::model::{ContentBlock, ErrorCode, ErrorData, ServerResult};
use rmcp::ServiceError;
use serde_json::json;

use super::tool::McpTool;
use crate::channel::{Action, Answer, AnswerVerdict, Outcome};
use crate::secret::redact_answer;

impl McpTool {
    /// The outcome of a call the upstream was handed; `refused`: what Postern refused it
    /// meanwhile.
    pub(super) fn outcome(
        &self,
        answer: Result<ServerResult, ServiceError>,
        refused: &[String],
        action: &Action<'_>,
    ) -> Outcome {
        let name = self.upstream.name();
        match answer {
            Ok(ServerResult::CallToolResult(mut result)) => {
                let verdict = match (result.is_error == Some(true), refused.first()) {
                    (false, _) => AnswerVerdict::Applied,
                    (true, Some(refusal)) => {
                        result.content.insert(0, ContentBlock::text(refusal_note(refusal)));
                        AnswerVerdict::Rejected { retryable: true }
                    }
                    (true, None) if self.reads => AnswerVerdict::Rejected { retryable: true },
                    (true, None) => match self.on_tool_error {
                        ToolErrorVerdict::Unknown => AnswerVerdict::Unknown,
                        ToolErrorVerdict::Rejected => AnswerVerdict::Rejected { retryable: false },
                    },
                };
                Outcome::Answered(self.answer(&result, verdict, action))
            }
            Ok(other) => Outcome::Unknown {
                reason: format!(
                    "upstream {name} answered tools/call with a {} the gateway does not drive further",
                    super::tool::result_kind(&other)
                ),
            },
            // The server refused the request as such: nothing was applied.
            Err(ServiceError::McpError(e))
                if e.code == ErrorCode::INVALID_PARAMS || e.code == ErrorCode::METHOD_NOT_FOUND =>
            {
                self.rejected(&e, None, action)
            }
            Err(ServiceError::McpError(e)) if !refused.is_empty() => {
                self.rejected(&e, refused.first().map(|r| refusal_note(r)), action)
            }
            Err(ServiceError::McpError(e)) if self.reads => self.rejected(&e, None, action),
            Err(e) => Outcome::Unknown {
                reason: self.unknown_reason(e),
            },
        }
    }

    /// A JSON-RPC error answer that applied nothing, stored as `{"error": …}`.
    fn rejected(&self, e: &ErrorData, note: Option<String>, action: &Action<'_>) -> Outcome {
        let mut body = json!({"error": {"code": e.code.0, "message": e.message}});
        if let Some(note) = note {
            body["note"] = json!(note);
        }
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let body = redact_answer(
            &body,
            self.max_response_bytes,
            &action.redaction_needles(),
            true,
        );
        Outcome::Answered(Answer {
            status: None,
            verdict: AnswerVerdict::Rejected { retryable: true },
            size: body.len() as u64,
            body,
            truncated: false,
            whole: None,
        })
    }

    fn unknown_reason(&self, e: ServiceError) -> String {
        let name = self.upstream.name();
        match e {
            ServiceError::TransportClosed => {
                match self.upstream.broken.lock().ok().and_then(|b| b.clone()) {
                    Some(why) => format!("{why}: the call's answer may have been that message"),
                    None => format!("upstream {name}: the link closed before it answered (the server may have died mid-call)"),
                }
            }
            ServiceError::Timeout { timeout }
                if timeout >= self.max_duration && self.max_duration > self.timeout =>
            {
                format!(
                    "upstream {name}: the call ran past its max_duration of {}; it was cancelled upstream",
                    format_duration(timeout)
                )
            }
            ServiceError::Timeout { timeout } => format!(
                "upstream {name}: no answer and no progress report within {} (the upstream's timeout); it was cancelled upstream",
                format_duration(timeout)
            ),
            ServiceError::McpError(e) => format!(
                "upstream {name}: JSON-RPC error {}: the call may have had an effect",
                e.code.0
            ),
            other => format!("upstream {name}: {other}"),
        }
    }
}

/// What the agent is told first when the upstream failed after a question of its got no
/// answer.
fn refusal_note(refusal: &str) -> String {
    format!(
        "Postern passed no answer to the upstream's {refusal} during this call, and the upstream answered with the error below. It is recorded rejected, not applied: calling again is a new attempt, which succeeds only from a client that can answer that question."
    )
}
