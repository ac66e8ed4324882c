//! The MCP result of a call, as the model and the client each read it. `content` is the
//! target's answer as the model should see it — an upstream tool's own content blocks unchanged
//! (text, image, audio, resource links, embedded resources), a target's body as text (JSON as
//! JSON text; a bounded excerpt with the size when large) — then one short text block with the
//! execution id, state and, where there is one, the next step. The execution record is
//! machine-readable always in `_meta["io.postern/execution"]`, and in
//! `structuredContent.execution` (with the answer in `structuredContent.response`) unless the
//! upstream lists the tool with an `outputSchema`.
//!
//! Invariant: every result validates against the tool's `outputSchema`. Such a tool's
//! structured content is the upstream's own, passed on unchanged when its answer is here (an
//! applied answer, fresh or replayed); any other outcome — unknown, in progress, awaiting
//! approval, denied, refused, an answer too large to keep — is `isError: true` with the
//! guidance in `content` and no structured content (clients validate only successful results,
//! and no answer of Postern's own could match the upstream's schema).

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::Value;

use postern_pipeline::CallReport;

/// The `_meta` key of the execution record on every tool result.
pub(crate) const EXECUTION_META: &str = "io.postern/execution";

/// How much of a target's body `content` quotes; the whole stored answer stays in
/// `structuredContent.response`.
const EXCERPT_BYTES: usize = 64 * 1024;

pub(super) fn tool_result(report: &CallReport) -> CallToolResult {
    let mut content = answer_blocks(report);
    content.push(ContentBlock::text(report.summary()));
    let structured = report.structured();
    let mut meta = serde_json::Map::new();
    meta.insert(EXECUTION_META.into(), structured["execution"].clone());
    let (is_error, structured) = if report.upstream_structured {
        match upstream_structured(report) {
            Some(own) => (report.is_error, Some(own)),
            // Nothing the upstream's schema describes is here: an error result, which clients
            // do not validate, carrying the guidance.
            None => (true, None),
        }
    } else {
        (report.is_error, Some(structured))
    };
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.meta = Some(MetaObject(meta));
    result.structured_content = structured;
    result
}

/// The upstream's own structured content, when its answer is what this result reports: an
/// applied answer, or its own error result (`isError: true`, passed on as it said it).
fn upstream_structured(report: &CallReport) -> Option<Value> {
    let response = report
        .response
        .as_ref()
        .filter(|_| report.upstream_result)?;
    let said_error = response.get("isError") == Some(&Value::Bool(true));
    if report.state.outcome() != Some("applied") && !said_error {
        return None;
    }
    response
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .cloned()
}

/// The answer as the model reads it; nothing when there is none yet (in progress, unknown).
fn answer_blocks(report: &CallReport) -> Vec<ContentBlock> {
    let Some(response) = &report.response else {
        return Vec::new();
    };
    if report.upstream_result {
        if let Some(blocks) = response
            .get("content")
            .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c.clone()).ok())
        {
            return blocks;
        }
        if let Some(refusal) = upstream_refusal(response) {
            return vec![ContentBlock::text(refusal)];
        }
    }
    vec![ContentBlock::text(excerpt(response))]
}

/// An upstream's JSON-RPC refusal of the call (invalid params, method not found: recorded as
/// rejected, nothing applied) in words, so the model can correct its call.
fn upstream_refusal(response: &Value) -> Option<String> {
    let error = response.get("error")?;
    let message = error.get("message")?.as_str()?;
    let code = error.get("code").and_then(Value::as_i64)?;
    Some(format!(
        "the upstream refused the call (JSON-RPC error {code}): {message}"
    ))
}

