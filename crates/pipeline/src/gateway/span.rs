//! A call's span (`tools/call`): opened around its admission and dispatch, closed with what
//! became of it.

use super::ToolCall;
use crate::error::GatewayError;
use crate::report::CallReport;

/// The call's span (`tools/call`), in the client's trace when it sent one.
pub(super) fn call_span(call: &ToolCall, class: &'static str) -> tracing::Span {
    // Debug level: the text and JSON logs at their default level never build it (measured:
    // the log layer formatting every span's fields cost ~2% of c=64 throughput); the span
    // exporter's filter takes it, and `POSTERN_LOG=debug` shows it around log lines.
    let span = tracing::debug_span!(
        "tools/call",
        tool = %call.tool,
        class,
        actor = %call.actor,
        execution_id = tracing::field::Empty,
        fingerprint = tracing::field::Empty,
        attempt = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    crate::telemetry::join_client_trace(&span, call.trace_parent.as_deref());
    span
}

/// Records a call's end on its span (its refusal is logged with the calls log's row).
pub(super) fn close_call_span(span: &tracing::Span, answer: Result<&CallReport, &GatewayError>) {
    if span.is_disabled() {
        // No layer wants it (no span export): the fingerprint's text would be made for nothing.
        return;
    }
    match answer {
        Ok(r) => {
            span.record("execution_id", tracing::field::display(r.execution_id));
            let fingerprint = r.fingerprint.to_string();
            span.record("fingerprint", fingerprint.get(..24).unwrap_or(&fingerprint));
            span.record("attempt", r.attempt.as_str());
            span.record("outcome", r.state.name());
        }
        Err(e) => {
            span.record("outcome", e.kind());
            if let Some(id) = e.execution() {
                span.record("execution_id", tracing::field::display(id));
            }
        }
    }
}
