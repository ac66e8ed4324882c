//! The MCP result of a call, as the model and the client each read it. `content` is the
//! target's answer as the model should see it — an upstream tool's own content blocks unchanged
//! (text, image, audio, resource links, embedded resources), a target's body as text (JSON as
//! JSON text; a bounded excerpt with the size when large) — then one short text block with the
//! execution id, state and, where there is one, the next step. The execution record is
//! machine-readable always in `_meta["io.postern/execution"]`, and in
//! `structuredContent.execution` (with the answer in `structuredContent.response`) unless the
//! upstream lists the tool with an `outputSchema`: then its structured content is passed on
//! unchanged, so a client that validates against that schema sees what the upstream sent.

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
    let mut result = if report.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    let structured = report.structured();
    let mut meta = serde_json::Map::new();
    meta.insert(EXECUTION_META.into(), structured["execution"].clone());
    result.meta = Some(MetaObject(meta));
    // An upstream's own structured content (what its outputSchema describes) is passed on
    // unchanged; the execution record is then in `_meta` only.
    let upstream_structured = report
        .response
        .as_ref()
        .filter(|_| report.upstream_result && report.upstream_structured)
        .and_then(|r| r.get("structuredContent"))
        .filter(|v| !v.is_null())
        .cloned();
    result.structured_content = Some(upstream_structured.unwrap_or(structured));
    result
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
    }
    vec![ContentBlock::text(excerpt(response))]
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
