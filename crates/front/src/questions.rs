//! An upstream's questions during a call — `sampling/createMessage`, `elicitation/create` (form
//! and URL mode), `roots/list` — put to the calling client when it declared the capability,
//! and refused to the upstream with a clear error when it did not (or when its protocol,
//! 2026-07-28, has no server-to-client requests).

// Sampling and roots are deprecated by SEP-2577, but the servers in the field use them.
#![allow(deprecated)]

use std::sync::Arc;

use postern_channels::{AskRefused, ClientAsker};
use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, ElicitRequest, ErrorCode, ListRootsRequest,
    RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, RequestContext};
use rmcp::{RoleServer, ServiceError};
use serde_json::Value;

use super::elicit::sessionless;

/// Numbers sessionless requests, each a client of its own.
pub(super) fn next_request() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn refused(code: ErrorCode, message: String) -> AskRefused {
    AskRefused {
        code: code.0,
        message,
        by_gateway: true,
    }
}

/// Whether the client declared what `method` (with `params`) needs.
fn declared(caps: &ClientCapabilities, method: &str, params: &Value) -> bool {
    match method {
        "sampling/createMessage" => caps.sampling.is_some(),
        "roots/list" => caps.roots.is_some(),
        "elicitation/create" => caps.elicitation.as_ref().is_some_and(|e| {
            match params.get("mode").and_then(Value::as_str) {
                Some("url") => e.url.is_some(),
                // An empty `elicitation: {}` (before modes existed) means form.
                _ => e.form.is_some() || e.url.is_none(),
            }
        }),
        _ => false,
    }
}

/// The request to put to the client, tied to the call it belongs to (`origin`): over
/// Streamable HTTP it goes on that call's stream, as MCP wants a request about a call to.
fn request(method: &str, params: Value, origin: RequestId) -> Result<ServerRequest, AskRefused> {
    let bad = |e: serde_json::Error| refused(ErrorCode::INVALID_PARAMS, format!("{method}: {e}"));
    let origin = OriginatingRequestId(origin);
    Ok(match method {
        "sampling/createMessage" => {
            let mut r = CreateMessageRequest::new(serde_json::from_value(params).map_err(bad)?);
            r.extensions.insert(origin);
            ServerRequest::CreateMessageRequest(r)
        }
        "elicitation/create" => {
            let mut r = ElicitRequest::new(serde_json::from_value(params).map_err(bad)?);
            r.extensions.insert(origin);
            ServerRequest::ElicitRequest(r)
        }
        "roots/list" => {
            let mut r = ListRootsRequest::default();
            r.extensions.insert(origin);
            ServerRequest::ListRootsRequest(r)
        }
        other => {
            return Err(refused(
                ErrorCode::METHOD_NOT_FOUND,
                format!("Postern does not pass {other} to clients"),
            ))
        }
    })
}

/// The calling client as the upstream's link may question it; `client` names its session.
pub(super) fn client_asker(ctx: &RequestContext<RoleServer>, client: String) -> ClientAsker {
    let peer = ctx.peer.clone();
    let origin = ctx.id.clone();
    let caps = ctx.client_capabilities().unwrap_or_default();
    let sessionless = sessionless(ctx);
    ClientAsker {
        client,
        ask: Arc::new(move |method: String, params: Value| {
            let peer = peer.clone();
            let origin = origin.clone();
            let declared = declared(&caps, &method, &params);
            Box::pin(async move {
                if sessionless {
                    return Err(refused(
                        ErrorCode::INVALID_REQUEST,
                        format!("Postern: the calling client speaks MCP 2026-07-28, which has no server-to-client requests; {method} was not passed to it"),
                    ));
                }
                if !declared {
                    return Err(refused(
                        ErrorCode::INVALID_REQUEST,
                        format!("Postern: the calling client did not declare the capability {method} needs; it was not asked"),
                    ));
                }
                let request = request(&method, params, origin)?;
                // Sent from a task of its own: the link's handler runs in the upstream
                // request's scope, which rmcp would take for the call this belongs to.
                let sent = tokio::spawn(async move { peer.send_request(request).await })
                    .await
                    .unwrap_or(Err(ServiceError::TransportClosed));
                match sent {
                    Ok(answer) => serde_json::to_value(answer).map_err(|e| {
                        refused(
                            ErrorCode::INTERNAL_ERROR,
                            format!("the client's answer: {e}"),
                        )
                    }),
                    Err(ServiceError::McpError(e)) => Err(AskRefused {
                        code: e.code.0,
                        message: e.message.to_string(),
                        by_gateway: false,
                    }),
                    Err(e) => Err(refused(
                        ErrorCode::INTERNAL_ERROR,
                        format!("the calling client did not answer {method}: {e}"),
                    )),
                }
            })
        }),
    }
}
