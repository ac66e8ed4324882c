//! Approval requests in the agent's own client (URL-mode elicitation). A call that waits for
//! an operator's approval asks a client that declared `elicitation.url` to open the request's
//! page on the console:
//!
//! - protocol 2025-11-25 (sessions): an `elicitation/create` request with `mode: "url"` on the
//!   call's stream; when the client answers (whatever it answers), the call is answered with
//!   the execution as recorded then;
//! - protocol 2026-07-28 (no server-to-client requests): an `input_required` result carrying
//!   that elicitation; the client's retry (with its `inputResponses`) is the identical call,
//!   matched to the same execution, and answered with its recorded state.
//!
//! The URL carries only the execution id and grants nothing: the person who opens it logs in
//! as an operator, and the approval is given on the console's page only. The client's answer
//! to the elicitation is never a decision (an agent can answer it itself): `accept` approves
//! nothing. Clients without the capability get the pending result as before.

use std::collections::BTreeMap;
use std::time::Duration;

use postern_core::lifecycle::State;
use rmcp::model::{
    CallToolResponse, ElicitRequest, ElicitRequestParams, InputRequest, InputRequiredResult,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use super::result::tool_result;
use postern_pipeline::CallReport;
use postern_pipeline::Gateway;

/// The first MCP revision without sessions (ISO dates compare as strings).
pub(crate) const FIRST_SESSIONLESS_VERSION: &str = "2026-07-28";

/// The key of the elicitation in an `input_required` result's `inputRequests`.
pub const INPUT_KEY: &str = "postern_approval";

/// The longest a call waits for the client's answer to the elicitation.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// Whether this request's client declared URL-mode elicitation.
fn declared(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
}

pub(super) fn sessionless(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.to_string().as_str() >= FIRST_SESSIONLESS_VERSION)
}

/// The elicitation that sends a person to execution's approval page.
fn params(gateway: &Gateway, report: &CallReport, sessionless: bool) -> ElicitRequestParams {
    let id = report.execution_id;
    ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: format!(
            "Postern: the call of {} waits for an operator's approval. An operator approves or denies it on the console page (log-in required); answering here decides nothing.",
            report.tool
        ),
        url: gateway.notices().approval_url(id),
        // 2026-07-28 dropped the field; before it, the execution id names the request.
        elicitation_id: if sessionless {
            String::new()
        } else {
            id.to_string()
        },
    }
}

/// The answer to a call whose report is `report`, when it waits for approval and the client
/// can open a URL; `None`: answer as usual.
pub(super) async fn ask_in_client(
    gateway: &Gateway,
    ctx: &RequestContext<RoleServer>,
    retried_with_input: bool,
    report: &CallReport,
    actor: &str,
) -> Option<CallToolResponse> {
    if report.state != State::AwaitingApproval || !declared(ctx) {
        return None;
    }
    if sessionless(ctx) {
        // The retry after the client's answer is answered with the record, never elicited
        // again (its answer approved nothing).
        if retried_with_input {
            return None;
        }
        let request = InputRequest::Elicitation(ElicitRequest::new(params(gateway, report, true)));
        let requests = BTreeMap::from([(INPUT_KEY.to_string(), request)]);
        let state = format!("approval:{}", report.execution_id);
        return Some(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(state),
        )));
    }
    let wait = gateway
        .registry()
        .get(&report.tool)
        .and_then(|e| gateway.policy().approval_ttl(&e.contract))
        .unwrap_or(gateway.config().gateway.approval_ttl)
        .min(MAX_WAIT);
    let asked = ctx
        .peer
        .create_elicitation_with_timeout(params(gateway, report, false), Some(wait))
        .await;
    if let Err(e) = &asked {
        tracing::info!(execution_id = %report.execution_id, error = %e, "the client did not answer the approval elicitation");
    }
    // Whatever the client answered, the record says what was decided (on the console).
    let (_, now) = gateway
        .records()
        .recorded(report.execution_id, actor)
        .await
        .ok()?;
    Some(tool_result(&now).into())
}