/// A body as text: a string as it is, JSON as JSON text, cut at [`EXCERPT_BYTES`] (on a
/// character boundary) with a note of the whole size.
fn excerpt(body: &Value) -> String {
    let text = match body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() <= EXCERPT_BYTES {
        return text;
    }
    let mut end = EXCERPT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [{} bytes in all; the first {end} shown, the whole answer is in structuredContent.response]",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use postern_core::lifecycle::{State, Verdict};
    use postern_core::{ExecutionId, Fingerprint, Timestamp};
    use postern_pipeline::Attempt;
    use serde_json::json;

    /// A report of a tool its upstream lists with an `outputSchema`.
    fn report(state: State, response: Option<Value>, is_error: bool) -> CallReport {
        CallReport {
            execution_id: ExecutionId::from_bytes([7; 16]),
            tool: "memory_read_graph".into(),
            attempt: Attempt::New,
            state,
            fingerprint: Fingerprint::from_bytes([1; 32]),
            accepted_at: Timestamp(0),
            first_dispatched_at: None,
            window_ends: None,
            target_status: None,
            response,
            upstream_result: true,
            upstream_structured: true,
            next_step: Some("the guidance".into()),
            decision: None,
            budget_left: None,
            is_error,
        }
    }

    fn as_json(result: &CallToolResult) -> Value {
        serde_json::to_value(result).unwrap()
    }

    /// The upstream's structured content passes unchanged when its answer is here; any other
    /// outcome is an error result with the guidance and the record, and no structured content
    /// that would break the schema.
    #[test]
    fn a_tool_with_an_output_schema_gets_its_own_structured_content_or_an_error_result() {
        let answer = json!({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"entities": [], "relations": []}});
        for state in [
            State::Completed(Verdict::Applied),
            State::Delivered(Verdict::Applied),
        ] {
            let r = as_json(&tool_result(&report(state, Some(answer.clone()), false)));
            assert_eq!(r["structuredContent"], answer["structuredContent"]);
            assert_eq!(r["isError"], false);
        }
        let truncated = json!({"truncated": true, "size": 5000, "note": "over max_response_bytes"});
        let cases = [
            (State::OutcomeUnknown, None),
            (State::Dispatched, None),
            (State::AwaitingApproval, None),
            (State::Denied, None),
            (State::Failed, None),
            (State::Completed(Verdict::Applied), Some(truncated)),
            (
                State::Completed(Verdict::Rejected),
                Some(json!({"error": {"code": -32602, "message": "bad"}})),
            ),
        ];
        for (state, response) in cases {
            let r = as_json(&tool_result(&report(state, response, false)));
            assert_eq!(r["isError"], true, "{state:?}: {r}");
            assert!(r.get("structuredContent").is_none(), "{state:?}: {r}");
            assert_eq!(
                r["_meta"][EXECUTION_META]["execution_id"],
                ExecutionId::from_bytes([7; 16]).to_string()
            );
            assert!(
                r["content"].to_string().contains("the guidance"),
                "{state:?}: {r}"
            );
        }
        // An upstream's JSON-RPC refusal reads as what it said.
        let refused = json!({"error": {"code": -32602, "message": "entities: expected array"}});
        let r = as_json(&tool_result(&report(
            State::Completed(Verdict::Rejected),
            Some(refused),
            true,
        )));
        assert_eq!(
            r["content"][0]["text"],
            "the upstream refused the call (JSON-RPC error -32602): entities: expected array"
        );
        // The upstream's own error result keeps what it said.
        let said = json!({"content": [{"type": "text", "text": "no"}], "isError": true, "structuredContent": {"why": "no"}});
        let r = as_json(&tool_result(&report(
            State::OutcomeUnknown,
            Some(said),
            true,
        )));
        assert_eq!(
            (r["isError"].clone(), r["structuredContent"].clone()),
            (json!(true), json!({"why": "no"}))
        );
        // Without an outputSchema the record is the structured content, whatever the outcome.
        let mut plain = report(State::OutcomeUnknown, None, false);
        plain.upstream_structured = false;
        let r = as_json(&tool_result(&plain));
        assert_eq!(r["isError"], false);
        assert_eq!(
            r["structuredContent"]["execution"]["state"],
            "outcome_unknown"
        );
    }

    #[test]
    fn a_long_body_is_cut_on_a_character_boundary_with_its_size() {
        let long = Value::String("é".repeat(EXCERPT_BYTES));
        let cut = excerpt(&long);
        assert!(
            cut.contains(&format!("{} bytes in all", EXCERPT_BYTES * 2)),
            "{}",
            &cut[cut.len() - 120..]
        );
        assert!(cut.len() < EXCERPT_BYTES + 200);
        assert_eq!(
            excerpt(&serde_json::json!({"id": "inv_1"})),
            r#"{"id":"inv_1"}"#
        );
    }
}
