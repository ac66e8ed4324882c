//! How the gateway's refusals read as JSON-RPC errors: the code a client can act on, and data
//! that says whether anything was sent or recorded.

use rmcp::model::ErrorCode;
use rmcp::ErrorData;
use serde_json::json;

use postern_pipeline::GatewayError;

pub(super) fn to_error(e: GatewayError) -> ErrorData {
    let message = e.to_string();
    match e {
        GatewayError::UnknownTool(tool) => {
            ErrorData::invalid_params(message, Some(json!({"tool": tool})))
        }
        GatewayError::Forbidden { tool, .. } => {
            ErrorData::invalid_params(message, Some(json!({"tool": tool})))
        }
        GatewayError::InvalidArguments { errors, .. } => {
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
