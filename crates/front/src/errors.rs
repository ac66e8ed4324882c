//! How the gateway's refusals read as JSON-RPC errors: the code a client can act on, and data
//! that says whether anything was sent or recorded. Arguments a tool's input schema refuses are
//! the exception: a tool execution error ([`refused_call`]).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ErrorCode, MetaObject};
use rmcp::ErrorData;
use serde_json::json;
use serde_json::Value;

use postern_pipeline::GatewayError;

/// The `_meta` key of a refused call's reason on its error result.
const REFUSED_META: &str = "io.postern/refused";

/// A `tools/call` the gateway refused. Invalid arguments are a tool execution error, a result
/// with `isError: true` saying what is wrong (MCP 2025-11-25: input validation errors are
/// reported so the model can correct its call); nothing was sent or recorded as an execution
/// (the calls log keeps the refusal). Every other refusal — an unknown tool above all — stays a
/// JSON-RPC error.
pub(super) fn refused_call(e: GatewayError) -> Result<CallToolResponse, ErrorData> {
    let GatewayError::InvalidArguments { tool, errors } = &e else {
        return Err(to_error(e));
    };
    let text = format!(
        "{e}. Nothing was sent; correct the arguments to match the tool's input schema and call again."
    );
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    let mut meta = serde_json::Map::new();
    meta.insert(
        REFUSED_META.into(),
        json!({"reason": "invalid_arguments", "tool": tool, "errors": errors, "sent": false, "recorded": false}),
    );
    result.meta = Some(MetaObject(meta));
    Ok(result.into())
}

pub(super) fn to_error(e: GatewayError) -> ErrorData {
    let message = e.to_string();
    match e {
        GatewayError::UnknownTool(tool) => {
            ErrorData::invalid_params(message, Some(json!({"tool": tool})))
        }
        GatewayError::Forbidden { tool, .. } => {
            ErrorData::invalid_params(message, Some(json!({"tool": tool})))
        }
        GatewayError::InvalidArguments { errors, .. } | GatewayError::InvalidKey { errors, .. } => {
            ErrorData::invalid_params(message, Some(json!({"errors": errors})))
        }
        GatewayError::Conflict { original, .. } => ErrorData::new(
            ErrorCode(-32010),
            message,
            Some(json!({"original_execution_id": original.to_string()})),
        ),
        GatewayError::UnknownExecution(_) | GatewayError::NotCancellable { .. } => {
            ErrorData::invalid_params(message, None)
        }
        GatewayError::Cancelled => ErrorData::new(ErrorCode(-32800), message, None),
        GatewayError::NoRun { .. } => ErrorData::new(
            ErrorCode(-32011),
            message,
            Some(json!({"sent": false, "recorded": false})),
        ),
        GatewayError::RunRevoked { run, .. } => ErrorData::new(
            ErrorCode(-32011),
            message,
            Some(json!({"sent": false, "recorded": false, "run": run})),
        ),
        GatewayError::Withheld { tool, .. } => ErrorData::new(
            ErrorCode(-32012),
            message,
            Some(json!({"sent": false, "recorded": false, "tool": tool})),
        ),
        GatewayError::NotRecorded(e) => ErrorData::new(
            ErrorCode(-32005),
            message,
            Some(json!({"sent": false, "store": e.fault().map(|f| f.to_string())})),
        ),
        GatewayError::Ledger(_)
        | GatewayError::Internal(_)
        | GatewayError::Unenforced(_)
        | GatewayError::Decision(_) => ErrorData::internal_error(message, None),
    }
}

pub(crate) fn jsonrpc_error(
    status: StatusCode,
    id: Value,
    code: i32,
    message: String,
    data: Value,
) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
